/* A small metrics registry and its Prometheus text rendering (exposition format 0.0.4). Pure: no
 * I/O, no clock, no globals.
 *
 * A registry holds families, in the order they were added; a family is one metric name with
 * its HELP text, its TYPE (counter, gauge, histogram) and a fixed list of label names. Its
 * samples come from one of two places:
 *   - cells the registry keeps, one per set of label values, created on first use
 *     (metrics_counter(), metrics_gauge(), metrics_histogram()). The caller keeps the pointer
 *     and updates it in place (`(*cell)++`): nothing is locked, nothing is looked up on the hot
 *     path. Rendered sorted by label values (bytewise, first label first).
 *   - a collect callback called at render time, which emits the samples from whatever it reads
 *     (an owner's stats struct, a state it walks): a gauge computed at scrape time costs nothing
 *     between scrapes. Rendered in the order emitted.
 *
 * Rendering (metrics_render()) writes, per family, "# HELP name text", "# TYPE name type", then
 * one line per sample: `name{l1="v1",l2="v2"} value` (no braces without labels). Histograms
 * write, per label set, the cumulative `name_bucket{...,le="<bound>"}` lines, the `le="+Inf"`
 * one, then `name_sum` and `name_count`. A family without samples still has its HELP and TYPE.
 * Escaping: in HELP, `\` and newline as `\\` and `\n`; in label values also `"` as `\"`.
 * Numbers: integer cells as decimal integers; doubles as the shortest of %.15g..%.17g that
 * reads back exactly, "+Inf", "-Inf", "NaN".
 *
 * Threading: none; everything on the owner's thread (the loop's).
 */
#ifndef DSP_METRICS_H
#define DSP_METRICS_H

#include <stddef.h>
#include <stdint.h>

#define METRICS_LABELS_MAX  4  /* label names per family */
#define METRICS_BUCKETS_MAX 16 /* histogram bounds, the +Inf bucket not counted */

/* The content type of metrics_render()'s text. */
#define METRICS_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

struct metrics;
struct metrics_family;
struct metrics_out; /* a render in progress, handed to collect callbacks */

enum metrics_type {
	METRICS_COUNTER = 0,
	METRICS_GAUGE,
	METRICS_HISTOGRAM,
};

/* A histogram's counts. Plain data: an owner may embed one in its stats and copy it; the
 * bounds are borrowed (a static array, usually). */
struct metrics_histogram {
	const double *le; /* upper bounds, strictly ascending, finite; borrowed */
	unsigned n;	  /* bounds, <= METRICS_BUCKETS_MAX */
	uint64_t counts[METRICS_BUCKETS_MAX +
			1]; /* per bucket, not cumulative; [n]: above le[n-1] */
	uint64_t count;	    /* observations */
	double sum;	    /* their sum */
};

/* Called at render time for a family added with a collector: emit its samples with
 * metrics_emit*() (any number, any order; none is fine). */
typedef void (*metrics_collect_cb)(struct metrics_out *out, void *data);

struct metrics_desc {
	const char *name; /* [a-zA-Z_:][a-zA-Z0-9_:]*; copied */
	const char *help; /* any text; copied */
	enum metrics_type type;
	const char *const *labels; /* n_labels names [a-zA-Z_][a-zA-Z0-9_]*, not "__..."; not "le"
				    * for a histogram; copied */
	unsigned n_labels;	   /* <= METRICS_LABELS_MAX */
	const double *le;	   /* histogram: its bounds (as struct metrics_histogram); copied */
	unsigned n_le;
	metrics_collect_cb collect; /* NULL: samples are the registry's cells */
	void *data;		    /* for collect; borrowed */
};

/* Creates an empty registry, owned by the caller until metrics_free(). Returns 0 or -ENOMEM. */
int metrics_new(struct metrics **out);

/* Frees the registry, its families and their cells (pointers to cells become invalid). NULL
 * is ignored. */
void metrics_free(struct metrics *m);

/* Adds a family (rendered after the ones added before). *out (may be NULL) borrows it for the
 * registry's life. Returns 0, -EINVAL (a bad name or label, too many labels or bounds, bounds
 * not ascending, a name already added) or -ENOMEM. */
int metrics_add(struct metrics *m, const struct metrics_desc *d, struct metrics_family **out);

/* The cell of family f (without a collector) for the label values values[0..n_labels) (copied;
 * NULL when the family has no labels), created at 0 on first use. The pointer stays valid for
 * the registry's life: keep it and update it in place. Returns NULL when f's type is not the
 * one asked, f has a collector, a value is NULL, or memory runs out. */
uint64_t *metrics_counter(struct metrics_family *f, const char *const *values);
double *metrics_gauge(struct metrics_family *f, const char *const *values);
struct metrics_histogram *metrics_histogram(struct metrics_family *f, const char *const *values);

/* Sets up h for the bounds le[0..n) (borrowed), all counts 0. */
void metrics_histogram_init(struct metrics_histogram *h, const double *le, unsigned n);

/* Counts one observation v in the first bucket whose bound is >= v (+Inf when none). */
void metrics_histogram_observe(struct metrics_histogram *h, double v);

/* Emit one sample of the family being collected, for the label values values[0..n_labels)
 * (borrowed for the call; NULL when the family has no labels). metrics_emit() is for counters
 * and gauges, metrics_emit_u64() writes an exact integer, metrics_emit_histogram() a histogram
 * (h's bounds must be the family's: a histogram with other bounds is not written). A sample of
 * the wrong type is not written; an allocation failure makes metrics_render() fail. */
void metrics_emit(struct metrics_out *o, const char *const *values, double v);
void metrics_emit_u64(struct metrics_out *o, const char *const *values, uint64_t v);
void metrics_emit_histogram(struct metrics_out *o, const char *const *values,
			    const struct metrics_histogram *h);

/* Renders every family (collectors called now) into *text (malloc'd, NUL-terminated, owned by
 * the caller) and sets *len. Returns 0 or -ENOMEM (nothing to free then). */
int metrics_render(struct metrics *m, char **text, size_t *len);

#endif
