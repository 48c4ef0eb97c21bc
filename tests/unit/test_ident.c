/* Identifier checks (common/ident.h): ids at, below and above 64 bytes, every allowed class,
 * refused bytes, NULL; a bounded id; uuids of either case and their near misses. */
#include "ident.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

static void id_lengths(void **state)
{
	char s[IDENT_MAX + 2];

	(void)state;
	assert_false(ident_ok(NULL));
	assert_false(ident_ok(""));
	assert_true(ident_ok("a"));
	memset(s, 'x', sizeof(s));
	s[IDENT_MAX - 1] = '\0'; /* 63 */
	assert_true(ident_ok(s));
	s[IDENT_MAX - 1] = 'x';
	s[IDENT_MAX] = '\0'; /* 64 */
	assert_true(ident_ok(s));
	s[IDENT_MAX] = 'x';
	s[IDENT_MAX + 1] = '\0'; /* 65 */
	assert_false(ident_ok(s));
}

static void id_characters(void **state)
{
	static const char *const bad[] = { "a b", "a.b", "a/b", "a%2a", "é",	"a\tb",	 "a*",
					   "a+",  "a:b", "a'b", "a\"b", "a\nb", "ab\x7f" };

	(void)state;
	assert_true(ident_ok("AZaz09_-"));
	assert_true(ident_ok("-"));
	assert_true(ident_ok("_"));
	assert_true(ident_ok("org_0123456789abcdef0123"));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (ident_ok(bad[i]))
			fail_msg("'%s' taken", bad[i]);
	for (int c = 1; c < 256; c++) {
		char s[2] = { (char)c, 0 };
		bool want = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
			    (c >= '0' && c <= '9') || c == '_' || c == '-';
		if (ident_ok(s) != want)
			fail_msg("byte %d: %d", c, !want);
	}
}

static void id_bounded(void **state)
{
	(void)state;
	assert_true(ident_ok_max("abc", 3));
	assert_false(ident_ok_max("abcd", 3));
	assert_true(ident_ok_max("ab", 3));
	assert_false(ident_ok_max("", 3));
	assert_false(ident_ok_max(NULL, 3));
	assert_false(ident_ok_max("a.", 3));
	/* reads at most max + 1 bytes: an unterminated buffer one past the bound is refused */
	char s[4] = { 'a', 'b', 'c', 'd' };
	assert_false(ident_ok_max(s, 3));
}

static void uuids(void **state)
{
	static const char *const bad[] = {
		"",
		"123e4567-e89b-12d3-a456-42661417400",	 /* 35 */
		"123e4567-e89b-12d3-a456-4266141740000", /* 37 */
		"123e4567e89b-12d3-a456-4266141740000",	 /* dash missing */
		"123e4567-e89b-12d3-a456-42661417400g",	 /* not hex */
		"123e4567-e89b-12d3-a456_426614174000",	 /* '_' for '-' */
		"{23e4567-e89b-12d3-a456-426614174000",
	};

	(void)state;
	assert_true(ident_uuid_ok("123e4567-e89b-12d3-a456-426614174000"));
	assert_true(ident_uuid_ok("123E4567-E89B-12D3-A456-426614174000"));
	assert_false(ident_uuid_ok(NULL));
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (ident_uuid_ok(bad[i]))
			fail_msg("'%s' taken", bad[i]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(id_lengths),
		cmocka_unit_test(id_characters),
		cmocka_unit_test(id_bounded),
		cmocka_unit_test(uuids),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
