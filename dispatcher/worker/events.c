/* The provider events endpoint: verify, validate, record one loop turn's events in one
 * statement, end the calls of terminal ones through call_end (events.h). */
#include "events.h"

#include "error.h"
#include "gate_pg_int.h" /* pgarr */
#include "ident.h"
#include "list.h"
#include "log.h"
#include "signing.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* $1 call ids, $2 sequences, $3 statuses, $4 provider call ids, $5 occurred_at (µs since the
 * epoch, NULL when not given). Per event, in order: whether the call row exists, and whether
 * this statement inserted its provider_events row. */
static const char sql_record[] =
	"WITH i AS (SELECT * FROM unnest($1::uuid[], $2::int[], $3::text[], $4::text[],"
	" $5::bigint[]) WITH ORDINALITY AS t(call_id, seq, status, pcid, occ_us, n)),"
	" k AS (SELECT id FROM calls WHERE id IN (SELECT call_id FROM i)),"
	" ins AS (INSERT INTO provider_events (call_id, sequence, status, provider_call_id,"
	" occurred_at) SELECT call_id, seq, status, pcid,"
	" to_timestamp(occ_us::double precision / 1000000) FROM i"
	" WHERE status IN ('completed', 'failed', 'no-answer', 'busy', 'canceled')"
	" OR call_id NOT IN (SELECT id FROM k)"
	" ON CONFLICT (call_id, sequence) DO NOTHING RETURNING call_id, sequence),"
	" m AS (SELECT call_id, max(seq) AS seq, min(pcid) AS pcid,"
	" min(coalesce(to_timestamp(occ_us::double precision / 1000000), now()))"
	" FILTER (WHERE status = 'answered') AS answered"
	" FROM i WHERE call_id IN (SELECT id FROM k) GROUP BY call_id),"
	" u AS (UPDATE calls c SET provider_call_id = CASE WHEN c.provider_call_id IS NULL"
	" AND NOT EXISTS (SELECT 1 FROM calls o WHERE o.provider_call_id = m.pcid)"
	" THEN m.pcid ELSE c.provider_call_id END,"
	" last_sequence = greatest(c.last_sequence, m.seq),"
	" answered_at = coalesce(c.answered_at, m.answered),"
	" state = CASE WHEN c.state IN ('dialing', 'unknown') AND m.answered IS NOT NULL"
	" THEN 'live'::call_state ELSE c.state END, updated_at = now()"
	" FROM m WHERE c.id = m.call_id AND (c.provider_call_id IS NULL"
	" OR c.last_sequence IS NULL OR c.last_sequence < m.seq"
	" OR (c.answered_at IS NULL AND m.answered IS NOT NULL)) RETURNING c.id)"
	" SELECT i.call_id IN (SELECT id FROM k),"
	" EXISTS (SELECT 1 FROM ins WHERE ins.call_id = i.call_id AND ins.sequence = i.seq)"
	" FROM i WHERE (SELECT count(*) FROM u) >= 0 ORDER BY i.n";

struct evreq {
	struct list_node node;
	struct events *ev;
	struct http_request *req;
	struct events_event e; /* the body, validated (events_body.h) */
	char org[65];	       /* from the callback URL's ?org= (early release), "" when none */
};

struct batch {
	struct events *ev;
	uint32_t n;
	struct evreq *r[EVENTS_BATCH_MAX];
};

struct events {
	uv_loop_t *loop;
	struct pg_pool *pool;
	struct call_end *ends;
	char *secret;
	int64_t tolerance_s;
	int64_t (*now_s)(void);
	const struct pg_stmt *st, *st_generic;
	struct gate *gate;	    /* early release (NULL: none) */
	struct gate_mode_ctl *mode; /* borrowed */
	uv_timer_t timer;
	struct list_node queue; /* struct evreq, validated, not sent */
	unsigned inflight;	/* batches and call_end requests not answered */
	unsigned batches;	/* of which batches (group commit: EVENTS_INFLIGHT_MAX) */
	bool closing, timer_closed;
	void (*closed_cb)(void *data);
	void *closed_data;
	struct events_stats stats;
};

static void flush(uv_timer_t *t);
static void maybe_free(struct events *ev);

int events_new(const struct events_options *o, struct events **out)
{
	struct events *ev;
	int rc;

	if (!o || !o->loop || !o->pool || !o->ends || !o->secret || !o->secret[0] ||
	    o->tolerance_s < 0 || !out)
		return -EINVAL;
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return -ENOMEM;
	ev->secret = strdup(o->secret);
	if (!ev->secret) {
		free(ev);
		return -ENOMEM;
	}
	ev->loop = o->loop;
	ev->pool = o->pool;
	ev->ends = o->ends;
	ev->tolerance_s = o->tolerance_s;
	ev->now_s = o->now_s;
	ev->gate = o->mode ? o->gate : NULL;
	ev->mode = o->mode;
	list_init(&ev->queue);
	rc = pg_pool_prepare(o->pool, sql_record, 5, &ev->st);
	if (!rc)
		rc = pg_pool_prepare(o->pool, PG_SQL_BATCH_PLANS, 0, &ev->st_generic);
	if (rc) {
		free(ev->secret);
		free(ev);
		return rc;
	}
	uv_timer_init(o->loop, &ev->timer);
	ev->timer.data = ev;
	*out = ev;
	return 0;
}

struct http_route events_route(struct events *ev)
{
	return (struct http_route){ .method = "POST",
				    .pattern = EVENTS_PATH,
				    .max_body = EVENTS_BODY_MAX,
				    .handler = events_handler,
				    .data = ev };
}

/* --- the request --- */

static void respond(struct evreq *r, int status, const char *body)
{
	http_respond(r->req, status, "application/json", body, strlen(body));
	free(r);
}

static void fail(struct events *ev, struct evreq *r)
{
	ev->stats.failed++;
	http_respond_error(r->req, 503, "unavailable", "the event was not recorded; send it again");
	free(r);
}

static const char *signature_error(int rc)
{
	switch (rc) {
	case -ESTALE:
		return "the signature's timestamp is outside the 5-minute window";
	case -EPERM:
		return "the signature does not match";
	default:
		return "X-Signature is missing or malformed";
	}
}

static void early_released(struct gate *g, int status, const struct gate_release_result *res,
			   void *data)
{
	struct events *ev = data;

	(void)g;
	ev->inflight--;
	if (!status && res->outcome == GATE_FREED)
		ev->stats.early_freed++;
	else if (status)
		LOG_AT(LOG_DEBUG, LOG_DIAL, NULL,
		       "early release not done (%s): the end's own release frees the call",
		       dsp_strerror(status));
	maybe_free(ev);
}

/* The organisation the callback URL names (`?org=`, dial.c), for the early release; "" when
 * none or not a valid id (then there is no early release, only the end's own). */
static void org_from_query(struct evreq *r, const char *q)
{
	size_t n;

	r->org[0] = '\0';
	if (!q || strncmp(q, "org=", 4) != 0)
		return;
	n = strcspn(q + 4, "&");
	if (n == 0 || n >= sizeof(r->org))
		return;
	memcpy(r->org, q + 4, n);
	r->org[n] = '\0';
	if (!ident_ok(r->org))
		r->org[0] = '\0';
}

/* The early release (events.h): once its terminal event is recorded (committed), a call whose
 * organisation the callback URL names has its slots freed in Redis at once, one PostgreSQL
 * round trip before call_end records the end. After the record, not before: the reconciler
 * counts a live row with a recorded terminal event as ended (gate_pg.c ST_CALL_ROWS), so it
 * never re-adds a slot freed here (core/reconcile.h's ordering assumption). Only in redis mode
 * with the gate usable: in postgres mode the row is the slot. */
static void early_release(struct events *ev, const struct evreq *r)
{
	struct gate_mode_state ms;

	if (!ev->gate || !r->e.terminal || !r->org[0])
		return;
	gate_mode_get(ev->mode, &ms);
	if (ms.mode != GATE_MODE_REDIS || !ms.usable || ms.switching)
		return; /* as admit.c: nothing is decided in Redis while the fleet leaves it */
	if (gate_release(ev->gate, r->org, r->e.call, early_released, ev) == 0) {
		ev->inflight++;
		ev->stats.early_sent++;
	}
}

void events_handler(struct http_request *req, void *data)
{
	struct events *ev = data;
	size_t len;
	const char *body = http_request_body(req, &len);
	const char *sig = http_request_header(req, "X-Signature");
	int64_t now = ev->now_s ? ev->now_s() : (int64_t)time(NULL);
	struct evreq *r;
	char err[EVENTS_BODY_ERR];
	int rc;

	ev->stats.received++;
	rc = sig ? signing_verify(ev->secret, sig, body, len, now, ev->tolerance_s) : -EBADMSG;
	if (rc) {
		ev->stats.unauthorized++;
		LOG_AT(LOG_WARN, LOG_DIAL, NULL, "provider event refused from %s: %s",
		       http_request_peer(req), signature_error(rc));
		http_respond_error(req, 401, "unauthorized", signature_error(rc));
		return;
	}
	if (ev->closing) {
		ev->stats.failed++;
		http_respond_error(req, 503, "unavailable",
				   "the worker is stopping; send it again");
		return;
	}
	r = calloc(1, sizeof(*r));
	if (!r) {
		ev->stats.failed++;
		http_respond_error(req, 503, "unavailable", "out of memory; send it again");
		return;
	}
	if (events_parse_body(body, len, &r->e, err, sizeof(err))) {
		ev->stats.bad++;
		http_respond_error(req, 400, "bad_request", err);
		free(r);
		return;
	}
	r->ev = ev;
	r->req = req;
	org_from_query(r, http_request_query(req));
	list_add_tail(&ev->queue, &r->node);
	if (!uv_is_active((uv_handle_t *)&ev->timer))
		uv_timer_start(&ev->timer, flush, 0, 0);
}

/* --- the end of a terminal event's call --- */

static void maybe_free(struct events *ev)
{
	if (!ev->closing || ev->inflight || !ev->timer_closed)
		return;
	if (ev->closed_cb)
		ev->closed_cb(ev->closed_data);
	free(ev->secret);
	free(ev);
}

static void ended_cb(struct call_end *ce, int status, const struct call_end_result *res, void *data)
{
	struct evreq *r = data;
	struct events *ev = r->ev;

	(void)ce;
	ev->inflight--;
	if (status) {
		LOG_AT(LOG_WARN, LOG_DIAL, (&(const struct log_ids){ .call = r->e.call }),
		       "the end of a call by its %s event failed (%s): the provider sends it again",
		       r->e.status, dsp_strerror(status));
		fail(ev, r);
	} else {
		LOG_AT(LOG_DEBUG, LOG_DIAL, (&(const struct log_ids){ .call = r->e.call }),
		       "%s event: call %s", r->e.status, call_end_outcome_name(res->outcome));
		ev->stats.recorded++;
		respond(r, 200, "{\"recorded\":true}");
	}
	maybe_free(ev);
}

static void end_call(struct events *ev, struct evreq *r)
{
	struct call_end_req q = { .call = r->e.call,
				  .outcome = r->e.status,
				  .disposition = CALL_END_BY_POLICY };
	int rc = call_end_submit(ev->ends, &q, ended_cb, r);

	if (rc) {
		fail(ev, r);
		return;
	}
	ev->stats.terminal++;
	ev->inflight++;
}

/* --- the batch --- */

static void send_batch(struct events *ev, struct batch *b);

static void batch_cb(int status, const struct pg_results *res, void *data)
{
	struct batch *b = data;
	struct events *ev = b->ev;
	const PGresult *r = status == 0 ? res->res[1] : NULL;

	ev->inflight--;
	ev->batches--;
	if (status == 0 && (PQntuples(r) != (int)b->n || PQnfields(r) != 2))
		status = -EPROTO;
	if (status == DSP_EPG && b->n > 1 && !ev->closing) {
		/* One event (a provider call id two calls claim at once) must not fail the others:
		 * each is sent again alone, once. */
		for (uint32_t i = 0; i < b->n; i++) {
			struct batch *one = calloc(1, sizeof(*one));
			if (!one) {
				fail(ev, b->r[i]);
				continue;
			}
			one->ev = ev;
			one->n = 1;
			one->r[0] = b->r[i];
			send_batch(ev, one);
		}
		free(b);
		if (!ev->closing)
			flush(&ev->timer); /* the singletons may all have failed at once */
		maybe_free(ev);
		return;
	}
	/* Answered 503: the provider sends them again, nothing is lost — a warning while
	 * PostgreSQL is unreachable (log.h); an error when PostgreSQL refused the statement. */
	if (status)
		LOG_AT(status == DSP_EPG ? LOG_ERROR : LOG_WARN, LOG_DIAL, NULL,
		       "%u provider events not recorded (%s)%s%s: answered 503, the provider sends"
		       " them again",
		       b->n, dsp_strerror(status), res->error ? ": " : "",
		       res->error ? PQresultErrorMessage(res->error) : "");
	for (uint32_t i = 0; i < b->n; i++) {
		struct evreq *e = b->r[i];
		if (status) {
			fail(ev, e);
			continue;
		}
		bool known = PQgetvalue(r, (int)i, 0)[0] == 't';
		bool inserted = PQgetvalue(r, (int)i, 1)[0] == 't';
		if ((e->e.terminal || !known) && !inserted)
			ev->stats.duplicates++;
		if (!known) {
			ev->stats.unknown_call++;
			respond(e, 202, "{\"recorded\":true,\"call\":\"unknown\"}");
		} else if (e->e.terminal && !ev->closing) {
			early_release(ev, e);
			end_call(ev, e);
		} else if (e->e.terminal) {
			fail(ev, e);
		} else {
			ev->stats.recorded++;
			respond(e, 200, "{\"recorded\":true}");
		}
	}
	free(b);
	if (!ev->closing)
		flush(&ev->timer);
	maybe_free(ev);
}

static void send_batch(struct events *ev, struct batch *b)
{
	struct pgarr arr[5];
	const char *v[5];
	bool ok = true;
	int rc = -ENOMEM;

	for (int i = 0; i < 5; i++)
		pgarr_init(&arr[i]);
	for (uint32_t i = 0; i < b->n; i++) {
		struct evreq *r = b->r[i];
		pgarr_text(&arr[0], r->e.call);
		pgarr_int(&arr[1], r->e.seq, false);
		pgarr_text(&arr[2], r->e.status);
		pgarr_text(&arr[3], r->e.pcid);
		pgarr_int(&arr[4], r->e.occ_us, !r->e.has_time);
	}
	for (int i = 0; i < 5; i++)
		ok = (v[i] = pgarr_end(&arr[i])) != NULL && ok;
	if (ok) {
		struct pg_query q[2] = { { .stmt = ev->st_generic },
					 { .stmt = ev->st, .nparams = 5, .values = v } };
		rc = pg_pool_batch(ev->pool, PG_LANE_PRIORITY, q, 2, batch_cb, b);
	}
	for (int i = 0; i < 5; i++)
		pgarr_free(&arr[i]);
	if (rc == 0) {
		ev->inflight++;
		ev->batches++;
		ev->stats.batches++;
		return;
	}
	LOG_AT(LOG_WARN, LOG_DIAL, NULL,
	       "%u provider events not sent (%s): answered 503, the provider sends them again",
	       b->n, dsp_strerror(rc));
	for (uint32_t i = 0; i < b->n; i++)
		fail(ev, b->r[i]);
	free(b);
}

static bool in_batch(const struct batch *b, const struct evreq *r)
{
	for (uint32_t i = 0; i < b->n; i++)
		if (b->r[i]->e.seq == r->e.seq && strcmp(b->r[i]->e.call, r->e.call) == 0)
			return true;
	return false;
}

/* The end of the loop turn: the queued events, in statements of EVENTS_BATCH_MAX while fewer
 * than EVENTS_INFLIGHT_MAX are in flight (the rest when one is answered, as call_end does:
 * under load the statements grow, not their number); the same (call, sequence) twice goes in
 * the next one. */
static void flush(uv_timer_t *t)
{
	struct events *ev = t->data;

	while (!list_empty(&ev->queue) && ev->batches < EVENTS_INFLIGHT_MAX) {
		struct batch *b = calloc(1, sizeof(*b));
		struct list_node *pos, *tmp;

		if (!b) {
			struct evreq *r = list_entry(ev->queue.next, struct evreq, node);
			list_del(&r->node);
			fail(ev, r);
			continue;
		}
		b->ev = ev;
		list_for_each_safe (pos, tmp, &ev->queue) {
			struct evreq *r = list_entry(pos, struct evreq, node);
			if (b->n == EVENTS_BATCH_MAX)
				break;
			if (in_batch(b, r))
				continue;
			list_del(&r->node);
			b->r[b->n++] = r;
		}
		send_batch(ev, b);
	}
}

static void timer_closed(uv_handle_t *h)
{
	struct events *ev = h->data;

	ev->timer_closed = true;
	maybe_free(ev);
}

void events_close(struct events *ev, void (*closed_cb)(void *data), void *data)
{
	if (!ev || ev->closing)
		return;
	ev->closing = true;
	ev->closed_cb = closed_cb;
	ev->closed_data = data;
	while (!list_empty(&ev->queue)) {
		struct evreq *r = list_entry(ev->queue.next, struct evreq, node);
		list_del(&r->node);
		fail(ev, r);
	}
	uv_close((uv_handle_t *)&ev->timer, timer_closed);
}

void events_get_stats(const struct events *ev, struct events_stats *out)
{
	*out = ev->stats;
}
