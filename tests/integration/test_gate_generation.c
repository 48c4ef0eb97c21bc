/* The system generation on the gate's writes to the system count (issue 8, SPEC C11; review
 * defect 1). The way back starts generation G2 with gate_system_init (system count 0), then
 * rebuilds each org in its own script: between the two an org not yet rebuilt still carries G1,
 * and a worker still on G1 passes that org's guard. Its release (after a stale-epoch write
 * refusal, or of an ended call) and the reconciler's slot add must not move the new build's
 * system count: both answer GATE_ELOST (STALEGEN sys) and write nothing, as an admission does.
 * Real Redis, one process. */
#include "error.h"
#include "fixture.h"
#include "gate_harness.h"
#include "gate_int.h"
#include "gate_recon.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

static struct embedded svc;
static struct gate_env env;
static const char *const orgs[] = { "o1", "o2", NULL };

static bool is_up(void *arg)
{
	return redis_conn_is_up(arg);
}

/* genv_open() with the reconciler's scripts registered too (gate_slot_add.lua). */
static void open_env(struct gate_env *e)
{
	struct redis_conn_options o = {
		.url = svc.redis_url,
		.name = "gen-test",
		.connect_timeout_ms = 10000,
		.command_timeout_ms = 60000,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 200,
		.generation_key = GATE_SYS_GEN_KEY,
	};

	memset(e, 0, sizeof(*e));
	assert_int_equal(uv_loop_init(&e->loop), 0);
	assert_int_equal(redis_scripts_new(&e->reg), 0);
	assert_int_equal(gate_test_scripts_register(e->reg), 0);
	assert_int_equal(gate_recon_scripts_register(e->reg), 0);
	o.scripts = e->reg;
	assert_int_equal(redis_conn_new(&e->loop, &o, &e->conn), 0);
	assert_int_equal(gate_new(e->conn, e->reg, GENV_GEN, &e->g), 0);
	assert_int_equal(redis_conn_start(e->conn), 0);
	fixture_run_until(&e->loop, is_up, e->conn, GENV_TIMEOUT_MS);
}

struct add_wait {
	int done, status;
	bool added;
};

static void add_cb(int status, bool added, void *data)
{
	struct add_wait *w = data;

	w->done = 1;
	w->status = status;
	w->added = added;
}

static bool add_done(void *arg)
{
	return ((struct add_wait *)arg)->done;
}

static int slot_add(const char *org, const struct gate_slot_record *rec, bool *added)
{
	struct add_wait w = { 0 };

	assert_int_equal(gate_slot_add(env.g, env.reg, org, rec, add_cb, &w), 0);
	fixture_run_until(&env.loop, add_done, &w, GENV_TIMEOUT_MS);
	*added = w.added;
	return w.status;
}

static long long slot_exists(const char *org, const char *call)
{
	char key[128];

	assert_true(gate_org_key(org, "slots", key, sizeof(key)) > 0);
	return genv_cmd(&env, NULL, 0, "HEXISTS", key, call, NULL);
}

/* The reviewer's sequence (system limit 2): c1 (o1) and d1 (o2) live under G1; the way back
 * under G2 has rebuilt o1 with c1, not o2 yet; a worker on G1 releases d1. Refused: the new
 * system count keeps its one live call (c1), d1's record stays for o2's rebuild to drop, and
 * after the way back the system level admits exactly one more call. */
static void stale_release_refused(void **state)
{
	struct view_copy v;
	struct admit_out o;
	struct release_out r;
	struct gate_slot_record c1 = {
		.call = "c1", .campaign = "A", .agent = NULL, .taken_ms = 1
	};

	(void)state;
	genv_fresh(&env, 2, orgs); /* system limit 2, generation G1 */
	assert_int_equal(genv_limits(&env, "o1", 1, 10, 0, true, "A::", NULL), 0);
	assert_int_equal(genv_limits(&env, "o2", 1, 10, 0, true, "B::", NULL), 0);
	o = genv_admit(&env, "o1", "c1", "A");
	assert_int_equal(o.r.outcome, GATE_ADMITTED);
	o = genv_admit(&env, "o2", "d1", "B");
	assert_int_equal(o.r.outcome, GATE_ADMITTED);

	/* The way back under G2: system init, then o1 rebuilt with its one live call c1. */
	assert_int_equal(gate_set_generation(env.g, "G2"), 0);
	assert_int_equal(genv_system_init(&env, 2, 2), 0);
	assert_int_equal(genv_rebuild(&env, "o1", &c1, 1), 0);

	/* A worker still on G1 releases d1 before o2 is rebuilt: refused, nothing written. */
	assert_int_equal(gate_set_generation(env.g, GENV_GEN), 0);
	r = genv_release(&env, "o2", "d1");
	assert_int_equal(r.status, GATE_ELOST);
	assert_int_equal(slot_exists("o2", "d1"), 1);
	r = genv_release(&env, "o2", "nobody"); /* not held either: refused the same way */
	assert_int_equal(r.status, GATE_ELOST);

	assert_int_equal(gate_set_generation(env.g, "G2"), 0);
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(v.v.system_running, 1); /* c1, counted by o1's rebuild */
	/* o2 rebuilt from the live calls: d1 ended, so none. */
	assert_int_equal(genv_rebuild(&env, "o2", NULL, 0), 0);
	assert_int_equal(genv_read(&env, "o2", &v), 0);
	assert_int_equal(v.v.system_running, 1);

	/* No level exceeded: one more call fits the system limit of 2, the next is refused. */
	o = genv_admit(&env, "o2", "e0", "B");
	assert_int_equal(o.status, 0);
	assert_int_equal(o.r.outcome, GATE_ADMITTED);
	o = genv_admit(&env, "o2", "e1", "B");
	assert_int_equal(o.status, 0);
	assert_int_equal(o.r.outcome, GATE_REFUSED);
	assert_int_equal(o.r.decisions[0].level, FAIRSHARE_LEVEL_SYSTEM);

	/* Every call ends: each release frees (no count found at 0), every count back to 0. */
	r = genv_release(&env, "o2", "e0");
	assert_int_equal(r.status, 0);
	assert_int_equal(r.r.outcome, GATE_FREED);
	r = genv_release(&env, "o1", "c1");
	assert_int_equal(r.status, 0);
	assert_int_equal(r.r.outcome, GATE_FREED);
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(v.v.org_running, 0);
	assert_int_equal(v.v.system_running, 0);
	assert_int_equal(v.v.slots, 0);
	assert_int_equal(gate_set_generation(env.g, GENV_GEN), 0);
}

/* The reconciler's slot add under an org's old generation (a pass that read G1 before the way
 * back's system init): refused, the new system count untouched; under G2 once the org is
 * rebuilt, the slot is put back. */
static void stale_slot_add_refused(void **state)
{
	struct view_copy v;
	struct gate_slot_record rec = {
		.call = "x1", .campaign = "A", .agent = NULL, .taken_ms = 5
	};
	bool added = true;

	(void)state;
	genv_fresh(&env, 2, orgs);
	assert_int_equal(genv_limits(&env, "o1", 1, 10, 0, true, "A::", NULL), 0);
	assert_int_equal(gate_set_generation(env.g, "G2"), 0);
	assert_int_equal(genv_system_init(&env, 2, 2), 0);

	assert_int_equal(gate_set_generation(env.g, GENV_GEN), 0);
	assert_int_equal(slot_add("o1", &rec, &added), GATE_ELOST);
	assert_int_equal(slot_exists("o1", "x1"), 0);

	assert_int_equal(gate_set_generation(env.g, "G2"), 0);
	assert_int_equal(genv_rebuild(&env, "o1", NULL, 0), 0);
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(v.v.system_running, 0);
	assert_int_equal(slot_add("o1", &rec, &added), 0);
	assert_true(added);
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(v.v.system_running, 1);
	assert_int_equal(v.v.org_running, 1);
	assert_int_equal(genv_release(&env, "o1", "x1").r.outcome, GATE_FREED);
	assert_int_equal(gate_set_generation(env.g, GENV_GEN), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(stale_release_refused),
		cmocka_unit_test(stale_slot_add_refused),
	};
	int rc;

	fixture_start(&svc, false, true, false, false);
	open_env(&env);
	rc = cmocka_run_group_tests(tests, NULL, NULL);
	genv_close(&env);
	embedded_stop(&svc);
	return rc;
}
