/* The API rate limiter's arithmetic (SPEC R1-R3). The readings L1-L9 head ratelimit.h. */
#include "ratelimit.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#define W ((uint64_t)RATELIMIT_WINDOW_MS)

static const char *const bucket_names[RATELIMIT_BUCKETS] = {
	[RATELIMIT_DEFAULT] = "default",
	[RATELIMIT_CALLS_CREATE] = "calls.create",
	[RATELIMIT_EXECUTIONS_LIST] = "executions.list",
};

static const uint32_t bucket_defaults[RATELIMIT_BUCKETS] = {
	[RATELIMIT_DEFAULT] = 1000,
	[RATELIMIT_CALLS_CREATE] = 600,
	[RATELIMIT_EXECUTIONS_LIST] = 600,
};

const char *ratelimit_bucket_name(enum ratelimit_bucket bucket)
{
	if ((unsigned)bucket >= RATELIMIT_BUCKETS)
		return NULL;
	return bucket_names[bucket];
}

int ratelimit_bucket_parse(const char *name, enum ratelimit_bucket *out)
{
	for (unsigned i = 0; name && i < RATELIMIT_BUCKETS; i++) {
		if (strcmp(name, bucket_names[i]) == 0) {
			*out = (enum ratelimit_bucket)i;
			return 0;
		}
	}
	return -EINVAL;
}

void ratelimit_limits_default(struct ratelimit_limits *limits)
{
	memcpy(limits->per_minute, bucket_defaults, sizeof(bucket_defaults));
}

static uint64_t clamp_count(uint64_t n)
{
	return n < RATELIMIT_COUNT_CAP ? n : RATELIMIT_COUNT_CAP;
}

static uint32_t ceil_seconds(uint64_t ms)
{
	return (uint32_t)((ms + 999) / 1000);
}

/* Milliseconds from e until previous x (W - e')/W + current + 1 <= limit (L6), for a refused
 * request: p and c clamped, c not counting the request. */
static uint64_t wait_ms(uint64_t p, uint64_t c, uint64_t limit, uint64_t e)
{
	uint64_t fits;

	if (c + 1 <= limit) {
		/* Within this window: p x (W - e') <= (limit - c - 1) x W. Refused means p > 0 and
		 * W - e > fits, so the answer is > 0; fits >= 0 so e' <= W, where p weighs 0. */
		fits = (limit - c - 1) * W / p;
		return W - fits - e;
	}
	/* In the next window, where c is the previous count and nothing is current yet:
	 * c x (W - e'') <= (limit - 1) x W; c >= limit so fits < W and e'' >= 1. */
	fits = (limit - 1) * W / c;
	return (W - e) + (W - fits);
}

int ratelimit_decide(uint64_t previous, uint64_t current, uint32_t limit, uint32_t elapsed_ms,
		     struct ratelimit_decision *out)
{
	uint64_t p = clamp_count(previous), c = clamp_count(current);
	uint64_t left, scaled;

	if (limit == 0 || limit > RATELIMIT_LIMIT_MAX || elapsed_ms >= W)
		return -EINVAL;
	left = W - elapsed_ms;
	/* Each term is below 2^63 (L8), so the sum fits in 64 bits. */
	scaled = p * left + (c + 1) * W;
	out->limit = limit;
	out->estimated = scaled / W + (scaled % W != 0);
	out->reset_s = ceil_seconds(left);
	out->allowed = out->estimated <= limit;
	if (out->allowed) {
		out->remaining = (uint32_t)(limit - out->estimated);
		out->retry_after_s = 0;
	} else {
		out->remaining = 0;
		out->retry_after_s = ceil_seconds(wait_ms(p, c, limit, elapsed_ms));
	}
	return 0;
}

static int64_t window_of(int64_t now_ms)
{
	return now_ms > 0 ? now_ms / RATELIMIT_WINDOW_MS : 0;
}

void ratelimit_state_init(struct ratelimit_state *st, int64_t now_ms)
{
	st->window = window_of(now_ms);
	st->current = 0;
	st->previous = 0;
}

uint32_t ratelimit_roll(struct ratelimit_state *st, int64_t now_ms)
{
	int64_t w = window_of(now_ms);

	if (w < st->window)
		return 0;
	if (w == st->window + 1) {
		st->previous = st->current;
		st->current = 0;
	} else if (w > st->window) {
		st->previous = 0;
		st->current = 0;
	}
	st->window = w;
	return now_ms > 0 ? (uint32_t)(now_ms % RATELIMIT_WINDOW_MS) : 0;
}

int ratelimit_check(struct ratelimit_state *st, uint32_t limit, int64_t now_ms,
		    struct ratelimit_decision *out)
{
	uint32_t e = ratelimit_roll(st, now_ms);
	int rc = ratelimit_decide(st->previous, st->current, limit, e, out);

	/* Allowed implies current + 1 <= limit, so this cannot overflow. */
	if (rc == 0 && out->allowed)
		st->current++;
	return rc;
}

void ratelimit_fail_open(uint32_t limit, int64_t now_ms, struct ratelimit_decision *out)
{
	uint32_t e = now_ms > 0 ? (uint32_t)(now_ms % RATELIMIT_WINDOW_MS) : 0;

	out->allowed = true;
	out->limit = limit;
	out->estimated = 0;
	out->remaining = limit;
	out->reset_s = ceil_seconds(W - e);
	out->retry_after_s = 0;
}

int ratelimit_message(const struct ratelimit_decision *d, char *buf, size_t size)
{
	return snprintf(buf, size,
			"Rate limit exceeded: %" PRIu32
			" requests per minute for this organization. Retry in %" PRIu32 "s.",
			d->limit, d->retry_after_s);
}
