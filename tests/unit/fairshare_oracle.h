/* An independent, brute-force reference for the fair-share allocator (tests only).
 *
 * Written from SPEC C5/C12 and the readings in fairshare.h, without calling the allocator and
 * with a different structure, on small states only:
 *   - fluid shares by joint progressive filling of every campaign at once, in exact integer
 *     units of 1/D lines (D = lcm(1..active)); the allocator instead does two water-fillings
 *     (within agent groups, then the pool) on rationals;
 *   - floors by enumerating every feasible set of round-ups and keeping the one that is best in
 *     deficit order; the allocator rounds greedily;
 *   - deficits (R5) as an exact rational split into whole part and remainder, rounded half up
 *     once; the allocator uses one floor division of 128-bit integers;
 *   - available_now by admitting calls one by one through c5_admits(), SPEC C5's admission
 *     sentence (with R7, R8, R9) written as one boolean that walks every campaign; the
 *     allocator uses a closed form;
 *   - effective_limit as the plain minimum of C12's terms, and limited_by as the narrowest term
 *     equal to it; the allocator keeps a running minimum that only a strictly smaller term
 *     replaces;
 *   - oracle_admit(): the gate's decision recomputed from the full state (no aggregates), as the
 *     first failing check in fairshare_gate.h's documented order; it must agree with
 *     c5_admits() on admitted (else it reports the impossible level FAIRSHARE_LEVEL_COUNT);
 *   - oracle_check_maxmin(): the max-min characterisation (every campaign below its need sits on
 *     a saturated constraint where nobody has more), checked on any fluid vector.
 * It shares only the data model (the input structs) and the decision vocabulary (enums).
 */
#ifndef DSP_TESTS_FAIRSHARE_ORACLE_H
#define DSP_TESTS_FAIRSHARE_ORACLE_H

#include "fairshare.h"
#include "fairshare_gate.h"

#include <stdbool.h>
#include <stdint.h>

#define ORACLE_MAX_CAMPAIGNS 10
#define ORACLE_MAX_AGENTS    4

struct oracle_result {
	bool active;
	uint32_t need;
	int64_t fluid_units; /* fluid share = fluid_units / units_per_line */
	int64_t units_per_line;
	uint32_t floor;
	int64_t deficit; /* new carried deficit, line-microseconds (0 when inactive) */
	uint32_t shortfall;
	uint32_t effective_limit;
	uint32_t available_now;
	uint32_t reserved;
	enum fairshare_limit limited_by;
	uint32_t limited_by_value;
};

struct oracle_summary {
	uint32_t active;
	uint32_t floors_total;
	uint32_t direct_reserve;
	uint64_t shortfall_total;
};

/* The gate's whole state, as a from-scratch decision needs it. */
struct oracle_gate {
	uint32_t system_limit;
	uint32_t system_running;
	uint32_t org_limit;
	uint32_t per_agent;
	bool enforced;
	bool floors_valid;
	uint32_t k;	 /* waiting direct dials */
	uint32_t n;	 /* campaigns */
	uint32_t direct; /* index of the direct pseudo-campaign, UINT32_MAX for none */
	uint32_t running[ORACLE_MAX_CAMPAIGNS];
	uint32_t floor[ORACLE_MAX_CAMPAIGNS];
	uint32_t ceiling[ORACLE_MAX_CAMPAIGNS];
	uint32_t agent[ORACLE_MAX_CAMPAIGNS];
	uint32_t n_agents;
	uint32_t agent_running[ORACLE_MAX_AGENTS];
};

/* Computes what fairshare_recompute() must return for a small state (n <= ORACLE_MAX_CAMPAIGNS,
 * n_agents <= ORACLE_MAX_AGENTS). Returns 0, or -1 if the state is too big or an internal
 * exactness assertion fails (which would mean the theory behind the oracle is wrong). */
int oracle_recompute(const struct fairshare_org *org, const struct fairshare_campaign *in,
		     uint32_t n, struct oracle_result *out, struct oracle_summary *summary);

/* The admission decision for one dial of `campaign` on `agent`, from the full state. */
struct fairshare_decision oracle_admit(const struct oracle_gate *s, uint32_t campaign,
				       uint32_t agent);

/* Returns NULL when fluid[0..n) is the max-min fair allocation of the state (tolerance 1e-9),
 * else a static description of the first violation. */
const char *oracle_check_maxmin(const struct fairshare_org *org,
				const struct fairshare_campaign *in, uint32_t n,
				const double *fluid);

#endif
