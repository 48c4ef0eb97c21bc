/* Fair share, incremental face: O(1) admissions, acquires and releases under installed floors.
 * See fairshare_gate.h for the decision order and fairshare.h for the SPEC readings. */
#include "fairshare_gate.h"

#include <errno.h>
#include <stddef.h>

static bool limit_ok(uint32_t v)
{
	return v == FAIRSHARE_UNLIMITED || v <= FAIRSHARE_COUNT_MAX;
}

static bool limits_ok(const struct fairshare_gate_limits *l)
{
	return l && l->org_limit >= 1 && l->org_limit <= FAIRSHARE_COUNT_MAX &&
	       limit_ok(l->per_agent);
}

static bool campaigns_ok(struct fairshare_gate_campaign *campaigns, uint32_t n, uint32_t direct,
			 uint32_t n_agents)
{
	if (direct != FAIRSHARE_NO_CAMPAIGN &&
	    (direct >= n || campaigns[direct].agent != FAIRSHARE_NO_AGENT))
		return false;
	for (uint32_t i = 0; i < n; i++) {
		if (campaigns[i].agent != FAIRSHARE_NO_AGENT && campaigns[i].agent >= n_agents)
			return false;
		if (!limit_ok(campaigns[i].ceiling))
			return false;
	}
	return true;
}

int fairshare_gate_init(struct fairshare_gate *g, const struct fairshare_gate_limits *limits,
			struct fairshare_gate_campaign *campaigns, uint32_t n_campaigns,
			uint32_t direct, struct fairshare_gate_agent *agents, uint32_t n_agents)
{
	if (!g || !limits_ok(limits) || (n_campaigns && !campaigns) || (n_agents && !agents) ||
	    n_campaigns > FAIRSHARE_CAMPAIGNS_MAX || n_agents > FAIRSHARE_CAMPAIGNS_MAX)
		return -EINVAL;
	if (!campaigns_ok(campaigns, n_campaigns, direct, n_agents))
		return -EINVAL;
	*g = (struct fairshare_gate){
		.limits = *limits,
		.direct = direct,
		.campaigns = campaigns,
		.n_campaigns = n_campaigns,
		.agents = agents,
		.n_agents = n_agents,
	};
	for (uint32_t i = 0; i < n_campaigns; i++) {
		campaigns[i].running = 0;
		campaigns[i].floor = 0;
	}
	for (uint32_t a = 0; a < n_agents; a++)
		agents[a] = (struct fairshare_gate_agent){ 0 };
	return 0;
}

int fairshare_gate_set_limits(struct fairshare_gate *g, const struct fairshare_gate_limits *limits)
{
	if (!g || !limits_ok(limits))
		return -EINVAL;
	g->limits = *limits;
	return 0;
}

int fairshare_gate_set_ceiling(struct fairshare_gate *g, uint32_t campaign, uint32_t ceiling)
{
	if (!g || campaign >= g->n_campaigns || !limit_ok(ceiling))
		return -EINVAL;
	g->campaigns[campaign].ceiling = ceiling;
	return 0;
}

static uint32_t shortfall_of(const struct fairshare_gate_campaign *c)
{
	return c->floor > c->running ? c->floor - c->running : 0;
}

int fairshare_gate_install(struct fairshare_gate *g, uint64_t version, const uint32_t *floors,
			   uint32_t n, uint64_t now_ms, uint64_t ttl_ms)
{
	if (!g || n != g->n_campaigns || (n && !floors))
		return -EINVAL;
	if (version <= g->floors_version)
		return -ESTALE;
	for (uint32_t i = 0; i < n; i++)
		if (floors[i] > FAIRSHARE_COUNT_MAX)
			return -EINVAL;
	g->shortfall = 0;
	for (uint32_t a = 0; a < g->n_agents; a++)
		g->agents[a].shortfall = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct fairshare_gate_campaign *c = &g->campaigns[i];

		c->floor = floors[i];
		if (i == g->direct)
			continue;
		g->shortfall += shortfall_of(c);
		if (c->agent != FAIRSHARE_NO_AGENT)
			g->agents[c->agent].shortfall += shortfall_of(c);
	}
	g->floors_version = version;
	g->floors_expire_ms = ttl_ms > UINT64_MAX - now_ms ? UINT64_MAX : now_ms + ttl_ms;
	return 0;
}

bool fairshare_gate_floors_valid(const struct fairshare_gate *g, uint64_t now_ms)
{
	return g->floors_version != 0 && now_ms < g->floors_expire_ms;
}

uint32_t fairshare_gate_direct_reserve(const struct fairshare_gate *g, uint64_t now_ms)
{
	uint32_t fd = 1; /* floors expired: floor(direct) counts as 0, so max(1, 0) (R9) */

	if (g->direct == FAIRSHARE_NO_CAMPAIGN || g->direct_waiting == 0)
		return 0;
	if (fairshare_gate_floors_valid(g, now_ms) && g->campaigns[g->direct].floor > 1)
		fd = g->campaigns[g->direct].floor;
	return g->direct_waiting < fd ? g->direct_waiting : fd;
}

static uint32_t agent_cap(const struct fairshare_gate *g)
{
	const struct fairshare_gate_limits *l = &g->limits;

	if (l->per_agent != FAIRSHARE_UNLIMITED && l->per_agent < l->org_limit)
		return l->per_agent;
	return FAIRSHARE_UNLIMITED;
}

static bool slot_ok(const struct fairshare_gate *g, const struct fairshare_slot *s)
{
	if (s->campaign >= g->n_campaigns)
		return false;
	if (s->campaign == g->direct)
		return s->agent == FAIRSHARE_NO_AGENT || s->agent < g->n_agents;
	return s->agent == g->campaigns[s->campaign].agent;
}

static void refuse(struct fairshare_decision *d, enum fairshare_level level,
		   enum fairshare_reason reason)
{
	d->admitted = false;
	d->level = level;
	d->reason = reason;
}

/* Checks 1..5 of the decision order. Returns true when a level refused (d says which). */
static bool level_full(const struct fairshare_gate *g, const struct fairshare_system *sys,
		       const struct fairshare_slot *s, struct fairshare_decision *d)
{
	const struct fairshare_gate_campaign *c = &g->campaigns[s->campaign];
	uint32_t cap = agent_cap(g);

	if ((uint64_t)sys->running + 1 > sys->limit)
		refuse(d, FAIRSHARE_LEVEL_SYSTEM, FAIRSHARE_REASON_FULL);
	else if (!g->limits.enforced)
		return false;
	else if ((uint64_t)g->org_running + 1 > g->limits.org_limit)
		refuse(d, FAIRSHARE_LEVEL_ORG, FAIRSHARE_REASON_FULL);
	else if (cap != FAIRSHARE_UNLIMITED && s->agent != FAIRSHARE_NO_AGENT &&
		 (uint64_t)g->agents[s->agent].running + 1 > cap)
		refuse(d, FAIRSHARE_LEVEL_AGENT, FAIRSHARE_REASON_FULL);
	else if (s->campaign != g->direct && c->ceiling != FAIRSHARE_UNLIMITED &&
		 (uint64_t)c->running + 1 > c->ceiling)
		refuse(d, FAIRSHARE_LEVEL_CAMPAIGN, FAIRSHARE_REASON_FULL);
	else
		return false;
	return true;
}

/* Check 6: the fair-share level (C5, R6..R9). */
static void fair_share(const struct fairshare_gate *g, const struct fairshare_slot *s,
		       uint64_t now_ms, struct fairshare_decision *d)
{
	const struct fairshare_gate_campaign *c = &g->campaigns[s->campaign];
	uint64_t L = g->limits.org_limit, O1 = (uint64_t)g->org_running + 1, R;
	uint32_t cap = agent_cap(g);

	if (!fairshare_gate_floors_valid(g, now_ms)) {
		/* First come first served, but waiting direct dials keep one line (R9). */
		if (s->campaign != g->direct && O1 + fairshare_gate_direct_reserve(g, now_ms) > L)
			refuse(d, FAIRSHARE_LEVEL_FAIR_SHARE, FAIRSHARE_REASON_DIRECT_RESERVE);
		return;
	}
	if (s->campaign == g->direct) {
		if (c->running < (c->floor > 1 ? c->floor : 1) || O1 + g->shortfall <= L)
			return;
		refuse(d, FAIRSHARE_LEVEL_FAIR_SHARE, FAIRSHARE_REASON_FLOORS);
		return;
	}
	R = fairshare_gate_direct_reserve(g, now_ms);
	if (O1 + R > L) {
		refuse(d, FAIRSHARE_LEVEL_FAIR_SHARE, FAIRSHARE_REASON_DIRECT_RESERVE);
		return;
	}
	if (c->running < c->floor)
		return;
	/* c is at or above its floor, so its own shortfall is 0 and S is the others' sum. */
	if (O1 + R + g->shortfall > L) {
		refuse(d, FAIRSHARE_LEVEL_FAIR_SHARE, FAIRSHARE_REASON_FLOORS);
		return;
	}
	if (cap != FAIRSHARE_UNLIMITED && c->agent != FAIRSHARE_NO_AGENT &&
	    (uint64_t)g->agents[c->agent].running + 1 + g->agents[c->agent].shortfall > cap)
		refuse(d, FAIRSHARE_LEVEL_FAIR_SHARE, FAIRSHARE_REASON_AGENT_FLOORS);
}

int fairshare_gate_admit(struct fairshare_gate *g, const struct fairshare_system *sys,
			 const struct fairshare_slot *slot, uint64_t now_ms,
			 struct fairshare_decision *d)
{
	if (!g || !sys || !slot || !d || !slot_ok(g, slot))
		return -EINVAL;
	*d = (struct fairshare_decision){ .admitted = true };
	d->fcfs = g->limits.enforced && !fairshare_gate_floors_valid(g, now_ms);
	if (!level_full(g, sys, slot, d) && g->limits.enforced)
		fair_share(g, slot, now_ms, d);
	g->stats.fcfs += d->fcfs;
	if (d->admitted)
		g->stats.admitted++;
	else
		g->stats.refused[d->level]++;
	return 0;
}

bool fairshare_gate_blocks_org(const struct fairshare_decision *d)
{
	return !d->admitted &&
	       (d->level == FAIRSHARE_LEVEL_SYSTEM || d->level == FAIRSHARE_LEVEL_ORG ||
		d->reason == FAIRSHARE_REASON_DIRECT_RESERVE);
}

int fairshare_gate_acquire(struct fairshare_gate *g, struct fairshare_system *sys,
			   const struct fairshare_slot *slot)
{
	struct fairshare_gate_campaign *c;
	struct fairshare_gate_agent *ag;

	if (!g || !sys || !slot || !slot_ok(g, slot))
		return -EINVAL;
	c = &g->campaigns[slot->campaign];
	ag = slot->agent != FAIRSHARE_NO_AGENT ? &g->agents[slot->agent] : NULL;
	if (sys->running >= FAIRSHARE_COUNT_MAX || g->org_running >= FAIRSHARE_COUNT_MAX ||
	    c->running >= FAIRSHARE_COUNT_MAX || (ag && ag->running >= FAIRSHARE_COUNT_MAX))
		return -EOVERFLOW;
	if (slot->campaign != g->direct && c->running < c->floor) {
		g->shortfall--;
		if (c->agent != FAIRSHARE_NO_AGENT)
			g->agents[c->agent].shortfall--;
	}
	c->running++;
	g->org_running++;
	sys->running++;
	if (ag)
		ag->running++;
	return 0;
}

int fairshare_gate_release(struct fairshare_gate *g, struct fairshare_system *sys,
			   const struct fairshare_slot *slot)
{
	struct fairshare_gate_campaign *c;
	struct fairshare_gate_agent *ag;

	if (!g || !sys || !slot || !slot_ok(g, slot))
		return -EINVAL;
	c = &g->campaigns[slot->campaign];
	ag = slot->agent != FAIRSHARE_NO_AGENT ? &g->agents[slot->agent] : NULL;
	if (sys->running == 0 || g->org_running == 0 || c->running == 0 || (ag && ag->running == 0))
		return -ERANGE;
	c->running--;
	g->org_running--;
	sys->running--;
	if (ag)
		ag->running--;
	if (slot->campaign != g->direct && c->running < c->floor) {
		g->shortfall++;
		if (c->agent != FAIRSHARE_NO_AGENT)
			g->agents[c->agent].shortfall++;
	}
	return 0;
}

int fairshare_gate_try(struct fairshare_gate *g, struct fairshare_system *sys,
		       const struct fairshare_slot *slot, uint64_t now_ms,
		       struct fairshare_decision *d)
{
	int rc = fairshare_gate_admit(g, sys, slot, now_ms, d);

	if (rc || !d->admitted)
		return rc;
	rc = fairshare_gate_acquire(g, sys, slot);
	if (rc)
		d->admitted = false;
	return rc;
}

int fairshare_gate_direct_wait(struct fairshare_gate *g)
{
	if (g->direct_waiting >= FAIRSHARE_COUNT_MAX)
		return -EOVERFLOW;
	g->direct_waiting++;
	return 0;
}

int fairshare_gate_direct_unwait(struct fairshare_gate *g)
{
	if (g->direct_waiting == 0)
		return -ERANGE;
	g->direct_waiting--;
	return 0;
}

const char *fairshare_level_name(enum fairshare_level level)
{
	static const char *const names[] = {
		[FAIRSHARE_LEVEL_NONE] = "none",
		[FAIRSHARE_LEVEL_SYSTEM] = "system",
		[FAIRSHARE_LEVEL_ORG] = "organisation",
		[FAIRSHARE_LEVEL_AGENT] = "agent",
		[FAIRSHARE_LEVEL_CAMPAIGN] = "campaign",
		[FAIRSHARE_LEVEL_FAIR_SHARE] = "fair_share",
	};

	if ((unsigned)level < FAIRSHARE_LEVEL_COUNT)
		return names[level];
	return "unknown";
}

const char *fairshare_reason_name(enum fairshare_reason reason)
{
	static const char *const names[] = {
		[FAIRSHARE_REASON_NONE] = "none",
		[FAIRSHARE_REASON_FULL] = "full",
		[FAIRSHARE_REASON_DIRECT_RESERVE] = "direct_reserve",
		[FAIRSHARE_REASON_FLOORS] = "floors",
		[FAIRSHARE_REASON_AGENT_FLOORS] = "agent_floors",
	};

	if ((unsigned)reason < sizeof(names) / sizeof(names[0]))
		return names[reason];
	return "unknown";
}
