/* The hand-off of one organisation (bench/worker, SPEC §5 P2): from a terminal event the stub
 * sends to the next call placed for the same organisation, measured only while the organisation
 * is saturated, so every dial that follows an event is the one its freed line caused.
 *
 * Method. The caller sets the organisation's line count (stub_handoff_arm) and reports, before
 * each change of its live count, the live count and the change (stub_handoff_note). The
 * organisation is "accounted" when its live calls plus the events waiting for a dial equal its
 * lines: every idle line is one recorded event. While accounted, a terminal event (-1) pushes its
 * time on a FIFO and a placed call (+1) pops the oldest and records the difference. Nothing is
 * recorded before the organisation first reaches all its lines (the ramp); when a line is idle
 * without a recorded event (an event arrived while not accounted) the FIFO is dropped and the
 * organisation counts as not saturated until all its lines are busy again. Pure: no clock. */
#ifndef DSP_STUB_HANDOFF_H
#define DSP_STUB_HANDOFF_H

#include <stddef.h>
#include <stdint.h>

struct stub_handoff {
	uint32_t lines;	    /* 0: off */
	uint32_t head, len; /* the FIFO of event times in fifo[lines] */
	uint64_t *fifo;	    /* ns */
	uint32_t *us;	    /* samples, µs (UINT32_MAX when longer) */
	size_t n, cap;
	uint64_t dropped; /* FIFO entries given up (a line idle without its event) */
	uint64_t lost;	  /* samples not stored (out of memory) */
};

/* Starts (again) with lines lines (0: off): forgets the FIFO and the samples. Returns 0 or
 * -ENOMEM. */
int stub_handoff_arm(struct stub_handoff *h, uint32_t lines);

/* Before the organisation's live count changes from live by d (+1 placed, -1 ended) at t_ns. */
void stub_handoff_note(struct stub_handoff *h, uint64_t live, int d, uint64_t t_ns);

struct stub_handoff_summary {
	size_t n;
	uint32_t p50_us, p90_us, p99_us, max_us;
};

/* Percentiles of the samples (nearest rank) into *s (zeros when none). Returns 0 or -ENOMEM. */
int stub_handoff_summarise(const struct stub_handoff *h, struct stub_handoff_summary *s);

void stub_handoff_free(struct stub_handoff *h);

#endif
