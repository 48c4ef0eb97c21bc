/* The capacity view (SPEC C12) from installed floors and live counts. The readings it follows
 * are V1..V5 in capacity.h and R1..R13 in fairshare.h. */
#include "capacity.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

#define NONE UINT32_MAX

static bool count_ok(uint32_t v)
{
	return v <= FAIRSHARE_COUNT_MAX;
}

static bool limit_ok(uint32_t v)
{
	return v == FAIRSHARE_UNLIMITED || v <= FAIRSHARE_COUNT_MAX;
}

static int64_t min64(int64_t a, int64_t b)
{
	return a < b ? a : b;
}

static int64_t max64(int64_t a, int64_t b)
{
	return a > b ? a : b;
}

static int validate_org(const struct capacity_org *org)
{
	if (org->org_limit == 0 || !count_ok(org->org_limit) || !count_ok(org->system_limit) ||
	    !count_ok(org->system_running) || !limit_ok(org->per_agent) ||
	    !count_ok(org->direct_waiting))
		return -EINVAL;
	if (org->n_agents > FAIRSHARE_CAMPAIGNS_MAX || (org->n_agents && !org->agent_running))
		return -EINVAL;
	for (uint32_t a = 0; a < org->n_agents; a++)
		if (!count_ok(org->agent_running[a]))
			return -EINVAL;
	return 0;
}

static int validate_campaign(const struct capacity_org *org, const struct capacity_campaign *c)
{
	if (!count_ok(c->running) || !count_ok(c->floor) || !limit_ok(c->ceiling))
		return -EINVAL;
	if (c->agent != FAIRSHARE_NO_AGENT && c->agent >= org->n_agents)
		return -EINVAL;
	if (c->state != FAIRSHARE_RUNNING && c->state != FAIRSHARE_PAUSED &&
	    c->state != FAIRSHARE_STOPPED)
		return -EINVAL;
	return 0;
}

/* The gating cap (C2): per_agent when set below org_limit, else FAIRSHARE_UNLIMITED. */
static uint32_t agent_cap(const struct capacity_org *org)
{
	if (org->per_agent != FAIRSHARE_UNLIMITED && org->per_agent < org->org_limit)
		return org->per_agent;
	return FAIRSHARE_UNLIMITED;
}

/* Whether c's agent gates (R3): batch campaigns with an agent, per_agent below org_limit. */
static bool gated(const struct capacity_org *org, const struct capacity_campaign *c)
{
	return agent_cap(org) != FAIRSHARE_UNLIMITED && !c->direct &&
	       c->agent != FAIRSHARE_NO_AGENT;
}

/* The floor as the gate reads it: the installed one, or 0 when floors are not valid (V4, R9). */
static uint32_t floor_of(const struct capacity_org *org, const struct capacity_campaign *c)
{
	return org->floors_valid ? c->floor : 0;
}

static uint32_t shortfall_of(const struct capacity_org *org, const struct capacity_campaign *c)
{
	uint32_t f = floor_of(org, c);

	return f > c->running ? f - c->running : 0;
}

/* Adds cs[i] to the sums; *direct is the direct input's index so far. */
static int add(const struct capacity_org *org, const struct capacity_campaign *c, uint32_t i,
	       uint64_t *agent_shortfall, struct capacity_sums *s, uint64_t *running,
	       uint64_t *floors, uint32_t *direct)
{
	uint32_t f = floor_of(org, c);
	int rc = validate_campaign(org, c);

	if (rc)
		return rc;
	if (c->direct) {
		if (*direct != NONE)
			return -EINVAL;
		*direct = i;
	}
	*running += c->running;
	s->hold += f > c->running ? f : c->running;
	if (c->active) {
		s->active_campaigns++;
		*floors += f;
	}
	if (!c->direct) {
		s->shortfall += shortfall_of(org, c);
		if (gated(org, c))
			agent_shortfall[c->agent] += shortfall_of(org, c);
	}
	return 0;
}

int capacity_sum(const struct capacity_org *org, const struct capacity_campaign *cs, uint32_t n,
		 uint64_t *agent_shortfall, struct capacity_sums *sums)
{
	uint64_t running = 0, floors = 0;
	uint32_t direct = NONE;
	int rc;

	if (!org || !sums || (n && !cs) || n > FAIRSHARE_CAMPAIGNS_MAX)
		return -EINVAL;
	rc = validate_org(org);
	if (rc || (org->n_agents && !agent_shortfall))
		return rc ? rc : -EINVAL;
	*sums = (struct capacity_sums){ 0 };
	for (uint32_t a = 0; a < org->n_agents; a++)
		agent_shortfall[a] = 0;
	for (uint32_t i = 0; i < n; i++) {
		rc = add(org, &cs[i], i, agent_shortfall, sums, &running, &floors, &direct);
		if (rc)
			return rc;
	}
	if (running > FAIRSHARE_COUNT_MAX || floors > FAIRSHARE_COUNT_MAX)
		return -EINVAL;
	sums->org_running = (uint32_t)running;
	sums->floors = (uint32_t)floors;
	if (direct != NONE && org->direct_waiting > 0) {
		uint32_t fd = floor_of(org, &cs[direct]) > 1 ? floor_of(org, &cs[direct]) : 1;

		sums->direct_reserve = org->direct_waiting < fd ? org->direct_waiting : fd;
	}
	return 0;
}

static int64_t system_room(const struct capacity_org *org)
{
	return max64(0, (int64_t)org->system_limit - org->system_running);
}

/* Calls the gate would admit for c now, one after another, enforcement on (V3: R7, R8, R12).
 * Each of the gate's checks holds for the first m admissions and fails after, so the count is
 * the least of the level bounds and the fair-share bound, the latter being "under the floor"
 * or "borrowing", whichever lasts longer. */
static int64_t admissible(const struct capacity_org *org, const struct capacity_campaign *c,
			  const struct capacity_sums *s, const uint64_t *agent_shortfall)
{
	int64_t L = org->org_limit, O = s->org_running, r = c->running;
	int64_t f = floor_of(org, c), sh = shortfall_of(org, c), S = (int64_t)s->shortfall;
	int64_t n = system_room(org), fair;

	if (c->direct) {
		n = min64(n, L - O);
		fair = max64(max64(f, 1) - r, L - S - O);
	} else {
		int64_t R = s->direct_reserve;
		int64_t borrow = L - R - (S - sh) - O;

		n = min64(n, L - R - O);
		if (gated(org, c)) {
			int64_t cap = agent_cap(org), ar = org->agent_running[c->agent];

			n = min64(n, cap - ar);
			borrow =
				min64(borrow, cap - ar - ((int64_t)agent_shortfall[c->agent] - sh));
		}
		if (c->ceiling != FAIRSHARE_UNLIMITED)
			n = min64(n, (int64_t)c->ceiling - r);
		fair = max64(f - r, borrow);
	}
	return max64(0, min64(n, fair));
}

static void bind(struct capacity_answer *o, int64_t *best, int64_t v, enum fairshare_limit by,
		 uint32_t value)
{
	if (v < *best) {
		*best = v;
		o->limited_by = by;
		o->limited_by_value = value;
	}
}

/* effective_limit and its binding term (V3, R11). Terms are offered narrowest first, and a
 * later term replaces the binding one only when strictly smaller, so ties keep the narrower.
 * The pool is a fair share only under valid floors (V4), with another holder and two active
 * campaigns. */
static void effective(const struct capacity_org *org, const struct capacity_campaign *c,
		      const struct capacity_sums *s, struct capacity_answer *o)
{
	int64_t r = c->running, f = floor_of(org, c);
	int64_t others = (int64_t)s->hold - max64(f, r);
	int64_t best = INT64_MAX;
	bool shared = org->floors_valid && others > 0 && s->active_campaigns >= 2;

	if (!c->direct && c->ceiling != FAIRSHARE_UNLIMITED)
		bind(o, &best, c->ceiling, FAIRSHARE_BY_CEILING, c->ceiling);
	if (gated(org, c))
		bind(o, &best, r + max64(0, (int64_t)agent_cap(org) - org->agent_running[c->agent]),
		     FAIRSHARE_BY_AGENT, agent_cap(org));
	bind(o, &best, max64(f, (int64_t)org->org_limit - others),
	     shared ? FAIRSHARE_BY_FAIR_SHARE : FAIRSHARE_BY_ORG,
	     shared ? s->active_campaigns : org->org_limit);
	bind(o, &best, r + system_room(org), FAIRSHARE_BY_SYSTEM, org->system_limit);
	o->effective_limit = (uint32_t)best;
}

void capacity_answer(const struct capacity_org *org, const struct capacity_campaign *cs,
		     const struct capacity_sums *sums, const uint64_t *agent_shortfall, uint32_t i,
		     struct capacity_answer *out)
{
	const struct capacity_campaign *c = &cs[i];
	uint32_t f = floor_of(org, c);

	*out = (struct capacity_answer){
		.running_now = c->running,
		.campaign_limit = c->direct ? FAIRSHARE_UNLIMITED : c->ceiling,
		.org_limit = org->org_limit,
		.active_campaigns = sums->active_campaigns,
		.guaranteed_floor = f,
		.reserved_for_other_campaigns = sums->floors - (c->active ? f : 0),
		.fcfs = org->enforced && !org->floors_valid,
	};
	if (org->enforced) {
		effective(org, c, sums, out);
		out->available_now = (uint32_t)admissible(org, c, sums, agent_shortfall);
	} else {
		out->available_now = (uint32_t)system_room(org);
		out->effective_limit = c->running + out->available_now;
		out->limited_by = FAIRSHARE_BY_ENFORCEMENT_OFF;
	}
	if (c->state != FAIRSHARE_RUNNING) {
		out->available_now = 0;
		if (out->effective_limit > c->running)
			out->effective_limit = c->running;
		out->limited_by =
			c->state == FAIRSHARE_PAUSED ? FAIRSHARE_BY_PAUSED : FAIRSHARE_BY_STOPPED;
		out->limited_by_value = 0;
	}
}

int capacity_view(const struct capacity_org *org, const struct capacity_campaign *cs, uint32_t n,
		  uint32_t i, uint64_t *agent_work, struct capacity_answer *out)
{
	struct capacity_sums sums;
	int rc;

	if (!out || i >= n)
		return -EINVAL;
	rc = capacity_sum(org, cs, n, agent_work, &sums);
	if (rc)
		return rc;
	capacity_answer(org, cs, &sums, agent_work, i, out);
	return 0;
}

uint32_t capacity_find(const struct capacity_campaign *cs, uint32_t n, const char *id)
{
	for (uint32_t i = 0; cs && id && i < n; i++)
		if (cs[i].id && strcmp(cs[i].id, id) == 0)
			return i;
	return NONE;
}

int capacity_from_gate(const struct fairshare_gate *g, const struct fairshare_system *sys,
		       uint64_t now_ms, const struct capacity_meta *meta, struct capacity_org *org,
		       struct capacity_campaign *cs, uint32_t *agent_running)
{
	if (!g || !sys || !org || (g->n_campaigns && (!meta || !cs)) ||
	    (g->n_agents && !agent_running))
		return -EINVAL;
	for (uint32_t a = 0; a < g->n_agents; a++)
		agent_running[a] = g->agents[a].running;
	*org = (struct capacity_org){
		.system_limit = sys->limit,
		.system_running = sys->running,
		.org_limit = g->limits.org_limit,
		.per_agent = g->limits.per_agent,
		.enforced = g->limits.enforced,
		.floors_valid = fairshare_gate_floors_valid(g, now_ms),
		.direct_waiting = g->direct_waiting,
		.agent_running = agent_running,
		.n_agents = g->n_agents,
	};
	for (uint32_t i = 0; i < g->n_campaigns; i++) {
		const struct fairshare_gate_campaign *gc = &g->campaigns[i];
		bool direct = i == g->direct;

		cs[i] = (struct capacity_campaign){
			.id = meta[i].id,
			.running = gc->running,
			.floor = gc->floor,
			.ceiling = gc->ceiling,
			.agent = gc->agent,
			.state = meta[i].state,
			.active = direct ? g->direct_waiting > 0 : meta[i].active,
			.direct = direct,
		};
	}
	return 0;
}
