/* `dispatcher run` with one organisation of many campaigns (issue 9: no per-organisation cap on
 * the campaigns the worker selects from). 200 campaigns on a 250-line organisation and one
 * worker, calls of 20–60 ms that all complete: the 64 oldest campaigns have 14 contacts each,
 * the 136 younger ones 1 each. Every campaign gets its turns (C8), so every young campaign is
 * dialled before the old ones run out of contacts (measured: all 200 within the first ~240–320
 * calls of 1,032); every contact ends (done, one call each); the stub sees no duplicate;
 * nothing is left claimed. Before, the worker selected from 64 campaigns only: a young
 * campaign got a place only when an older one had nothing left, so the last young campaigns
 * were dialled after every old one had placed its last call. */
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

#define CAMPAIGNS 200
#define OLD	  64 /* the first campaigns, OLD_PER contacts each; the others have 1 */
#define OLD_PER	  14
#define CONTACTS  (OLD * OLD_PER + CAMPAIGNS - OLD)
#define WAIT_MS                                                                                    \
	(getenv("TEST_WAIT_MS") ? atoll(getenv("TEST_WAIT_MS"))                                    \
				: 90000) /* ASan, 2 tests in parallel: 9-16 s; 44 s at load 15 */

static struct embedded svc;
static PGconn *db;
static pid_t worker_pid;
static struct wproc_stub stub;

static long long sql_int(const char *q)
{
	return wproc_sql_int(db, q);
}

static void many_campaigns_all_dialled(void **state)
{
	char env[256];
	int port = wproc_free_port();
	struct stub_config sc;

	(void)state;
	char where[64];
	snprintf(where, sizeof(where), "k <= %d OR i = 1", OLD);
	wproc_seed_campaigns(db, 250, CAMPAIGNS, OLD_PER, where);
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
	/* Under load a call-row write may pass its deadline: its contact comes back by its lease. */
	setenv("DISPATCHER_LEASE_SECONDS", "8", 1); /* >= 2 x slot wait + timeout + 3 s */
	setenv("DISPATCHER_LEASE_SWEEP_SECONDS", "1", 1);
	setenv("BATCH_DISPATCH_SLOT_WAIT_SECONDS", "2", 1);
	setenv("DISPATCHER_PROVIDER_TIMEOUT_MS", "1000", 1);
	char *args[] = { "run", NULL };
	worker_pid = fixture_spawn_dispatcher(args, NULL);

	long long t0 = fixture_now_ms(), deadline = t0 + WAIT_MS, done = 0;
	while ((done = sql_int("SELECT count(*) FROM contacts WHERE state = 'done'")) < CONTACTS &&
	       fixture_now_ms() < deadline)
		fixture_sleep_ms(200);
	long long dialled = sql_int("SELECT count(DISTINCT campaign_id) FROM calls");
	/* The calls placed until the last campaign's first call (calls of one statement share
	 * created_at: ± one loop turn's admissions). */
	long long cover = sql_int("SELECT coalesce(max(r), 0) FROM (SELECT min(rn) r FROM (SELECT"
				  " campaign_id, row_number() OVER (ORDER BY created_at) rn"
				  " FROM calls) x GROUP BY campaign_id) y");
	/* Every young campaign dialled before the old ones have finished. */
	long long young_first = sql_int(
		"SELECT coalesce(extract(epoch FROM max(f)) * 1000, 0)::bigint FROM (SELECT"
		" min(created_at) f FROM calls WHERE campaign_id > 'c064' GROUP BY campaign_id) y");
	long long old_last = sql_int("SELECT coalesce(extract(epoch FROM max(created_at)) * 1000,"
				     " 0)::bigint FROM calls WHERE campaign_id <= 'c064'");
	print_message("%lld of %d contacts done, %lld of %d campaigns dialled in %lld ms; every"
		      " campaign dialled within the first %lld calls; the last young campaign's"
		      " first call %lld ms before the old campaigns' last\n",
		      done, CONTACTS, dialled, CAMPAIGNS, fixture_now_ms() - t0, cover,
		      old_last - young_first);
	if (getenv("TEST_DEBUG")) {
		PGresult *r = fixture_sql(
			db, "SELECT string_agg(campaign_id || '@' || r, ' ' ORDER BY r DESC)"
			    " FROM (SELECT campaign_id, min(rn) r FROM (SELECT campaign_id,"
			    " row_number() OVER (ORDER BY created_at) rn FROM calls) x"
			    " GROUP BY campaign_id) y");
		print_message("first calls: %s\n", PQgetvalue(r, 0, 0));
		PQclear(r);
	}
	assert_int_equal(dialled, CAMPAIGNS);
	/* Before, both were impossible: the last young campaigns got a place only once every old
	 * campaign had placed its last call (cover > OLD × OLD_PER). */
	assert_true(cover < OLD * OLD_PER);
	assert_true(young_first < old_last);
	assert_int_equal(done, CONTACTS);
	wproc_assert_all_dialled(db, &stub, &worker_pid, CONTACTS, 250);
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
		cmocka_unit_test(many_campaigns_all_dialled),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
