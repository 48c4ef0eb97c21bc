/* Token bucket: starts full, refills at the rate up to the depth, exact waits, unlimited rate,
 * rate changes, time going backwards, no overflow after long idles. */
#include "token_bucket.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

static void starts_full_then_waits(void **state)
{
	struct token_bucket tb;

	token_bucket_init(&tb, 10, 3, 1000);
	for (int i = 0; i < 3; i++)
		assert_int_equal(token_bucket_take(&tb, 1000), 0);
	/* Empty: one token every 100 ms. */
	assert_int_equal(token_bucket_take(&tb, 1000), 100);
	assert_int_equal(token_bucket_take(&tb, 1099), 1);
	assert_int_equal(token_bucket_take(&tb, 1100), 0);
	assert_int_equal(token_bucket_take(&tb, 1100), 100);
}

static void refill_capped_at_depth(void **state)
{
	struct token_bucket tb;

	token_bucket_init(&tb, 10, 3, 0);
	for (int i = 0; i < 3; i++)
		token_bucket_take(&tb, 0);
	assert_int_equal(token_bucket_available(&tb, 250), 2);
	assert_int_equal(token_bucket_available(&tb, 10000), 3);
	/* A long idle cannot overflow the arithmetic. */
	assert_int_equal(token_bucket_available(&tb, INT64_MAX / 2), 3);
}

static void sustained_rate_is_exact(void **state)
{
	struct token_bucket tb;
	int taken = 0;

	/* Depth 2 so that no refill is lost to the cap between two polls. */
	token_bucket_init(&tb, 7, 2, 0);
	token_bucket_take(&tb, 0);
	token_bucket_take(&tb, 0);
	for (int64_t t = 1; t <= 10000; t++)
		taken += token_bucket_take(&tb, t) == 0;
	assert_int_equal(taken, 70); /* 7 per second over 10 s */
}

static void waits_round_up(void **state)
{
	struct token_bucket tb;

	token_bucket_init(&tb, 3, 1, 0);
	token_bucket_take(&tb, 0);
	/* 1000/3 = 333.3 ms: the wait is 334, and at 334 the token is there. */
	assert_int_equal(token_bucket_take(&tb, 0), 334);
	assert_int_equal(token_bucket_take(&tb, 333), 1);
	assert_int_equal(token_bucket_take(&tb, 334), 0);
}

static void unlimited_and_zero_depth(void **state)
{
	struct token_bucket tb;

	token_bucket_init(&tb, 0, 0, 0);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(token_bucket_take(&tb, 0), 0);
	assert_int_equal(tb.depth, 1);
	token_bucket_init(&tb, 5, 0, 0);
	assert_int_equal(token_bucket_take(&tb, 0), 0);
	assert_int_equal(token_bucket_take(&tb, 0), 200);
}

static void time_backwards_adds_nothing(void **state)
{
	struct token_bucket tb;

	token_bucket_init(&tb, 10, 1, 5000);
	token_bucket_take(&tb, 5000);
	assert_int_equal(token_bucket_take(&tb, 4000), 100);
	assert_int_equal(token_bucket_take(&tb, 5099), 1);
	assert_int_equal(token_bucket_take(&tb, 5100), 0);
}

static void set_rate_keeps_tokens(void **state)
{
	struct token_bucket tb;

	token_bucket_init(&tb, 10, 10, 0);
	for (int i = 0; i < 5; i++)
		token_bucket_take(&tb, 0);
	token_bucket_set_rate(&tb, 1, 2, 0);
	assert_int_equal(token_bucket_available(&tb, 0), 2); /* capped at the new depth */
	token_bucket_take(&tb, 0);
	token_bucket_take(&tb, 0);
	assert_int_equal(token_bucket_take(&tb, 0), 1000);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(starts_full_then_waits),
		cmocka_unit_test(refill_capped_at_depth),
		cmocka_unit_test(sustained_rate_is_exact),
		cmocka_unit_test(waits_round_up),
		cmocka_unit_test(unlimited_and_zero_depth),
		cmocka_unit_test(time_backwards_adds_nothing),
		cmocka_unit_test(set_rate_keeps_tokens),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
