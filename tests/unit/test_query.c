/* The list routes' query parser (dispatcher/api/query.h): percent-decoding, unknown, repeated
 * and empty parameters, escapes and lengths at, below and above the bound, the limit 1..max,
 * the cursor's round trip and its refusals; every refusal's message names the parameter. */
#include "query.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

enum { A, B, LIMIT, CURSOR, N };

static int parse(const char *q, struct query_param p[N], char *msg)
{
	static const char *const names[N] = { "a", "b_id", "limit", "cursor" };

	for (int i = 0; i < N; i++)
		p[i] = (struct query_param){ .name = names[i] };
	return query_parse(q, p, N, msg, 256);
}

static void decodes(void **state)
{
	struct query_param p[N];
	char msg[256];

	(void)state;
	assert_int_equal(parse(NULL, p, msg), 0);
	assert_false(p[A].set);
	assert_int_equal(parse("", p, msg), 0);
	assert_int_equal(parse("a=x%2Fy+z&b_id=c%36&&", p, msg), 0);
	assert_true(p[A].set);
	assert_string_equal(p[A].value, "x/y z");
	assert_string_equal(p[B].value, "c6");
	assert_false(p[LIMIT].set);
	assert_string_equal(p[LIMIT].value, "");
	assert_int_equal(parse("b%5Fid=q&%61=%e2%82%ac", p, msg), 0); /* encoded names */
	assert_string_equal(p[B].value, "q");
	assert_string_equal(p[A].value, "\xe2\x82\xac");
}

static void refuses(void **state)
{
	static const struct {
		const char *q, *says;
	} bad[] = {
		{ "page=2", "'page' is unknown: use a, b_id, limit or cursor." },
		{ "a=1&a=2", "'a' is given twice" },
		{ "a=1&b_id=2&a=1", "'a' is given twice" },
		{ "a=", "'a' is empty" },
		{ "a", "'a' is empty" },
		{ "a=%zz", "'a' is not a valid value" },
		{ "a=%2", "'a' is not a valid value" },
		{ "a=x%00", "'a' is not a valid value" },
		{ "=x", "'' is unknown" },
		{ "p%22%0a=1", "'p?\?' is unknown" }, /* shown without its quote and line end */
		{ "%zz=1", "'?zz' is unknown" },
	};
	struct query_param p[N];
	char msg[256];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		msg[0] = '\0';
		if (parse(bad[i].q, p, msg) != -EINVAL || !strstr(msg, bad[i].says))
			fail_msg("%s: %s", bad[i].q, msg);
	}
}

static void value_length(void **state)
{
	char q[8 + QUERY_VALUE_MAX * 3 + 8], msg[256];
	struct query_param p[N];

	(void)state;
	strcpy(q, "a=");
	memset(q + 2, 'v', QUERY_VALUE_MAX); /* at the bound */
	q[2 + QUERY_VALUE_MAX] = '\0';
	assert_int_equal(parse(q, p, msg), 0);
	assert_int_equal(strlen(p[A].value), QUERY_VALUE_MAX);
	q[1 + QUERY_VALUE_MAX] = '\0'; /* below */
	assert_int_equal(parse(q, p, msg), 0);
	strcpy(q + 2, "%41"); /* above, the last byte encoded: the bound is on decoded bytes */
	memset(q + 5, 'v', QUERY_VALUE_MAX);
	q[5 + QUERY_VALUE_MAX] = '\0';
	assert_int_equal(parse(q, p, msg), -EINVAL);
	assert_non_null(strstr(msg, "'a'"));
	q[4 + QUERY_VALUE_MAX] = '\0'; /* "%41" and 95 more: 96 decoded */
	assert_int_equal(parse(q, p, msg), 0);
	assert_int_equal(p[A].value[0], 'A');
}

static void limits(void **state)
{
	static const char *const bad[] = { "limit=0",	 "limit=101",
					   "limit=-1",	 "limit=+5",
					   "limit=1x",	 "limit=abc",
					   "limit=%201", "limit=1000000000000",
					   "limit=1.5" };
	struct query_param p[N];
	unsigned v = 0;
	char msg[256];

	(void)state;
	assert_int_equal(parse("", p, msg), 0);
	assert_int_equal(query_limit(&p[LIMIT], 50, 100, &v, msg, sizeof(msg)), 0);
	assert_int_equal(v, 50);
	static const char *const good[] = { "limit=1", "limit=100", "limit=99", "limit=007" };
	static const unsigned want[] = { 1, 100, 99, 7 };
	for (size_t i = 0; i < 4; i++) {
		assert_int_equal(parse(good[i], p, msg), 0);
		assert_int_equal(query_limit(&p[LIMIT], 50, 100, &v, msg, sizeof(msg)), 0);
		assert_int_equal(v, want[i]);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(parse(bad[i], p, msg), 0);
		if (query_limit(&p[LIMIT], 50, 100, &v, msg, sizeof(msg)) != -EINVAL ||
		    !strstr(msg, "'limit' must be an integer from 1 to 100"))
			fail_msg("%s: %s", bad[i], msg);
	}
}

static void cursors(void **state)
{
	static const char *const bad[] = { "cursor=abc",
					   "cursor=123.",
					   "cursor=.l001",
					   "cursor=12x.l001",
					   "cursor=1.l%2a",
					   "cursor=1_l001",
					   "cursor=1234567890123456789.l001" };
	struct query_param p[N];
	char cur[QUERY_CURSOR_MAX], q[128], msg[256], us[QUERY_US_SIZE] = "",
						      id[IDENT_MAX + 1] = "";
	char longid[IDENT_MAX + 2];

	(void)state;
	assert_int_equal(parse("", p, msg), 0);
	assert_int_equal(query_cursor(&p[CURSOR], ident_ok, us, id, msg, sizeof(msg)), 0);
	assert_string_equal(us, ""); /* not set: left alone */
	query_cursor_format(cur, "1700000000123456", "b_01-x");
	assert_string_equal(cur, "1700000000123456.b_01-x");
	snprintf(q, sizeof(q), "cursor=%s", cur);
	assert_int_equal(parse(q, p, msg), 0);
	assert_int_equal(query_cursor(&p[CURSOR], ident_ok, us, id, msg, sizeof(msg)), 0);
	assert_string_equal(us, "1700000000123456");
	assert_string_equal(id, "b_01-x");
	/* an id of 64 (the bound) round-trips; 65 is refused */
	memset(longid, 'i', IDENT_MAX);
	longid[IDENT_MAX] = '\0';
	query_cursor_format(cur, "123456789012345678", longid);
	snprintf(q, sizeof(q), "cursor=%s", cur);
	assert_int_equal(parse(q, p, msg), 0);
	assert_int_equal(query_cursor(&p[CURSOR], ident_ok, us, id, msg, sizeof(msg)), 0);
	assert_string_equal(id, longid);
	assert_string_equal(us, "123456789012345678");
	snprintf(q, sizeof(q), "cursor=1.%si", longid);
	assert_int_equal(parse(q, p, msg), 0);
	assert_int_equal(query_cursor(&p[CURSOR], ident_ok, us, id, msg, sizeof(msg)), -EINVAL);
	/* uuids */
	assert_int_equal(parse("cursor=12.123e4567-e89b-12d3-a456-426614174000", p, msg), 0);
	assert_int_equal(query_cursor(&p[CURSOR], ident_uuid_ok, us, id, msg, sizeof(msg)), 0);
	assert_string_equal(id, "123e4567-e89b-12d3-a456-426614174000");
	assert_int_equal(parse("cursor=12.not-a-uuid", p, msg), 0);
	assert_int_equal(query_cursor(&p[CURSOR], ident_uuid_ok, us, id, msg, sizeof(msg)),
			 -EINVAL);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(parse(bad[i], p, msg), 0);
		if (query_cursor(&p[CURSOR], ident_ok, us, id, msg, sizeof(msg)) != -EINVAL ||
		    !strstr(msg, "'cursor' is not a cursor"))
			fail_msg("%s: %s", bad[i], msg);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(decodes),	cmocka_unit_test(refuses),
		cmocka_unit_test(value_length), cmocka_unit_test(limits),
		cmocka_unit_test(cursors),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
