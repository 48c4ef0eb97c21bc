/* The one way a call ends (SPEC §2 Terms, C1, C9, D2, D5, R7): by its terminal provider event,
 * by a definitive refusal of the dialer, or by the maximum-duration sweep.
 *
 * call_end_submit() queues a request; at the end of the loop turn (a zero timer: it runs before
 * the next poll, so every request submitted in one turn is in it) the queued requests are
 * written together: one pipelined batch of two statements and one sync, up to
 * CALL_END_BATCH_MAX calls per batch. The batch takes the gate's epoch lock shared (as every
 * call-row write does, gate_pg.h), so it never interleaves with a mode switch or the rebuild of
 * the way back; then ONE statement
 *   - ends the calls: UPDATE calls SET state 'ended', outcome, outcome_reason, ended_at WHERE
 *     id = ANY(...) AND state <> 'ended' — only the rows this statement moved are "ended now";
 *   - moves each ended call's contact (when it is still claimed, dialing or live) to its next
 *     state by the request's disposition (below), 'held' instead of 'pending' when its batch or
 *     campaign is paused, 'cancelled' when either is stopped;
 *   - in postgres gate mode NOTIFYs GATE_PG_CHANNEL_FREE once per organisation that had a call
 *     ended (the row ending IS the release there; waiters of that org try again);
 * and reports, per call, ended now / already ended / unknown, with the mode it saw.
 *
 * A fenced request (call_end_req.lease_owner set: the dialer's definitive refusals) ends its
 * call only while its contact's lease is the one the request names (owner, and token when
 * known); its contact is locked first, so a concurrent takeover (sweep.h) is ordered with it.
 * One whose lease moved is answered ALREADY.
 *
 * Exactly once: a call's slots are released only for the request whose UPDATE ended its row.
 * In redis mode gate_release() is sent for it (idempotent in Redis too) before its callback
 * runs; a release that fails is logged and left to the reconciler, which frees a slot whose
 * row has ended. A call id submitted twice in one turn goes in the next batch, where it is
 * answered already ended.
 *
 * Dispositions of the contact (D2, D5):
 *   BY_POLICY  completed -> done; failed -> failed; no-answer, busy, canceled -> the
 *              campaign's retry policy: attempts + 1, pending at now() + retry_delay_seconds
 *              while attempts < retry_max_attempts, else failed; refused -> pending now,
 *              nothing charged. (The maximum-duration sweep ends 'swept' calls with FAIL.)
 *   RETRY_AT   pending at now() + delay_ms (PostgreSQL's clock), tries + 1, no attempt charged
 *              (throttled: 429).
 *   FAIL       failed, last_error = the reason (400/404/422; 'swept': the call may have been
 *              placed, never dialled again, C9), no attempt charged.
 *   PENDING    pending now, nothing charged (lane stopped by 401/403, cancelled before dial).
 * The lease fields are cleared whatever the next state.
 *
 * Async contract (STYLE rule 4): if call_end_submit() returns an error the callback is never
 * called; otherwise it is called exactly once and never before call_end_submit() returns: with
 * status 0 and a result, or with a negative status and a NULL result — the batch's failure
 * (DSP_EPG, -ECONNRESET: it may have committed; -ETIMEDOUT, -ENOTCONN, -EAGAIN) or -ECANCELED
 * for a request still queued when call_end_close() is called. Results are borrowed for the
 * callback only. Callbacks may call call_end_submit() and call_end_close().
 */
#ifndef DSP_WORKER_CALL_END_H
#define DSP_WORKER_CALL_END_H

#include "gate.h"
#include "gate_pg.h"
#include "pg_pool.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define CALL_END_BATCH_MAX  256 /* calls per batch */
#define CALL_END_REASON_MAX 200 /* bytes of outcome_reason kept (longer ones are cut) */

struct call_end;

enum call_end_disposition {
	CALL_END_BY_POLICY = 0,
	CALL_END_RETRY_AT = 1,
	CALL_END_FAIL = 2,
	CALL_END_PENDING = 3,
};

/* One call to end. Borrowed for the call of call_end_submit() only (copied). */
struct call_end_req {
	const char *call;    /* uuid */
	const char *outcome; /* calls.outcome: completed, failed, no-answer, busy, canceled,
			      * refused, swept */
	const char *reason;  /* outcome_reason (and the contact's last_error on FAIL); NULL */
	enum call_end_disposition disposition;
	uint64_t delay_ms; /* RETRY_AT: from now (PostgreSQL's clock), at most 30 days */
	/* Fenced ends (the dialer's refusals): the contact's lease as the dialer holds it. NULL:
	 * not fenced (events, sweeps). Set: the call ends only while its contact's lease_owner is
	 * this and, when lease_token is not 0 (0: not known yet), its lease_token is this; else
	 * it is answered ALREADY (nothing freed, contact untouched): a worker that lost the lease
	 * to a takeover must not end the new holder's call. */
	const char *lease_owner;
	int64_t lease_token;
};

enum call_end_outcome {
	CALL_END_ENDED = 0,   /* this request ended the row: its slots were released */
	CALL_END_ALREADY = 1, /* the row had ended already (or a fenced request's lease moved):
			       * nothing released, contact untouched */
	CALL_END_UNKNOWN = 2, /* no such call row */
};

struct call_end_result {
	enum call_end_outcome outcome;
	const char *call;	   /* the call id */
	const char *org;	   /* ENDED: the call's organisation, else NULL */
	const char *contact_state; /* ENDED: the contact's new state, NULL when the call has
				    * no contact or the contact was not moved */
	enum gate_mode mode;	   /* the gate mode the statement saw */
	bool released;		   /* ENDED: redis mode: gate_release() sent; postgres mode:
				    * the NOTIFY is in the committed statement */
};

typedef void (*call_end_cb)(struct call_end *ce, int status, const struct call_end_result *r,
			    void *data);

struct call_end_options {
	uv_loop_t *loop;      /* borrowed */
	struct pg_pool *pool; /* borrowed; not started yet (statements are prepared on it) */
	struct gate *gate;    /* borrowed, may be NULL (no Redis gate: postgres mode only) */
	bool normal_lane;     /* send on PG_LANE_NORMAL; default the priority lane (a freed line
			       * is the start of the next dial, SPEC P2) */
};

struct call_end_stats {
	uint64_t submitted; /* requests accepted */
	uint64_t batches;   /* batches sent */
	uint64_t ended;	    /* answered ENDED */
	uint64_t already;   /* answered ALREADY */
	uint64_t unknown;   /* answered UNKNOWN */
	uint64_t failed;    /* answered with a negative status */
	uint64_t released;  /* gate_release() sent */
	uint64_t notified;  /* ENDED in postgres mode (released by the row and the NOTIFY) */
};

/* Creates the module and prepares its statement on o->pool (before pg_pool_start()). *out is
 * owned by the caller until call_end_close(). Returns 0, -EINVAL, -EBUSY (pool started) or
 * -ENOMEM. */
int call_end_new(const struct call_end_options *o, struct call_end **out);

/* Queues req for this turn's batch (see the top of this file). Returns 0 (cb will be called),
 * -EINVAL (a bad call id, outcome, disposition, delay, lease owner or token), -ESHUTDOWN (closing) or -ENOMEM. */
int call_end_submit(struct call_end *ce, const struct call_end_req *req, call_end_cb cb,
		    void *data);

/* Answers every queued request -ECANCELED from inside this call, lets the batches in flight
 * finish (close the pool after this to cancel them) and the gate releases they sent be answered
 * (close Redis after closed_cb, not before), then frees ce and calls closed_cb (may be NULL)
 * from the loop. ce must not be used after. */
void call_end_close(struct call_end *ce, void (*closed_cb)(void *data), void *data);

/* Counters since call_end_new(). */
void call_end_get_stats(const struct call_end *ce, struct call_end_stats *out);

/* Static names for logs ("ended", "already", "unknown"). */
const char *call_end_outcome_name(enum call_end_outcome o);

/* Whether outcome is one of calls.outcome's values. */
bool call_end_outcome_ok(const char *outcome);

#endif
