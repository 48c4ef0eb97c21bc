/* GET /api/v1/campaigns/{campaign_id}/capacity (SPEC C12, issue 10 item 2).
 *
 * One request, at most four round trips, all on the loop's thread:
 *
 *   1. PostgreSQL (one prepared statement, api_sql_capacity_meta): the campaign row, scoped to
 *      the key's organisation (another organisation's or an unknown id answers 404), the state
 *      and active flag of every campaign that holds an installed floor (struct capacity_meta,
 *      gate_capacity.h), and the fleet's gate mode (system_settings). Cached for 1 s per
 *      (organisation, campaign) (meta_cache.h; README "Caching"): most requests skip it. A
 *      cached meta whose limits or floors versions differ from the view's is read again, and
 *      the view with it.
 *   2. Redis, in redis mode: gate_read() (limits, installed floors, live counts: the capacity
 *      view, never a recompute, never cached) and gate_read_stats() (the organisation's
 *      refusals over the rolling minute; cached for 1 s per organisation), sent together on the
 *      one connection. The C12 figures come from
 *      gate_capacity_open() / gate_capacity_answer(), the code the demo answers with.
 *      In postgres mode, or when the gate cannot answer (Redis down, state lost, nothing
 *      installed for the organisation yet), the same view is built from PostgreSQL's counts
 *      instead (the call rows, the limits, fair_share_installs/fair_share_floors,
 *      gate_direct_waiters: what the postgres-mode admission counts, gate_pgmode.c), in one
 *      batch, and answered by the same code; `source` says which.
 *   3. Only for a running campaign below its floor that cannot reach it with the lines free now:
 *      one PostgreSQL statement for the floor estimate (README "floor_eta").
 */
#include "api_int.h"

#include "capacity.h"
#include "gate.h"
#include "gate_capacity.h"
#include "ident.h"
#include "meta_cache.h"
#include "pg_pool.h"

#include <libpq-fe.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIVE	     "('dialing', 'live', 'unknown')"
#define ETA_WINDOW_S 900 /* the recent mean call duration: calls ended in the last 15 min */
#define WHY_SIZE     160
#define DIRECT_ID    "" /* the direct pseudo-campaign in SQL (fair_share_floors' key) */

/* $1 org, $2 campaign. The requested campaign (want = true) and every campaign with a floor row
 * (the installed active set, capacity.h V1), sorted bytewise like gate_capacity.h's meta; the
 * gate mode and the install's version on every row. */
const char api_sql_capacity_meta[] =
	"SELECT c.id, c.status::text, c.max_concurrent_calls, coalesce(f.active, false),"
	" c.id = $2::text, (SELECT gate_mode FROM system_settings),"
	" coalesce((SELECT version FROM fair_share_installs WHERE org_id = $1::text), 0)"
	" FROM campaigns c LEFT JOIN fair_share_floors f ON f.org_id = $1::text"
	" AND f.campaign_id = c.id"
	" WHERE c.org_id = $1::text AND (c.id = $2::text OR c.id IN"
	" (SELECT campaign_id FROM fair_share_floors WHERE org_id = $1::text))"
	" ORDER BY c.id COLLATE \"C\"";

/* The view from PostgreSQL's counts (postgres mode, or the gate cannot answer), three
 * statements in one batch. $1 org. */
static const char SQL_PG_SCALARS[] =
	"SELECT s.global_limit, (SELECT count(*) FROM calls WHERE state IN " LIVE "),"
	" o.org_limit, coalesce(o.per_agent_limit, 0), o.concurrency_management_enabled,"
	" coalesce((SELECT expires_at > clock_timestamp() FROM fair_share_installs"
	" WHERE org_id = $1::text), false),"
	" (SELECT count(*) FROM gate_direct_waiters WHERE org_id = $1::text"
	" AND expires_at > clock_timestamp())"
	" FROM organisations o CROSS JOIN system_settings s WHERE o.id = $1::text";
/* $1 org, $2 campaign: the campaigns that hold a floor or a live call, the one asked for, and
 * the direct pseudo-campaign ('') when it holds one or has waiters. */
static const char SQL_PG_CAMPAIGNS[] =
	"WITH live AS (SELECT coalesce(campaign_id, '') AS id, count(*) AS n FROM calls"
	" WHERE org_id = $1::text AND state IN " LIVE " GROUP BY 1),"
	" fl AS (SELECT campaign_id AS id, floor FROM fair_share_floors WHERE org_id = $1::text"
	" AND floor > 0),"
	" ids AS (SELECT id FROM live UNION SELECT id FROM fl UNION SELECT $2::text"
	" UNION SELECT '' WHERE EXISTS (SELECT 1 FROM gate_direct_waiters"
	" WHERE org_id = $1::text AND expires_at > clock_timestamp()))"
	" SELECT ids.id, coalesce(live.n, 0), coalesce(fl.floor, 0),"
	" coalesce(c.max_concurrent_calls, 0), c.agent_id"
	" FROM ids LEFT JOIN live ON live.id = ids.id LEFT JOIN fl ON fl.id = ids.id"
	" LEFT JOIN campaigns c ON c.org_id = $1::text AND c.id = ids.id"
	" WHERE ids.id = '' OR c.id IS NOT NULL ORDER BY ids.id COLLATE \"C\"";
/* $1 org, $2 campaign: live calls per agent, for every agent with a live call or named by a
 * campaign of SQL_PG_CAMPAIGNS, sorted bytewise (gate_capacity.c looks them up by id). */
static const char SQL_PG_AGENTS[] =
	"WITH a AS (SELECT agent_id FROM calls WHERE org_id = $1::text AND state IN " LIVE
	" UNION SELECT agent_id FROM campaigns WHERE org_id = $1::text AND (id = $2::text"
	" OR id IN (SELECT campaign_id FROM fair_share_floors WHERE org_id = $1::text AND floor > "
	"0)"
	" OR id IN (SELECT campaign_id FROM calls WHERE org_id = $1::text AND state IN " LIVE ")))"
	" SELECT a.agent_id, (SELECT count(*) FROM calls k WHERE k.org_id = $1::text"
	" AND k.agent_id = a.agent_id AND k.state IN " LIVE ")"
	" FROM a ORDER BY a.agent_id COLLATE \"C\"";

/* The floor estimate (README "floor_eta"). $1 org, $2 the campaigns above their floors ('' for
 * the direct one), $3 their excess (running - floor), $4 k (lines to be freed), $5 the window in
 * seconds. Answers the mean line-holding time (ended_at - created_at) of their calls ended in the
 * window, how many ended, and the age of the k-th oldest among each one's `excess` oldest live
 * calls (NULL when they are fewer than k). */
static const char SQL_ETA[] =
	"WITH o AS (SELECT * FROM unnest($2::text[], $3::int[]) AS t(id, excess)),"
	" m AS (SELECT extract(epoch FROM avg(e.ended_at - e.created_at))::float8 AS mean,"
	" count(*) AS n FROM calls e JOIN o ON coalesce(e.campaign_id, '') = o.id"
	" WHERE e.org_id = $1::text AND e.state = 'ended'"
	" AND e.ended_at > now() - make_interval(secs => $5::int)),"
	" cand AS (SELECT k.created_at, o.excess, row_number() OVER (PARTITION BY o.id"
	" ORDER BY k.created_at, k.id) AS rn FROM calls k JOIN o ON coalesce(k.campaign_id, '') = "
	"o.id"
	" WHERE k.org_id = $1::text AND k.state IN " LIVE ")"
	" SELECT m.mean, m.n, (SELECT extract(epoch FROM now() - created_at)::float8 FROM cand"
	" WHERE rn <= excess ORDER BY created_at OFFSET $4::int - 1 LIMIT 1) FROM m";

struct over {
	char id[API_ID_SIZE]; /* "" for the direct pseudo-campaign */
	uint32_t excess;
};

struct cap {
	struct api_call *c;
	char id[API_ID_SIZE];
	uint32_t n_meta;
	struct capacity_meta *meta;
	struct meta_cache_row *rows; /* meta's ids point into them */
	bool postgres_mode;
	/* The meta's origin (README "Caching"): the cache (from_cache; the versions it was read
	 * with, checked against the view's), or a read under the cache's generation gen. */
	bool from_cache, stale;
	uint64_t limits_version, floors_version, gen;
	uint64_t installs_version; /* read with the meta (meta_cache.h) */
	int pending;		   /* Redis answers outstanding */
	bool view_ok;		   /* the gate answered a usable view */
	int view_rc;		   /* the gate's view could not be computed */
	const char *source;	   /* "gate" or "postgres" */
	const char *pg_reason;	   /* why the counts come from PostgreSQL */
	struct capacity_answer a;
	char why[WHY_SIZE];
	bool stats_ok;
	uint64_t refused[FAIRSHARE_LEVEL_COUNT];
	/* the floor estimate's inputs */
	bool eta;	  /* running and below its floor */
	uint32_t need, k; /* floor - running; lines to be freed */
	struct over *over;
	uint32_t n_over;
	bool eta_query_done;
	double mean_s, kth_age_s;
	bool have_mean, have_kth;
	uint64_t ended_n;
};

static void cap_free(struct cap *m)
{
	free(m->meta);
	free(m->rows);
	free(m->over);
	free(m);
}

/* ---- the answer ---- */

static cJSON *refusals_json(const struct cap *m)
{
	static const struct {
		const char *name;
		enum fairshare_level level;
	} levels[] = {
		{ "system", FAIRSHARE_LEVEL_SYSTEM },
		{ "organisation", FAIRSHARE_LEVEL_ORG },
		{ "agent", FAIRSHARE_LEVEL_AGENT },
		{ "campaign", FAIRSHARE_LEVEL_CAMPAIGN },
		{ "fair_share", FAIRSHARE_LEVEL_FAIR_SHARE },
	};
	cJSON *r = cJSON_CreateObject();

	if (!r)
		return NULL;
	cJSON_AddStringToObject(r, "scope", "organisation");
	for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
		cJSON_AddNumberToObject(r, levels[i].name, (double)m->refused[levels[i].level]);
	return r;
}

static cJSON *eta_json(const struct cap *m)
{
	char basis[320];
	cJSON *e;

	if (!m->eta)
		return cJSON_CreateNull();
	if (!(e = cJSON_CreateObject()))
		return NULL;
	if (m->k == 0) {
		cJSON_AddNumberToObject(e, "estimated_seconds", 0);
		snprintf(basis, sizeof(basis), "estimate: the %u line%s it is short of %s free now",
			 m->need, m->need == 1 ? "" : "s", m->need == 1 ? "is" : "are");
	} else if (!m->have_mean || !m->have_kth) {
		cJSON_AddNullToObject(e, "estimated_seconds");
		if (!m->have_kth)
			snprintf(
				basis, sizeof(basis),
				"no estimate: the campaigns above their floors hold fewer than the "
				"%u line%s to be freed",
				m->k, m->k == 1 ? "" : "s");
		else
			snprintf(
				basis, sizeof(basis),
				"no estimate: no call of the campaigns above their floors ended in "
				"the last %d minutes",
				ETA_WINDOW_S / 60);
	} else {
		double left = m->mean_s - m->kth_age_s;
		cJSON_AddNumberToObject(e, "estimated_seconds", left > 0 ? ceil(left) : 0);
		snprintf(
			basis, sizeof(basis),
			"estimate: when the %u-th of the calls above their campaigns' floors ends, "
			"if each lasts the mean of the calls those campaigns ended in the last %d "
			"minutes (%.1f s over %llu calls)",
			m->k, ETA_WINDOW_S / 60, m->mean_s, (unsigned long long)m->ended_n);
	}
	cJSON_AddNumberToObject(e, "lines_short", m->need);
	cJSON_AddNumberToObject(e, "lines_to_be_freed", m->k);
	if (m->have_mean)
		cJSON_AddNumberToObject(e, "mean_call_seconds", round(m->mean_s * 10) / 10);
	else if (m->k)
		cJSON_AddNullToObject(e, "mean_call_seconds");
	cJSON_AddStringToObject(e, "basis", basis);
	return e;
}

static void respond(struct cap *m)
{
	const struct capacity_answer *a = &m->a;
	cJSON *b = cJSON_CreateObject(), *fs, *x;
	bool ok = b != NULL;

	if (ok) {
		cJSON_AddNumberToObject(b, "running_now", a->running_now);
		cJSON_AddNumberToObject(b, "effective_limit", a->effective_limit);
		cJSON_AddStringToObject(b, "limited_by", m->why);
		if (a->campaign_limit == FAIRSHARE_UNLIMITED)
			cJSON_AddNullToObject(b, "campaign_limit");
		else
			cJSON_AddNumberToObject(b, "campaign_limit", a->campaign_limit);
		cJSON_AddNumberToObject(b, "org_limit", a->org_limit);
		cJSON_AddNumberToObject(b, "available_now", a->available_now);
		fs = cJSON_AddObjectToObject(b, "fair_share");
		ok = fs != NULL;
		if (ok) {
			cJSON_AddNumberToObject(fs, "active_campaigns", a->active_campaigns);
			cJSON_AddNumberToObject(fs, "guaranteed_floor", a->guaranteed_floor);
			cJSON_AddNumberToObject(fs, "reserved_for_other_campaigns",
						a->reserved_for_other_campaigns);
		}
		/* Beyond the source document (README "GET /api/v1/campaigns/{id}/capacity"). */
		cJSON_AddStringToObject(b, "limited_by_level", fairshare_limit_name(a->limited_by));
		cJSON_AddBoolToObject(b, "first_come_first_served", a->fcfs);
		cJSON_AddStringToObject(b, "source", m->source);
		if (m->pg_reason)
			cJSON_AddStringToObject(b, "source_reason", m->pg_reason);
		x = eta_json(m);
		ok = ok && x && cJSON_AddItemToObject(b, "floor_eta", x);
		x = m->stats_ok ? refusals_json(m) : cJSON_CreateNull();
		ok = ok && x && cJSON_AddItemToObject(b, "refusals_last_minute", x);
		ok = ok && cJSON_GetObjectItem(b, "source");
	}
	if (!ok) {
		cJSON_Delete(b);
		b = NULL;
	}
	api_json(m->c, 200, b);
	cap_free(m);
}

static void fail(struct cap *m, int status, const char *code, const char *msg)
{
	struct api_call *c = m->c;

	cap_free(m);
	api_error(c, status, code, msg);
}

/* ---- the floor estimate ---- */

static void eta_done(int status, const struct pg_results *r, void *data)
{
	struct cap *m = data;

	if (status || PQntuples(r->res[0]) != 1) {
		struct api_call *c = m->c;

		cap_free(m);
		api_db_error(c, status ? status : -EIO, "estimating the floor");
		return;
	}
	const PGresult *res = r->res[0];
	m->have_mean = !PQgetisnull(res, 0, 0);
	m->mean_s = m->have_mean ? strtod(PQgetvalue(res, 0, 0), NULL) : 0;
	m->ended_n = strtoull(PQgetvalue(res, 0, 1), NULL, 10);
	m->have_kth = !PQgetisnull(res, 0, 2);
	m->kth_age_s = m->have_kth ? strtod(PQgetvalue(res, 0, 2), NULL) : 0;
	respond(m);
}

/* Works out the estimate's inputs from the snapshot (README "floor_eta"): need = floor - running;
 * the lines free now for the campaign cover min(need, available_now); the rest, k, must be freed
 * by calls of the campaigns above their floors ending, shared in turn with the other campaigns
 * below theirs: k = (need - free) + sum over those of min(their shortfall, need - free). */
static int eta_inputs(struct cap *m, const struct gate_capacity *gc)
{
	const struct capacity_answer *a = &m->a;
	uint32_t own = UINT32_MAX, rest;

	m->eta = false;
	if (!gc->org.enforced || !a->guaranteed_floor || a->running_now >= a->guaranteed_floor ||
	    a->fcfs || a->limited_by == FAIRSHARE_BY_PAUSED ||
	    a->limited_by == FAIRSHARE_BY_STOPPED)
		return 0;
	m->eta = true;
	m->need = a->guaranteed_floor - a->running_now;
	rest = m->need > a->available_now ? m->need - a->available_now : 0;
	m->k = rest;
	if (!rest)
		return 0;
	if (!(m->over = calloc(gc->n ? gc->n : 1, sizeof(*m->over))))
		return -ENOMEM;
	own = capacity_find(gc->cs, gc->n, m->id);
	for (uint32_t i = 0; i < gc->n; i++) {
		const struct capacity_campaign *d = &gc->cs[i];
		uint32_t floor = gc->org.floors_valid ? d->floor : 0;

		if (i == own)
			continue;
		if (d->running > floor) {
			struct over *o = &m->over[m->n_over++];
			snprintf(o->id, sizeof(o->id), "%s",
				 d->direct || !d->id ? DIRECT_ID : d->id);
			o->excess = d->running - floor;
		} else if (!d->direct && d->active && d->state == FAIRSHARE_RUNNING &&
			   d->running < floor) {
			uint32_t s = floor - d->running;
			m->k += s < rest ? s : rest;
		}
	}
	return 0;
}

/* Text arrays for the ETA statement: {"a","b"} and {1,2}. Ids are [A-Za-z0-9_-] or "". */
static int eta_query(struct cap *m)
{
	size_t cap = 4 + (size_t)m->n_over * (API_ID_SIZE + 4);
	char *ids = malloc(cap), *ex = malloc(4 + (size_t)m->n_over * 12);
	char k[16], win[16];
	size_t a = 0, b = 0;
	int rc;

	if (!ids || !ex) {
		free(ids);
		free(ex);
		return -ENOMEM;
	}
	ids[a++] = '{';
	ex[b++] = '{';
	for (uint32_t i = 0; i < m->n_over; i++) {
		a += (size_t)snprintf(ids + a, cap - a, "%s\"%s\"", i ? "," : "", m->over[i].id);
		b += (size_t)sprintf(ex + b, "%s%u", i ? "," : "", m->over[i].excess);
	}
	ids[a++] = '}';
	ids[a] = 0;
	ex[b++] = '}';
	ex[b] = 0;
	snprintf(k, sizeof(k), "%u", m->k);
	snprintf(win, sizeof(win), "%d", ETA_WINDOW_S);
	const char *v[5] = { m->c->key.org.id, ids, ex, k, win };
	struct pg_query q = { .sql = SQL_ETA, .nparams = 5, .values = v };
	rc = pg_pool_exec(api_pool(m->c->api), PG_LANE_NORMAL, &q, eta_done, m);
	free(ids);
	free(ex);
	return rc;
}

/* The figures from a view (the gate's, or built from PostgreSQL's counts) and the estimate's
 * inputs. Returns 0 (m->view_ok set), -ENOMEM or -EINVAL. */
static int from_view(struct cap *m, const struct gate_view *v)
{
	struct gate_capacity gc;
	int rc;

	if ((rc = gate_capacity_open(&gc, v, m->meta, m->n_meta, m->id)))
		return rc;
	rc = gate_capacity_answer(&gc, m->id, &m->a, m->why, sizeof(m->why));
	if (!rc)
		rc = eta_inputs(m, &gc);
	gate_capacity_close(&gc);
	m->view_ok = rc == 0;
	return rc;
}

static void view_failed(struct cap *m, int rc)
{
	fail(m, rc == -ENOMEM ? 503 : 500, rc == -ENOMEM ? "unavailable" : "internal",
	     "The capacity view could not be computed.");
}

static void finish(struct cap *m)
{
	int rc;

	if (m->eta && m->k) {
		if ((rc = eta_query(m))) {
			struct api_call *c = m->c;

			cap_free(m);
			api_db_error(c, rc, "estimating the floor");
		}
		return;
	}
	respond(m);
}

/* ---- the view from PostgreSQL's counts ---- */

static uint32_t u32(const PGresult *r, int row, int col)
{
	return (uint32_t)strtoul(PQgetvalue(r, row, col), NULL, 10);
}

static void pg_view_done(int status, const struct pg_results *r, void *data)
{
	struct cap *m = data;

	if (status || r->n != 3 || PQntuples(r->res[0]) != 1) {
		struct api_call *c = m->c;

		cap_free(m);
		api_db_error(c, status ? status : -EIO, "counting the live calls");
		return;
	}
	const PGresult *s = r->res[0], *cr = r->res[1], *ar = r->res[2];
	int nc = PQntuples(cr), na = PQntuples(ar);
	struct gate_campaign_view *cv = calloc(nc ? (size_t)nc : 1, sizeof(*cv));
	struct gate_agent_view *av = calloc(na ? (size_t)na : 1, sizeof(*av));

	if (!cv || !av) {
		free(cv);
		free(av);
		fail(m, 503, "unavailable", "Out of memory; retry shortly.");
		return;
	}
	struct gate_view v = {
		.limits_version = 1,
		.system_limit = u32(s, 0, 0),
		.system_running = u32(s, 0, 1),
		.org_limit = u32(s, 0, 2),
		.per_agent = u32(s, 0, 3),
		.enforced = PQgetvalue(s, 0, 4)[0] == 't',
		.floors_valid = PQgetvalue(s, 0, 5)[0] == 't',
		.direct_waiting = u32(s, 0, 6),
		.campaigns = cv,
		.n_campaigns = (uint32_t)nc,
		.agents = av,
		.n_agents = (uint32_t)na,
	};
	for (int i = 0; i < nc; i++) {
		const char *id = PQgetvalue(cr, i, 0);
		cv[i] = (struct gate_campaign_view){
			.id = id[0] ? id : NULL,
			.running = u32(cr, i, 1),
			.floor = u32(cr, i, 2),
			.ceiling = u32(cr, i, 3),
			.agent = id[0] && !PQgetisnull(cr, i, 4) ? PQgetvalue(cr, i, 4) : NULL,
			.known = id[0] != 0,
		};
		v.org_running += cv[i].running;
	}
	for (int i = 0; i < na; i++)
		av[i] = (struct gate_agent_view){ .id = PQgetvalue(ar, i, 0),
						  .running = u32(ar, i, 1) };
	m->source = "postgres";
	int rc = from_view(m, &v);
	free(cv);
	free(av);
	if (rc)
		view_failed(m, rc);
	else
		finish(m);
}

static void from_postgres(struct cap *m, const char *reason)
{
	const char *v[2] = { m->c->key.org.id, m->id };
	struct pg_query q[3] = {
		{ .sql = SQL_PG_SCALARS, .nparams = 1, .values = v },
		{ .sql = SQL_PG_CAMPAIGNS, .nparams = 2, .values = v },
		{ .sql = SQL_PG_AGENTS, .nparams = 2, .values = v },
	};
	int rc;

	m->pg_reason = reason;
	m->stats_ok = false; /* the gate's counters are Redis's: not kept in postgres mode */
	if ((rc = pg_pool_batch(api_pool(m->c->api), PG_LANE_NORMAL, q, 3, pg_view_done, m))) {
		struct api_call *c = m->c;

		cap_free(m);
		api_db_error(c, rc, "counting the live calls");
	}
}

/* ---- the gate ---- */

static void read_meta(struct cap *m);

static void redis_done(struct cap *m)
{
	if (--m->pending > 0)
		return;
	if (m->stale) {
		/* The limits or floors changed since the meta was cached: the active set may have
		 * too. Read it again, then the view again (the first one is gone). */
		meta_cache_drop(api_meta_cache(m->c->api), m->c->key.org.id, m->id);
		free(m->meta);
		free(m->rows);
		m->meta = NULL;
		m->rows = NULL;
		m->n_meta = 0;
		m->from_cache = m->stale = false;
		read_meta(m);
		return;
	}
	if (m->view_rc) {
		view_failed(m, m->view_rc);
		return;
	}
	if (!m->view_ok) {
		from_postgres(m, "the gate could not answer (Redis unavailable or its state not "
				 "built yet): counted from the call rows");
		return;
	}
	finish(m);
}

static void view_cb(struct gate *g, int status, const struct gate_view *v, void *data)
{
	struct cap *m = data;

	(void)g;
	if (!status && v && v->limits_version) {
		if (m->from_cache && (v->limits_version != m->limits_version ||
				      v->floors_version != m->floors_version)) {
			m->stale = true; /* read again (redis_done()) */
			redis_done(m);
			return;
		}
		if (!m->from_cache) {
			struct meta_cache_meta mm = { .rows = m->rows,
						      .n = m->n_meta,
						      .limits_version = v->limits_version,
						      .floors_version = v->floors_version,
						      .installs_version = m->installs_version };
			meta_cache_put(api_meta_cache(m->c->api), m->c->key.org.id, m->id, m->gen,
				       &mm);
		}
		m->source = "gate";
		m->view_rc = from_view(m, v); /* answered once the stats are in too */
	}
	redis_done(m);
}

static void stats_cb(struct gate *g, int status, const struct gate_stats *s, void *data)
{
	struct cap *m = data;

	(void)g;
	if (!status && s) {
		m->stats_ok = true;
		memcpy(m->refused, s->minute.refused, sizeof(m->refused));
		meta_cache_stats_put(api_meta_cache(m->c->api), m->c->key.org.id, m->refused);
	}
	redis_done(m);
}

/* ---- the campaign row ---- */

static enum fairshare_state state_of(const char *status)
{
	if (strcmp(status, "active") == 0)
		return FAIRSHARE_RUNNING;
	if (strcmp(status, "paused") == 0)
		return FAIRSHARE_PAUSED;
	return FAIRSHARE_STOPPED; /* stopped, completed */
}

/* The meta is in m (read or cached): the counts from the gate, or from PostgreSQL. */
static void with_meta(struct cap *m)
{
	struct gate *g = api_gate(m->c->api);

	if (m->postgres_mode || !g) {
		from_postgres(m, m->postgres_mode
					 ? "the gate is in postgres mode (SPEC C11): counted "
					   "from the call rows"
					 : "no Redis gate: counted from the call rows");
		return;
	}
	/* The refusals: read at most once per META_CACHE_TTL_MS per organisation. */
	bool stats = !meta_cache_stats_get(api_meta_cache(m->c->api), m->c->key.org.id, m->refused);
	m->stats_ok = !stats;
	m->pending = 1 + stats;
	if (gate_read(g, m->c->key.org.id, view_cb, m)) {
		m->pending = 0;
		from_postgres(m,
			      "the gate could not answer (Redis unavailable or its state not built "
			      "yet): counted from the call rows");
		return;
	}
	if (stats && gate_read_stats(g, m->c->key.org.id, stats_cb, m))
		m->pending--; /* the refusals block answers null */
}

/* m->meta over m->rows[0..n). */
static int meta_link(struct cap *m, uint32_t n)
{
	if (!(m->meta = calloc(n ? n : 1, sizeof(*m->meta))))
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		m->meta[i] = (struct capacity_meta){ .id = m->rows[i].id,
						     .state = m->rows[i].state,
						     .active = m->rows[i].active };
	m->n_meta = n;
	return 0;
}

static void meta_done(int status, const struct pg_results *r, void *data)
{
	struct cap *m = data;
	bool found = false;

	if (status) {
		struct api_call *c = m->c;

		cap_free(m);
		api_db_error(c, status, "reading the campaign");
		return;
	}
	const PGresult *res = r->res[0];
	int n = PQntuples(res);
	if (!(m->rows = calloc(n ? (size_t)n : 1, sizeof(*m->rows)))) {
		fail(m, 503, "unavailable", "Out of memory; retry shortly.");
		return;
	}
	for (int i = 0; i < n; i++) {
		snprintf(m->rows[i].id, sizeof(m->rows[i].id), "%s", PQgetvalue(res, i, 0));
		m->rows[i].state = state_of(PQgetvalue(res, i, 1));
		m->rows[i].active = PQgetvalue(res, i, 3)[0] == 't';
		if (PQgetvalue(res, i, 4)[0] == 't') {
			found = true;
			m->postgres_mode = strcmp(PQgetvalue(res, i, 5), "postgres") == 0;
			m->installs_version = strtoull(PQgetvalue(res, i, 6), NULL, 10);
		}
	}
	if (meta_link(m, (uint32_t)n)) {
		fail(m, 503, "unavailable", "Out of memory; retry shortly.");
		return;
	}
	if (!found) {
		struct api_call *c = m->c;

		cap_free(m);
		api_not_found(c, "campaign",
			      c->req ? http_request_param(c->req, "campaign_id") : "");
		return;
	}
	if (m->postgres_mode || !api_gate(m->c->api)) { /* no view to take versions from */
		struct meta_cache_meta mm = { .rows = m->rows,
					      .n = m->n_meta,
					      .postgres_mode = m->postgres_mode };
		meta_cache_put(api_meta_cache(m->c->api), m->c->key.org.id, m->id, m->gen, &mm);
	}
	with_meta(m);
}

static void read_meta(struct cap *m)
{
	struct api_call *c = m->c;
	const char *v[2] = { c->key.org.id, m->id };
	struct pg_query q = { .stmt = api_stmt_capacity_meta(c->api), .nparams = 2, .values = v };
	int rc;

	m->gen = meta_cache_gen(api_meta_cache(c->api));
	if ((rc = pg_pool_exec(api_pool(c->api), PG_LANE_NORMAL, &q, meta_done, m))) {
		cap_free(m);
		api_db_error(c, rc, "reading the campaign");
	}
}

static void capacity(struct api_call *c)
{
	const char *id = http_request_param(c->req, "campaign_id");
	struct meta_cache_meta mm;
	struct cap *m;

	if (!ident_ok(id)) {
		api_not_found(c, "campaign", id ? id : "");
		return;
	}
	if (!(m = calloc(1, sizeof(*m)))) {
		api_error(c, 503, "unavailable", "Out of memory; retry shortly.");
		return;
	}
	m->c = c;
	snprintf(m->id, sizeof(m->id), "%s", id);
	if (meta_cache_get(api_meta_cache(c->api), c->key.org.id, m->id, &mm) == 0) {
		m->rows = mm.rows;
		m->from_cache = true;
		m->postgres_mode = mm.postgres_mode;
		m->limits_version = mm.limits_version;
		m->floors_version = mm.floors_version;
		if (meta_link(m, mm.n)) {
			fail(m, 503, "unavailable", "Out of memory; retry shortly.");
			return;
		}
		with_meta(m);
		return;
	}
	read_meta(m);
}

const struct api_route_def api_routes_capacity[] = {
	{ .method = "GET",
	  .pattern = "/api/v1/campaigns/{campaign_id}/capacity",
	  .bucket = RATELIMIT_DEFAULT,
	  .handler = capacity,
	  .summary = "What is in force for a campaign now, and which limit binds." },
};
const size_t api_routes_capacity_n = sizeof(api_routes_capacity) / sizeof(api_routes_capacity[0]);
