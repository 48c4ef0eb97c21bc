/* The provider stub (SPEC D0, D6): replays and duplicates, validation, signed events in
 * sequence, hold mode's exact states, deterministic outcome distributions, every throttling
 * mode (read back through the retry policy), injected 5xx / placed-then-5xx / forced statuses,
 * and the event faults (duplicate, drop, reorder, early, failing receiver). */
#include "harness.h"
#include "retry_policy.h"
#include "signing.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
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
	harness_request(h, "POST", "/calls", json, good, 2, 0, &r);
	assert_int_equal(r.status, 201);
	assert_int_equal(harness_stat(h, "rejected"), 5);
	harness_stop(h);
}

/* Parses received event i. */
static cJSON *event(struct harness *h, unsigned i)
{
	cJSON *j = cJSON_Parse(h->events[i].body);

	assert_non_null(j);
	return j;
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
	/* Sliding window: the previous window's count still weighs, so the third is refused too. */
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
		cmocka_unit_test(signed_events_in_sequence),
		cmocka_unit_test(hold_mode_exact_states),
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
