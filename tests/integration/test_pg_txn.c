/* Transactions against a real server: batches (one callback with every result or the first
 * error, rolled back on error), interactive transactions (read, decide in C, write, commit or
 * roll back), isolation from every other caller proven with txid_current(), a backend
 * terminated mid-transaction committing nothing, and the transaction deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "pg_pool.h"
#include "pg_test.h"

#include <errno.h>

static struct embedded svc;
static PGconn *admin;

static struct pg_conn *open_conn(uv_loop_t *loop, uint64_t query_timeout_ms)
{
	struct pg_conn_options o = {
		.conninfo = svc.database_url,
		.name = "txn",
		.connect_timeout_ms = 10000,
		.query_timeout_ms = query_timeout_ms,
		.reconnect_min_ms = 20,
		.reconnect_max_ms = 200,
	};
	struct pg_conn *c;

	assert_int_equal(pg_conn_new(loop, &o, &c), 0);
	assert_int_equal(pg_conn_start(c), 0);
	fixture_run_until(loop, conn_up, c, 60000);
	return c;
}

static long long rows(const char *table)
{
	char sql[128];
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s", table);
	return admin_int(admin, sql);
}

static void batch_commits_or_rolls_back(void **state)
{
	uv_loop_t loop;
	struct probe ok = { 0 }, bad = { 0 };
	const char *v[] = { "10" };

	PQclear(fixture_sql(admin, "CREATE TABLE tb (a int PRIMARY KEY)"));
	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, 10000);
	struct pg_query good[] = {
		{ .sql = "INSERT INTO tb VALUES ($1::int)", .nparams = 1, .values = v },
		{ .sql = "INSERT INTO tb VALUES (11)" },
		{ .sql = "SELECT count(*) FROM tb" },
	};
	assert_int_equal(pg_conn_batch(c, good, 3, probe_result_cb, &ok), 0);
	fixture_run_until_count(&loop, &ok.calls, 1, 60000);
	assert_int_equal(ok.status, 0);
	assert_int_equal(ok.nres, 3);
	assert_string_equal(ok.last, "2"); /* the batch sees its own writes */
	assert_int_equal(rows("tb"), 2);

	struct pg_query failing[] = {
		{ .sql = "INSERT INTO tb VALUES (12)" },
		{ .sql = "INSERT INTO tb VALUES (10)" }, /* duplicate: 23505 */
		{ .sql = "INSERT INTO tb VALUES (13)" },
	};
	assert_int_equal(pg_conn_batch(c, failing, 3, probe_result_cb, &bad), 0);
	fixture_run_until_count(&loop, &bad.calls, 1, 60000);
	assert_int_equal(bad.status, DSP_EPG);
	assert_string_equal(bad.sqlstate, "23505");
	assert_int_equal(bad.failed, 1);
	assert_int_equal(rows("tb"), 2); /* 12 rolled back, 13 never ran */

	assert_int_equal(pg_conn_batch(c, good, 0, probe_result_cb, &ok), -EINVAL);
	assert_int_equal(pg_conn_batch(c, good, 1001, probe_result_cb, &ok), -EINVAL);
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

/* Read, decide in C, write: the second statement is built from the first one's result. */
struct rdw {
	struct pg_txn *txn;
	int begun, status, step;
	struct probe commit;
};

static void rdw_write_cb(int status, const struct pg_results *r, void *data)
{
	struct rdw *w = data;
	w->step = status == 0 ? 3 : -3;
	assert_int_equal(pg_txn_commit(w->txn, probe_result_cb, &w->commit), 0);
}

static void rdw_read_cb(int status, const struct pg_results *r, void *data)
{
	struct rdw *w = data;
	assert_int_equal(status, 0);
	long n = atol(PQgetvalue(r->res[0], 0, 0));
	char next[24];
	snprintf(next, sizeof(next), "%ld", 100 + n); /* decide: the next free number */
	const char *v[] = { next };
	struct pg_query ins = { .sql = "INSERT INTO ti VALUES ($1::int)",
				.nparams = 1,
				.values = v };
	w->step = 2;
	assert_int_equal(pg_txn_exec(w->txn, &ins, rdw_write_cb, w), 0);
}

static void rdw_begin_cb(int status, struct pg_txn *txn, void *data)
{
	struct rdw *w = data;
	w->begun++;
	w->status = status;
	w->txn = txn;
	if (status < 0)
		return;
	w->step = 1;
	struct pg_query q = { .sql = "SELECT count(*) FROM ti" };
	assert_int_equal(pg_txn_exec(txn, &q, rdw_read_cb, w), 0);
}

static void interactive_read_decide_write(void **state)
{
	uv_loop_t loop;
	struct rdw w = { 0 };

	PQclear(fixture_sql(admin, "CREATE TABLE ti (a int PRIMARY KEY)"));
	PQclear(fixture_sql(admin, "INSERT INTO ti VALUES (1), (2)"));
	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, 10000);
	assert_int_equal(pg_conn_begin(c, NULL, rdw_begin_cb, &w), 0);
	assert_true(pg_conn_is_claimed(c));
	fixture_run_until_count(&loop, &w.commit.calls, 1, 60000);
	assert_int_equal(w.begun, 1);
	assert_int_equal(w.step, 3);
	assert_int_equal(w.commit.status, 0);
	assert_int_equal(admin_int(admin, "SELECT max(a) FROM ti"), 102);
	assert_false(pg_conn_is_claimed(c));
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

struct plain_txn {
	struct pg_txn *txn;
	int begun, status;
};

static void plain_begin_cb(int status, struct pg_txn *txn, void *data)
{
	struct plain_txn *t = data;
	t->begun++;
	t->status = status;
	t->txn = txn;
}

static struct pg_txn *begin(uv_loop_t *loop, struct pg_conn *c, struct plain_txn *t,
			    const struct pg_txn_options *o)
{
	int want = t->begun + 1;
	assert_int_equal(pg_conn_begin(c, o, plain_begin_cb, t), 0);
	fixture_run_until_count(loop, &t->begun, want, 60000);
	assert_int_equal(t->status, 0);
	return t->txn;
}

static int txn_exec(uv_loop_t *loop, struct pg_txn *txn, struct probe *p, const char *sql)
{
	int want = p->calls + 1;
	assert_int_equal(pg_txn_exec(txn, &(struct pg_query){ .sql = sql }, probe_result_cb, p), 0);
	fixture_run_until_count(loop, &p->calls, want, 60000);
	return p->status;
}

/* A failing statement aborts the transaction: later statements fail with 25P02, COMMIT rolls
 * back and reports the first error; ROLLBACK leaves nothing either. */
static void interactive_error_rolls_back(void **state)
{
	uv_loop_t loop;
	struct plain_txn t = { 0 };
	struct probe p = { 0 }, commit = { 0 }, rb = { 0 };

	PQclear(fixture_sql(admin, "CREATE TABLE te (a int PRIMARY KEY)"));
	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, 10000);
	struct pg_txn *txn = begin(&loop, c, &t, NULL);
	assert_int_equal(txn_exec(&loop, txn, &p, "INSERT INTO te VALUES (1)"), 0);
	assert_int_equal(txn_exec(&loop, txn, &p, "SELECT 1/0"), DSP_EPG);
	assert_int_equal(txn_exec(&loop, txn, &p, "INSERT INTO te VALUES (2)"), DSP_EPG);
	assert_string_equal(p.sqlstate, "25P02");
	assert_int_equal(pg_txn_commit(txn, probe_result_cb, &commit), 0);
	fixture_run_until_count(&loop, &commit.calls, 1, 60000);
	assert_int_equal(commit.status, DSP_EPG);
	assert_string_equal(commit.sqlstate, "22012"); /* the first error */
	assert_int_equal(rows("te"), 0);

	txn = begin(&loop, c, &t, &(struct pg_txn_options){ .isolation = PG_SERIALIZABLE });
	assert_int_equal(txn_exec(&loop, txn, &p, "SHOW transaction_isolation"), 0);
	assert_string_equal(p.value, "serializable");
	assert_int_equal(txn_exec(&loop, txn, &p, "INSERT INTO te VALUES (3)"), 0);
	assert_int_equal(pg_txn_rollback(txn, probe_result_cb, &rb), 0);
	fixture_run_until_count(&loop, &rb.calls, 1, 60000);
	assert_int_equal(rb.status, 0);
	assert_int_equal(rows("te"), 0);
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

/* Inside an interactive transaction, savepoints work (ROLLBACK TO keeps the transaction), but
 * a statement that would end it behind the layer's back is refused: the transaction's end is
 * pg_txn_commit() or pg_txn_rollback(). */
static void savepoints_but_no_transaction_control(void **state)
{
	uv_loop_t loop;
	struct plain_txn t = { 0 };
	struct probe p = { 0 }, commit = { 0 };

	PQclear(fixture_sql(admin, "CREATE TABLE tsp (a int)"));
	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, 10000);
	struct pg_txn *txn = begin(&loop, c, &t, NULL);
	assert_int_equal(txn_exec(&loop, txn, &p, "INSERT INTO tsp VALUES (1)"), 0);
	static const char *const refused[] = { "COMMIT", "rollback", "END", "BEGIN",
					       "ROLLBACK AND CHAIN" };
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++)
		assert_int_equal(pg_txn_exec(txn, &(struct pg_query){ .sql = refused[i] },
					     probe_result_cb, &p),
				 -EINVAL);
	assert_int_equal(txn_exec(&loop, txn, &p, "SAVEPOINT s1"), 0);
	assert_int_equal(txn_exec(&loop, txn, &p, "INSERT INTO tsp VALUES (2)"), 0);
	assert_int_equal(txn_exec(&loop, txn, &p, "ROLLBACK TO SAVEPOINT s1"), 0);
	assert_int_equal(txn_exec(&loop, txn, &p, "RELEASE s1"), 0);
	assert_int_equal(rows("tsp"), 0); /* nothing committed yet */
	assert_int_equal(pg_txn_commit(txn, probe_result_cb, &commit), 0);
	fixture_run_until_count(&loop, &commit.calls, 1, 60000);
	assert_int_equal(commit.status, 0);
	assert_int_equal(admin_int(admin, "SELECT sum(a) FROM tsp"), 1);
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

/* --- isolation, proven with txid_current() --- */

struct iso_a {
	struct pg_txn *txn;
	struct probe xid, lock, xid2, ins, commit;
};

static void iso_a_ins_cb(int status, const struct pg_results *r, void *data)
{
	struct iso_a *a = data;
	probe_result_cb(status, r, &a->ins);
	assert_int_equal(pg_txn_commit(a->txn, probe_result_cb, &a->commit), 0);
}

static void iso_a_lock_cb(int status, const struct pg_results *r, void *data)
{
	struct iso_a *a = data;
	probe_result_cb(status, r, &a->lock);
	/* After the lock: the same transaction, then a write and the commit. */
	assert_int_equal(pg_txn_exec(a->txn, &(struct pg_query){ .sql = "SELECT txid_current()" },
				     probe_result_cb, &a->xid2),
			 0);
	assert_int_equal(pg_txn_exec(a->txn,
				     &(struct pg_query){ .sql = "INSERT INTO tx VALUES ('a')" },
				     iso_a_ins_cb, a),
			 0);
}

static void iso_a_begin_cb(int status, struct pg_txn *txn, void *data)
{
	struct iso_a *a = data;
	assert_int_equal(status, 0);
	a->txn = txn;
	/* Two statements in flight at once inside the transaction. */
	assert_int_equal(pg_txn_exec(txn, &(struct pg_query){ .sql = "SELECT txid_current()" },
				     probe_result_cb, &a->xid),
			 0);
	assert_int_equal(
		pg_txn_exec(txn, &(struct pg_query){ .sql = "SELECT pg_advisory_xact_lock(301)" },
			    iso_a_lock_cb, a),
		0);
}

/* Caller A holds an interactive transaction, caller B runs a batch; both are blocked on locks
 * the test holds, so both are certainly open while caller C runs 50 statements one after the
 * other, and a statement sent to A's own connection waits. Every xid C sees is its own. */
static void third_caller_never_inside(void **state)
{
	uv_loop_t loop;
	struct pg_pool *pool;
	struct iso_a a = { 0 };
	struct probe b = { 0 }, c = { 0 }, d = { 0 };
	long long c_xids[50];
	struct pg_pool_options o = {
		.conninfo = svc.database_url,
		.name = "iso",
		.size = 3,
		.connect_timeout_ms = 10000,
		.query_timeout_ms = 60000,
		.reconnect_min_ms = 20,
		.reconnect_max_ms = 200,
	};

	PQclear(fixture_sql(admin, "CREATE TABLE tx (who text)"));
	PQclear(fixture_sql(admin, "SELECT pg_advisory_lock(301), pg_advisory_lock(302)"));
	uv_loop_init(&loop);
	assert_int_equal(pg_pool_new(&loop, &o, &pool), 0);
	assert_int_equal(pg_pool_start(pool), 0);
	while (pg_pool_up_count(pool) < 3)
		uv_run(&loop, UV_RUN_ONCE);

	assert_int_equal(pg_pool_begin(pool, NULL, iso_a_begin_cb, &a), 0);
	struct pg_query bq[] = {
		{ .sql = "SELECT txid_current()" },
		{ .sql = "INSERT INTO tx VALUES ('b')" },
		{ .sql = "SELECT pg_advisory_xact_lock(302)" },
		{ .sql = "SELECT txid_current()" },
	};
	assert_int_equal(pg_pool_batch(pool, PG_LANE_NORMAL, bq, 4, probe_result_cb, &b), 0);
	wait_for_lock_waiter(&loop, admin, 301);
	wait_for_lock_waiter(&loop, admin, 302);
	assert_int_equal(a.xid.calls, 1);

	struct pg_conn *held = NULL;
	for (unsigned i = 0; i < pg_pool_size(pool); i++)
		if (pg_conn_is_claimed(pg_pool_conn(pool, i)))
			held = pg_pool_conn(pool, i);
	assert_non_null(held);
	assert_int_equal(pg_conn_exec(held, &(struct pg_query){ .sql = "SELECT txid_current()" },
				      probe_result_cb, &d),
			 0);

	for (int i = 0; i < 50; i++) {
		assert_int_equal(pg_pool_exec(pool, PG_LANE_NORMAL,
					      &(struct pg_query){ .sql = "SELECT txid_current()" },
					      probe_result_cb, &c),
				 0);
		fixture_run_until_count(&loop, &c.calls, i + 1, 60000);
		assert_int_equal(c.status, 0);
		c_xids[i] = atoll(c.value);
	}
	/* A and B are still open: their locks are still awaited; D still waits for A. */
	assert_true(advisory_waiting(admin, 301));
	assert_true(advisory_waiting(admin, 302));
	assert_int_equal(a.lock.calls + b.calls + d.calls, 0);

	PQclear(fixture_sql(admin, "SELECT pg_advisory_unlock(301), pg_advisory_unlock(302)"));
	fixture_run_until_count(&loop, &a.commit.calls, 1, 60000);
	fixture_run_until_count(&loop, &b.calls, 1, 60000);
	fixture_run_until_count(&loop, &d.calls, 1, 60000);
	long long a_xid = atoll(a.xid.value), b_xid = atoll(b.value);
	assert_int_equal(a.commit.status, 0);
	assert_int_equal(atoll(a.xid2.value), a_xid);
	assert_int_equal(b.status, 0);
	assert_int_equal(atoll(b.last), b_xid); /* one transaction from start to end */
	assert_true(a_xid != b_xid);
	for (int i = 0; i < 50; i++)
		assert_true(c_xids[i] != a_xid && c_xids[i] != b_xid);
	assert_int_equal(d.status, 0);
	assert_true(atoll(d.value) != a_xid && atoll(d.value) != b_xid);
	assert_int_equal(rows("tx"), 2);
	pg_pool_close(pool, NULL, NULL);
	fixture_loop_close(&loop);
}

/* --- a terminated backend, the deadline --- */

static void terminated_mid_transaction_commits_nothing(void **state)
{
	uv_loop_t loop;
	struct plain_txn t = { 0 };
	struct probe p = { 0 }, lock = { 0 }, batch = { 0 };

	PQclear(fixture_sql(admin, "CREATE TABLE tk (a int)"));
	PQclear(fixture_sql(admin, "SELECT pg_advisory_lock(401)"));
	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, 60000);
	struct pg_txn *txn = begin(&loop, c, &t, NULL);
	assert_int_equal(txn_exec(&loop, txn, &p, "INSERT INTO tk VALUES (1)"), 0);
	assert_int_equal(txn_exec(&loop, txn, &p, "SELECT pg_backend_pid()"), 0);
	char pid[64];
	snprintf(pid, sizeof(pid), "%s", p.value);
	assert_int_equal(
		pg_txn_exec(txn, &(struct pg_query){ .sql = "SELECT pg_advisory_xact_lock(401)" },
			    probe_result_cb, &lock),
		0);
	wait_for_lock_waiter(&loop, admin, 401);
	terminate_backend(admin, pid);
	fixture_run_until_count(&loop, &lock.calls, 1, 60000);
	assert_int_equal(lock.status, -ECONNRESET);
	/* The transaction is lost for good, even once the connection is back. */
	fixture_run_until(&loop, conn_up, c, 60000);
	assert_int_equal(
		pg_txn_exec(txn, &(struct pg_query){ .sql = "SELECT 1" }, probe_result_cb, &p),
		-ECONNRESET);
	assert_int_equal(pg_txn_commit(txn, probe_result_cb, &p), -ECONNRESET);
	assert_int_equal(rows("tk"), 0);

	/* A batch: the same. */
	assert_int_equal(txn_exec(&loop, begin(&loop, c, &t, NULL), &p, "SELECT pg_backend_pid()"),
			 0);
	snprintf(pid, sizeof(pid), "%s", p.value);
	assert_int_equal(pg_txn_rollback(t.txn, NULL, NULL), 0);
	struct pg_query bq[] = {
		{ .sql = "INSERT INTO tk VALUES (2)" },
		{ .sql = "SELECT pg_advisory_xact_lock(401)" },
		{ .sql = "INSERT INTO tk VALUES (3)" },
	};
	assert_int_equal(pg_conn_batch(c, bq, 3, probe_result_cb, &batch), 0);
	wait_for_lock_waiter(&loop, admin, 401);
	terminate_backend(admin, pid);
	fixture_run_until_count(&loop, &batch.calls, 1, 60000);
	assert_int_equal(batch.status, -ECONNRESET);
	assert_int_equal(rows("tk"), 0);
	PQclear(fixture_sql(admin, "SELECT pg_advisory_unlock(401)"));
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

/* A COMMIT whose answer is lost: COMMIT runs a deferred trigger that waits for a lock the test
 * holds, the backend is terminated meanwhile. The commit reports -ECONNRESET (its outcome is
 * the caller's to find out; here nothing was committed), and a statement of another caller
 * that was sent behind the COMMIT once the hold ended completes once with -ECONNRESET too. */
static void commit_answer_lost(void **state)
{
	uv_loop_t loop;
	struct plain_txn t = { 0 };
	struct probe p = { 0 }, commit = { 0 }, other = { 0 };

	PQclear(fixture_sql(admin, "CREATE TABLE tcl (a int)"));
	PQclear(fixture_sql(admin,
			    "CREATE FUNCTION tcl_wait() RETURNS trigger LANGUAGE plpgsql AS "
			    "$$ BEGIN PERFORM pg_advisory_xact_lock(404); RETURN NULL; END $$"));
	PQclear(fixture_sql(admin, "CREATE CONSTRAINT TRIGGER tcl_at_commit AFTER INSERT ON tcl "
				   "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION "
				   "tcl_wait()"));
	PQclear(fixture_sql(admin, "SELECT pg_advisory_lock(404)"));
	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, 60000);
	struct pg_txn *txn = begin(&loop, c, &t, NULL);
	assert_int_equal(txn_exec(&loop, txn, &p, "INSERT INTO tcl VALUES (1)"), 0);
	assert_int_equal(txn_exec(&loop, txn, &p, "SELECT pg_backend_pid()"), 0);
	char pid[64];
	snprintf(pid, sizeof(pid), "%s", p.value);
	assert_int_equal(pg_txn_commit(txn, probe_result_cb, &commit), 0);
	assert_int_equal(pg_conn_exec(c, &(struct pg_query){ .sql = "SELECT 'behind'" },
				      probe_result_cb, &other),
			 0);
	wait_for_lock_waiter(&loop, admin, 404);
	assert_false(pg_conn_is_claimed(c)); /* the hold ended when COMMIT was sent */
	terminate_backend(admin, pid);
	fixture_run_until_count(&loop, &other.calls, 1, 60000);
	assert_int_equal(commit.calls, 1);
	assert_int_equal(commit.status, -ECONNRESET);
	assert_int_equal(other.status, -ECONNRESET);
	assert_int_equal(rows("tcl"), 0);
	PQclear(fixture_sql(admin, "SELECT pg_advisory_unlock(404)"));
	fixture_run_until(&loop, conn_up, c, 60000);
	assert_int_equal(commit.calls + other.calls, 2);
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

static bool timed_out(void *arg)
{
	struct pg_conn_stats st;
	pg_conn_get_stats(arg, &st);
	return st.timeouts > 0;
}

static void transaction_deadline(void **state)
{
	uv_loop_t loop;
	struct plain_txn t = { 0 };
	struct probe p = { 0 }, lock = { 0 };
	struct pg_conn_stats st;
	/* 2 s: long enough that BEGIN and one INSERT never reach it on a loaded machine. */
	const struct pg_txn_options short_txn = { .timeout_ms = 2000 };

	PQclear(fixture_sql(admin, "CREATE TABLE td (a int)"));
	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, 60000);

	/* Idle past the deadline: rolled back on the same connection, which stays up. */
	struct pg_txn *txn = begin(&loop, c, &t, &short_txn);
	assert_int_equal(txn_exec(&loop, txn, &p, "INSERT INTO td VALUES (1)"), 0);
	fixture_run_until(&loop, timed_out, c, 60000);
	assert_int_equal(
		pg_txn_exec(txn, &(struct pg_query){ .sql = "SELECT 1" }, probe_result_cb, &p),
		-ETIMEDOUT);
	assert_int_equal(pg_txn_commit(txn, probe_result_cb, &p), -ETIMEDOUT);
	assert_false(pg_conn_is_claimed(c));
	struct probe after = { 0 };
	assert_int_equal(
		pg_conn_exec(c, &(struct pg_query){ .sql = "SELECT 9" }, probe_result_cb, &after),
		0);
	fixture_run_until_count(&loop, &after.calls, 1, 60000);
	assert_int_equal(after.status, 0);
	pg_conn_get_stats(c, &st);
	assert_int_equal(st.disconnects, 0);
	assert_int_equal(rows("td"), 0);

	/* A statement in flight at the deadline: -ETIMEDOUT, the connection dropped. */
	PQclear(fixture_sql(admin, "SELECT pg_advisory_lock(402)"));
	txn = begin(&loop, c, &t, &short_txn);
	assert_int_equal(txn_exec(&loop, txn, &p, "INSERT INTO td VALUES (2)"), 0);
	assert_int_equal(
		pg_txn_exec(txn, &(struct pg_query){ .sql = "SELECT pg_advisory_xact_lock(402)" },
			    probe_result_cb, &lock),
		0);
	fixture_run_until_count(&loop, &lock.calls, 1, 60000);
	assert_int_equal(lock.status, -ETIMEDOUT);
	assert_int_equal(pg_txn_rollback(txn, NULL, NULL), -ETIMEDOUT);
	fixture_run_until(&loop, conn_up, c, 60000);
	pg_conn_get_stats(c, &st);
	assert_int_equal(st.disconnects, 1);
	assert_int_equal(rows("td"), 0);
	PQclear(fixture_sql(admin, "SELECT pg_advisory_unlock(402)"));
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

/* Closing with a transaction open and another waiting for the connection. */
static void close_ends_transactions(void **state)
{
	uv_loop_t loop;
	struct plain_txn t = { 0 }, waiting = { 0 };
	struct probe p = { 0 };

	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, 10000);
	struct pg_txn *txn = begin(&loop, c, &t, NULL);
	assert_int_equal(pg_conn_begin(c, NULL, plain_begin_cb, &waiting), 0);
	assert_int_equal(pg_txn_exec(txn, &(struct pg_query){ .sql = "SELECT pg_sleep(5)" },
				     probe_result_cb, &p),
			 0);
	uv_run(&loop, UV_RUN_NOWAIT);
	pg_conn_close(c, NULL, NULL);
	assert_int_equal(p.calls, 1);
	assert_int_equal(p.status, -ECANCELED);
	assert_int_equal(waiting.begun, 1);
	assert_int_equal(waiting.status, -ECANCELED);
	assert_null(waiting.txn);
	assert_int_equal(pg_txn_commit(txn, NULL, NULL), -ECANCELED);
	fixture_loop_close(&loop);
}

/* --- the owner ending or closing from inside a callback --- */

struct ender {
	struct pg_conn *conn;
	struct pg_txn *txn;
	int calls[3];
	int status[3];
	int end_rc; /* what pg_txn_rollback() returned inside the callback */
	int closed;
};

static void ender_lost_cb(int status, const struct pg_results *r, void *data)
{
	struct ender *e = data;
	e->calls[0]++;
	e->status[0] = status;
	/* The usual reaction to a lost transaction: give the handle up at once. */
	e->end_rc = pg_txn_rollback(e->txn, NULL, NULL);
}

/* The connection drops under a transaction whose owner gives the handle up from the callback
 * that reports the loss: the handle is freed once, after that callback (it was freed inside
 * it, then used and freed again). */
static void lost_transaction_ended_from_its_callback(void **state)
{
	uv_loop_t loop;
	struct plain_txn t = { 0 };
	struct probe p = { 0 };
	struct ender e = { .end_rc = 1 };

	PQclear(fixture_sql(admin, "SELECT pg_advisory_lock(403)"));
	uv_loop_init(&loop);
	struct pg_conn *c = open_conn(&loop, 60000);
	e.txn = begin(&loop, c, &t, NULL);
	assert_int_equal(txn_exec(&loop, e.txn, &p, "SELECT pg_backend_pid()"), 0);
	char pid[64];
	snprintf(pid, sizeof(pid), "%s", p.value);
	assert_int_equal(
		pg_txn_exec(e.txn, &(struct pg_query){ .sql = "SELECT pg_advisory_xact_lock(403)" },
			    ender_lost_cb, &e),
		0);
	wait_for_lock_waiter(&loop, admin, 403);
	terminate_backend(admin, pid);
	fixture_run_until_count(&loop, &e.calls[0], 1, 60000);
	assert_int_equal(e.status[0], -ECONNRESET);
	assert_int_equal(e.end_rc, -ECONNRESET);
	fixture_run_until(&loop, conn_up, c, 60000);
	PQclear(fixture_sql(admin, "SELECT pg_advisory_unlock(403)"));
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

static void ender_closed_cb(void *data)
{
	((struct ender *)data)->closed++;
}

static void ender_next_cb(int status, const struct pg_results *r, void *data)
{
	struct ender *e = data;
	int i = e->calls[1] + e->calls[2] == 0 ? 1 : 2;
	e->calls[i]++;
	e->status[i] = status;
}

static void ender_close_cb(int status, const struct pg_results *r, void *data)
{
	struct ender *e = data;
	e->calls[0]++;
	e->status[0] = status;
	e->end_rc = pg_txn_commit(e->txn, ender_next_cb, e);
	pg_conn_close(e->conn, ender_closed_cb, e);
}

/* The first of two statements in flight commits and closes the connection from its callback:
 * the second statement and the COMMIT each complete once with -ECANCELED, and the handle is
 * freed once. */
static void close_from_a_transaction_callback(void **state)
{
	uv_loop_t loop;
	struct plain_txn t = { 0 };
	struct ender e = { .end_rc = 1 };

	uv_loop_init(&loop);
	e.conn = open_conn(&loop, 10000);
	e.txn = begin(&loop, e.conn, &t, NULL);
	assert_int_equal(
		pg_txn_exec(e.txn, &(struct pg_query){ .sql = "SELECT 1" }, ender_close_cb, &e), 0);
	assert_int_equal(pg_txn_exec(e.txn, &(struct pg_query){ .sql = "SELECT pg_sleep(5)" },
				     ender_next_cb, &e),
			 0);
	fixture_run_until_count(&loop, &e.closed, 1, 60000);
	assert_int_equal(e.status[0], 0);
	assert_int_equal(e.end_rc, 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(e.calls[i], 1);
	assert_int_equal(e.status[1], -ECANCELED);
	assert_int_equal(e.status[2], -ECANCELED);
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
		cmocka_unit_test(batch_commits_or_rolls_back),
		cmocka_unit_test(interactive_read_decide_write),
		cmocka_unit_test(interactive_error_rolls_back),
		cmocka_unit_test(savepoints_but_no_transaction_control),
		cmocka_unit_test(third_caller_never_inside),
		cmocka_unit_test(terminated_mid_transaction_commits_nothing),
		cmocka_unit_test(commit_answer_lost),
		cmocka_unit_test(transaction_deadline),
		cmocka_unit_test(close_ends_transactions),
		cmocka_unit_test(lost_transaction_ended_from_its_callback),
		cmocka_unit_test(close_from_a_transaction_callback),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
