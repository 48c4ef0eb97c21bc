/* The metrics registry (common/metrics.h): the Prometheus text format byte for byte — HELP and
 * TYPE, escaping of HELP text and label values, histogram buckets (cumulative, +Inf, _sum,
 * _count), number formatting, the order of families and cells — and the refusals of bad
 * names. */
#include "metrics.h"

#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static void assert_render(struct metrics *m, const char *want)
{
	char *text = NULL;
	size_t len = 0;

	assert_int_equal(metrics_render(m, &text, &len), 0);
	assert_string_equal(text, want);
	assert_int_equal(len, strlen(want));
	free(text);
}

static void test_empty(void **state)
{
	struct metrics *m;

	(void)state;
	assert_int_equal(metrics_new(&m), 0);
	assert_render(m, "");
	metrics_free(m);
}

/* Cells: counters and gauges, no labels and labels, sorted by values whatever the order of
 * creation, a cell found again by its values, families in the order added. */
static void test_cells(void **state)
{
	struct metrics *m;
	struct metrics_family *req, *up, *temp;
	const char *labels[] = { "route", "status" };

	(void)state;
	assert_int_equal(metrics_new(&m), 0);
	assert_int_equal(metrics_add(m,
				     &(struct metrics_desc){ .name = "http_requests_total",
							     .help = "Requests answered.",
							     .type = METRICS_COUNTER,
							     .labels = labels,
							     .n_labels = 2 },
				     &req),
			 0);
	assert_int_equal(metrics_add(m,
				     &(struct metrics_desc){
					     .name = "up", .help = "Up.", .type = METRICS_GAUGE },
				     &up),
			 0);
	assert_int_equal(metrics_add(m,
				     &(struct metrics_desc){ .name = "temp_celsius",
							     .help = "",
							     .type = METRICS_GAUGE,
							     .labels = labels,
							     .n_labels = 1 },
				     &temp),
			 0);
	uint64_t *a = metrics_counter(req, (const char *[]){ "/v2/calls", "201" });
	uint64_t *b = metrics_counter(req, (const char *[]){ "/healthz", "200" });
	uint64_t *c = metrics_counter(req, (const char *[]){ "/v2/calls", "200" });
	assert_non_null(a);
	assert_non_null(b);
	assert_non_null(c);
	*a += 3;
	(*b)++;
	assert_ptr_equal(metrics_counter(req, (const char *[]){ "/v2/calls", "201" }), a);
	(*metrics_counter(req, (const char *[]){ "/v2/calls", "201" }))++;
	*metrics_gauge(up, NULL) = 1;
	*metrics_gauge(temp, (const char *[]){ "b" }) = -2.5;
	*metrics_gauge(temp, (const char *[]){ "a" }) = 1e21;
	/* the wrong type, or a missing value: no cell */
	assert_null(metrics_gauge(req, (const char *[]){ "x", "y" }));
	assert_null(metrics_histogram(up, NULL));
	assert_null(metrics_counter(req, (const char *[]){ "x", NULL }));
	assert_null(metrics_counter(req, NULL));
	assert_render(m, "# HELP http_requests_total Requests answered.\n"
			 "# TYPE http_requests_total counter\n"
			 "http_requests_total{route=\"/healthz\",status=\"200\"} 1\n"
			 "http_requests_total{route=\"/v2/calls\",status=\"200\"} 0\n"
			 "http_requests_total{route=\"/v2/calls\",status=\"201\"} 4\n"
			 "# HELP up Up.\n"
			 "# TYPE up gauge\n"
			 "up 1\n"
			 "# HELP temp_celsius \n"
			 "# TYPE temp_celsius gauge\n"
			 "temp_celsius{route=\"a\"} 1e+21\n"
			 "temp_celsius{route=\"b\"} -2.5\n");
	metrics_free(m);
}

/* HELP escapes \ and newline (not "); label values escape \, " and newline; nothing else. */
static void test_escaping(void **state)
{
	struct metrics *m;
	struct metrics_family *f;
	const char *labels[] = { "v" };

	(void)state;
	assert_int_equal(metrics_new(&m), 0);
	assert_int_equal(metrics_add(m,
				     &(struct metrics_desc){ .name = "esc:total",
							     .help = "a \\ b\nc \"d\" \t\xc3\xa9",
							     .type = METRICS_COUNTER,
							     .labels = labels,
							     .n_labels = 1 },
				     &f),
			 0);
	*metrics_counter(f, (const char *[]){ "q\"b\\s\nn\tt\xc3\xa9" }) = 7;
	*metrics_counter(f, (const char *[]){ "" }) = 1;
	assert_render(m, "# HELP esc:total a \\\\ b\\nc \"d\" \t\xc3\xa9\n"
			 "# TYPE esc:total counter\n"
			 "esc:total{v=\"\"} 1\n"
			 "esc:total{v=\"q\\\"b\\\\s\\nn\tt\xc3\xa9\"} 7\n");
	metrics_free(m);
}

static const double wait_le[] = { 0.005, 0.1, 1, 2.5 };

/* A histogram cell: cumulative buckets, a value on a bound counts in it, above the last in
 * +Inf only; _sum and _count; labels before le. */
static void test_histogram(void **state)
{
	struct metrics *m;
	struct metrics_family *f, *g;
	const char *labels[] = { "mode" };

	(void)state;
	assert_int_equal(metrics_new(&m), 0);
	assert_int_equal(metrics_add(m,
				     &(struct metrics_desc){ .name = "wait_seconds",
							     .help = "Wait.",
							     .type = METRICS_HISTOGRAM,
							     .labels = labels,
							     .n_labels = 1,
							     .le = wait_le,
							     .n_le = 4 },
				     &f),
			 0);
	assert_int_equal(metrics_add(m,
				     &(struct metrics_desc){ .name = "plain_seconds",
							     .help = "No labels.",
							     .type = METRICS_HISTOGRAM,
							     .le = wait_le,
							     .n_le = 2 },
				     &g),
			 0);
	struct metrics_histogram *h = metrics_histogram(f, (const char *[]){ "redis" });
	assert_non_null(h);
	metrics_histogram_observe(h, 0.001);
	metrics_histogram_observe(h, 0.1); /* on the bound: in le="0.1" */
	metrics_histogram_observe(h, 0.5);
	metrics_histogram_observe(h, 3);
	metrics_histogram_observe(h, 2.5);
	metrics_histogram_observe(metrics_histogram(g, NULL), 7);
	assert_render(m, "# HELP wait_seconds Wait.\n"
			 "# TYPE wait_seconds histogram\n"
			 "wait_seconds_bucket{mode=\"redis\",le=\"0.005\"} 1\n"
			 "wait_seconds_bucket{mode=\"redis\",le=\"0.1\"} 2\n"
			 "wait_seconds_bucket{mode=\"redis\",le=\"1\"} 3\n"
			 "wait_seconds_bucket{mode=\"redis\",le=\"2.5\"} 4\n"
			 "wait_seconds_bucket{mode=\"redis\",le=\"+Inf\"} 5\n"
			 "wait_seconds_sum{mode=\"redis\"} 6.101\n"
			 "wait_seconds_count{mode=\"redis\"} 5\n"
			 "# HELP plain_seconds No labels.\n"
			 "# TYPE plain_seconds histogram\n"
			 "plain_seconds_bucket{le=\"0.005\"} 0\n"
			 "plain_seconds_bucket{le=\"0.1\"} 0\n"
			 "plain_seconds_bucket{le=\"+Inf\"} 1\n"
			 "plain_seconds_sum 7\n"
			 "plain_seconds_count 1\n");
	metrics_free(m);
}

struct source {
	uint64_t admitted;
	struct metrics_histogram wait;
};

static void collect_levels(struct metrics_out *o, void *data)
{
	struct source *s = data;

	metrics_emit_u64(o, (const char *[]){ "system" }, s->admitted);
	metrics_emit_u64(o, (const char *[]){ "organisation" }, UINT64_MAX);
	metrics_emit(o, (const char *[]){ "nan" }, NAN);
	metrics_emit(o, (const char *[]){ "inf" }, -INFINITY);
	metrics_emit(o, (const char *[]){ "third" }, 1.0 / 3);
	metrics_emit(o, (const char *[]){ "big" }, 123456789012.0);
	metrics_emit(o, NULL, 1);				      /* no values: not written */
	metrics_emit_histogram(o, (const char *[]){ "x" }, &s->wait); /* wrong type */
}

static void collect_wait(struct metrics_out *o, void *data)
{
	struct source *s = data;
	struct metrics_histogram other;

	metrics_emit_histogram(o, NULL, &s->wait);
	metrics_histogram_init(&other, wait_le, 3); /* not the family's bounds: not written */
	metrics_emit_histogram(o, NULL, &other);
	metrics_emit(o, NULL, 1); /* a plain sample in a histogram: not written */
}

/* Collectors: called at each render, samples in the order emitted; the owner's histogram. */
static void test_collect(void **state)
{
	struct metrics *m;
	struct source s = { .admitted = 5 };
	const char *labels[] = { "level" };

	(void)state;
	metrics_histogram_init(&s.wait, wait_le, 4);
	assert_int_equal(metrics_new(&m), 0);
	assert_int_equal(metrics_add(m,
				     &(struct metrics_desc){ .name = "levels",
							     .help = "By level.",
							     .type = METRICS_GAUGE,
							     .labels = labels,
							     .n_labels = 1,
							     .collect = collect_levels,
							     .data = &s },
				     NULL),
			 0);
	struct metrics_family *f;
	assert_int_equal(metrics_add(m,
				     &(struct metrics_desc){ .name = "w",
							     .help = "W.",
							     .type = METRICS_HISTOGRAM,
							     .le = wait_le,
							     .n_le = 4,
							     .collect = collect_wait,
							     .data = &s },
				     &f),
			 0);
	assert_null(metrics_histogram(f, NULL)); /* a collector's family has no cells */
	metrics_histogram_observe(&s.wait, 0.05);
	s.admitted = 6;
	assert_render(m, "# HELP levels By level.\n"
			 "# TYPE levels gauge\n"
			 "levels{level=\"system\"} 6\n"
			 "levels{level=\"organisation\"} 18446744073709551615\n"
			 "levels{level=\"nan\"} NaN\n"
			 "levels{level=\"inf\"} -Inf\n"
			 "levels{level=\"third\"} 0.3333333333333333\n"
			 "levels{level=\"big\"} 123456789012\n"
			 "# HELP w W.\n"
			 "# TYPE w histogram\n"
			 "w_bucket{le=\"0.005\"} 0\n"
			 "w_bucket{le=\"0.1\"} 1\n"
			 "w_bucket{le=\"1\"} 1\n"
			 "w_bucket{le=\"2.5\"} 1\n"
			 "w_bucket{le=\"+Inf\"} 1\n"
			 "w_sum 0.05\n"
			 "w_count 1\n");
	metrics_free(m);
}

/* Bad names, labels, bounds, duplicates: -EINVAL, nothing added. */
static void test_refusals(void **state)
{
	struct metrics *m;
	const char *le[] = { "le" }, *dunder[] = { "__x" }, *colon[] = { "a:b" }, *ok[] = { "a" };
	const double desc[] = { 1, 0.5 }, inf[] = { INFINITY };

	(void)state;
	assert_int_equal(metrics_new(&m), 0);
	struct metrics_desc bad[] = {
		{ .name = "", .type = METRICS_COUNTER },
		{ .name = "9lives", .type = METRICS_COUNTER },
		{ .name = "a-b", .type = METRICS_COUNTER },
		{ .name = NULL, .type = METRICS_COUNTER },
		{ .name = "h", .type = METRICS_HISTOGRAM, .labels = le, .n_labels = 1 },
		{ .name = "d", .type = METRICS_COUNTER, .labels = dunder, .n_labels = 1 },
		{ .name = "c", .type = METRICS_COUNTER, .labels = colon, .n_labels = 1 },
		{ .name = "n", .type = METRICS_COUNTER, .labels = ok, .n_labels = 5 },
		{ .name = "s", .type = METRICS_HISTOGRAM, .le = desc, .n_le = 2 },
		{ .name = "i", .type = METRICS_HISTOGRAM, .le = inf, .n_le = 1 },
		{ .name = "g", .type = METRICS_GAUGE, .le = desc, .n_le = 1 },
		{ .name = "t", .type = (enum metrics_type)7 },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(metrics_add(m, &bad[i], NULL), -EINVAL);
	assert_int_equal(
		metrics_add(m, &(struct metrics_desc){ .name = "x", .type = METRICS_GAUGE }, NULL),
		0);
	assert_int_equal(metrics_add(m,
				     &(struct metrics_desc){ .name = "x", .type = METRICS_COUNTER },
				     NULL),
			 -EINVAL);
	assert_render(m, "# HELP x \n# TYPE x gauge\n");
	metrics_free(m);
}

/* Many cells created in a scrambled order come out sorted (the insertion keeps the order). */
static void test_order(void **state)
{
	struct metrics *m;
	struct metrics_family *f;
	const char *labels[] = { "k" };
	char want[4096], v[8];
	size_t n = 0;

	(void)state;
	assert_int_equal(metrics_new(&m), 0);
	assert_int_equal(metrics_add(m,
				     &(struct metrics_desc){ .name = "k",
							     .help = "K.",
							     .type = METRICS_COUNTER,
							     .labels = labels,
							     .n_labels = 1 },
				     &f),
			 0);
	for (unsigned i = 0; i < 100; i++) {
		unsigned k = (i * 37) % 100;
		snprintf(v, sizeof(v), "%03u", k);
		*metrics_counter(f, (const char *[]){ v }) = k;
	}
	n += (size_t)snprintf(want + n, sizeof(want) - n, "# HELP k K.\n# TYPE k counter\n");
	for (unsigned k = 0; k < 100; k++)
		n += (size_t)snprintf(want + n, sizeof(want) - n, "k{k=\"%03u\"} %u\n", k, k);
	assert_render(m, want);
	metrics_free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty),	 cmocka_unit_test(test_cells),
		cmocka_unit_test(test_escaping), cmocka_unit_test(test_histogram),
		cmocka_unit_test(test_collect),	 cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_order),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
