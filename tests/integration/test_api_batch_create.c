/* POST /v2/batches (JSON) and POST /v2/batches/upload (CSV), issue 10 item 4 / SPEC R6, against
 * `dispatcher run` on a private PostgreSQL and Redis (api_test.h).
 *
 *  - json_created: 201 with the batch, the contacts and their variables in SQL, X-RateLimit-*;
 *    the number under phone_number / to_number; no name gives "".
 *  - json_errors: 415, 400 (syntax, trailing bytes, a duplicate key at the top and in a
 *    contact, a NUL), 422 naming the field (types, missing), 404 (unknown and another
 *    organisation's campaign), 409 (stopped), 422 with 25 bad phones naming exactly 20 and
 *    nothing written; 401 without a key; X-RateLimit-* on every answer but the 401.
 *  - ceiling_at_below_above: an organisation's pending ceiling of 10: 4 (below), 6 more (at),
 *    1 more (above: 422); a file of 11 rows alone: 422.
 *  - csv_created: multipart with the campaign in the query and in a form field, the name from
 *    the file (without its path); the file part typed application/octet-stream,
 *    application/vnd.ms-excel, text/plain or not at all; a raw text/csv body; rows and
 *    variables in SQL.
 *  - csv_errors: 415 (not .csv, a part typed application/json or image/png, a text/plain
 *    body), 400 campaign_id after the file, 422 a name with a control character, 422 (25 bad rows: exactly 20
 *    named; bad UTF-8; no phone column; a malformed quote; no campaign; no file), 400
 *    (multipart without its closing boundary), 404 another organisation's campaign.
 *  - body_limits: JSON Content-Length at the limit + 1 answers 413 naming the limit in bytes; a
 *    body of exactly the limit is imported; the CSV route's 413 names its own limit.
 *  - imports_capped: an upload of org-a held open takes org-a's import slot: org-a's next one
 *    answers 503 with Retry-After while org-b's imports pass; once the client goes away (rolled
 *    back, nothing written) org-a's next one passes.
 *  - import_own_pool: the import's backend belongs to the API's import pool, not the worker's.
 *  - oversized_contact: an 8 MiB contact is 422 by its length, the worker's VmHWM grows < 64
 *    MiB; another field or campaign_id over 4 KiB: 422 naming it.
 *  - import_250k_rss: 250,000 contacts by each route, each in a fresh worker: time and the
 *    worker's peak RSS (VmHWM) printed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api_test.h"

/* The routes' body limits (api_int.h), as the 413 must name them. */
#define API_BATCH_JSON_BODY_MAX_T ((size_t)64 << 20)
#define API_BATCH_CSV_BODY_MAX_T  ((size_t)256 << 20)

static struct embedded svc;
static struct api_worker w1;
static PGconn *db;
static char key_a[APIKEY_LEN + 1], key_b[APIKEY_LEN + 1], key_big[APIKEY_LEN + 1];

static long long sql_num(const char *fmt, const char *arg)
{
	PGresult *r = api_sql(db, fmt, arg);
	long long v = atoll(PQgetvalue(r, 0, 0));

	PQclear(r);
	return v;
}

/* A request with the rate-limit headers checked (every answer of an authenticated key). */
static int post(const char *path, const char *key, const char *ctype, const char *body,
		struct raw_response *r)
{
	char v[32];
	int st = api_request(w1.port, "POST", path, key, ctype, body, r);

	if (st != 401)
		assert_non_null(raw_header(r, "X-RateLimit-Limit", v, sizeof(v)));
	return st;
}

static cJSON *post_json(const char *path, const char *ctype, const char *body, int want)
{
	struct raw_response r;
	int st = post(path, key_a, ctype, body, &r);

	if (st != want)
		fail_msg("%s: %d (wanted %d): %s", path, st, want, r.body);
	cJSON *j = api_body(&r);
	raw_response_free(&r);
	return j;
}

static void expect_error(const char *path, const char *ctype, const char *body, int want,
			 const char *code, const char *in_message)
{
	cJSON *j = post_json(path, ctype, body, want);

	assert_string_equal(api_str(j, "error"), code);
	if (in_message && !strstr(api_str(j, "message"), in_message))
		fail_msg("message \"%s\" lacks \"%s\"", api_str(j, "message"), in_message);
	cJSON_Delete(j);
}

static void json_created(void **state)
{
	(void)state;
	cJSON *j = post_json("/v2/batches", NULL,
			     "{\"campaign_id\":\"cmp-a\",\"name\":\"first\",\"contacts\":["
			     "{\"phone\":\"+14155550100\",\"variables\":{\"first_name\":\"Ada\"}},"
			     "{\"phone\":\"+14155550101\"},"
			     " {\"variables\":null,\"phone\":\"\\u002b14155550102\"}]}",
			     201);
	assert_string_equal(api_str(j, "campaign_id"), "cmp-a");
	assert_string_equal(api_str(j, "name"), "first");
	assert_string_equal(api_str(j, "source"), "json");
	assert_string_equal(api_str(j, "status"), "active");
	assert_int_equal(api_num(j, "total_contacts"), 3);
	assert_true(cJSON_IsTrue(
		cJSON_GetObjectItem(cJSON_GetObjectItem(j, "pending_ceiling"), "checked")));
	const char *id = api_str(j, "id");
	assert_int_equal(sql_num("SELECT count(*) FROM contacts WHERE batch_id = '%s'", id), 3);
	assert_int_equal(sql_num("SELECT count(*) FROM contacts WHERE batch_id = '%s' AND "
				 "variables->>'first_name' = 'Ada' AND phone = '+14155550100'",
				 id),
			 1);
	assert_int_equal(sql_num("SELECT count(*) FROM contacts WHERE batch_id = '%s' AND "
				 "phone = '+14155550102' AND variables IS NULL",
				 id),
			 1);
	cJSON_Delete(j);

	/* The number under the CSV header's other names (issue 10 review); no name: "". */
	j = post_json("/v2/batches", NULL,
		      "{\"campaign_id\":\"cmp-a\",\"contacts\":[{\"to_number\":\"+14155550103\"},"
		      "{\"phone_number\":\"+14155550104\",\"variables\":{\"phone\":\"x\"}}]}",
		      201);
	assert_string_equal(api_str(j, "name"), "");
	assert_int_equal(sql_num("SELECT count(*) FROM contacts WHERE batch_id = '%s' AND phone "
				 "IN ('+14155550103', '+14155550104')",
				 api_str(j, "id")),
			 2);
	cJSON_Delete(j);
}

static void json_errors(void **state)
{
	struct raw_response r;
	char v[32];
	(void)state;
	long long before = sql_num("SELECT count(*) FROM batches WHERE org_id = '%s'", "org-a");

	expect_error("/v2/batches", "text/plain", "{}", 415, "unsupported_media_type", NULL);
	expect_error("/v2/batches", NULL, "[1]", 400, "bad_request", "JSON object");
	expect_error("/v2/batches", NULL,
		     "{\"campaign_id\":\"cmp-a\",\"contacts\":[{\"phone\":\"+14155550100\"}]}x",
		     400, "bad_request", "trailing bytes");
	expect_error("/v2/batches", NULL,
		     "{\"campaign_id\":\"cmp-a\",\"campaign_id\":\"cmp-a\",\"contacts\":[]}", 400,
		     "bad_request", "campaign_id appears twice");
	expect_error("/v2/batches", NULL,
		     "{\"campaign_id\":\"cmp-a\",\"contacts\":[{\"phone\":\"+14155550100\","
		     "\"phone\":\"+14155550101\"}]}",
		     400, "bad_request", "contacts[0]");
	expect_error("/v2/batches", NULL,
		     "{\"campaign_id\":\"cmp-a\",\"contacts\":[{\"phone\":\"+1415\\u0000\"}]}", 400,
		     "bad_request", "NUL");
	expect_error("/v2/batches", NULL, "{\"campaign_id\":\"cmp-a\",\"contacts\":[{\"phone\":1]}",
		     400, "bad_request", "invalid JSON");
	/* A syntax error after a type error: the 400 wins. */
	expect_error("/v2/batches", NULL,
		     "{\"campaign_id\":5,\"contacts\":[{\"phone\":\"+14155550100\"},]}", 400,
		     "bad_request", NULL);
	expect_error("/v2/batches", NULL,
		     "{\"campaign_id\":\"cmp-a\",\"contacts\":[{\"phone\":\"+14155550100\"},"
		     "{\"phone\":14155550100}]}",
		     422, "invalid_request", "contacts[1].phone must be a string");
	expect_error("/v2/batches", NULL, "{\"campaign_id\":\"cmp-a\",\"contacts\":[{}]}", 422,
		     "invalid_request", "contacts[0].phone is missing");
	expect_error("/v2/batches", NULL,
		     "{\"campaign_id\":\"cmp-a\",\"contacts\":[{\"phone\":\"+14155550100\","
		     "\"variables\":[1]}]}",
		     422, "invalid_request", "contacts[0].variables must be an object");
	expect_error("/v2/batches", NULL,
		     "{\"campaign_id\":\"cmp-a\",\"contacts\":[{\"to_number\":\"+14155550100\","
		     "\"phone_number\":\"+14155550100\"}]}",
		     422, "invalid_request",
		     "field contacts[0] has both phone_number and to_number");
	expect_error("/v2/batches", NULL,
		     "{\"campaign_id\":\"cmp-a\",\"name\":\"a\\nb\\u001b[31m\",\"contacts\":[{"
		     "\"phone\":\"+14155550100\"}]}",
		     422, "invalid_request", "field name contains a control character (byte 1)");
	expect_error("/v2/batches", NULL, "{\"contacts\":[]}", 422, "invalid_request",
		     "campaign_id is missing");
	expect_error("/v2/batches", NULL, "{\"campaign_id\":\"cmp-a\",\"contacts\":{}}", 422,
		     "invalid_request", "contacts must be an array");
	expect_error("/v2/batches", NULL, "{\"campaign_id\":7,\"contacts\":[]}", 422,
		     "invalid_request", "campaign_id must be a string");
	expect_error("/v2/batches", NULL, "{\"campaign_id\":\"cmp-a\",\"contacts\":[]}", 422,
		     "invalid_contacts", "no contacts");
	expect_error("/v2/batches", NULL,
		     "{\"campaign_id\":\"cmp-nope\",\"contacts\":[{\"phone\":\"+14155550100\"}]}",
		     404, "not_found", NULL);
	expect_error("/v2/batches", NULL,
		     "{\"campaign_id\":\"cmp-b\",\"contacts\":[{\"phone\":\"+14155550100\"}]}", 404,
		     "not_found", NULL); /* org-b's */
	expect_error(
		"/v2/batches", NULL,
		"{\"campaign_id\":\"cmp-a-stopped\",\"contacts\":[{\"phone\":\"+14155550100\"}]}",
		409, "campaign_not_accepting", NULL);

	/* 30 contacts, 25 bad: exactly 20 named, 25 counted, nothing written. */
	char body[8192];
	size_t n =
		(size_t)snprintf(body, sizeof(body), "{\"campaign_id\":\"cmp-a\",\"contacts\":[");
	for (int i = 0; i < 30; i++)
		n += (size_t)snprintf(body + n, sizeof(body) - n, "%s{\"phone\":\"%s%d\"}",
				      i ? "," : "", i < 5 ? "+1415555" : "bad", 1000 + i);
	snprintf(body + n, sizeof(body) - n, "]}");
	cJSON *j = post_json("/v2/batches", NULL, body, 422);
	assert_string_equal(api_str(j, "error"), "invalid_contacts");
	assert_int_equal(api_num(j, "invalid_rows"), 25);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "rows")), 20);
	assert_int_equal(api_num(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "rows"), 0), "index"),
			 5);
	assert_non_null(strstr(api_str(j, "message"), "and 5 more"));
	assert_non_null(strstr(api_str(j, "message"), ". contacts[5]: phone: "));
	cJSON_Delete(j);
	assert_int_equal(sql_num("SELECT count(*) FROM batches WHERE org_id = '%s'", "org-a"),
			 before);

	/* No key: 401, before anything is read. */
	assert_int_equal(post("/v2/batches", NULL, NULL, "{}", &r), 401);
	assert_null(raw_header(&r, "X-RateLimit-Limit", v, sizeof(v)));
	raw_response_free(&r);
	assert_int_equal(post("/v2/batches/upload?campaign_id=cmp-a", NULL, "text/csv",
			      "phone\n+14155550100\n", &r),
			 401);
	raw_response_free(&r);
}

static void ceiling_at_below_above(void **state)
{
	char key[APIKEY_LEN + 1], body[2048];
	struct raw_response r;
	(void)state;

	/* Paused campaigns: their contacts stay undialled (the worker dials active ones only). */
	api_make_org(db, "org-c", 5, "cmp-c", NULL);
	PQclear(api_sql(db, "UPDATE organisations SET pending_ceiling = 10 WHERE id = 'org-c'"));
	PQclear(api_sql(db, "UPDATE campaigns SET status = 'paused' WHERE id = 'cmp-c'"));
	api_make_key(db, "org-c", "k", key, NULL);
	int counts[] = { 4, 6, 1 }, want[] = { 201, 201, 422 }, next = 0;
	for (int t = 0; t < 3; t++) {
		size_t n = (size_t)snprintf(body, sizeof(body),
					    "{\"campaign_id\":\"cmp-c\",\"contacts\":[");
		for (int i = 0; i < counts[t]; i++)
			n += (size_t)snprintf(body + n, sizeof(body) - n,
					      "%s{\"phone\":\"+1415556%04d\"}", i ? "," : "",
					      next++);
		snprintf(body + n, sizeof(body) - n, "]}");
		assert_int_equal(post("/v2/batches", key, NULL, body, &r), want[t]);
		if (t == 2) {
			assert_non_null(strstr(r.body, "pending_ceiling_exceeded"));
			print_message("over the ceiling: %s\n", r.body);
		}
		raw_response_free(&r);
	}
	assert_int_equal(sql_num("SELECT count(*) FROM contacts WHERE org_id = '%s'", "org-c"), 10);
	/* One file of 11 rows, alone over the ceiling. */
	api_make_org(db, "org-c2", 5, "cmp-c2", NULL);
	PQclear(api_sql(db, "UPDATE organisations SET pending_ceiling = 10 WHERE id = 'org-c2'"));
	PQclear(api_sql(db, "UPDATE campaigns SET status = 'paused' WHERE id = 'cmp-c2'"));
	api_make_key(db, "org-c2", "k", key, NULL);
	size_t n = (size_t)snprintf(body, sizeof(body), "phone\n");
	for (int i = 0; i < 11; i++)
		n += (size_t)snprintf(body + n, sizeof(body) - n, "+1415557%04d\n", i);
	assert_int_equal(post("/v2/batches/upload?campaign_id=cmp-c2", key, "text/csv", body, &r),
			 422);
	assert_non_null(strstr(r.body, "pending_ceiling_exceeded"));
	raw_response_free(&r);
}

#define BND "----dspXyZ42"
#define MP  "multipart/form-data; boundary=" BND

static char *multipart_body(const char *fields, const char *filename, const char *type,
			    const char *csv)
{
	size_t cap = 4096 + strlen(csv);
	char *b = malloc(cap);

	assert_non_null(b);
	snprintf(b, cap,
		 "%s--" BND "\r\nContent-Disposition: form-data; name=\"file\"; filename=\"%s\"\r\n"
		 "%s%s%s\r\n%s\r\n--" BND "--\r\n",
		 fields ? fields : "", filename, type ? "Content-Type: " : "", type ? type : "",
		 type ? "\r\n" : "", csv);
	return b; /* type NULL: the part has no Content-Type */
}

static void csv_created(void **state)
{
	(void)state;
	char *b = multipart_body(
		NULL, "spring.csv", "text/csv",
		"phone,first_name\r\n+14155550200,Ada\r\n\"+14155550201\",\"G, H\"\r\n");
	cJSON *j = post_json("/v2/batches/upload?campaign_id=cmp-a", MP, b, 201);
	free(b);
	assert_string_equal(api_str(j, "source"), "csv");
	assert_string_equal(api_str(j, "name"), "spring.csv");
	assert_int_equal(api_num(j, "total_contacts"), 2);
	assert_int_equal(sql_num("SELECT count(*) FROM contacts WHERE batch_id = '%s' AND "
				 "variables->>'first_name' = 'G, H'",
				 api_str(j, "id")),
			 1);
	cJSON_Delete(j);

	/* The campaign and the name as form fields before the file. */
	b = multipart_body("--" BND "\r\nContent-Disposition: form-data; name=\"campaign_id\"\r\n"
			   "\r\ncmp-a\r\n--" BND "\r\nContent-Disposition: form-data; "
			   "name=\"name\"\r\n\r\nform name\r\n",
			   "C:\\Users\\x\\list.CSV", "text/csv; charset=utf-8",
			   "phone\n+14155550202\n");
	j = post_json("/v2/batches/upload", MP, b, 201);
	free(b);
	assert_string_equal(api_str(j, "name"), "form name");
	assert_int_equal(api_num(j, "total_contacts"), 1);
	cJSON_Delete(j);

	/* What clients type a .csv file part with (issue 10 review): curl -F's default
	 * application/octet-stream, Windows browsers' application/vnd.ms-excel, text/plain, none.
	 * The name defaults to the file's, without its path. */
	static const char *const types[] = { "application/octet-stream", "application/vnd.ms-excel",
					     "text/plain; charset=utf-8", NULL };
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		char csv[64];
		snprintf(csv, sizeof(csv), "phone\n+1415555021%zu\n", i);
		b = multipart_body(NULL, "C:\\fakepath\\Leads.CSV", types[i], csv);
		j = post_json("/v2/batches/upload?campaign_id=cmp-a", MP, b, 201);
		free(b);
		assert_string_equal(api_str(j, "name"), "Leads.CSV");
		assert_int_equal(api_num(j, "total_contacts"), 1);
		cJSON_Delete(j);
	}

	/* A raw text/csv body, its name from the query. */
	j = post_json("/v2/batches/upload?campaign_id=cmp-a&filename=raw%20list.csv", "text/csv",
		      "phone\n+14155550203\n+14155550204\n", 201);
	assert_string_equal(api_str(j, "name"), "raw list.csv");
	assert_int_equal(api_num(j, "total_contacts"), 2);
	cJSON_Delete(j);
	/* ... its path dropped, as a part's (/ and \ both separate). */
	j = post_json("/v2/batches/upload?campaign_id=cmp-a&filename=C%3A%5Cdir%2Fsub%5Cb.csv",
		      "text/csv", "phone\n+14155550205\n", 201);
	assert_string_equal(api_str(j, "name"), "b.csv");
	cJSON_Delete(j);
}

static void csv_errors(void **state)
{
	(void)state;
	long long before = sql_num("SELECT count(*) FROM batches WHERE org_id = '%s'", "org-a");
	const char *up = "/v2/batches/upload?campaign_id=cmp-a";
	char *b;

	b = multipart_body(NULL, "list.xlsx", "text/csv", "phone\n+14155550300\n");
	expect_error(up, MP, b, 415, "unsupported_media_type", "Only .csv files are accepted");
	free(b);
	static const char *const not_csv[][2] = { { "list.csv", "application/json" },
						  { "list.csv", "image/png" },
						  { "list.xlsx", "application/octet-stream" },
						  { "list.csv.txt", "text/plain" },
						  { "csv", NULL } };
	for (size_t i = 0; i < sizeof(not_csv) / sizeof(not_csv[0]); i++) {
		b = multipart_body(NULL, not_csv[i][0], not_csv[i][1], "phone\n+14155550300\n");
		expect_error(up, MP, b, 415, "unsupported_media_type",
			     "text/csv, application/csv, text/plain, application/vnd.ms-excel, "
			     "application/octet-stream or none");
		free(b);
	}
	/* campaign_id after the file: 400 saying fields come first (as name after the file),
	 * not 422 "missing" (issue 10 review). */
	b = multipart_body(NULL, "a.csv", "text/csv", "phone\n+14155550300\n");
	char *after = malloc(strlen(b) + 256);
	assert_non_null(after);
	snprintf(after, strlen(b) + 256,
		 "%.*s\r\n--" BND "\r\nContent-Disposition: form-data; "
		 "name=\"campaign_id\"\r\n\r\ncmp-a\r\n--" BND "--\r\n",
		 (int)(strlen(b) - strlen("\r\n--" BND "--\r\n")), b);
	expect_error("/v2/batches/upload", MP, after, 400, "bad_request",
		     "campaign_id must come before the file part");
	free(after);
	free(b);
	/* A name with a control character, however given: 422 naming the field. */
	b = multipart_body("--" BND "\r\nContent-Disposition: form-data; name=\"name\"\r\n"
			   "\r\nbad\x1b[31mname\r\n",
			   "a.csv", "text/csv", "phone\n+14155550300\n");
	expect_error(up, MP, b, 422, "invalid_request",
		     "field name contains a control character (byte 3)");
	free(b);
	expect_error("/v2/batches/upload?campaign_id=cmp-a&name=a%0Ab", "text/csv",
		     "phone\n+14155550300\n", 422, "invalid_request",
		     "field name contains a control character (byte 1)");
	/* A row of one field under a header of two: "1 field", not "1 fields". */
	expect_error(up, "text/csv", "phone,city\n+14155550300\n", 422, "invalid_contacts",
		     "Row 2: 1 field; the header has 2");
	expect_error(up, "text/plain", "phone\n+14155550300\n", 415, "unsupported_media_type",
		     NULL);
	expect_error("/v2/batches/upload?campaign_id=cmp-a&filename=x.txt", "text/csv",
		     "phone\n+14155550300\n", 415, "unsupported_media_type", NULL);
	/* The query as every route's (dispatcher/api/query.h): 400 invalid_parameter naming it. */
	expect_error("/v2/batches/upload?campaign_id=cmp-a&nmae=x", "text/csv",
		     "phone\n+14155550300\n", 400, "invalid_parameter", "'nmae' is unknown");
	expect_error("/v2/batches/upload?campaign_id=cmp-a&campaign_id=cmp-a", "text/csv",
		     "phone\n+14155550300\n", 400, "invalid_parameter",
		     "'campaign_id' is given twice");
	expect_error("/v2/batches/upload?campaign_id=cmp-%zz", "text/csv", "phone\n+14155550300\n",
		     400, "invalid_parameter", "'campaign_id'");

	/* 40 rows, 25 bad: exactly 20 named. */
	char csv[4096];
	size_t n = (size_t)snprintf(csv, sizeof(csv), "phone,city\n");
	for (int i = 0; i < 40; i++)
		n += (size_t)snprintf(csv + n, sizeof(csv) - n, "%s%d,x\n",
				      i % 8 < 5 ? "bad" : "+1415555", 1000 + i);
	b = multipart_body(NULL, "bad.csv", "text/csv", csv);
	cJSON *j = post_json(up, MP, b, 422);
	free(b);
	assert_string_equal(api_str(j, "error"), "invalid_contacts");
	assert_int_equal(api_num(j, "invalid_rows"), 25);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItem(j, "rows")), 20);
	assert_int_equal(api_num(cJSON_GetArrayItem(cJSON_GetObjectItem(j, "rows"), 0), "row"), 2);
	print_message("25 bad rows: %s\n", api_str(j, "message"));
	cJSON_Delete(j);

	expect_error(up, "text/csv", "phone\n+14155550300\n\xff\xfe\n", 422, "invalid_csv",
		     "row 3");
	expect_error(up, "text/csv", "name,city\nAda,Paris\n", 422, "invalid_csv", "phone");
	expect_error(up, "text/csv", "phone,city\n+14155550300,\"Par\"is\n", 422, "invalid_csv",
		     "row 2");
	expect_error("/v2/batches/upload", "text/csv", "phone\n+14155550300\n", 422,
		     "invalid_request", "campaign_id is missing");
	expect_error("/v2/batches/upload?campaign_id=cmp-b", "text/csv", "phone\n+14155550300\n",
		     404, "not_found", NULL);
	expect_error(up, MP,
		     "--" BND "\r\nContent-Disposition: form-data; name=\"x\"\r\n\r\n1\r\n--" BND
		     "--\r\n",
		     422, "invalid_request", "no file");
	expect_error(up, MP,
		     "--" BND "\r\nContent-Disposition: form-data; name=\"file\"; "
		     "filename=\"a.csv\"\r\nContent-Type: text/csv\r\n\r\nphone\n+14155550300\n",
		     400, "bad_request", "closing boundary");
	assert_int_equal(sql_num("SELECT count(*) FROM batches WHERE org_id = '%s'", "org-a"),
			 before);
}

/* Sends a request's head (and optionally some body) on a new connection; returns the fd. */
static int open_request(const char *method, const char *path, const char *key, const char *ctype,
			size_t content_length, const char *some_body)
{
	char head[1024];
	int fd = raw_connect(w1.port, API_WAIT_MS);

	assert_true(fd >= 0);
	snprintf(head, sizeof(head),
		 "%s %s HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\nContent-Type: %s\r\n"
		 "Content-Length: %zu\r\n\r\n%s",
		 method, path, key, ctype, content_length, some_body ? some_body : "");
	assert_int_equal(raw_send_str(fd, head), 0);
	return fd;
}

static void body_limits(void **state)
{
	struct raw_response r;
	char lim[64];
	(void)state;

	/* Above: refused from the Content-Length, before the body. */
	int fd = open_request("POST", "/v2/batches", key_a, "application/json",
			      API_BATCH_JSON_BODY_MAX_T + 1, NULL);
	assert_int_equal(raw_read_response(fd, &r), 0);
	close(fd);
	assert_int_equal(r.status, 413);
	snprintf(lim, sizeof(lim), "at most %zu bytes", (size_t)API_BATCH_JSON_BODY_MAX_T);
	print_message("413: %s\n", r.body);
	assert_non_null(strstr(r.body, lim));
	raw_response_free(&r);
	fd = open_request("POST", "/v2/batches/upload?campaign_id=cmp-a", key_a, "text/csv",
			  API_BATCH_CSV_BODY_MAX_T + 1, NULL);
	assert_int_equal(raw_read_response(fd, &r), 0);
	close(fd);
	assert_int_equal(r.status, 413);
	snprintf(lim, sizeof(lim), "at most %zu bytes", (size_t)API_BATCH_CSV_BODY_MAX_T);
	assert_non_null(strstr(r.body, lim));
	raw_response_free(&r);

	/* At: a body of exactly the limit (one contact, then spaces) is imported. */
	const char *json =
		"{\"campaign_id\":\"cmp-a\",\"contacts\":[{\"phone\":\"+14155550400\"}]}";
	size_t total = API_BATCH_JSON_BODY_MAX_T, jl = strlen(json);
	char *pad = malloc(1 << 20);
	assert_non_null(pad);
	memset(pad, ' ', 1 << 20);
	fd = open_request("POST", "/v2/batches", key_a, "application/json", total, json);
	for (size_t left = total - jl; left > 0;) {
		size_t k = left < (1 << 20) ? left : (1 << 20);
		assert_int_equal(raw_send(fd, pad, k), 0);
		left -= k;
	}
	free(pad);
	assert_int_equal(raw_read_response(fd, &r), 0);
	close(fd);
	if (r.status != 201)
		fail_msg("at the limit: %d %s", r.status, r.body);
	raw_response_free(&r);
}

static long hwm_kib(pid_t pid)
{
	char path[64], line[256];
	long kib = -1;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %ld kB", &kib) == 1)
			break;
	fclose(f);
	return kib;
}

static void imports_capped(void **state)
{
	struct raw_response r;
	char v[16];
	(void)state;
	long long before = sql_num("SELECT count(*) FROM batches WHERE org_id = '%s'", "org-a");

	/* An upload of org-a that never finishes its body holds org-a's import slot. */
	int a = open_request("POST", "/v2/batches/upload?campaign_id=cmp-a", key_a, "text/csv",
			     100000, "phone\n+14155550500\n");
	long long deadline = fixture_now_ms() + API_WAIT_MS;
	int st;
	do { /* until it is in its handler: then org-a's next one is refused */
		char b[64];
		/* Under load the held upload can reach its handler while one of the polls below
		 * holds the slot: it is answered 503 and closed. Then it is opened again. */
		if (recv(a, b, sizeof(b), MSG_DONTWAIT) >= 0) {
			close(a);
			a = open_request("POST", "/v2/batches/upload?campaign_id=cmp-a", key_a,
					 "text/csv", 100000, "phone\n+14155550500\n");
		}
		st = post("/v2/batches/upload?campaign_id=cmp-a", key_a, "text/csv",
			  "phone\n+14155550502\n", &r);
		if (st == 503) {
			assert_non_null(raw_header(&r, "Retry-After", v, sizeof(v)));
			assert_string_equal(v, "5");
			assert_non_null(strstr(r.body, "imports_busy"));
			assert_non_null(strstr(r.body, "this organisation"));
		} else {
			assert_int_equal(st, 201);
		}
		raw_response_free(&r);
		assert_true(fixture_now_ms() < deadline);
	} while (st != 503);
	/* Meanwhile another organisation imports (JSON and CSV), twice in a row. */
	for (int i = 0; i < 2; i++) {
		st = api_request(w1.port, "POST", "/v2/batches/upload?campaign_id=cmp-b", key_b,
				 "text/csv", "phone\n+14155550510\n", &r);
		if (st != 201)
			fail_msg("org-b upload while org-a's runs: %d %s", st, r.body);
		raw_response_free(&r);
		st = api_request(w1.port, "POST", "/v2/batches", key_b, "application/json",
				 "{\"campaign_id\":\"cmp-b\",\"contacts\":[{\"phone\":"
				 "\"+14155550511\"}]}",
				 &r);
		if (st != 201)
			fail_msg("org-b JSON while org-a's runs: %d %s", st, r.body);
		raw_response_free(&r);
	}
	/* org-a's client goes away: its import rolls back and frees the slot. */
	raw_close_reset(a);
	do {
		st = post("/v2/batches/upload?campaign_id=cmp-a", key_a, "text/csv",
			  "phone\n+14155550503\n", &r);
		raw_response_free(&r);
		assert_true(st == 201 || st == 503);
		assert_true(fixture_now_ms() < deadline);
		if (st == 503)
			fixture_sleep_ms(20);
	} while (st != 201);
	assert_int_equal(sql_num("SELECT count(*) FROM contacts c JOIN batches b ON b.id = "
				 "c.batch_id WHERE b.org_id = '%s' AND c.phone IN ('+14155550500', "
				 "'+14155550501')",
				 "org-a"),
			 0);
	assert_true(sql_num("SELECT count(*) FROM batches WHERE org_id = '%s'", "org-a") > before);
}

/* The import holds a connection of the API's own import pool, never one of the worker's (whose
 * connection 0 holds every LISTEN): its backend, terminated, is logged as pg[import.N]. */
static void import_own_pool(void **state)
{
	(void)state;
	int a = open_request("POST", "/v2/batches/upload?campaign_id=cmp-a", key_a, "text/csv",
			     100000, "phone\n+14155550520\n");
	long long deadline = fixture_now_ms() + API_WAIT_MS;
	char pid[32] = "";

	while (!pid[0]) { /* the import's backend, in its transaction */
		PGresult *q = api_sql(db, "SELECT pid FROM pg_stat_activity WHERE pid <> "
					  "pg_backend_pid() AND xact_start IS NOT NULL AND (query "
					  "LIKE 'COPY contacts%%' OR query LIKE 'WITH c AS (SELECT "
					  "status FROM campaigns%%')");
		if (PQntuples(q) == 1)
			snprintf(pid, sizeof(pid), "%s", PQgetvalue(q, 0, 0));
		PQclear(q);
		assert_true(fixture_now_ms() < deadline);
		if (!pid[0])
			fixture_sleep_ms(20);
	}
	PQclear(api_sql(db, "SELECT pg_terminate_backend(%s)", pid));
	/* The loss is logged by the import pool's connection (on the worker's pool it would be
	 * pg[worker.N]: the import's connection deaf to the worker's LISTENs). */
	bool found = false;
	while (!found) {
		FILE *f = fopen(w1.log, "r");
		char line[1024];
		assert_non_null(f);
		while (fgets(line, sizeof(line), f))
			found = found ||
				(strstr(line, "connection lost") && strstr(line, "pg[import."));
		fclose(f);
		if (!found && fixture_now_ms() > deadline)
			fail_msg("no pg[import.N] connection lost in %s: the import's backend %s "
				 "was "
				 "not the import pool's",
				 w1.log, pid);
		if (!found)
			fixture_sleep_ms(20);
	}
	raw_close_reset(a); /* the import, its connection gone, is rolled back */
}

/* One oversized contact, or another field, is refused by its length before it is parsed: at
 * once, and without the worker's memory growing by the contact's tree (an 8 MiB contact of
 * small numbers parsed whole is ~256 MiB of cJSON). */
static void oversized_contact(void **state)
{
	enum { BIG = 8 << 20 };
	struct raw_response r;
	(void)state;
	char *body = malloc(BIG + 256), *o = body;

	assert_non_null(body);
	o += sprintf(o, "{\"campaign_id\":\"cmp-a\",\"contacts\":[{\"phone\":\"+14155550530\"},"
			"{\"phone\":\"+14155550531\",\"variables\":{\"a\":[1");
	while (o - body < BIG)
		o += sprintf(o, ",1");
	o += sprintf(o, "]}}]}");
	api_worker_stop(&w1); /* a fresh worker: VmHWM is its own */
	api_worker_start(&w1, "bc-big");
	long base = hwm_kib(w1.pid);
	long long t0 = fixture_now_ms();
	int fd = open_request("POST", "/v2/batches", key_a, "application/json", (size_t)(o - body),
			      NULL);
	assert_int_equal(raw_send(fd, body, (size_t)(o - body)), 0);
	assert_int_equal(raw_read_response(fd, &r), 0);
	close(fd);
	long long ms = fixture_now_ms() - t0;
	long grew = hwm_kib(w1.pid) - base;
	print_message("oversized_contact: %zu bytes answered %d in %lld ms; VmHWM +%ld KiB\n",
		      (size_t)(o - body), r.status, ms, grew);
	if (r.status != 422 || !strstr(r.body, "contacts[1] is"))
		fail_msg("%d %s", r.status, r.body);
	raw_response_free(&r);
	assert_true(grew < 64 * 1024);
	free(body);

	/* Another field over 4 KiB, the campaign_id too: 422 naming it. */
	char *big = malloc(10000);
	assert_non_null(big);
	memset(big, 'x', 5000);
	big[5000] = '\0';
	char *b2 = malloc(12000);
	assert_non_null(b2);
	snprintf(b2, 12000,
		 "{\"campaign_id\":\"cmp-a\",\"note\":\"%s\",\"contacts\":[{\"phone\":"
		 "\"+14155550532\"}]}",
		 big);
	expect_error("/v2/batches", "application/json", b2, 422, "invalid_request",
		     "field note is 5002 bytes");
	snprintf(b2, 12000, "{\"campaign_id\":\"%s\",\"contacts\":[{\"phone\":\"+14155550532\"}]}",
		 big);
	expect_error("/v2/batches", "application/json", b2, 422, "invalid_request",
		     "field campaign_id is 5002 bytes");
	free(big);
	free(b2);
}

/* Sends body (len bytes) as one request and reads the answer. */
static int send_big(const char *path, const char *ctype, const char *body, size_t len,
		    struct raw_response *r)
{
	int fd = open_request("POST", path, key_big, ctype, len, NULL);

	assert_int_equal(raw_send(fd, body, len), 0);
	assert_int_equal(raw_read_response(fd, r), 0);
	close(fd);
	return r->status;
}

static void import_250k_rss(void **state)
{
	enum { N = 250000 };
	struct raw_response r;
	(void)state;
	char *csv = malloc((size_t)N * 32 + 64), *json = malloc((size_t)N * 80 + 128);
	size_t cl = 0, jl = 0;

	assert_true(csv && json);
	cl += (size_t)sprintf(csv, "phone,first_name\n");
	jl += (size_t)sprintf(json, "{\"campaign_id\":\"cmp-big\",\"name\":\"json-250k\","
				    "\"contacts\":[");
	for (int i = 0; i < N; i++) {
		cl += (size_t)sprintf(csv + cl, "+1%d,name%d\n", 2000000000 + i, i);
		jl += (size_t)sprintf(
			json + jl,
			"%s{\"phone\":\"+1%d\",\"variables\":{\"first_name\":\"name%d\"}}",
			i ? "," : "", 3000000000u + (unsigned)i, i);
	}
	jl += (size_t)sprintf(json + jl, "]}");
	/* Each import in a fresh worker, so that VmHWM is its own. */
	const char *names[2] = { "csv", "json" };
	for (int k = 0; k < 2; k++) {
		api_worker_stop(&w1);
		api_worker_start(&w1, k ? "bc-json" : "bc-csv");
		long base = hwm_kib(w1.pid);
		long long t0 = fixture_now_ms();
		int st = k ? send_big("/v2/batches", "application/json", json, jl, &r)
			   : send_big("/v2/batches/upload?campaign_id=cmp-big&name=csv-250k",
				      "text/csv", csv, cl, &r);
		long long ms = fixture_now_ms() - t0;
		if (st != 201)
			fail_msg("%s: %d %s", names[k], st, r.body);
		raw_response_free(&r);
		print_message("import_250k %s: %zu bytes, %lld ms (%.0f rows/s); worker VmHWM %ld "
			      "KiB (%ld KiB before the request)\n",
			      names[k], k ? jl : cl, ms, N * 1000.0 / (double)(ms ? ms : 1),
			      hwm_kib(w1.pid), base);
		/* Room for the next one under the ceiling. */
		PQclear(api_sql(db, "DELETE FROM batches WHERE campaign_id = 'cmp-big'"));
	}
	free(csv);
	free(json);
}

static int setup(void **state)
{
	(void)state;
	fixture_start(&svc, true, true, false, true);
	db = fixture_pg(&svc);
	api_make_org(db, "org-a", 5, "cmp-a", "cmp-a-stopped", NULL);
	api_make_org(db, "org-big", 5, "cmp-big", NULL);
	api_make_org(db, "org-b", 5, "cmp-b", NULL);
	PQclear(api_sql(db, "UPDATE campaigns SET status = 'stopped' WHERE id = 'cmp-a-stopped'"));
	/* imports_capped polls until org-a's import slot is taken: under ASan that can be more
	 * than the default 600 calls.create a minute (a 429 is not what these tests check). */
	PQclear(api_sql(db, "UPDATE organisations SET rate_calls_per_minute = 100000"
			    " WHERE id IN ('org-a', 'org-b', 'org-big')"));
	api_make_key(db, "org-a", "a", key_a, NULL);
	api_make_key(db, "org-b", "b", key_b, NULL);
	api_make_key(db, "org-big", "big", key_big, NULL);
	api_worker_start(&w1, "bc");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	api_worker_kill(&w1);
	PQfinish(db);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(json_created),
		cmocka_unit_test(json_errors),
		cmocka_unit_test(ceiling_at_below_above),
		cmocka_unit_test(csv_created),
		cmocka_unit_test(csv_errors),
		cmocka_unit_test(body_limits),
		cmocka_unit_test(imports_capped),
		cmocka_unit_test(import_own_pool),
		cmocka_unit_test(oversized_contact),
		cmocka_unit_test(import_250k_rss),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
