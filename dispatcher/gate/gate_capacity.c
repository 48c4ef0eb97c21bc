#include "gate_capacity.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static const struct capacity_meta *find_meta(const struct capacity_meta *meta, uint32_t n,
					     const char *id)
{
	uint32_t lo = 0, hi = n;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		int d = strcmp(meta[mid].id, id);
		if (!d)
			return &meta[mid];
		if (d < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* The index of agent id in v's agents (sorted by id), or -1. */
static int64_t find_agent(const struct gate_view *v, const char *id)
{
	uint32_t lo = 0, hi = v->n_agents;

	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;
		int d = strcmp(v->agents[mid].id, id);
		if (!d)
			return mid;
		if (d < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/* The index of agent id: the view's, or one appended after them with no running call (an agent
 * the gate lists no call for, e.g. a fresh organisation's). The appended ones are found again
 * through the campaigns already filled (cs[0..n), whose view entries are v->campaigns[0..n)). */
static int64_t agent_index(const struct gate_view *v, const struct capacity_campaign *cs,
			   uint32_t n, struct capacity_org *org, uint32_t *agent_running,
			   const char *id)
{
	int64_t a = find_agent(v, id);

	if (a >= 0)
		return a;
	for (uint32_t j = 0; j < n; j++)
		if (cs[j].agent >= v->n_agents && cs[j].agent != FAIRSHARE_NO_AGENT &&
		    v->campaigns[j].agent && strcmp(v->campaigns[j].agent, id) == 0)
			return cs[j].agent;
	agent_running[org->n_agents] = 0;
	return org->n_agents++;
}

static int fill_campaign(const struct gate_view *v, const struct gate_campaign_view *c,
			 const struct capacity_meta *meta, uint32_t n_meta,
			 struct capacity_org *org, uint32_t *agent_running, uint32_t n,
			 struct capacity_campaign *out)
{
	const struct capacity_meta *m = c->id ? find_meta(meta, n_meta, c->id) : NULL;

	memset(out, 0, sizeof(*out));
	out->id = c->id;
	out->running = c->running;
	out->floor = c->floor;
	out->ceiling = c->ceiling ? c->ceiling : FAIRSHARE_UNLIMITED;
	out->agent = FAIRSHARE_NO_AGENT;
	out->direct = c->id == NULL;
	out->state = m ? m->state : FAIRSHARE_RUNNING;
	out->active = out->direct ? v->direct_waiting >= 1 : (m ? m->active : c->floor > 0);
	if (!out->direct && c->agent)
		out->agent = (uint32_t)agent_index(v, out - n, n, org, agent_running, c->agent);
	return 0;
}

int gate_capacity_snapshot(const struct gate_view *v, const struct capacity_meta *meta,
			   uint32_t n_meta, const char *want, struct capacity_org *org,
			   struct capacity_campaign *cs, uint32_t *agent_running, uint32_t *n_out)
{
	uint32_t n = 0;
	bool found = want == NULL;

	if (!v || !org || !cs || !n_out || !agent_running || (n_meta && !meta))
		return -EINVAL;
	for (uint32_t i = 0; i < v->n_agents; i++)
		agent_running[i] = v->agents[i].running;
	*org = (struct capacity_org){
		.system_limit = v->system_limit,
		.system_running = v->system_running,
		.org_limit = v->org_limit,
		.per_agent = v->per_agent ? v->per_agent : FAIRSHARE_UNLIMITED,
		.enforced = v->enforced,
		.floors_valid = v->floors_valid,
		.direct_waiting = v->direct_waiting,
		.agent_running = agent_running,
		.n_agents = v->n_agents,
	};
	for (uint32_t i = 0; i < v->n_campaigns; i++, n++) {
		if (fill_campaign(v, &v->campaigns[i], meta, n_meta, org, agent_running, n,
				  &cs[n]) < 0)
			return -EINVAL;
		if (want && cs[n].id && strcmp(cs[n].id, want) == 0)
			found = true;
	}
	if (!found) {
		const struct capacity_meta *m = find_meta(meta, n_meta, want);
		cs[n++] = (struct capacity_campaign){ .id = want,
						      .ceiling = FAIRSHARE_UNLIMITED,
						      .agent = FAIRSHARE_NO_AGENT,
						      .state = m ? m->state : FAIRSHARE_RUNNING };
	}
	*n_out = n;
	return 0;
}

int gate_capacity_open(struct gate_capacity *gc, const struct gate_view *v,
		       const struct capacity_meta *meta, uint32_t n_meta, const char *want)
{
	size_t nc, na;
	int rc;

	if (!gc || !v)
		return -EINVAL;
	memset(gc, 0, sizeof(*gc));
	nc = (size_t)v->n_campaigns + 1;
	na = (size_t)v->n_agents + v->n_campaigns + 1; /* + the agents the view lists no call for */
	gc->cs = calloc(nc, sizeof(*gc->cs));
	gc->agent_running = calloc(na, sizeof(*gc->agent_running));
	gc->work = calloc(na, sizeof(*gc->work));
	if (!gc->cs || !gc->agent_running || !gc->work) {
		gate_capacity_close(gc);
		return -ENOMEM;
	}
	rc = gate_capacity_snapshot(v, meta, n_meta, want, &gc->org, gc->cs, gc->agent_running,
				    &gc->n);
	if (rc)
		gate_capacity_close(gc);
	return rc;
}

int gate_capacity_answer(const struct gate_capacity *gc, const char *id,
			 struct capacity_answer *out, char *why, size_t size)
{
	uint32_t i = UINT32_MAX;
	int rc;

	if (!gc || !gc->cs || !out)
		return -EINVAL;
	if (id) {
		i = capacity_find(gc->cs, gc->n, id);
	} else {
		for (uint32_t k = 0; k < gc->n && i == UINT32_MAX; k++)
			if (gc->cs[k].direct)
				i = k;
	}
	if (i == UINT32_MAX)
		return -ENOENT;
	if ((rc = capacity_view(&gc->org, gc->cs, gc->n, i, gc->work, out)))
		return rc;
	if (why && size &&
	    fairshare_limited_by_format(out->limited_by, out->limited_by_value, why, size) < 0)
		why[0] = 0;
	return 0;
}

void gate_capacity_close(struct gate_capacity *gc)
{
	if (!gc)
		return;
	free(gc->cs);
	free(gc->agent_running);
	free(gc->work);
	gc->cs = NULL;
	gc->agent_running = NULL;
	gc->work = NULL;
	gc->n = 0;
}
