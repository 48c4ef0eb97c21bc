#include "config.h"
#include "error.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

struct cfg {
	long long wait_s;
	bool enabled;
	int level;
	char *url;
	char *listen;
};

static const struct config_setting tab[] = {
	{ "T_WAIT", CONFIG_INT, 1, 300, "15", NULL, "s", false, offsetof(struct cfg, wait_s), "w" },
	{ "T_ENABLED", CONFIG_BOOL, 0, 0, "true", NULL, NULL, true, offsetof(struct cfg, enabled),
	  "e" },
	{ "T_LEVEL", CONFIG_ENUM, 0, 0, "info", "error|warn|info|debug", NULL, false,
	  offsetof(struct cfg, level), "l" },
	{ "T_URL", CONFIG_STRING, 0, 0, NULL, NULL, NULL, false, offsetof(struct cfg, url), "u" },
	{ "T_LISTEN", CONFIG_STRING, 0, 0, "127.0.0.1:8080", NULL, NULL, false,
	  offsetof(struct cfg, listen), "a" },
};
#define NTAB (sizeof(tab) / sizeof(tab[0]))

/* A fake environment: pairs of name, value, NULL-terminated. */
static const char *lookup(const char *name, void *ctx)
{
	const char *const *env = ctx;

	for (size_t i = 0; env[i]; i += 2) {
		if (strcmp(env[i], name) == 0)
			return env[i + 1];
	}
	return NULL;
}

static int load(const char *const *env, struct cfg *c, char *err, size_t len)
{
	memset(c, 0xab, sizeof(*c)); /* garbage, so nothing relies on a zeroed struct */
	return config_load(tab, NTAB, c, lookup, (void *)env, err, len);
}

static void defaults_apply(void **state)
{
	const char *env[] = { NULL };
	struct cfg c;
	char err[200];

	assert_int_equal(load(env, &c, err, sizeof(err)), 0);
	assert_int_equal(c.wait_s, 15);
	assert_true(c.enabled);
	assert_int_equal(c.level, 2);
	assert_null(c.url);
	assert_string_equal(c.listen, "127.0.0.1:8080");
	config_free(tab, NTAB, &c);
	assert_null(c.listen);
}

static void values_override_defaults(void **state)
{
	const char *env[] = { "T_WAIT", "30",	 "T_ENABLED",	    "off", "T_LEVEL",
			      "DEBUG",	"T_URL", "postgresql:///x", NULL };
	struct cfg c;
	char err[200];

	assert_int_equal(load(env, &c, err, sizeof(err)), 0);
	assert_int_equal(c.wait_s, 30);
	assert_false(c.enabled);
	assert_int_equal(c.level, 3);
	assert_string_equal(c.url, "postgresql:///x");
	assert_string_equal(c.listen, "127.0.0.1:8080");
	config_free(tab, NTAB, &c);
}

/* An empty variable is refused (README "Configuration"), whatever its type, naming it. */
static void empty_is_refused(void **state)
{
	const char *names[] = { "T_WAIT", "T_ENABLED", "T_LEVEL", "T_URL", "T_LISTEN" };

	for (size_t i = 0; i < 5; i++) {
		const char *env[] = { names[i], "", NULL };
		struct cfg c;
		char err[200] = "";
		assert_int_equal(load(env, &c, err, sizeof(err)), DSP_ECONFIG);
		assert_non_null(strstr(err, names[i]));
		assert_non_null(strstr(err, "empty"));
		assert_null(c.listen); /* nothing left allocated */
	}
}

/* Values are echoed escaped: control characters, quotes and backslashes; long ones cut. */
static void values_are_escaped(void **state)
{
	char out[32];
	const char *env[] = { "T_WAIT", "1\x1b[2J\n", NULL };
	struct cfg c;
	char err[200] = "";

	config_escape("a\tb\"c\\d\x7f\x01", out, sizeof(out));
	assert_string_equal(out, "a\\tb\\\"c\\\\d\\x7f\\x01");
	config_escape("0123456789012345678901234567890123456789", out, sizeof(out));
	assert_int_equal(strlen(out), sizeof(out) - 1);
	assert_string_equal(out + sizeof(out) - 4, "...");
	config_escape("\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n\n", out, sizeof(out));
	assert_true(strlen(out) < sizeof(out));
	assert_int_equal(load(env, &c, err, sizeof(err)), DSP_ECONFIG);
	assert_non_null(strstr(err, "1\\x1b[2J\\n"));
	assert_null(strchr(err, '\x1b'));
}

/* At, below and above each bound of an integer setting. */
static void int_bounds(void **state)
{
	static const struct {
		const char *v;
		int ok;
	} cases[] = {
		{ "1", 1 },
		{ "0", 0 },
		{ "2", 1 },
		{ "300", 1 },
		{ "301", 0 },
		{ "299", 1 },
		{ "-5", 0 },
		{ "15s", 0 },
		{ "abc", 0 },
		{ " 9", 1 },
		{ "99999999999999999999", 0 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *env[] = { "T_WAIT", cases[i].v, NULL };
		struct cfg c;
		char err[200] = "";
		int rc = load(env, &c, err, sizeof(err));
		if (cases[i].ok) {
			assert_int_equal(rc, 0);
			config_free(tab, NTAB, &c);
		} else {
			assert_int_equal(rc, DSP_ECONFIG);
			assert_non_null(strstr(err, "T_WAIT"));
			assert_non_null(strstr(err, "300"));
			assert_null(c.listen); /* nothing left allocated on failure */
		}
	}
}

static void bad_bool_and_enum_name_the_setting(void **state)
{
	const char *env1[] = { "T_ENABLED", "maybe", NULL };
	const char *env2[] = { "T_LEVEL", "verbose", NULL };
	struct cfg c;
	char err[200];

	assert_int_equal(load(env1, &c, err, sizeof(err)), DSP_ECONFIG);
	assert_non_null(strstr(err, "T_ENABLED"));
	assert_int_equal(load(env2, &c, err, sizeof(err)), DSP_ECONFIG);
	assert_non_null(strstr(err, "T_LEVEL"));
	assert_non_null(strstr(err, "error|warn|info|debug"));
}

static void markdown_table_has_every_row(void **state)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	config_print(tab, NTAB, f, true);
	fclose(f);
	for (size_t i = 0; i < NTAB; i++)
		assert_non_null(strstr(buf, tab[i].name));
	assert_non_null(strstr(buf, "error/warn/info/debug")); /* no stray '|' in a cell */
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(defaults_apply),
		cmocka_unit_test(values_override_defaults),
		cmocka_unit_test(empty_is_refused),
		cmocka_unit_test(values_are_escaped),
		cmocka_unit_test(int_bounds),
		cmocka_unit_test(bad_bool_and_enum_name_the_setting),
		cmocka_unit_test(markdown_table_has_every_row),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
