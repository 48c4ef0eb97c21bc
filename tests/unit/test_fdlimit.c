/* The file-descriptor limit: raised to the hard limit at start, connection caps sized under it. */
#include "fdlimit.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/resource.h>
#include <cmocka.h>

static void raises_soft_to_hard(void **state)
{
	struct rlimit rl;
	struct fdlimit l;

	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_max == RLIM_INFINITY || rl.rlim_max < 64)
		skip();
	rl.rlim_cur = 64; /* as a low default would leave it */
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	assert_int_equal(fdlimit_raise(&l), 0);
	assert_int_equal(l.before, 64);
	assert_int_equal(l.hard, rl.rlim_max);
	assert_int_equal(l.after, rl.rlim_max);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	assert_int_equal(rl.rlim_cur, rl.rlim_max);
	assert_int_equal(fdlimit_raise(&l), 0); /* already there: nothing to do */
	assert_int_equal(l.before, l.after);
}

static void caps_stay_under_the_limit(void **state)
{
	struct fdlimit l = { .before = 1024, .after = 1024, .hard = 1024 };

	assert_int_equal(fdlimit_cap(&l, 512, 100), 512);
	assert_int_equal(fdlimit_cap(&l, 1024, 100), 924);
	assert_int_equal(fdlimit_cap(&l, 1024, 5000), 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(raises_soft_to_hard),
		cmocka_unit_test(caps_stay_under_the_limit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
