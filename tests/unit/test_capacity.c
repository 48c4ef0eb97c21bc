/* Unit tests of the capacity view (dispatcher/core/capacity.h, SPEC C12). Every state is built
 * the way production builds it: floors installed in the gate model (fairshare_gate.h) and calls
 * admitted through fairshare_gate_try(), never by setting counts. Each answer is also checked
 * against the gate itself: available_now must be the number of admissions the gate then grants
 * in a row on a copy of the state.
 *   - source_example: SPEC C12's example, exactly, and the recompute's answer for it;
 *   - ceiling/agent/system/pool terms below, at and above the others (ties name the narrower);
 *   - organisation vs fair share, enforcement off, paused and stopped, floors expired (V4),
 *     direct dials waiting;
 *   - random_states_match_gate: random gate states (fixed seed): available_now equals the
 *     gate's admissions in a row, effective_limit the plain minimum of C12's terms, and
 *     limited_by the narrowest term equal to it;
 *   - installed_equals_recompute: the refresher's floors, installed, give the refresher's
 *     figures;
 *   - bad input. */
#include "capacity.h"
#include "fairshare.h"
#include "fairshare_gate.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#define NC	  8
#define NA	  4
#define NO	  FAIRSHARE_NO_CAMPAIGN
#define UNSET	  FAIRSHARE_UNLIMITED
#define TTL	  10000
#define MAX_TRIES 100000u
#define N_RANDOM  100000

/* One organisation's gate model and what the view needs beside it. */
struct fx {
	struct fairshare_gate g;
	struct fairshare_gate_campaign gc[NC];
	struct fairshare_gate_agent ga[NA];
	struct fairshare_system sys;
	struct capacity_meta meta[NC];
	char ids[NC][8];
	uint32_t n;
	uint32_t direct;
	uint64_t now;
};

/* n campaigns "c0".. (no ceiling, no agent, running, active), direct at index direct or NO. */
static void fx_setup(struct fx *f, uint32_t n, uint32_t direct)
{
	memset(f, 0, sizeof(*f));
	f->n = n;
	f->direct = direct;
	f->sys = (struct fairshare_system){ 1000, 0 };
	for (uint32_t i = 0; i < n; i++) {
		snprintf(f->ids[i], sizeof(f->ids[i]), i == direct ? "direct" : "c%u", i);
		f->gc[i] = (struct fairshare_gate_campaign){ .ceiling = UNSET,
							     .agent = FAIRSHARE_NO_AGENT };
		f->meta[i] = (struct capacity_meta){ f->ids[i], FAIRSHARE_RUNNING, true };
	}
}

/* Initialises the gate over the campaigns as set up (ceilings and agents set by then). */
static void fx_start(struct fx *f, uint32_t org_limit, uint32_t per_agent, uint32_t n_agents)
{
	struct fairshare_gate_limits lim = { org_limit, per_agent, true };

	assert_int_equal(fairshare_gate_init(&f->g, &lim, f->gc, f->n, f->direct, f->ga, n_agents),
			 0);
}

static void fx_install(struct fx *f, uint64_t version, const uint32_t *floors)
{
	assert_int_equal(fairshare_gate_install(&f->g, version, floors, f->n, f->now, TTL), 0);
}

static struct fairshare_slot slot_of(const struct fx *f, uint32_t c, uint32_t direct_agent)
{
	return (struct fairshare_slot){ c, c == f->direct ? direct_agent : f->gc[c].agent };
}

/* Admits `times` calls of c through the gate; each must be admitted. */
static void fx_admit(struct fx *f, uint32_t c, uint32_t times)
{
	struct fairshare_slot s = slot_of(f, c, FAIRSHARE_NO_AGENT);
	struct fairshare_decision d;

	for (uint32_t t = 0; t < times; t++) {
		assert_int_equal(fairshare_gate_try(&f->g, &f->sys, &s, f->now, &d), 0);
		assert_true(d.admitted);
	}
}

/* Admissions the gate grants c in a row now, on a copy of the state (a direct dial names no
 * agent: capacity.h V3). */
static uint32_t fx_tries(const struct fx *f, uint32_t c)
{
	static struct fx copy;
	struct fairshare_slot s = slot_of(f, c, FAIRSHARE_NO_AGENT);
	struct fairshare_decision d = { .admitted = true };
	uint32_t n = 0;

	copy = *f;
	copy.g.campaigns = copy.gc;
	copy.g.agents = copy.ga;
	for (; n < MAX_TRIES; n++) {
		assert_int_equal(fairshare_gate_try(&copy.g, &copy.sys, &s, copy.now, &d), 0);
		if (!d.admitted)
			break;
	}
	return n;
}

/* The view of c from the gate at f->now; available_now checked against the gate itself. */
static void fx_view(const struct fx *f, uint32_t c, struct capacity_answer *a)
{
	struct capacity_org org;
	struct capacity_campaign cs[NC];
	uint32_t agent_running[NA];
	uint64_t *work = test_malloc(NA * sizeof(uint64_t));

	assert_int_equal(
		capacity_from_gate(&f->g, &f->sys, f->now, f->meta, &org, cs, agent_running), 0);
	assert_int_equal(capacity_view(&org, cs, f->n, c, work, a), 0);
	test_free(work);
	if (f->meta[c].state == FAIRSHARE_RUNNING)
		assert_int_equal(a->available_now, fx_tries(f, c));
	else
		assert_int_equal(a->available_now, 0);
}

static void want(const struct capacity_answer *a, uint32_t effective, const char *limited_by,
		 uint32_t available)
{
	char text[160];

	assert_int_equal(fairshare_limited_by_format(a->limited_by, a->limited_by_value, text,
						     sizeof(text)) > 0,
			 1);
	assert_int_equal(a->effective_limit, effective);
	assert_string_equal(text, limited_by);
	assert_int_equal(a->available_now, available);
}

static void want_fair_share(const struct capacity_answer *a, uint32_t active, uint32_t floor,
			    uint32_t reserved)
{
	assert_int_equal(a->active_campaigns, active);
	assert_int_equal(a->guaranteed_floor, floor);
	assert_int_equal(a->reserved_for_other_campaigns, reserved);
}

enum { A = 0, B = 1, D = 2 };

#define FAIR2 "a fair share of the organisation pool across 2 active campaigns"

/* SPEC C12's example: org_limit 20; A (campaign_limit 50) and B (no ceiling) with large
 * backlogs; the refresher installs 10/10; A then runs 7 and B 10, admitted by the gate. The org
 * also has its direct pseudo-campaign, idle (k = 0), as every org does. */
static void example(struct fx *f)
{
	const uint32_t floors[3] = { 10, 10, 0 };

	fx_setup(f, 3, D);
	f->gc[A].ceiling = 50;
	fx_start(f, 20, UNSET, 0);
	fx_install(f, 1, floors);
	fx_admit(f, A, 7);
	fx_admit(f, B, 10);
	f->meta[D].active = false; /* ignored: the direct is active while k >= 1 */
	f->now = 1000;
}

static void source_example(void **state)
{
	static struct fx f;
	struct capacity_answer a;

	example(&f);
	fx_view(&f, A, &a);
	assert_int_equal(a.running_now, 7);
	want(&a, 10, FAIR2, 3);
	assert_int_equal(a.campaign_limit, 50);
	assert_int_equal(a.org_limit, 20);
	want_fair_share(&a, 2, 10, 10);
	assert_false(a.fcfs);
	assert_string_equal(fairshare_limit_name(a.limited_by), "fair_share");
	/* B, at its floor: nothing to borrow while A is short of its own. */
	fx_view(&f, B, &a);
	assert_int_equal(a.running_now, 10);
	want(&a, 10, FAIR2, 0);
	assert_int_equal(a.campaign_limit, UNSET);
	want_fair_share(&a, 2, 10, 10);
}

/* The refresher, given the same state, computes these floors and the same answer. */
static void source_example_recompute(void **state)
{
	struct fairshare_org org = { .system_limit = 1000,
				     .system_running = 17,
				     .org_limit = 20,
				     .per_agent = UNSET,
				     .enforced = true };
	struct fairshare_campaign in[2] = {
		{ .id = "A",
		  .running = 7,
		  .due = 5000,
		  .ceiling = 50,
		  .agent = FAIRSHARE_NO_AGENT },
		{ .id = "B",
		  .running = 10,
		  .due = 5000,
		  .ceiling = UNSET,
		  .agent = FAIRSHARE_NO_AGENT },
	};
	struct fairshare_result out[2];
	struct fairshare_summary sum;
	size_t size = fairshare_work_size(2, 0);
	void *work = test_malloc(size);

	assert_int_equal(fairshare_recompute(&org, in, 2, out, &sum, work, size), 0);
	test_free(work);
	assert_int_equal(out[0].floor, 10);
	assert_int_equal(out[0].effective_limit, 10);
	assert_int_equal(out[0].available_now, 3);
	assert_int_equal(out[0].reserved_for_other_campaigns, 10);
	assert_int_equal(out[0].limited_by, FAIRSHARE_BY_FAIR_SHARE);
	assert_int_equal(out[0].limited_by_value, 2);
	assert_int_equal(sum.active_campaigns, 2);
}

/* A's ceiling below (9), at (10) and above (11) the fair-share term of 10. */
static void ceiling_term(void **state)
{
	static struct fx f;
	struct capacity_answer a;

	example(&f);
	assert_int_equal(fairshare_gate_set_ceiling(&f.g, A, 9), 0);
	fx_view(&f, A, &a);
	want(&a, 9, "the campaign's max_concurrent_calls of 9", 2);
	assert_int_equal(a.campaign_limit, 9);
	assert_int_equal(fairshare_gate_set_ceiling(&f.g, A, 10), 0);
	fx_view(&f, A, &a);
	want(&a, 10, "the campaign's max_concurrent_calls of 10", 3); /* a tie: the narrower */
	assert_int_equal(fairshare_gate_set_ceiling(&f.g, A, 11), 0);
	fx_view(&f, A, &a);
	want(&a, 10, FAIR2, 3);
	/* Over its ceiling (lowered under running, C6): nothing more, nothing pre-empted. */
	assert_int_equal(fairshare_gate_set_ceiling(&f.g, A, 5), 0);
	fx_view(&f, A, &a);
	want(&a, 5, "the campaign's max_concurrent_calls of 5", 0);
}

/* A on gating agent 0 (per_agent P < org_limit), floors 5/5, A runs 4 and B 4: the pool term
 * is max(5, 20 - 5) = 15 and the agent term 4 + (P - 4) = P. */
static void agent_case(struct fx *f, uint32_t per_agent)
{
	const uint32_t floors[3] = { 5, 5, 0 };

	fx_setup(f, 3, D);
	f->gc[A].agent = 0;
	fx_start(f, 20, per_agent, 1);
	fx_install(f, 1, floors);
	fx_admit(f, A, 4);
	fx_admit(f, B, 4);
}

static void agent_term(void **state)
{
	static struct fx f;
	struct capacity_answer a;

	agent_case(&f, 14);
	fx_view(&f, A, &a);
	want(&a, 14, "the per-agent limit of 14 lines", 10);
	agent_case(&f, 15);
	fx_view(&f, A, &a);
	want(&a, 15, "the per-agent limit of 15 lines", 11);
	agent_case(&f, 16);
	fx_view(&f, A, &a);
	want(&a, 15, FAIR2, 11);
	/* A direct dial on the same agent takes one of its lines (and one of the org's). */
	agent_case(&f, 14);
	assert_int_equal(fairshare_gate_try(&f.g, &f.sys, &(struct fairshare_slot){ D, 0 }, f.now,
					    &(struct fairshare_decision){ 0 }),
			 0);
	fx_view(&f, A, &a);
	want(&a, 13, "the per-agent limit of 14 lines", 9);
	/* per_agent at or above org_limit does not gate (C2): no agent term. */
	agent_case(&f, 20);
	fx_view(&f, A, &a);
	want(&a, 15, FAIR2, 11);
}

/* The system term: 7 + (limit - 17) against the fair-share term of 10. */
static void system_term(void **state)
{
	static struct fx f;
	struct capacity_answer a;

	example(&f);
	f.sys.limit = 19;
	fx_view(&f, A, &a);
	want(&a, 9, "the system limit of 19 lines", 2);
	f.sys.limit = 20;
	fx_view(&f, A, &a);
	want(&a, 10, FAIR2, 3); /* a tie: the pool is the narrower level */
	f.sys.limit = 21;
	fx_view(&f, A, &a);
	want(&a, 10, FAIR2, 3);
	/* Other organisations' calls count at the system level. */
	f.sys.limit = 1000;
	f.sys.running = 999;
	fx_view(&f, A, &a);
	want(&a, 8, "the system limit of 1000 lines", 1);
}

/* The pool term is the organisation limit when nobody else holds lines or c is the only active
 * campaign (R11); a fair share otherwise. */
static void organisation_term(void **state)
{
	static struct fx f;
	struct capacity_answer a;
	const uint32_t alone[3] = { 20, 0, 0 }, shared[3] = { 15, 5, 0 };

	fx_setup(&f, 3, D);
	fx_start(&f, 20, UNSET, 0);
	f.meta[B].active = false;
	fx_install(&f, 1, alone);
	fx_admit(&f, A, 7);
	fx_view(&f, A, &a);
	want(&a, 20, "the organisation limit of 20 lines", 13);
	want_fair_share(&a, 1, 20, 0);
	/* Against A's ceiling: below, at (the narrower wins) and above the organisation term. */
	assert_int_equal(fairshare_gate_set_ceiling(&f.g, A, 19), 0);
	fx_view(&f, A, &a);
	want(&a, 19, "the campaign's max_concurrent_calls of 19", 12);
	assert_int_equal(fairshare_gate_set_ceiling(&f.g, A, 20), 0);
	fx_view(&f, A, &a);
	want(&a, 20, "the campaign's max_concurrent_calls of 20", 13);
	assert_int_equal(fairshare_gate_set_ceiling(&f.g, A, 21), 0);
	fx_view(&f, A, &a);
	want(&a, 20, "the organisation limit of 20 lines", 13);
	/* B was active and took 5 lines; then it was paused and the refresher installed 20/0. */
	fx_setup(&f, 3, D);
	fx_start(&f, 20, UNSET, 0);
	fx_install(&f, 1, shared);
	fx_admit(&f, A, 7);
	fx_admit(&f, B, 5);
	f.meta[B] = (struct capacity_meta){ "c1", FAIRSHARE_PAUSED, false };
	fx_install(&f, 2, alone);
	fx_view(&f, A, &a);
	want(&a, 20, "the organisation limit of 20 lines", 8); /* max(floor 20, 20 - 5) */
	want_fair_share(&a, 1, 20, 0);
	fx_view(&f, B, &a); /* its pool term is max(0, 20 - 20): no new line, 5 still running */
	want(&a, 0, "the campaign is paused", 0);
}

static void enforcement_off(void **state)
{
	static struct fx f;
	struct capacity_answer a;

	example(&f);
	assert_int_equal(fairshare_gate_set_limits(
				 &f.g, &(struct fairshare_gate_limits){ 20, UNSET, false }),
			 0);
	fx_view(&f, A, &a);
	want(&a, 990, "concurrency management is off for this organisation", 983);
	want_fair_share(&a, 2, 10, 10); /* still reported (R10) */
	assert_false(a.fcfs);
	f.meta[A].state = FAIRSHARE_PAUSED; /* paused wins (V5) */
	fx_view(&f, A, &a);
	want(&a, 7, "the campaign is paused", 0);
}

static void paused_and_stopped(void **state)
{
	static struct fx f;
	struct capacity_answer a;

	example(&f);
	f.meta[A].state = FAIRSHARE_PAUSED;
	fx_view(&f, A, &a);
	want(&a, 7, "the campaign is paused", 0);
	want_fair_share(&a, 2, 10, 10); /* the installed active set until the next install */
	f.meta[A].state = FAIRSHARE_STOPPED;
	fx_view(&f, A, &a);
	want(&a, 7, "the campaign is stopped", 0);
	/* A paused campaign under its formula keeps the formula's figure. */
	assert_int_equal(fairshare_gate_set_ceiling(&f.g, A, 3), 0);
	fx_view(&f, A, &a);
	want(&a, 3, "the campaign is stopped", 0);
	/* The others' answers do not change. */
	fx_view(&f, B, &a);
	want(&a, 10, FAIR2, 0);
}

/* Floors 10/10, A runs 7 and B 5: with floors valid A gets 3 (its shortfall, B's 5 kept); with
 * floors expired nobody's floor counts (V4): first come first served, 8 free lines, minus the
 * line waiting direct dials keep. */
static void floors_expired(void **state)
{
	static struct fx f;
	struct capacity_answer a;
	const uint32_t floors[3] = { 10, 10, 0 };

	fx_setup(&f, 3, D);
	f.gc[A].ceiling = 50;
	fx_start(&f, 20, UNSET, 0);
	fx_install(&f, 1, floors);
	fx_admit(&f, A, 7);
	fx_admit(&f, B, 5);
	f.now = TTL - 1;
	fx_view(&f, A, &a);
	want(&a, 10, FAIR2, 3);
	want_fair_share(&a, 2, 10, 10);
	assert_false(a.fcfs);
	f.now = TTL; /* expired */
	fx_view(&f, A, &a);
	want(&a, 15, "the organisation limit of 20 lines", 8);
	want_fair_share(&a, 2, 0, 0);
	assert_true(a.fcfs);
	assert_int_equal(fairshare_gate_direct_wait(&f.g), 0);
	assert_int_equal(fairshare_gate_direct_wait(&f.g), 0);
	fx_view(&f, A, &a);
	want(&a, 15, "the organisation limit of 20 lines", 7); /* min(k, 1) kept for them */
	want_fair_share(&a, 3, 0, 0);
	fx_view(&f, D, &a);
	want(&a, 8, "the organisation limit of 20 lines", 8);
	/* Never installed: the same reading. */
	fx_setup(&f, 3, D);
	fx_start(&f, 20, UNSET, 0);
	fx_admit(&f, A, 7);
	fx_view(&f, A, &a);
	want(&a, 20, "the organisation limit of 20 lines", 13);
	assert_true(a.fcfs);
}

/* Floors 8/8/4 (the direct active at install), A runs 7, B 8; k direct dials wait. */
static void direct_dials_waiting(void **state)
{
	static struct fx f;
	struct capacity_answer a;
	const uint32_t floors[3] = { 8, 8, 4 };

	fx_setup(&f, 3, D);
	fx_start(&f, 20, UNSET, 0);
	fx_install(&f, 1, floors);
	fx_admit(&f, A, 7);
	fx_admit(&f, B, 8);
	/* k = 0: the direct is not active, reserves nothing, but its floor is held (C12's d). */
	fx_view(&f, A, &a);
	want(&a, 8, FAIR2, 5);
	want_fair_share(&a, 2, 8, 8);
	for (int i = 0; i < 3; i++)
		assert_int_equal(fairshare_gate_direct_wait(&f.g), 0);
	/* k = 3: min(3, max(1, 4)) = 3 lines held for them; 20 - 15 - 3 = 2 left for A. */
	fx_view(&f, A, &a);
	want(&a, 8, "a fair share of the organisation pool across 3 active campaigns", 2);
	want_fair_share(&a, 3, 8, 12);
	fx_view(&f, B, &a); /* at its floor: borrows 20 - 15 - 3 - A's 1 short = 1 */
	want(&a, 8, "a fair share of the organisation pool across 3 active campaigns", 1);
	/* The direct pseudo-campaign: under its floor of 4, no reserve against itself (R8). */
	fx_view(&f, D, &a);
	want(&a, 4, "a fair share of the organisation pool across 3 active campaigns", 4);
	want_fair_share(&a, 3, 4, 16);
	assert_int_equal(a.campaign_limit, UNSET);
}

/* ---- random gate states ---- */

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

static bool chance(struct rng *r, unsigned pct)
{
	return below(r, 100) < pct;
}

static void random_floors(struct rng *r, const struct fx *f, uint32_t *floors, uint32_t org)
{
	for (uint32_t i = 0; i < f->n; i++)
		floors[i] = chance(r, 30) ? 0 : below(r, org / 2 + 2);
}

/* Random calls of random campaigns through the gate (refusals are part of the story); direct
 * dials name a random agent. */
static void random_calls(struct rng *r, struct fx *f, uint32_t n_agents, uint32_t times)
{
	for (uint32_t t = 0; t < times; t++) {
		uint32_t c = below(r, f->n);
		uint32_t agent = chance(r, 50) ? FAIRSHARE_NO_AGENT : below(r, n_agents);
		struct fairshare_slot s = slot_of(f, c, agent);
		struct fairshare_decision d;

		assert_int_equal(fairshare_gate_try(&f->g, &f->sys, &s, f->now, &d), 0);
	}
}

static void random_gate(struct rng *r, struct fx *f)
{
	uint32_t n = 1 + below(r, 6), org = 1 + below(r, 12), n_agents = 1 + below(r, 3);
	uint32_t floors[NC];
	bool direct = chance(r, 60);

	fx_setup(f, n + direct, direct ? n : NO);
	for (uint32_t i = 0; i < n; i++) {
		f->gc[i].ceiling = chance(r, 60) ? UNSET : below(r, 10);
		f->gc[i].agent = chance(r, 20) ? FAIRSHARE_NO_AGENT : below(r, n_agents);
		f->meta[i].active = chance(r, 70);
		f->meta[i].state = chance(r, 85)
					   ? FAIRSHARE_RUNNING
					   : (chance(r, 50) ? FAIRSHARE_PAUSED : FAIRSHARE_STOPPED);
	}
	fx_start(f, org, chance(r, 50) ? UNSET : 1 + below(r, org + 2), n_agents);
	f->sys = (struct fairshare_system){ chance(r, 25) ? below(r, 20) : 1000, below(r, 4) };
	if (chance(r, 80)) {
		random_floors(r, f, floors, org);
		fx_install(f, 1, floors);
	}
	for (uint32_t k = below(r, 4); k > 0; k--)
		assert_int_equal(fairshare_gate_direct_wait(&f->g), 0);
	random_calls(r, f, n_agents, below(r, 2 * org + 4));
	if (chance(r, 40)) { /* newer floors over the calls running, as the refresher installs */
		random_floors(r, f, floors, org);
		fx_install(f, 2, floors);
	}
	if (chance(r, 20)) /* limits lowered under the live counts (R13) */
		assert_int_equal(
			fairshare_gate_set_limits(
				&f->g, &(struct fairshare_gate_limits){ 1 + below(r, org),
									f->g.limits.per_agent,
									chance(r, 90) }),
			0);
	f->now = chance(r, 20) ? TTL + below(r, 100) : below(r, TTL);
}

/* C12's effective_limit written out as the plain minimum of its terms, and the narrowest term
 * equal to it (R11); returns the minimum and sets *by. Enforcement on, c running. */
static int64_t c12_literal(const struct fx *f, uint32_t c, enum fairshare_limit *by)
{
	bool valid = fairshare_gate_floors_valid(&f->g, f->now);
	int64_t held = 0, fl = valid ? f->gc[c].floor : 0, r = f->gc[c].running, term[4];
	uint32_t cap = f->g.limits.per_agent, L = f->g.limits.org_limit, active = 0;
	bool has[4] = { c != f->direct && f->gc[c].ceiling != UNSET,
			cap < L && c != f->direct && f->gc[c].agent != FAIRSHARE_NO_AGENT, true,
			true };
	enum fairshare_limit names[4] = { FAIRSHARE_BY_CEILING, FAIRSHARE_BY_AGENT,
					  FAIRSHARE_BY_ORG, FAIRSHARE_BY_SYSTEM };
	int64_t best = INT64_MAX;

	for (uint32_t d = 0; d < f->n; d++) {
		int64_t fd = valid ? f->gc[d].floor : 0;

		active += d == f->direct ? f->g.direct_waiting > 0 : f->meta[d].active;
		if (d != c)
			held += fd > f->gc[d].running ? fd : f->gc[d].running;
	}
	term[0] = f->gc[c].ceiling;
	term[1] = has[1] ? r + ((int64_t)cap - f->ga[f->gc[c].agent].running > 0
					? (int64_t)cap - f->ga[f->gc[c].agent].running
					: 0)
			 : 0;
	term[2] = (int64_t)L - held > fl ? (int64_t)L - held : fl;
	term[3] = r + (f->sys.limit > f->sys.running ? (int64_t)f->sys.limit - f->sys.running : 0);
	for (int i = 0; i < 4; i++)
		if (has[i] && term[i] < best)
			best = term[i];
	for (int i = 3; i >= 0; i--)
		if (has[i] && term[i] == best)
			*by = names[i];
	if (*by == FAIRSHARE_BY_ORG && valid && held > 0 && active >= 2)
		*by = FAIRSHARE_BY_FAIR_SHARE;
	return best;
}

/* reserved_for_other_campaigns written from its definition. */
static uint32_t reserved_literal(const struct fx *f, uint32_t c)
{
	uint32_t sum = 0;

	for (uint32_t d = 0; d < f->n && fairshare_gate_floors_valid(&f->g, f->now); d++) {
		bool active = d == f->direct ? f->g.direct_waiting > 0 : f->meta[d].active;

		if (d != c && active)
			sum += f->gc[d].floor;
	}
	return sum;
}

static void check_random(const struct fx *f, uint32_t c, unsigned *positive, unsigned *seen)
{
	struct capacity_answer a;
	enum fairshare_limit by = FAIRSHARE_BY_SYSTEM;

	fx_view(f, c, &a); /* available_now against the gate's own admissions */
	*positive += a.available_now > 0;
	seen[a.limited_by]++;
	assert_int_equal(a.reserved_for_other_campaigns, reserved_literal(f, c));
	assert_int_equal(a.running_now, f->gc[c].running);
	if (!f->g.limits.enforced || f->meta[c].state != FAIRSHARE_RUNNING)
		return;
	assert_int_equal(a.effective_limit, c12_literal(f, c, &by));
	assert_int_equal(a.limited_by, by);
}

static void random_states_match_gate(void **state)
{
	static struct fx f;
	struct rng r = { 8080808 };
	unsigned positive = 0, checked = 0, expired = 0, seen[FAIRSHARE_BY_STOPPED + 1] = { 0 };

	for (int t = 0; t < N_RANDOM; t++) {
		random_gate(&r, &f);
		expired += !fairshare_gate_floors_valid(&f.g, f.now);
		for (uint32_t c = 0; c < f.n; c++, checked++)
			check_random(&f, c, &positive, seen);
	}
	/* The generator reaches both sides of every question. */
	assert_true(positive > checked / 4 && positive < checked * 3 / 4);
	assert_true(expired > N_RANDOM / 10);
	for (int by = 0; by <= FAIRSHARE_BY_STOPPED; by++)
		if (seen[by] < checked / 100)
			fail_msg("limited_by %s only %u times", fairshare_limit_name(by), seen[by]);
}

/* The refresher's floors, installed over the same counts, give the refresher's figures: the
 * endpoint and the recompute agree whenever the gate enforces what was just computed. */
static void installed_equals_recompute(void **state)
{
	static struct fx f;
	struct rng r = { 424242 };
	size_t size = fairshare_work_size(NC, NA);
	void *work = test_malloc(size);

	for (int t = 0; t < 5000; t++) {
		struct fairshare_campaign in[NC];
		struct fairshare_result out[NC];
		uint32_t floors[NC], agent_running[NA];
		struct fairshare_org org;

		random_gate(&r, &f);
		f.now = 0; /* floors valid */
		for (uint32_t i = 0; i < f.n; i++) {
			in[i] = (struct fairshare_campaign){
				.id = f.ids[i],
				.running = f.gc[i].running,
				.waiting = i == f.direct ? f.g.direct_waiting : 0,
				.due = i != f.direct && f.meta[i].active ? 1 + below(&r, 9) : 0,
				.ceiling = f.gc[i].ceiling,
				.agent = f.gc[i].agent,
				.state = f.meta[i].state,
				.direct = i == f.direct,
			};
		}
		for (uint32_t a = 0; a < f.g.n_agents; a++)
			agent_running[a] = f.ga[a].running;
		org = (struct fairshare_org){ f.sys.limit,	    f.sys.running,
					      f.g.limits.org_limit, f.g.limits.per_agent,
					      f.g.limits.enforced,  0,
					      agent_running,	    f.g.n_agents };
		assert_int_equal(fairshare_recompute(&org, in, f.n, out, NULL, work, size), 0);
		for (uint32_t i = 0; i < f.n; i++) {
			floors[i] = out[i].floor;
			f.meta[i].active = out[i].active;
		}
		fx_install(&f, 10, floors);
		for (uint32_t i = 0; i < f.n; i++) {
			struct capacity_answer a;

			fx_view(&f, i, &a);
			assert_int_equal(a.effective_limit, out[i].effective_limit);
			assert_int_equal(a.available_now, out[i].available_now);
			assert_int_equal(a.reserved_for_other_campaigns,
					 out[i].reserved_for_other_campaigns);
			assert_int_equal(a.limited_by, out[i].limited_by);
			assert_int_equal(a.limited_by_value, out[i].limited_by_value);
			assert_int_equal(a.guaranteed_floor, out[i].floor);
		}
	}
	test_free(work);
}

static void rejects_bad_input(void **state)
{
	uint32_t ar[1] = { 0 };
	uint64_t work[1];
	struct capacity_org org = { .system_limit = 1000,
				    .org_limit = 20,
				    .per_agent = UNSET,
				    .enforced = true,
				    .floors_valid = true,
				    .agent_running = ar,
				    .n_agents = 1 };
	struct capacity_campaign cs[2] = {
		{ .id = "a", .ceiling = UNSET, .agent = 0, .active = true },
		{ .id = "b", .ceiling = UNSET, .agent = FAIRSHARE_NO_AGENT, .active = true },
	};
	struct capacity_answer a;
	struct capacity_sums sums;

	assert_int_equal(capacity_view(&org, cs, 2, 0, work, &a), 0);
	assert_int_equal(capacity_view(&org, cs, 2, 2, work, &a), -EINVAL); /* no such campaign */
	assert_int_equal(capacity_view(&org, cs, 2, 0, NULL, &a), -EINVAL); /* agents, no work */
	assert_int_equal(capacity_view(NULL, cs, 2, 0, work, &a), -EINVAL);
	assert_int_equal(capacity_view(&org, NULL, 2, 0, work, &a), -EINVAL);
	cs[1].agent = 1; /* out of range */
	assert_int_equal(capacity_view(&org, cs, 2, 0, work, &a), -EINVAL);
	cs[1].agent = FAIRSHARE_NO_AGENT;
	cs[0].direct = cs[1].direct = true;
	assert_int_equal(capacity_view(&org, cs, 2, 0, work, &a), -EINVAL);
	cs[0].direct = cs[1].direct = false;
	cs[0].floor = cs[1].floor = FAIRSHARE_COUNT_MAX; /* floors summing past the bound */
	assert_int_equal(capacity_sum(&org, cs, 2, work, &sums), -EINVAL);
	cs[0].floor = cs[1].floor = 0;
	cs[0].state = (enum fairshare_state)7;
	assert_int_equal(capacity_sum(&org, cs, 2, work, &sums), -EINVAL);
	cs[0].state = FAIRSHARE_RUNNING;
	org.org_limit = 0;
	assert_int_equal(capacity_sum(&org, cs, 2, work, &sums), -EINVAL);
	org.org_limit = 20;
	assert_int_equal(capacity_find(cs, 2, "b"), 1);
	assert_int_equal(capacity_find(cs, 2, "c"), UINT32_MAX);
	assert_int_equal(capacity_find(cs, 2, NULL), UINT32_MAX);
	assert_int_equal(capacity_from_gate(NULL, NULL, 0, NULL, &org, cs, ar), -EINVAL);
}

/* No campaigns, no agents: an empty organisation sums to zeros. */
static void empty_org(void **state)
{
	struct capacity_org org = { .system_limit = 10, .org_limit = 20, .per_agent = UNSET };
	struct capacity_sums sums;

	assert_int_equal(capacity_sum(&org, NULL, 0, NULL, &sums), 0);
	assert_int_equal(sums.org_running, 0);
	assert_int_equal(sums.active_campaigns, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(source_example),
		cmocka_unit_test(source_example_recompute),
		cmocka_unit_test(ceiling_term),
		cmocka_unit_test(agent_term),
		cmocka_unit_test(system_term),
		cmocka_unit_test(organisation_term),
		cmocka_unit_test(enforcement_off),
		cmocka_unit_test(paused_and_stopped),
		cmocka_unit_test(floors_expired),
		cmocka_unit_test(direct_dials_waiting),
		cmocka_unit_test(random_states_match_gate),
		cmocka_unit_test(installed_equals_recompute),
		cmocka_unit_test(rejects_bad_input),
		cmocka_unit_test(empty_org),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
