/* Unit tests of the fair-share allocator's API edges: argument checks and error codes, the
 * limited_by sentences, exact rationals, agent groups, large inputs, and the gate's fencing,
 * expiry and never-negative guarantees. The behaviour cases live in tests/vectors/fairshare.json
 * and the properties in test_fairshare_oracle.c. */
#include "fairshare.h"
#include "fairshare_gate.h"

#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

static struct fairshare_campaign backlogged(const char *id, uint32_t agent)
{
	return (struct fairshare_campaign){
		.id = id, .due = 1000, .ceiling = FAIRSHARE_UNLIMITED, .agent = agent
	};
}

static int run(const struct fairshare_org *org, const struct fairshare_campaign *c, uint32_t n,
	       struct fairshare_result *out, struct fairshare_summary *sum)
{
	size_t size = fairshare_work_size(n, org->n_agents);
	void *work = test_malloc(size);
	int rc = fairshare_recompute(org, c, n, out, sum, work, size);

	test_free(work);
	return rc;
}

static void recompute_rejects_bad_input(void **state)
{
	uint32_t ar[1] = { 0 };
	struct fairshare_org org = { .system_limit = 1000,
				     .org_limit = 20,
				     .enforced = true,
				     .per_agent = FAIRSHARE_UNLIMITED,
				     .agent_running = ar,
				     .n_agents = 1 };
	struct fairshare_campaign c[2] = { backlogged("a", 0), backlogged("b", 0) };
	struct fairshare_result out[2];
	char small[8];

	assert_int_equal(run(&org, c, 2, out, NULL), 0);
	org.org_limit = 0;
	assert_int_equal(run(&org, c, 2, out, NULL), -EINVAL);
	org.org_limit = 20;
	c[1].agent = 1; /* out of range */
	assert_int_equal(run(&org, c, 2, out, NULL), -EINVAL);
	c[1].agent = FAIRSHARE_NO_AGENT;
	c[0].direct = c[1].direct = true; /* two direct pseudo-campaigns */
	assert_int_equal(run(&org, c, 2, out, NULL), -EINVAL);
	c[0].direct = c[1].direct = false;
	c[0].running = FAIRSHARE_COUNT_MAX + 1;
	assert_int_equal(run(&org, c, 2, out, NULL), -EINVAL);
	c[0].running = 0;
	c[0].carry.fluid_num = 1; /* a fluid share without a denominator */
	assert_int_equal(run(&org, c, 2, out, NULL), -EINVAL);
	c[0].carry.fluid_num = 0;
	assert_int_equal(fairshare_recompute(&org, c, 2, out, NULL, small, sizeof(small)),
			 -ENOBUFS);
	assert_int_equal(fairshare_recompute(NULL, c, 2, out, NULL, small, sizeof(small)), -EINVAL);
	assert_int_equal(fairshare_recompute(&org, NULL, 2, out, NULL, small, sizeof(small)),
			 -EINVAL);
}

static void limited_by_sentences(void **state)
{
	char buf[128];
	struct {
		enum fairshare_limit by;
		uint32_t value;
		const char *text;
	} cases[] = {
		{ FAIRSHARE_BY_FAIR_SHARE, 2,
		  "a fair share of the organisation pool across 2 active campaigns" },
		{ FAIRSHARE_BY_FAIR_SHARE, 1,
		  "a fair share of the organisation pool across 1 active campaign" },
		{ FAIRSHARE_BY_SYSTEM, 1000, "the system limit of 1000 lines" },
		{ FAIRSHARE_BY_ORG, 20, "the organisation limit of 20 lines" },
		{ FAIRSHARE_BY_ORG, 1, "the organisation limit of 1 line" },
		{ FAIRSHARE_BY_AGENT, 10, "the per-agent limit of 10 lines" },
		{ FAIRSHARE_BY_CEILING, 3, "the campaign's max_concurrent_calls of 3" },
		{ FAIRSHARE_BY_ENFORCEMENT_OFF, 0,
		  "concurrency management is off for this organisation" },
		{ FAIRSHARE_BY_PAUSED, 0, "the campaign is paused" },
		{ FAIRSHARE_BY_STOPPED, 0, "the campaign is stopped" },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int n = fairshare_limited_by_format(cases[i].by, cases[i].value, buf, sizeof(buf));

		assert_string_equal(buf, cases[i].text);
		assert_int_equal(n, (int)strlen(cases[i].text));
	}
	/* Truncation keeps a NUL and still reports the full length. */
	assert_int_equal(fairshare_limited_by_format(FAIRSHARE_BY_PAUSED, 0, buf, 8), 22);
	assert_string_equal(buf, "the cam");
	assert_int_equal(fairshare_limited_by_format((enum fairshare_limit)99, 0, buf, 8), -EINVAL);
	assert_string_equal(fairshare_limit_name(FAIRSHARE_BY_FAIR_SHARE), "fair_share");
	assert_string_equal(fairshare_limit_name((enum fairshare_limit)99), "unknown");
	assert_string_equal(fairshare_level_name(FAIRSHARE_LEVEL_ORG), "organisation");
	assert_string_equal(fairshare_reason_name(FAIRSHARE_REASON_DIRECT_RESERVE),
			    "direct_reserve");
	assert_string_equal(fairshare_level_name(FAIRSHARE_LEVEL_COUNT), "unknown");
}

/* Thirds and sevenths come out exact, and floors sum to the pool. */
static void fluid_is_exact(void **state)
{
	struct fairshare_org org = { .system_limit = 1000,
				     .org_limit = 20,
				     .enforced = true,
				     .per_agent = FAIRSHARE_UNLIMITED };
	struct fairshare_campaign c[7];
	struct fairshare_result out[7];
	struct fairshare_summary sum;
	const char *ids[] = { "a", "b", "c", "d", "e", "f", "g" };
	uint32_t floors = 0;

	for (int i = 0; i < 7; i++)
		c[i] = backlogged(ids[i], FAIRSHARE_NO_AGENT);
	c[0].ceiling = 1;
	assert_int_equal(run(&org, c, 7, out, &sum), 0);
	assert_true(fabs(out[0].fluid - 1.0) < 1e-12);
	for (int i = 1; i < 7; i++) {
		assert_true(fabs(out[i].fluid - 19.0 / 6.0) < 1e-12);
		assert_true(out[i].floor == 3 || out[i].floor == 4);
		floors += out[i].floor;
	}
	assert_int_equal(floors + out[0].floor, 20);
	assert_int_equal(sum.floors_total, 20);
}

/* Agent groups: {a, b} on agent 0 and {c} on agent 1, per_agent 4; d has no agent. On a pool of
 * 10, a = b = 2 (their agent saturates) and c = d = 3 (the pool saturates); on 30, c = 4 (its
 * agent saturates) and d takes the remaining 22. */
static void agent_groups_cap_together(void **state)
{
	uint32_t ar[2] = { 0, 0 };
	struct fairshare_org org = { .system_limit = 1000,
				     .org_limit = 10,
				     .per_agent = 4,
				     .enforced = true,
				     .agent_running = ar,
				     .n_agents = 2 };
	struct fairshare_campaign c[4] = { backlogged("a", 0), backlogged("b", 0),
					   backlogged("c", 1),
					   backlogged("d", FAIRSHARE_NO_AGENT) };
	struct fairshare_result out[4];

	assert_int_equal(run(&org, c, 4, out, NULL), 0);
	assert_true(fabs(out[0].fluid - 2) < 1e-12 && fabs(out[1].fluid - 2) < 1e-12);
	assert_true(fabs(out[2].fluid - 3) < 1e-12 && fabs(out[3].fluid - 3) < 1e-12);
	/* With a larger pool the groups saturate and d takes everything else. */
	org.org_limit = 30;
	assert_int_equal(run(&org, c, 4, out, NULL), 0);
	assert_true(fabs(out[0].fluid - 2) < 1e-12 && fabs(out[2].fluid - 4) < 1e-12);
	assert_true(fabs(out[3].fluid - 22) < 1e-12);
	assert_int_equal(out[2].limited_by, FAIRSHARE_BY_AGENT);
}

/* 10,000 campaigns and 100 agents: still exact, floors in {floor, ceil}, sum = pool. */
static void many_campaigns(void **state)
{
	enum { N = 10000, A = 100 };
	static struct fairshare_campaign c[N];
	static struct fairshare_result out[N];
	static char ids[N][8];
	static uint32_t ar[A];
	struct fairshare_org org = { .system_limit = 100000,
				     .org_limit = 5000,
				     .per_agent = 40,
				     .enforced = true,
				     .agent_running = ar,
				     .n_agents = A };
	struct fairshare_summary sum;
	uint64_t total = 0;

	for (uint32_t i = 0; i < N; i++) {
		snprintf(ids[i], sizeof(ids[i]), "%05u", i);
		c[i] = backlogged(ids[i], i % A);
		c[i].due = 1 + i % 7;
	}
	assert_int_equal(run(&org, c, N, out, &sum), 0);
	for (uint32_t i = 0; i < N; i++) {
		assert_true(out[i].floor == (uint32_t)floor(out[i].fluid + 1e-9) ||
			    out[i].floor == (uint32_t)ceil(out[i].fluid - 1e-9));
		total += out[i].floor;
	}
	assert_int_equal(total, sum.floors_total);
	assert_int_equal(sum.floors_total, A * 40); /* every agent saturates: 100 * 40 < 5000 */
}

static void gate_setup(struct fairshare_gate *g, struct fairshare_gate_campaign *gc,
		       struct fairshare_gate_agent *ga)
{
	struct fairshare_gate_limits lim = { 20, FAIRSHARE_UNLIMITED, true };

	gc[0] = (struct fairshare_gate_campaign){ .ceiling = FAIRSHARE_UNLIMITED, .agent = 0 };
	gc[1] = (struct fairshare_gate_campaign){ .ceiling = FAIRSHARE_UNLIMITED,
						  .agent = FAIRSHARE_NO_AGENT };
	assert_int_equal(fairshare_gate_init(g, &lim, gc, 2, 1, ga, 1), 0);
}

static void gate_rejects_bad_input(void **state)
{
	struct fairshare_gate g;
	struct fairshare_gate_campaign gc[2];
	struct fairshare_gate_agent ga[1];
	struct fairshare_gate_limits lim = { 0, FAIRSHARE_UNLIMITED, true };
	struct fairshare_system sys = { 10, 0 };
	struct fairshare_decision d;
	uint32_t floors[2] = { 1, 0 };

	gate_setup(&g, gc, ga);
	assert_int_equal(fairshare_gate_set_limits(&g, &lim), -EINVAL);
	assert_int_equal(fairshare_gate_set_ceiling(&g, 2, 1), -EINVAL);
	/* A batch call must carry its campaign's agent; a direct dial any known agent. */
	assert_int_equal(fairshare_gate_admit(&g, &sys, &(struct fairshare_slot){ 0, 5 }, 0, &d),
			 -EINVAL);
	assert_int_equal(fairshare_gate_admit(&g, &sys, &(struct fairshare_slot){ 1, 0 }, 0, &d),
			 0);
	assert_int_equal(fairshare_gate_admit(&g, &sys, &(struct fairshare_slot){ 1, 3 }, 0, &d),
			 -EINVAL);
	assert_int_equal(fairshare_gate_install(&g, 1, floors, 1, 0, 10), -EINVAL);
	assert_int_equal(fairshare_gate_install(&g, 0, floors, 2, 0, 10), -ESTALE);
	gc[1].agent = 0; /* the direct pseudo-campaign has no agent of its own */
	assert_int_equal(fairshare_gate_init(&g, &(struct fairshare_gate_limits){ 20, 1, true }, gc,
					     2, 1, ga, 1),
			 -EINVAL);
}

static void gate_fencing_and_expiry(void **state)
{
	struct fairshare_gate g;
	struct fairshare_gate_campaign gc[2];
	struct fairshare_gate_agent ga[1];
	uint32_t f1[2] = { 5, 0 }, f2[2] = { 7, 0 };

	gate_setup(&g, gc, ga);
	assert_false(fairshare_gate_floors_valid(&g, 0));
	assert_int_equal(fairshare_gate_install(&g, 3, f1, 2, 100, 50), 0);
	assert_true(fairshare_gate_floors_valid(&g, 149));
	assert_false(fairshare_gate_floors_valid(&g, 150));
	/* A paused refresher waking up with an older version installs nothing. */
	assert_int_equal(fairshare_gate_install(&g, 2, f2, 2, 200, 50), -ESTALE);
	assert_int_equal(gc[0].floor, 5);
	assert_int_equal(g.shortfall, 5);
	assert_int_equal(fairshare_gate_install(&g, 4, f2, 2, 200, UINT64_MAX), 0);
	assert_true(fairshare_gate_floors_valid(&g, UINT64_MAX - 1));
	assert_int_equal(g.shortfall, 7);
}

static void gate_counts_stay_in_range(void **state)
{
	struct fairshare_gate g;
	struct fairshare_gate_campaign gc[2];
	struct fairshare_gate_agent ga[1];
	struct fairshare_system sys = { 1000, FAIRSHARE_COUNT_MAX };
	struct fairshare_slot batch = { 0, 0 }, direct = { 1, FAIRSHARE_NO_AGENT };

	gate_setup(&g, gc, ga);
	assert_int_equal(fairshare_gate_acquire(&g, &sys, &batch), -EOVERFLOW);
	sys.running = 0;
	assert_int_equal(fairshare_gate_release(&g, &sys, &batch), -ERANGE);
	assert_int_equal(fairshare_gate_acquire(&g, &sys, &direct), 0);
	/* The system count belongs to another org's call: releasing ours twice stops at 0. */
	assert_int_equal(fairshare_gate_release(&g, &sys, &direct), 0);
	assert_int_equal(fairshare_gate_release(&g, &sys, &direct), -ERANGE);
	assert_int_equal(g.org_running, 0);
	assert_int_equal(sys.running, 0);
	assert_int_equal(fairshare_gate_direct_unwait(&g), -ERANGE);
	g.direct_waiting = FAIRSHARE_COUNT_MAX;
	assert_int_equal(fairshare_gate_direct_wait(&g), -EOVERFLOW);
}

/* Recomputes c[0..3) on 2 lines after elapsed_ms and carries the results forward. */
static void step3(struct fairshare_org *org, struct fairshare_campaign *c,
		  struct fairshare_result *out, uint64_t elapsed_ms)
{
	org->elapsed_ms = elapsed_ms;
	assert_int_equal(run(org, c, 3, out, NULL), 0);
	for (int i = 0; i < 3; i++)
		c[i].carry = out[i].carry;
}

/* R5's grace: a campaign whose backlog empties for a moment keeps its deficit, frozen, for
 * FAIRSHARE_DEFICIT_GRACE_MS; then it forgets it (review finding 10). */
static void flicker_keeps_deficit(void **state)
{
	struct fairshare_org org = { .system_limit = 1000,
				     .org_limit = 2,
				     .enforced = true,
				     .per_agent = FAIRSHARE_UNLIMITED };
	struct fairshare_campaign c[3] = { backlogged("A", FAIRSHARE_NO_AGENT),
					   backlogged("B", FAIRSHARE_NO_AGENT),
					   backlogged("C", FAIRSHARE_NO_AGENT) };
	struct fairshare_result out[3];
	int64_t kept;

	step3(&org, c, out, 0); /* 2/3 each: A and B rounded up (ties by id) */
	assert_true(out[0].floor == 1 && out[1].floor == 1 && out[2].floor == 0);
	c[0].due = 0; /* A's backlog empties */
	step3(&org, c, out, 1000);
	assert_false(out[0].active);
	kept = out[0].carry.deficit; /* (2/3 - 1) * 1 s */
	assert_int_equal(kept, -333333);
	assert_int_equal(out[0].carry.idle_ms, 1000);
	assert_int_equal(out[0].carry.fluid_den, 0); /* frozen: nothing accrues while idle */
	step3(&org, c, out, FAIRSHARE_DEFICIT_GRACE_MS - 1000);
	assert_int_equal(out[0].carry.deficit, kept);
	c[0].due = 10; /* back within the grace: the deficit counts again */
	step3(&org, c, out, 0);
	assert_true(out[0].active);
	assert_int_equal(out[0].carry.deficit, kept);
	c[0].due = 0;
	step3(&org, c, out, FAIRSHARE_DEFICIT_GRACE_MS + 1); /* gone too long: forgotten */
	assert_int_equal(out[0].carry.deficit, 0);
	assert_int_equal(out[0].carry.idle_ms, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(recompute_rejects_bad_input),
		cmocka_unit_test(limited_by_sentences),
		cmocka_unit_test(fluid_is_exact),
		cmocka_unit_test(agent_groups_cap_together),
		cmocka_unit_test(many_campaigns),
		cmocka_unit_test(flicker_keeps_deficit),
		cmocka_unit_test(gate_rejects_bad_input),
		cmocka_unit_test(gate_fencing_and_expiry),
		cmocka_unit_test(gate_counts_stay_in_range),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
