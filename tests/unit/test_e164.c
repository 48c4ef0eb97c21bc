/* Phone numbers to E.164 (dispatcher/core/e164.h): accepted forms, each refusal, and the
 * length limits at, below and above. */
#include "e164.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

static void ok(const char *in, const char *want)
{
	char out[E164_BUF];
	enum e164_fault f = E164_TOO_LONG;

	print_message("ok: '%s'\n", in);
	assert_int_equal(e164_normalise(in, strlen(in), out, sizeof(out), &f), 0);
	assert_int_equal(f, E164_OK);
	assert_string_equal(out, want);
}

static void bad(const char *in, enum e164_fault want)
{
	char out[E164_BUF];
	enum e164_fault f = E164_OK;

	print_message("bad: '%s'\n", in);
	assert_int_equal(e164_normalise(in, strlen(in), out, sizeof(out), &f), -EINVAL);
	assert_int_equal(f, want);
	assert_string_equal(out, "");
	assert_non_null(e164_fault_str(f));
}

static void accepted_forms(void **state)
{
	(void)state;
	ok("+919876543210", "+919876543210"); /* the source document's example */
	ok("+14155550100", "+14155550100");
	ok("  +14155550100\t", "+14155550100");
	ok("+1 415 555 0100", "+14155550100");
	ok("+1-415-555-0100", "+14155550100");
	ok("+1.415.555.0100", "+14155550100");
	ok("+1 (415) 555-0100", "+14155550100");
	ok("+1(415)555-0100", "+14155550100");
	ok("+44 20 7946 0958", "+442079460958");
	ok("+49 (30) 901820", "+4930901820");
}

static void refused_forms(void **state)
{
	(void)state;
	bad("", E164_EMPTY);
	bad("   ", E164_EMPTY);
	bad("14155550100", E164_NO_PLUS);
	bad("0014155550100", E164_NO_PLUS);
	bad("(415) 555-0100", E164_NO_PLUS);
	bad("+1415555O100", E164_BAD_CHAR); /* a letter O */
	bad("+14155550100 x12", E164_BAD_CHAR);
	bad("+14155550100x12", E164_BAD_CHAR);
	bad("+14155550100;ext=1", E164_BAD_CHAR);
	bad("+1415555#0100", E164_BAD_CHAR);
	bad("++14155550100", E164_BAD_CHAR);
	bad("+1\xC2\xA0"
	    "4155550100",
	    E164_BAD_CHAR); /* no-break space */
	bad("+1\xE2\x80\x93"
	    "4155550100",
	    E164_BAD_CHAR); /* en dash */
	bad("+1  415 555 0100", E164_BAD_SEPARATOR);
	bad("+1 -415", E164_BAD_SEPARATOR);
	bad("+ 14155550100", E164_BAD_SEPARATOR);
	bad("+14155550100-", E164_BAD_SEPARATOR);
	bad("+(1) 4155550100", E164_BAD_SEPARATOR);
	bad("+1 (415 555-0100", E164_BAD_SEPARATOR);
	bad("+1 415) 555-0100", E164_BAD_SEPARATOR);
	bad("+1 (415) (555) 0100", E164_BAD_SEPARATOR);
	bad("+1 () 4155550100", E164_BAD_SEPARATOR);
	bad("+1 (4 15) 5550100", E164_BAD_SEPARATOR);
	bad("+44 (0)20 7946 0958", E164_TRUNK_ZERO);
	bad("+44 (020) 7946 0958", E164_TRUNK_ZERO);
	bad("+0123456789", E164_LEADING_ZERO);
}

static void length_limits(void **state)
{
	(void)state;
	/* 7 digits is the least, 15 the most (the schema's CHECK says the same). */
	bad("+123456", E164_TOO_SHORT);
	ok("+1234567", "+1234567");
	ok("+12345678", "+12345678");
	ok("+12345678901234", "+12345678901234");
	ok("+123456789012345", "+123456789012345");
	ok("+1 234 567 890 123 45", "+123456789012345");
	bad("+1234567890123456", E164_TOO_LONG);
	bad("+12345678901234567890123456789", E164_TOO_LONG);
	bad("+", E164_TOO_SHORT);
}

static void arguments(void **state)
{
	char out[E164_BUF];
	char small[E164_BUF - 1];
	enum e164_fault f;

	(void)state;
	/* Length is the caller's: bytes after len are not read, a NUL inside is refused. */
	assert_int_equal(e164_normalise("+14155550100999", 12, out, sizeof(out), &f), 0);
	assert_string_equal(out, "+14155550100");
	assert_int_equal(e164_normalise("+1415\0"
					"5550100",
					13, out, sizeof(out), &f),
			 -EINVAL);
	assert_int_equal(f, E164_BAD_CHAR);
	assert_int_equal(e164_normalise("+14155550100", 12, small, sizeof(small), &f), -ENOBUFS);
	assert_int_equal(e164_normalise(NULL, 1, out, sizeof(out), &f), -EFAULT);
	assert_int_equal(e164_normalise("+1", 2, NULL, 0, &f), -EFAULT);
	assert_int_equal(e164_normalise("+14155550100", 12, out, sizeof(out), NULL), 0);
	assert_int_equal(e164_normalise("x", 1, out, sizeof(out), NULL), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(accepted_forms),
		cmocka_unit_test(refused_forms),
		cmocka_unit_test(length_limits),
		cmocka_unit_test(arguments),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
