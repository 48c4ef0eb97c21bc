/* The provider event body (dispatcher/worker/events_body.h) without a server: what is read from
 * a valid body, and the 400 message of each refusal. The HTTP side is tested in
 * tests/integration/test_worker_events.c. */
#include "events_body.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#define UUID "0B6F3F4C-6c1e-4f3e-9d7a-2a4b1e5c7d90"

static char err[EVENTS_BODY_ERR];

/* Asserts that body (len bytes) is refused with a message containing want. */
static void refused(const char *body, size_t len, const char *want)
{
	struct events_event e;
	int rc = events_parse_body(body, len, &e, err, sizeof(err));

	if (rc != -EINVAL || !strstr(err, want))
		fail_msg("%.*s: rc %d \"%s\", want \"%s\"", (int)len, body, rc, err, want);
}

#define REFUSED(lit, want) refused(lit, sizeof(lit) - 1, want)

static void valid_event(void **state)
{
	const char b[] =
		"{\"call_id\":\"pc_1\",\"idempotency_key\":\"" UUID "\",\"status\":"
		"\"no-answer\",\"sequence\":7,\"occurred_at\":\"1970-01-01T01:00:01.5+01:00\"}";
	struct events_event e;

	(void)state;
	assert_int_equal(events_parse_body(b, sizeof(b) - 1, &e, err, sizeof(err)), 0);
	assert_string_equal(e.call, "0b6f3f4c-6c1e-4f3e-9d7a-2a4b1e5c7d90");
	assert_string_equal(e.pcid, "pc_1");
	assert_string_equal(e.status, "no-answer");
	assert_true(e.terminal);
	assert_int_equal(e.seq, 7);
	assert_true(e.has_time);
	assert_int_equal(e.occ_us, 1500000);
	/* No time, a non-terminal status. */
	const char c[] = "{\"call_id\":\"p\",\"idempotency_key\":\"" UUID "\",\"status\":"
			 "\"ringing\",\"sequence\":0,\"occurred_at\":null}";
	assert_int_equal(events_parse_body(c, sizeof(c) - 1, &e, err, sizeof(err)), 0);
	assert_false(e.terminal);
	assert_false(e.has_time);
}

static void refusals(void **state)
{
	(void)state;
	REFUSED("not json", "the body is not a JSON object: invalid JSON at byte 0");
	REFUSED("[1,2]", "the body is not a JSON object");
	REFUSED("{\"call_id\":\"pc\",\"status\":\"completed\",\"sequence\":1}",
		"idempotency_key must be the call id (a uuid)");
	REFUSED("{\"call_id\":\"pc\",\"idempotency_key\":\"" UUID "\",\"status\":\"hungup\","
		"\"sequence\":1}",
		"status must be ringing, answered");
	REFUSED("{\"call_id\":\"pc\",\"idempotency_key\":\"" UUID "\",\"status\":\"completed\","
		"\"sequence\":1.5}",
		"field sequence must be an integer from 0 to 2147483647");
	REFUSED("{\"call_id\":\"pc\",\"idempotency_key\":\"" UUID "\",\"status\":\"completed\","
		"\"sequence\":1,\"occurred_at\":\"2024-02-30T10:00:00Z\"}",
		"occurred_at must be an RFC 3339 date-time after 1970");
	REFUSED("{\"call_id\":\"p c\",\"idempotency_key\":\"" UUID "\",\"status\":\"completed\","
		"\"sequence\":1}",
		"call_id must be 1 to 128 printable characters");
	REFUSED("{\"call_id\":\"pc\",\"idempotency_key\":\"" UUID "\",\"status\":\"completed\","
		"\"status\":\"ringing\",\"sequence\":1}",
		"field status appears twice");
	/* Nothing read from no body. */
	refused(NULL, 0, "invalid JSON at byte 0");
}

/* A NUL between two members once hid a NUL inside the key after it: the uuid was read from
 * "<uuid>\0zz" (common/json_strict; found by tests/fuzz/fuzz_json_strict). */
static void nul_between_members(void **state)
{
	const char b[] = "{\"call_id\":\"pc\",\0\"idempotency_key\":\"" UUID "\0zz\","
			 "\"status\":\"completed\",\"sequence\":1}";

	(void)state;
	refused(b, sizeof(b) - 1, "a NUL inside a string at byte 72");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(valid_event),
		cmocka_unit_test(refusals),
		cmocka_unit_test(nul_between_members),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
