/* dispatcher demo's pure parts (dispatcher/demo/demo.h): option parsing (defaults, both
 * spellings, bounds, unknown options refused), the max-min fair shares, Jain's index and the
 * late campaign's time to its floor. */
#include "demo.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static int parse(struct demo_options *o, int argc, const char **argv)
{
	FILE *err = fopen("/dev/null", "w");
	int r = demo_options_parse(argc, (char **)argv, o, err);

	fclose(err);
	return r;
}

static void options(void **state)
{
	struct demo_options o;
	const char *none[] = { NULL };
	const char *all[] = { "--minutes", "0.25", "--workers=2", "--lines", "40", "--seed=7" };
	const char *help[] = { "--lines", "x", "-h" };

	(void)state;
	assert_int_equal(parse(&o, 0, none), 0);
	assert_true(o.minutes == 1 && o.workers == 3 && o.lines == 20 && o.seed == 1);
	assert_int_equal(parse(&o, 6, all), 0);
	assert_true(o.minutes == 0.25 && o.workers == 2 && o.lines == 40 && o.seed == 7);
	assert_int_equal(parse(&o, 3, help), 1);

	const char *bad[][2] = {
		{ "--minutes", "0" },  { "--minutes", "61" }, { "--minutes", "nan" },
		{ "--minutes", "1x" }, { "--workers", "0" },  { "--workers", "17" },
		{ "--lines", "3" },    { "--lines", "1001" }, { "--lines", "-5" },
		{ "--seed", "-1" },    { "--seed", "" },      { "--bogus", "1" },
		{ "minutes", "1" },    { "--workers", " 2" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(parse(&o, 2, bad[i]), -EINVAL);
	const char *missing[] = { "--workers" };
	assert_int_equal(parse(&o, 1, missing), -EINVAL);
	const char *unknown[] = { "--verbose" };
	assert_int_equal(parse(&o, 1, unknown), -EINVAL);
}

/* Parses argv (NULL-terminated) and returns the result; *msg receives what went to err. */
static int parse_msg(struct demo_options *o, const char **argv, char *msg, size_t len)
{
	int argc = 0;
	FILE *err = fmemopen(msg, len, "w");

	while (argv[argc])
		argc++;
	assert_non_null(err);
	int r = demo_options_parse(argc, (char **)argv, o, err);
	fclose(err);
	return r;
}

/* The benchmark's options: defaults, at / below / above each limit, clear messages. */
static void bench_options(void **state)
{
	struct demo_options o;
	char msg[256];

	(void)state;
	const char *none[] = { NULL };
	assert_int_equal(parse_msg(&o, none, msg, sizeof(msg)), 0);
	assert_false(o.bench);
	assert_int_equal(o.contacts, 0);
	assert_int_equal(o.hold_min_ms, 1000);
	assert_int_equal(o.hold_max_ms, 3000);
	assert_int_equal(o.window_s, 30);
	assert_int_equal(o.warmup_s, 3);

	const char *all[] = { "--bench", "--contacts=25000", "--hold-ms", "1-1", "--window-s",
			      "8",	 "--warmup-s=2",     NULL };
	assert_int_equal(parse_msg(&o, all, msg, sizeof(msg)), 0);
	assert_true(o.bench && o.contacts == 25000 && o.hold_min_ms == 1 && o.hold_max_ms == 1 &&
		    o.window_s == 8 && o.warmup_s == 2);

	/* at the limits: accepted */
	const struct {
		const char *name, *value;
		uint64_t want;
	} at[] = {
		{ "--contacts", "1", 1 },	{ "--contacts", "10000000", 10000000 },
		{ "--window-s", "1", 1 },	{ "--window-s", "3600", 3600 },
		{ "--warmup-s", "0", 0 },	{ "--warmup-s", "600", 600 },
		{ "--hold-ms", "1-600000", 1 }, { "--hold-ms", "600000-600000", 600000 },
	};
	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		const char *argv[] = { "--bench", at[i].name, at[i].value, NULL };
		assert_int_equal(parse_msg(&o, argv, msg, sizeof(msg)), 0);
		uint64_t got = !strcmp(at[i].name, "--contacts")   ? o.contacts
			       : !strcmp(at[i].name, "--window-s") ? o.window_s
			       : !strcmp(at[i].name, "--warmup-s") ? o.warmup_s
								   : o.hold_min_ms;
		assert_int_equal(got, at[i].want);
	}
	assert_int_equal(o.hold_max_ms, 600000);

	/* below and above the limits, and garbage: refused, the message names the option, the
	 * value and the bounds */
	const struct {
		const char *name, *value, *bounds;
	} bad[] = {
		{ "--contacts", "0", "1..10000000" },
		{ "--contacts", "10000001", "1..10000000" },
		{ "--contacts", "-1", "1..10000000" },
		{ "--contacts", "12k", "1..10000000" },
		{ "--window-s", "0", "1..3600" },
		{ "--window-s", "3601", "1..3600" },
		{ "--window-s", "", "1..3600" },
		{ "--window-s", "2.5", "1..3600" },
		{ "--warmup-s", "601", "0..600" },
		{ "--warmup-s", "-1", "0..600" },
		{ "--warmup-s", "x", "0..600" },
		{ "--hold-ms", "0-1", "1 <= A <= B <= 600000" },
		{ "--hold-ms", "1-600001", "1 <= A <= B <= 600000" },
		{ "--hold-ms", "5-4", "1 <= A <= B <= 600000" },
		{ "--hold-ms", "100", "1 <= A <= B <= 600000" },
		{ "--hold-ms", "-5", "1 <= A <= B <= 600000" },
		{ "--hold-ms", "1-", "1 <= A <= B <= 600000" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		const char *argv[] = { "--bench", bad[i].name, bad[i].value, NULL };
		char want[64];

		memset(msg, 0, sizeof(msg));
		assert_int_equal(parse_msg(&o, argv, msg, sizeof(msg)), -EINVAL);
		snprintf(want, sizeof(want), "%s: bad value '%s'", bad[i].name, bad[i].value);
		assert_non_null(strstr(msg, want));
		assert_non_null(strstr(msg, bad[i].bounds));
	}

	/* the window's options need --bench; --bench takes no value; a missing value */
	const char *nobench[] = { "--window-s", "8", NULL };
	memset(msg, 0, sizeof(msg));
	assert_int_equal(parse_msg(&o, nobench, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "need --bench"));
	const char *warm_nobench[] = { "--warmup-s=1", NULL };
	assert_int_equal(parse_msg(&o, warm_nobench, msg, sizeof(msg)), -EINVAL);
	const char *benchval[] = { "--bench=1", NULL };
	memset(msg, 0, sizeof(msg));
	assert_int_equal(parse_msg(&o, benchval, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "--bench takes no value"));
	const char *missing[] = { "--bench", "--window-s", NULL };
	memset(msg, 0, sizeof(msg));
	assert_int_equal(parse_msg(&o, missing, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "--window-s needs a value"));
	/* the help text names every option */
	FILE *h = fmemopen(NULL, 8192, "w+");
	char help[8192] = { 0 };
	demo_usage(h);
	rewind(h);
	assert_true(fread(help, 1, sizeof(help) - 1, h) > 0);
	fclose(h);
	for (const char *const *n = (const char *const[]){ "--contacts", "--hold-ms", "--bench",
							   "--window-s", "--warmup-s", NULL };
	     *n; n++)
		assert_non_null(strstr(help, *n));
}

static void sizes(void **state)
{
	struct demo_options o = { .minutes = 1, .workers = 3, .lines = 20, .seed = 1 };

	(void)state;
	assert_int_equal(demo_contacts_per_campaign(&o), DEMO_CONTACTS);
	assert_int_equal(demo_late_join_ms(&o), 20000);
	o.minutes = 0.25;
	assert_int_equal(demo_late_join_ms(&o), 5000);
	o.minutes = 60;
	o.lines = 100;
	assert_true(demo_contacts_per_campaign(&o) >= 100 / 2 * 3600); /* one campaign takes all */
}

static void fair_shares(void **state)
{
	uint32_t ceil[] = { 0, 0, 0, 3 };
	double s[4];

	(void)state;
	demo_fair_shares(20, ceil, 4, s);
	assert_true(s[3] == 3);
	for (int i = 0; i < 3; i++)
		assert_true(s[i] > 5.666 && s[i] < 5.667);
	uint32_t big[] = { 0, 0, 0, 30 }; /* a ceiling above the equal share does not bind */
	demo_fair_shares(20, big, 4, s);
	for (int i = 0; i < 4; i++)
		assert_true(s[i] == 5);
	uint32_t two[] = { 2, 1, 0 }; /* cascading: 1, then 2, then the rest */
	demo_fair_shares(10, two, 3, s);
	assert_true(s[0] == 2 && s[1] == 1 && s[2] == 7);
}

static void jain(void **state)
{
	double eq[] = { 2, 2, 2, 2 }, one[] = { 1, 0, 0, 0 }, zero[] = { 0, 0 };
	double mixed[] = { 1, 2 };

	(void)state;
	assert_true(demo_jain(eq, 4) > 0.99999 && demo_jain(eq, 4) < 1.00001);
	assert_true(demo_jain(one, 4) > 0.2499 && demo_jain(one, 4) < 0.2501);
	assert_true(demo_jain(zero, 2) == 0);
	assert_true(demo_jain(mixed, 2) > 0.8999 && demo_jain(mixed, 2) < 0.9001); /* 9 / 10 */
	assert_true(demo_jain(NULL, 0) == 0);
}

static void time_to_floor(void **state)
{
	struct demo_sample s[] = {
		{ 900, 9, 5 },	/* before the join: ignored */
		{ 1000, 0, 0 }, /* no floor yet */
		{ 1100, 2, 0 }, { 1200, 3, 5 }, { 1500, 5, 5 }, { 1600, 6, 5 },
	};
	uint64_t ms = 0;

	(void)state;
	assert_int_equal(demo_time_to_floor(s, 6, 1000, &ms), 0);
	assert_int_equal(ms, 500);
	assert_int_equal(demo_time_to_floor(s, 4, 1000, &ms), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(options), cmocka_unit_test(bench_options),
		cmocka_unit_test(sizes),   cmocka_unit_test(fair_shares),
		cmocka_unit_test(jain),	   cmocka_unit_test(time_to_floor),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
