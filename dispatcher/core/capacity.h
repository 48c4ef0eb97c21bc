/* The capacity view (SPEC C12): one campaign's capacity answer — running_now, effective_limit,
 * limited_by, campaign_limit, org_limit, available_now, fair_share {active_campaigns,
 * guaranteed_floor, reserved_for_other_campaigns} — from the floors the gate has INSTALLED and
 * the gate's live counts, not from a fresh recompute (whose rotated floors could differ from
 * what the gate enforces). The API's capacity endpoint and the demo both answer with it, and
 * fairshare_recompute() computes its capacity figures by calling it on its fresh floors, so
 * the C12 formulas are written once, here.
 *
 * Pure: no I/O, no clock, no allocation. The caller passes one organisation's snapshot (what
 * the gate holds: limits, counts, installed floors and their validity at the snapshot's
 * instant) and a scratch array of one uint64_t per agent index.
 *
 * Readings (the allocator's R1..R13 are in fairshare.h; these add what a view of installed
 * floors needs):
 *
 *  V1  Where the inputs come from. Limits, running counts (per campaign, per agent, the
 *      system's), k (waiting direct dials) and the installed floors are the gate's live
 *      state, read in one step (capacity_from_gate() for the C model; the Redis gate's read
 *      call fills the same structs in one round trip). `active` for a batch campaign is the
 *      refresher's view: the active set it computed the installed floors for, stored with them
 *      as their metadata (C5's active depends on claimed, pending and due contacts, which the
 *      refresher reads and the gate does not). The direct
 *      pseudo-campaign is active while k >= 1 — the gate's own live count (R1), since direct
 *      dials register with the gate itself. `state` (running/paused/stopped) is the campaign
 *      row's. A pause therefore shows at once in the paused campaign's own answer (R12) and in
 *      the others' active_campaigns at the next install (the refresher recomputes at once when
 *      the active set changes, C5).
 *  V2  The snapshot lists every campaign with a floor installed or calls running, the direct
 *      pseudo-campaign included (C12: "d runs over every other campaign with floors or running
 *      calls"); org_running is the sum of their running counts (derived, not a second input
 *      that could disagree with them). A campaign the gate holds nothing for (no floor, no
 *      call) is answered by adding it to the snapshot with zero counts, inactive.
 *  V3  With floors valid, every figure follows C12 and R10..R12 literally, computed from the
 *      installed floors: guaranteed_floor = floor(c); reserved_for_other_campaigns = sum of
 *      the floors of the other active campaigns (direct included); effective_limit =
 *      min(ceiling(c), running(c) + free agent slots, running(c) + free system slots,
 *      max(floor(c), org_limit - sum over d != c of max(floor(d), running(d)))), the agent
 *      term only at a gating agent (C2, R3); available_now = how many more calls
 *      fairshare_gate_try() would admit for c now, one after another, across all four levels
 *      (R7, R8, R12; the direct pseudo-campaign has no agent term, each direct dial naming its
 *      own agent); limited_by as R11.
 *  V4  Floors expired or never installed (R9): no reservations, first come first served, the
 *      gate's own reading. Every floor reads as 0, so guaranteed_floor = 0,
 *      reserved_for_other_campaigns = 0 and the pool term is org_limit - sum over d != c of
 *      running(d); available_now is still exactly what the gate admits, which keeps min(k, 1)
 *      lines for waiting direct dials (the only reservation left, shown there and not as
 *      anyone's floor). limited_by never names a fair share then (none is enforced): a binding
 *      pool term reads "the organisation limit of N lines". active_campaigns is still the
 *      installed active set (V1), and `fcfs` says the answer was given without floors.
 *  V5  Enforcement off (R10): effective_limit = running + free system slots, available_now =
 *      free system slots, limited_by "concurrency management is off"; the fair_share figures
 *      are still reported. Paused or stopped (R12): available_now 0, effective_limit
 *      min(formula, running), limited_by paused/stopped; that wins over enforcement off.
 */
#ifndef DSP_CORE_CAPACITY_H
#define DSP_CORE_CAPACITY_H

#include "fairshare.h"
#include "fairshare_gate.h"

#include <stdbool.h>
#include <stdint.h>

/* One organisation as the gate holds it at one instant (V1). */
struct capacity_org {
	uint32_t system_limit;	       /* global cap (C1) */
	uint32_t system_running;       /* live calls at the system level, every org included */
	uint32_t org_limit;	       /* org pool, >= 1 */
	uint32_t per_agent;	       /* per-agent cap, FAIRSHARE_UNLIMITED when unset */
	bool enforced;		       /* concurrency_management_enabled (C3) */
	bool floors_valid;	       /* floors installed and not expired at the snapshot (R9) */
	uint32_t direct_waiting;       /* k, waiting direct dials (0 when the org has no direct) */
	const uint32_t *agent_running; /* live calls per agent index (direct dials included) */
	uint32_t n_agents;	       /* entries in agent_running */
};

/* One campaign of the snapshot (V2). */
struct capacity_campaign {
	const char *id;		    /* campaign id, borrowed; for capacity_find(), else unused */
	uint32_t running;	    /* live calls */
	uint32_t floor;		    /* installed floor (read as 0 when floors are not valid) */
	uint32_t ceiling;	    /* max_concurrent_calls, FAIRSHARE_UNLIMITED when unset */
	uint32_t agent;		    /* agent index or FAIRSHARE_NO_AGENT (ignored for direct) */
	enum fairshare_state state; /* the campaign row's state */
	bool active;		    /* batch: in the installed active set; direct: k >= 1 (V1) */
	bool direct;		    /* the org's direct pseudo-campaign (at most one) */
};

/* Sums over one snapshot, shared by every campaign's answer. */
struct capacity_sums {
	uint32_t active_campaigns; /* active inputs, direct included (R1) */
	uint32_t org_running;	   /* sum of running */
	uint32_t direct_reserve;   /* min(k, max(1, floor(direct))) as read, 0 without k */
	uint32_t floors;	   /* sum of the active inputs' floors, as read */
	uint64_t hold;		   /* sum of max(floor, running), floors as read */
	uint64_t shortfall;	   /* sum of batch shortfalls, max(0, floor - running) */
};

/* The C12 answer for one campaign. */
struct capacity_answer {
	uint32_t running_now;
	uint32_t effective_limit;
	enum fairshare_limit limited_by; /* the binding term; fairshare_limited_by_format() */
	uint32_t limited_by_value;	 /* the number its sentence names */
	uint32_t campaign_limit;	 /* max_concurrent_calls, FAIRSHARE_UNLIMITED (null) */
	uint32_t org_limit;
	uint32_t available_now;
	uint32_t active_campaigns;	       /* fair_share.active_campaigns */
	uint32_t guaranteed_floor;	       /* fair_share.guaranteed_floor */
	uint32_t reserved_for_other_campaigns; /* fair_share.reserved_for_other_campaigns */
	bool fcfs; /* enforcement on and floors not valid: no reservations (V4) */
};

/* Validates the snapshot and sums it. org and cs[0..n) are borrowed for the call; agent_shortfall
 * (org->n_agents entries, the caller's; NULL when there are none) receives, per gating agent,
 * the sum of its batch campaigns' shortfalls, to pass to capacity_answer(). O(n + n_agents).
 * Returns 0, or -EINVAL (NULL arrays, org_limit 0, a count or floor above FAIRSHARE_COUNT_MAX or
 * summing above it, n above FAIRSHARE_CAMPAIGNS_MAX, an agent index out of range, two direct
 * inputs, an unknown state); sums is unspecified on error. */
int capacity_sum(const struct capacity_org *org, const struct capacity_campaign *cs, uint32_t n,
		 uint64_t *agent_shortfall, struct capacity_sums *sums);

/* Writes the answer for cs[i] in O(1), from a snapshot capacity_sum() accepted and its results
 * (sums, agent_shortfall). Nothing is borrowed past the call. */
void capacity_answer(const struct capacity_org *org, const struct capacity_campaign *cs,
		     const struct capacity_sums *sums, const uint64_t *agent_shortfall, uint32_t i,
		     struct capacity_answer *out);

/* capacity_sum() then capacity_answer() for cs[i]: the endpoint's one call. agent_work is
 * scratch as in capacity_sum(). Returns 0, or -EINVAL (as capacity_sum(), or i >= n). */
int capacity_view(const struct capacity_org *org, const struct capacity_campaign *cs, uint32_t n,
		  uint32_t i, uint64_t *agent_work, struct capacity_answer *out);

/* Returns the index of the campaign whose id is id (bytewise), or UINT32_MAX. */
uint32_t capacity_find(const struct capacity_campaign *cs, uint32_t n, const char *id);

/* What the gate model does not hold about a campaign: its id, its row's state and whether the
 * installed floors' active set includes it (V1). */
struct capacity_meta {
	const char *id;		    /* borrowed, copied into the snapshot as a pointer */
	enum fairshare_state state; /* running, paused or stopped */
	bool active;		    /* in the installed active set (ignored for the direct) */
};

/* Fills a snapshot from the gate model g at now_ms: limits, counts and installed floors from g
 * and sys, floors_valid from fairshare_gate_floors_valid(), k from g->direct_waiting, and the
 * direct pseudo-campaign active while k >= 1. meta[0..g->n_campaigns) gives the rest. cs
 * (g->n_campaigns entries) and agent_running (g->n_agents entries) are the caller's;
 * org->agent_running then points into agent_running. Returns 0 or -EINVAL (a NULL argument). */
int capacity_from_gate(const struct fairshare_gate *g, const struct fairshare_system *sys,
		       uint64_t now_ms, const struct capacity_meta *meta, struct capacity_org *org,
		       struct capacity_campaign *cs, uint32_t *agent_running);

#endif
