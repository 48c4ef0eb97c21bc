/* The pool against a real server: statement handles prepared on every connection and load
 * spread over them, the priority lane never queued behind a long statement, interactive
 * transactions kept off each other's connections, and recovery of every connection after a
 * restart. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "pg_pool.h"
#include "pg_test.h"

#include <errno.h>
#include <limits.h>

static struct embedded svc;
static PGconn *admin;

struct states {
	int ups, downs;
};

static void pool_state_cb(struct pg_pool *pool, unsigned index, bool up, void *data)
{
	struct states *s = data;
	if (up)
		s->ups++;
	else
		s->downs++;
}

static bool pool_up(void *arg)
{
	return pg_pool_up_count(arg) == pg_pool_size(arg);
}

static bool pool_down(void *arg)
{
	return pg_pool_up_count(arg) == 0;
}

static struct pg_pool *open_pool(uv_loop_t *loop, unsigned size, unsigned prio, struct states *s,
				 const struct pg_stmt **pid, const struct pg_stmt **twice)
{
	struct pg_pool_options o = {
		.conninfo = svc.database_url,
		.name = "pool",
		.size = size,
		.priority_size = prio,
		.connect_timeout_ms = 10000,
		.query_timeout_ms = 60000,
		.reconnect_min_ms = 20,
		.reconnect_max_ms = 200,
		.state_cb = pool_state_cb,
		.data = s,
	};
	struct pg_pool *pool;

	assert_int_equal(pg_pool_new(loop, &o, &pool), 0);
	assert_int_equal(pg_pool_prepare(pool, "SELECT pg_backend_pid()", 0, pid), 0);
	assert_int_equal(pg_pool_prepare(pool, "SELECT $1::int * 2", 1, twice), 0);
	assert_int_equal(pg_pool_start(pool), 0);
	assert_int_equal(pg_pool_start(pool), -EBUSY);
	const struct pg_stmt *late;
	assert_int_equal(pg_pool_prepare(pool, "SELECT 1", 0, &late), -EBUSY);
	fixture_run_until(loop, pool_up, pool, 60000);
	return pool;
}

struct pids {
	int calls;
	char seen[8][16];
	int distinct;
};

static void pid_cb(int status, const struct pg_results *r, void *data)
{
	struct pids *p = data;
	assert_int_equal(status, 0);
	const char *pid = PQgetvalue(r->res[0], 0, 0);
	p->calls++;
	for (int i = 0; i < p->distinct; i++)
		if (strcmp(p->seen[i], pid) == 0)
			return;
	assert_true(p->distinct < 8);
	snprintf(p->seen[p->distinct++], sizeof(p->seen[0]), "%s", pid);
}

/* Handles work on every connection; requests sent together spread over all of them. */
static void handles_work_everywhere_and_load_spreads(void **state)
{
	uv_loop_t loop;
	struct states s = { 0 };
	struct pids pids = { 0 };
	struct probe p = { 0 };
	const struct pg_stmt *pid, *twice;

	uv_loop_init(&loop);
	/* Sizes are checked up front (a sum that wrapped around once made a pool of one
	 * connection that routing read past). */
	struct pg_pool *bad;
	struct pg_pool_options wrap = { .conninfo = svc.database_url,
					.size = 2,
					.priority_size = UINT_MAX,
					.connect_timeout_ms = 1000,
					.query_timeout_ms = 1000 };
	assert_int_equal(pg_pool_new(&loop, &wrap, &bad), -EINVAL);
	wrap.size = UINT_MAX;
	wrap.priority_size = 2;
	assert_int_equal(pg_pool_new(&loop, &wrap, &bad), -EINVAL);
	struct pg_pool *pool = open_pool(&loop, 3, 0, &s, &pid, &twice);
	assert_int_equal(s.ups, 3);
	for (int i = 0; i < 30; i++)
		assert_int_equal(pg_pool_exec(pool, PG_LANE_NORMAL,
					      &(struct pg_query){ .stmt = pid }, pid_cb, &pids),
				 0);
	fixture_run_until_count(&loop, &pids.calls, 30, 60000);
	assert_int_equal(pids.distinct, 3);
	const char *v[] = { "21" };
	struct pg_query q = { .stmt = twice, .nparams = 1, .values = v };
	for (int i = 0; i < 9; i++)
		assert_int_equal(pg_pool_exec(pool, PG_LANE_NORMAL, &q, probe_result_cb, &p), 0);
	fixture_run_until_count(&loop, &p.calls, 9, 60000);
	assert_string_equal(p.value, "42");
	struct pg_conn_stats st;
	pg_pool_get_stats(pool, &st);
	assert_int_equal(st.connects, 3);
	assert_int_equal(st.queries, 39 + 3); /* and one set-up request per connection */
	pg_pool_close(pool, NULL, NULL);
	fixture_loop_close(&loop);
}

/* A long statement (blocked on a lock the test holds) occupies the ordinary connection; the
 * priority lane still answers, while an ordinary statement waits behind the long one. */
static void priority_lane_not_behind_long_statement(void **state)
{
	uv_loop_t loop;
	struct states s = { 0 };
	struct probe lng = { 0 }, prio = { 0 }, normal = { 0 };
	const struct pg_stmt *pid, *twice;

	PQclear(fixture_sql(admin, "SELECT pg_advisory_lock(501)"));
	uv_loop_init(&loop);
	struct pg_pool *pool = open_pool(&loop, 1, 1, &s, &pid, &twice);
	assert_int_equal(
		pg_pool_exec(pool, PG_LANE_NORMAL,
			     &(struct pg_query){ .sql = "SELECT pg_advisory_xact_lock(501)" },
			     probe_result_cb, &lng),
		0);
	wait_for_lock_waiter(&loop, admin, 501);
	assert_int_equal(pg_pool_exec(pool, PG_LANE_NORMAL, &(struct pg_query){ .sql = "SELECT 1" },
				      probe_result_cb, &normal),
			 0);
	for (int i = 0; i < 20; i++) {
		assert_int_equal(pg_pool_exec(pool, PG_LANE_PRIORITY,
					      &(struct pg_query){ .sql = "SELECT 'fast'" },
					      probe_result_cb, &prio),
				 0);
		fixture_run_until_count(&loop, &prio.calls, i + 1, 60000);
		assert_string_equal(prio.value, "fast");
	}
	assert_int_equal(lng.calls + normal.calls, 0);
	assert_true(advisory_waiting(admin, 501));
	PQclear(fixture_sql(admin, "SELECT pg_advisory_unlock(501)"));
	fixture_run_until_count(&loop, &normal.calls, 1, 60000);
	assert_int_equal(lng.status, 0);
	assert_int_equal(normal.status, 0);
	pg_pool_close(pool, NULL, NULL);
	fixture_loop_close(&loop);
}

struct holder {
	struct pg_txn *txn;
	int begun;
	struct probe pid;
};

static void holder_begin_cb(int status, struct pg_txn *txn, void *data)
{
	struct holder *h = data;
	assert_int_equal(status, 0);
	h->txn = txn;
	h->begun++;
	assert_int_equal(pg_txn_exec(txn, &(struct pg_query){ .sql = "SELECT pg_backend_pid()" },
				     probe_result_cb, &h->pid),
			 0);
}

/* Two interactive transactions on a pool of two each get a connection of their own; a third
 * waits until one of those is given back (within its queue bound). */
static void transactions_get_their_own_connection(void **state)
{
	uv_loop_t loop;
	struct states s = { 0 };
	struct holder h[3] = { 0 };
	struct probe end = { 0 };
	const struct pg_stmt *pid, *twice;

	uv_loop_init(&loop);
	struct pg_pool *pool = open_pool(&loop, 2, 0, &s, &pid, &twice);
	for (int i = 0; i < 3; i++)
		assert_int_equal(pg_pool_begin(pool, NULL, holder_begin_cb, &h[i]), 0);
	fixture_run_until_count(&loop, &h[1].pid.calls, 1, 60000);
	fixture_run_until_count(&loop, &h[0].pid.calls, 1, 60000);
	assert_string_not_equal(h[0].pid.value, h[1].pid.value);
	assert_int_equal(h[2].begun, 0); /* both connections are held */
	assert_int_equal(pg_txn_commit(h[0].txn, probe_result_cb, &end), 0);
	assert_int_equal(pg_txn_rollback(h[1].txn, probe_result_cb, &end), 0);
	fixture_run_until_count(&loop, &h[2].pid.calls, 1, 60000);
	assert_true(strcmp(h[2].pid.value, h[0].pid.value) == 0 ||
		    strcmp(h[2].pid.value, h[1].pid.value) == 0);
	assert_int_equal(pg_txn_commit(h[2].txn, probe_result_cb, &end), 0);
	fixture_run_until_count(&loop, &end.calls, 3, 60000);
	pg_pool_close(pool, NULL, NULL);
	fixture_loop_close(&loop);
}

static void every_connection_recovers_after_restart(void **state)
{
	uv_loop_t loop;
	struct states s = { 0 };
	struct probe p = { 0 };
	const struct pg_stmt *pid, *twice;

	uv_loop_init(&loop);
	struct pg_pool *pool = open_pool(&loop, 2, 1, &s, &pid, &twice);
	assert_int_equal(embedded_pg_stop(&svc), 0);
	fixture_run_until(&loop, pool_down, pool, 60000);
	assert_int_equal(s.downs, 3);
	assert_int_equal(pg_pool_exec(pool, PG_LANE_NORMAL, &(struct pg_query){ .sql = "SELECT 1" },
				      probe_result_cb, &p),
			 -ENOTCONN);
	assert_int_equal(embedded_pg_start(&svc), 0);
	fixture_run_until(&loop, pool_up, pool, 60000);
	assert_int_equal(s.ups, 6);
	const char *v[] = { "4" };
	for (int i = 0; i < 3; i++)
		assert_int_equal(
			pg_pool_exec(pool, i == 2 ? PG_LANE_PRIORITY : PG_LANE_NORMAL,
				     &(struct pg_query){ .stmt = twice, .nparams = 1, .values = v },
				     probe_result_cb, &p),
			0);
	fixture_run_until_count(&loop, &p.calls, 3, 60000);
	assert_string_equal(p.value, "8"); /* prepared again on every connection */
	pg_pool_close(pool, NULL, NULL);
	fixture_loop_close(&loop);
}

static int setup(void **state)
{
	fixture_start(&svc, true, false, false, false);
	admin = fixture_pg(&svc);
	return 0;
}

static int teardown(void **state)
{
	PQfinish(admin);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(handles_work_everywhere_and_load_spreads),
		cmocka_unit_test(priority_lane_not_behind_long_statement),
		cmocka_unit_test(transactions_get_their_own_connection),
		cmocka_unit_test(every_connection_recovers_after_restart),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
