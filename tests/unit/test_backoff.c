#include "backoff.h"
#include "list.h"

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

static void doubled_caps_and_never_overflows(void **state)
{
	assert_int_equal(backoff_doubled(500, 0, 8000), 500);
	assert_int_equal(backoff_doubled(500, 3, 8000), 4000);
	assert_int_equal(backoff_doubled(500, 4, 8000), 8000);
	assert_int_equal(backoff_doubled(500, 5, 8000), 8000);
	/* A base above the cap is the cap; a huge n does not wrap. */
	assert_int_equal(backoff_doubled(9000, 0, 8000), 8000);
	assert_true(backoff_doubled(1, 4000000000u, UINT64_MAX / 2) == UINT64_MAX / 2 + 1 ||
		    backoff_doubled(1, 4000000000u, UINT64_MAX / 2) == UINT64_MAX / 2);
	assert_int_equal(backoff_doubled(3, 200, 1000000), 1000000);
}

/* A cap above 2^63: the doubling that would pass it must not wrap (3 * 2^63 wraps to 2^63,
 * then to 0, and the "capped" delay came out as 0). */
static void doubled_does_not_wrap_under_a_huge_cap(void **state)
{
	assert_true(backoff_doubled(3, 64, UINT64_MAX) == UINT64_MAX);
	assert_true(backoff_doubled(3, 62, UINT64_MAX) == 3ull << 62); /* still below the cap */
	assert_true(backoff_doubled(3, 63, UINT64_MAX) == UINT64_MAX);
	assert_true(backoff_doubled((1ull << 62) + 1, 2, UINT64_MAX) == UINT64_MAX);
	assert_true(backoff_doubled(1ull << 63, 1, (1ull << 63) + 1) == (1ull << 63) + 1);
	assert_true(backoff_doubled(1ull << 62, 1, 1ull << 63) == 1ull << 63);
	assert_true(backoff_doubled(0, 10, UINT64_MAX) == 0);
}

static void list_keeps_order_and_unlinks(void **state)
{
	struct item {
		int v;
		struct list_node node;
	} items[4];
	struct list_node head, *pos, *tmp, other;
	int seen[4], n = 0;

	list_init(&head);
	list_init(&other);
	assert_true(list_empty(&head));
	assert_null(list_first(&head));
	for (int i = 0; i < 4; i++) {
		items[i].v = i;
		list_init(&items[i].node);
		assert_false(list_linked(&items[i].node));
	}
	list_add_tail(&head, &items[1].node);
	list_add_tail(&head, &items[2].node);
	list_add_head(&head, &items[0].node);
	list_add_tail(&other, &items[3].node);
	list_splice_tail(&head, &other);
	assert_true(list_empty(&other));
	list_del(&items[2].node);
	list_del(&items[2].node); /* a second unlink is harmless */
	assert_false(list_linked(&items[2].node));
	list_for_each_safe (pos, tmp, &head) {
		seen[n++] = list_entry(pos, struct item, node)->v;
		list_del(pos);
	}
	assert_int_equal(n, 3);
	assert_int_equal(seen[0], 0);
	assert_int_equal(seen[1], 1);
	assert_int_equal(seen[2], 3);
	assert_true(list_empty(&head));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(doubles_until_cap),
		cmocka_unit_test(jitter_stays_in_half_to_full),
		cmocka_unit_test(reset_starts_over),
		cmocka_unit_test(max_below_min_is_min),
		cmocka_unit_test(doubled_caps_and_never_overflows),
		cmocka_unit_test(doubled_does_not_wrap_under_a_huge_cap),
		cmocka_unit_test(list_keeps_order_and_unlinks),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
