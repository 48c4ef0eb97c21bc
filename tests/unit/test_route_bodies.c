/* dispatcher/api/calls_body.h and batch_body.h: the route bodies' parse without a server.
 * Each case here was an input of tests/fuzz/ (calls_body, batch_body) or the property it
 * checks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "batch_body.h"
#include "calls_body.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int calls(const char *body, struct calls_body *out, char *field, char *msg)
{
	return calls_body_parse(body, strlen(body), out, field, CALLS_BODY_ID_SIZE, msg,
				CALLS_BODY_MSG);
}

static void calls_accepted(void **state)
{
	struct calls_body b;
	char field[CALLS_BODY_ID_SIZE], msg[CALLS_BODY_MSG];

	(void)state;
	assert_int_equal(calls("{\"agent_id\":\"a_-Z9\",\"to_number\":\"+1 (415) 555-0100\","
			       "\"from_number\":null}",
			       &b, field, msg),
			 0);
	assert_string_equal(b.agent, "a_-Z9");
	assert_string_equal(b.to, "+14155550100");
	assert_string_equal(b.from, "");
	assert_string_equal(msg, "");
}

/* Found by fuzz_calls_body: an unknown member with an empty name was refused with the message
 * " is not a field of a call: ..." (no name at all). */
static void calls_empty_member_named(void **state)
{
	struct calls_body b;
	char field[CALLS_BODY_ID_SIZE], msg[CALLS_BODY_MSG];

	(void)state;
	assert_int_equal(calls("{\"\":\"x\",\"agent_id\":\"a\",\"to_number\":\"+14155550100\"}", &b,
			       field, msg),
			 422);
	assert_string_equal(field, "\"\"");
	assert_string_equal(msg, "\"\" is not a field of a call: send agent_id, to_number and "
				 "optionally from_number.");
}

static void calls_refusals(void **state)
{
	struct calls_body b;
	char field[CALLS_BODY_ID_SIZE], msg[CALLS_BODY_MSG];

	(void)state;
	assert_int_equal(calls("{\"agent_id\":\"a\",\"agent_id\":\"a\"}", &b, field, msg), 400);
	assert_int_equal(calls("[1]", &b, field, msg), 422);
	assert_string_equal(field, "");
	assert_int_equal(calls("{\"agent_id\":\"a\",\"to_number\":\"+1415\"}", &b, field, msg),
			 422);
	assert_string_equal(field, "to_number");
	assert_int_equal(strncmp(msg, "to_number is not a phone number", 31), 0);
	assert_int_equal(
		calls("{\"agent_id\":\"no body!\",\"to_number\":\"+14155550100\"}", &b, field, msg),
		404);
	assert_string_equal(msg, "no body!");
}

/* The first pass of body in slices of budget contacts. */
static void first_pass(struct batch_body *p, const char *body, unsigned budget)
{
	assert_int_equal(batch_body_init(p, body, strlen(body)), 0);
	while (!batch_body_check(p, budget))
		;
}

static void batch_sliced_and_second_pass(void **state)
{
	static const char body[] =
		"{\"camp\\u0061ign_id\":\"c\",\"name\":null,\"contacts\":[{\"phone\":\"+1\","
		"\"variables\":{\"a\":\"]}\"}},{\"ph\\u006fne\":\"+1\\u00342\"},{\"phone\":\"3\","
		"\"variables\":null}],\"x\":[1]}";
	struct batch_body a, b;
	struct batch_body_walk w;
	struct batch_body_contact k;

	(void)state;
	first_pass(&a, body, 1000);
	first_pass(&b, body, 1);
	assert_int_equal(a.status, 0);
	assert_int_equal(b.status, 0);
	assert_int_equal(a.contacts, 3);
	assert_int_equal(b.contacts, 3);
	assert_string_equal(a.campaign_id, "c");
	assert_false(a.has_name);
	batch_body_contacts(&a, &w);
	assert_int_equal(batch_body_next(&w, &k), 1);
	assert_int_equal(k.phone_len, 2);
	assert_memory_equal(k.phone, "+1", 2);
	assert_int_equal(k.vars_len, strlen("{\"a\":\"]}\"}"));
	batch_body_contact_deinit(&k);
	assert_int_equal(batch_body_next(&w, &k), 1);
	assert_string_equal(k.phone, "+142"); /* key and value escapes decoded */
	assert_null(k.vars);
	batch_body_contact_deinit(&k);
	assert_int_equal(batch_body_next(&w, &k), 1);
	assert_null(k.vars);
	batch_body_contact_deinit(&k);
	assert_int_equal(batch_body_next(&w, &k), 0);
	batch_body_deinit(&a);
	batch_body_deinit(&b);
}

/* issue10-g1: a contact or another field too long is refused by its length (never parsed), and
 * a slice ends after BATCH_BODY_SLICE_BYTES of text whatever its budget of contacts. */
static void batch_sizes_and_byte_slices(void **state)
{
	struct batch_body p;
	size_t cap = 4 << 20, n;
	char *b = malloc(cap);
	(void)state;

	if (!b) /* not only assert_non_null(): gcc's -Warray-bounds under ASan needs to see it */
		abort();
	n = (size_t)sprintf(b,
			    "{\"campaign_id\":\"c\",\"contacts\":[{\"phone\":\"+1\",\"variables\":"
			    "{\"a\":\"");
	memset(b + n, 'x', BATCH_BODY_CONTACT_MAX);
	n += BATCH_BODY_CONTACT_MAX;
	n += (size_t)sprintf(b + n, "\"}}]}");
	first_pass(&p, b, 1000);
	assert_int_equal(p.status, 422);
	assert_non_null(strstr(p.msg, "contacts[0] is"));
	batch_body_deinit(&p);

	n = (size_t)sprintf(b, "{\"campaign_id\":\"c\",\"x\":\"");
	memset(b + n, 'y', BATCH_BODY_FIELD_MAX);
	n += BATCH_BODY_FIELD_MAX;
	n += (size_t)sprintf(b + n, "\",\"contacts\":[]}");
	first_pass(&p, b, 1000);
	assert_int_equal(p.status, 422);
	assert_non_null(strstr(p.msg, "field x is"));
	batch_body_deinit(&p);

	/* 40 contacts of 60 KiB: 2.4 MiB; a budget of 1000 contacts takes 3 slices. */
	n = (size_t)sprintf(b, "{\"campaign_id\":\"c\",\"contacts\":[");
	for (int i = 0; i < 40; i++) {
		n += (size_t)sprintf(b + n, "%s{\"phone\":\"+1\",\"variables\":{\"a\":\"",
				     i ? "," : "");
		memset(b + n, 'z', 60 << 10);
		n += 60 << 10;
		n += (size_t)sprintf(b + n, "\"}}");
	}
	sprintf(b + n, "]}");
	assert_int_equal(batch_body_init(&p, b, strlen(b)), 0);
	unsigned slices = 1;
	while (!batch_body_check(&p, 1000))
		slices++;
	assert_int_equal(p.status, 0);
	assert_int_equal(slices, 3);
	batch_body_deinit(&p);
	free(b);
}

static void batch_refusals(void **state)
{
	struct batch_body p;

	(void)state;
	assert_int_equal(batch_body_init(&p, " [1]", 4), 400);
	assert_string_equal(p.msg, "the body must be a JSON object (byte 1)");
	batch_body_deinit(&p);
	first_pass(&p, "{\"campaign_id\":5,\"contacts\":[{\"phone\":\"+1\"},]}", 1);
	assert_int_equal(p.status, 400); /* the 400 wins over the 422 before it */
	batch_body_deinit(&p);
	first_pass(&p, "{\"campaign_id\":\"c\",\"contacts\":[{\"phone\":\"+1\"},{\"phone\":1}]}",
		   1);
	assert_int_equal(p.status, 422);
	assert_string_equal(p.msg, "field contacts[1].phone must be a string");
	batch_body_deinit(&p);
}

/* A contact's number under any of the CSV header's names (phone, phone_number, to_number), one
 * per contact; a name with a control character is refused as dispatcher admin refuses it. */
static void batch_phone_names_and_name(void **state)
{
	struct batch_body p;
	struct batch_body_walk w;
	struct batch_body_contact k;

	(void)state;
	first_pass(&p,
		   "{\"campaign_id\":\"c\",\"contacts\":[{\"to_number\":\"+1\"},"
		   "{\"variables\":{\"phone\":\"x\"},\"phone_number\":\"+2\"},{\"phone\":\"+3\"}]}",
		   1);
	assert_int_equal(p.status, 0);
	batch_body_contacts(&p, &w);
	for (int i = 1; i <= 3; i++) {
		char want[4];
		snprintf(want, sizeof(want), "+%d", i);
		assert_int_equal(batch_body_next(&w, &k), 1);
		assert_int_equal(k.phone_len, 2);
		assert_memory_equal(k.phone, want, 2);
		batch_body_contact_deinit(&k);
	}
	assert_int_equal(batch_body_next(&w, &k), 0);
	batch_body_deinit(&p);

	first_pass(&p,
		   "{\"campaign_id\":\"c\",\"contacts\":[{\"phone\":\"+1\"},"
		   "{\"phone\":\"+1\",\"to_number\":\"+2\"}]}",
		   1);
	assert_int_equal(p.status, 422);
	assert_string_equal(p.msg, "field contacts[1] has both phone and to_number: give the "
				   "number once, under one of phone, phone_number, to_number");
	batch_body_deinit(&p);
	first_pass(&p, "{\"campaign_id\":\"c\",\"contacts\":[{\"to_number\":1}]}", 1);
	assert_int_equal(p.status, 422);
	assert_string_equal(p.msg, "field contacts[0].to_number must be a string");
	batch_body_deinit(&p);

	first_pass(&p,
		   "{\"campaign_id\":\"c\",\"name\":\"a\\nb\\u001b[31m\",\"contacts\":[{\"phone\":"
		   "\"+1\"}]}",
		   1);
	assert_int_equal(p.status, 422);
	assert_string_equal(p.msg, "field name contains a control character (byte 1)");
	batch_body_deinit(&p);
	first_pass(&p, "{\"campaign_id\":\"c\",\"name\":\"caf\u00e9 \\u00e9 \\t\",\"contacts\":[]}",
		   1);
	assert_int_equal(p.status, 422);
	assert_string_equal(p.msg, "field name contains a control character (byte 9)");
	batch_body_deinit(&p);
}

/* stop / pause / resume: no body, or {} (issue 10 review: a JSON client's {} was a 413). */
static void control_bodies(void **state)
{
	static const char *const ok[] = { "", " \r\n\t", "{}", " { } \n" };
	static const char *const bad[] = { "null", "[]", "a=b", "{}x", "{", "\"{}\"" };
	char msg[256];

	(void)state;
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		assert_int_equal(batch_body_control(ok[i], strlen(ok[i]), msg, sizeof(msg)), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(batch_body_control(bad[i], strlen(bad[i]), msg, sizeof(msg)), 400);
		assert_non_null(strstr(msg, "This route takes no body: send none, or the empty "
					    "JSON object {}"));
	}
	assert_int_equal(batch_body_control("{\"force\":true}", 14, msg, sizeof(msg)), 422);
	assert_string_equal(msg, "field force is not a field of this route: it takes no body; "
				 "send none, or the empty JSON object {}.");
	assert_int_equal(batch_body_control("{\"\":1}", 6, msg, sizeof(msg)), 422);
	assert_non_null(strstr(msg, "field \"\" is not"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(calls_accepted),
		cmocka_unit_test(calls_empty_member_named),
		cmocka_unit_test(calls_refusals),
		cmocka_unit_test(batch_sliced_and_second_pass),
		cmocka_unit_test(batch_refusals),
		cmocka_unit_test(batch_sizes_and_byte_slices),
		cmocka_unit_test(batch_phone_names_and_name),
		cmocka_unit_test(control_bodies),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
