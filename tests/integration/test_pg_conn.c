/* The PostgreSQL layer against a real server: statements, errors, deadlines, and recovery from
 * a server restart and a terminated backend without the caller doing anything. */
#include "error.h"
#include "fixture.h"
#include "pg_conn.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

struct probe {
	int ups, downs;	  /* state_cb transitions */
	int calls;	  /* result callbacks */
	int status;	  /* last status */
	char value[64];	  /* first cell of the last result */
	char sqlstate[8]; /* SQLSTATE of the last error */
};

static struct embedded svc;

static void state_cb(struct pg_conn *conn, bool up, void *data)
{
	struct probe *p = data;
	if (up)
		p->ups++;
	else
		p->downs++;
}

static void result_cb(struct pg_conn *conn, int status, const PGresult *res, void *data)
{
	struct probe *p = data;
	p->calls++;
	p->status = status;
	p->value[0] = p->sqlstate[0] = '\0';
	if (status == 0 && PQntuples(res) > 0)
		snprintf(p->value, sizeof(p->value), "%s", PQgetvalue(res, 0, 0));
	if (status == DSP_EPG && res)
		snprintf(p->sqlstate, sizeof(p->sqlstate), "%s",
			 PQresultErrorField(res, PG_DIAG_SQLSTATE));
}

static bool is_up(void *arg)
{
	return pg_conn_is_up(arg);
}

static bool is_down(void *arg)
{
	return !pg_conn_is_up(arg);
}

static struct pg_conn *open_conn(uv_loop_t *loop, struct probe *p, uint64_t query_timeout_ms)
{
	struct pg_conn_options o = {
		.conninfo = svc.database_url,
		.connect_timeout_ms = 10000,
		.query_timeout_ms = query_timeout_ms,
		.reconnect_min_ms = 20,
		.reconnect_max_ms = 200,
		.state_cb = state_cb,
		.data = p,
	};
	struct pg_conn *c;

	assert_int_equal(pg_conn_new(loop, &o, &c), 0);
	assert_int_equal(pg_conn_prepare(c, "add", "SELECT $1::int + $2::int", 2), 0);
	assert_int_equal(pg_conn_start(c), 0);
	assert_int_equal(pg_conn_prepare(c, "late", "SELECT 1", 0), -EBUSY);
	fixture_run_until(loop, is_up, c, 60000);
	return c;
}

/* Sends one statement and runs the loop until its callback; returns the status. */
static int query(uv_loop_t *loop, struct pg_conn *c, struct probe *p, const char *name,
		 const char *sql, int n, const char *const *v)
{
	int want = p->calls + 1;
	int rc = name ? pg_conn_exec_prepared(c, name, n, v, result_cb, p)
		      : pg_conn_exec(c, sql, n, v, result_cb, p);
	assert_int_equal(rc, 0);
	fixture_run_until_count(loop, &p->calls, want, 60000);
	return p->status;
}

static void statements_and_errors(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	const char *v[] = { "40", "2" };
	const char *nul[] = { NULL };

	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, &p, 10000);
	assert_int_equal(p.ups, 1);

	assert_int_equal(query(&loop, c, &p, "add", NULL, 2, v), 0);
	assert_string_equal(p.value, "42");
	assert_int_equal(query(&loop, c, &p, NULL, "SELECT coalesce($1, 'null')", 1, nul), 0);
	assert_string_equal(p.value, "null");
	assert_int_equal(query(&loop, c, &p, NULL, "SELECT 1/0", 0, NULL), DSP_EPG);
	assert_string_equal(p.sqlstate, "22012");
	assert_int_equal(pg_conn_exec_prepared(c, "nope", 0, NULL, result_cb, &p), -ENOENT);
	int before_bad = p.calls;
	assert_int_equal(pg_conn_exec(c, "SELECT 1", 70000, v, result_cb, &p), -EINVAL);
	assert_int_equal(pg_conn_exec(c, "SELECT 1", -1, v, result_cb, &p), -EINVAL);
	assert_int_equal(pg_conn_exec(c, NULL, 0, NULL, result_cb, &p), -EINVAL);
	assert_int_equal(p.calls, before_bad);
	assert_true(pg_conn_is_up(c));
	/* The connection is still usable after an error. */
	assert_int_equal(query(&loop, c, &p, "add", NULL, 2, v), 0);

	/* Many queued at once complete in order, each exactly once. */
	int before = p.calls;
	for (int i = 0; i < 200; i++)
		assert_int_equal(pg_conn_exec_prepared(c, "add", 2, v, result_cb, &p), 0);
	int want = before + 200;
	fixture_run_until_count(&loop, &p.calls, want, 60000);
	assert_int_equal(p.calls, before + 200);

	pg_conn_close(c, NULL, NULL);
	assert_int_equal(p.downs, 0);
	fixture_loop_close(&loop);
}

struct retry_probe {
	struct probe p;
	int retry_rc; /* what pg_conn_exec() returned when called from the callback */
};

static void retry_cb(struct pg_conn *conn, int status, const PGresult *res, void *data)
{
	struct retry_probe *r = data;

	result_cb(conn, status, res, &r->p);
	assert_null(res);
	r->retry_rc = pg_conn_exec(conn, "SELECT 1", 0, NULL, result_cb, &r->p);
}

static void deadline_drops_and_reconnects(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	struct retry_probe r = { .retry_rc = 1 };
	struct pg_conn_stats st;

	/* 2 s: long enough that SELECT 7 below never hits it on a loaded machine. */
	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, &p, 2000);
	assert_int_equal(pg_conn_exec(c, "SELECT pg_sleep(60)", 0, NULL, retry_cb, &r), 0);
	fixture_run_until_count(&loop, &r.p.calls, 1, 60000);
	assert_int_equal(r.p.status, -ETIMEDOUT);
	/* The connection was already down when the callback ran: the retry is refused. */
	assert_int_equal(r.retry_rc, -ENOTCONN);
	assert_int_equal(p.downs, 1);
	fixture_run_until(&loop, is_up, c, 60000);
	assert_int_equal(p.ups, 2);
	assert_int_equal(query(&loop, c, &p, NULL, "SELECT 7", 0, NULL), 0);
	assert_string_equal(p.value, "7");
	pg_conn_get_stats(c, &st);
	assert_int_equal(st.timeouts, 1);
	assert_int_equal(r.p.calls, 1);
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

static void server_restart_recovers(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	struct probe inflight = { 0 };

	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, &p, 60000);

	/* A statement in flight when the server goes away completes once, with an error: the
	 * server's own goodbye (57P01, admin shutdown) or a reset, never a result on a transport
	 * error. The one queued behind it was never sent: -ENOTCONN. */
	struct probe queued = { 0 };
	assert_int_equal(pg_conn_exec(c, "SELECT pg_sleep(30)", 0, NULL, result_cb, &inflight), 0);
	assert_int_equal(pg_conn_exec(c, "SELECT 1", 0, NULL, result_cb, &queued), 0);
	uv_run(&loop, UV_RUN_NOWAIT);
	assert_int_equal(embedded_pg_stop(&svc), 0);
	fixture_run_until(&loop, is_down, c, 60000);
	fixture_run_until_count(&loop, &queued.calls, 1, 60000);
	assert_int_equal(inflight.calls, 1);
	if (inflight.status != -ECONNRESET &&
	    !(inflight.status == DSP_EPG && strcmp(inflight.sqlstate, "57P01") == 0))
		fail_msg("in-flight statement ended with %d (%s)", inflight.status,
			 inflight.sqlstate);
	assert_int_equal(queued.status, -ENOTCONN);
	assert_int_equal(p.downs, 1);

	/* While down, requests are refused at once and no callback is owed. */
	assert_int_equal(pg_conn_exec(c, "SELECT 1", 0, NULL, result_cb, &p), -ENOTCONN);

	assert_int_equal(embedded_pg_start(&svc), 0);
	fixture_run_until(&loop, is_up, c, 60000);
	assert_int_equal(p.ups, 2);
	const char *v[] = { "1", "2" };
	assert_int_equal(query(&loop, c, &p, "add", NULL, 2, v), 0); /* re-prepared */
	assert_string_equal(p.value, "3");
	assert_int_equal(inflight.calls, 1);
	assert_int_equal(queued.calls, 1);

	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

static void terminated_backend_recovers(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };

	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, &p, 10000);
	assert_int_equal(query(&loop, c, &p, NULL, "SELECT pg_backend_pid()", 0, NULL), 0);
	char pid[64];
	snprintf(pid, sizeof(pid), "%s", p.value);

	PGconn *admin = fixture_pg(&svc);
	const char *v[] = { pid };
	PGresult *res = PQexecParams(admin, "SELECT pg_terminate_backend($1::int)", 1, NULL, v,
				     NULL, NULL, 0);
	assert_string_equal(PQgetvalue(res, 0, 0), "t");
	PQclear(res);
	PQfinish(admin);

	/* Noticed while idle: the socket turns readable with the server's goodbye. */
	fixture_run_until(&loop, is_down, c, 60000);
	fixture_run_until(&loop, is_up, c, 60000);
	assert_int_equal(query(&loop, c, &p, NULL, "SELECT pg_backend_pid()", 0, NULL), 0);
	assert_string_not_equal(p.value, pid);
	assert_int_equal(p.downs, 1);
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

static void close_cancels_pending(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	struct probe q = { 0 };

	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, &p, 10000);
	for (int i = 0; i < 3; i++)
		assert_int_equal(pg_conn_exec(c, "SELECT pg_sleep(1)", 0, NULL, result_cb, &q), 0);
	pg_conn_close(c, NULL, NULL);
	assert_int_equal(q.calls, 3);
	assert_int_equal(q.status, -ECANCELED);
	fixture_loop_close(&loop);
}

static void unreachable_server_stays_down(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	struct pg_conn_options o = {
		.conninfo = "host=/nonexistent-dir port=1 dbname=x",
		.connect_timeout_ms = 1000,
		.query_timeout_ms = 1000,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 20,
		.state_cb = state_cb,
		.data = &p,
	};
	struct pg_conn *c;

	uv_loop_init(&loop);
	assert_int_equal(pg_conn_new(&loop, &o, &c), 0);
	assert_int_equal(pg_conn_start(c), 0);
	for (int i = 0; i < 20; i++)
		uv_run(&loop, UV_RUN_ONCE); /* several failed attempts */
	assert_false(pg_conn_is_up(c));
	assert_int_equal(p.ups + p.downs, 0); /* never up, so no transition is reported */
	assert_int_equal(pg_conn_exec(c, "SELECT 1", 0, NULL, result_cb, &p), -ENOTCONN);
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

static int setup(void **state)
{
	fixture_start(&svc, true, false, false, false);
	return 0;
}

static int teardown(void **state)
{
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(statements_and_errors),
		cmocka_unit_test(deadline_drops_and_reconnects),
		cmocka_unit_test(server_restart_recovers),
		cmocka_unit_test(terminated_backend_recovers),
		cmocka_unit_test(close_cancels_pending),
		cmocka_unit_test(unreachable_server_stays_down),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
