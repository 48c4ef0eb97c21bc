/* The operator's status page (issue 10 item 8) in headless Chromium (Debian's `chromium`): a
 * private PostgreSQL and Redis, the provider stub in hold mode, one `dispatcher run` with the
 * operator listener on a free port. Organisation "Acme Outbound" (4 lines) has three campaigns:
 * "Spring renewals" (no ceiling), "Winback" (max_concurrent_calls 1) and "Paused survey"
 * (paused, 20 pending contacts). Once the 4 calls are held and the page's samples show them, the
 * page is loaded with `chromium --headless=new --dump-dom` (its script fetches /status.json and
 * draws) and the DOM must show: the organisation and campaign names, each campaign's running
 * count equal to the gate's (GET /metrics: dispatcher_campaign_slots_in_use, one gate_read()),
 * the floor and effective limit and binding-limit sentence /status.json gives, "limited by the
 * campaign is paused" for the paused one with its 20 pending, the refusals by level (the
 * organisation's waiters), and an SVG chart with a polyline of several points per running
 * campaign. A screenshot is left in the build directory (tests/status-page.png, path printed).
 * Then a second worker with DISPATCHER_ADMIN_TOKEN: /status and /status.json answer 401 without
 * it and with an organisation's key, 200 with it; neither is routed on the public listener
 * (404, with or without a key).
 *
 * Skipped (77) only when chromium is not installed; .ci/bootstrap.sh installs it. */
#include "fixture.h"

#include <curl/curl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "api_test.h"
#include "worker_proc.h"

#define WAIT_MS 120000
#define TOKEN	"status-admin-token"

static struct embedded svc;
static PGconn *db;
static pid_t worker_pid, worker2_pid;
static struct wproc_stub stub;
static char chromium[512];

struct answer {
	long status;
	char *body;  /* malloc'ed */
	char *ctype; /* malloc'ed, "" when none */
};

/* GET http://127.0.0.1:port<path>, with "Authorization: <auth>" when auth is not NULL. */
static struct answer get(int port, const char *path, const char *auth)
{
	struct answer a = { 0 };
	char url[128], hdr[256];
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
	if (curl_easy_perform(c) == CURLE_OK) {
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

/* The value of a Prometheus sample (name and labels exactly as rendered); -1 when absent. */
static double sample(const char *text, const char *series)
{
	size_t n = strlen(series);

	for (const char *p = text; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, series, n) == 0 && p[n] == ' ')
			return strtod(p + n + 1, NULL);
	return -1;
}

static bool find_chromium(void)
{
	const char *env = getenv("CHROMIUM");
	const char *path = getenv("PATH");

	if (env && *env && access(env, X_OK) == 0) {
		snprintf(chromium, sizeof(chromium), "%s", env);
		return true;
	}
	for (const char *p = path ? path : "/usr/bin"; p && *p;) {
		const char *e = strchr(p, ':');
		size_t n = e ? (size_t)(e - p) : strlen(p);
		snprintf(chromium, sizeof(chromium), "%.*s/chromium", (int)n, p);
		if (n && access(chromium, X_OK) == 0)
			return true;
		p = e ? e + 1 : NULL;
	}
	return false;
}

/* Runs chromium headless on url with extra (e.g. "--dump-dom"), stdout to out (may be NULL).
 * --no-sandbox: the tests run as root in CI containers, where Chromium's sandbox cannot start;
 * a private profile directory per run, so parallel runs do not share one. */
static void run_chromium(const char *url, const char *extra, const char *out, const char *profile)
{
	char cmd[4096];

	snprintf(cmd, sizeof(cmd),
		 "timeout 120 '%s' --headless=new --no-sandbox --disable-gpu "
		 "--disable-dev-shm-usage "
		 "--no-first-run --disable-extensions --hide-scrollbars --user-data-dir='%s' "
		 "--virtual-time-budget=5000 --window-size=1280,900 %s '%s' > '%s' 2>'%s.err'",
		 chromium, profile, extra, url, out ? out : "/dev/null", profile);
	int rc = system(cmd);
	if (rc != 0) {
		char err[600];
		snprintf(err, sizeof(err), "tail -20 '%s.err' >&2", profile);
		if (system(err) != 0)
			print_message("(no chromium log)\n");
	}
	assert_int_equal(rc, 0);
}

static char *slurp(const char *path)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	assert_non_null(f);
	fseek(f, 0, SEEK_END);
	n = ftell(f);
	fseek(f, 0, SEEK_SET);
	buf = calloc(1, (size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	fclose(f);
	return buf;
}

/* The text of the first element after `from` whose opening tag contains `tag_part`, up to its
 * '<' (the element's own text), copied into out. */
static const char *cell(const char *from, const char *tag_part, char *out, size_t size)
{
	const char *p = strstr(from, tag_part), *gt, *lt;

	assert_non_null(p);
	gt = strchr(p, '>');
	assert_non_null(gt);
	lt = strchr(gt + 1, '<');
	assert_non_null(lt);
	snprintf(out, size, "%.*s", (int)(lt - gt - 1), gt + 1);
	return lt;
}

/* The DOM's row of campaign id (data-campaign attribute), or fails. */
static const char *row_of(const char *dom, const char *id)
{
	char key[128];
	const char *r;

	snprintf(key, sizeof(key), "<tr class=\"campaign\" data-campaign=\"%s\">", id);
	r = strstr(dom, key);
	if (!r)
		fail_msg("no row for campaign %s in the page", id);
	return r;
}

static const cJSON *json_campaign(const cJSON *org, const char *id)
{
	const cJSON *c;

	cJSON_ArrayForEach(c, cJSON_GetObjectItem(org, "campaigns"))
	{
		const cJSON *cid = cJSON_GetObjectItem(c, "id");
		if (cJSON_IsString(cid) && strcmp(cid->valuestring, id) == 0)
			return c;
	}
	fail_msg("no campaign %s in status.json", id);
	return NULL;
}

/* The number of non-null values of series org/campaign in status.json's history. */
static int history_points(const cJSON *j, const char *org, const char *campaign)
{
	const cJSON *s;
	int n = 0;

	cJSON_ArrayForEach(s, cJSON_GetObjectItem(cJSON_GetObjectItem(j, "history"), "series"))
	{
		const cJSON *o = cJSON_GetObjectItem(s, "org"),
			    *c = cJSON_GetObjectItem(s, "campaign");
		if (!cJSON_IsString(o) || !cJSON_IsString(c) || strcmp(o->valuestring, org) ||
		    strcmp(c->valuestring, campaign))
			continue;
		const cJSON *v;
		cJSON_ArrayForEach(v, cJSON_GetObjectItem(s, "values"))
		{
			if (cJSON_IsNumber(v) && v->valuedouble > 0)
				n++;
		}
	}
	return n;
}

static void seed(void)
{
	wproc_seed_small(db); /* o1 (4 lines), agent a1, c1 and c2 with 50 contacts each */
	PQclear(fixture_sql(db, "UPDATE organisations SET name = 'Acme Outbound' WHERE id = 'o1'"));
	PQclear(fixture_sql(db, "UPDATE campaigns SET name = 'Spring renewals' WHERE id = 'c1'"));
	PQclear(fixture_sql(db, "UPDATE campaigns SET name = 'Winback', max_concurrent_calls = 1"
				" WHERE id = 'c2'"));
	PQclear(fixture_sql(db, "INSERT INTO campaigns (id, org_id, agent_id, name, status) VALUES"
				" ('c3', 'o1', 'a1', 'Paused survey', 'paused')"));
	PQclear(fixture_sql(db, "INSERT INTO batches (id, org_id, campaign_id) VALUES"
				" ('b3', 'o1', 'c3')"));
	PQclear(fixture_sql(db, "INSERT INTO contacts (org_id, campaign_id, batch_id, phone)"
				" SELECT 'o1', 'c3', 'b3', '+1415556' || lpad(i::text, 4, '0')"
				" FROM generate_series(1, 20) i"));
}

static pid_t start_worker(const char *id, int port, int op_port, const char *token)
{
	char env[128];

	snprintf(env, sizeof(env), "127.0.0.1:%d", port);
	setenv("DISPATCHER_LISTEN", env, 1);
	snprintf(env, sizeof(env), "127.0.0.1:%d", op_port);
	setenv("DISPATCHER_OPERATOR_LISTEN", env, 1);
	if (token)
		setenv("DISPATCHER_ADMIN_TOKEN", token, 1);
	else
		unsetenv("DISPATCHER_ADMIN_TOKEN");
	setenv("DISPATCHER_WORKER_ID", id, 1);
	char *args[] = { "run", NULL };
	return fixture_spawn_dispatcher(args, NULL);
}

static void status_page_in_chromium(void **state)
{
	char env[128], url[128], dom_path[512], png[512], profile[512], buf[256];
	int port = wproc_free_port(), op_port = wproc_free_port();
	struct stub_config sc;
	struct answer a;
	cJSON *j = NULL;
	const char *root = getenv("DSP_BUILD_ROOT");

	(void)state;
	seed();
	stub_config_defaults(&sc);
	sc.hold = true;
	wproc_stub_start(&stub, &sc);
	snprintf(env, sizeof(env), "http://127.0.0.1:%d", stub.port);
	setenv("PROVIDER_URL", env, 1);
	setenv("PROVIDER_WEBHOOK_SECRET", "stub-secret", 1);
	setenv("DISPATCHER_LOG_LEVEL", getenv("TEST_LOG_LEVEL") ? getenv("TEST_LOG_LEVEL") : "warn",
	       1);
	setenv("DISPATCHER_RECONCILE_SECONDS", "1", 1);
	worker_pid = start_worker("st1", port, op_port, NULL);

	/* The 4 lines busy, the gate in redis mode, and the page's samples showing both running
	 * campaigns (asking /status.json makes the worker sample every second). */
	long long deadline = fixture_now_ms() + WAIT_MS;
	while (wproc_stat(&stub, "calls_placed") < 4 && fixture_now_ms() < deadline)
		fixture_sleep_ms(100);
	assert_int_equal((int)wproc_stat(&stub, "calls_placed"), 4);
	for (;;) {
		a = get(op_port, "/status.json", NULL);
		j = a.status == 200 ? cJSON_Parse(a.body) : NULL;
		answer_free(&a);
		if (j && cJSON_IsTrue(cJSON_GetObjectItem(j, "gate_usable")) &&
		    history_points(j, "o1", "c1") >= 3 && history_points(j, "o1", "c2") >= 3)
			break;
		cJSON_Delete(j);
		j = NULL;
		assert_true(fixture_now_ms() < deadline);
		fixture_sleep_ms(200);
	}
	cJSON_Delete(j);

	/* The page in Chromium: the DOM after its script ran, then a screenshot. */
	assert_non_null(root);
	snprintf(profile, sizeof(profile), "%s/tests/status-page-profile", root);
	snprintf(dom_path, sizeof(dom_path), "%s/tests/status-page.html", root);
	snprintf(png, sizeof(png), "%s/tests/status-page.png", root);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/status", op_port);
	unlink(png);
	run_chromium(url, "--dump-dom", dom_path, profile);
	char shot[600];
	snprintf(shot, sizeof(shot), "--screenshot='%s'", png);
	run_chromium(url, shot, NULL, profile);
	char rm[1200];
	snprintf(rm, sizeof(rm), "rm -rf '%s' '%s.err'", profile, profile);
	assert_int_equal(system(rm), 0); /* the browser's profile: nothing left but the files */

	/* What the gate says now (the calls are held: nothing moves) */
	a = get(op_port, "/metrics", NULL);
	assert_int_equal(a.status, 200);
	double run1 =
		sample(a.body, "dispatcher_campaign_slots_in_use{org=\"o1\",campaign=\"c1\"}");
	double run2 =
		sample(a.body, "dispatcher_campaign_slots_in_use{org=\"o1\",campaign=\"c2\"}");
	answer_free(&a);
	assert_int_equal((int)(run1 + run2), 4);
	assert_int_equal((int)run2, 1); /* its max_concurrent_calls */
	a = get(op_port, "/status.json", NULL);
	assert_int_equal(a.status, 200);
	assert_non_null(strstr(a.ctype, "application/json"));
	j = cJSON_Parse(a.body);
	answer_free(&a);
	assert_non_null(j);
	const cJSON *org = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "organisations"), 0);
	assert_non_null(org);
	assert_string_equal(cJSON_GetObjectItem(org, "id")->valuestring, "o1");

	char *dom = slurp(dom_path);
	print_message("DOM: %zu bytes (%s)\n", strlen(dom), dom_path);
	assert_non_null(strstr(dom, "Acme Outbound"));
	assert_non_null(strstr(dom, "<span id=\"error\"></span>")); /* no error, complete */
	/* it updates live: more than one answer of status.json drawn within the time budget */
	const char *polls = strstr(dom, "<body data-polls=\"");
	assert_non_null(polls);
	print_message("polls drawn: %d\n", atoi(polls + strlen("<body data-polls=\"")));
	assert_true(atoi(polls + strlen("<body data-polls=\"")) >= 2);
	const struct {
		const char *id, *name;
		double running;
	} want[] = { { "c1", "Spring renewals", run1 },
		     { "c2", "Winback", run2 },
		     { "c3", "Paused survey", 0 } };
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		const cJSON *c = json_campaign(org, want[i].id);
		const char *r = row_of(dom, want[i].id);
		char exp[256];

		r = cell(r, "class=\"name\"", buf, sizeof(buf));
		assert_string_equal(buf, want[i].name);
		r = cell(r, "class=\"n running\"", buf, sizeof(buf));
		assert_int_equal(atoi(buf), (int)want[i].running); /* the gate's count */
		assert_int_equal((int)cJSON_GetObjectItem(c, "running")->valuedouble,
				 (int)want[i].running);
		r = cell(r, "class=\"n floor\"", buf, sizeof(buf));
		assert_int_equal(atoi(buf), (int)cJSON_GetObjectItem(c, "floor")->valuedouble);
		r = cell(r, "class=\"n limit\"", buf, sizeof(buf));
		assert_int_equal(atoi(buf),
				 (int)cJSON_GetObjectItem(c, "effective_limit")->valuedouble);
		assert_true(cJSON_GetObjectItem(c, "effective_limit")->valuedouble >=
			    want[i].running);
		r = cell(r, "class=\"n pending\"", buf, sizeof(buf));
		if (i == 2)
			assert_string_equal(buf, "20");
		r = cell(r, "class=\"why\"", buf, sizeof(buf));
		snprintf(exp, sizeof(exp), "limited by %s",
			 cJSON_GetObjectItem(c, "limited_by")->valuestring);
		print_message("%s: running %d, %s\n", want[i].id, (int)want[i].running, buf);
		assert_string_equal(buf, exp);
		assert_true(strlen(buf) > strlen("limited by "));
		if (i == 2)
			assert_string_equal(buf, "limited by the campaign is paused");
	}
	/* refusals by level: the waiters were refused at the organisation level */
	const char *ref = strstr(dom, "data-level=\"organisation\"");
	assert_non_null(ref);
	cell(ref, ">", buf, sizeof(buf));
	/* the DOM's count is the one of its own fetch; the gate's minute may have rolled since */
	assert_true(atoi(buf) >= 0);
	assert_non_null(strstr(dom, "data-level=\"fair_share\""));
	assert_non_null(cJSON_GetObjectItem(cJSON_GetObjectItem(org, "refusals_last_minute"),
					    "organisation"));
	/* the chart: an SVG with a polyline per running campaign, several points each */
	assert_non_null(strstr(dom, "<svg id=\"chart\""));
	for (size_t i = 0; i < 2; i++) {
		char key[128];
		snprintf(key, sizeof(key), "data-series=\"o1/%s\" data-points=\"", want[i].id);
		const char *p = strstr(dom, key);
		if (!p)
			fail_msg("no chart line for %s", want[i].id);
		print_message("chart %s: %d points\n", want[i].id, atoi(p + strlen(key)));
		assert_true(atoi(p + strlen(key)) >= 3);
	}
	free(dom);
	cJSON_Delete(j);

	/* the screenshot */
	struct stat st;
	assert_int_equal(stat(png, &st), 0);
	assert_true(st.st_size > 10000);
	char *img = slurp(png);
	assert_memory_equal(img, "\x89PNG\r\n\x1a\n", 8);
	free(img);
	print_message("screenshot: %s (%lld bytes)\n", png, (long long)st.st_size);
	printf("status page screenshot: %s\n", png);

	/* Not on the public listener. */
	a = get(port, "/status", NULL);
	assert_int_equal(a.status, 404);
	answer_free(&a);
	a = get(port, "/status.json", NULL);
	assert_int_equal(a.status, 404);
	answer_free(&a);

	/* A second worker with the admin token: 401 without it and with an organisation's key. */
	char key[APIKEY_LEN + 1], auth[128];
	int port2 = wproc_free_port(), op2 = wproc_free_port();
	api_make_key(db, "o1", "status-test", key, NULL);
	worker2_pid = start_worker("st2", port2, op2, TOKEN);
	deadline = fixture_now_ms() + WAIT_MS;
	for (;;) {
		a = get(op2, "/status", "Bearer " TOKEN);
		if (a.status == 200)
			break;
		answer_free(&a);
		assert_true(fixture_now_ms() < deadline);
		fixture_sleep_ms(100);
	}
	assert_non_null(strstr(a.ctype, "text/html"));
	assert_non_null(strstr(a.body, "<svg id=\"chart\""));
	answer_free(&a);
	a = get(op2, "/status.json", "Bearer " TOKEN);
	assert_int_equal(a.status, 200);
	answer_free(&a);
	snprintf(auth, sizeof(auth), "Bearer %s", key);
	const char *paths[] = { "/status", "/status.json" };
	for (size_t i = 0; i < 2; i++) {
		const char *bad[] = { NULL, auth, "Bearer " TOKEN "x" };
		for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
			a = get(op2, paths[i], bad[k]);
			assert_int_equal(a.status, 401);
			assert_non_null(strstr(a.body, "\"error\":\"unauthorized\""));
			assert_null(strstr(a.body, "Acme"));
			answer_free(&a);
		}
		a = get(port2, paths[i], auth); /* the public listener: not routed */
		assert_int_equal(a.status, 404);
		answer_free(&a);
		a = get(port2, paths[i], "Bearer " TOKEN);
		assert_int_equal(a.status, 404);
		answer_free(&a);
	}

	kill(worker2_pid, SIGTERM);
	assert_int_equal(fixture_wait(worker2_pid), 0);
	worker2_pid = 0;
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
	if (worker2_pid > 0) {
		kill(worker2_pid, SIGKILL);
		waitpid(worker2_pid, NULL, 0);
	}
	wproc_stub_stop(&stub);
	PQfinish(db);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(status_page_in_chromium, setup, teardown),
	};

	if (!find_chromium()) {
		printf("SKIP: chromium is not installed (Debian's chromium package; "
		       ".ci/bootstrap.sh installs it): the status page test cannot run\n");
		return 77;
	}
	return cmocka_run_group_tests(tests, NULL, NULL);
}
