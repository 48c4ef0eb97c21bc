/* The API end to end (issue 10, Tests): one organisation uploads a 50,000-row CSV and watches it
 * drain through `dispatcher run` dialling the provider stub (every call completed after 20 ms),
 * while another organisation's key gets 404 for that batch and every route of the API —
 * enumerated from the worker's own GET /openapi.json, so none is forgotten — answers 401 to an
 * unknown key and to a revoked one.
 *
 * Progress is read with GET /v2/batches/{id}: done + failed only grow, and reach 50,000 with
 * the batch "completed"; the stub's ground truth agrees (calls placed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api_test.h"
#include "worker_proc.h"

#define ROWS	 50000
#define DRAIN_MS 600000 /* generous for a loaded CI machine; the run prints the time taken */

static struct embedded svc;
static struct api_worker w1;
static struct wproc_stub stub;
static PGconn *db;

static char *csv_multipart(size_t *len)
{
	size_t cap = (size_t)ROWS * 32 + 1024, n = 0;
	char *b = malloc(cap);

	assert_non_null(b);
	n += (size_t)snprintf(b, cap,
			      "--e2e\r\nContent-Disposition: form-data; name=\"file\"; "
			      "filename=\"e2e.csv\"\r\nContent-Type: text/csv\r\n\r\nphone,n\r\n");
	for (int i = 0; i < ROWS; i++)
		n += (size_t)snprintf(b + n, cap - n, "+1%d,%d\r\n", 2100000000 + i, i);
	n += (size_t)snprintf(b + n, cap - n, "\r\n--e2e--\r\n");
	*len = n;
	return b;
}

static int upload(const char *key, const char *body, size_t len, struct raw_response *r)
{
	char head[512];
	int fd = raw_connect(w1.port, API_WAIT_MS);

	assert_true(fd >= 0);
	snprintf(head, sizeof(head),
		 "POST /v2/batches/upload?campaign_id=cmp-e2e HTTP/1.1\r\nHost: t\r\n"
		 "Authorization: Bearer %s\r\nContent-Type: multipart/form-data; boundary=e2e\r\n"
		 "Content-Length: %zu\r\n\r\n",
		 key, len);
	assert_int_equal(raw_send_str(fd, head), 0);
	assert_int_equal(raw_send(fd, body, len), 0);
	assert_int_equal(raw_read_response(fd, r), 0);
	close(fd);
	return r->status;
}

/* Every operation of the worker's OpenAPI description that needs a key answers 401 to key
 * (an unknown or a revoked one), with the one 401 body. Returns how many were tried. */
static int every_route_401(const char *key, const char *batch_id)
{
	struct raw_response r;
	int tried = 0;

	assert_int_equal(api_request(w1.port, "GET", "/openapi.json", NULL, NULL, NULL, &r), 200);
	cJSON *doc = api_body(&r);
	raw_response_free(&r);
	const cJSON *path;
	cJSON_ArrayForEach(path, cJSON_GetObjectItem(doc, "paths"))
	{
		const cJSON *op;
		cJSON_ArrayForEach(op, path)
		{
			const cJSON *sec = cJSON_GetObjectItem(op, "security");
			char method[16], url[256];
			size_t o = 0;
			if (!cJSON_IsObject(op) || (cJSON_IsArray(sec) && !cJSON_GetArraySize(sec)))
				continue; /* a public route (/openapi.json, /healthz...) */
			snprintf(method, sizeof(method), "%s", op->string);
			for (char *m = method; *m; m++)
				*m = (char)(*m - (*m >= 'a' && *m <= 'z' ? 32 : 0));
			for (const char *p = path->string; *p && o + 64 < sizeof(url);) {
				if (*p == '{') { /* a real id of the other organisation */
					const char *end = strchr(p, '}');
					o += (size_t)snprintf(url + o, sizeof(url) - o, "%s",
							      strncmp(p, "{campaign_id}", 13) == 0
								      ? "cmp-e2e"
								      : batch_id);
					p = end + 1;
				} else {
					url[o++] = *p++;
				}
			}
			url[o] = '\0';
			int st = api_request(w1.port, method, url, key, NULL, NULL, &r);
			if (st != 401)
				fail_msg("%s %s: %d %s", method, url, st, r.body);
			assert_non_null(strstr(r.body, "\"error\":\"unauthorized\""));
			raw_response_free(&r);
			tried++;
		}
	}
	cJSON_Delete(doc);
	return tried;
}

static void upload_drains_isolated(void **state)
{
	char key_a[APIKEY_LEN + 1], key_b[APIKEY_LEN + 1], revoked[APIKEY_LEN + 1],
		unknown[APIKEY_LEN + 1], kid[65], url[128], id[64];
	struct raw_response r;
	struct stub_config sc;
	(void)state;

	api_make_org(db, "org-e2e", 200, "cmp-e2e", NULL);
	api_make_org(db, "org-other", 5, "cmp-other", NULL);
	api_make_key(db, "org-e2e", "a", key_a, NULL);
	api_make_key(db, "org-other", "b", key_b, NULL);
	api_make_key(db, "org-e2e", "gone", revoked, kid);
	PQclear(api_sql(db, "UPDATE api_keys SET revoked_at = now() WHERE id = '%s'", kid));
	assert_int_equal(apikey_generate(unknown), 0);

	stub_config_defaults(&sc);
	sc.weights[STUB_COMPLETED] = 100;
	for (int i = 1; i < STUB_OUTCOMES; i++)
		sc.weights[i] = 0;
	sc.dur_min_ms = sc.dur_max_ms = 20;
	sc.ring_ms = 2;
	sc.secret = "secret"; /* api_worker_start's PROVIDER_WEBHOOK_SECRET */
	wproc_stub_start(&stub, &sc);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", stub.port);
	setenv("PROVIDER_URL", url, 1);
	api_worker_start(&w1, "e2e");

	size_t len;
	char *body = csv_multipart(&len);
	long long t0 = fixture_now_ms();
	if (upload(key_a, body, len, &r) != 201)
		fail_msg("upload: %d %s", r.status, r.body);
	free(body);
	cJSON *j = api_body(&r);
	raw_response_free(&r);
	snprintf(id, sizeof(id), "%s", api_str(j, "id"));
	assert_int_equal(api_num(j, "total_contacts"), ROWS);
	cJSON_Delete(j);
	print_message("uploaded %d rows in %lld ms\n", ROWS, fixture_now_ms() - t0);

	/* While it drains: the other organisation cannot see it, bad keys get nothing. */
	char path[160];
	snprintf(path, sizeof(path), "/v2/batches/%s", id);
	assert_int_equal(api_request(w1.port, "GET", path, key_b, NULL, NULL, &r), 404);
	raw_response_free(&r);
	snprintf(path, sizeof(path), "/v2/batches/%s/pause", id);
	assert_int_equal(api_request(w1.port, "POST", path, key_b, NULL, NULL, &r), 404);
	raw_response_free(&r);
	assert_int_equal(api_request(w1.port, "GET", "/v2/batches", key_b, NULL, NULL, &r), 200);
	assert_null(strstr(r.body, id));
	raw_response_free(&r);
	int n401 = every_route_401(unknown, id);
	assert_int_equal(every_route_401(revoked, id), n401);
	print_message("%d routes answered 401 to an unknown and to a revoked key\n", n401);
	assert_true(n401 >= 10);

	/* The drain, watched by its owner. */
	snprintf(path, sizeof(path), "/v2/batches/%s", id);
	long long last = -1, deadline = fixture_now_ms() + DRAIN_MS;
	for (;;) {
		assert_int_equal(api_request(w1.port, "GET", path, key_a, NULL, NULL, &r), 200);
		j = api_body(&r);
		raw_response_free(&r);
		long long ended =
			(long long)(api_num(j, "progress.done") + api_num(j, "progress.failed"));
		assert_int_equal(api_num(j, "progress.total"), ROWS);
		assert_true(ended >= last);
		if (ended != last && ended / 10000 != last / 10000)
			print_message("%lld ms: %lld of %d ended, %.0f in flight\n",
				      fixture_now_ms() - t0, ended, ROWS,
				      api_num(j, "progress.in_flight"));
		last = ended;
		bool completed = strcmp(api_str(j, "status"), "completed") == 0;
		cJSON_Delete(j);
		if (ended == ROWS && completed)
			break;
		if (fixture_now_ms() > deadline)
			fail_msg("not drained after %d ms: %lld of %d", DRAIN_MS, last, ROWS);
		fixture_sleep_ms(500);
	}
	print_message("drained %d contacts in %lld ms\n", ROWS, fixture_now_ms() - t0);
	assert_true(wproc_stat(&stub, "calls_placed") >= ROWS);
	api_worker_stop(&w1);
	wproc_stub_stop(&stub);
}

static int setup(void **state)
{
	(void)state;
	fixture_start(&svc, true, true, false, true);
	db = fixture_pg(&svc);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	api_worker_kill(&w1);
	wproc_stub_stop(&stub);
	PQfinish(db);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(upload_drains_isolated),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
