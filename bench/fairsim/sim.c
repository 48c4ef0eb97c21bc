/* fairsim's discrete-event engine; see sim.h. */
#include "sim.h"

#include "drr.h"
#include "fairshare.h"
#include "fairshare_gate.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_C SIM_MAX_CAMPAIGNS

enum ev_kind { EV_END, EV_REFRESH, EV_JOIN, EV_PAUSE, EV_RESUME, EV_SAMPLE, EV_ARRIVE };

struct event {
	uint64_t t;
	uint64_t seq; /* push order: ties at one instant run first-in first-out */
	uint8_t kind;
	uint8_t org;
	uint8_t c;
};

struct heap {
	struct event *v;
	size_t n;
	size_t cap;
	uint64_t seq;
};

struct org {
	const struct sim_org_spec *spec;
	uint32_t running[MAX_C];
	uint32_t backlog[MAX_C];
	uint32_t dialled[MAX_C]; /* contacts started: the next contact's number */
	uint32_t arrived[MAX_C]; /* contacts arrived so far (arriving campaigns) */
	double wait_ms;		 /* sum over dialled arriving contacts of dial - arrival */
	uint64_t waited;	 /* dialled arriving contacts */
	uint32_t org_running;
	bool joined[MAX_C];
	bool paused[MAX_C];
	/* fair share: gate, selector, refresher state */
	struct fairshare_gate g;
	struct fairshare_gate_campaign gc[MAX_C];
	struct fairshare_gate_agent ga[SIM_MAX_AGENTS];
	struct drr d;
	struct drr_entry de[MAX_C];
	struct fairshare_carry carry[MAX_C];
	double fluid[MAX_C];
	uint32_t floor[MAX_C];
	uint64_t version;
	uint64_t last_refresh;
	/* accounting, integrated up to last_t */
	uint64_t last_t;
	double line[MAX_C];	   /* line-ms in the current Jain window */
	double ent[MAX_C];	   /* fluid-share line-ms in the current window */
	double sample_line[MAX_C]; /* line-ms in the current sample interval */
	double total_line[MAX_C];  /* line-ms over the run */
	bool excluded[MAX_C];	   /* not backlogged for part of the current window */
	uint64_t win_start;
	uint64_t win_end;
	double jain_sum;
	double busy; /* line-ms */
	uint64_t join_t;
};

struct sim {
	const struct sim_spec *spec;
	enum sim_mode mode;
	struct heap h;
	struct org o[SIM_MAX_ORGS];
	struct fairshare_system sys;
	uint64_t now;
	void *work;
	size_t work_size;
	FILE *csv;
	FILE *windows;
	struct sim_result *res;
	uint32_t sample;
};

static bool before(const struct event *a, const struct event *b)
{
	return a->t != b->t ? a->t < b->t : a->seq < b->seq;
}

static int push(struct heap *h, uint64_t t, enum ev_kind kind, uint32_t org, uint32_t c)
{
	size_t i;

	if (h->n == h->cap) {
		size_t cap = h->cap ? 2 * h->cap : 256;
		struct event *v = realloc(h->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		h->v = v;
		h->cap = cap;
	}
	i = h->n++;
	h->v[i] = (struct event){ t, h->seq++, (uint8_t)kind, (uint8_t)org, (uint8_t)c };
	while (i > 0 && before(&h->v[i], &h->v[(i - 1) / 2])) {
		struct event tmp = h->v[i];

		h->v[i] = h->v[(i - 1) / 2];
		h->v[(i - 1) / 2] = tmp;
		i = (i - 1) / 2;
	}
	return 0;
}

static struct event pop(struct heap *h)
{
	struct event top = h->v[0];
	size_t i = 0;

	h->v[0] = h->v[--h->n];
	for (;;) {
		size_t l = 2 * i + 1, r = l + 1, m = i;
		struct event tmp;

		if (l < h->n && before(&h->v[l], &h->v[m]))
			m = l;
		if (r < h->n && before(&h->v[r], &h->v[m]))
			m = r;
		if (m == i)
			return top;
		tmp = h->v[i];
		h->v[i] = h->v[m];
		h->v[m] = tmp;
		i = m;
	}
}

static uint64_t mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static double unit(uint64_t x)
{
	return ((double)(x >> 11) + 0.5) * 0x1.0p-53; /* in (0, 1) */
}

/* Lognormal duration of contact k of campaign c: a pure function of (seed, org, c, k). */
static uint64_t duration_ms(const struct sim *s, uint32_t org, uint32_t c, uint32_t k)
{
	const struct sim_spec *sp = s->spec;
	uint64_t h = mix(sp->seed ^ mix(((uint64_t)org << 48) ^ ((uint64_t)c << 32) ^ k));
	double z = sqrt(-2.0 * log(unit(h))) * cos(2.0 * M_PI * unit(mix(h)));
	double mu = log(sp->mean_call_s) - sp->sigma * sp->sigma / 2.0;
	double ms = exp(mu + sp->sigma * z) * 1000.0;

	if (ms > (double)sp->max_call_ms)
		return sp->max_call_ms;
	return ms < 1.0 ? 1 : (uint64_t)ms;
}

static bool dialable(const struct org *o, uint32_t c)
{
	return o->joined[c] && !o->paused[c] && o->backlog[c] > 0;
}

static int late_of(const struct sim_org_spec *spec)
{
	for (uint32_t c = 0; c < spec->n; c++)
		if (spec->c[c].join_ms > 0)
			return (int)c;
	return -1;
}

static void accrue(struct sim *s, struct org *o, uint64_t t)
{
	double dt = (double)(t - o->last_t);

	if (t <= o->last_t)
		return;
	for (uint32_t c = 0; c < o->spec->n; c++) {
		o->line[c] += o->running[c] * dt;
		o->ent[c] += o->fluid[c] * dt;
		o->sample_line[c] += o->running[c] * dt;
		o->total_line[c] += o->running[c] * dt;
	}
	o->busy += o->org_running * dt;
	o->last_t = t;
}

/* Jain's index over the window's backlogged campaigns: x = line-seconds / entitlement. */
static void close_window(struct sim *s, struct org *o, uint32_t oi)
{
	struct sim_org_result *r = &s->res->org[oi];
	double sx = 0, sxx = 0, jain;
	uint32_t k = 0;

	for (uint32_t c = 0; c < o->spec->n; c++) {
		double x;

		if (o->excluded[c] || o->ent[c] <= 0)
			continue;
		x = o->line[c] / o->ent[c];
		sx += x;
		sxx += x * x;
		k++;
	}
	if (k >= 2) {
		jain = sxx > 0 ? sx * sx / (k * sxx) : 0;
		r->jain_min = r->windows == 0 || jain < r->jain_min ? jain : r->jain_min;
		o->jain_sum += jain;
		r->windows++;
		if (s->windows)
			fprintf(s->windows, "%s,%s,%.0f,%.0f,%u,%.6f\n", sim_mode_name(s->mode),
				o->spec->id, o->win_start / 1000.0, o->win_end / 1000.0, k, jain);
	}
	for (uint32_t c = 0; c < o->spec->n; c++) {
		o->line[c] = o->ent[c] = 0;
		o->excluded[c] = !dialable(o, c);
	}
	o->win_start = o->win_end;
	o->win_end += s->spec->window_ms;
}

static void account(struct sim *s, uint32_t oi, uint64_t t)
{
	struct org *o = &s->o[oi];

	while (t >= o->win_end) {
		accrue(s, o, o->win_end);
		close_window(s, o, oi);
	}
	accrue(s, o, t);
}

static void check_late(struct sim *s, uint32_t oi)
{
	struct org *o = &s->o[oi];
	struct sim_org_result *r = &s->res->org[oi];
	int c = r->late;
	uint32_t f;

	if (c < 0 || !o->joined[c] || o->floor[c] == 0)
		return;
	f = o->floor[c];
	if (r->late_t90_ms == SIM_NEVER && o->running[c] >= 0.9 * f)
		r->late_t90_ms = s->now - o->join_t;
	if (r->late_t100_ms == SIM_NEVER && o->running[c] >= f)
		r->late_t100_ms = s->now - o->join_t;
}

/* The refresher: recompute from the live counts, install (fair mode), keep the entitlement. */
static int refresh_org(struct sim *s, uint32_t oi)
{
	struct org *o = &s->o[oi];
	const struct sim_org_spec *sp = o->spec;
	struct fairshare_campaign in[MAX_C];
	struct fairshare_result out[MAX_C];
	uint32_t ar[SIM_MAX_AGENTS] = { 0 }, floors[MAX_C];
	struct fairshare_org org = { s->spec->system_limit,
				     s->sys.running,
				     sp->org_limit,
				     sp->per_agent,
				     true,
				     o->version ? s->now - o->last_refresh : 0,
				     ar,
				     sp->n_agents };
	int rc;

	for (uint32_t c = 0; c < sp->n; c++) {
		ar[sp->c[c].agent] += o->running[c];
		in[c] = (struct fairshare_campaign){
			.id = sp->c[c].id,
			.running = o->running[c],
			.due = o->joined[c] ? o->backlog[c] : 0,
			.ceiling = sp->c[c].ceiling,
			.agent = sp->c[c].agent,
			.state = o->paused[c] ? FAIRSHARE_PAUSED : FAIRSHARE_RUNNING,
			.carry = o->carry[c],
		};
	}
	rc = fairshare_recompute(&org, in, sp->n, out, NULL, s->work, s->work_size);
	if (rc)
		return rc;
	account(s, oi, s->now);
	for (uint32_t c = 0; c < sp->n; c++) {
		o->carry[c] = out[c].carry;
		o->fluid[c] = out[c].fluid;
		floors[c] = o->floor[c] = out[c].floor;
	}
	if (s->mode == SIM_FAIR)
		rc = fairshare_gate_install(&o->g, o->version + 1, floors, sp->n, s->now,
					    10 * s->spec->refresh_ms);
	o->version++;
	o->last_refresh = s->now;
	return rc;
}

/* created_at of contact k of campaign c (FIFO's order; for arrivals also its arrival). */
static int64_t created_of(const struct sim *s, const struct org *o, uint32_t c, uint32_t k)
{
	const struct sim_campaign_spec *cs = &o->spec->c[c];

	if (cs->arrival_ms)
		return (int64_t)(cs->join_ms + (uint64_t)k * cs->arrival_ms);
	return cs->created_ms + (int64_t)k * (int64_t)s->spec->contact_spacing_ms;
}

static int start_call(struct sim *s, uint32_t oi, uint32_t c)
{
	struct org *o = &s->o[oi];

	if (o->spec->c[c].arrival_ms) {
		o->wait_ms += (double)((int64_t)s->now - created_of(s, o, c, o->dialled[c]));
		o->waited++;
	}
	o->running[c]++;
	o->org_running++;
	o->backlog[c]--;
	s->res->org[oi].calls++;
	return push(&s->h, s->now + duration_ms(s, oi, c, o->dialled[c]++), EV_END, oi, c);
}

struct pick_ctx {
	struct sim *s;
	struct org *o;
};

/* The selector's ready callback: the campaign has a contact and the gate grants a slot; a
 * refusal at the org or system level (or by the direct reserve) blocks every campaign alike. */
static enum drr_ready ready_cb(void *ctx, uint32_t c)
{
	struct pick_ctx *p = ctx;
	struct fairshare_slot slot = { c, p->o->gc[c].agent };
	struct fairshare_decision d;

	if (!dialable(p->o, c))
		return DRR_NOT_READY;
	if (fairshare_gate_try(&p->o->g, &p->s->sys, &slot, p->s->now, &d))
		return DRR_BLOCKED;
	if (d.admitted)
		return DRR_READY;
	return fairshare_gate_blocks_org(&d) ? DRR_BLOCKED : DRR_NOT_READY;
}

/* FIFO: the dialable campaigns by the age of their next contact, oldest first. Returns n. */
static uint32_t fifo_order(const struct sim *s, const struct org *o, uint32_t *order)
{
	uint32_t n = 0;

	for (uint32_t c = 0; c < o->spec->n; c++) {
		int64_t t = created_of(s, o, c, o->dialled[c]);
		uint32_t i;

		if (!dialable(o, c))
			continue;
		for (i = n++; i > 0 && created_of(s, o, order[i - 1], o->dialled[order[i - 1]]) > t;
		     i--)
			order[i] = order[i - 1];
		order[i] = c;
	}
	return n;
}

/* FIFO: dial the oldest contact the gate (no floors: first come first served) admits, again and
 * again, until a refusal blocks the org or no campaign's contact is admitted. */
static int fifo_fill(struct sim *s, uint32_t oi)
{
	struct org *o = &s->o[oi];

	for (;;) {
		uint32_t order[MAX_C], n = fifo_order(s, o, order), i;
		int rc;

		for (i = 0; i < n; i++) {
			struct fairshare_slot slot = { order[i], o->gc[order[i]].agent };
			struct fairshare_decision d;

			rc = fairshare_gate_try(&o->g, &s->sys, &slot, s->now, &d);
			if (rc)
				return rc;
			if (d.admitted)
				break;
			if (fairshare_gate_blocks_org(&d))
				return 0;
		}
		if (i == n)
			return 0;
		rc = start_call(s, oi, order[i]);
		if (rc)
			return rc;
	}
}

static int fill(struct sim *s, uint32_t oi)
{
	struct org *o = &s->o[oi];
	struct pick_ctx p = { s, o };
	uint32_t c;
	int rc = 0;

	account(s, oi, s->now);
	if (s->mode == SIM_FAIR) {
		while (!rc && drr_next(&o->d, ready_cb, &p, &c) == 0)
			rc = start_call(s, oi, c);
	} else {
		rc = fifo_fill(s, oi);
	}
	check_late(s, oi);
	return rc;
}

static int call_end(struct sim *s, uint32_t oi, uint32_t c)
{
	struct org *o = &s->o[oi];
	struct fairshare_slot slot = { c, o->gc[c].agent };

	int rc;

	account(s, oi, s->now);
	o->running[c]--;
	o->org_running--;
	rc = fairshare_gate_release(&o->g, &s->sys, &slot);
	return rc ? rc : fill(s, oi);
}

/* Longest remaining call of the org now, for the late campaign's P3 bound. */
static uint64_t longest_remaining(const struct sim *s, uint32_t oi)
{
	uint64_t m = 0;

	for (size_t i = 0; i < s->h.n; i++)
		if (s->h.v[i].kind == EV_END && s->h.v[i].org == oi && s->h.v[i].t - s->now > m)
			m = s->h.v[i].t - s->now;
	return m;
}

/* Join, pause or resume: the active set changes, so the refresher runs at once (C5). */
static int state_change(struct sim *s, uint32_t oi, uint32_t c, enum ev_kind kind)
{
	struct org *o = &s->o[oi];
	int rc;

	account(s, oi, s->now);
	if (kind == EV_PAUSE) {
		o->paused[c] = true;
		o->excluded[c] = true;
		if (s->mode == SIM_FAIR && drr_contains(&o->d, c))
			drr_remove(&o->d, c);
	} else {
		if (kind == EV_JOIN)
			o->joined[c] = true;
		else
			o->paused[c] = false;
		if (s->now == o->win_start)
			o->excluded[c] = false;
		if (s->mode == SIM_FAIR && !drr_contains(&o->d, c))
			drr_add(&o->d, c);
		if (kind == EV_JOIN && (int)c == s->res->org[oi].late) {
			o->join_t = s->now;
			s->res->org[oi].late_bound_ms =
				longest_remaining(s, oi) + s->spec->refresh_ms;
		}
	}
	rc = refresh_org(s, oi);
	return rc ? rc : fill(s, oi);
}

/* One contact of an arriving campaign arrives; the next is scheduled. A campaign whose backlog
 * was empty becomes active, so the refresher runs at once (C5). */
static int arrive(struct sim *s, uint32_t oi, uint32_t c)
{
	struct org *o = &s->o[oi];
	const struct sim_campaign_spec *cs = &o->spec->c[c];
	int rc = 0;

	account(s, oi, s->now);
	o->arrived[c]++;
	if (o->backlog[c]++ == 0 && !o->paused[c] && o->joined[c])
		rc = refresh_org(s, oi);
	if (!rc && o->arrived[c] < cs->backlog)
		rc = push(&s->h, s->now + cs->arrival_ms, EV_ARRIVE, oi, c);
	return rc ? rc : fill(s, oi);
}

static void sample(struct sim *s)
{
	const struct sim_spec *sp = s->spec;

	for (uint32_t oi = 0; oi < sp->n_orgs; oi++) {
		struct org *o = &s->o[oi];

		account(s, oi, s->now);
		for (uint32_t c = 0; c < o->spec->n; c++) {
			double mean = o->sample_line[c] / (double)sp->sample_ms;

			if (s->csv)
				fprintf(s->csv, "%s,%.0f,%s,%s,%u,%.4f,%u,%.4f\n",
					sim_mode_name(s->mode), s->now / 1000.0, o->spec->id,
					o->spec->c[c].id, o->running[c], mean, o->floor[c],
					o->fluid[c]);
			if (s->sample < s->res->n_samples)
				s->res->series[((size_t)s->sample * sp->n_orgs + oi) * MAX_C + c] =
					mean;
			o->sample_line[c] = 0;
		}
	}
	s->sample++;
}

static int dispatch(struct sim *s, const struct event *e)
{
	switch (e->kind) {
	case EV_END:
		return call_end(s, e->org, e->c);
	case EV_REFRESH:
		for (uint32_t oi = 0; oi < s->spec->n_orgs; oi++) {
			int rc = refresh_org(s, oi);

			/* New floors wake a waiter only if the org has a free line (C9). */
			if (!rc && s->o[oi].g.org_running < s->o[oi].spec->org_limit)
				rc = fill(s, oi);
			if (rc)
				return rc;
			check_late(s, oi);
		}
		return push(&s->h, s->now + s->spec->refresh_ms, EV_REFRESH, 0, 0);
	case EV_SAMPLE:
		sample(s);
		return push(&s->h, s->now + s->spec->sample_ms, EV_SAMPLE, 0, 0);
	case EV_ARRIVE:
		return arrive(s, e->org, e->c);
	default:
		return state_change(s, e->org, e->c, (enum ev_kind)e->kind);
	}
}

static int org_init(struct sim *s, uint32_t oi)
{
	struct org *o = &s->o[oi];
	const struct sim_org_spec *sp = &s->spec->org[oi];
	struct fairshare_gate_limits lim = { sp->org_limit, sp->per_agent, true };
	int rc = 0;

	memset(o, 0, sizeof(*o));
	o->spec = sp;
	o->win_end = s->spec->window_ms;
	s->res->org[oi].late = late_of(sp);
	s->res->org[oi].late_t90_ms = s->res->org[oi].late_t100_ms = SIM_NEVER;
	rc = drr_init(&o->d, o->de, sp->n, 1, 1);
	for (uint32_t c = 0; c < sp->n && !rc; c++) {
		const struct sim_campaign_spec *cs = &sp->c[c];

		o->backlog[c] = cs->arrival_ms ? 0 : cs->backlog;
		if (!rc && cs->arrival_ms)
			rc = push(&s->h, cs->join_ms, EV_ARRIVE, oi, c);
		o->excluded[c] = cs->join_ms > 0;
		o->gc[c] = (struct fairshare_gate_campaign){ .ceiling = cs->ceiling,
							     .agent = cs->agent };
		/* Batches present at the start are there when the first refresh runs. */
		o->joined[c] = cs->join_ms == 0;
		if (cs->join_ms == 0 && s->mode == SIM_FAIR)
			rc = drr_add(&o->d, c);
		if (!rc && cs->join_ms > 0)
			rc = push(&s->h, cs->join_ms, EV_JOIN, oi, c);
		if (!rc && cs->pause_ms != SIM_NEVER)
			rc = push(&s->h, cs->pause_ms, EV_PAUSE, oi, c);
		if (!rc && cs->resume_ms != SIM_NEVER)
			rc = push(&s->h, cs->resume_ms, EV_RESUME, oi, c);
	}
	if (!rc)
		rc = fairshare_gate_init(&o->g, &lim, o->gc, sp->n, FAIRSHARE_NO_CAMPAIGN, o->ga,
					 sp->n_agents);
	return rc;
}

static int sim_init(struct sim *s, const struct sim_spec *spec, enum sim_mode mode,
		    struct sim_result *res)
{
	int rc = 0;

	memset(res, 0, sizeof(*res));
	*s = (struct sim){ .spec = spec, .mode = mode, .res = res };
	s->sys = (struct fairshare_system){ spec->system_limit, 0 };
	s->work_size = fairshare_work_size(MAX_C, SIM_MAX_AGENTS);
	s->work = malloc(s->work_size);
	res->n_samples = (uint32_t)(spec->duration_ms / spec->sample_ms);
	res->series = calloc((size_t)res->n_samples * spec->n_orgs * MAX_C, sizeof(double));
	if (!s->work || !res->series)
		return -ENOMEM;
	for (uint32_t oi = 0; oi < spec->n_orgs && !rc; oi++)
		rc = org_init(s, oi);
	if (!rc)
		rc = push(&s->h, 0, EV_REFRESH, 0, 0);
	return rc ? rc : push(&s->h, spec->sample_ms, EV_SAMPLE, 0, 0);
}

static void finish(struct sim *s)
{
	double busy = 0, lines = 0;

	for (uint32_t oi = 0; oi < s->spec->n_orgs; oi++) {
		struct org *o = &s->o[oi];
		struct sim_org_result *r = &s->res->org[oi];

		account(s, oi, s->spec->duration_ms);
		r->jain_mean = r->windows ? o->jain_sum / r->windows : 0;
		r->utilisation = o->busy / ((double)o->spec->org_limit * s->spec->duration_ms);
		busy += o->busy;
		lines += (double)o->spec->org_limit * s->spec->duration_ms;
		r->decisions = o->g.stats.admitted;
		for (int l = 0; l < FAIRSHARE_LEVEL_COUNT; l++) {
			r->refused[l] = o->g.stats.refused[l];
			r->decisions += o->g.stats.refused[l];
		}
		r->wait_s = o->waited ? o->wait_ms / 1000.0 / (double)o->waited : 0;
		if (r->late >= 0)
			r->late_line_s = o->total_line[r->late] / 1000.0;
	}
	s->res->utilisation = busy / lines;
}

static bool spec_ok(const struct sim_spec *sp)
{
	if (sp->n_orgs == 0 || sp->n_orgs > SIM_MAX_ORGS || sp->sample_ms == 0 ||
	    sp->window_ms == 0 || sp->refresh_ms == 0 || sp->duration_ms == 0)
		return false;
	for (uint32_t oi = 0; oi < sp->n_orgs; oi++) {
		if (sp->org[oi].n > MAX_C || sp->org[oi].n_agents > SIM_MAX_AGENTS)
			return false;
		for (uint32_t c = 0; c < sp->org[oi].n; c++)
			if (sp->org[oi].c[c].agent >= sp->org[oi].n_agents)
				return false;
	}
	return true;
}

int sim_run(const struct sim_spec *spec, enum sim_mode mode, FILE *csv, FILE *windows,
	    struct sim_result *res)
{
	struct sim s;
	int rc;

	if (!spec || !res || !spec_ok(spec))
		return -EINVAL;
	rc = sim_init(&s, spec, mode, res);
	s.csv = csv;
	s.windows = windows;
	while (!rc && s.h.n > 0 && s.h.v[0].t <= spec->duration_ms) {
		struct event e = pop(&s.h);

		s.now = e.t;
		rc = dispatch(&s, &e);
	}
	if (!rc)
		finish(&s);
	free(s.h.v);
	free(s.work);
	if (rc)
		sim_result_free(res);
	return rc;
}

void sim_result_free(struct sim_result *res)
{
	free(res->series);
	res->series = NULL;
}

void sim_csv_header(FILE *csv, FILE *windows)
{
	if (csv)
		fprintf(csv, "mode,t_s,org,campaign,running,mean_running,floor,fluid\n");
	if (windows)
		fprintf(windows, "mode,org,start_s,end_s,campaigns,jain\n");
}

const char *sim_mode_name(enum sim_mode mode)
{
	return mode == SIM_FAIR ? "fair_share" : "fifo";
}
