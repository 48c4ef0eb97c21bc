/* `GET /metrics` on the worker's operator listener (issue 10 items 7 and 8, SPEC R8): a private
 * PostgreSQL and Redis, the provider stub in hold mode, one `dispatcher run` with
 * DISPATCHER_OPERATOR_LISTEN on a free port and DISPATCHER_ADMIN_TOKEN set. The org of 4 lines
 * gets its 4 calls; then the scrape must show what moved: admissions, refusals at the
 * organisation level (the waiters), dial attempts of class ok, the slot-wait histogram, the
 * gate in redis mode with its slots in use (system, org, campaigns, agent: 4 live), the lanes,
 * and the HTTP requests by listener, route pattern and status. The operator routes answer 401
 * (JSON) without the token or with a wrong one, 200 with it; /metrics is not on the public
 * listener (404). */
#include "fixture.h"

#include <curl/curl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <cmocka.h>

#include "worker_proc.h"

#define WAIT_MS 120000
#define TOKEN	"op-token-1"

static struct embedded svc;
static PGconn *db;
static pid_t worker_pid;
static struct wproc_stub stub;

struct answer {
	long status;
	char *body;  /* malloc'ed */
	char *ctype; /* malloc'ed, "" when none */
};

/* GET http://127.0.0.1:port<path>, with "Authorization: <auth>" when auth is not NULL. */
static struct answer get(int port, const char *path, const char *auth)
{
	struct answer a = { 0 };
	char url[128], hdr[128];
	char *ct = NULL;
	CURL *c = curl_easy_init();
	struct curl_slist *h = NULL;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
	if (auth) {
		snprintf(hdr, sizeof(hdr), "Authorization: %s", auth);
		h = curl_slist_append(NULL, hdr);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
	}
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, wproc_collect);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &a.body);
	curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
	CURLcode rc = curl_easy_perform(c);
	if (rc == CURLE_OK) {
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &a.status);
		curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
	}
	a.ctype = strdup(ct ? ct : "");
	if (!a.body)
		a.body = strdup("");
	curl_easy_cleanup(c);
	curl_slist_free_all(h);
	return a;
}

static void answer_free(struct answer *a)
{
	free(a->body);
	free(a->ctype);
}

/* The value of the sample whose series (name and labels, exactly as rendered) is series; -1
 * when the text has no such line. */
static double sample(const char *text, const char *series)
{
	size_t n = strlen(series);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, series, n) == 0 && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	return -1;
}

static struct answer scrape(int port)
{
	struct answer a = get(port, "/metrics", "Bearer " TOKEN);

	assert_int_equal(a.status, 200);
	return a;
}

static void metrics_on_operator_listener(void **state)
{
	char env[128];
	int port = wproc_free_port(), op_port = wproc_free_port();
	struct stub_config sc;
	struct answer a;

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
	snprintf(env, sizeof(env), "127.0.0.1:%d", op_port);
	setenv("DISPATCHER_OPERATOR_LISTEN", env, 1);
	setenv("DISPATCHER_ADMIN_TOKEN", TOKEN, 1);
	setenv("DISPATCHER_LOG_LEVEL", getenv("TEST_LOG_LEVEL") ? getenv("TEST_LOG_LEVEL") : "warn",
	       1);
	setenv("DISPATCHER_WORKER_ID", "wm", 1);
	setenv("DISPATCHER_RECONCILE_SECONDS", "1", 1);
	char *args[] = { "run", NULL };
	worker_pid = fixture_spawn_dispatcher(args, NULL);

	/* Every line busy, and the gate in redis mode (a fresh install starts in postgres mode;
	 * the reconciler's way back brings redis mode). */
	long long deadline = fixture_now_ms() + WAIT_MS;
	while (wproc_stat(&stub, "calls_placed") < 4 && fixture_now_ms() < deadline)
		fixture_sleep_ms(100);
	assert_int_equal((int)wproc_stat(&stub, "calls_placed"), 4);
	for (;;) {
		a = get(op_port, "/metrics", "Bearer " TOKEN);
		if (a.status == 200 &&
		    sample(a.body, "dispatcher_gate_mode{mode=\"redis\"}") == 1 &&
		    sample(a.body, "dispatcher_org_slots_in_use{org=\"o1\"}") == 4)
			break;
		answer_free(&a);
		assert_true(fixture_now_ms() < deadline);
		fixture_sleep_ms(100);
	}
	answer_free(&a);

	/* The operator routes need the token: none, another scheme, a wrong one, a longer one. */
	const char *bad[] = { NULL, "Basic " TOKEN, "Bearer op-token-2", "Bearer " TOKEN "x",
			      "Bearer " };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		a = get(op_port, "/metrics", bad[i]);
		assert_int_equal(a.status, 401);
		assert_non_null(strstr(a.body, "\"error\":\"unauthorized\""));
		assert_non_null(strstr(a.ctype, "application/json"));
		assert_null(strstr(a.body, "dispatcher_"));
		answer_free(&a);
	}
	a = get(op_port, "/healthz", NULL);
	assert_int_equal(a.status, 401);
	answer_free(&a);
	a = get(op_port, "/healthz", "bearer " TOKEN); /* the scheme is case-insensitive */
	assert_int_equal(a.status, 200);
	answer_free(&a);

	/* Not on the public listener; the public one counts its requests too. */
	a = get(port, "/metrics", "Bearer " TOKEN);
	assert_int_equal(a.status, 404);
	answer_free(&a);
	a = get(port, "/readyz", NULL);
	answer_free(&a);

	a = scrape(op_port);
	print_message("%s", a.body);
	assert_string_equal(a.ctype, "text/plain; version=0.0.4; charset=utf-8");
	const char *t = a.body;
	/* admissions and refusals: 4 admitted, the waiters refused at the organisation level */
	assert_true(sample(t, "dispatcher_admitted_total") >= 4);
	assert_true(sample(t, "dispatcher_admission_requests_total") >=
		    sample(t, "dispatcher_admitted_total"));
	assert_true(sample(t, "dispatcher_refusals_total{level=\"organisation\"}") >= 1);
	assert_int_equal((int)sample(t, "dispatcher_refusals_total{level=\"system\"}"), 0);
	assert_true(sample(t, "dispatcher_fcfs_decisions_total") >= 0);
	assert_true(sample(t, "dispatcher_slot_wait_seconds_count") >= 4);
	assert_true(sample(t, "dispatcher_slot_wait_seconds_bucket{le=\"+Inf\"}") ==
		    sample(t, "dispatcher_slot_wait_seconds_count"));
	assert_true(sample(t, "dispatcher_slot_wait_seconds_sum") >= 0);
	assert_true(sample(t, "dispatcher_requeued_total") >= 0);
	/* dials */
	assert_int_equal((int)sample(t, "dispatcher_dial_attempts_total{class=\"ok\"}"), 4);
	assert_int_equal((int)sample(t, "dispatcher_dial_attempts_total{class=\"refused\"}"), 0);
	assert_int_equal((int)sample(t, "dispatcher_lanes{state=\"closed\"}"), 1);
	assert_int_equal((int)sample(t, "dispatcher_lanes{state=\"stopped\"}"), 0);
	/* the gate: redis mode, its slots in use at every level */
	assert_int_equal((int)sample(t, "dispatcher_gate_mode{mode=\"redis\"}"), 1);
	assert_int_equal((int)sample(t, "dispatcher_gate_mode{mode=\"postgres\"}"), 0);
	assert_true(sample(t, "dispatcher_gate_epoch") >= 1);
	assert_int_equal((int)sample(t, "dispatcher_gate_usable"), 1);
	assert_int_equal((int)sample(t, "dispatcher_system_slots_in_use"), 4);
	assert_int_equal((int)sample(t, "dispatcher_org_slots_in_use{org=\"o1\"}"), 4);
	assert_int_equal(
		(int)(sample(t, "dispatcher_campaign_slots_in_use{org=\"o1\",campaign=\"c1\"}") +
		      sample(t, "dispatcher_campaign_slots_in_use{org=\"o1\",campaign=\"c2\"}")),
		4);
	assert_int_equal((int)sample(t, "dispatcher_agent_slots_in_use{org=\"o1\",agent=\"a1\"}"),
			 4);
	assert_int_equal((int)sample(t, "dispatcher_slots_read_complete"), 1);
	assert_true(sample(t, "dispatcher_reconciler_corrections_total{action=\"released\"}") >= 0);
	/* HTTP requests by listener, route pattern, status */
	assert_int_equal(
		(int)sample(t, "dispatcher_http_requests_total{listener=\"operator\",route=\"/"
			       "metrics\",status=\"401\"}"),
		5);
	assert_true(sample(t, "dispatcher_http_requests_total{listener=\"operator\",route=\"/"
			      "metrics\",status=\"200\"}") >= 1);
	assert_int_equal(
		(int)sample(t, "dispatcher_http_requests_total{listener=\"operator\",route=\"/"
			       "healthz\",status=\"200\"}"),
		1);
	assert_int_equal((int)sample(t,
				     "dispatcher_http_requests_total{listener=\"public\",route=\"/"
				     "readyz\",status=\"200\"}"),
			 1);
	assert_int_equal(
		(int)sample(
			t, "dispatcher_http_requests_total{listener=\"public\",route=\"unmatched\","
			   "status=\"404\"}"),
		1);
	/* the rate limiter's family is there, empty until the API refuses */
	assert_non_null(strstr(t, "# TYPE dispatcher_ratelimit_refused_total counter\n"));
	answer_free(&a);

	kill(worker_pid, SIGTERM);
	assert_int_equal(fixture_wait(worker_pid), 0);
	worker_pid = 0;
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
		cmocka_unit_test_setup_teardown(metrics_on_operator_listener, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
