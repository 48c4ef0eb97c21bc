/* The reconciler job: lease, the way back to redis mode, the periodic pass. See reconciler.h
 * and README-pg.md ("The fence and the reconciler's orphan rule", "The mode switch and the way
 * back"). */
#include "reconciler.h"

#include "backoff.h"
#include "error.h"
#include "gate_recon.h"
#include "log.h"
#include "reconcile.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RLOG(level, org_, ...)                                                                     \
	LOG_AT(level, LOG_GATE, (&(const struct log_ids){ .org = (org_) }),                        \
	       "reconciler: " __VA_ARGS__)
#define CHUNK	    GATE_PG_WRITE_MAX
#define GATE_ID_MAX 64
#define ORG_KEY_MAX 128

enum { ST_LEASE, ST_SYSTEM, ST_ORGS, ST_CAMPAIGNS, ST_FLOORS, ST_N };

/* Ids compared with strcmp, so every list is ordered by COLLATE "C". */
static const char *const sqls[ST_N] = {
	[ST_LEASE] = "UPDATE leases SET owner = $1::text,"
		     " version = CASE WHEN owner = $1::text AND lease_until > clock_timestamp()"
		     " THEN version ELSE version + 1 END,"
		     " lease_until = clock_timestamp() + $2::bigint * interval '1 millisecond'"
		     " WHERE name = 'reconciler' AND (owner IS NULL OR owner = $1::text"
		     " OR lease_until <= clock_timestamp()) RETURNING version",
	[ST_SYSTEM] = "SELECT global_limit, limits_version FROM system_settings",
	[ST_ORGS] = "SELECT id, org_limit, coalesce(per_agent_limit, 0),"
		    " concurrency_management_enabled, limits_version FROM organisations"
		    " ORDER BY id COLLATE \"C\"",
	[ST_CAMPAIGNS] = "SELECT org_id, id, coalesce(max_concurrent_calls, 0), agent_id"
			 " FROM campaigns ORDER BY org_id COLLATE \"C\", id COLLATE \"C\"",
	[ST_FLOORS] = "SELECT i.org_id, i.version, ceil(extract(epoch FROM i.expires_at"
		      " - clock_timestamp()) * 1000)::bigint, f.campaign_id, f.floor"
		      " FROM fair_share_installs i JOIN fair_share_floors f ON f.org_id = i.org_id"
		      " WHERE i.expires_at > clock_timestamp() + interval '10 milliseconds'"
		      " ORDER BY i.org_id COLLATE \"C\", f.campaign_id COLLATE \"C\"",
};
static const int nparams[ST_N] = { [ST_LEASE] = 2 };

/* A live call of the way back, with its org (qsort by org). */
struct live {
	const char *org;
	struct gate_slot_record rec;
};

struct reconciler {
	struct reconciler_options o;
	char owner[GATE_ID_MAX + 1];
	const struct pg_stmt *st[ST_N];
	struct gate *g; /* the reconciler's own gate (its own generation) */
	uv_timer_t timer;
	bool started, closing, running, timer_closed;
	bool kicked;	  /* a kick during a run: run again when it ends */
	bool back_wanted; /* this run, as the holder, found a way back to make and did not commit
			   * one: the next run comes after the backoff, not the period */
	unsigned retries; /* runs in a row that left back_wanted (the backoff's n) */
	void (*closed_cb)(void *data);
	void *closed_data;
	struct reconciler_stats stats;

	/* the run in progress */
	reconciler_done_cb done_cb;
	void *done_data;
	uint64_t lease_version;
	struct gate_pg_mode mode;
	PGresult *res[ST_N]; /* copies of the reads of the way back */
	struct gate_pg_rebuild *rb;
	char gen[RECONCILE_GEN_MAX + 1];     /* the way back's G, recorded by its commit */
	char run_id[GATE_PG_RUN_ID_MAX + 1]; /* the server it is built on, recorded too */
	const struct gate_pg_live_call *calls;
	uint32_t n_calls;
	struct live *lives;
	uint64_t redis_now;
	unsigned pending; /* Redis replies awaited */
	int failed;	  /* first failure of the pipelined phase */
	/* periodic pass: the org being reconciled */
	int org_i, n_orgs;
	char **org_ids;
	struct reconcile_call *pc;
	uint32_t n_pc;
	struct reconcile_slot *ps;
	uint32_t n_ps;
	char *ids_mem;		     /* the ids of pc and ps */
	struct gate_slot_record *lc; /* pc's rows as slot records (campaign, agent), by call id */
	char *lc_mem;
	uint32_t n_lc;
	const char **ids;
	int *rows;
	uint32_t n_ids, rows_done;
	const char **fence_ids, **fence_orgs;
	uint32_t n_fence, fence_done;
};

static void run_end(struct reconciler *r, int status);
static void pass_org(struct reconciler *r);
static void mode_notify_cb(const char *channel, const char *payload, void *data);
static void redis_connect_cb(struct redis_conn *conn, uint64_t run, void *data);

static const char *val(const PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col) ? NULL : PQgetvalue(res, row, col);
}

static uint64_t u64(const PGresult *res, int row, int col)
{
	const char *s = val(res, row, col);
	return s ? strtoull(s, NULL, 10) : 0;
}

int reconciler_new(const struct reconciler_options *opts, struct reconciler **out)
{
	struct reconciler *r;
	int rc;

	if (!opts || !out || !opts->loop || !opts->pool || !opts->pg || !opts->conn || !opts->reg ||
	    !opts->owner || !opts->owner[0] || strlen(opts->owner) > GATE_ID_MAX ||
	    opts->period_ms > RECONCILER_PERIOD_MAX_MS)
		return -EINVAL;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->o = *opts;
	snprintf(r->owner, sizeof(r->owner), "%s", opts->owner);
	r->o.owner = r->owner;
	if (!r->o.period_ms)
		r->o.period_ms = RECONCILER_PERIOD_MS;
	if (!r->o.write_deadline_ms)
		r->o.write_deadline_ms = GATE_PG_WRITE_DEADLINE_MS;
	if (!r->o.margin_ms)
		r->o.margin_ms = RECONCILER_MARGIN_MS;
	if (!r->o.rebuild_timeout_ms)
		r->o.rebuild_timeout_ms = RECONCILER_REBUILD_TIMEOUT;
	for (int i = 0; i < ST_N; i++) {
		rc = pg_pool_prepare(opts->pool, sqls[i], nparams[i], &r->st[i]);
		if (rc)
			goto fail;
	}
	rc = pg_pool_listen(opts->pool, GATE_PG_CHANNEL_MODE, mode_notify_cb, r);
	if (!rc)
		rc = redis_conn_add_hook(opts->conn, "reconciler", redis_connect_cb, r);
	if (rc)
		goto fail;
	rc = gate_new(opts->conn, opts->reg, NULL, &r->g);
	if (rc)
		goto fail;
	uv_timer_init(opts->loop, &r->timer);
	r->timer.data = r;
	*out = r;
	return 0;
fail:
	free(r);
	return rc;
}

/* A run that could not start (its pool not connected yet: at a worker's start the first tick,
 * and the Redis connect's kick, come before PostgreSQL is up) is retried after the backoff: only
 * a run's end schedules the next, so without this the reconciler stopped until a kick — and the
 * switch's NOTIFY that would kick it can come before its LISTEN connection is up (issue 9: a
 * fresh fleet stayed in postgres mode for the whole run). */
static void tick_cb(uv_timer_t *t)
{
	struct reconciler *r = t->data;
	int rc;

	if (r->running)
		return;
	rc = reconciler_run(r, NULL, NULL);
	if (rc == -EBUSY) {
		r->kicked = true;
	} else if (rc && !r->closing) {
		uint64_t delay = backoff_doubled(RECONCILER_RETRY_MS, r->retries++, r->o.period_ms);

		r->stats.failures++;
		RLOG(LOG_INFO, NULL, "run not started (%s): retrying in %" PRIu64 " ms",
		     dsp_strerror(rc), delay);
		uv_timer_start(&r->timer, tick_cb, delay, 0);
	}
}

/* The next run: at once after a kick, after the backoff while a way back is wanted (its first
 * retry RECONCILER_RETRY_MS after the run, doubling up to the period), else after the period. */
static void schedule(struct reconciler *r)
{
	uint64_t delay = r->o.period_ms;

	if (!r->started || r->closing)
		return;
	if (r->kicked) {
		r->kicked = false;
		delay = 0;
	} else if (r->back_wanted) {
		delay = backoff_doubled(RECONCILER_RETRY_MS, r->retries++, r->o.period_ms);
	} else {
		r->retries = 0;
	}
	uv_timer_start(&r->timer, tick_cb, delay, 0);
}

void reconciler_kick(struct reconciler *r)
{
	if (!r->started || r->closing)
		return;
	if (r->running) {
		r->kicked = true;
		return;
	}
	r->retries = 0;
	uv_timer_start(&r->timer, tick_cb, 0, 0);
}

/* The fleet went to postgres mode: the way back may start now (Redis may be up: a lost state,
 * a FLUSHALL, a worker's command deadline), not a period later. */
static void mode_notify_cb(const char *channel, const char *payload, void *data)
{
	struct gate_pg_mode m;

	(void)channel;
	if (payload && !gate_pg_parse_mode(payload, &m) && m.mode == GATE_MODE_POSTGRES)
		reconciler_kick(data);
}

/* Every connect of the Redis connection: the way back waits for Redis, so a run soon after the
 * handshake finds it up (a run before the handshake ends retries after the backoff). */
static void redis_connect_cb(struct redis_conn *conn, uint64_t run, void *data)
{
	redis_conn_hook_done(conn, run, 0, NULL);
	reconciler_kick(data);
}

int reconciler_start(struct reconciler *r)
{
	if (r->started || r->closing)
		return -EBUSY;
	r->started = true;
	return uv_timer_start(&r->timer, tick_cb, 0, 0);
}

void reconciler_get_stats(const struct reconciler *r, struct reconciler_stats *out)
{
	*out = r->stats;
}

static void maybe_free(struct reconciler *r)
{
	if (!r->closing || r->running || !r->timer_closed)
		return;
	gate_free(r->g);
	if (r->closed_cb)
		r->closed_cb(r->closed_data);
	free(r);
}

static void timer_closed_cb(uv_handle_t *h)
{
	struct reconciler *r = h->data;

	r->timer_closed = true;
	maybe_free(r);
}

void reconciler_close(struct reconciler *r, void (*closed_cb)(void *data), void *data)
{
	if (!r)
		return;
	r->closing = true;
	r->closed_cb = closed_cb;
	r->closed_data = data;
	uv_close((uv_handle_t *)&r->timer, timer_closed_cb);
}

/* --- the end of a run --- */

static void pass_clear(struct reconciler *r)
{
	free(r->pc);
	free(r->ps);
	free(r->ids_mem);
	free(r->ids);
	free(r->rows);
	free(r->fence_ids);
	free(r->fence_orgs);
	free(r->lc);
	free(r->lc_mem);
	r->lc = NULL;
	r->lc_mem = NULL;
	r->n_lc = 0;
	r->pc = NULL;
	r->ps = NULL;
	r->ids_mem = NULL;
	r->ids = NULL;
	r->rows = NULL;
	r->fence_ids = r->fence_orgs = NULL;
	r->n_pc = r->n_ps = r->n_ids = r->rows_done = r->n_fence = r->fence_done = 0;
}

static void run_end(struct reconciler *r, int status)
{
	reconciler_done_cb cb = r->done_cb;
	void *data = r->done_data;

	pass_clear(r);
	for (int i = 0; i < ST_N; i++) {
		PQclear(r->res[i]);
		r->res[i] = NULL;
	}
	for (int i = 0; i < r->n_orgs; i++)
		free(r->org_ids[i]);
	free(r->org_ids);
	r->org_ids = NULL;
	r->n_orgs = 0;
	free(r->lives);
	r->lives = NULL;
	if (status) {
		r->stats.failures++;
		RLOG(LOG_WARN, NULL, "run failed: %s", dsp_strerror(status));
	}
	r->running = false;
	r->done_cb = NULL;
	schedule(r);
	if (cb)
		cb(r, status, data);
	maybe_free(r);
}

/* --- the way back: reads, begin, Redis, finish --- */

static void finish_cb(struct gate_pg *pg, int status, const struct gate_pg_switch_result *res,
		      void *data)
{
	struct reconciler *r = data;

	(void)pg;
	if (!status && res && res->switched) {
		r->back_wanted = false;
		r->stats.rebuilds++;
		RLOG(LOG_INFO, NULL, "redis mode again at epoch %" PRIu64 ": %u live calls rebuilt",
		     res->now.epoch, r->n_calls);
	} else {
		r->stats.rebuild_failures++;
		status = status ? status : -ESTALE;
	}
	run_end(r, status);
}

static void rebuild_finish(struct reconciler *r, bool commit)
{
	struct gate_pg_rebuild *rb = r->rb;
	int rc;

	r->rb = NULL;
	if (commit && strcmp(redis_conn_run_id(r->o.conn), r->run_id) != 0) {
		/* Its connection came up on another server meanwhile: some steps may have gone
		 * to one server and some to the other. Not a state to record. */
		RLOG(LOG_WARN, NULL,
		     "Redis server changed during the rebuild (run_id %.8s, now %.8s)", r->run_id,
		     redis_conn_run_id(r->o.conn));
		r->stats.server_changed++;
		r->failed = -ESTALE;
		commit = false;
	}
	rc = gate_pg_rebuild_finish(rb, commit, r->gen, r->run_id, commit ? finish_cb : NULL, r);
	if (!commit) {
		r->stats.rebuild_failures++;
		RLOG(LOG_WARN, NULL, "way back rolled back (%s): postgres mode stays",
		     dsp_strerror(r->failed));
		run_end(r, r->failed ? r->failed : -EIO);
	} else if (rc) {
		r->stats.rebuild_failures++;
		run_end(r, rc);
	}
}

static void redis_step_done(struct reconciler *r, int status, const char *what, const char *org)
{
	if (status && !r->failed) {
		r->failed = status;
		RLOG(LOG_ERROR, org, "%s failed during the way back: %s", what,
		     dsp_strerror(status));
	}
	if (--r->pending == 0)
		rebuild_finish(r, r->failed == 0);
}

static void rebuild_done_cb(struct gate *g, int status, void *data)
{
	(void)g;
	redis_step_done(data, status, "org rebuild", NULL);
}

static void rebuild_install_cb(struct gate *g, int status, const struct gate_install_result *res,
			       void *data)
{
	(void)g;
	(void)res;
	redis_step_done(data, status, "install", NULL);
}

static int live_cmp(const void *a, const void *b)
{
	const struct live *x = a, *y = b;
	int c = strcmp(x->org, y->org);
	return c ? c : strcmp(x->rec.call, y->rec.call);
}

/* Sends one org's rebuild and installs (pipelined). Returns 0 or the first refusal. */
static int rebuild_org(struct reconciler *r, const char *org, const struct live *lv, uint32_t n,
		       int *ci, int *fi)
{
	const PGresult *orgs = r->res[ST_ORGS], *cs = r->res[ST_CAMPAIGNS], *fs = r->res[ST_FLOORS];
	struct gate_slot_record *recs = calloc(n ? n : 1, sizeof(*recs));
	struct gate_campaign_limits *cl = NULL;
	struct gate_floor *fl = NULL;
	int rc, row = -1, c0, f0;

	if (!recs)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++)
		recs[i] = lv[i].rec;
	rc = gate_org_rebuild(r->g, org, recs, n, rebuild_done_cb, r);
	free(recs);
	if (rc)
		return rc;
	r->pending++;
	for (int i = 0; i < PQntuples(orgs); i++)
		if (strcmp(val(orgs, i, 0), org) == 0)
			row = i;
	if (row < 0) {
		RLOG(LOG_ERROR, org, "live calls of an organisation without a row: no limits");
		return 0;
	}
	while (*ci < PQntuples(cs) && strcmp(val(cs, *ci, 0), org) < 0)
		(*ci)++;
	for (c0 = *ci; *ci < PQntuples(cs) && strcmp(val(cs, *ci, 0), org) == 0;)
		(*ci)++;
	while (*fi < PQntuples(fs) && strcmp(val(fs, *fi, 0), org) < 0)
		(*fi)++;
	for (f0 = *fi; *fi < PQntuples(fs) && strcmp(val(fs, *fi, 0), org) == 0;)
		(*fi)++;
	cl = calloc((size_t)(*ci - c0) + 1, sizeof(*cl));
	fl = calloc((size_t)(*fi - f0) + 1, sizeof(*fl));
	if (!cl || !fl) {
		rc = -ENOMEM;
		goto out;
	}
	for (int i = c0; i < *ci; i++)
		cl[i - c0] = (struct gate_campaign_limits){ .campaign = val(cs, i, 1),
							    .ceiling = (uint32_t)u64(cs, i, 2),
							    .agent = val(cs, i, 3) };
	struct gate_limits lim = { .version = u64(orgs, row, 4),
				   .org_limit = (uint32_t)u64(orgs, row, 1),
				   .per_agent = (uint32_t)u64(orgs, row, 2),
				   .enforced = val(orgs, row, 3)[0] == 't',
				   .campaigns = cl,
				   .n_campaigns = (uint32_t)(*ci - c0) };
	rc = gate_install_limits(r->g, org, &lim, rebuild_install_cb, r);
	if (rc)
		goto out;
	r->pending++;
	if (*fi > f0) {
		for (int i = f0; i < *fi; i++) {
			const char *c = val(fs, i, 3);
			fl[i - f0] = (struct gate_floor){ .campaign = c && c[0] ? c : NULL,
							  .floor = (uint32_t)u64(fs, i, 4) };
		}
		rc = gate_install_floors(r->g, org, u64(fs, f0, 1), u64(fs, f0, 2), fl,
					 (uint32_t)(*fi - f0), rebuild_install_cb, r);
		if (!rc)
			r->pending++;
	}
out:
	free(cl);
	free(fl);
	return rc;
}

/* Every org: those with live calls and those without (rebuilt empty), in strcmp order. */
static int rebuild_orgs(struct reconciler *r)
{
	const PGresult *orgs = r->res[ST_ORGS];
	int oi = 0, ci = 0, fi = 0, rc = 0;
	uint32_t i = 0;

	while (!rc && (i < r->n_calls || oi < PQntuples(orgs))) {
		const char *next_call = i < r->n_calls ? r->lives[i].org : NULL;
		const char *next_org = oi < PQntuples(orgs) ? val(orgs, oi, 0) : NULL;
		const char *org;
		uint32_t j = i;

		if (next_call && (!next_org || strcmp(next_call, next_org) <= 0))
			org = next_call;
		else
			org = next_org;
		while (j < r->n_calls && strcmp(r->lives[j].org, org) == 0)
			j++;
		if (next_org && strcmp(next_org, org) == 0)
			oi++;
		rc = rebuild_org(r, org, r->lives + i, j - i, &ci, &fi);
		i = j;
	}
	return rc;
}

static void system_init_cb(struct gate *g, int status, void *data)
{
	struct reconciler *r = data;
	int rc;

	(void)g;
	r->pending--;
	if (status) {
		r->failed = status;
		/* Redis not answering (a CLIENT PAUSE, a restart): postgres mode holds and the
		 * next pass tries again — a warning (log.h); anything else is an error. */
		RLOG(status == -ETIMEDOUT || status == -ECONNRESET || status == -ENOTCONN ||
				     status == -EAGAIN
			     ? LOG_WARN
			     : LOG_ERROR,
		     NULL,
		     "system init failed: %s (postgres mode stays; the next pass tries again)",
		     dsp_strerror(status));
		rebuild_finish(r, false);
		return;
	}
	r->pending++; /* held while sending */
	rc = rebuild_orgs(r);
	if (rc && !r->failed)
		r->failed = rc;
	redis_step_done(r, 0, "send", NULL);
}

static void time_cb(struct redis_conn *conn, int status, redisReply *reply, void *data)
{
	struct reconciler *r = data;
	const PGresult *sys = r->res[ST_SYSTEM];
	char *gen = r->gen;
	uint64_t nonce = 0;
	int rc;

	if (!status && (reply->type != REDIS_REPLY_ARRAY || reply->elements != 2 ||
			reply->element[0]->type != REDIS_REPLY_STRING))
		status = DSP_EREDIS;
	if (status) {
		r->failed = status;
		rebuild_finish(r, false);
		return;
	}
	/* The server that answered TIME: the one rebuilt, whose run_id the commit records. */
	snprintf(r->run_id, sizeof(r->run_id), "%s", redis_conn_run_id(conn));
	r->redis_now = strtoull(reply->element[0]->str, NULL, 10) * 1000 +
		       strtoull(reply->element[1]->str, NULL, 10) / 1000;
	for (uint32_t i = 0; i < r->n_calls; i++)
		r->lives[i].rec.taken_ms = r->redis_now;
	for (int i = 0; i < 4; i++)
		nonce = nonce << 16 ^ (uint64_t)(rand() & 0xffff);
	nonce ^= uv_hrtime();
	reconcile_generation(r->mode.epoch + 1, nonce, gen, sizeof(r->gen));
	gate_set_generation(r->g, gen);
	rc = gate_system_init(r->g, u64(sys, 0, 1), (uint32_t)u64(sys, 0, 0), system_init_cb, r);
	if (rc) {
		r->failed = rc;
		rebuild_finish(r, false);
		return;
	}
	r->pending++;
	RLOG(LOG_INFO, NULL, "rebuilding Redis under generation %s from %u live calls", gen,
	     r->n_calls);
}

static void begin_cb(struct gate_pg_rebuild *rb, int status, const struct gate_pg_live_call *calls,
		     uint32_t n, const struct gate_pg_mode *mode, void *data)
{
	struct reconciler *r = data;
	const char *argv[] = { "TIME" };
	int rc;

	(void)mode;
	if (status) {
		r->stats.rebuild_failures++;
		run_end(r, status);
		return;
	}
	r->rb = rb;
	r->calls = calls;
	r->n_calls = n;
	r->gen[0] = r->run_id[0] = '\0';
	r->failed = 0;
	r->pending = 0;
	r->lives = calloc(n ? n : 1, sizeof(*r->lives));
	if (!r->lives) {
		r->failed = -ENOMEM;
		rebuild_finish(r, false);
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		r->lives[i] =
			(struct live){ calls[i].org,
				       { calls[i].call, calls[i].campaign, calls[i].agent, 0 } };
	qsort(r->lives, n, sizeof(*r->lives), live_cmp);
	rc = redis_conn_command_argv(r->o.conn, time_cb, r, 1, argv, NULL);
	if (rc) {
		r->failed = rc;
		rebuild_finish(r, false);
	}
}

static void reads_cb(int status, const struct pg_results *res, void *data)
{
	struct reconciler *r = data;
	int rc;

	if (!status && res->n != 4)
		status = DSP_EPG;
	for (int i = 0; !status && i < 4; i++) {
		r->res[ST_SYSTEM + i] =
			PQcopyResult(res->res[i], PG_COPYRES_ATTRS | PG_COPYRES_TUPLES);
		if (!r->res[ST_SYSTEM + i])
			status = -ENOMEM;
	}
	if (!status && PQntuples(r->res[ST_SYSTEM]) != 1)
		status = DSP_EPG;
	if (status) {
		run_end(r, status);
		return;
	}
	rc = gate_pg_rebuild_begin(r->o.pg, r->mode.epoch, r->owner, r->lease_version,
				   r->o.rebuild_timeout_ms, begin_cb, r);
	if (rc)
		run_end(r, rc);
}

static void way_back(struct reconciler *r)
{
	struct pg_query q[4];
	int rc;

	for (int i = 0; i < 4; i++)
		q[i] = (struct pg_query){ .stmt = r->st[ST_SYSTEM + i] };
	rc = pg_pool_batch(r->o.pool, PG_LANE_NORMAL, q, 4, reads_cb, r);
	if (rc)
		run_end(r, rc);
}

/* --- the periodic pass (redis mode), one org at a time --- */

static void switched_cb(struct gate_pg *pg, int status, const struct gate_pg_switch_result *res,
			void *data)
{
	struct reconciler *r = data;

	(void)pg;
	r->back_wanted = true; /* Redis answers: the way back may rebuild it at once */
	if (!status && res->switched)
		RLOG(LOG_WARN, NULL,
		     "Redis state lost: fleet switched to postgres mode, epoch %" PRIu64,
		     res->now.epoch);
	run_end(r, status ? status : GATE_ELOST);
}

static void state_lost(struct reconciler *r, const char *org)
{
	int rc;

	r->stats.lost++;
	RLOG(LOG_WARN, org, "slot state lost (generation): switching to postgres mode");
	rc = gate_pg_switch_to_postgres(r->o.pg, r->mode.epoch, 0, switched_cb, r);
	if (rc)
		run_end(r, rc);
}

static void next_org(struct reconciler *r)
{
	pass_clear(r);
	r->org_i++;
	pass_org(r);
}

static void action_done(struct reconciler *r)
{
	if (--r->pending == 0)
		next_org(r);
}

static void release_cb(struct gate *g, int status, const struct gate_release_result *res,
		       void *data)
{
	struct reconciler *r = data;

	(void)g;
	if (status)
		RLOG(LOG_WARN, r->org_ids[r->org_i], "release of a correction failed: %s",
		     dsp_strerror(status));
	else if (res->outcome == GATE_NOT_HELD) /* released meanwhile: nothing to free */
		RLOG(LOG_INFO, r->org_ids[r->org_i],
		     "release of a correction: the slot was not held (released meanwhile), nothing"
		     " freed");
	else if (res->outcome != GATE_FREED)
		RLOG(LOG_WARN, r->org_ids[r->org_i],
		     "release of a correction: a count was already 0, nothing changed (outcome %d)",
		     (int)res->outcome);
	action_done(r);
}

static void release_one(struct reconciler *r, const char *call)
{
	r->pending++;
	if (gate_release(r->g, r->org_ids[r->org_i], call, release_cb, r))
		r->pending--;
}

static void add_cb(int status, bool added, void *data)
{
	struct reconciler *r = data;

	if (status == GATE_ELOST) {
		RLOG(LOG_WARN, r->org_ids[r->org_i], "add of a lost slot: state lost (generation)");
	} else if (status) {
		RLOG(LOG_WARN, r->org_ids[r->org_i], "add of a lost slot failed (%s): next run",
		     dsp_strerror(status));
	} else if (added) {
		r->stats.added++;
	}
	action_done(r);
}

static int lc_cmp(const void *a, const void *b)
{
	return strcmp(((const struct gate_slot_record *)a)->call,
		      ((const struct gate_slot_record *)b)->call);
}

/* ADD: the live row's slot put back (gate_slot_add.lua: only if the call still has no record;
 * no limit check, the call exists). taken_ms is the pass's Redis time. */
static void add_one(struct reconciler *r, const char *call)
{
	const char *org = r->org_ids[r->org_i];
	struct gate_slot_record key = { .call = call }, rec;
	const struct gate_slot_record *lc = bsearch(&key, r->lc, r->n_lc, sizeof(*r->lc), lc_cmp);
	int rc;

	if (!lc) {
		RLOG(LOG_ERROR, org, "live call %s without its row: slot not added", call);
		return;
	}
	rec = *lc;
	rec.taken_ms = r->redis_now;
	RLOG(LOG_WARN, org, "live call %s has no slot record: adding it", call);
	r->pending++;
	rc = gate_slot_add(r->g, r->o.reg, org, &rec, add_cb, r);
	if (rc) {
		r->pending--;
		RLOG(LOG_ERROR, org, "add of a lost slot not sent (%s)", dsp_strerror(rc));
	}
}

static void fence_next(struct reconciler *r);

static void fence_cb(struct gate_pg *pg, int status, const bool *written, uint32_t n, void *data)
{
	struct reconciler *r = data;

	(void)pg;
	if (status) {
		RLOG(LOG_WARN, r->org_ids[r->org_i],
		     "fence failed (%s): orphans kept until next run", dsp_strerror(status));
	} else {
		for (uint32_t i = 0; i < n; i++) {
			if (written[i]) {
				r->stats.fence_found++;
				continue;
			}
			r->stats.fenced++;
			release_one(r, r->fence_ids[r->fence_done + i]);
		}
	}
	r->fence_done += n;
	fence_next(r);
	action_done(r);
}

static void fence_next(struct reconciler *r)
{
	uint32_t n = r->n_fence - r->fence_done;

	if (n == 0)
		return;
	n = n > CHUNK ? CHUNK : n;
	r->pending++;
	if (gate_pg_fence(r->o.pg, r->fence_ids + r->fence_done, r->fence_orgs + r->fence_done, n,
			  fence_cb, r)) {
		r->pending--;
		r->fence_done = r->n_fence;
	}
}

static void apply_plan(struct reconciler *r)
{
	struct reconcile_summary sum;
	const char *org = r->org_ids[r->org_i];
	int rc;

	for (uint32_t i = 0; i < r->n_ps; i++)
		r->ps[i].row = (enum reconcile_row)r->rows[i];
	for (uint32_t i = 0; i < r->n_pc; i++)
		r->pc[i].row = (enum reconcile_row)r->rows[r->n_ps + i];
	rc = reconcile_plan(r->ps, r->n_ps, r->pc, r->n_pc, r->redis_now,
			    r->o.write_deadline_ms + r->o.margin_ms, &sum);
	if (rc) {
		run_end(r, rc);
		return;
	}
	r->stats.young += sum.count[RECONCILE_YOUNG];
	r->stats.missing += sum.count[RECONCILE_ADD];
	r->stats.released += sum.count[RECONCILE_RELEASE];
	r->fence_ids = calloc(r->n_ps + 1, sizeof(*r->fence_ids));
	r->fence_orgs = calloc(r->n_ps + 1, sizeof(*r->fence_orgs));
	if (!r->fence_ids || !r->fence_orgs) {
		run_end(r, -ENOMEM);
		return;
	}
	r->pending = 1; /* held while sending */
	for (uint32_t i = 0; i < r->n_pc; i++)
		if (r->pc[i].action == RECONCILE_ADD)
			add_one(r, r->pc[i].call);
	for (uint32_t i = 0; i < r->n_ps; i++) {
		if (r->ps[i].action == RECONCILE_RELEASE) {
			release_one(r, r->ps[i].call);
		} else if (r->ps[i].action == RECONCILE_FENCE) {
			r->fence_ids[r->n_fence] = r->ps[i].call;
			r->fence_orgs[r->n_fence++] = org;
		}
	}
	fence_next(r);
	if (sum.corrections)
		RLOG(LOG_INFO, org, "%u corrections (release %u, fence %u, add %u)",
		     sum.corrections, sum.count[RECONCILE_RELEASE], sum.count[RECONCILE_FENCE],
		     sum.count[RECONCILE_ADD]);
	action_done(r);
}

static void rows_next(struct reconciler *r);

static void rows_cb(struct gate_pg *pg, int status, const int *rows, uint32_t n, void *data)
{
	struct reconciler *r = data;

	(void)pg;
	if (status) {
		run_end(r, status);
		return;
	}
	memcpy(r->rows + r->rows_done, rows, n * sizeof(*rows));
	r->rows_done += n;
	rows_next(r);
}

static void rows_next(struct reconciler *r)
{
	uint32_t n = r->n_ids - r->rows_done;
	int rc;

	if (n == 0) {
		apply_plan(r);
		return;
	}
	n = n > CHUNK ? CHUNK : n;
	rc = gate_pg_call_rows(r->o.pg, r->ids + r->rows_done, n, rows_cb, r);
	if (rc)
		run_end(r, rc);
}

/* --- an organisation never built in Redis (created after the last rebuild) ---
 *
 * Its admissions answer GATE_ELOST (no :gen), and so does the pass's read of its records. That
 * is not a lost state when the org has no live call (step 1 read none), no :gen and no :slots:
 * nothing can have been admitted for it in Redis (every admission is guarded by the org's :gen),
 * so it is built empty under the system generation the pass read (gate_org_rebuild, itself
 * guarded by {sys}:gen) and its limits are installed from PostgreSQL. Anything else (a :gen of
 * another generation, records, live calls) is a lost state: the fleet switches, as before. */

static void created_cb(struct reconciler *r, int status, const char *what)
{
	const char *org = r->org_ids[r->org_i];

	if (status == GATE_ELOST) {
		if (!r->failed)
			r->failed = status;
	} else if (status) {
		RLOG(LOG_WARN, org, "building a new organisation: %s failed (%s)", what,
		     dsp_strerror(status));
	}
	if (--r->pending)
		return;
	if (r->failed == GATE_ELOST) {
		state_lost(r, org);
		return;
	}
	r->stats.created++;
	RLOG(LOG_INFO, org, "organisation without Redis state built (no live calls)");
	next_org(r);
}

static void create_rebuild_cb(struct gate *g, int status, void *data)
{
	(void)g;
	created_cb(data, status, "rebuild");
}

static void create_install_cb(struct gate *g, int status, const struct gate_install_result *res,
			      void *data)
{
	(void)g;
	(void)res;
	created_cb(data, status, "limits install");
}

static void create_campaigns_cb(int status, const struct pg_results *res, void *data)
{
	struct reconciler *r = data;
	const char *org = r->org_ids[r->org_i];
	const PGresult *orgs = r->res[ST_ORGS], *cs;
	struct gate_campaign_limits *cl;
	uint32_t n = 0;
	int row = -1, rc;

	if (status) {
		run_end(r, status);
		return;
	}
	cs = res->res[0];
	for (int i = 0; i < PQntuples(orgs); i++)
		if (strcmp(val(orgs, i, 0), org) == 0)
			row = i;
	cl = calloc((size_t)PQntuples(cs) + 1, sizeof(*cl));
	if (!cl || row < 0) {
		free(cl);
		run_end(r, cl ? DSP_EPG : -ENOMEM);
		return;
	}
	for (int i = 0; i < PQntuples(cs); i++)
		if (strcmp(val(cs, i, 0), org) == 0)
			cl[n++] = (struct gate_campaign_limits){ .campaign = val(cs, i, 1),
								 .ceiling = (uint32_t)u64(cs, i, 2),
								 .agent = val(cs, i, 3) };
	struct gate_limits lim = { .version = u64(orgs, row, 4),
				   .org_limit = (uint32_t)u64(orgs, row, 1),
				   .per_agent = (uint32_t)u64(orgs, row, 2),
				   .enforced = val(orgs, row, 3)[0] == 't',
				   .campaigns = cl,
				   .n_campaigns = n };
	r->failed = 0;
	r->pending = 1; /* held while sending */
	rc = gate_org_rebuild(r->g, org, NULL, 0, create_rebuild_cb, r);
	if (!rc) {
		r->pending++;
		rc = gate_install_limits(r->g, org, &lim, create_install_cb, r);
		if (!rc)
			r->pending++;
	}
	free(cl);
	created_cb(r, rc, "send");
}

static void org_keys_cb(struct redis_conn *conn, int status, redisReply *reply, void *data)
{
	struct reconciler *r = data;
	struct pg_query q = { .stmt = r->st[ST_CAMPAIGNS] };
	int rc;

	(void)conn;
	if (status) {
		run_end(r, status);
		return;
	}
	if (reply->type != REDIS_REPLY_INTEGER || reply->integer != 0) {
		state_lost(r, r->org_ids[r->org_i]);
		return;
	}
	rc = pg_pool_exec(r->o.pool, PG_LANE_NORMAL, &q, create_campaigns_cb, r);
	if (rc)
		run_end(r, rc);
}

static void org_absent_check(struct reconciler *r)
{
	const char *org = r->org_ids[r->org_i];
	char gen[ORG_KEY_MAX], slots[ORG_KEY_MAX];
	const char *argv[] = { "EXISTS", gen, slots };
	int rc;

	if (r->n_pc || !r->res[ST_ORGS] || gate_org_key(org, "gen", gen, sizeof(gen)) <= 0 ||
	    gate_org_key(org, "slots", slots, sizeof(slots)) <= 0) {
		state_lost(r, org);
		return;
	}
	rc = redis_conn_command_argv(r->o.conn, org_keys_cb, r, 3, argv, NULL);
	if (rc)
		run_end(r, rc);
}

static void slots_cb(int status, const struct gate_slots *s, void *data)
{
	struct reconciler *r = data;
	size_t off = 0, size = 0;

	if (status == GATE_ELOST) {
		org_absent_check(r);
		return;
	}
	if (status) {
		run_end(r, status);
		return;
	}
	r->redis_now = s->now_ms;
	for (uint32_t i = 0; i < s->n; i++)
		size += strlen(s->records[i].call) + 1;
	for (uint32_t i = 0; i < r->n_pc; i++)
		size += strlen(r->pc[i].call) + 1;
	r->n_ps = s->n;
	r->n_ids = r->n_ps + r->n_pc;
	r->ps = calloc(s->n + 1, sizeof(*r->ps));
	r->ids = calloc(r->n_ids + 1, sizeof(*r->ids));
	r->rows = calloc(r->n_ids + 1, sizeof(*r->rows));
	char *mem = malloc(size + 1);
	if (!r->ps || !r->ids || !r->rows || !mem) {
		free(mem);
		run_end(r, -ENOMEM);
		return;
	}
	/* pc's ids already live in ids_mem; the new block holds both (pc re-pointed). */
	for (uint32_t i = 0; i < s->n; i++) {
		size_t l = strlen(s->records[i].call) + 1;
		memcpy(mem + off, s->records[i].call, l);
		r->ps[i] = (struct reconcile_slot){ .call = mem + off,
						    .taken_ms = s->records[i].taken_ms };
		r->ids[i] = mem + off;
		off += l;
	}
	for (uint32_t i = 0; i < r->n_pc; i++) {
		size_t l = strlen(r->pc[i].call) + 1;
		memcpy(mem + off, r->pc[i].call, l);
		r->pc[i].call = mem + off;
		r->ids[r->n_ps + i] = mem + off;
		off += l;
	}
	free(r->ids_mem);
	r->ids_mem = mem;
	rows_next(r);
}

static void live_cb(struct gate_pg *pg, int status, const struct gate_pg_live_call *calls,
		    uint32_t n, void *data)
{
	struct reconciler *r = data;
	size_t size = 1, off = 0, lsize = 1, loff = 0;
	int rc;

	(void)pg;
	if (status) {
		run_end(r, status);
		return;
	}
	for (uint32_t i = 0; i < n; i++)
		size += strlen(calls[i].call) + 1;
	for (uint32_t i = 0; i < n; i++)
		lsize += strlen(calls[i].call) +
			 strlen(calls[i].campaign ? calls[i].campaign : "") +
			 strlen(calls[i].agent ? calls[i].agent : "") + 3;
	r->pc = calloc(n + 1, sizeof(*r->pc));
	r->ids_mem = malloc(size);
	r->lc = calloc(n + 1, sizeof(*r->lc));
	r->lc_mem = malloc(lsize);
	if (!r->pc || !r->ids_mem || !r->lc || !r->lc_mem) {
		run_end(r, -ENOMEM);
		return;
	}
	for (uint32_t i = 0; i < n; i++) {
		size_t l = strlen(calls[i].call) + 1;
		memcpy(r->ids_mem + off, calls[i].call, l);
		r->pc[i] = (struct reconcile_call){ .call = r->ids_mem + off };
		off += l;
	}
	/* The rows' campaign and agent, kept apart (reconcile_plan() sorts pc) for the ADDs. */
	for (uint32_t i = 0; i < n; i++) {
		const char *f[3] = { calls[i].call, calls[i].campaign, calls[i].agent };
		const char *to[3];

		for (int j = 0; j < 3; j++) {
			size_t l = f[j] ? strlen(f[j]) + 1 : 1;
			memcpy(r->lc_mem + loff, f[j] ? f[j] : "", l);
			to[j] = r->lc_mem + loff;
			loff += l;
		}
		r->lc[i] = (struct gate_slot_record){ .call = to[0],
						      .campaign = calls[i].campaign ? to[1] : NULL,
						      .agent = to[2][0] ? to[2] : NULL };
	}
	qsort(r->lc, n, sizeof(*r->lc), lc_cmp);
	r->n_lc = n;
	r->n_pc = n;
	rc = gate_slots_read(r->g, r->o.reg, r->org_ids[r->org_i], slots_cb, r);
	if (rc)
		run_end(r, rc);
}

static void pass_org(struct reconciler *r)
{
	int rc;

	if (r->org_i >= r->n_orgs) {
		r->stats.passes++;
		run_end(r, 0);
		return;
	}
	rc = gate_pg_org_live_calls(r->o.pg, r->org_ids[r->org_i], live_cb, r);
	if (rc)
		run_end(r, rc);
}

static void pass_gen_cb(int status, const char *gen, size_t len, void *data)
{
	struct reconciler *r = data;
	char buf[GATE_GEN_MAX + 1];

	if (status) {
		run_end(r, status);
		return;
	}
	if (!gen || len == 0 || len > GATE_GEN_MAX) {
		state_lost(r, NULL);
		return;
	}
	memcpy(buf, gen, len);
	buf[len] = '\0';
	/* Only under the generation committed for this epoch (read with the mode): anything else
	 * — a stale reconciler's late rebuild, an older snapshot, no recorded generation — is not
	 * the state this epoch was built as. Nothing is built or corrected under it, and the fleet
	 * switches (its workers refuse it too, gate_mode.h). */
	if (strcmp(buf, r->mode.generation) != 0) {
		r->stats.foreign_gen++;
		RLOG(LOG_WARN, NULL,
		     "{sys}:gen %s is not the generation committed for epoch %" PRIu64 " (%s)", buf,
		     r->mode.epoch, r->mode.generation[0] ? r->mode.generation : "none recorded");
		state_lost(r, NULL);
		return;
	}
	/* And only on the server it was built on: the same generation on a restarted server (a
	 * snapshot reloaded) or a promoted replica may lack the newest slot records. */
	if (strcmp(redis_conn_run_id(r->o.conn), r->mode.run_id) != 0) {
		r->stats.foreign_server++;
		RLOG(LOG_WARN, NULL,
		     "Redis server %.8s is not the one epoch %" PRIu64 " was built on (%.8s)",
		     redis_conn_run_id(r->o.conn), r->mode.epoch,
		     r->mode.run_id[0] ? r->mode.run_id : "none recorded");
		state_lost(r, NULL);
		return;
	}
	gate_set_generation(r->g, buf);
	r->org_i = 0;
	pass_org(r);
}

static void orgs_cb(int status, const struct pg_results *res, void *data)
{
	struct reconciler *r = data;
	int n, rc;

	if (status) {
		run_end(r, status);
		return;
	}
	n = PQntuples(res->res[0]);
	r->org_ids = calloc((size_t)n + 1, sizeof(*r->org_ids));
	r->res[ST_ORGS] = PQcopyResult(res->res[0], PG_COPYRES_ATTRS | PG_COPYRES_TUPLES);
	if (!r->org_ids || !r->res[ST_ORGS]) {
		run_end(r, -ENOMEM);
		return;
	}
	for (int i = 0; i < n; i++) {
		r->org_ids[i] = strdup(val(res->res[0], i, 0));
		if (!r->org_ids[i]) {
			r->n_orgs = i;
			run_end(r, -ENOMEM);
			return;
		}
	}
	r->n_orgs = n;
	rc = gate_read_generation(r->g, pass_gen_cb, r);
	if (rc)
		run_end(r, rc);
}

static void periodic(struct reconciler *r)
{
	struct pg_query q = { .stmt = r->st[ST_ORGS] };
	int rc = pg_pool_exec(r->o.pool, PG_LANE_NORMAL, &q, orgs_cb, r);

	if (rc)
		run_end(r, rc);
}

/* --- a run: lease, mode, then the way back or the periodic pass --- */

static void mode_cb(struct gate_pg *pg, int status, const struct gate_pg_switch_result *res,
		    void *data)
{
	struct reconciler *r = data;

	(void)pg;
	if (status) {
		run_end(r, status);
		return;
	}
	r->mode = res->now;
	if (!gate_pg_rebuild_allowed(&r->mode)) {
		periodic(r);
		return;
	}
	/* postgres mode, or a redis epoch never built (the initial build, gate_pg.h) */
	r->back_wanted = true;
	if (redis_conn_is_up(r->o.conn))
		way_back(r);
	else
		run_end(r, 0); /* Redis still unreachable: the next run after the backoff */
}

static void lease_cb(int status, const struct pg_results *res, void *data)
{
	struct reconciler *r = data;
	int rc;

	if (status) {
		run_end(r, status);
		return;
	}
	if (PQntuples(res->res[0]) != 1) {
		r->stats.not_leader++;
		run_end(r, 0);
		return;
	}
	r->lease_version = u64(res->res[0], 0, 0);
	r->stats.runs++;
	rc = gate_pg_read_mode(r->o.pg, mode_cb, r);
	if (rc)
		run_end(r, rc);
}

int reconciler_run(struct reconciler *r, reconciler_done_cb cb, void *data)
{
	char ttl[24];
	const char *v[2] = { r->owner, ttl };
	struct pg_query q = { .stmt = r->st[ST_LEASE], .nparams = 2, .values = v };
	int rc;

	if (r->closing)
		return -ESHUTDOWN;
	if (r->running)
		return -EBUSY;
	/* The lease outlives a period by two, so a slow run keeps it. */
	snprintf(ttl, sizeof(ttl), "%" PRIu64, 3 * r->o.period_ms);
	rc = pg_pool_exec(r->o.pool, PG_LANE_NORMAL, &q, lease_cb, r);
	if (rc)
		return rc;
	r->running = true;
	r->back_wanted = false;
	r->done_cb = cb;
	r->done_data = data;
	return 0;
}
