/* Rate limiter arithmetic (SPEC R1-R3, readings L1-L9 in dispatcher/core/ratelimit.h):
 *   - worked_example: the source document's example (400 last minute, 15 s in, 150 this minute
 *     -> 450, remaining 150; at 30 s -> 350) and its 429 (Reset 12, Retry-After 12, the body);
 *   - each default limit below, at and above, with and without a previous window;
 *   - window boundaries (0, 59.999 s, 60 s), a previous window older than one window, time
 *     going backwards; huge counts; invalid arguments; fail open; bucket names;
 *   - random_against_reference: random traffic (fixed seed) through ratelimit_check() against a
 *     reference that keeps every admitted request's time and re-derives the counts, Remaining
 *     and Retry-After by brute force; no calendar window ever admits more than the limit.
 */
#include "ratelimit.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <inttypes.h>
#include <string.h>
#include <cmocka.h>

#define WMS  RATELIMIT_WINDOW_MS
#define MIN0 ((int64_t)28000000 * WMS) /* some window's start, in Unix ms */

static struct ratelimit_decision decide(uint64_t prev, uint64_t cur, uint32_t limit, uint32_t e)
{
	struct ratelimit_decision d;

	memset(&d, 0xa5, sizeof(d));
	assert_int_equal(ratelimit_decide(prev, cur, limit, e, &d), 0);
	assert_int_equal(d.limit, limit);
	return d;
}

/* A state with `prev` requests allowed in the window before now's and `cur` in now's. */
static void fill(struct ratelimit_state *st, uint32_t limit, int64_t now, uint32_t prev,
		 uint32_t cur)
{
	int64_t start = now - now % WMS;
	struct ratelimit_decision d;

	ratelimit_state_init(st, start - WMS);
	for (uint32_t i = 0; i < prev; i++) {
		assert_int_equal(ratelimit_check(st, limit, start - WMS + i, &d), 0);
		assert_true(d.allowed);
	}
	for (uint32_t i = 0; i < cur; i++) {
		assert_int_equal(ratelimit_check(st, limit, start, &d), 0);
		assert_true(d.allowed);
	}
	assert_int_equal(st->previous, prev);
	assert_int_equal(st->current, cur);
}

static void worked_example(void **state)
{
	struct ratelimit_state st;
	struct ratelimit_decision d;
	char msg[160];
	int n;

	/* 400 last minute, 15 s in, the 150th request of this minute (L1): 300 + 150 = 450. */
	d = decide(400, 149, 600, 15000);
	assert_true(d.allowed);
	assert_int_equal(d.estimated, 450);
	assert_int_equal(d.remaining, 150);
	assert_int_equal(d.reset_s, 45);
	assert_int_equal(d.retry_after_s, 0);
	/* Fifteen seconds later the same history weighs 0.5: 200 + 150 = 350. */
	d = decide(400, 149, 600, 30000);
	assert_true(d.allowed);
	assert_int_equal(d.estimated, 350);
	assert_int_equal(d.remaining, 250);
	assert_int_equal(d.reset_s, 30);

	/* The same through the state: the request counted makes 150 this minute. */
	fill(&st, 600, MIN0 + 15000, 400, 149);
	assert_int_equal(ratelimit_check(&st, 600, MIN0 + 15000, &d), 0);
	assert_true(d.allowed);
	assert_int_equal(d.estimated, 450);
	assert_int_equal(d.remaining, 150);
	assert_int_equal(st.current, 150);
	/* The next request at the same instant is the 151st: remaining 149. */
	assert_int_equal(ratelimit_check(&st, 600, MIN0 + 15000, &d), 0);
	assert_int_equal(d.estimated, 451);
	assert_int_equal(d.remaining, 149);
	/* And 149 more fit at that instant, exactly (L4). */
	for (int i = 0; i < 149; i++) {
		assert_int_equal(ratelimit_check(&st, 600, MIN0 + 15000, &d), 0);
		assert_true(d.allowed);
	}
	assert_int_equal(d.remaining, 0);
	assert_int_equal(ratelimit_check(&st, 600, MIN0 + 15000, &d), 0);
	assert_false(d.allowed);
	assert_int_equal(st.current, 300); /* the refusal was not counted (L2) */

	/* The document's 429: Limit 600, Remaining 0, Reset 12, Retry-After 12. 500 last minute,
	 * 599 this one, 48 s in: 100 + 600 = 700; it fits again exactly at the minute. */
	d = decide(500, 599, 600, 48000);
	assert_false(d.allowed);
	assert_int_equal(d.estimated, 700);
	assert_int_equal(d.remaining, 0);
	assert_int_equal(d.reset_s, 12);
	assert_int_equal(d.retry_after_s, 12);
	n = ratelimit_message(&d, msg, sizeof(msg));
	assert_int_equal(n, strlen(msg));
	assert_string_equal(msg, "Rate limit exceeded: 600 requests per minute for this "
				 "organization. Retry in 12s.");
}

static void each_limit_below_at_above(void **state)
{
	struct ratelimit_limits lim;
	struct ratelimit_state st;
	struct ratelimit_decision d;

	ratelimit_limits_default(&lim);
	assert_int_equal(lim.per_minute[RATELIMIT_CALLS_CREATE], 600);
	assert_int_equal(lim.per_minute[RATELIMIT_EXECUTIONS_LIST], 600);
	assert_int_equal(lim.per_minute[RATELIMIT_DEFAULT], 1000);
	for (unsigned b = 0; b < RATELIMIT_BUCKETS; b++) {
		uint32_t l = lim.per_minute[b];

		/* No previous window: below, at, above. */
		d = decide(0, l - 2, l, 0);
		assert_true(d.allowed);
		assert_int_equal(d.remaining, 1);
		d = decide(0, l - 1, l, 0);
		assert_true(d.allowed);
		assert_int_equal(d.estimated, l);
		assert_int_equal(d.remaining, 0);
		d = decide(0, l, l, 0);
		assert_false(d.allowed);
		assert_int_equal(d.estimated, l + 1);
		/* Only the next window helps, and there `l` weighs 1 at its start: the limit
		 * itself fits after (W - (l-1)W/l) ms = W/l ms into it. */
		assert_int_equal(d.retry_after_s, 60 + (WMS / l + 999) / 1000);

		/* Half a minute in, 2l last minute weighs l: nothing more fits. */
		d = decide(2 * (uint64_t)l, 0, l, 30000);
		assert_false(d.allowed);
		assert_int_equal(d.estimated, l + 1);
		/* 2l x (W - e')/W <= l - 1: e' = W - floor((l-1)W / 2l). */
		assert_int_equal(d.retry_after_s,
				 (WMS - (uint64_t)(l - 1) * WMS / (2 * l) - 30000 + 999) / 1000);
		d = decide(2 * (uint64_t)l - 2, 0, l, 30000);
		assert_true(d.allowed);
		assert_int_equal(d.estimated, l);
		assert_int_equal(d.remaining, 0);
		d = decide(2 * (uint64_t)l - 4, 0, l, 30000);
		assert_true(d.allowed);
		assert_int_equal(d.remaining, 1);

		/* From empty, exactly l requests in one instant, then refusals. */
		ratelimit_state_init(&st, MIN0);
		for (uint32_t i = 0; i < l; i++) {
			assert_int_equal(ratelimit_check(&st, l, MIN0 + 1, &d), 0);
			assert_true(d.allowed);
			assert_int_equal(d.remaining, l - 1 - i);
		}
		assert_int_equal(ratelimit_check(&st, l, MIN0 + 1, &d), 0);
		assert_false(d.allowed);
		assert_int_equal(st.current, l);
	}
}

static void window_boundaries(void **state)
{
	struct ratelimit_state st;
	struct ratelimit_decision d;

	/* e = 0: the previous window weighs 1; Reset is the whole minute. */
	d = decide(300, 0, 600, 0);
	assert_int_equal(d.estimated, 301);
	assert_int_equal(d.reset_s, 60);
	d = decide(600, 0, 600, 0);
	assert_false(d.allowed);
	/* 600 x (W - e') <= 599 W: e' = W - 59900 = 100 ms in, so 1 s. */
	assert_int_equal(d.retry_after_s, 1);
	/* e = 59.999 s: weight 1/60000, rounded up to one whole request (L3). */
	d = decide(60000, 0, 600, 59999);
	assert_int_equal(d.estimated, 2);
	assert_int_equal(d.reset_s, 1);
	d = decide(1, 0, 1, 59999);
	assert_false(d.allowed);
	assert_int_equal(d.estimated, 2);
	assert_int_equal(d.retry_after_s, 1);
	/* Reset rounds up: 0.5 s left is 1, 11.5 s is 12. */
	assert_int_equal(decide(0, 0, 5, 59500).reset_s, 1);
	assert_int_equal(decide(0, 0, 5, 48500).reset_s, 12);
	assert_int_equal(decide(0, 0, 5, 48000).reset_s, 12);

	/* Through the state: 10 at 59.999 s of a window, then the next window at 0. */
	fill(&st, 10, MIN0 + 59999, 0, 10);
	assert_int_equal(ratelimit_check(&st, 10, MIN0 + 59999, &d), 0);
	assert_false(d.allowed);
	assert_int_equal(d.reset_s, 1);
	/* Next window at W - floor(9W/10) = 6 s: 0.001 + 6 s -> 7 s. */
	assert_int_equal(d.retry_after_s, 7);
	assert_int_equal(ratelimit_check(&st, 10, MIN0 + WMS, &d), 0);
	assert_false(d.allowed); /* 10 x 1 + 1 */
	assert_int_equal(st.previous, 10);
	assert_int_equal(st.current, 0);
	assert_int_equal(ratelimit_check(&st, 10, MIN0 + WMS + 5999, &d), 0);
	assert_false(d.allowed);
	assert_int_equal(ratelimit_check(&st, 10, MIN0 + WMS + 6000, &d), 0);
	assert_true(d.allowed);
	assert_int_equal(d.estimated, 10);
}

static void old_window_and_time_backwards(void **state)
{
	struct ratelimit_state st;
	struct ratelimit_decision d;

	/* A previous window older than one window weighs 0 (L7). */
	fill(&st, 600, MIN0, 500, 100);
	assert_int_equal(ratelimit_roll(&st, MIN0 + 2 * WMS), 0);
	assert_int_equal(st.previous, 0);
	assert_int_equal(st.current, 0);
	fill(&st, 600, MIN0, 500, 100);
	assert_int_equal(ratelimit_check(&st, 600, MIN0 + 2 * WMS + 1, &d), 0);
	assert_int_equal(d.estimated, 1);
	assert_int_equal(d.remaining, 599);
	/* One window later: the current becomes the previous. */
	fill(&st, 600, MIN0, 500, 100);
	assert_int_equal(ratelimit_roll(&st, MIN0 + WMS + 30000), 30000);
	assert_int_equal(st.previous, 100);
	assert_int_equal(st.current, 0);
	/* Same window: nothing moves. */
	assert_int_equal(ratelimit_roll(&st, MIN0 + WMS + 40000), 40000);
	assert_int_equal(st.previous, 100);

	/* Time before the state's window: its start (weight 1), counts kept. */
	assert_int_equal(ratelimit_roll(&st, MIN0 - 5), 0);
	assert_int_equal(st.window, MIN0 / WMS + 1);
	assert_int_equal(ratelimit_check(&st, 600, MIN0 - 5, &d), 0);
	assert_int_equal(d.estimated, 101);
	assert_int_equal(d.reset_s, 60);
	assert_int_equal(st.current, 1);
	/* Negative time is taken as 0. */
	ratelimit_state_init(&st, -1000);
	assert_int_equal(st.window, 0);
	assert_int_equal(ratelimit_check(&st, 1, -1000, &d), 0);
	assert_true(d.allowed);
	assert_int_equal(d.reset_s, 60);
}

static void huge_counts(void **state)
{
	const uint64_t cap = RATELIMIT_COUNT_CAP;
	const uint32_t lmax = RATELIMIT_LIMIT_MAX;
	struct ratelimit_decision d;
	struct ratelimit_state st;

	/* Counts past the cap: refused, estimated saturates, no wrap at any elapsed time. */
	for (uint32_t e = 0; e < WMS; e += 7919) {
		d = decide(UINT64_MAX, UINT64_MAX, lmax, e);
		assert_false(d.allowed);
		assert_true(d.estimated > lmax);
		assert_int_equal(d.retry_after_s, 60 + d.reset_s);
		d = decide(UINT64_MAX, 0, lmax, e);
		assert_false(d.allowed);
		assert_true(d.estimated > lmax);
		/* The previous window must weigh 0: the minute's end. */
		assert_int_equal(d.retry_after_s, d.reset_s);
		d = decide(0, UINT64_MAX, 1, e);
		assert_false(d.allowed);
		assert_int_equal(d.retry_after_s, 60 + d.reset_s);
	}
	/* At the smallest weight a count at the cap is still over the largest limit (L8), and a
	 * clamped count decides as the exact one. */
	d = decide(cap, 0, lmax, WMS - 1);
	assert_false(d.allowed);
	assert_int_equal(d.estimated, cap / WMS + 2);
	assert_int_equal(d.retry_after_s, 1);
	d = decide(cap - 1, 0, lmax, WMS - 1);
	assert_false(d.allowed);
	d = decide((uint64_t)lmax * WMS, 0, lmax, WMS - 1);
	assert_false(d.allowed);
	assert_int_equal(d.estimated, (uint64_t)lmax + 1);
	d = decide((uint64_t)(lmax - 1) * WMS, 0, lmax, WMS - 1);
	assert_true(d.allowed);
	assert_int_equal(d.estimated, lmax);
	assert_int_equal(d.remaining, 0);
	/* The largest limit, exactly at it, from a large current count. */
	d = decide(0, (uint64_t)lmax - 1, lmax, 0);
	assert_true(d.allowed);
	assert_int_equal(d.remaining, 0);
	d = decide(0, (uint64_t)lmax, lmax, 0);
	assert_false(d.allowed);
	assert_int_equal(d.estimated, (uint64_t)lmax + 1);
	/* A state carried past the cap still decides. */
	st.window = MIN0 / WMS;
	st.previous = UINT64_MAX;
	st.current = UINT64_MAX;
	assert_int_equal(ratelimit_check(&st, 600, MIN0 + 1, &d), 0);
	assert_false(d.allowed);
	assert_int_equal(st.current, UINT64_MAX);
}

static void invalid_and_fail_open(void **state)
{
	struct ratelimit_decision d;
	struct ratelimit_state st;
	enum ratelimit_bucket b;
	char msg[32];

	assert_int_equal(ratelimit_decide(0, 0, 0, 0, &d), -EINVAL);
	assert_int_equal(ratelimit_decide(0, 0, (uint32_t)INT32_MAX + 1, 0, &d), -EINVAL);
	assert_int_equal(ratelimit_decide(0, 0, 10, WMS, &d), -EINVAL);
	ratelimit_state_init(&st, MIN0);
	assert_int_equal(ratelimit_check(&st, 0, MIN0, &d), -EINVAL);
	assert_int_equal(st.current, 0);

	/* R3: allowed, the full limit remaining, Reset from the clock. */
	ratelimit_fail_open(600, MIN0 + 48000, &d);
	assert_true(d.allowed);
	assert_int_equal(d.limit, 600);
	assert_int_equal(d.remaining, 600);
	assert_int_equal(d.reset_s, 12);
	assert_int_equal(d.retry_after_s, 0);

	assert_string_equal(ratelimit_bucket_name(RATELIMIT_CALLS_CREATE), "calls.create");
	assert_string_equal(ratelimit_bucket_name(RATELIMIT_EXECUTIONS_LIST), "executions.list");
	assert_string_equal(ratelimit_bucket_name(RATELIMIT_DEFAULT), "default");
	assert_null(ratelimit_bucket_name(RATELIMIT_BUCKETS));
	assert_int_equal(ratelimit_bucket_parse("executions.list", &b), 0);
	assert_int_equal(b, RATELIMIT_EXECUTIONS_LIST);
	assert_int_equal(ratelimit_bucket_parse("calls", &b), -EINVAL);
	assert_int_equal(ratelimit_bucket_parse(NULL, &b), -EINVAL);

	/* A short buffer is cut and says so, as snprintf. */
	d.limit = 600;
	d.retry_after_s = 12;
	assert_true(ratelimit_message(&d, msg, sizeof(msg)) >= (int)sizeof(msg));
	assert_int_equal(strlen(msg), sizeof(msg) - 1);
}

/* ---- random traffic against a reference ---- */

struct rng {
	uint64_t s;
};

static uint64_t rnd(struct rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint32_t below(struct rng *r, uint32_t n)
{
	return n ? (uint32_t)(rnd(r) % n) : 0;
}

/* The reference: the times of every admitted request, in order. */
struct ref {
	int64_t t[20000];
	size_t n;
	uint32_t limit;
};

/* Admitted requests before `to` (the log is sorted): a binary search. */
static uint64_t count_before(const struct ref *m, int64_t to)
{
	size_t lo = 0, hi = m->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (m->t[mid] < to)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* R1 written out: would a request at t be allowed if `extra` more were admitted at t first?
 * prev x (W - e)/W + cur + 1 <= limit, multiplied out by W, with the counts taken from the
 * log. */
static bool ref_allows(const struct ref *m, int64_t t, uint64_t extra)
{
	int64_t start = t - t % WMS;
	uint64_t prev = count_before(m, start) - count_before(m, start - WMS);
	uint64_t cur = count_before(m, t + 1) - count_before(m, start) + extra;

	return prev * (uint64_t)(start + WMS - t) + (cur + 1) * WMS <= (uint64_t)m->limit * WMS;
}

/* Checks one decision at t against the reference, then records it. */
static void ref_step(struct ref *m, int64_t t, const struct ratelimit_decision *d)
{
	int64_t start = t - t % WMS;
	uint32_t k;

	assert_int_equal(d->allowed, ref_allows(m, t, 0));
	assert_int_equal(d->reset_s, (start + WMS - t + 999) / 1000);
	if (d->allowed) {
		/* Remaining: exactly that many more would be allowed at t. */
		for (k = 0; ref_allows(m, t, k + 1); k++)
			;
		assert_int_equal(d->remaining, k);
		assert_int_equal(d->retry_after_s, 0);
		assert_true(m->n < sizeof(m->t) / sizeof(m->t[0]));
		m->t[m->n++] = t;
		/* No calendar window ever holds more than the limit. */
		assert_true(count_before(m, start + WMS) - count_before(m, start) <= m->limit);
		return;
	}
	assert_int_equal(d->remaining, 0);
	/* Retry-After: the first whole second from t at which a request is allowed. */
	for (k = 1; !ref_allows(m, t + 1000 * (int64_t)k, 0); k++)
		assert_true(k <= 120);
	assert_int_equal(d->retry_after_s, k);
}

static int64_t next_time(struct rng *r, int64_t t)
{
	uint32_t x = below(r, 100);

	if (x < 40)
		return t; /* the same millisecond */
	if (x < 70)
		return t + below(r, 200);
	if (x < 85)
		return t + below(r, 5000);
	if (x < 90)
		return t + below(r, 2 * WMS);
	if (x < 92)
		return t + 2 * WMS + below(r, 3 * WMS); /* past the previous window */
	/* Onto a window's last millisecond, its first, or the one after. */
	return t - t % WMS + WMS - 1 + below(r, 3);
}

static void random_against_reference(void **state)
{
	static const uint32_t limits[] = { 1, 2, 3, 7, 10, 25, 60, 600 };
	struct rng r = { 20251010 };
	struct ratelimit_state st;
	struct ratelimit_decision d;
	uint64_t allowed = 0, refused = 0;
	static struct ref m;

	for (int seq = 0; seq < 400; seq++) {
		int64_t t = MIN0 + below(&r, WMS);
		uint32_t n = 2000 + below(&r, 4000);

		m.n = 0;
		m.limit = limits[below(&r, sizeof(limits) / sizeof(limits[0]))];
		ratelimit_state_init(&st, t);
		for (uint32_t i = 0; i < n; i++) {
			t = next_time(&r, t);
			assert_int_equal(ratelimit_check(&st, m.limit, t, &d), 0);
			ref_step(&m, t, &d);
			allowed += d.allowed;
			refused += !d.allowed;
		}
	}
	print_message("%" PRIu64 " allowed, %" PRIu64 " refused\n", allowed, refused);
	/* Both answers were exercised in quantity. */
	assert_true(allowed > 100000);
	assert_true(refused > 100000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(worked_example),
		cmocka_unit_test(each_limit_below_at_above),
		cmocka_unit_test(window_boundaries),
		cmocka_unit_test(old_window_and_time_backwards),
		cmocka_unit_test(huge_counts),
		cmocka_unit_test(invalid_and_fail_open),
		cmocka_unit_test(random_against_reference),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
