/* The capacity view (SPEC C12) from the Redis gate: one gate_read() answer turned into the
 * snapshot core/capacity.h computes from, so the endpoint and the demo answer from the installed
 * floors and the gate's live counts in one round trip (issue 8, item 4).
 *
 * What the gate does not hold comes from the caller (struct capacity_meta, core/capacity.h): a
 * campaign's row state (running, paused, stopped) and whether the installed floors' active set
 * includes it (fair_share_floors.active, written by the refresher with the floors; reading V1).
 * A campaign the caller gives no meta for is taken as running and active when its installed
 * floor is above 0. The direct pseudo-campaign is active while k >= 1 (the gate's own count).
 */
#ifndef DSP_GATE_CAPACITY_H
#define DSP_GATE_CAPACITY_H

#include "capacity.h"
#include "gate.h"

#include <stddef.h>
#include <stdint.h>

/* Fills org, cs and agent_running from view v (borrowed: call it inside gate_read()'s callback;
 * cs[].id points into v). meta[0..n_meta) is sorted by id (bytewise) and may be empty. When want
 * (may be NULL) names a campaign the view does not list, it is appended with zero counts,
 * inactive (reading V2), so cs needs v->n_campaigns + 1 entries and agent_running
 * v->n_agents + v->n_campaigns entries: a campaign's agent the view lists no call for (a fresh
 * organisation's) is appended with none running. *n_out is the number of entries written.
 * Returns 0 or -EINVAL (NULL arguments). */
int gate_capacity_snapshot(const struct gate_view *v, const struct capacity_meta *meta,
			   uint32_t n_meta, const char *want, struct capacity_org *org,
			   struct capacity_campaign *cs, uint32_t *agent_running, uint32_t *n_out);

/* One view's snapshot, sized for it, from which any of its campaigns is answered: the one way
 * the capacity endpoint (dispatcher/api/route_capacity.c) and the demo turn a gate_read()
 * answer — or a view built from PostgreSQL's counts — into C12 answers. */
struct gate_capacity {
	struct capacity_org org;
	struct capacity_campaign *cs; /* n entries; ids borrowed from the view */
	uint32_t n;
	uint32_t *agent_running;
	uint64_t *work; /* capacity_view()'s scratch, one per agent */
};

/* gate_capacity_snapshot() into storage allocated for v (gate_capacity_close() frees it), with
 * the same arguments. Borrowed from v: use gc inside gate_read()'s callback. Returns 0, -EINVAL
 * or -ENOMEM (gc then holds nothing). */
int gate_capacity_open(struct gate_capacity *gc, const struct gate_view *v,
		       const struct capacity_meta *meta, uint32_t n_meta, const char *want);

/* The C12 answer for campaign id (NULL: the direct pseudo-campaign) of the snapshot, and its
 * limited_by sentence in why[0..size) (may be NULL). Returns 0, -ENOENT (not in the snapshot) or
 * -EINVAL. */
int gate_capacity_answer(const struct gate_capacity *gc, const char *id,
			 struct capacity_answer *out, char *why, size_t size);

/* Frees what gate_capacity_open() allocated. Twice is a no-op. */
void gate_capacity_close(struct gate_capacity *gc);

#endif
