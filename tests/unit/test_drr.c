/* Unit and property tests of the deficit-round-robin selector (SPEC C8), alone and driven by
 * the real gate (fairshare_gate.h) as the dispatcher drives it. */
#include "drr.h"
#include "fairshare_gate.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#define N 16

struct readiness {
	bool ready[N];
	bool blocked;	   /* every campaign answers DRR_BLOCKED */
	unsigned calls[N]; /* ready_cb calls in the current drr_next */
};

/* The face under test: drr_next itself, or drr_propose + drr_charge as the worker drives them
 * over the asynchronous gate (next_via_propose). Every test below runs against both. */
typedef int next_fn(struct drr *d, drr_ready_cb *ready, void *ctx, uint32_t *slot);
static next_fn *next_face = drr_next;

#define CAND_MAX 64 /* more than any ring in these tests */

/* drr_next through the asynchronous face: the candidates go to "the gate" (ready) in requests
 * of 1..16 (rotating, so walks longer than one request are exercised), asked in order until one
 * is admitted or blocks; then the answers are charged. */
static int next_via_propose(struct drr *d, drr_ready_cb *ready, void *ctx, uint32_t *slot)
{
	static const uint32_t pages[] = { 16, 1, 2, 3, 5 };
	static unsigned turn;
	uint32_t cand[CAND_MAX];
	enum drr_ready answers[CAND_MAX];
	uint32_t asked = 0;
	bool done = false;

	if (!d || !ready || !slot)
		return -EINVAL;
	while (!done) {
		uint32_t page = pages[turn++ % 5], n;

		assert_true(asked + page <= CAND_MAX);
		assert_int_equal(drr_propose(d, asked, cand + asked, page, &n), 0);
		for (uint32_t i = 0; i < n && !done; i++) {
			answers[asked] = ready(ctx, cand[asked]);
			done = answers[asked++] != DRR_NOT_READY;
		}
		if (n < page)
			break; /* the walk ended */
	}
	return drr_charge(d, cand, answers, asked, slot);
}

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
	assert_int_equal(next_face(d, ready_cb, r, &slot), 0);
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
	assert_int_equal(next_face(&d, ready_cb, &r, &slot), -EAGAIN); /* empty ring */
	assert_int_equal(drr_add(&d, 2), -EINVAL);
	assert_int_equal(drr_add(&d, 1), 0);
	assert_int_equal(drr_add(&d, 1), -EEXIST);
	assert_int_equal(drr_remove(&d, 0), -ENOENT);
	assert_int_equal(drr_remove(&d, 5), -EINVAL);
	assert_true(drr_contains(&d, 1));
	assert_false(drr_contains(&d, 0));
	assert_int_equal(next_face(&d, NULL, &r, &slot), -EINVAL);
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
	assert_int_equal(next_face(&d, ready_cb, &r, &slot), -EAGAIN);
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
				assert_int_equal(next_face(&d, ready_cb, &r, &slot), -EAGAIN);
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

	while (next_face(d, gate_ready_cb, w, &c) == 0) {
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

/* drr_propose lists the ring from the turn, each campaign once, and changes nothing. */
static void propose_lists_the_walk(void **state)
{
	struct drr d;
	struct drr_entry e[N], before[N];
	struct readiness r = { .ready = { true, true, true, true } };
	uint32_t cand[N], n;

	drr_init(&d, e, N, 2, 2);
	assert_int_equal(drr_propose(&d, 0, cand, N, &n), 0);
	assert_int_equal(n, 0); /* empty ring */
	for (uint32_t i = 0; i < 4; i++)
		drr_add(&d, i);
	assert_int_equal(pick(&d, &r), 0); /* 0 is mid-turn */
	memcpy(before, e, sizeof(e));
	struct drr dbefore = d;
	assert_int_equal(drr_propose(&d, 0, cand, N, &n), 0);
	assert_int_equal(n, 4);
	for (uint32_t i = 0; i < 4; i++)
		assert_int_equal(cand[i], i);
	assert_int_equal(drr_propose(&d, 1, cand, 2, &n), 0); /* the next request's page */
	assert_int_equal(n, 2);
	assert_int_equal(cand[0], 1);
	assert_int_equal(cand[1], 2);
	assert_int_equal(drr_propose(&d, 3, cand, 16, &n), 0);
	assert_int_equal(n, 1);
	assert_int_equal(cand[0], 3);
	assert_int_equal(drr_propose(&d, 4, cand, 16, &n), 0);
	assert_int_equal(n, 0);
	assert_memory_equal(e, before, sizeof(e));
	assert_memory_equal(&d, &dbefore, sizeof(d));
	assert_int_equal(drr_propose(NULL, 0, cand, 1, &n), -EINVAL);
	assert_int_equal(drr_propose(&d, 0, NULL, 1, &n), -EINVAL);
}

/* A proposal the ring no longer starts with is refused and changes nothing; one whose walked
 * prefix still holds (a newcomer joined at the end of the round) is charged. */
static void charge_refuses_a_stale_proposal(void **state)
{
	struct drr d;
	struct drr_entry e[N], before[N];
	uint32_t cand[N], n, slot = DRR_NONE;
	enum drr_ready ans[N] = { DRR_NOT_READY, DRR_READY };

	drr_init(&d, e, N, 1, 1);
	for (uint32_t i = 0; i < 3; i++)
		drr_add(&d, i);
	assert_int_equal(drr_propose(&d, 0, cand, N, &n), 0);
	drr_remove(&d, 0);
	drr_add(&d, 0); /* 0 now last: the walk starts at 1 */
	memcpy(before, e, sizeof(e));
	assert_int_equal(drr_charge(&d, cand, ans, n, &slot), -ESTALE);
	assert_memory_equal(e, before, sizeof(e));
	assert_int_equal(d.head, 1);
	assert_int_equal(drr_propose(&d, 0, cand, 2, &n), 0); /* 1, 2 */
	drr_add(&d, 5);					      /* joins after 0 */
	assert_int_equal(drr_charge(&d, cand, ans, n, &slot), 0);
	assert_int_equal(slot, 2);
	/* Every candidate refused, or the first blocking: no pick, nothing changes. */
	assert_int_equal(drr_propose(&d, 0, cand, N, &n), 0);
	assert_int_equal(n, 4);
	memcpy(before, e, sizeof(e));
	struct drr dbefore = d;
	enum drr_ready none[N] = { DRR_NOT_READY, DRR_NOT_READY, DRR_NOT_READY, DRR_NOT_READY };
	enum drr_ready blocked[N] = { DRR_NOT_READY, DRR_BLOCKED, DRR_READY };
	assert_int_equal(drr_charge(&d, cand, none, n, &slot), -EAGAIN);
	assert_int_equal(drr_charge(&d, cand, blocked, n, &slot), -EAGAIN);
	assert_int_equal(drr_charge(&d, cand, none, 2, &slot), -EAGAIN); /* a partial walk */
	for (uint32_t i = 0; i < N; i++)				 /* saved is scratch */
		e[i].saved = before[i].saved;
	assert_memory_equal(e, before, sizeof(e));
	assert_memory_equal(&d, &dbefore, sizeof(d));
	enum drr_ready bad[1] = { (enum drr_ready)7 };
	assert_int_equal(drr_charge(&d, cand, bad, 1, &slot), -EINVAL);
	assert_int_equal(drr_charge(&d, NULL, none, 1, &slot), -EINVAL);
}

/* The state of a selector, without the scratch field. */
static void assert_same_state(const struct drr *a, const struct drr *b)
{
	assert_int_equal(a->head, b->head);
	assert_int_equal(a->count, b->count);
	assert_int_equal(a->in_turn, b->in_turn);
	for (uint32_t i = 0; i < a->capacity; i++) {
		const struct drr_entry *x = &a->entries[i], *y = &b->entries[i];
		if (x->linked != y->linked || x->deficit != y->deficit ||
		    (x->linked && (x->next != y->next || x->prev != y->prev)))
			fail_msg("entry %u differs: deficit %u/%u linked %d/%d", i, x->deficit,
				 y->deficit, x->linked, y->linked);
	}
}

#define RN 24 /* more campaigns than one gate request holds */

struct answers {
	enum drr_ready a[RN];
};

static enum drr_ready table_cb(void *ctx, uint32_t slot)
{
	return ((struct answers *)ctx)->a[slot];
}

/* One selector driven by drr_next, its twin by drr_propose + drr_charge in requests of 1..16,
 * the same random history for both (joins, leaves, readiness, blocking): after every step the
 * same pick and the same state. 10 × 20,000 steps, fixed seed. */
static void faces_agree_on_random_histories(void **state)
{
	uint64_t seed = 20240917;
	unsigned picks = 0, none = 0;

	for (int trial = 0; trial < 10; trial++) {
		uint32_t q = 1 + (uint32_t)(rnd(&seed) % 4), carry = (uint32_t)(rnd(&seed) % 5);
		struct drr a, b;
		struct drr_entry ea[RN], eb[RN];

		drr_init(&a, ea, RN, q, carry);
		drr_init(&b, eb, RN, q, carry);
		for (int t = 0; t < 20000; t++) {
			uint32_t c = (uint32_t)(rnd(&seed) % RN), sa = DRR_NONE, sb = DRR_NONE;
			struct answers ans;
			unsigned p_ready = (unsigned)(rnd(&seed) % 100);

			if (rnd(&seed) % 8 == 0) {
				int ra = drr_contains(&a, c) ? drr_remove(&a, c) : drr_add(&a, c);
				int rb = drr_contains(&b, c) ? drr_remove(&b, c) : drr_add(&b, c);
				assert_int_equal(ra, rb);
			}
			for (uint32_t i = 0; i < RN; i++) {
				unsigned x = (unsigned)(rnd(&seed) % 100);
				ans.a[i] = x < p_ready ? DRR_READY
					   : x < 97    ? DRR_NOT_READY
						       : DRR_BLOCKED;
			}
			int ra = drr_next(&a, table_cb, &ans, &sa);
			int rb = next_via_propose(&b, table_cb, &ans, &sb);
			assert_int_equal(ra, rb);
			assert_int_equal(sa, sb);
			assert_same_state(&a, &b);
			picks += ra == 0;
			none += ra != 0;
		}
	}
	assert_true(picks > 50000 && none > 10000); /* both outcomes well exercised */
}

/* drr_grow(): a selector that starts with 2 entries and grows (realloc) whenever a campaign
 * beyond them joins, mid-turn included, makes the same picks and keeps the same deficits and
 * turn as a twin that had room for all from the start; drr_turn_picks() agrees on both. */
static void growth_keeps_deficits_and_turn(void **state)
{
	uint64_t seed = 4242;
	struct drr a, b;
	struct drr_entry ea[RN];
	struct drr_entry *eb = malloc(2 * sizeof(*eb));
	struct readiness r = { .ready = { false } };
	unsigned grows = 0, picks = 0;

	assert_non_null(eb);
	/* Fixed case: 0 mid-turn (quantum 2, one pick used) when the entries grow. */
	drr_init(&a, ea, RN, 2, 2);
	drr_init(&b, eb, 2, 2, 2);
	drr_add(&b, 0);
	drr_add(&b, 1);
	r.ready[0] = r.ready[1] = r.ready[2] = true;
	assert_int_equal(pick(&b, &r), 0);
	assert_int_equal(drr_turn_picks(&b, 0), 1);
	assert_int_equal(drr_turn_picks(&b, 1), 2);
	assert_int_equal(drr_grow(&b, eb, 1), -EINVAL); /* smaller */
	assert_int_equal(drr_grow(&b, NULL, 8), -EINVAL);
	eb = realloc(eb, 8 * sizeof(*eb));
	assert_non_null(eb);
	assert_int_equal(drr_grow(&b, eb, 8), 0);
	assert_int_equal(drr_add(&b, 7), 0); /* joins last in the round */
	assert_int_equal(pick(&b, &r), 0);   /* 0 finishes its turn */
	assert_int_equal(pick(&b, &r), 1);
	assert_int_equal(pick(&b, &r), 1);
	assert_int_equal(drr_turn_picks(&b, 7), 2);
	assert_int_equal(drr_turn_picks(&b, 5), 0); /* not on the ring */

	/* Random histories, both faces (next_face on the growing one). */
	for (int trial = 0; trial < 10; trial++) {
		uint32_t q = 1 + (uint32_t)(rnd(&seed) % 3), carry = (uint32_t)(rnd(&seed) % 4);
		drr_init(&a, ea, RN, q, carry);
		eb = realloc(eb, 2 * sizeof(*eb));
		assert_non_null(eb);
		drr_init(&b, eb, 2, q, carry);
		for (int t = 0; t < 5000; t++) {
			uint32_t c = (uint32_t)(rnd(&seed) % RN), sa = DRR_NONE, sb = DRR_NONE;
			struct answers ans;

			if (rnd(&seed) % 6 == 0) {
				if (c >= b.capacity) {
					uint32_t cap =
						b.capacity * 2 > c + 1 ? b.capacity * 2 : c + 1;
					eb = realloc(eb, cap * sizeof(*eb));
					assert_non_null(eb);
					assert_int_equal(drr_grow(&b, eb, cap), 0);
					grows++;
				}
				int ra = drr_contains(&a, c) ? drr_remove(&a, c) : drr_add(&a, c);
				int rb = drr_contains(&b, c) ? drr_remove(&b, c) : drr_add(&b, c);
				assert_int_equal(ra, rb);
			}
			for (uint32_t i = 0; i < RN; i++)
				ans.a[i] = rnd(&seed) % 3 ? DRR_READY : DRR_NOT_READY;
			int ra = drr_next(&a, table_cb, &ans, &sa);
			int rb = next_face(&b, table_cb, &ans, &sb);
			assert_int_equal(ra, rb);
			assert_int_equal(sa, sb);
			picks += ra == 0;
			assert_int_equal(a.head, b.head);
			assert_int_equal(a.count, b.count);
			assert_int_equal(a.in_turn, b.in_turn);
			for (uint32_t i = 0; i < RN; i++) {
				assert_int_equal(drr_turn_picks(&a, i), drr_turn_picks(&b, i));
				if (i >= b.capacity) {
					assert_false(ea[i].linked);
					continue;
				}
				assert_int_equal(ea[i].linked, eb[i].linked);
				assert_int_equal(ea[i].deficit, eb[i].deficit);
				if (ea[i].linked) {
					assert_int_equal(ea[i].next, eb[i].next);
					assert_int_equal(ea[i].prev, eb[i].prev);
				}
			}
		}
	}
	assert_true(grows >= 10 && picks > 10000); /* at least one growth per trial */
	free(eb);
}

/* drr_debit(): an out-of-turn pick comes out of the carry; the ring and the turn stay. */
static void debit_takes_from_the_carry(void **state)
{
	struct drr d;
	struct drr_entry e[N];
	struct readiness r = { .ready = { false, true, true } };

	drr_init(&d, e, N, 1, 2);
	for (uint32_t i = 0; i < 3; i++)
		drr_add(&d, i);
	assert_int_equal(drr_debit(&d, 5), -ENOENT);
	assert_int_equal(drr_debit(&d, N), -EINVAL);
	assert_int_equal(drr_debit(&d, 1), -EAGAIN); /* nothing carried */
	assert_int_equal(pick(&d, &r), 1);	     /* 0 passed: carries 1 */
	assert_int_equal(e[0].deficit, 1);
	uint32_t head = d.head;
	assert_int_equal(drr_debit(&d, 0), 0);
	assert_int_equal(e[0].deficit, 0);
	assert_int_equal(d.head, head);
	assert_int_equal(drr_debit(&d, 0), -EAGAIN);
	assert_int_equal(pick(&d, &r), 2);
	assert_int_equal(pick(&d, &r), 1); /* 0 still not ready */
	/* The head mid-turn (quantum 2): its debit may end its turn. */
	drr_init(&d, e, N, 2, 2);
	drr_add(&d, 0);
	drr_add(&d, 1);
	r.ready[0] = true;
	assert_int_equal(pick(&d, &r), 0); /* 1 pick left */
	assert_int_equal(drr_debit(&d, 0), 0);
	assert_int_equal(pick(&d, &r), 1); /* the turn passed */
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
		cmocka_unit_test(growth_keeps_deficits_and_turn),
		cmocka_unit_test(debit_takes_from_the_carry),
	};
	const struct CMUnitTest async_only[] = {
		cmocka_unit_test(propose_lists_the_walk),
		cmocka_unit_test(charge_refuses_a_stale_proposal),
		cmocka_unit_test(faces_agree_on_random_histories),
	};
	int failed = cmocka_run_group_tests_name("drr_next", tests, NULL, NULL);

	next_face = next_via_propose;
	failed += cmocka_run_group_tests_name("drr_propose+drr_charge", tests, NULL, NULL);
	failed += cmocka_run_group_tests_name("async face", async_only, NULL, NULL);
	return failed;
}
