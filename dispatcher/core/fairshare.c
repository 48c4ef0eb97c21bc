/* Fair share recompute: fluid shares (exact), floors, deficits and capacity figures.
 * The readings of the SPEC this implements are listed in fairshare.h (R1..R13). */
#include "fairshare.h"

#include "capacity.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NONE UINT32_MAX

/* A campaign of a gating agent, sorted by (agent, need) for the within-group water-filling. */
struct member {
	uint32_t agent;
	uint32_t need;
	uint32_t idx; /* input index */
};

/* One unit of the pool water-filling: a single campaign, or a block of a saturated agent group
 * whose members all sit at the group's level num/den. */
struct item {
	int64_t num; /* value = num / den */
	int64_t den;
	int64_t total;	 /* value * weight, an integer */
	uint32_t weight; /* campaigns in the item */
	uint32_t ref;	 /* single: input index; block: first position in members[] */
	uint32_t key;	 /* unique, orders ties deterministically */
	bool block;
};

struct frac {
	int64_t num;
	int64_t den;
};

struct cand {
	int64_t deficit;
	const char *id;
	uint32_t idx;
};

struct ctx {
	const struct fairshare_org *org;
	const struct fairshare_campaign *in;
	struct fairshare_result *out;
	uint32_t n;
	uint32_t cap;	 /* the gating agent cap, FAIRSHARE_UNLIMITED when agents do not gate */
	uint32_t direct; /* index of the direct input, NONE without one */
	struct member *members;
	struct item *items;
	struct frac *fluid;
	struct cand *cands;
	int64_t *acc;			/* accumulated deficit per input */
	int64_t *agent_room;		/* per agent: cap minus the group's floors */
	uint64_t *agent_short;		/* per agent: the capacity view's shortfall sums */
	struct capacity_campaign *view; /* the capacity view's input: fresh floors as installed */
	uint32_t n_members;
	uint32_t n_items;
};

static size_t align8(size_t x)
{
	return (x + 7) & ~(size_t)7;
}

size_t fairshare_work_size(uint32_t n, uint32_t n_agents)
{
	size_t m = n ? n : 1;
	size_t a = n_agents ? n_agents : 1;

	return align8(m * sizeof(struct member)) + align8(m * sizeof(struct item)) +
	       align8(m * sizeof(struct frac)) + align8(m * sizeof(struct cand)) +
	       align8(m * sizeof(int64_t)) + 2 * align8(a * sizeof(int64_t)) +
	       align8(m * sizeof(struct capacity_campaign));
}

static void *carve(char **p, size_t bytes)
{
	void *r = *p;

	*p += align8(bytes);
	return r;
}

static void work_setup(struct ctx *x, void *work)
{
	char *p = work;
	size_t m = x->n ? x->n : 1;
	size_t a = x->org->n_agents ? x->org->n_agents : 1;

	x->members = carve(&p, m * sizeof(struct member));
	x->items = carve(&p, m * sizeof(struct item));
	x->fluid = carve(&p, m * sizeof(struct frac));
	x->cands = carve(&p, m * sizeof(struct cand));
	x->acc = carve(&p, m * sizeof(int64_t));
	x->agent_room = carve(&p, a * sizeof(int64_t));
	x->agent_short = carve(&p, a * sizeof(uint64_t));
	x->view = carve(&p, m * sizeof(struct capacity_campaign));
	x->n_members = 0;
	x->n_items = 0;
}

static bool count_ok(uint32_t v)
{
	return v <= FAIRSHARE_COUNT_MAX;
}

static bool limit_ok(uint32_t v)
{
	return v == FAIRSHARE_UNLIMITED || v <= FAIRSHARE_COUNT_MAX;
}

static int validate_org(const struct fairshare_org *org)
{
	if (org->org_limit == 0 || !count_ok(org->org_limit) || !count_ok(org->system_limit) ||
	    !count_ok(org->system_running) || !limit_ok(org->per_agent))
		return -EINVAL;
	if (org->n_agents > FAIRSHARE_CAMPAIGNS_MAX || (org->n_agents && !org->agent_running))
		return -EINVAL;
	for (uint32_t a = 0; a < org->n_agents; a++)
		if (!count_ok(org->agent_running[a]))
			return -EINVAL;
	return 0;
}

static int validate_campaign(const struct fairshare_org *org, const struct fairshare_campaign *c)
{
	const struct fairshare_carry *k = &c->carry;

	if (!count_ok(c->running) || !count_ok(c->waiting) || !count_ok(c->due) ||
	    !limit_ok(c->ceiling))
		return -EINVAL;
	if (c->agent != FAIRSHARE_NO_AGENT && c->agent >= org->n_agents)
		return -EINVAL;
	if (c->state != FAIRSHARE_RUNNING && c->state != FAIRSHARE_PAUSED &&
	    c->state != FAIRSHARE_STOPPED)
		return -EINVAL;
	if (k->fluid_den < 0 || k->fluid_den > FAIRSHARE_CAMPAIGNS_MAX || k->fluid_num < 0 ||
	    (k->fluid_den == 0 && k->fluid_num != 0) ||
	    k->fluid_num > (int64_t)FAIRSHARE_COUNT_MAX * k->fluid_den || !count_ok(k->floor) ||
	    k->deficit > FAIRSHARE_DEFICIT_MAX || k->deficit < -FAIRSHARE_DEFICIT_MAX)
		return -EINVAL;
	return 0;
}

static int validate(struct ctx *x)
{
	uint64_t running = 0;
	int rc = validate_org(x->org);

	if (rc)
		return rc;
	x->direct = NONE;
	for (uint32_t i = 0; i < x->n; i++) {
		const struct fairshare_campaign *c = &x->in[i];

		rc = validate_campaign(x->org, c);
		if (rc)
			return rc;
		if (c->direct) {
			if (x->direct != NONE)
				return -EINVAL;
			x->direct = i;
		}
		running += c->running;
	}
	return running <= FAIRSHARE_COUNT_MAX ? 0 : -EINVAL;
}

static bool is_active(const struct fairshare_campaign *c)
{
	return c->state == FAIRSHARE_RUNNING && (uint64_t)c->waiting + c->due > 0;
}

static uint32_t need_of(const struct fairshare_org *org, const struct fairshare_campaign *c)
{
	uint64_t demand = (uint64_t)c->running + c->waiting + c->due;
	uint64_t cap = org->org_limit;

	if (!is_active(c))
		return 0;
	if (!c->direct && c->ceiling < cap)
		cap = c->ceiling;
	return (uint32_t)(demand < cap ? demand : cap);
}

/* Whether c's agent gates (R3): only batch campaigns with an agent, and only if per_agent < org. */
static bool gated(const struct ctx *x, const struct fairshare_campaign *c)
{
	return x->cap != FAIRSHARE_UNLIMITED && !c->direct && c->agent != FAIRSHARE_NO_AGENT;
}

__extension__ typedef __int128 wide;

/* Floor division of a by b > 0. */
static wide floor_div(wide a, wide b)
{
	wide q = a / b;

	return (a % b != 0 && a < 0) ? q - 1 : q;
}

/* Integral of (fluid - floor) dt over the elapsed interval, added to the carried deficit: exact
 * in integers, rounded half up once (R5). */
static int64_t accumulate(const struct fairshare_carry *k, uint64_t elapsed_ms)
{
	wide den = k->fluid_den ? k->fluid_den : 1;
	wide a = (wide)k->fluid_num - (wide)k->floor * den;
	wide step = floor_div(2 * a * (wide)elapsed_ms * 1000 + den, 2 * den);
	int64_t v;

	if (step > 2 * FAIRSHARE_DEFICIT_MAX)
		step = 2 * FAIRSHARE_DEFICIT_MAX;
	if (step < -2 * FAIRSHARE_DEFICIT_MAX)
		step = -2 * FAIRSHARE_DEFICIT_MAX;
	v = k->deficit + (int64_t)step;
	if (v > FAIRSHARE_DEFICIT_MAX)
		v = FAIRSHARE_DEFICIT_MAX;
	if (v < -FAIRSHARE_DEFICIT_MAX)
		v = -FAIRSHARE_DEFICIT_MAX;
	return v;
}

static int cmp_member(const void *pa, const void *pb)
{
	const struct member *a = pa, *b = pb;

	if (a->agent != b->agent)
		return a->agent < b->agent ? -1 : 1;
	if (a->need != b->need)
		return a->need < b->need ? -1 : 1;
	return (a->idx > b->idx) - (a->idx < b->idx);
}

static void push_single(struct ctx *x, uint32_t idx, uint32_t need)
{
	struct item *it = &x->items[x->n_items++];

	*it = (struct item){ .num = need,
			     .den = 1,
			     .total = need,
			     .weight = 1,
			     .ref = idx,
			     .key = idx,
			     .block = false };
}

static void push_block(struct ctx *x, uint32_t pos, int64_t rem, uint32_t cnt)
{
	struct item *it = &x->items[x->n_items++];

	*it = (struct item){ .num = rem,
			     .den = cnt,
			     .total = rem,
			     .weight = cnt,
			     .ref = pos,
			     .key = x->n + pos,
			     .block = true };
}

/* Water-fills the agent cap over members[s, e) (one agent, sorted by need), whose needs sum
 * above the cap: the smallest needs are met, the rest form one block at the group's level. */
static void group_fill(struct ctx *x, uint32_t s, uint32_t e)
{
	int64_t rem = x->cap;
	uint32_t cnt = e - s;

	for (uint32_t p = s; p < e; p++, cnt--) {
		uint32_t need = x->members[p].need;

		if ((int64_t)need * cnt >= rem) {
			push_block(x, p, rem, cnt);
			return;
		}
		rem -= need;
		push_single(x, x->members[p].idx, need);
	}
}

/* Builds the pool's items: active campaigns outside gating groups, and per gating agent either
 * its members (needs within the cap) or its met members plus one block (R3). */
static void build_items(struct ctx *x)
{
	for (uint32_t i = 0; i < x->n; i++) {
		if (!x->out[i].active)
			continue;
		if (gated(x, &x->in[i]))
			x->members[x->n_members++] =
				(struct member){ x->in[i].agent, x->out[i].need, i };
		else
			push_single(x, i, x->out[i].need);
	}
	qsort(x->members, x->n_members, sizeof(struct member), cmp_member);
	for (uint32_t s = 0, e; s < x->n_members; s = e) {
		int64_t sum = 0;

		for (e = s; e < x->n_members && x->members[e].agent == x->members[s].agent; e++)
			sum += x->members[e].need;
		if (sum <= x->cap) {
			for (uint32_t p = s; p < e; p++)
				push_single(x, x->members[p].idx, x->members[p].need);
		} else {
			group_fill(x, s, e);
		}
	}
}

static int cmp_item(const void *pa, const void *pb)
{
	const struct item *a = pa, *b = pb;
	int64_t l = a->num * b->den, r = b->num * a->den;

	if (l != r)
		return l < r ? -1 : 1;
	return (a->key > b->key) - (a->key < b->key);
}

static void assign(struct ctx *x, const struct item *it, int64_t num, int64_t den)
{
	if (!it->block) {
		x->fluid[it->ref] = (struct frac){ num, den };
		return;
	}
	for (uint32_t p = it->ref; p < it->ref + it->weight; p++)
		x->fluid[x->members[p].idx] = (struct frac){ num, den };
}

/* Water-fills org_limit over the items (sorted by value). Returns the sum of fluid shares. */
static int64_t pool_fill(struct ctx *x)
{
	int64_t rem = x->org->org_limit;
	int64_t w = 0;
	uint32_t i;

	qsort(x->items, x->n_items, sizeof(struct item), cmp_item);
	for (i = 0; i < x->n_items; i++)
		w += x->items[i].weight;
	for (i = 0; i < x->n_items; i++) {
		const struct item *it = &x->items[i];

		if (it->num * w >= rem * it->den) {
			for (; i < x->n_items; i++)
				assign(x, &x->items[i], rem, w);
			return x->org->org_limit;
		}
		rem -= it->total;
		w -= it->weight;
		assign(x, it, it->num, it->den);
	}
	return x->org->org_limit - rem;
}

static int cmp_cand(const void *pa, const void *pb)
{
	const struct cand *a = pa, *b = pb;
	int c;

	if (a->deficit != b->deficit)
		return a->deficit > b->deficit ? -1 : 1;
	c = strcmp(a->id ? a->id : "", b->id ? b->id : "");
	if (c)
		return c;
	return (a->idx > b->idx) - (a->idx < b->idx);
}

/* Floors: every fluid share rounded down, then `sum - floors` round-ups by deficit (R4). */
static int round_floors(struct ctx *x, int64_t sum)
{
	int64_t floors = 0;
	uint32_t nc = 0;

	for (uint32_t a = 0; a < x->org->n_agents; a++)
		x->agent_room[a] = x->cap;
	for (uint32_t i = 0; i < x->n; i++) {
		const struct frac *f = &x->fluid[i];

		x->out[i].floor = (uint32_t)(f->num / f->den);
		floors += x->out[i].floor;
		if (x->out[i].active && gated(x, &x->in[i]))
			x->agent_room[x->in[i].agent] -= x->out[i].floor;
		if (f->num % f->den)
			x->cands[nc++] = (struct cand){ x->acc[i], x->in[i].id, i };
	}
	qsort(x->cands, nc, sizeof(struct cand), cmp_cand);
	for (uint32_t j = 0; j < nc && floors < sum; j++) {
		uint32_t i = x->cands[j].idx;
		bool g = gated(x, &x->in[i]);

		if (g && x->agent_room[x->in[i].agent] <= 0)
			continue;
		x->out[i].floor++;
		floors++;
		if (g)
			x->agent_room[x->in[i].agent]--;
	}
	return floors == sum ? 0 : -ENOTRECOVERABLE; /* unreachable: R4 proves room exists */
}

/* The capacity view's snapshot of this recompute: its fresh floors read as installed and valid,
 * its active set, its k (capacity.h V1..V3), so C12's figures are the view's. */
static void view_input(const struct ctx *x, struct capacity_org *org)
{
	const struct fairshare_org *o = x->org;

	*org = (struct capacity_org){
		.system_limit = o->system_limit,
		.system_running = o->system_running,
		.org_limit = o->org_limit,
		.per_agent = o->per_agent,
		.enforced = o->enforced,
		.floors_valid = true,
		.direct_waiting = x->direct != NONE ? x->in[x->direct].waiting : 0,
		.agent_running = o->agent_running,
		.n_agents = o->n_agents,
	};
	for (uint32_t i = 0; i < x->n; i++) {
		const struct fairshare_campaign *c = &x->in[i];

		x->view[i] = (struct capacity_campaign){
			.id = c->id,
			.running = c->running,
			.floor = x->out[i].floor,
			.ceiling = c->ceiling,
			.agent = c->agent,
			.state = c->state,
			.active = x->out[i].active,
			.direct = c->direct,
		};
	}
}

static void capacity(const struct ctx *x, const struct capacity_org *org,
		     const struct capacity_sums *sums, uint32_t i)
{
	struct fairshare_result *o = &x->out[i];
	struct capacity_answer a;

	capacity_answer(org, x->view, sums, x->agent_short, i, &a);
	o->shortfall = o->floor > x->in[i].running ? o->floor - x->in[i].running : 0;
	o->effective_limit = a.effective_limit;
	o->available_now = a.available_now;
	o->reserved_for_other_campaigns = a.reserved_for_other_campaigns;
	o->limited_by = a.limited_by;
	o->limited_by_value = a.limited_by_value;
}

static void prepare(struct ctx *x)
{
	const struct fairshare_org *org = x->org;

	x->cap = FAIRSHARE_UNLIMITED;
	if (org->per_agent != FAIRSHARE_UNLIMITED && org->per_agent < org->org_limit)
		x->cap = org->per_agent;
	for (uint32_t i = 0; i < x->n; i++) {
		x->out[i] = (struct fairshare_result){ 0 };
		x->out[i].active = is_active(&x->in[i]);
		x->out[i].need = need_of(org, &x->in[i]);
		x->acc[i] = accumulate(&x->in[i].carry, org->elapsed_ms);
		x->fluid[i] = (struct frac){ 0, 1 };
	}
}

static int64_t gcd64(int64_t a, int64_t b)
{
	while (b) {
		int64_t t = a % b;

		a = b;
		b = t;
	}
	return a;
}

/* The carry to store: the fluid share in lowest terms (a canonical form for the vectors). */
static struct fairshare_carry carry_of(int64_t deficit, struct frac f, uint32_t floor)
{
	int64_t g = gcd64(f.num, f.den);

	return (struct fairshare_carry){ deficit, f.num / g, f.den / g, floor, 0 };
}

/* An inactive campaign's carry: its deficit frozen while the grace lasts, then nothing (R5). */
static struct fairshare_carry idle_carry(const struct ctx *x, uint32_t i)
{
	uint64_t idle = x->in[i].carry.idle_ms, e = x->org->elapsed_ms;

	/* idle + e <= FAIRSHARE_DEFICIT_GRACE_MS, without overflow */
	if (x->acc[i] == 0 || idle > FAIRSHARE_DEFICIT_GRACE_MS ||
	    e > FAIRSHARE_DEFICIT_GRACE_MS - idle)
		return (struct fairshare_carry){ 0 };
	return (struct fairshare_carry){ .deficit = x->acc[i], .idle_ms = idle + e };
}

static int finish(struct ctx *x, struct fairshare_summary *summary)
{
	struct capacity_org org;
	struct capacity_sums sums;
	int rc;

	view_input(x, &org);
	rc = capacity_sum(&org, x->view, x->n, x->agent_short, &sums);
	if (rc)
		return rc; /* unreachable: the inputs were validated and floors fit the pool */
	for (uint32_t i = 0; i < x->n; i++) {
		struct fairshare_result *o = &x->out[i];

		o->fluid = (double)x->fluid[i].num / (double)x->fluid[i].den;
		o->carry =
			o->active ? carry_of(x->acc[i], x->fluid[i], o->floor) : idle_carry(x, i);
		capacity(x, &org, &sums, i);
	}
	if (summary)
		*summary = (struct fairshare_summary){
			.active_campaigns = sums.active_campaigns,
			.floors_total = sums.floors,
			.org_running = sums.org_running,
			.direct_reserve = sums.direct_reserve,
			.shortfall_total = sums.shortfall,
		};
	return 0;
}

int fairshare_recompute(const struct fairshare_org *org, const struct fairshare_campaign *in,
			uint32_t n, struct fairshare_result *out, struct fairshare_summary *summary,
			void *work, size_t work_size)
{
	struct ctx x = { .org = org, .in = in, .out = out, .n = n };
	int rc;

	if (!org || !work || (n && (!in || !out)))
		return -EINVAL;
	rc = validate(&x);
	if (rc)
		return rc;
	if (work_size < fairshare_work_size(n, org->n_agents))
		return -ENOBUFS;
	work_setup(&x, work);
	prepare(&x);
	build_items(&x);
	rc = round_floors(&x, pool_fill(&x));
	if (rc)
		return rc;
	return finish(&x, summary);
}

static const char *lines(uint32_t v)
{
	return v == 1 ? "line" : "lines";
}

int fairshare_limited_by_format(enum fairshare_limit by, uint32_t value, char *buf, size_t size)
{
	if (!buf && size)
		return -EINVAL;
	switch (by) {
	case FAIRSHARE_BY_SYSTEM:
		return snprintf(buf, size, "the system limit of %" PRIu32 " %s", value,
				lines(value));
	case FAIRSHARE_BY_ORG:
		return snprintf(buf, size, "the organisation limit of %" PRIu32 " %s", value,
				lines(value));
	case FAIRSHARE_BY_FAIR_SHARE:
		return snprintf(buf, size,
				"a fair share of the organisation pool across %" PRIu32
				" active campaign%s",
				value, value == 1 ? "" : "s");
	case FAIRSHARE_BY_AGENT:
		return snprintf(buf, size, "the per-agent limit of %" PRIu32 " %s", value,
				lines(value));
	case FAIRSHARE_BY_CEILING:
		return snprintf(buf, size, "the campaign's max_concurrent_calls of %" PRIu32,
				value);
	case FAIRSHARE_BY_ENFORCEMENT_OFF:
		return snprintf(buf, size, "concurrency management is off for this organisation");
	case FAIRSHARE_BY_PAUSED:
		return snprintf(buf, size, "the campaign is paused");
	case FAIRSHARE_BY_STOPPED:
		return snprintf(buf, size, "the campaign is stopped");
	}
	return -EINVAL;
}

const char *fairshare_limit_name(enum fairshare_limit by)
{
	static const char *const names[] = {
		[FAIRSHARE_BY_SYSTEM] = "system",
		[FAIRSHARE_BY_ORG] = "organisation",
		[FAIRSHARE_BY_FAIR_SHARE] = "fair_share",
		[FAIRSHARE_BY_AGENT] = "agent",
		[FAIRSHARE_BY_CEILING] = "campaign",
		[FAIRSHARE_BY_ENFORCEMENT_OFF] = "enforcement_off",
		[FAIRSHARE_BY_PAUSED] = "paused",
		[FAIRSHARE_BY_STOPPED] = "stopped",
	};

	if ((unsigned)by < sizeof(names) / sizeof(names[0]) && names[by])
		return names[by];
	return "unknown";
}
