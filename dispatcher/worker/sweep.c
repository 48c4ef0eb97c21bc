/* The worker's periodic jobs: lease sweeper, maximum-duration sweep, retention (sweep.h). */
#include "sweep.h"

#include "error.h"
#include "gate_pg_int.h" /* pgarr, LIVE_STATES */
#include "log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NOT_LIVE(alias, col)                                                                       \
	" NOT EXISTS (SELECT 1 FROM calls k WHERE k." col " = " alias                              \
	".id AND k.state IN " LIVE_STATES ")"
/* The next state of a contact handed back: paused -> held, stopped -> cancelled. */
#define BACK_STATE                                                                                 \
	"(CASE WHEN b.status = 'stopped' OR cp.status = 'stopped' THEN 'cancelled'"                \
	" WHEN b.status = 'paused' OR cp.status = 'paused' THEN 'held' ELSE 'pending' END)"        \
	"::contact_state"
#define CUTOFF "now() - make_interval(secs => $1::double precision * 86400)"
/* Inside each retention transaction, after the lease statement: held by $3 and unexpired. */
#define HELD                                                                                       \
	" AND EXISTS (SELECT 1 FROM leases WHERE name = 'retention' AND owner = $3::text"          \
	" AND lease_until > now())"

enum st {
	ST_LEASE_LOCK,
	ST_LEASE_BACK,
	ST_OVERDUE,
	ST_TAKEOVER,
	ST_RET_LEASE, /* retention's statements last: its pass steps through them to ST_N */
	ST_RET_EVENTS,
	ST_RET_ATTEMPTS,
	ST_RET_CALLS,
	ST_N,
};

static const struct {
	int nparams;
	const char *sql;
} stmts[ST_N] = {
	/* $1 limit. Through contacts_lease_idx. */
	[ST_LEASE_LOCK] = { 1, "SELECT c.id FROM contacts c WHERE c.state = 'claimed'"
			       " AND c.lease_until < now() AND" NOT_LIVE(
				       "c", "contact_id") " ORDER BY c.lease_until LIMIT $1::int "
							  "FOR UPDATE OF c SKIP LOCKED" },
	/* $1 the ids locked by ST_LEASE_LOCK; its own snapshot, taken after the locks. */
	[ST_LEASE_BACK] = { 1, "UPDATE contacts c SET state = " BACK_STATE ", lease_owner = NULL,"
			       " lease_token = NULL, lease_until = NULL, updated_at = now()"
			       " FROM campaigns cp, batches b WHERE c.id = ANY($1::bigint[])"
			       " AND cp.id = c.campaign_id AND b.id = c.batch_id"
			       " AND c.state = 'claimed' AND c.lease_until < now() AND" NOT_LIVE(
				       "c", "contact_id") " RETURNING c.state::text" },
	/* $1 max_call_s, $2 limit. Through calls_live_age_idx. */
	[ST_OVERDUE] = { 2, "SELECT id::text FROM calls WHERE state IN " LIVE_STATES
			    " AND created_at < now() - make_interval(secs => $1::double precision)"
			    " ORDER BY created_at LIMIT $2::int" },
	/* $1 owner, $2 lease seconds: taken when free or expired, renewed when ours. */
	[ST_RET_LEASE] = { 2, "UPDATE leases SET version = version + CASE WHEN owner IS DISTINCT"
			      " FROM $1::text THEN 1 ELSE 0 END, owner = $1::text,"
			      " lease_until = now() + make_interval(secs => $2::double precision)"
			      " WHERE name = 'retention' AND (owner = $1::text"
			      " OR lease_until < now()) RETURNING version" },
	/* $1 retention days, $2 limit, $3 owner. */
	[ST_RET_EVENTS] = { 3, "WITH d AS (DELETE FROM provider_events WHERE (call_id, sequence) IN"
			       " (SELECT e.call_id, e.sequence FROM provider_events e"
			       " WHERE e.received_at < " CUTOFF " AND NOT EXISTS (SELECT 1 FROM"
			       " calls k WHERE k.id = e.call_id AND k.state IN " LIVE_STATES ")"
			       " ORDER BY e.received_at LIMIT $2::int)" HELD " RETURNING 1)"
			       " SELECT count(*) FROM d" },
	[ST_RET_ATTEMPTS] = { 3, "WITH d AS (DELETE FROM dial_attempts WHERE id IN"
				 " (SELECT a.id FROM dial_attempts a WHERE a.created_at < " CUTOFF
				 " AND NOT EXISTS (SELECT 1 FROM calls k WHERE k.id = a.call_id"
				 " AND k.state IN " LIVE_STATES ") ORDER BY a.created_at"
				 " LIMIT $2::int)" HELD " RETURNING 1) SELECT count(*) FROM d" },
	/* Through calls_ended_idx: ended calls only, never a live one. */
	[ST_RET_CALLS] = { 3, "WITH d AS (DELETE FROM calls WHERE id IN (SELECT id FROM calls"
			      " WHERE state = 'ended' AND ended_at < " CUTOFF
			      " ORDER BY ended_at LIMIT $2::int)" HELD " RETURNING 1)"
			      " SELECT count(*) FROM d" },
	/* $1 owner, $2 lease ms, $3 limit, $4 max attempt rows. Locks the contacts of orphaned
	 * calls whose lease expired — not a call the provider placed less than 10 leases ago (an
	 * 'ok' ledger row: a 201 or 200; its events end it; without that exemption a provider
	 * that sends only terminal events had every call longer than a lease re-POSTed), but one
	 * placed longer ago with no event yet is re-sent with its key (a provider that lost it
	 * places it or refuses it; one that has it answers 200), at most $4 requests in all
	 * (SKIP LOCKED: a call_end or a renewal holding one is skipped; a row changed since the
	 * snapshot is re-checked on its newest version), moves the lease here, and returns what
	 * the re-send needs from the call row. */
	[ST_TAKEOVER] = { 4,
			  "WITH t AS (SELECT c.id FROM calls k JOIN contacts c ON c.id ="
			  " k.contact_id WHERE k.state IN ('dialing', 'unknown')"
			  " AND k.provider_call_id IS NULL AND k.last_sequence IS NULL"
			  " AND NOT EXISTS (SELECT 1 FROM dial_attempts a WHERE a.call_id = k.id"
			  " AND a.class = 'ok' AND a.created_at > now() - 10"
			  " * make_interval(secs => $2::double precision / 1000))"
			  " AND c.state = 'dialing' AND c.lease_until < now()"
			  " AND (SELECT count(*) FROM dial_attempts a WHERE a.call_id = k.id)"
			  " < $4::int ORDER BY c.lease_until LIMIT $3::int"
			  " FOR UPDATE OF c SKIP LOCKED),"
			  " u AS (UPDATE contacts c SET lease_owner = $1::text,"
			  " lease_token = nextval('contacts_lease_token_seq'),"
			  " lease_until = now() + make_interval(secs => $2::double precision"
			  " / 1000), updated_at = now() FROM t WHERE c.id = t.id"
			  " RETURNING c.id, c.lease_token)"
			  " SELECT k.id::text, k.org_id, k.campaign_id, k.agent_id, k.contact_id,"
			  " k.attempt, k.to_number, k.from_number, u.lease_token,"
			  " (SELECT count(*) FROM dial_attempts a WHERE a.call_id = k.id)"
			  " FROM u JOIN calls k ON k.contact_id = u.id"
			  " AND k.state IN ('dialing', 'unknown')" },
};

enum job { JOB_LEASES, JOB_CALLS, JOB_RETENTION, JOB_RESEND, JOB_N };

struct pass {
	struct sweep *s;
	enum job job;
	sweep_done_cb cb;
	void *data;
	struct sweep_report rep;
	struct pg_txn *txn; /* leases: the batch's transaction */
	uint32_t page;	    /* leases: rows locked; calls: rows found */
	uint32_t waiting;   /* calls: call_end requests not answered */
	int status;	    /* calls: first failure of the page */
	int table;	    /* retention: ST_RET_EVENTS.. */
	int64_t sent_ms;    /* re-send: when the takeover statement was sent */
};

struct sweep {
	uv_loop_t *loop;
	struct pg_pool *pool;
	struct call_end *ends;
	char worker[65];
	struct sweep_options o;
	const struct pg_stmt *st[ST_N];
	uv_timer_t timers[JOB_N];
	struct pass *running[JOB_N];
	int timers_open;
	bool closing;
	void (*closed_cb)(void *data);
	void *closed_data;
};

static const char *const job_names[JOB_N] = { "lease sweep", "call sweep", "retention",
					      "re-send sweep" };

int sweep_new(const struct sweep_options *o, struct sweep **out)
{
	struct sweep *s;
	int rc = 0;

	if (!o || !o->loop || !o->pool || !o->ends || !o->worker_id || !o->worker_id[0] ||
	    strlen(o->worker_id) > 64 || !out)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->loop = o->loop;
	s->pool = o->pool;
	s->ends = o->ends;
	s->o = *o;
	snprintf(s->worker, sizeof(s->worker), "%s", o->worker_id);
	s->o.worker_id = s->worker;
	if (!s->o.lease_batch)
		s->o.lease_batch = 500;
	if (!s->o.max_call_s)
		s->o.max_call_s = 7200;
	if (!s->o.call_batch || s->o.call_batch > CALL_END_BATCH_MAX)
		s->o.call_batch = CALL_END_BATCH_MAX;
	if (!s->o.retention_days)
		s->o.retention_days = 30;
	if (!s->o.retention_batch)
		s->o.retention_batch = 5000;
	if (!s->o.retention_lease_s)
		s->o.retention_lease_s = 300;
	if (!s->o.resend_period_s)
		s->o.resend_period_s = s->o.lease_sweep_s;
	if (!s->o.resend_batch)
		s->o.resend_batch = 100;
	if (!s->o.resend_max_sends)
		s->o.resend_max_sends = 4;
	if (s->o.dial && s->o.lease_ms < 1000) {
		free(s);
		return -EINVAL;
	}
	for (int i = 0; i < ST_N && rc == 0; i++)
		rc = pg_pool_prepare(o->pool, stmts[i].sql, stmts[i].nparams, &s->st[i]);
	if (rc) {
		free(s);
		return rc;
	}
	for (int i = 0; i < JOB_N; i++) {
		uv_timer_init(o->loop, &s->timers[i]);
		s->timers[i].data = s;
	}
	s->timers_open = JOB_N;
	*out = s;
	return 0;
}

static void maybe_free(struct sweep *s)
{
	if (!s->closing || s->timers_open)
		return;
	for (int i = 0; i < JOB_N; i++)
		if (s->running[i])
			return;
	if (s->closed_cb)
		s->closed_cb(s->closed_data);
	free(s);
}

static void pass_done(struct pass *p, int status)
{
	struct sweep *s = p->s;

	if (status && status != -ECANCELED)
		LOG_AT(LOG_WARN, LOG_DIAL, NULL, "%s pass failed (%s): the next one tries again",
		       job_names[p->job], dsp_strerror(status));
	else if (p->rep.repended || p->rep.swept || p->rep.calls || p->rep.attempts ||
		 p->rep.events || p->rep.taken)
		LOG_AT(LOG_INFO, LOG_DIAL, NULL,
		       "%s: %" PRIu64 " contacts back (%" PRIu64 " held), %" PRIu64
		       " calls swept, %" PRIu64 " calls taken over for a re-send, deleted %" PRIu64
		       " calls, %" PRIu64 " attempts, %" PRIu64 " events",
		       job_names[p->job], p->rep.repended, p->rep.held, p->rep.swept, p->rep.taken,
		       p->rep.calls, p->rep.attempts, p->rep.events);
	s->running[p->job] = NULL;
	if (p->cb)
		p->cb(s, status, &p->rep, p->data);
	free(p);
	maybe_free(s);
}

/* --- lease sweeper --- */

static void lease_batch(struct pass *p);

static void lease_give_up(struct pass *p, int status)
{
	if (p->txn)
		pg_txn_rollback(p->txn, NULL, NULL);
	p->txn = NULL;
	pass_done(p, status);
}

static void lease_committed(int status, const struct pg_results *r, void *data)
{
	struct pass *p = data;

	(void)r;
	if (status == 0 && p->page == p->s->o.lease_batch && !p->s->closing)
		lease_batch(p);
	else
		pass_done(p, status);
}

static void lease_backed(int status, const struct pg_results *r, void *data)
{
	struct pass *p = data;
	struct pg_txn *txn = p->txn;
	int rc;

	if (status) {
		lease_give_up(p, status);
		return;
	}
	for (int i = 0; i < PQntuples(r->res[0]); i++) {
		p->rep.repended++;
		p->rep.held += strcmp(PQgetvalue(r->res[0], i, 0), "held") == 0;
	}
	p->txn = NULL;
	rc = pg_txn_commit(txn, lease_committed, p);
	if (rc)
		pass_done(p, rc);
}

static void lease_locked(int status, const struct pg_results *r, void *data)
{
	struct pass *p = data;
	struct pgarr ids;
	const char *v;
	int rc = -ENOMEM;

	if (status) {
		lease_give_up(p, status);
		return;
	}
	p->page = (uint32_t)PQntuples(r->res[0]);
	if (p->page == 0) {
		lease_give_up(p, 0);
		return;
	}
	pgarr_init(&ids);
	for (uint32_t i = 0; i < p->page; i++)
		pgarr_text(&ids, PQgetvalue(r->res[0], (int)i, 0));
	if ((v = pgarr_end(&ids)) != NULL) {
		struct pg_query q = { .stmt = p->s->st[ST_LEASE_BACK], .nparams = 1, .values = &v };
		rc = pg_txn_exec(p->txn, &q, lease_backed, p);
	}
	pgarr_free(&ids);
	if (rc)
		lease_give_up(p, rc);
	else
		p->rep.statements++;
}

static void lease_begun(int status, struct pg_txn *txn, void *data)
{
	struct pass *p = data;
	char limit[16];
	const char *v = limit;
	int rc;

	if (status) {
		pass_done(p, status);
		return;
	}
	p->txn = txn;
	snprintf(limit, sizeof(limit), "%" PRIu32, p->s->o.lease_batch);
	struct pg_query q = { .stmt = p->s->st[ST_LEASE_LOCK], .nparams = 1, .values = &v };
	rc = pg_txn_exec(txn, &q, lease_locked, p);
	if (rc) {
		lease_give_up(p, rc);
		return;
	}
	p->rep.statements++;
}

static void lease_batch(struct pass *p)
{
	struct pg_txn_options to = { .timeout_ms = 30000 };
	int rc = pg_pool_begin(p->s->pool, &to, lease_begun, p);

	if (rc)
		pass_done(p, rc);
}

/* --- maximum-duration sweep --- */

static void calls_page(struct pass *p);

static void swept_cb(struct call_end *ce, int status, const struct call_end_result *r, void *data)
{
	struct pass *p = data;

	(void)ce;
	p->waiting--;
	if (status && !p->status)
		p->status = status;
	if (status == 0 && r->outcome == CALL_END_ENDED)
		p->rep.swept++;
	if (p->waiting)
		return;
	if (p->status || p->page < p->s->o.call_batch || p->s->closing)
		pass_done(p, p->status);
	else
		calls_page(p);
}

static void overdue_cb(int status, const struct pg_results *r, void *data)
{
	struct pass *p = data;

	if (status) {
		pass_done(p, status);
		return;
	}
	p->page = (uint32_t)PQntuples(r->res[0]);
	p->rep.found += p->page;
	p->waiting = 1; /* held while submitting, so no answer can finish the pass early */
	for (uint32_t i = 0; i < p->page; i++) {
		/* The contact ends here (SPEC C9, D5): the call may have been placed, so it is
		 * never dialled again under a new key, and an unknown outcome charges no attempt. */
		struct call_end_req q = { .call = PQgetvalue(r->res[0], (int)i, 0),
					  .outcome = "swept",
					  .reason = SWEEP_REASON,
					  .disposition = CALL_END_FAIL };
		int rc = call_end_submit(p->s->ends, &q, swept_cb, p);
		if (rc && !p->status)
			p->status = rc;
		else if (rc == 0)
			p->waiting++;
	}
	swept_cb(p->s->ends, 0, &(struct call_end_result){ .outcome = CALL_END_UNKNOWN }, p);
}

static void calls_page(struct pass *p)
{
	char age[24], limit[16];
	const char *v[2] = { age, limit };
	struct pg_query q = { .stmt = p->s->st[ST_OVERDUE], .nparams = 2, .values = v };
	int rc;

	snprintf(age, sizeof(age), "%" PRIu64, p->s->o.max_call_s);
	snprintf(limit, sizeof(limit), "%" PRIu32, p->s->o.call_batch);
	rc = pg_pool_exec(p->s->pool, PG_LANE_NORMAL, &q, overdue_cb, p);
	if (rc) {
		pass_done(p, rc);
		return;
	}
	p->rep.statements++;
}

/* --- retention --- */

static void retention_step(struct pass *p);

static void retention_cb(int status, const struct pg_results *r, void *data)
{
	struct pass *p = data;
	uint64_t n;

	if (status) {
		pass_done(p, status);
		return;
	}
	if (PQntuples(r->res[0]) != 1) { /* the lease is another worker's */
		pass_done(p, 0);
		return;
	}
	p->rep.elected = true;
	n = strtoull(PQgetvalue(r->res[1], 0, 0), NULL, 10);
	if (p->table == ST_RET_EVENTS)
		p->rep.events += n;
	else if (p->table == ST_RET_ATTEMPTS)
		p->rep.attempts += n;
	else
		p->rep.calls += n;
	if (n < p->s->o.retention_batch && ++p->table == ST_N) {
		pass_done(p, 0);
		return;
	}
	if (p->s->closing) {
		pass_done(p, -ECANCELED);
		return;
	}
	retention_step(p);
}

static void retention_step(struct pass *p)
{
	struct sweep *s = p->s;
	char ttl[24], days[16], limit[16];
	const char *lv[2] = { s->worker, ttl };
	const char *dv[3] = { days, limit, s->worker };
	struct pg_query q[2] = {
		{ .stmt = s->st[ST_RET_LEASE], .nparams = 2, .values = lv },
		{ .stmt = s->st[p->table], .nparams = 3, .values = dv },
	};
	int rc;

	snprintf(ttl, sizeof(ttl), "%" PRIu64, s->o.retention_lease_s);
	snprintf(days, sizeof(days), "%" PRIu32, s->o.retention_days);
	snprintf(limit, sizeof(limit), "%" PRIu32, s->o.retention_batch);
	rc = pg_pool_batch(s->pool, PG_LANE_NORMAL, q, 2, retention_cb, p);
	if (rc) {
		pass_done(p, rc);
		return;
	}
	p->rep.statements++;
}

/* --- re-send of orphaned calls --- */

static void resend_page(struct pass *p);

static void taken_cb(int status, const struct pg_results *r, void *data)
{
	struct pass *p = data;
	struct sweep *s = p->s;
	const PGresult *res;
	int n;

	if (status) {
		pass_done(p, status);
		return;
	}
	res = r->res[0];
	n = PQntuples(res);
	for (int i = 0; i < n; i++) {
		struct dial_call c = {
			.call = PQgetvalue(res, i, 0),
			.org = PQgetvalue(res, i, 1),
			.campaign = PQgetisnull(res, i, 2) ? NULL : PQgetvalue(res, i, 2),
			.agent = PQgetvalue(res, i, 3),
			.contact = strtoll(PQgetvalue(res, i, 4), NULL, 10),
			.attempt = (int32_t)strtol(PQgetvalue(res, i, 5), NULL, 10),
			.to = PQgetvalue(res, i, 6),
			.from = PQgetisnull(res, i, 7) ? NULL : PQgetvalue(res, i, 7),
		};
		int64_t token = strtoll(PQgetvalue(res, i, 8), NULL, 10);
		unsigned prior = (unsigned)strtoul(PQgetvalue(res, i, 9), NULL, 10);
		int rc = dial_resend(s->o.dial, &c, prior, token,
				     (uint64_t)p->sent_ms + s->o.lease_ms);
		if (rc) /* the lease taken here expires and another sweep takes it */
			LOG_AT(LOG_WARN, LOG_DIAL,
			       (&(const struct log_ids){ .org = c.org, .call = c.call }),
			       "orphaned call not re-sent here (%s)", dsp_strerror(rc));
		else
			p->rep.taken++;
	}
	if ((uint32_t)n < s->o.resend_batch || s->closing)
		pass_done(p, 0);
	else
		resend_page(p);
}

static void resend_page(struct pass *p)
{
	struct sweep *s = p->s;
	char lease[24], limit[16], max[16];
	const char *v[4] = { s->worker, lease, limit, max };
	struct pg_query q = { .stmt = s->st[ST_TAKEOVER], .nparams = 4, .values = v };
	int rc;

	snprintf(lease, sizeof(lease), "%" PRIu64, s->o.lease_ms);
	snprintf(limit, sizeof(limit), "%" PRIu32, s->o.resend_batch);
	snprintf(max, sizeof(max), "%" PRIu32, s->o.resend_max_sends);
	p->sent_ms = (int64_t)uv_now(s->loop);
	rc = pg_pool_exec(s->pool, PG_LANE_NORMAL, &q, taken_cb, p);
	if (rc) {
		pass_done(p, rc);
		return;
	}
	p->rep.statements++;
}

/* --- passes and timers --- */

static int run(struct sweep *s, enum job job, sweep_done_cb cb, void *data)
{
	struct pass *p;

	if (s->closing)
		return -ESHUTDOWN;
	if (s->running[job])
		return -EBUSY;
	if (job == JOB_RESEND && !s->o.dial)
		return -EINVAL;
	p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	*p = (struct pass){ .s = s, .job = job, .cb = cb, .data = data, .table = ST_RET_EVENTS };
	s->running[job] = p;
	if (job == JOB_LEASES)
		lease_batch(p);
	else if (job == JOB_CALLS)
		calls_page(p);
	else if (job == JOB_RESEND)
		resend_page(p);
	else
		retention_step(p);
	return 0;
}

int sweep_run_leases(struct sweep *s, sweep_done_cb cb, void *data)
{
	return run(s, JOB_LEASES, cb, data);
}

int sweep_run_calls(struct sweep *s, sweep_done_cb cb, void *data)
{
	return run(s, JOB_CALLS, cb, data);
}

int sweep_run_retention(struct sweep *s, sweep_done_cb cb, void *data)
{
	return run(s, JOB_RETENTION, cb, data);
}

int sweep_run_resend(struct sweep *s, sweep_done_cb cb, void *data)
{
	return run(s, JOB_RESEND, cb, data);
}

static void on_timer(uv_timer_t *t)
{
	struct sweep *s = t->data;
	enum job job = (enum job)(t - s->timers);

	run(s, job, NULL, NULL); /* -EBUSY: the previous pass still runs; the next tick tries */
}

void sweep_start(struct sweep *s)
{
	uint64_t periods[JOB_N] = { s->o.lease_sweep_s, s->o.call_sweep_s, s->o.retention_period_s,
				    s->o.dial ? s->o.resend_period_s : 0 };

	for (int i = 0; i < JOB_N; i++)
		if (periods[i])
			uv_timer_start(&s->timers[i], on_timer, periods[i] * 1000,
				       periods[i] * 1000);
}

static void timer_closed(uv_handle_t *h)
{
	struct sweep *s = h->data;

	s->timers_open--;
	maybe_free(s);
}

void sweep_close(struct sweep *s, void (*closed_cb)(void *data), void *data)
{
	if (!s || s->closing)
		return;
	s->closing = true;
	s->closed_cb = closed_cb;
	s->closed_data = data;
	for (int i = 0; i < JOB_N; i++)
		uv_close((uv_handle_t *)&s->timers[i], timer_closed);
}
