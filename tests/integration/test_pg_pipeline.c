/* Pipelining on one PostgreSQL connection: 10,000 statements from several callers in flight at
 * once, each result reaching its own callback in order; failing statements (and a failing
 * batch) in the middle failing only themselves; a server restart mid-pipeline completing every
 * request exactly once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "pg_test.h"

#include <errno.h>

#define CALLERS	  4
#define PER	  2500
#define TOTAL	  (CALLERS * PER)
#define BAD_EVERY 1000 /* statement i with i % BAD_EVERY == BAD_AT fails */
#define BAD_AT	  500

static struct embedded svc;

struct caller;

struct call {
	struct caller *caller;
	int seq;   /* position among this caller's statements */
	int calls; /* callbacks received */
	int status;
	char value[16];
};

struct caller {
	int id;
	int next;     /* the seq its next callback must carry */
	int order_ok; /* callbacks that came in this caller's order */
	int *done;    /* callbacks of every caller */
	int *global;  /* order of completion over all callers */
	struct call calls[PER];
};

static void call_cb(int status, const struct pg_results *r, void *data)
{
	struct call *c = data;
	struct caller *k = c->caller;

	c->calls++;
	c->status = status;
	if (status == 0)
		snprintf(c->value, sizeof(c->value), "%s", PQgetvalue(r->res[0], 0, 0));
	if (c->seq == k->next)
		k->order_ok++;
	k->next = c->seq + 1;
	(*k->done)++;
}

static struct pg_conn *open_conn(uv_loop_t *loop, unsigned max_inflight, unsigned max_queue)
{
	struct pg_conn_options o = {
		.conninfo = svc.database_url,
		.name = "pipe",
		.connect_timeout_ms = 10000,
		.query_timeout_ms = 120000,
		.queue_timeout_ms = 120000,
		.reconnect_min_ms = 20,
		.reconnect_max_ms = 200,
		.max_inflight = max_inflight,
		.max_queue = max_queue,
	};
	struct pg_conn *c;

	assert_int_equal(pg_conn_new(loop, &o, &c), 0);
	assert_int_equal(pg_conn_start(c), 0);
	fixture_run_until(loop, conn_up, c, 60000);
	return c;
}

static void ten_thousand_in_flight_in_order(void **state)
{
	uv_loop_t loop;
	static struct caller callers[CALLERS];
	int done = 0;
	const struct pg_stmt *echo;
	struct pg_conn_stats st;
	struct pg_conn_options o = {
		.conninfo = svc.database_url,
		.name = "pipe",
		.connect_timeout_ms = 10000,
		.query_timeout_ms = 120000,
		.reconnect_min_ms = 20,
		.reconnect_max_ms = 200,
		.max_inflight = TOTAL,
		.max_queue = TOTAL,
	};
	struct pg_conn *c;

	uv_loop_init(&loop);
	assert_int_equal(pg_conn_new(&loop, &o, &c), 0);
	assert_int_equal(pg_conn_prepare(c, "SELECT $1::int", 1, &echo), 0);
	assert_int_equal(pg_conn_start(c), 0);
	fixture_run_until(&loop, conn_up, c, 60000);

	/* The callers take turns within one turn of the loop: every statement is queued before
	 * the first is sent, and all 10,000 leave in one flush. Every 1000th is given a value
	 * that is not an integer (22P02): it fails alone. */
	memset(callers, 0, sizeof(callers));
	for (int k = 0; k < CALLERS; k++) {
		callers[k].id = k;
		callers[k].done = &done;
	}
	for (int i = 0; i < PER; i++) {
		for (int k = 0; k < CALLERS; k++) {
			struct call *call = &callers[k].calls[i];
			char v[16];
			int n = k * PER + i;
			call->caller = &callers[k];
			call->seq = i;
			if (n % BAD_EVERY == BAD_AT)
				snprintf(v, sizeof(v), "x%d", n);
			else
				snprintf(v, sizeof(v), "%d", n);
			const char *values[] = { v };
			struct pg_query q = { .stmt = echo, .nparams = 1, .values = values };
			assert_int_equal(pg_conn_exec(c, &q, call_cb, call), 0);
		}
	}
	assert_int_equal(pg_conn_pending(c), TOTAL);
	fixture_run_until_count(&loop, &done, TOTAL, 120000);

	pg_conn_get_stats(c, &st);
	assert_int_equal(st.inflight_peak, TOTAL);
	int failed = 0;
	for (int k = 0; k < CALLERS; k++) {
		assert_int_equal(callers[k].order_ok, PER);
		for (int i = 0; i < PER; i++) {
			const struct call *call = &callers[k].calls[i];
			int n = k * PER + i;
			assert_int_equal(call->calls, 1);
			if (n % BAD_EVERY == BAD_AT) {
				assert_int_equal(call->status, DSP_EPG);
				failed++;
				continue;
			}
			assert_int_equal(call->status, 0);
			assert_int_equal(atoi(call->value), n);
		}
	}
	assert_int_equal(failed, TOTAL / BAD_EVERY);
	assert_true(pg_conn_is_up(c));
	assert_int_equal(st.disconnects, 0);
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

/* A failing statement and a failing batch between good ones: each fails alone, its neighbours
 * succeed, and the batch's earlier statements are rolled back. */
static void failure_in_the_middle_fails_only_itself(void **state)
{
	uv_loop_t loop;
	struct probe before = { 0 }, bad = { 0 }, batch = { 0 }, after = { 0 };
	PGconn *admin = fixture_pg(&svc);

	PQclear(fixture_sql(admin, "CREATE TABLE pipe_mid (a int PRIMARY KEY)"));
	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, 0, 0);
	struct pg_query ins1 = { .sql = "INSERT INTO pipe_mid VALUES (1)" };
	struct pg_query div0 = { .sql = "SELECT 1/0" };
	struct pg_query b[] = {
		{ .sql = "INSERT INTO pipe_mid VALUES (2)" },
		{ .sql = "INSERT INTO pipe_mid VALUES (1)" }, /* duplicate: 23505 */
		{ .sql = "INSERT INTO pipe_mid VALUES (3)" },
	};
	struct pg_query count = { .sql = "SELECT count(*) FROM pipe_mid" };
	assert_int_equal(pg_conn_exec(c, &ins1, probe_result_cb, &before), 0);
	assert_int_equal(pg_conn_exec(c, &div0, probe_result_cb, &bad), 0);
	assert_int_equal(pg_conn_batch(c, b, 3, probe_result_cb, &batch), 0);
	assert_int_equal(pg_conn_exec(c, &count, probe_result_cb, &after), 0);
	fixture_run_until_count(&loop, &after.calls, 1, 60000);

	assert_int_equal(before.status, 0);
	assert_int_equal(bad.status, DSP_EPG);
	assert_string_equal(bad.sqlstate, "22012");
	assert_int_equal(batch.status, DSP_EPG);
	assert_string_equal(batch.sqlstate, "23505");
	assert_int_equal(batch.failed, 1);
	assert_int_equal(batch.nres, 2); /* the first insert's result, then the error */
	assert_int_equal(after.status, 0);
	assert_string_equal(after.value, "1"); /* 2 was rolled back with its batch */
	assert_int_equal(admin_int(admin, "SELECT count(*) FROM pipe_mid"), 1);
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
	PQfinish(admin);
}

#define RESTART_SENT  100 /* max_inflight */
#define RESTART_TOTAL 300

struct tally {
	int calls[RESTART_TOTAL];
	int status[RESTART_TOTAL];
	int done;
};

struct slot {
	struct tally *t;
	int i;
};

static void slot_cb(int status, const struct pg_results *r, void *data)
{
	struct slot *s = data;

	s->t->calls[s->i]++;
	s->t->status[s->i] = status;
	s->t->done++;
}

/* The head of the pipeline blocks on a lock the test holds, so RESTART_SENT statements are
 * certainly in flight and the rest certainly queued when the server stops. */
static void restart_mid_pipeline_completes_each_once(void **state)
{
	uv_loop_t loop;
	static struct tally t;
	static struct slot slots[RESTART_TOTAL];
	PGconn *admin = fixture_pg(&svc);

	memset(&t, 0, sizeof(t));
	PQclear(fixture_sql(admin, "SELECT pg_advisory_lock(201)"));
	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, RESTART_SENT, 1000);
	for (int i = 0; i < RESTART_TOTAL; i++) {
		slots[i] = (struct slot){ &t, i };
		struct pg_query q = { .sql = i == 0 ? "SELECT pg_advisory_xact_lock(201)"
						    : "SELECT 1" };
		assert_int_equal(pg_conn_exec(c, &q, slot_cb, &slots[i]), 0);
	}
	wait_for_lock_waiter(&loop, admin, 201);
	assert_int_equal(t.done, 0);
	assert_int_equal(pg_conn_pending(c), RESTART_TOTAL);

	/* The lock stays held until the server is gone (closing admin would release it). */
	assert_int_equal(embedded_pg_stop(&svc), 0);
	PQfinish(admin);
	fixture_run_until_count(&loop, &t.done, RESTART_TOTAL, 60000);
	for (int i = 0; i < RESTART_TOTAL; i++) {
		assert_int_equal(t.calls[i], 1);
		assert_int_equal(t.status[i], i < RESTART_SENT ? -ECONNRESET : -ENOTCONN);
	}
	assert_int_equal(embedded_pg_start(&svc), 0);
	fixture_run_until(&loop, conn_up, c, 60000);
	struct probe q = { 0 };
	assert_int_equal(
		pg_conn_exec(c, &(struct pg_query){ .sql = "SELECT 5" }, probe_result_cb, &q), 0);
	fixture_run_until_count(&loop, &q.calls, 1, 60000);
	assert_int_equal(q.status, 0);
	assert_string_equal(q.value, "5");
	assert_int_equal(t.done, RESTART_TOTAL); /* nothing completed twice */
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
		cmocka_unit_test(ten_thousand_in_flight_in_order),
		cmocka_unit_test(failure_in_the_middle_fails_only_itself),
		cmocka_unit_test(restart_mid_pipeline_completes_each_once),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
