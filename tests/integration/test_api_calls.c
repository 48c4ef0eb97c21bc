/* The calls routes (issue 10 item 5, SPEC C10) against `dispatcher run` on a private PostgreSQL
 * and Redis, dialling the provider stub in hold mode (calls stay live until the test ends them
 * at the stub). Organisations: "oa" (1 line), "ob" (5 lines, nothing running), "ol" (calls
 * written by SQL, for the lists).
 *   post_free_line_then_get  a free line: 201 with the call (normalised number, the agent's
 *                            caller id), readable by GET /v2/calls/{id}, the stub has it;
 *   post_full_org_429        oa's line busy: 429 after about 5 s, the exact C10 body,
 *                            Retry-After: 5, no waiter left in the gate;
 *   post_freed_line_placed   oa's line busy, the call ended at the stub while the dial waits:
 *                            201 within the wait;
 *   post_bad_bodies          trailing bytes, a duplicate key, a NUL, wrong types, bad E.164,
 *                            missing and unknown fields: 400/422 naming the field, no dial;
 *                            another organisation's or an unknown agent: 404;
 *   get_one_not_found        another organisation's call, a random uuid, not a uuid: 404;
 *   post_client_gone         a client gone mid-wait: the dial waits out its 5 s (the server
 *                            has no callback for it), nothing placed, the worker serves on;
 *   list_pages_and_filters   newest first, keyset pages (ties broken by id), limit at, below
 *                            and above its bounds, the filters, bad parameters: 400;
 *   drain_answers_503        SIGTERM while a dial waits: 503, Retry-After: 1, exit 0.
 * Every answer from the API carries X-RateLimit-Limit/-Remaining/-Reset (checked in req()). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api_test.h"
#include "worker_proc.h"

#include <hiredis/hiredis.h>

static struct embedded svc;
static struct api_worker w1;
static struct wproc_stub stub;
static PGconn *db;
static char ka[APIKEY_LEN + 1], kb[APIKEY_LEN + 1], kl[APIKEY_LEN + 1];
static char first_call[40]; /* oa's call placed by the first test (holds its only line) */

/* The rate-limit headers of every /v2 answer; limit is the bucket's ("" : not checked). */
static void limit_headers(const struct raw_response *r, const char *limit)
{
	char v[32];

	if (!raw_header(r, "X-RateLimit-Limit", v, sizeof(v)))
		fail_msg("no X-RateLimit-Limit on %d %s", r->status, r->body);
	if (limit[0])
		assert_string_equal(v, limit);
	assert_non_null(raw_header(r, "X-RateLimit-Remaining", v, sizeof(v)));
	assert_non_null(raw_header(r, "X-RateLimit-Reset", v, sizeof(v)));
}

/* One request with key; checks the status and the rate-limit headers; fills *r. */
static void req(const char *method, const char *path, const char *key, const char *body, int status,
		struct raw_response *r)
{
	int st = api_request(w1.port, method, path, key, NULL, body, r);

	if (st != status)
		fail_msg("%s %s %s: %d %s (wanted %d)", method, path, body ? body : "", st, r->body,
			 status);
	limit_headers(r, strcmp(method, "POST") ? "602" : "601");
}

__attribute__((format(printf, 1, 2))) static long long sql_int(const char *fmt, ...)
{
	char q[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(q, sizeof(q), fmt, ap);
	va_end(ap);
	return wproc_sql_int(db, q);
}

/* HLEN of the org's waiting direct dials (k) in the gate. */
static long long waiting(const char *org)
{
	redisContext *rc = redisConnectUnix(svc.redis_url + strlen("unix://"));
	long long k;

	assert_true(rc && !rc->err);
	redisReply *rep = redisCommand(rc, "HLEN dsp:v1:{o:%s}:wait", org);
	assert_true(rep && rep->type == REDIS_REPLY_INTEGER);
	k = rep->integer;
	freeReplyObject(rep);
	redisFree(rc);
	return k;
}

static void wait_stub(const char *path, double at_least)
{
	long long deadline = fixture_now_ms() + API_WAIT_MS;

	while (wproc_stat(&stub, path) < at_least) {
		assert_true(fixture_now_ms() < deadline);
		fixture_sleep_ms(50);
	}
}

static void post_free_line_then_get(void **state)
{
	struct raw_response r;
	char path[96];

	(void)state;
	req("POST", "/v2/calls", ka,
	    "{\"agent_id\":\"oa-agent\",\"to_number\":\"+1 (415) 555-0100\"}", 201, &r);
	print_message("201: %s\n", r.body);
	cJSON *j = api_body(&r);
	snprintf(first_call, sizeof(first_call), "%s", api_str(j, "id"));
	assert_int_equal(strlen(first_call), 36);
	const char *st = api_str(j, "state");
	assert_true(!strcmp(st, "dialing") || !strcmp(st, "live"));
	assert_string_equal(api_str(j, "agent_id"), "oa-agent");
	assert_string_equal(api_str(j, "to_number"), "+14155550100");	/* normalised */
	assert_string_equal(api_str(j, "from_number"), "+15550000001"); /* the agent's */
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "direct")));
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "campaign_id")));
	assert_int_equal(strlen(api_str(j, "created_at")), 24); /* 2025-01-01T00:00:00.000Z */
	assert_true(api_num(j, "waited_ms") < 5000);
	cJSON_Delete(j);
	raw_response_free(&r);
	assert_int_equal(sql_int("SELECT count(*) FROM calls WHERE id = '%s' AND org_id = 'oa' AND "
				 "campaign_id IS NULL AND to_number = '+14155550100'",
				 first_call),
			 1);
	wait_stub("orgs.oa.live", 1); /* the provider has it, held */

	snprintf(path, sizeof(path), "/v2/calls/%s", first_call);
	req("GET", path, ka, NULL, 200, &r);
	j = api_body(&r);
	assert_string_equal(api_str(j, "id"), first_call);
	assert_string_equal(api_str(j, "to_number"), "+14155550100");
	assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "ended_at")));
	cJSON_Delete(j);
	raw_response_free(&r);
}

static void post_full_org_429(void **state)
{
	struct raw_response r;
	char v[16];

	(void)state;
	long long t0 = fixture_now_ms();
	req("POST", "/v2/calls", ka, "{\"agent_id\":\"oa-agent\",\"to_number\":\"+14155550101\"}",
	    429, &r);
	long long took = fixture_now_ms() - t0;
	print_message("full org: 429 after %lld ms: %s\n", took, r.body);
	assert_true(took >= 4500 && took < 8000);
	assert_string_equal(r.body, "{\"error\":1300,\"message\":\"Account concurrency limit "
				    "reached (1 of 1 lines in use).\"}");
	assert_non_null(raw_header(&r, "Retry-After", v, sizeof(v)));
	assert_string_equal(v, "5");
	/* a concurrency 429, not a rate-limit one: the request quota has room */
	assert_non_null(raw_header(&r, "X-RateLimit-Remaining", v, sizeof(v)));
	assert_true(atoi(v) > 0);
	raw_response_free(&r);
	assert_int_equal(waiting("oa"), 0); /* withdrawn */
	assert_int_equal(sql_int("SELECT count(*) FROM calls WHERE org_id = '%s'", "oa"), 1);
}

static void post_freed_line_placed(void **state)
{
	const char *body = "{\"agent_id\":\"oa-agent\",\"to_number\":\"+14155550102\","
			   "\"from_number\":\"+14155550999\"}";
	char head[512], end[96];
	struct raw_response r;

	(void)state;
	int fd = raw_connect(w1.port, API_WAIT_MS);
	assert_true(fd >= 0);
	snprintf(head, sizeof(head),
		 "POST /v2/calls HTTP/1.1\r\nHost: t\r\nConnection: close\r\nAuthorization: "
		 "Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
		 ka, strlen(body));
	long long t0 = fixture_now_ms();
	assert_int_equal(raw_send_str(fd, head), 0);
	assert_int_equal(raw_send_str(fd, body), 0);
	/* registered as a waiting direct dial, then oa's line frees at the provider */
	while (waiting("oa") < 1) {
		assert_true(fixture_now_ms() - t0 < 4000);
		fixture_sleep_ms(20);
	}
	long long t1 = fixture_now_ms();
	snprintf(end, sizeof(end), "{\"idempotency_key\":\"%s\"}", first_call);
	free(wproc_stub_http(&stub, "/control/end", end));
	assert_int_equal(raw_read_response(fd, &r), 0);
	close(fd);
	long long t2 = fixture_now_ms();
	print_message("freed line: waited %lld ms, placed %lld ms after the end: %s\n", t1 - t0,
		      t2 - t1, r.body);
	assert_int_equal(r.status, 201);
	limit_headers(&r, "601");
	cJSON *j = api_body(&r);
	assert_string_not_equal(api_str(j, "id"), first_call);
	assert_string_equal(api_str(j, "from_number"), "+14155550999"); /* the body's */
	assert_string_equal(api_str(j, "to_number"), "+14155550102");
	cJSON_Delete(j);
	raw_response_free(&r);
	assert_true(t2 - t0 < 5000); /* within the wait, not after it */
	assert_int_equal(waiting("oa"), 0);
}

/* Sends a POST /v2/calls for oa without reading its answer; returns the socket. */
static int post_oa_async(const char *to)
{
	char head[512], body[128];
	int fd = raw_connect(w1.port, API_WAIT_MS);

	assert_true(fd >= 0);
	snprintf(body, sizeof(body), "{\"agent_id\":\"oa-agent\",\"to_number\":\"%s\"}", to);
	snprintf(head, sizeof(head),
		 "POST /v2/calls HTTP/1.1\r\nHost: t\r\nConnection: close\r\nAuthorization: "
		 "Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
		 ka, strlen(body));
	assert_int_equal(raw_send_str(fd, head), 0);
	assert_int_equal(raw_send_str(fd, body), 0);
	return fd;
}

static void until_waiting(const char *org, long long k)
{
	long long deadline = fixture_now_ms() + API_WAIT_MS;

	while (waiting(org) != k) {
		assert_true(fixture_now_ms() < deadline);
		fixture_sleep_ms(20);
	}
}

/* The server does not tell a handler that its client left (README "Calls"): the dial waits out
 * its 5 s and is withdrawn then; no call is placed for a full org, the worker serves on. */
static void post_client_gone(void **state)
{
	struct raw_response r;

	(void)state;
	long long t0 = fixture_now_ms();
	int fd = post_oa_async("+14155550104");
	until_waiting("oa", 1);
	raw_close_reset(fd);
	until_waiting("oa", 0);
	long long took = fixture_now_ms() - t0;
	print_message("client gone: the waiter left after %lld ms\n", took);
	assert_true(took >= 4500);
	assert_int_equal(sql_int("SELECT count(*) FROM calls WHERE org_id = 'oa' AND to_number = "
				 "'%s'",
				 "+14155550104"),
			 0);
	req("GET", "/v2/calls?limit=1", ka, NULL, 200, &r);
	raw_response_free(&r);
}

static void post_bad_bodies(void **state)
{
	static const struct {
		const char *body;
		int status;
		const char *says;
	} cases[] = {
		{ "{\"agent_id\":\"ob-agent\",\"to_number\":\"+14155550100\"}x", 400, "trailing" },
		{ "{\"agent_id\":\"ob-agent\",\"agent_id\":\"ob-agent\",\"to_number\":\"+"
		  "14155550100\"}",
		  400, "agent_id" },
		{ "{\"agent_id\":\"ob-agent\",\"to_number\":\"+1415\\u00005550100\"}", 400,
		  "byte" },
		{ "", 400, "" },
		{ "{\"agent_id\":\"ob-agent\",\"to_number\":14155550100}", 422, "to_number" },
		{ "{\"agent_id\":\"ob-agent\",\"to_number\":\"4155550100\"}", 422, "to_number" },
		{ "{\"agent_id\":\"ob-agent\",\"to_number\":\"+141555\"}", 422, "too few digits" },
		{ "{\"agent_id\":\"ob-agent\",\"to_number\":null}", 422, "to_number" },
		{ "{\"to_number\":\"+14155550100\"}", 422, "agent_id" },
		{ "{\"agent_id\":7,\"to_number\":\"+14155550100\"}", 422, "agent_id" },
		{ "{\"agent_id\":\"\",\"to_number\":\"+14155550100\"}", 422, "agent_id" },
		{ "{\"agent_id\":\"ob-agent\",\"to_number\":\"+14155550100\",\"from_number\":"
		  "\"x\"}",
		  422, "from_number" },
		{ "{\"agent_id\":\"ob-agent\",\"to_number\":\"+14155550100\",\"from_number\":5}",
		  422, "from_number" },
		{ "{\"agent_id\":\"ob-agent\",\"to_number\":\"+14155550100\",\"priority\":1}", 422,
		  "priority" },
		{ "[\"ob-agent\",\"+14155550100\"]", 422, "object" },
		{ "{\"agent_id\":\"oa-agent\",\"to_number\":\"+14155550100\"}", 404, "oa-agent" },
		{ "{\"agent_id\":\"nobody\",\"to_number\":\"+14155550100\"}", 404, "nobody" },
		{ "{\"agent_id\":\"no body!\",\"to_number\":\"+14155550100\"}", 404, "agent" },
	};
	struct raw_response r;

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		req("POST", "/v2/calls", kb, cases[i].body, cases[i].status, &r);
		cJSON *j = api_body(&r);
		print_message("%d %s\n", r.status, r.body);
		assert_non_null(strstr(api_str(j, "message"), cases[i].says));
		assert_non_null(api_str(j, "error"));
		cJSON_Delete(j);
		raw_response_free(&r);
	}
	/* none of them dialled: ob has free lines */
	assert_int_equal(sql_int("SELECT count(*) FROM calls WHERE org_id IN ('ob', '%s')", "oa"),
			 2);
	assert_int_equal(sql_int("SELECT count(*) FROM calls WHERE org_id = '%s'", "ob"), 0);
	/* the body's own limit (4 KiB) is the server's 413, before any handler */
	char big[5000];
	memset(big, ' ', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	assert_int_equal(api_request(w1.port, "POST", "/v2/calls", kb, NULL, big, &r), 413);
	raw_response_free(&r);
	/* and a good one from ob goes through */
	req("POST", "/v2/calls", kb, "{\"agent_id\":\"ob-agent\",\"to_number\":\"+14155550103\"}",
	    201, &r);
	raw_response_free(&r);
}

static void get_one_not_found(void **state)
{
	struct raw_response r;
	char path[96];

	(void)state;
	snprintf(path, sizeof(path), "/v2/calls/%s", first_call);
	req("GET", path, kb, NULL, 404, &r); /* oa's call, ob's key */
	assert_non_null(strstr(r.body, "\"error\":\"not_found\""));
	raw_response_free(&r);
	req("GET", path, ka, NULL, 200, &r); /* still there for oa */
	raw_response_free(&r);
	req("GET", "/v2/calls/7d0c5d4e-4a35-4c8b-9a55-000000000000", kb, NULL, 404, &r);
	raw_response_free(&r);
	req("GET", "/v2/calls/not-a-uuid", kb, NULL, 404, &r);
	raw_response_free(&r);
	req("GET", "/v2/calls/7D0C5D4E-4A35-4C8B-9A55-0000000000001", kb, NULL, 404, &r);
	raw_response_free(&r);
}

/* Pages through path (with its query), limit per page; writes the ids in order into ids. */
static int pages(const char *query, int limit, char ids[][40], int cap)
{
	char path[256], cursor[96] = "";
	struct raw_response r;
	int n = 0, p = 0;

	for (;;) {
		snprintf(path, sizeof(path), "/v2/calls?%s%slimit=%d%s%s", query,
			 query[0] ? "&" : "", limit, cursor[0] ? "&cursor=" : "", cursor);
		req("GET", path, kl, NULL, 200, &r);
		cJSON *j = api_body(&r), *c;
		assert_int_equal((int)api_num(j, "limit"), limit);
		int on_page = 0;
		cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "calls"))
		{
			assert_true(n < cap);
			snprintf(ids[n++], 40, "%s", api_str(c, "id"));
			on_page++;
		}
		const cJSON *next = cJSON_GetObjectItem(j, "next_cursor");
		p++;
		if (cJSON_IsNull(next)) {
			assert_true(on_page <= limit);
			cJSON_Delete(j);
			raw_response_free(&r);
			return n;
		}
		assert_int_equal(on_page, limit);
		snprintf(cursor, sizeof(cursor), "%s", next->valuestring);
		cJSON_Delete(j);
		raw_response_free(&r);
		assert_true(p < 100);
	}
}

static void list_pages_and_filters(void **state)
{
	char ids[64][40], want[64][40];
	struct raw_response r;

	(void)state;
	/* 9 ended calls of ol: 5 of campaign ol-c1 (2 of them from batch ol-b1's contacts), 4
	 * direct; two pairs share a created_at (the id breaks the tie). */
	PQclear(api_sql(db, "INSERT INTO batches (id, org_id, campaign_id) VALUES "
			    "('ol-b1', 'ol', 'ol-c1')"));
	PQclear(api_sql(db, "INSERT INTO contacts (org_id, campaign_id, batch_id, phone, state) "
			    "SELECT 'ol', 'ol-c1', 'ol-b1', '+1415557000' || i, 'done' "
			    "FROM generate_series(1, 2) i"));
	PQclear(api_sql(
		db,
		"INSERT INTO calls (id, org_id, campaign_id, agent_id, contact_id, to_number, "
		"state, gate_mode, gate_epoch, outcome, created_at, ended_at) "
		"SELECT gen_random_uuid(), 'ol', CASE WHEN i <= 5 THEN 'ol-c1' END, 'ol-agent', "
		"CASE WHEN i <= 2 THEN (SELECT min(id) + i - 1 FROM contacts WHERE batch_id = "
		"'ol-b1') END, '+1415558000' || i, 'ended', 'redis', 1, 'completed', "
		"timestamptz '2025-03-01 12:00:00Z' + (i / 2) * interval '1 second', now() "
		"FROM generate_series(1, 9) i"));
	PGresult *q = api_sql(db, "SELECT id FROM calls WHERE org_id = 'ol' "
				  "ORDER BY created_at DESC, id DESC");
	int total = PQntuples(q);
	assert_int_equal(total, 9);
	for (int i = 0; i < total; i++)
		snprintf(want[i], 40, "%s", PQgetvalue(q, i, 0));
	PQclear(q);

	/* pages of 1 (the minimum), 2, 4, 9 (exactly all), 100 (the maximum): the same order */
	const int sizes[] = { 1, 2, 4, 9, 100 };
	for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
		int n = pages("", sizes[s], ids, 64);
		assert_int_equal(n, total);
		for (int i = 0; i < n; i++)
			assert_string_equal(ids[i], want[i]);
	}
	/* no limit: the default, 50 */
	req("GET", "/v2/calls", kl, NULL, 200, &r);
	cJSON *j = api_body(&r);
	assert_int_equal((int)api_num(j, "limit"), 50);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "calls")), total);
	const cJSON *c0 = cJSON_GetArrayItem(cJSON_GetObjectItem(j, "calls"), 0);
	assert_string_equal(api_str(c0, "state"), "ended");
	assert_string_equal(api_str(c0, "outcome"), "completed");
	assert_string_equal(api_str(c0, "created_at"), "2025-03-01T12:00:04.000Z");
	cJSON_Delete(j);
	raw_response_free(&r);

	/* filters */
	assert_int_equal(pages("state=ended", 4, ids, 64), 9);
	assert_int_equal(pages("state=live", 4, ids, 64), 0);
	assert_int_equal(pages("campaign_id=ol-c1", 2, ids, 64), 5);
	assert_int_equal(pages("batch_id=ol-b1", 1, ids, 64), 2);
	assert_int_equal(pages("agent_id=ol-agent&campaign_id=ol-c1&state=ended", 3, ids, 64), 5);
	assert_int_equal(pages("campaign_id=nope", 3, ids, 64), 0);
	assert_int_equal(pages("batch_id=ol%2Db1", 5, ids, 64), 2); /* percent-decoded */

	/* another organisation sees none of them */
	req("GET", "/v2/calls?campaign_id=ol-c1", kb, NULL, 200, &r);
	j = api_body(&r);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "calls")), 0);
	cJSON_Delete(j);
	raw_response_free(&r);
	req("GET", "/v2/calls?limit=100", kb, NULL, 200, &r); /* ob: its own call only */
	j = api_body(&r);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "calls")), 1);
	cJSON_Delete(j);
	raw_response_free(&r);

	/* refused parameters: 400 invalid_parameter naming them (one status for a bad query
	 * parameter across the API, dispatcher/api/query.h) */
	static const struct {
		const char *query, *says;
	} bad[] = {
		{ "limit=0", "limit" },
		{ "limit=101", "limit" },
		{ "limit=-1", "limit" },
		{ "limit=abc", "limit" },
		{ "limit=", "limit" },
		{ "limit=1&limit=2", "twice" },
		{ "state=bogus", "state" },
		{ "campaign_id=a%20b", "campaign_id" },
		{ "cursor=abc", "cursor" },
		{ "cursor=12_not-a-uuid", "cursor" },
		{ "cursor=12.not-a-uuid", "cursor" },
		{ "page=2", "page" },
		{ "batch_id=%zz", "batch_id" },
		{ "agent_id=a%00b", "agent_id" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char path[128];
		snprintf(path, sizeof(path), "/v2/calls?%s", bad[i].query);
		req("GET", path, kl, NULL, 400, &r);
		j = api_body(&r);
		print_message("%s: %s\n", bad[i].query, r.body);
		assert_non_null(strstr(api_str(j, "message"), bad[i].says));
		assert_string_equal(api_str(j, "error"), "invalid_parameter");
		cJSON_Delete(j);
		raw_response_free(&r);
	}
}

/* Last: the drain (SIGTERM) answers a waiting dial 503 with Retry-After: 1, then exits 0. */
static void drain_answers_503(void **state)
{
	struct raw_response r;
	char v[16];

	(void)state;
	int fd = post_oa_async("+14155550105");
	until_waiting("oa", 1);
	kill(w1.pid, SIGTERM);
	assert_int_equal(raw_read_response(fd, &r), 0);
	close(fd);
	print_message("draining: %d %s\n", r.status, r.body);
	assert_int_equal(r.status, 503);
	limit_headers(&r, "601");
	assert_non_null(raw_header(&r, "Retry-After", v, sizeof(v)));
	assert_string_equal(v, "1");
	assert_non_null(strstr(r.body, "\"error\":\"unavailable\""));
	raw_response_free(&r);
	assert_int_equal(fixture_wait(w1.pid), 0);
	w1.pid = 0;
	assert_int_equal(waiting("oa"), 0);
}

static int setup(void **state)
{
	struct stub_config sc;
	char env[64];

	(void)state;
	fixture_start(&svc, true, true, false, true);
	db = fixture_pg(&svc);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	api_make_org(db, "oa", 1, NULL);
	api_make_org(db, "ob", 5, NULL);
	api_make_org(db, "ol", 5, "ol-c1", NULL);
	/* bucket limits told apart: calls.create 601, executions.list 602 */
	PQclear(api_sql(db, "UPDATE organisations SET rate_calls_per_minute = 601, "
			    "rate_executions_per_minute = 602"));
	PQclear(api_sql(db, "UPDATE campaigns SET status = 'stopped'")); /* ol: nothing to dial */
	api_make_key(db, "oa", "ka", ka, NULL);
	api_make_key(db, "ob", "kb", kb, NULL);
	api_make_key(db, "ol", "kl", kl, NULL);
	stub_config_defaults(&sc);
	sc.hold = true;
	sc.secret = "secret"; /* api_worker_start's PROVIDER_WEBHOOK_SECRET */
	wproc_stub_start(&stub, &sc);
	snprintf(env, sizeof(env), "http://127.0.0.1:%d", stub.port);
	setenv("PROVIDER_URL", env, 1);
	api_worker_start(&w1, "calls");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	api_worker_kill(&w1); /* after a failure; drain_answers_503 stops it cleanly */
	wproc_stub_stop(&stub);
	PQfinish(db);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(post_free_line_then_get), cmocka_unit_test(post_full_org_429),
		cmocka_unit_test(post_freed_line_placed),  cmocka_unit_test(post_client_gone),
		cmocka_unit_test(post_bad_bodies),	   cmocka_unit_test(get_one_not_found),
		cmocka_unit_test(list_pages_and_filters),  cmocka_unit_test(drain_answers_503),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
