/* The provider stub's hand-off measurement (bench/provider-stub/stub_handoff.h, SPEC §5 P2):
 * nothing before the organisation first fills its lines, FIFO pairing of terminal events with
 * the dials that follow while saturated, the FIFO dropped when a line is idle without its event,
 * and the percentiles. */
#include "stub_handoff.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#define MS 1000000ULL

static void pairs_fifo_only_while_saturated(void **state)
{
	struct stub_handoff h = { 0 };
	struct stub_handoff_summary s;
	uint64_t live = 0;

	(void)state;
	assert_int_equal(stub_handoff_arm(&h, 3), 0);
	/* the ramp: 3 dials, an end before the lines are full: no sample */
	stub_handoff_note(&h, live, +1, 1 * MS), live++;
	stub_handoff_note(&h, live, -1, 2 * MS), live--;
	for (int i = 0; i < 2; i++)
		stub_handoff_note(&h, live, +1, 3 * MS), live++;
	assert_int_equal(h.n, 0);
	stub_handoff_note(&h, live, +1, 4 * MS), live++; /* all 3 busy */
	assert_int_equal(h.n, 0);
	/* two ends then two dials: paired oldest first (10→15 = 5 ms, 11→17 = 6 ms) */
	stub_handoff_note(&h, live, -1, 10 * MS), live--;
	stub_handoff_note(&h, live, -1, 11 * MS), live--;
	stub_handoff_note(&h, live, +1, 15 * MS), live++;
	stub_handoff_note(&h, live, +1, 17 * MS), live++;
	assert_int_equal(h.n, 2);
	assert_int_equal(h.us[0], 5000);
	assert_int_equal(h.us[1], 6000);
	/* a dial above the lines pairs with nothing */
	stub_handoff_note(&h, live, +1, 18 * MS), live++;
	assert_int_equal(h.n, 2);
	stub_handoff_note(&h, live, -1, 19 * MS), live--; /* back to 3: not counted (was over) */
	assert_int_equal(h.len, 0);
	/* an end, then the org loses a line without an event in the FIFO: dropped */
	stub_handoff_note(&h, live, -1, 20 * MS), live--; /* accounted: pushed */
	assert_int_equal(h.len, 1);
	h.lines = 4; /* pretend a fourth line appeared idle (not accounted) */
	stub_handoff_note(&h, live, +1, 21 * MS), live++;
	assert_int_equal(h.n, 2);
	assert_int_equal(h.dropped, 1);
	h.lines = 3;
	assert_int_equal(stub_handoff_summarise(&h, &s), 0);
	assert_int_equal(s.n, 2);
	assert_int_equal(s.p50_us, 5000);
	assert_int_equal(s.p99_us, 6000);
	assert_int_equal(s.max_us, 6000);
	/* re-arming forgets */
	assert_int_equal(stub_handoff_arm(&h, 3), 0);
	assert_int_equal(h.n, 0);
	stub_handoff_free(&h);
}

static void percentiles_nearest_rank(void **state)
{
	struct stub_handoff h = { 0 };
	struct stub_handoff_summary s;

	(void)state;
	assert_int_equal(stub_handoff_arm(&h, 1), 0);
	for (uint64_t i = 100; i >= 1; i--) { /* saturated 1-line org: end, dial, i µs apart */
		stub_handoff_note(&h, 1, -1, 1000 * MS);
		stub_handoff_note(&h, 0, +1, 1000 * MS + i * 1000);
	}
	assert_int_equal(stub_handoff_summarise(&h, &s), 0);
	assert_int_equal(s.n, 100);
	assert_int_equal(s.p50_us, 50);
	assert_int_equal(s.p90_us, 90);
	assert_int_equal(s.p99_us, 99);
	assert_int_equal(s.max_us, 100);
	stub_handoff_arm(&h, 0);
	assert_int_equal(stub_handoff_summarise(&h, &s), 0);
	assert_int_equal(s.n, 0);
	stub_handoff_note(&h, 0, +1, 1); /* off: nothing */
	assert_int_equal(h.n, 0);
	stub_handoff_free(&h);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(pairs_fifo_only_while_saturated),
		cmocka_unit_test(percentiles_nearest_rank),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
