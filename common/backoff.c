#include "backoff.h"

void backoff_init(struct backoff *b, uint64_t min_ms, uint64_t max_ms)
{
	b->min_ms = min_ms;
	b->max_ms = max_ms < min_ms ? min_ms : max_ms;
	b->attempt = 0;
}

uint64_t backoff_doubled(uint64_t base, unsigned n, uint64_t cap)
{
	uint64_t v = base;

	/* Doubles only while the double stays within cap (v <= cap / 2), so it never wraps, even
	 * for a cap above 2^63; stops at the cap, and at once for 0. */
	for (unsigned i = 0; i < n && v && v < cap; i++)
		v = v <= cap / 2 ? v * 2 : cap;
	return v < cap ? v : cap;
}

uint64_t backoff_next(struct backoff *b, uint32_t rnd)
{
	uint64_t delay = backoff_doubled(b->min_ms, b->attempt, b->max_ms);

	if (b->attempt < 64)
		b->attempt++;

	uint64_t half = delay / 2;
	uint64_t span = delay - half;
	return half + (span ? (uint64_t)rnd % (span + 1) : 0);
}

void backoff_reset(struct backoff *b)
{
	b->attempt = 0;
}

uint64_t backoff_seed(uint64_t now_ns, const void *salt)
{
	uint64_t seed = now_ns ^ (uint64_t)(uintptr_t)salt ^ 0x9e3779b97f4a7c15ull;
	return seed ? seed : 1;
}

uint32_t backoff_random(uint64_t *state)
{
	uint64_t x = *state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	*state = x;
	return (uint32_t)(x >> 16);
}
