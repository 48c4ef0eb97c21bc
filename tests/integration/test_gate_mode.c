/* The gate mode controller after a Redis restart (SPEC C11, issue 8): a worker whose own Redis
 * connection comes back only AFTER the reconciler's way back (rebuild, redis mode, epoch + 1,
 * the generation committed) is on a new server (new run_id) holding exactly the committed
 * generation: it adopts it and the epoch does not move (it used to switch the fleet back to
 * postgres mode at every restart). A worker that comes back to a new server whose generation is
 * missing still switches, and so does one that comes back to a server holding the committed
 * generation that is not the server the way back rebuilt (its run_id differs from the one
 * recorded with the generation: restarted with a snapshot, or a promoted replica). The
 * worker's handshake is held by a hook of the test's (the
 * connection's own on-connect hook mechanism) until the way back has committed, so the order is
 * certain, not timed. Real Redis and PostgreSQL; single process. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "fixture.h"
#include "gate_harness.h"
#include "gate_mode.h"
#include "gate_pg_test.h"
#include "gate_recon.h"
#include "reconciler.h"

static struct embedded svc;
static PGconn *admin;

struct env {
	struct gate_env ge;	  /* loop, registry, the reconciler's connection and a gate on it */
	struct redis_conn *wconn; /* the worker's own connection */
	struct gate *wg;	  /* the worker's gate */
	struct gate_mode_ctl *ctl;
	struct pg_pool *pool;
	struct gate_pg *pg;
	struct reconciler *rec;
	int closed, wups, new_servers;
	bool hold; /* hold the worker's handshake */
	bool held; /* a handshake is held: run */
	uint64_t run;
};

static void on_worker_event(struct redis_conn *conn, const struct redis_conn_event *ev, void *data)
{
	struct env *e = data;

	(void)conn;
	if (ev->type == REDIS_CONN_UP) {
		e->wups++;
		if (ev->new_server)
			e->new_servers++;
	}
	if (e->ctl)
		gate_mode_redis_event(e->ctl, ev);
}

static void hold_hook(struct redis_conn *conn, uint64_t run, void *data)
{
	struct env *e = data;

	if (!e->hold) {
		redis_conn_hook_done(conn, run, 0, NULL);
		return;
	}
	e->held = true;
	e->run = run;
}

static void release_hold(struct env *e)
{
	e->hold = false;
	if (e->held) {
		e->held = false;
		redis_conn_hook_done(e->wconn, e->run, 0, NULL);
	}
}

static void mode_notify_cb(const char *channel, const char *payload, void *data)
{
	struct env *e = data;

	(void)channel;
	if (e->ctl)
		gate_mode_notify(e->ctl, payload);
}

static bool env_up(void *arg)
{
	struct env *e = arg;
	return redis_conn_is_up(e->ge.conn) && redis_conn_is_up(e->wconn) &&
	       pg_pool_up_count(e->pool) == pg_pool_size(e->pool);
}

static bool settled(void *arg)
{
	struct gate_mode_state s;

	gate_mode_get(((struct env *)arg)->ctl, &s);
	return s.usable && !s.switching;
}

static void env_open(struct env *e)
{
	struct redis_conn_options ro = {
		.url = svc.redis_url,
		.name = "rec",
		.connect_timeout_ms = 60000, /* the held handshake stays within it */
		.command_timeout_ms = 60000,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 200,
		.generation_key = GATE_SYS_GEN_KEY,
	};
	struct pg_pool_options po = {
		.conninfo = svc.database_url,
		.name = "mode",
		.size = 2,
		.priority_size = 1,
		.connect_timeout_ms = 10000,
		.query_timeout_ms = 120000,
		.reconnect_min_ms = 20,
		.reconnect_max_ms = 200,
	};

	memset(e, 0, sizeof(*e));
	assert_int_equal(uv_loop_init(&e->ge.loop), 0);
	assert_int_equal(redis_scripts_new(&e->ge.reg), 0);
	assert_int_equal(gate_test_scripts_register(e->ge.reg), 0);
	assert_int_equal(gate_recon_scripts_register(e->ge.reg), 0);
	ro.scripts = e->ge.reg;
	assert_int_equal(redis_conn_new(&e->ge.loop, &ro, &e->ge.conn), 0);
	assert_int_equal(gate_new(e->ge.conn, e->ge.reg, NULL, &e->ge.g), 0);
	ro.name = "worker";
	ro.event_cb = on_worker_event;
	ro.data = e;
	assert_int_equal(redis_conn_new(&e->ge.loop, &ro, &e->wconn), 0);
	assert_int_equal(redis_conn_add_hook(e->wconn, "hold", hold_hook, e), 0);
	assert_int_equal(gate_new(e->wconn, e->ge.reg, NULL, &e->wg), 0);
	assert_int_equal(pg_pool_new(&e->ge.loop, &po, &e->pool), 0);
	assert_int_equal(gate_pg_new(e->pool, NULL, &e->pg), 0);
	assert_int_equal(gate_pg_listen(e->pool, NULL, mode_notify_cb, e), 0);
	struct reconciler_options rop = {
		.loop = &e->ge.loop,
		.pool = e->pool,
		.pg = e->pg,
		.conn = e->ge.conn,
		.reg = e->ge.reg,
		.owner = "mode-test",
		.period_ms = 1000,
		.rebuild_timeout_ms = 30000,
	};
	assert_int_equal(reconciler_new(&rop, &e->rec), 0);
	struct gate_mode_options mo = {
		.loop = &e->ge.loop,
		.pg = e->pg,
		.gate = e->wg,
		.retry_ms = 50,
		.up_wait_ms = 60000, /* far beyond the held handshake */
	};
	assert_int_equal(gate_mode_new(&mo, &e->ctl), 0);
	assert_int_equal(pg_pool_start(e->pool), 0);
	assert_int_equal(redis_conn_start(e->ge.conn), 0);
	assert_int_equal(redis_conn_start(e->wconn), 0);
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
	release_hold(e);
	gate_mode_close(e->ctl);
	e->ctl = NULL;
	reconciler_close(e->rec, closed_cb, &e->closed);
	pg_pool_close(e->pool, closed_cb, &e->closed);
	redis_conn_close(e->ge.conn, closed_cb, &e->closed);
	redis_conn_close(e->wconn, closed_cb, &e->closed);
	fixture_run_until_count(&e->ge.loop, &e->closed, 4, 60000);
	gate_pg_free(e->pg);
	gate_free(e->wg);
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

static void wait_mode(struct env *e, enum gate_mode mode, long long epoch)
{
	struct mode_want w = { e, mode, epoch };
	fixture_run_until(&e->ge.loop, mode_is, &w, 60000);
}

/* The controller has learned epoch (from the NOTIFY or a read), whatever it does next. */
static bool epoch_seen(void *arg)
{
	struct mode_want *w = arg;
	struct gate_mode_state s;

	gate_mode_get(w->e->ctl, &s);
	return (long long)s.epoch >= w->epoch;
}

static bool is_up(void *arg)
{
	return redis_conn_is_up(arg);
}

/* Stops Redis (the worker's down switches the fleet), restarts it with the worker's handshake
 * held, and runs the way back on the reconciler's connection. Returns the redis epoch it
 * committed; the worker's controller has seen it, and its connection is still not up. */
static long long outage_and_way_back(struct env *e)
{
	long long epoch = gp_epoch(admin);

	e->hold = true;
	assert_int_equal(embedded_redis_stop(&svc), 0);
	wait_mode(e, GATE_MODE_POSTGRES, ++epoch);
	assert_int_equal(embedded_redis_start(&svc), 0);
	fixture_run_until(&e->ge.loop, is_up, e->ge.conn, 60000);
	assert_int_equal(rec_run(e), 0);
	assert_int_equal(gp_epoch(admin), ++epoch);
	struct mode_want w = { e, GATE_MODE_REDIS, epoch };
	fixture_run_until(&e->ge.loop, epoch_seen, &w, 60000);
	assert_false(redis_conn_is_up(e->wconn)); /* held: it comes back after the way back */
	return epoch;
}

struct admit_probe {
	int done, status;
	enum gate_outcome outcome;
};

static void admit_cb(struct gate *g, int status, const struct gate_admit_result *r, void *data)
{
	struct admit_probe *p = data;

	(void)g;
	p->status = status;
	if (r)
		p->outcome = r->outcome;
	p->done++;
}

/* A way back from a postgres epoch set by the test: redis mode under a committed generation,
 * adopted by the worker. Returns that epoch. */
static long long redis_mode(struct env *e)
{
	long long epoch;

	genv_cmd(&e->ge, NULL, 0, "FLUSHALL", NULL);
	gp_sql(admin,
	       "UPDATE system_settings SET gate_mode = 'postgres', gate_epoch = gate_epoch + 1");
	epoch = gp_epoch(admin);
	gate_mode_pg_up(e->ctl);
	wait_mode(e, GATE_MODE_POSTGRES, epoch);
	assert_int_equal(rec_run(e), 0);
	wait_mode(e, GATE_MODE_REDIS, ++epoch);
	return epoch;
}

/* The worker's connection comes back after the way back, to the server the reconciler rebuilt:
 * new run_id, the committed generation. It is adopted; the epoch does not move. */
static void reconnect_after_way_back(void **state)
{
	struct env e;
	struct gate_mode_stats before, after;
	struct gate_mode_state s;
	long long epoch;
	char id[37];

	(void)state;
	env_open(&e);
	redis_mode(&e);

	gate_mode_get_stats(e.ctl, &before);
	epoch = outage_and_way_back(&e);
	int wups = e.wups, news = e.new_servers;
	release_hold(&e);
	fixture_run_until_count(&e.ge.loop, &e.wups, wups + 1, 60000);
	assert_int_equal(e.new_servers, news + 1); /* the up was on a new run_id */
	fixture_run_until(&e.ge.loop, settled, &e, 60000);
	gate_mode_get(e.ctl, &s);
	gate_mode_get_stats(e.ctl, &after);
	assert_int_equal(s.mode, GATE_MODE_REDIS);
	assert_int_equal((long long)s.epoch, epoch);
	assert_int_equal(gp_epoch(admin), epoch);	       /* no second switch */
	assert_int_equal(after.switches, before.switches + 1); /* the outage's own, only */
	assert_int_equal(after.adopted, before.adopted + 1);
	/* The worker admits through Redis under the adopted generation. */
	struct admit_probe p = { 0 };
	const char *camps[] = { "ma_c0" };
	struct gate_admit_req req = {
		.org = "ma", .call = gp_uuid(id, 700), .campaigns = camps, .n_campaigns = 1
	};
	assert_int_equal(gate_admit(e.wg, &req, admit_cb, &p), 0);
	fixture_run_until_count(&e.ge.loop, &p.done, 1, 60000);
	assert_int_equal(p.status, 0);
	assert_int_equal(p.outcome, GATE_ADMITTED);
	env_close(&e);
}

/* The worker's connection comes back after the way back to a new server whose {sys}:gen is not
 * the committed one (missing here): a lost state, the fleet switches. */
static void reconnect_to_other_generation(void **state)
{
	struct env e;
	struct gate_mode_stats before, after;
	struct gate_mode_state s;
	long long epoch;

	(void)state;
	env_open(&e);
	redis_mode(&e);

	gate_mode_get_stats(e.ctl, &before);
	epoch = outage_and_way_back(&e);
	genv_cmd(&e.ge, NULL, 0, "DEL", GATE_SYS_GEN_KEY, NULL); /* not the committed one */
	int news = e.new_servers;
	release_hold(&e);
	fixture_run_until_count(&e.ge.loop, &e.new_servers, news + 1, 60000);
	struct mode_want w = { &e, GATE_MODE_POSTGRES, epoch + 1 };
	fixture_run_until(&e.ge.loop, mode_is, &w, 60000);
	gate_mode_get(e.ctl, &s);
	gate_mode_get_stats(e.ctl, &after);
	assert_int_equal(gp_epoch(admin), epoch + 1);
	assert_int_equal(after.switches, before.switches + 2); /* the outage's and this one */
	assert_int_equal(after.adopted, before.adopted);
	env_close(&e);
}

struct server_want {
	struct redis_conn *conn;
	const char *not_run_id;
};

static bool up_on_other_server(void *arg)
{
	struct server_want *w = arg;
	return redis_conn_is_up(w->conn) && strcmp(redis_conn_run_id(w->conn), w->not_run_id) != 0;
}

/* Restarts Redis with its data kept (SAVE, then a restart on the same directory: the same keys
 * and {sys}:gen, a new run_id), after checking that the way back recorded the server it
 * rebuilt. The reconciler's connection is up on the new server when it returns. */
static void restart_keeping_data(struct env *e)
{
	char gen[80], gen_after[80], run_id[48], rdb[256];
	PGresult *res;

	snprintf(run_id, sizeof(run_id), "%s", redis_conn_run_id(e->ge.conn));
	assert_true(run_id[0] != '\0');
	res = fixture_sql(admin, "SELECT gate_redis_run_id FROM system_settings");
	assert_string_equal(PQgetvalue(res, 0, 0), run_id);
	PQclear(res);
	genv_cmd(&e->ge, gen, sizeof(gen), "GET", GATE_SYS_GEN_KEY, NULL);
	genv_cmd(&e->ge, NULL, 0, "SAVE", NULL);
	assert_int_equal(embedded_redis_stop(&svc), 0);
	assert_int_equal(embedded_redis_start(&svc), 0);
	snprintf(rdb, sizeof(rdb), "%s/dump.rdb", svc.dir);
	assert_int_equal(unlink(rdb), 0); /* later restarts start empty again */
	struct server_want sw = { e->ge.conn, run_id };
	fixture_run_until(&e->ge.loop, up_on_other_server, &sw, 60000);
	genv_cmd(&e->ge, gen_after, sizeof(gen_after), "GET", GATE_SYS_GEN_KEY, NULL);
	assert_string_equal(gen_after, gen); /* the data kept: the committed generation */
}

/* The worker's connection comes back after the way back to a server holding the committed
 * generation that is not the server the way back rebuilt: that one was restarted with its data
 * kept (SAVE, then a restart on the same directory: the same keys and {sys}:gen, a new run_id)
 * while the worker's handshake was held, as a replica promoted during the epoch would be. Such
 * a server may have lost the newest slot records: it is not adopted (it was, before the way
 * back recorded its server's run_id), the fleet switches. */
static void reconnect_to_restarted_server(void **state)
{
	struct env e;
	struct gate_mode_stats before, after;
	long long epoch;

	(void)state;
	env_open(&e);
	redis_mode(&e);

	gate_mode_get_stats(e.ctl, &before);
	epoch = outage_and_way_back(&e);
	restart_keeping_data(&e);

	int news = e.new_servers;
	release_hold(&e);
	fixture_run_until_count(&e.ge.loop, &e.new_servers, news + 1, 60000);
	struct mode_want w = { &e, GATE_MODE_POSTGRES, epoch + 1 };
	fixture_run_until(&e.ge.loop, mode_is, &w, 60000);
	gate_mode_get_stats(e.ctl, &after);
	assert_int_equal(gp_epoch(admin), epoch + 1);
	assert_int_equal(after.switches, before.switches + 2); /* the outage's and this one */
	assert_int_equal(after.adopted, before.adopted);
	assert_int_equal(after.foreign_servers, before.foreign_servers + 1);
	env_close(&e);
}

/* The reconciler's periodic pass on that restarted server (the worker's handshake still held):
 * it builds and corrects nothing there, the fleet switches. */
static void pass_on_restarted_server(void **state)
{
	struct env e;
	struct reconciler_stats st;
	long long epoch;

	(void)state;
	env_open(&e);
	redis_mode(&e);
	epoch = outage_and_way_back(&e);
	restart_keeping_data(&e);
	assert_int_equal(rec_run(&e), GATE_ELOST);
	reconciler_get_stats(e.rec, &st);
	assert_int_equal(st.foreign_server, 1);
	assert_int_equal(st.foreign_gen, 0);
	assert_int_equal(st.lost, 1);
	assert_int_equal(st.passes, 0);
	assert_int_equal(gp_epoch(admin), epoch + 1); /* switched */
	env_close(&e);
}

static int setup(void **state)
{
	static const char *const agents[] = { "a0" };

	(void)state;
	fixture_start(&svc, true, true, false, true);
	admin = fixture_pg(&svc);
	gp_seed_org(admin, "ma", 5, 0, 1, agents, NULL, 2);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	PQfinish(admin);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(reconnect_after_way_back),
		cmocka_unit_test(reconnect_to_other_generation),
		cmocka_unit_test(reconnect_to_restarted_server),
		cmocka_unit_test(pass_on_restarted_server),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
