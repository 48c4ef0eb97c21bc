/* `dispatcher run` end to end (issue 9): a private PostgreSQL and Redis, the provider stub in a
 * child process (hold mode: calls stay live until the test ends them), and one worker process
 * started from the built binary. An organisation with 4 lines and two campaigns of 50 contacts:
 * the worker claims, admits through the gate and dials — exactly 4 calls placed (the org's
 * lines), no duplicate, at most 4 live, both campaigns dialled (DRR turns), one call row and one
 * dial_attempts row per dial. Ending the four calls at the stub ends them here (their events go
 * through call_end) and the gate's hand-off wakes the waiting admissions: four more calls at
 * once, not after the slot wait. On SIGTERM the worker hands every waiting contact back
 * (nothing left claimed, no try charged) and exits 0. */
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

#define WAIT_MS 120000

static struct embedded svc;
static PGconn *db;
static pid_t worker_pid;
static struct wproc_stub stub;

static double stub_stat(const char *path)
{
	return wproc_stat(&stub, path);
}

static long long sql_int(const char *q)
{
	return wproc_sql_int(db, q);
}

static void dials_and_drain(void **state)
{
	char env[256];
	int port = wproc_free_port();
	struct stub_config sc;

	(void)state;
	wproc_seed_small(db);
	stub_config_defaults(&sc);
	sc.hold = true;
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
	char *args[] = { "run", NULL };
	pid_t w = worker_pid = fixture_spawn_dispatcher(args, NULL);

	/* Every line busy: 4 calls placed (hold mode keeps them live). */
	long long deadline = fixture_now_ms() + WAIT_MS;
	while (stub_stat("calls_placed") < 4 && fixture_now_ms() < deadline)
		fixture_sleep_ms(100);
	assert_int_equal((int)stub_stat("calls_placed"), 4);
	/* Quiet: nothing more may be placed while the lines are held. */
	fixture_sleep_ms(1500);
	assert_int_equal((int)stub_stat("calls_placed"), 4);
	assert_int_equal((int)stub_stat("duplicates"), 0);
	assert_true(stub_stat("orgs.o1.max_live") <= 4);
	assert_int_equal((int)stub_stat("orgs.o1.live"), 4);
	assert_true(stub_stat("campaigns.c1.placed") >= 1); /* both campaigns get turns (C8) */
	assert_true(stub_stat("campaigns.c2.placed") >= 1);
	/* Their events are recorded (ringing, answered): none has ended. */
	assert_int_equal(sql_int("SELECT count(*) FROM calls WHERE state IN ('dialing', 'live')"),
			 4);
	assert_int_equal(sql_int("SELECT count(*) FROM contacts WHERE state = 'dialing'"), 4);
	deadline = fixture_now_ms() + WAIT_MS;
	while (sql_int("SELECT count(*) FROM dial_attempts") < 4 && fixture_now_ms() < deadline)
		fixture_sleep_ms(100);
	assert_int_equal(sql_int("SELECT count(*) FROM dial_attempts WHERE class = 'ok'"), 4);
	assert_true(sql_int("SELECT count(*) FROM contacts WHERE state = 'claimed'") > 0);

	/* The ends free the lines and the gate's hand-off wakes the waiting admissions: the next
	 * four calls are placed well before a waiter would give up (slot wait 15 s). */
	long long t_end = fixture_now_ms();
	free(wproc_stub_http(&stub, "/control/end", "{\"org_id\":\"o1\"}"));
	deadline = fixture_now_ms() + 8000;
	while (stub_stat("calls_placed") < 8 && fixture_now_ms() < deadline)
		fixture_sleep_ms(20);
	print_message("ends -> 4 new calls in %lld ms\n", fixture_now_ms() - t_end);
	assert_int_equal((int)stub_stat("calls_placed"), 8);
	assert_int_equal((int)stub_stat("orgs.o1.live"), 4);
	assert_int_equal(sql_int("SELECT count(*) FROM calls WHERE state = 'ended'"), 4);

	/* SIGTERM: drain, hand back, exit 0. */
	kill(w, SIGTERM);
	assert_int_equal(fixture_wait(w), 0);
	worker_pid = 0;
	assert_int_equal(sql_int("SELECT count(*) FROM contacts WHERE state = 'claimed'"), 0);
	assert_int_equal(sql_int("SELECT count(*) FROM contacts WHERE state IN ('pending', 'done',"
				 " 'failed')"),
			 96);
	assert_int_equal(sql_int("SELECT count(*) FROM contacts WHERE attempts > 0"), 4);
	assert_int_equal(sql_int("SELECT coalesce(sum(tries), 0) FROM contacts"), 0);
	assert_int_equal((int)stub_stat("calls_placed"), 8);
	wproc_stub_stop(&stub);
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
	if (worker_pid > 0) { /* a failed assertion left them running */
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
		cmocka_unit_test(dials_and_drain),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
