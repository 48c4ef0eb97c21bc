/* COPY FROM STDIN against a real server: 100,000 rows streamed by the caller; a bad row fails
 * the COPY with its line number and writes nothing; back-pressure (the caller told to wait
 * while the server reads nothing, then to go on); abort; a COPY on a pool leaving the other
 * connections to everybody else. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "pg_copy.h"
#include "pg_pool.h"
#include "pg_test.h"

#include <errno.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

static struct embedded svc;
static PGconn *admin;

struct feed {
	struct pg_copy *copy; /* while streaming */
	int rows;	      /* rows to send */
	int sent;	      /* rows sent */
	int bad_row;	      /* 1-based row with a bad value, 0 for none */
	bool manual;	      /* the test drives the puts itself */
	bool abort_midway;
	int readies; /* ready_cb calls */
	int fulls;   /* puts that returned 1 */
	int done;    /* done_cb calls */
	int status;
	uint64_t written;
	long line;
	char sqlstate[8];
};

static int put_row(struct feed *f)
{
	char row[64];
	int n = f->sent + 1;
	int len = n == f->bad_row ? snprintf(row, sizeof(row), "x%d,bad\n", n)
				  : snprintf(row, sizeof(row), "%d,name %d\n", n, n);
	int rc = pg_copy_put(f->copy, row, (size_t)len);
	assert_true(rc == 0 || rc == 1);
	f->sent++;
	return rc;
}

/* Puts rows until the COPY says wait or every row is out, then ends it. */
static void pump_rows(struct feed *f)
{
	while (f->sent < f->rows) {
		if (f->abort_midway && f->sent == f->rows / 2) {
			assert_int_equal(pg_copy_abort(f->copy, "changed my mind"), 0);
			assert_int_equal(pg_copy_put(f->copy, "1,a\n", 4), -EPIPE);
			return;
		}
		if (put_row(f) == 1) {
			f->fulls++;
			return;
		}
	}
	assert_int_equal(pg_copy_end(f->copy), 0);
	assert_int_equal(pg_copy_end(f->copy), -EPIPE);
}

static void ready_cb(struct pg_copy *copy, void *data)
{
	struct feed *f = data;
	f->copy = copy;
	f->readies++;
	if (!f->manual)
		pump_rows(f);
}

static void done_cb(int status, const struct pg_copy_report *rep, void *data)
{
	struct feed *f = data;
	f->done++;
	f->status = status;
	f->written = rep->rows;
	f->line = rep->line;
	if (rep->error)
		snprintf(f->sqlstate, sizeof(f->sqlstate), "%s",
			 PQresultErrorField(rep->error, PG_DIAG_SQLSTATE));
	f->copy = NULL;
}

static struct pg_conn *open_conn(uv_loop_t *loop)
{
	struct pg_conn_options o = {
		.conninfo = svc.database_url,
		.name = "copy",
		.connect_timeout_ms = 10000,
		.query_timeout_ms = 120000,
		.reconnect_min_ms = 20,
		.reconnect_max_ms = 200,
	};
	struct pg_conn *c;

	assert_int_equal(pg_conn_new(loop, &o, &c), 0);
	assert_int_equal(pg_conn_start(c), 0);
	fixture_run_until(loop, conn_up, c, 60000);
	return c;
}

static int copy_into(uv_loop_t *loop, struct pg_conn *c, const char *table, struct feed *f)
{
	char sql[128];
	snprintf(sql, sizeof(sql), "COPY %s (id, name) FROM STDIN (FORMAT csv)", table);
	struct pg_copy_options o = { .ready_cb = ready_cb, .done_cb = done_cb, .data = f };
	assert_int_equal(pg_conn_copy_in(c, sql, &o), 0);
	fixture_run_until_count(loop, &f->done, 1, 120000);
	return f->status;
}

static void copy_100k_rows(void **state)
{
	uv_loop_t loop;
	struct feed f = { .rows = 100000 };
	struct probe before = { 0 }, after = { 0 };

	PQclear(fixture_sql(admin, "CREATE TABLE c1 (id int PRIMARY KEY, name text NOT NULL)"));
	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop);
	/* Pipelined statements before and after: the COPY waits for the first and the second
	 * waits for the COPY. */
	assert_int_equal(pg_conn_exec(c, &(struct pg_query){ .sql = "SELECT count(*) FROM c1" },
				      probe_result_cb, &before),
			 0);
	struct pg_copy_options o = { .ready_cb = ready_cb, .done_cb = done_cb, .data = &f };
	assert_int_equal(pg_conn_copy_in(c, "COPY c1 (id, name) FROM STDIN (FORMAT csv)", &o), 0);
	assert_int_equal(pg_conn_exec(c, &(struct pg_query){ .sql = "SELECT count(*) FROM c1" },
				      probe_result_cb, &after),
			 0);
	fixture_run_until_count(&loop, &after.calls, 1, 120000);
	assert_int_equal(f.done, 1);
	assert_int_equal(f.status, 0);
	assert_int_equal(f.written, 100000);
	assert_int_equal(f.readies, f.fulls + 1);
	assert_string_equal(before.value, "0");
	assert_string_equal(after.value, "100000");
	assert_int_equal(admin_int(admin, "SELECT count(*) FROM c1 WHERE name = 'name ' || id"),
			 100000);
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

static void bad_row_names_its_line_and_writes_nothing(void **state)
{
	uv_loop_t loop;
	struct feed f = { .rows = 5000, .bad_row = 4321 };
	struct feed aborted = { .rows = 1000, .abort_midway = true };
	struct feed missing = { .rows = 10 };

	PQclear(fixture_sql(admin, "CREATE TABLE c2 (id int PRIMARY KEY, name text NOT NULL)"));
	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop);
	assert_int_equal(copy_into(&loop, c, "c2", &f), DSP_EPG);
	assert_int_equal(f.line, 4321);
	assert_string_equal(f.sqlstate, "22P02");
	assert_int_equal(f.written, 0);
	assert_int_equal(admin_int(admin, "SELECT count(*) FROM c2"), 0);

	assert_int_equal(copy_into(&loop, c, "c2", &aborted), DSP_EPG);
	assert_string_equal(aborted.sqlstate, "57014");
	assert_int_equal(admin_int(admin, "SELECT count(*) FROM c2"), 0);

	assert_int_equal(copy_into(&loop, c, "no_such_table", &missing), DSP_EPG);
	assert_string_equal(missing.sqlstate, "42P01");
	assert_int_equal(missing.readies, 0);

	struct pg_copy_options o = { .ready_cb = ready_cb, .done_cb = done_cb, .data = &f };
	assert_int_equal(pg_conn_copy_in(c, "SELECT 1", &o), -EINVAL);
	o.done_cb = NULL;
	assert_int_equal(pg_conn_copy_in(c, "COPY c2 FROM STDIN", &o), -EINVAL);

	/* The connection is in pipeline mode again and usable. */
	struct probe p = { 0 };
	assert_int_equal(
		pg_conn_exec(c, &(struct pg_query){ .sql = "SELECT 4" }, probe_result_cb, &p), 0);
	fixture_run_until_count(&loop, &p.calls, 1, 60000);
	assert_string_equal(p.value, "4");
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

static bool copy_ready(void *arg)
{
	return ((struct feed *)arg)->copy != NULL;
}

/* The backend is stopped (SIGSTOP), so it reads nothing: put must say "wait" once the socket
 * is full, and ready_cb must come once it drains after SIGCONT. */
static void back_pressure_waits_for_drain(void **state)
{
	uv_loop_t loop;
	struct feed f = { .rows = 1000000, .manual = true };
	struct probe p = { 0 };

	PQclear(fixture_sql(admin, "CREATE TABLE c3 (id int, name text)"));
	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop);
	assert_int_equal(pg_conn_exec(c, &(struct pg_query){ .sql = "SELECT pg_backend_pid()" },
				      probe_result_cb, &p),
			 0);
	fixture_run_until_count(&loop, &p.calls, 1, 60000);
	pid_t backend = (pid_t)atoi(p.value);
	struct pg_copy_options o = { .ready_cb = ready_cb, .done_cb = done_cb, .data = &f };
	assert_int_equal(pg_conn_copy_in(c, "COPY c3 (id, name) FROM STDIN (FORMAT csv)", &o), 0);
	fixture_run_until(&loop, copy_ready, &f, 60000);
	assert_int_equal(f.readies, 1);

	assert_int_equal(kill(backend, SIGSTOP), 0);
	while (f.sent < f.rows && put_row(&f) == 0)
		;
	assert_true(f.sent < f.rows); /* a full socket said "wait" long before a million rows */
	int readies = f.readies;
	for (int i = 0; i < 50; i++)
		uv_run(&loop, UV_RUN_NOWAIT);
	assert_int_equal(f.readies, readies); /* nothing drains while the backend sleeps */
	assert_int_equal(kill(backend, SIGCONT), 0);
	fixture_run_until_count(&loop, &f.readies, readies + 1, 60000);

	f.manual = false;
	f.rows = f.sent + 1000;
	pump_rows(&f);
	fixture_run_until_count(&loop, &f.done, 1, 120000);
	assert_int_equal(f.status, 0);
	assert_int_equal((int)f.written, f.rows);
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

/* The backend goes away while the caller is handing rows: libpq closes the socket itself, inside
 * the put that fails, while the layer's poll handle still watches that descriptor. The handle
 * must go at once: a descriptor the caller opens next (the lowest free number: the one libpq
 * just closed) must be free to watch on the same loop, before the loop has run again. */
static void socket_closed_by_libpq_is_unwatched_at_once(void **state)
{
	uv_loop_t loop;
	struct feed f = { .rows = 1 << 30, .manual = true };
	struct probe p = { 0 };
	enum { SOCKS = 64 };
	int fds[SOCKS], nfds = 0;
	uv_poll_t polls[SOCKS];

	PQclear(fixture_sql(admin, "CREATE TABLE c5 (id int, name text)"));
	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop);
	assert_int_equal(pg_conn_exec(c, &(struct pg_query){ .sql = "SELECT pg_backend_pid()" },
				      probe_result_cb, &p),
			 0);
	fixture_run_until_count(&loop, &p.calls, 1, 60000);
	struct pg_copy_options o = { .ready_cb = ready_cb, .done_cb = done_cb, .data = &f };
	assert_int_equal(pg_conn_copy_in(c, "COPY c5 (id, name) FROM STDIN (FORMAT csv)", &o), 0);
	fixture_run_until(&loop, copy_ready, &f, 60000);
	terminate_backend(admin, p.value);

	/* Without running the loop: put until the layer says the COPY takes no more. */
	long long give_up = fixture_now_ms() + 60000;
	int rc = 0;
	while (rc != -EPIPE) {
		char row[32];
		int len = snprintf(row, sizeof(row), "%d,x\n", ++f.sent);
		rc = pg_copy_put(f.copy, row, (size_t)len);
		assert_true(rc == 0 || rc == 1 || rc == -EPIPE);
		assert_true(fixture_now_ms() < give_up);
	}
	for (; nfds < SOCKS; nfds++) {
		fds[nfds] = socket(AF_UNIX, SOCK_STREAM, 0);
		assert_true(fds[nfds] >= 0);
		assert_int_equal(uv_poll_init(&loop, &polls[nfds], fds[nfds]), 0);
	}
	for (int i = 0; i < nfds; i++)
		uv_close((uv_handle_t *)&polls[i], NULL);
	fixture_run_until_count(&loop, &f.done, 1, 60000);
	assert_int_equal(f.status, -ECONNRESET);
	for (int i = 0; i < nfds; i++)
		close(fds[i]);
	fixture_run_until(&loop, conn_up, c, 60000);
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

static bool pool_up(void *arg)
{
	return pg_pool_up_count(arg) == pg_pool_size(arg);
}

/* A COPY takes one connection of a pool out of routing while it streams: statements sent to
 * the pool meanwhile go to the other one and complete before the COPY ends. */
static void copy_on_pool_leaves_the_rest(void **state)
{
	uv_loop_t loop;
	struct pg_pool *pool;
	struct feed f = { .rows = 10000, .manual = true };
	struct probe p = { 0 };
	struct pg_pool_options po = {
		.conninfo = svc.database_url,
		.name = "cpool",
		.size = 2,
		.connect_timeout_ms = 10000,
		.query_timeout_ms = 60000,
		.reconnect_min_ms = 20,
		.reconnect_max_ms = 200,
	};

	PQclear(fixture_sql(admin, "CREATE TABLE c4 (id int, name text)"));
	uv_loop_init(&loop);
	assert_int_equal(pg_pool_new(&loop, &po, &pool), 0);
	assert_int_equal(pg_pool_start(pool), 0);
	fixture_run_until(&loop, pool_up, pool, 60000);
	struct pg_copy_options o = { .ready_cb = ready_cb, .done_cb = done_cb, .data = &f };
	assert_int_equal(pg_pool_copy_in(pool, "COPY c4 (id, name) FROM STDIN (FORMAT csv)", &o),
			 0);
	fixture_run_until(&loop, copy_ready, &f, 60000);
	assert_true(pg_conn_is_claimed(pg_pool_conn(pool, 0)) !=
		    pg_conn_is_claimed(pg_pool_conn(pool, 1)));
	for (int i = 0; i < 20; i++)
		assert_int_equal(pg_pool_exec(pool, PG_LANE_NORMAL,
					      &(struct pg_query){ .sql = "SELECT 1" },
					      probe_result_cb, &p),
				 0);
	fixture_run_until_count(&loop, &p.calls, 20, 60000);
	assert_int_equal(f.done, 0); /* the COPY is still open */
	f.manual = false;
	pump_rows(&f);
	fixture_run_until_count(&loop, &f.done, 1, 120000);
	assert_int_equal(f.status, 0);
	assert_int_equal(f.written, 10000);
	assert_false(pg_conn_is_claimed(pg_pool_conn(pool, 0)));
	assert_false(pg_conn_is_claimed(pg_pool_conn(pool, 1)));
	pg_pool_close(pool, NULL, NULL);
	fixture_loop_close(&loop);
}

struct txn_box {
	struct pg_txn *txn;
	int calls, status;
};

static void txn_begin_cb(int status, struct pg_txn *txn, void *data)
{
	struct txn_box *b = data;
	b->calls++;
	b->status = status;
	b->txn = txn;
}

/* COPY inside an interactive transaction (pg_txn_copy_in): in order with its statements, its rows
 * seen by the transaction, gone after ROLLBACK, kept after COMMIT; a failing COPY makes the
 * commit report the COPY's error and keeps nothing. */
static void copy_inside_transaction(void **state)
{
	uv_loop_t loop;
	struct txn_box b = { 0 };
	struct probe before = { 0 }, after = { 0 }, end = { 0 };

	PQclear(fixture_sql(admin, "CREATE TABLE c6 (id int PRIMARY KEY, name text NOT NULL)"));
	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop);
	for (int round = 0; round < 3; round++) {
		struct feed f = { .rows = 20000, .bad_row = round == 2 ? 777 : 0 };
		struct pg_copy_options o = { .ready_cb = ready_cb, .done_cb = done_cb, .data = &f };
		memset(&b, 0, sizeof(b));
		before.calls = after.calls = end.calls = 0;
		assert_int_equal(pg_conn_begin(c, NULL, txn_begin_cb, &b), 0);
		fixture_run_until_count(&loop, &b.calls, 1, 60000);
		assert_int_equal(b.status, 0);
		assert_int_equal(pg_txn_exec(b.txn,
					     &(struct pg_query){ .sql = "SELECT count(*) FROM c6" },
					     probe_result_cb, &before),
				 0);
		assert_int_equal(
			pg_txn_copy_in(b.txn, "COPY c6 (id, name) FROM STDIN (FORMAT csv)", &o), 0);
		assert_int_equal(pg_txn_exec(b.txn,
					     &(struct pg_query){ .sql = "SELECT count(*) FROM c6" },
					     probe_result_cb, &after),
				 0);
		fixture_run_until_count(&loop, &after.calls, 1, 120000);
		assert_int_equal(f.done, 1);
		assert_string_equal(before.value, round == 2 ? "20000" : "0");
		if (round < 2) {
			assert_int_equal(f.status, 0);
			assert_int_equal(f.written, 20000);
			assert_string_equal(after.value, "20000");
			/* Not visible outside before COMMIT. */
			assert_int_equal(admin_int(admin, "SELECT count(*) FROM c6"), 0);
		} else {
			assert_int_equal(f.status, DSP_EPG);
			assert_int_equal(f.line, 777);
			assert_string_equal(after.sqlstate, "25P02");
		}
		int (*finish)(struct pg_txn *, pg_result_cb, void *) =
			round == 0 ? pg_txn_rollback : pg_txn_commit;
		assert_int_equal(finish(b.txn, probe_result_cb, &end), 0);
		fixture_run_until_count(&loop, &end.calls, 1, 60000);
		assert_int_equal(end.status, round == 2 ? DSP_EPG : 0);
		assert_int_equal(admin_int(admin, "SELECT count(*) FROM c6"),
				 round == 0 ? 0 : 20000);
		assert_false(pg_conn_is_claimed(c));
	}
	/* Misuse: not a COPY; after the end. */
	memset(&b, 0, sizeof(b));
	assert_int_equal(pg_conn_begin(c, NULL, txn_begin_cb, &b), 0);
	fixture_run_until_count(&loop, &b.calls, 1, 60000);
	struct feed f = { 0 };
	struct pg_copy_options o = { .ready_cb = ready_cb, .done_cb = done_cb, .data = &f };
	assert_int_equal(pg_txn_copy_in(b.txn, "SELECT 1", &o), -EINVAL);
	assert_int_equal(pg_txn_rollback(b.txn, NULL, NULL), 0);
	pg_conn_close(c, NULL, NULL);
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
		cmocka_unit_test(copy_100k_rows),
		cmocka_unit_test(bad_row_names_its_line_and_writes_nothing),
		cmocka_unit_test(back_pressure_waits_for_drain),
		cmocka_unit_test(socket_closed_by_libpq_is_unwatched_at_once),
		cmocka_unit_test(copy_on_pool_leaves_the_rest),
		cmocka_unit_test(copy_inside_transaction),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
