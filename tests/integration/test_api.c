/* The API's front (issue 10 items 1 and 3): keys and tenants, GET /v2/user/me, the role option,
 * against `dispatcher run` on a private PostgreSQL and Redis.
 *
 *  - unauthorized_same_body: no header, another scheme, a malformed key, an unknown key and a
 *    revoked key all answer 401 with byte-identical bodies (and no X-RateLimit headers: no
 *    organisation is known).
 *  - user_me_fields: every field of the source document's example, from the organisation's
 *    row, the key, the system row and the wallet; X-RateLimit-* on the answer.
 *  - revoked_on_every_node: two workers answer a key (cached); once it is revoked both refuse
 *    it within 5 s (measured; the cache holds a key 2 s).
 *  - role_worker_has_no_api: DISPATCHER_ROLE=worker serves no /v2 route (404), role api does.
 *  - rate_limited_then_fail_open: an organisation's own limit (3 a minute) over two keys: the
 *    fourth request answers the source document's 429 body with Retry-After and Remaining 0;
 *    with Redis stopped the request is allowed and Remaining shows the full limit.
 *  - key_before_body: POST /v2/batches and /v2/calls with a huge Content-Length and no key get
 *    their 401 without sending any body; a keyed one reads its body; the budget of buffered
 *    bodies (256 MiB) answers 503 Retry-After: 1 (with X-RateLimit-*) while a 200 MB body is
 *    being received, and lets bodies in again once that client has gone.
 *  - unknown_key_negative_cache: one unknown key repeated costs one lookup per 2 s
 *    (dispatcher_api_auth_total on /metrics); a key created after a failed attempt works
 *    within 2 s.
 *  - key_lookup_cap: with api_keys locked, 64 lookups in flight; the 65th unknown key answers
 *    503 with Retry-After: 1 (never 401) at once; all 64 get their 401 once unlocked.
 *  - user_me_postgres_mode: with Redis stopped and the fleet switched to postgres mode,
 *    concurrency.current is the call rows' count of every state holding a slot (dialing,
 *    live, unknown).
 *  - limiter_own_connection: the rate limiter's EVALSHA goes over its own Redis connection
 *    (CLIENT LIST: name=ratelimit, last command evalsha), not the gate's.
 */
#include <sys/un.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api_test.h"

static struct embedded svc;
static struct api_worker w1, w2;
static PGconn *db;

static void unauthorized_same_body(void **state)
{
	char key[APIKEY_LEN + 1], unknown[APIKEY_LEN + 1], revoked[APIKEY_LEN + 1];
	char kid[65];
	struct raw_response r;
	char *first = NULL;

	(void)state;
	api_make_org(db, "org-u", 5, "cmp-u", NULL);
	api_make_key(db, "org-u", "good", key, NULL);
	api_make_key(db, "org-u", "gone", revoked, kid);
	PQclear(api_sql(db, "UPDATE api_keys SET revoked_at = now() WHERE id = '%s'", kid));
	assert_int_equal(apikey_generate(unknown), 0);
	api_worker_start(&w1, "api-u");

	assert_int_equal(api_request(w1.port, "GET", "/v2/user/me", key, NULL, NULL, &r), 200);
	raw_response_free(&r);

	char bad_scheme[128], malformed[128], twice[256], good_first[256];
	snprintf(bad_scheme, sizeof(bad_scheme), "Authorization: Basic %s", key);
	/* Two Authorization headers: which is meant is not guessed, even when both are good. */
	snprintf(twice, sizeof(twice), "Authorization: Bearer %s\r\nAuthorization: Bearer %s", key,
		 key);
	snprintf(good_first, sizeof(good_first),
		 "Authorization: Bearer %s\r\nauthorization: Bearer %s", key, unknown);
	snprintf(malformed, sizeof(malformed), "Authorization: Bearer %.*sX", APIKEY_LEN - 1, key);
	const char *cases[] = { NULL,
				bad_scheme,
				malformed,
				unknown,
				revoked,
				"Authorization: Bearer",
				"Authorization: Bearer gat_",
				twice,
				good_first };
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char v[64];

		assert_int_equal(
			api_request(w1.port, "GET", "/v2/user/me", cases[i], NULL, NULL, &r), 401);
		assert_null(raw_header(&r, "X-RateLimit-Limit", v, sizeof(v)));
		assert_non_null(raw_header(&r, "WWW-Authenticate", v, sizeof(v)));
		if (!first)
			first = strdup(r.body);
		else
			assert_string_equal(r.body, first);
		raw_response_free(&r);
	}
	print_message("401 body: %s\n", first);
	assert_non_null(strstr(first, "\"error\":\"unauthorized\""));
	free(first);
	/* Every API route refuses before its handler runs, whatever it is. */
	assert_int_equal(api_request(w1.port, "GET", "/api/v1/campaigns/cmp-u/capacity", unknown,
				     NULL, NULL, &r),
			 401);
	raw_response_free(&r);
	assert_int_equal(api_request(w1.port, "GET", "/v2/batches", NULL, NULL, NULL, &r), 401);
	raw_response_free(&r);
	api_worker_stop(&w1);
}

static void user_me_fields(void **state)
{
	char key[APIKEY_LEN + 1], kid[65], prev[APIKEY_PREVIEW_SIZE], v[64];
	struct raw_response r;

	(void)state;
	api_make_org(db, "org-me", 20, "cmp-me", NULL);
	PQclear(api_sql(db, "UPDATE organisations SET per_agent_limit = 12, plan = 'growth', "
			    "rate_limit_tier = 'growth', rate_default_per_minute = 1001, "
			    "rate_calls_per_minute = 601, rate_executions_per_minute = 602, "
			    "wallet_balance = 412.75, wallet_allocated_total = 500, "
			    "wallet_lifetime_allocated = 1500, wallet_total_spent = 1087.25 "
			    "WHERE id = 'org-me'"));
	api_make_key(db, "org-me", "Production backend", key, kid);
	apikey_preview(key, prev);
	api_worker_start(&w1, "api-me");

	assert_int_equal(api_request(w1.port, "GET", "/v2/user/me", key, NULL, NULL, &r), 200);
	print_message("user/me: %s\n", r.body);
	cJSON *j = api_body(&r);
	assert_string_equal(api_str(j, "organization_id"), "org-me");
	assert_string_equal(api_str(j, "developer.id"), kid);
	assert_string_equal(api_str(j, "developer.name"), "Production backend");
	assert_string_equal(api_str(j, "developer.key_id"), kid);
	assert_string_equal(api_str(j, "developer.key_preview"), prev);
	assert_string_equal(api_str(j, "plan"), "growth");
	assert_string_equal(api_str(j, "rate_limit_tier"), "growth");
	assert_int_equal((int)api_num(j, "concurrency.max"), 12); /* min(org 20, agent 12) */
	assert_int_equal((int)api_num(j, "concurrency.current"), 0);
	assert_int_equal((int)api_num(j, "concurrency.agent_max"), 12);
	assert_int_equal((int)api_num(j, "concurrency.global_max"), 1000);
	assert_true(cJSON_IsTrue(
		cJSON_GetObjectItem(cJSON_GetObjectItem(j, "concurrency"), "enforced")));
	assert_string_equal(api_str(j, "wallet.currency"), "USD");
	assert_true(api_num(j, "wallet.balance") == 412.75);
	assert_true(api_num(j, "wallet.allocated_total") == 500.0);
	assert_true(api_num(j, "wallet.lifetime_allocated") == 1500.0);
	assert_true(api_num(j, "wallet.total_spent") == 1087.25);
	assert_int_equal((int)api_num(j, "rate_limits.default_per_minute"), 1001);
	assert_int_equal((int)api_num(j, "rate_limits.calls_per_minute"), 601);
	assert_int_equal((int)api_num(j, "rate_limits.executions_per_minute"), 602);
	cJSON_Delete(j);
	assert_non_null(raw_header(&r, "X-RateLimit-Limit", v, sizeof(v)));
	assert_string_equal(v, "1001"); /* the default bucket's limit, from the organisation */
	assert_non_null(raw_header(&r, "X-RateLimit-Remaining", v, sizeof(v)));
	assert_non_null(raw_header(&r, "X-RateLimit-Reset", v, sizeof(v)));
	assert_true(atoi(v) >= 1 && atoi(v) <= 60);
	raw_response_free(&r);

	/* Enforcement off shows; an unset per-agent limit reads as the org limit. */
	PQclear(api_sql(db, "UPDATE organisations SET per_agent_limit = NULL, "
			    "concurrency_management_enabled = false WHERE id = 'org-me'"));
	long long deadline = fixture_now_ms() + 10000; /* the key cache holds the old row 2 s */
	for (;;) {
		assert_int_equal(api_request(w1.port, "GET", "/v2/user/me", key, NULL, NULL, &r),
				 200);
		j = api_body(&r);
		raw_response_free(&r);
		if (cJSON_IsFalse(
			    cJSON_GetObjectItem(cJSON_GetObjectItem(j, "concurrency"), "enforced")))
			break;
		cJSON_Delete(j);
		assert_true(fixture_now_ms() < deadline);
		fixture_sleep_ms(100);
	}
	assert_int_equal((int)api_num(j, "concurrency.max"), 20);
	assert_int_equal((int)api_num(j, "concurrency.agent_max"), 20);
	cJSON_Delete(j);
	api_worker_stop(&w1);
}

/* Polls node until key is refused; returns when (ms since since). */
static long long refused_after(struct api_worker *w, const char *key, long long since)
{
	struct raw_response r;

	for (;;) {
		int st = api_request(w->port, "GET", "/v2/user/me", key, NULL, NULL, &r);
		raw_response_free(&r);
		if (st == 401)
			return fixture_now_ms() - since;
		assert_int_equal(st, 200);
		assert_true(fixture_now_ms() - since < 30000);
		fixture_sleep_ms(50);
	}
}

static void revoked_on_every_node(void **state)
{
	char key[APIKEY_LEN + 1], kid[65];
	struct raw_response r;

	(void)state;
	api_make_org(db, "org-rv", 5, "cmp-rv", NULL);
	api_make_key(db, "org-rv", "k", key, kid);
	api_worker_start(&w1, "api-rv1");
	api_worker_start(&w2, "api-rv2");
	/* Both nodes have the key in their cache. */
	for (int i = 0; i < 3; i++) {
		assert_int_equal(api_request(w1.port, "GET", "/v2/user/me", key, NULL, NULL, &r),
				 200);
		raw_response_free(&r);
		assert_int_equal(api_request(w2.port, "GET", "/v2/user/me", key, NULL, NULL, &r),
				 200);
		raw_response_free(&r);
	}
	long long t0 = fixture_now_ms();
	PQclear(api_sql(db, "UPDATE api_keys SET revoked_at = now() WHERE id = '%s'", kid));
	long long a = refused_after(&w1, key, t0), b = refused_after(&w2, key, t0);
	print_message("revoked key refused after %lld ms (node 1) and %lld ms (node 2)\n", a, b);
	assert_true(a < 5000 && b < 5000);
	api_worker_stop(&w1);
	api_worker_stop(&w2);
}

static void role_worker_has_no_api(void **state)
{
	char key[APIKEY_LEN + 1];
	struct raw_response r;

	(void)state;
	api_make_org(db, "org-role", 5, "cmp-role", NULL);
	api_make_key(db, "org-role", "k", key, NULL);
	setenv("DISPATCHER_ROLE", "worker", 1);
	api_worker_start(&w1, "api-role-w");
	assert_int_equal(api_request(w1.port, "GET", "/v2/user/me", key, NULL, NULL, &r), 404);
	raw_response_free(&r);
	api_worker_stop(&w1);
	setenv("DISPATCHER_ROLE", "api", 1);
	api_worker_start(&w1, "api-role-a");
	assert_int_equal(api_request(w1.port, "GET", "/v2/user/me", key, NULL, NULL, &r), 200);
	raw_response_free(&r);
	api_worker_stop(&w1);
	unsetenv("DISPATCHER_ROLE");
}

#define TOKEN "op-token-f1"

/* Starts w1 with its operator listener (for /metrics); returns the operator port. */
static int start_with_metrics(const char *id)
{
	char env[64];
	int op = api_free_port();

	snprintf(env, sizeof(env), "127.0.0.1:%d", op);
	setenv("DISPATCHER_OPERATOR_LISTEN", env, 1);
	setenv("DISPATCHER_ADMIN_TOKEN", TOKEN, 1);
	api_worker_start(&w1, id);
	unsetenv("DISPATCHER_OPERATOR_LISTEN");
	return op;
}

/* The value of series on the operator listener's /metrics (-1 when absent). */
static double metric(int op, const char *series)
{
	struct raw_response r;
	size_t n = strlen(series);
	double v = -1;
	int fd = raw_connect(op, API_WAIT_MS);

	assert_true(fd >= 0);
	assert_int_equal(raw_send_str(fd, "GET /metrics HTTP/1.1\r\nHost: t\r\nAuthorization: "
					  "Bearer " TOKEN "\r\nConnection: close\r\n\r\n"),
			 0);
	assert_int_equal(raw_read_response(fd, &r), 0);
	close(fd);
	assert_int_equal(r.status, 200);
	for (const char *p = r.body; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL)
		if (strncmp(p, series, n) == 0 && p[n] == ' ')
			v = strtod(p + n + 1, NULL);
	raw_response_free(&r);
	return v;
}

/* R1-R3 through the API: the org's own limit, the 429 body and headers, then fail-open. */
static void rate_limited_then_fail_open(void **state)
{
	char key[APIKEY_LEN + 1], key2[APIKEY_LEN + 1], v[64], ra[16];
	struct raw_response r;

	(void)state;
	api_make_org(db, "org-rl", 5, "cmp-rl", NULL);
	PQclear(api_sql(db, "UPDATE organisations SET rate_default_per_minute = 3 "
			    "WHERE id = 'org-rl'"));
	api_make_key(db, "org-rl", "k1", key, NULL);
	api_make_key(db, "org-rl", "k2", key2, NULL); /* same org: same counter (R1) */
	int op = start_with_metrics("api-rl");
	int ok = 0, refused = 0;
	/* The window may roll between requests (then more get through): at most 2 rolls. */
	for (int i = 0; i < 4 && !refused; i++) {
		int st = api_request(w1.port, "GET", "/v2/user/me", i % 2 ? key2 : key, NULL, NULL,
				     &r);
		assert_non_null(raw_header(&r, "X-RateLimit-Limit", v, sizeof(v)));
		assert_string_equal(v, "3");
		assert_non_null(raw_header(&r, "X-RateLimit-Reset", v, sizeof(v)));
		if (st == 429) {
			refused++;
			assert_non_null(raw_header(&r, "X-RateLimit-Remaining", v, sizeof(v)));
			assert_string_equal(v, "0");
			assert_non_null(raw_header(&r, "Retry-After", ra, sizeof(ra)));
			char want[200];
			snprintf(
				want, sizeof(want),
				"{\"error\":1300,\"message\":\"Rate limit exceeded: 3 requests per "
				"minute for this organization. Retry in %ss.\"}",
				ra);
			print_message("429: %s Retry-After %s\n", r.body, ra);
			assert_string_equal(r.body, want);
			assert_true(atoi(ra) >= 1 && atoi(ra) <= 120);
		} else {
			assert_int_equal(st, 200);
			ok++;
		}
		raw_response_free(&r);
	}
	assert_int_equal(ok, 3);
	assert_int_equal(refused, 1);
	/* A read is started with its decision in flight (api.c, "Reads sent with the rate
	 * limit"); refused, its answer is dropped, headers and all, for the 429. k3 is fresh (its
	 * cache entry has seen no refusal, so its read starts early) and its read answers at once
	 * (404: an id that cannot exist), before the decision. */
	char key3[APIKEY_LEN + 1];
	int st = 0, retry_afters = 0;
	for (int attempt = 0; attempt < 2 && st != 429; attempt++) {
		char name[8];
		snprintf(name, sizeof(name), "k3-%d", attempt);
		api_make_key(db, "org-rl", name, key3, NULL);
		st = api_request(w1.port, "GET", "/api/v1/campaigns/no%20such/capacity", key3, NULL,
				 NULL, &r);
		retry_afters = 0;
		for (const char *p = r.head; (p = strstr(p, "\r\nRetry-After:")); p++)
			retry_afters++;
		print_message("refused read answered first: %d, %d Retry-After, %s\n", st,
			      retry_afters, r.body);
		if (st == 429)
			break;
		assert_int_equal(st, 404); /* the window rolled meanwhile: used up again */
		raw_response_free(&r);
		for (int i = 0; i < 4 && st != 429; i++) {
			st = api_request(w1.port, "GET", "/v2/user/me", key, NULL, NULL, &r);
			raw_response_free(&r);
		}
		st = 0;
	}
	assert_int_equal(st, 429);
	assert_int_equal(retry_afters, 1);
	assert_non_null(strstr(r.body, "\"error\":1300"));
	assert_non_null(raw_header(&r, "X-RateLimit-Remaining", v, sizeof(v)));
	assert_string_equal(v, "0");
	raw_response_free(&r);
	/* The decision refuses while the read is still running (refuse_late): the list waits on a
	 * lock the test holds, the 429 goes out once the read is done, the read's answer never. */
	PQclear(api_sql(db, "UPDATE organisations SET rate_executions_per_minute = 3 "
			    "WHERE id = 'org-rl'"));
	char key5[APIKEY_LEN + 1], key6[APIKEY_LEN + 1];
	api_make_key(db, "org-rl", "k5", key5, NULL); /* looked up after: the new limit */
	api_make_key(db, "org-rl", "k6", key6, NULL);
	st = 0;
	for (int i = 0; i < 8 && st != 429; i++) { /* executions.list used up (3 a minute) */
		st = api_request(w1.port, "GET", "/v2/calls", key6, NULL, NULL, &r);
		raw_response_free(&r);
	}
	print_message("executions.list used up: %d\n", st);
	assert_int_equal(st, 429);
	api_request(w1.port, "GET", "/v2/user/me", key5, NULL, NULL, &r);
	raw_response_free(&r); /* k5 cached, never refused in executions.list */
	PQclear(api_sql(db, "BEGIN"));
	PQclear(api_sql(db, "LOCK TABLE calls IN ACCESS EXCLUSIVE MODE"));
	int fd = raw_connect(w1.port, API_WAIT_MS);
	char head[256];
	snprintf(head, sizeof(head),
		 "GET /v2/calls HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n\r\n", key5);
	assert_int_equal(raw_send_str(fd, head), 0);
	fixture_sleep_ms(300); /* the decision comes meanwhile (either way the answer is the 429) */
	PQclear(api_sql(db, "COMMIT"));
	assert_int_equal(raw_read_response(fd, &r), 0);
	close(fd);
	retry_afters = 0;
	for (const char *p = r.head; (p = strstr(p, "\r\nRetry-After:")); p++)
		retry_afters++;
	print_message("refused while the read ran: %d, %d Retry-After, %s\n", r.status,
		      retry_afters, r.body);
	assert_int_equal(r.status, 429);
	assert_int_equal(retry_afters, 1);
	assert_non_null(strstr(r.body, "\"error\":1300"));
	raw_response_free(&r);
	/* Redis gone: allowed, the full limit shown as remaining (R3). */
	assert_int_equal(embedded_redis_stop(&svc), 0);
	assert_int_equal(api_request(w1.port, "GET", "/v2/user/me", key, NULL, NULL, &r), 200);
	assert_non_null(raw_header(&r, "X-RateLimit-Remaining", v, sizeof(v)));
	assert_string_equal(v, "3");
	raw_response_free(&r);
	/* and counted where an operator sees it */
	assert_true(metric(op, "dispatcher_ratelimit_fail_open_total{reason=\"redis\"}") >= 1);
	assert_true(metric(op, "dispatcher_ratelimit_checks_total{bucket=\"default\"}") >= 5);
	assert_int_equal(embedded_redis_start(&svc), 0);
	api_worker_stop(&w1);
}

#define LOOKUPS "dispatcher_api_auth_total{result=\"lookup\"}"

/* Waits (deadline 10 s) until fd has something to read: an answer that does not wait for a
 * body the client never sends. */
static void answer_within(int fd, struct raw_response *r, int status)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	assert_int_equal(poll(&p, 1, 10000), 1);
	assert_int_equal(raw_read_response(fd, r), 0);
	assert_int_equal(r->status, status);
}

static void key_before_body(void **state)
{
	char key[APIKEY_LEN + 1], head[512], v[64];
	struct raw_response r;
	int fd, st;

	(void)state;
	api_make_org(db, "org-b", 5, NULL);
	api_make_key(db, "org-b", "k", key, NULL);
	api_worker_start(&w1, "api-b");

	/* No key: 401 at once, with not a byte of the 60 MB (or 4 KB) body sent. */
	const char *paths[] = { "/v2/batches", "/v2/calls" };
	const char *lens[] = { "60000000", "4000" };
	for (int i = 0; i < 2; i++) {
		fd = raw_connect(w1.port, API_WAIT_MS);
		snprintf(head, sizeof(head),
			 "POST %s HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
			 "Content-Length: %s\r\n\r\n",
			 paths[i], lens[i]);
		assert_int_equal(raw_send_str(fd, head), 0);
		answer_within(fd, &r, 401);
		assert_null(raw_header(&r, "X-RateLimit-Limit", v, sizeof(v)));
		raw_response_free(&r);
		close(fd);
	}
	/* A keyed request's body is read and reaches the handler (its JSON is checked). */
	assert_int_equal(api_request(w1.port, "POST", "/v2/calls", key, NULL, "{\"agent_id\":", &r),
			 400);
	assert_non_null(strstr(r.body, "invalid_json"));
	assert_non_null(raw_header(&r, "X-RateLimit-Limit", v, sizeof(v)));
	raw_response_free(&r);

	/* The budget (256 MiB). Chunked bodies of POST /v2/batches reserve the route's whole
	 * 64 MiB while being received (100 Continue: each is being read). An organisation's large
	 * bodies take at most a quarter of the budget: org-b's second is refused, another
	 * organisation's is not. Large bodies together take at most seven eighths: org-e's (the
	 * fourth large one) is refused, while a direct dial's small body still passes (once, four
	 * such bodies left nothing for any other organisation: review finding, issue 10). */
	char keys[4][APIKEY_LEN + 1];
	const char *orgs[4] = { "org-c", "org-d", "org-e", NULL };
	for (int i = 0; orgs[i]; i++) {
		api_make_org(db, orgs[i], 5, NULL);
		api_make_key(db, orgs[i], "k", keys[i], NULL);
	}
	const char *big_keys[] = { key, key, keys[0], keys[1], keys[2] };
	const int big_status[] = { 100, 503, 100, 100, 503 };
	int bigs[5];
	for (int i = 0; i < 5; i++) {
		bigs[i] = raw_connect(w1.port, API_WAIT_MS);
		snprintf(head, sizeof(head),
			 "POST /v2/batches HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n"
			 "Content-Type: application/json\r\nExpect: 100-continue\r\n"
			 "Transfer-Encoding: chunked\r\n\r\n",
			 big_keys[i]);
		assert_int_equal(raw_send_str(bigs[i], head), 0);
		answer_within(bigs[i], &r, big_status[i]);
		if (big_status[i] == 503) {
			assert_non_null(raw_header(&r, "Retry-After", v, sizeof(v)));
			assert_string_equal(v, "1");
			assert_non_null(raw_header(&r, "X-RateLimit-Limit", v, sizeof(v)));
			print_message("budget 503 (%s): %s\n",
				      i == 1 ? "org share" : "large bodies", r.body);
			assert_non_null(strstr(r.body, i == 1 ? "share of 67108864 bytes"
							      : "as many request bodies"));
		}
		raw_response_free(&r);
	}
	/* Small bodies pass: org-e's and org-b's own direct dials reach their handler. */
	const char *small_keys[] = { keys[2], key };
	for (int i = 0; i < 2; i++) {
		assert_int_equal(api_request(w1.port, "POST", "/v2/calls", small_keys[i], NULL,
					     "{\"agent_id\":", &r),
				 400);
		assert_non_null(strstr(r.body, "invalid_json"));
		raw_response_free(&r);
	}
	/* The big ones' clients go: their reservations are released (seen once the server has
	 * read the close: polled). org-b's own share is free again, and with org-b's new large
	 * body held, org-e's fits only if the others' were released too (a small body would fit
	 * either way). */
	for (int i = 0; i < 5; i++)
		close(bigs[i]);
	long long deadline = fixture_now_ms() + API_WAIT_MS;
	int again[2];
	for (int i = 0; i < 2; i++) {
		for (;;) {
			again[i] = raw_connect(w1.port, API_WAIT_MS);
			snprintf(head, sizeof(head),
				 "POST /v2/batches HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer "
				 "%s\r\nContent-Type: application/json\r\nExpect: 100-continue\r\n"
				 "Transfer-Encoding: chunked\r\n\r\n",
				 i ? keys[2] : key);
			assert_int_equal(raw_send_str(again[i], head), 0);
			struct pollfd p = { .fd = again[i], .events = POLLIN };
			assert_int_equal(poll(&p, 1, 10000), 1);
			assert_int_equal(raw_read_response(again[i], &r), 0);
			st = r.status;
			raw_response_free(&r);
			if (st == 100)
				break;
			assert_int_equal(st, 503);
			close(again[i]);
			assert_true(fixture_now_ms() < deadline);
			fixture_sleep_ms(20);
		}
	}
	close(again[0]);
	close(again[1]);
	api_worker_stop(&w1);
}

/* Inserts key (made by apikey_generate()) for org. */
static void insert_key(const char *org, const char *key)
{
	unsigned char h[APIKEY_HASH_LEN];
	char hex[2 * APIKEY_HASH_LEN + 1], prev[APIKEY_PREVIEW_SIZE];

	assert_int_equal(apikey_hash(key, APIKEY_LEN, h), 0);
	for (int i = 0; i < APIKEY_HASH_LEN; i++)
		snprintf(hex + 2 * i, 3, "%02x", h[i]);
	apikey_preview(key, prev);
	PQclear(api_sql(db,
			"INSERT INTO api_keys (org_id, name, key_hash, key_preview) VALUES "
			"('%s', 'late', decode('%s', 'hex'), '%s')",
			org, hex, prev));
}

static void unknown_key_negative_cache(void **state)
{
	char unknown[APIKEY_LEN + 1];
	struct raw_response r;

	(void)state;
	api_make_org(db, "org-n", 5, NULL);
	assert_int_equal(apikey_generate(unknown), 0);
	int op = start_with_metrics("api-n");
	double base = metric(op, LOOKUPS);
	assert_true(base >= 0);

	long long t0 = fixture_now_ms();
	for (int i = 0; i < 50; i++) {
		assert_int_equal(
			api_request(w1.port, "GET", "/v2/user/me", unknown, NULL, NULL, &r), 401);
		raw_response_free(&r);
	}
	long long elapsed = fixture_now_ms() - t0;
	double lookups = metric(op, LOOKUPS) - base;
	print_message("50 requests with one unknown key in %lld ms: %.0f lookups\n", elapsed,
		      lookups);
	/* One per neg_cache_ms (2 s) at most, however slow the machine is. */
	assert_true(lookups >= 1 && lookups <= 1 + elapsed / 2000);

	/* Created after a failed attempt: accepted once the 2 s have passed (polled). */
	insert_key("org-n", unknown);
	long long t1 = fixture_now_ms();
	int st;
	while ((st = api_request(w1.port, "GET", "/v2/user/me", unknown, NULL, NULL, &r)) == 401) {
		raw_response_free(&r);
		assert_true(fixture_now_ms() - t1 < 10000);
		fixture_sleep_ms(50);
	}
	assert_int_equal(st, 200);
	raw_response_free(&r);
	print_message("a key created after a failed attempt accepted after %lld ms\n",
		      fixture_now_ms() - t1);
	api_worker_stop(&w1);
}

#define LOOKUPS_MAX 64

static void key_lookup_cap(void **state)
{
	char key[APIKEY_LEN + 1], head[256], v[64];
	int fds[LOOKUPS_MAX];
	struct raw_response r;

	(void)state;
	setenv("DISPATCHER_PG_QUERY_TIMEOUT_MS", "120000", 1); /* the lock is held a while */
	int op = start_with_metrics("api-cap");
	unsetenv("DISPATCHER_PG_QUERY_TIMEOUT_MS");
	double base = metric(op, LOOKUPS);
	PGconn *locker = fixture_pg(&svc);
	PQclear(api_sql(locker, "BEGIN"));
	PQclear(api_sql(locker, "LOCK TABLE api_keys IN ACCESS EXCLUSIVE MODE"));

	/* 64 unknown keys whose lookups wait on the lock, each seen started before the next. */
	for (int i = 0; i < LOOKUPS_MAX; i++) {
		assert_int_equal(apikey_generate(key), 0);
		fds[i] = raw_connect(w1.port, API_WAIT_MS);
		snprintf(head, sizeof(head),
			 "GET /v2/user/me HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer %s\r\n"
			 "Connection: close\r\n\r\n",
			 key);
		assert_int_equal(raw_send_str(fds[i], head), 0);
		long long deadline = fixture_now_ms() + API_WAIT_MS;
		while (metric(op, LOOKUPS) < base + i + 1) {
			assert_true(fixture_now_ms() < deadline);
			fixture_sleep_ms(5);
		}
	}
	/* The 65th: 503 at once, not 401, no lookup. */
	assert_int_equal(apikey_generate(key), 0);
	assert_int_equal(api_request(w1.port, "GET", "/v2/user/me", key, NULL, NULL, &r), 503);
	assert_non_null(raw_header(&r, "Retry-After", v, sizeof(v)));
	assert_string_equal(v, "1");
	assert_null(raw_header(&r, "X-RateLimit-Limit", v, sizeof(v)));
	print_message("lookup cap 503: %s\n", r.body);
	raw_response_free(&r);
	assert_true(metric(op, LOOKUPS) == base + LOOKUPS_MAX);
	assert_true(metric(op, "dispatcher_api_auth_total{result=\"lookup_refused\"}") == 1);

	PQclear(api_sql(locker, "COMMIT"));
	PQfinish(locker);
	for (int i = 0; i < LOOKUPS_MAX; i++) {
		assert_int_equal(raw_read_response(fds[i], &r), 0);
		assert_int_equal(r.status, 401);
		raw_response_free(&r);
		close(fds[i]);
	}
	api_worker_stop(&w1);
}

/* CLIENT LIST from the fixture's Redis (unix socket, inline command); free() the text. */
static char *redis_client_list(void)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);

	assert_true(strncmp(svc.redis_url, "unix://", 7) == 0);
	assert_true(strlen(svc.redis_url + 7) < sizeof(a.sun_path));
	memcpy(a.sun_path, svc.redis_url + 7, strlen(svc.redis_url + 7));
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(write(fd, "CLIENT LIST\r\n", 13), 13);
	for (;;) { /* "$<n>\r\n<n bytes>\r\n" */
		ssize_t n = read(fd, buf + len, cap - len - 1);
		assert_true(n > 0);
		len += (size_t)n;
		buf[len] = 0;
		char *nl = strstr(buf, "\r\n");
		if (nl && buf[0] == '$' && len >= (size_t)(nl - buf) + 2 + atol(buf + 1) + 2)
			break;
	}
	close(fd);
	return buf;
}

static void limiter_own_connection(void **state)
{
	char key[APIKEY_LEN + 1];
	struct raw_response r;

	(void)state;
	api_make_org(db, "org-l", 5, NULL);
	api_make_key(db, "org-l", "k", key, NULL);
	api_worker_start(&w1, "api-l");
	assert_int_equal(api_request(w1.port, "GET", "/v2/user/me", key, NULL, NULL, &r), 200);
	raw_response_free(&r);
	char *list = redis_client_list();
	const char *line = strstr(list, "name=ratelimit ");
	if (!line)
		fail_msg("no ratelimit connection in CLIENT LIST:\n%s", list);
	const char *cmd = strstr(line, " cmd=");
	assert_non_null(cmd);
	assert_int_equal(strncmp(cmd, " cmd=evalsha ", 13), 0);
	free(list);
	api_worker_stop(&w1);
}

static void user_me_postgres_mode(void **state)
{
	char key[APIKEY_LEN + 1];
	struct raw_response r;
	const char *states[] = { "dialing", "live", "unknown" };

	(void)state;
	api_make_org(db, "org-p", 5, "cmp-p", NULL);
	api_make_key(db, "org-p", "k", key, NULL);
	for (int i = 0; i < 3; i++)
		PQclear(api_sql(
			db,
			"INSERT INTO calls (id, org_id, campaign_id, agent_id, to_number, state,"
			" gate_mode, gate_epoch, created_at) VALUES (gen_random_uuid(), "
			"'org-p', 'cmp-p', 'org-p-agent', '+1555000000%d', '%s', 'redis', "
			"(SELECT gate_epoch FROM system_settings), now())",
			i, states[i]));
	PQclear(api_sql(db,
			"INSERT INTO calls (id, org_id, campaign_id, agent_id, to_number, state,"
			" outcome, gate_mode, gate_epoch, created_at, ended_at) VALUES"
			" (gen_random_uuid(), 'org-p', 'cmp-p', 'org-p-agent', '+15550000009',"
			" 'ended', 'completed', 'redis', 1, now(), now())"));
	api_worker_start(&w1, "api-p");
	assert_int_equal(embedded_redis_stop(&svc), 0);
	long long deadline = fixture_now_ms() + API_WAIT_MS;
	for (;;) { /* the switch to postgres mode, as the workers record it */
		PGresult *m = api_sql(db, "SELECT gate_mode FROM system_settings");
		bool pg = strcmp(PQgetvalue(m, 0, 0), "postgres") == 0;
		PQclear(m);
		if (pg)
			break;
		assert_true(fixture_now_ms() < deadline);
		fixture_sleep_ms(100);
	}
	assert_int_equal(api_request(w1.port, "GET", "/v2/user/me", key, NULL, NULL, &r), 200);
	cJSON *j = api_body(&r);
	char *conc = cJSON_PrintUnformatted(cJSON_GetObjectItem(j, "concurrency"));
	print_message("postgres mode: concurrency %s\n", conc);
	free(conc);
	assert_int_equal((int)api_num(j, "concurrency.current"), 3);
	cJSON_Delete(j);
	raw_response_free(&r);
	assert_int_equal(embedded_redis_start(&svc), 0);
	api_worker_stop(&w1);
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
	api_worker_kill(&w2);
	PQfinish(db);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(unauthorized_same_body),
		cmocka_unit_test(user_me_fields),
		cmocka_unit_test(revoked_on_every_node),
		cmocka_unit_test(role_worker_has_no_api),
		cmocka_unit_test(rate_limited_then_fail_open),
		cmocka_unit_test(key_before_body),
		cmocka_unit_test(unknown_key_negative_cache),
		cmocka_unit_test(key_lookup_cap),
		cmocka_unit_test(limiter_own_connection),
		cmocka_unit_test(user_me_postgres_mode),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
