#include "token_bucket.h"

static void refill(struct token_bucket *tb, int64_t now)
{
	uint64_t cap = tb->depth * 1000;

	if (now <= tb->last_ms)
		return;
	uint64_t elapsed = (uint64_t)(now - tb->last_ms);
	tb->last_ms = now;
	/* rate tokens/s = rate thousandths per ms; saturate instead of overflowing. */
	if (tb->rate != 0 && elapsed > cap / tb->rate) {
		tb->milli = cap;
		return;
	}
	tb->milli += elapsed * tb->rate;
	if (tb->milli > cap)
		tb->milli = cap;
}

void token_bucket_init(struct token_bucket *tb, uint32_t rate_per_s, uint32_t depth, int64_t now)
{
	tb->rate = rate_per_s;
	tb->depth = depth ? depth : 1;
	tb->milli = tb->depth * 1000;
	tb->last_ms = now;
}

void token_bucket_set_rate(struct token_bucket *tb, uint32_t rate_per_s, uint32_t depth,
			   int64_t now)
{
	refill(tb, now);
	tb->rate = rate_per_s;
	tb->depth = depth ? depth : 1;
	if (tb->milli > tb->depth * 1000)
		tb->milli = tb->depth * 1000;
}

uint64_t token_bucket_take(struct token_bucket *tb, int64_t now)
{
	if (tb->rate == 0)
		return 0;
	refill(tb, now);
	if (tb->milli >= 1000) {
		tb->milli -= 1000;
		return 0;
	}
	/* Round up: after this many ms the bucket holds at least one token. */
	return (1000 - tb->milli + tb->rate - 1) / tb->rate;
}

uint64_t token_bucket_available(struct token_bucket *tb, int64_t now)
{
	if (tb->rate == 0)
		return tb->depth;
	refill(tb, now);
	return tb->milli / 1000;
}
