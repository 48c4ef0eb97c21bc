/* The refresher: election, per-organisation reads, recompute and installs (refresher.h). */
#include "refresher.h"

#include "error.h"
#include "fairshare.h"
#include "gate_pgmode.h"
#include "log.h"
#include "redis_sub.h"
#include "refresher_sql.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SEQ_LIMIT (1ull << 26) /* gate_floors_version()'s seq bound */

enum { ST_LEASE, ST_ORGS, ST_ORG, ST_CAMPAIGNS, ST_WAITING, ST_CARRIES, ST_COUNT };

/* A campaign as read; strings are offsets into the text arena. */
struct camp {
	size_t id, agent;
	enum fairshare_state state;
	uint32_t ceiling, due, waiting, running;
	struct fairshare_carry carry;
};

struct vcamp {
	size_t id; /* offset into the view arena */
	uint32_t running;
	uint32_t floor; /* installed floor */
};

struct vagent { /* the layout of vcamp (view_running() reads both) */
	size_t id;
	uint32_t running;
	uint32_t unused;
};

/* A grow-only array. */
struct vec {
	void *p;
	size_t n, cap, size;
};

struct refresher {
	uv_loop_t *loop;
	struct pg_pool *pool;
	struct gate *gate;
	struct gate_pg *gpg;
	struct refresher_options o;
	char owner[128];
	const struct pg_stmt *st[ST_COUNT];
	uv_timer_t timer;
	uv_timer_t kick_timer; /* a kicked cycle, REFRESHER_KICK_GAP_MS after the last one ended */
	bool started, closing, timer_closed, kick_closed;
	bool again;	   /* a kick (or a period) came during the cycle: one more after it */
	bool kick_armed;   /* kick_timer is running */
	uint64_t last_end; /* uv_now() when the last cycle ended */
	int pending;	   /* requests in flight */

	/* the cycle */
	bool busy;
	uint64_t elapsed_override;
	refresher_step_cb cb;
	void *cb_data;
	int status;
	uint64_t lease_version, seq;
	uint64_t lease_sent;	 /* uv_hrtime() when the last renew was sent */
	uint64_t lease_deadline; /* uv_hrtime() past which the lease may have run out */
	bool new_tenure;
	char **orgs;
	size_t n_orgs, org_i;

	/* one organisation's reads */
	int reads; /* outstanding reads */
	int read_status;
	uint64_t t0, t1, t2;
	int64_t limits_version, elapsed_ms;
	uint32_t org_limit, per_agent, global_limit;
	int64_t sys_limits_version;
	bool enforced;
	struct vec text, camps, direct; /* direct: 0 or 1 carry */
	struct vec vtext, vcamps, vagents;
	uint64_t v_limits_version, v_floors_version;
	uint64_t v_system_version; /* the system limit's version Redis holds (this cycle's read) */
	uint32_t v_k, v_system_running, v_direct_running, v_direct_floor;
	uint64_t version; /* floors version of this org's install */
	bool delta_sent;  /* the Redis install in flight is a delta */

	/* computation, reused */
	struct vec in, out, agents, agent_running, floors, delta, pgfloors, limits;
	void *work;
	size_t work_size;

	struct refresher_stats stats;
};

static const char *const stmt_sql[ST_COUNT] = {
	[ST_LEASE] = SQL_REFRESHER_LEASE,     [ST_ORGS] = SQL_REFRESHER_ORGS,
	[ST_ORG] = SQL_REFRESHER_ORG,	      [ST_CAMPAIGNS] = SQL_REFRESHER_CAMPAIGNS,
	[ST_WAITING] = SQL_REFRESHER_WAITING, [ST_CARRIES] = SQL_REFRESHER_CARRIES,
};
static const int stmt_params[ST_COUNT] = { 4, 0, 1, 1, 1, 1 };

static void org_next(struct refresher *r);
static void cycle_end(struct refresher *r, int status);

/* --- small helpers --- */

static int vec_reserve(struct vec *v, size_t n)
{
	if (n <= v->cap)
		return 0;
	size_t cap = v->cap ? v->cap : 16;
	while (cap < n)
		cap *= 2;
	void *p = realloc(v->p, cap * v->size);
	if (!p)
		return -ENOMEM;
	v->p = p;
	v->cap = cap;
	return 0;
}

/* Appends a string to a text arena; *off receives its offset. */
static int text_add(struct vec *t, const char *s, size_t *off)
{
	size_t len = strlen(s) + 1;
	if (vec_reserve(t, t->n + len))
		return -ENOMEM;
	memcpy((char *)t->p + t->n, s, len);
	*off = t->n;
	t->n += len;
	return 0;
}

static const char *text_at(const struct vec *t, size_t off)
{
	return (const char *)t->p + off;
}

static int64_t cell_i64(const PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col) ? 0 : strtoll(PQgetvalue(res, row, col), NULL, 10);
}

static uint32_t cell_u32(const PGresult *res, int row, int col)
{
	int64_t v = cell_i64(res, row, col);
	return v < 0 ? 0 : v > FAIRSHARE_COUNT_MAX ? FAIRSHARE_COUNT_MAX : (uint32_t)v;
}

static uint64_t us_since(uint64_t t_ns)
{
	return (uv_hrtime() - t_ns) / 1000;
}

static void orgs_free(struct refresher *r)
{
	for (size_t i = 0; i < r->n_orgs; i++)
		free(r->orgs[i]);
	free(r->orgs);
	r->orgs = NULL;
	r->n_orgs = r->org_i = 0;
}

static void vec_free(struct vec *v)
{
	free(v->p);
}

static void destroy(struct refresher *r)
{
	struct vec *vs[] = { &r->text,	  &r->camps, &r->direct,   &r->vtext,  &r->vcamps,
			     &r->vagents, &r->in,    &r->out,	   &r->agents, &r->agent_running,
			     &r->floors,  &r->delta, &r->pgfloors, &r->limits };
	for (size_t i = 0; i < sizeof(vs) / sizeof(vs[0]); i++)
		vec_free(vs[i]);
	orgs_free(r);
	free(r->work);
	free(r);
}

static void maybe_free(struct refresher *r)
{
	if (r->closing && r->pending == 0 && r->timer_closed && r->kick_closed)
		destroy(r);
}

/* Every callback starts here: false when r is closing (and maybe freed now). */
static bool cb_enter(struct refresher *r)
{
	r->pending--;
	if (!r->closing)
		return true;
	maybe_free(r);
	return false;
}

/* --- the cycle: lease and organisations --- */

/* The renew sent at r->lease_sent returned version v: the lease runs until lease_ms after the
 * statement ran on the database's clock, so at the latest lease_ms after it was sent here. */
static void lease_held(struct refresher *r, uint64_t v)
{
	if (v != r->lease_version) {
		log_info(LOG_GATE, "refresher: %s holds the lease, version %" PRIu64, r->owner, v);
		r->lease_version = v;
		r->seq = 0;
		r->new_tenure = false;
	}
	r->lease_deadline = r->lease_sent + r->o.lease_ms * 1000000u;
}

/* The tenure ended (renew refused or failed, lease run out, install fenced). */
static void lease_lost(struct refresher *r)
{
	if (r->lease_version)
		r->stats.lost++;
	r->lease_version = 0;
}

static void lease_cb(int status, const struct pg_results *res, void *data)
{
	struct refresher *r = data;

	if (!cb_enter(r))
		return;
	if (status) {
		log_warn(LOG_GATE, "refresher: lease statement failed (%s): installing nothing",
			 dsp_strerror(status));
		lease_lost(r);
		cycle_end(r, status);
		return;
	}
	const PGresult *lr = res->res[0], * or = res->res[1];
	if (PQntuples(lr) != 1) {
		if (r->lease_version) {
			log_warn(LOG_GATE, "refresher: lease %" PRIu64 " lost", r->lease_version);
			r->stats.lost++;
		}
		r->lease_version = 0;
		r->stats.not_holder++;
		cycle_end(r, -EAGAIN);
		return;
	}
	lease_held(r, (uint64_t)cell_i64(lr, 0, 0));
	r->stats.held++;
	r->n_orgs = (size_t)PQntuples(or);
	r->orgs = r->n_orgs ? calloc(r->n_orgs, sizeof(*r->orgs)) : NULL;
	for (size_t i = 0; i < r->n_orgs; i++)
		if (!r->orgs || !(r->orgs[i] = strdup(PQgetvalue(or, (int)i, 0)))) {
			if (r->orgs)
				r->n_orgs = i;
			cycle_end(r, -ENOMEM);
			return;
		}
	r->status = 0;
	org_next(r);
}

static int cycle_begin(struct refresher *r)
{
	char ver[24], ms[24];
	snprintf(ver, sizeof(ver), "%" PRIu64, r->lease_version);
	snprintf(ms, sizeof(ms), "%" PRIu64, r->o.lease_ms);
	const char *lv[] = { r->owner, ver, ms, r->new_tenure ? "t" : "f" };
	struct pg_query q[] = {
		{ .stmt = r->st[ST_LEASE], .nparams = 4, .values = lv },
		{ .stmt = r->st[ST_ORGS] },
	};
	r->lease_sent = uv_hrtime();
	int rc = pg_pool_batch(r->pool, PG_LANE_NORMAL, q, 2, lease_cb, r);
	if (rc)
		return rc;
	r->pending++;
	r->busy = true;
	if (r->kick_armed) { /* this cycle reads after the kick: it serves it */
		uv_timer_stop(&r->kick_timer);
		r->kick_armed = false;
	}
	return 0;
}

/* A renew in the middle of a long cycle (its organisations take more than half the lease). */
static void renew_cb(int status, const struct pg_results *res, void *data)
{
	struct refresher *r = data;

	if (!cb_enter(r))
		return;
	if (status || PQntuples(res->res[0]) != 1) {
		log_warn(LOG_GATE, "refresher: lease %" PRIu64 " not renewed (%s)",
			 r->lease_version, status ? dsp_strerror(status) : "another holder");
		lease_lost(r);
		r->status = -EAGAIN;
		r->org_i = r->n_orgs;
	} else {
		lease_held(r, (uint64_t)cell_i64(res->res[0], 0, 0));
	}
	org_next(r);
}

static int renew(struct refresher *r)
{
	char ver[24], ms[24];
	snprintf(ver, sizeof(ver), "%" PRIu64, r->lease_version);
	snprintf(ms, sizeof(ms), "%" PRIu64, r->o.lease_ms);
	const char *lv[] = { r->owner, ver, ms, "f" };
	struct pg_query q = { .stmt = r->st[ST_LEASE], .nparams = 4, .values = lv };
	uint64_t sent = uv_hrtime();
	int rc = pg_pool_batch(r->pool, PG_LANE_NORMAL, &q, 1, renew_cb, r);
	if (rc)
		return rc;
	r->lease_sent = sent;
	r->pending++;
	return 0;
}

static void kick_arm(struct refresher *r);

static void cycle_end(struct refresher *r, int status)
{
	refresher_step_cb cb = r->cb;
	void *data = r->cb_data;

	orgs_free(r);
	r->busy = false;
	r->cb = NULL;
	r->stats.cycles++;
	r->last_end = uv_now(r->loop);
	if (cb)
		cb(r, status, data);
	if (!r->busy && r->again && !r->closing && !r->o.manual) {
		r->again = false;
		kick_arm(r);
	}
}

/* --- one organisation: reads --- */

static void org_done(struct refresher *r, int status)
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
	org_next(r);
}

static void compute(struct refresher *r);

static void read_done(struct refresher *r, int status)
{
	if (status && !r->read_status)
		r->read_status = status;
	if (--r->reads)
		return;
	r->stats.last_read_us = us_since(r->t0);
	if (r->read_status)
		org_done(r, r->read_status);
	else
		compute(r);
}

/* The campaign of that id in camps (sorted bytewise), or NULL. */
static struct camp *camp_find(const struct refresher *r, const char *id)
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
		struct camp *c = camp_find(r, PQgetvalue(wr, i, 0));
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
		struct camp *c = id[0] ? camp_find(r, id) : NULL;
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

static void pg_read_cb(int status, const struct pg_results *res, void *data)
{
	struct refresher *r = data;

	if (!cb_enter(r))
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
	if (!cb_enter(r))
		return;
	if (!status)
		status = view_copy(r, v);
	read_done(r, status);
}

static void org_next(struct refresher *r)
{
	if (r->org_i >= r->n_orgs) {
		cycle_end(r, r->status);
		return;
	}
	if (uv_hrtime() - r->lease_sent >= r->o.lease_ms * 500000u) {
		/* Half the lease is gone: renew before this organisation. */
		int rc = renew(r);
		if (!rc)
			return;
		lease_lost(r); /* installing further could outlive the lease */
		r->status = rc;
		r->org_i = r->n_orgs;
		cycle_end(r, rc);
		return;
	}
	const char *org = r->orgs[r->org_i];
	const char *ov[] = { org };
	struct pg_query q[] = {
		{ .stmt = r->st[ST_ORG], .nparams = 1, .values = ov },
		{ .stmt = r->st[ST_CAMPAIGNS], .nparams = 1, .values = ov },
		{ .stmt = r->st[ST_WAITING], .nparams = 1, .values = ov },
		{ .stmt = r->st[ST_CARRIES], .nparams = 1, .values = ov },
	};
	r->t0 = uv_hrtime();
	r->t2 = 0;
	r->reads = 2;
	r->read_status = 0;
	int rc = pg_pool_batch(r->pool, PG_LANE_NORMAL, q, 4, pg_read_cb, r);
	if (rc) {
		org_done(r, rc);
		return;
	}
	r->pending++;
	rc = gate_read(r->gate, org, view_cb, r);
	if (rc)
		read_done(r, rc);
	else
		r->pending++;
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

static void install_system(struct refresher *r);

static void compute(struct refresher *r)
{
	uint64_t t = uv_hrtime();
	int n = build_inputs(r);
	if (n < 0) {
		org_done(r, n);
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
			org_done(r, -ENOMEM);
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
		org_done(r, rc);
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
		lease_lost(r);
		r->stats.last_install_us = 0;
		r->t2 = 0;
		r->status = -ETIMEDOUT;
		r->org_i = r->n_orgs;
		org_next(r);
		return;
	}
	/* A pause from here to the installs is what the versions fence (tests: the hook). */
	if (r->o.before_install_cb)
		r->o.before_install_cb(r, r->orgs[r->org_i], r->version, r->o.hook_data);
	install_system(r);
}

/* --- one organisation: installs (system limit, org limits, floors in Redis, in PostgreSQL) --- */

static void install_limits(struct refresher *r);
static void install_floors(struct refresher *r);
static void install_pg(struct refresher *r);

static void system_cb(struct gate *g, int status, const struct gate_install_result *res, void *data)
{
	struct refresher *r = data;

	(void)g;
	if (!cb_enter(r))
		return;
	if (status) {
		org_done(r, status);
		return;
	}
	if (res->applied)
		r->stats.system_installs++;
	install_limits(r);
}

/* The system limit is installed when PostgreSQL's version is newer than the one Redis holds
 * (this org's gate_read), as the org limits are: not from the refresher's memory, which a
 * rebuild from older limits (or another refresher) makes wrong. */
static void install_system(struct refresher *r)
{
	if (r->sys_limits_version < 1 || (uint64_t)r->sys_limits_version <= r->v_system_version) {
		install_limits(r);
		return;
	}
	int rc = gate_install_system_limit(r->gate, (uint64_t)r->sys_limits_version,
					   r->global_limit, system_cb, r);
	if (rc) {
		org_done(r, rc);
		return;
	}
	r->pending++;
}

static void limits_cb(struct gate *g, int status, const struct gate_install_result *res, void *data)
{
	struct refresher *r = data;

	(void)g;
	if (!cb_enter(r))
		return;
	if (status) {
		org_done(r, status);
		return;
	}
	if (res->applied) {
		r->stats.limits_installs++;
		r->stats.limits_cycle = r->stats.cycles;
	}
	install_pg(r);
}

static void install_limits(struct refresher *r)
{
	if (r->limits_version < 1 || (uint64_t)r->limits_version <= r->v_limits_version) {
		install_pg(r);
		return;
	}
	if (vec_reserve(&r->limits, r->camps.n ? r->camps.n : 1)) {
		org_done(r, -ENOMEM);
		return;
	}
	struct gate_campaign_limits *l = r->limits.p;
	for (size_t i = 0; i < r->camps.n; i++) {
		const struct camp *c = (const struct camp *)r->camps.p + i;
		l[i] = (struct gate_campaign_limits){ .campaign = text_at(&r->text, c->id),
						      .ceiling = c->ceiling,
						      .agent = text_at(&r->text, c->agent) };
	}
	struct gate_limits lim = { .version = (uint64_t)r->limits_version,
				   .org_limit = r->org_limit,
				   .per_agent = r->per_agent,
				   .enforced = r->enforced,
				   .campaigns = l,
				   .n_campaigns = (uint32_t)r->camps.n };
	int rc = gate_install_limits(r->gate, r->orgs[r->org_i], &lim, limits_cb, r);
	if (rc) {
		org_done(r, rc);
		return;
	}
	r->pending++;
}

/* The tenure ended by a refused install: stop installing at once. */
static void fenced(struct refresher *r)
{
	lease_lost(r);
	r->stats.last_install_us = us_since(r->t2);
	r->t2 = 0;
	r->status = -ESTALE;
	r->org_i = r->n_orgs;
	org_next(r);
}

static void floors_send(struct refresher *r, bool delta);

/* After applied floors (and any limits installed before them in the cycle), the waiters the
 * rule now admits are woken (SPEC C9: "newly installed floors or a raised limit wakes the
 * waiter the rule would admit"), at most REFRESHER_WAKE_MAX per install. A failed wake does not
 * fail the cycle: the next release or heartbeat sweep wakes them too. */
static void wake_cb(struct gate *g, int status, const struct gate_handoff_result *res, void *data)
{
	struct refresher *r = data;

	(void)g;
	if (!cb_enter(r))
		return;
	if (status) {
		r->stats.wake_errors++;
		LOG_AT(LOG_WARN, LOG_GATE, (&(const struct log_ids){ .org = r->orgs[r->org_i] }),
		       "refresher: waking waiters after the install failed (%d)", status);
	} else {
		r->stats.woken += res->woken;
	}
	org_done(r, 0);
}

static void wake_send(struct refresher *r)
{
	int rc = gate_handoff_wake(r->gate, r->orgs[r->org_i], REFRESHER_WAKE_MAX, wake_cb, r);

	if (rc) {
		r->stats.wake_errors++;
		org_done(r, 0);
		return;
	}
	r->pending++;
}

static void floors_cb(struct gate *g, int status, const struct gate_install_result *res, void *data)
{
	struct refresher *r = data;

	(void)g;
	if (!cb_enter(r))
		return;
	if (status) {
		org_done(r, status);
		return;
	}
	if (res->applied) {
		r->stats.installs++;
		r->stats.delta_installs += r->delta_sent;
		wake_send(r);
		return;
	}
	if (r->delta_sent && res->version < r->version) {
		/* A delta whose base is no longer installed: install in full. */
		floors_send(r, false);
		return;
	}
	r->stats.refused_redis++;
	LOG_AT(LOG_WARN, LOG_GATE, (&(const struct log_ids){ .org = r->orgs[r->org_i] }),
	       "refresher: floors %" PRIu64 " refused by Redis (installed %" PRIu64 ")", r->version,
	       res->version);
	fenced(r);
}

static uint32_t view_floor(const struct refresher *r, const char *id)
{
	size_t lo = 0, hi = r->vcamps.n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		const struct vcamp *e = (const struct vcamp *)r->vcamps.p + mid;
		int d = strcmp(text_at(&r->vtext, e->id), id);
		if (!d)
			return e->floor;
		if (d < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return 0;
}

static bool camp_known(const struct refresher *r, const char *id)
{
	return camp_find(r, id) != NULL;
}

/* The floors that differ from those the gate_read of this cycle saw installed (at
 * v_floors_version, read atomically with them): every input whose new floor differs, and every
 * campaign of the view with a floor that is no input any more (now 0). */
static int build_delta(struct refresher *r)
{
	size_t n_in = r->camps.n + 1;
	if (vec_reserve(&r->delta, n_in + r->vcamps.n))
		return -ENOMEM;
	const struct fairshare_campaign *in = r->in.p;
	const struct fairshare_result *out = r->out.p;
	struct gate_floor *d = r->delta.p;
	size_t n = 0;
	bool direct = false;
	for (size_t i = 0; i < r->in.n; i++) {
		uint32_t was;
		if (in[i].direct) {
			direct = true;
			was = r->v_direct_floor;
		} else {
			was = view_floor(r, in[i].id);
		}
		if (was != out[i].floor)
			d[n++] = (struct gate_floor){ .campaign = in[i].direct ? NULL : in[i].id,
						      .floor = out[i].floor };
	}
	if (!direct && r->v_direct_floor)
		d[n++] = (struct gate_floor){ .campaign = NULL, .floor = 0 };
	for (size_t i = 0; i < r->vcamps.n; i++) {
		const struct vcamp *v = (const struct vcamp *)r->vcamps.p + i;
		const char *id = text_at(&r->vtext, v->id);
		if (v->floor && !camp_known(r, id))
			d[n++] = (struct gate_floor){ .campaign = id, .floor = 0 };
	}
	r->delta.n = n;
	return 0;
}

static void floors_send(struct refresher *r, bool delta)
{
	int rc;
	if (delta)
		rc = gate_install_floors_delta(r->gate, r->orgs[r->org_i], r->v_floors_version,
					       r->version, r->o.floors_ttl_ms, r->delta.p,
					       (uint32_t)r->delta.n, floors_cb, r);
	else
		rc = gate_install_floors(r->gate, r->orgs[r->org_i], r->version, r->o.floors_ttl_ms,
					 r->floors.p, (uint32_t)r->floors.n, floors_cb, r);
	if (rc) {
		org_done(r, rc);
		return;
	}
	r->delta_sent = delta;
	r->pending++;
}

/* Redis, after PostgreSQL accepted the same version: a delta against the floors this cycle read
 * when some are installed under an older version, else in full (gate_install_floors_delta()
 * applies only on top of its exact base; refused for that reason, the install is sent in full). */
static void install_floors(struct refresher *r)
{
	bool delta = r->v_floors_version > 0 && r->v_floors_version < r->version;
	if (delta && build_delta(r)) {
		org_done(r, -ENOMEM);
		return;
	}
	floors_send(r, delta);
}

static void pg_install_cb(struct gate_pg *g, int status, bool applied, void *data)
{
	struct refresher *r = data;

	(void)g;
	if (!cb_enter(r))
		return;
	if (status) {
		org_done(r, status);
		return;
	}
	if (!applied) {
		r->stats.refused_pg++;
		LOG_AT(LOG_WARN, LOG_GATE, (&(const struct log_ids){ .org = r->orgs[r->org_i] }),
		       "refresher: floors %" PRIu64 " refused by PostgreSQL", r->version);
		fenced(r); /* a newer tenure installed: nothing goes to Redis */
		return;
	}
	install_floors(r);
}

/* PostgreSQL first: the carry the next holder continues from, fenced by version; Redis only
 * once it was accepted, so a fenced holder writes nothing to either store once its successor
 * began installing this organisation (the successor writes PostgreSQL first too). */
static void install_pg(struct refresher *r)
{
	int rc = gate_pgmode_install_floors(r->gpg, r->orgs[r->org_i], r->version,
					    r->o.floors_ttl_ms, r->pgfloors.p,
					    (uint32_t)r->pgfloors.n, pg_install_cb, r);
	if (rc) {
		org_done(r, rc);
		return;
	}
	r->pending++;
}

/* --- kicks --- */

static void kick_timer_cb(uv_timer_t *t)
{
	struct refresher *r = t->data;

	r->kick_armed = false;
	if (r->busy) {
		r->again = true;
		return;
	}
	r->elapsed_override = REFRESHER_ELAPSED_MEASURED;
	int rc = cycle_begin(r);
	if (rc)
		log_warn(LOG_GATE, "refresher: kicked cycle not started (%s): the period retries",
			 dsp_strerror(rc));
	else
		r->stats.kicked++;
}

/* One cycle soon: REFRESHER_KICK_GAP_MS after the last one ended (at once if that is past).
 * Kicks while it is armed are served by it. */
static void kick_arm(struct refresher *r)
{
	if (r->kick_armed || r->closing)
		return;
	uint64_t now = uv_now(r->loop), due = r->last_end + REFRESHER_KICK_GAP_MS;
	uint64_t delay = r->stats.cycles && due > now ? due - now : 0;
	if (uv_timer_start(&r->kick_timer, kick_timer_cb, delay, 0) == 0)
		r->kick_armed = true;
}

static void notify_cb(const char *channel, const char *payload, void *data)
{
	struct refresher *r = data;

	(void)channel;
	r->stats.notifies++;
	refresher_kick(r, payload);
}

static void message_cb(struct redis_sub *sub, const char *channel, size_t channel_len,
		       const char *payload, size_t payload_len, void *data)
{
	struct refresher *r = data;

	(void)sub;
	(void)channel;
	(void)channel_len;
	(void)payload_len;
	r->stats.messages++;
	refresher_kick(r, payload);
}

/* --- public --- */

static void timer_cb(uv_timer_t *t)
{
	struct refresher *r = t->data;

	if (r->busy) {
		r->again = true;
		return;
	}
	r->elapsed_override = REFRESHER_ELAPSED_MEASURED;
	int rc = cycle_begin(r);
	if (rc)
		log_warn(LOG_GATE, "refresher: cycle not started (%s)", dsp_strerror(rc));
}

int refresher_new(uv_loop_t *loop, struct pg_pool *pool, struct gate *gate, struct gate_pg *gpg,
		  const struct refresher_options *opts, struct refresher **out)
{
	if (!loop || !pool || !gate || !gpg || !opts || !opts->owner || !opts->owner[0] ||
	    strlen(opts->owner) >= sizeof(((struct refresher *)0)->owner) || !out)
		return -EINVAL;
	struct refresher_options o = *opts;
	o.period_ms = o.period_ms ? o.period_ms : REFRESHER_PERIOD_MS;
	o.lease_ms = o.lease_ms ? o.lease_ms : REFRESHER_LEASE_MS;
	o.floors_ttl_ms = o.floors_ttl_ms ? o.floors_ttl_ms : REFRESHER_FLOORS_TTL_MS;
	if (o.lease_ms <= o.period_ms)
		return -EINVAL;
	struct refresher *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->loop = loop;
	r->pool = pool;
	r->gate = gate;
	r->gpg = gpg;
	r->o = o;
	snprintf(r->owner, sizeof(r->owner), "%s", opts->owner);
	r->o.owner = r->owner;
	struct vec *vs[] = { &r->text, &r->vtext, &r->agents };
	for (size_t i = 0; i < 3; i++)
		vs[i]->size = i == 2 ? sizeof(size_t) : 1;
	r->camps.size = sizeof(struct camp);
	r->direct.size = sizeof(struct fairshare_carry);
	r->vcamps.size = sizeof(struct vcamp);
	r->vagents.size = sizeof(struct vagent);
	r->in.size = sizeof(struct fairshare_campaign);
	r->out.size = sizeof(struct fairshare_result);
	r->agent_running.size = sizeof(uint32_t);
	r->floors.size = sizeof(struct gate_floor);
	r->pgfloors.size = sizeof(struct gate_pgmode_floor);
	r->delta.size = sizeof(struct gate_floor);
	r->limits.size = sizeof(struct gate_campaign_limits);
	for (int i = 0; i < ST_COUNT; i++) {
		int rc = pg_pool_prepare(pool, stmt_sql[i], stmt_params[i], &r->st[i]);
		if (rc) {
			free(r);
			return rc;
		}
	}
	if (!o.manual) {
		/* Neither registration can be undone: the one that can be refused (-EEXIST) first;
		 * after it only -ENOMEM can fail, and then the subscription stays (close sub). */
		int rc = o.sub ? redis_sub_subscribe(o.sub, REFRESHER_CHANNEL_REDIS, message_cb, r)
			       : 0;
		if (!rc)
			rc = pg_pool_listen(pool, REFRESHER_CHANNEL_PG, notify_cb, r);
		if (rc) {
			free(r);
			return rc;
		}
	}
	uv_timer_init(loop, &r->timer);
	uv_timer_init(loop, &r->kick_timer);
	r->timer.data = r->kick_timer.data = r;
	*out = r;
	return 0;
}

int refresher_start(struct refresher *r)
{
	if (r->o.manual)
		return -EINVAL;
	if (r->started)
		return -EBUSY;
	r->started = true;
	return uv_timer_start(&r->timer, timer_cb, 0, r->o.period_ms);
}

void refresher_kick(struct refresher *r, const char *org)
{
	if (r->closing || r->o.manual || !r->started)
		return; /* not started: its first cycle reads everything anyway */
	r->stats.kicks++;
	LOG_AT(LOG_DEBUG, LOG_GATE, (&(const struct log_ids){ .org = org }), "refresher: kicked");
	if (r->busy)
		r->again = true;
	else
		kick_arm(r);
}

int refresher_step(struct refresher *r, uint64_t elapsed_ms, refresher_step_cb cb, void *data)
{
	if (r->busy || r->closing)
		return -EBUSY;
	r->elapsed_override = elapsed_ms;
	int rc = cycle_begin(r);
	if (rc)
		return rc;
	r->cb = cb;
	r->cb_data = data;
	return 0;
}

void refresher_get_stats(const struct refresher *r, struct refresher_stats *out)
{
	*out = r->stats;
	out->lease_version = r->lease_version;
}

static void timer_close_cb(uv_handle_t *h)
{
	struct refresher *r = h->data;
	if (h == (uv_handle_t *)&r->timer)
		r->timer_closed = true;
	else
		r->kick_closed = true;
	maybe_free(r);
}

void refresher_free(struct refresher *r)
{
	if (!r || r->closing)
		return;
	r->closing = true;
	if (r->cb) {
		refresher_step_cb cb = r->cb;
		r->cb = NULL;
		cb(r, -ECANCELED, r->cb_data);
	}
	uv_close((uv_handle_t *)&r->timer, timer_close_cb);
	uv_close((uv_handle_t *)&r->kick_timer, timer_close_cb);
}
