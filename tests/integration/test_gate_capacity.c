/* The capacity view from the Redis gate (SPEC C12, issue 8 item 4): a state built by admissions
 * through the real scripts, read in one round trip (gate_read()), turned into the snapshot of
 * core/capacity.h (gate_capacity_snapshot()), answers the source document's example exactly. */
#include "capacity.h"
#include "fixture.h"
#include "gate_capacity.h"
#include "gate_harness.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

static struct embedded svc;
static struct gate_env env;
static const char *const orgs[] = { "oc", NULL };

struct answer {
	int calls, status, rc;
	struct capacity_answer a;
	char sentence[160];
	uint32_t n;
};

/* Per campaign of the read: what the caller knows from PostgreSQL (sorted by id). */
static const struct capacity_meta meta[] = {
	{ .id = "A", .state = FAIRSHARE_RUNNING, .active = true },
	{ .id = "B", .state = FAIRSHARE_RUNNING, .active = true },
};

static void read_cb(struct gate *g, int status, const struct gate_view *v, void *data)
{
	struct answer *o = data;
	struct capacity_org org;
	struct capacity_campaign cs[8];
	uint32_t agents[8];
	uint64_t work[8];

	(void)g;
	o->calls++;
	o->status = status;
	if (status)
		return;
	o->rc = gate_capacity_snapshot(v, meta, 2, "A", &org, cs, agents, &o->n);
	if (o->rc)
		return;
	uint32_t i = capacity_find(cs, o->n, "A");
	o->rc = i == UINT32_MAX ? -ENOENT : capacity_view(&org, cs, o->n, i, work, &o->a);
	if (!o->rc)
		fairshare_limited_by_format(o->a.limited_by, o->a.limited_by_value, o->sentence,
					    sizeof(o->sentence));
}

static void source_example(void **state)
{
	(void)state;
	genv_fresh(&env, 1000, orgs);
	assert_int_equal(genv_limits(&env, "oc", 1, 20, 0, true, "A:50: B::", NULL), 0);
	assert_int_equal(genv_floors(&env, "oc", 1, 600000, "A:10 B:10", NULL), 0);
	for (int i = 0; i < 17; i++) {
		char call[16];
		snprintf(call, sizeof(call), "c%d", i);
		struct admit_out o = genv_admit(&env, "oc", call, i < 7 ? "A" : "B");
		assert_int_equal(o.status, 0);
		assert_int_equal(o.r.outcome, GATE_ADMITTED);
	}

	struct answer o = { 0 };
	assert_int_equal(gate_read(env.g, "oc", read_cb, &o), 0);
	fixture_run_until_count(&env.loop, &o.calls, 1, GENV_TIMEOUT_MS);
	assert_int_equal(o.status, 0);
	assert_int_equal(o.rc, 0);
	assert_int_equal(o.a.running_now, 7);
	assert_int_equal(o.a.effective_limit, 10);
	assert_string_equal(o.sentence,
			    "a fair share of the organisation pool across 2 active campaigns");
	assert_int_equal(o.a.campaign_limit, 50);
	assert_int_equal(o.a.org_limit, 20);
	assert_int_equal(o.a.available_now, 3);
	assert_int_equal(o.a.active_campaigns, 2);
	assert_int_equal(o.a.guaranteed_floor, 10);
	assert_int_equal(o.a.reserved_for_other_campaigns, 10);

	/* available_now is what the script admits: three more of A, then a refusal. */
	for (int i = 0; i < 4; i++) {
		char call[16];
		snprintf(call, sizeof(call), "a%d", i);
		struct admit_out r = genv_admit(&env, "oc", call, "A");
		assert_int_equal(r.status, 0);
		assert_int_equal(r.r.outcome, i < 3 ? GATE_ADMITTED : GATE_REFUSED);
	}
}

/* A campaign the gate holds nothing for is answered with zero counts, inactive (reading V2). */
static void unknown_campaign(void **state)
{
	(void)state;
	genv_fresh(&env, 1000, orgs);
	assert_int_equal(genv_limits(&env, "oc", 1, 20, 0, true, "B::", NULL), 0);
	assert_int_equal(genv_floors(&env, "oc", 1, 600000, "B:20", NULL), 0);
	assert_int_equal(genv_admit(&env, "oc", "b1", "B").r.outcome, GATE_ADMITTED);
	struct answer o = { 0 };
	assert_int_equal(gate_read(env.g, "oc", read_cb, &o), 0);
	fixture_run_until_count(&env.loop, &o.calls, 1, GENV_TIMEOUT_MS);
	assert_int_equal(o.status, 0);
	assert_int_equal(o.rc, 0);
	assert_int_equal(o.a.running_now, 0);
	assert_int_equal(o.a.guaranteed_floor, 0);
}

static int setup(void **state)
{
	fixture_start(&svc, false, true, false, false);
	genv_open(&env, svc.redis_url, "gate-capacity", true);
	return 0;
}

static int teardown(void **state)
{
	genv_close(&env);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(source_example),
		cmocka_unit_test(unknown_campaign),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
