/* worker_dial_end(): the dial results the dialer does not settle, mapped onto call_end's
 * dispositions (SPEC D2; dispatcher/worker/worker.h). */
#include "call_end.h"
#include "error.h"
#include "worker.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

static const struct dial_call call = { .call = "6f1c2e4a-1b2c-4d5e-8f90-0a1b2c3d4e5f",
				       .org = "o1",
				       .campaign = "c1",
				       .agent = "a1",
				       .contact = 7,
				       .attempt = 1,
				       .to = "+14155550100" };

static void map(enum dial_disposition d, enum retry_reason why, int status, uint64_t delay,
		const char *text, struct call_end_req *q, char *reason, int want_rc)
{
	struct dial_result r = { .call = &call,
				 .disposition = d,
				 .reason = why,
				 .status = status,
				 .delay_ms = delay,
				 .text = text };

	assert_int_equal(worker_dial_end(&r, q, reason, CALL_END_REASON_MAX + 1), want_rc);
}

static void throttled_retries_later(void **state)
{
	struct call_end_req q;
	char reason[CALL_END_REASON_MAX + 1];

	(void)state;
	map(DIAL_REFUSED, RETRY_REASON_THROTTLED_HEADER, 429, 2750, "", &q, reason, 0);
	assert_int_equal(q.disposition, CALL_END_RETRY_AT); /* tries + 1, no attempt charged */
	assert_int_equal(q.delay_ms, 2750);
	assert_string_equal(q.call, call.call);
	assert_string_equal(q.outcome, "refused");
	assert_true(call_end_outcome_ok(q.outcome));
	assert_non_null(strstr(q.reason, "429"));
	map(DIAL_REFUSED, RETRY_REASON_CONNECTION, 0, 400, "", &q, reason, 0);
	assert_int_equal(q.disposition, CALL_END_RETRY_AT);
	assert_int_equal(q.delay_ms, 400);
}

static void rejected_fails_with_reason(void **state)
{
	struct call_end_req q;
	char reason[CALL_END_REASON_MAX + 1];

	(void)state;
	map(DIAL_INVALID, RETRY_REASON_REJECTED, 422, 0, "to is not E.164", &q, reason, 0);
	assert_int_equal(q.disposition, CALL_END_FAIL);
	assert_string_equal(q.reason, "provider 422: to is not E.164");
	map(DIAL_INVALID, RETRY_REASON_REJECTED, 404, 0, "", &q, reason, 0);
	assert_string_equal(q.reason, "provider 404: rejected");
}

static void stopped_and_drained_wait_uncharged(void **state)
{
	struct call_end_req q;
	char reason[CALL_END_REASON_MAX + 1];

	(void)state;
	map(DIAL_STOPPED, RETRY_REASON_CREDENTIALS, 401, 0, "", &q, reason, 0);
	assert_int_equal(q.disposition, CALL_END_PENDING);
	assert_int_equal(q.delay_ms, 0);
	map(DIAL_DRAINED, RETRY_REASON_NONE, 0, 0, "", &q, reason, 0);
	assert_int_equal(q.disposition, CALL_END_PENDING);
	assert_string_equal(q.reason, "not sent: draining");
}

static void placed_and_unknown_are_not_ended(void **state)
{
	struct call_end_req q;
	char reason[CALL_END_REASON_MAX + 1];

	(void)state;
	map(DIAL_PLACED, RETRY_REASON_NONE, 201, 0, "", &q, reason, -EINVAL);
	map(DIAL_UNKNOWN, RETRY_REASON_TIMEOUT, 0, 0, "", &q, reason, -EINVAL);
}

/* A fenced call's refusal ends the call only under the lease the dialer held (issue 9 review
 * H2): the end carries it; an unfenced one carries none. */
static void refusal_carries_the_lease_held(void **state)
{
	struct call_end_req q;
	char reason[CALL_END_REASON_MAX + 1];
	struct dial_result r = { .call = &call,
				 .disposition = DIAL_REFUSED,
				 .reason = RETRY_REASON_THROTTLED,
				 .status = 429,
				 .delay_ms = 100,
				 .lease_owner = "w1",
				 .lease_token = 42 };

	(void)state;
	assert_int_equal(worker_dial_end(&r, &q, reason, sizeof(reason)), 0);
	assert_string_equal(q.lease_owner, "w1");
	assert_int_equal(q.lease_token, 42);
	map(DIAL_REFUSED, RETRY_REASON_THROTTLED, 429, 100, "", &q, reason, 0);
	assert_null(q.lease_owner);
	assert_int_equal(q.lease_token, 0);
}

/* A refused dial's end whose submission failed is re-sent with doubling delays (it used to be
 * given up at once, the line held until the maximum-duration sweep); not while draining, not
 * when call_end is closing. */
static void failed_end_is_retried_with_backoff(void **state)
{
	(void)state;
	assert_int_equal(worker_dial_end_retry(DSP_EPG, false, 0, 100, 1000), 100);
	assert_int_equal(worker_dial_end_retry(-ETIMEDOUT, false, 1, 100, 1000), 200);
	assert_int_equal(worker_dial_end_retry(-ECONNRESET, false, 3, 100, 1000), 800);
	assert_int_equal(worker_dial_end_retry(-ENOTCONN, false, 40, 100, 1000), 1000);
	assert_int_equal(worker_dial_end_retry(-EAGAIN, false, 0, 0, 0), 1); /* never 0 */
	assert_int_equal(worker_dial_end_retry(0, false, 0, 100, 1000), 0);
	assert_int_equal(worker_dial_end_retry(-ECANCELED, false, 0, 100, 1000), 0);
	assert_int_equal(worker_dial_end_retry(DSP_EPG, true, 0, 100, 1000), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(throttled_retries_later),
		cmocka_unit_test(rejected_fails_with_reason),
		cmocka_unit_test(stopped_and_drained_wait_uncharged),
		cmocka_unit_test(placed_and_unknown_are_not_ended),
		cmocka_unit_test(failed_end_is_retried_with_backoff),
		cmocka_unit_test(refusal_carries_the_lease_held),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
