/* The provider events endpoint (SPEC D0, R7): POST /provider/events.
 *
 * One request is one event:
 *   {"call_id":"<provider call id>","idempotency_key":"<our call id>","status":"ringing" |
 *    "answered" | "completed" | "failed" | "no-answer" | "busy" | "canceled","sequence":n,
 *    "occurred_at":"RFC 3339"}
 * with X-Signature: t=<unix s>,v1=<hex HMAC-SHA256 of "<t>.<raw body>"> (common/signing.h).
 *
 * Answers, in this order of checks (nothing is written before the last check passes):
 *   401 {"error":"unauthorized",...}  X-Signature missing, malformed, older than 5 minutes (or
 *                                     30 s in the future), or no v1 matches the secret
 *   400 {"error":"bad_request",...}   not JSON, not an object, a field missing or of the wrong
 *                                     type: idempotency_key not a uuid, status not one of the
 *                                     seven, sequence not an integer in 0..2^31-1, call_id
 *                                     empty or over 128 bytes or not printable ASCII,
 *                                     occurred_at (optional) not RFC 3339
 *   200 {"recorded":true}             recorded; for a terminal status the call has ended (now
 *                                     or before: a duplicate) and its contact moved on
 *   202 {"recorded":true,"call":"unknown"}
 *                                     no call row with that idempotency key (never written,
 *                                     or already pruned): the event is kept in provider_events
 *                                     and nothing else changes
 *   503 {"error":"unavailable",...}   PostgreSQL did not record it (the provider retries)
 * A 2xx is sent only once the write has committed, so a provider that retries until 2xx
 * loses nothing.
 *
 * What is written (one statement per loop turn for every event received in it, up to
 * EVENTS_BATCH_MAX):
 *   - terminal events (completed, failed, no-answer, busy, canceled) and every event of an
 *     unknown call: a provider_events row, deduplicated by (call_id, sequence) with ON
 *     CONFLICT DO NOTHING. Non-terminal events of a known call write no row of their own
 *     (issue 9 item 6: what they say is on the call row);
 *   - the call row, only forward: provider_call_id when it has none (and no other call has
 *     that id), last_sequence = the greatest seen, answered_at and state live on "answered"
 *     when the call is dialing or unknown. An ended call is never un-ended.
 * Then a terminal event of a known call is handed to call_end (BY_POLICY with its status): the
 * first one ends the call and releases its slots, every duplicate or later terminal event is
 * answered "already ended" and changes nothing. Events may come before the dial's 201 was
 * processed (the call row is written before the POST), twice, or out of order.
 *
 * Async contract: events_handler() answers every request exactly once. events_close() answers
 * the requests still waiting 503 and frees the module once the writes in flight are answered.
 */
#ifndef DSP_WORKER_EVENTS_H
#define DSP_WORKER_EVENTS_H

#include "call_end.h"
#include "events_body.h" /* the body's parse and checks, EVENTS_PROVIDER_ID_MAX */
#include "gate.h"
#include "gate_mode.h"
#include "http_server.h"
#include "pg_pool.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define EVENTS_PATH	    "/provider/events"
#define EVENTS_BODY_MAX	    4096 /* bytes of one event's body (the route's max_body) */
#define EVENTS_BATCH_MAX    256	 /* events per statement */
#define EVENTS_INFLIGHT_MAX 2	 /* statements in flight at most (group commit) */

struct events;

struct events_options {
	uv_loop_t *loop;	/* borrowed */
	struct pg_pool *pool;	/* borrowed; not started yet (the statement is prepared on it) */
	struct call_end *ends;	/* borrowed: outlives the module */
	const char *secret;	/* PROVIDER_WEBHOOK_SECRET (copied), non-empty */
	int64_t tolerance_s;	/* replay window (0: SIGNING_TOLERANCE_S, 5 minutes) */
	int64_t (*now_s)(void); /* Unix seconds; NULL: time(NULL). For tests of the window. */
	/* The early release (both borrowed, may be NULL: none): a terminal event whose callback
	 * URL names the organisation (`?org=`, dial.c) gives the call's slots back in Redis once
	 * the event is recorded, when the fleet is in redis mode and the gate usable, before
	 * PostgreSQL records the end; call_end's release after the commit then finds nothing held (the release script is
	 * idempotent per call). See README.md "Early release". */
	struct gate *gate;
	struct gate_mode_ctl *mode;
};

struct events_stats {
	uint64_t received;     /* requests handled */
	uint64_t unauthorized; /* answered 401 */
	uint64_t bad;	       /* answered 400 */
	uint64_t recorded;     /* answered 200 */
	uint64_t unknown_call; /* answered 202 */
	uint64_t failed;       /* answered 503 */
	uint64_t duplicates;   /* events whose provider_events row existed already */
	uint64_t batches;      /* statements sent */
	uint64_t terminal;     /* terminal events handed to call_end */
	uint64_t early_sent;   /* early releases sent */
	uint64_t early_freed;  /* of which freed the call's slots */
};

/* Creates the module and prepares its statement on o->pool (before pg_pool_start()). *out is
 * owned by the caller until events_close(). Returns 0, -EINVAL (no secret...), -EBUSY or
 * -ENOMEM. */
int events_new(const struct events_options *o, struct events **out);

/* The route's handler (http_handler_cb); data is the struct events. */
void events_handler(struct http_request *req, void *data);

/* The route to put in the server's table: POST EVENTS_PATH, EVENTS_BODY_MAX, events_handler. */
struct http_route events_route(struct events *ev);

/* See the top of this file. closed_cb (may be NULL) is called from the loop once freed. */
void events_close(struct events *ev, void (*closed_cb)(void *data), void *data);

void events_get_stats(const struct events *ev, struct events_stats *out);

#endif
