/* common/json_strict: each refusal names its field or byte, each limit at, below and above. */
#include "json_strict.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static char err[JSON_STRICT_ERR];

static cJSON *parse(const char *s, size_t len)
{
	return json_strict_parse(s, len, err, sizeof(err));
}

/* Asserts that s (len bytes) is refused with a message containing want. */
static void refused(const char *s, size_t len, const char *want)
{
	cJSON *j = parse(s, len);

	if (j || !strstr(err, want))
		fail_msg("%.*s: got %s, want \"%s\"", (int)len, s, j ? "a tree" : err, want);
}

#define REFUSED(lit, want) refused(lit, sizeof(lit) - 1, want)

static void accepts_one_value_with_whitespace(void **state)
{
	const char ok[] = " \t\r\n{\"a\":[1,2,{\"b\":\"x\"}],\"c\":null} \n";
	cJSON *j = parse(ok, sizeof(ok) - 1);

	assert_non_null(j);
	cJSON_Delete(j);
	/* Not NUL-terminated: only len bytes are read. */
	j = parse("[1]]", 3);
	assert_non_null(j);
	cJSON_Delete(j);
}

static void trailing_bytes(void **state)
{
	REFUSED("{\"a\":1}x", "trailing bytes after the JSON value at byte 7");
	REFUSED("{\"a\":1} {}", "trailing bytes after the JSON value at byte 8");
	REFUSED("1 2", "trailing bytes after the JSON value at byte 2");
	refused("{\"a\":1}\0", 8, "trailing bytes after the JSON value at byte 7");
	REFUSED("", "invalid JSON at byte 0");
	REFUSED("{\"a\":}", "invalid JSON at byte 5");
}

static void nul_and_controls_in_strings(void **state)
{
	refused("{\"a\":\"x\0y\"}", 11, "a NUL inside a string at byte 7");
	refused("{\"a\0b\":1}", 9, "a NUL inside a string at byte 3");
	REFUSED("{\"a\":\"x\\u0000y\"}", "a NUL (\\u0000) inside a string at byte 7");
	REFUSED("{\"a\":\"x\ty\"}", "a control character inside a string at byte 7");
	/* A \u without four hex digits (cJSON decoded it to a NUL, cutting the string) and any
	 * other escape than RFC 8259's: found by tests/fuzz/fuzz_json_strict. */
	refused("{\"a\":\"\\udd\\\0k180\"}", 18,
		"an invalid \\u escape inside a string at byte 6 (four hex digits wanted)");
	REFUSED("{\"a\":\"\\uzzzz\"}",
		"an invalid \\u escape inside a string at byte 6 (four hex digits wanted)");
	REFUSED("{\"a\":\"\\u00\"}",
		"an invalid \\u escape inside a string at byte 6 (four hex digits wanted)");
	refused("{\"a\":\"x\\\0y\"}", 12, "an invalid escape inside a string at byte 7");
	REFUSED("{\"a\":\"x\\qy\"}", "an invalid escape inside a string at byte 7");
	REFUSED("{\"a\":\"x\\\x01y\"}", "an invalid escape inside a string at byte 7");
	/* Escapes that are fine: \u0001, an escaped quote before a NUL-looking text. */
	const char *esc = "{\"a\":\"\\u0001\\\"u0000\"}";
	const char *all = "{\"a\":\"\\\"\\\\\\/\\b\\f\\n\\r\\t\\uABcd\"}";
	cJSON *k = parse(all, strlen(all));
	assert_non_null(k);
	cJSON_Delete(k);
	cJSON *j = parse(esc, strlen(esc));
	assert_non_null(j);
	cJSON_Delete(j);
}

/* Between tokens only space, tab, CR and LF (RFC 8259): cJSON alone skips every byte up to 32,
 * and a NUL there once stopped the string scan, so a raw NUL in a later string was accepted and
 * the string cut ("x\0y" read as "x"). Found by tests/fuzz/fuzz_json_strict. */
static void controls_between_tokens(void **state)
{
	refused("{\0\"a\":\"x\0y\"}", 12, "a NUL inside a string at byte 8");
	refused("{\"a\":\0\"x\"}", 10,
		"invalid JSON at byte 5: a control character outside a string");
	refused("[1\x01\0]", 5, "invalid JSON at byte 2: a control character outside a string");
	refused("\0{}", 3, "invalid JSON at byte 0: a control character outside a string");
	REFUSED("{\x1f\"a\":1}", "invalid JSON at byte 1: a control character outside a string");
	/* After the value it is still "trailing bytes"; tab, CR and LF stay whitespace. */
	refused("{\"a\":1}\x01", 8, "trailing bytes after the JSON value at byte 7");
	const char ws[] = "\t\r\n{ \"a\" :\t[ 1 ,\r\n2 ] }\n";
	cJSON *j = parse(ws, sizeof(ws) - 1);
	assert_non_null(j);
	cJSON_Delete(j);
}

static void duplicated_keys(void **state)
{
	REFUSED("{\"a\":1,\"a\":2}", "field a appears twice");
	REFUSED("{\"x\":{\"b\":1,\"c\":2,\"b\":3}}", "field x.b appears twice");
	REFUSED("{\"contacts\":[{\"to\":\"1\"},{\"to\":\"1\",\"to\":\"2\"}]}",
		"field contacts[1].to appears twice");
	/* The same key in sibling objects is fine; case matters. */
	const char *sib = "[{\"a\":1},{\"a\":1,\"A\":2}]";
	cJSON *j = parse(sib, strlen(sib));
	assert_non_null(j);
	cJSON_Delete(j);
}

/* Objects above the pairwise size are checked by sorting: at, below and above it. */
static void duplicated_keys_large_objects(void **state)
{
	for (int n = 15; n <= 200; n += (n < 18 ? 1 : 91)) {
		for (int dup = 0; dup <= 1; dup++) {
			char buf[8192], *p = buf;
			p += sprintf(p, "{");
			for (int i = 0; i < n; i++)
				p += sprintf(p, "%s\"k%d\":%d", i ? "," : "",
					     dup && i == n - 1 ? 0 : i, i);
			p += sprintf(p, "}");
			cJSON *j = parse(buf, (size_t)(p - buf));
			if (dup) {
				assert_null(j);
				assert_string_equal(err, "field k0 appears twice");
			} else {
				assert_non_null(j);
				cJSON_Delete(j);
			}
		}
	}
}

static void integers(void **state)
{
	const char *doc = "{\"a\":5,\"b\":5.5,\"c\":\"5\",\"d\":null,\"e\":-0,\"f\":1e3,"
			  "\"g\":9007199254740992,\"h\":9007199254740994}";
	cJSON *j = parse(doc, strlen(doc));
	int64_t v = -1;

	assert_non_null(j);
	/* At, below and above the range. */
	assert_int_equal(json_strict_int(j, "a", 5, 5, &v, err, sizeof(err)), 0);
	assert_int_equal(v, 5);
	assert_int_equal(json_strict_int(j, "a", 0, 4, &v, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "field a must be an integer from 0 to 4");
	assert_int_equal(json_strict_int(j, "a", 6, 9, &v, err, sizeof(err)), -EINVAL);
	assert_int_equal(json_strict_int(j, "a", 4, 6, &v, err, sizeof(err)), 0);
	/* Not integers. */
	assert_int_equal(json_strict_int(j, "b", 0, 10, &v, err, sizeof(err)), -EINVAL);
	assert_string_equal(err, "field b must be an integer from 0 to 10");
	assert_int_equal(json_strict_int(j, "c", 0, 10, &v, err, sizeof(err)), -EINVAL);
	/* Missing and null. */
	assert_int_equal(json_strict_int(j, "d", 0, 10, &v, err, sizeof(err)), -ENOENT);
	assert_string_equal(err, "field d is missing");
	assert_int_equal(json_strict_int(j, "zz", 0, 10, &v, err, sizeof(err)), -ENOENT);
	/* Integral values however written. */
	assert_int_equal(json_strict_int(j, "e", 0, 0, &v, err, sizeof(err)), 0);
	assert_int_equal(json_strict_int(j, "f", 0, 1000, &v, err, sizeof(err)), 0);
	assert_int_equal(v, 1000);
	/* 2^53 is exact; above it a double cannot tell neighbours apart: refused. */
	assert_int_equal(json_strict_int(j, "g", 0, JSON_STRICT_INT_MAX, &v, err, sizeof(err)), 0);
	assert_int_equal(v, JSON_STRICT_INT_MAX);
	assert_int_equal(json_strict_int(j, "h", 0, INT64_MAX, &v, err, sizeof(err)), -EINVAL);
	cJSON_Delete(j);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(accepts_one_value_with_whitespace),
		cmocka_unit_test(trailing_bytes),
		cmocka_unit_test(nul_and_controls_in_strings),
		cmocka_unit_test(controls_between_tokens),
		cmocka_unit_test(duplicated_keys),
		cmocka_unit_test(duplicated_keys_large_objects),
		cmocka_unit_test(integers),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
