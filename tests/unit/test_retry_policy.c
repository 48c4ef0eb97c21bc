/* The retry table of SPEC D2, row by row, at, below and above every limit. Time and the random
 * draw are arguments: RMIN and RMAX give the two ends of every jitter range. */
#include "retry_policy.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#define RMIN 0u
#define RMAX UINT32_MAX
/* Sun, 06 Nov 1994 08:49:37 GMT */
#define NOW_MS (784111777LL * 1000)

static struct retry_decision classify_md(int status, enum retry_transport t, const char *ra,
					 bool body_throttled, unsigned throttled, unsigned sends,
					 bool maybe_delivered, uint32_t rnd)
{
	struct retry_answer a = { status, t, ra, body_throttled };
	struct retry_counts c = { throttled, sends, maybe_delivered };
	struct retry_decision d;

	retry_classify(NULL, &a, &c, NOW_MS, rnd, &d);
	return d;
}

/* A re-send (sends > 1) only ever follows an unknown outcome: the call may have been placed. */
static struct retry_decision classify(int status, enum retry_transport t, const char *ra,
				      bool body_throttled, unsigned throttled, unsigned sends,
				      uint32_t rnd)
{
	return classify_md(status, t, ra, body_throttled, throttled, sends, sends > 1, rnd);
}

static struct retry_decision st(int status, unsigned sends, uint32_t rnd)
{
	return classify(status, RETRY_TRANSPORT_NONE, NULL, false, 0, sends, rnd);
}

static void ok_rows(void **state)
{
	const int codes[] = { 200, 201, 202, 204 };

	for (size_t i = 0; i < 4; i++) {
		struct retry_decision d = st(codes[i], 1, RMAX);
		assert_int_equal(d.verdict, RETRY_OK);
		assert_false(d.park_lane);
		assert_false(d.circuit_refusal);
		assert_int_equal(d.delay_ms, 0);
	}
}

static void retry_after_seconds_plus_jitter(void **state)
{
	struct retry_decision lo = classify(429, 0, "120", false, 0, 1, RMIN);
	struct retry_decision hi = classify(429, 0, "120", false, 0, 1, RMAX);

	assert_int_equal(lo.verdict, RETRY_REFUSED);
	assert_int_equal(lo.reason, RETRY_REASON_THROTTLED_HEADER);
	assert_int_equal(lo.delay_ms, 120300);
	assert_int_equal(hi.delay_ms, 121200);
	assert_true(lo.park_lane);
	assert_int_equal(lo.park_ms, 120000);
	assert_true(lo.circuit_refusal);
	assert_false(lo.requeue);
	for (uint32_t r = 1; r < 4000000000u; r += 77777777u) {
		struct retry_decision d = classify(429, 0, "0", false, 0, 1, r);
		assert_true(d.delay_ms >= 300 && d.delay_ms <= 1200);
	}
}

static void retry_after_http_date(void **state)
{
	/* 30 s after NOW_MS, in all three RFC 9110 forms. */
	const char *forms[] = { "Sun, 06 Nov 1994 08:50:07 GMT", "Sunday, 06-Nov-94 08:50:07 GMT",
				"Sun Nov  6 08:50:07 1994" };

	for (size_t i = 0; i < 3; i++) {
		struct retry_decision d = classify(429, 0, forms[i], false, 0, 1, RMIN);
		assert_int_equal(d.reason, RETRY_REASON_THROTTLED_HEADER);
		assert_int_equal(d.delay_ms, 30300);
		assert_int_equal(d.park_ms, 30000);
	}
	/* A date in the past means now (jitter only). */
	struct retry_decision past =
		classify(429, 0, "Sun, 06 Nov 1994 08:00:00 GMT", false, 0, 1, RMAX);
	assert_int_equal(past.delay_ms, 1200);
	assert_int_equal(past.park_ms, 0);
}

static void retry_after_limit_of_five(void **state)
{
	/* Retries 1..5 follow the header (throttled 0..4 before this answer). */
	for (unsigned n = 0; n < 5; n++) {
		struct retry_decision d = classify(429, 0, "10", false, n, 1, RMIN);
		assert_int_equal(d.verdict, RETRY_REFUSED);
		assert_false(d.requeue);
		assert_int_equal(d.delay_ms, 10300);
	}
	/* The sixth: back to the backlog for at least a minute, tries reset by the caller. */
	struct retry_decision d6 = classify(429, 0, "10", false, 5, 1, RMIN);
	assert_int_equal(d6.verdict, RETRY_REFUSED);
	assert_true(d6.requeue);
	assert_int_equal(d6.delay_ms, 60300);
	struct retry_decision d7 = classify(429, 0, "120", false, 6, 1, RMAX);
	assert_true(d7.requeue);
	assert_int_equal(d7.delay_ms, 121200); /* the header when longer than the minute */
}

static void retry_after_cap_and_garbage(void **state)
{
	struct retry_decision big = classify(429, 0, "99999999999999", false, 0, 1, RMIN);
	assert_int_equal(big.delay_ms, 86400000 + 300);
	assert_int_equal(big.park_ms, 86400000);
	/* Malformed headers count as absent: the doubling schedule applies. */
	const char *bad[] = { "", "soon", "12s", "-5", "Sun, 06 Nov 1994 08:50:07 UTC" };
	for (size_t i = 0; i < 5; i++) {
		struct retry_decision d = classify(429, 0, bad[i], false, 0, 1, RMAX);
		assert_int_equal(d.reason, RETRY_REASON_THROTTLED);
		assert_int_equal(d.delay_ms, 1000);
		assert_int_equal(d.park_ms, -1);
	}
}

static void throttled_doubling_to_32s_full_jitter(void **state)
{
	const uint64_t ceil[] = { 1000, 2000, 4000, 8000, 16000, 32000, 32000, 32000 };

	for (unsigned n = 0; n < 8; n++) {
		struct retry_decision hi = classify(429, 0, NULL, false, n, 1, RMAX);
		struct retry_decision lo = classify(429, 0, NULL, false, n, 1, RMIN);
		struct retry_decision body = classify(200, 0, NULL, true, n, 1, RMAX);
		assert_int_equal(hi.verdict, RETRY_REFUSED);
		assert_int_equal(hi.reason, RETRY_REASON_THROTTLED);
		assert_int_equal(hi.delay_ms, ceil[n]);
		assert_int_equal(lo.delay_ms, 0); /* full jitter starts at zero */
		assert_int_equal(body.verdict, RETRY_REFUSED);
		assert_int_equal(body.delay_ms, ceil[n]);
		assert_true(hi.park_lane && body.park_lane);
		assert_int_equal(hi.park_ms, -1);
		assert_false(hi.requeue);
	}
	/* The doubling counter saturates. */
	assert_int_equal(classify(429, 0, NULL, false, 4000000000u, 1, RMAX).delay_ms, 32000);
	/* Half the draw gives half the ceiling. */
	assert_int_equal(classify(429, 0, NULL, false, 2, 1, 0x80000000u).delay_ms, 2000);
}

static void server_errors_four_tries(void **state)
{
	const int codes[] = { 500, 502, 503, 504, 501, 599 };
	const uint64_t ceil[] = { 500, 1000, 2000 };

	for (size_t i = 0; i < 6; i++) {
		for (unsigned sends = 1; sends <= 3; sends++) {
			struct retry_decision d = st(codes[i], sends, RMAX);
			assert_int_equal(d.verdict, RETRY_RESEND);
			assert_int_equal(d.reason, RETRY_REASON_SERVER_ERROR);
			assert_int_equal(d.delay_ms, ceil[sends - 1]);
			/* Equal jitter: never below half the delay, never 0 ms. */
			assert_int_equal(st(codes[i], sends, RMIN).delay_ms, ceil[sends - 1] / 2);
			assert_true(d.circuit_refusal);
			assert_false(d.park_lane);
		}
		assert_int_equal(st(codes[i], 4, RMAX).verdict, RETRY_UNKNOWN);
		assert_int_equal(st(codes[i], 5, RMAX).verdict, RETRY_UNKNOWN);
	}
}

static void server_cap_8s(void **state)
{
	struct retry_policy p;
	struct retry_answer a = { 503, RETRY_TRANSPORT_NONE, NULL, false };
	const uint64_t ceil[] = { 500, 1000, 2000, 4000, 8000, 8000, 8000 };
	struct retry_decision d;

	retry_policy_defaults(&p);
	p.server_tries = 100;
	for (unsigned sends = 1; sends <= 7; sends++) {
		struct retry_counts c = { 0, sends, false };
		retry_classify(&p, &a, &c, NOW_MS, RMAX, &d);
		assert_int_equal(d.verdict, RETRY_RESEND);
		assert_int_equal(d.delay_ms, ceil[sends - 1]);
	}
}

static void timeouts_three_tries_flat(void **state)
{
	for (unsigned sends = 1; sends <= 2; sends++) {
		struct retry_decision a =
			classify(0, RETRY_TRANSPORT_READ_TIMEOUT, NULL, false, 0, sends, RMIN);
		struct retry_decision b =
			classify(0, RETRY_TRANSPORT_READ_TIMEOUT, NULL, false, 0, sends, RMAX);
		assert_int_equal(a.verdict, RETRY_RESEND);
		assert_int_equal(a.reason, RETRY_REASON_TIMEOUT);
		assert_int_equal(a.delay_ms, 2000);
		assert_int_equal(b.delay_ms, 2000);
		assert_true(a.circuit_refusal);
	}
	assert_int_equal(classify(0, RETRY_TRANSPORT_READ_TIMEOUT, NULL, false, 0, 3, RMIN).verdict,
			 RETRY_UNKNOWN);
	assert_int_equal(classify(0, RETRY_TRANSPORT_READ_TIMEOUT, NULL, false, 0, 4, RMIN).verdict,
			 RETRY_UNKNOWN);
	/* A connect timeout after a send that may have been delivered: same schedule. */
	struct retry_decision c =
		classify_md(0, RETRY_TRANSPORT_CONNECT_TIMEOUT, NULL, false, 0, 2, true, RMIN);
	assert_int_equal(c.verdict, RETRY_RESEND);
	assert_int_equal(c.delay_ms, 2000);
	assert_int_equal(
		classify_md(0, RETRY_TRANSPORT_CONNECT_TIMEOUT, NULL, false, 0, 3, true, RMIN)
			.verdict,
		RETRY_UNKNOWN);
	/* 408 is the server's timeout: same schedule. */
	assert_int_equal(st(408, 2, RMAX).verdict, RETRY_RESEND);
	assert_int_equal(st(408, 2, RMAX).delay_ms, 2000);
	assert_int_equal(st(408, 3, RMAX).verdict, RETRY_UNKNOWN);
}

static void resets_like_server_errors(void **state)
{
	struct retry_decision d = classify(0, RETRY_TRANSPORT_RESET, NULL, false, 0, 1, RMAX);

	assert_int_equal(d.verdict, RETRY_RESEND);
	assert_int_equal(d.reason, RETRY_REASON_CONNECTION);
	assert_int_equal(d.delay_ms, 500);
	assert_int_equal(classify(0, RETRY_TRANSPORT_RESET, NULL, false, 0, 1, RMIN).delay_ms, 250);
	assert_int_equal(classify(0, RETRY_TRANSPORT_RESET, NULL, false, 0, 3, RMAX).verdict,
			 RETRY_RESEND);
	assert_int_equal(classify(0, RETRY_TRANSPORT_RESET, NULL, false, 0, 4, RMAX).verdict,
			 RETRY_UNKNOWN);
	/* A refused connect after a send that may have been delivered keeps re-sending. */
	d = classify_md(0, RETRY_TRANSPORT_CONNECT_FAILED, NULL, false, 0, 3, true, RMAX);
	assert_int_equal(d.verdict, RETRY_RESEND);
	assert_int_equal(d.reason, RETRY_REASON_CONNECTION);
	assert_int_equal(
		classify_md(0, RETRY_TRANSPORT_CONNECT_FAILED, NULL, false, 0, 4, true, RMAX)
			.verdict,
		RETRY_UNKNOWN);
	/* A status of 0 without a transport class is still a transport failure. */
	assert_int_equal(st(0, 1, RMAX).verdict, RETRY_RESEND);
	/* In-progress answers for the key re-send like 5xx. */
	assert_int_equal(st(409, 1, RMAX).verdict, RETRY_RESEND);
	assert_int_equal(st(425, 4, RMAX).verdict, RETRY_UNKNOWN);
}

/* A connect that failed delivered nothing: with no earlier send that may have been delivered,
 * it is a definitive refusal (slots released, called again soon), whatever the send count. */
static void failed_connect_is_a_refusal(void **state)
{
	const enum retry_transport t[] = { RETRY_TRANSPORT_CONNECT_FAILED,
					   RETRY_TRANSPORT_CONNECT_TIMEOUT };
	const enum retry_reason why[] = { RETRY_REASON_CONNECTION, RETRY_REASON_TIMEOUT };

	for (size_t i = 0; i < 2; i++) {
		for (unsigned sends = 1; sends <= 5; sends++) {
			struct retry_decision lo =
				classify_md(0, t[i], NULL, false, 0, sends, false, RMIN);
			struct retry_decision hi =
				classify_md(0, t[i], NULL, false, 0, sends, false, RMAX);
			assert_int_equal(lo.verdict, RETRY_REFUSED);
			assert_int_equal(lo.reason, why[i]);
			assert_int_equal(lo.delay_ms, 250);
			assert_int_equal(hi.delay_ms, 500);
			assert_true(lo.circuit_refusal);
			assert_false(lo.park_lane);
			assert_false(lo.requeue);
		}
	}
}

/* A throttled answer to a re-send of a call that may already be placed is not a refusal: a
 * new key could ring the contact twice. Same key, after the throttle's delay, slots kept. */
static void throttled_resend_keeps_the_key(void **state)
{
	struct retry_decision h = classify_md(429, 0, "5", false, 0, 2, true, RMIN);
	struct retry_decision n = classify_md(429, 0, NULL, false, 1, 2, true, RMAX);
	struct retry_decision b = classify_md(200, 0, NULL, true, 2, 3, true, RMAX);

	assert_int_equal(h.verdict, RETRY_RESEND);
	assert_int_equal(h.reason, RETRY_REASON_THROTTLED_HEADER);
	assert_int_equal(h.delay_ms, 5300);
	assert_true(h.park_lane);
	assert_int_equal(h.park_ms, 5000);
	assert_true(h.circuit_refusal);
	assert_false(h.requeue);
	assert_int_equal(n.verdict, RETRY_RESEND);
	assert_int_equal(n.reason, RETRY_REASON_THROTTLED);
	assert_int_equal(n.delay_ms, 2000);
	assert_int_equal(b.verdict, RETRY_RESEND);
	assert_int_equal(b.delay_ms, 4000);
	/* Past the throttle limit the call ends unknown (slots kept), never a new key. */
	struct retry_decision u = classify_md(429, 0, "5", false, 5, 4, true, RMIN);
	assert_int_equal(u.verdict, RETRY_UNKNOWN);
	assert_false(u.requeue);
	assert_true(u.park_lane);
	/* The same answers to a call never delivered stay refusals. */
	assert_int_equal(classify_md(429, 0, "5", false, 0, 1, false, RMIN).verdict, RETRY_REFUSED);
	assert_int_equal(classify_md(200, 0, NULL, true, 0, 1, false, RMIN).verdict, RETRY_REFUSED);
}

static void invalid_and_stop_rows(void **state)
{
	const int invalid[] = { 400, 404, 422 };
	const int creds[] = { 401, 403 };
	const int odd[] = { 100, 301, 302, 405, 410, 413, 418 };

	for (size_t i = 0; i < 3; i++) {
		struct retry_decision d = st(invalid[i], 1, RMAX);
		assert_int_equal(d.verdict, RETRY_INVALID);
		assert_int_equal(d.reason, RETRY_REASON_REJECTED);
		assert_false(d.circuit_refusal);
		assert_false(d.park_lane);
	}
	for (size_t i = 0; i < 2; i++) {
		struct retry_decision d = st(creds[i], 1, RMAX);
		assert_int_equal(d.verdict, RETRY_STOP_LANE);
		assert_int_equal(d.reason, RETRY_REASON_CREDENTIALS);
	}
	for (size_t i = 0; i < 7; i++) {
		struct retry_decision d = st(odd[i], 1, RMAX);
		assert_int_equal(d.verdict, RETRY_STOP_LANE);
		assert_int_equal(d.reason, RETRY_REASON_UNEXPECTED);
	}
	/* A body flag on a non-2xx answer does not turn it into throttling. */
	assert_int_equal(classify(400, 0, NULL, true, 0, 1, RMAX).verdict, RETRY_INVALID);
	assert_true(st(401, 1, RMAX).stop_lane);
	assert_false(st(422, 1, RMAX).stop_lane);
}

/* The same rows answered to a re-send of a call that may already be placed: the call ends
 * unknown (slots kept, no new key, the contact not failed); the lane still stops on 401/403. */
static void invalid_and_stop_rows_after_maybe_delivered(void **state)
{
	const int statuses[] = { 400, 404, 422, 401, 403, 301 };

	for (size_t i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++) {
		struct retry_decision d =
			classify_md(statuses[i], 0, NULL, false, 0, 2, true, RMAX);
		assert_int_equal(d.verdict, RETRY_UNKNOWN);
		assert_int_equal(d.stop_lane,
				 statuses[i] != 400 && statuses[i] != 404 && statuses[i] != 422);
	}
}

static void http_dates(void **state)
{
	int64_t t;

	assert_int_equal(retry_http_date_parse("Sun, 06 Nov 1994 08:49:37 GMT", &t), 0);
	assert_int_equal(t, 784111777);
	assert_int_equal(retry_http_date_parse("Sunday, 06-Nov-94 08:49:37 GMT", &t), 0);
	assert_int_equal(t, 784111777);
	assert_int_equal(retry_http_date_parse("Sun Nov  6 08:49:37 1994", &t), 0);
	assert_int_equal(t, 784111777);
	assert_int_equal(retry_http_date_parse("Thu, 29 Feb 2024 00:00:00 GMT", &t), 0);
	assert_int_equal(t, 1709164800);
	assert_int_equal(retry_http_date_parse("Thu, 01 Jan 1970 00:00:00 GMT", &t), 0);
	assert_int_equal(t, 0);
	assert_int_equal(retry_http_date_parse("Fri, 31 Dec 9999 23:59:59 GMT", &t), 0);
	assert_int_equal(t, 253402300799LL);
	assert_int_equal(retry_http_date_parse("Thu, 01-Jan-70 00:00:00 GMT", &t), 0);
	assert_int_equal(t, 0);
	assert_int_equal(retry_http_date_parse("Tue, 01-Jan-69 00:00:00 GMT", &t), 0);
	assert_int_equal(t, 3124224000LL); /* two-digit years below 70 are 20xx */
	const char *bad[] = { "",
			      "Sun, 6 Nov 1994 08:49:37 GMT",
			      "Sun, 06 Nov 1994 08:49:37",
			      "Sun, 06 Nov 1994 08:49:37 GMT junk",
			      "Sun, 06 Foo 1994 08:49:37 GMT",
			      "Sun, 06 Nov 1994 24:00:00 GMT",
			      "Sun, 32 Nov 1994 08:49:37 GMT",
			      "06 Nov 1994 08:49:37 GMT",
			      "Sun,06 Nov 1994 08:49:37 GMT",
			      "Sun Nov 6 08:49:37 1994" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(retry_http_date_parse(bad[i], &t), -EINVAL);
	assert_int_equal(retry_http_date_parse(NULL, &t), -EINVAL);
}

static void retry_after_values(void **state)
{
	uint64_t d;

	assert_int_equal(retry_after_parse("0", NOW_MS, &d), 0);
	assert_int_equal(d, 0);
	assert_int_equal(retry_after_parse("5", NOW_MS, &d), 0);
	assert_int_equal(d, 5000);
	assert_int_equal(retry_after_parse("Sun, 06 Nov 1994 08:49:38 GMT", NOW_MS + 250, &d), 0);
	assert_int_equal(d, 750);
	assert_int_equal(retry_after_parse("5 ", NOW_MS, &d), -EINVAL);
	assert_int_equal(retry_after_parse(NULL, NOW_MS, &d), -EINVAL);
	assert_int_equal(retry_after_parse("1.5", NOW_MS, &d), -EINVAL);
}

static void jitter_and_names(void **state)
{
	assert_int_equal(retry_full_jitter(0, RMAX), 0);
	assert_int_equal(retry_full_jitter(1000, RMAX), 1000);
	assert_int_equal(retry_full_jitter(1000, RMIN), 0);
	assert_true(retry_full_jitter(10000000000ULL, RMAX) <= 10000000000ULL);
	assert_string_equal(retry_verdict_name(RETRY_RESEND), "resend");
	assert_string_equal(retry_verdict_name(RETRY_INVALID), "invalid");
	assert_string_equal(retry_reason_name(RETRY_REASON_THROTTLED_HEADER), "throttled_header");
	assert_string_equal(retry_reason_name((enum retry_reason)99), "?");
	/* Same inputs, same decision. */
	struct retry_decision a = classify(503, 0, NULL, false, 0, 2, 12345);
	struct retry_decision b = classify(503, 0, NULL, false, 0, 2, 12345);
	assert_int_equal(a.verdict, b.verdict);
	assert_int_equal(a.delay_ms, b.delay_ms);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(ok_rows),
		cmocka_unit_test(retry_after_seconds_plus_jitter),
		cmocka_unit_test(retry_after_http_date),
		cmocka_unit_test(retry_after_limit_of_five),
		cmocka_unit_test(retry_after_cap_and_garbage),
		cmocka_unit_test(throttled_doubling_to_32s_full_jitter),
		cmocka_unit_test(server_errors_four_tries),
		cmocka_unit_test(server_cap_8s),
		cmocka_unit_test(timeouts_three_tries_flat),
		cmocka_unit_test(resets_like_server_errors),
		cmocka_unit_test(failed_connect_is_a_refusal),
		cmocka_unit_test(throttled_resend_keeps_the_key),
		cmocka_unit_test(invalid_and_stop_rows),
		cmocka_unit_test(invalid_and_stop_rows_after_maybe_delivered),
		cmocka_unit_test(http_dates),
		cmocka_unit_test(retry_after_values),
		cmocka_unit_test(jitter_and_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
