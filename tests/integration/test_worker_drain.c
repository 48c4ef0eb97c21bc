/* `dispatcher run`'s SIGTERM drain and lane stop (issue 9, review defects 2, 11): a private
 * PostgreSQL and Redis per test, the provider stub in a child process, one worker process.
 * - drain_answers_a_late_refusal: an admission in flight when the drain starts and answered
 *   refused afterwards (Redis paused under it) is withdrawn: the drain finishes, exit 0.
 * - stopped_lane_claims_nothing: while the org's lane is stopped (401), nothing is claimed. */
#include "error.h"
#include "fixture.h"

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <cmocka.h>
#include <hiredis/hiredis.h>

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

/* The stub (hold mode unless told) and the worker's environment; starts the worker. */
static pid_t start(bool hold, const char *token)
{
	char env[256];
	int port = wproc_free_port();
	struct stub_config sc;

	wproc_seed_small(db);
	stub_config_defaults(&sc);
	sc.hold = hold;
	sc.token = token;
	wproc_stub_start(&stub, &sc);
	snprintf(env, sizeof(env), "http://127.0.0.1:%d", stub.port);
	setenv("PROVIDER_URL", env, 1);
	setenv("PROVIDER_WEBHOOK_SECRET", "stub-secret", 1);
	snprintf(env, sizeof(env), "127.0.0.1:%d", port);
	setenv("DISPATCHER_LISTEN", env, 1);
	setenv("DISPATCHER_LOG_LEVEL", getenv("TEST_LOG_LEVEL") ? getenv("TEST_LOG_LEVEL") : "warn",
	       1);
	setenv("DISPATCHER_WORKER_ID", "w1", 1);
	setenv("BATCH_DISPATCH_SLOT_WAIT_SECONDS", "1", 1);
	setenv("DISPATCHER_LEASE_SECONDS", "15", 1);
	setenv("DISPATCHER_DRAIN_SECONDS", "8", 1);
	setenv("DISPATCHER_REDIS_COMMAND_TIMEOUT_MS", "10000", 1);
	char *args[] = { "run", NULL };
	return worker_pid = fixture_spawn_dispatcher(args, NULL);
}

static void wait_placed(int n)
{
	long long deadline = fixture_now_ms() + WAIT_MS;
	while (stub_stat("calls_placed") < n && fixture_now_ms() < deadline)
		fixture_sleep_ms(50);
	assert_true(stub_stat("calls_placed") >= n);
}

static redisContext *redis(void)
{
	const char *path = strstr(svc.redis_url, "unix://");
	assert_non_null(path);
	redisContext *rc = redisConnectUnix(path + 7);
	assert_true(rc && !rc->err);
	return rc;
}

static void drain_answers_a_late_refusal(void **state)
{
	(void)state;
	setenv("DISPATCHER_RECONCILE_SECONDS", "1", 1);
	pid_t w = start(true, NULL);
	wait_placed(4);
	fixture_sleep_ms(2500);
	redisContext *rc = redis();
	redisReply *rep = redisCommand(rc, "CLIENT PAUSE 2500 ALL");
	assert_non_null(rep);
	freeReplyObject(rep);
	fixture_sleep_ms(1800); /* waiters pass the 1 s slot wait; new admissions go out, blocked */
	long long t = fixture_now_ms();
	kill(w, SIGTERM);
	int code = fixture_wait(w);
	worker_pid = 0;
	print_message("drain: exit %d after %lld ms (limit 8 s)\n", code, fixture_now_ms() - t);
	redisFree(rc);
	assert_int_equal(code, 0);
	assert_int_equal(sql_int("SELECT count(*) FROM contacts WHERE state = 'claimed'"), 0);
	assert_int_equal(sql_int("SELECT coalesce(sum(tries), 0) FROM contacts"), 0);
	wproc_stub_stop(&stub);
}

static void stopped_lane_claims_nothing(void **state)
{
	(void)state;
	setenv("DISPATCHER_RECONCILE_SECONDS", "1", 1);
	setenv("DISPATCHER_LANE_PROBE_SECONDS", "60", 1);
	setenv("PROVIDER_TOKEN", "wrong", 1);
	pid_t w = start(false, "right"); /* every POST answered 401: the lane stops */
	long long deadline = fixture_now_ms() + WAIT_MS;
	while (sql_int("SELECT count(*) FROM dial_attempts") < 1 && fixture_now_ms() < deadline)
		fixture_sleep_ms(50);
	assert_true(sql_int("SELECT count(*) FROM dial_attempts") >= 1);
	fixture_sleep_ms(2500); /* past the slot wait: what was claimed went back */
	long long a = sql_int("SELECT last_value FROM contacts_lease_token_seq");
	fixture_sleep_ms(3000);
	long long b = sql_int("SELECT last_value FROM contacts_lease_token_seq");
	long long claimed = sql_int("SELECT count(*) FROM contacts WHERE state = 'claimed'");
	print_message("lane stopped: %lld leases taken in 3 s, %lld claimed\n", b - a, claimed);
	kill(w, SIGTERM);
	int code = fixture_wait(w);
	worker_pid = 0;
	unsetenv("PROVIDER_TOKEN");
	unsetenv("DISPATCHER_LANE_PROBE_SECONDS");
	assert_int_equal(code, 0);
	assert_int_equal(b, a);
	assert_int_equal(claimed, 0);
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
	if (worker_pid > 0) { /* a failed assertion left it running */
		kill(worker_pid, SIGKILL);
		waitpid(worker_pid, NULL, 0);
		worker_pid = 0;
	}
	wproc_stub_stop(&stub);
	PQfinish(db);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(drain_answers_a_late_refusal, setup, teardown),
		cmocka_unit_test_setup_teardown(stopped_lane_claims_nothing, setup, teardown),
	};
	curl_global_init(CURL_GLOBAL_DEFAULT);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
