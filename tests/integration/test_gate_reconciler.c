/* The reconciler and the gate mode controller (SPEC C11, issue 8) against a real PostgreSQL and
 * Redis: the way back rebuilds Redis from the live call rows and sets redis mode; the periodic
 * pass releases ended rows, keeps young records (a write held on a lock the test holds), fences
 * old orphans; the controller switches the fleet on a lost state (FLUSHALL) and on Redis stopped,
 * adopts the rebuilt generation, and only the one the rebuild's commit recorded (a stale
 * reconciler's is a lost state, for the controller and for the periodic pass). Single process; overlaps made certain with locks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "fixture.h"
#include "gate_harness.h"
#include "gate_mode.h"
#include "gate_pg_test.h"
#include "gate_recon.h"
#include "log_capture.h"
#include "reconciler.h"

static struct embedded svc;
static PGconn *admin, *holder;
static uint64_t command_timeout_ms = 60000; /* env_build()'s Redis command deadline */

struct env {
	struct gate_env ge; /* loop, registry, connection, the worker's gate */
	struct pg_pool *pool;
	struct gate_pg *pg;
	struct reconciler *rec;
	struct gate_mode_ctl *ctl;
	int closed, changes;
};

static void on_redis_event(struct redis_conn *conn, const struct redis_conn_event *ev, void *data)
{
	struct env *e = data;

	(void)conn;
	if (ev->type == REDIS_CONN_UP)
		e->ge.ups++;
	if (e->ctl)
		gate_mode_redis_event(e->ctl, ev);
}

static void mode_notify_cb(const char *channel, const char *payload, void *data)
{
	struct env *e = data;

	(void)channel;
	if (e->ctl)
		gate_mode_notify(e->ctl, payload);
}

static void change_cb(struct gate_mode_ctl *c, const struct gate_mode_state *s, void *data)
{
	(void)c;
	(void)s;
	((struct env *)data)->changes++;
}

static bool env_up(void *arg)
{
	struct env *e = arg;
	return redis_conn_is_up(e->ge.conn) && pg_pool_up_count(e->pool) == pg_pool_size(e->pool);
}

static bool settled(void *arg)
{
	struct gate_mode_state s;

	gate_mode_get(((struct env *)arg)->ctl, &s);
	return s.usable && !s.switching;
}

/* Builds e (nothing started): deadline_ms is the reconciler's write deadline (its orphan age is
 * deadline + 200 ms), period_ms its period. */
static void env_build(struct env *e, uint64_t deadline_ms, uint64_t period_ms)
{
	struct redis_conn_options ro = {
		.url = svc.redis_url,
		.name = "rec",
		.connect_timeout_ms = 10000,
		.command_timeout_ms = command_timeout_ms,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 200,
		.generation_key = GATE_SYS_GEN_KEY,
		.event_cb = on_redis_event,
		.data = e,
	};
	struct pg_pool_options po = {
		.conninfo = svc.database_url,
		.name = "rec",
		.size = 2,
		.priority_size = 1,
		.connect_timeout_ms = 10000,
		.query_timeout_ms = 120000,
		.reconnect_min_ms = 20,
		.reconnect_max_ms = 200,
	};
	struct gate_pg_options go = { .fence_lock_ms = 60000 };

	memset(e, 0, sizeof(*e));
	assert_int_equal(uv_loop_init(&e->ge.loop), 0);
	assert_int_equal(redis_scripts_new(&e->ge.reg), 0);
	assert_int_equal(gate_test_scripts_register(e->ge.reg), 0);
	assert_int_equal(gate_recon_scripts_register(e->ge.reg), 0);
	ro.scripts = e->ge.reg;
	assert_int_equal(redis_conn_new(&e->ge.loop, &ro, &e->ge.conn), 0);
	assert_int_equal(gate_new(e->ge.conn, e->ge.reg, NULL, &e->ge.g), 0);
	assert_int_equal(pg_pool_new(&e->ge.loop, &po, &e->pool), 0);
	assert_int_equal(gate_pg_new(e->pool, &go, &e->pg), 0);
	assert_int_equal(gate_pg_listen(e->pool, NULL, mode_notify_cb, e), 0);
	struct reconciler_options rop = {
		.loop = &e->ge.loop,
		.pool = e->pool,
		.pg = e->pg,
		.conn = e->ge.conn,
		.reg = e->ge.reg,
		.owner = "rec-test",
		.period_ms = period_ms,
		.write_deadline_ms = deadline_ms,
		.margin_ms = 200,
		.rebuild_timeout_ms = 30000,
	};
	assert_int_equal(reconciler_new(&rop, &e->rec), 0);
	struct gate_mode_options mo = {
		.loop = &e->ge.loop,
		.pg = e->pg,
		.gate = e->ge.g,
		.retry_ms = 50,
		.change_cb = change_cb,
		.data = e,
	};
	assert_int_equal(gate_mode_new(&mo, &e->ctl), 0);
}

/* env_build() with a 1 s period, started; returns once the controller has settled on the mode
 * the previous test left (so its first generation read cannot meet the test's own FLUSHALL and
 * switch once more than the test counts). The reconciler is not started: runs are the test's. */
static void env_open(struct env *e, uint64_t deadline_ms)
{
	env_build(e, deadline_ms, 1000);
	assert_int_equal(pg_pool_start(e->pool), 0);
	assert_int_equal(redis_conn_start(e->ge.conn), 0);
	fixture_run_until(&e->ge.loop, env_up, e, 60000);
	assert_int_equal(gate_mode_start(e->ctl), 0);
	fixture_run_until(&e->ge.loop, settled, e, 60000);
}

static void closed_cb(void *data)
{
	(*(int *)data)++;
}

static void env_close(struct env *e)
{
	gate_mode_close(e->ctl);
	e->ctl = NULL;
	reconciler_close(e->rec, closed_cb, &e->closed);
	pg_pool_close(e->pool, closed_cb, &e->closed);
	redis_conn_close(e->ge.conn, closed_cb, &e->closed);
	fixture_run_until_count(&e->ge.loop, &e->closed, 3, 60000);
	gate_pg_free(e->pg);
	gate_free(e->ge.g);
	fixture_loop_close(&e->ge.loop);
	redis_scripts_free(e->ge.reg);
}

struct run_probe {
	int done, status;
};

static void run_cb(struct reconciler *r, int status, void *data)
{
	struct run_probe *p = data;

	(void)r;
	p->status = status;
	p->done++;
}

static int rec_run(struct env *e)
{
	struct run_probe p = { 0 };

	assert_int_equal(reconciler_run(e->rec, run_cb, &p), 0);
	fixture_run_until_count(&e->ge.loop, &p.done, 1, 60000);
	return p.status;
}

struct mode_want {
	struct env *e;
	enum gate_mode mode;
	long long epoch;
};

static bool mode_is(void *arg)
{
	struct mode_want *w = arg;
	struct gate_mode_state s;

	gate_mode_get(w->e->ctl, &s);
	return s.mode == w->mode && (long long)s.epoch == w->epoch && s.usable && !s.switching;
}

/* Runs the loop until the controller is usable in mode at epoch. */
static void wait_mode(struct env *e, enum gate_mode mode, long long epoch)
{
	struct mode_want w = { e, mode, epoch };
	fixture_run_until(&e->ge.loop, mode_is, &w, 60000);
}

/* A live call row of org's campaign i (agent <org>_a<i>), written as if admitted at epoch. */
static void insert_call(const char *call, const char *org, int i, const char *state)
{
	gp_sql(admin,
	       "INSERT INTO calls (id, org_id, campaign_id, agent_id, to_number, state, gate_mode,"
	       " gate_epoch, ended_at) SELECT '%s', '%s', '%s_c%d', '%s_a%d', '+14155550100',"
	       " '%s', gate_mode, gate_epoch, CASE WHEN '%s' = 'ended' THEN now() END"
	       " FROM system_settings",
	       call, org, org, i, org, i, state, state);
}

static long long slot_count(struct env *e, const char *org)
{
	char key[128];

	gate_org_key(org, "slots", key, sizeof(key));
	return genv_cmd(&e->ge, NULL, 0, "HLEN", key, NULL);
}

static bool slot_exists(struct env *e, const char *org, const char *call)
{
	char key[128];

	gate_org_key(org, "slots", key, sizeof(key));
	return genv_cmd(&e->ge, NULL, 0, "HEXISTS", key, call, NULL) == 1;
}

/* Every live call row of org has its slot record and there is no other record. */
static void assert_records_equal_rows(struct env *e, const char *org)
{
	PGresult *res;
	char sql[256];

	snprintf(sql, sizeof(sql),
		 "SELECT id::text FROM calls WHERE org_id = '%s'"
		 " AND state IN ('dialing', 'live', 'unknown')",
		 org);
	res = fixture_sql(admin, sql);
	assert_int_equal(slot_count(e, org), PQntuples(res));
	for (int i = 0; i < PQntuples(res); i++)
		assert_true(slot_exists(e, org, PQgetvalue(res, i, 0)));
	PQclear(res);
}

static void reset(void)
{
	gp_sql(admin, "DELETE FROM calls");
	gp_sql(admin, "DELETE FROM gate_fences");
	gp_sql(admin, "UPDATE leases SET owner = NULL, lease_until = '-infinity'"
		      " WHERE name = 'reconciler'");
	gp_sql(admin, "UPDATE contacts SET state = 'claimed'");
}

/* Postgres mode with live calls in PostgreSQL and an empty Redis → the reconciler rebuilds the
 * records, counts, limits, floors and generation, and sets redis mode epoch + 1; the worker's
 * controller adopts the generation and admits through Redis again. */
static void way_back(void **state)
{
	struct env e;
	char id[8][37];
	long long epoch;
	struct view_copy v;

	(void)state;
	reset();
	env_open(&e, 2000);
	genv_cmd(&e.ge, NULL, 0, "FLUSHALL", NULL);
	epoch = gp_epoch(admin);
	gp_sql(admin,
	       "UPDATE system_settings SET gate_mode = 'postgres', gate_epoch = gate_epoch + 1");
	epoch++;
	gp_sql(admin, "INSERT INTO fair_share_installs (org_id, version, expires_at)"
		      " VALUES ('ra', 5, now() + interval '1 hour')"
		      " ON CONFLICT (org_id) DO UPDATE SET version = 5,"
		      " expires_at = now() + interval '1 hour'");
	gp_sql(admin, "INSERT INTO fair_share_floors (org_id, campaign_id, floor, version)"
		      " VALUES ('ra', 'ra_c0', 3, 5), ('ra', 'ra_c1', 2, 5)"
		      " ON CONFLICT (org_id, campaign_id) DO UPDATE SET floor = excluded.floor");
	for (unsigned i = 0; i < 5; i++)
		insert_call(gp_uuid(id[i], 100 + i), "ra", (int)(i % 2), "dialing");
	insert_call(gp_uuid(id[5], 105), "ra", 0, "ended");
	insert_call(gp_uuid(id[6], 106), "rb", 0, "live");
	gate_mode_pg_up(e.ctl);
	wait_mode(&e, GATE_MODE_POSTGRES, epoch);

	assert_int_equal(rec_run(&e), 0);
	assert_int_equal(gp_epoch(admin), epoch + 1);
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM system_settings"
				       " WHERE gate_mode = 'redis'"),
			 1);
	wait_mode(&e, GATE_MODE_REDIS, epoch + 1);
	assert_records_equal_rows(&e, "ra");
	assert_records_equal_rows(&e, "rb");
	assert_int_equal(genv_read(&e.ge, "ra", &v), 0);
	assert_int_equal(v.v.org_running, 5);
	assert_int_equal(v.v.org_limit, 6);
	assert_int_equal(v.v.system_running, 6);
	assert_int_equal(v.v.system_limit, 1000);
	assert_int_equal(view_running(&v, "ra_c0"), 3);
	assert_int_equal(view_floor(&v, "ra_c0"), 3);
	assert_int_equal(view_floor(&v, "ra_c1"), 2);
	assert_true(v.v.floors_valid);
	/* The worker admits in Redis again: one line left of org_limit 6. */
	struct admit_out a = genv_admit(&e.ge, "ra", gp_uuid(id[7], 107), "ra_c1");
	assert_int_equal(a.status, 0);
	assert_int_equal(a.r.outcome, GATE_ADMITTED);
	a = genv_admit(&e.ge, "ra", gp_uuid(id[7], 108), "ra_c1 ra_c0");
	assert_int_equal(a.status, 0);
	assert_int_equal(a.r.outcome, GATE_REFUSED);
	/* In redis mode, a run is a periodic pass: nothing to correct but the young record. */
	assert_int_equal(rec_run(&e), 0);
	struct reconciler_stats st;
	reconciler_get_stats(e.rec, &st);
	assert_int_equal(st.rebuilds, 1);
	assert_int_equal(st.young, 1);
	assert_int_equal(st.released + st.fenced + st.missing, 0);
	env_close(&e);
}

static struct gp_write wr;

/* Redis mode: a record whose row ended is released; a record without a row whose write is held
 * on a lock the test holds is young and survives, and its write fails at its deadline and
 * releases; an old record without a row is fenced and released, and its late write is FENCED; a
 * live row without a record is counted missing and its slot added back. */
static void periodic_pass(void **state)
{
	struct env e;
	char id[6][37], camp[16] = "ra_c0", agent[16] = "ra_a0";
	struct reconciler_stats st;
	long long epoch;

	(void)state;
	reset();
	env_open(&e, 1500);
	genv_cmd(&e.ge, NULL, 0, "FLUSHALL", NULL);
	gp_sql(admin,
	       "UPDATE system_settings SET gate_mode = 'postgres', gate_epoch = gate_epoch + 1");
	epoch = gp_epoch(admin);
	gate_mode_pg_up(e.ctl);
	wait_mode(&e, GATE_MODE_POSTGRES, epoch);
	assert_int_equal(rec_run(&e), 0);
	epoch++;
	wait_mode(&e, GATE_MODE_REDIS, epoch);

	/* id0: admitted, row written, then ended without a release (a lost release). */
	assert_int_equal(genv_admit(&e.ge, "ra", gp_uuid(id[0], 200), "ra_c0").r.outcome,
			 GATE_ADMITTED);
	insert_call(id[0], "ra", 0, "ended");
	/* id1: admitted; its write will be held on the contact's row lock. */
	long long contact = gp_contact(admin, "ra", 0, 0);
	assert_int_equal(genv_admit(&e.ge, "ra", gp_uuid(id[1], 201), "ra_c0").r.outcome,
			 GATE_ADMITTED);
	/* id2: a live row with no record (a lost slot). */
	insert_call(gp_uuid(id[2], 202), "ra", 1, "dialing");
	gp_sql(holder, "BEGIN");
	gp_sql(holder, "SELECT 1 FROM contacts WHERE id = %lld FOR UPDATE", contact);
	struct gate_pg_call c = gp_call(id[1], "ra", camp, agent, contact);
	memset(&wr, 0, sizeof(wr));
	assert_int_equal(gate_pg_write(e.pg, GATE_MODE_REDIS, (uint64_t)epoch, 1000, &c, 1,
				       gp_write_cb, &wr),
			 0);
	gp_wait_for(&e.ge.loop, admin, "transactionid", 1);
	/* The reconciler runs while the write waits: id1 is young and kept. */
	assert_int_equal(rec_run(&e), 0);
	reconciler_get_stats(e.rec, &st);
	assert_int_equal(st.released, 1);
	assert_int_equal(st.young, 1);
	assert_int_equal(st.missing, 1);
	assert_int_equal(st.added, 1);
	assert_int_equal(st.fenced, 0);
	assert_false(slot_exists(&e, "ra", id[0]));
	assert_true(slot_exists(&e, "ra", id[2]));
	assert_true(slot_exists(&e, "ra", id[1]));
	/* The write passes its deadline: cancelled by the server, it releases. */
	fixture_run_until_count(&e.ge.loop, &wr.calls, 1, 60000);
	gp_sql(holder, "ROLLBACK");
	assert_int_equal(wr.out[0], GATE_PG_DEADLINE);
	assert_true(gate_pg_outcome_releases(wr.out[0]));
	assert_int_equal(genv_release(&e.ge, "ra", id[1]).r.outcome, GATE_FREED);
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM calls WHERE id = '%s'", id[1]), 0);

	/* id3: admitted, no row ever; once older than deadline + margin it is fenced. */
	assert_int_equal(genv_admit(&e.ge, "ra", gp_uuid(id[3], 203), "ra_c0").r.outcome,
			 GATE_ADMITTED);
	fixture_sleep_ms(1900); /* the orphan rule's age, not a race */
	assert_int_equal(rec_run(&e), 0);
	reconciler_get_stats(e.rec, &st);
	assert_int_equal(st.fenced, 1);
	assert_false(slot_exists(&e, "ra", id[3]));
	c = gp_call(id[3], "ra", camp, agent, gp_contact(admin, "ra", 0, 1));
	memset(&wr, 0, sizeof(wr));
	assert_int_equal(gate_pg_write(e.pg, GATE_MODE_REDIS, (uint64_t)epoch, 2000, &c, 1,
				       gp_write_cb, &wr),
			 0);
	fixture_run_until_count(&e.ge.loop, &wr.calls, 1, 60000);
	assert_int_equal(wr.out[0], GATE_PG_FENCED);
	struct view_copy v;
	assert_int_equal(genv_read(&e.ge, "ra", &v), 0);
	assert_int_equal(v.v.org_running, 1); /* id2, added back */
	reconciler_get_stats(e.rec, &st);
	assert_int_equal(st.missing, 1); /* once: the next passes found its record */
	assert_int_equal(st.added, 1);
	env_close(&e);
}

/* Redis mode, org rc at its limit (3 live calls): one call's slot is lost (its record and its
 * counts gone from Redis, its row still live). Redis under-counts the org: an admission would
 * fit. The periodic pass puts the slot back (record, system/org/campaign/agent counts + 1, no
 * limit check) and the admission that fitted only because of the missing record is refused. */
static void lost_slot_added(void **state)
{
	struct env e;
	char id[4][37];
	struct reconciler_stats st;
	struct view_copy v, w;
	long long epoch;

	(void)state;
	reset();
	env_open(&e, 1500);
	genv_cmd(&e.ge, NULL, 0, "FLUSHALL", NULL);
	gp_sql(admin,
	       "UPDATE system_settings SET gate_mode = 'postgres', gate_epoch = gate_epoch + 1");
	epoch = gp_epoch(admin);
	gate_mode_pg_up(e.ctl);
	wait_mode(&e, GATE_MODE_POSTGRES, epoch);
	assert_int_equal(rec_run(&e), 0);
	wait_mode(&e, GATE_MODE_REDIS, epoch + 1);

	for (unsigned i = 0; i < 3; i++) {
		assert_int_equal(
			genv_admit(&e.ge, "rc", gp_uuid(id[i], 300 + i), "rc_c0").r.outcome,
			GATE_ADMITTED);
		insert_call(id[i], "rc", 0, "dialing");
	}
	assert_int_equal(genv_read(&e.ge, "rc", &v), 0);
	assert_int_equal(v.v.org_limit, 3);
	assert_int_equal(v.v.org_running, 3);
	/* The lost slot: id2's record and counts gone (a failover's lost write), its row live. */
	assert_int_equal(genv_release(&e.ge, "rc", id[2]).r.outcome, GATE_FREED);
	assert_false(slot_exists(&e, "rc", id[2]));
	assert_int_equal(genv_read(&e.ge, "rc", &v), 0);
	assert_int_equal(v.v.org_running, 2);
	assert_int_equal(view_running(&v, "rc_c0"), 2);
	assert_int_equal(view_agent_running(&v, "rc_a0"), 2);

	assert_int_equal(rec_run(&e), 0);
	reconciler_get_stats(e.rec, &st);
	assert_int_equal(st.missing, 1);
	assert_int_equal(st.added, 1);
	assert_true(slot_exists(&e, "rc", id[2]));
	assert_records_equal_rows(&e, "rc");
	assert_int_equal(genv_read(&e.ge, "rc", &w), 0);
	assert_int_equal(w.v.org_running, 3);
	assert_int_equal(view_running(&w, "rc_c0"), 3);
	assert_int_equal(view_agent_running(&w, "rc_a0"), 3);
	assert_int_equal(w.v.system_running, v.v.system_running + 1);
	/* The line the missing record seemed to leave is not there. */
	struct admit_out a = genv_admit(&e.ge, "rc", gp_uuid(id[3], 303), "rc_c0");
	assert_int_equal(a.status, 0);
	assert_int_equal(a.r.outcome, GATE_REFUSED);
	assert_int_equal(a.r.decisions[0].level, FAIRSHARE_LEVEL_ORG);
	/* Put back once: the next pass finds the record and adds nothing. */
	assert_int_equal(rec_run(&e), 0);
	reconciler_get_stats(e.rec, &st);
	assert_int_equal(st.missing, 1);
	assert_int_equal(st.added, 1);
	assert_int_equal(genv_read(&e.ge, "rc", &w), 0);
	assert_int_equal(w.v.org_running, 3);
	env_close(&e);
}

/* The controller: a FLUSHALL makes the worker's admission GATE_ELOST → the fleet switches to
 * postgres mode once; the reconciler rebuilds → redis mode; Redis stopped → the connection's
 * down event switches again; restarted → rebuilt → redis mode; records equal the rows. */
static void controller_switches(void **state)
{
	struct env e;
	char id[4][37];
	struct gate_mode_stats ms;
	long long epoch;

	(void)state;
	reset();
	env_open(&e, 2000);
	genv_cmd(&e.ge, NULL, 0, "FLUSHALL", NULL);
	gp_sql(admin,
	       "UPDATE system_settings SET gate_mode = 'postgres', gate_epoch = gate_epoch + 1");
	epoch = gp_epoch(admin);
	gate_mode_pg_up(e.ctl);
	wait_mode(&e, GATE_MODE_POSTGRES, epoch);
	insert_call(gp_uuid(id[0], 300), "ra", 0, "dialing");
	assert_int_equal(rec_run(&e), 0);
	wait_mode(&e, GATE_MODE_REDIS, ++epoch);

	genv_cmd(&e.ge, NULL, 0, "FLUSHALL", NULL);
	struct admit_out a = genv_admit(&e.ge, "ra", gp_uuid(id[1], 301), "ra_c0");
	assert_int_equal(a.status, GATE_ELOST);
	gate_mode_report(e.ctl, (uint64_t)epoch, a.status);
	gate_mode_report(e.ctl, (uint64_t)epoch, a.status); /* a second report changes nothing */
	wait_mode(&e, GATE_MODE_POSTGRES, ++epoch);
	assert_int_equal(gp_epoch(admin), epoch);
	insert_call(gp_uuid(id[2], 302), "ra", 1, "dialing");
	assert_int_equal(rec_run(&e), 0);
	wait_mode(&e, GATE_MODE_REDIS, ++epoch);
	assert_records_equal_rows(&e, "ra");

	assert_int_equal(embedded_redis_stop(&svc), 0);
	wait_mode(&e, GATE_MODE_POSTGRES, ++epoch);
	assert_int_equal(rec_run(&e), 0); /* Redis down: nothing to do */
	assert_int_equal(gp_epoch(admin), epoch);
	assert_int_equal(embedded_redis_start(&svc), 0);
	int ups = e.ge.ups;
	fixture_run_until_count(&e.ge.loop, &e.ge.ups, ups + 1, 60000);
	insert_call(gp_uuid(id[3], 303), "ra", 0, "dialing");
	assert_int_equal(rec_run(&e), 0);
	wait_mode(&e, GATE_MODE_REDIS, ++epoch);
	assert_records_equal_rows(&e, "ra");
	gate_mode_get_stats(e.ctl, &ms);
	assert_int_equal(ms.switches, 2);
	env_close(&e);
}

/* An organisation created after the last rebuild has no Redis state: its admissions answer
 * GATE_ELOST. The periodic pass must build it (no live calls, no records, no :gen) instead of
 * switching the whole fleet to postgres mode; the worker then admits in it through Redis. An
 * org whose :gen is there but of another generation is a lost state: the fleet switches.
 * (Review of issue 8: every new org used to switch the fleet.) */
static void new_org_is_built(void **state)
{
	static const char *const agents[] = { "a0" };
	struct env e;
	char id[1][37], key[128];
	struct reconciler_stats st;
	long long epoch;

	(void)state;
	reset();
	env_open(&e, 2000);
	genv_cmd(&e.ge, NULL, 0, "FLUSHALL", NULL);
	gp_sql(admin,
	       "UPDATE system_settings SET gate_mode = 'postgres', gate_epoch = gate_epoch + 1");
	epoch = gp_epoch(admin);
	gate_mode_pg_up(e.ctl);
	wait_mode(&e, GATE_MODE_POSTGRES, epoch);
	assert_int_equal(rec_run(&e), 0);
	wait_mode(&e, GATE_MODE_REDIS, ++epoch);

	gp_seed_org(admin, "rn", 3, 0, 1, agents, NULL, 1);
	struct admit_out a = genv_admit(&e.ge, "rn", gp_uuid(id[0], 400), "rn_c0");
	assert_int_equal(a.status, GATE_ELOST);
	assert_int_equal(rec_run(&e), 0);
	reconciler_get_stats(e.rec, &st);
	assert_int_equal(st.lost, 0);
	assert_int_equal(st.created, 1);
	assert_int_equal(gp_epoch(admin), epoch); /* no switch */
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM system_settings"
				       " WHERE gate_mode = 'redis'"),
			 1);
	a = genv_admit(&e.ge, "rn", id[0], "rn_c0");
	assert_int_equal(a.status, 0);
	assert_int_equal(a.r.outcome, GATE_ADMITTED);
	struct view_copy v;
	assert_int_equal(genv_read(&e.ge, "rn", &v), 0);
	assert_int_equal(v.v.org_limit, 3);
	assert_int_equal(v.v.org_running, 1);
	assert_int_equal(genv_release(&e.ge, "rn", id[0]).r.outcome, GATE_FREED);
	assert_int_equal(rec_run(&e), 0); /* built: nothing more to do */
	reconciler_get_stats(e.rec, &st);
	assert_int_equal(st.created, 1);
	assert_int_equal(st.lost, 0);

	/* A :gen of another generation is not "never built": the fleet switches. */
	assert_true(gate_org_key("rn", "gen", key, sizeof(key)) > 0);
	genv_cmd(&e.ge, NULL, 0, "SET", key, "e1.other", NULL);
	assert_int_equal(rec_run(&e), GATE_ELOST);
	reconciler_get_stats(e.rec, &st);
	assert_int_equal(st.lost, 1);
	assert_int_equal(gp_epoch(admin), epoch + 1);
	gp_sql(admin, "DELETE FROM organisations WHERE id = 'rn'");
	env_close(&e);
}

/* A stale reconciler (issue 8 review): reconciler A paused after starting its way back, its
 * transaction timed out and its lease expired; B rebuilt and committed redis mode at epoch E
 * and the worker admitted. A resumes: its queued system init and org rebuilds write an older
 * snapshot under its own e<E>.… generation. The worker's next admission answers GATE_ELOST; it
 * must not adopt A's generation (it has the right epoch prefix, but it is not the one committed
 * with epoch E): it switches the fleet to postgres mode, which counts from the call rows. */
static void stale_reconciler_not_adopted(void **state)
{
	struct env e;
	char id[3][37], stale[64], key[128], got[80];
	struct gate_mode_stats before, after;
	struct gate_mode_state s;
	long long epoch;
	PGresult *res;

	(void)state;
	reset();
	env_open(&e, 2000);
	genv_cmd(&e.ge, NULL, 0, "FLUSHALL", NULL);
	gp_sql(admin,
	       "UPDATE system_settings SET gate_mode = 'postgres', gate_epoch = gate_epoch + 1");
	epoch = gp_epoch(admin);
	gate_mode_pg_up(e.ctl);
	wait_mode(&e, GATE_MODE_POSTGRES, epoch);
	insert_call(gp_uuid(id[0], 500), "ra", 0, "dialing"); /* in both snapshots */
	assert_int_equal(rec_run(&e), 0);		      /* B's way back */
	wait_mode(&e, GATE_MODE_REDIS, ++epoch);
	/* The commit recorded B's generation, the one in Redis. */
	genv_cmd(&e.ge, got, sizeof(got), "GET", GATE_SYS_GEN_KEY, NULL);
	res = fixture_sql(admin, "SELECT gate_generation FROM system_settings");
	assert_string_equal(PQgetvalue(res, 0, 0), got);
	PQclear(res);
	struct admit_out a = genv_admit(&e.ge, "ra", gp_uuid(id[1], 501), "ra_c0");
	assert_int_equal(a.status, 0);
	assert_int_equal(a.r.outcome, GATE_ADMITTED); /* after B's commit: not in A's snapshot */

	/* A's late writes: its generation for epoch E, and ra rebuilt from its older snapshot. */
	snprintf(stale, sizeof(stale), "e%lld.00000000stale000", epoch);
	assert_int_not_equal(strcmp(stale, got), 0);
	genv_cmd(&e.ge, NULL, 0, "SET", GATE_SYS_GEN_KEY, stale, NULL);
	assert_true(gate_org_key("ra", "gen", key, sizeof(key)) > 0);
	genv_cmd(&e.ge, NULL, 0, "SET", key, stale, NULL);
	assert_true(gate_org_key("ra", "slots", key, sizeof(key)) > 0);
	genv_cmd(&e.ge, NULL, 0, "HDEL", key, id[1], NULL);

	gate_mode_get_stats(e.ctl, &before);
	a = genv_admit(&e.ge, "ra", gp_uuid(id[2], 502), "ra_c0");
	assert_int_equal(a.status, GATE_ELOST);
	gate_mode_report(e.ctl, (uint64_t)epoch, a.status);
	gate_mode_get(e.ctl, &s);
	assert_false(s.usable);
	fixture_run_until(&e.ge.loop, settled, &e, 60000);
	gate_mode_get(e.ctl, &s);
	gate_mode_get_stats(e.ctl, &after);
	assert_int_equal(after.adopted, before.adopted); /* A's generation not adopted */
	assert_int_equal(s.mode, GATE_MODE_POSTGRES);	 /* state lost: the fleet switched */
	assert_int_equal((long long)s.epoch, epoch + 1);
	assert_int_equal(gp_epoch(admin), epoch + 1);
	assert_int_equal(after.switches, before.switches + 1);
	env_close(&e);
}

/* The periodic pass builds and corrects only under the generation committed for the epoch. A
 * stale reconciler's late {sys}:gen (right epoch prefix, not the committed one) is in Redis and
 * an org created after the rebuild has no state: the pass must not build it under that
 * generation (it used to: created 1); it stops and the fleet switches. */
static void foreign_generation_not_built(void **state)
{
	static const char *const agents[] = { "a0" };
	struct env e;
	char stale[64], key[128];
	struct reconciler_stats st;
	long long epoch;

	(void)state;
	reset();
	env_open(&e, 2000);
	genv_cmd(&e.ge, NULL, 0, "FLUSHALL", NULL);
	gp_sql(admin,
	       "UPDATE system_settings SET gate_mode = 'postgres', gate_epoch = gate_epoch + 1");
	epoch = gp_epoch(admin);
	gate_mode_pg_up(e.ctl);
	wait_mode(&e, GATE_MODE_POSTGRES, epoch);
	assert_int_equal(rec_run(&e), 0);
	wait_mode(&e, GATE_MODE_REDIS, ++epoch);

	gp_seed_org(admin, "aa", 3, 0, 1, agents, NULL, 1); /* first in the pass's order */
	snprintf(stale, sizeof(stale), "e%lld.00000000stale000", epoch);
	genv_cmd(&e.ge, NULL, 0, "SET", GATE_SYS_GEN_KEY, stale, NULL);
	assert_int_equal(rec_run(&e), GATE_ELOST);
	reconciler_get_stats(e.rec, &st);
	assert_int_equal(st.created, 0);
	assert_int_equal(st.foreign_gen, 1);
	assert_int_equal(st.lost, 1);
	assert_true(gate_org_key("aa", "gen", key, sizeof(key)) > 0);
	assert_int_equal(genv_cmd(&e.ge, NULL, 0, "EXISTS", key, NULL), 0); /* nothing built */
	assert_int_equal(gp_epoch(admin), epoch + 1);			    /* switched */
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM system_settings"
				       " WHERE gate_mode = 'postgres'"),
			 1);
	gp_sql(admin, "DELETE FROM organisations WHERE id = 'aa'");
	env_close(&e);
}

/* A fresh install (issue 9): mode redis, no generation recorded, no live call, an empty Redis.
 * Sets that state with a short-lived env and returns the epoch. */
static long long fresh_install(void)
{
	struct env e;

	reset();
	env_open(&e, 2000);
	genv_cmd(&e.ge, NULL, 0, "FLUSHALL", NULL);
	env_close(&e);
	gp_sql(admin, "UPDATE system_settings SET gate_mode = 'redis', gate_epoch = gate_epoch + 1,"
		      " gate_generation = NULL");
	return gp_epoch(admin);
}

static bool redis_usable(void *arg)
{
	struct gate_mode_state s;

	gate_mode_get(((struct env *)arg)->ctl, &s);
	return s.mode == GATE_MODE_REDIS && s.usable && !s.switching;
}

struct rebuilds_want {
	struct env *e;
	uint64_t n;
};

/* The reconciler has counted n ways back. Its commit's answer and the mode's NOTIFY come on
 * different connections: a controller may be usable before the reconciler has heard its own
 * commit. */
static bool rebuilds_reached(void *arg)
{
	struct rebuilds_want *w = arg;
	struct reconciler_stats st;

	reconciler_get_stats(w->e->rec, &st);
	return st.rebuilds >= w->n;
}

/* The initial build: a redis epoch with no generation recorded is built by the way back's
 * transaction directly (no switch to postgres mode first): epoch + 1, the generation recorded,
 * then adopted by the worker's controller without a switch. */
static void initial_build(void **state)
{
	struct env e;
	struct reconciler_stats st;
	struct gate_mode_stats ms;

	(void)state;
	long long epoch = fresh_install();
	env_build(&e, 2000, 1000);
	assert_int_equal(pg_pool_start(e.pool), 0);
	assert_int_equal(redis_conn_start(e.ge.conn), 0);
	fixture_run_until(&e.ge.loop, env_up, &e, 60000);
	assert_int_equal(rec_run(&e), 0);
	assert_int_equal(gp_epoch(admin), epoch + 1);
	assert_int_equal(gp_int(admin,
				"SELECT count(*) FROM system_settings WHERE gate_mode ="
				" 'redis' AND gate_generation LIKE 'e%lld.%%'",
				epoch + 1),
			 1);
	reconciler_get_stats(e.rec, &st);
	assert_int_equal(st.rebuilds, 1);
	assert_int_equal(gate_mode_start(e.ctl), 0);
	wait_mode(&e, GATE_MODE_REDIS, epoch + 1);
	gate_mode_get_stats(e.ctl, &ms);
	assert_int_equal(ms.switches, 0);
	assert_int_equal(ms.adopted, 1);
	char id[37];
	struct admit_out a = genv_admit(&e.ge, "ra", gp_uuid(id, 500), "ra_c0");
	assert_int_equal(a.status, 0);
	assert_int_equal(a.r.outcome, GATE_ADMITTED);
	/* A recorded generation is not built again: the run is a periodic pass. */
	assert_int_equal(rec_run(&e), 0);
	assert_int_equal(gp_epoch(admin), epoch + 1);
	reconciler_get_stats(e.rec, &st);
	assert_int_equal(st.rebuilds, 1);
	assert_int_equal(st.passes, 1);
	env_close(&e);
}

/* Fresh database state and fresh Redis, everything started at once with the reconciler's period
 * at its 10 s maximum: a worker's gate is usable in redis mode well before one period (it took
 * 9-12 s when the way back waited for the period). Measured on CLOCK_MONOTONIC. */
static void fresh_start_is_fast(void **state)
{
	struct env e;
	struct reconciler_stats st;
	struct gate_mode_stats ms;

	(void)state;
	long long epoch = fresh_install();
	env_build(&e, 2000, RECONCILER_PERIOD_MAX_MS);
	long long t0 = fixture_now_ms();
	assert_int_equal(pg_pool_start(e.pool), 0);
	assert_int_equal(redis_conn_start(e.ge.conn), 0);
	assert_int_equal(gate_mode_start(e.ctl), 0);
	assert_int_equal(reconciler_start(e.rec), 0);
	fixture_run_until(&e.ge.loop, redis_usable, &e, 60000);
	long long took = fixture_now_ms() - t0;
	struct rebuilds_want rw = { &e, 1 };
	fixture_run_until(&e.ge.loop, rebuilds_reached, &rw, 60000);
	reconciler_get_stats(e.rec, &st);
	gate_mode_get_stats(e.ctl, &ms);
	print_message("fresh start: usable in redis mode after %lld ms (epoch %lld -> %lld, %llu "
		      "switch(es), %llu rebuild(s))\n",
		      took, epoch, gp_epoch(admin), (unsigned long long)ms.switches,
		      (unsigned long long)st.rebuilds);
	assert_true(took < 4000);
	assert_int_equal(st.rebuilds, 1);
	/* the initial build, or a worker's switch first and then the way back */
	assert_true(gp_epoch(admin) == epoch + 1 + (long long)ms.switches);
	assert_true(ms.switches <= 1);
	env_close(&e);
}

/* Redis stopped: the fleet goes to postgres mode; Redis started again: the way back starts on
 * the connection's connect (not at the reconciler's next period, 10 s here) and the gate is
 * usable in redis mode again soon after. */
static void way_back_on_redis_return(void **state)
{
	struct env e;
	struct reconciler_stats st;

	(void)state;
	reset();
	env_build(&e, 2000, RECONCILER_PERIOD_MAX_MS);
	assert_int_equal(pg_pool_start(e.pool), 0);
	assert_int_equal(redis_conn_start(e.ge.conn), 0);
	assert_int_equal(gate_mode_start(e.ctl), 0);
	assert_int_equal(reconciler_start(e.rec), 0);
	fixture_run_until(&e.ge.loop, redis_usable, &e, 60000);
	long long epoch = gp_epoch(admin);

	assert_int_equal(embedded_redis_stop(&svc), 0);
	wait_mode(&e, GATE_MODE_POSTGRES, epoch + 1);
	/* Let the reconciler's retries back off for a while: Redis stays down. */
	long long until = fixture_now_ms() + 1500;
	while (fixture_now_ms() < until)
		uv_run(&e.ge.loop, UV_RUN_NOWAIT);
	reconciler_get_stats(e.rec, &st);
	uint64_t rebuilds = st.rebuilds;
	assert_int_equal(embedded_redis_start(&svc), 0);
	long long t0 = fixture_now_ms();
	fixture_run_until(&e.ge.loop, redis_usable, &e, 60000);
	long long took = fixture_now_ms() - t0;
	print_message("Redis back: usable in redis mode after %lld ms\n", took);
	assert_true(took < 4000);
	assert_int_equal(gp_epoch(admin), epoch + 2);
	struct rebuilds_want rw = { &e, rebuilds + 1 };
	fixture_run_until(&e.ge.loop, rebuilds_reached, &rw, 60000);
	reconciler_get_stats(e.rec, &st);
	assert_int_equal(st.rebuilds, rebuilds + 1);
	env_close(&e);
}

static bool redis_up(void *arg)
{
	return redis_conn_is_up(((struct env *)arg)->ge.conn);
}

static bool rebuilt(void *arg)
{
	struct reconciler_stats st;

	reconciler_get_stats(((struct env *)arg)->rec, &st);
	return st.rebuilds >= 1;
}

/* A worker's start: the reconciler's first tick and the Redis connect's kick come before its
 * PostgreSQL pool is up (the runs cannot start: -ENOTCONN), and no NOTIFY kicks it afterwards.
 * The initial build still comes soon after the pool is up — not a period (10 s) later, nor
 * never: a run that could not start used to schedule nothing (issue 9: the fleet stayed in
 * postgres mode and the refresher answered "state lost" for the whole run). */
static void run_retried_before_pool_up(void **state)
{
	struct env e;
	struct reconciler_stats st;

	(void)state;
	long long epoch = fresh_install();
	env_build(&e, 2000, RECONCILER_PERIOD_MAX_MS);
	assert_int_equal(reconciler_start(e.rec), 0);
	assert_int_equal(redis_conn_start(e.ge.conn), 0);
	fixture_run_until(&e.ge.loop, redis_up, &e, 60000);
	for (int i = 0; i < 20; i++) /* the tick and the connect's kick, both refused */
		uv_run(&e.ge.loop, UV_RUN_NOWAIT);
	reconciler_get_stats(e.rec, &st);
	assert_int_equal(st.rebuilds, 0);
	assert_int_equal(gp_epoch(admin), epoch);
	long long t0 = fixture_now_ms();
	assert_int_equal(pg_pool_start(e.pool), 0);
	fixture_run_until(&e.ge.loop, rebuilt, &e, 5000);
	print_message("pool up late: initial build %lld ms after the pool's start\n",
		      fixture_now_ms() - t0);
	assert_int_equal(gp_epoch(admin), epoch + 1);
	env_close(&e);
}

/* The way back while Redis is paused for writes (CLIENT PAUSE WRITE past the command deadline):
 * the system init times out, the run rolls back and postgres mode holds, as designed; the next
 * pass tries again. That recovers by itself: a warning, not an error (common/log.h). Old code:
 * "system init failed" at error. */
static void paused_init_is_a_warning(void **state)
{
	struct env e;
	struct log_capture lc;
	char out[16384], lvl[16];

	(void)state;
	reset();
	command_timeout_ms = 500;
	env_open(&e, 2000);
	long long epoch = gp_epoch(admin);
	gp_sql(admin,
	       "UPDATE system_settings SET gate_mode = 'postgres', gate_epoch = gate_epoch + 1");
	gate_mode_pg_up(e.ctl);
	wait_mode(&e, GATE_MODE_POSTGRES, epoch + 1);
	genv_cmd(&e.ge, NULL, 0, "CLIENT", "PAUSE", "3000", "WRITE", NULL);
	struct run_probe p = { 0 };
	log_capture_begin(&lc, LOG_WARN);
	int rc = reconciler_run(e.rec, run_cb, &p);
	if (rc == 0)
		fixture_run_until_count(&e.ge.loop, &p.done, 1, 60000);
	log_capture_end(&lc, out, sizeof(out));
	command_timeout_ms = 60000;
	fixture_run_until(&e.ge.loop, redis_up, &e, 60000); /* reconnected after the timeout */
	genv_cmd(&e.ge, NULL, 0, "CLIENT", "UNPAUSE", NULL);
	assert_int_equal(rc, 0);
	int status = p.status;
	assert_int_equal(status, -ETIMEDOUT);
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM system_settings"
				       " WHERE gate_mode = 'postgres'"),
			 1);
	assert_non_null(log_capture_level(out, "system init failed", lvl, sizeof(lvl)));
	assert_string_equal(lvl, "warn");
	env_close(&e);
}

/* Redis mode: a record whose row ended is a correction to release; the slot is released by
 * its owner after the pass read the records and before the correction is sent (the pass's row
 * read waits on provider_events, locked by the test). The correction finds it not held: the
 * line says so, at info — nothing was freed, nothing is wrong. Old code: "release of a
 * correction: success (outcome 0)" at warn. */
static void correction_not_held_says_so(void **state)
{
	struct env e;
	struct log_capture lc;
	struct run_probe p = { 0 };
	struct reconciler_stats st;
	char id[37], out[16384], lvl[16];

	(void)state;
	reset();
	env_open(&e, 1500);
	genv_cmd(&e.ge, NULL, 0, "FLUSHALL", NULL);
	gp_sql(admin,
	       "UPDATE system_settings SET gate_mode = 'postgres', gate_epoch = gate_epoch + 1");
	long long epoch = gp_epoch(admin);
	gate_mode_pg_up(e.ctl);
	wait_mode(&e, GATE_MODE_POSTGRES, epoch);
	assert_int_equal(rec_run(&e), 0);
	wait_mode(&e, GATE_MODE_REDIS, epoch + 1);
	assert_int_equal(genv_admit(&e.ge, "ra", gp_uuid(id, 300), "ra_c0").r.outcome,
			 GATE_ADMITTED);
	insert_call(id, "ra", 0, "ended");
	gp_sql(holder, "BEGIN");
	gp_sql(holder, "LOCK TABLE provider_events IN ACCESS EXCLUSIVE MODE");
	log_capture_begin(&lc, LOG_INFO);
	int rc = reconciler_run(e.rec, run_cb, &p);
	if (rc == 0) {
		gp_wait_for(&e.ge.loop, admin, "relation", 1); /* the row read, records read */
		genv_release(&e.ge, "ra", id);
		gp_sql(holder, "COMMIT");
		fixture_run_until_count(&e.ge.loop, &p.done, 1, 60000);
	}
	log_capture_end(&lc, out, sizeof(out));
	assert_int_equal(rc, 0);
	assert_int_equal(p.status, 0);
	reconciler_get_stats(e.rec, &st);
	assert_int_equal(st.released, 1);
	assert_null(strstr(out, "release of a correction: success"));
	assert_non_null(log_capture_level(out, "release of a correction: the slot was not held",
					  lvl, sizeof(lvl)));
	assert_string_equal(lvl, "info");
	env_close(&e);
}

static int setup(void **state)
{
	static const char *const agents[] = { "a0", "a1" };

	(void)state;
	fixture_start(&svc, true, true, false, true);
	admin = fixture_pg(&svc);
	holder = fixture_pg(&svc);
	gp_seed_org(admin, "ra", 6, 0, 2, agents, NULL, 10);
	gp_seed_org(admin, "rb", 20, 0, 1, agents, NULL, 10);
	gp_seed_org(admin, "rc", 3, 0, 1, agents, NULL, 10);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	PQfinish(holder);
	PQfinish(admin);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(way_back),
		cmocka_unit_test(paused_init_is_a_warning),
		cmocka_unit_test(correction_not_held_says_so),
		cmocka_unit_test(periodic_pass),
		cmocka_unit_test(lost_slot_added),
		cmocka_unit_test(controller_switches),
		cmocka_unit_test(new_org_is_built),
		cmocka_unit_test(stale_reconciler_not_adopted),
		cmocka_unit_test(foreign_generation_not_built),
		cmocka_unit_test(initial_build),
		cmocka_unit_test(fresh_start_is_fast),
		cmocka_unit_test(way_back_on_redis_return),
		cmocka_unit_test(run_retried_before_pool_up),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
