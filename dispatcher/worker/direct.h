/* Direct dials (SPEC C10, C9, D1; issue 10 item 5): the worker side of `POST /v2/calls`.
 *
 * direct_dial_submit() looks up the agent in the organisation (its from_number is the default
 * caller id; the org row gives org_limit, for the 429's message), then asks the gate for a
 * direct admission (gate_admit_req.direct, .wait and this worker's hand-off: a refused dial is
 * registered as a waiting direct dial — k + 1, the direct reserve of C5 — and the release of
 * any line of the org wakes it first, dispatcher/gate/README.md "Hand-off"). When admitted,
 * its call row is written by the same fenced write as a batch contact's (gate_flow.h in redis
 * mode, gate_pgmode.h in postgres mode: the epoch fence and the call-id fence; a direct dial
 * has no contact, so no lease), and the call goes to the dialer (dial_start(): the same lane,
 * retry table and ledger). The answer is then DIRECT_PLACED with the call id and its state
 * ("dialing": the row is written, the provider is being asked). When wait_ms pass without a
 * line the waiter is withdrawn (gate_handoff_unwait(): k goes back down), the org's counts are
 * read (gate_read()) for the 429's message, and the answer is DIRECT_BUSY.
 *
 * Data flows one way: route -> direct -> gate -> dial -> events -> call_end -> release. This
 * module learns that a line is free only from the gate's hand-off (redis mode) or the
 * dsp_gate_free NOTIFY (postgres mode, direct_org_freed(), plus a 500 ms re-try); it never
 * hears from the dialer or call_end.
 *
 * Postgres gate mode (C11): the admission is gate_pgmode_admit() with .wait (the waiter is a
 * gate_direct_waiters row, counted in k); it is re-tried on each dsp_gate_free NOTIFY of its
 * organisation and every 500 ms. A timed-out or cancelled dial's row is deleted
 * (gate_pgmode_unwait()); it would expire GATE_PGMODE_WAIT_TTL_MS after its last refusal. A mode change re-tries every waiter
 * at once (direct_mode_changed()): a registration made in one mode is unknown to the other.
 *
 * Async contract (STYLE rule 4): if direct_dial_submit() returns an error the callback is never
 * called; otherwise it is called exactly once, from the loop (never from inside the submit),
 * unless direct_dial_cancel() is called first: after direct_dial_cancel() returns, the callback
 * is never called. A dial cancelled while its admission is in flight and then admitted
 * is never dialled: its row is ended (canceled) and its slots released. direct_drain() and direct_close() answer every dial not answered yet
 * (DIRECT_UNAVAILABLE). The result and every pointer in it are borrowed for the callback only.
 */
#ifndef DSP_WORKER_DIRECT_H
#define DSP_WORKER_DIRECT_H

#include "dial.h"
#include "gate.h"
#include "gate_flow.h"
#include "gate_mode.h"
#include "gate_pg.h"
#include "handoff.h"
#include "pg_pool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define DIRECT_WAIT_MS	      5000u /* C10: how long a direct dial waits for a line */
#define DIRECT_RETRY_AFTER_S  5	    /* C10: the 429's Retry-After */
#define DIRECT_ERROR_CODE     1300  /* the 429 body's "error" (the source document) */
#define DIRECT_BUSY_BODY_MAX  160   /* room for direct_busy_body() */
#define DIRECT_PG_RETRY_MS    500u  /* postgres mode: a waiter re-tries this often */
#define DIRECT_ERROR_RETRY_MS 200u  /* a gate error or an unusable gate: re-try after */

struct direct;
struct direct_dial;

/* One direct dial. Strings are copied by direct_dial_submit(). */
struct direct_dial_req {
	const char *org;	 /* the caller's organisation (from its API key) */
	const char *agent;	 /* agent_id of the body: must belong to org */
	const char *to_number;	 /* E.164, canonical (+ and 7..15 digits; the route normalises) */
	const char *from_number; /* NULL: the agent's agents.from_number (may be none) */
	uint64_t wait_ms;	 /* 0: DIRECT_WAIT_MS */
};

enum direct_outcome {
	DIRECT_PLACED = 0,  /* 201: the call row is written and the dialer has the call */
	DIRECT_BUSY,	    /* 429: no line within wait_ms (direct_busy_body()) */
	DIRECT_NOT_FOUND,   /* 404: no such agent in the organisation */
	DIRECT_UNAVAILABLE, /* 503: the gate decided nothing within wait_ms (unusable, errors),
			     * PostgreSQL refused the lookup, or the worker is draining/closing */
};

struct direct_dial_result {
	enum direct_outcome outcome;
	const char *call;    /* PLACED: the call id (uuid; the provider's Idempotency-Key) */
	const char *state;   /* PLACED: the call's state, "dialing" */
	const char *from;    /* PLACED: the caller id used, NULL for none */
	int64_t running;     /* BUSY: the org's live calls, -1 when they could not be read */
	int64_t limit;	     /* BUSY: its org_limit, -1 when it could not be read */
	uint64_t waited_ms;  /* submit -> answer */
	uint32_t tries;	     /* admissions sent */
	const char *message; /* NOT_FOUND, UNAVAILABLE: why, in words */
};

typedef void (*direct_dial_cb)(struct direct *d, const struct direct_dial_result *r, void *data);

struct direct_options {
	uv_loop_t *loop;	    /* borrowed */
	struct pg_pool *pool;	    /* borrowed; not started yet (the lookup is prepared now) */
	struct gate *gate;	    /* borrowed: outlives d (withdrawals, the 429's counts) */
	struct gate_flow *flow;	    /* borrowed until direct_close() */
	struct gate_pg *gpg;	    /* borrowed until direct_close() */
	struct gate_mode_ctl *mode; /* borrowed until direct_close() */
	struct handoff *handoff;    /* borrowed until direct_close() */
	struct dial *dial;	    /* borrowed until direct_close() */
	uint64_t
		write_deadline_ms; /* postgres-mode admission bound (0: GATE_PG_WRITE_DEADLINE_MS) */
};

struct direct_stats {
	uint64_t submitted; /* direct_dial_submit() accepted */
	uint64_t placed;    /* answered PLACED */
	uint64_t timed_out; /* answered BUSY */
	uint64_t cancelled; /* direct_dial_cancel() before an answer */
	uint64_t released;  /* admitted after direct_dial_cancel(): ended, released, not dialled */
	uint64_t not_found; /* answered NOT_FOUND */
	uint64_t unavailable; /* answered UNAVAILABLE */
	uint64_t admissions;  /* gate admissions sent (first tries and re-tries) */
	uint64_t wakes;	      /* hand-off wakes and NOTIFY re-tries received */
	uint64_t waiting;     /* dials waiting for a line now (gauge) */
};

/* Creates the module and prepares its lookup on o->pool. *out is owned by the caller until
 * direct_close(). Returns 0, -EINVAL (a missing option) or -ENOMEM. */
int direct_new(const struct direct_options *o, struct direct **out);

/* Submits one direct dial (see the top of this file). *out (may be NULL) receives the dial's
 * handle for direct_dial_cancel(), valid until the callback is called or the cancel returns.
 * Returns 0 (cb will be called), -EINVAL (a NULL or malformed id or number: the route answers
 * 422/404 itself), -ESHUTDOWN (draining or closing) or -ENOMEM. */
int direct_dial_submit(struct direct *d, const struct direct_dial_req *req, direct_dial_cb cb,
		       void *data, struct direct_dial **out);

/* The client went away: the callback is never called. A dial still waiting is withdrawn from
 * the gate at once (k - 1); an admission in flight is left to finish, and if it is admitted
 * the call is placed anyway (its row is being written: a call being placed goes on). */
void direct_dial_cancel(struct direct_dial *dd);

/* Wakes for the worker to forward: a dsp_gate_free NOTIFY of org (postgres mode: its waiters
 * try again now), and a gate mode change (every waiter tries again now). */
void direct_org_freed(struct direct *d, const char *org);
void direct_mode_changed(struct direct *d);

/* The drain (SIGTERM): no new dials (-ESHUTDOWN); every dial not in flight is withdrawn and
 * answered DIRECT_UNAVAILABLE; an admission in flight is answered when it comes back
 * (placed when admitted: the dialer is still running). */
void direct_drain(struct direct *d);

/* Closes the module: as the drain, and an admission answered after this call is not dialled
 * (the dialer may be gone; its row, if written, is ended by the maximum-duration sweep).
 * closed_cb (may be NULL) is called once nothing is pending, then d is freed. Call it before
 * closing the flow, the dialer and the hand-off. */
void direct_close(struct direct *d, void (*closed_cb)(void *data), void *data);

void direct_get_stats(const struct direct *d, struct direct_stats *out);

/* The HTTP status the route answers for an outcome: 201, 429, 404 or 503. */
int direct_http_status(enum direct_outcome o);

/* A static name for logs and metrics labels ("placed", "busy", "not_found", "unavailable"). */
const char *direct_outcome_name(enum direct_outcome o);

/* Renders the 429 body of SPEC C10 into buf (NUL-terminated), with Retry-After:
 * DIRECT_RETRY_AFTER_S beside it: {"error":1300,"message":"Account concurrency limit reached (R
 * of L lines in use)."} when running >= 0 and limit > 0, else the degraded form {"error":1300,
 * "message":"Account concurrency limit reached; all lines are in use."}. Returns the body's
 * length, or -ENOSPC when size is too small (DIRECT_BUSY_BODY_MAX always suffices). */
int direct_busy_body(int64_t running, int64_t limit, char *buf, size_t size);

#endif
