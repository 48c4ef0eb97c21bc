/* One PostgreSQL connection against a real server: statements, errors, deadlines, queue bounds,
 * scripts with several results, and recovery from a server restart and a terminated backend
 * without the caller doing anything. */
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
	int nres;	  /* results of the last request */
	char value[64];	  /* first cell of the last result */
	char sqlstate[8]; /* SQLSTATE of the last error */
};

static struct embedded svc;
static const struct pg_stmt *add_stmt;

static void state_cb(struct pg_conn *conn, bool up, void *data)
{
	struct probe *p = data;
	if (up)
		p->ups++;
	else
		p->downs++;
}

static void result_cb(int status, const struct pg_results *r, void *data)
{
	struct probe *p = data;
	p->calls++;
	p->status = status;
	p->nres = r->n;
	p->value[0] = p->sqlstate[0] = '\0';
	if (status == 0 && r->n > 0 && PQntuples(r->res[0]) > 0)
		snprintf(p->value, sizeof(p->value), "%s", PQgetvalue(r->res[0], 0, 0));
	if (status == DSP_EPG)
		snprintf(p->sqlstate, sizeof(p->sqlstate), "%s",
			 PQresultErrorField(r->error, PG_DIAG_SQLSTATE));
	if (status < 0 && status != DSP_EPG)
		assert_int_equal(r->n, 0);
}

static bool is_up(void *arg)
{
	return pg_conn_is_up(arg);
}

static bool is_down(void *arg)
{
	return !pg_conn_is_up(arg);
}

static struct pg_conn *open_conn_with(uv_loop_t *loop, struct probe *p,
				      const struct pg_conn_options *extra)
{
	struct pg_conn_options o = *extra;
	struct pg_conn *c;

	o.conninfo = svc.database_url;
	o.name = "test";
	o.connect_timeout_ms = 10000;
	o.reconnect_min_ms = 20;
	o.reconnect_max_ms = 200;
	o.state_cb = state_cb;
	o.data = p;
	assert_int_equal(pg_conn_new(loop, &o, &c), 0);
	assert_string_equal(pg_conn_label(c), "pg[test]");
	assert_int_equal(pg_conn_prepare(c, "SELECT $1::int + $2::int", 2, &add_stmt), 0);
	assert_int_equal(pg_conn_start(c), 0);
	const struct pg_stmt *late;
	assert_int_equal(pg_conn_prepare(c, "SELECT 1", 0, &late), -EBUSY);
	fixture_run_until(loop, is_up, c, 60000);
	return c;
}

static struct pg_conn *open_conn(uv_loop_t *loop, struct probe *p, uint64_t query_timeout_ms)
{
	return open_conn_with(loop, p,
			      &(struct pg_conn_options){ .query_timeout_ms = query_timeout_ms });
}

/* Sends one statement and runs the loop until its callback; returns the status. */
static int query(uv_loop_t *loop, struct pg_conn *c, struct probe *p, const struct pg_stmt *stmt,
		 const char *sql, int n, const char *const *v)
{
	int want = p->calls + 1;
	struct pg_query q = { .stmt = stmt, .sql = sql, .nparams = n, .values = v };
	assert_int_equal(pg_conn_exec(c, &q, result_cb, p), 0);
	fixture_run_until_count(loop, &p->calls, want, 60000);
	return p->status;
}

static long long admin_count(PGconn *admin, const char *sql)
{
	PGresult *res = fixture_sql(admin, sql);
	long long n = atoll(PQgetvalue(res, 0, 0));
	PQclear(res);
	return n;
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

	assert_int_equal(query(&loop, c, &p, add_stmt, NULL, 2, v), 0);
	assert_string_equal(p.value, "42");
	assert_int_equal(query(&loop, c, &p, NULL, "SELECT coalesce($1, 'null')", 1, nul), 0);
	assert_string_equal(p.value, "null");
	assert_int_equal(query(&loop, c, &p, NULL, "SELECT 1/0", 0, NULL), DSP_EPG);
	assert_string_equal(p.sqlstate, "22012");
	assert_int_equal(p.nres, 1);

	/* Refused up front, no callback, the connection kept: a bad parameter count, no text, a
	 * COPY (it needs pg_conn_copy_in), a handle used with the wrong count. */
	int before_bad = p.calls;
	struct pg_query bad[] = {
		{ .sql = "SELECT 1", .nparams = 70000, .values = v },
		{ .sql = "SELECT 1", .nparams = -1, .values = v },
		{ .sql = NULL },
		{ .sql = "  copy t FROM STDIN" },
		{ .stmt = add_stmt, .nparams = 1, .values = v },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(pg_conn_exec(c, &bad[i], result_cb, &p), -EINVAL);
	assert_int_equal(pg_conn_exec(c, NULL, result_cb, &p), -EINVAL);
	assert_int_equal(p.calls, before_bad);
	assert_true(pg_conn_is_up(c));
	/* The connection is still usable after an error. */
	assert_int_equal(query(&loop, c, &p, add_stmt, NULL, 2, v), 0);

	/* Many queued at once complete, each exactly once. */
	int before = p.calls;
	struct pg_query q = { .stmt = add_stmt, .nparams = 2, .values = v };
	for (int i = 0; i < 200; i++)
		assert_int_equal(pg_conn_exec(c, &q, result_cb, &p), 0);
	fixture_run_until_count(&loop, &p.calls, before + 200, 60000);
	assert_int_equal(p.calls, before + 200);

	pg_conn_close(c, NULL, NULL);
	assert_int_equal(p.downs, 0);
	fixture_loop_close(&loop);
}

static void script_returns_every_result(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };

	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, &p, 10000);
	assert_int_equal(pg_conn_script(c, "SELECT 1; SELECT 2; SELECT 3", result_cb, &p), 0);
	fixture_run_until_count(&loop, &p.calls, 1, 60000);
	assert_int_equal(p.status, 0);
	assert_int_equal(p.nres, 3);

	/* The first error stops the script; the results before it come with it. */
	assert_int_equal(pg_conn_script(c, "SELECT 1; SELECT 1/0; SELECT 3", result_cb, &p), 0);
	fixture_run_until_count(&loop, &p.calls, 2, 60000);
	assert_int_equal(p.status, DSP_EPG);
	assert_int_equal(p.nres, 2);
	assert_string_equal(p.sqlstate, "22012");

	/* Pipelined statements still work after the connection left and re-entered pipeline
	 * mode. */
	const char *v[] = { "1", "2" };
	assert_int_equal(query(&loop, c, &p, add_stmt, NULL, 2, v), 0);
	assert_string_equal(p.value, "3");
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

/* Transaction control sent as an ordinary statement would leave the session in (or take it out
 * of) a transaction block that other callers' pipelined statements then join: refused up front
 * however it is spelled, as a statement, in a batch or as a registered statement. A COPY
 * behind a comment is still a COPY. */
static void transaction_control_refused(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	static const char *const refused[] = {
		"BEGIN",
		"  begin isolation level serializable",
		"/* a /* nested */ comment */ COMMIT",
		"-- a comment\nROLLBACK",
		"rollback work",
		"START TRANSACTION",
		"END",
		"abort",
		"COMMIT PREPARED 'x'",
		"PREPARE TRANSACTION 'x'",
		"/* c */ COPY t FROM STDIN",
	};
	static const char *const allowed[] = {
		"SELECT 'begin'",
		"SELECT 1 AS commit",
		"/* BEGIN */ SELECT 2",
	};

	uv_loop_init(&loop);
	struct pg_conn_options o = {
		.conninfo = svc.database_url,
		.connect_timeout_ms = 10000,
		.query_timeout_ms = 10000,
	};
	struct pg_conn *c;
	const struct pg_stmt *stmt;
	assert_int_equal(pg_conn_new(&loop, &o, &c), 0);
	assert_int_equal(pg_conn_prepare(c, "BEGIN", 0, &stmt), -EINVAL);
	assert_int_equal(pg_conn_prepare(c, "commit", 0, &stmt), -EINVAL);
	assert_int_equal(pg_conn_start(c), 0);
	fixture_run_until(&loop, is_up, c, 60000);

	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		struct pg_query b[] = { { .sql = "SELECT 1" }, { .sql = refused[i] } };
		assert_int_equal(pg_conn_exec(c, &b[1], result_cb, &p), -EINVAL);
		assert_int_equal(pg_conn_batch(c, b, 2, result_cb, &p), -EINVAL);
	}
	for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++)
		assert_int_equal(query(&loop, c, &p, NULL, allowed[i], 0, NULL), 0);
	assert_int_equal(p.calls, 3);
	/* A BEGIN behind another command never runs: the extended protocol takes one command per
	 * statement, so the request fails alone and the session stays out of any transaction. */
	assert_int_equal(query(&loop, c, &p, NULL, "SELECT 1; BEGIN", 0, NULL), DSP_EPG);
	assert_string_equal(p.sqlstate, "42601");
	assert_int_equal(query(&loop, c, &p, NULL, "SELECT txid_current()", 0, NULL), 0);
	long long xid = atoll(p.value);
	assert_int_equal(query(&loop, c, &p, NULL, "SELECT txid_current()", 0, NULL), 0);
	assert_true(atoll(p.value) != xid);
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

/* A script that leaves a transaction block open, by an error after its BEGIN or by a BEGIN
 * without COMMIT, is rolled back before the connection takes anything else: the next caller's
 * pipelined statement neither fails with 25P02 nor runs inside somebody else's transaction. */
static void script_never_leaves_a_transaction_open(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 }, next = { 0 };
	PGconn *admin = fixture_pg(&svc);

	PQclear(fixture_sql(admin, "CREATE TABLE script_tx (a int)"));
	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, &p, 10000);
	assert_int_equal(pg_conn_script(c,
					"BEGIN; INSERT INTO script_tx VALUES (1); SELECT 1/0; "
					"COMMIT",
					result_cb, &p),
			 0);
	assert_int_equal(
		pg_conn_exec(c, &(struct pg_query){ .sql = "SELECT 'next'" }, result_cb, &next), 0);
	fixture_run_until_count(&loop, &next.calls, 1, 60000);
	assert_int_equal(p.status, DSP_EPG);
	assert_string_equal(p.sqlstate, "22012");
	assert_int_equal(next.status, 0); /* not 25P02 */
	assert_string_equal(next.value, "next");

	/* A BEGIN without COMMIT: rolled back, reported, and the next statement commits alone. */
	int want = p.calls + 1;
	assert_int_equal(
		pg_conn_script(c, "BEGIN; INSERT INTO script_tx VALUES (2)", result_cb, &p), 0);
	assert_int_equal(
		pg_conn_exec(c, &(struct pg_query){ .sql = "INSERT INTO script_tx VALUES (3)" },
			     result_cb, &next),
		0);
	fixture_run_until_count(&loop, &next.calls, 2, 60000);
	assert_int_equal(p.calls, want);
	assert_int_equal(p.status, -EINVAL);
	assert_int_equal(next.status, 0);
	assert_int_equal(admin_count(admin, "SELECT count(*) FROM script_tx WHERE a = 3"), 1);
	assert_int_equal(admin_count(admin, "SELECT count(*) FROM script_tx"), 1);
	assert_int_equal(p.downs, 0);
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
	PQfinish(admin);
}

/* A COPY inside a script (libpq would hand back its COPY state for ever): COPY FROM STDIN is
 * failed with an error naming pg_conn_copy_in() and the connection stays up; the rows before
 * it are not committed. */
static void script_with_copy_fails_cleanly(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 }, next = { 0 };
	PGconn *admin = fixture_pg(&svc);

	PQclear(fixture_sql(admin, "CREATE TABLE script_copy (a int)"));
	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, &p, 10000);
	assert_int_equal(pg_conn_script(c,
					"INSERT INTO script_copy VALUES (1); COPY script_copy FROM "
					"STDIN; SELECT 2",
					result_cb, &p),
			 0);
	fixture_run_until_count(&loop, &p.calls, 1, 60000);
	assert_int_equal(p.status, DSP_EPG);
	assert_string_equal(p.sqlstate, "57014");
	assert_int_equal(query(&loop, c, &next, NULL, "SELECT 'after'", 0, NULL), 0);
	assert_string_equal(next.value, "after");
	assert_int_equal(admin_count(admin, "SELECT count(*) FROM script_copy"), 0);
	assert_int_equal(p.downs, 0);
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
	PQfinish(admin);
}

struct retry_probe {
	struct probe p;
	struct pg_conn *conn;
	int retry_rc; /* what pg_conn_exec() returned when called from the callback */
};

static void retry_cb(int status, const struct pg_results *r, void *data)
{
	struct retry_probe *rp = data;

	result_cb(status, r, &rp->p);
	assert_int_equal(r->n, 0);
	rp->retry_rc =
		pg_conn_exec(rp->conn, &(struct pg_query){ .sql = "SELECT 1" }, result_cb, &rp->p);
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
	r.conn = c;
	assert_int_equal(
		pg_conn_exec(c, &(struct pg_query){ .sql = "SELECT pg_sleep(60)" }, retry_cb, &r),
		0);
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

struct stall {
	long ms;
	int runs;
};

static void stall_cb(uv_timer_t *t)
{
	struct stall *s = t->data;
	s->runs++;
	fixture_sleep_ms(s->ms); /* plays a callback that keeps the loop busy */
}

/* The statement deadline is counted from when the request really leaves, not from the start
 * of the loop turn that sends it: a timer callback that keeps that turn busy for longer than
 * the deadline (before the flush runs) costs the request nothing. */
static void deadline_counts_from_the_real_send(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 }, q = { 0 };
	struct stall stall = { .ms = 2500 };
	uv_timer_t busy;
	struct pg_conn_stats st;

	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, &p, 2000);
	uv_timer_init(&loop, &busy);
	busy.data = &stall;
	/* Queued now; the next turn runs the busy timer (timers come first), then the flush. */
	assert_int_equal(
		pg_conn_exec(c, &(struct pg_query){ .sql = "SELECT 'on time'" }, result_cb, &q), 0);
	uv_timer_start(&busy, stall_cb, 0, 0);
	fixture_run_until_count(&loop, &q.calls, 1, 60000);
	assert_int_equal(stall.runs, 1);
	assert_int_equal(q.status, 0);
	assert_string_equal(q.value, "on time");
	pg_conn_get_stats(c, &st);
	assert_int_equal(st.timeouts, 0);
	assert_int_equal(p.downs, 0);
	uv_close((uv_handle_t *)&busy, NULL);
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

/* An answer that arrived before the deadline but was not read yet because the loop was busy
 * (timers run before the loop reads its sockets) is delivered, not reported as a timeout with
 * the connection dropped. The server is seen to have answered (pg_stat_activity: idle after
 * our statement) before the loop is held past the deadline. */
static void answer_already_arrived_is_not_late(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 }, q = { 0 };
	struct pg_conn_stats st;
	PGconn *admin = fixture_pg(&svc);

	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, &p, 1000);
	assert_int_equal(query(&loop, c, &p, NULL, "SELECT pg_backend_pid()", 0, NULL), 0);
	char sql[256];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM pg_stat_activity WHERE pid = %s AND state = 'idle' AND "
		 "query = 'SELECT ''answered'' FROM pg_sleep(0.2)'",
		 p.value);
	/* The flush sends it; the server answers 200 ms later, so the loop turn that sends it
	 * cannot read the answer (an instant answer was read in that same turn every time in CI's
	 * ASan build, and the case was never set up). Only a turn itself longer than 200 ms can
	 * still read it: again, bounded. */
	for (int tries = 0;; tries++) {
		q = (struct probe){ 0 };
		assert_int_equal(
			pg_conn_exec(
				c,
				&(struct pg_query){ .sql = "SELECT 'answered' FROM pg_sleep(0.2)" },
				result_cb, &q),
			0);
		uv_run(&loop, UV_RUN_NOWAIT);
		if (q.calls == 0)
			break;
		assert_true(tries < 20);
	}
	long long give_up = fixture_now_ms() + 60000;
	while (admin_count(admin, sql) == 0) {
		assert_true(fixture_now_ms() < give_up);
		fixture_sleep_ms(5);
	}
	fixture_sleep_ms(1500); /* the loop is busy elsewhere past the deadline */
	fixture_run_until_count(&loop, &q.calls, 1, 60000);
	assert_int_equal(q.status, 0);
	assert_string_equal(q.value, "answered");
	pg_conn_get_stats(c, &st);
	assert_int_equal(st.timeouts, 0);
	assert_int_equal(p.downs, 0);
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
	PQfinish(admin);
}

static bool lock_waiting(PGconn *admin, int key)
{
	char sql[160];
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %d "
		 "AND NOT granted",
		 key);
	PGresult *res = fixture_sql(admin, sql);
	bool waiting = atoi(PQgetvalue(res, 0, 0)) > 0;
	PQclear(res);
	return waiting;
}

struct lock_wait {
	uv_loop_t *loop;
	PGconn *admin;
	int key;
};

static bool lock_seen_waiting(void *arg)
{
	struct lock_wait *w = arg;
	return lock_waiting(w->admin, w->key);
}

/* A request that waits in the queue past its bound completes with -ETIMEDOUT, unsent, and the
 * connection stays up. The queue is made to wait by a script (which runs alone) blocked on a
 * lock the test holds. */
static void queue_bound_times_out_unsent(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 }, blocked = { 0 }, queued = { 0 };
	struct pg_conn_stats st;
	PGconn *admin = fixture_pg(&svc);

	PQclear(fixture_sql(admin, "SELECT pg_advisory_lock(101)"));
	uv_loop_init(&loop);
	struct pg_conn *c = open_conn_with(
		&loop, &p,
		&(struct pg_conn_options){ .query_timeout_ms = 60000, .queue_timeout_ms = 300 });
	assert_int_equal(
		pg_conn_script(c, "SELECT pg_advisory_lock(101); SELECT 1", result_cb, &blocked),
		0);
	struct lock_wait w = { &loop, admin, 101 };
	fixture_run_until(&loop, lock_seen_waiting, &w, 60000);
	assert_int_equal(
		pg_conn_exec(c, &(struct pg_query){ .sql = "SELECT 'late'" }, result_cb, &queued),
		0);
	fixture_run_until_count(&loop, &queued.calls, 1, 60000);
	assert_int_equal(queued.status, -ETIMEDOUT);
	assert_true(pg_conn_is_up(c));
	assert_int_equal(blocked.calls, 0);

	PQclear(fixture_sql(admin, "SELECT pg_advisory_unlock(101)"));
	fixture_run_until_count(&loop, &blocked.calls, 1, 60000);
	assert_int_equal(blocked.status, 0);
	assert_int_equal(blocked.nres, 2);
	/* A caller that was busy for longer than the bound before it queued (the sleep plays
	 * that caller, it waits out no race): the bound counts from the call, so it is sent. */
	fixture_sleep_ms(600);
	assert_int_equal(query(&loop, c, &p, NULL, "SELECT 8", 0, NULL), 0);
	pg_conn_get_stats(c, &st);
	assert_int_equal(st.queue_timeouts, 1);
	assert_int_equal(st.timeouts, 0);
	assert_int_equal(p.downs, 0);
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
	PQfinish(admin);
}

static void server_restart_recovers(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	struct probe inflight = { 0 };
	struct probe queued = { 0 };

	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, &p, 60000);

	/* A script runs alone: the statement queued behind it is not sent while it runs. When
	 * the server goes away the script (sent) completes with -ECONNRESET, the statement
	 * (never sent) with -ENOTCONN. */
	assert_int_equal(pg_conn_script(c, "SELECT pg_sleep(30)", result_cb, &inflight), 0);
	assert_int_equal(
		pg_conn_exec(c, &(struct pg_query){ .sql = "SELECT 1" }, result_cb, &queued), 0);
	uv_run(&loop, UV_RUN_NOWAIT);
	assert_int_equal(embedded_pg_stop(&svc), 0);
	fixture_run_until(&loop, is_down, c, 60000);
	fixture_run_until_count(&loop, &queued.calls, 1, 60000);
	assert_int_equal(inflight.calls, 1);
	assert_int_equal(inflight.status, -ECONNRESET);
	assert_int_equal(queued.status, -ENOTCONN);
	assert_int_equal(p.downs, 1);

	/* While down, requests are refused at once and no callback is owed. */
	assert_int_equal(pg_conn_exec(c, &(struct pg_query){ .sql = "SELECT 1" }, result_cb, &p),
			 -ENOTCONN);

	assert_int_equal(embedded_pg_start(&svc), 0);
	fixture_run_until(&loop, is_up, c, 60000);
	assert_int_equal(p.ups, 2);
	const char *v[] = { "1", "2" };
	assert_int_equal(query(&loop, c, &p, add_stmt, NULL, 2, v), 0); /* re-prepared */
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
		assert_int_equal(pg_conn_exec(c, &(struct pg_query){ .sql = "SELECT pg_sleep(1)" },
					      result_cb, &q),
				 0);
	uv_run(&loop, UV_RUN_NOWAIT); /* sent: in flight */
	for (int i = 0; i < 2; i++)
		assert_int_equal(
			pg_conn_exec(c, &(struct pg_query){ .sql = "SELECT 1" }, result_cb, &q), 0);
	pg_conn_close(c, NULL, NULL);
	assert_int_equal(q.calls, 5);
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
	assert_string_equal(pg_conn_label(c), "pg[main]");
	assert_int_equal(pg_conn_start(c), 0);
	assert_int_equal(pg_conn_start(c), -EBUSY);
	for (int i = 0; i < 20; i++)
		uv_run(&loop, UV_RUN_ONCE); /* several failed attempts */
	assert_false(pg_conn_is_up(c));
	assert_int_equal(p.ups + p.downs, 0); /* never up, so no transition is reported */
	assert_int_equal(pg_conn_exec(c, &(struct pg_query){ .sql = "SELECT 1" }, result_cb, &p),
			 -ENOTCONN);
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
		cmocka_unit_test(transaction_control_refused),
		cmocka_unit_test(script_returns_every_result),
		cmocka_unit_test(script_never_leaves_a_transaction_open),
		cmocka_unit_test(script_with_copy_fails_cleanly),
		cmocka_unit_test(deadline_drops_and_reconnects),
		cmocka_unit_test(deadline_counts_from_the_real_send),
		cmocka_unit_test(answer_already_arrived_is_not_late),
		cmocka_unit_test(queue_bound_times_out_unsent),
		cmocka_unit_test(server_restart_recovers),
		cmocka_unit_test(terminated_backend_recovers),
		cmocka_unit_test(close_cancels_pending),
		cmocka_unit_test(unreachable_server_stays_down),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
