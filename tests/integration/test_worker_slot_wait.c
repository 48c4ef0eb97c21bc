/* `dispatcher run`: a claimed contact never outlives its lease in the worker's memory, even
 * while admissions keep offering it (dispatcher/worker/README.md, "Many campaigns per
 * organisation"). One org of 100 campaigns × 4 contacts on 100 lines (more campaigns than one
 * claim covers), one worker, slot wait 1 s, lease 6 s (the least allowed), calls of 20–60 ms
 * that all complete.
 *
 * After 50 calls the call-row writes fail for 10 s (a test trigger refuses them after 50 ms with
 * a lock-timeout SQLSTATE, as a write past its deadline: GATE_PG_DEADLINE, slots released,
 * nothing charged): each admission's answer launches the next at once with the same first
 * candidates, so those contacts are reserved at every slot-wait tick. Before, the tick skipped
 * reserved contacts: they stayed claimed in memory past their lease (4–109 per run here), the
 * lease sweeper re-pended them and the next claim appended a second copy of each (29 stale
 * copies ended "lease lost" in one run); two copies admitted in one loop turn had the whole
 * call-row write refused by gate_pg_calls_check() (-EINVAL: CI's worker_many stall; that part
 * is test_gate_flow's duplicate_contact_deferred). Now a contact past the slot wait goes back
 * when its admission ends without it, a claim refreshes a contact held already in place, and
 * gate_flow defers a duplicate to the next batch.
 *
 * Checked: no contact moved out of 'claimed' after its lease ended (a test trigger records any
 * that did) and none is claimed past it when the writes heal; then every contact done with one
 * call, no duplicate, nothing left claimed, a clean drain. */
#include "error.h"
#include "fixture.h"

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "worker_proc.h"

#define CAMPAIGNS 100
#define PER	  4
#define CONTACTS  (CAMPAIGNS * PER)
#define REFUSE_MS 10000 /* > lease (6 s) + sweep period (1 s) + margin */
#define WAIT_MS	  120000

static struct embedded svc;
static PGconn *db;
static pid_t worker_pid;
static struct wproc_stub stub;

static long long sql_int(const char *q)
{
	return wproc_sql_int(db, q);
}

static void seed(void)
{
	wproc_seed_campaigns(db, 100, CAMPAIGNS, PER, NULL);
	/* Test-only: a contact moved out of 'claimed' after its lease ended (by the lease sweeper,
	 * or late by anyone) is recorded; call rows are refused while test_refuse has a row. */
	PQclear(fixture_sql(
		db,
		"CREATE TABLE test_expired (id bigint, lease_until timestamptz,"
		" at timestamptz DEFAULT clock_timestamp());"
		" CREATE TABLE test_refuse (on_ boolean);"
		" CREATE FUNCTION test_expired_f() RETURNS trigger LANGUAGE plpgsql AS $$"
		" BEGIN INSERT INTO test_expired (id, lease_until) VALUES (OLD.id,"
		" OLD.lease_until); RETURN NEW; END $$;"
		" CREATE TRIGGER test_expired_t AFTER UPDATE ON contacts FOR EACH ROW"
		" WHEN (OLD.state = 'claimed' AND OLD.lease_until < now())"
		" EXECUTE FUNCTION test_expired_f();"
		" CREATE FUNCTION test_refuse_f() RETURNS trigger LANGUAGE plpgsql AS $$"
		" BEGIN IF EXISTS (SELECT 1 FROM test_refuse) THEN PERFORM pg_sleep(0.05);"
		" RAISE EXCEPTION"
		" 'test: call rows refused' USING ERRCODE = '55P03'; END IF; RETURN NEW; END $$;"
		" CREATE TRIGGER test_refuse_t BEFORE INSERT ON calls FOR EACH ROW"
		" EXECUTE FUNCTION test_refuse_f()"));
}

static void start(void)
{
	char env[256];
	int port = wproc_free_port();
	struct stub_config sc;

	stub_config_defaults(&sc);
	sc.dur_min_ms = 20;
	sc.dur_max_ms = 60;
	sc.ring_ms = 5;
	for (int i = 0; i < STUB_OUTCOMES; i++)
		sc.weights[i] = i == 0; /* every call completes: one call per contact */
	wproc_stub_start(&stub, &sc);
	snprintf(env, sizeof(env), "http://127.0.0.1:%d", stub.port);
	setenv("PROVIDER_URL", env, 1);
	setenv("PROVIDER_WEBHOOK_SECRET", "stub-secret", 1);
	snprintf(env, sizeof(env), "127.0.0.1:%d", port);
	setenv("DISPATCHER_LISTEN", env, 1);
	setenv("DISPATCHER_LOG_LEVEL", getenv("TEST_LOG_LEVEL") ? getenv("TEST_LOG_LEVEL") : "warn",
	       1);
	setenv("DISPATCHER_WORKER_ID", "w1", 1);
	setenv("DISPATCHER_RECONCILE_SECONDS", "1", 1);
	setenv("DISPATCHER_REFRESH_PERIOD_MS", "200", 1);
	setenv("DISPATCHER_LEASE_SECONDS", "6", 1); /* the least: 2 x slot wait + timeout + 3 s */
	setenv("DISPATCHER_LEASE_SWEEP_SECONDS", "1", 1);
	setenv("BATCH_DISPATCH_SLOT_WAIT_SECONDS", "1", 1);
	setenv("DISPATCHER_PROVIDER_TIMEOUT_MS", "1000", 1);
	char *args[] = { "run", NULL };
	worker_pid = fixture_spawn_dispatcher(args, NULL);
}

static void no_contact_outlives_its_lease(void **state)
{
	(void)state;
	seed();
	start();

	/* Dialling for a while first: the DRR's turns and carries are those of a running org. */
	long long t0 = fixture_now_ms();
	while (sql_int("SELECT count(*) FROM contacts WHERE state = 'done'") < 50 &&
	       fixture_now_ms() < t0 + WAIT_MS)
		fixture_sleep_ms(50);
	assert_true(sql_int("SELECT count(*) FROM contacts WHERE state = 'done'") >= 50);

	/* The call-row writes fail: the admissions cycle with the same candidates. */
	PQclear(fixture_sql(db, "INSERT INTO test_refuse VALUES (true)"));
	long long t1 = fixture_now_ms(), expired = 0;
	while (fixture_now_ms() < t1 + REFUSE_MS)
		fixture_sleep_ms(100);
	long long claimed_late = sql_int("SELECT count(*) FROM contacts WHERE state = 'claimed'"
					 " AND lease_until < now()");
	PQclear(fixture_sql(db, "DELETE FROM test_refuse"));

	long long t2 = fixture_now_ms(), done = 0;
	while ((done = sql_int("SELECT count(*) FROM contacts WHERE state = 'done'")) < CONTACTS &&
	       fixture_now_ms() < t2 + WAIT_MS)
		fixture_sleep_ms(200);
	expired = sql_int("SELECT count(*) FROM test_expired");
	print_message("refused writes for %lld ms: %lld contacts claimed past their lease (%lld"
		      " at the end of it); then %lld of %d contacts done in %lld ms\n",
		      t2 - t1, expired, claimed_late, done, CONTACTS, fixture_now_ms() - t2);
	assert_int_equal(expired, 0);
	assert_int_equal(claimed_late, 0);
	assert_int_equal(done, CONTACTS);
	wproc_assert_all_dialled(db, &stub, &worker_pid, CONTACTS, 100);
}

static int setup(void **state)
{
	(void)state;
	fixture_start(&svc, true, true, false, true);
	db = fixture_pg(&svc);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (worker_pid > 0) { /* a failed assertion left it running */
		kill(worker_pid, SIGKILL);
		waitpid(worker_pid, NULL, 0);
	}
	wproc_stub_stop(&stub);
	PQfinish(db);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(no_contact_outlives_its_lease),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
