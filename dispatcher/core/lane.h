/* A lane is (provider, organisation) (SPEC D3): the unit that is paced, parked, circuit-broken
 * and held to a retry budget, so one org's trouble never slows another's.
 *
 * Pure: `now` is a monotonic time in milliseconds, passed in; nothing allocates. Four parts,
 * usable alone or through struct lane:
 *
 *   park     A throttled answer parks the lane: until Retry-After when the provider sent one,
 *            else 1 min doubling to 30 min. The doubling level is reset by the first success
 *            answered while the lane is not parked. Throttled answers that arrive while the lane
 *            is already parked (requests sent before the park) neither double nor shorten it.
 *   circuit  Opens when refusals reach 20 % of the answers over a rolling minute, with at least
 *            20 answers in the window. Why 20: with a healthy lane refusing 5 % of the time, 4
 *            or more refusals out of 20 happen with probability 1.6 % (binomial), against 8.6 %
 *            for 2 of 10; and 20 answers is a third of a second at the rates lanes run at, so a
 *            real outage still opens it at once. Open for open_ms (default 15 s), then one
 *            probe goes out (half-open); a successful answer closes it and empties the window,
 *            a refusal opens it again. A probe with no answer within open_ms (lost, or its
 *            lane stopped) is given up and another may go, so the circuit never stays
 *            half-open forever. "Refusals" are every answer whose retry decision has
 *            circuit_refusal set: throttled, 5xx, timeouts, resets. 400/404/422 answers count as
 *            healthy answers (the provider is up, the contact is bad).
 *   budget   Re-sends (a same-key re-send of an unknown outcome) stay within 10 % of the first
 *            sends over a rolling minute; past it, re-sends wait (first sends carry on) until
 *            old re-sends leave the window. A lane with very few first sends still gets a floor
 *            of 3 re-sends a minute, so one lone timeout on a quiet lane is retried; 3 a minute
 *            can never become a storm.
 *   bucket   A token bucket (token_bucket.h) paces every send under the provider's rate.
 */
#ifndef DSP_CORE_LANE_H
#define DSP_CORE_LANE_H

#include <stdbool.h>
#include <stdint.h>

#include "lane_window.h"
#include "retry_policy.h"
#include "token_bucket.h"

struct lane_park {
	int64_t until_ms; /* parked while now < until_ms */
	unsigned level;	  /* parks without Retry-After since the last success */
	uint64_t base_ms; /* first park without Retry-After [60000] */
	uint64_t cap_ms;  /* cap on the doubling [1800000] */
};

enum lane_circuit_state {
	LANE_CIRCUIT_CLOSED = 0,
	LANE_CIRCUIT_OPEN,
	LANE_CIRCUIT_HALF_OPEN, /* open_ms has passed: one probe may go */
};

struct lane_circuit {
	struct lane_window win; /* counter 0: answers, counter 1: refusals */
	enum lane_circuit_state state;
	int64_t open_until_ms;	/* OPEN: when the probe may go */
	bool probe_out;		/* HALF_OPEN: the probe has been sent */
	int64_t probe_due_ms;	/* probe_out: its answer is given up after this (sent + open_ms) */
	uint32_t threshold_pct; /* refusal share that opens [20] */
	uint32_t min_samples;	/* answers needed in the window before it can open [20] */
	uint64_t open_ms;	/* how long it stays open before a probe [15000] */
	uint64_t opened;	/* times it opened (for metrics) */
};

struct lane_budget {
	struct lane_window win; /* counter 0: first sends, counter 1: re-sends */
	uint32_t pct;		/* re-sends allowed per 100 first sends [10] */
	uint32_t floor;		/* re-sends always allowed per minute [3] */
};

struct lane_config {
	uint32_t rate_per_s;	      /* token bucket rate, 0 = unpaced [0] */
	uint32_t burst;		      /* token bucket depth [1] */
	uint64_t park_base_ms;	      /* [60000] */
	uint64_t park_cap_ms;	      /* [1800000] */
	uint32_t circuit_pct;	      /* [20] */
	uint32_t circuit_min_samples; /* [20] */
	uint64_t circuit_open_ms;     /* [15000] */
	uint32_t budget_pct;	      /* [10] */
	uint32_t budget_floor;	      /* [3] */
};

enum lane_gate {
	LANE_GO = 0,  /* send now: a token is taken and the send is counted */
	LANE_WAIT,    /* ask again after *wait_ms */
	LANE_STOPPED, /* stopped by a credential or contract problem until lane_resume() */
};

struct lane {
	struct token_bucket bucket;
	struct lane_park park;
	struct lane_circuit circuit;
	struct lane_budget budget;
	bool stopped; /* a STOP_LANE verdict arrived */
};

/* Fills *c with the defaults above. */
void lane_config_defaults(struct lane_config *c);

void lane_park_init(struct lane_park *p, uint64_t base_ms, uint64_t cap_ms);
/* A throttled answer at now; retry_after_ms is the header's delay or -1. Returns the ms the
 * lane is now parked for from now (0 if the answer changed nothing and the park is over). */
uint64_t lane_park_throttled(struct lane_park *p, int64_t now, int64_t retry_after_ms);
/* A successful answer at now: resets the doubling unless the lane is parked. */
void lane_park_success(struct lane_park *p, int64_t now);
/* Returns the ms until the park ends, 0 when not parked. */
uint64_t lane_park_wait(const struct lane_park *p, int64_t now);

void lane_circuit_init(struct lane_circuit *c, uint32_t pct, uint32_t min_samples, uint64_t open_ms,
		       int64_t now);
/* Records one answer at now (refused or not) and opens or closes the circuit. */
void lane_circuit_record(struct lane_circuit *c, int64_t now, bool refused);
/* Returns 0 when a send may go now (HALF_OPEN: the probe, if none is out or the one out has
 * had no answer for open_ms), else the ms to wait. Does not change state; lane_circuit_sent()
 * does. */
uint64_t lane_circuit_wait(const struct lane_circuit *c, int64_t now);
/* Notes that a send went out: once open_ms has passed, it is the probe (HALF_OPEN, probe out,
 * its answer awaited for open_ms). */
void lane_circuit_sent(struct lane_circuit *c, int64_t now);

void lane_budget_init(struct lane_budget *b, uint32_t pct, uint32_t floor, int64_t now);
/* Counts a send at now: a re-send or a first send. */
void lane_budget_note(struct lane_budget *b, int64_t now, bool resend);
/* Returns 0 when one more re-send is within the budget at now, else the ms until it will be
 * (assuming no new first sends). */
uint64_t lane_budget_wait(struct lane_budget *b, int64_t now);

/* Initialises a lane from c (NULL for the defaults). */
void lane_init(struct lane *l, const struct lane_config *c, int64_t now);
/* Asks whether a send may leave now: stopped, then parked, then the circuit, then (re-sends
 * only) the budget, then the token bucket. On LANE_GO the token is taken and the send counted;
 * on LANE_WAIT *wait_ms is set (wait_ms may not be NULL). */
enum lane_gate lane_admit(struct lane *l, int64_t now, bool resend, uint64_t *wait_ms);
/* lane_admit() in two halves, for a lane whose tokens come from elsewhere (the fleet-wide
 * bucket, dispatcher/worker/lane_fleet.h): lane_check() asks the stop flag, the park, the
 * circuit and (re-sends) the budget, and takes nothing; lane_sent() notes a send that left at
 * now (the circuit's probe, the budget's count). lane_admit() is lane_check(), then the token
 * bucket, then lane_sent(). Same returns as lane_admit(). */
enum lane_gate lane_check(struct lane *l, int64_t now, bool resend, uint64_t *wait_ms);
void lane_sent(struct lane *l, int64_t now, bool resend);
/* Feeds one answer's retry decision into the park, the circuit and the stop flag. Every
 * answer reaches the circuit, a STOP_LANE one too (it may be the probe's). */
void lane_record(struct lane *l, int64_t now, const struct retry_decision *d);
/* Clears the stop flag (the operator fixed the credentials) and forgets a probe still out, so
 * the half-open circuit may send a new one. */
void lane_resume(struct lane *l);

#endif
