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
		cmocka_unit_test(options),	 cmocka_unit_test(sizes),
		cmocka_unit_test(fair_shares),	 cmocka_unit_test(jain),
		cmocka_unit_test(time_to_floor),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
