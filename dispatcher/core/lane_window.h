/* Rolling one-minute window of two counters, as a fixed ring of 60 one-second buckets (no
 * allocation). Used by the lane circuit (answers, refusals) and the retry budget (first sends,
 * re-sends). Pure: `now` is a monotonic time in milliseconds.
 *
 * The window at `now` is the bucket holding now plus the 59 before it, so an event stays counted
 * for between 59 and 60 seconds. Time that goes backwards lands in the newest bucket.
 */
#ifndef DSP_CORE_LANE_WINDOW_H
#define DSP_CORE_LANE_WINDOW_H

#include <stdint.h>

#define LANE_WINDOW_BUCKETS   60
#define LANE_WINDOW_BUCKET_MS 1000

struct lane_window {
	int64_t head;				/* second of the newest bucket */
	uint32_t count[LANE_WINDOW_BUCKETS][2]; /* per bucket: counter 0 and counter 1 */
};

/* Empties the window. */
void lane_window_init(struct lane_window *w, int64_t now);

/* Adds n to counter which (0 or 1) at now. */
void lane_window_add(struct lane_window *w, int64_t now, unsigned which, uint32_t n);

/* Sets *c0 and *c1 to the sums over the minute ending at now. */
void lane_window_sums(struct lane_window *w, int64_t now, uint64_t *c0, uint64_t *c1);

/* Returns counter which of the bucket `age` seconds older than the newest one at now
 * (age 0 = newest, 59 = oldest, larger = 0). */
uint32_t lane_window_bucket(struct lane_window *w, int64_t now, unsigned age, unsigned which);

#endif
