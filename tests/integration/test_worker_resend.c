/* Re-send of orphaned calls (issue 9 item 8; SPEC C9, D0, D1): `dispatcher run` processes, the
 * provider stub in a child process. The stub answers every dial 503 only after 60 s and places
 * nothing, so worker w1's four calls (the org's 4 lines) stay in its care, dialing, with their
 * requests timing out and re-sent. Phase 1, the owner alive and slow: w1 keeps its contacts'
 * leases (renewed past the claim's 10 s lease) and w2, sweeping every second, takes none over.
 * Phase 2: w1 is killed with SIGKILL and the stub heals; w2 takes the four calls over once their
 * leases expire and re-sends them with the same Idempotency-Key: each key placed once, no
 * duplicate, a ledger row per re-send; then the calls end by their events, their slots are
 * freed (the next four contacts are dialled) and no contact is charged twice. Old code: the
 * leases are never renewed and nobody re-sends (the calls wait for the 2 h sweep). */
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

#define WAIT_MS	 60000
#define LEASE_MS 10000

static struct embedded svc;
static PGconn *db;
static pid_t w1, w2;
static struct wproc_stub stub;

static double stub_stat(const char *path)
{
	return wproc_stat(&stub, path);
}

static long long sql_int(const char *q)
{
	return wproc_sql_int(db, q);
}

static pid_t spawn_worker(const char *id)
{
	char *args[] = { "run", NULL };

	setenv("DISPATCHER_WORKER_ID", id, 1);
	return fixture_spawn_dispatcher(args, NULL);
}

static void orphans_resent_once(void **state)
{
	char env[256];
	struct stub_config sc;

	(void)state;
	wproc_seed_small(db);
	stub_config_defaults(&sc);
	sc.hold = true;
	sc.defaults.fail_pct = 100; /* 503, nothing placed ... */
	sc.defaults.fail_status = 503;
	sc.defaults.slow_pct = 100; /* ... answered after the worker's timeout */
	sc.defaults.slow_ms = 60000;
	wproc_stub_start(&stub, &sc);
	snprintf(env, sizeof(env), "http://127.0.0.1:%d", stub.port);
	setenv("PROVIDER_URL", env, 1);
	setenv("PROVIDER_WEBHOOK_SECRET", "stub-secret", 1);
	snprintf(env, sizeof(env), "127.0.0.1:%d", wproc_free_port());
	setenv("DISPATCHER_LISTEN", env, 1);
	setenv("DISPATCHER_LOG_LEVEL", getenv("TEST_LOG_LEVEL") ? getenv("TEST_LOG_LEVEL") : "warn",
	       1);
	setenv("DISPATCHER_RECONCILE_SECONDS", "1", 1);
	setenv("DISPATCHER_LEASE_SECONDS", "10", 1);
	setenv("DISPATCHER_LEASE_SWEEP_SECONDS", "1", 1);
	setenv("BATCH_DISPATCH_SLOT_WAIT_SECONDS", "1", 1);
	setenv("DISPATCHER_PROVIDER_TIMEOUT_MS", "4000", 1);
	w1 = spawn_worker("w1");

	/* w1 holds the 4 lines: 4 calls dialing, their POSTs at the stub. */
	long long deadline = fixture_now_ms() + WAIT_MS;
	while ((sql_int("SELECT count(*) FROM calls WHERE state = 'dialing'") < 4 ||
		stub_stat("requests") < 4) &&
	       fixture_now_ms() < deadline)
		fixture_sleep_ms(50);
	assert_int_equal(sql_int("SELECT count(*) FROM calls WHERE state = 'dialing'"), 4);
	long long t0 = fixture_now_ms();

	/* Phase 1: w1 alive and slow. w2 sweeps every second; it must take nothing over while w1
	 * renews, well past the claim's lease. */
	w2 = spawn_worker("w2");
	while (fixture_now_ms() < t0 + LEASE_MS + 6000) {
		assert_int_equal(sql_int("SELECT count(*) FROM contacts WHERE state = 'dialing'"
					 " AND lease_owner IS DISTINCT FROM 'w1'"),
				 0);
		fixture_sleep_ms(200);
	}
	assert_int_equal(sql_int("SELECT count(*) FROM contacts WHERE state = 'dialing'"
				 " AND lease_owner = 'w1' AND lease_until > now()"),
			 4); /* renewed: the claim's lease ran out 6 s ago */
	assert_int_equal((int)stub_stat("calls_placed"), 0);
	assert_true(sql_int("SELECT count(*) FROM dial_attempts") >= 4);

	/* Phase 2: w1 dies with its requests in flight; the provider heals. */
	kill(w1, SIGKILL);
	waitpid(w1, NULL, 0);
	w1 = 0;
	free(wproc_stub_http(&stub, "/control/org",
			     "{\"org_id\":\"*\",\"fail_pct\":0,\"slow_pct\":0}"));
	long long t_kill = fixture_now_ms();
	deadline = t_kill + LEASE_MS + WAIT_MS;
	while (stub_stat("calls_placed") < 4 && fixture_now_ms() < deadline)
		fixture_sleep_ms(50);
	print_message("w1 killed -> its 4 calls re-sent by w2 in %lld ms\n",
		      fixture_now_ms() - t_kill);
	assert_int_equal((int)stub_stat("calls_placed"), 4);
	assert_int_equal((int)stub_stat("duplicates"), 0);
	assert_int_equal(sql_int("SELECT count(*) FROM contacts WHERE state = 'dialing'"
				 " AND lease_owner = 'w2'"),
			 4);
	deadline = fixture_now_ms() + WAIT_MS;
	while (sql_int("SELECT count(*) FROM dial_attempts WHERE class = 'ok'") < 4 &&
	       fixture_now_ms() < deadline)
		fixture_sleep_ms(50);
	/* One ledger row per takeover re-send, each a re-send of a key sent before. */
	assert_int_equal(sql_int("SELECT count(*) FROM dial_attempts WHERE class = 'ok'"
				 " AND reason LIKE 'takeover%' AND try >= 1"),
			 4);
	assert_int_equal(sql_int("SELECT count(DISTINCT call_id) FROM dial_attempts"), 4);

	/* The calls end by their events; their slots are freed: the next 4 contacts are dialled. */
	free(wproc_stub_http(&stub, "/control/end",
			     "{\"org_id\":\"o1\",\"status\":\"completed\"}"));
	deadline = fixture_now_ms() + WAIT_MS;
	while ((stub_stat("calls_placed") < 8 ||
		sql_int("SELECT count(*) FROM calls WHERE state = 'ended'") < 4) &&
	       fixture_now_ms() < deadline)
		fixture_sleep_ms(50);
	assert_int_equal(sql_int("SELECT count(*) FROM calls WHERE state = 'ended'"
				 " AND outcome = 'completed'"),
			 4);
	assert_int_equal((int)stub_stat("calls_placed"), 8);
	assert_int_equal((int)stub_stat("duplicates"), 0);
	assert_true(stub_stat("orgs.o1.max_live") <= 4);
	assert_int_equal(sql_int("SELECT count(*) FROM contacts WHERE attempts > 1"), 0);
	assert_int_equal(sql_int("SELECT count(*) FROM contacts WHERE state = 'done'"), 4);

	kill(w2, SIGTERM);
	assert_int_equal(fixture_wait(w2), 0);
	w2 = 0;
	wproc_stub_stop(&stub);
}

/* D2: a call whose sends all got unknown outcomes (503 at once, every try) is marked 'unknown'
 * (its slots held until an event or the sweep), no attempt charged. Old code: the mark was
 * submitted without a callback, refused (-EINVAL), and the call stayed 'dialing'. */
static void unknown_after_resends(void **state)
{
	char env[256];
	struct stub_config sc;

	(void)state;
	wproc_seed_small(db);
	PQclear(fixture_sql(db, "UPDATE organisations SET org_limit = 1")); /* one call */
	stub_config_defaults(&sc);
	sc.defaults.fail_pct = 100; /* 503 at once, nothing placed */
	sc.defaults.fail_status = 503;
	wproc_stub_start(&stub, &sc);
	snprintf(env, sizeof(env), "http://127.0.0.1:%d", stub.port);
	setenv("PROVIDER_URL", env, 1);
	setenv("PROVIDER_WEBHOOK_SECRET", "stub-secret", 1);
	snprintf(env, sizeof(env), "127.0.0.1:%d", wproc_free_port());
	setenv("DISPATCHER_LISTEN", env, 1);
	setenv("DISPATCHER_LOG_LEVEL", getenv("TEST_LOG_LEVEL") ? getenv("TEST_LOG_LEVEL") : "warn",
	       1);
	setenv("DISPATCHER_LEASE_SECONDS", "10", 1);
	setenv("BATCH_DISPATCH_SLOT_WAIT_SECONDS", "1", 1);
	setenv("DISPATCHER_PROVIDER_TIMEOUT_MS", "4000", 1);
	w1 = spawn_worker("w1");

	long long deadline = fixture_now_ms() + WAIT_MS;
	while (sql_int("SELECT count(*) FROM calls WHERE state = 'unknown'") < 1 &&
	       fixture_now_ms() < deadline)
		fixture_sleep_ms(50);
	assert_int_equal(sql_int("SELECT count(*) FROM calls WHERE state = 'unknown'"), 1);
	assert_int_equal(sql_int("SELECT count(*) FROM calls"), 1);
	assert_int_equal((int)stub_stat("calls_placed"), 0);
	assert_true(stub_stat("requests") >= 4); /* D2: 5xx, 4 tries */
	assert_int_equal(sql_int("SELECT count(*) FROM contacts WHERE attempts > 0"), 0);

	kill(w1, SIGTERM);
	assert_int_equal(fixture_wait(w1), 0);
	w1 = 0;
	wproc_stub_stop(&stub);
}

static int setup(void **state)
{
	(void)state;
	fixture_start(&svc, true, true, false, true);
	db = fixture_pg(&svc);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	pid_t left[2] = { w1, w2 };

	for (int i = 0; i < 2; i++)
		if (left[i] > 0) { /* a failed assertion left them running */
			kill(left[i], SIGKILL);
			waitpid(left[i], NULL, 0);
		}
	wproc_stub_stop(&stub);
	PQfinish(db);
	embedded_stop(&svc);
	w1 = w2 = 0;
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(orphans_resent_once, setup, teardown),
		cmocka_unit_test_setup_teardown(unknown_after_resends, setup, teardown),
	};
	curl_global_init(CURL_GLOBAL_DEFAULT);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
