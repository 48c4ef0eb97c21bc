/* The metrics registry and the Prometheus text format (metrics.h). */
#include "metrics.h"

#include "http_buf.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One set of label values and its value (the registry's cells). */
struct cell {
	char *values[METRICS_LABELS_MAX]; /* owned */
	union {
		uint64_t u;
		double d;
		struct metrics_histogram h;
	} v;
};

struct metrics_family {
	struct metrics *m;
	char *name, *help; /* owned */
	enum metrics_type type;
	char *labels[METRICS_LABELS_MAX]; /* owned */
	unsigned n_labels;
	double le[METRICS_BUCKETS_MAX];
	unsigned n_le;
	metrics_collect_cb collect;
	void *data;
	struct cell **cells; /* sorted by values; each allocated alone (stable pointers) */
	size_t n_cells, cap_cells;
};

struct metrics {
	struct metrics_family **fam; /* in the order added */
	size_t n, cap;
};

struct metrics_out {
	struct http_buf b;
	const struct metrics_family *f; /* the family being collected */
	int err;			/* first failure (-ENOMEM) */
};

int metrics_new(struct metrics **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

static void cell_free(struct cell *c, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		free(c->values[i]);
	free(c);
}

static void family_free(struct metrics_family *f)
{
	if (!f)
		return;
	for (size_t i = 0; i < f->n_cells; i++)
		cell_free(f->cells[i], f->n_labels);
	free(f->cells);
	for (unsigned i = 0; i < f->n_labels; i++)
		free(f->labels[i]);
	free(f->name);
	free(f->help);
	free(f);
}

void metrics_free(struct metrics *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n; i++)
		family_free(m->fam[i]);
	free(m->fam);
	free(m);
}

/* [a-zA-Z_:][a-zA-Z0-9_:]* for a metric (colon true), without ':' for a label. */
static bool valid_name(const char *s, bool colon)
{
	if (!s || !*s || (*s >= '0' && *s <= '9'))
		return false;
	for (; *s; s++)
		if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') ||
		      (*s >= '0' && *s <= '9') || *s == '_' || (colon && *s == ':')))
			return false;
	return true;
}

static int check_desc(const struct metrics *m, const struct metrics_desc *d)
{
	if (!valid_name(d->name, true) || d->n_labels > METRICS_LABELS_MAX ||
	    (d->n_labels && !d->labels) || (unsigned)d->type > METRICS_HISTOGRAM)
		return -EINVAL;
	for (unsigned i = 0; i < d->n_labels; i++)
		if (!valid_name(d->labels[i], false) || strncmp(d->labels[i], "__", 2) == 0 ||
		    (d->type == METRICS_HISTOGRAM && strcmp(d->labels[i], "le") == 0))
			return -EINVAL;
	if (d->type == METRICS_HISTOGRAM) {
		if (d->n_le > METRICS_BUCKETS_MAX || (d->n_le && !d->le))
			return -EINVAL;
		for (unsigned i = 0; i < d->n_le; i++)
			if (!isfinite(d->le[i]) || (i && d->le[i] <= d->le[i - 1]))
				return -EINVAL;
	} else if (d->n_le) {
		return -EINVAL;
	}
	for (size_t i = 0; i < m->n; i++)
		if (strcmp(m->fam[i]->name, d->name) == 0)
			return -EINVAL;
	return 0;
}

int metrics_add(struct metrics *m, const struct metrics_desc *d, struct metrics_family **out)
{
	struct metrics_family *f;
	int rc;

	if (!m || !d || (rc = check_desc(m, d)))
		return -EINVAL;
	if (m->n == m->cap) {
		size_t cap = m->cap ? 2 * m->cap : 16;
		struct metrics_family **p = realloc(m->fam, cap * sizeof(*p));
		if (!p)
			return -ENOMEM;
		m->fam = p;
		m->cap = cap;
	}
	if (!(f = calloc(1, sizeof(*f))))
		return -ENOMEM;
	f->m = m;
	f->type = d->type;
	f->n_le = d->n_le;
	if (d->n_le)
		memcpy(f->le, d->le, d->n_le * sizeof(double));
	f->collect = d->collect;
	f->data = d->data;
	f->name = strdup(d->name);
	f->help = strdup(d->help ? d->help : "");
	bool ok = f->name && f->help;
	for (; ok && f->n_labels < d->n_labels; f->n_labels++)
		ok = (f->labels[f->n_labels] = strdup(d->labels[f->n_labels])) != NULL;
	if (!ok) {
		family_free(f);
		return -ENOMEM;
	}
	m->fam[m->n++] = f;
	if (out)
		*out = f;
	return 0;
}

/* Compares a cell's values with values, label by label. */
static int cmp_values(const struct metrics_family *f, char *const *a, const char *const *b)
{
	for (unsigned i = 0; i < f->n_labels; i++) {
		int c = strcmp(a[i], b[i]);
		if (c)
			return c;
	}
	return 0;
}

/* The cell for values, inserted in order when new. */
static struct cell *cell_get(struct metrics_family *f, enum metrics_type type,
			     const char *const *values)
{
	size_t lo = 0, hi;
	struct cell *c;

	if (!f || f->collect || f->type != type || (f->n_labels && !values))
		return NULL;
	for (unsigned i = 0; i < f->n_labels; i++)
		if (!values[i])
			return NULL;
	hi = f->n_cells;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int r = cmp_values(f, f->cells[mid]->values, values);
		if (r == 0)
			return f->cells[mid];
		if (r < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (f->n_cells == f->cap_cells) {
		size_t cap = f->cap_cells ? 2 * f->cap_cells : 8;
		struct cell **p = realloc(f->cells, cap * sizeof(*p));
		if (!p)
			return NULL;
		f->cells = p;
		f->cap_cells = cap;
	}
	if (!(c = calloc(1, sizeof(*c))))
		return NULL;
	for (unsigned i = 0; i < f->n_labels; i++)
		if (!(c->values[i] = strdup(values[i]))) {
			cell_free(c, f->n_labels);
			return NULL;
		}
	if (type == METRICS_HISTOGRAM)
		metrics_histogram_init(&c->v.h, f->le, f->n_le);
	memmove(&f->cells[lo + 1], &f->cells[lo], (f->n_cells - lo) * sizeof(*f->cells));
	f->cells[lo] = c;
	f->n_cells++;
	return c;
}

uint64_t *metrics_counter(struct metrics_family *f, const char *const *values)
{
	struct cell *c = cell_get(f, METRICS_COUNTER, values);
	return c ? &c->v.u : NULL;
}

double *metrics_gauge(struct metrics_family *f, const char *const *values)
{
	struct cell *c = cell_get(f, METRICS_GAUGE, values);
	return c ? &c->v.d : NULL;
}

struct metrics_histogram *metrics_histogram(struct metrics_family *f, const char *const *values)
{
	struct cell *c = cell_get(f, METRICS_HISTOGRAM, values);
	return c ? &c->v.h : NULL;
}

void metrics_histogram_init(struct metrics_histogram *h, const double *le, unsigned n)
{
	memset(h, 0, sizeof(*h));
	h->le = le;
	h->n = n > METRICS_BUCKETS_MAX ? METRICS_BUCKETS_MAX : n;
}

void metrics_histogram_observe(struct metrics_histogram *h, double v)
{
	unsigned i = 0;

	while (i < h->n && !(v <= h->le[i]))
		i++;
	h->counts[i]++;
	h->count++;
	h->sum += v;
}

/* ---- rendering ---- */

static void put(struct metrics_out *o, const char *s, size_t len)
{
	if (!o->err && http_buf_append(&o->b, s, len))
		o->err = -ENOMEM;
}

static void puts_(struct metrics_out *o, const char *s)
{
	put(o, s, strlen(s));
}

/* s with `\` and newline escaped, and `"` too when quote. */
static void put_escaped(struct metrics_out *o, const char *s, bool quote)
{
	const char *run = s;

	for (; *s; s++) {
		const char *rep = *s == '\\'	       ? "\\\\"
				  : *s == '\n'	       ? "\\n"
				  : quote && *s == '"' ? "\\\""
						       : NULL;
		if (!rep)
			continue;
		put(o, run, (size_t)(s - run));
		puts_(o, rep);
		run = s + 1;
	}
	put(o, run, (size_t)(s - run));
}

/* The shortest of %.15g..%.17g that reads back as v; +Inf, -Inf, NaN. */
static void format_double(double v, char *buf, size_t size)
{
	if (isnan(v)) {
		snprintf(buf, size, "NaN");
		return;
	}
	if (isinf(v)) {
		snprintf(buf, size, "%s", v > 0 ? "+Inf" : "-Inf");
		return;
	}
	for (int prec = 15; prec <= 17; prec++) {
		snprintf(buf, size, "%.*g", prec, v);
		if (strtod(buf, NULL) == v)
			return;
	}
}

/* name<suffix>{labels[,le="bound"]} */
static void put_series(struct metrics_out *o, const char *suffix, const char *const *values,
		       const char *le)
{
	const struct metrics_family *f = o->f;

	puts_(o, f->name);
	puts_(o, suffix);
	if (!f->n_labels && !le) {
		put(o, " ", 1);
		return;
	}
	put(o, "{", 1);
	for (unsigned i = 0; i < f->n_labels; i++) {
		if (i)
			put(o, ",", 1);
		puts_(o, f->labels[i]);
		put(o, "=\"", 2);
		put_escaped(o, values[i], true);
		put(o, "\"", 1);
	}
	if (le) {
		puts_(o, f->n_labels ? ",le=\"" : "le=\"");
		puts_(o, le);
		put(o, "\"", 1);
	}
	put(o, "} ", 2);
}

static bool values_ok(const struct metrics_out *o, const char *const *values)
{
	if (o->f->n_labels && !values)
		return false;
	for (unsigned i = 0; i < o->f->n_labels; i++)
		if (!values[i])
			return false;
	return true;
}

void metrics_emit(struct metrics_out *o, const char *const *values, double v)
{
	char num[40];

	if (o->f->type == METRICS_HISTOGRAM || !values_ok(o, values))
		return;
	format_double(v, num, sizeof(num));
	put_series(o, "", values, NULL);
	puts_(o, num);
	put(o, "\n", 1);
}

void metrics_emit_u64(struct metrics_out *o, const char *const *values, uint64_t v)
{
	char num[24];

	if (o->f->type == METRICS_HISTOGRAM || !values_ok(o, values))
		return;
	snprintf(num, sizeof(num), "%" PRIu64, v);
	put_series(o, "", values, NULL);
	puts_(o, num);
	put(o, "\n", 1);
}

void metrics_emit_histogram(struct metrics_out *o, const char *const *values,
			    const struct metrics_histogram *h)
{
	const struct metrics_family *f = o->f;
	char num[40], le[40];
	uint64_t cum = 0;

	if (f->type != METRICS_HISTOGRAM || !values_ok(o, values) || h->n != f->n_le ||
	    (h->n && memcmp(h->le, f->le, h->n * sizeof(double)) != 0))
		return;
	for (unsigned i = 0; i <= h->n; i++) {
		cum += h->counts[i];
		if (i < h->n)
			format_double(h->le[i], le, sizeof(le));
		put_series(o, "_bucket", values, i < h->n ? le : "+Inf");
		snprintf(num, sizeof(num), "%" PRIu64 "\n", cum);
		puts_(o, num);
	}
	format_double(h->sum, num, sizeof(num));
	put_series(o, "_sum", values, NULL);
	puts_(o, num);
	put(o, "\n", 1);
	snprintf(num, sizeof(num), "%" PRIu64 "\n", h->count);
	put_series(o, "_count", values, NULL);
	puts_(o, num);
}

static const char *const type_names[] = { "counter", "gauge", "histogram" };

static void render_family(struct metrics_out *o, const struct metrics_family *f)
{
	o->f = f;
	puts_(o, "# HELP ");
	puts_(o, f->name);
	put(o, " ", 1);
	put_escaped(o, f->help, false);
	puts_(o, "\n# TYPE ");
	puts_(o, f->name);
	put(o, " ", 1);
	puts_(o, type_names[f->type]);
	put(o, "\n", 1);
	if (f->collect) {
		f->collect(o, f->data);
		return;
	}
	for (size_t i = 0; i < f->n_cells; i++) {
		const struct cell *c = f->cells[i];
		const char *const *values = (const char *const *)c->values;
		if (f->type == METRICS_COUNTER)
			metrics_emit_u64(o, values, c->v.u);
		else if (f->type == METRICS_GAUGE)
			metrics_emit(o, values, c->v.d);
		else
			metrics_emit_histogram(o, values, &c->v.h);
	}
}

int metrics_render(struct metrics *m, char **text, size_t *len)
{
	struct metrics_out o = { 0 };

	for (size_t i = 0; i < m->n; i++)
		render_family(&o, m->fam[i]);
	if (o.err) {
		http_buf_free(&o.b);
		return -ENOMEM;
	}
	*len = o.b.len;
	*text = o.b.len ? http_buf_take(&o.b) : strdup(""); /* an empty registry: "" */
	return *text ? 0 : -ENOMEM;
}
