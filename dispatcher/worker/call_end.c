/* The one way a call ends: one loop turn's requests in one batch (call_end.h). */
#include "call_end.h"

#include "error.h"
#include "gate_pg_int.h" /* pgarr, EPOCH_LOCK_SQL, LIVE_STATES */
#include "ident.h"
#include "list.h"
#include "log.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define UUID_SZ	     37
#define ORG_SZ	     65
#define DELAY_MAX_MS (30ULL * 24 * 3600 * 1000)
/* Batches in flight at most: group commit. With one statement per loop turn and no bound, a
 * busy worker sent 7 rows per statement; the statement's fixed cost (parse-free but bind,
 * lock, commit) then dominates PostgreSQL's time per call. */
#define CALL_END_INFLIGHT_MAX 2

/* The epoch lock, shared: the end never interleaves with a mode switch or a rebuild; and the
 * end's plan (PG_SQL_BATCH_PLANS, pg_pool.h). */
static const char sql_lock[] =
	"SELECT pg_advisory_xact_lock_shared(" EPOCH_LOCK_SQL "), " PG_SQL_BATCH_PLANS_COLS;

/* $1 call ids, $2 outcomes, $3 reasons, $4 dispositions, $5 delays (ms), $6 lease owners, $7
 * lease tokens. Per call, in order: 'e' ended now / 'a' already ended (or, for a fenced request,
 * its contact's lease is not the one it names) / 'u' no row; the org (e); the contact's new
 * state (e, when moved); the gate mode. Every request's contact is locked first, in contact id
 * order (`l`, an InitPlan of `u`, so before any call row): one lock order for every end —
 * contact, then call — so a dialer's end and an event's end of the same call cannot deadlock.
 * A fenced request (an owner: the dialer's) has the lease re-checked on the newest row version
 * (READ COMMITTED), so a takeover committed before it wins and one after it finds the contact
 * moved. */
static const char sql_end[] =
	"WITH i AS (SELECT * FROM unnest($1::uuid[], $2::text[], $3::text[], $4::int[],"
	" $5::bigint[], $6::text[], $7::bigint[]) WITH ORDINALITY"
	" AS t(id, outcome, reason, disp, delay_ms, owner, tok, n)),"
	" l AS (SELECT i.id, (i.owner IS NULL OR (ct.lease_owner = i.owner"
	" AND (i.tok IS NULL OR ct.lease_token = i.tok))) AS ok"
	" FROM i JOIN calls k ON k.id = i.id JOIN contacts ct ON ct.id = k.contact_id"
	" ORDER BY ct.id FOR UPDATE OF ct),"
	" u AS (UPDATE calls c SET state = 'ended', outcome = i.outcome,"
	" outcome_reason = i.reason, ended_at = now(), updated_at = now()"
	" FROM i WHERE c.id = i.id AND c.state <> 'ended' AND (SELECT count(*) FROM l) >= 0"
	" AND (i.owner IS NULL OR i.id IN (SELECT id FROM l WHERE ok))"
	" RETURNING c.id, c.org_id, c.contact_id),"
	" p AS (SELECT ct.id, i.outcome, i.reason, i.disp, x.final, ct.attempts + x.charge AS att,"
	" ct.tries + x.try AS tries, x.delay,"
	" (b.status = 'stopped' OR cp.status = 'stopped') AS stopped,"
	" (b.status = 'paused' OR cp.status = 'paused') AS paused"
	" FROM u JOIN i ON i.id = u.id JOIN contacts ct ON ct.id = u.contact_id"
	" JOIN campaigns cp ON cp.id = ct.campaign_id JOIN batches b ON b.id = ct.batch_id"
	" CROSS JOIN LATERAL (SELECT"
	" CASE WHEN i.disp = 2 THEN 'failed' WHEN i.disp <> 0 OR i.outcome = 'refused' THEN NULL"
	" WHEN i.outcome = 'completed' THEN 'done' WHEN i.outcome = 'failed' THEN 'failed'"
	" WHEN ct.attempts + 1 >= cp.retry_max_attempts THEN 'failed' END AS final,"
	" CASE WHEN i.disp = 0 AND i.outcome <> 'refused' THEN 1 ELSE 0 END AS charge,"
	" CASE WHEN i.disp = 1 THEN 1 ELSE 0 END AS try,"
	" CASE WHEN i.disp = 1 THEN i.delay_ms * interval '1 millisecond'"
	" WHEN i.disp = 0 AND i.outcome <> 'refused'"
	" THEN cp.retry_delay_seconds * interval '1 second' ELSE interval '0' END AS delay) x"
	" WHERE ct.state IN ('claimed', 'dialing', 'live')),"
	" k AS (UPDATE contacts c SET state = (CASE WHEN p.final IS NOT NULL THEN p.final"
	" WHEN p.stopped THEN 'cancelled' WHEN p.paused THEN 'held' ELSE 'pending' END)"
	"::contact_state, attempts = p.att, tries = p.tries,"
	" next_attempt_at = CASE WHEN p.final IS NULL THEN now() + p.delay"
	" ELSE c.next_attempt_at END, last_outcome = p.outcome,"
	" last_error = CASE WHEN p.disp = 2 THEN p.reason ELSE c.last_error END,"
	" lease_owner = NULL, lease_token = NULL, lease_until = NULL, updated_at = now()"
	" FROM p WHERE c.id = p.id AND c.state IN ('claimed', 'dialing', 'live')"
	" RETURNING c.id, c.state),"
	" m AS (SELECT gate_mode FROM system_settings),"
	" n AS (SELECT pg_notify('" GATE_PG_CHANNEL_FREE "', o.org_id)"
	" FROM (SELECT DISTINCT org_id FROM u) o WHERE (SELECT gate_mode FROM m) = 'postgres')"
	" SELECT CASE WHEN u.id IS NOT NULL THEN 'e'"
	" WHEN EXISTS (SELECT 1 FROM calls c WHERE c.id = i.id) THEN 'a' ELSE 'u' END,"
	" u.org_id, k.state::text, (SELECT gate_mode FROM m)"
	" FROM i LEFT JOIN u ON u.id = i.id LEFT JOIN k ON k.id = u.contact_id"
	" WHERE (SELECT count(*) FROM n) >= 0 ORDER BY i.n";

struct req {
	struct list_node node;
	call_end_cb cb;
	void *data;
	char call[UUID_SZ];
	char outcome[16];
	char reason[CALL_END_REASON_MAX + 1];
	bool has_reason;
	char owner[ORG_SZ]; /* "" : not fenced */
	int64_t tok;	    /* with owner: 0 unknown */
	int disp;
	uint64_t delay_ms;
};

struct batch {
	struct call_end *ce;
	uint32_t n;
	struct req *r[CALL_END_BATCH_MAX];
};

struct call_end {
	uv_loop_t *loop;
	struct pg_pool *pool;
	struct gate *gate;
	enum pg_lane lane;
	const struct pg_stmt *st_lock, *st_end;
	uv_timer_t timer;
	struct list_node queue; /* struct req, submitted, not sent */
	unsigned inflight;	/* batches sent, not answered */
	unsigned releasing;	/* gate releases sent, not answered (the close waits) */
	bool closing, timer_closed;
	void (*closed_cb)(void *data);
	void *closed_data;
	struct call_end_stats stats;
};

static const char *const outcomes[] = { "completed", "failed",	"no-answer", "busy",
					"canceled",  "refused", "swept" };

bool call_end_outcome_ok(const char *outcome)
{
	for (size_t i = 0; outcome && i < sizeof(outcomes) / sizeof(outcomes[0]); i++)
		if (strcmp(outcome, outcomes[i]) == 0)
			return true;
	return false;
}

const char *call_end_outcome_name(enum call_end_outcome o)
{
	switch (o) {
	case CALL_END_ENDED:
		return "ended";
	case CALL_END_ALREADY:
		return "already";
	case CALL_END_UNKNOWN:
		return "unknown";
	}
	return "?";
}

static void flush(uv_timer_t *t);

int call_end_new(const struct call_end_options *o, struct call_end **out)
{
	struct call_end *ce;
	int rc;

	if (!o || !o->loop || !o->pool || !out)
		return -EINVAL;
	ce = calloc(1, sizeof(*ce));
	if (!ce)
		return -ENOMEM;
	ce->loop = o->loop;
	ce->pool = o->pool;
	ce->gate = o->gate;
	ce->lane = o->normal_lane ? PG_LANE_NORMAL : PG_LANE_PRIORITY;
	list_init(&ce->queue);
	rc = pg_pool_prepare(o->pool, sql_lock, 0, &ce->st_lock);
	if (rc == 0)
		rc = pg_pool_prepare(o->pool, sql_end, 7, &ce->st_end);
	if (rc) {
		free(ce);
		return rc;
	}
	uv_timer_init(o->loop, &ce->timer);
	ce->timer.data = ce;
	*out = ce;
	return 0;
}

/* Copies s into dst with every byte outside printable ASCII replaced by '?', so a provider's
 * reason can never fail the batch (invalid UTF-8, NUL, control characters). */
static void copy_reason(char *dst, const char *s)
{
	size_t n = 0;

	for (; s[n] && n < CALL_END_REASON_MAX; n++)
		dst[n] = (s[n] >= 0x20 && s[n] < 0x7f) ? s[n] : '?';
	dst[n] = '\0';
}

int call_end_submit(struct call_end *ce, const struct call_end_req *req, call_end_cb cb, void *data)
{
	struct req *r;

	if (!ce || !req || !cb || !ident_uuid_ok(req->call) || !call_end_outcome_ok(req->outcome) ||
	    (unsigned)req->disposition > CALL_END_PENDING || req->delay_ms > DELAY_MAX_MS ||
	    (req->lease_owner && (!req->lease_owner[0] || strlen(req->lease_owner) >= ORG_SZ)) ||
	    req->lease_token < 0)
		return -EINVAL;
	if (ce->closing)
		return -ESHUTDOWN;
	r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	r->cb = cb;
	r->data = data;
	for (int i = 0; i < UUID_SZ; i++) /* lower case: duplicates are found by strcmp */
		r->call[i] = (char)tolower((unsigned char)req->call[i]);
	snprintf(r->outcome, sizeof(r->outcome), "%s", req->outcome);
	if (req->reason) {
		copy_reason(r->reason, req->reason);
		r->has_reason = true;
	}
	r->disp = (int)req->disposition;
	r->delay_ms = req->delay_ms;
	if (req->lease_owner) {
		snprintf(r->owner, sizeof(r->owner), "%s", req->lease_owner);
		r->tok = req->lease_token;
	}
	list_add_tail(&ce->queue, &r->node);
	ce->stats.submitted++;
	if (!uv_is_active((uv_handle_t *)&ce->timer))
		uv_timer_start(&ce->timer, flush, 0, 0);
	return 0;
}

static void maybe_free(struct call_end *ce)
{
	if (!ce->closing || ce->inflight || ce->releasing || !ce->timer_closed)
		return;
	if (ce->closed_cb)
		ce->closed_cb(ce->closed_data);
	free(ce);
}

static void answer(struct call_end *ce, struct req *r, int status,
		   const struct call_end_result *res)
{
	if (status)
		ce->stats.failed++;
	r->cb(ce, status, res, r->data);
	free(r);
}

struct release_ctx {
	struct call_end *ce;
	char call[UUID_SZ], org[ORG_SZ];
};

static void release_cb(struct gate *g, int status, const struct gate_release_result *res,
		       void *data)
{
	struct release_ctx *c = data;

	(void)g;
	/* Never retried. GATE_ELOST (a generation not the gate's: a way back is rebuilding, or the
	 * state is gone): nothing was freed; the rebuild from the live calls (this one ended) is
	 * the truth. */
	if (status == GATE_ELOST)
		LOG_AT(LOG_INFO, LOG_DIAL,
		       (&(const struct log_ids){ .org = c->org, .call = c->call }),
		       "slot release of an ended call refused (stale generation): the rebuild "
		       "settles it");
	else if (status)
		LOG_AT(LOG_WARN, LOG_DIAL,
		       (&(const struct log_ids){ .org = c->org, .call = c->call }),
		       "slot release of an ended call failed (%s): the reconciler frees it",
		       dsp_strerror(status));
	else if (res->outcome == GATE_RANGE)
		LOG_AT(LOG_WARN, LOG_DIAL,
		       (&(const struct log_ids){ .org = c->org, .call = c->call }),
		       "slot release of an ended call found a count at 0");
	struct call_end *ce = c->ce;
	free(c);
	ce->releasing--;
	maybe_free(ce);
}

/* Sends the Redis release of an ended call. Returns whether it was sent. */
static bool release(struct call_end *ce, const char *call, const char *org)
{
	struct release_ctx *c = malloc(sizeof(*c));
	int rc = -ENOMEM;

	if (c) {
		snprintf(c->call, sizeof(c->call), "%s", call);
		snprintf(c->org, sizeof(c->org), "%s", org);
		c->ce = ce;
		ce->releasing++;
		rc = gate_release(ce->gate, org, call, release_cb, c);
		if (rc) {
			ce->releasing--;
			free(c);
		}
	}
	if (rc) {
		LOG_AT(LOG_WARN, LOG_DIAL, (&(const struct log_ids){ .org = org, .call = call }),
		       "slot release of an ended call not sent (%s): the reconciler frees it",
		       dsp_strerror(rc));
		return false;
	}
	ce->stats.released++;
	return true;
}

/* Answers r from row i of res. */
static void answer_row(struct call_end *ce, struct req *r, const PGresult *res, int i)
{
	char what = PQgetvalue(res, i, 0)[0];
	struct call_end_result out = { .call = r->call };

	out.mode = strcmp(PQgetvalue(res, i, 3), "postgres") == 0 ? GATE_MODE_POSTGRES
								  : GATE_MODE_REDIS;
	if (what == 'e') {
		out.outcome = CALL_END_ENDED;
		out.org = PQgetvalue(res, i, 1);
		out.contact_state = PQgetisnull(res, i, 2) ? NULL : PQgetvalue(res, i, 2);
		if (out.mode == GATE_MODE_POSTGRES) {
			out.released = true;
			ce->stats.notified++;
		} else if (ce->gate) {
			out.released = release(ce, r->call, out.org);
		}
		ce->stats.ended++;
	} else if (what == 'a') {
		out.outcome = CALL_END_ALREADY;
		ce->stats.already++;
	} else {
		out.outcome = CALL_END_UNKNOWN;
		ce->stats.unknown++;
	}
	answer(ce, r, 0, &out);
}

static void send_batch(struct call_end *ce, struct batch *b);

static void batch_cb(int status, const struct pg_results *res, void *data)
{
	struct batch *b = data;
	struct call_end *ce = b->ce;
	const PGresult *r = status == 0 && res->n == 2 ? res->res[1] : NULL;

	ce->inflight--;
	if (status == 0 && (!r || PQntuples(r) != (int)b->n || PQnfields(r) != 4))
		status = -EPROTO;
	if (status == DSP_EPG)
		LOG_AT(LOG_ERROR, LOG_DIAL, NULL, "call end batch of %u refused: %s", b->n,
		       res->error ? PQresultErrorMessage(res->error) : "?");
	if (status == DSP_EPG && b->n > 1 && !ce->closing) {
		/* One request (or a deadlock between two batches) must not fail the others:
		 * each is sent again alone, once. */
		for (uint32_t i = 0; i < b->n; i++) {
			struct batch *one = calloc(1, sizeof(*one));
			if (!one) {
				answer(ce, b->r[i], -ENOMEM, NULL);
				continue;
			}
			one->ce = ce;
			one->n = 1;
			one->r[0] = b->r[i];
			send_batch(ce, one);
		}
		free(b);
		/* Every singleton may have failed at once (-ENOTCONN): nothing in flight would
		 * then send what waits in the queue until the next submit. */
		if (!ce->closing)
			flush(&ce->timer);
		maybe_free(ce);
		return;
	}
	for (uint32_t i = 0; i < b->n; i++) {
		if (status)
			answer(ce, b->r[i], status, NULL);
		else
			answer_row(ce, b->r[i], r, (int)i);
	}
	free(b);
	if (!ce->closing)
		flush(&ce->timer);
	maybe_free(ce);
}

/* Sends b (or answers its requests with the refusal); b is given up. */
static void send_batch(struct call_end *ce, struct batch *b)
{
	struct pgarr arr[7];
	int rc = -ENOMEM;

	for (int i = 0; i < 7; i++)
		pgarr_init(&arr[i]);
	for (uint32_t i = 0; i < b->n; i++) {
		struct req *r = b->r[i];
		pgarr_text(&arr[0], r->call);
		pgarr_text(&arr[1], r->outcome);
		pgarr_text(&arr[2], r->has_reason ? r->reason : NULL);
		pgarr_int(&arr[3], r->disp, false);
		pgarr_int(&arr[4], (int64_t)r->delay_ms, false);
		pgarr_text(&arr[5], r->owner[0] ? r->owner : NULL);
		pgarr_int(&arr[6], r->tok, !r->owner[0] || !r->tok);
	}
	const char *v[7];
	bool ok = true;
	for (int i = 0; i < 7; i++)
		ok = (v[i] = pgarr_end(&arr[i])) != NULL && ok;
	if (ok) {
		struct pg_query q[2] = {
			{ .stmt = ce->st_lock },
			{ .stmt = ce->st_end, .nparams = 7, .values = v },
		};
		rc = pg_pool_batch(ce->pool, ce->lane, q, 2, batch_cb, b);
	}
	for (int i = 0; i < 7; i++)
		pgarr_free(&arr[i]);
	if (rc == 0) {
		ce->inflight++;
		ce->stats.batches++;
		return;
	}
	for (uint32_t i = 0; i < b->n; i++)
		answer(ce, b->r[i], rc, NULL);
	free(b);
}

static bool in_batch(const struct batch *b, const char *call)
{
	for (uint32_t i = 0; i < b->n; i++)
		if (strcmp(b->r[i]->call, call) == 0)
			return true;
	return false;
}

/* The end of the loop turn: the queued requests, in batches, while fewer than
 * CALL_END_INFLIGHT_MAX are in flight (the rest go when one is answered: under load the
 * batches grow instead of the statements); a call id already in a batch goes in the next one. */
static void flush(uv_timer_t *t)
{
	struct call_end *ce = t->data;

	while (!list_empty(&ce->queue) && ce->inflight < CALL_END_INFLIGHT_MAX) {
		struct batch *b = calloc(1, sizeof(*b));
		struct list_node *pos, *tmp;

		if (!b) {
			struct req *r = list_entry(ce->queue.next, struct req, node);
			list_del(&r->node);
			answer(ce, r, -ENOMEM, NULL);
			continue;
		}
		b->ce = ce;
		list_for_each_safe (pos, tmp, &ce->queue) {
			struct req *r = list_entry(pos, struct req, node);
			if (b->n == CALL_END_BATCH_MAX)
				break;
			if (in_batch(b, r->call))
				continue;
			list_del(&r->node);
			b->r[b->n++] = r;
		}
		send_batch(ce, b);
	}
}

static void timer_closed(uv_handle_t *h)
{
	struct call_end *ce = h->data;

	ce->timer_closed = true;
	maybe_free(ce);
}

void call_end_close(struct call_end *ce, void (*closed_cb)(void *data), void *data)
{
	if (!ce || ce->closing)
		return;
	ce->closing = true;
	ce->closed_cb = closed_cb;
	ce->closed_data = data;
	while (!list_empty(&ce->queue)) {
		struct req *r = list_entry(ce->queue.next, struct req, node);
		list_del(&r->node);
		answer(ce, r, -ECANCELED, NULL);
	}
	uv_close((uv_handle_t *)&ce->timer, timer_closed);
}

void call_end_get_stats(const struct call_end *ce, struct call_end_stats *out)
{
	*out = ce->stats;
}
