/* The call-row write and its fences against a real server (dispatcher/gate/gate_pg.h): each
 * outcome; the epoch race (a switch while writes are in flight leaves no row under the old
 * epoch after it); the lease race in both orders (exactly one of the write and the sweeper
 * wins); the server-side deadline (a blocked write is cancelled by PostgreSQL itself); the
 * reconciler meeting a write held on a lock (the slot survives, the write fails at its deadline
 * and releases); the fence against a write in both orders; a lost write settled by a fence;
 * written rows of cancelled callers ended (gate_pg_cancel_written).
 * Every overlap is made certain with a lock the test holds, watched in pg_locks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gate_pg_test.h"
#include "reconcile.h"

#include <errno.h>

static struct embedded svc;
static PGconn *admin, *holder;

static char C0[] = "wr_c0", A0[] = "wr_a0";

static void each_outcome(void **state)
{
	struct gp e;
	struct gp_write w = { 0 }, stale = { 0 };
	char id[6][37];
	long long k0 = gp_contact(admin, "wr", 0, 0), k1 = gp_contact(admin, "wr", 0, 1);

	gp_open(&e, &svc, 2, "write");
	gp_sql(admin, "INSERT INTO gate_fences (call_id, org_id) VALUES ('%s', 'wr')",
	       gp_uuid(id[2], 102));
	gp_sql(admin,
	       "INSERT INTO calls (id, org_id, agent_id, to_number, gate_mode, gate_epoch)"
	       " VALUES ('%s', 'wr', 'wr_a0', '+14155550100', 'redis', 1)",
	       gp_uuid(id[4], 104));
	struct gate_pg_call calls[5] = {
		gp_call(gp_uuid(id[0], 100), "wr", C0, A0, k0),
		gp_call(gp_uuid(id[1], 101), "wr", C0, A0, k1),
		gp_call(id[2], "wr", NULL, A0, 0),
		gp_call(gp_uuid(id[3], 103), "wr", NULL, A0, 0),
		gp_call(id[4], "wr", NULL, A0, 0),
	};
	calls[1].dial.lease_token = 1; /* not the claim's token */
	assert_int_equal(gate_pg_write(e.g, GATE_MODE_REDIS, 1, 10000, calls, 5, gp_write_cb, &w),
			 0);
	fixture_run_until_count(&e.loop, &w.calls, 1, 60000);
	assert_int_equal(w.out[0], GATE_PG_WRITTEN);
	assert_int_equal(w.out[1], GATE_PG_LEASE_LOST);
	assert_int_equal(w.out[2], GATE_PG_FENCED);
	assert_int_equal(w.out[3], GATE_PG_WRITTEN);
	assert_int_equal(w.out[4], GATE_PG_EXISTS);
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM calls WHERE gate_epoch = 1 AND"
				       " gate_mode = 'redis' AND state = 'dialing'"),
			 3);
	assert_int_equal(gp_int(admin,
				"SELECT count(*) FROM contacts WHERE id = %lld AND"
				" state = 'dialing'",
				k0),
			 1);
	assert_int_equal(gp_int(admin,
				"SELECT count(*) FROM contacts WHERE id = %lld AND"
				" state = 'claimed'",
				k1),
			 1);
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM calls WHERE id = '%s'", id[2]), 0);
	assert_true(gate_pg_outcome_releases(GATE_PG_LEASE_LOST));
	assert_false(gate_pg_outcome_releases(GATE_PG_EXISTS));
	assert_false(gate_pg_outcome_releases(GATE_PG_UNKNOWN));

	/* Another epoch, or the same epoch under the other mode: nothing is written. */
	struct gate_pg_call again[2] = { gp_call(gp_uuid(id[5], 105), "wr", C0, A0, k1),
					 gp_call(gp_uuid(id[1], 106), "wr", NULL, A0, 0) };
	assert_int_equal(
		gate_pg_write(e.g, GATE_MODE_REDIS, 2, 10000, again, 2, gp_write_cb, &stale), 0);
	assert_int_equal(
		gate_pg_write(e.g, GATE_MODE_POSTGRES, 1, 10000, again, 2, gp_write_cb, &stale), 0);
	fixture_run_until_count(&e.loop, &stale.calls, 2, 60000);
	assert_int_equal(stale.out[0], GATE_PG_STALE_EPOCH);
	assert_int_equal(stale.out[1], GATE_PG_STALE_EPOCH);
	assert_int_equal(
		gp_int(admin, "SELECT count(*) FROM calls WHERE id IN ('%s', '%s')", id[5], id[1]),
		0);

	struct gate_pg_stats st;
	gate_pg_get_stats(e.g, &st);
	assert_int_equal(st.writes, 3);
	assert_int_equal(st.outcomes[GATE_PG_WRITTEN], 2);
	assert_int_equal(st.outcomes[GATE_PG_STALE_EPOCH], 4);
	gp_close(&e);
}

static void bad_requests(void **state)
{
	struct gp e;
	struct gp_write w = { 0 };
	char a[37], b[37];
	struct gate_pg_call ok = gp_call(gp_uuid(a, 200), "wr", C0, A0, 999);
	struct gate_pg_call c[2];

	gp_open(&e, &svc, 1, "bad");
#define REFUSED(expect, ...)                                                                       \
	do {                                                                                       \
		struct gate_pg_call list[] = { __VA_ARGS__ };                                      \
		assert_int_equal(gate_pg_write(e.g, GATE_MODE_REDIS, 1, 1000, list,                \
					       sizeof(list) / sizeof(list[0]), gp_write_cb, &w),   \
				 expect);                                                          \
	} while (0)
	c[0] = ok;
	c[0].call = "not-a-uuid";
	REFUSED(-EINVAL, c[0]);
	c[0] = ok;
	c[0].dial.to_number = "4155550100";
	REFUSED(-EINVAL, c[0]);
	c[0] = ok;
	c[0].dial.contact = 0; /* a batch dial without a contact */
	REFUSED(-EINVAL, c[0]);
	c[0] = ok;
	c[0].dial.campaign = NULL; /* a direct dial with a contact */
	REFUSED(-EINVAL, c[0]);
	c[0] = ok;
	c[0].org = "bad org";
	REFUSED(-EINVAL, c[0]);
	c[0] = ok;
	c[0].dial.attempt = 0;
	REFUSED(-EINVAL, c[0]);
	c[1] = ok;
	c[1].call = gp_uuid(b, 201);
	REFUSED(-EINVAL, ok, c[1]); /* one contact twice */
	c[1] = ok;
	c[1].dial.contact = 998;
	REFUSED(-EINVAL, ok, c[1]); /* one call id twice */
	assert_int_equal(gate_pg_write(e.g, GATE_MODE_REDIS, 1, 1000, &ok, 0, gp_write_cb, &w),
			 -EINVAL);
	assert_int_equal(gate_pg_write(e.g, GATE_MODE_REDIS, 0, 1000, &ok, 1, gp_write_cb, &w),
			 -EINVAL);
	assert_int_equal(gate_pg_write(e.g, GATE_MODE_REDIS, 1, 0, &ok, 1, gp_write_cb, &w),
			 -ETIMEDOUT);
	assert_int_equal(w.calls, 0);
#undef REFUSED
	gp_close(&e);
}

/* A write holds the shared epoch lock and is blocked on a contact the test holds; the switch
 * waits for it; a second write queues behind the switch. The first commits under the old
 * epoch before the switch does; the second finds the new epoch: after the switch, no row is
 * ever written under the old one. */
static void epoch_race(void **state)
{
	struct gp e;
	struct gp_write a = { 0 }, b = { 0 };
	struct gp_switch s = { 0 };
	char ia[37], ib[37];
	long long ka = gp_contact(admin, "wr", 0, 10), kb = gp_contact(admin, "wr", 0, 11);
	long long epoch = gp_epoch(admin);

	gp_open(&e, &svc, 2, "epoch");
	struct gate_pg_call ca = gp_call(gp_uuid(ia, 300), "wr", C0, A0, ka);
	struct gate_pg_call cb = gp_call(gp_uuid(ib, 301), "wr", C0, A0, kb);
	gp_sql(holder, "BEGIN");
	gp_sql(holder, "SELECT 1 FROM contacts WHERE id = %lld FOR UPDATE", ka);

	assert_int_equal(gate_pg_write(e.g, GATE_MODE_REDIS, epoch, 60000, &ca, 1, gp_write_cb, &a),
			 0);
	gp_wait_for(&e.loop, admin, "transactionid", 1);
	assert_int_equal(gp_int(admin,
				"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
				" AND objid = %lld AND mode = 'ShareLock' AND granted",
				GATE_PG_EPOCH_LOCK_KEY),
			 1); /* the blocked write holds the epoch lock, shared */
	assert_int_equal(gate_pg_switch_to_postgres(e.g, epoch, 60000, gp_switch_cb, &s), 0);
	gp_wait_for(&e.loop, admin, "advisory", 1);
	assert_int_equal(gate_pg_write(e.g, GATE_MODE_REDIS, epoch, 60000, &cb, 1, gp_write_cb, &b),
			 0);
	gp_wait_for(&e.loop, admin, "advisory", 2);
	assert_int_equal(gp_epoch(admin), epoch);
	assert_int_equal(a.calls + b.calls + s.calls, 0);

	gp_sql(holder, "COMMIT");
	fixture_run_until_count(&e.loop, &a.calls, 1, 60000);
	fixture_run_until_count(&e.loop, &s.calls, 1, 60000);
	fixture_run_until_count(&e.loop, &b.calls, 1, 60000);
	assert_int_equal(a.out[0], GATE_PG_WRITTEN); /* committed before the switch */
	assert_int_equal(s.status, 0);
	assert_true(s.r.switched);
	assert_int_equal(s.r.now.mode, GATE_MODE_POSTGRES);
	assert_int_equal(s.r.now.epoch, epoch + 1);
	assert_int_equal(b.out[0], GATE_PG_STALE_EPOCH);
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM calls WHERE id = '%s'", ib), 0);
	assert_int_equal(gp_int(admin,
				"SELECT count(*) FROM calls WHERE id = '%s' AND"
				" gate_epoch = %lld",
				ia, epoch),
			 1);
	assert_int_equal(gp_int(admin,
				"SELECT count(*) FROM contacts WHERE id = %lld AND"
				" state = 'claimed'",
				kb),
			 1);
	/* Back to redis mode for the other tests (what the reconciler does, in one step). */
	gp_sql(admin,
	       "UPDATE system_settings SET gate_mode = 'redis', gate_epoch = gate_epoch + 1");
	gp_close(&e);
}

/* The lease sweeper re-pends a contact while its call row is being written. */
#define SWEEP                                                                                      \
	"UPDATE contacts SET state = 'pending', lease_token = NULL, lease_owner = NULL,"           \
	" lease_until = NULL WHERE id = %lld AND state = 'claimed' AND NOT EXISTS (SELECT 1 FROM"  \
	" calls WHERE contact_id = contacts.id AND state IN ('dialing', 'live', 'unknown'))"

static void lease_race_sweeper_first(void **state)
{
	struct gp e;
	struct gp_write w = { 0 };
	char id[37];
	long long k = gp_contact(admin, "wr", 0, 20), epoch = gp_epoch(admin);

	gp_open(&e, &svc, 1, "lease1");
	struct gate_pg_call c = gp_call(gp_uuid(id, 400), "wr", C0, A0, k);
	gp_sql(holder, "BEGIN");
	gp_sql(holder, SWEEP, k); /* the sweeper holds the contact's row, not committed yet */
	assert_int_equal(gate_pg_write(e.g, GATE_MODE_REDIS, epoch, 60000, &c, 1, gp_write_cb, &w),
			 0);
	gp_wait_for(&e.loop, admin, "transactionid", 1);
	assert_int_equal(w.calls, 0);
	gp_sql(holder, "COMMIT");
	fixture_run_until_count(&e.loop, &w.calls, 1, 60000);
	assert_int_equal(w.out[0], GATE_PG_LEASE_LOST);
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM calls WHERE id = '%s'", id), 0);
	assert_int_equal(gp_int(admin,
				"SELECT count(*) FROM contacts WHERE id = %lld AND"
				" state = 'pending'",
				k),
			 1);
	gp_close(&e);
}

/* The write holds the contact's row lock (it is stopped on a call id the test holds) when the
 * sweeper comes: the sweeper waits, re-checks the row once the write commits, and skips it. */
static void lease_race_write_first(void **state)
{
	struct gp e;
	struct gp_write w = { 0 };
	char id[37];
	long long k = gp_contact(admin, "wr", 0, 21), epoch = gp_epoch(admin);
	char sweep[512];
	PGconn *sweeper = fixture_pg(&svc);

	gp_open(&e, &svc, 1, "lease2");
	struct gate_pg_call c = gp_call(gp_uuid(id, 401), "wr", C0, A0, k);
	gp_sql(holder, "BEGIN");
	gp_sql(holder,
	       "INSERT INTO calls (id, org_id, agent_id, to_number, gate_mode, gate_epoch)"
	       " VALUES ('%s', 'wr', 'wr_a0', '+14155550100', 'redis', 1)",
	       id);
	assert_int_equal(gate_pg_write(e.g, GATE_MODE_REDIS, epoch, 60000, &c, 1, gp_write_cb, &w),
			 0);
	gp_wait_for(&e.loop, admin, "transactionid", 1); /* on the test's call id */
	snprintf(sweep, sizeof(sweep), SWEEP, k);
	assert_int_equal(PQsendQuery(sweeper, sweep), 1);
	gp_wait_for(&e.loop, admin, "transactionid", 2); /* the sweeper, on the write's lock */
	assert_int_equal(w.calls, 0);
	gp_sql(holder, "ROLLBACK");
	fixture_run_until_count(&e.loop, &w.calls, 1, 60000);
	assert_int_equal(w.out[0], GATE_PG_WRITTEN);
	PGresult *res = PQgetResult(sweeper);
	assert_int_equal(PQresultStatus(res), PGRES_COMMAND_OK);
	assert_string_equal(PQcmdTuples(res), "0"); /* the sweeper skipped it */
	PQclear(res);
	assert_null(PQgetResult(sweeper));
	assert_int_equal(gp_int(admin,
				"SELECT count(*) FROM contacts WHERE id = %lld AND"
				" state = 'dialing'",
				k),
			 1);
	assert_int_equal(gp_int(admin,
				"SELECT count(*) FROM calls WHERE id = '%s' AND"
				" contact_id = %lld",
				id, k),
			 1);
	PQfinish(sweeper);
	gp_close(&e);
}

/* A campaign paused (or a batch stopped) between the claim and the write: no call row, the
 * contact left claimed for the hand-back (it used to be dialled anyway). */
static void paused_after_claim(void **state)
{
	struct gp e;
	struct gp_write w = { 0 };
	char id[2][37];
	long long k0 = gp_contact(admin, "wr", 0, 70), k1 = gp_contact(admin, "wr", 0, 71);
	long long epoch = gp_epoch(admin);

	gp_open(&e, &svc, 1, "paused");
	struct gate_pg_call c0 = gp_call(gp_uuid(id[0], 700), "wr", C0, A0, k0);
	struct gate_pg_call c1 = gp_call(gp_uuid(id[1], 701), "wr", C0, A0, k1);
	gp_sql(admin, "UPDATE campaigns SET status = 'paused' WHERE id = 'wr_c0'");
	assert_int_equal(gate_pg_write(e.g, GATE_MODE_REDIS, epoch, 60000, &c0, 1, gp_write_cb, &w),
			 0);
	fixture_run_until_count(&e.loop, &w.calls, 1, 60000);
	gp_sql(admin, "UPDATE campaigns SET status = 'active' WHERE id = 'wr_c0'");
	assert_int_equal(w.out[0], GATE_PG_LEASE_LOST);
	gp_sql(admin, "UPDATE batches SET status = 'stopped' WHERE id = 'wr_b0'");
	assert_int_equal(gate_pg_write(e.g, GATE_MODE_REDIS, epoch, 60000, &c1, 1, gp_write_cb, &w),
			 0);
	fixture_run_until_count(&e.loop, &w.calls, 2, 60000);
	gp_sql(admin, "UPDATE batches SET status = 'active' WHERE id = 'wr_b0'");
	assert_int_equal(w.out[0], GATE_PG_LEASE_LOST);
	assert_int_equal(
		gp_int(admin, "SELECT count(*) FROM calls WHERE id IN ('%s', '%s')", id[0], id[1]),
		0);
	assert_int_equal(gp_int(admin,
				"SELECT count(*) FROM contacts WHERE id IN (%lld, %lld)"
				" AND state = 'claimed'",
				k0, k1),
			 2);
	gp_close(&e);
}

/* A claim whose lease expired but was not swept yet (its token still the claim's) is not
 * written: the contact may be swept and claimed again at any moment (issue 9 review M1). Old
 * code: only the token was checked, the row written and the contact set dialing. */
static void expired_lease_refused(void **state)
{
	struct gp e;
	struct gp_write w = { 0 };
	char id[2][37];
	long long k0 = gp_contact(admin, "wr", 0, 72), k1 = gp_contact(admin, "wr", 0, 73);
	long long epoch = gp_epoch(admin);

	(void)state;
	gp_open(&e, &svc, 1, "expired");
	gp_sql(admin,
	       "UPDATE contacts SET lease_until = now() - interval '1 second' WHERE id = %lld", k0);
	struct gate_pg_call c[2] = { gp_call(gp_uuid(id[0], 720), "wr", C0, A0, k0),
				     gp_call(gp_uuid(id[1], 721), "wr", C0, A0, k1) };
	assert_int_equal(gate_pg_write(e.g, GATE_MODE_REDIS, epoch, 60000, c, 2, gp_write_cb, &w),
			 0);
	fixture_run_until_count(&e.loop, &w.calls, 1, 60000);
	assert_int_equal(w.out[0], GATE_PG_LEASE_LOST);
	assert_int_equal(w.out[1], GATE_PG_WRITTEN); /* its lease runs */
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM calls WHERE id = '%s'", id[0]), 0);
	assert_int_equal(
		gp_int(admin, "SELECT count(*) FROM contacts WHERE id = %lld AND state = 'claimed'",
		       k0),
		1);
	gp_close(&e);
}

static bool pool_timed_out(struct pg_pool *pool)
{
	struct pg_conn_stats st;
	pg_pool_get_stats(pool, &st);
	return st.timeouts > 0 || st.disconnects > 0;
}

/* A write blocked past its deadline is cancelled by the server (the client's own timeout is
 * 120 s): on a row lock, and on the epoch lock. */
static void deadline_cancels_on_server(void **state)
{
	struct gp e;
	struct gp_write row = { 0 }, lock = { 0 };
	char id[2][37];
	long long k = gp_contact(admin, "wr", 0, 30), epoch = gp_epoch(admin);
	char sql[128];

	gp_open(&e, &svc, 1, "deadline");
	struct gate_pg_call c = gp_call(gp_uuid(id[0], 500), "wr", C0, A0, k);
	gp_sql(holder, "BEGIN");
	gp_sql(holder, "SELECT 1 FROM contacts WHERE id = %lld FOR UPDATE", k);
	assert_int_equal(gate_pg_write(e.g, GATE_MODE_REDIS, epoch, 300, &c, 1, gp_write_cb, &row),
			 0);
	fixture_run_until_count(&e.loop, &row.calls, 1, 60000);
	assert_int_equal(row.out[0], GATE_PG_DEADLINE);
	assert_true(gate_pg_outcome_releases(row.out[0]));
	gp_sql(holder, "COMMIT");

	snprintf(sql, sizeof(sql), "SELECT pg_advisory_lock(%lld)", GATE_PG_EPOCH_LOCK_KEY);
	gp_sql(holder, "%s", sql);
	c.call = gp_uuid(id[1], 501);
	assert_int_equal(gate_pg_write(e.g, GATE_MODE_REDIS, epoch, 300, &c, 1, gp_write_cb, &lock),
			 0);
	fixture_run_until_count(&e.loop, &lock.calls, 1, 60000);
	assert_int_equal(lock.out[0], GATE_PG_DEADLINE);
	gp_sql(holder, "SELECT pg_advisory_unlock(%lld)", GATE_PG_EPOCH_LOCK_KEY);
	assert_false(pool_timed_out(e.pool)); /* the server ended them, not the client */
	assert_int_equal(
		gp_int(admin, "SELECT count(*) FROM calls WHERE id IN ('%s', '%s')", id[0], id[1]),
		0);
	assert_int_equal(gp_int(admin,
				"SELECT count(*) FROM contacts WHERE id = %lld AND"
				" state = 'claimed'",
				k),
			 1);
	gp_close(&e);
}

static struct reconcile_summary plan_one(const char *call, uint64_t taken_ms, uint64_t now_ms,
					 enum reconcile_row row, enum reconcile_action *action)
{
	struct reconcile_slot s = { .call = call, .taken_ms = taken_ms, .row = row };
	struct reconcile_summary sum;

	assert_int_equal(reconcile_plan(&s, 1, NULL, 0, now_ms, 2000, &sum), 0);
	*action = s.action;
	return sum;
}

struct rows_probe {
	int calls, status;
	int rows[4];
};

static void rows_cb(struct gate_pg *g, int status, const int *rows, uint32_t n, void *data)
{
	struct rows_probe *p = data;

	p->calls++;
	p->status = status;
	for (uint32_t i = 0; rows && i < n && i < 4; i++)
		p->rows[i] = rows[i];
}

/* The reconciler runs while a call-row write is held on a lock: the slot record (taken now, in
 * the stand-in for Redis time) has no row, but is younger than the write deadline, so it
 * survives; the write then passes its deadline on the server, fails and is released. Once
 * older than the deadline, an unreleased record is fenced — and the late write of that call id
 * can never commit. */
static void reconciler_meets_held_write(void **state)
{
	struct gp e;
	struct gp_write w = { 0 }, late = { 0 };
	struct gp_fence f = { 0 };
	struct rows_probe rows = { 0 };
	enum reconcile_action action;
	char id[37];
	const char *ids[] = { id }, *orgs[] = { "wr" };
	long long k = gp_contact(admin, "wr", 0, 40), epoch = gp_epoch(admin);
	uint64_t taken = (uint64_t)fixture_now_ms();

	gp_open(&e, &svc, 2, "reconcile");
	struct gate_pg_call c = gp_call(gp_uuid(id, 600), "wr", C0, A0, k);
	gp_sql(holder, "BEGIN");
	gp_sql(holder, "SELECT 1 FROM contacts WHERE id = %lld FOR UPDATE", k);
	assert_int_equal(gate_pg_write(e.g, GATE_MODE_REDIS, epoch, 2000, &c, 1, gp_write_cb, &w),
			 0);
	gp_wait_for(&e.loop, admin, "transactionid", 1);

	/* The reconciler, while the write is held: step 3 says no row (the write is blocked on
	 * the test's lock, and a cancelled one commits nothing); its run is within the deadline of
	 * the slot's taking (Redis time is simulated here: 1 ms later), so the record is young. */
	assert_int_equal(gate_pg_call_rows(e.g, ids, 1, rows_cb, &rows), 0);
	fixture_run_until_count(&e.loop, &rows.calls, 1, 60000);
	assert_int_equal(rows.status, 0);
	assert_int_equal(rows.rows[0], RECONCILE_ROW_ABSENT);
	struct reconcile_summary sum =
		plan_one(id, taken, taken + 1, RECONCILE_ROW_ABSENT, &action);
	assert_int_equal(action, RECONCILE_YOUNG);
	assert_int_equal(sum.corrections, 0);
	fixture_run_until_count(&e.loop, &w.calls, 1, 60000);
	assert_int_equal(w.out[0], GATE_PG_DEADLINE);
	assert_true(gate_pg_outcome_releases(w.out[0])); /* the worker releases the slot */
	gp_sql(holder, "COMMIT");

	/* Had the release been lost: the record, now older than the deadline, is fenced. */
	plan_one(id, taken, taken + 2001, RECONCILE_ROW_ABSENT, &action);
	assert_int_equal(action, RECONCILE_FENCE);
	assert_int_equal(gate_pg_fence(e.g, ids, orgs, 1, gp_fence_cb, &f), 0);
	fixture_run_until_count(&e.loop, &f.calls, 1, 60000);
	assert_int_equal(f.status, 0);
	assert_false(f.written[0]);
	/* A late write of that call id (a worker that woke up) can never commit. */
	assert_int_equal(
		gate_pg_write(e.g, GATE_MODE_REDIS, epoch, 2000, &c, 1, gp_write_cb, &late), 0);
	fixture_run_until_count(&e.loop, &late.calls, 1, 60000);
	assert_int_equal(late.out[0], GATE_PG_FENCED);
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM calls WHERE id = '%s'", id), 0);
	gp_close(&e);
}

/* Step 3 and the early release (worker/events.c): a live row whose terminal provider event is
 * recorded reads as ended — the worker has freed its slots once that event committed, before
 * the end — so the plan is no ADD for it (and RELEASE for a record still held); a non-terminal
 * event changes nothing. Before, it read live and a pass in that window re-added the slot. */
static void terminal_event_reads_ended(void **state)
{
	struct gp e;
	struct gp_write w = { 0 };
	struct rows_probe rows = { 0 };
	enum reconcile_action action;
	char id[37];
	const char *ids[] = { id };
	long long k = gp_contact(admin, "wr", 0, 41), epoch = gp_epoch(admin);

	(void)state;
	gp_open(&e, &svc, 2, "terminal");
	struct gate_pg_call c = gp_call(gp_uuid(id, 601), "wr", C0, A0, k);
	assert_int_equal(gate_pg_write(e.g, GATE_MODE_REDIS, epoch, 2000, &c, 1, gp_write_cb, &w),
			 0);
	fixture_run_until_count(&e.loop, &w.calls, 1, 60000);
	assert_int_equal(w.out[0], GATE_PG_WRITTEN);
	gp_sql(admin,
	       "INSERT INTO provider_events (call_id, sequence, status) VALUES ('%s', 1, "
	       "'ringing')",
	       id);
	assert_int_equal(gate_pg_call_rows(e.g, ids, 1, rows_cb, &rows), 0);
	fixture_run_until_count(&e.loop, &rows.calls, 1, 60000);
	assert_int_equal(rows.rows[0], RECONCILE_ROW_LIVE);
	gp_sql(admin,
	       "INSERT INTO provider_events (call_id, sequence, status) VALUES ('%s', 2, "
	       "'completed')",
	       id);
	assert_int_equal(gate_pg_call_rows(e.g, ids, 1, rows_cb, &rows), 0);
	fixture_run_until_count(&e.loop, &rows.calls, 2, 60000);
	assert_int_equal(rows.status, 0);
	assert_int_equal(rows.rows[0], RECONCILE_ROW_ENDED);
	assert_int_equal(gp_int(admin,
				"SELECT count(*) FROM calls WHERE id = '%s' AND state ="
				" 'dialing'",
				id),
			 1);
	/* the plan: no record (freed early) → nothing; a record → released */
	struct reconcile_summary sum = plan_one(id, 1, 2, RECONCILE_ROW_ENDED, &action);
	assert_int_equal(action, RECONCILE_RELEASE);
	assert_int_equal(sum.corrections, 1);
	gp_close(&e);
}

/* The fence and a write of the same call id, both queued on the epoch lock the test holds, in
 * both orders: exactly one wins. */
static void fence_against_write(void **state)
{
	struct gp e;
	char id[2][37];
	long long k[2] = { gp_contact(admin, "wr", 0, 50), gp_contact(admin, "wr", 0, 51) };
	long long epoch = gp_epoch(admin);

	gp_open(&e, &svc, 3, "fence");
	for (int order = 0; order < 2; order++) {
		struct gp_write w = { 0 };
		struct gp_fence f = { 0 };
		const char *ids[] = { gp_uuid(id[order], 700 + (unsigned)order) },
			   *orgs[] = { "wr" };
		struct gate_pg_call c = gp_call(id[order], "wr", C0, A0, k[order]);

		gp_sql(holder, "SELECT pg_advisory_lock(%lld)", GATE_PG_EPOCH_LOCK_KEY);
		if (order == 0) { /* the write first */
			assert_int_equal(gate_pg_write(e.g, GATE_MODE_REDIS, epoch, 60000, &c, 1,
						       gp_write_cb, &w),
					 0);
			gp_wait_for(&e.loop, admin, "advisory", 1);
		}
		assert_int_equal(gate_pg_fence(e.g, ids, orgs, 1, gp_fence_cb, &f), 0);
		gp_wait_for(&e.loop, admin, "advisory", order == 0 ? 2 : 1);
		if (order == 1) { /* the write arrives after the fence */
			assert_int_equal(gate_pg_write(e.g, GATE_MODE_REDIS, epoch, 60000, &c, 1,
						       gp_write_cb, &w),
					 0);
			gp_wait_for(&e.loop, admin, "advisory", 2);
		}
		gp_sql(holder, "SELECT pg_advisory_unlock(%lld)", GATE_PG_EPOCH_LOCK_KEY);
		fixture_run_until_count(&e.loop, &w.calls, 1, 60000);
		fixture_run_until_count(&e.loop, &f.calls, 1, 60000);
		assert_int_equal(f.status, 0);
		assert_int_equal(w.out[0], order == 0 ? GATE_PG_WRITTEN : GATE_PG_FENCED);
		assert_int_equal(f.written[0], order == 0);
		assert_int_equal(
			gp_int(admin, "SELECT count(*) FROM calls WHERE id = '%s'", id[order]),
			order == 0);
		assert_int_equal(gp_int(admin,
					"SELECT count(*) FROM gate_fences WHERE call_id = '%s'",
					id[order]),
				 order == 1);
	}
	gp_close(&e);
}

/* A write whose connection is lost while it is blocked: its outcome is unknown to the client,
 * so gate_pg_write settles it with a fence before answering — fenced here (the terminated
 * backend committed nothing), never "unknown". */
static void lost_write_is_fenced(void **state)
{
	struct gp e;
	struct gp_write w = { 0 };
	char id[37];
	long long k = gp_contact(admin, "wr", 0, 60), epoch = gp_epoch(admin);
	char pid[24];

	gp_open(&e, &svc, 1, "lost");
	struct gate_pg_call c = gp_call(gp_uuid(id, 800), "wr", C0, A0, k);
	gp_sql(holder, "BEGIN");
	gp_sql(holder, "SELECT 1 FROM contacts WHERE id = %lld FOR UPDATE", k);
	assert_int_equal(gate_pg_write(e.g, GATE_MODE_REDIS, epoch, 60000, &c, 1, gp_write_cb, &w),
			 0);
	gp_wait_for(&e.loop, admin, "transactionid", 1);
	snprintf(pid, sizeof(pid), "%lld",
		 gp_int(admin, "SELECT pid FROM pg_locks WHERE NOT granted AND"
			       " locktype = 'transactionid'"));
	terminate_backend(admin, pid);
	fixture_run_until_count(&e.loop, &w.calls, 1, 60000);
	assert_int_equal(w.out[0], GATE_PG_FENCED);
	gp_sql(holder, "COMMIT");
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM gate_fences WHERE call_id = '%s'", id),
			 1);
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM calls WHERE id = '%s'", id), 0);
	struct gate_pg_stats st;
	gate_pg_get_stats(e.g, &st);
	assert_int_equal(st.fenced, 1);
	gp_close(&e);
}

struct gp_cancel {
	int calls, status;
	bool ended[GATE_PG_WRITE_MAX];
};

static void gp_cancel_cb(struct gate_pg *g, int status, const bool *ended, uint32_t n, void *data)
{
	struct gp_cancel *c = data;

	(void)g;
	c->calls++;
	c->status = status;
	if (ended)
		memcpy(c->ended, ended, n * sizeof(*ended));
}

/* gate_pg_cancel_written(): written rows never to be dialled are ended as refused ('cancelled
 * before dial'); a batch contact goes back to pending with no attempt charged only while its
 * lease token still matches; a second call ends nothing. */
static void cancel_written(void **state)
{
	struct gp e;
	struct gp_write w = { 0 };
	struct gp_cancel c = { 0 }, again = { 0 };
	char id[3][37];
	long long k0 = gp_contact(admin, "wr", 0, 60), k1 = gp_contact(admin, "wr", 0, 61);
	long long epoch = gp_epoch(admin);
	enum gate_mode mode =
		gp_int(admin, "SELECT count(*) FROM system_settings WHERE gate_mode = 'postgres'")
			? GATE_MODE_POSTGRES
			: GATE_MODE_REDIS;

	(void)state;
	gp_open(&e, &svc, 1, "cancel");
	struct gate_pg_call calls[3] = {
		gp_call(gp_uuid(id[0], 900), "wr", C0, A0, k0),
		gp_call(gp_uuid(id[1], 901), "wr", C0, A0, k1),
		gp_call(gp_uuid(id[2], 902), "wr", NULL, A0, 0),
	};
	assert_int_equal(
		gate_pg_write(e.g, mode, (uint64_t)epoch, 10000, calls, 3, gp_write_cb, &w), 0);
	fixture_run_until_count(&e.loop, &w.calls, 1, 60000);
	for (int i = 0; i < 3; i++)
		assert_int_equal(w.out[i], GATE_PG_WRITTEN);
	/* k1's claim moved on meanwhile: its contact is not this call's to give back. */
	gp_sql(admin, "UPDATE contacts SET lease_token = lease_token + 1 WHERE id = %lld", k1);
	assert_int_equal(gate_pg_cancel_written(e.g, calls, 3, 10000, gp_cancel_cb, &c), 0);
	fixture_run_until_count(&e.loop, &c.calls, 1, 60000);
	assert_int_equal(c.status, 0);
	for (int i = 0; i < 3; i++) {
		assert_true(c.ended[i]);
		assert_int_equal(gp_int(admin,
					"SELECT count(*) FROM calls WHERE id = '%s' AND"
					" state = 'ended' AND outcome = 'refused' AND"
					" outcome_reason = 'cancelled before dial'",
					id[i]),
				 1);
	}
	assert_int_equal(
		gp_int(admin,
		       "SELECT count(*) FROM contacts WHERE id = %lld AND state = 'pending'"
		       " AND attempts = 0 AND tries = 0 AND lease_token IS NULL"
		       " AND next_attempt_at <= now()",
		       k0),
		1);
	assert_int_equal(
		gp_int(admin, "SELECT count(*) FROM contacts WHERE id = %lld AND state = 'dialing'",
		       k1),
		1);
	assert_int_equal(gate_pg_cancel_written(e.g, calls, 3, 10000, gp_cancel_cb, &again), 0);
	fixture_run_until_count(&e.loop, &again.calls, 1, 60000);
	assert_int_equal(again.status, 0);
	for (int i = 0; i < 3; i++)
		assert_false(again.ended[i]);
	struct gate_pg_stats st;
	gate_pg_get_stats(e.g, &st);
	assert_int_equal(st.cancelled, 3);
	assert_int_equal(gate_pg_cancel_written(e.g, calls, 3, 0, gp_cancel_cb, &again),
			 -ETIMEDOUT);
	calls[2].call = "not-a-uuid";
	assert_int_equal(gate_pg_cancel_written(e.g, calls, 3, 1000, gp_cancel_cb, &again),
			 -EINVAL);
	gp_close(&e);
}

static int setup(void **state)
{
	static const char *const agents[] = { "a0" };

	fixture_start(&svc, true, false, false, true);
	admin = fixture_pg(&svc);
	holder = fixture_pg(&svc);
	gp_seed_org(admin, "wr", 20, 0, 1, agents, NULL, 100);
	return 0;
}

static int teardown(void **state)
{
	PQfinish(holder);
	PQfinish(admin);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(each_outcome),
		cmocka_unit_test(bad_requests),
		cmocka_unit_test(epoch_race),
		cmocka_unit_test(lease_race_sweeper_first),
		cmocka_unit_test(lease_race_write_first),
		cmocka_unit_test(expired_lease_refused),
		cmocka_unit_test(paused_after_claim),
		cmocka_unit_test(deadline_cancels_on_server),
		cmocka_unit_test(reconciler_meets_held_write),
		cmocka_unit_test(terminal_event_reads_ended),
		cmocka_unit_test(fence_against_write),
		cmocka_unit_test(lost_write_is_fenced),
		cmocka_unit_test(cancel_written),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
