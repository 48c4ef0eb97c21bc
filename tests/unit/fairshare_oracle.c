/* Brute-force reference for the fair-share allocator; see fairshare_oracle.h. Small states only:
 * clarity over speed, every sum walked from scratch. */
#include "fairshare_oracle.h"

#include <math.h>
#include <string.h>

#define N_MAX ORACLE_MAX_CAMPAIGNS
#define NO    UINT32_MAX

struct st {
	const struct fairshare_org *org;
	const struct fairshare_campaign *in;
	uint32_t n;
	uint32_t cap; /* 0 when agents do not gate */
	bool active[N_MAX];
	uint32_t need[N_MAX];
	int64_t x[N_MAX]; /* fluid in units */
	int64_t D;
	int64_t deficit[N_MAX];
	uint32_t floor[N_MAX];
};

static int64_t gcd64(int64_t a, int64_t b)
{
	while (b) {
		int64_t t = a % b;
		a = b;
		b = t;
	}
	return a;
}

/* The agent cap a campaign's dials are held to together with its siblings, or 0 (C2, R3). */
static uint32_t gating_cap(const struct fairshare_org *org)
{
	if (org->per_agent == FAIRSHARE_UNLIMITED || org->per_agent >= org->org_limit)
		return 0;
	return org->per_agent;
}

static bool in_group(const struct st *s, uint32_t c, uint32_t a)
{
	return s->cap && !s->in[c].direct && s->in[c].agent == a;
}

static void definitions(struct st *s)
{
	for (uint32_t c = 0; c < s->n; c++) {
		const struct fairshare_campaign *k = &s->in[c];
		uint64_t demand = (uint64_t)k->running + k->waiting + k->due;
		uint64_t lim = s->org->org_limit;

		s->active[c] = k->state == FAIRSHARE_RUNNING && k->waiting + k->due > 0;
		if (!k->direct && k->ceiling != FAIRSHARE_UNLIMITED && k->ceiling < lim)
			lim = k->ceiling;
		s->need[c] = s->active[c] ? (uint32_t)(demand < lim ? demand : lim) : 0;
	}
}

/* The constraint's members: the pool (a == NO) holds every campaign, a gating agent its active
 * batch campaigns. */
static bool member(const struct st *s, uint32_t c, uint32_t a)
{
	return a == NO || (in_group(s, c, a) && s->active[c]);
}

static int64_t capacity_units(const struct st *s, uint32_t a)
{
	return (int64_t)(a == NO ? s->org->org_limit : s->cap) * s->D;
}

/* Room left in constraint a and its unfrozen members. */
static int64_t room(const struct st *s, const bool *fr, uint32_t a, int64_t *unfrozen)
{
	int64_t sum = 0;

	*unfrozen = 0;
	for (uint32_t c = 0; c < s->n; c++) {
		if (!member(s, c, a))
			continue;
		sum += s->x[c];
		*unfrozen += !fr[c];
	}
	return capacity_units(s, a) - sum;
}

/* Constraints to walk: the gating agents (if any), then the pool. */
static uint32_t constraint(const struct st *s, uint32_t k)
{
	return k < s->org->n_agents ? k : NO;
}

static int64_t largest_step(const struct st *s, const bool *fr)
{
	int64_t step = INT64_MAX, u, left;

	for (uint32_t c = 0; c < s->n; c++)
		if (!fr[c] && (int64_t)s->need[c] * s->D - s->x[c] < step)
			step = (int64_t)s->need[c] * s->D - s->x[c];
	for (uint32_t k = 0; k <= s->org->n_agents; k++) {
		if (constraint(s, k) != NO && !s->cap)
			continue;
		left = room(s, fr, constraint(s, k), &u);
		if (u && left / u < step)
			step = left / u;
	}
	return step;
}

/* Freezes campaigns at their need and the members of full constraints. Returns -1 when a
 * constraint keeps a room that is not a multiple of its unfrozen members (then the exact level
 * would not be a multiple of 1/D: the oracle's premise would be wrong). */
static int freeze(struct st *s, bool *fr)
{
	int64_t u, left;

	for (uint32_t c = 0; c < s->n; c++)
		if (!fr[c] && s->x[c] == (int64_t)s->need[c] * s->D)
			fr[c] = true;
	for (uint32_t k = 0; k <= s->org->n_agents; k++) {
		uint32_t a = constraint(s, k);

		if (a != NO && !s->cap)
			continue;
		left = room(s, fr, a, &u);
		if (u && left != 0 && left < u)
			return -1;
		for (uint32_t c = 0; c < s->n && u && left == 0; c++)
			if (member(s, c, a))
				fr[c] = true;
	}
	return 0;
}

/* Joint progressive filling in units of 1/D: raise every unfrozen campaign together by the
 * largest step all constraints allow, freeze what became tight, repeat. */
static int fill(struct st *s)
{
	bool fr[N_MAX];

	for (uint32_t c = 0; c < s->n; c++) {
		s->x[c] = 0;
		fr[c] = !s->active[c] || s->need[c] == 0;
	}
	for (int round = 0; round < 4 * N_MAX + 4; round++) {
		int64_t step;
		bool any = false;

		for (uint32_t c = 0; c < s->n; c++)
			any |= !fr[c];
		if (!any)
			return 0;
		step = largest_step(s, fr);
		for (uint32_t c = 0; c < s->n; c++)
			if (!fr[c])
				s->x[c] += step;
		if (freeze(s, fr))
			return -1;
	}
	return -1;
}

/* R5 from its text: the exact rational (n/d - floor) * elapsed_us, split into a whole part and a
 * remainder, then one rounding, half up; clamped. Written apart from the allocator's formula. */
static int64_t accumulated(const struct fairshare_carry *k, uint64_t elapsed_ms)
{
	__extension__ typedef __int128 big;
	big d = k->fluid_den ? k->fluid_den : 1;
	big exact_num = ((big)k->fluid_num - (big)k->floor * d) * (big)(elapsed_ms * 1000);
	big whole = exact_num / d, rem = exact_num % d, v;

	if (rem < 0) { /* make 0 <= rem < d, whole = floor(exact) */
		rem += d;
		whole -= 1;
	}
	if (2 * rem >= d) /* the fraction is at least 1/2: up */
		whole += 1;
	whole = whole > 2 * (big)FAIRSHARE_DEFICIT_MAX ? 2 * (big)FAIRSHARE_DEFICIT_MAX : whole;
	whole = whole < -2 * (big)FAIRSHARE_DEFICIT_MAX ? -2 * (big)FAIRSHARE_DEFICIT_MAX : whole;
	v = k->deficit + whole;
	if (v > FAIRSHARE_DEFICIT_MAX)
		return FAIRSHARE_DEFICIT_MAX;
	if (v < -FAIRSHARE_DEFICIT_MAX)
		return -FAIRSHARE_DEFICIT_MAX;
	return (int64_t)v;
}

/* True when campaign a comes before b in round-up priority: larger deficit, then smaller id. */
static bool before(const struct st *s, uint32_t a, uint32_t b)
{
	int c;

	if (s->deficit[a] != s->deficit[b])
		return s->deficit[a] > s->deficit[b];
	c = strcmp(s->in[a].id ? s->in[a].id : "", s->in[b].id ? s->in[b].id : "");
	return c ? c < 0 : a < b;
}

static bool feasible(const struct st *s, const uint32_t *floors)
{
	for (uint32_t a = 0; a < s->org->n_agents && s->cap; a++) {
		uint64_t sum = 0;

		for (uint32_t c = 0; c < s->n; c++)
			if (in_group(s, c, a) && s->active[c])
				sum += floors[c];
		if (sum > s->cap)
			return false;
	}
	return true;
}

/* Every subset of the fractional campaigns of the right size that keeps the group caps is tried;
 * the best is the lexicographically first in priority order (bit j = j-th in priority). */
static int floors(struct st *s)
{
	uint32_t cand[N_MAX], nc = 0, base = 0, best_mask = 0;
	int64_t sum = 0;
	bool found = false;

	for (uint32_t c = 0; c < s->n; c++) {
		s->floor[c] = (uint32_t)(s->x[c] / s->D);
		base += s->floor[c];
		sum += s->x[c];
		if (s->x[c] % s->D)
			cand[nc++] = c;
	}
	if (sum % s->D)
		return -1;
	for (uint32_t i = 1; i < nc; i++)
		for (uint32_t j = i; j > 0 && before(s, cand[j], cand[j - 1]); j--) {
			uint32_t t = cand[j];
			cand[j] = cand[j - 1];
			cand[j - 1] = t;
		}
	for (uint32_t mask = 0; mask < (1u << nc); mask++) {
		uint32_t f[N_MAX];

		if ((uint32_t)__builtin_popcount(mask) != sum / s->D - base)
			continue;
		memcpy(f, s->floor, sizeof(f));
		for (uint32_t j = 0; j < nc; j++)
			f[cand[j]] += (mask >> (nc - 1 - j)) & 1;
		if (feasible(s, f) && (!found || mask > best_mask)) {
			best_mask = mask;
			found = true;
		}
	}
	if (!found)
		return -1;
	for (uint32_t j = 0; j < nc; j++)
		s->floor[cand[j]] += (best_mask >> (nc - 1 - j)) & 1;
	return 0;
}

static uint32_t org_running(const struct oracle_gate *g)
{
	uint32_t sum = 0;

	for (uint32_t c = 0; c < g->n; c++)
		sum += g->running[c];
	return sum;
}

static uint32_t short_of(const struct oracle_gate *g, uint32_t d)
{
	return g->floor[d] > g->running[d] ? g->floor[d] - g->running[d] : 0;
}

static struct fairshare_decision verdict(enum fairshare_level l, enum fairshare_reason r)
{
	return (struct fairshare_decision){ .admitted = l == FAIRSHARE_LEVEL_NONE,
					    .level = l,
					    .reason = r };
}

static struct fairshare_decision fair_level(const struct oracle_gate *g, uint32_t c, uint64_t O,
					    uint32_t cap)
{
	uint64_t others = 0, agent_others = 0, R = 0;

	for (uint32_t d = 0; d < g->n; d++) {
		if (d == c || d == g->direct)
			continue;
		others += short_of(g, d);
		if (g->agent[d] == g->agent[c] && g->agent[c] != FAIRSHARE_NO_AGENT)
			agent_others += short_of(g, d);
	}
	if (c == g->direct) {
		uint32_t fd = g->floor[c] > 1 ? g->floor[c] : 1;

		if (g->running[c] < fd || O + 1 + others <= g->org_limit)
			return verdict(FAIRSHARE_LEVEL_NONE, FAIRSHARE_REASON_NONE);
		return verdict(FAIRSHARE_LEVEL_FAIR_SHARE, FAIRSHARE_REASON_FLOORS);
	}
	if (g->direct != NO && g->k > 0)
		R = g->k < (g->floor[g->direct] > 1 ? g->floor[g->direct] : 1)
			    ? g->k
			    : (g->floor[g->direct] > 1 ? g->floor[g->direct] : 1);
	if (O + 1 + R > g->org_limit)
		return verdict(FAIRSHARE_LEVEL_FAIR_SHARE, FAIRSHARE_REASON_DIRECT_RESERVE);
	if (g->running[c] < g->floor[c])
		return verdict(FAIRSHARE_LEVEL_NONE, FAIRSHARE_REASON_NONE);
	if (O + 1 + R + others > g->org_limit)
		return verdict(FAIRSHARE_LEVEL_FAIR_SHARE, FAIRSHARE_REASON_FLOORS);
	if (cap && g->agent[c] != FAIRSHARE_NO_AGENT &&
	    (uint64_t)g->agent_running[g->agent[c]] + 1 + agent_others > cap)
		return verdict(FAIRSHARE_LEVEL_FAIR_SHARE, FAIRSHARE_REASON_AGENT_FLOORS);
	return verdict(FAIRSHARE_LEVEL_NONE, FAIRSHARE_REASON_NONE);
}

/* The org, agent and campaign levels (C1, C2, C7), in the documented order. */
static struct fairshare_decision limited_levels(const struct oracle_gate *g, uint32_t c,
						uint32_t agent, uint64_t O, uint32_t cap)
{
	if (O + 1 > g->org_limit)
		return verdict(FAIRSHARE_LEVEL_ORG, FAIRSHARE_REASON_FULL);
	if (cap && agent != FAIRSHARE_NO_AGENT && g->agent_running[agent] + 1 > cap)
		return verdict(FAIRSHARE_LEVEL_AGENT, FAIRSHARE_REASON_FULL);
	if (c != g->direct && g->ceiling[c] != FAIRSHARE_UNLIMITED &&
	    (uint64_t)g->running[c] + 1 > g->ceiling[c])
		return verdict(FAIRSHARE_LEVEL_CAMPAIGN, FAIRSHARE_REASON_FULL);
	return verdict(FAIRSHARE_LEVEL_NONE, FAIRSHARE_REASON_NONE);
}

/* Every level has room (C1, C2, C3, C7), read as one condition. */
static bool levels_have_room(const struct oracle_gate *g, uint32_t c, uint32_t agent, uint32_t cap)
{
	if (g->system_running >= g->system_limit)
		return false;
	if (!g->enforced)
		return true;
	return org_running(g) < g->org_limit &&
	       (!cap || agent == FAIRSHARE_NO_AGENT || g->agent_running[agent] < cap) &&
	       (c == g->direct || g->ceiling[c] == FAIRSHARE_UNLIMITED ||
		g->running[c] < g->ceiling[c]);
}

/* SPEC C5's admission sentence (with R7, R8, R9) as one boolean, written apart from the
 * decision order below: the two must agree on every admission. */
static bool c5_admits(const struct oracle_gate *g, uint32_t c, uint32_t agent)
{
	uint32_t cap = (g->per_agent != FAIRSHARE_UNLIMITED && g->per_agent < g->org_limit)
			       ? g->per_agent
			       : 0;
	uint64_t O = org_running(g), others = 0, all = 0, agent_others = 0, reserve = 0;
	uint64_t fd = g->direct != NO && g->floors_valid && g->floor[g->direct] > 1
			      ? g->floor[g->direct]
			      : 1;

	if (!levels_have_room(g, c, agent, cap) || !g->enforced)
		return levels_have_room(g, c, agent, cap);
	for (uint32_t d = 0; d < g->n; d++) {
		uint64_t sh = d == g->direct || !g->floors_valid ? 0 : short_of(g, d);

		all += sh;
		others += d == c ? 0 : sh;
		agent_others +=
			d != c && g->agent[c] != FAIRSHARE_NO_AGENT && g->agent[d] == g->agent[c]
				? sh
				: 0;
	}
	if (g->direct != NO && g->k > 0)
		reserve = g->k < fd ? g->k : fd;
	if (c == g->direct) /* R8: no reserve against itself */
		return !g->floors_valid || g->running[c] < fd || O + 1 + all <= g->org_limit;
	return O + 1 + reserve <= g->org_limit &&
	       (!g->floors_valid || g->running[c] < g->floor[c] ||
		(O + 1 + reserve + others <= g->org_limit &&
		 (!cap || g->agent[c] == FAIRSHARE_NO_AGENT ||
		  g->agent_running[g->agent[c]] + 1 + agent_others <= cap)));
}

/* The decision with its level and reason: the first failing check in fairshare_gate.h's order. */
static struct fairshare_decision decide(const struct oracle_gate *g, uint32_t c, uint32_t agent)
{
	uint64_t O = org_running(g);
	uint32_t cap = (g->per_agent != FAIRSHARE_UNLIMITED && g->per_agent < g->org_limit)
			       ? g->per_agent
			       : 0;
	struct fairshare_decision d;

	if ((uint64_t)g->system_running + 1 > g->system_limit && !g->enforced)
		return verdict(FAIRSHARE_LEVEL_SYSTEM, FAIRSHARE_REASON_FULL);
	if (!g->enforced)
		return verdict(FAIRSHARE_LEVEL_NONE, FAIRSHARE_REASON_NONE);
	if ((uint64_t)g->system_running + 1 > g->system_limit)
		d = verdict(FAIRSHARE_LEVEL_SYSTEM, FAIRSHARE_REASON_FULL);
	else
		d = limited_levels(g, c, agent, O, cap);
	if (!g->floors_valid) {
		/* R9: first come first served; waiting direct dials keep min(k, 1) lines. */
		if (d.admitted && c != g->direct && g->direct != NO && g->k > 0 &&
		    O + 2 > g->org_limit)
			d = verdict(FAIRSHARE_LEVEL_FAIR_SHARE, FAIRSHARE_REASON_DIRECT_RESERVE);
		d.fcfs = true;
		return d;
	}
	return d.admitted ? fair_level(g, c, O, cap) : d;
}

struct fairshare_decision oracle_admit(const struct oracle_gate *g, uint32_t c, uint32_t agent)
{
	struct fairshare_decision d = decide(g, c, agent);

	if (d.admitted != c5_admits(g, c, agent)) /* the oracle disagrees with itself */
		d.level = FAIRSHARE_LEVEL_COUNT;
	return d;
}

static void gate_of(const struct st *s, struct oracle_gate *g)
{
	*g = (struct oracle_gate){
		.system_limit = s->org->system_limit,
		.system_running = s->org->system_running,
		.org_limit = s->org->org_limit,
		.per_agent = s->org->per_agent,
		.enforced = s->org->enforced,
		.floors_valid = true,
		.n = s->n,
		.direct = NO,
		.n_agents = s->org->n_agents,
	};
	for (uint32_t a = 0; a < s->org->n_agents; a++)
		g->agent_running[a] = s->org->agent_running[a];
	for (uint32_t c = 0; c < s->n; c++) {
		g->running[c] = s->in[c].running;
		g->floor[c] = s->floor[c];
		g->ceiling[c] = s->in[c].ceiling;
		g->agent[c] = s->in[c].direct ? FAIRSHARE_NO_AGENT : s->in[c].agent;
		if (s->in[c].direct) {
			g->direct = c;
			g->k = s->in[c].waiting;
		}
	}
}

/* Admits dials of c one at a time until C5's admission (c5_admits) refuses. */
static uint32_t count_admissions(const struct st *s, uint32_t c)
{
	struct oracle_gate g;
	uint32_t n = 0;

	gate_of(s, &g);
	while (n < 100000 && c5_admits(&g, c, g.agent[c])) {
		n++;
		g.running[c]++;
		g.system_running++;
		if (g.agent[c] != FAIRSHARE_NO_AGENT)
			g.agent_running[g.agent[c]]++;
	}
	return n;
}

/* C12's effective_limit terms, narrowest level first (the order R11 breaks ties in). */
enum { T_CEILING, T_AGENT, T_POOL, T_SYSTEM, T_COUNT };

struct c12 {
	int64_t v[T_COUNT];
	bool present[T_COUNT];
};

/* Each term of C12's definition, written from its text. */
static void c12_terms(const struct st *s, uint32_t c, int64_t sys_room, struct c12 *t)
{
	const struct fairshare_campaign *k = &s->in[c];
	int64_t held_by_others = 0;

	for (uint32_t d = 0; d < s->n; d++)
		if (d != c)
			held_by_others +=
				s->floor[d] > s->in[d].running ? s->floor[d] : s->in[d].running;
	*t = (struct c12){ 0 };
	t->present[T_CEILING] = !k->direct && k->ceiling != FAIRSHARE_UNLIMITED;
	t->v[T_CEILING] = k->ceiling;
	t->present[T_AGENT] = s->cap && !k->direct && k->agent != FAIRSHARE_NO_AGENT;
	if (t->present[T_AGENT]) {
		int64_t free = (int64_t)s->cap - s->org->agent_running[k->agent];

		t->v[T_AGENT] = k->running + (free > 0 ? free : 0);
	}
	t->present[T_POOL] = true;
	t->v[T_POOL] = (int64_t)s->org->org_limit - held_by_others;
	if (t->v[T_POOL] < s->floor[c])
		t->v[T_POOL] = s->floor[c];
	t->present[T_SYSTEM] = true;
	t->v[T_SYSTEM] = k->running + sys_room;
}

/* effective_limit = the plain minimum of the terms; limited_by = the narrowest term equal to it
 * (R11); the pool is a fair share only with another holder and two active campaigns. */
static void c12_effective(const struct st *s, uint32_t c, uint32_t active, int64_t sys_room,
			  struct oracle_result *o, int64_t *best)
{
	struct c12 t;
	int64_t held = 0;
	int bind = T_SYSTEM;

	c12_terms(s, c, sys_room, &t);
	*best = INT64_MAX;
	for (int i = 0; i < T_COUNT; i++)
		if (t.present[i] && t.v[i] < *best)
			*best = t.v[i];
	for (int i = T_COUNT - 1; i >= 0; i--)
		if (t.present[i] && t.v[i] == *best)
			bind = i;
	for (uint32_t d = 0; d < s->n; d++)
		held += d != c && (s->floor[d] || s->in[d].running);
	o->limited_by_value = 0;
	if (bind == T_CEILING) {
		o->limited_by = FAIRSHARE_BY_CEILING;
		o->limited_by_value = s->in[c].ceiling;
	} else if (bind == T_AGENT) {
		o->limited_by = FAIRSHARE_BY_AGENT;
		o->limited_by_value = s->cap;
	} else if (bind == T_POOL && held && active >= 2) {
		o->limited_by = FAIRSHARE_BY_FAIR_SHARE;
		o->limited_by_value = active;
	} else if (bind == T_POOL) {
		o->limited_by = FAIRSHARE_BY_ORG;
		o->limited_by_value = s->org->org_limit;
	} else {
		o->limited_by = FAIRSHARE_BY_SYSTEM;
		o->limited_by_value = s->org->system_limit;
	}
}

static void capacity(const struct st *s, uint32_t c, uint32_t active, struct oracle_result *o)
{
	const struct fairshare_campaign *k = &s->in[c];
	int64_t sys_room = (int64_t)s->org->system_limit - s->org->system_running;
	int64_t best;

	sys_room = sys_room > 0 ? sys_room : 0;
	if (!s->org->enforced) {
		best = k->running + sys_room;
		o->limited_by = FAIRSHARE_BY_ENFORCEMENT_OFF;
		o->limited_by_value = 0;
		o->available_now = (uint32_t)sys_room;
	} else {
		c12_effective(s, c, active, sys_room, o, &best);
		o->available_now = count_admissions(s, c);
	}
	if (k->state != FAIRSHARE_RUNNING) {
		o->available_now = 0;
		best = best < k->running ? best : k->running;
		o->limited_by =
			k->state == FAIRSHARE_PAUSED ? FAIRSHARE_BY_PAUSED : FAIRSHARE_BY_STOPPED;
		o->limited_by_value = 0;
	}
	o->effective_limit = (uint32_t)best;
}

/* R5's grace: an inactive campaign keeps its deficit while its idle time, this recompute's
 * elapsed time included, is at most FAIRSHARE_DEFICIT_GRACE_MS. */
static int64_t kept_while_idle(const struct st *s, uint32_t c)
{
	double idle = (double)s->in[c].carry.idle_ms + (double)s->org->elapsed_ms;

	return idle <= FAIRSHARE_DEFICIT_GRACE_MS ? s->deficit[c] : 0;
}

static void results(const struct st *s, struct oracle_result *out, struct oracle_summary *sum)
{
	uint32_t active = 0, total = 0, direct = NO;
	uint64_t shortfall = 0;

	for (uint32_t c = 0; c < s->n; c++) {
		active += s->active[c];
		total += s->floor[c];
		if (s->in[c].direct)
			direct = c;
		else if (s->floor[c] > s->in[c].running)
			shortfall += s->floor[c] - s->in[c].running;
	}
	for (uint32_t c = 0; c < s->n; c++) {
		struct oracle_result *o = &out[c];

		*o = (struct oracle_result){ .active = s->active[c],
					     .need = s->need[c],
					     .fluid_units = s->x[c],
					     .units_per_line = s->D,
					     .floor = s->floor[c] };
		o->deficit = s->active[c] ? s->deficit[c] : kept_while_idle(s, c);
		o->shortfall = s->floor[c] > s->in[c].running ? s->floor[c] - s->in[c].running : 0;
		o->reserved = total - s->floor[c];
		capacity(s, c, active, o);
	}
	*sum = (struct oracle_summary){ .active = active,
					.floors_total = total,
					.shortfall_total = shortfall };
	if (direct != NO && s->in[direct].waiting > 0) {
		uint32_t fd = s->floor[direct] > 1 ? s->floor[direct] : 1;

		sum->direct_reserve = s->in[direct].waiting < fd ? s->in[direct].waiting : fd;
	}
}

int oracle_recompute(const struct fairshare_org *org, const struct fairshare_campaign *in,
		     uint32_t n, struct oracle_result *out, struct oracle_summary *summary)
{
	struct st s = { .org = org, .in = in, .n = n, .D = 1 };
	uint32_t active = 0;

	if (n > N_MAX || org->n_agents > ORACLE_MAX_AGENTS)
		return -1;
	s.cap = gating_cap(org);
	definitions(&s);
	for (uint32_t c = 0; c < n; c++)
		active += s.active[c];
	for (int64_t m = 2; m <= active; m++)
		s.D = s.D / gcd64(s.D, m) * m;
	for (uint32_t c = 0; c < n; c++)
		s.deficit[c] = accumulated(&in[c].carry, org->elapsed_ms);
	if (fill(&s) || floors(&s))
		return -1;
	results(&s, out, summary);
	return 0;
}

/* Max-min characterisation: feasible, and every campaign below its need has a saturated
 * constraint (the pool, or its gating agent) on which no member has more than it. */
const char *oracle_check_maxmin(const struct fairshare_org *org,
				const struct fairshare_campaign *in, uint32_t n, const double *x)
{
	struct st s = { .org = org, .in = in, .n = n };
	const double eps = 1e-9;
	double total = 0, group[ORACLE_MAX_AGENTS] = { 0 }, pool_max = 0;
	double group_max[ORACLE_MAX_AGENTS] = { 0 };

	if (n > N_MAX || org->n_agents > ORACLE_MAX_AGENTS)
		return "state too large";
	s.cap = gating_cap(org);
	definitions(&s);
	for (uint32_t c = 0; c < n; c++) {
		if (x[c] < -eps || x[c] > s.need[c] + eps)
			return "fluid share outside [0, need]";
		total += x[c];
		pool_max = x[c] > pool_max ? x[c] : pool_max;
		if (s.cap && !in[c].direct && in[c].agent != FAIRSHARE_NO_AGENT && s.active[c]) {
			group[in[c].agent] += x[c];
			if (x[c] > group_max[in[c].agent])
				group_max[in[c].agent] = x[c];
		}
	}
	if (total > org->org_limit + eps)
		return "fluid shares exceed the org limit";
	for (uint32_t a = 0; a < org->n_agents; a++)
		if (s.cap && group[a] > s.cap + eps)
			return "fluid shares exceed an agent cap";
	for (uint32_t c = 0; c < n; c++) {
		bool pool_tight = total >= org->org_limit - eps && x[c] >= pool_max - eps;
		bool group_tight = false;

		if (!s.active[c] || x[c] >= s.need[c] - eps)
			continue;
		if (s.cap && !in[c].direct && in[c].agent != FAIRSHARE_NO_AGENT)
			group_tight = group[in[c].agent] >= s.cap - eps &&
				      x[c] >= group_max[in[c].agent] - eps;
		if (!pool_tight && !group_tight)
			return "a campaign below its need has no bottleneck";
	}
	return NULL;
}
