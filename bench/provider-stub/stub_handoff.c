/* The hand-off measurement of one organisation (stub_handoff.h). */
#include "stub_handoff.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

int stub_handoff_arm(struct stub_handoff *h, uint32_t lines)
{
	uint64_t *fifo = NULL;

	if (lines && !(fifo = calloc(lines, sizeof(*fifo))))
		return -ENOMEM;
	stub_handoff_free(h);
	h->lines = lines;
	h->fifo = fifo;
	return 0;
}

static void record(struct stub_handoff *h, uint64_t ns)
{
	uint64_t us = ns / 1000;

	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 4096;
		uint32_t *p = realloc(h->us, cap * sizeof(*p));
		if (!p) {
			h->lost++;
			return;
		}
		h->us = p;
		h->cap = cap;
	}
	h->us[h->n++] = us > UINT32_MAX ? UINT32_MAX : (uint32_t)us;
}

void stub_handoff_note(struct stub_handoff *h, uint64_t live, int d, uint64_t t_ns)
{
	bool accounted;

	if (!h->lines)
		return;
	accounted = live + h->len == h->lines;
	if (!accounted) {
		h->dropped += h->len;
		h->len = 0;
		return;
	}
	if (d < 0) {
		h->fifo[(h->head + h->len) % h->lines] = t_ns;
		h->len++;
	} else if (h->len > 0) {
		uint64_t t0 = h->fifo[h->head];
		h->head = (h->head + 1) % h->lines;
		h->len--;
		record(h, t_ns > t0 ? t_ns - t0 : 0);
	}
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return (x > y) - (x < y);
}

static uint32_t rank(const uint32_t *v, size_t n, double q)
{
	size_t k = (size_t)(q * (double)n + 0.999999); /* nearest rank, 1-based */

	return v[(k < 1 ? 1 : k > n ? n : k) - 1];
}

int stub_handoff_summarise(const struct stub_handoff *h, struct stub_handoff_summary *s)
{
	uint32_t *v;

	memset(s, 0, sizeof(*s));
	if (!h->n)
		return 0;
	if (!(v = malloc(h->n * sizeof(*v))))
		return -ENOMEM;
	memcpy(v, h->us, h->n * sizeof(*v));
	qsort(v, h->n, sizeof(*v), cmp_u32);
	s->n = h->n;
	s->p50_us = rank(v, h->n, 0.50);
	s->p90_us = rank(v, h->n, 0.90);
	s->p99_us = rank(v, h->n, 0.99);
	s->max_us = v[h->n - 1];
	free(v);
	return 0;
}

void stub_handoff_free(struct stub_handoff *h)
{
	free(h->fifo);
	free(h->us);
	memset(h, 0, sizeof(*h));
}
