/* The refresher: election, the cycle, kicks (refresher.h). One organisation's reads and
 * recompute are refresher_org.c, its installs refresher_install.c. */
#include "refresher_int.h"

#include "error.h"
#include "log.h"
#include "redis_sub.h"
#include "refresher_sql.h"

#include <inttypes.h>
#include <stdio.h>

static const char *const stmt_sql[ST_COUNT] = {
	[ST_LEASE] = SQL_REFRESHER_LEASE,	  [ST_ORGS] = SQL_REFRESHER_ORGS,
	[ST_MODE] = SQL_REFRESHER_MODE,		  [ST_ORG] = SQL_REFRESHER_ORG,
	[ST_CAMPAIGNS] = SQL_REFRESHER_CAMPAIGNS, [ST_WAITING] = SQL_REFRESHER_WAITING,
	[ST_CARRIES] = SQL_REFRESHER_CARRIES,	  [ST_RUNNING] = SQL_REFRESHER_RUNNING,
	[ST_LIVE] = SQL_REFRESHER_LIVE,		  [ST_WAKE] = SQL_REFRESHER_WAKE,
};
static const int stmt_params[ST_COUNT] = { 4, 0, 0, 1, 1, 1, 1, 1, 1, 1 };

/* --- small helpers --- */

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

bool refr_cb_enter(struct refresher *r)
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

void refr_lease_lost(struct refresher *r)
{
	if (r->lease_version)
		r->stats.lost++;
	r->lease_version = 0;
}

static void lease_cb(int status, const struct pg_results *res, void *data)
{
	struct refresher *r = data;

	if (!refr_cb_enter(r))
		return;
	if (status) {
		log_warn(LOG_GATE, "refresher: lease statement failed (%s): installing nothing",
			 dsp_strerror(status));
		refr_lease_lost(r);
		refr_cycle_end(r, status);
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
		refr_cycle_end(r, -EAGAIN);
		return;
	}
	lease_held(r, (uint64_t)cell_i64(lr, 0, 0));
	r->stats.held++;
	r->pg_mode =
		PQntuples(res->res[2]) == 1 && !strcmp(PQgetvalue(res->res[2], 0, 0), "postgres");
	r->n_orgs = (size_t)PQntuples(or);
	r->orgs = r->n_orgs ? calloc(r->n_orgs, sizeof(*r->orgs)) : NULL;
	for (size_t i = 0; i < r->n_orgs; i++)
		if (!r->orgs || !(r->orgs[i] = strdup(PQgetvalue(or, (int)i, 0)))) {
			if (r->orgs)
				r->n_orgs = i;
			refr_cycle_end(r, -ENOMEM);
			return;
		}
	r->status = 0;
	refr_org_next(r);
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
		{ .stmt = r->st[ST_MODE] },
	};
	r->lease_sent = uv_hrtime();
	int rc = pg_pool_batch(r->pool, PG_LANE_NORMAL, q, 3, lease_cb, r);
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

	if (!refr_cb_enter(r))
		return;
	if (status || PQntuples(res->res[0]) != 1) {
		log_warn(LOG_GATE, "refresher: lease %" PRIu64 " not renewed (%s)",
			 r->lease_version, status ? dsp_strerror(status) : "another holder");
		refr_lease_lost(r);
		r->status = -EAGAIN;
		r->org_i = r->n_orgs;
	} else {
		lease_held(r, (uint64_t)cell_i64(res->res[0], 0, 0));
	}
	refr_org_next(r);
}

int refr_renew(struct refresher *r)
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

void refr_cycle_end(struct refresher *r, int status)
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
