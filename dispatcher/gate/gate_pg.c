/* The PostgreSQL side of the slot gate: statements, the call-row write, the fence (gate_pg.h;
 * the reasoning is README-pg.md). The mode switch and the reconciler's reads are
 * gate_pg_switch.c. */
#include "gate_pg_int.h"

#include "error.h"
#include "gate_pg_sql.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Sets statement_timeout and lock_timeout to what is left of $1 ms since the transaction
 * began (now() is the transaction's start on the server's own clock), at least 1 ms (0 would
 * mean no limit). Sent before and again after the lock, so the whole write is bounded. */
#define BUDGET_LEFT                                                                                \
	"(SELECT greatest(1, $1::bigint - floor(extract(epoch FROM clock_timestamp() - now())"     \
	" * 1000)::bigint)::text AS b) x"

const struct stmt_def gate_pg_stmts[] = {
	{ ST_BUDGET, 1,
	  "SELECT set_config('statement_timeout', b, true), set_config('lock_timeout', b, true)"
	  " FROM " BUDGET_LEFT },
	{ ST_BUDGET_TXN, 1,
	  "SELECT set_config('statement_timeout', b, true), set_config('lock_timeout', b, true),"
	  " set_config('idle_in_transaction_session_timeout', b, true) FROM " BUDGET_LEFT },
	{ ST_LOCK_SHARED, 0, "SELECT pg_advisory_xact_lock_shared(" EPOCH_LOCK_SQL ")" },
	{ ST_LOCK_EXCL, 0, "SELECT pg_advisory_xact_lock(" EPOCH_LOCK_SQL ")" },
	/* The call-row write. $1 epoch, $2 mode, $3.. one array per column. Runs after the
	 * shared epoch lock was granted, so its snapshot holds every switch and fence committed
	 * before. Per call: 'w' written, 'e' stale epoch, 'f' fenced, 'l' lease lost, 'x' a row
	 * with this id existed. The contact is locked (FOR UPDATE, its lease re-checked on the
	 * newest row version by READ COMMITTED) before the call row is inserted, and set dialing
	 * only when it was. A contact whose campaign is not active or whose batch is paused or
	 * stopped (since it was claimed) is 'l' too: the caller hands it back (held, cancelled).
	 * created_at is clock_timestamp(), the write's own time after the locks (the org row in
	 * postgres mode, the epoch lock, the contact), not now(): the transaction's start came up
	 * to the deadline before the admission, so intervals from created_at overlapped beyond
	 * the limit though the live calls never did. */
	{ ST_WRITE, WRITE_NPARAMS,
	  "WITH i AS (SELECT * FROM unnest($3::uuid[], $4::text[], $5::text[], $6::text[],"
	  " $7::bigint[], $8::bigint[], $9::int[], $10::text[], $11::text[]) WITH ORDINALITY"
	  " AS t(id, org_id, campaign_id, agent_id, contact_id, lease_token, attempt, to_number,"
	  " from_number, n)),"
	  " e AS (SELECT EXISTS (SELECT 1 FROM system_settings WHERE gate_epoch = $1::bigint"
	  " AND gate_mode = $2::text) AS ok),"
	  " f AS (SELECT call_id FROM gate_fences WHERE call_id IN (SELECT id FROM i)),"
	  " l AS (SELECT i.id FROM i JOIN contacts c ON c.id = i.contact_id"
	  " JOIN batches b ON b.id = c.batch_id JOIN campaigns cp ON cp.id = c.campaign_id"
	  " WHERE c.state = 'claimed' AND c.lease_token = i.lease_token"
	  " AND c.lease_until > now() AND (SELECT ok FROM e)"
	  " AND cp.status = 'active' AND b.status NOT IN ('paused', 'stopped')"
	  " AND i.id NOT IN (SELECT call_id FROM f) FOR UPDATE OF c),"
	  " w AS (INSERT INTO calls (id, org_id, campaign_id, agent_id, contact_id, attempt,"
	  " to_number, from_number, state, gate_mode, gate_epoch, created_at)"
	  " SELECT i.id, i.org_id, i.campaign_id, i.agent_id, i.contact_id, i.attempt,"
	  " i.to_number, i.from_number, 'dialing', $2::text, $1::bigint, clock_timestamp() FROM i"
	  " WHERE (SELECT ok FROM e) AND i.id NOT IN (SELECT call_id FROM f)"
	  " AND (i.contact_id IS NULL OR i.id IN (SELECT id FROM l))"
	  " ON CONFLICT (id) DO NOTHING RETURNING id, contact_id),"
	  " u AS (UPDATE contacts c SET state = 'dialing', updated_at = now() FROM w"
	  " WHERE c.id = w.contact_id)"
	  " SELECT CASE WHEN w.id IS NOT NULL THEN 'w' WHEN NOT (SELECT ok FROM e) THEN 'e'"
	  " WHEN i.id IN (SELECT call_id FROM f) THEN 'f'"
	  " WHEN i.contact_id IS NOT NULL AND i.id NOT IN (SELECT id FROM l) THEN 'l'"
	  " ELSE 'x' END FROM i LEFT JOIN w ON w.id = i.id ORDER BY i.n" },
	/* The fence, under the exclusive epoch lock: no write is in flight, so "no row" here
	 * means no row ever, once the fence is committed. Per call: t has a row, f fenced. */
	{ ST_FENCE, 2,
	  "WITH i AS (SELECT * FROM unnest($1::uuid[], $2::text[]) WITH ORDINALITY"
	  " AS t(id, org_id, n)),"
	  " x AS (SELECT id FROM calls WHERE id IN (SELECT id FROM i)),"
	  " f AS (INSERT INTO gate_fences (call_id, org_id) SELECT id, org_id FROM i"
	  " WHERE id NOT IN (SELECT id FROM x) ON CONFLICT (call_id) DO NOTHING)"
	  " SELECT i.id IN (SELECT id FROM x) FROM i ORDER BY i.n" },
	{ ST_MODE_READ, 0,
	  "SELECT gate_mode, gate_epoch, gate_generation, gate_redis_run_id FROM system_settings" },
	/* Compare-and-set: moves the epoch only from the one the caller saw, and only to another
	 * mode; under the exclusive epoch lock, so several callers move it once. */
	{ ST_SWITCH, 2,
	  "WITH u AS (UPDATE system_settings SET gate_mode = $2::text,"
	  " gate_epoch = gate_epoch + 1, updated_at = now()"
	  " WHERE gate_epoch = $1::bigint AND gate_mode <> $2::text"
	  " RETURNING gate_mode, gate_epoch)"
	  " SELECT gate_mode, gate_epoch, pg_notify('" GATE_PG_CHANNEL_MODE "',"
	  " gate_mode || ' ' || gate_epoch) FROM u" },
	/* The way back's commit: mode redis, epoch + 1, the generation the rebuild wrote and the
	 * run_id of the server it wrote it on ($3, '' for none); from postgres mode, or from a
	 * redis epoch with no generation recorded (the initial build). */
	{ ST_SWITCH_REDIS, 3,
	  "WITH u AS (UPDATE system_settings SET gate_mode = 'redis',"
	  " gate_epoch = gate_epoch + 1, gate_generation = $2::text,"
	  " gate_redis_run_id = nullif($3::text, ''), updated_at = now()"
	  " WHERE gate_epoch = $1::bigint AND (gate_mode <> 'redis' OR gate_generation IS NULL)"
	  " RETURNING gate_mode, gate_epoch, gate_generation, gate_redis_run_id)"
	  " SELECT gate_mode, gate_epoch, gate_generation, gate_redis_run_id,"
	  " pg_notify('" GATE_PG_CHANNEL_MODE "', gate_mode || ' ' || gate_epoch) FROM u" },
	{ ST_SYSTEM_LOCK, 0,
	  "SELECT gate_mode, gate_epoch, global_limit, gate_generation, gate_redis_run_id"
	  " FROM system_settings FOR UPDATE" },
	{ ST_LEASE, 2,
	  "SELECT count(*) FROM leases WHERE name = 'reconciler' AND owner = $1::text"
	  " AND version = $2::bigint AND lease_until > clock_timestamp()" },
	{ ST_ALL_LIVE, 0,
	  "SELECT id::text, org_id, campaign_id, agent_id FROM calls"
	  " WHERE state IN " LIVE_STATES " ORDER BY org_id, id" },
	{ ST_ORG_LIVE, 1,
	  "SELECT id::text, org_id, campaign_id, agent_id FROM calls"
	  " WHERE org_id = $1::text AND state IN " LIVE_STATES " ORDER BY id" },
	/* Step 3 of a reconciler pass (core/reconcile.h): 0 no row, 1 live, 2 ended. A live row
	 * whose terminal event is recorded counts as ended: the worker frees its slots as soon as
	 * that event is committed, before the end (the early release, worker/events.c), so the
	 * pass must not re-add them (an ADD for a call the provider has ended). */
	{ ST_CALL_ROWS, 1,
	  "SELECT CASE WHEN c.id IS NULL THEN 0 WHEN c.state IN " LIVE_STATES
	  " AND NOT EXISTS (SELECT 1 FROM provider_events e WHERE e.call_id = c.id"
	  " AND e.status IN ('completed', 'failed', 'no-answer', 'busy', 'canceled'))"
	  " THEN 1 ELSE 2 END"
	  " FROM unnest($1::uuid[]) WITH ORDINALITY AS i(id, n) LEFT JOIN calls c ON c.id = i.id"
	  " ORDER BY i.n" },
	{ ST_PRUNE, 1,
	  "WITH f AS (DELETE FROM gate_fences WHERE created_at < now()"
	  " - make_interval(secs => $1::double precision) RETURNING 1),"
	  " w AS (DELETE FROM gate_direct_waiters WHERE expires_at < now() RETURNING 1)"
	  " SELECT (SELECT count(*) FROM f) + (SELECT count(*) FROM w)" },
	{ ST_CANCEL, 3, SQL_GATE_PG_CANCEL },
};
const size_t gate_pg_n_stmts = sizeof(gate_pg_stmts) / sizeof(gate_pg_stmts[0]);

/* --- array literals --- */

static void put(struct pgarr *a, const char *s, size_t n)
{
	if (a->oom)
		return;
	if (a->len + n + 2 > a->cap) {
		size_t cap = a->cap ? a->cap : 64;
		while (a->len + n + 2 > cap)
			cap *= 2;
		char *b = realloc(a->buf, cap);
		if (!b) {
			a->oom = true;
			return;
		}
		a->buf = b;
		a->cap = cap;
	}
	memcpy(a->buf + a->len, s, n);
	a->len += n;
	a->buf[a->len] = '\0';
}

void pgarr_init(struct pgarr *a)
{
	*a = (struct pgarr){ 0 };
	put(a, "{", 1);
}

static void sep(struct pgarr *a)
{
	if (a->any)
		put(a, ",", 1);
	a->any = true;
}

void pgarr_text(struct pgarr *a, const char *s)
{
	sep(a);
	if (!s) {
		put(a, "NULL", 4);
		return;
	}
	put(a, "\"", 1);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			put(a, "\\", 1);
		put(a, s, 1);
	}
	put(a, "\"", 1);
}

void pgarr_int(struct pgarr *a, int64_t v, bool null)
{
	char buf[24];

	sep(a);
	if (null) {
		put(a, "NULL", 4);
		return;
	}
	put(a, buf, (size_t)snprintf(buf, sizeof(buf), "%" PRId64, v));
}

const char *pgarr_end(struct pgarr *a)
{
	put(a, "}", 1);
	return a->oom ? NULL : a->buf;
}

void pgarr_free(struct pgarr *a)
{
	free(a->buf);
	*a = (struct pgarr){ 0 };
}

/* --- validation --- */

bool gate_pg_phone_ok(const char *s)
{
	size_t n;

	if (!s || s[0] != '+' || s[1] < '1' || s[1] > '9')
		return false;
	for (n = 1; s[n]; n++)
		if (!isdigit((unsigned char)s[n]))
			return false;
	return n - 1 >= 7 && n - 1 <= 15;
}

static bool dial_ok(const struct gate_pg_dial *d)
{
	if (!ident_ok(d->agent) || d->attempt < 1 || !gate_pg_phone_ok(d->to_number))
		return false;
	if (d->from_number && strlen(d->from_number) > 32)
		return false;
	if (d->campaign)
		return ident_ok(d->campaign) && d->contact > 0;
	return d->contact == 0;
}

int gate_pg_calls_check(const struct gate_pg_call *calls, uint32_t n)
{
	if (!calls || n < 1 || n > GATE_PG_WRITE_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		const struct gate_pg_call *c = &calls[i];
		if (!ident_uuid_ok(c->call) || !ident_ok(c->org) || !dial_ok(&c->dial))
			return -EINVAL;
		for (uint32_t j = 0; j < i; j++)
			if (strcasecmp(calls[j].call, c->call) == 0 ||
			    (c->dial.contact && calls[j].dial.contact == c->dial.contact))
				return -EINVAL;
	}
	return 0;
}

/* --- shared helpers --- */

const char *gate_pg_ms(char *buf, uint64_t ms)
{
	snprintf(buf, 24, "%" PRIu64, ms > INT32_MAX ? (uint64_t)INT32_MAX : ms);
	return buf;
}

const char *gate_pg_sqlstate(int status, const struct pg_results *r)
{
	const char *s = NULL;

	if (status == DSP_EPG && r && r->error)
		s = PQresultErrorField(r->error, PG_DIAG_SQLSTATE);
	return s ? s : "";
}

bool gate_pg_is_timeout(const char *sqlstate)
{
	return strcmp(sqlstate, "57014") == 0 || strcmp(sqlstate, "55P03") == 0;
}

void gate_pg_count(struct gate_pg *g, const enum gate_pg_outcome *out, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if ((unsigned)out[i] < GATE_PG_OUTCOME_COUNT)
			g->stats.outcomes[out[i]]++;
}

int write_params_build(struct write_params *p, enum gate_mode mode, uint64_t epoch,
		       const struct gate_pg_call *calls, uint32_t n)
{
	for (int k = 0; k < 9; k++)
		pgarr_init(&p->arr[k]);
	for (uint32_t i = 0; i < n; i++) {
		const struct gate_pg_call *c = &calls[i];
		pgarr_text(&p->arr[0], c->call);
		pgarr_text(&p->arr[1], c->org);
		pgarr_text(&p->arr[2], c->dial.campaign);
		pgarr_text(&p->arr[3], c->dial.agent);
		pgarr_int(&p->arr[4], c->dial.contact, c->dial.contact == 0);
		pgarr_int(&p->arr[5], c->dial.lease_token, c->dial.contact == 0);
		pgarr_int(&p->arr[6], c->dial.attempt, false);
		pgarr_text(&p->arr[7], c->dial.to_number);
		pgarr_text(&p->arr[8], c->dial.from_number);
	}
	snprintf(p->epoch, sizeof(p->epoch), "%" PRIu64, epoch);
	p->values[0] = p->epoch;
	p->values[1] = gate_mode_name(mode);
	for (int k = 0; k < 9; k++) {
		p->values[2 + k] = pgarr_end(&p->arr[k]);
		if (!p->values[2 + k]) {
			write_params_free(p);
			return -ENOMEM;
		}
	}
	return 0;
}

void write_params_free(struct write_params *p)
{
	for (int k = 0; k < 9; k++)
		pgarr_free(&p->arr[k]);
}

int write_parse(const PGresult *res, uint32_t n, enum gate_pg_outcome *out)
{
	if (PQntuples(res) != (int)n || PQnfields(res) != 1)
		return -EPROTO;
	for (uint32_t i = 0; i < n; i++) {
		switch (PQgetvalue(res, (int)i, 0)[0]) {
		case 'w':
			out[i] = GATE_PG_WRITTEN;
			break;
		case 'e':
			out[i] = GATE_PG_STALE_EPOCH;
			break;
		case 'f':
			out[i] = GATE_PG_FENCED;
			break;
		case 'l':
			out[i] = GATE_PG_LEASE_LOST;
			break;
		case 'x':
			out[i] = GATE_PG_EXISTS;
			break;
		default:
			return -EPROTO;
		}
	}
	return 0;
}

enum gate_pg_outcome write_failure(int status, const struct pg_results *r)
{
	const char *state = gate_pg_sqlstate(status, r);

	if (status == DSP_EPG && gate_pg_is_timeout(state))
		return GATE_PG_DEADLINE;
	if (status == DSP_EPG || status == -ENOTCONN)
		return GATE_PG_FAILED; /* rolled back, or never sent */
	return GATE_PG_UNKNOWN;	       /* -ECONNRESET, -ETIMEDOUT, -ECANCELED: it may have run */
}

/* --- creation --- */

int gate_pg_new(struct pg_pool *pool, const struct gate_pg_options *opts, struct gate_pg **out)
{
	struct gate_pg *g;
	int rc = 0;

	if (!pool || !out)
		return -EINVAL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->pool = pool;
	if (opts)
		g->opts = *opts;
	if (!g->opts.fence_lock_ms)
		g->opts.fence_lock_ms = GATE_PG_FENCE_LOCK_MS;
	for (size_t i = 0; i < gate_pg_n_stmts && !rc; i++)
		rc = pg_pool_prepare(pool, gate_pg_stmts[i].sql, gate_pg_stmts[i].nparams,
				     &g->st[gate_pg_stmts[i].id]);
	for (size_t i = 0; i < gate_pgmode_n_stmts && !rc; i++)
		rc = pg_pool_prepare(pool, gate_pgmode_stmts[i].sql, gate_pgmode_stmts[i].nparams,
				     &g->st[gate_pgmode_stmts[i].id]);
	if (rc) {
		free(g);
		return rc;
	}
	*out = g;
	return 0;
}

void gate_pg_free(struct gate_pg *g)
{
	free(g);
}

int gate_pg_listen(struct pg_pool *pool, pg_notify_cb free_cb, pg_notify_cb mode_cb, void *data)
{
	int rc = 0;

	if (free_cb)
		rc = pg_pool_listen(pool, GATE_PG_CHANNEL_FREE, free_cb, data);
	if (!rc && mode_cb)
		rc = pg_pool_listen(pool, GATE_PG_CHANNEL_MODE, mode_cb, data);
	return rc;
}

int gate_pg_parse_mode(const char *payload, struct gate_pg_mode *out)
{
	char mode[16];
	uint64_t epoch;
	int used = 0;

	if (!payload || sscanf(payload, "%15s %" SCNu64 "%n", mode, &epoch, &used) != 2 ||
	    payload[used] != '\0' || epoch < 1)
		return -EINVAL;
	if (strcmp(mode, "redis") == 0)
		out->mode = GATE_MODE_REDIS;
	else if (strcmp(mode, "postgres") == 0)
		out->mode = GATE_MODE_POSTGRES;
	else
		return -EINVAL;
	out->epoch = epoch;
	out->generation[0] = out->run_id[0] = '\0'; /* not in the payload: gate_pg_read_mode() */
	return 0;
}

void gate_pg_get_stats(const struct gate_pg *g, struct gate_pg_stats *out)
{
	*out = g->stats;
}

bool gate_pg_outcome_releases(enum gate_pg_outcome o)
{
	return o != GATE_PG_WRITTEN && o != GATE_PG_EXISTS && o != GATE_PG_UNKNOWN;
}

const char *gate_pg_outcome_name(enum gate_pg_outcome o)
{
	static const char *const names[] = {
		[GATE_PG_WRITTEN] = "written",	     [GATE_PG_STALE_EPOCH] = "stale_epoch",
		[GATE_PG_LEASE_LOST] = "lease_lost", [GATE_PG_FENCED] = "fenced",
		[GATE_PG_DEADLINE] = "deadline",     [GATE_PG_FAILED] = "failed",
		[GATE_PG_EXISTS] = "exists",	     [GATE_PG_UNKNOWN] = "unknown",
	};

	if ((unsigned)o < GATE_PG_OUTCOME_COUNT)
		return names[o];
	return "unknown";
}

const char *gate_mode_name(enum gate_mode mode)
{
	return mode == GATE_MODE_POSTGRES ? "postgres" : "redis";
}

/* --- the call-row write --- */

struct write_op {
	struct gate_pg *g;
	gate_pg_write_cb cb;
	void *data;
	uint32_t n;
	char *ids, *orgs; /* the array literals, kept to fence a lost write */
	enum gate_pg_outcome out[];
};

static void write_finish(struct write_op *op)
{
	op->g->stats.writes++;
	gate_pg_count(op->g, op->out, op->n);
	op->cb(op->g, op->out, op->n, op->data);
	free(op->ids);
	free(op->orgs);
	free(op);
}

static void write_fenced_cb(struct gate_pg *g, int status, const bool *written, uint32_t n,
			    void *data)
{
	struct write_op *op = data;

	for (uint32_t i = 0; i < op->n; i++)
		op->out[i] = status	  ? GATE_PG_UNKNOWN
			     : written[i] ? GATE_PG_WRITTEN
					  : GATE_PG_FENCED;
	if (status)
		GLOG(LOG_ERROR,
		     "a call-row write of %" PRIu32 " calls was lost and could not be fenced (%s):"
		     " their slots stay until the reconciler fences them",
		     op->n, dsp_strerror(status));
	write_finish(op);
}

static void write_done_cb(int status, const struct pg_results *r, void *data)
{
	struct write_op *op = data;
	enum gate_pg_outcome all;

	if (status == 0 && write_parse(r->res[3], op->n, op->out) == 0) {
		write_finish(op);
		return;
	}
	/* Committed, but the answer is not the statement's shape: settle it like a lost one. */
	all = status == 0 ? GATE_PG_UNKNOWN : write_failure(status, r);
	if (status == DSP_EPG && all != GATE_PG_DEADLINE)
		GLOG(LOG_ERROR, "call-row write refused: %s",
		     r->error ? PQresultErrorMessage(r->error) : "?");
	else if (status == 0)
		GLOG(LOG_ERROR, "call-row write: unexpected result shape");
	if (all == GATE_PG_UNKNOWN && status != -ECANCELED &&
	    gate_pg_fence_lits(op->g, op->ids, op->orgs, op->n, write_fenced_cb, op) == 0) {
		GLOG(LOG_WARN, "call-row write lost (%s): fencing its %" PRIu32 " calls",
		     dsp_strerror(status), op->n);
		return;
	}
	for (uint32_t i = 0; i < op->n; i++)
		op->out[i] = all;
	write_finish(op);
}

int gate_pg_write(struct gate_pg *g, enum gate_mode mode, uint64_t epoch, uint64_t deadline_ms,
		  const struct gate_pg_call *calls, uint32_t n, gate_pg_write_cb cb, void *data)
{
	struct write_params p;
	struct write_op *op;
	char budget[24];
	int rc;

	if (!g || !cb || epoch < 1 || (unsigned)mode > GATE_MODE_POSTGRES)
		return -EINVAL;
	rc = gate_pg_calls_check(calls, n);
	if (rc)
		return rc;
	if (deadline_ms == 0)
		return -ETIMEDOUT;
	op = calloc(1, sizeof(*op) + n * sizeof(op->out[0]));
	if (!op)
		return -ENOMEM;
	*op = (struct write_op){ .g = g, .cb = cb, .data = data, .n = n };
	if (write_params_build(&p, mode, epoch, calls, n)) {
		free(op);
		return -ENOMEM;
	}
	gate_pg_ms(budget, deadline_ms);
	const char *bv[] = { budget };
	struct pg_query q[] = {
		{ .stmt = g->st[ST_BUDGET], .nparams = 1, .values = bv },
		{ .stmt = g->st[ST_LOCK_SHARED] },
		{ .stmt = g->st[ST_BUDGET], .nparams = 1, .values = bv },
		{ .stmt = g->st[ST_WRITE], .nparams = WRITE_NPARAMS, .values = p.values },
	};
	op->ids = strdup(p.values[2]);
	op->orgs = strdup(p.values[3]);
	rc = op->ids && op->orgs ? 0 : -ENOMEM;
	if (!rc)
		rc = pg_pool_batch(g->pool, PG_LANE_NORMAL, q, 4, write_done_cb, op);
	write_params_free(&p);
	if (rc) {
		free(op->ids);
		free(op->orgs);
		free(op);
	}
	return rc;
}

/* --- the fence --- */

struct fence_op {
	struct gate_pg *g;
	gate_pg_fence_cb cb;
	void *data;
	uint32_t n;
	bool written[];
};

static void fence_done_cb(int status, const struct pg_results *r, void *data)
{
	struct fence_op *op = data;
	struct gate_pg *g = op->g;
	const PGresult *res = status == 0 ? r->res[3] : NULL;

	if (res && PQntuples(res) != (int)op->n)
		status = -EPROTO;
	if (status == DSP_EPG && gate_pg_is_timeout(gate_pg_sqlstate(status, r)))
		status = -ETIMEDOUT;
	else if (status == DSP_EPG)
		GLOG(LOG_ERROR, "fence refused: %s",
		     r->error ? PQresultErrorMessage(r->error) : "?");
	if (status) {
		op->cb(g, status, NULL, op->n, op->data);
		free(op);
		return;
	}
	g->stats.fences++;
	for (uint32_t i = 0; i < op->n; i++) {
		op->written[i] = PQgetvalue(res, (int)i, 0)[0] == 't';
		if (op->written[i])
			g->stats.fence_found++;
		else
			g->stats.fenced++;
	}
	op->cb(g, 0, op->written, op->n, op->data);
	free(op);
}

int gate_pg_fence_lits(struct gate_pg *g, const char *ids, const char *orgs, uint32_t n,
		       gate_pg_fence_cb cb, void *data)
{
	struct fence_op *op = calloc(1, sizeof(*op) + n * sizeof(op->written[0]));
	char budget[24];
	int rc;

	if (!op)
		return -ENOMEM;
	*op = (struct fence_op){ .g = g, .cb = cb, .data = data, .n = n };
	gate_pg_ms(budget, g->opts.fence_lock_ms);
	const char *bv[] = { budget }, *fv[] = { ids, orgs };
	/* The whole fence within fence_lock_ms: while it waits for the lock, every new write
	 * waits behind it. */
	struct pg_query q[] = {
		{ .stmt = g->st[ST_BUDGET], .nparams = 1, .values = bv },
		{ .stmt = g->st[ST_LOCK_EXCL] },
		{ .stmt = g->st[ST_BUDGET], .nparams = 1, .values = bv },
		{ .stmt = g->st[ST_FENCE], .nparams = 2, .values = fv },
	};
	/* The priority lane: a fence settles a lost write, often right after its connection
	 * dropped, and a worker waits on it to release slots. */
	rc = pg_pool_batch(g->pool, PG_LANE_PRIORITY, q, 4, fence_done_cb, op);
	if (rc)
		free(op);
	return rc;
}

int gate_pg_fence(struct gate_pg *g, const char *const *calls, const char *const *orgs, uint32_t n,
		  gate_pg_fence_cb cb, void *data)
{
	struct pgarr ids, os;
	int rc;

	if (!g || !cb || !calls || !orgs || n < 1 || n > GATE_PG_WRITE_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		if (!ident_uuid_ok(calls[i]) || !ident_ok(orgs[i]))
			return -EINVAL;
		for (uint32_t j = 0; j < i; j++)
			if (strcasecmp(calls[i], calls[j]) == 0)
				return -EINVAL;
	}
	pgarr_init(&ids);
	pgarr_init(&os);
	for (uint32_t i = 0; i < n; i++) {
		pgarr_text(&ids, calls[i]);
		pgarr_text(&os, orgs[i]);
	}
	if (pgarr_end(&ids) && pgarr_end(&os))
		rc = gate_pg_fence_lits(g, ids.buf, os.buf, n, cb, data);
	else
		rc = -ENOMEM;
	pgarr_free(&ids);
	pgarr_free(&os);
	return rc;
}

/* --- ending rows written for cancelled callers --- */

struct cancel_op {
	struct gate_pg *g;
	gate_pg_cancel_cb cb;
	void *data;
	uint32_t n;
	bool ended[];
};

static void cancel_done_cb(int status, const struct pg_results *r, void *data)
{
	struct cancel_op *op = data;
	struct gate_pg *g = op->g;
	const PGresult *res = status == 0 ? r->res[3] : NULL;

	if (res && (PQntuples(res) != (int)op->n || PQnfields(res) != 1))
		status = -EPROTO;
	if (status == DSP_EPG && gate_pg_is_timeout(gate_pg_sqlstate(status, r)))
		status = -ETIMEDOUT;
	else if (status == DSP_EPG)
		GLOG(LOG_ERROR, "ending cancelled calls refused: %s",
		     r->error ? PQresultErrorMessage(r->error) : "?");
	if (status) {
		op->cb(g, status, NULL, op->n, op->data);
		free(op);
		return;
	}
	for (uint32_t i = 0; i < op->n; i++) {
		op->ended[i] = PQgetvalue(res, (int)i, 0)[0] == 't';
		if (op->ended[i])
			g->stats.cancelled++;
	}
	op->cb(g, 0, op->ended, op->n, op->data);
	free(op);
}

int gate_pg_cancel_written(struct gate_pg *g, const struct gate_pg_call *calls, uint32_t n,
			   uint64_t deadline_ms, gate_pg_cancel_cb cb, void *data)
{
	struct pgarr a[3];
	struct cancel_op *op;
	char budget[24];
	int rc;

	if (!g || !cb)
		return -EINVAL;
	rc = gate_pg_calls_check(calls, n);
	if (rc)
		return rc;
	if (deadline_ms == 0)
		return -ETIMEDOUT;
	op = calloc(1, sizeof(*op) + n * sizeof(op->ended[0]));
	if (!op)
		return -ENOMEM;
	*op = (struct cancel_op){ .g = g, .cb = cb, .data = data, .n = n };
	for (int k = 0; k < 3; k++)
		pgarr_init(&a[k]);
	for (uint32_t i = 0; i < n; i++) {
		bool direct = calls[i].dial.contact == 0;
		pgarr_text(&a[0], calls[i].call);
		pgarr_int(&a[1], calls[i].dial.contact, direct);
		pgarr_int(&a[2], calls[i].dial.lease_token, direct);
	}
	const char *cv[3] = { pgarr_end(&a[0]), pgarr_end(&a[1]), pgarr_end(&a[2]) };
	gate_pg_ms(budget, deadline_ms);
	const char *bv[] = { budget };
	/* Bounded and ordered like the write: budget, the epoch lock shared, the budget again
	 * (what is left), then the statement, whose snapshot follows the lock. */
	struct pg_query q[] = {
		{ .stmt = g->st[ST_BUDGET], .nparams = 1, .values = bv },
		{ .stmt = g->st[ST_LOCK_SHARED] },
		{ .stmt = g->st[ST_BUDGET], .nparams = 1, .values = bv },
		{ .stmt = g->st[ST_CANCEL], .nparams = 3, .values = cv },
	};
	rc = cv[0] && cv[1] && cv[2]
		     ? pg_pool_batch(g->pool, PG_LANE_NORMAL, q, 4, cancel_done_cb, op)
		     : -ENOMEM;
	for (int k = 0; k < 3; k++)
		pgarr_free(&a[k]);
	if (rc)
		free(op);
	return rc;
}
