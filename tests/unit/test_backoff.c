#include "backoff.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

static void doubles_until_cap(void **state)
{
	struct backoff b;
	/* With the largest draw the delay is exactly the schedule. */
	const uint64_t want[] = { 100, 200, 400, 800, 1000, 1000, 1000 };

	backoff_init(&b, 100, 1000);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		assert_int_equal(backoff_next(&b, (uint32_t)(want[i] - want[i] / 2)), want[i]);
}

static void jitter_stays_in_half_to_full(void **state)
{
	struct backoff b;
	uint32_t x = 12345;

	backoff_init(&b, 50, 800);
	for (int i = 0; i < 1000; i++) {
		uint64_t sched = 50;
		for (unsigned k = 0; k < b.attempt && sched < 800; k++)
			sched *= 2;
		if (sched > 800)
			sched = 800;
		x = x * 1103515245u + 12345u;
		uint64_t d = backoff_next(&b, x);
		assert_true(d >= sched / 2);
		assert_true(d <= sched);
	}
}

static void reset_starts_over(void **state)
{
	struct backoff b;

	backoff_init(&b, 10, 10000);
	for (int i = 0; i < 5; i++)
		backoff_next(&b, 0);
	assert_int_equal(b.attempt, 5);
	backoff_reset(&b);
	assert_int_equal(backoff_next(&b, 0), 5); /* lowest draw of the first step: 10 / 2 */
}

static void max_below_min_is_min(void **state)
{
	struct backoff b;

	backoff_init(&b, 500, 100);
	assert_int_equal(b.max_ms, 500);
	for (int i = 0; i < 100; i++)
		assert_true(backoff_next(&b, (uint32_t)i * 7919u) <= 500);
	assert_true(b.attempt <= 64); /* the counter saturates instead of overflowing */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(doubles_until_cap),
		cmocka_unit_test(jitter_stays_in_half_to_full),
		cmocka_unit_test(reset_starts_over),
		cmocka_unit_test(max_below_min_is_min),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
