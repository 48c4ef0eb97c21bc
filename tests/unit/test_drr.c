/* Unit and property tests of the deficit-round-robin selector (SPEC C8), alone and driven by
 * the real gate (fairshare_gate.h) as the dispatcher drives it. */
#include "drr.h"
#include "fairshare_gate.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#define N 16

struct readiness {
	bool ready[N];
	bool blocked;	   /* every campaign answers DRR_BLOCKED */
	unsigned calls[N]; /* ready_cb calls in the current drr_next */
};

static enum drr_ready ready_cb(void *ctx, uint32_t slot)
{
	struct readiness *r = ctx;

	r->calls[slot]++;
	if (r->blocked)
		return DRR_BLOCKED;
	return r->ready[slot] ? DRR_READY : DRR_NOT_READY;
}

static uint32_t pick(struct drr *d, struct readiness *r)
{
	uint32_t slot = DRR_NONE;

	memset(r->calls, 0, sizeof(r->calls));
	assert_int_equal(drr_next(d, ready_cb, r, &slot), 0);
	for (int i = 0; i < N; i++)
		assert_true(r->calls[i] <= 1);
	return slot;
}

static void rejects_bad_input(void **state)
{
	struct drr d;
	struct drr_entry e[2];
	uint32_t slot;
	struct readiness r = { .ready = { false } };

	assert_int_equal(drr_init(&d, e, 2, 0, 0), -EINVAL);
	assert_int_equal(drr_init(&d, NULL, 2, 1, 0), -EINVAL);
	assert_int_equal(drr_init(&d, e, 2, 2, UINT32_MAX - 1), -EINVAL);
	assert_int_equal(drr_init(&d, e, 2, 1, 1), 0);
	assert_int_equal(drr_next(&d, ready_cb, &r, &slot), -EAGAIN); /* empty ring */
	assert_int_equal(drr_add(&d, 2), -EINVAL);
	assert_int_equal(drr_add(&d, 1), 0);
	assert_int_equal(drr_add(&d, 1), -EEXIST);
	assert_int_equal(drr_remove(&d, 0), -ENOENT);
	assert_int_equal(drr_remove(&d, 5), -EINVAL);
	assert_true(drr_contains(&d, 1));
	assert_false(drr_contains(&d, 0));
	assert_int_equal(drr_next(&d, NULL, &r, &slot), -EINVAL);
}

static void equal_turns(void **state)
{
	struct drr d;
	struct drr_entry e[N];
	struct readiness r = { .ready = { true, true, true } };
	const uint32_t want1[] = { 0, 1, 2, 0, 1, 2, 0 };
	const uint32_t want3[] = { 0, 0, 0, 1, 1, 1, 2, 2, 2, 0 };

	drr_init(&d, e, N, 1, 1);
	for (uint32_t i = 0; i < 3; i++)
		drr_add(&d, i);
	for (size_t i = 0; i < sizeof(want1) / sizeof(want1[0]); i++)
		assert_int_equal(pick(&d, &r), want1[i]);
	drr_init(&d, e, N, 3, 3);
	for (uint32_t i = 0; i < 3; i++)
		drr_add(&d, i);
	for (size_t i = 0; i < sizeof(want3) / sizeof(want3[0]); i++)
		assert_int_equal(pick(&d, &r), want3[i]);
}

/* A campaign with a huge old backlog does not fill a page of 50: the other gets half. */
static void old_backlog_does_not_fill_page(void **state)
{
	struct drr d;
	struct drr_entry e[N];
	struct readiness r = { .ready = { true, true } };
	unsigned got[2] = { 0, 0 };

	drr_init(&d, e, N, 1, 1);
	drr_add(&d, 0); /* the old campaign, on the ring first */
	drr_add(&d, 1);
	for (int i = 0; i < 50; i++)
		got[pick(&d, &r)]++;
	assert_int_equal(got[0], 25);
	assert_int_equal(got[1], 25);
}

/* A campaign that could not use its turn gets the remainder next time, capped at carry_max. */
static void carry_is_bounded(void **state)
{
	struct drr d;
	struct drr_entry e[N];
	struct readiness r = { .ready = { false, true } };
	uint32_t slot;

	drr_init(&d, e, N, 2, 2);
	drr_add(&d, 0);
	drr_add(&d, 1);
	for (int round = 0; round < 5; round++) { /* 0 skipped five times: carry stays 2 */
		assert_int_equal(pick(&d, &r), 1);
		assert_int_equal(pick(&d, &r), 1);
		assert_true(e[0].deficit <= 2);
	}
	r.ready[0] = true;
	for (int i = 0; i < 4; i++) /* quantum 2 + carry 2 */
		assert_int_equal(pick(&d, &r), 0);
	assert_int_equal(pick(&d, &r), 1);
	/* Nobody ready: -EAGAIN, each offered once, carries still bounded. */
	r.ready[0] = r.ready[1] = false;
	memset(r.calls, 0, sizeof(r.calls));
	assert_int_equal(drr_next(&d, ready_cb, &r, &slot), -EAGAIN);
	assert_int_equal(r.calls[0], 1);
	assert_int_equal(r.calls[1], 1);
	assert_true(e[0].deficit <= 2 && e[1].deficit <= 2);
}

/* A newcomer joins at the end of the round; removing the campaign whose turn it is passes on. */
static void join_and_leave(void **state)
{
	struct drr d;
	struct drr_entry e[N];
	struct readiness r = { .ready = { true, true, true } };

	drr_init(&d, e, N, 2, 2);
	drr_add(&d, 0);
	drr_add(&d, 1);
	assert_int_equal(pick(&d, &r), 0);
	drr_add(&d, 2); /* mid-turn of 0: goes after 1 */
	assert_int_equal(pick(&d, &r), 0);
	assert_int_equal(pick(&d, &r), 1);
	assert_int_equal(pick(&d, &r), 1);
	assert_int_equal(pick(&d, &r), 2);
	assert_int_equal(drr_remove(&d, 2), 0); /* 2 had the turn */
	assert_int_equal(pick(&d, &r), 0);
	assert_int_equal(drr_remove(&d, 0), 0);
	assert_int_equal(drr_remove(&d, 1), 0);
	assert_int_equal(d.count, 0);
	assert_int_equal(d.head, DRR_NONE);
}

static uint64_t rnd(uint64_t *s)
{
	uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Campaigns 0..3 are always backlogged and ready; the others flicker, join and leave. Over any
 * window of picks, the always-ready campaigns' counts differ by at most one quantum. */
static void backlogged_differ_by_one_quantum(void **state)
{
	uint64_t seed = 8675309;

	for (int trial = 0; trial < 40; trial++) {
		const uint32_t qs[] = { 1, 2, 3, 5 };
		uint32_t q = qs[trial % 4], carry = (uint32_t)(trial / 4 % 3) * q;
		struct drr d;
		struct drr_entry e[N];
		struct readiness r = { .ready = { false } };
		int64_t diff[4][4] = { { 0 } }, lo[4][4] = { { 0 } }, hi[4][4] = { { 0 } };

		drr_init(&d, e, N, q, carry);
		for (uint32_t i = 0; i < N; i++)
			if (i < 4 || rnd(&seed) % 2)
				drr_add(&d, i);
		for (uint32_t i = 0; i < 4; i++)
			r.ready[i] = true;
		for (int t = 0; t < 20000; t++) {
			uint32_t other = 4 + (uint32_t)(rnd(&seed) % (N - 4)), c;

			r.ready[other] = rnd(&seed) % 3 == 0;
			if (rnd(&seed) % 50 == 0)
				drr_contains(&d, other) ? drr_remove(&d, other)
							: drr_add(&d, other);
			c = pick(&d, &r);
			assert_true(e[c].deficit + 1 <= q + carry);
			for (uint32_t a = 0; a < 4; a++)
				for (uint32_t b = 0; b < 4; b++) {
					diff[a][b] += (c == a) - (c == b);
					lo[a][b] = diff[a][b] < lo[a][b] ? diff[a][b] : lo[a][b];
					hi[a][b] = diff[a][b] > hi[a][b] ? diff[a][b] : hi[a][b];
				}
		}
		for (uint32_t a = 0; a < 4; a++)
			for (uint32_t b = 0; b < 4; b++)
				assert_true(hi[a][b] - lo[a][b] <= (int64_t)q);
	}
}

/* Alternating "one line free" / "nobody can dial" (review finding 1): a call without a pick
 * must not hand out quanta or keep the turn, or the head takes every freed line whenever
 * carry_max >= 1. Both ways of "nobody": every campaign not ready, or the org blocked. */
static void idle_passes_charge_nobody(void **state)
{
	for (int blocked = 0; blocked < 2; blocked++)
		for (uint32_t carry = 0; carry <= 2; carry++) {
			struct drr d;
			struct drr_entry e[N];
			struct readiness r = { .ready = { false } };
			unsigned got[3] = { 0 };
			uint32_t slot;

			drr_init(&d, e, N, 1, carry);
			for (uint32_t i = 0; i < 3; i++)
				drr_add(&d, i);
			for (int t = 0; t < 300; t++) {
				for (uint32_t i = 0; i < 3; i++)
					r.ready[i] = true;
				r.blocked = false;
				got[pick(&d, &r)]++;
				for (uint32_t i = 0; i < 3; i++)
					r.ready[i] = false;
				r.blocked = blocked;
				memset(r.calls, 0, sizeof(r.calls));
				assert_int_equal(drr_next(&d, ready_cb, &r, &slot), -EAGAIN);
				/* Blocked: the walk stops at the first campaign asked. */
				if (blocked)
					assert_int_equal(r.calls[0] + r.calls[1] + r.calls[2], 1);
			}
			for (uint32_t i = 0; i < 3; i++)
				assert_int_equal(got[i], 100);
		}
}

/* The real gate, floors never installed (or enforcement off, or expired): the only fairness left
 * is the selector's. A full org, one call ending at a time (oldest first), a refill after each:
 * the calls started must rotate over the three backlogged campaigns. */
struct gate_world {
	struct fairshare_gate g;
	struct fairshare_gate_campaign gc[3];
	struct fairshare_gate_agent ga[1];
	struct fairshare_system sys;
	uint32_t calls[64]; /* campaign of each live call, oldest first */
	uint32_t n_calls;
	unsigned started[3];
	unsigned asked; /* gate decisions */
	uint64_t now;	/* the gate's clock */
};

static enum drr_ready gate_ready_cb(void *ctx, uint32_t c)
{
	struct gate_world *w = ctx;
	struct fairshare_slot slot = { c, FAIRSHARE_NO_AGENT };
	struct fairshare_decision dec;

	w->asked++;
	assert_int_equal(fairshare_gate_try(&w->g, &w->sys, &slot, w->now, &dec), 0);
	if (dec.admitted)
		return DRR_READY;
	return fairshare_gate_blocks_org(&dec) ? DRR_BLOCKED : DRR_NOT_READY;
}

static void gate_refill(struct drr *d, struct gate_world *w)
{
	uint32_t c;

	while (drr_next(d, gate_ready_cb, w, &c) == 0) {
		w->calls[w->n_calls++] = c;
		w->started[c]++;
	}
}

static void gate_world_run(bool enforced, uint32_t system_limit, bool expired)
{
	const uint32_t floors[3] = { 7, 7, 6 };
	struct fairshare_gate_limits lim = { 20, FAIRSHARE_UNLIMITED, enforced };
	struct gate_world w = { .sys = { system_limit, 0 } };
	struct drr d;
	struct drr_entry e[3];
	struct fairshare_slot slot;

	for (uint32_t i = 0; i < 3; i++)
		w.gc[i] = (struct fairshare_gate_campaign){ .ceiling = FAIRSHARE_UNLIMITED,
							    .agent = FAIRSHARE_NO_AGENT };
	assert_int_equal(fairshare_gate_init(&w.g, &lim, w.gc, 3, FAIRSHARE_NO_CAMPAIGN, w.ga, 1),
			 0);
	if (expired) { /* floors installed once, valid until 10, the clock then at 20 */
		assert_int_equal(fairshare_gate_install(&w.g, 1, floors, 3, 0, 10), 0);
		w.now = 20;
	}
	drr_init(&d, e, 3, 1, 1);
	for (uint32_t i = 0; i < 3; i++)
		drr_add(&d, i);
	gate_refill(&d, &w);
	assert_int_equal(w.n_calls, 20);
	for (int t = 0; t < 6000; t++) {
		slot = (struct fairshare_slot){ w.calls[0], FAIRSHARE_NO_AGENT };
		assert_int_equal(fairshare_gate_release(&w.g, &w.sys, &slot), 0);
		memmove(w.calls, w.calls + 1, --w.n_calls * sizeof(w.calls[0]));
		gate_refill(&d, &w);
		assert_int_equal(w.n_calls, 20);
	}
	for (uint32_t i = 0; i < 3; i++) /* 6020 calls over 3 campaigns */
		assert_true(w.started[i] >= 2006 && w.started[i] <= 2008);
	/* One freed line: one admission, then one refusal that stops the walk (finding 6). */
	assert_true(w.asked <= 2 * 6000 + 24);
}

static void gate_without_floors_rotates(void **state)
{
	gate_world_run(true, 1000, false); /* floors never installed: the org level refuses */
	gate_world_run(true, 1000, true);  /* floors expired */
	gate_world_run(false, 20, false);  /* enforcement off: the system level refuses */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(rejects_bad_input),
		cmocka_unit_test(equal_turns),
		cmocka_unit_test(old_backlog_does_not_fill_page),
		cmocka_unit_test(carry_is_bounded),
		cmocka_unit_test(join_and_leave),
		cmocka_unit_test(backlogged_differ_by_one_quantum),
		cmocka_unit_test(idle_passes_charge_nobody),
		cmocka_unit_test(gate_without_floors_rotates),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
