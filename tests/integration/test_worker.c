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
#include "signing.h"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <time.h>
#include <cmocka.h>

#include <hiredis/hiredis.h>

#include "worker_proc.h"

#define WAIT_MS 120000

static struct embedded svc;
static PGconn *db;
static pid_t worker_pid;
static int worker_port;
static struct wproc_stub stub;

static double stub_stat(const char *path)
{
	return wproc_stat(&stub, path);
}

static long long sql_int(const char *q)
{
	return wproc_sql_int(db, q);
}

/* Starts the stub (hold mode) and the worker; the worker's stderr (its JSON log) goes to
 * log_path when given. */
static pid_t start_worker(const char *reconcile_seconds, const char *log_path)
{
	char env[256];
	int port = wproc_free_port(), saved = -1;
	struct stub_config sc;

	stub_config_defaults(&sc);
	sc.hold = true;
	wproc_stub_start(&stub, &sc);
	snprintf(env, sizeof(env), "http://127.0.0.1:%d", stub.port);
	setenv("PROVIDER_URL", env, 1);
	setenv("PROVIDER_WEBHOOK_SECRET", "stub-secret", 1);
	snprintf(env, sizeof(env), "127.0.0.1:%d", port);
	setenv("DISPATCHER_LISTEN", env, 1);
	worker_port = port;
	/* logged to a file: info, so a reconciler's correction would show */
	setenv("DISPATCHER_LOG_LEVEL",
	       getenv("TEST_LOG_LEVEL") ? getenv("TEST_LOG_LEVEL")
	       : log_path		? "info"
					: "warn",
	       1);
	setenv("DISPATCHER_WORKER_ID", "w1", 1);
	setenv("DISPATCHER_RECONCILE_SECONDS", reconcile_seconds, 1);
	if (log_path) {
		int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
		assert_true(fd >= 0);
		saved = dup(STDERR_FILENO);
		dup2(fd, STDERR_FILENO);
		close(fd);
	}
	char *args[] = { "run", NULL };
	worker_pid = fixture_spawn_dispatcher(args, NULL);
	if (saved >= 0) {
		dup2(saved, STDERR_FILENO);
		close(saved);
	}
	return worker_pid;
}

static void dials_and_drain(void **state)
{
	(void)state;
	wproc_seed_small(db);
	pid_t w = start_worker("1", NULL);

	/* Every line busy: 4 calls placed (hold mode keeps them live). */
	long long deadline = fixture_now_ms() + WAIT_MS;
	while (stub_stat("calls_placed") < 4 && fixture_now_ms() < deadline)
		fixture_sleep_ms(100);
	assert_int_equal((int)stub_stat("calls_placed"), 4);
	/* Quiet: nothing more may be placed while the lines are held. */
	fixture_sleep_ms(1500);
	assert_int_equal((int)stub_stat("calls_placed"), 4);
	assert_int_equal((int)stub_stat("duplicates"), 0);
	/* 5 while Y, ended here by the test's own events, was still held at the stub */
	assert_true(stub_stat("orgs.o1.max_live") <= 5);
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
	/* The early release (events.h) frees the lines before PostgreSQL records the ends: the new
	 * calls may be placed first. */
	deadline = fixture_now_ms() + WAIT_MS;
	while (sql_int("SELECT count(*) FROM calls WHERE state = 'ended'") < 4 &&
	       fixture_now_ms() < deadline)
		fixture_sleep_ms(20);
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

/* --- early release (issue 9, events.h): the terminal event frees the slots before PostgreSQL
 * records the end --- */

static redisContext *redis(void)
{
	const char *path = strstr(svc.redis_url, "unix://");
	assert_non_null(path);
	redisContext *rc = redisConnectUnix(path + 7);
	assert_true(rc && !rc->err);
	return rc;
}

/* The gate's view of o1: its slot records (one per call holding its slots). */
static long long slots(redisContext *rc)
{
	redisReply *rep = redisCommand(rc, "HLEN dsp:v1:{o:o1}:slots");
	assert_true(rep && rep->type == REDIS_REPLY_INTEGER);
	long long n = rep->integer;
	freeReplyObject(rep);
	return n;
}

static bool holds(redisContext *rc, const char *call)
{
	redisReply *rep = redisCommand(rc, "HEXISTS dsp:v1:{o:o1}:slots %s", call);
	assert_true(rep && rep->type == REDIS_REPLY_INTEGER);
	bool held = rep->integer == 1;
	freeReplyObject(rep);
	return held;
}

static long long row_ended(const char *call)
{
	char q[160];
	snprintf(q, sizeof(q), "SELECT count(*) FROM calls WHERE id = '%s' AND state = 'ended'",
		 call);
	return sql_int(q);
}

static void wait_placed(int n, long long within_ms)
{
	long long deadline = fixture_now_ms() + within_ms;
	while (stub_stat("calls_placed") < n && fixture_now_ms() < deadline)
		fixture_sleep_ms(20);
	assert_int_equal((int)stub_stat("calls_placed"), n);
}

/* A signed terminal event of call (our id, provider id pc) posted to the worker's events
 * endpoint with query (appended to the path, "" for none), from a child process: its answer
 * comes once the event is recorded (and, terminal, its call ended). */
static pid_t post_event_async(const char *call, const char *pc, int seq, const char *query)
{
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid)
		return pid;
	char url[256], body[512], hdr[SIGNING_HEADER_MAX + 16] = "X-Signature: ";
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/provider/events%s", worker_port, query);
	snprintf(body, sizeof(body),
		 "{\"call_id\":\"%s\",\"idempotency_key\":\"%s\",\"status\":\"completed\","
		 "\"sequence\":%d}",
		 pc, call, seq);
	if (signing_sign("stub-secret", (int64_t)time(NULL), body, strlen(body), hdr + 13,
			 sizeof(hdr) - 13))
		_exit(2);
	CURL *c = curl_easy_init();
	struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
	h = curl_slist_append(h, hdr);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 120000L);
	long status = 0;
	if (curl_easy_perform(c) == CURLE_OK)
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
	_exit(status == 200 ? 0 : 1);
}

/* One worker, an organisation of 4 lines (hold mode), every line busy; two of its calls X, Y.
 * - Terminal events of Y whose callback query does not name o1 (none, empty, malformed,
 *   another org built in Redis) end Y through call_end alone: no early release.
 * - X ended at the stub (its callback names o1): one early release, which frees X's slots
 *   (call_end's own release after the commit then finds nothing held). Y's real event,
 *   once the test ends Y at the stub too, names o1: sent early, frees nothing.
 * - Settled: both rows ended once, each contact charged one attempt, the gate's slot records
 *   equal the stub's live calls, no count hit 0 (GATE_RANGE), no reconciler correction.
 * The window itself (slots freed, row still live, terminal event recorded) and the
 * reconciler's reading of it are checked in test_gate_pg_write (terminal_event_reads_ended).
 * Fails before c5e7c89: the exit line has no early release. */
static void early_release(void **state)
{
	char log_path[256], x[64], y[64], xpc[160], ypc[160], q[512];

	(void)state;
	wproc_seed_small(db);
	/* another organisation, built in Redis with its limits: its name frees nothing of o1 */
	PQclear(fixture_sql(
		db, "INSERT INTO organisations (id, name, org_limit) VALUES ('o2', 'o2', 4)"));
	snprintf(log_path, sizeof(log_path), "%s/worker-early.log", svc.dir);
	pid_t w = start_worker("1", log_path);
	redisContext *rc = redis();

	wait_placed(4, WAIT_MS);
	/* Every call's dial answered (provider id on the row) and held in the gate. */
	long long deadline = fixture_now_ms() + WAIT_MS;
	while ((sql_int("SELECT count(*) FROM calls WHERE provider_call_id IS NOT NULL AND state"
			" IN ('dialing', 'live')") < 4 ||
		slots(rc) < 4) &&
	       fixture_now_ms() < deadline)
		fixture_sleep_ms(20);
	assert_int_equal(slots(rc), 4);
	PGresult *r = fixture_sql(db, "SELECT id, provider_call_id FROM calls WHERE state IN"
				      " ('dialing', 'live') ORDER BY id LIMIT 2");
	snprintf(x, sizeof(x), "%s", PQgetvalue(r, 0, 0));
	snprintf(xpc, sizeof(xpc), "%s", PQgetvalue(r, 0, 1));
	snprintf(y, sizeof(y), "%s", PQgetvalue(r, 1, 0));
	snprintf(ypc, sizeof(ypc), "%s", PQgetvalue(r, 1, 1));
	PQclear(r);

	/* No reconciler pass while the ends are in flight: the test holds its lease. A pass there
	 * would RELEASE a slot whose terminal event is recorded before the end's own release does
	 * (benign, but counted as a correction); after the window two passes must find nothing. */
	assert_int_equal(sql_int("WITH u AS (UPDATE leases SET owner = 'early-test', lease_until ="
				 " now() + interval '1 hour' WHERE name = 'reconciler' RETURNING 1)"
				 " SELECT count(*) FROM u"),
			 1);
	/* Y's terminal events without o1 in the query: Y ends by call_end (answered 200 once
	 * ended), its line dialled again. */
	const char *bad[] = { "", "?org=", "?org=o1%3B", "?org=o2" };
	for (int i = 0; i < 4; i++)
		assert_int_equal(fixture_wait(post_event_async(y, ypc, 90 + i, bad[i])), 0);
	assert_int_equal(row_ended(y), 1);
	wait_placed(5, 20000);

	/* X ends at the stub (o1 in its callback): freed early, its line dialled again. */
	snprintf(q, sizeof(q), "{\"idempotency_key\":\"%s\"}", x);
	free(wproc_stub_http(&stub, "/control/end", q));
	wait_placed(6, 20000);
	deadline = fixture_now_ms() + WAIT_MS;
	while (row_ended(x) == 0 && fixture_now_ms() < deadline)
		fixture_sleep_ms(20);
	assert_int_equal(row_ended(x), 1);
	assert_false(holds(rc, x));
	assert_false(holds(rc, y));
	/* Y ended at the stub too (the test ended it early, in PostgreSQL only): its real event
	 * names o1 — an early release that finds nothing held. */
	snprintf(q, sizeof(q), "{\"idempotency_key\":\"%s\"}", y);
	free(wproc_stub_http(&stub, "/control/end", q));

	/* Settled: PostgreSQL's live rows, the gate's records and the stub's live calls agree. */
	deadline = fixture_now_ms() + WAIT_MS;
	while ((sql_int("SELECT count(*) FROM calls WHERE state <> 'ended'") != 4 ||
		slots(rc) != 4) &&
	       fixture_now_ms() < deadline)
		fixture_sleep_ms(20);
	assert_int_equal(sql_int("SELECT count(*) FROM calls WHERE state <> 'ended'"), 4);
	assert_int_equal(slots(rc), 4);
	assert_int_equal((int)stub_stat("orgs.o1.live"), 4);
	/* 5 while Y, ended here by the test's own events, was still held at the stub */
	assert_true(stub_stat("orgs.o1.max_live") <= 5);
	assert_int_equal((int)stub_stat("calls_placed"), 6);
	assert_int_equal((int)stub_stat("duplicates"), 0);
	snprintf(q, sizeof(q),
		 "SELECT count(*) FROM contacts c JOIN calls k ON k.contact_id = c.id WHERE k.id"
		 " IN ('%s', '%s') AND c.attempts = 1 AND c.state <> 'dialing'",
		 x, y);
	assert_int_equal(sql_int(q), 2); /* each end recorded once */
	/* The lease given back: two runs of the reconciler (a whole pass between them) find
	 * nothing to correct. */
	PQclear(fixture_sql(db, "UPDATE leases SET lease_until = now() - interval '1 s' WHERE name"
				" = 'reconciler'"));
	char first[64] = "";
	deadline = fixture_now_ms() + WAIT_MS;
	for (;;) {
		r = fixture_sql(db, "SELECT owner, lease_until::text FROM leases WHERE name ="
				    " 'reconciler'");
		bool ours = strcmp(PQgetvalue(r, 0, 0), "early-test") != 0;
		if (ours && !first[0])
			snprintf(first, sizeof(first), "%s", PQgetvalue(r, 0, 1));
		bool again = ours && strcmp(first, PQgetvalue(r, 0, 1)) != 0;
		PQclear(r);
		if (again)
			break;
		assert_true(fixture_now_ms() < deadline);
		fixture_sleep_ms(50);
	}
	assert_int_equal(slots(rc), 4);
	redisFree(rc);

	kill(w, SIGTERM);
	assert_int_equal(fixture_wait(w), 0);
	worker_pid = 0;
	wproc_stub_stop(&stub);
	int fd = open(log_path, O_RDONLY);
	assert_true(fd >= 0);
	char *log = fixture_read_all(fd);
	assert_null(strstr(log, "a count of this call's levels is already 0")); /* GATE_RANGE */
	assert_null(strstr(log, "found a count at 0"));
	assert_null(strstr(log, "corrections ("));
	assert_null(strstr(log, "has no slot record"));
	/* exactly X's event freed early (Y's real event was sent too, and freed nothing) */
	const char *line = strstr(log, "script calls:");
	assert_non_null(line);
	assert_non_null(strstr(line, " early_freed=1 "));
	assert_null(strstr(line, " early_sent=0 "));
	free(log);
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
		cmocka_unit_test_setup_teardown(dials_and_drain, setup, teardown),
		cmocka_unit_test_setup_teardown(early_release, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
