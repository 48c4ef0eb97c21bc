/* The provider stub's hash map: every key stays findable while the table doubles and moves
 * incrementally, replacing keeps one entry, and iteration sees each entry exactly once. */
#include "stub_map.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <cmocka.h>

#define N 100000

static void count_cb(const char *key, void *val, void *data)
{
	(void)key;
	(void)val;
	(*(size_t *)data)++;
}

static void sum_cb(const char *key, void *val, void *data)
{
	(void)key;
	*(uintptr_t *)data += (uintptr_t)val;
}

static void keys_survive_incremental_growth(void **state)
{
	struct map m = { 0 };
	char key[32];

	for (uintptr_t i = 1; i <= N; i++) {
		snprintf(key, sizeof(key), "k%lu", (unsigned long)i);
		assert_int_equal(map_put(&m, key, (void *)i), 0);
		/* Mid-move checks: the newest key, and one from the oldest part of the table. */
		assert_ptr_equal(map_get(&m, key), (void *)i);
		snprintf(key, sizeof(key), "k%lu", (unsigned long)(i / 2 + 1));
		assert_ptr_equal(map_get(&m, key), (void *)(i / 2 + 1));
	}
	assert_int_equal(m.count, N);
	for (uintptr_t i = 1; i <= N; i++) {
		snprintf(key, sizeof(key), "k%lu", (unsigned long)i);
		assert_ptr_equal(map_get(&m, key), (void *)i);
	}
	assert_null(map_get(&m, "absent"));

	/* Replacing a value, old table or new, keeps one entry. */
	assert_int_equal(map_put(&m, "k1", (void *)7), 0);
	assert_ptr_equal(map_get(&m, "k1"), (void *)7);
	assert_int_equal(m.count, N);

	size_t n = 0;
	uintptr_t sum = 0;
	map_each(&m, count_cb, &n);
	map_each(&m, sum_cb, &sum);
	assert_int_equal(n, N);
	assert_true(sum == (uintptr_t)N * (N + 1) / 2 - 1 + 7);
	map_free(&m, NULL);
	assert_int_equal(m.count, 0);
	assert_null(m.old);
}

static void each_during_a_move_sees_both_tables(void **state)
{
	struct map m = { 0 };
	char key[32];
	size_t i;

	/* Stop right after a doubling, with the old table still being emptied. */
	for (i = 0; !m.old || m.moved == 0; i++) {
		snprintf(key, sizeof(key), "x%zu", i);
		assert_int_equal(map_put(&m, key, (void *)(uintptr_t)(i + 1)), 0);
		if (m.old && m.moved > 0 && m.moved < m.nold)
			break;
	}
	size_t n = 0;
	map_each(&m, count_cb, &n);
	assert_int_equal(n, m.count);
	map_free(&m, NULL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(keys_survive_incremental_growth),
		cmocka_unit_test(each_during_a_move_sees_both_tables),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
