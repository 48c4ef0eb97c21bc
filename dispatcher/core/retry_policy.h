/* Retry policy: what to do with one answer from the provider (SPEC D2, D3).
 *
 * Pure: no I/O, no clock, no random source. The caller passes the answer (status, the
 * Retry-After header, whether a 2xx body says "throttled", the transport failure class), the
 * contact's counters, the wall-clock time (only used to turn an HTTP-date into a delay) and one
 * uniformly random 32-bit draw. The result is a verdict plus a relative delay in milliseconds.
 *
 * The table (defaults of struct retry_policy in brackets):
 *
 *   answer                         verdict          delay                        limit
 *   2xx (200 replay, 201 created)  OK               -                            -
 *   429 + Retry-After              REFUSED          header + 0.3..1.2 s jitter   [5] such retries
 *   429 without, 2xx "throttled"   REFUSED          full jitter, [0, 1 s * 2^n]  capped [32 s]
 *   either, on a call that may
 *   already be placed (see below)  RESEND same key  as above                     [5] then UNKNOWN
 *   500..599, reset                RESEND same key  [d/2, d], d = 0.5 s * 2^n    [4] tries,
 *                                                                                capped [8 s]
 *   read timeout, 408              RESEND same key  [2 s] flat                   [3] tries
 *   connect failed / timed out     REFUSED          [0.25 s, 0.5 s]              -
 *   ... after a maybe-delivered    RESEND same key  as reset / as timeout        as those
 *   a RESEND past its limit        UNKNOWN          -  (slots kept; an event or the sweep ends it)
 *   400, 404, 422                  INVALID          -  (the contact fails with the provider's
 *                                                      reason)
 *   401, 403                       STOP_LANE        -  (contacts stay pending; alert and count)
 *   409, 425 (key in progress)     RESEND same key  as 5xx
 *   1xx, 3xx, other 4xx            STOP_LANE        -  (a contract mismatch: never fail a
 *                                                      backlog on it)
 *
 * Readings of the SPEC written down here:
 *   - "tries" of one call count its sends (the first POST included): 5xx gets 4 sends in all,
 *     timeouts 3. The limit is checked against the total sends of the call, whatever mixture of
 *     5xx and timeouts produced them, so a call never gets more than 4 sends.
 *   - "0.5 s doubling to 8 s" for 5xx re-sends: the n-th re-send waits d = 0.5 s * 2^(n-1),
 *     capped at 8 s, drawn in [d/2, d] ("equal jitter": never 0 ms, so a failing provider gets
 *     a real pause). Full jitter is D2's choice only for 429 without Retry-After and throttled
 *     bodies. With the default 4 tries the re-sends wait 0.5, 1 and 2 s: the 8 s cap is reached
 *     only with server_tries of 6 or more.
 *   - A reset is an unknown outcome scheduled like a 5xx (a server-side fault that clears
 *     quickly); only timeouts use the flat 2 s schedule.
 *   - 400/404/422 and 401/403 (and other lane-stopping statuses) answered to a call that may
 *     already be placed (maybe_delivered) end it UNKNOWN instead: its slots stay held and the
 *     contact is neither failed nor re-dialled under a new key; with stop_lane set, the lane
 *     stops all the same.
 *   - maybe_delivered (struct retry_counts): an earlier send of this call ended in an unknown
 *     outcome other than a failed connect, so the provider may have placed the call. Then
 *       * a failed or timed-out connect is still an unknown outcome (re-send the same key, or
 *         UNKNOWN past the limit): the earlier send may be live;
 *       * a throttled answer (429, or a 2xx saying throttled) is not a refusal either: the
 *         call may exist, and a new key could ring the contact twice. It is re-sent with the
 *         same key after the throttle's delay, keeping the slots; after header_retries
 *         throttled answers the call ends UNKNOWN (an event or the sweep frees the slots).
 *     Without it, a failed or timed-out connect means nothing was delivered: a definitive
 *     refusal (slots released, the contact called again after a short pause; the lane's
 *     circuit counts it, so a provider that is down opens the circuit).
 *   - REFUSED never uses up one of the contact's attempts (D5): the next call is a new key for
 *     the same attempt.
 *   - Throttling never uses up a contact's attempts (D5). After the fifth header-driven retry the
 *     sixth 429 + Retry-After still answers REFUSED, but with `requeue` set: the contact goes back
 *     to the backlog for max(header, 60 s) + jitter and its throttle counter restarts, so a long
 *     storm cycles the backlog at the lane's park pace instead of spinning on one contact.
 *   - Retry-After values are capped at 24 h (a hostile or broken header cannot park us forever);
 *     an HTTP-date in the past means "now" (0 + jitter); a malformed value counts as absent.
 *   - A throttled answer always asks the lane to park (`park_lane`), passing the header's delay.
 */
#ifndef DSP_CORE_RETRY_POLICY_H
#define DSP_CORE_RETRY_POLICY_H

#include <stdbool.h>
#include <stdint.h>

/* How the transport failed, when there is no HTTP status. */
enum retry_transport {
	RETRY_TRANSPORT_NONE = 0,	/* an HTTP status arrived */
	RETRY_TRANSPORT_CONNECT_FAILED, /* refused, unreachable, DNS: this send was not delivered */
	RETRY_TRANSPORT_CONNECT_TIMEOUT, /* no connection in the connect timeout: not delivered */
	RETRY_TRANSPORT_READ_TIMEOUT, /* connected, request sent (maybe), no full answer in time */
	RETRY_TRANSPORT_RESET,	      /* connection reset or closed mid-answer */
};

enum retry_verdict {
	RETRY_OK = 0,	 /* accepted (201) or replayed (200): the call is placed */
	RETRY_REFUSED,	 /* definitive refusal: release the slots, next call after delay_ms */
	RETRY_RESEND,	 /* unknown outcome: keep the slots, re-send the same key after delay_ms */
	RETRY_UNKNOWN,	 /* unknown outcome and no tries left: mark the call unknown, keep slots */
	RETRY_STOP_LANE, /* our credentials or the contract are wrong: stop the lane, alert */
	RETRY_INVALID,	 /* the provider rejected this contact: fail it with the reason */
};

enum retry_reason {
	RETRY_REASON_NONE = 0,
	RETRY_REASON_THROTTLED_HEADER, /* 429 with a usable Retry-After */
	RETRY_REASON_THROTTLED,	       /* 429 without it, or a 2xx body saying throttled */
	RETRY_REASON_SERVER_ERROR,     /* 5xx, 409, 425 */
	RETRY_REASON_TIMEOUT,	       /* connect or read timeout, 408 */
	RETRY_REASON_CONNECTION,       /* reset or failed connect */
	RETRY_REASON_CREDENTIALS,      /* 401, 403 */
	RETRY_REASON_REJECTED,	       /* 400, 404, 422 */
	RETRY_REASON_UNEXPECTED,       /* any other status */
};

/* The limits of the table; retry_policy_defaults() fills in SPEC D2's values. */
struct retry_policy {
	unsigned header_retries;     /* 429 + Retry-After retries before requeue [5] */
	uint64_t jitter_min_ms;	     /* added to Retry-After, lower bound [300] */
	uint64_t jitter_max_ms;	     /* added to Retry-After, upper bound [1200] */
	uint64_t throttle_base_ms;   /* 429 without header: first ceiling [1000] */
	uint64_t throttle_cap_ms;    /* ... cap on the ceiling [32000] */
	uint64_t requeue_min_ms;     /* throttle retries exhausted: at least this long [60000] */
	unsigned server_tries;	     /* sends of one call for 5xx / reset [4] */
	uint64_t server_base_ms;     /* 5xx: first delay; a failed connect's [500] */
	uint64_t server_cap_ms;	     /* 5xx: cap on the doubled delay [8000] */
	unsigned timeout_tries;	     /* sends of one call for timeouts [3] */
	uint64_t timeout_delay_ms;   /* timeouts: flat delay [2000] */
	uint64_t retry_after_cap_ms; /* sanity cap on any Retry-After [86400000] */
};

/* One answer to classify. */
struct retry_answer {
	int status;			/* HTTP status; 0 when the transport failed */
	enum retry_transport transport; /* RETRY_TRANSPORT_NONE when status is set */
	const char *retry_after;	/* the Retry-After header value or NULL; borrowed */
	bool body_throttled;		/* a 2xx whose body says the request was throttled */
};

/* The counters the caller keeps. */
struct retry_counts {
	unsigned throttled;   /* throttled answers of this contact before this answer (its tries),
			     * those on re-sends of the current call included */
	unsigned sends;	      /* sends of the current call, including the one answered (>= 1) */
	bool maybe_delivered; /* an earlier send of this call may have reached the provider: it
			       * ended in an unknown outcome other than a failed connect */
};

struct retry_decision {
	enum retry_verdict verdict;
	enum retry_reason reason;
	uint64_t delay_ms; /* REFUSED: until the contact's next call; RESEND: until the re-send */
	bool requeue;	 /* REFUSED: throttle retries exhausted, back to the backlog, reset tries */
	bool park_lane;	 /* throttled: park the lane (lane_park_throttled) */
	int64_t park_ms; /* with park_lane: the Retry-After delay, or -1 when there was none */
	bool circuit_refusal; /* counts as a refusal for the lane's circuit (not OK/INVALID/STOP) */
	bool stop_lane;	      /* stop the lane (401/403, contract mismatch): set with STOP_LANE,
			       * and with UNKNOWN when such an answer came to a maybe-delivered call */
};

/* Fills *p with SPEC D2's limits. */
void retry_policy_defaults(struct retry_policy *p);

/* Classifies one answer into *out. p may be NULL for the defaults. now_unix_ms is wall-clock
 * time (Unix epoch, ms), used only to turn an HTTP-date Retry-After into a delay. rnd is one
 * uniformly random 32-bit draw; the same inputs always give the same decision. */
void retry_classify(const struct retry_policy *p, const struct retry_answer *a,
		    const struct retry_counts *c, int64_t now_unix_ms, uint32_t rnd,
		    struct retry_decision *out);

/* Parses a Retry-After value: delay-seconds ("120") or an HTTP-date (IMF-fixdate, RFC 850 or
 * asctime form, RFC 9110 §5.6.7). Sets *delay_ms (a date in the past gives 0). Returns 0, or
 * -EINVAL when the value is neither. */
int retry_after_parse(const char *value, int64_t now_unix_ms, uint64_t *delay_ms);

/* Parses an HTTP-date into Unix seconds. Returns 0, or -EINVAL. */
int retry_http_date_parse(const char *s, int64_t *unix_s);

/* Returns a uniformly drawn value in [0, ceiling] from rnd (full jitter). */
uint64_t retry_full_jitter(uint64_t ceiling, uint32_t rnd);

/* Returns a uniformly drawn value in [d - d/2, d] from rnd (equal jitter). */
uint64_t retry_half_jitter(uint64_t d, uint32_t rnd);

/* Returns a static name for a verdict ("refused") or a reason ("throttled_header"). */
const char *retry_verdict_name(enum retry_verdict v);
const char *retry_reason_name(enum retry_reason r);

#endif
