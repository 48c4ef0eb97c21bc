/* The refresher, one organisation: its reads and its recompute (refresher.h, refresher_int.h). */
#include "refresher_int.h"

#include "error.h"
#include "log.h"

#include <inttypes.h>

/* --- one organisation: reads --- */

void refr_org_done(struct refresher *r, int status)
{
	if (status) {
		r->stats.errors++;
		if (!r->status)
			r->status = status;
		LOG_AT(LOG_WARN, LOG_GATE, (&(const struct log_ids){ .org = r->orgs[r->org_i] }),
		       "refresher: organisation not refreshed (%s)", dsp_strerror(status));
	}
	r->stats.last_install_us = r->t2 ? us_since(r->t2) : 0;
	r->org_i++;
	refr_org_next(r);
}

static void compute(struct refresher *r);
static void counts_send(struct refresher *r);

/* One of the org's reads ended with status (PostgreSQL's; a failed gate_read() is view_status).
 * After the last: the recompute, or first the call rows' counts when Redis could not answer. */
static void read_done(struct refresher *r, int status)
{
	if (status && !r->read_status)
		r->read_status = status;
	if (--r->reads)
		return;
	r->stats.last_read_us = us_since(r->t0);
	if (r->read_status)
		refr_org_done(r, r->read_status);
	else if (r->view_status)
		counts_send(r);
	else
		compute(r);
}

struct camp *refr_camp_find(const struct refresher *r, const char *id)
{
	size_t lo = 0, hi = r->camps.n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		struct camp *c = (struct camp *)r->camps.p + mid;
		int d = strcmp(text_at(&r->text, c->id), id);
		if (!d)
			return c;
		if (d < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static int read_campaigns(struct refresher *r, const PGresult *cr, const PGresult *wr)
{
	int n = PQntuples(cr);

	r->text.n = r->camps.n = 0;
	if (vec_reserve(&r->camps, (size_t)n))
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		struct camp *c = (struct camp *)r->camps.p + i;
		const char *st = PQgetvalue(cr, i, 2);
		*c = (struct camp){
			.state = !strcmp(st, "active")	 ? FAIRSHARE_RUNNING
				 : !strcmp(st, "paused") ? FAIRSHARE_PAUSED
							 : FAIRSHARE_STOPPED,
			.ceiling = cell_u32(cr, i, 3),
			.due = cell_u32(cr, i, 4),
		};
		if (text_add(&r->text, PQgetvalue(cr, i, 0), &c->id) ||
		    text_add(&r->text, PQgetvalue(cr, i, 1), &c->agent))
			return -ENOMEM;
	}
	r->camps.n = (size_t)n;
	/* waiting: claimed contacts, merged by id */
	for (int i = 0; i < PQntuples(wr); i++) {
		struct camp *c = refr_camp_find(r, PQgetvalue(wr, i, 0));
		if (c)
			c->waiting = cell_u32(wr, i, 1);
	}
	return 0;
}

/* The stored carries (SQL_REFRESHER_CARRIES), merged by id: a campaign's into its camp, the
 * direct one ('') into r->direct, those of campaigns that are gone dropped. */
static int read_carries(struct refresher *r, const PGresult *kr)
{
	r->direct.n = 0;
	for (int i = 0; i < PQntuples(kr); i++) {
		const char *id = PQgetvalue(kr, i, 0);
		struct fairshare_carry k = { .floor = cell_u32(kr, i, 1),
					     .deficit = cell_i64(kr, i, 2),
					     .fluid_num = cell_i64(kr, i, 3),
					     .fluid_den = cell_i64(kr, i, 4),
					     .idle_ms = (uint64_t)cell_i64(kr, i, 5) };
		struct camp *c = id[0] ? refr_camp_find(r, id) : NULL;
		if (c) {
			c->carry = k;
		} else if (!id[0]) {
			if (vec_reserve(&r->direct, 1))
				return -ENOMEM;
			*(struct fairshare_carry *)r->direct.p = k;
			r->direct.n = 1;
		}
	}
	return 0;
}

/* The running counts from the call rows (SQL_REFRESHER_RUNNING, SQL_REFRESHER_LIVE) into the
 * fields gate_read()'s view fills otherwise, so that one recompute serves both sources. Nothing
 * the Redis gate holds is known: versions and floors 0 (no Redis install follows). */
static int counts_read(struct refresher *r, const PGresult *run, const PGresult *live)
{
	int n = PQntuples(run);

	r->from_pg = true;
	r->v_limits_version = r->v_floors_version = r->v_system_version = 0;
	r->v_direct_running = r->v_direct_floor = 0;
	r->v_system_running = PQntuples(live) == 1 ? cell_u32(live, 0, 0) : 0;
	r->v_k = PQntuples(live) == 1 ? cell_u32(live, 0, 1) : 0;
	r->vtext.n = r->vcamps.n = r->vagents.n = 0;
	if (vec_reserve(&r->vcamps, (size_t)n) || vec_reserve(&r->vagents, (size_t)n))
		return -ENOMEM;
	for (int i = 0; i < n; i++) {
		bool by_agent = PQgetvalue(run, i, 0)[0] == '1';
		int col = by_agent ? 2 : 1;
		uint32_t count = cell_u32(run, i, 3);
		size_t id;

		if (PQgetisnull(run, i, col)) { /* direct calls; calls without an agent */
			if (!by_agent)
				r->v_direct_running = count;
			continue;
		}
		if (text_add(&r->vtext, PQgetvalue(run, i, col), &id))
			return -ENOMEM;
		if (by_agent)
			((struct vagent *)r->vagents.p)[r->vagents.n++] =
				(struct vagent){ .id = id, .running = count };
		else
			((struct vcamp *)r->vcamps.p)[r->vcamps.n++] =
				(struct vcamp){ .id = id, .running = count };
	}
	r->stats.pg_counts++;
	return 0;
}

static void counts_cb(int status, const struct pg_results *res, void *data)
{
	struct refresher *r = data;

	if (!refr_cb_enter(r))
		return;
	if (!status)
		status = counts_read(r, res->res[0], res->res[1]);
	if (status)
		refr_org_done(r, status);
	else
		compute(r);
}

/* Redis could not answer this org's gate_read() (in redis mode: down, lost, or a deadline):
 * the running counts come from the call rows instead, and the floors go to PostgreSQL only —
 * where the postgres-mode gate the fleet is about to switch to reads them. */
static void counts_send(struct refresher *r)
{
	const char *ov[] = { r->orgs[r->org_i] };
	struct pg_query q[] = {
		{ .stmt = r->st[ST_RUNNING], .nparams = 1, .values = ov },
		{ .stmt = r->st[ST_LIVE], .nparams = 1, .values = ov },
	};

	r->stats.redis_fallbacks++;
	LOG_AT(LOG_WARN, LOG_GATE, (&(const struct log_ids){ .org = r->orgs[r->org_i] }),
	       "refresher: Redis cannot answer (%s): running counts from the call rows, floors to "
	       "PostgreSQL only",
	       dsp_strerror(r->view_status));
	int rc = pg_pool_batch(r->pool, PG_LANE_NORMAL, q, 2, counts_cb, r);
	if (rc) {
		refr_org_done(r, rc);
		return;
	}
	r->pending++;
}

static void pg_read_cb(int status, const struct pg_results *res, void *data)
{
	struct refresher *r = data;

	if (!refr_cb_enter(r))
		return;
	if (!status && PQntuples(res->res[0]) != 1)
		status = -ENOENT; /* the organisation was deleted */
	if (!status) {
		const PGresult *o = res->res[0];
		r->limits_version = cell_i64(o, 0, 0);
		r->org_limit = cell_u32(o, 0, 1);
		r->per_agent = cell_u32(o, 0, 2);
		r->enforced = PQgetvalue(o, 0, 3)[0] == 't';
		r->global_limit = cell_u32(o, 0, 4);
		r->sys_limits_version = cell_i64(o, 0, 5);
		r->elapsed_ms = cell_i64(o, 0, 6);
		status = read_campaigns(r, res->res[1], res->res[2]);
		if (!status)
			status = read_carries(r, res->res[3]);
		if (!status && r->from_pg)
			status = counts_read(r, res->res[4], res->res[5]);
	}
	read_done(r, status);
}

static int view_copy(struct refresher *r, const struct gate_view *v)
{
	r->v_limits_version = v->limits_version;
	r->v_k = v->direct_waiting;
	r->v_system_running = v->system_running;
	r->v_system_version = v->system_version;
	r->v_floors_version = v->floors_version;
	r->v_direct_running = r->v_direct_floor = 0;
	r->vtext.n = r->vcamps.n = r->vagents.n = 0;
	if (vec_reserve(&r->vcamps, v->n_campaigns) || vec_reserve(&r->vagents, v->n_agents))
		return -ENOMEM;
	for (uint32_t i = 0; i < v->n_campaigns; i++) {
		const struct gate_campaign_view *c = &v->campaigns[i];
		if (!c->id) {
			r->v_direct_running = c->running;
			r->v_direct_floor = c->floor;
			continue;
		}
		struct vcamp *d = (struct vcamp *)r->vcamps.p + r->vcamps.n;
		if (text_add(&r->vtext, c->id, &d->id))
			return -ENOMEM;
		d->running = c->running;
		d->floor = c->floor;
		r->vcamps.n++;
	}
	for (uint32_t i = 0; i < v->n_agents; i++) {
		struct vagent *d = (struct vagent *)r->vagents.p + i;
		if (text_add(&r->vtext, v->agents[i].id, &d->id))
			return -ENOMEM;
		d->running = v->agents[i].running;
		r->vagents.n++;
	}
	return 0;
}

static void view_cb(struct gate *g, int status, const struct gate_view *v, void *data)
{
	struct refresher *r = data;

	(void)g;
	if (!refr_cb_enter(r))
		return;
	if (!status)
		status = view_copy(r, v);
	r->view_status = status; /* a view not had: the call rows' counts instead */
	read_done(r, 0);
}

void refr_org_next(struct refresher *r)
{
	if (r->org_i >= r->n_orgs) {
		refr_cycle_end(r, r->status);
		return;
	}
	if (uv_hrtime() - r->lease_sent >= r->o.lease_ms * 500000u) {
		/* Half the lease is gone: renew before this organisation. */
		int rc = refr_renew(r);
		if (!rc)
			return;
		refr_lease_lost(r); /* installing further could outlive the lease */
		r->status = rc;
		r->org_i = r->n_orgs;
		refr_cycle_end(r, rc);
		return;
	}
	/* In postgres mode the running counts come with the PostgreSQL reads (the last two);
	 * otherwise from gate_read(), in parallel. */
	const char *org = r->orgs[r->org_i];
	const char *ov[] = { org };
	struct pg_query q[] = {
		{ .stmt = r->st[ST_ORG], .nparams = 1, .values = ov },
		{ .stmt = r->st[ST_CAMPAIGNS], .nparams = 1, .values = ov },
		{ .stmt = r->st[ST_WAITING], .nparams = 1, .values = ov },
		{ .stmt = r->st[ST_CARRIES], .nparams = 1, .values = ov },
		{ .stmt = r->st[ST_RUNNING], .nparams = 1, .values = ov },
		{ .stmt = r->st[ST_LIVE], .nparams = 1, .values = ov },
	};
	r->t0 = uv_hrtime();
	r->t2 = 0;
	r->from_pg = r->pg_mode;
	r->reads = r->from_pg ? 1 : 2;
	r->read_status = r->view_status = 0;
	int rc = pg_pool_batch(r->pool, PG_LANE_NORMAL, q, r->from_pg ? 6 : 4, pg_read_cb, r);
	if (rc) {
		refr_org_done(r, rc);
		return;
	}
	r->pending++;
	if (r->from_pg)
		return;
	rc = gate_read(r->gate, org, view_cb, r);
	if (rc) {
		r->view_status = rc;
		read_done(r, 0);
	} else {
		r->pending++;
	}
}

/* --- one organisation: recompute --- */

static uint32_t view_running(const struct refresher *r, const struct vec *v, const char *id)
{
	size_t lo = 0, hi = v->n;
	while (lo < hi) { /* vcamp and vagent share their layout */
		size_t mid = (lo + hi) / 2;
		const struct vagent *e = (const struct vagent *)v->p + mid;
		int d = strcmp(text_at(&r->vtext, e->id), id);
		if (!d)
			return e->running;
		if (d < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}

/* qsort() has no context argument: the arena the offsets being sorted point into. The loop is
 * single-threaded and the sort never re-enters. */
static const struct vec *sort_arena;

static int off_cmp(const void *x, const void *y)
{
	return strcmp(text_at(sort_arena, *(const size_t *)x),
		      text_at(sort_arena, *(const size_t *)y));
}

static uint32_t agent_index(const struct refresher *r, size_t off)
{
	const size_t *a = r->agents.p;
	const char *id = text_at(&r->text, off);
	size_t lo = 0, hi = r->agents.n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int d = strcmp(text_at(&r->text, a[mid]), id);
		if (!d)
			return (uint32_t)mid;
		if (d < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return FAIRSHARE_NO_AGENT;
}

/* Agent indexes: the campaigns' agents, sorted and unique; agent_running from the view. */
static int build_agents(struct refresher *r)
{
	size_t n = r->camps.n;
	if (vec_reserve(&r->agents, n ? n : 1) || vec_reserve(&r->agent_running, n ? n : 1))
		return -ENOMEM;
	size_t *a = r->agents.p;
	for (size_t i = 0; i < n; i++)
		a[i] = ((struct camp *)r->camps.p)[i].agent;
	sort_arena = &r->text;
	qsort(a, n, sizeof(*a), off_cmp);
	size_t u = 0;
	for (size_t i = 0; i < n; i++)
		if (!u || strcmp(text_at(&r->text, a[u - 1]), text_at(&r->text, a[i])))
			a[u++] = a[i];
	r->agents.n = u;
	uint32_t *run = r->agent_running.p;
	for (size_t i = 0; i < u; i++)
		run[i] = view_running(r, &r->vagents, text_at(&r->text, a[i]));
	return 0;
}

/* The recompute's inputs: every campaign, then the direct pseudo-campaign while direct dials
 * wait or its carry is stored. Returns the number of inputs, or -ENOMEM. */
static int build_inputs(struct refresher *r)
{
	size_t n = r->camps.n + 1;
	if (vec_reserve(&r->in, n) || vec_reserve(&r->out, n) || build_agents(r))
		return -ENOMEM;
	struct fairshare_campaign *in = r->in.p;
	for (size_t i = 0; i < r->camps.n; i++) {
		const struct camp *c = (const struct camp *)r->camps.p + i;
		const char *id = text_at(&r->text, c->id);
		in[i] = (struct fairshare_campaign){
			.id = id,
			.running = view_running(r, &r->vcamps, id),
			.waiting = c->waiting,
			.due = c->due,
			.ceiling = c->ceiling ? c->ceiling : FAIRSHARE_UNLIMITED,
			.agent = agent_index(r, c->agent),
			.state = c->state,
			.carry = c->carry,
		};
	}
	n = r->camps.n;
	if (r->v_k > 0 || r->direct.n) {
		in[n++] = (struct fairshare_campaign){
			.id = "*",
			.running = r->v_direct_running,
			.waiting = r->v_k,
			.ceiling = FAIRSHARE_UNLIMITED,
			.agent = FAIRSHARE_NO_AGENT,
			.direct = true,
			.carry = r->direct.n ? *(const struct fairshare_carry *)r->direct.p
					     : (struct fairshare_carry){ 0 },
		};
	}
	return (int)n;
}

static bool carry_kept(const struct fairshare_result *res)
{
	return res->floor || res->active || res->carry.deficit || res->carry.fluid_den ||
	       res->carry.idle_ms;
}

/* The install arrays: Redis gets the non-zero floors, PostgreSQL every campaign whose floor,
 * activity or carry is not the default. */
static int build_floors(struct refresher *r, uint32_t n)
{
	if (vec_reserve(&r->floors, n ? n : 1) || vec_reserve(&r->pgfloors, n ? n : 1))
		return -ENOMEM;
	const struct fairshare_campaign *in = r->in.p;
	const struct fairshare_result *out = r->out.p;
	struct gate_floor *f = r->floors.p;
	struct gate_pgmode_floor *p = r->pgfloors.p;
	r->floors.n = r->pgfloors.n = 0;
	for (uint32_t i = 0; i < n; i++) {
		const char *id = in[i].direct ? NULL : in[i].id;
		if (out[i].floor)
			f[r->floors.n++] =
				(struct gate_floor){ .campaign = id, .floor = out[i].floor };
		if (carry_kept(&out[i]))
			p[r->pgfloors.n++] = (struct gate_pgmode_floor){ .campaign = id,
									 .floor = out[i].floor,
									 .active = out[i].active,
									 .carry = out[i].carry };
	}
	return 0;
}

static void compute(struct refresher *r)
{
	uint64_t t = uv_hrtime();
	int n = build_inputs(r);
	if (n < 0) {
		refr_org_done(r, n);
		return;
	}
	uint64_t elapsed = r->elapsed_override;
	if (elapsed == REFRESHER_ELAPSED_MEASURED)
		elapsed = r->elapsed_ms < 0			     ? 0
			  : r->elapsed_ms > REFRESHER_ELAPSED_MAX_MS ? REFRESHER_ELAPSED_MAX_MS
								     : (uint64_t)r->elapsed_ms;
	struct fairshare_org org = {
		.system_limit = r->global_limit,
		.system_running = r->v_system_running,
		.org_limit = r->org_limit ? r->org_limit : 1,
		.per_agent = r->per_agent ? r->per_agent : FAIRSHARE_UNLIMITED,
		.enforced = r->enforced,
		.elapsed_ms = elapsed,
		.agent_running = r->agent_running.p,
		.n_agents = (uint32_t)r->agents.n,
	};
	size_t need = fairshare_work_size((uint32_t)n, org.n_agents);
	if (need > r->work_size) {
		void *w = realloc(r->work, need);
		if (!w) {
			refr_org_done(r, -ENOMEM);
			return;
		}
		r->work = w;
		r->work_size = need;
	}
	r->in.n = (size_t)n;
	int rc = fairshare_recompute(&org, r->in.p, (uint32_t)n, r->out.p, NULL, r->work,
				     r->work_size);
	if (!rc)
		rc = build_floors(r, (uint32_t)n);
	if (!rc && r->seq >= SEQ_LIMIT) {
		r->new_tenure = true; /* the next renew starts a new tenure */
		rc = -EAGAIN;
	}
	if (!rc)
		rc = gate_floors_version(r->lease_version, r->seq++, &r->version);
	if (rc) {
		refr_org_done(r, rc);
		return;
	}
	r->stats.recomputes++;
	r->stats.last_elapsed_ms = elapsed;
	r->stats.last_campaigns = (uint32_t)r->camps.n;
	r->stats.last_version = r->version;
	r->stats.last_compute_us = us_since(t);
	r->t2 = uv_hrtime();
	if (r->t2 >= r->lease_deadline) {
		/* The lease may have run out since it was renewed (a long cycle, a pause): another
		 * refresher may hold it. Install nothing more; the next cycle renews. */
		LOG_AT(LOG_WARN, LOG_GATE, (&(const struct log_ids){ .org = r->orgs[r->org_i] }),
		       "refresher: lease %" PRIu64 " may have run out: floors %" PRIu64
		       " not installed",
		       r->lease_version, r->version);
		refr_lease_lost(r);
		r->stats.last_install_us = 0;
		r->t2 = 0;
		r->status = -ETIMEDOUT;
		r->org_i = r->n_orgs;
		refr_org_next(r);
		return;
	}
	/* A pause from here to the installs is what the versions fence (tests: the hook). */
	if (r->o.before_install_cb)
		r->o.before_install_cb(r, r->orgs[r->org_i], r->version, r->o.hook_data);
	refr_install(r);
}
