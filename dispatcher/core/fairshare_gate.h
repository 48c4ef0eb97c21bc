/* Fair share, incremental face: one organisation's admission decisions under installed floors
 * (SPEC C1, C2, C3, C5; readings R6..R10 and R13 in fairshare.h).
 *
 * The gate keeps the aggregates C5 asks for, so a decision, an acquire and a release cost O(1)
 * in the number of campaigns: org_running, running per campaign and per agent, the sum of batch
 * shortfalls (and per gating agent, R7), the installed floors with their version and expiry, and
 * k, the number of waiting direct dials. Installing floors is O(campaigns), once per refresh.
 * The Redis gate script transcribes these functions; tests/vectors/fairshare.json checks both.
 *
 * Pure: no I/O, no clock (now_ms is an argument), no allocation: the campaign and agent arrays
 * are the caller's. Idempotence per call id is the caller's job (the Redis slot records); these
 * functions only guarantee that no count ever goes negative or past FAIRSHARE_COUNT_MAX.
 *
 * Decision order (the first failing check names the refusal):
 *   1. system   running + 1 <= system limit                       (always, C3)
 *   2. (enforcement off: admitted)
 *   3. organisation  org_running + 1 <= org_limit
 *   4. agent    agent_running + 1 <= per_agent, when the agent gates (C2)
 *   5. campaign running + 1 <= max_concurrent_calls (batch campaigns)
 *   6. fair share, floors installed and not expired:
 *        batch:  org_running + 1 + direct_reserve <= org_limit          else DIRECT_RESERVE
 *                and (running < floor, or org_running + 1 + direct_reserve + S - shortfall(c)
 *                <= org_limit and, at a gating agent, agent_running + 1 + S_a - shortfall(c)
 *                <= per_agent)                                          else FLOORS/AGENT_FLOORS
 *        direct: running(direct) < max(1, floor(direct)), or org_running + 1 + S <= org_limit
 *      floors expired or never installed (R9): first come first served, except that waiting
 *      direct dials keep min(k, 1) lines: a batch dial needs org_running + 1 + min(k, 1) <=
 *      org_limit (else DIRECT_RESERVE); a direct dial is admitted.
 * Every decision taken with enforcement on and floors expired (admitted or refused, at any
 * level) is flagged fcfs and counted in stats.fcfs (C5: "the gate counts such decisions").
 */
#ifndef DSP_CORE_FAIRSHARE_GATE_H
#define DSP_CORE_FAIRSHARE_GATE_H

#include "fairshare.h"

#include <stdbool.h>
#include <stdint.h>

#define FAIRSHARE_NO_CAMPAIGN UINT32_MAX /* no direct pseudo-campaign */

/* The level that refused (SPEC §7: every refusal is counted by it). */
enum fairshare_level {
	FAIRSHARE_LEVEL_NONE = 0,   /* admitted */
	FAIRSHARE_LEVEL_SYSTEM,	    /* the global limit */
	FAIRSHARE_LEVEL_ORG,	    /* org_limit */
	FAIRSHARE_LEVEL_AGENT,	    /* per_agent */
	FAIRSHARE_LEVEL_CAMPAIGN,   /* max_concurrent_calls */
	FAIRSHARE_LEVEL_FAIR_SHARE, /* the free lines are reserved for others */
	FAIRSHARE_LEVEL_COUNT,
};

enum fairshare_reason {
	FAIRSHARE_REASON_NONE = 0,	 /* admitted */
	FAIRSHARE_REASON_FULL,		 /* the level is at (or above) its limit */
	FAIRSHARE_REASON_DIRECT_RESERVE, /* the free lines are held for waiting direct dials */
	FAIRSHARE_REASON_FLOORS,	 /* the free org lines are other campaigns' floors */
	FAIRSHARE_REASON_AGENT_FLOORS, /* the agent's free lines are its other campaigns' floors */
};

struct fairshare_decision {
	bool admitted;
	bool fcfs; /* enforcement on, floors expired or never installed (R9), any outcome */
	enum fairshare_level level;
	enum fairshare_reason reason;
};

/* The system level, shared by every organisation's gate. */
struct fairshare_system {
	uint32_t limit;	  /* global cap */
	uint32_t running; /* live calls, every org */
};

struct fairshare_gate_campaign {
	uint32_t running; /* live calls (maintained by the gate) */
	uint32_t floor;	  /* installed floor (maintained by the gate) */
	uint32_t ceiling; /* max_concurrent_calls, FAIRSHARE_UNLIMITED when unset */
	uint32_t agent;	  /* the campaign's agent index, FAIRSHARE_NO_AGENT for none/direct */
};

struct fairshare_gate_agent {
	uint32_t running;   /* live calls on this agent, direct dials included */
	uint64_t shortfall; /* sum of its batch campaigns' shortfall (used while it gates) */
};

struct fairshare_gate_limits {
	uint32_t org_limit; /* >= 1 */
	uint32_t per_agent; /* FAIRSHARE_UNLIMITED when unset */
	bool enforced;	    /* concurrency_management_enabled */
};

struct fairshare_gate_stats {
	uint64_t admitted;
	uint64_t fcfs;				 /* decisions flagged fcfs, admitted or refused */
	uint64_t refused[FAIRSHARE_LEVEL_COUNT]; /* by refusing level */
};

struct fairshare_gate {
	struct fairshare_gate_limits limits;
	uint32_t org_running;
	uint32_t direct;	   /* index of the direct pseudo-campaign, FAIRSHARE_NO_CAMPAIGN */
	uint32_t direct_waiting;   /* k */
	uint64_t shortfall;	   /* S: sum over batch campaigns of max(0, floor - running) */
	uint64_t floors_version;   /* 0: none installed */
	uint64_t floors_expire_ms; /* floors count until this instant (exclusive) */
	struct fairshare_gate_campaign *campaigns; /* borrowed for the gate's life */
	uint32_t n_campaigns;
	struct fairshare_gate_agent *agents; /* borrowed for the gate's life */
	uint32_t n_agents;
	struct fairshare_gate_stats stats;
};

/* What one call holds: its campaign and its agent. A batch call's agent must be its campaign's
 * agent; a direct dial names its own agent (or FAIRSHARE_NO_AGENT). */
struct fairshare_slot {
	uint32_t campaign;
	uint32_t agent;
};

/* Initialises g over caller-owned arrays, borrowed until the gate is no longer used. The caller
 * sets campaigns[i].ceiling and .agent first; init zeroes every running count, floor and agent
 * aggregate, installs no floors (version 0) and clears the stats. direct is the index of the
 * direct pseudo-campaign or FAIRSHARE_NO_CAMPAIGN. Returns 0 or -EINVAL (NULL arrays with a
 * non-zero size, an agent index out of range, bad limits, a direct campaign with an agent). */
int fairshare_gate_init(struct fairshare_gate *g, const struct fairshare_gate_limits *limits,
			struct fairshare_gate_campaign *campaigns, uint32_t n_campaigns,
			uint32_t direct, struct fairshare_gate_agent *agents, uint32_t n_agents);

/* Replaces the limits (C4) in O(1). Nothing is pre-empted (R13). Returns 0 or -EINVAL. */
int fairshare_gate_set_limits(struct fairshare_gate *g, const struct fairshare_gate_limits *limits);

/* Sets one campaign's max_concurrent_calls. Returns 0 or -EINVAL. */
int fairshare_gate_set_ceiling(struct fairshare_gate *g, uint32_t campaign, uint32_t ceiling);

/* Installs floors[0..n) (n = n_campaigns; floors is read during the call only) under version,
 * valid until now_ms + ttl_ms, and rebuilds the shortfall aggregates. Returns 0, -ESTALE when
 * version is not newer than the installed one (a fenced refresher: nothing changes), or -EINVAL. */
int fairshare_gate_install(struct fairshare_gate *g, uint64_t version, const uint32_t *floors,
			   uint32_t n, uint64_t now_ms, uint64_t ttl_ms);

/* True when installed floors count at now_ms. */
bool fairshare_gate_floors_valid(const struct fairshare_gate *g, uint64_t now_ms);

/* The direct reserve now: min(k, max(1, floor(direct))) with valid floors, min(k, 1) with
 * floors expired or never installed (R9), 0 when k = 0 or the org has no direct campaign. */
uint32_t fairshare_gate_direct_reserve(const struct fairshare_gate *g, uint64_t now_ms);

/* Decides one admission for slot at now_ms without taking it; counts the decision in g->stats.
 * sys is read only. Returns 0 with *d filled, or -EINVAL (bad slot). */
int fairshare_gate_admit(struct fairshare_gate *g, const struct fairshare_system *sys,
			 const struct fairshare_slot *slot, uint64_t now_ms,
			 struct fairshare_decision *d);

/* Takes slot at every level (system, org, agent, campaign) and updates the shortfall
 * aggregates; does not check limits (call after an admission). Returns 0, -EINVAL, or -EOVERFLOW
 * when a count is at FAIRSHARE_COUNT_MAX (nothing changes). */
int fairshare_gate_acquire(struct fairshare_gate *g, struct fairshare_system *sys,
			   const struct fairshare_slot *slot);

/* Gives slot back at every level. Returns 0, -EINVAL, or -ERANGE when a count it would lower
 * is already 0 (nothing changes: counts never go negative). */
int fairshare_gate_release(struct fairshare_gate *g, struct fairshare_system *sys,
			   const struct fairshare_slot *slot);

/* True when refusal d holds for every batch campaign of the organisation alike: the system or
 * the organisation level is full, or the free lines are the direct reserve. The selector's
 * ready callback answers DRR_BLOCKED then (drr.h) and stops asking. False for an admission. */
bool fairshare_gate_blocks_org(const struct fairshare_decision *d);

/* fairshare_gate_admit() and, when admitted, fairshare_gate_acquire(), as one step (what the
 * gate script does atomically). Returns 0 with *d filled, or a negative code from either. */
int fairshare_gate_try(struct fairshare_gate *g, struct fairshare_system *sys,
		       const struct fairshare_slot *slot, uint64_t now_ms,
		       struct fairshare_decision *d);

/* Registers one waiting direct dial (k + 1), or withdraws one (k - 1: admitted or gave up; the
 * gate script does it in the same step as the admission). Return 0, -EOVERFLOW or -ERANGE. */
int fairshare_gate_direct_wait(struct fairshare_gate *g);
int fairshare_gate_direct_unwait(struct fairshare_gate *g);

/* Static names for logs, metrics labels and the vectors file. Never NULL ("unknown"). */
const char *fairshare_level_name(enum fairshare_level level);
const char *fairshare_reason_name(enum fairshare_reason reason);

#endif
