/* The OpenAPI description against real answers (issue 10 item 7): `dispatcher run` (role api,
 * dialling the provider stub in hold mode) on a private PostgreSQL and Redis.
 *
 *  - openapi_served_without_a_key: GET /openapi.json answers 200 application/json without a key
 *    (and with a bad one: the route is public), no X-RateLimit-* headers, and a body equal byte
 *    for byte to dispatcher/api/openapi.json.
 *  - the other tests request the routes for real and checks each JSON answer against the
 *    schema the document gives for that route and status (tests/openapi_validate.h: types with
 *    null, required, properties, additionalProperties, items, enum, const, local $refs); a status
 *    the document does not declare fails too:
 *      account: GET /v2/user/me 200, 401 (no key, a bad key), 429 (error 1300, rate limit);
 *      batches: POST /v2/batches 201, 400, 404, 409, 415, 422 (rows named); upload 201, 422 (rows
 *        named); GET /v2/batches 200 (pages, has_more), 400; GET one 200, 404; pause, resume,
 *        stop 200, 409;
 *      calls: POST /v2/calls 201, 400, 404, 413, 422, 429 (concurrency, error 1300); GET
 *        /v2/calls 200 (a direct dial, a batch's ended call; pages), 400; GET one 200, 404;
 *      capacity: 200 from the gate (floor_eta an estimate and null, refusals) and 404;
 *      operations and events: /healthz, /readyz, /openapi.json; POST /provider/events 200, 202,
 *        400, 401;
 *      capacity_from_postgres: Redis stopped: source "postgres", source_reason, refusals null.
 * The description's agreement with the router is tests/unit/test_openapi.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "../openapi_validate.h"
#include "api_test.h"
#include "signing.h"
#include "worker_proc.h"

#include <time.h>

static struct embedded svc;
static struct api_worker w1;
static struct wproc_stub stub;
static PGconn *db;
static cJSON *doc;
static char ko[APIKEY_LEN + 1], ke[APIKEY_LEN + 1], kr[APIKEY_LEN + 1];
static char batch_id[80], call_id[40];
static int checked; /* answers checked against their schema */

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n > 0);
	rewind(f);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = 0;
	fclose(f);
	*len = (size_t)n;
	return buf;
}

/* One request (key as api_request() takes it) whose JSON answer must match the document's
 * schema for (method, tmpl, its status); a status the document does not declare fails. Returns
 * the status, the body in *out (cJSON_Delete() it). */
static int request(const char *method, const char *tmpl, const char *path, const char *key,
		   const char *ctype, const char *body, cJSON **out)
{
	struct raw_response r;
	char m[16], err[768];
	size_t i = 0;
	int st = api_request(w1.port, method, path, key, ctype, body, &r);

	for (; method[i] && i + 1 < sizeof(m); i++)
		m[i] = (char)(method[i] | 0x20);
	m[i] = 0;
	const cJSON *s = oav_response_schema(doc, m, tmpl, st);
	if (!s)
		fail_msg("%s %s: %d %s: the document declares no application/json %d", method, path,
			 st, r.body, st);
	cJSON *j = api_body(&r);
	if (oav_check(doc, s, j, "$", err, sizeof(err)))
		fail_msg("%s %s -> %d does not match openapi.json: %s\n  body: %s", method, path,
			 st, err, r.body);
	raw_response_free(&r);
	checked++;
	*out = j;
	return st;
}

/* request() that must answer status. */
static cJSON *answer(const char *method, const char *tmpl, const char *path, const char *key,
		     const char *ctype, const char *body, int status)
{
	cJSON *j;
	int st = request(method, tmpl, path, key, ctype, body, &j);

	if (st != status) {
		char *text = cJSON_PrintUnformatted(j);
		fail_msg("%s %s: %d %s (wanted %d)", method, path, st, text, status);
	}
	return j;
}

/* answer() with the body dropped. */
static void check(const char *method, const char *tmpl, const char *path, const char *key,
		  const char *ctype, const char *body, int status)
{
	cJSON_Delete(answer(method, tmpl, path, key, ctype, body, status));
}

static void openapi_served_without_a_key(void **state)
{
	struct raw_response r;
	size_t len;
	char *file = read_file(DSP_OPENAPI_JSON, &len);
	char v[64];

	(void)state;
	const char *keys[] = { NULL, "Authorization: Bearer gat_nope" };
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		assert_int_equal(
			api_request(w1.port, "GET", "/openapi.json", keys[i], NULL, NULL, &r), 200);
		assert_non_null(raw_header(&r, "Content-Type", v, sizeof(v)));
		assert_string_equal(v, "application/json");
		assert_null(raw_header(&r, "X-RateLimit-Limit", v, sizeof(v)));
		assert_int_equal(r.body_len, len);
		assert_memory_equal(r.body, file, len);
		cJSON *j = api_body(&r);
		assert_string_equal(api_str(j, "openapi"), "3.1.0");
		cJSON_Delete(j);
		raw_response_free(&r);
	}
	free(file);
	check("GET", "/openapi.json", "/openapi.json", NULL, NULL, NULL, 200);
}

static void account(void **state)
{
	(void)state;
	check("GET", "/v2/user/me", "/v2/user/me", ko, NULL, NULL, 200);
	check("GET", "/v2/user/me", "/v2/user/me", NULL, NULL, NULL, 401);
	check("GET", "/v2/user/me", "/v2/user/me", "Authorization: Bearer gat_nope", NULL, NULL,
	      401);
	/* kr's organisation has 1 request a minute in the default bucket: refused by the third
	 * request at the latest (the second may fall just past a window's end) */
	int st = 200, n = 0;
	while (st == 200) {
		cJSON *j;
		assert_true(n++ < 3);
		st = request("GET", "/v2/user/me", "/v2/user/me", kr, NULL, NULL, &j);
		if (st == 429)
			assert_int_equal((int)api_num(j, "error"), 1300);
		cJSON_Delete(j);
	}
	assert_int_equal(st, 429);
}

static void batches(void **state)
{
	char path[160];
	const char *B = "/v2/batches", *UP = "/v2/batches/upload", *ONE = "/v2/batches/{batch_id}";

	(void)state;
	cJSON *j = answer(
		"POST", B, B, ko, NULL,
		"{\"campaign_id\":\"oo-c1\",\"name\":\"json\",\"contacts\":[{\"phone\":"
		"\"+14155550100\",\"variables\":{\"a\":\"b\"}},{\"phone\":\"+14155550101\"}]}",
		201);
	snprintf(batch_id, sizeof(batch_id), "%s", api_str(j, "id"));
	cJSON_Delete(j);
	check("POST", B, B, ko, NULL, "{\"campaign_id\":\"oo-c1\"", 400);
	check("POST", B, B, ko, NULL,
	      "{\"campaign_id\":\"nope\",\"contacts\":[{\"phone\":\"+14155550100\"}]}", 404);
	check("POST", B, B, ko, "text/plain", "phone\n+14155550100\n", 415);
	check("POST", B, B, ko, NULL,
	      "{\"campaign_id\":\"oo-stopped\",\"contacts\":[{\"phone\":\"+14155550100\"}]}", 409);
	j = answer("POST", B, B, ko, NULL,
		   "{\"campaign_id\":\"oo-c1\",\"contacts\":[{\"phone\":\"+14155550100\"},"
		   "{\"phone\":\"nope\"}]}",
		   422);
	assert_int_equal((int)api_num(j, "invalid_rows"), 1);
	cJSON_Delete(j);

	check("POST", UP, "/v2/batches/upload?campaign_id=oo-c1&name=csv&filename=a.csv", ko,
	      "text/csv", "phone,first\n+14155550102,Ada\n", 201);
	j = answer("POST", UP, "/v2/batches/upload?campaign_id=oo-c1&filename=b.csv", ko,
		   "text/csv", "phone\n+14155550103\nnope\n", 422);
	assert_int_equal((int)api_num(j, "invalid_rows"), 1);
	cJSON_Delete(j);

	j = answer("GET", B, B, ko, NULL, NULL, 200);
	assert_true(cJSON_GetArraySize(cJSON_GetObjectItem(j, "data")) >= 3);
	cJSON_Delete(j);
	j = answer("GET", B, "/v2/batches?limit=1", ko, NULL, NULL, 200);
	assert_true(cJSON_IsTrue(cJSON_GetObjectItem(j, "has_more")));
	snprintf(path, sizeof(path), "/v2/batches?limit=1&cursor=%s", api_str(j, "next_cursor"));
	cJSON_Delete(j);
	check("GET", B, path, ko, NULL, NULL, 200);
	check("GET", B, "/v2/batches?status=completed&campaign_id=oo-c1", ko, NULL, NULL, 200);
	check("GET", B, "/v2/batches?bogus=1", ko, NULL, NULL, 400);

	snprintf(path, sizeof(path), "/v2/batches/%s", batch_id);
	check("GET", ONE, path, ko, NULL, NULL, 200);
	check("GET", ONE, "/v2/batches/b-sql", ko, NULL, NULL, 200); /* completed */
	check("GET", ONE, "/v2/batches/nope", ko, NULL, NULL, 404);
	static const char *const verbs[] = { "pause", "resume", "stop" };
	for (size_t i = 0; i < 3; i++) {
		char tmpl[64];
		snprintf(tmpl, sizeof(tmpl), "/v2/batches/{batch_id}/%s", verbs[i]);
		snprintf(path, sizeof(path), "/v2/batches/%s/%s", batch_id, verbs[i]);
		check("POST", tmpl, path, ko, NULL, NULL, 200);
	}
	snprintf(path, sizeof(path), "/v2/batches/%s/pause", batch_id);
	check("POST", "/v2/batches/{batch_id}/pause", path, ko, NULL, NULL, 409);
	check("POST", "/v2/batches/{batch_id}/stop", "/v2/batches/nope/stop", ko, NULL, NULL, 404);
}

static void calls(void **state)
{
	const char *C = "/v2/calls", *ONE = "/v2/calls/{call_id}";
	char path[160], big[5000];

	(void)state;
	cJSON *j = answer("POST", C, C, ko, NULL,
			  "{\"agent_id\":\"oo-agent\",\"to_number\":\"+14155550104\"}", 201);
	snprintf(call_id, sizeof(call_id), "%s", api_str(j, "id"));
	cJSON_Delete(j);
	/* oo's only line is held: the concurrency 429 after the 5 s wait */
	j = answer("POST", C, C, ko, NULL,
		   "{\"agent_id\":\"oo-agent\",\"to_number\":\"+14155550105\"}", 429);
	assert_int_equal((int)api_num(j, "error"), 1300);
	cJSON_Delete(j);
	check("POST", C, C, ko, NULL, "{\"agent_id\":", 400);
	check("POST", C, C, ko, NULL, "{\"agent_id\":\"nope\",\"to_number\":\"+14155550105\"}",
	      404);
	check("POST", C, C, ko, NULL,
	      "{\"agent_id\":\"oo-agent\",\"to_number\":\"+14155550105\",\"extra\":1}", 422);
	memset(big, ' ', sizeof(big) - 1);
	big[sizeof(big) - 1] = 0;
	big[0] = '{';
	big[sizeof(big) - 2] = '}';
	check("POST", C, C, ko, NULL, big, 413);

	j = answer("GET", C, C, ko, NULL, NULL, 200);
	assert_true(cJSON_GetArraySize(cJSON_GetObjectItem(j, "calls")) >= 2);
	cJSON_Delete(j);
	j = answer("GET", C, "/v2/calls?limit=1", ko, NULL, NULL, 200);
	snprintf(path, sizeof(path), "/v2/calls?limit=1&cursor=%s", api_str(j, "next_cursor"));
	cJSON_Delete(j);
	check("GET", C, path, ko, NULL, NULL, 200);
	check("GET", C, "/v2/calls?bogus=1", ko, NULL, NULL, 400);
	snprintf(path, sizeof(path), "/v2/calls/%s", call_id);
	check("GET", ONE, path, ko, NULL, NULL, 200);
	check("GET", ONE, "/v2/calls/00000000-0000-4000-8000-000000000000", ko, NULL, NULL, 404);
}

static void capacity(void **state)
{
	const char *T = "/api/v1/campaigns/{campaign_id}/capacity";

	(void)state;
	check("GET", T, "/api/v1/campaigns/oo-c1/capacity", ko, NULL, NULL, 200);
	check("GET", T, "/api/v1/campaigns/nope/capacity", ko, NULL, NULL, 404);
	check("GET", T, "/api/v1/campaigns/E1/capacity", ko, NULL, NULL, 404);
	/* E1 below its floor once the floors are installed: floor_eta an object */
	long long deadline = fixture_now_ms() + API_WAIT_MS;
	for (bool eta = false, none = false; !eta || !none;) {
		cJSON *j = answer("GET", T, "/api/v1/campaigns/E1/capacity", ke, NULL, NULL, 200);
		eta = eta || cJSON_IsObject(cJSON_GetObjectItem(j, "floor_eta"));
		cJSON_Delete(j);
		j = answer("GET", T, "/api/v1/campaigns/E2/capacity", ke, NULL, NULL, 200);
		none = cJSON_IsNull(cJSON_GetObjectItem(j, "floor_eta"));
		cJSON_Delete(j);
		assert_true(fixture_now_ms() < deadline);
		if (!eta || !none)
			fixture_sleep_ms(100);
	}
}

/* POST /provider/events with body, signed with the worker's secret when sign. */
static cJSON *event(const char *body, bool sign, int status)
{
	char hdr[SIGNING_HEADER_MAX + 16] = "X-Signature: ";

	if (sign)
		assert_int_equal(signing_sign("secret", (int64_t)time(NULL), body, strlen(body),
					      hdr + 13, sizeof(hdr) - 13),
				 0);
	return answer("POST", "/provider/events", "/provider/events", sign ? hdr : NULL, NULL, body,
		      status);
}

static void operations_and_events(void **state)
{
	char body[512];

	(void)state;
	check("GET", "/healthz", "/healthz", NULL, NULL, NULL, 200);
	check("GET", "/readyz", "/readyz", NULL, NULL, NULL, 200);
	PGresult *r = api_sql(db,
			      "SELECT coalesce(provider_call_id, 'pc-openapi') FROM calls WHERE id "
			      "= '%s'",
			      call_id);
	snprintf(body, sizeof(body),
		 "{\"call_id\":\"%s\",\"idempotency_key\":\"%s\",\"status\":\"ringing\","
		 "\"sequence\":1}",
		 PQgetvalue(r, 0, 0), call_id);
	PQclear(r);
	cJSON_Delete(event(body, true, 200));
	cJSON_Delete(event("{\"call_id\":\"pc-x\",\"idempotency_key\":"
			   "\"00000000-0000-4000-8000-000000000001\",\"status\":\"ringing\","
			   "\"sequence\":1}",
			   true, 202));
	cJSON_Delete(event("{\"call_id\":1}", true, 400));
	cJSON_Delete(event(body, false, 401));
}

static void capacity_from_postgres(void **state)
{
	const char *T = "/api/v1/campaigns/{campaign_id}/capacity";

	(void)state;
	assert_int_equal(embedded_redis_stop(&svc), 0);
	long long deadline = fixture_now_ms() + API_WAIT_MS;
	for (;;) { /* the first requests may still meet the connection before it is down */
		cJSON *j = answer("GET", T, "/api/v1/campaigns/E1/capacity", ke, NULL, NULL, 200);
		bool pg = strcmp(api_str(j, "source"), "postgres") == 0;
		if (pg) {
			assert_true(cJSON_IsNull(cJSON_GetObjectItem(j, "refusals_last_minute")));
			assert_non_null(api_str(j, "source_reason"));
		}
		cJSON_Delete(j);
		if (pg)
			break;
		assert_true(fixture_now_ms() < deadline);
		fixture_sleep_ms(100);
	}
	assert_int_equal(embedded_redis_start(&svc), 0);
	print_message("%d answers matched their schemas in openapi.json\n", checked);
}

/* n live calls of campaign cmp (org's agent), the i-th (0-based) created age0 + i * 10 s ago,
 * and, for ended > 0, that many calls that held their line 300 s and ended 120 s ago. */
static void calls_of(const char *org, const char *cmp, int n, int ended)
{
	PQclear(api_sql(db,
			"INSERT INTO calls (id, org_id, campaign_id, agent_id, to_number, state,"
			" gate_mode, gate_epoch, provider_call_id, last_sequence, created_at,"
			" answered_at) SELECT gen_random_uuid(), '%s', '%s', '%s-agent',"
			" '+1555' || lpad(g::text, 7, '0'), 'live', 'redis',"
			" (SELECT gate_epoch FROM system_settings), 'p-' || gen_random_uuid(), 2,"
			" now() - make_interval(secs => 5 + (g - 1) * 10),"
			" now() - make_interval(secs => 3 + (g - 1) * 10)"
			" FROM generate_series(1, %d) g",
			org, cmp, org, n));
	if (ended)
		PQclear(api_sql(
			db,
			"INSERT INTO calls (id, org_id, campaign_id, agent_id, to_number,"
			" state, outcome, gate_mode, gate_epoch, created_at, ended_at)"
			" SELECT gen_random_uuid(), '%s', '%s', '%s-agent',"
			" '+1556' || lpad(g::text, 7, '0'), 'ended', 'completed', 'redis', 1,"
			" now() - interval '420 s', now() - interval '120 s'"
			" FROM generate_series(1, %d) g",
			org, cmp, org, ended));
	PQclear(api_sql(db,
			"INSERT INTO batches (id, org_id, campaign_id, name, total_contacts)"
			" VALUES ('b-%s', '%s', '%s', 'b', 500)",
			cmp, org, cmp));
	PQclear(api_sql(
		db,
		"INSERT INTO contacts (org_id, campaign_id, batch_id, phone) SELECT '%s', "
		"'%s', 'b-%s', '+1557' || lpad(g::text, 7, '0') FROM generate_series(1, 500) g",
		org, cmp, cmp));
}

static int setup(void **state)
{
	struct stub_config sc;
	char env[64];

	(void)state;
	size_t len;
	char *text = read_file(DSP_OPENAPI_JSON, &len);
	doc = cJSON_Parse(text);
	free(text);
	assert_non_null(doc);
	fixture_start(&svc, true, true, false, true);
	db = fixture_pg(&svc);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	/* oo: 1 line, a batch of SQL with its ended call (a batch's call in the lists) */
	api_make_org(db, "oo", 1, "oo-c1", "oo-stopped", NULL);
	PQclear(api_sql(db, "UPDATE campaigns SET status = 'stopped' WHERE id = 'oo-stopped'"));
	PQclear(api_sql(db, "INSERT INTO batches (id, org_id, campaign_id, name, total_contacts)"
			    " VALUES ('b-sql', 'oo', 'oo-c1', 'sql', 1)"));
	PQclear(api_sql(db,
			"INSERT INTO contacts (org_id, campaign_id, batch_id, phone, state,"
			" attempts) VALUES ('oo', 'oo-c1', 'b-sql', '+15570000001', 'done', 1)"));
	PQclear(api_sql(db,
			"INSERT INTO calls (id, org_id, campaign_id, agent_id, contact_id, "
			"to_number, from_number, state, outcome, outcome_reason, gate_mode, "
			"gate_epoch, created_at, answered_at, ended_at) SELECT gen_random_uuid(), "
			"'oo', 'oo-c1', 'oo-agent', id, phone, '+15550000001', 'ended', "
			"'completed', 'hangup', 'redis', 1, now() - interval '60 s', now() - "
			"interval '55 s', now() - interval '10 s' FROM contacts WHERE batch_id = "
			"'b-sql'"));
	api_make_key(db, "oo", "ko", ko, NULL);
	/* oe: E1 running 4 below its floor of 10 in a full pool of 20, E2 running 16 */
	api_make_org(db, "oe", 20, "E1", "E2", NULL);
	calls_of("oe", "E1", 4, 0);
	calls_of("oe", "E2", 16, 8);
	api_make_key(db, "oe", "ke", ke, NULL);
	/* or: one request a minute in the default bucket */
	api_make_org(db, "or", 5, NULL);
	PQclear(api_sql(db,
			"UPDATE organisations SET rate_default_per_minute = 1 WHERE id = 'or'"));
	api_make_key(db, "or", "kr", kr, NULL);

	stub_config_defaults(&sc);
	sc.hold = true;
	sc.secret = "secret"; /* api_worker_start's PROVIDER_WEBHOOK_SECRET */
	wproc_stub_start(&stub, &sc);
	snprintf(env, sizeof(env), "http://127.0.0.1:%d", stub.port);
	setenv("PROVIDER_URL", env, 1);
	setenv("DISPATCHER_ROLE", "api", 1); /* serves and places direct dials; claims no contact */
	api_worker_start(&w1, "api-openapi");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	api_worker_kill(&w1);
	wproc_stub_stop(&stub);
	PQfinish(db);
	embedded_stop(&svc);
	cJSON_Delete(doc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(openapi_served_without_a_key),
		cmocka_unit_test(account),
		cmocka_unit_test(batches),
		cmocka_unit_test(calls),
		cmocka_unit_test(capacity),
		cmocka_unit_test(operations_and_events),
		cmocka_unit_test(capacity_from_postgres),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
