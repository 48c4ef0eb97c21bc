/* The dialer (SPEC D0–D4; issue 9 item 5): where a call is placed.
 *
 * dial_start() takes a call whose row is written (state dialing, gate_flow.h) and POSTs it to
 * {provider_url}/calls with the D0 body, Idempotency-Key = the call id and the bearer token when
 * configured, through common/http_client. Each answer is classified by core/retry_policy.h:
 *   OK         the call is placed: DIAL_PLACED;
 *   RESEND     unknown outcome: the slots stay held and the same key is re-sent after the
 *              policy's delay (the dialer keeps maybe_delivered and the send count);
 *   UNKNOWN    no tries left: the call row is marked unknown (its slots are freed only by an
 *              event or the maximum-duration sweep): DIAL_UNKNOWN;
 *   REFUSED    definitive refusal: DIAL_REFUSED with the delay before the contact's next call
 *              (the owner releases the slots at once and reschedules the contact, no attempt
 *              charged);
 *   INVALID    the provider rejected the contact: DIAL_INVALID with its reason;
 *   STOP_LANE  401/403 or a contract mismatch: the lane stops (an alert is logged and counted),
 *              every call queued on it ends DIAL_STOPPED (contacts back to pending, nothing
 *              charged), and the lane probes again after lane_probe_ms.
 * One dial_attempts row per request, whatever its outcome, written in one statement per loop
 * turn (D4).
 *
 * Lanes are (provider, organisation) with core/lane.h's token bucket, parking, circuit and retry
 * budget. With a Redis connection (dial_options.redis) they are fleet-wide (lane_fleet.h): every
 * send (re-sends too) first passes the lane's local checks (stop, park, circuit, budget:
 * lane_check()), then takes its token from the lane's bucket in Redis, which also refuses while
 * any worker has the lane stopped, parked or its circuit open; this worker's core/lane.c still
 * decides its transitions from its own answers and writes them there (park, open, stop: max of
 * the stored and the new time; a fleet probe's answer clears its stop or open). While Redis does
 * not answer, the lane is paced by this worker's own bucket (lane_admit()), never unpaced.
 * Without a connection lanes are per worker (N workers may send N times a lane's rate).
 *
 * Leases (SPEC C9, D1; dispatcher/worker/README.md, "Re-send of an orphaned call"). With
 * dial_options.owner and lease_ms set, every call in the dialer's care (queued, in flight,
 * waiting for a re-send) keeps its contact's lease: a call's lease is assumed to run lease_left_ms
 * from dial_start() (the claim's lease less the slot wait), and renewed (one statement per tick
 * of lease_ms / 4 for every call that needs it: contact dialing, lease_owner = owner, token as
 * last seen) while the call stays. A send leaves only if the known lease covers its whole
 * request (timeout + 1 s), so a worker that cannot renew stops sending before its lease expires
 * in the database; a call whose renewal finds the lease gone (another worker took it over, or
 * the call ended) or whose lease ran out here ends DIAL_LEASE_LOST, whatever its request's
 * answer, once the loss is known. The result of a fenced call carries the lease it held
 * (dial_result.lease_owner, lease_token): its end (call_end.h) applies only while the contact's
 * lease is still that one, so a refusal that comes after a takeover never ends the new holder's
 * call. Another worker's sweep
 * (sweep.h) takes over a call only once its lease has expired, and passes it to dial_resend():
 * the same key, the same body, through the same lanes and retry table.
 *
 * Async contract: done_cb is called exactly once per call accepted by dial_start(), from the
 * loop (never from inside dial_start()), also on dial_drain() and dial_close(). Everything passed
 * to it is borrowed for the callback only.
 */
#ifndef DSP_WORKER_DIAL_H
#define DSP_WORKER_DIAL_H

#include "http_client.h"
#include "lane.h"
#include "lane_fleet.h"
#include "pg_pool.h"
#include "retry_policy.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

struct dial;

/* One call to place. Strings copied. */
struct dial_call {
	const char *call; /* uuid: the Idempotency-Key */
	const char *org;
	const char *campaign; /* NULL: a direct dial */
	const char *agent;
	int64_t contact; /* 0: none */
	int32_t attempt;
	const char *to;	  /* E.164 */
	const char *from; /* NULL: none */
};

enum dial_disposition {
	DIAL_PLACED = 0, /* 201/200: the provider has the call; events will end it */
	DIAL_REFUSED,	 /* definitive refusal: release now, next call after delay_ms */
	DIAL_INVALID,	 /* the contact fails with reason */
	DIAL_STOPPED,	 /* the lane is stopped: release now, contact back to pending */
	DIAL_UNKNOWN,	 /* outcome unknown, row marked unknown: slots stay until event/sweep */
	DIAL_DRAINED,	 /* never sent (drain/close): release now, contact back to pending */
	DIAL_LEASE_LOST, /* the contact's lease is not ours (any more): nothing to do here; the
			  * call row keeps its slots and whoever holds the lease finishes it */
};

struct dial_result {
	const struct dial_call *call;
	enum dial_disposition disposition;
	enum retry_reason reason;
	uint64_t delay_ms; /* DIAL_REFUSED: until the contact's next call */
	bool requeue;	   /* DIAL_REFUSED: throttle retries exhausted (retry_policy.h) */
	int status;	   /* the last HTTP status, 0 when none */
	const char *text;  /* DIAL_INVALID: the provider's reason ("" when none) */
	const char *provider_call_id; /* DIAL_PLACED: the provider's call id, NULL if unknown */
	/* The contact's lease as this dialer holds it (a fenced call; the owner's end of the call
	 * passes them to call_end_req, so it ends the call only while the lease is still this):
	 * lease_owner NULL when the call is not fenced; lease_token 0 when not known yet. */
	const char *lease_owner;
	int64_t lease_token;
};

typedef void (*dial_done_cb)(struct dial *d, const struct dial_result *r, void *data);

struct dial_options {
	uv_loop_t *loop;
	struct pg_pool *pool;	   /* borrowed; not started yet (statements prepared now) */
	const char *provider_url;  /* base URL, copied: POST <provider_url>/calls */
	const char *token;	   /* bearer token, NULL for none; copied, never logged */
	const char *callback_url;  /* the D0 callback_url, copied */
	const char *provider_name; /* the lane's provider part (copied; NULL: "provider");
				      * with redis, [A-Za-z0-9_-]{1,32} */
	struct redis_conn *redis;  /* borrowed (outlives d), NULL: lanes per worker; else
				      * fleet-wide lanes (lane_fleet.h) on it */
	const struct redis_scripts *scripts; /* with redis: its registry, holding
					      * lane_fleet_scripts_register()'s scripts */
	uint64_t timeout_ms;		     /* one request's deadline (0: 10000) */
	uint64_t connect_timeout_ms;	     /* 0: 2000 */
	uint64_t lane_probe_ms;		     /* a stopped lane resumes after this (0: 300000) */
	struct lane_config lane;	     /* per lane; lane_config_defaults() for SPEC D3's */
	struct retry_policy policy;	     /* retry_policy_defaults() for SPEC D2's */
	const char *owner;		     /* lease_owner of this worker's claims (copied);
					      * NULL: no lease renewal, no send fence */
	uint64_t lease_ms;		     /* the lease a claim or renewal writes; 0: none */
	uint64_t lease_left_ms; /* lease assumed left at dial_start() (claim's lease less the
				 * slot waits and the call-row write); with owner and lease_ms:
				 * 1..lease_ms, else dial_new() returns -EINVAL */
	dial_done_cb done_cb;
	void *data;
};

/* Dial attempts are counted by their class, the retry verdict of the answer
 * (retry_verdict_name(): ok, refused, resend, unknown, stop_lane, invalid), as written in
 * dial_attempts.class. */
#define DIAL_CLASSES (RETRY_INVALID + 1)

struct dial_stats {
	uint64_t attempts[DIAL_CLASSES]; /* dial_attempts rows made, by class */
	uint64_t sends;			 /* requests sent (re-sends included) */
	uint64_t resends;		 /* of which re-sends of the same key */
	uint64_t placed, refused, invalid, stopped, unknown, drained;
	uint64_t lane_stops;	/* lanes stopped by 401/403 (alerts) */
	uint64_t attempts_rows; /* dial_attempts rows written */
	uint64_t attempts_lost; /* dial_attempts rows not written: insert not sent or failed
				 * (logged) */
	uint64_t inflight;	/* requests in flight now */
	uint64_t queued;	/* calls waiting for their lane or a re-send now */
	uint64_t fleet_takes;	/* lane_take.lua calls sent */
	uint64_t fleet_local;	/* sends paced by the local bucket: Redis did not answer */
	uint64_t fleet_stops;	/* lanes found stopped fleet-wide (another worker's 401/403) */
	uint64_t fleet_marks;	/* park / open / stop times written (or probes cleared) */
	uint64_t takeovers;	/* calls taken over (dial_resend()) */
	uint64_t renewed;	/* leases renewed (rows) */
	uint64_t lease_lost;	/* calls ended DIAL_LEASE_LOST */
};

/* Creates the dialer (its HTTP client too) and prepares its statements on o->pool. *out is owned
 * by the caller (dial_close()). Returns 0, -EINVAL or -ENOMEM. */
int dial_new(const struct dial_options *o, struct dial **out);

/* Starts placing c. Returns 0 (done_cb will be called), -EINVAL, -ESHUTDOWN (draining or
 * closing) or -ENOMEM. */
int dial_start(struct dial *d, const struct dial_call *c);

/* A call taken over from a worker whose lease expired (sweep.h): re-sent with its own key and
 * body (c->call is the Idempotency-Key) as a re-send of a call that may already be placed
 * (maybe_delivered: no definitive refusal on a failed connect or a throttle). prior_sends: its
 * dial_attempts rows (the ledger's try numbers go on from there). lease_token and
 * lease_until_ms (this loop's clock, from when the takeover statement was sent): the lease the
 * takeover wrote. The lane's retry budget counts it as this worker's first send of the call. A
 * call already in this dialer's care is not doubled: it adopts the new lease. Returns as
 * dial_start(). */
int dial_resend(struct dial *d, const struct dial_call *c, unsigned prior_sends,
		int64_t lease_token, uint64_t lease_until_ms);

/* Whether org's lane is stopped (401/403): the owner admits nothing for it meanwhile. */
bool dial_lane_stopped(struct dial *d, const char *org);

/* Stops taking calls: calls not sent yet end DIAL_DRAINED, calls waiting for a re-send end
 * DIAL_UNKNOWN (they may be placed), requests in flight finish. cb (may be NULL) is called once
 * nothing is in flight and the attempt rows are written. */
void dial_drain(struct dial *d, void (*cb)(void *data), void *data);

/* A lane's state, as its own checks see it now (the first that holds, in this order: stopped,
 * parked, circuit open, circuit half open, else closed: sending). */
enum dial_lane_state {
	DIAL_LANE_OPEN_FOR_CALLS = 0, /* "closed": the circuit is closed, nothing holds it */
	DIAL_LANE_HALF_OPEN,
	DIAL_LANE_OPEN,
	DIAL_LANE_PARKED,
	DIAL_LANE_STOPPED,
	DIAL_LANE_STATES,
};

/* Counts this worker's lanes by state into out. */
void dial_lane_states(const struct dial *d, uint32_t out[DIAL_LANE_STATES]);

/* "closed", "half_open", "open", "parked", "stopped". */
const char *dial_lane_state_name(enum dial_lane_state st);

void dial_get_stats(const struct dial *d, struct dial_stats *out);

/* Drains at once (in-flight requests cancelled: their calls end DIAL_UNKNOWN), closes the client
 * and the timers, frees d, then calls closed_cb (may be NULL). Close the pool after. */
void dial_close(struct dial *d, void (*closed_cb)(void *data), void *data);

#endif
