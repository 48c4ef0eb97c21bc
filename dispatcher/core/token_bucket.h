/* Token bucket: paces one lane's dials under the provider's rate (SPEC D3).
 *
 * Pure: `now` (any monotonic clock, milliseconds) is an argument. Integer arithmetic in
 * thousandths of a token, so the bucket is exact at any rate: a bucket with rate r tokens per
 * second and depth b refills r/1000 tokens per millisecond up to b. It starts full. Time that
 * goes backwards is treated as no time at all.
 */
#ifndef DSP_CORE_TOKEN_BUCKET_H
#define DSP_CORE_TOKEN_BUCKET_H

#include <stdint.h>

struct token_bucket {
	uint64_t rate;	 /* tokens per second; 0 = unlimited (every take succeeds) */
	uint64_t depth;	 /* capacity in tokens (>= 1) */
	uint64_t milli;	 /* tokens held, in thousandths */
	int64_t last_ms; /* time of the last refill */
};

/* Sets the rate (tokens per second, 0 = unlimited) and the depth (0 is taken as 1) and fills
 * the bucket. */
void token_bucket_init(struct token_bucket *tb, uint32_t rate_per_s, uint32_t depth, int64_t now);

/* Changes the rate and depth, keeping the tokens already held (capped at the new depth). */
void token_bucket_set_rate(struct token_bucket *tb, uint32_t rate_per_s, uint32_t depth,
			   int64_t now);

/* Takes one token. Returns 0 when it was taken, otherwise the milliseconds until one will be
 * there (nothing is taken; call again then). */
uint64_t token_bucket_take(struct token_bucket *tb, int64_t now);

/* Returns the whole tokens available at now (refilling first). */
uint64_t token_bucket_available(struct token_bucket *tb, int64_t now);

#endif
