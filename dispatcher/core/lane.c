#include "lane.h"

#include "backoff.h"

#include <stddef.h>

void lane_config_defaults(struct lane_config *c)
{
	c->rate_per_s = 0;
	c->burst = 1;
	c->park_base_ms = 60000;
	c->park_cap_ms = 1800000;
	c->circuit_pct = 20;
	c->circuit_min_samples = 20;
	c->circuit_open_ms = 15000;
	c->budget_pct = 10;
	c->budget_floor = 3;
}

/* ---- park ---- */

void lane_park_init(struct lane_park *p, uint64_t base_ms, uint64_t cap_ms)
{
	p->until_ms = INT64_MIN;
	p->level = 0;
	p->base_ms = base_ms;
	p->cap_ms = cap_ms < base_ms ? base_ms : cap_ms;
}

uint64_t lane_park_throttled(struct lane_park *p, int64_t now, int64_t retry_after_ms)
{
	if (retry_after_ms >= 0) {
		if (now + retry_after_ms > p->until_ms)
			p->until_ms = now + retry_after_ms;
		return lane_park_wait(p, now);
	}
	if (now < p->until_ms)
		return lane_park_wait(p, now);
	uint64_t d = backoff_doubled(p->base_ms, p->level, p->cap_ms);
	if (p->level < 64)
		p->level++;
	p->until_ms = now + (int64_t)d;
	return d;
}

void lane_park_success(struct lane_park *p, int64_t now)
{
	if (now >= p->until_ms)
		p->level = 0;
}

uint64_t lane_park_wait(const struct lane_park *p, int64_t now)
{
	return now < p->until_ms ? (uint64_t)(p->until_ms - now) : 0;
}

/* ---- circuit ---- */

void lane_circuit_init(struct lane_circuit *c, uint32_t pct, uint32_t min_samples, uint64_t open_ms,
		       int64_t now)
{
	lane_window_init(&c->win, now);
	c->state = LANE_CIRCUIT_CLOSED;
	c->open_until_ms = 0;
	c->probe_out = false;
	c->probe_due_ms = 0;
	c->threshold_pct = pct;
	c->min_samples = min_samples ? min_samples : 1;
	c->open_ms = open_ms;
	c->opened = 0;
}

static void circuit_open(struct lane_circuit *c, int64_t now)
{
	c->state = LANE_CIRCUIT_OPEN;
	c->open_until_ms = now + (int64_t)c->open_ms;
	c->probe_out = false;
	c->opened++;
}

/* The state at now: an OPEN circuit whose open_ms has passed is HALF_OPEN. */
static enum lane_circuit_state state_at(const struct lane_circuit *c, int64_t now)
{
	if (c->state == LANE_CIRCUIT_OPEN && now >= c->open_until_ms)
		return LANE_CIRCUIT_HALF_OPEN;
	return c->state;
}

/* The probe's answer: success closes the circuit and empties the window, a refusal reopens. */
static void probe_answered(struct lane_circuit *c, int64_t now, bool refused)
{
	if (refused) {
		circuit_open(c, now);
		return;
	}
	c->state = LANE_CIRCUIT_CLOSED;
	c->probe_out = false;
	lane_window_init(&c->win, now);
}

void lane_circuit_record(struct lane_circuit *c, int64_t now, bool refused)
{
	uint64_t answers, refusals;

	if (c->state != LANE_CIRCUIT_CLOSED) {
		/* Any answer while open is from before the open or the probe; only the probe's
		 * (half-open with the probe out) decides. */
		if (c->state == LANE_CIRCUIT_HALF_OPEN && c->probe_out)
			probe_answered(c, now, refused);
		return;
	}
	lane_window_add(&c->win, now, 0, 1);
	if (refused)
		lane_window_add(&c->win, now, 1, 1);
	lane_window_sums(&c->win, now, &answers, &refusals);
	if (answers >= c->min_samples && refusals * 100 >= (uint64_t)c->threshold_pct * answers)
		circuit_open(c, now);
}

uint64_t lane_circuit_wait(const struct lane_circuit *c, int64_t now)
{
	switch (state_at(c, now)) {
	case LANE_CIRCUIT_CLOSED:
		return 0;
	case LANE_CIRCUIT_OPEN:
		return (uint64_t)(c->open_until_ms - now);
	case LANE_CIRCUIT_HALF_OPEN:
	default:
		/* A probe whose answer has not come within open_ms is given up: another may go. */
		if (!c->probe_out || now >= c->probe_due_ms)
			return 0;
		return (uint64_t)(c->probe_due_ms - now);
	}
}

void lane_circuit_sent(struct lane_circuit *c, int64_t now)
{
	if (state_at(c, now) != LANE_CIRCUIT_HALF_OPEN)
		return;
	c->state = LANE_CIRCUIT_HALF_OPEN;
	c->probe_out = true;
	c->probe_due_ms = now + (int64_t)c->open_ms;
}

/* ---- retry budget ---- */

void lane_budget_init(struct lane_budget *b, uint32_t pct, uint32_t floor, int64_t now)
{
	lane_window_init(&b->win, now);
	b->pct = pct;
	b->floor = floor;
}

void lane_budget_note(struct lane_budget *b, int64_t now, bool resend)
{
	lane_window_add(&b->win, now, resend ? 1 : 0, 1);
}

static uint64_t allowance(const struct lane_budget *b, uint64_t first)
{
	uint64_t a = first * b->pct / 100;

	return a > b->floor ? a : b->floor;
}

uint64_t lane_budget_wait(struct lane_budget *b, int64_t now)
{
	uint64_t first, resent;

	lane_window_sums(&b->win, now, &first, &resent);
	if (resent < allowance(b, first))
		return 0;
	/* Let the oldest buckets expire one by one until the re-sends fit. */
	for (unsigned age = LANE_WINDOW_BUCKETS - 1; age > 0; age--) {
		first -= lane_window_bucket(&b->win, now, age, 0);
		resent -= lane_window_bucket(&b->win, now, age, 1);
		if (resent < allowance(b, first)) {
			int64_t leaves = (b->win.head - (int64_t)age + LANE_WINDOW_BUCKETS) *
					 LANE_WINDOW_BUCKET_MS;
			return leaves > now ? (uint64_t)(leaves - now) : 1;
		}
	}
	/* Only the newest bucket is left: wait for it to leave. */
	return (uint64_t)((b->win.head + LANE_WINDOW_BUCKETS) * LANE_WINDOW_BUCKET_MS - now);
}

/* ---- the lane ---- */

void lane_init(struct lane *l, const struct lane_config *c, int64_t now)
{
	struct lane_config defaults;

	if (!c) {
		lane_config_defaults(&defaults);
		c = &defaults;
	}
	token_bucket_init(&l->bucket, c->rate_per_s, c->burst, now);
	lane_park_init(&l->park, c->park_base_ms, c->park_cap_ms);
	lane_circuit_init(&l->circuit, c->circuit_pct, c->circuit_min_samples, c->circuit_open_ms,
			  now);
	lane_budget_init(&l->budget, c->budget_pct, c->budget_floor, now);
	l->stopped = false;
}

enum lane_gate lane_check(struct lane *l, int64_t now, bool resend, uint64_t *wait_ms)
{
	uint64_t w;

	*wait_ms = 0;
	if (l->stopped)
		return LANE_STOPPED;
	if ((w = lane_park_wait(&l->park, now)) == 0 &&
	    (w = lane_circuit_wait(&l->circuit, now)) == 0 &&
	    (!resend || (w = lane_budget_wait(&l->budget, now)) == 0))
		return LANE_GO;
	*wait_ms = w;
	return LANE_WAIT;
}

void lane_sent(struct lane *l, int64_t now, bool resend)
{
	lane_circuit_sent(&l->circuit, now);
	lane_budget_note(&l->budget, now, resend);
}

enum lane_gate lane_admit(struct lane *l, int64_t now, bool resend, uint64_t *wait_ms)
{
	enum lane_gate g = lane_check(l, now, resend, wait_ms);

	if (g != LANE_GO)
		return g;
	if ((*wait_ms = token_bucket_take(&l->bucket, now)) != 0)
		return LANE_WAIT;
	lane_sent(l, now, resend);
	return LANE_GO;
}

void lane_record(struct lane *l, int64_t now, const struct retry_decision *d)
{
	if (d->stop_lane)
		l->stopped = true; /* STOP_LANE, or UNKNOWN for a maybe-delivered call */
	else if (d->park_lane)
		lane_park_throttled(&l->park, now, d->park_ms);
	else if (d->verdict == RETRY_OK)
		lane_park_success(&l->park, now);
	/* Every answer, a stopping one too: it may be the half-open circuit's probe. */
	lane_circuit_record(&l->circuit, now, d->circuit_refusal);
}

void lane_resume(struct lane *l)
{
	l->stopped = false;
	l->circuit.probe_out = false; /* a probe sent before the stop is not waited for */
}
