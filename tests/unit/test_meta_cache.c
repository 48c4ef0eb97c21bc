/* The capacity route's meta cache (dispatcher/api/meta_cache.h) without a server: its memory is
 * bounded by campaign rows, not only by entries (each entry copies its organisation's active
 * set: 2,000 campaigns polled each once held 2,000 x 2,001 rows, about 300 MB; review finding,
 * issue 10). A meta and a view of two installs
 * are not kept. The pool is made but never started: the cache only registers its LISTENs on it. */
#include "meta_cache.h"
#include "pg_pool.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>

static uv_loop_t loop;
static struct pg_pool *pool;
static struct meta_cache *mc;

static void put(const char *org, const char *camp, uint32_t n)
{
	struct meta_cache_row *rows = calloc(n ? n : 1, sizeof(*rows));
	struct meta_cache_meta m = { .rows = rows, .n = n };

	assert_non_null(rows);
	for (uint32_t i = 0; i < n; i++)
		snprintf(rows[i].id, sizeof(rows[i].id), "c%u", i);
	meta_cache_put(mc, org, camp, meta_cache_gen(mc), &m);
	free(rows);
}

static uint64_t rows_held(void)
{
	struct meta_cache_stats st;

	meta_cache_get_stats(mc, &st);
	return st.rows;
}

static bool cached(const char *org, const char *camp)
{
	struct meta_cache_meta m = { 0 };
	int rc = meta_cache_get(mc, org, camp, &m);

	free(m.rows);
	return rc == 0;
}

static void rows_bounded(void **state)
{
	(void)state;
	/* Below the bound: entries kept, rows counted. */
	put("o", "c0", 1000);
	put("o", "c1", 1000);
	assert_int_equal(rows_held(), 2000);
	assert_true(cached("o", "c0") && cached("o", "c1"));
	/* A replaced entry's rows are not counted twice. */
	put("o", "c1", 500);
	assert_int_equal(rows_held(), 1500);
	/* At the bound: one organisation of 2,000 campaigns, each polled: never past it. */
	for (int i = 0; i < 2000; i++) {
		char camp[16];
		snprintf(camp, sizeof(camp), "k%d", i);
		put("big", camp, 2001);
		assert_true(rows_held() <= META_CACHE_ROWS_MAX);
	}
	assert_true(rows_held() > 0);
	/* Above: a meta larger than the bound alone is not kept. */
	put("huge", "c", META_CACHE_ROWS_MAX + 1);
	assert_false(cached("huge", "c"));
	assert_true(rows_held() <= META_CACHE_ROWS_MAX);
	put("exact", "c", META_CACHE_ROWS_MAX);
	assert_true(cached("exact", "c"));
	assert_int_equal(rows_held(), META_CACHE_ROWS_MAX);
}

/* A meta read from PostgreSQL under one install (installs_version) and answered with a gate view
 * of another (floors_version: the refresher installed between the two reads) is not kept: the
 * version check on later requests would find the view's versions equal and keep the old rows. */
static void install_between_reads(void **state)
{
	struct meta_cache_row row = { .id = "c0", .active = true };
	struct meta_cache_meta m = { .rows = &row, .n = 1, .limits_version = 4 };

	(void)state;
	m.installs_version = 6; /* rows of install 6, view of install 7 */
	m.floors_version = 7;
	meta_cache_put(mc, "v", "a", meta_cache_gen(mc), &m);
	assert_false(cached("v", "a"));
	m.installs_version = 8; /* the table ahead: Redis not yet installed */
	meta_cache_put(mc, "v", "a", meta_cache_gen(mc), &m);
	assert_false(cached("v", "a"));
	m.installs_version = 7; /* one install */
	meta_cache_put(mc, "v", "b", meta_cache_gen(mc), &m);
	assert_true(cached("v", "b"));
	m.installs_version = m.floors_version = 0; /* nothing installed yet, either side */
	meta_cache_put(mc, "v", "c", meta_cache_gen(mc), &m);
	assert_true(cached("v", "c"));
	/* Not read from a view (postgres mode): no versions to compare. */
	struct meta_cache_meta pm = {
		.rows = &row, .n = 1, .postgres_mode = true, .installs_version = 9
	};
	meta_cache_put(mc, "v", "d", meta_cache_gen(mc), &pm);
	assert_true(cached("v", "d"));
}

static int setup(void **state)
{
	(void)state;
	struct pg_pool_options o = { .conninfo = "host=/nonexistent dbname=none",
				     .size = 1,
				     .connect_timeout_ms = 1000,
				     .query_timeout_ms = 1000 };

	assert_int_equal(uv_loop_init(&loop), 0);
	assert_int_equal(pg_pool_new(&loop, &o, &pool), 0);
	assert_int_equal(meta_cache_new(&loop, pool, &mc), 0);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	meta_cache_free(mc);
	pg_pool_close(pool, NULL, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(&loop), 0);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = { cmocka_unit_test(rows_bounded),
					    cmocka_unit_test(install_between_reads) };
	return cmocka_run_group_tests(tests, setup, teardown);
}
