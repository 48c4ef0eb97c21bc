/* The gate in postgres mode: the admission transaction (gate_pgmode.h). Reads under the locks,
 * decides with the model (pgmode_model.c), writes with the shared call-row statement. The
 * release and the floors install are gate_pgmode_io.c. */
#include "gate_pgmode_int.h"

#include "error.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

const struct stmt_def gate_pgmode_stmts[] = {
	{ ST_ORG_LOCK, 1,
	  "SELECT org_limit, coalesce(per_agent_limit, 0), concurrency_management_enabled"
	  " FROM organisations WHERE id = $1::text FOR UPDATE" },
	/* Live calls of the system; the installed floors' version and the ms they still count
	 * (PostgreSQL's clock only); the direct floor; waiting direct dials. */
	{ ST_SCALARS, 1,
	  "SELECT (SELECT count(*) FROM calls WHERE state IN " LIVE_STATES "),"
	  " (SELECT version FROM fair_share_installs WHERE org_id = $1::text),"
	  " (SELECT greatest(0, ceil(extract(epoch FROM expires_at - clock_timestamp()) * 1000))"
	  "::bigint FROM fair_share_installs WHERE org_id = $1::text),"
	  " (SELECT floor FROM fair_share_floors WHERE org_id = $1::text AND campaign_id = ''),"
	  " (SELECT count(*) FROM gate_direct_waiters WHERE org_id = $1::text"
	  " AND expires_at > clock_timestamp())" },
	{ ST_ORG_COUNTS, 1,
	  "SELECT campaign_id, agent_id, count(*) FROM calls WHERE org_id = $1::text"
	  " AND state IN " LIVE_STATES " GROUP BY campaign_id, agent_id" },
	/* The candidates, the campaigns that hold a floor and those with live calls: nothing
	 * else of the org matters to the decision, so its cost does not grow with the number of
	 * campaigns. Each is looked up by key (the LIMIT keeps the lateral lookup from being
	 * turned into a hash join over every campaign of the org). */
	{ ST_CAMPAIGNS, 2,
	  "WITH ids AS (SELECT unnest($2::text[]) AS id"
	  " UNION SELECT campaign_id FROM fair_share_floors WHERE org_id = $1::text AND floor > 0"
	  " UNION SELECT campaign_id FROM calls WHERE org_id = $1::text AND state IN " LIVE_STATES
	  " AND campaign_id IS NOT NULL)"
	  " SELECT c.id, c.max_concurrent_calls, c.agent_id, coalesce(f.floor, 0)"
	  " FROM ids CROSS JOIN LATERAL (SELECT id, max_concurrent_calls, agent_id FROM campaigns"
	  " WHERE id = ids.id AND org_id = $1::text LIMIT 1) c"
	  " LEFT JOIN fair_share_floors f ON f.org_id = $1::text AND f.campaign_id = c.id"
	  " ORDER BY c.id COLLATE \"C\"" },
	{ ST_WAITERS_OF, 1,
	  "SELECT call_id::text FROM gate_direct_waiters WHERE call_id = ANY($1::uuid[])"
	  " AND expires_at > clock_timestamp()" },
	/* $1 org, $2/$3 waiters to register (call ids, agents), $4 call ids to withdraw,
	 * $5 ttl ms. */
	{ ST_WAIT_SET, 5,
	  "WITH d AS (DELETE FROM gate_direct_waiters WHERE call_id = ANY($4::uuid[])),"
	  " a AS (INSERT INTO gate_direct_waiters (call_id, org_id, agent_id, expires_at)"
	  " SELECT id, $1::text, ag, clock_timestamp()"
	  " + make_interval(secs => $5::double precision / 1000)"
	  " FROM unnest($2::uuid[], $3::text[]) AS t(id, ag)"
	  " ON CONFLICT (call_id) DO UPDATE SET expires_at = EXCLUDED.expires_at)"
	  " SELECT 1" },
	/* Ends the live ones of $1 and, in postgres mode, wakes each org's waiters once. */
	{ ST_RELEASE, 2,
	  "WITH u AS (UPDATE calls SET state = 'ended', outcome = coalesce(outcome, $2::text),"
	  " ended_at = now(), updated_at = now()"
	  " WHERE id = ANY($1::uuid[]) AND state IN " LIVE_STATES " RETURNING id, org_id),"
	  " n AS (SELECT pg_notify('" GATE_PG_CHANNEL_FREE "', o.org_id)"
	  " FROM (SELECT DISTINCT org_id FROM u) o"
	  " WHERE (SELECT gate_mode FROM system_settings) = 'postgres')"
	  " SELECT i.id IN (SELECT id FROM u) FROM unnest($1::uuid[]) WITH ORDINALITY AS i(id, n)"
	  " WHERE (SELECT count(*) FROM n) >= 0 ORDER BY i.n" },
	/* The install's fence: only a newer version replaces the installed one. */
	{ ST_INSTALL_HEAD, 3,
	  "INSERT INTO fair_share_installs (org_id, version, installed_at, expires_at)"
	  " VALUES ($1::text, $2::bigint, now(),"
	  " now() + make_interval(secs => $3::double precision / 1000))"
	  " ON CONFLICT (org_id) DO UPDATE SET version = EXCLUDED.version,"
	  " installed_at = EXCLUDED.installed_at, expires_at = EXCLUDED.expires_at"
	  " WHERE fair_share_installs.version < EXCLUDED.version RETURNING version" },
	/* The floors rows (campaigns with a floor or in the active set): only those whose floor or
	 * active flag changed are written, the others deleted; the exact carries of every entry
	 * in one row per org (migrations/0004_refresh_notify.sql). Every CTE reads the snapshot
	 * of the statement's start, so the join sees the rows as they were. */
	{ ST_INSTALL_FLOORS, 9,
	  "WITH ok AS (SELECT EXISTS (SELECT 1 FROM fair_share_installs WHERE org_id = $1::text"
	  " AND version = $2::bigint) AS v),"
	  " i AS (SELECT * FROM unnest($3::text[], $4::int[], $5::bool[]) AS t(campaign_id, floor,"
	  " active) WHERE floor > 0 OR active),"
	  " d AS (DELETE FROM fair_share_floors f WHERE f.org_id = $1::text AND (SELECT v FROM ok)"
	  " AND f.campaign_id NOT IN (SELECT campaign_id FROM i)),"
	  " u AS (INSERT INTO fair_share_floors (org_id, campaign_id, floor, version, computed_at,"
	  " active)"
	  " SELECT $1::text, i.campaign_id, i.floor, $2::bigint, now(), i.active FROM i"
	  " LEFT JOIN fair_share_floors f ON f.org_id = $1::text AND f.campaign_id = i.campaign_id"
	  " WHERE (SELECT v FROM ok) AND (f.floor IS DISTINCT FROM i.floor"
	  " OR f.active IS DISTINCT FROM i.active)"
	  " ON CONFLICT (org_id, campaign_id) DO UPDATE SET floor = EXCLUDED.floor,"
	  " version = EXCLUDED.version, computed_at = EXCLUDED.computed_at,"
	  " active = EXCLUDED.active),"
	  " c AS (INSERT INTO fair_share_carries (org_id, version, campaign_ids, floors,"
	  " deficit_us, fluid_num, fluid_den, idle_ms)"
	  " SELECT $1::text, $2::bigint, $3::text[], $4::int[], $6::bigint[], $7::bigint[],"
	  " $8::bigint[], $9::bigint[] WHERE (SELECT v FROM ok)"
	  " ON CONFLICT (org_id) DO UPDATE SET version = EXCLUDED.version,"
	  " campaign_ids = EXCLUDED.campaign_ids, floors = EXCLUDED.floors,"
	  " deficit_us = EXCLUDED.deficit_us, fluid_num = EXCLUDED.fluid_num,"
	  " fluid_den = EXCLUDED.fluid_den, idle_ms = EXCLUDED.idle_ms)"
	  " SELECT (SELECT v FROM ok)" },
};
const size_t gate_pgmode_n_stmts = sizeof(gate_pgmode_stmts) / sizeof(gate_pgmode_stmts[0]);

/* --- the request, copied --- */

/* No contact may be a candidate twice: two of its calls could be admitted together. */
static int contacts_unique(const struct gate_pgmode_req *reqs, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		for (uint32_t j = 0; j < reqs[i].n_candidates; j++) {
			int64_t c = reqs[i].candidates[j].contact;

			for (uint32_t k = 0; c && k <= i; k++)
				for (uint32_t m = 0; m < (k == i ? j : reqs[k].n_candidates); m++)
					if (reqs[k].candidates[m].contact == c)
						return -EINVAL;
		}
	return 0;
}

static int reqs_check(const char *org, const struct gate_pgmode_req *reqs, uint32_t n)
{
	if (!ident_ok(org) || !reqs || n < 1 || n > GATE_PGMODE_REQS_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		const struct gate_pgmode_req *r = &reqs[i];
		bool direct = r->n_candidates == 1 && r->candidates && !r->candidates[0].campaign;

		if (!r->candidates || r->n_candidates < 1 ||
		    r->n_candidates > GATE_PGMODE_CANDIDATES_MAX || (r->wait && !direct))
			return -EINVAL;
		for (uint32_t j = 0; j < r->n_candidates; j++) {
			struct gate_pg_call c = { .call = r->call,
						  .org = org,
						  .dial = r->candidates[j] };
			if (!direct && !c.dial.campaign)
				return -EINVAL; /* a direct candidate among batch ones */
			if (!direct)
				c.dial.agent = "x"; /* ignored: the campaign's agent is used */
			if (gate_pg_calls_check(&c, 1))
				return -EINVAL;
		}
		for (uint32_t k = 0; k < i; k++)
			if (strcasecmp(reqs[k].call, r->call) == 0)
				return -EINVAL;
	}
	return contacts_unique(reqs, n);
}

static size_t str_size(const char *s)
{
	return s ? strlen(s) + 1 : 0;
}

static const char *str_put(char **at, const char *s)
{
	char *start = *at;

	if (!s)
		return NULL;
	strcpy(start, s);
	*at = start + strlen(s) + 1;
	return start;
}

/* Copies the requests into op (one block for the strings). Returns 0 or -ENOMEM. */
static int reqs_copy(struct admit_op *op, const struct gate_pgmode_req *reqs, uint32_t n)
{
	size_t bytes = 1;
	uint32_t nc = 0;
	char *at;

	for (uint32_t i = 0; i < n; i++) {
		bytes += str_size(reqs[i].call);
		for (uint32_t j = 0; j < reqs[i].n_candidates; j++, nc++) {
			const struct gate_pg_dial *d = &reqs[i].candidates[j];
			bytes += str_size(d->campaign) + str_size(d->agent) +
				 str_size(d->to_number) + str_size(d->from_number);
		}
	}
	op->reqs = calloc(n, sizeof(*op->reqs));
	op->cands = calloc(nc, sizeof(*op->cands));
	op->strings = malloc(bytes);
	op->results = calloc(n, sizeof(*op->results));
	if (!op->reqs || !op->cands || !op->strings || !op->results)
		return -ENOMEM;
	at = op->strings;
	nc = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct req_copy *r = &op->reqs[i];
		r->call = str_put(&at, reqs[i].call);
		r->first = nc;
		r->n = reqs[i].n_candidates;
		r->wait = reqs[i].wait;
		r->direct = !reqs[i].candidates[0].campaign;
		for (uint32_t j = 0; j < r->n; j++, nc++) {
			const struct gate_pg_dial *d = &reqs[i].candidates[j];
			op->cands[nc] = *d;
			op->cands[nc].campaign = str_put(&at, d->campaign);
			op->cands[nc].agent = str_put(&at, d->agent);
			op->cands[nc].to_number = str_put(&at, d->to_number);
			op->cands[nc].from_number = str_put(&at, d->from_number);
		}
	}
	op->n = n;
	op->n_cands = nc;
	return 0;
}

static void op_free(struct admit_op *op)
{
	pgmode_reads_free(&op->rd);
	free(op->reqs);
	free(op->cands);
	free(op->strings);
	free(op->results);
	free(op->wcalls);
	free(op->wreq);
	free(op->wout);
	free(op->ids);
	free(op->orgs);
	pgarr_free(&op->cand_lit);
	pgarr_free(&op->direct_lit);
	for (int k = 0; k < 3; k++)
		pgarr_free(&op->wait_arr[k]);
	free(op);
}

/* --- the end of a transaction --- */

static void deliver(struct admit_op *op, int status)
{
	struct gate_pg *g = op->g;
	struct gate_pgmode_answer a = {
		.mode = op->rd.mode,
		.system_running = op->rd.system_running,
		.org_running = op->rd.org_running,
		.floors_valid = op->floors_valid,
		.n = op->n,
		.results = op->results,
	};

	if (status == 0) {
		g->stats.admissions++;
		gate_pg_count(g, op->wout, op->nw);
	}
	op->cb(g, status, status == 0 || status == -ESTALE ? &a : NULL, op->data);
	op_free(op);
}

/* Applies the write outcomes (or one outcome for all) to the admitted requests. */
static void apply_writes(struct admit_op *op, bool each, enum gate_pg_outcome all)
{
	for (uint32_t k = 0; k < op->nw; k++) {
		struct gate_pgmode_result *res = &op->results[op->wreq[k]];
		enum gate_pg_outcome o = each ? op->wout[k] : all;

		op->wout[k] = o;
		res->write = o;
		res->outcome =
			o == GATE_PG_WRITTEN ? GATE_PGMODE_ADMITTED : GATE_PGMODE_NOT_WRITTEN;
		if (o != GATE_PG_WRITTEN)
			res->waiter = 0; /* its withdrawal is not known to be committed */
	}
}

static void fenced_cb(struct gate_pg *g, int status, const bool *written, uint32_t n, void *data)
{
	struct admit_op *op = data;

	for (uint32_t k = 0; k < op->nw; k++)
		op->wout[k] = status	   ? GATE_PG_UNKNOWN
			      : written[k] ? GATE_PG_WRITTEN
					   : GATE_PG_FENCED;
	apply_writes(op, true, GATE_PG_WRITTEN);
	for (uint32_t i = 0; i < op->n; i++)
		if (op->results[i].outcome == GATE_PGMODE_REFUSED)
			op->results[i].waiter = 0; /* unknown whether it committed */
	deliver(op, 0);
}

static void end_cb(int status, const struct pg_results *r, void *data)
{
	struct admit_op *op = data;

	if (op->rolled_back) {
		deliver(op, op->final_status);
		return;
	}
	if (status == 0 && (op->write_parsed || op->nw == 0)) {
		apply_writes(op, true, GATE_PG_WRITTEN);
		deliver(op, 0);
		return;
	}
	if (status != 0 &&
	    (write_failure(status, r) != GATE_PG_UNKNOWN || status == -ECANCELED || op->nw == 0)) {
		if (status == DSP_EPG && !gate_pg_is_timeout(gate_pg_sqlstate(status, r)))
			GLOG(LOG_ERROR, "postgres-mode admission refused: %s",
			     r->error ? PQresultErrorMessage(r->error) : "?");
		deliver(op, write_failure(status, r) == GATE_PG_DEADLINE ? -ETIMEDOUT : status);
		return;
	}
	/* The COMMIT's answer was lost (or the write's was not understood): settle each
	 * admitted call id with a fence. */
	if (gate_pg_fence_lits(op->g, op->ids, op->orgs, op->nw, fenced_cb, op) == 0)
		return;
	apply_writes(op, false, GATE_PG_UNKNOWN);
	deliver(op, 0);
}

static void write_cb(int status, const struct pg_results *r, void *data)
{
	struct admit_op *op = data;

	if (status == 0)
		op->write_parsed = write_parse(r->res[0], op->nw, op->wout) == 0;
}

static void ignore_cb(int status, const struct pg_results *r, void *data)
{
}

/* Ends the transaction: rollback (nothing to write, or a refusal of the whole) with the
 * status to deliver, or the writes and COMMIT. */
static void finish(struct admit_op *op, bool rollback, int status)
{
	int rc;

	op->rolled_back = rollback;
	op->final_status = status;
	rc = rollback ? pg_txn_rollback(op->txn, end_cb, op) : pg_txn_commit(op->txn, end_cb, op);
	if (rc == 0)
		return;
	if (rc == -ENOMEM)
		pg_txn_rollback(op->txn, NULL, NULL);
	deliver(op, rollback && status ? status : rc);
}

static int send_writes(struct admit_op *op)
{
	struct write_params p;
	int rc;

	/* What is left of the deadline since BEGIN (now() on the server), again: every statement
	 * starts a fresh statement_timeout and each idle gap a fresh idle timeout, so without
	 * this the write's own lock wait (the contact row) would get the whole deadline again
	 * after the reads had used part of it, and the transaction could outlive the client's
	 * bound while holding the org and system rows. */
	rc = pg_txn_exec(op->txn,
			 &(struct pg_query){ .stmt = op->g->st[ST_BUDGET_TXN],
					     .nparams = 1,
					     .values = (const char *const[]){ op->budget } },
			 ignore_cb, op);
	if (rc)
		return rc;
	if (op->nw > 0) {
		if (write_params_build(&p, GATE_MODE_POSTGRES, op->epoch, op->wcalls, op->nw))
			return -ENOMEM;
		op->ids = strdup(p.values[2]);
		op->orgs = strdup(p.values[3]);
		rc = op->ids && op->orgs ? 0 : -ENOMEM;
		if (!rc)
			rc = pg_txn_exec(op->txn,
					 &(struct pg_query){ .stmt = op->g->st[ST_WRITE],
							     .nparams = WRITE_NPARAMS,
							     .values = p.values },
					 write_cb, op);
		write_params_free(&p);
		if (rc)
			return rc;
	}
	if (!op->wait_changes)
		return 0;
	return pg_txn_exec(op->txn,
			   &(struct pg_query){ .stmt = op->g->st[ST_WAIT_SET],
					       .nparams = 5,
					       .values = op->wait_values },
			   ignore_cb, op);
}

/* Every read answered: decide, then write and commit (or roll back). */
static void reads_done(struct admit_op *op)
{
	int rc = op->rd.status;

	if (rc == 0 && (op->rd.mode.mode != GATE_MODE_POSTGRES || op->rd.mode.epoch != op->epoch))
		rc = -ESTALE;
	if (rc == 0 && !op->rd.org_found)
		rc = -ENOENT;
	if (rc == 0)
		rc = pgmode_decide(op);
	if (rc == 0)
		rc = pgmode_wait_params(op);
	if (rc == 0 && (op->nw > 0 || op->wait_changes))
		rc = send_writes(op);
	else if (rc == 0) {
		finish(op, true, 0); /* nothing admitted, nothing registered */
		return;
	}
	if (rc)
		finish(op, true, rc);
	else
		finish(op, false, 0);
}

static void read_cb(int status, const struct pg_results *r, void *data)
{
	struct read_step *step = data;
	struct admit_op *op = step->op;

	if (status == 0)
		status = pgmode_read_parse(&op->rd, step->id, r->res[0]);
	else if (status == DSP_EPG && gate_pg_is_timeout(gate_pg_sqlstate(status, r)))
		status = -ETIMEDOUT;
	else if (status == DSP_EPG && strcmp(gate_pg_sqlstate(status, r), "25P02") != 0)
		GLOG(LOG_ERROR, "postgres-mode admission read refused: %s",
		     r->error ? PQresultErrorMessage(r->error) : "?");
	if (status && !op->rd.status)
		op->rd.status = status;
	if (--op->pending == 0)
		reads_done(op);
}

static void read_send(struct admit_op *op, enum stmt_id id, int nparams, const char *const *v)
{
	struct read_step *step = &op->steps[op->nsteps];
	int rc;

	if (op->rd.status)
		return;
	*step = (struct read_step){ .op = op, .id = id };
	rc = pg_txn_exec(
		op->txn,
		&(struct pg_query){ .stmt = op->g->st[id], .nparams = nparams, .values = v },
		read_cb, step);
	if (rc) {
		op->rd.status = rc;
		return;
	}
	op->nsteps++;
	op->pending++;
}

static void begin_cb(int status, struct pg_txn *txn, void *data)
{
	struct admit_op *op = data;

	if (status) {
		deliver(op, status);
		return;
	}
	op->txn = txn;
	const char *bv[] = { op->budget }, *ov[] = { op->org },
		   *cv[] = { op->org, op->cand_lit.buf }, *wv[] = { op->direct_lit.buf };
	op->pending = 1; /* held until every read is sent */
	read_send(op, ST_BUDGET_TXN, 1, bv);
	read_send(op, ST_LOCK_SHARED, 0, NULL);
	/* The org row before the system row: a transaction never holds the system row (every
	 * postgres-mode admission's serialisation point) while it waits for an org row that an
	 * install or an API change of that org holds. Every transaction that takes both takes
	 * them in this order, so they cannot deadlock. */
	read_send(op, ST_ORG_LOCK, 1, ov);
	read_send(op, ST_SYSTEM_LOCK, 0, NULL);
	/* The lock waits used part of the deadline: the reads get what is left of it. */
	read_send(op, ST_BUDGET_TXN, 1, bv);
	read_send(op, ST_SCALARS, 1, ov);
	read_send(op, ST_ORG_COUNTS, 1, ov);
	read_send(op, ST_CAMPAIGNS, 2, cv);
	if (op->n_direct)
		read_send(op, ST_WAITERS_OF, 1, wv);
	if (--op->pending == 0)
		reads_done(op);
}

int gate_pgmode_admit(struct gate_pg *g, const char *org, uint64_t epoch, uint64_t deadline_ms,
		      const struct gate_pgmode_req *reqs, uint32_t n, gate_pgmode_cb cb, void *data)
{
	struct admit_op *op;
	int rc;

	if (!g || !cb || epoch < 1)
		return -EINVAL;
	rc = reqs_check(org, reqs, n);
	if (rc)
		return rc;
	if (deadline_ms == 0)
		return -ETIMEDOUT;
	op = calloc(1, sizeof(*op));
	if (!op)
		return -ENOMEM;
	*op = (struct admit_op){
		.g = g, .cb = cb, .data = data, .epoch = epoch, .deadline_ms = deadline_ms
	};
	strcpy(op->org, org);
	gate_pg_ms(op->budget, deadline_ms);
	rc = reqs_copy(op, reqs, n);
	if (!rc)
		rc = pgmode_lits(op);
	if (!rc) {
		/* The client's bound is a little longer, so the server's own ends it. */
		struct pg_txn_options o = { .timeout_ms = deadline_ms + 1000 };
		rc = pg_pool_begin(g->pool, &o, begin_cb, op);
	}
	if (rc)
		op_free(op);
	return rc;
}
