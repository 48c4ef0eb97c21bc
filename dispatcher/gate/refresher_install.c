/* The refresher, one organisation: its installs — system limit, org limits, floors in
 * PostgreSQL and then in Redis, the wake (refresher.h, refresher_int.h). */
#include "refresher_int.h"

#include "error.h"
#include "log.h"

#include <inttypes.h>

/* --- one organisation: installs (system limit, org limits, floors in Redis, in PostgreSQL) --- */

static void install_limits(struct refresher *r);
static void install_floors(struct refresher *r);
static void install_pg(struct refresher *r);

static void system_cb(struct gate *g, int status, const struct gate_install_result *res, void *data)
{
	struct refresher *r = data;

	(void)g;
	if (!refr_cb_enter(r))
		return;
	if (status) {
		refr_org_done(r, status);
		return;
	}
	if (res->applied)
		r->stats.system_installs++;
	install_limits(r);
}

/* The system limit is installed when PostgreSQL's version is newer than the one Redis holds
 * (this org's gate_read), as the org limits are: not from the refresher's memory, which a
 * rebuild from older limits (or another refresher) makes wrong. */
void refr_install(struct refresher *r)
{
	if (r->from_pg) { /* the gate's PostgreSQL side only: see pg_install_cb() */
		install_pg(r);
		return;
	}
	if (r->sys_limits_version < 1 || (uint64_t)r->sys_limits_version <= r->v_system_version) {
		install_limits(r);
		return;
	}
	int rc = gate_install_system_limit(r->gate, (uint64_t)r->sys_limits_version,
					   r->global_limit, system_cb, r);
	if (rc) {
		refr_org_done(r, rc);
		return;
	}
	r->pending++;
}

static void limits_cb(struct gate *g, int status, const struct gate_install_result *res, void *data)
{
	struct refresher *r = data;

	(void)g;
	if (!refr_cb_enter(r))
		return;
	if (status) {
		refr_org_done(r, status);
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
		refr_org_done(r, -ENOMEM);
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
		refr_org_done(r, rc);
		return;
	}
	r->pending++;
}

/* The tenure ended by a refused install: stop installing at once. */
static void fenced(struct refresher *r)
{
	refr_lease_lost(r);
	r->stats.last_install_us = us_since(r->t2);
	r->t2 = 0;
	r->status = -ESTALE;
	r->org_i = r->n_orgs;
	refr_org_next(r);
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
	if (!refr_cb_enter(r))
		return;
	if (status) {
		r->stats.wake_errors++;
		LOG_AT(LOG_WARN, LOG_GATE, (&(const struct log_ids){ .org = r->orgs[r->org_i] }),
		       "refresher: waking waiters after the install failed (%d)", status);
	} else {
		r->stats.woken += res->woken;
	}
	refr_org_done(r, 0);
}

static void wake_send(struct refresher *r)
{
	int rc = gate_handoff_wake(r->gate, r->orgs[r->org_i], REFRESHER_WAKE_MAX, wake_cb, r);

	if (rc) {
		r->stats.wake_errors++;
		refr_org_done(r, 0);
		return;
	}
	r->pending++;
}

static void floors_cb(struct gate *g, int status, const struct gate_install_result *res, void *data)
{
	struct refresher *r = data;

	(void)g;
	if (!refr_cb_enter(r))
		return;
	if (status) {
		refr_org_done(r, status);
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
		if (v->floor && !refr_camp_find(r, id))
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
		refr_org_done(r, rc);
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
		refr_org_done(r, -ENOMEM);
		return;
	}
	floors_send(r, delta);
}

static void wake_pg_cb(int status, const struct pg_results *res, void *data)
{
	struct refresher *r = data;

	(void)res;
	if (!refr_cb_enter(r))
		return;
	if (status) {
		r->stats.wake_errors++;
		LOG_AT(LOG_WARN, LOG_GATE, (&(const struct log_ids){ .org = r->orgs[r->org_i] }),
		       "refresher: waking waiters after the install failed (%s)",
		       dsp_strerror(status));
	} else {
		r->stats.pg_wakes++;
	}
	refr_org_done(r, 0);
}

/* Floors installed from the call rows' counts. In postgres mode, the postgres-mode gate's
 * wake: a NOTIFY on the channel its release uses, so that the workers with contacts of the org
 * waiting try again under the new floors (C9). In redis mode (Redis could not answer) nothing
 * more: the Redis gate wakes its own waiters, and the fleet is switching. A failed wake does
 * not fail the cycle. */
static void wake_pg(struct refresher *r)
{
	if (!r->pg_mode) {
		refr_org_done(r, 0);
		return;
	}
	const char *ov[] = { r->orgs[r->org_i] };
	struct pg_query q = { .stmt = r->st[ST_WAKE], .nparams = 1, .values = ov };
	int rc = pg_pool_batch(r->pool, PG_LANE_NORMAL, &q, 1, wake_pg_cb, r);
	if (rc) {
		r->stats.wake_errors++;
		refr_org_done(r, 0);
		return;
	}
	r->pending++;
}

static void pg_install_cb(struct gate_pg *g, int status, bool applied, void *data)
{
	struct refresher *r = data;

	(void)g;
	if (!refr_cb_enter(r))
		return;
	if (status) {
		refr_org_done(r, status);
		return;
	}
	if (!applied) {
		r->stats.refused_pg++;
		LOG_AT(LOG_WARN, LOG_GATE, (&(const struct log_ids){ .org = r->orgs[r->org_i] }),
		       "refresher: floors %" PRIu64 " refused by PostgreSQL", r->version);
		fenced(r); /* a newer tenure installed: nothing goes to Redis */
		return;
	}
	if (r->from_pg) {
		r->stats.pg_only_installs++;
		wake_pg(r);
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
		refr_org_done(r, rc);
		return;
	}
	r->pending++;
}
