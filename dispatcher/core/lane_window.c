#include "lane_window.h"

#include <string.h>

static int64_t second_of(int64_t now)
{
	int64_t s = now / LANE_WINDOW_BUCKET_MS;

	return (now < 0 && now % LANE_WINDOW_BUCKET_MS) ? s - 1 : s;
}

static unsigned slot(int64_t sec)
{
	int64_t m = sec % LANE_WINDOW_BUCKETS;

	return (unsigned)(m < 0 ? m + LANE_WINDOW_BUCKETS : m);
}

/* Moves the head to now's second, clearing the buckets it passes. */
static void advance(struct lane_window *w, int64_t now)
{
	int64_t sec = second_of(now);

	if (sec <= w->head)
		return;
	if (sec - w->head >= LANE_WINDOW_BUCKETS) {
		memset(w->count, 0, sizeof(w->count));
	} else {
		for (int64_t s = w->head + 1; s <= sec; s++)
			memset(w->count[slot(s)], 0, sizeof(w->count[0]));
	}
	w->head = sec;
}

void lane_window_init(struct lane_window *w, int64_t now)
{
	memset(w->count, 0, sizeof(w->count));
	w->head = second_of(now);
}

void lane_window_add(struct lane_window *w, int64_t now, unsigned which, uint32_t n)
{
	advance(w, now);
	uint32_t *c = &w->count[slot(w->head)][which & 1];
	*c = *c > UINT32_MAX - n ? UINT32_MAX : *c + n;
}

void lane_window_sums(struct lane_window *w, int64_t now, uint64_t *c0, uint64_t *c1)
{
	uint64_t a = 0, b = 0;

	advance(w, now);
	for (unsigned i = 0; i < LANE_WINDOW_BUCKETS; i++) {
		a += w->count[i][0];
		b += w->count[i][1];
	}
	*c0 = a;
	*c1 = b;
}

uint32_t lane_window_bucket(struct lane_window *w, int64_t now, unsigned age, unsigned which)
{
	advance(w, now);
	if (age >= LANE_WINDOW_BUCKETS)
		return 0;
	return w->count[slot(w->head - (int64_t)age)][which & 1];
}
