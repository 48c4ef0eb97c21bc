/* Lanes (SPEC D3): the rolling window ring, the park schedule (Retry-After, 1 min doubling to
 * 30 min, reset by success), the circuit (20 % over a minute, minimum sample, one probe), the
 * retry budget (10 % of first sends, floor), and the composed gate. */
#include "lane.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#define MIN 60000LL

static void window_rolls_by_seconds(void **state)
{
	struct lane_window w;
	uint64_t a, b;

	lane_window_init(&w, 0);
	lane_window_add(&w, 0, 0, 5);
	lane_window_add(&w, 999, 1, 2);
	lane_window_add(&w, 30500, 0, 1);
	lane_window_sums(&w, 59999, &a, &b);
	assert_int_equal(a, 6);
	assert_int_equal(b, 2);
	/* At 60 s the first second's bucket has left. */
	lane_window_sums(&w, 60000, &a, &b);
	assert_int_equal(a, 1);
	assert_int_equal(b, 0);
	assert_int_equal(lane_window_bucket(&w, 60000, 30, 0), 1);
	assert_int_equal(lane_window_bucket(&w, 60000, 60, 0), 0);
	/* A jump past the whole ring clears it. */
	lane_window_sums(&w, 10 * MIN, &a, &b);
	assert_int_equal(a + b, 0);
	/* Time backwards lands in the newest bucket. */
	lane_window_add(&w, 10 * MIN - 5000, 0, 1);
	lane_window_sums(&w, 10 * MIN, &a, &b);
	assert_int_equal(a, 1);
	/* Negative times are floored, not truncated. */
	lane_window_init(&w, -1);
	assert_int_equal(w.head, -1);
}

static void park_doubles_to_30_minutes(void **state)
{
	struct lane_park p;
	const int64_t want[] = { 1, 2, 4, 8, 16, 30, 30, 30 };
	int64_t now = 0;

	lane_park_init(&p, MIN, 30 * MIN);
	for (size_t i = 0; i < 8; i++) {
		assert_int_equal(lane_park_throttled(&p, now, -1), want[i] * MIN);
		assert_int_equal(lane_park_wait(&p, now), want[i] * MIN);
		assert_int_equal(lane_park_wait(&p, now + want[i] * MIN - 1), 1);
		now += want[i] * MIN;
		assert_int_equal(lane_park_wait(&p, now), 0);
	}
}

static void park_ignores_throttles_while_parked(void **state)
{
	struct lane_park p;

	lane_park_init(&p, MIN, 30 * MIN);
	lane_park_throttled(&p, 0, -1);
	/* In-flight answers to requests sent before the park neither double nor shorten it. */
	assert_int_equal(lane_park_throttled(&p, 1000, -1), MIN - 1000);
	assert_int_equal(p.level, 1);
	/* Nor does a success during the park reset the level. */
	lane_park_success(&p, 2000);
	assert_int_equal(p.level, 1);
	/* After the park, the first success resets: the next park is 1 min again. */
	lane_park_success(&p, MIN);
	assert_int_equal(p.level, 0);
	assert_int_equal(lane_park_throttled(&p, MIN, -1), MIN);
}

static void park_retry_after(void **state)
{
	struct lane_park p;

	lane_park_init(&p, MIN, 30 * MIN);
	assert_int_equal(lane_park_throttled(&p, 0, 7000), 7000);
	assert_int_equal(p.level, 0); /* the header does not feed the doubling */
	/* A later, longer header extends; a shorter one does not shorten. */
	assert_int_equal(lane_park_throttled(&p, 1000, 10000), 10000);
	assert_int_equal(lane_park_throttled(&p, 2000, 1000), 9000);
	/* Retry-After 0 on a free lane: not parked at all. */
	lane_park_init(&p, MIN, 30 * MIN);
	assert_int_equal(lane_park_throttled(&p, 0, 0), 0);
	assert_int_equal(lane_park_wait(&p, 0), 0);
}

/* Feeds n answers at now, r of them refused. */
static void answers(struct lane_circuit *c, int64_t now, unsigned n, unsigned r)
{
	for (unsigned i = 0; i < n; i++)
		lane_circuit_record(c, now, i < r);
}

static void circuit_threshold_and_minimum(void **state)
{
	struct lane_circuit c;

	/* Below: 3 of 20 (15 %). */
	lane_circuit_init(&c, 20, 20, 15000, 0);
	answers(&c, 0, 17, 0);
	answers(&c, 0, 3, 3);
	assert_int_equal(c.state, LANE_CIRCUIT_CLOSED);
	/* At: 4 refusals of 20 answers, exactly 20 %, opens. */
	lane_circuit_init(&c, 20, 20, 15000, 0);
	answers(&c, 0, 16, 0);
	answers(&c, 0, 4, 4);
	assert_int_equal(c.state, LANE_CIRCUIT_OPEN);
	assert_int_equal(c.opened, 1);
	/* Above the share but below the minimum sample: 19 answers, all refused, stay closed. */
	lane_circuit_init(&c, 20, 20, 15000, 0);
	answers(&c, 0, 19, 19);
	assert_int_equal(c.state, LANE_CIRCUIT_CLOSED);
	answers(&c, 0, 1, 1);
	assert_int_equal(c.state, LANE_CIRCUIT_OPEN);
}

static void circuit_window_is_a_rolling_minute(void **state)
{
	struct lane_circuit c;

	lane_circuit_init(&c, 20, 20, 15000, 0);
	answers(&c, 0, 3, 3); /* old refusals */
	answers(&c, 30000, 16, 0);
	/* A minute later the three old refusals have left: 1 of 17 + 1. */
	answers(&c, 60000, 1, 1);
	assert_int_equal(c.state, LANE_CIRCUIT_CLOSED);
	/* Within the minute they would have opened it: 4 of 20. */
	lane_circuit_init(&c, 20, 20, 15000, 0);
	answers(&c, 0, 3, 3);
	answers(&c, 30000, 16, 0);
	answers(&c, 59999, 1, 1);
	assert_int_equal(c.state, LANE_CIRCUIT_OPEN);
}

static void circuit_probe_closes_or_reopens(void **state)
{
	struct lane_circuit c;

	lane_circuit_init(&c, 20, 20, 15000, 0);
	answers(&c, 0, 20, 20);
	assert_int_equal(lane_circuit_wait(&c, 1000), 14000);
	/* Late answers while open change nothing. */
	answers(&c, 2000, 5, 0);
	assert_int_equal(c.state, LANE_CIRCUIT_OPEN);
	/* Half-open: one probe, then wait (for its answer, at most open_ms). */
	assert_int_equal(lane_circuit_wait(&c, 15000), 0);
	assert_int_equal(c.state, LANE_CIRCUIT_OPEN); /* asking changes nothing */
	lane_circuit_sent(&c, 15000);
	assert_int_equal(c.state, LANE_CIRCUIT_HALF_OPEN);
	assert_int_equal(lane_circuit_wait(&c, 15001), 14999);
	/* The probe is refused: open again for the full period. */
	lane_circuit_record(&c, 16000, true);
	assert_int_equal(c.state, LANE_CIRCUIT_OPEN);
	assert_int_equal(lane_circuit_wait(&c, 16000), 15000);
	assert_int_equal(c.opened, 2);
	/* Next probe succeeds: closed, and the window starts empty. */
	assert_int_equal(lane_circuit_wait(&c, 31000), 0);
	lane_circuit_sent(&c, 31000);
	lane_circuit_record(&c, 31500, false);
	assert_int_equal(c.state, LANE_CIRCUIT_CLOSED);
	answers(&c, 32000, 19, 19);
	assert_int_equal(c.state, LANE_CIRCUIT_CLOSED);
}

/* A probe whose answer never comes is given up after open_ms: the circuit cannot stay
 * half-open forever. */
static void circuit_lost_probe_is_given_up(void **state)
{
	struct lane_circuit c;

	lane_circuit_init(&c, 20, 20, 15000, 0);
	answers(&c, 0, 20, 20);
	assert_int_equal(lane_circuit_wait(&c, 15000), 0);
	lane_circuit_sent(&c, 15000);
	assert_int_equal(lane_circuit_wait(&c, 29999), 1);
	assert_int_equal(lane_circuit_wait(&c, 30000), 0);
	lane_circuit_sent(&c, 30000); /* the second probe */
	assert_int_equal(lane_circuit_wait(&c, 30001), 14999);
	lane_circuit_record(&c, 30500, false);
	assert_int_equal(c.state, LANE_CIRCUIT_CLOSED);
}

/* A default lane whose circuit opened at 0 (20 refusals) and sent its probe at 15 s. */
static void probe_out_at_15s(struct lane *l)
{
	struct retry_decision bad = { .verdict = RETRY_RESEND, .circuit_refusal = true };
	uint64_t w;

	lane_init(l, NULL, 0);
	for (int i = 0; i < 20; i++) {
		assert_int_equal(lane_admit(l, 0, false, &w), LANE_GO);
		lane_record(l, 0, &bad);
	}
	assert_int_equal(lane_admit(l, 15000, false, &w), LANE_GO); /* the probe */
}

/* The probe answered 401: the lane stops, and the answer still reaches the circuit; once
 * resumed, the lane sends again instead of waiting for a probe that was answered. */
static void lane_probe_answered_by_stop(void **state)
{
	struct lane l;
	struct retry_decision stop = { .verdict = RETRY_STOP_LANE, .stop_lane = true };
	uint64_t w;

	probe_out_at_15s(&l);
	lane_record(&l, 15100, &stop);
	assert_int_equal(lane_admit(&l, 15200, false, &w), LANE_STOPPED);
	lane_resume(&l);
	assert_int_equal(lane_admit(&l, 15300, false, &w), LANE_GO);
	assert_int_equal(lane_admit(&l, 15300, false, &w), LANE_GO);
}

/* A 401 to a re-send of a call that may be placed ends the call unknown (retry_policy.c), and
 * still stops the lane: the flag, not the verdict, decides. */
static void lane_stops_on_unknown_with_stop_flag(void **state)
{
	struct lane l;
	struct retry_policy p;
	struct retry_answer a = { 401, RETRY_TRANSPORT_NONE, NULL, false };
	struct retry_counts c = { 0, 2, true };
	struct retry_decision d;
	uint64_t w;

	retry_policy_defaults(&p);
	retry_classify(&p, &a, &c, 0, 0, &d);
	assert_int_equal(d.verdict, RETRY_UNKNOWN);
	probe_out_at_15s(&l);
	lane_record(&l, 15100, &d);
	assert_int_equal(lane_admit(&l, 15200, false, &w), LANE_STOPPED);
}

/* Resuming a lane forgets a probe still out. */
static void lane_resume_forgets_the_probe(void **state)
{
	struct lane l;
	uint64_t w;

	probe_out_at_15s(&l);
	assert_int_equal(lane_admit(&l, 15100, false, &w), LANE_WAIT);
	lane_resume(&l);
	assert_int_equal(lane_admit(&l, 15100, false, &w), LANE_GO); /* a new probe */
	assert_int_equal(lane_admit(&l, 15100, false, &w), LANE_WAIT);
}

static void budget_ten_percent(void **state)
{
	struct lane_budget b;

	lane_budget_init(&b, 10, 3, 0);
	for (int i = 0; i < 100; i++)
		lane_budget_note(&b, 0, false);
	/* 100 first sends: 10 re-sends allowed; the 11th waits. */
	for (int i = 0; i < 10; i++) {
		assert_int_equal(lane_budget_wait(&b, 1000), 0);
		lane_budget_note(&b, 1000, true);
	}
	assert_true(lane_budget_wait(&b, 1000) > 0);
	/* Nine more first sends do not help (109 * 10 % = 10); the tenth does. */
	for (int i = 0; i < 9; i++)
		lane_budget_note(&b, 2000, false);
	assert_true(lane_budget_wait(&b, 2000) > 0);
	lane_budget_note(&b, 2000, false);
	assert_int_equal(lane_budget_wait(&b, 2000), 0);
}

static void budget_floor_for_quiet_lanes(void **state)
{
	struct lane_budget b;

	lane_budget_init(&b, 10, 3, 0);
	lane_budget_note(&b, 0, false);
	/* One first send: 10 % is 0, the floor allows 3. */
	for (int i = 0; i < 3; i++) {
		assert_int_equal(lane_budget_wait(&b, 0), 0);
		lane_budget_note(&b, 0, true);
	}
	/* The fourth waits until the bucket holding them leaves the minute. */
	assert_int_equal(lane_budget_wait(&b, 0), 60000);
	assert_int_equal(lane_budget_wait(&b, 59999), 1);
	assert_int_equal(lane_budget_wait(&b, 60000), 0);
}

static void budget_wait_until_old_resends_leave(void **state)
{
	struct lane_budget b;

	lane_budget_init(&b, 10, 1, 0);
	for (int i = 0; i < 50; i++)
		lane_budget_note(&b, 0, false); /* second 0: 50 first sends */
	for (int i = 0; i < 5; i++)
		lane_budget_note(&b, 10000, true); /* second 10: 5 re-sends */
	for (int i = 0; i < 50; i++)
		lane_budget_note(&b, 20000, false); /* second 20: 50 first sends */
	/* At 30 s: 100 first, 5 re-sends, 10 allowed. */
	assert_int_equal(lane_budget_wait(&b, 30000), 0);
	for (int i = 0; i < 5; i++)
		lane_budget_note(&b, 30000, true);
	/* Full. At 60 s second 0 leaves: 50 first allow 5 < 10 re-sends; at 70 s second 10 leaves
	 * with its 5 re-sends: 5 left, 5 allowed: still full; at 80 s second 20 leaves: 0 first,
	 * the floor of 1 against 5 re-sends: full until second 30 leaves at 90 s. */
	assert_int_equal(lane_budget_wait(&b, 30000), 60000);
	assert_int_equal(lane_budget_wait(&b, 89999), 1);
	assert_int_equal(lane_budget_wait(&b, 90000), 0);
}

static void lane_gate_order(void **state)
{
	struct lane_config cfg;
	struct lane l;
	struct retry_decision d = { 0 };
	uint64_t w;

	lane_config_defaults(&cfg);
	cfg.rate_per_s = 10;
	cfg.burst = 1;
	lane_init(&l, &cfg, 0);
	assert_int_equal(lane_admit(&l, 0, false, &w), LANE_GO);
	assert_int_equal(lane_admit(&l, 0, false, &w), LANE_WAIT);
	assert_int_equal(w, 100); /* the token bucket */
	/* A 429 with Retry-After parks the lane for the header's delay. */
	d.verdict = RETRY_REFUSED;
	d.park_lane = true;
	d.park_ms = 5000;
	d.circuit_refusal = true;
	lane_record(&l, 100, &d);
	assert_int_equal(lane_admit(&l, 100, false, &w), LANE_WAIT);
	assert_int_equal(w, 5000);
	assert_int_equal(lane_admit(&l, 5100, false, &w), LANE_GO);
	/* A success after the park. */
	struct retry_decision ok = { .verdict = RETRY_OK };
	lane_record(&l, 5200, &ok);
	assert_int_equal(l.park.level, 0);
	/* Credentials: stopped until resumed. */
	struct retry_decision stop = { .verdict = RETRY_STOP_LANE, .stop_lane = true };
	lane_record(&l, 6000, &stop);
	assert_int_equal(lane_admit(&l, 6000, false, &w), LANE_STOPPED);
	lane_resume(&l);
	assert_int_equal(lane_admit(&l, 6000, false, &w), LANE_GO);
}

/* lane_check() takes no token and counts nothing; lane_sent() counts the send (the half-open
 * circuit's probe): the two halves the fleet-wide lane uses (dispatcher/worker/lane_fleet.h). */
static void lane_check_and_sent(void **state)
{
	struct lane_config cfg;
	struct lane l;
	struct retry_decision bad = { .verdict = RETRY_RESEND, .circuit_refusal = true };
	uint64_t w;

	(void)state;
	lane_config_defaults(&cfg);
	cfg.rate_per_s = 10;
	cfg.burst = 1;
	lane_init(&l, &cfg, 0);
	for (int i = 0; i < 5; i++)
		assert_int_equal(lane_check(&l, 0, false, &w), LANE_GO);
	assert_int_equal(token_bucket_available(&l.bucket, 0), 1); /* nothing taken */
	for (int i = 0; i < 20; i++) {
		lane_sent(&l, 0, false);
		lane_record(&l, 0, &bad);
	}
	assert_int_equal(lane_check(&l, 0, false, &w), LANE_WAIT);
	assert_int_equal(w, 15000);
	assert_int_equal(lane_check(&l, 15000, false, &w), LANE_GO);
	lane_sent(&l, 15000, false); /* the probe is out: no second one */
	assert_int_equal(lane_check(&l, 15000, false, &w), LANE_WAIT);
}

static void lane_gate_circuit_and_budget(void **state)
{
	struct lane l;
	struct retry_decision bad = { .verdict = RETRY_RESEND, .circuit_refusal = true };
	struct retry_decision ok = { .verdict = RETRY_OK };
	uint64_t w;

	lane_init(&l, NULL, 0); /* unpaced */
	for (int i = 0; i < 20; i++) {
		assert_int_equal(lane_admit(&l, 0, false, &w), LANE_GO);
		lane_record(&l, 0, &bad);
	}
	assert_int_equal(lane_admit(&l, 0, false, &w), LANE_WAIT);
	assert_int_equal(w, 15000);
	/* Half-open: exactly one probe. */
	assert_int_equal(lane_admit(&l, 15000, false, &w), LANE_GO);
	assert_int_equal(lane_admit(&l, 15000, false, &w), LANE_WAIT);
	lane_record(&l, 15100, &ok);
	assert_int_equal(lane_admit(&l, 15100, false, &w), LANE_GO);
	/* 22 first sends so far: re-sends limited to the floor of 3 (10 % of 22 is 2). */
	for (int i = 0; i < 3; i++)
		assert_int_equal(lane_admit(&l, 15200, true, &w), LANE_GO);
	assert_int_equal(lane_admit(&l, 15200, true, &w), LANE_WAIT);
	assert_true(w > 0);
	/* First sends are not held back by the budget. */
	assert_int_equal(lane_admit(&l, 15200, false, &w), LANE_GO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(window_rolls_by_seconds),
		cmocka_unit_test(lane_check_and_sent),
		cmocka_unit_test(park_doubles_to_30_minutes),
		cmocka_unit_test(park_ignores_throttles_while_parked),
		cmocka_unit_test(park_retry_after),
		cmocka_unit_test(circuit_threshold_and_minimum),
		cmocka_unit_test(circuit_window_is_a_rolling_minute),
		cmocka_unit_test(circuit_probe_closes_or_reopens),
		cmocka_unit_test(circuit_lost_probe_is_given_up),
		cmocka_unit_test(lane_probe_answered_by_stop),
		cmocka_unit_test(lane_stops_on_unknown_with_stop_flag),
		cmocka_unit_test(lane_resume_forgets_the_probe),
		cmocka_unit_test(budget_ten_percent),
		cmocka_unit_test(budget_floor_for_quiet_lanes),
		cmocka_unit_test(budget_wait_until_old_resends_leave),
		cmocka_unit_test(lane_gate_order),
		cmocka_unit_test(lane_gate_circuit_and_budget),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
