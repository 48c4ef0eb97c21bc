/* The batch importer (dispatcher/api/batch_import.h) against a real PostgreSQL: CSV and JSON
 * happy paths, any chunk boundaries, bad rows named (at most 20), malformed files, the
 * pending ceiling at/below/above and failing open when its count times out, another
 * organisation's campaign, an abort mid-stream — and, each time it fails, nothing written.
 * Prints the import rate and peak RSS of 250,000-contact imports (figures, not assertions). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "batch_import.h"
#include "pg_pool.h"
#include "pg_test.h"

#include <errno.h>
#include <sys/resource.h>

static struct embedded svc;
static PGconn *admin;
static uv_loop_t loop;
static struct pg_pool *pool;

struct run {
	struct batch_import *imp;
	int done, resumes, closed;
	bool paused;
	int http;
	enum batch_import_status status;
	char error[48], message[1024], batch_id[40];
	uint64_t total, bad, pending_before;
	unsigned n_rows;
	uint64_t rows[BATCH_IMPORT_MAX_NAMED];
	bool checked;
	char body[2048];
};

static void done_cb(const struct batch_import_result *res, void *data)
{
	struct run *r = data;

	r->done++;
	r->http = res->http_status;
	r->status = res->status;
	snprintf(r->error, sizeof(r->error), "%s", res->error ? res->error : "");
	snprintf(r->message, sizeof(r->message), "%s", res->message);
	snprintf(r->batch_id, sizeof(r->batch_id), "%s", res->batch_id ? res->batch_id : "");
	r->total = res->total_rows;
	r->bad = res->bad_rows;
	r->n_rows = res->n_rows;
	for (unsigned i = 0; i < res->n_rows; i++)
		r->rows[i] = res->rows[i].row;
	r->checked = res->ceiling_checked;
	r->pending_before = res->pending_before;
	cJSON *j = batch_import_result_json(res);
	char *txt = cJSON_PrintUnformatted(j);
	snprintf(r->body, sizeof(r->body), "%s", txt);
	free(txt);
	cJSON_Delete(j);
}

static void resume_cb(void *data)
{
	struct run *r = data;
	r->paused = false;
	r->resumes++;
}

static bool not_paused(void *arg)
{
	return !((struct run *)arg)->paused;
}

static void start(struct run *r, const char *org, const char *campaign,
		  enum batch_import_source src, uint64_t ceiling, uint64_t count_timeout_ms)
{
	struct batch_import_options o = {
		.org_id = org,
		.campaign_id = campaign,
		.name = "test batch",
		.source = src,
		.pending_ceiling = ceiling,
		.count_timeout_ms = count_timeout_ms,
		.done_cb = done_cb,
		.resume_cb = resume_cb,
		.data = r,
	};
	memset(r, 0, sizeof(*r));
	assert_int_equal(batch_import_new(&loop, pool, &o, &r->imp), 0);
}

static void feed(struct run *r, const char *data, size_t len)
{
	int rc = batch_import_feed(r->imp, data, len);
	assert_true(rc == 0 || rc == BATCH_IMPORT_PAUSE);
	if (rc == BATCH_IMPORT_PAUSE) {
		r->paused = true;
		fixture_run_until(&loop, not_paused, r, 120000);
	}
}

static void finish(struct run *r)
{
	assert_int_equal(batch_import_finish(r->imp), 0);
	assert_int_equal(batch_import_finish(r->imp), -EINVAL);
	fixture_run_until_count(&loop, &r->done, 1, 300000);
}

/* Imports text as a CSV file handed over in chunks of chunk bytes. */
static void import_csv(struct run *r, const char *org, const char *campaign, const char *text,
		       size_t chunk, uint64_t ceiling)
{
	size_t len = strlen(text);

	start(r, org, campaign, BATCH_IMPORT_CSV, ceiling, 0);
	for (size_t off = 0; off < len; off += chunk)
		feed(r, text + off, len - off < chunk ? len - off : chunk);
	finish(r);
}

static void add(struct run *r, const char *phone, const char *vars)
{
	int rc = batch_import_add(r->imp, phone, strlen(phone), vars, vars ? strlen(vars) : 0);
	assert_true(rc == 0 || rc == BATCH_IMPORT_PAUSE);
	if (rc == BATCH_IMPORT_PAUSE) {
		r->paused = true;
		fixture_run_until(&loop, not_paused, r, 120000);
	}
}

/* An organisation with one agent and one campaign of that status: ids org_<t>, cmp_<t>. */
static void make_org(const char *t, const char *status)
{
	char sql[512];
	snprintf(sql, sizeof(sql),
		 "INSERT INTO organisations (id, name) VALUES ('org_%s', '%s');"
		 "INSERT INTO agents (id, org_id) VALUES ('ag_%s', 'org_%s');"
		 "INSERT INTO campaigns (id, org_id, agent_id, status) VALUES ('cmp_%s', 'org_%s', "
		 "'ag_%s', '%s')",
		 t, t, t, t, t, t, t, status);
	PQclear(fixture_sql(admin, sql));
}

static long long count_for(const char *what, const char *org)
{
	char sql[200];
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s WHERE org_id = '%s'", what, org);
	return admin_int(admin, sql);
}

static void assert_nothing_written(const char *org)
{
	assert_int_equal(count_for("batches", org), 0);
	assert_int_equal(count_for("contacts", org), 0);
}

static const char happy_csv[] =
	"Phone,name,note\r\n"
	"+14155550100,Ann,plain\r\n"
	"+1 (415) 555-0101,\"B, \"\"quoted\"\"\",\"two\nlines \\ tab\there\"\r\n"
	"\r\n"
	"+447700900123,Cé,\"\"\r\n";

static void check_happy_csv(const struct run *r, const char *org)
{
	char sql[600];

	assert_int_equal(r->http, 201);
	assert_int_equal(r->total, 3);
	assert_true(r->checked);
	assert_int_equal(count_for("contacts", org), 3);
	snprintf(sql, sizeof(sql),
		 "SELECT total_contacts FROM batches WHERE id = '%s' AND org_id = '%s' AND source "
		 "= 'csv'",
		 r->batch_id, org);
	assert_int_equal(admin_int(admin, sql), 3);
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM contacts WHERE org_id = '%s' AND ("
		 "(phone = '+14155550100' AND variables = '{\"name\":\"Ann\",\"note\":\"plain\"}') "
		 "OR"
		 "(phone = '+14155550101' AND variables->>'name' = 'B, \"quoted\"' AND "
		 "variables->>'note' = E'two\\nlines \\\\ tab\\there') OR"
		 "(phone = '+447700900123' AND variables = '{\"name\":\"Cé\",\"note\":\"\"}'))",
		 org);
	assert_int_equal(admin_int(admin, sql), 3);
}

static void csv_happy_path(void **state)
{
	struct run r;

	make_org("csv", "active");
	import_csv(&r, "org_csv", "cmp_csv", happy_csv, 4096, 250000);
	check_happy_csv(&r, "org_csv");
	assert_non_null(strstr(r.body, "\"total_contacts\":3"));
}

static void csv_byte_by_byte(void **state)
{
	struct run r;

	make_org("bytes", "paused"); /* a paused campaign takes batches */
	import_csv(&r, "org_bytes", "cmp_bytes", happy_csv, 1, 250000);
	check_happy_csv(&r, "org_bytes");
}

static void json_happy_path(void **state)
{
	struct run r;

	make_org("json", "active");
	start(&r, "org_json", "cmp_json", BATCH_IMPORT_JSON, 250000, 0);
	add(&r, "+14155550100", NULL);
	add(&r, "+14155550102", "{\n\t\"a\": {\"b\": [1, 2]},\n\t\"s\": \"x\\\\y\\\"\"}");
	add(&r, "+14155550103", "{}");
	finish(&r);
	assert_int_equal(r.http, 201);
	assert_int_equal(r.total, 3);
	assert_int_equal(count_for("contacts", "org_json"), 3);
	assert_int_equal(admin_int(admin,
				   "SELECT count(*) FROM contacts WHERE org_id = 'org_json' AND "
				   "((phone = '+14155550100' AND variables IS NULL) OR "
				   "(variables = '{\"a\":{\"b\":[1,2]},\"s\":\"x\\\\y\\\"\"}') OR "
				   "variables = '{}')"),
			 3);
	assert_int_equal(admin_int(admin, "SELECT total_contacts FROM batches WHERE org_id = "
					  "'org_json' AND source = 'json'"),
			 3);

	/* Bad contacts: a phone and variables that are not an object. */
	start(&r, "org_json", "cmp_json", BATCH_IMPORT_JSON, 250000, 0);
	add(&r, "+14155550100", NULL);
	add(&r, "4155550100", NULL);
	add(&r, "+14155550100", "[1]");
	add(&r, "+14155550100", "{\"a\":1,\"a\":2}");
	finish(&r);
	assert_int_equal(r.http, 422);
	assert_int_equal(r.bad, 3);
	assert_int_equal(r.rows[0], 1);
	assert_int_equal(r.rows[2], 3);
	assert_int_equal(count_for("contacts", "org_json"), 3);
}

/* Numbers in variables that cJSON reads as infinity or jsonb cannot hold are bad contacts named
 * by index (they were a 500 when the COPY failed); the largest ones both hold are written. */
static void json_numbers_out_of_range(void **state)
{
	struct run r;
	(void)state;
	static char longfrac[16500];
	int n = snprintf(longfrac, sizeof(longfrac), "{\"x\":0.");

	memset(longfrac + n, '0', 16383);
	snprintf(longfrac + n + 16383, sizeof(longfrac) - (size_t)n - 16383, "1}");
	make_org("num", "active");
	start(&r, "org_num", "cmp_num", BATCH_IMPORT_JSON, 250000, 0);
	add(&r, "+14155550100", "{\"x\":1e308,\"y\":[1e-1000,-0.5,\"1e999999\"]}");
	add(&r, "+14155550101", "{\"x\":1e999999}");
	add(&r, "+14155550102", "{\"x\":{\"y\":[-1e999999]}}");
	add(&r, "+14155550103", "{\"x\":0.0e-2000}");
	add(&r, "+14155550104", longfrac);
	finish(&r);
	assert_int_equal(r.http, 422);
	assert_string_equal(r.error, "invalid_contacts");
	assert_int_equal(r.bad, 4);
	for (unsigned i = 0; i < 4; i++)
		assert_int_equal(r.rows[i], i + 1);
	assert_non_null(strstr(r.body, "the number 1e999999 is out of range"));
	assert_nothing_written("org_num");

	start(&r, "org_num", "cmp_num", BATCH_IMPORT_JSON, 250000, 0);
	add(&r, "+14155550100", "{\"x\":1e308,\"y\":[1e-1000,-0.5,\"1e999999\"]}");
	finish(&r);
	assert_int_equal(r.http, 201);
	assert_int_equal(count_for("contacts", "org_num"), 1);
}

/* A CSV of n rows; the data rows listed in bad (1-based, 0-terminated) have a bad phone. */
static char *make_csv(int n, const int *bad)
{
	char *s = malloc((size_t)n * 40 + 64), *o = s;
	if (!s)
		return NULL;
	o += sprintf(o, "to_number,n\n");
	for (int i = 1; i <= n; i++) {
		bool b = false;
		for (const int *p = bad; p && *p; p++)
			b = b || *p == i;
		o += sprintf(o, b ? "not a phone,%d\n" : "+1415%07d,%d\n", i, i);
	}
	return s;
}

static void one_bad_row_among_many(void **state)
{
	struct run r;
	int bad[] = { 3000, 0 };
	char *csv = make_csv(5000, bad);

	make_org("onebad", "active");
	import_csv(&r, "org_onebad", "cmp_onebad", csv, 1000, 250000);
	free(csv);
	assert_int_equal(r.http, 422);
	assert_string_equal(r.error, "invalid_contacts");
	assert_int_equal(r.bad, 1);
	assert_int_equal(r.total, 5000);
	assert_int_equal(r.rows[0], 3001); /* the header is row 1 */
	assert_non_null(strstr(r.message, "row 3001"));
	assert_nothing_written("org_onebad");
}

static void twenty_five_bad_rows(void **state)
{
	struct run r;
	int bad[26];
	for (int i = 0; i < 25; i++)
		bad[i] = 10 * (i + 1);
	bad[25] = 0;
	char *csv = make_csv(400, bad);

	make_org("many", "active");
	import_csv(&r, "org_many", "cmp_many", csv, 333, 250000);
	free(csv);
	assert_int_equal(r.http, 422);
	assert_int_equal(r.bad, 25);
	assert_int_equal(r.n_rows, 20);
	for (unsigned i = 0; i < 20; i++)
		assert_int_equal(r.rows[i], 10 * (i + 1) + 1);
	assert_non_null(strstr(r.message, "rows 11, 21, 31"));
	assert_non_null(strstr(r.message, ", 201 and 5 more"));
	assert_null(strstr(r.message, "211"));
	assert_nothing_written("org_many");
}

static void bad_files(void **state)
{
	struct run r;
	static const struct {
		const char *csv, *needle;
	} cases[] = {
		{ "phone,name\n+14155550100,a\n+14155550101,b\xff\n", "row 3" },
		{ "name,city\n+14155550100,a\n", "no phone column" },
		{ "phone,name\n+14155550100,a\n+14155550101,b\n+14155550102,\"c\"x\n", "row 4" },
		{ "phone,name\n", "header row and no contacts" },
		{ "", "empty" },
		{ "phone,Phone_Number\n+14155550100,+14155550100\n", "two phone columns" },
		{ "phone,a,a\n+14155550100,1,2\n", "appears twice" },
	};

	make_org("files", "active");
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		import_csv(&r, "org_files", "cmp_files", cases[i].csv, 7, 250000);
		assert_int_equal(r.http, 422);
		if (!strstr(r.message, cases[i].needle))
			fail_msg("case %zu: %s", i, r.message);
		assert_nothing_written("org_files");
	}
}

static void ceiling_at_below_above(void **state)
{
	struct run r;
	char *csv;

	make_org("ceil", "active");
	/* The batch alone: ceiling - 1 and ceiling pass, ceiling + 1 does not. */
	csv = make_csv(11, NULL);
	import_csv(&r, "org_ceil", "cmp_ceil", csv, 64, 10);
	free(csv);
	assert_int_equal(r.http, 422);
	assert_string_equal(r.error, "pending_ceiling_exceeded");
	assert_non_null(strstr(r.message, "11 contacts"));
	assert_nothing_written("org_ceil");
	csv = make_csv(9, NULL);
	import_csv(&r, "org_ceil", "cmp_ceil", csv, 64, 10);
	free(csv);
	assert_int_equal(r.http, 201);
	assert_true(r.checked);
	assert_int_equal(r.pending_before, 0);
	/* With 9 pending: one more is the ceiling, two more pass it. */
	start(&r, "org_ceil", "cmp_ceil", BATCH_IMPORT_JSON, 10, 0);
	add(&r, "+14155550100", NULL);
	add(&r, "+14155550101", NULL);
	finish(&r);
	assert_int_equal(r.http, 422);
	assert_string_equal(r.error, "pending_ceiling_exceeded");
	assert_true(r.checked);
	assert_int_equal(r.pending_before, 9);
	assert_non_null(strstr(r.message, "ceiling of 10"));
	assert_int_equal(count_for("contacts", "org_ceil"), 9);
	start(&r, "org_ceil", "cmp_ceil", BATCH_IMPORT_JSON, 10, 0);
	add(&r, "+14155550100", NULL);
	finish(&r);
	assert_int_equal(r.http, 201);
	assert_int_equal(count_for("contacts", "org_ceil"), 10);
	/* Held contacts of a paused batch count too. */
	PQclear(fixture_sql(admin, "UPDATE batches SET status = 'paused' WHERE org_id = 'org_ceil';"
				   "UPDATE contacts SET state = 'held' WHERE org_id = 'org_ceil'"));
	start(&r, "org_ceil", "cmp_ceil", BATCH_IMPORT_JSON, 10, 0);
	add(&r, "+14155550100", NULL);
	finish(&r);
	assert_int_equal(r.http, 422);
	assert_int_equal(r.pending_before, 10);
}

/* The test holds the importer's count lock: the count times out, the import goes through. */
static void ceiling_count_timeout_fails_open(void **state)
{
	struct run r;
	PGconn *holder = fixture_pg(&svc);

	make_org("open", "active");
	PQclear(fixture_sql(holder, "SELECT pg_advisory_lock(hashtext('dsp_batch_import'), "
				    "hashtext('org_open'))"));
	start(&r, "org_open", "cmp_open", BATCH_IMPORT_JSON, 1, 100);
	add(&r, "+14155550100", NULL);
	finish(&r);
	assert_int_equal(r.http, 201);
	assert_false(r.checked);
	assert_non_null(strstr(r.body, "\"checked\":false"));
	assert_int_equal(count_for("contacts", "org_open"), 1);
	/* The session's statement timeout is back to its value after the count. */
	PQfinish(holder);
	start(&r, "org_open", "cmp_open", BATCH_IMPORT_JSON, 1, 100);
	add(&r, "+14155550101", NULL);
	finish(&r);
	assert_int_equal(r.http, 422);
	assert_true(r.checked);
	assert_int_equal(r.pending_before, 1);
}

static void campaign_of_another_org(void **state)
{
	struct run r;

	make_org("mine", "active");
	make_org("theirs", "active");
	make_org("stopped", "stopped");
	import_csv(&r, "org_mine", "cmp_theirs", "phone\n+14155550100\n", 100, 250000);
	assert_int_equal(r.http, 404);
	assert_string_equal(r.error, "not_found");
	import_csv(&r, "org_mine", "no such id!", "phone\n+14155550100\n", 100, 250000);
	assert_int_equal(r.http, 404);
	import_csv(&r, "org_stopped", "cmp_stopped", "phone\n+14155550100\n", 100, 250000);
	assert_int_equal(r.http, 409);
	assert_nothing_written("org_mine");
	assert_nothing_written("org_theirs");
	assert_nothing_written("org_stopped");
}

static void closed(void *data)
{
	((struct run *)data)->closed++;
}

static bool no_txn_open(void *arg)
{
	return admin_int(admin, "SELECT count(*) FROM pg_stat_activity WHERE state LIKE "
				"'idle in transaction%' OR query LIKE 'COPY contacts%'") == 0;
}

static void abort_mid_stream(void **state)
{
	struct run r;
	char *csv = make_csv(20000, NULL);
	size_t half = strlen(csv) / 2;

	make_org("abort", "active");
	start(&r, "org_abort", "cmp_abort", BATCH_IMPORT_CSV, 250000, 0);
	for (size_t off = 0; off < half; off += 4096)
		feed(&r, csv + off, 4096);
	for (int i = 0; i < 20; i++)
		uv_run(&loop, UV_RUN_NOWAIT);
	batch_import_abort(r.imp, closed, &r);
	fixture_run_until_count(&loop, &r.closed, 1, 60000);
	assert_int_equal(r.done, 0);
	fixture_run_until(&loop, no_txn_open, NULL, 60000);
	assert_nothing_written("org_abort");
	assert_false(pg_conn_is_claimed(pg_pool_conn(pool, 0)));
	assert_false(pg_conn_is_claimed(pg_pool_conn(pool, 1)));
	free(csv);
}

static double now_s(void)
{
	return (double)uv_hrtime() / 1e9;
}

static long peak_rss_kb(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_maxrss;
}

/* 250,000 contacts by each route; the CSV is generated chunk by chunk (never whole). */
static void import_250k(void **state)
{
	struct run r;
	char chunk[65536];
	const int n = 250000;

	make_org("big", "active");
	long rss0 = peak_rss_kb();
	double t0 = now_s();
	start(&r, "org_big", "cmp_big", BATCH_IMPORT_CSV, (uint64_t)n, 0);
	size_t o = (size_t)sprintf(chunk, "phone,first_name,account\n");
	for (int i = 0; i < n; i++) {
		o += (size_t)sprintf(chunk + o, "+1415%07d,Name %d,\"acct, %d\"\n", i, i, i);
		if (o > sizeof(chunk) - 128) {
			feed(&r, chunk, o);
			o = 0;
		}
	}
	feed(&r, chunk, o);
	finish(&r);
	double t1 = now_s();
	assert_int_equal(r.http, 201);
	assert_int_equal(count_for("contacts", "org_big"), n);
	long rss1 = peak_rss_kb();
	print_message("batch_import CSV: %d rows in %.2f s = %.0f rows/s; peak RSS %ld kB "
		      "(%ld kB before); %d resumes\n",
		      n, t1 - t0, n / (t1 - t0), rss1, rss0, r.resumes);
	PQclear(fixture_sql(admin, "DELETE FROM batches WHERE org_id = 'org_big'"));

	t0 = now_s();
	start(&r, "org_big", "cmp_big", BATCH_IMPORT_JSON, (uint64_t)n, 0);
	for (int i = 0; i < n; i++) {
		char phone[20], vars[64];
		snprintf(phone, sizeof(phone), "+1415%07d", i);
		snprintf(vars, sizeof(vars), "{\"first_name\":\"Name %d\",\"account\":%d}", i, i);
		add(&r, phone, vars);
	}
	finish(&r);
	t1 = now_s();
	assert_int_equal(r.http, 201);
	assert_int_equal(count_for("contacts", "org_big"), n);
	print_message("batch_import JSON (add): %d contacts in %.2f s = %.0f contacts/s; peak RSS "
		      "%ld kB\n",
		      n, t1 - t0, n / (t1 - t0), peak_rss_kb());
}

static bool pool_up(void *arg)
{
	return pg_pool_up_count(arg) == pg_pool_size(arg);
}

static int setup(void **state)
{
	fixture_start(&svc, true, false, false, true);
	admin = fixture_pg(&svc);
	uv_loop_init(&loop);
	struct pg_pool_options po = {
		.conninfo = svc.database_url,
		.name = "import",
		.size = 2,
		.connect_timeout_ms = 10000,
		.query_timeout_ms = 120000,
		.reconnect_min_ms = 20,
		.reconnect_max_ms = 200,
	};
	assert_int_equal(pg_pool_new(&loop, &po, &pool), 0);
	assert_int_equal(pg_pool_start(pool), 0);
	fixture_run_until(&loop, pool_up, pool, 60000);
	return 0;
}

static int teardown(void **state)
{
	pg_pool_close(pool, NULL, NULL);
	fixture_loop_close(&loop);
	PQfinish(admin);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(csv_happy_path),
		cmocka_unit_test(csv_byte_by_byte),
		cmocka_unit_test(json_happy_path),
		cmocka_unit_test(json_numbers_out_of_range),
		cmocka_unit_test(one_bad_row_among_many),
		cmocka_unit_test(twenty_five_bad_rows),
		cmocka_unit_test(bad_files),
		cmocka_unit_test(ceiling_at_below_above),
		cmocka_unit_test(ceiling_count_timeout_fails_open),
		cmocka_unit_test(campaign_of_another_org),
		cmocka_unit_test(abort_mid_stream),
		cmocka_unit_test(import_250k),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
