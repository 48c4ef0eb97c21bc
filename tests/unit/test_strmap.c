/* The text-keyed map (common/strmap.h) against a plain array on a random history of puts and
 * deletes, with growth and shrinking on the way. */
#include "strmap.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#define KEYS 3000

static char names[KEYS][16];
static int present[KEYS];

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

static void basics(void **state)
{
	struct strmap m;
	int a, b;

	(void)state;
	strmap_init(&m);
	assert_null(strmap_get(&m, "x"));
	assert_null(strmap_del(&m, "x"));
	assert_int_equal(strmap_put(&m, "x", &a), 0);
	assert_int_equal(strmap_put(&m, "x", &b), -EEXIST);
	assert_int_equal(strmap_put(&m, "y", NULL), -EINVAL);
	assert_int_equal(strmap_put(&m, NULL, &a), -EINVAL);
	assert_ptr_equal(strmap_get(&m, "x"), &a);
	assert_ptr_equal(strmap_del(&m, "x"), &a);
	assert_int_equal(m.count, 0);
	assert_null(m.slots); /* empty: no memory */
	strmap_free(&m);
}

static void agrees_with_an_array(void **state)
{
	struct strmap m;
	uint64_t seed = 88172645463325252ULL;
	uint32_t count = 0, peak_cap = 0;

	(void)state;
	strmap_init(&m);
	for (int i = 0; i < KEYS; i++)
		snprintf(names[i], sizeof(names[i]), "c%d", i);
	for (int step = 0; step < 400000; step++) {
		/* Phases: mostly puts, then mostly deletes, so the map grows and shrinks. */
		int grow = (step / 50000) % 2 == 0;
		int k = (int)(rnd(&seed) % KEYS);
		if ((int)(rnd(&seed) % 100) < (grow ? 70 : 30)) {
			int rc = strmap_put(&m, names[k], &present[k]);
			assert_int_equal(rc, present[k] ? -EEXIST : 0);
			count += !present[k];
			present[k] = 1;
		} else {
			void *v = strmap_del(&m, names[k]);
			assert_ptr_equal(v, present[k] ? &present[k] : NULL);
			count -= present[k] != 0;
			present[k] = 0;
		}
		assert_int_equal(m.count, count);
		assert_true(m.cap == 0 || m.count * 2 <= m.cap);
		assert_true(m.cap <= 8 || m.count * 8 >= m.cap / 2);
		peak_cap = m.cap > peak_cap ? m.cap : peak_cap;
		if (step % 997 == 0)
			for (int i = 0; i < KEYS; i++)
				assert_ptr_equal(strmap_get(&m, names[i]),
						 present[i] ? &present[i] : NULL);
	}
	assert_true(peak_cap >= 4096);
	for (int i = 0; i < KEYS; i++)
		if (present[i])
			assert_ptr_equal(strmap_del(&m, names[i]), &present[i]);
	assert_int_equal(m.count, 0);
	assert_int_equal(m.cap, 0);
	strmap_free(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(basics),
		cmocka_unit_test(agrees_with_an_array),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
