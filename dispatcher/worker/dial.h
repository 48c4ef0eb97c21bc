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
 * budget — per worker: N workers may together send N times a lane's rate (fleet-wide lanes in
 * Redis are not built yet).
 *
 * Async contract: done_cb is called exactly once per call accepted by dial_start(), from the
 * loop (never from inside dial_start()), also on dial_drain() and dial_close(). Everything passed
 * to it is borrowed for the callback only.
 */
#ifndef DSP_WORKER_DIAL_H
#define DSP_WORKER_DIAL_H

#include "http_client.h"
#include "lane.h"
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
};

typedef void (*dial_done_cb)(struct dial *d, const struct dial_result *r, void *data);

struct dial_options {
	uv_loop_t *loop;
	struct pg_pool *pool;	     /* borrowed; not started yet (statements prepared now) */
	const char *provider_url;    /* base URL, copied: POST <provider_url>/calls */
	const char *token;	     /* bearer token, NULL for none; copied, never logged */
	const char *callback_url;    /* the D0 callback_url, copied */
	const char *provider_name;   /* the lane's provider part (copied; NULL: "provider") */
	uint64_t timeout_ms;	     /* one request's deadline (0: 10000) */
	uint64_t connect_timeout_ms; /* 0: 2000 */
	uint64_t lane_probe_ms;	     /* a stopped lane resumes after this (0: 300000) */
	struct lane_config lane;     /* per lane; lane_config_defaults() for SPEC D3's */
	struct retry_policy policy;  /* retry_policy_defaults() for SPEC D2's */
	dial_done_cb done_cb;
	void *data;
};

struct dial_stats {
	uint64_t sends;	  /* requests sent (re-sends included) */
	uint64_t resends; /* of which re-sends of the same key */
	uint64_t placed, refused, invalid, stopped, unknown, drained;
	uint64_t lane_stops;	/* lanes stopped by 401/403 (alerts) */
	uint64_t attempts_rows; /* dial_attempts rows written */
	uint64_t attempts_lost; /* dial_attempts rows whose insert failed (logged) */
	uint64_t inflight;	/* requests in flight now */
	uint64_t queued;	/* calls waiting for their lane or a re-send now */
};

/* Creates the dialer (its HTTP client too) and prepares its statements on o->pool. *out is owned
 * by the caller (dial_close()). Returns 0, -EINVAL or -ENOMEM. */
int dial_new(const struct dial_options *o, struct dial **out);

/* Starts placing c. Returns 0 (done_cb will be called), -EINVAL, -ESHUTDOWN (draining or
 * closing) or -ENOMEM. */
int dial_start(struct dial *d, const struct dial_call *c);

/* Whether org's lane is stopped (401/403): the owner admits nothing for it meanwhile. */
bool dial_lane_stopped(struct dial *d, const char *org);

/* Stops taking calls: calls not sent yet end DIAL_DRAINED, calls waiting for a re-send end
 * DIAL_UNKNOWN (they may be placed), requests in flight finish. cb (may be NULL) is called once
 * nothing is in flight and the attempt rows are written. */
void dial_drain(struct dial *d, void (*cb)(void *data), void *data);

void dial_get_stats(const struct dial *d, struct dial_stats *out);

/* Drains at once (in-flight requests cancelled: their calls end DIAL_UNKNOWN), closes the client
 * and the timers, frees d, then calls closed_cb (may be NULL). Close the pool after. */
void dial_close(struct dial *d, void (*closed_cb)(void *data), void *data);

#endif
