/* GET /api/v1/campaigns/{campaign_id}/capacity (SPEC C12, issue 10 item 2) against
 * `dispatcher run` (role api: it serves and refreshes, it dials nothing) on a private
 * PostgreSQL and Redis.
 *
 * The state is PostgreSQL's, as in production: live call rows and pending contacts are written
 * before the worker starts, so its initial build puts the calls in the gate and its refresher
 * installs the limits and floors from the backlog. Refusals are made by admissions from the
 * test's own gate connection (gate_harness.h) under the worker's generation.
 *
 *  - source_example: org_limit 20, A (campaign_limit 50) running 7, B (no ceiling) running 10,
 *    both with a large backlog -> A's answer is the source document's example, byte for byte
 *    on its fields; B (at its floor) has no floor estimate, A (below, with 3 lines free) 0 s.
 *  - not_found_and_unauthorized: another organisation's campaign and an unknown id 404, no key
 *    401.
 *  - floor_eta: E1 running 4 below its floor of 10 in a full pool, E2 running 16: E1's estimate
 *    is the mean line-holding time of E2's recent calls minus the age of E2's 6th-oldest call.
 *  - paused_and_enforcement_off: a paused campaign (available_now 0, limited_by paused);
 *    concurrency management off (running + free system slots).
 *  - refusals_move: refused admissions at the fair-share and organisation levels show in
 *    refusals_last_minute.
 *  - cached_meta_reads_no_campaign_row: a second request within the cache's second is answered
 *    while the test holds an ACCESS EXCLUSIVE lock on campaigns (README "Caching", SPEC P7).
 *  - changes_seen_through_the_cache: another campaign's pause, the campaign's own pause and
 *    resume, and its changed max_concurrent_calls show through a warm cache within the bound.
 *  - statements_prepared: the meta and user/me statements run as prepared (named) statements,
 *    as PostgreSQL's log of every execution shows.
 *  - postgres_fallback: Redis stopped (the fleet in postgres mode): the same example from the
 *    call rows, source "postgres", refusals null.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api_test.h"
#include "gate_harness.h"

static struct embedded svc;
static struct api_worker w;
static PGconn *db;
static char key_doc[APIKEY_LEN + 1], key_eta[APIKEY_LEN + 1], key_off[APIKEY_LEN + 1];
static char key_fresh[APIKEY_LEN + 1], key_cache[APIKEY_LEN + 1];

static const char DOC_EXAMPLE[] =
	"{\"running_now\":7,\"effective_limit\":10,\"limited_by\":\"a fair share of the "
	"organisation pool across 2 active campaigns\",\"campaign_limit\":50,\"org_limit\":20,"
	"\"available_now\":3,\"fair_share\":{\"active_campaigns\":2,\"guaranteed_floor\":10,"
	"\"reserved_for_other_campaigns\":10}}";

/* n live calls of campaign cmp (org's agent), the i-th (0-based) created age0 + i * step
 * seconds ago. */
static void live_calls(const char *org, const char *cmp, int n, int age0, int step)
{
	PQclear(api_sql(db,
			"INSERT INTO calls (id, org_id, campaign_id, agent_id, to_number, state,"
			" gate_mode, gate_epoch, provider_call_id, last_sequence, created_at,"
			" answered_at) SELECT gen_random_uuid(), '%s', '%s', '%s-agent',"
			" '+1555' || lpad(g::text, 7, '0'), 'live', 'redis',"
			" (SELECT gate_epoch FROM system_settings), 'p-' || gen_random_uuid(), 2,"
			" now() - make_interval(secs => %d + (g - 1) * %d),"
			" now() - make_interval(secs => %d + (g - 1) * %d) + interval '2 s'"
			" FROM generate_series(1, %d) g",
			org, cmp, org, age0, step, age0, step, n));
}

/* n calls of cmp that held their line `dur` seconds and ended `ago` seconds ago. */
static void ended_calls(const char *org, const char *cmp, int n, int dur, int ago)
{
	PQclear(api_sql(db,
			"INSERT INTO calls (id, org_id, campaign_id, agent_id, to_number, state,"
			" outcome, gate_mode, gate_epoch, created_at, ended_at)"
			" SELECT gen_random_uuid(), '%s', '%s', '%s-agent',"
			" '+1556' || lpad(g::text, 7, '0'), 'ended', 'completed', 'redis', 1,"
			" now() - make_interval(secs => %d), now() - make_interval(secs => %d)"
			" FROM generate_series(1, %d) g",
			org, cmp, org, dur + ago, ago, n));
}

/* A large backlog: n pending contacts due now. */
static void backlog(const char *org, const char *cmp, int n)
{
	PQclear(api_sql(db,
			"INSERT INTO batches (id, org_id, campaign_id, name, total_contacts)"
			" VALUES ('b-%s', '%s', '%s', 'b', %d)",
			cmp, org, cmp, n));
	PQclear(api_sql(
		db,
		"INSERT INTO contacts (org_id, campaign_id, batch_id, phone) SELECT '%s', "
		"'%s', 'b-%s', '+1557' || lpad(g::text, 7, '0') FROM generate_series(1, %d) g",
		org, cmp, cmp, n));
}

static int capacity(const char *key, const char *campaign, cJSON **out, struct raw_response *r)
{
	char path[160];
	int st;

	snprintf(path, sizeof(path), "/api/v1/campaigns/%s/capacity", campaign);
	st = api_request(w.port, "GET", path, key, NULL, NULL, r);
	*out = st == 200 ? api_body(r) : NULL;
	return st;
}

/* The source document's fields of an answer, in its order, as compact JSON. */
static char *doc_fields(const cJSON *j)
{
	static const char *const fields[] = { "running_now",	"effective_limit", "limited_by",
					      "campaign_limit", "org_limit",	   "available_now",
					      "fair_share" };
	cJSON *o = cJSON_CreateObject();

	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, fields[i]);
		assert_non_null(v);
		cJSON_AddItemToObject(o, fields[i], cJSON_Duplicate(v, true));
	}
	char *s = cJSON_PrintUnformatted(o);
	cJSON_Delete(o);
	return s;
}

/* Polls until campaign's answer has the floor wanted installed (the refresher's first install
 * after the worker's start), then returns that answer. */
static cJSON *capacity_when_floor(const char *key, const char *campaign, int floor)
{
	long long deadline = fixture_now_ms() + API_WAIT_MS;

	for (;;) {
		struct raw_response r;
		cJSON *j;
		int st = capacity(key, campaign, &j, &r);

		raw_response_free(&r);
		if (st == 200 && (int)api_num(j, "fair_share.guaranteed_floor") == floor &&
		    strcmp(api_str(j, "source"), "gate") == 0)
			return j;
		cJSON_Delete(j);
		assert_true(fixture_now_ms() < deadline);
		fixture_sleep_ms(100);
	}
}

/* The item at a dotted path, or NULL. */
static const cJSON *api_item(const cJSON *j, const char *path)
{
	char buf[128], *save = NULL;
	const cJSON *v = j;

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *t = strtok_r(buf, ".", &save); t && v; t = strtok_r(NULL, ".", &save))
		v = cJSON_GetObjectItemCaseSensitive(v, t);
	return v;
}

/* Polls until campaign's answer has `want` (compact JSON) at path, within META_CACHE_TTL_MS (README "Caching")
 * plus CACHE_SLACK_MS for a loaded machine, and returns that answer. */
#define CACHE_TTL_MS   1000 /* META_CACHE_TTL_MS (dispatcher/api/meta_cache.h) */
#define CACHE_SLACK_MS 4000
static cJSON *capacity_until_ms(const char *key, const char *campaign, const char *path,
				const char *want, long long bound_ms)
{
	long long t0 = fixture_now_ms();

	for (;;) {
		struct raw_response r;
		cJSON *j;
		int st = capacity(key, campaign, &j, &r);
		bool seen = false;

		if (st == 200) {
			char *v = cJSON_PrintUnformatted(api_item(j, path));
			seen = v && strcmp(v, want) == 0;
			free(v);
		}
		if (seen) {
			print_message("%s %s = %s after %lld ms: %s\n", campaign, path, want,
				      fixture_now_ms() - t0, r.body);
			raw_response_free(&r);
			return j;
		}
		raw_response_free(&r);
		cJSON_Delete(j);
		assert_true(fixture_now_ms() - t0 < bound_ms);
		fixture_sleep_ms(20);
	}
}

static cJSON *capacity_until(const char *key, const char *campaign, const char *path,
			     const char *want)
{
	return capacity_until_ms(key, campaign, path, want, CACHE_TTL_MS + CACHE_SLACK_MS);
}

static void source_example(void **state)
{
	(void)state;
	cJSON *j = capacity_when_floor(key_doc, "A", 10);
	char *s = doc_fields(j);
	char *all = cJSON_PrintUnformatted(j);

	print_message("A: %s\n", all);
	assert_string_equal(s, DOC_EXAMPLE);
	assert_string_equal(api_str(j, "source"), "gate");
	assert_string_equal(api_str(j, "limited_by_level"), "fair_share");
	/* Below its floor with the 3 lines it is short of free now: 0 s. */
	assert_int_equal((int)api_num(j, "floor_eta.estimated_seconds"), 0);
	assert_int_equal((int)api_num(j, "floor_eta.lines_short"), 3);
	assert_non_null(strstr(api_str(j, "floor_eta.basis"), "estimate"));
	assert_int_equal((int)api_num(j, "refusals_last_minute.fair_share"), 0);
	free(s);
	free(all);
	cJSON_Delete(j);

	/* B: no ceiling (null), at its floor: no estimate. */
	struct raw_response r;
	assert_int_equal(capacity(key_doc, "B", &j, &r), 200);
	print_message("B: %s\n", r.body);
	raw_response_free(&r);
	assert_int_equal((int)api_num(j, "running_now"), 10);
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "campaign_limit")));
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "floor_eta")));
	assert_int_equal((int)api_num(j, "available_now"), 0);
	cJSON_Delete(j);
}

static void not_found_and_unauthorized(void **state)
{
	struct raw_response r;
	cJSON *j;

	(void)state;
	assert_int_equal(capacity(key_doc, "E1", &j, &r), 404); /* org-eta's */
	assert_non_null(strstr(r.body, "\"error\":\"not_found\""));
	raw_response_free(&r);
	assert_int_equal(capacity(key_doc, "no-such-campaign", &j, &r), 404);
	raw_response_free(&r);
	assert_int_equal(capacity(key_doc, "bad.id", &j, &r), 404);
	raw_response_free(&r);
	assert_int_equal(capacity(key_eta, "A", &j, &r), 404);
	raw_response_free(&r);
	assert_int_equal(capacity(NULL, "A", &j, &r), 401);
	raw_response_free(&r);
}

static void floor_eta(void **state)
{
	struct raw_response r;
	cJSON *j;

	(void)state;
	j = capacity_when_floor(key_eta, "E1", 10);
	char *all = cJSON_PrintUnformatted(j);
	print_message("E1: %s\n", all);
	free(all);
	assert_int_equal((int)api_num(j, "running_now"), 4);
	assert_int_equal((int)api_num(j, "available_now"), 0); /* 20 of 20 lines live */
	assert_int_equal((int)api_num(j, "floor_eta.lines_short"), 6);
	assert_int_equal((int)api_num(j, "floor_eta.lines_to_be_freed"), 6);
	assert_true(api_num(j, "floor_eta.mean_call_seconds") == 300.0);
	/* E2's calls are 5, 15, ..., 155 s old at the insert: its 6th-oldest 105 s, plus the
	 * seconds since. 300 - 105 = 195 at most. */
	int eta = (int)api_num(j, "floor_eta.estimated_seconds");
	assert_true(eta <= 195 && eta >= 195 - API_WAIT_MS / 1000);
	assert_non_null(strstr(api_str(j, "floor_eta.basis"), "estimate"));
	cJSON_Delete(j);

	assert_int_equal(capacity(key_eta, "E2", &j, &r), 200);
	raw_response_free(&r);
	assert_int_equal((int)api_num(j, "running_now"), 16);
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "floor_eta")));
	cJSON_Delete(j);
}

static void paused_and_enforcement_off(void **state)
{
	struct raw_response r;
	cJSON *j;

	(void)state;
	assert_int_equal(capacity(key_off, "P1", &j, &r), 200);
	print_message("P1: %s\n", r.body);
	raw_response_free(&r);
	assert_int_equal((int)api_num(j, "running_now"), 3);
	assert_int_equal((int)api_num(j, "available_now"), 0);
	assert_int_equal((int)api_num(j, "effective_limit"), 3);
	assert_string_equal(api_str(j, "limited_by"), "the campaign is paused");
	assert_string_equal(api_str(j, "limited_by_level"), "paused");
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "floor_eta")));
	cJSON_Delete(j);

	/* org-off has concurrency management off: running + the system's free slots. */
	PGresult *res = api_sql(db, "SELECT (SELECT global_limit FROM system_settings) - "
				    "(SELECT count(*) FROM calls WHERE state = 'live')");
	int free_sys = atoi(PQgetvalue(res, 0, 0));
	PQclear(res);
	assert_int_equal(capacity(key_off, "F1", &j, &r), 200);
	print_message("F1: %s\n", r.body);
	raw_response_free(&r);
	assert_int_equal((int)api_num(j, "running_now"), 2);
	assert_int_equal((int)api_num(j, "available_now"), free_sys);
	assert_int_equal((int)api_num(j, "effective_limit"), 2 + free_sys);
	assert_string_equal(api_str(j, "limited_by"),
			    "concurrency management is off for this organisation");
	assert_string_equal(api_str(j, "limited_by_level"), "enforcement_off");
	cJSON_Delete(j);
}

static void refusals_move(void **state)
{
	struct gate_env env;
	char gen[GATE_GEN_MAX + 1] = "";
	struct raw_response r;
	cJSON *j;

	(void)state;
	assert_int_equal(capacity(key_doc, "A", &j, &r), 200);
	raw_response_free(&r);
	assert_int_equal((int)api_num(j, "refusals_last_minute.fair_share"), 0);
	assert_string_equal(api_str(j, "refusals_last_minute.scope"), "organisation");
	cJSON_Delete(j);

	genv_open(&env, svc.redis_url, "cap-test", true);
	genv_cmd(&env, gen, sizeof(gen), "GET", GATE_SYS_GEN_KEY, NULL);
	assert_true(gen[0]);
	assert_int_equal(gate_set_generation(env.g, gen), 0);
	/* B at its floor, A short of 3 on 17 of 20: B is refused at the fair-share level. */
	struct admit_out o =
		genv_admit(&env, "org-doc", "00000000-0000-4000-8000-000000000001", "B");
	assert_int_equal(o.status, 0);
	assert_int_equal(o.r.outcome, GATE_REFUSED);
	o = genv_admit(&env, "org-doc", "00000000-0000-4000-8000-000000000002", "B");
	assert_int_equal(o.r.outcome, GATE_REFUSED);
	/* org-eta: 20 of 20: refused at the organisation level. */
	o = genv_admit(&env, "org-eta", "00000000-0000-4000-8000-000000000003", "E1");
	assert_int_equal(o.status, 0);
	assert_int_equal(o.r.outcome, GATE_REFUSED);
	genv_close(&env);

	/* The refusals are read at most once a second per organisation (README "Caching"). */
	j = capacity_until(key_doc, "A", "refusals_last_minute.fair_share", "2");
	assert_int_equal((int)api_num(j, "refusals_last_minute.organisation"), 0);
	cJSON_Delete(j);
	j = capacity_until(key_eta, "E2", "refusals_last_minute.organisation", "1");
	assert_int_equal((int)api_num(j, "refusals_last_minute.organisation"), 1);
	assert_int_equal((int)api_num(j, "refusals_last_minute.fair_share"), 0);
	assert_int_equal((int)api_num(j, "refusals_last_minute.system"), 0);
	assert_int_equal((int)api_num(j, "refusals_last_minute.agent"), 0);
	assert_int_equal((int)api_num(j, "refusals_last_minute.campaign"), 0);
	cJSON_Delete(j);
}

static void postgres_fallback(void **state)
{
	struct raw_response r;
	cJSON *j = NULL;

	(void)state;
	assert_int_equal(embedded_redis_stop(&svc), 0);
	long long deadline = fixture_now_ms() + API_WAIT_MS;
	for (;;) { /* the first request may still meet the connection before its down */
		assert_int_equal(capacity(key_doc, "A", &j, &r), 200);
		raw_response_free(&r);
		if (strcmp(api_str(j, "source"), "postgres") == 0)
			break;
		cJSON_Delete(j);
		assert_true(fixture_now_ms() < deadline);
		fixture_sleep_ms(100);
	}
	char *all = cJSON_PrintUnformatted(j), *s = doc_fields(j);
	print_message("A from PostgreSQL: %s\n", all);
	assert_string_equal(s, DOC_EXAMPLE);
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "refusals_last_minute")));
	free(all);
	free(s);
	cJSON_Delete(j);
	assert_int_equal(embedded_redis_start(&svc), 0);
}

/* One capacity request whose answer is awaited timeout_ms at most: the status, or -1 when none
 * came in time (r is then empty). */
static int capacity_within(const char *key, const char *campaign, int timeout_ms,
			   struct raw_response *r)
{
	char req[512];
	int fd = raw_connect(w.port, timeout_ms), st = -1;

	assert_true(fd >= 0);
	snprintf(req, sizeof(req),
		 "GET /api/v1/campaigns/%s/capacity HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
		 "Authorization: Bearer %s\r\n\r\n",
		 campaign, key);
	assert_int_equal(raw_send_str(fd, req), 0);
	memset(r, 0, sizeof(*r));
	if (raw_read_response(fd, r) == 0)
		st = r->status;
	close(fd);
	return st;
}

/* The campaign meta is cached (README "Caching"): a second request within the cache's
 * lifetime reads no campaign row. Checked by answering it while the test holds an ACCESS
 * EXCLUSIVE lock on campaigns, which any read of the table waits behind: the old code (one
 * PostgreSQL read per request) cannot answer until the lock goes. A try whose cache entry
 * expired before the locked request (a loaded machine) waits too: tried again, 5 times. */
static void cached_meta_reads_no_campaign_row(void **state)
{
	(void)state;
	cJSON *j = capacity_when_floor(key_doc, "A", 10), *k = NULL;
	char *want = doc_fields(j);
	int st = -1;

	cJSON_Delete(j);
	for (int attempt = 0; attempt < 5 && st != 200; attempt++) {
		struct raw_response r;

		assert_int_equal(capacity(key_doc, "A", &j, &r), 200); /* fills the cache */
		raw_response_free(&r);
		cJSON_Delete(j);
		PQclear(api_sql(db, "BEGIN"));
		PQclear(api_sql(db, "LOCK TABLE campaigns IN ACCESS EXCLUSIVE MODE"));
		st = capacity_within(key_doc, "A", 3000, &r);
		print_message("attempt %d, campaigns locked: %d %s\n", attempt, st,
			      r.body ? r.body : "(no answer in 3 s)");
		if (st == 200)
			k = api_body(&r);
		raw_response_free(&r);
		PQclear(api_sql(db, "ROLLBACK"));
	}
	assert_int_equal(st, 200);
	char *got = doc_fields(k);
	assert_string_equal(got, want);
	free(got);
	free(want);
	cJSON_Delete(k);
}

/* What the cache may hold stale is seen within its bound (README "Caching"): a pause of another
 * campaign of the organisation (dsp_dispatch drops the organisation's entries), the campaign's
 * own pause and resume, and a change of its limit (that one from the gate, once the refresher
 * installs it: the cache holds no limit). */
static void changes_seen_through_the_cache(void **state)
{
	cJSON *j;

	(void)state;
	j = capacity_when_floor(key_cache, "C1", 10);
	assert_int_equal((int)api_num(j, "fair_share.active_campaigns"), 2);
	cJSON_Delete(j);
	j = capacity_until(key_cache, "C1", "fair_share.active_campaigns", "2"); /* cached */
	cJSON_Delete(j);

	PQclear(api_sql(db, "UPDATE campaigns SET status = 'paused' WHERE id = 'C2'"));
	j = capacity_until(key_cache, "C1", "fair_share.active_campaigns", "1");
	cJSON_Delete(j);
	PQclear(api_sql(db, "UPDATE campaigns SET status = 'paused' WHERE id = 'C1'"));
	j = capacity_until(key_cache, "C1", "limited_by_level", "\"paused\"");
	assert_int_equal((int)api_num(j, "available_now"), 0);
	cJSON_Delete(j);
	PQclear(api_sql(db, "UPDATE campaigns SET status = 'active' WHERE id IN ('C1', 'C2')"));
	j = capacity_until(key_cache, "C1", "fair_share.active_campaigns", "2");
	assert_string_not_equal(api_str(j, "limited_by_level"), "paused");
	cJSON_Delete(j);

	PQclear(api_sql(db, "UPDATE campaigns SET max_concurrent_calls = 4 WHERE id = 'C1'"));
	j = capacity_until_ms(key_cache, "C1", "campaign_limit", "4", API_WAIT_MS);
	cJSON_Delete(j);
}

/* The capacity meta and user/me's statements are prepared once per pool connection (named
 * dsp_<n> by pg_stmts_add()), not sent as text and planned on every call: with
 * log_min_duration_statement at 0 PostgreSQL logs every execution with its statement's name,
 * "<unnamed>" for a text query. Capacity requests for B until its meta is read (at most a
 * second: the cache), user/me requests each read. */
static void statements_prepared(void **state)
{
	static const char META[] = "SELECT c.id, c.status::text, c.max_concurrent_calls";
	static const char ME[] = "SELECT o.wallet_currency, o.wallet_balance";
	long long deadline = fixture_now_ms() + API_WAIT_MS;
	char path[256];
	int meta = 0, me = 0, unnamed = 0;

	(void)state;
	PQclear(api_sql(db, "ALTER SYSTEM SET log_min_duration_statement = 0"));
	PQclear(api_sql(db, "SELECT pg_reload_conf()"));
	snprintf(path, sizeof(path), "%s/postgres.log", svc.dir);
	while (!meta || !me) {
		struct raw_response r;
		cJSON *j;
		char *line = NULL;
		size_t cap = 0;

		assert_int_equal(capacity(key_doc, "B", &j, &r), 200);
		raw_response_free(&r);
		cJSON_Delete(j);
		assert_int_equal(api_request(w.port, "GET", "/v2/user/me", key_doc, NULL, NULL, &r),
				 200);
		raw_response_free(&r);
		FILE *f = fopen(path, "r");
		assert_non_null(f);
		meta = me = unnamed = 0;
		while (getline(&line, &cap, f) > 0) {
			if (!strstr(line, "execute ") || (!strstr(line, META) && !strstr(line, ME)))
				continue;
			meta += strstr(line, META) != NULL;
			me += strstr(line, ME) != NULL;
			if (strstr(line, "execute <unnamed>")) {
				if (!unnamed++)
					print_message("text query: %.200s", line);
			}
		}
		free(line);
		fclose(f);
		assert_true(fixture_now_ms() < deadline);
		fixture_sleep_ms(100);
	}
	print_message("logged executions: %d of the meta, %d of user/me, %d unnamed\n", meta, me,
		      unnamed);
	PQclear(api_sql(db, "ALTER SYSTEM RESET log_min_duration_statement"));
	PQclear(api_sql(db, "SELECT pg_reload_conf()"));
	assert_int_equal(unnamed, 0);
}

/* A fresh organisation (one campaign, no call, no contact): its agent holds no call, so the
 * gate's view lists no agent; the answer is still computed (it was a 500). */
static void fresh_org(void **state)
{
	long long deadline = fixture_now_ms() + API_WAIT_MS;
	struct raw_response r;
	cJSON *j;

	(void)state;
	for (;;) {
		int st = capacity(key_fresh, "FR1", &j, &r);
		if (st == 200 && strcmp(api_str(j, "source"), "gate") == 0)
			break;
		print_message("fresh: %d %s\n", st, r.body);
		assert_int_not_equal(st, 500);
		raw_response_free(&r);
		if (st == 200)
			cJSON_Delete(j);
		assert_true(fixture_now_ms() < deadline);
		fixture_sleep_ms(200);
	}
	print_message("fresh: %s\n", r.body);
	raw_response_free(&r);
	assert_int_equal((int)api_num(j, "running_now"), 0);
	assert_int_equal((int)api_num(j, "org_limit"), 20);
	assert_int_equal((int)api_num(j, "available_now"), 20);
	assert_int_equal((int)api_num(j, "effective_limit"), 20);
	cJSON_Delete(j);
}

static int setup(void **state)
{
	(void)state;
	fixture_start(&svc, true, true, false, true);
	db = fixture_pg(&svc);

	api_make_org(db, "org-doc", 20, NULL);
	PQclear(api_sql(db,
			"INSERT INTO campaigns (id, org_id, agent_id, name, "
			"max_concurrent_calls) VALUES ('A', 'org-doc', 'org-doc-agent', 'A', 50),"
			" ('B', 'org-doc', 'org-doc-agent', 'B', NULL)"));
	live_calls("org-doc", "A", 7, 5, 10);
	live_calls("org-doc", "B", 10, 5, 10);
	backlog("org-doc", "A", 500);
	backlog("org-doc", "B", 500);
	api_make_key(db, "org-doc", "doc", key_doc, NULL);

	api_make_org(db, "org-eta", 20, "E1", "E2", NULL);
	live_calls("org-eta", "E1", 4, 5, 10);
	live_calls("org-eta", "E2", 16, 5, 10);
	ended_calls("org-eta", "E2", 8, 300, 120);
	ended_calls("org-eta", "E2", 3, 50, 3600); /* outside the 15-minute window */
	backlog("org-eta", "E1", 500);
	backlog("org-eta", "E2", 500);
	api_make_key(db, "org-eta", "eta", key_eta, NULL);

	api_make_org(db, "org-off", 10, "P1", "F1", NULL);
	PQclear(api_sql(db, "UPDATE campaigns SET status = 'paused' WHERE id = 'P1'"));
	PQclear(api_sql(db, "UPDATE organisations SET concurrency_management_enabled = false "
			    "WHERE id = 'org-off'"));
	live_calls("org-off", "P1", 3, 5, 10);
	live_calls("org-off", "F1", 2, 5, 10);
	backlog("org-off", "F1", 50);
	api_make_key(db, "org-off", "off", key_off, NULL);

	api_make_org(db, "org-cache", 20, "C1", "C2", NULL);
	live_calls("org-cache", "C1", 2, 5, 10);
	backlog("org-cache", "C1", 500);
	backlog("org-cache", "C2", 500);
	api_make_key(db, "org-cache", "cache", key_cache, NULL);

	api_make_org(db, "org-fresh", 20, "FR1", NULL);
	api_make_key(db, "org-fresh", "fresh", key_fresh, NULL);

	setenv("DISPATCHER_ROLE", "api", 1); /* serves and refreshes; dials nothing */
	api_worker_start(&w, "api-cap");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	api_worker_kill(&w);
	PQfinish(db);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(source_example),
		cmocka_unit_test(not_found_and_unauthorized),
		cmocka_unit_test(floor_eta),
		cmocka_unit_test(paused_and_enforcement_off),
		cmocka_unit_test(refusals_move),
		cmocka_unit_test(cached_meta_reads_no_campaign_row),
		cmocka_unit_test(changes_seen_through_the_cache),
		cmocka_unit_test(statements_prepared),
		cmocka_unit_test(postgres_fallback),
		cmocka_unit_test(fresh_org),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
