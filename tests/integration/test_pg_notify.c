/* LISTEN/NOTIFY against a real server: a callback per notification on the channels listened to,
 * LISTEN issued again after a restart of PostgreSQL (a NOTIFY after the restart reaches the
 * callback), and a pool keeping its LISTENs on one connection. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "pg_pool.h"
#include "pg_test.h"

#include <errno.h>

static struct embedded svc;

struct heard {
	int count;
	char channel[64];
	char payload[64];
};

static void notify_cb(const char *channel, const char *payload, void *data)
{
	struct heard *h = data;
	h->count++;
	snprintf(h->channel, sizeof(h->channel), "%s", channel);
	snprintf(h->payload, sizeof(h->payload), "%s", payload);
}

static void notify_via(uv_loop_t *loop, struct pg_conn *c, const char *channel, const char *payload)
{
	struct probe p = { 0 };
	const char *v[] = { channel, payload };
	struct pg_query q = { .sql = "SELECT pg_notify($1, $2)", .nparams = 2, .values = v };
	assert_int_equal(pg_conn_exec(c, &q, probe_result_cb, &p), 0);
	fixture_run_until_count(loop, &p.calls, 1, 60000);
	assert_int_equal(p.status, 0);
}

static void listen_survives_restart(void **state)
{
	uv_loop_t loop;
	struct heard events = { 0 }, other = { 0 };
	struct probe p = { 0 };
	struct pg_conn_options o = {
		.conninfo = svc.database_url,
		.name = "listen",
		.connect_timeout_ms = 10000,
		.query_timeout_ms = 10000,
		.reconnect_min_ms = 20,
		.reconnect_max_ms = 200,
	};
	struct pg_conn *c;

	uv_loop_init(&loop);
	assert_int_equal(pg_conn_new(&loop, &o, &c), 0);
	assert_int_equal(pg_conn_listen(c, "dsp_events", notify_cb, &events), 0);
	assert_int_equal(pg_conn_listen(c, "dsp_other", notify_cb, &other), 0);
	assert_int_equal(pg_conn_listen(c, "bad channel", notify_cb, &other), -EINVAL);
	assert_int_equal(pg_conn_listen(c, "1x", notify_cb, &other), -EINVAL);
	assert_int_equal(pg_conn_start(c), 0);
	assert_int_equal(pg_conn_listen(c, "late", notify_cb, &other), -EBUSY);
	fixture_run_until(&loop, conn_up, c, 60000);

	/* NOTIFY is an ordinary statement; ours and another session's both arrive. */
	notify_via(&loop, c, "dsp_events", "one");
	fixture_run_until_count(&loop, &events.count, 1, 60000);
	assert_string_equal(events.channel, "dsp_events");
	assert_string_equal(events.payload, "one");
	PGconn *admin = fixture_pg(&svc);
	PQclear(fixture_sql(admin, "NOTIFY dsp_events, 'from admin'"));
	PQfinish(admin);
	fixture_run_until_count(&loop, &events.count, 2, 60000);
	assert_string_equal(events.payload, "from admin");

	assert_int_equal(embedded_pg_stop(&svc), 0);
	fixture_run_until(&loop, conn_down, c, 60000);
	assert_int_equal(embedded_pg_start(&svc), 0);
	fixture_run_until(&loop, conn_up, c, 60000);
	/* Up means listening again: a NOTIFY from now on reaches the callback. */
	notify_via(&loop, c, "dsp_events", "after restart");
	fixture_run_until_count(&loop, &events.count, 3, 60000);
	assert_string_equal(events.payload, "after restart");
	notify_via(&loop, c, "dsp_other", "x");
	fixture_run_until_count(&loop, &other.count, 1, 60000);
	notify_via(&loop, c, "not_listened", "y");
	assert_int_equal(
		pg_conn_exec(c, &(struct pg_query){ .sql = "SELECT 1" }, probe_result_cb, &p), 0);
	fixture_run_until_count(&loop, &p.calls, 1, 60000);
	assert_int_equal(events.count, 3);
	assert_int_equal(other.count, 1);
	struct pg_conn_stats st;
	pg_conn_get_stats(c, &st);
	assert_int_equal(st.notifies, 4);
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

static bool all_up(void *arg)
{
	struct pg_pool *pool = arg;
	return pg_pool_up_count(pool) == pg_pool_size(pool);
}

static void pool_listens_on_one_connection(void **state)
{
	uv_loop_t loop;
	struct pg_pool *pool;
	struct heard events = { 0 };
	struct probe p = { 0 };
	struct pg_pool_options o = {
		.conninfo = svc.database_url,
		.name = "plisten",
		.size = 2,
		.priority_size = 1,
		.connect_timeout_ms = 10000,
		.query_timeout_ms = 10000,
		.reconnect_min_ms = 20,
		.reconnect_max_ms = 200,
	};

	uv_loop_init(&loop);
	assert_int_equal(pg_pool_new(&loop, &o, &pool), 0);
	assert_int_equal(pg_pool_listen(pool, "dsp_pool", notify_cb, &events), 0);
	assert_int_equal(pg_pool_start(pool), 0);
	fixture_run_until(&loop, all_up, pool, 60000);
	/* Sent on every connection of the pool in turn; heard once each time. */
	for (int i = 0; i < 6; i++) {
		const char *v[] = { "dsp_pool" };
		struct pg_query q = { .sql = "SELECT pg_notify($1, 'p')",
				      .nparams = 1,
				      .values = v };
		assert_int_equal(pg_pool_exec(pool, i % 2 ? PG_LANE_PRIORITY : PG_LANE_NORMAL, &q,
					      probe_result_cb, &p),
				 0);
		fixture_run_until_count(&loop, &p.calls, i + 1, 60000);
	}
	fixture_run_until_count(&loop, &events.count, 6, 60000);
	assert_int_equal(pg_conn_exec(pg_pool_conn(pool, 0),
				      &(struct pg_query){ .sql = "SELECT 1" }, probe_result_cb, &p),
			 0);
	fixture_run_until_count(&loop, &p.calls, 7, 60000);
	assert_int_equal(events.count, 6);
	struct pg_conn_stats st;
	pg_conn_get_stats(pg_pool_conn(pool, 1), &st);
	assert_int_equal(st.notifies, 0);
	pg_pool_close(pool, NULL, NULL);
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
		cmocka_unit_test(listen_survives_restart),
		cmocka_unit_test(pool_listens_on_one_connection),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
