/* The API rate limiter's Redis side (SPEC R1-R3; dispatcher/api/README.md, "Rate limiter").
 *
 * One check = one EVALSHA of ratelimit.lua = one round trip. The state is one hash per
 * organisation and bucket, never per key: dsp:v1:{o:<org>}:rl:<bucket> (the organisation's
 * hash tag, so a cluster keeps it on the org's slot; the gate's key layout), fields w (window),
 * c (this window's count), p (the previous window's), with PEXPIRE 120 s refreshed by every
 * allowed request. The script reads Redis's TIME (one clock for the fleet, never the client's)
 * and computes exactly core/ratelimit.c's ratelimit_check(): the readings L1-L9 of
 * core/ratelimit.h hold word for word (estimated counts the request being decided; only allowed
 * requests are counted; Reset and Retry-After as stated there).
 *
 * Fails open (R3, L9): when Redis cannot answer, the check is allowed with remaining = limit
 * (ratelimit_fail_open(), Reset from the local clock) and `fail_open` set. That is the case
 * when the connection is down (-ENOTCONN), the command is lost (-ECONNRESET, -ETIMEDOUT from the
 * connection's own command deadline), the reply is an error or malformed (-EPROTO), the limiter
 * is closed (-ECANCELED), and when no reply came within the limiter's deadline (-ETIMEDOUT,
 * options.deadline_ms, 100 ms by default): the request does not wait for a slow Redis.
 * A reply that arrives after its deadline is ignored (counted in late_replies); the script has
 * run, so if it allowed the request that request IS counted in Redis although the client was
 * already answered fail-open - at most one extra count per late check, which only makes the
 * limiter stricter for the rest of the window.
 *
 * Tests pin the clock with the hash's clock_ms field (ms; the lane hash's convention):
 * HSET dsp:v1:{o:<org>}:rl:<bucket> clock_ms <ms>. Production never writes it.
 *
 * Async contract: if ratelimit_redis_check() returns an error the callback is never called;
 * otherwise it is called exactly once, never from inside ratelimit_redis_check() (a check that
 * cannot be sent fails open on the next loop turn). The result is borrowed for the callback.
 * Not thread-safe: one loop.
 */
#ifndef DSP_API_RATELIMIT_REDIS_H
#define DSP_API_RATELIMIT_REDIS_H

#include "ratelimit.h"
#include "redis_conn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#define RATELIMIT_REDIS_DEADLINE_MS 100 /* default reply deadline */
#define RATELIMIT_REDIS_TTL_MS	    120000
#define RATELIMIT_REDIS_ORG_MAX	    64 /* organisation ids: ^[A-Za-z0-9_-]{1,64}$ */

struct ratelimit_redis;

struct ratelimit_redis_options {
	uint64_t deadline_ms; /* a check unanswered this long fails open; 0: the default */
};

/* One check's outcome: the decision (allowed, limit, estimated, remaining, reset_s,
 * retry_after_s as core/ratelimit.h defines them) and how it was reached. */
struct ratelimit_result {
	struct ratelimit_decision d;
	enum ratelimit_bucket bucket;
	bool fail_open; /* Redis did not answer: d is ratelimit_fail_open()'s */
	int status;	/* 0, or why it failed open (see above) */
	int64_t now_ms; /* the clock decided on: Redis's, or the local one when failing open */
};

typedef void (*ratelimit_redis_cb)(const struct ratelimit_result *r, void *data);

/* Counters for /metrics, since creation. */
struct ratelimit_redis_stats {
	uint64_t checks[RATELIMIT_BUCKETS];   /* every check answered, fail-opens included */
	uint64_t refusals[RATELIMIT_BUCKETS]; /* checks refused (the 429s) */
	uint64_t fail_opens;		      /* checks allowed because Redis did not answer */
	uint64_t fail_open_deadline;	      /* of which: past the deadline */
	uint64_t late_replies;		      /* replies that came after their deadline */
};

/* Adds ratelimit.lua to reg (before its connections start). Returns as redis_scripts_add(), or
 * -ENOENT when the script is missing from the build. */
int ratelimit_redis_scripts_register(struct redis_scripts *reg);

/* Creates the limiter on conn (borrowed, must outlive it; its registry reg must hold the
 * script). opts may be NULL (defaults). *out is owned by the caller (ratelimit_redis_close()).
 * Returns 0, -EINVAL, -ENOENT (script not registered) or -ENOMEM. */
int ratelimit_redis_new(uv_loop_t *loop, struct redis_conn *conn, const struct redis_scripts *reg,
			const struct ratelimit_redis_options *opts, struct ratelimit_redis **out);

/* Answers every pending check fail-open (status -ECANCELED; their callbacks run inside this
 * call), then frees rl once its timer is closed. Replies still in flight are dropped. rl must
 * not be used after this call; NULL is ignored. */
void ratelimit_redis_close(struct ratelimit_redis *rl);

/* Writes the state key of (org, bucket) into buf. Returns its length, -EINVAL (bad org or
 * bucket) or -ENOSPC. */
int ratelimit_redis_key(const char *org, enum ratelimit_bucket bucket, char *buf, size_t size);

/* Checks one request of org in bucket against limit (1..RATELIMIT_LIMIT_MAX, the organisation's
 * rate_*_per_minute) and counts it when allowed. Returns 0 (cb will be called), -EINVAL (bad
 * org, bucket or limit, no cb) or -ENOMEM. */
int ratelimit_redis_check(struct ratelimit_redis *rl, const char *org, enum ratelimit_bucket bucket,
			  uint32_t limit, ratelimit_redis_cb cb, void *data);

/* The counters. */
void ratelimit_redis_get_stats(const struct ratelimit_redis *rl, struct ratelimit_redis_stats *out);

#endif
