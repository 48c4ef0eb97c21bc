/* The API rate limiter's arithmetic (SPEC R1-R3): a two-bucket weighted sliding window per
 * organisation and bucket, 60 s windows aligned on multiples of 60 s of the clock.
 *
 * Pure: no I/O, no clock, no allocation. `now` is an argument, in milliseconds; in production
 * it is the Redis server's TIME (one clock for every node), and the same arithmetic runs in the
 * limiter's Lua script, which holds the state below in one hash per organisation and bucket.
 *
 * The rule, with W = 60,000 ms, e = now mod W (ms into the window), `previous` the requests
 * admitted in the window before and `current` those admitted in this one BEFORE the request
 * being decided:
 *
 *     estimated = previous x (W - e) / W + current + 1
 *     allowed   = estimated <= limit
 *
 * Readings (written down because the source document leaves them open):
 *
 *  L1  `estimated` COUNTS THE REQUEST BEING DECIDED (the "+ 1"). So with no earlier traffic
 *      exactly `limit` requests are allowed in a window and the next one is refused, and the
 *      source document's worked example reads "150 requests so far this minute" as 149 before
 *      the request plus the request itself: 400 x 0.75 + 149 + 1 = 450, remaining 150.
 *  L2  Only allowed requests are counted. A refused request changes nothing, so a client that
 *      keeps retrying is not pushed further back, and Retry-After stays true.
 *  L3  The estimate is exact (integer arithmetic in request-milliseconds, no floating point);
 *      the reported `estimated` is rounded UP to a whole request. Since the limit is a whole
 *      number, allowed <=> reported estimated <= limit.
 *  L4  X-RateLimit-Remaining: limit - estimated when allowed (how many more requests would be
 *      allowed at this same instant), 0 when refused.
 *  L5  X-RateLimit-Reset: the seconds left in the current window, rounded UP: (W - e) / 1000
 *      to the next whole second, so 1..60 (60 at e = 0, 1 at e = 59.999 s). Not a timestamp.
 *  L6  Retry-After (refusals only; 0 when allowed): the time until a request would be allowed
 *      if nothing else changes (no other request can be admitted meanwhile, by L2, unless the
 *      limit changes), rounded UP to whole seconds, so waiting exactly that long is enough.
 *      The estimate only falls with time (the old window's weight shrinks; at the window's end
 *      the current count becomes the previous one, weight 1, which is continuous), so that time
 *      is exact: within this window when current + 1 <= limit (the old window's weight has to
 *      shrink), else in the next one (the current count, then previous, has to shrink). It is
 *      1..120 s; it equals Reset when the request fits exactly at the window's start.
 *  L7  A previous window older than one window weighs 0: ratelimit_roll() forgets it. Time
 *      that goes back before the state's window is taken as the start of that window (weight 1,
 *      the most conservative reading); the counts are kept. `now` is Unix time in milliseconds;
 *      a negative one is taken as 0.
 *  L8  Counts are clamped at RATELIMIT_COUNT_CAP before the arithmetic, which then cannot
 *      overflow; every decision, Remaining, Reset and Retry-After is unchanged by the clamp
 *      (a clamped count is over any limit even at the smallest weight, 1/W); only `estimated`
 *      saturates. Limits are 1..INT32_MAX (the database's positive `integer`).
 *  L9  Fails open (R3): when the state cannot be read the request is allowed and the headers
 *      show the full limit as remaining (ratelimit_fail_open()).
 */
#ifndef DSP_CORE_RATELIMIT_H
#define DSP_CORE_RATELIMIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RATELIMIT_WINDOW_MS 60000
#define RATELIMIT_COUNT_CAP (UINT64_C(1) << 47) /* > INT32_MAX x W: see L8 */
#define RATELIMIT_LIMIT_MAX INT32_MAX

/* The buckets (R1). Each has its own counter per organisation. */
enum ratelimit_bucket {
	RATELIMIT_DEFAULT,	   /* every other /v2 route; 1000 a minute by default */
	RATELIMIT_CALLS_CREATE,	   /* POST /v2/calls, POST /v2/batches, upload; 600 */
	RATELIMIT_EXECUTIONS_LIST, /* GET /v2/calls and call reads; 600 */
	RATELIMIT_BUCKETS
};

/* One organisation's limits, requests per minute per bucket (organisations.rate_*_per_minute). */
struct ratelimit_limits {
	uint32_t per_minute[RATELIMIT_BUCKETS]; /* indexed by enum ratelimit_bucket */
};

/* The two-bucket state of one organisation's bucket (the Lua script's hash). */
struct ratelimit_state {
	int64_t window;	   /* index of the current window: floor(now / W) */
	uint64_t current;  /* requests allowed in `window` */
	uint64_t previous; /* requests allowed in `window - 1` */
};

/* One decision: everything the response headers and the 429 body need. */
struct ratelimit_decision {
	bool allowed;
	uint32_t limit;		/* X-RateLimit-Limit */
	uint64_t estimated;	/* L1, L3: counting this request, rounded up */
	uint32_t remaining;	/* X-RateLimit-Remaining (L4) */
	uint32_t reset_s;	/* X-RateLimit-Reset (L5), 1..60 */
	uint32_t retry_after_s; /* Retry-After (L6), 1..120 when refused, else 0 */
};

/* Returns the bucket's name as the product spells it ("default", "calls.create",
 * "executions.list"), or NULL for a value out of range. Static storage. */
const char *ratelimit_bucket_name(enum ratelimit_bucket bucket);

/* Parses a bucket name as ratelimit_bucket_name() spells it. Returns 0, or -EINVAL. */
int ratelimit_bucket_parse(const char *name, enum ratelimit_bucket *out);

/* Fills *limits with the defaults (default 1000, calls.create 600, executions.list 600), the
 * organisations table's column defaults. */
void ratelimit_limits_default(struct ratelimit_limits *limits);

/* Decides one request from the counts alone: `previous` and `current` as in the rule above
 * (current not counting this request), `elapsed_ms` = e (0..W-1). Fills *out. Returns 0, or
 * -EINVAL when limit is 0 or above RATELIMIT_LIMIT_MAX or elapsed_ms >= W (out untouched). */
int ratelimit_decide(uint64_t previous, uint64_t current, uint32_t limit, uint32_t elapsed_ms,
		     struct ratelimit_decision *out);

/* Empties *st at now (no traffic in either window). */
void ratelimit_state_init(struct ratelimit_state *st, int64_t now_ms);

/* Moves *st to now's window: the same window changes nothing; the next one makes current the
 * previous and starts a new current at 0; a later one empties both (L7); an earlier one
 * changes nothing. Returns e, the milliseconds into st->window that `now` stands for (0 when
 * now is before st->window). */
uint32_t ratelimit_roll(struct ratelimit_state *st, int64_t now_ms);

/* The whole step the Lua script does in one round trip: rolls *st to now, decides, and counts
 * the request in st->current when it is allowed (L2). Returns 0, or -EINVAL as
 * ratelimit_decide() (then *st is only rolled). */
int ratelimit_check(struct ratelimit_state *st, uint32_t limit, int64_t now_ms,
		    struct ratelimit_decision *out);

/* The decision when the state cannot be read (R3, L9): allowed, remaining = limit,
 * estimated 0, reset from now (L5), no Retry-After. */
void ratelimit_fail_open(uint32_t limit, int64_t now_ms, struct ratelimit_decision *out);

/* Writes the 429 body's message for a refusal, "Rate limit exceeded: 600 requests per minute
 * for this organization. Retry in 12s." (R2), NUL-terminated, into buf. Returns its length as
 * snprintf() does (>= size means it was cut). */
int ratelimit_message(const struct ratelimit_decision *d, char *buf, size_t size);

#endif
