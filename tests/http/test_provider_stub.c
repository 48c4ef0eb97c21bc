/* The provider stub (SPEC D0, D6): replays and duplicates, validation, signed events in
 * sequence, hold mode's exact states, deterministic outcome distributions, every throttling
 * mode (read back through the retry policy), injected 5xx / placed-then-5xx / forced statuses,
 * and the event faults (duplicate, drop, reorder, early, failing receiver). */
#include "harness.h"
#include "retry_policy.h"
#include "signing.h"
#include "stub_int.h"

#include <arpa/inet.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

static struct stub_config base(void)
{
	struct stub_config c;

	stub_config_defaults(&c);
	c.hold = true;
	return c;
}

static void replay_and_duplicates(void **state)
{
	struct stub_config c = base();
	struct harness *h = harness_start(&c);
	struct reply a, b, d, e;

	harness_dial(h, "k1", "o1", "c1", "ct1", 1, &a);
	assert_int_equal(a.status, 201);
	harness_dial(h, "k1", "o1", "c1", "ct1", 1, &b); /* replay: same id, nothing placed */
	assert_int_equal(b.status, 200);
	assert_string_equal(a.body, b.body);
	harness_dial(h, "k2", "o1", "c1", "ct1", 1, &d); /* same contact and attempt, new key */
	assert_int_equal(d.status, 201);
	assert_string_not_equal(d.body, a.body);
	harness_dial(h, "k3", "o1", "c1", "ct1", 2, &e); /* the next attempt: not a duplicate */
	assert_int_equal(e.status, 201);
	assert_int_equal(harness_stat(h, "calls_placed"), 3);
	assert_int_equal(harness_stat(h, "replays"), 1);
	assert_int_equal(harness_stat(h, "duplicates"), 1);
	assert_int_equal(harness_stat(h, "orgs.o1.placed"), 3);
	harness_stop(h);
}

static void validation_and_auth(void **state)
{
	struct stub_config c = base();
	struct harness *h;
	struct reply r;
	const char *json = "{\"to\":\"+15551230000\",\"org_id\":\"o1\",\"attempt\":1,"
			   "\"callback_url\":\"http://127.0.0.1:9/e\"}";
	const char *good[] = { "Authorization: Bearer tok", "Idempotency-Key: v1" };
	const char *nokey[] = { "Authorization: Bearer tok" };
	const char *wrong[] = { "Authorization: Bearer nope", "Idempotency-Key: v1" };

	c.token = "tok";
	h = harness_start(&c);
	harness_request(h, "POST", "/calls", json, wrong, 2, 0, &r);
	assert_int_equal(r.status, 401);
	harness_request(h, "POST", "/calls", json, nokey, 1, 0, &r);
	assert_int_equal(r.status, 400);
	assert_non_null(strstr(r.body, "missing_idempotency_key"));
	harness_request(h, "POST", "/calls", "{nope", good, 2, 0, &r);
	assert_int_equal(r.status, 400);
	harness_request(h, "POST", "/calls", "{\"to\":\"555\",\"org_id\":\"o1\",\"attempt\":1}",
			good, 2, 0, &r);
	assert_int_equal(r.status, 422);
	harness_request(h, "POST", "/calls",
			"{\"to\":\"+15551230000\",\"org_id\":\"o1\",\"attempt\":1,"
			"\"callback_url\":\"http://10.0.0.1/e\"}",
			good, 2, 0, &r);
	assert_int_equal(r.status, 422); /* never anything but loopback */
	assert_non_null(strstr(r.body, "callback_url"));
	/* Strict JSON (common/json_strict.h): trailing bytes, a key twice, a fractional attempt. */
	char bad[256];
	snprintf(bad, sizeof(bad), "%s{}", json);
	harness_request(h, "POST", "/calls", bad, good, 2, 0, &r);
	assert_int_equal(r.status, 400);
	assert_non_null(strstr(r.body, "trailing bytes"));
	snprintf(bad, sizeof(bad), "{\"org_id\":\"o2\",%s", json + 1);
	harness_request(h, "POST", "/calls", bad, good, 2, 0, &r);
	assert_int_equal(r.status, 400);
	assert_non_null(strstr(r.body, "field org_id appears twice"));
	harness_request(h, "POST", "/calls",
			"{\"to\":\"+15551230000\",\"org_id\":\"o1\",\"attempt\":1.5,"
			"\"callback_url\":\"http://127.0.0.1:9/e\"}",
			good, 2, 0, &r);
	assert_int_equal(r.status, 422);
	assert_non_null(strstr(r.body, "attempt"));
	harness_request(h, "POST", "/calls", json, good, 2, 0, &r);
	assert_int_equal(r.status, 201);
	assert_int_equal(harness_stat(h, "rejected"), 8);
	harness_stop(h);
}

/* Dials with callback_url cb; returns the status. */
static int dial_to(struct harness *h, const char *key, const char *cb)
{
	char json[512], hk[64];
	const char *headers[] = { hk };
	struct reply r;

	snprintf(hk, sizeof(hk), "Idempotency-Key: %s", key);
	snprintf(json, sizeof(json),
		 "{\"to\":\"+15551230000\",\"org_id\":\"o1\",\"attempt\":1,"
		 "\"callback_url\":\"%s\"}",
		 cb);
	harness_request(h, "POST", "/calls", json, headers, 1, 0, &r);
	return r.status;
}

/* The callback host is read by libcurl's URL parser: user info, look-alike names and
 * anything outside 127.0.0.0/8, ::1 and localhost are refused; localhost is pinned. */
static void callback_url_loopback_only(void **state)
{
	struct stub_config c = base();
	struct harness *h;
	char cb[128];
	const char *bad[] = {
		"http://localhost:80@10.1.2.3:8080/e",
		"http://127.0.0.1.nip.io/e",
		"http://127.0.0.1@10.0.0.1/e",
		"http://user:pw@127.0.0.1/e",
		"http://localhost.example.com/e",
		"https://127.0.0.1/e",
		"http://[::2]/e",
		"http://128.0.0.1/e",
		"ftp://127.0.0.1/e",
		"127.0.0.1/e",
	};

	c.hold = false;
	c.dur_min_ms = c.dur_max_ms = 100000;
	h = harness_start(&c);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(dial_to(h, "bad", bad[i]), 422);
	assert_int_equal(dial_to(h, "v6", "http://[::1]:9/e"), 201);
	assert_int_equal(dial_to(h, "net", "http://127.1.2.3:9/e"), 201);
	snprintf(cb, sizeof(cb), "http://localhost:%d/events", h->recv_port);
	assert_int_equal(dial_to(h, "lh", cb), 201);
	harness_wait_events(h, 1); /* its ringing event reached our receiver on 127.0.0.1 */
	assert_non_null(strstr(h->events[0].body, "\"lh\""));
	harness_stop(h);
}

/* A proxy in the environment is not used: the events still go straight to loopback. */
static void events_ignore_proxy_environment(void **state)
{
	struct stub_config c = base();
	struct harness *h;
	struct reply r;

	c.hold = false;
	c.dur_min_ms = c.dur_max_ms = 100000;
	setenv("http_proxy", "http://127.0.0.1:9", 1); /* nothing listens there */
	h = harness_start(&c);
	harness_dial(h, "px", "o1", "c1", "px", 1, &r);
	assert_int_equal(r.status, 201);
	harness_wait_events(h, 1); /* ringing reached the receiver */
	assert_int_equal(harness_stat(h, "events_failed"), 0);
	harness_stop(h);
	unsetenv("http_proxy");
}

/* A replay answers 200 with the same call id before throttling and faults are looked at, and
 * does not count against the window (D0: a seen key places nothing). */
static void replays_before_throttling_and_faults(void **state)
{
	struct stub_config c = base();
	struct harness *h;
	struct reply a, r;

	c.drop_pct = 100;
	h = harness_start(&c);
	assert_int_equal(harness_control(h, "/control/org",
					 "{\"org_id\":\"w\",\"limit\":2,\"window_ms\":86400000}"),
			 200);
	harness_dial(h, "w1", "w", "c1", "w1", 1, &a);
	assert_int_equal(a.status, 201);
	harness_dial(h, "w1", "w", "c1", "w1", 1, &r); /* a replay: not counted */
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, a.body);
	harness_dial(h, "w2", "w", "c1", "w2", 1, &r); /* the second dial of the window */
	assert_int_equal(r.status, 201);
	harness_dial(h, "w3", "w", "c1", "w3", 1, &r); /* the third is throttled */
	assert_int_equal(r.status, 429);
	harness_dial(h, "w1", "w", "c1", "w1", 1, &r); /* replays still answer 200 */
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, a.body);
	/* Faults: a placed call answered 502, then every dial failing: the re-send replays. */
	harness_control(h, "/control/org",
			"{\"org_id\":\"f\",\"fail_placed_pct\":100,\"fail_status\":502}");
	harness_dial(h, "f1", "f", "c1", "f1", 1, &a);
	assert_int_equal(a.status, 502);
	harness_control(h, "/control/org", "{\"org_id\":\"f\",\"fail_pct\":100}");
	harness_dial(h, "f1", "f", "c1", "f1", 1, &r);
	assert_int_equal(r.status, 200);
	assert_int_equal(harness_stat(h, "orgs.f.placed"), 1);
	assert_int_equal(harness_stat(h, "replays"), 3);
	assert_int_equal(harness_stat(h, "calls_placed"), 3);
	harness_stop(h);
}

static void on_stub_closed_here(struct stub *s, void *data)
{
	((struct harness *)data)->stub_closed = true;
}

/* Runs the loop and reads the non-blocking fd into buf until it holds want. */
static void pump_until(struct harness *h, int fd, char *buf, size_t cap, const char *want)
{
	size_t have = strlen(buf);

	for (int i = 0; !strstr(buf, want); i++) {
		assert_true(i < 30000); /* about 30 s: only when something is broken */
		uv_run(&h->loop, UV_RUN_NOWAIT);
		ssize_t n = recv(fd, buf + have, cap - 1 - have, MSG_DONTWAIT);
		if (n > 0) {
			have += (size_t)n;
			buf[have] = '\0';
		} else {
			usleep(1000);
		}
	}
}

/* Runs the loop until the peer closes the non-blocking fd (EOF or reset); input is appended to
 * buf. */
static void pump_until_closed(struct harness *h, int fd, char *buf, size_t cap)
{
	size_t have = strlen(buf);

	for (int i = 0;; i++) {
		assert_true(i < 30000); /* about 30 s: only when something is broken */
		uv_run(&h->loop, UV_RUN_NOWAIT);
		ssize_t n = recv(fd, buf + have, cap - 1 - have, MSG_DONTWAIT);
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			return;
		if (n > 0) {
			have += (size_t)n;
			buf[have] = '\0';
		} else {
			usleep(1000);
		}
	}
}

/* A dial whose body has not arrived when the close begins (SIGTERM) is dropped with its
 * connection at once (the server's drain): no answer, no call, no timer is started that the
 * close would miss. */
static void closing_refuses_dials(void **state)
{
	struct stub_config c = base();
	struct harness *h = harness_start(&c);
	const char *body = "{\"to\":\"+15551230000\",\"org_id\":\"o1\",\"attempt\":1,"
			   "\"callback_url\":\"http://127.0.0.1:9/e\"}";
	char head[512], buf[4096] = "";
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(h->stub_port) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	snprintf(head, sizeof(head),
		 "POST /calls HTTP/1.1\r\nHost: t\r\nIdempotency-Key: late\r\n"
		 "Expect: 100-continue\r\nContent-Length: %zu\r\n\r\n",
		 strlen(body));
	assert_true(send(fd, head, strlen(head), MSG_NOSIGNAL) > 0);
	pump_until(h, fd, buf, sizeof(buf), "100 Continue\r\n\r\n"); /* headers parsed */
	buf[0] = '\0';
	stub_close(h->stub, on_stub_closed_here, h);
	(void)send(fd, body, strlen(body), MSG_NOSIGNAL); /* may meet the closed socket */
	pump_until_closed(h, fd, buf, sizeof(buf));
	assert_string_equal(buf, ""); /* closed without an answer: the request was never taken */
	close(fd);
	for (int i = 0; !h->stub_closed; i++) { /* nothing is left to hold the stub */
		assert_true(i < 30000);
		uv_run(&h->loop, UV_RUN_NOWAIT);
		usleep(1000);
	}
	h->stub = NULL;	 /* freed */
	harness_stop(h); /* runs the loop dry: every handle closed */
}

/* The window arithmetic with explicit times: two dials at the end of one window, two early in
 * the next. Fixed allows both of the later ones; sliding still weighs the previous window and
 * refuses the second. */
static void sliding_and_fixed_windows(void **state)
{
	struct stub_org_config cfg = { .limit = 2, .window_ms = 1000 };
	struct stub_org o = { .win = -1 };
	uint64_t ra = 0;

	cfg.window = STUB_WINDOW_FIXED;
	assert_true(stub_window_allows(&o, &cfg, 900, &ra));
	assert_true(stub_window_allows(&o, &cfg, 950, &ra));
	assert_false(stub_window_allows(&o, &cfg, 990, &ra));
	assert_true(stub_window_allows(&o, &cfg, 1100, &ra));
	assert_true(stub_window_allows(&o, &cfg, 1100, &ra));
	assert_false(stub_window_allows(&o, &cfg, 1100, &ra));
	memset(&o, 0, sizeof(o));
	o.win = -1;
	cfg.window = STUB_WINDOW_SLIDING;
	assert_true(stub_window_allows(&o, &cfg, 900, &ra));
	assert_true(stub_window_allows(&o, &cfg, 950, &ra));
	assert_false(stub_window_allows(&o, &cfg, 990, &ra));
	/* At 1100, 90 % of the previous window is still inside the last second: 1.8 + 0 < 2. */
	assert_true(stub_window_allows(&o, &cfg, 1100, &ra));
	/* 1.8 + 1 >= 2: refused, where a fixed window allows it. */
	assert_false(stub_window_allows(&o, &cfg, 1100, &ra));
	assert_int_equal(ra, 1);
	/* At 1600 only 40 % weighs: 0.8 + 1 < 2. */
	assert_true(stub_window_allows(&o, &cfg, 1600, &ra));
	/* Two windows later the old counts are gone. */
	assert_true(stub_window_allows(&o, &cfg, 3000, &ra));
	assert_true(stub_window_allows(&o, &cfg, 3000, &ra));
	assert_false(stub_window_allows(&o, &cfg, 3000, &ra));
}

/* Parses received event i. */
static cJSON *event(struct harness *h, unsigned i)
{
	cJSON *j = cJSON_Parse(h->events[i].body);

	assert_non_null(j);
	return j;
}

static int sequence_of(const struct received *e)
{
	cJSON *j = cJSON_Parse(e->body);
	const cJSON *n = cJSON_GetObjectItem(j, "sequence");
	int v = cJSON_IsNumber(n) ? n->valueint : -1;

	cJSON_Delete(j);
	return v;
}

static int by_sequence(const void *a, const void *b)
{
	return sequence_of(a) - sequence_of(b);
}

static void signed_events_in_sequence(void **state)
{
	struct stub_config c = base();
	struct harness *h;
	struct reply r;
	const char *want[] = { "ringing", "answered", "completed" };

	c.hold = false;
	c.dur_min_ms = c.dur_max_ms = 100;
	c.weights[1] = c.weights[2] = c.weights[3] = c.weights[4] = 0; /* all complete */
	h = harness_start(&c);
	harness_dial(h, "s1", "o1", "c1", "ct1", 1, &r);
	harness_wait_events(h, 3);
	/* Independent posts may arrive in any order: put them in sequence order first. */
	qsort(h->events, 3, sizeof(h->events[0]), by_sequence);
	for (unsigned i = 0; i < 3; i++) {
		cJSON *j = event(h, i);
		const char *b = h->events[i].body;
		assert_int_equal(signing_verify(c.secret, h->events[i].signature, b, strlen(b),
						(int64_t)time(NULL), 0),
				 0);
		assert_int_equal(signing_verify("other", h->events[i].signature, b, strlen(b),
						(int64_t)time(NULL), 0),
				 -EPERM);
		assert_string_equal(cJSON_GetObjectItem(j, "status")->valuestring, want[i]);
		assert_int_equal(cJSON_GetObjectItem(j, "sequence")->valueint, (int)i + 1);
		assert_string_equal(cJSON_GetObjectItem(j, "idempotency_key")->valuestring, "s1");
		assert_string_equal(cJSON_GetObjectItem(j, "call_id")->valuestring, "pc_1");
		assert_true(strlen(cJSON_GetObjectItem(j, "occurred_at")->valuestring) == 24);
		cJSON_Delete(j);
	}
	assert_int_equal(harness_stat(h, "live"), 0);
	assert_int_equal(harness_stat(h, "events_sent"), 3);
	assert_int_equal(harness_stat(h, "outcomes.completed"), 1);
	harness_stop(h);
}

static void hold_mode_exact_states(void **state)
{
	struct stub_config c = base();
	struct harness *h;
	struct reply r;
	const char *keys[] = { "h1", "h2", "h3", "h4", "h5" };
	const char *camps[] = { "A", "A", "A", "B", "B" };

	c.drop_pct = 100;
	h = harness_start(&c);
	for (int i = 0; i < 5; i++) {
		harness_dial(h, keys[i], "o1", camps[i], keys[i], 1, &r);
		assert_int_equal(r.status, 201);
	}
	harness_dial(h, "x1", "o2", "X", "x1", 1, &r);
	assert_int_equal(harness_stat(h, "live"), 6);
	assert_int_equal(harness_stat(h, "orgs.o1.live"), 5);
	assert_int_equal(harness_stat(h, "orgs.o2.live"), 1);
	assert_int_equal(harness_stat(h, "campaigns.A.live"), 3);
	assert_int_equal(harness_stat(h, "campaigns.B.live"), 2);
	assert_int_equal(harness_control(h, "/control/end",
					 "{\"idempotency_key\":\"h2\",\"status\":\"busy\"}"),
			 200);
	assert_int_equal(harness_stat(h, "campaigns.A.live"), 2);
	assert_int_equal(harness_stat(h, "campaigns.A.max_live"), 3);
	assert_int_equal(harness_stat(h, "outcomes.busy"), 1);
	assert_int_equal(harness_control(h, "/control/end", "{\"org_id\":\"o1\"}"), 200);
	assert_int_equal(harness_stat(h, "orgs.o1.live"), 0);
	assert_int_equal(harness_stat(h, "orgs.o1.max_live"), 5);
	assert_int_equal(harness_stat(h, "orgs.o2.live"), 1);
	assert_int_equal(harness_control(h, "/control/end", "{\"all\":true}"), 200);
	assert_int_equal(harness_stat(h, "live"), 0);
	assert_int_equal(harness_stat(h, "max_live"), 6);
	assert_int_equal(harness_control(h, "/control/end", "{\"all\":true,\"status\":\"x\"}"),
			 422);
	harness_stop(h);
}

/* The live timeline of one GET /stats snapshot (stub_stats_json): now_ms and the live integrals. */
struct timeline {
	double now, first, total, org, a, b;
};

static double number_at(const cJSON *j, const char *a, const char *b, const char *c)
{
	const cJSON *v = cJSON_GetObjectItem(j, a);

	if (b)
		v = cJSON_GetObjectItem(cJSON_GetObjectItem(v, b), c);
	assert_true(cJSON_IsNumber(v));
	return v->valuedouble;
}

static struct timeline timeline_read(struct harness *h)
{
	char *text = stub_stats_json(h->stub);
	cJSON *j = cJSON_Parse(text);
	struct timeline t;

	assert_non_null(j);
	t.now = number_at(j, "now_ms", NULL, NULL);
	t.first = number_at(j, "first_dial_ms", NULL, NULL);
	t.total = number_at(j, "live_ms", NULL, NULL);
	t.org = number_at(j, "orgs", "o1", "live_ms");
	t.a = number_at(j, "campaigns", "A", "live_ms");
	t.b = number_at(j, "campaigns", "B", "live_ms");
	cJSON_Delete(j);
	free(text);
	return t;
}

static void timer_fired(uv_timer_t *t)
{
	*(bool *)t->data = true;
}

/* Runs the loop for at least ms. */
static void pass_time(struct harness *h, uint64_t ms)
{
	uv_timer_t t;
	bool fired = false;

	uv_timer_init(&h->loop, &t);
	t.data = &fired;
	uv_timer_start(&t, timer_fired, ms, 0);
	harness_wait(h, &fired);
	uv_close((uv_handle_t *)&t, NULL);
	uv_run(&h->loop, UV_RUN_NOWAIT);
}

/* The live timeline: between two snapshots, each integral grows by exactly live x elapsed (the
 * demo's utilisation and fairness figures are such differences). */
static void live_timeline_integrals(void **state)
{
	struct stub_config c = base();
	struct harness *h;
	struct reply r;
	struct timeline t0, t1, t2;

	(void)state;
	c.drop_pct = 100;
	h = harness_start(&c);
	assert_int_equal(harness_stat(h, "first_dial_ms"), 0);
	assert_int_equal(harness_stat(h, "live_ms"), 0);
	harness_dial(h, "t1", "o1", "A", "t1", 1, &r);
	harness_dial(h, "t2", "o1", "A", "t2", 1, &r);
	harness_dial(h, "t3", "o1", "B", "t3", 1, &r);
	t0 = timeline_read(h);
	assert_true(t0.first > 0 && t0.first <= t0.now);
	pass_time(h, 30);
	t1 = timeline_read(h);
	assert_true(t1.now >= t0.now + 30);
	assert_true(t1.first == t0.first);
	assert_true(t1.a - t0.a == 2 * (t1.now - t0.now));
	assert_true(t1.b - t0.b == 1 * (t1.now - t0.now));
	assert_true(t1.org - t0.org == 3 * (t1.now - t0.now));
	assert_true(t1.total - t0.total == 3 * (t1.now - t0.now));
	assert_int_equal(harness_control(h, "/control/end", "{\"idempotency_key\":\"t1\"}"), 200);
	t1 = timeline_read(h);
	pass_time(h, 20);
	t2 = timeline_read(h);
	assert_true(t2.a - t1.a == 1 * (t2.now - t1.now));
	assert_true(t2.org - t1.org == 2 * (t2.now - t1.now));
	assert_int_equal(harness_control(h, "/control/end", "{\"all\":true}"), 200);
	t1 = timeline_read(h);
	pass_time(h, 20);
	t2 = timeline_read(h);
	assert_true(t2.total == t1.total && t2.a == t1.a && t2.b == t1.b);
	harness_stop(h);
}

/* Places n calls with seed, ends them all, returns the outcome counts. */
static void outcomes(uint64_t seed, unsigned n, double counts[STUB_OUTCOMES])
{
	struct stub_config c = base();
	struct harness *h;
	struct reply *r = calloc(100, sizeof(*r));
	char key[32];

	c.seed = seed;
	c.drop_pct = 100;
	c.weights[0] = 50;
	c.weights[1] = 20;
	c.weights[2] = c.weights[3] = c.weights[4] = 10;
	h = harness_start(&c);
	for (unsigned i = 0; i < n; i += 100) {
		for (unsigned j = 0; j < 100; j++) {
			snprintf(key, sizeof(key), "d%u", i + j);
			harness_dial_async(h, key, "o1", "c1", key, 1, &r[j]);
		}
		for (unsigned j = 0; j < 100; j++)
			harness_wait(h, &r[j].done);
	}
	harness_control(h, "/control/end", "{\"all\":true}");
	for (int i = 0; i < STUB_OUTCOMES; i++) {
		char path[64];
		snprintf(path, sizeof(path), "outcomes.%s",
			 stub_outcome_name((enum stub_outcome)i));
		counts[i] = harness_stat(h, path);
	}
	free(r);
	harness_stop(h);
}

static void outcome_distribution_is_deterministic(void **state)
{
	double a[STUB_OUTCOMES], b[STUB_OUTCOMES], d[STUB_OUTCOMES];
	const double want[] = { 500, 200, 100, 100, 100 };
	bool differs = false;

	outcomes(7, 1000, a);
	outcomes(7, 1000, b);
	outcomes(8, 1000, d);
	for (int i = 0; i < STUB_OUTCOMES; i++) {
		assert_true(a[i] == b[i]);				 /* same seed, same calls */
		assert_true(a[i] > want[i] - 60 && a[i] < want[i] + 60); /* about 4 sd */
		differs |= a[i] != d[i];
	}
	assert_true(differs);
}

static void classify_reply(const struct reply *r, struct retry_decision *d)
{
	struct retry_answer a = { r->status, RETRY_TRANSPORT_NONE,
				  r->retry_after[0] ? r->retry_after : NULL,
				  r->status == 200 && strstr(r->body, "\"throttled\"") != NULL };
	struct retry_counts c = { 0, 1, false };

	retry_classify(NULL, &a, &c, (int64_t)time(NULL) * 1000, 0, d);
}

/* Dials org twice under a limit of 2, then a third time: refused in org's mode. */
static void third_refused(struct harness *h, const char *org, const char *settings, struct reply *r)
{
	char json[256], key[32];

	snprintf(json, sizeof(json), "{\"org_id\":\"%s\",\"limit\":2,%s}", org, settings);
	assert_int_equal(harness_control(h, "/control/org", json), 200);
	for (int i = 0; i < 3; i++) {
		snprintf(key, sizeof(key), "%s-%d", org, i);
		harness_dial(h, key, org, "c1", key, 1, r);
		if (i < 2)
			assert_int_equal(r->status, 201);
	}
}

static void throttling_modes(void **state)
{
	struct stub_config c = base();
	struct harness *h;
	struct reply r;
	struct retry_decision d;
	int64_t when;

	c.drop_pct = 100;
	h = harness_start(&c);
	third_refused(h, "t1", "\"window_ms\":86400000,\"throttle\":\"retry_after\"", &r);
	assert_int_equal(r.status, 429);
	assert_true(atoi(r.retry_after) >= 1 && atoi(r.retry_after) <= 86400);
	classify_reply(&r, &d);
	assert_int_equal(d.reason, RETRY_REASON_THROTTLED_HEADER);
	third_refused(h, "t2", "\"window_ms\":86400000,\"throttle\":\"no_header\"", &r);
	assert_int_equal(r.status, 429);
	assert_string_equal(r.retry_after, "");
	classify_reply(&r, &d);
	assert_int_equal(d.reason, RETRY_REASON_THROTTLED);
	third_refused(h, "t3", "\"window_ms\":86400000,\"throttle\":\"body\"", &r);
	assert_int_equal(r.status, 200);
	classify_reply(&r, &d);
	assert_int_equal(d.verdict, RETRY_REFUSED);
	assert_int_equal(d.reason, RETRY_REASON_THROTTLED);
	third_refused(h, "t4", "\"window_ms\":86400000,\"throttle\":\"retry_after_date\"", &r);
	assert_int_equal(r.status, 429);
	assert_int_equal(retry_http_date_parse(r.retry_after, &when), 0);
	assert_true(when >= (int64_t)time(NULL));
	classify_reply(&r, &d);
	assert_int_equal(d.reason, RETRY_REASON_THROTTLED_HEADER);
	/* Sliding mode through the HTTP side (its arithmetic: sliding_and_fixed_windows). */
	third_refused(h, "t5", "\"window_ms\":600000,\"window\":\"sliding\"", &r);
	assert_int_equal(r.status, 429);
	/* Other orgs are not throttled. */
	harness_dial(h, "free", "o-free", "c1", "free", 1, &r);
	assert_int_equal(r.status, 201);
	assert_int_equal(harness_stat(h, "orgs.t1.throttled_429"), 1);
	assert_int_equal(harness_stat(h, "orgs.t3.throttled_body"), 1);
	assert_int_equal(harness_stat(h, "throttled_429"), 4);
	assert_int_equal(harness_stat(h, "orgs.o-free.throttled_429"), 0);
	harness_stop(h);
}

static void injected_faults(void **state)
{
	struct stub_config c = base();
	struct harness *h;
	struct reply r, r2;

	c.drop_pct = 100;
	h = harness_start(&c);
	harness_control(h, "/control/org", "{\"org_id\":\"f1\",\"fail_pct\":100}");
	harness_dial(h, "f1-a", "f1", "c1", "f1-a", 1, &r);
	assert_int_equal(r.status, 503);
	assert_int_equal(harness_stat(h, "calls_placed"), 0);
	harness_control(h, "/control/org", "{\"org_id\":\"f1\",\"fail_pct\":0}");
	harness_dial(h, "f1-a", "f1", "c1", "f1-a", 1, &r);
	assert_int_equal(r.status, 201); /* the re-send of the same key is placed once */
	/* Placed, but answered 502: the re-send with the same key finds the call. */
	harness_control(h, "/control/org",
			"{\"org_id\":\"f2\",\"fail_placed_pct\":100,\"fail_status\":502}");
	harness_dial(h, "f2-a", "f2", "c1", "f2-a", 1, &r);
	assert_int_equal(r.status, 502);
	assert_int_equal(harness_stat(h, "orgs.f2.placed"), 1);
	harness_dial(h, "f2-a", "f2", "c1", "f2-a", 1, &r2);
	assert_int_equal(r2.status, 200);
	assert_int_equal(harness_stat(h, "orgs.f2.placed"), 1);
	assert_int_equal(harness_stat(h, "replays"), 1);
	/* Forced credential answers (the lane-stop path). */
	harness_control(h, "/control/org", "{\"org_id\":\"f3\",\"force_status\":403}");
	harness_dial(h, "f3-a", "f3", "c1", "f3-a", 1, &r);
	assert_int_equal(r.status, 403);
	/* Slow answers still arrive. */
	harness_control(h, "/control/org", "{\"org_id\":\"f4\",\"slow_pct\":100,\"slow_ms\":50}");
	harness_dial(h, "f4-a", "f4", "c1", "f4-a", 1, &r);
	assert_int_equal(r.status, 201);
	assert_int_equal(harness_control(h, "/control/org", "{\"org_id\":\"f5\",\"window\":\"x\"}"),
			 422);
	harness_stop(h);
}

static struct stub_config completing(void)
{
	struct stub_config c = base();

	c.hold = false;
	c.dur_min_ms = c.dur_max_ms = 100;
	c.weights[1] = c.weights[2] = c.weights[3] = c.weights[4] = 0;
	return c;
}

static void event_faults(void **state)
{
	struct stub_config c = completing();
	struct harness *h;
	struct reply r;

	/* Every event twice. */
	c.dup_pct = 100;
	h = harness_start(&c);
	harness_dial(h, "e1", "o1", "c1", "e1", 1, &r);
	harness_wait_events(h, 6);
	assert_int_equal(harness_stat(h, "events_duplicated"), 3);
	harness_stop(h);
	/* Early: the ringing event lands before the 201. */
	c = completing();
	c.early_pct = 100;
	h = harness_start(&c);
	harness_dial(h, "e2", "o1", "c1", "e2", 1, &r);
	assert_int_equal(r.status, 201);
	assert_true(r.events_at_done >= 1);
	assert_non_null(strstr(h->events[0].body, "\"ringing\""));
	harness_wait_events(h, 3);
	harness_stop(h);
	/* Reordered: all still arrive, each with its sequence. */
	c = completing();
	c.reorder_pct = 100;
	c.reorder_ms = 50;
	h = harness_start(&c);
	harness_dial(h, "e3", "o1", "c1", "e3", 1, &r);
	harness_wait_events(h, 3);
	int seen = 0;
	for (unsigned i = 0; i < 3; i++) {
		cJSON *j = event(h, i);
		seen |= 1 << cJSON_GetObjectItem(j, "sequence")->valueint;
		cJSON_Delete(j);
	}
	assert_int_equal(seen, 0xe);
	assert_int_equal(harness_stat(h, "events_reordered"), 3);
	harness_stop(h);
}

static void failing_receiver_and_drops(void **state)
{
	struct stub_config c = base();
	struct harness *h;
	struct reply r;

	/* The receiver answers 500: each event is posted 1 + 3 times, then counted failed. */
	c.weights[1] = c.weights[2] = c.weights[3] = c.weights[4] = 0;
	h = harness_start(&c);
	h->recv_status = 500;
	harness_dial(h, "r1", "o1", "c1", "r1", 1, &r);
	harness_wait_events(h, 8); /* ringing and answered (held), four times each */
	harness_wait_stat(h, "events_failed", 2);
	assert_int_equal(harness_stat(h, "events_sent"), 0);
	harness_stop(h);
	/* Dropped events are never sent. */
	c = completing();
	c.drop_pct = 100;
	h = harness_start(&c);
	harness_dial(h, "r2", "o1", "c1", "r2", 1, &r);
	harness_wait_stat(h, "events_dropped", 3);
	assert_int_equal(harness_stat(h, "live"), 0);
	assert_int_equal(h->nevents, 0);
	harness_stop(h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(replay_and_duplicates),
		cmocka_unit_test(validation_and_auth),
		cmocka_unit_test(callback_url_loopback_only),
		cmocka_unit_test(events_ignore_proxy_environment),
		cmocka_unit_test(replays_before_throttling_and_faults),
		cmocka_unit_test(closing_refuses_dials),
		cmocka_unit_test(sliding_and_fixed_windows),
		cmocka_unit_test(signed_events_in_sequence),
		cmocka_unit_test(hold_mode_exact_states),
		cmocka_unit_test(live_timeline_integrals),
		cmocka_unit_test(outcome_distribution_is_deterministic),
		cmocka_unit_test(throttling_modes),
		cmocka_unit_test(injected_faults),
		cmocka_unit_test(event_faults),
		cmocka_unit_test(failing_receiver_and_drops),
	};
	curl_global_init(CURL_GLOBAL_DEFAULT);
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	curl_global_cleanup();
	return rc;
}
