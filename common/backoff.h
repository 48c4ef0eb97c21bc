/* Capped exponential backoff with jitter. Pure: the random draw is an argument. */
#ifndef DSP_BACKOFF_H
#define DSP_BACKOFF_H

#include <stdint.h>

struct backoff {
	uint64_t min_ms;  /* delay before the first retry, before jitter */
	uint64_t max_ms;  /* cap on the un-jittered delay */
	unsigned attempt; /* retries made since the last success */
};

/* Sets the bounds and clears the attempt count. */
void backoff_init(struct backoff *b, uint64_t min_ms, uint64_t max_ms);

/* Returns the next delay in milliseconds and counts one attempt. The un-jittered delay is
 * min_ms * 2^attempt capped at max_ms; the result is drawn "equal jitter" style from
 * [delay/2, delay] using rnd (any uniformly random 32-bit value), so retries of many clients
 * spread out but never come sooner than half the schedule. */
uint64_t backoff_next(struct backoff *b, uint32_t rnd);

/* Clears the attempt count (call on success). */
void backoff_reset(struct backoff *b);

#endif
