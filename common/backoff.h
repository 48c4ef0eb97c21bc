/* Capped exponential backoff with jitter. Pure: the random draw is an argument. */
#ifndef DSP_BACKOFF_H
#define DSP_BACKOFF_H

#include <stdint.h>

struct backoff {
	uint64_t min_ms;  /* delay before the first retry, before jitter */
	uint64_t max_ms;  /* cap on the un-jittered delay */
	unsigned attempt; /* retries made since the last success */
};

/* Returns base * 2^n capped at cap (cap when base exceeds it). The one capped-doubling rule of
 * the project: reconnect backoff, lane parking and the retry table's schedules all use it. Never
 * overflows, whatever n. */
uint64_t backoff_doubled(uint64_t base, unsigned n, uint64_t cap);

/* Sets the bounds and clears the attempt count. */
void backoff_init(struct backoff *b, uint64_t min_ms, uint64_t max_ms);

/* Returns the next delay in milliseconds and counts one attempt. The un-jittered delay is
 * min_ms * 2^attempt capped at max_ms; the result is drawn "equal jitter" style from
 * [delay/2, delay] using rnd (any uniformly random 32-bit value), so retries of many clients
 * spread out but never come sooner than half the schedule. */
uint64_t backoff_next(struct backoff *b, uint32_t rnd);

/* Clears the attempt count (call on success). */
void backoff_reset(struct backoff *b);

/* Seeds a jitter source from a clock reading and an address, so that processes and
 * connections started together do not retry in step. */
uint64_t backoff_seed(uint64_t now_ns, const void *salt);

/* Returns the next 32-bit draw of the xorshift64 jitter source *state (never 0 once seeded).
 * For jitter only: not for anything that must be unpredictable. */
uint32_t backoff_random(uint64_t *state);

#endif
