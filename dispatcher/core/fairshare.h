/* Fair share of an organisation's lines: the allocator's recompute face (SPEC C1, C2, C3, C5,
 * C7, C12). The incremental face, used by the gate for each admission, is fairshare_gate.h.
 *
 * Pure: no I/O, no clock, no allocation. The caller passes the limits, the live counts and the
 * time elapsed since the previous recompute, plus a work area it owns (fairshare_work_size()).
 * fairshare_recompute() returns, per campaign, the fluid share, the integer floor, the new carried
 * deficit and the capacity figures of C12 (effective_limit, available_now,
 * reserved_for_other_campaigns, limited_by). Those figures are the capacity view's (capacity.h),
 * which the recompute calls on its fresh floors read as installed: the endpoint answers from the
 * floors the gate has installed, with the same formulas.
 *
 * Readings of the SPEC written down here (where it is silent or ambiguous):
 *
 *  R1  active(c): state running (not paused, not stopped) and waiting + due >= 1. The direct
 *      pseudo-campaign is active while k >= 1 direct dials wait (its `waiting` is k, `due` 0).
 *      active_campaigns counts every active member of the pool, the direct one included (a
 *      waiting direct dial competes for the pool like a campaign; R11 uses the same count).
 *  R2  need(c) = min(running + waiting + due, ceiling, org_limit) when active, else 0. The direct
 *      pseudo-campaign has no ceiling and no agent group (each direct dial names its own agent;
 *      the agent level is checked per dial by the gate).
 *  R3  An agent is *gating* when per_agent is set and below org_limit (C2). The campaigns of one
 *      gating agent have their needs capped together: their fluid shares sum to at most per_agent.
 *      The fluid share is the max-min fair allocation under the org pool and these group caps,
 *      computed exactly as rationals (two water-fillings: within each group, then the pool).
 *  R4  Floors sum to min(org_limit, sum of group-capped needs), which is the exact (integer) sum
 *      of the fluid shares. A campaign's floor is its fluid share rounded down, or up for the
 *      campaigns with the largest accumulated deficit (ties: smaller id, bytewise); a campaign
 *      whose gating agent has no room left is passed over, so floors never exceed a group cap.
 *  R5  Deficit: at a recompute after elapsed_ms, D = D_carried + step, step = (fluid_prev -
 *      floor_prev) * elapsed, where fluid_prev/floor_prev are those installed at the previous
 *      recompute; D is the integral of (fluid - floor) dt up to now. It ranks the round-ups and
 *      is stored in whole line-microseconds. fluid_prev is carried as an exact fraction n/d, so
 *      step = (n - floor_prev * d) * elapsed_us / d is a rational computed in integers, and the
 *      one rounding rule is round half up: step = floor((2 * a * elapsed_us + d) / (2 * d)),
 *      a = n - floor_prev * d, floor division (so 312.5 -> 313, -687.5 -> -687). Each step is
 *      within 1/2 line-microsecond of the exact integral, so deficits of one recompute sum to 0
 *      within n/2 µs rather than exactly. D is clamped to +-FAIRSHARE_DEFICIT_MAX. A campaign
 *      that leaves the active set keeps its deficit, frozen (its carried fluid share and floor
 *      become 0, so nothing accrues), for FAIRSHARE_DEFICIT_GRACE_MS counted in the elapsed
 *      times of the recomputes that find it inactive; past that it forgets it. So a backlog that
 *      empties for a moment does not lose (or escape) its place in the rotation.
 *  R6  shortfall(c) = max(0, floor(c) - running(c)) is summed over batch campaigns only. The
 *      direct pseudo-campaign's reservation is direct_reserve = min(k, max(1, floor(direct))),
 *      which is bounded by k so no line is held for direct dials that no longer wait.
 *  R7  Borrowing is checked at each gating agent too: a batch dial of c on gating agent a that is
 *      not under its floor also needs agent_running(a) + 1 + sum over d != c on a of shortfall(d)
 *      <= per_agent. Without it, one campaign could borrow its sibling's agent lines and hold the
 *      sibling below its floor for ever (the floors of a group fit in the agent cap by R4).
 *  R8  A direct dial is admitted when every level has room and either running(direct) <
 *      max(1, floor(direct)) or org_running + 1 + sum of all batch shortfalls <= org_limit; the
 *      direct reserve does not apply to the direct dials themselves.
 *  R9  Floors expired (or never installed): no campaign reservations; the org limit is first
 *      come first served. Waiting direct dials register with the gate itself (C5), not through
 *      the refresher, and keep their first claim (C10): direct_reserve = min(k, max(1, 0)) =
 *      min(k, 1), floor(direct) taken as 0. The gate flags every decision taken with
 *      enforcement on and floors expired (admissions and refusals, any level) as fcfs and
 *      counts it.
 *  R10 Enforcement off: only the system level refuses; floors are still computed and reported;
 *      effective_limit = running + free system slots, available_now = free system slots,
 *      limited_by says concurrency management is off.
 *  R11 effective_limit follows C12 literally. Sum over d != c of max(floor(d), running(d)) runs
 *      over every other input (inactive ones have floor 0), direct included. When this term binds,
 *      another campaign holds lines and at least two campaigns are active, limited_by is the fair
 *      share ("a fair share of the organisation pool across N active campaigns", N as in R1:
 *      the direct pseudo-campaign counts while direct dials wait, the same N the endpoint reports
 *      as active_campaigns); otherwise (nobody else holds lines, or c is the only active campaign
 *      beside paused or idle ones still holding calls) it is the organisation limit. Ties between terms name the narrower level: the campaign ceiling, then
 *      the agent, then the pool (fair share or organisation), then the system; the fluid share
 *      already bends to the narrower caps, so when the fair share equals a ceiling the ceiling is
 *      the cause (raising the org limit would not change it).
 *  R12 available_now is what the gate (fairshare_gate.h) would admit for c now, in a row, under
 *      the floors just computed and the input's k; the agent term uses R7 (for the direct
 *      pseudo-campaign no agent term: each direct dial names its own agent). Pause and stop are
 *      enforced by contact selection, not by the gate: a paused or stopped campaign reports
 *      available_now 0, effective_limit min(formula, running) and limited_by paused/stopped.
 *  R13 Limits lowered below the live count pre-empt nothing (C6): the level refuses until enough
 *      calls end.
 */
#ifndef DSP_CORE_FAIRSHARE_H
#define DSP_CORE_FAIRSHARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define FAIRSHARE_UNLIMITED	   UINT32_MAX	  /* no ceiling; per_agent unset */
#define FAIRSHARE_NO_AGENT	   UINT32_MAX	  /* a campaign without an agent index */
#define FAIRSHARE_COUNT_MAX	   (1u << 30)	  /* largest accepted count or limit */
#define FAIRSHARE_CAMPAIGNS_MAX	   (1u << 20)	  /* largest accepted number of inputs */
#define FAIRSHARE_DEFICIT_MAX	   (3600000000LL) /* |deficit| cap: 3600 line-seconds, in µs */
#define FAIRSHARE_DEFICIT_GRACE_MS 10000u /* an inactive campaign keeps its deficit this long */

enum fairshare_state {
	FAIRSHARE_RUNNING = 0, /* dialling normally */
	FAIRSHARE_PAUSED,      /* paused: not active, keeps its backlog */
	FAIRSHARE_STOPPED,     /* stopped: not active */
};

/* The organisation and the levels around it, as the gate sees them now. */
struct fairshare_org {
	uint32_t system_limit;	       /* global cap (C1, default 1000) */
	uint32_t system_running;       /* live calls at the system level, every org included */
	uint32_t org_limit;	       /* org pool (default 20), >= 1 */
	uint32_t per_agent;	       /* per-agent cap, FAIRSHARE_UNLIMITED when unset */
	bool enforced;		       /* concurrency_management_enabled (C3) */
	uint64_t elapsed_ms;	       /* since the previous recompute; 0 for the first */
	const uint32_t *agent_running; /* live calls per agent index (direct calls included) */
	uint32_t n_agents;	       /* entries in agent_running */
};

/* What a recompute stores with the floors and hands to the next one. Zero for a new campaign.
 * The fluid share is carried exactly, as the fraction fluid_num / fluid_den (den 0 means 0). */
struct fairshare_carry {
	int64_t deficit;   /* integral of (fluid - floor) dt so far, line-microseconds (R5) */
	int64_t fluid_num; /* fluid share installed by the previous recompute: numerator */
	int64_t fluid_den; /* its denominator, 1..FAIRSHARE_CAMPAIGNS_MAX (0: no fluid share) */
	uint32_t floor;	   /* floor installed by the previous recompute */
	uint64_t idle_ms;  /* inactive for this long (R5 grace); 0 while active */
};

struct fairshare_campaign {
	const char *id;	  /* campaign id, borrowed for the call; orders ties bytewise */
	uint32_t running; /* live calls */
	uint32_t waiting; /* claimed, waiting for a slot (direct: k, waiting direct dials) */
	uint32_t due;	  /* pending with next_attempt_at <= now (direct: 0) */
	uint32_t ceiling; /* max_concurrent_calls, FAIRSHARE_UNLIMITED when unset */
	uint32_t agent;	  /* index into fairshare_org.agent_running, or FAIRSHARE_NO_AGENT */
	enum fairshare_state state;   /* running, paused or stopped */
	bool direct;		      /* the org's direct pseudo-campaign (at most one input) */
	struct fairshare_carry carry; /* from the previous recompute's result */
};

/* The term that binds a campaign's effective_limit (C12). */
enum fairshare_limit {
	FAIRSHARE_BY_SYSTEM = 0,      /* the system limit */
	FAIRSHARE_BY_ORG,	      /* the organisation limit (no other campaign holds lines) */
	FAIRSHARE_BY_FAIR_SHARE,      /* the org pool, shared with other campaigns */
	FAIRSHARE_BY_AGENT,	      /* the per-agent limit */
	FAIRSHARE_BY_CEILING,	      /* the campaign's max_concurrent_calls */
	FAIRSHARE_BY_ENFORCEMENT_OFF, /* concurrency management is off (C3) */
	FAIRSHARE_BY_PAUSED,	      /* the campaign is paused */
	FAIRSHARE_BY_STOPPED,	      /* the campaign is stopped */
};

struct fairshare_result {
	bool active;		      /* R1 */
	uint32_t need;		      /* R2 */
	double fluid;		      /* fluid share (max-min), exact to double precision */
	uint32_t floor;		      /* guaranteed floor, installed in the gate */
	uint32_t shortfall;	      /* max(0, floor - running) */
	struct fairshare_carry carry; /* store with the floors, pass back next time */
	uint32_t effective_limit;     /* C12 */
	uint32_t available_now;	      /* C12: admissions the gate would grant now (R12) */
	uint32_t reserved_for_other_campaigns; /* sum of the other active campaigns' floors */
	enum fairshare_limit limited_by;       /* the binding term */
	uint32_t limited_by_value; /* the number its sentence names (a limit, or N active) */
};

struct fairshare_summary {
	uint32_t active_campaigns; /* active inputs, direct included (R1) */
	uint32_t floors_total;	   /* sum of floors = min(org_limit, sum of capped needs) */
	uint32_t org_running;	   /* sum of running over the inputs */
	uint32_t direct_reserve;   /* min(k, max(1, floor(direct))), 0 when k = 0 */
	uint64_t shortfall_total;  /* sum of batch campaigns' shortfall (R6) */
};

/* Returns the size in bytes of the work area fairshare_recompute() needs for n campaigns and
 * n_agents agent indexes. The caller allocates it (any alignment malloc gives) and may reuse it. */
size_t fairshare_work_size(uint32_t n, uint32_t n_agents);

/* Recomputes the fluid shares, floors, deficits and capacity figures of one organisation.
 * in[0..n) and org are borrowed for the call; out[0..n) receives one result per input, in the
 * same order; summary may be NULL. work (work_size bytes, >= fairshare_work_size()) is scratch.
 * Returns 0, or -EINVAL (a count above FAIRSHARE_COUNT_MAX, n above FAIRSHARE_CAMPAIGNS_MAX, two
 * direct inputs, an agent index out of range, org_limit 0, NULL arrays) or -ENOBUFS (work area
 * too small); out is unspecified on error. */
int fairshare_recompute(const struct fairshare_org *org, const struct fairshare_campaign *in,
			uint32_t n, struct fairshare_result *out, struct fairshare_summary *summary,
			void *work, size_t work_size);

/* Writes the limited_by sentence for `by` into buf (NUL-terminated, truncated to size), e.g.
 * "a fair share of the organisation pool across 2 active campaigns". value is
 * fairshare_result.limited_by_value. Returns the length the full sentence has (as snprintf), or
 * -EINVAL for an unknown `by` or a NULL buf with a non-zero size. */
int fairshare_limited_by_format(enum fairshare_limit by, uint32_t value, char *buf, size_t size);

/* Returns a static token naming `by` ("system", "organisation", "fair_share", "agent",
 * "campaign", "enforcement_off", "paused", "stopped"), or "unknown". Never NULL. */
const char *fairshare_limit_name(enum fairshare_limit by);

#endif
