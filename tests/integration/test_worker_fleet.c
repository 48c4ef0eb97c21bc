/* Three `dispatcher run` processes sharing one listening port (SO_REUSEPORT) against a private
 * PostgreSQL and Redis and the provider stub (issue 9 item 11).
 *
 * fleet_backlog: 5,000 contacts over three campaigns (c3 joins late, c2 has a ceiling of 5) on
 * a 20-line organisation, calls of 20–80 ms, the stub answering some dials slowly (then past
 * the provider timeout: re-sends with the same key), throttling for a while (429: the call ends
 * refused, the contact is retried later, a try counted, no attempt) and sending duplicated,
 * early and reordered events. Every contact ends; every call ends exactly once (one charged attempt per placed
 * call, the stub sees no duplicate); at most 20 live, c2 at most 5; nothing pending, claimed or
 * live at the end. Reports the dial cycles per second.
 *
 * hold_floors_and_kill: the stub in hold mode on a second 20-line org with four campaigns, one
 * with a ceiling of 2 (floors 2, 6, 6, 6): after a round of ends, live calls sit exactly at the
 * floors. Then one worker is killed with SIGKILL: its claimed contacts come back through the
 * lease sweeper, its calls end by their events at the other workers, nothing is lost and
 * nothing is placed twice. The survivors drain on SIGTERM and exit 0. */
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

#define WORKERS 3
#define WAIT_MS (getenv("TEST_WAIT_MS") ? atoll(getenv("TEST_WAIT_MS")) : 240000)
/* Outcomes that charge an attempt; a swept call charges none (SPEC D5: an unknown outcome) but
 * was placed, so ENDED_PLACED adds it. */
#define CHARGED	     "('completed', 'failed', 'no-answer', 'busy', 'canceled')"
#define ENDED_PLACED "('completed', 'failed', 'no-answer', 'busy', 'canceled', 'swept')"
#define UNSETTLED    "('pending', 'claimed', 'dialing', 'live', 'held')"

static struct embedded svc;
static PGconn *db;
static struct wproc_stub stub;
static pid_t workers[WORKERS];
static int port;

static void sql(const char *q)
{
	PQclear(fixture_sql(db, q));
}

static long long sql_int(const char *q)
{
	return wproc_sql_int(db, q);
}

static double sstat(const char *path)
{
	return wproc_stat(&stub, path);
}

static void control(const char *path, const char *body)
{
	free(wproc_stub_http(&stub, path, body));
}

static void start_workers(void)
{
	char env[128];

	snprintf(env, sizeof(env), "http://127.0.0.1:%d", stub.port);
	setenv("PROVIDER_URL", env, 1);
	setenv("PROVIDER_WEBHOOK_SECRET", "stub-secret", 1);
	snprintf(env, sizeof(env), "127.0.0.1:%d", port);
	setenv("DISPATCHER_LISTEN", env, 1); /* one port for the fleet */
	setenv("DISPATCHER_LOG_LEVEL", getenv("TEST_LOG_LEVEL") ? getenv("TEST_LOG_LEVEL") : "warn",
	       1);
	setenv("DISPATCHER_LEASE_SECONDS", "8", 1); /* >= 2 x slot wait + timeout + 3 s */
	setenv("BATCH_DISPATCH_SLOT_WAIT_SECONDS", "2", 1);
	setenv("DISPATCHER_PROVIDER_TIMEOUT_MS", "250", 1);
	setenv("DISPATCHER_LEASE_SWEEP_SECONDS", "1", 1);
	setenv("DISPATCHER_CALL_SWEEP_SECONDS", "1", 1);
	setenv("DISPATCHER_MAX_CALL_SECONDS", "60", 1);
	setenv("DISPATCHER_RECONCILE_SECONDS", "1", 1);
	setenv("DISPATCHER_REFRESH_PERIOD_MS", "200", 1);
	setenv("DISPATCHER_DRAIN_SECONDS", "30", 1);
	for (int i = 0; i < WORKERS; i++) {
		char id[16];
		char *args[] = { "run", NULL };
		snprintf(id, sizeof(id), "w%d", i + 1);
		setenv("DISPATCHER_WORKER_ID", id, 1);
		workers[i] = fixture_spawn_dispatcher(args, NULL);
	}
}

/* CPU seconds (user + system) the worker processes used so far. */
static double workers_cpu_s(void)
{
	double total = 0;

	for (int i = 0; i < WORKERS; i++) {
		char path[64], buf[1024];
		unsigned long ut = 0, st = 0;
		snprintf(path, sizeof(path), "/proc/%d/stat", (int)workers[i]);
		FILE *f = workers[i] > 0 ? fopen(path, "r") : NULL;
		if (!f)
			continue;
		if (fgets(buf, sizeof(buf), f)) {
			const char *p = strrchr(buf, ')'); /* fields after the command name */
			if (p &&
			    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
				   &ut, &st) != 2)
				ut = st = 0;
		}
		fclose(f);
		total += (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
	}
	return total;
}

/* Polls q until it answers want; returns its last answer. Prints the progress every 5 s. */
static long long wait_sql(const char *q, long long want, long long ms)
{
	long long deadline = fixture_now_ms() + ms, v, next = fixture_now_ms() + 5000;

	while ((v = sql_int(q)) != want && fixture_now_ms() < deadline) {
		fixture_sleep_ms(200);
		if (fixture_now_ms() < next)
			continue;
		next += 5000;
		PGresult *r = fixture_sql(db, "SELECT string_agg(campaign_id || ':' || state || '='"
					      " || n, ' ' ORDER BY 1, 2) FROM (SELECT campaign_id,"
					      " state::text, count(*) n FROM contacts WHERE state"
					      " NOT IN ('done', 'failed') GROUP BY 1, 2) x");
		print_message("progress: placed %.0f live %.0f | %s\n", sstat("calls_placed"),
			      sstat("live"), PQgetvalue(r, 0, 0));
		PQclear(r);
	}
	return v;
}

static double wait_stat(const char *path, double want, long long ms)
{
	long long deadline = fixture_now_ms() + ms;
	double v;

	while ((v = sstat(path)) != want && fixture_now_ms() < deadline)
		fixture_sleep_ms(100);
	return v;
}

/* Every call of org ended, each placed call charged exactly one attempt of its contact. */
static void assert_settled(const char *org, long long contacts)
{
	char q[512];

	snprintf(
		q, sizeof(q),
		"SELECT count(*) FROM contacts WHERE org_id = '%s' AND state IN ('done', 'failed')",
		org);
	assert_int_equal(sql_int(q), contacts);
	snprintf(q, sizeof(q),
		 "SELECT count(*) FROM calls WHERE org_id = '%s' AND state <> 'ended'", org);
	assert_int_equal(sql_int(q), 0);
	snprintf(q, sizeof(q),
		 "SELECT count(*) FROM contacts ct WHERE org_id = '%s' AND attempts <> (SELECT"
		 " count(*) FROM calls c WHERE c.contact_id = ct.id AND c.outcome IN " CHARGED ")",
		 org);
	assert_int_equal(sql_int(q), 0);
	snprintf(q, sizeof(q),
		 "SELECT count(*) FROM (SELECT contact_id, attempt FROM calls WHERE org_id = '%s'"
		 " AND outcome IN " CHARGED " GROUP BY 1, 2 HAVING count(*) > 1) d",
		 org);
	assert_int_equal(sql_int(q), 0);
	snprintf(q, sizeof(q), "orgs.%s.live", org);
	assert_int_equal((int)wait_stat(q, 0, 30000), 0);
	snprintf(q, sizeof(q), "orgs.%s.max_live", org);
	double max_live = sstat(q);
	snprintf(q, sizeof(q),
		 "SELECT count(*) FROM calls WHERE org_id = '%s' AND outcome = 'swept'", org);
	print_message("%s: max live %.0f, %lld calls swept\n", org, max_live, sql_int(q));
	assert_true(max_live <= 20);
}

static void seed_org(const char *org, const char *agent)
{
	char q[256];

	snprintf(q, sizeof(q),
		 "INSERT INTO organisations (id, name, org_limit) VALUES ('%s', '%s', 20)", org,
		 org);
	sql(q);
	snprintf(q, sizeof(q), "INSERT INTO agents (id, org_id) VALUES ('%s', '%s')", agent, org);
	sql(q);
}

/* Campaign cp of org with n contacts (phones from base), its batch, its retry settings. */
static void seed_campaign(const char *org, const char *agent, const char *cp, const char *cap,
			  int n, int base, int delay_s, int attempts)
{
	char q[768];

	snprintf(q, sizeof(q),
		 "INSERT INTO campaigns (id, org_id, agent_id, max_concurrent_calls,"
		 " retry_delay_seconds, retry_max_attempts) VALUES ('%s', '%s', '%s', %s, %d, %d);"
		 " INSERT INTO batches (id, org_id, campaign_id) VALUES ('b_%s', '%s', '%s');"
		 " INSERT INTO contacts (org_id, campaign_id, batch_id, phone) SELECT '%s', '%s',"
		 " 'b_%s', '+1415' || lpad((%d + i)::text, 7, '0') FROM generate_series(1, %d) i",
		 cp, org, agent, cap, delay_s, attempts, cp, org, cp, org, cp, cp, base, n);
	sql(q);
}

static void fleet_backlog(void **state)
{
	struct stub_config sc;

	(void)state;
	stub_config_defaults(&sc);
	sc.dur_min_ms = 20;
	sc.dur_max_ms = 80;
	sc.ring_ms = 5;
	sc.dup_pct = 10;
	sc.early_pct = 10;
	sc.reorder_pct = 5;
	sc.reorder_ms = 30;
	sc.defaults.slow_pct = 5; /* slow answers, under the provider timeout (250 ms) */
	sc.defaults.slow_ms = 150;
	wproc_stub_start(&stub, &sc);
	seed_org("o1", "a1");
	seed_campaign("o1", "a1", "c1", "NULL", 2000, 0, 0, 3);
	seed_campaign("o1", "a1", "c2", "5", 1000, 100000, 1, 3); /* ceiling 5 */
	start_workers();

	long long t0 = fixture_now_ms(), deadline = t0 + WAIT_MS;
	while (sstat("calls_placed") < 1500 && fixture_now_ms() < deadline)
		fixture_sleep_ms(100);
	assert_true(sstat("calls_placed") >= 1500);
	/* From now on the slow answers come past the provider timeout: re-sends, same key. */
	control("/control/org", "{\"org_id\":\"*\",\"slow_pct\":5,\"slow_ms\":400}");
	seed_campaign("o1", "a1", "c3", "NULL", 2000, 200000, 0, 3); /* joins late */
	/* A throttling burst: 429 + Retry-After → the call ends refused, its contact comes back
	 * after the header's delay with a try counted and no attempt charged (D2). */
	control("/control/org", "{\"org_id\":\"*\",\"limit\":5,\"window_ms\":500}");
	long long burst = fixture_now_ms() + 20000;
	while (sstat("orgs.o1.throttled_429") < 10 && fixture_now_ms() < burst)
		fixture_sleep_ms(100);
	control("/control/org", "{\"org_id\":\"*\",\"limit\":0}");
	long long left = wait_sql("SELECT count(*) FROM contacts WHERE state IN " UNSETTLED, 0,
				  deadline - fixture_now_ms());
	double secs = (double)(fixture_now_ms() - t0) / 1000.0;
	long long calls = sql_int("SELECT count(*) FROM calls");
	print_message("fleet: %lld calls (%.0f placed, %.0f requests) in %.1f s: %.0f dial "
		      "cycles/s, workers %.2f CPU-s per 1,000; %.0f duplicated, %.0f early events; "
		      "%lld unsettled\n",
		      calls, sstat("calls_placed"), sstat("requests"), secs, (double)calls / secs,
		      workers_cpu_s() * 1000.0 / (double)(calls ? calls : 1),
		      sstat("events_duplicated"), sstat("events_early"), left);
	assert_int_equal(left, 0);
	assert_settled("o1", 5000);
	assert_int_equal((int)sstat("duplicates"), 0);
	assert_true(sstat("campaigns.c2.max_live") <= 5);
	assert_true(sstat("campaigns.c3.placed") >= 2000);
	assert_true(sstat("events_duplicated") > 0 && sstat("events_early") > 0);
	double throttled = sstat("orgs.o1.throttled_429");
	long long refused = sql_int("SELECT count(*) FROM calls WHERE outcome = 'refused'");
	print_message("fleet: %.0f answered 429, %lld calls ended refused, %lld contacts with "
		      "tries\n",
		      throttled, refused, sql_int("SELECT count(*) FROM contacts WHERE tries > 0"));
	assert_true(throttled >= 10);
	/* Each refusal ended its call, once (a 429 to a re-send after a timeout is re-sent
	 * instead: the call may exist). */
	assert_true(refused >= 1);
	assert_int_equal(refused, sql_int("SELECT count(*) FROM dial_attempts WHERE class ="
					  " 'refused'"));
	assert_true(sql_int("SELECT count(*) FROM contacts WHERE tries > 0") > 0);
	/* Every placed call has its outcome (one attempt charged, none when swept). */
	assert_int_equal((long long)sstat("calls_placed"),
			 sql_int("SELECT count(*) FROM calls WHERE outcome IN " ENDED_PLACED));
	assert_int_equal(sql_int("SELECT count(*) FROM dial_attempts WHERE class = 'resend'") > 0,
			 1);
	/* The per-call statements look calls up by key: plans prepared on the empty table (seq
	 * scans) do not outlive the first analyze (embedded server: autovacuum_naptime 1 s). They
	 * did: ≈ 5.6 full scans of calls per call, and PostgreSQL took most of both cores. */
	long long scans =
		sql_int("SELECT seq_scan FROM pg_stat_user_tables WHERE relname = 'calls'");
	print_message("fleet: %lld sequential scans of calls for %lld calls\n", scans, calls);
	assert_true(scans < calls);
}

static void hold_floors_and_kill(void **state)
{
	(void)state;
	for (int i = 0; i < WORKERS; i++)
		assert_true(workers[i] > 0 && kill(workers[i], 0) == 0);
	control("/control/hold", "{\"hold\":true}");
	control("/control/org", "{\"org_id\":\"*\",\"slow_pct\":0}");
	seed_org("o2", "a2");
	seed_campaign("o2", "a2", "d1", "2", 60, 300000, 0, 1);
	seed_campaign("o2", "a2", "d2", "NULL", 60, 310000, 0, 1);
	seed_campaign("o2", "a2", "d3", "NULL", 60, 320000, 0, 1);
	seed_campaign("o2", "a2", "d4", "NULL", 60, 330000, 0, 1);
	assert_int_equal((int)wait_stat("orgs.o2.live", 20, WAIT_MS), 20);
	/* Floors installed meanwhile (refresher every 200 ms): after a round of ends, the lines
	 * go back by the floors 2, 6, 6, 6. */
	for (int round = 0; round < 2; round++) {
		fixture_sleep_ms(1500);
		control("/control/end", "{\"org_id\":\"o2\"}");
		assert_int_equal((int)wait_stat("orgs.o2.live", 20, WAIT_MS), 20);
	}
	fixture_sleep_ms(1000); /* quiet: nothing more is placed while every line is held */
	print_message("hold: live d1 %.0f d2 %.0f d3 %.0f d4 %.0f\n", sstat("campaigns.d1.live"),
		      sstat("campaigns.d2.live"), sstat("campaigns.d3.live"),
		      sstat("campaigns.d4.live"));
	assert_int_equal((int)sstat("orgs.o2.live"), 20);
	assert_int_equal((int)sstat("campaigns.d1.live"), 2);
	assert_int_equal((int)sstat("campaigns.d2.live"), 6);
	assert_int_equal((int)sstat("campaigns.d3.live"), 6);
	assert_int_equal((int)sstat("campaigns.d4.live"), 6);
	assert_true(sstat("campaigns.d1.max_live") <= 2);
	/* SIGKILL the worker holding the most claimed contacts now (waiting for a line: they come
	 * back through the lease sweeper) and, likely, live calls (their events go to the others
	 * through the shared port). */
	int victim = -1;
	long long held = 0, deadline = fixture_now_ms() + 20000;
	while (victim < 0 && fixture_now_ms() < deadline) {
		PGresult *r = fixture_sql(db, "SELECT lease_owner, count(*) FROM contacts WHERE"
					      " state = 'claimed' AND org_id = 'o2' GROUP BY 1"
					      " ORDER BY 2 DESC LIMIT 1");
		if (PQntuples(r) && sscanf(PQgetvalue(r, 0, 0), "w%d", &victim) == 1) {
			held = atoll(PQgetvalue(r, 0, 1));
			victim--;
		} else {
			victim = -1;
			fixture_sleep_ms(50);
		}
		PQclear(r);
	}
	assert_true(victim >= 0 && victim < WORKERS);
	kill(workers[victim], SIGKILL);
	assert_int_equal(fixture_wait(workers[victim]), 128 + SIGKILL);
	workers[victim] = 0;
	print_message("killed w%d holding %lld claimed contacts\n", victim + 1, held);
	control("/control/hold", "{\"hold\":false}");
	control("/control/end", "{\"org_id\":\"o2\"}");
	long long left = wait_sql("SELECT count(*) FROM contacts WHERE org_id = 'o2' AND state IN"
				  " " UNSETTLED,
				  0, WAIT_MS);
	assert_int_equal(left, 0);
	assert_settled("o2", 240);
	assert_int_equal((int)sstat("duplicates"), 0);
	assert_true(sstat("campaigns.d1.max_live") <= 2);

	/* The survivors drain and exit 0. */
	for (int i = 0; i < WORKERS; i++)
		if (workers[i] > 0)
			kill(workers[i], SIGTERM);
	for (int i = 0; i < WORKERS; i++)
		if (workers[i] > 0) {
			assert_int_equal(fixture_wait(workers[i]), 0);
			workers[i] = 0;
		}
	assert_int_equal(sql_int("SELECT count(*) FROM contacts WHERE state IN " UNSETTLED), 0);
}

static int setup(void **state)
{
	(void)state;
	fixture_start(&svc, true, true, false, true);
	db = fixture_pg(&svc);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	port = wproc_free_port();
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < WORKERS; i++)
		if (workers[i] > 0) { /* a failed assertion left them running */
			kill(workers[i], SIGKILL);
			waitpid(workers[i], NULL, 0);
		}
	wproc_stub_stop(&stub);
	PQfinish(db);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(fleet_backlog),
		cmocka_unit_test(hold_floors_and_kill),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
