/* The worker process: wiring, readiness, drain (worker.h). */
#include "worker.h"

#include "api.h"
#include "backoff.h"
#include "call_end.h"
#include "claim.h"
#include "direct.h" /* issue10-direct */
#include "embedded_file.h"
#include "error.h"
#include "events.h"
#include "gate.h"
#include "gate_flow.h"
#include "gate_mode.h"
#include "gate_recon.h"
#include "handoff.h"
#include "list.h"
#include "log.h"
#include "operator.h"
#include "pg_pool.h"
#include "reconciler.h"
#include "redis_conn.h"
#include "redis_sub.h"
#include "refresher.h"
#include "select.h"
#include "sweep.h"
#include "wmetrics.h"
#include "wstatus.h" /* issue10-status */

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RETENTION_PERIOD_S 3600 /* default period of the retention pass */

/* The migrations compiled into this binary (dispatcher/migrate.c, migrations_embedded.c). */
extern const struct embedded_file embedded_migrations[];
extern const size_t embedded_migrations_count;

/* Whether every migration compiled in is recorded in schema_migrations (/readyz). */
enum schema_state { SCHEMA_UNKNOWN = 0, SCHEMA_CURRENT, SCHEMA_BEHIND };

struct worker {
	uv_loop_t *loop;
	struct worker_options o;
	char host[256];
	int port;
	char callback[1024];
	struct redis_scripts *reg;
	struct redis_conn *conn;
	struct redis_sub *sub;
	struct gate *gate;
	struct pg_pool *pool;
	struct gate_pg *gpg;
	struct gate_flow *flow;
	struct gate_mode_ctl *mode;
	struct handoff *handoff;
	struct refresher *refresher;
	struct reconciler *reconciler;
	struct claim *claim;
	struct dial *dial;
	struct select *sel;
	struct direct *direct; /* issue10-direct: POST /v2/calls's dials (direct.h) */
	struct call_end *ends; /* the one way a call ends: events, dial refusals, sweeps */
	struct events *ev;     /* POST /provider/events */
	struct sweep *sweep;   /* lease sweeper, maximum-duration sweep, retention */
	struct http_server *http;
	struct api *api;	      /* the /v2 and /api routes; NULL in role worker */
	struct api_dialer api_dialer; /* issue10-calls: POST /v2/calls -> direct (below) */
	struct redis_conn *rl_conn;   /* issue10-f1: the API rate limiter's own connection */
	struct pg_pool *import_pool;  /* issue10-g1: the batch imports' own connections */
	uv_timer_t end_timer;	      /* closes call_end once the turn's requests are flushed */
	unsigned parts;		      /* events / sweep closes not answered yet */
	bool final;		      /* close_all() ran: close call_end once parts is 0 */
	uv_signal_t sigterm, sigint;
	uv_timer_t drain_timer;
	bool draining, started;
	int exit_code;
	worker_events_handler events;
	void *events_data;
	worker_dial_hook dial_hook;
	void *dial_hook_data;
	struct list_node end_retries; /* dial_end_ctx waiting to re-submit a failed end */
	struct select_stats sel_st;   /* the selector's counts when it was closed (exit line) */
	enum schema_state schema;     /* as last read (schema_read()); unknown while none is up */
	bool schema_reading;	      /* a read in flight */
	bool schema_again;	      /* a connection came up during it: read once more after */
	char *schema_names;	      /* the compiled-in file names as a text[] literal */
	struct events_stats ev_st;    /* the events module's, likewise */
	/* --- operator listener, metrics (issue 10 items 7-8) --- */
	struct wmetrics *metrics; /* GET /metrics; the HTTP servers' requests counted */
	struct operator* op;	  /* DISPATCHER_OPERATOR_LISTEN; NULL: off or not bound */
	char op_host[256];
	int op_port;
	struct wstatus *status; /* issue10-status: GET /status, /status.json and their samples */
				/* --- end operator listener --- */
};

/* ---- events forwarded to the gate mode controller and the hand-off ---- */

static void on_redis_event(struct redis_conn *c, const struct redis_conn_event *ev, void *data)
{
	struct worker *w = data;

	(void)c;
	if (w->mode)
		gate_mode_redis_event(w->mode, ev);
}

static void on_sub_state(struct redis_sub *sub, bool up, void *data)
{
	struct worker *w = data;

	(void)sub;
	if (up && w->handoff)
		handoff_resubscribed(w->handoff);
}

/* ---- schema currency (/readyz): read when a connection comes up, never on a request ---- */

static void schema_read(struct worker *w);

static void schema_done(int status, const struct pg_results *r, void *data)
{
	struct worker *w = data;
	const char *state = r->error ? PQresultErrorField(r->error, PG_DIAG_SQLSTATE) : NULL;

	w->schema_reading = false;
	if (status == -ECANCELED)
		return; /* closing */
	if (status == 0 && r->n == 1 && PQntuples(r->res[0]) == 1) {
		long long n = strtoll(PQgetvalue(r->res[0], 0, 0), NULL, 10);
		w->schema =
			n == (long long)embedded_migrations_count ? SCHEMA_CURRENT : SCHEMA_BEHIND;
		if (w->schema == SCHEMA_BEHIND)
			log_warn(LOG_PG,
				 "schema behind: %lld of the %zu migrations of this build applied; "
				 "run `dispatcher migrate` (/readyz answers 503 until then)",
				 n, embedded_migrations_count);
	} else if (state && strcmp(state, "42P01") == 0) {
		w->schema = SCHEMA_BEHIND; /* no schema_migrations table: nothing applied */
		log_warn(LOG_PG, "schema behind: no schema_migrations table; run `dispatcher "
				 "migrate` (/readyz answers 503 until then)");
	} else {
		w->schema = SCHEMA_UNKNOWN;
		log_warn(LOG_PG,
			 "cannot read schema_migrations (%s): /readyz answers 503 until a "
			 "connection comes up again and the read succeeds",
			 dsp_strerror(status));
	}
	if (w->schema_again && pg_pool_up_count(w->pool))
		schema_read(w);
}

/* Counts the compiled-in migrations recorded in schema_migrations (by file name, as
 * `dispatcher migrate` records them); one read at a time, repeated once if a connection came up
 * during it. */
static void schema_read(struct worker *w)
{
	const char *values[1] = { w->schema_names };
	struct pg_query q = { .sql = "SELECT count(*) FROM schema_migrations"
				     " WHERE name = ANY($1::text[])",
			      .nparams = 1,
			      .values = values };

	if (w->schema_reading) {
		w->schema_again = true;
		return;
	}
	w->schema_again = false;
	if (!w->schema_names || pg_pool_exec(w->pool, PG_LANE_NORMAL, &q, schema_done, w))
		return; /* no connection up now: the next one up reads */
	w->schema_reading = true;
}

/* {"0001_init.sql",...}: the names are NNNN_name.sql (migrate.c checks), quoted anyway. */
static char *schema_names_literal(void)
{
	size_t len = 3;
	char *s, *p;

	for (size_t i = 0; i < embedded_migrations_count; i++)
		len += 2 * strlen(embedded_migrations[i].name) + 3;
	if (!(s = p = malloc(len)))
		return NULL;
	*p++ = '{';
	for (size_t i = 0; i < embedded_migrations_count; i++) {
		if (i)
			*p++ = ',';
		*p++ = '"';
		for (const char *c = embedded_migrations[i].name; *c; c++) {
			if (*c == '"' || *c == '\\')
				*p++ = '\\';
			*p++ = *c;
		}
		*p++ = '"';
	}
	*p++ = '}';
	*p = '\0';
	return s;
}

static void on_pg_state(struct pg_pool *pool, unsigned index, bool up, void *data)
{
	struct worker *w = data;

	if (up && w->mode)
		gate_mode_pg_up(w->mode);
	if (up && index == 0 && w->sel) /* the LISTENs' connection (pg_pool_listen()) */
		select_listen_up(w->sel);
	if (up)
		schema_read(w);
	else if (!pg_pool_up_count(pool))
		w->schema = SCHEMA_UNKNOWN; /* re-read when one is up again */
}

static void on_mode_notify(const char *channel, const char *payload, void *data)
{
	struct worker *w = data;

	(void)channel;
	if (w->mode)
		gate_mode_notify(w->mode, payload);
}

static void on_free_notify(const char *channel, const char *payload, void *data)
{
	struct worker *w = data;

	(void)channel;
	if (w->sel)
		select_org_freed(w->sel, payload);
	if (w->direct) /* issue10-direct */
		direct_org_freed(w->direct, payload);
}

/* issue10-batchctl: a batch or campaign stopped or paused (migration 0015). */
static void on_dispatch_notify(const char *channel, const char *payload, void *data)
{
	struct worker *w = data;

	(void)channel;
	if (w->sel && select_dispatch_notify(w->sel, payload))
		log_warn(LOG_GATE, "%s: payload not understood: %.200s", SELECT_CHANNEL_DISPATCH,
			 payload);
}

static void on_mode_change(struct gate_mode_ctl *c, const struct gate_mode_state *s, void *data)
{
	struct worker *w = data;

	(void)c;
	log_info(LOG_GATE, "gate mode %s epoch %llu%s%s", gate_mode_name(s->mode),
		 (unsigned long long)s->epoch, s->usable ? " usable" : "",
		 s->switching ? " switching" : "");
	if (w->sel)
		select_mode_changed(w->sel);
	if (w->direct) /* issue10-direct */
		direct_mode_changed(w->direct);
}

/* ---- dial results -> call_end (D2) ---- */

int worker_dial_end(const struct dial_result *r, struct call_end_req *out, char *reason,
		    size_t size)
{
	const char *why = retry_reason_name(r->reason);

	*out = (struct call_end_req){ .call = r->call->call,
				      .outcome = "refused",
				      .reason = reason,
				      .lease_owner = r->lease_owner, /* fenced: the lease it held */
				      .lease_token = r->lease_token };
	switch (r->disposition) {
	case DIAL_REFUSED: /* 429 (Retry-After + jitter, or backoff), a failed connect */
		out->disposition = CALL_END_RETRY_AT;
		out->delay_ms = r->delay_ms;
		snprintf(reason, size, "%s (status %d)%s", why, r->status,
			 r->requeue ? ": throttle retries exhausted, requeued" : "");
		return 0;
	case DIAL_INVALID: /* 400/404/422: the contact fails with the provider's reason */
		out->disposition = CALL_END_FAIL;
		snprintf(reason, size, "provider %d: %s", r->status,
			 r->text && r->text[0] ? r->text : why);
		return 0;
	case DIAL_STOPPED: /* 401/403: the lane stopped; the contact waits, nothing charged */
		out->disposition = CALL_END_PENDING;
		snprintf(reason, size, "lane stopped (%s, status %d)", why, r->status);
		return 0;
	case DIAL_DRAINED: /* never sent */
		out->disposition = CALL_END_PENDING;
		snprintf(reason, size, "not sent: draining");
		return 0;
	case DIAL_PLACED:
	case DIAL_UNKNOWN:
	case DIAL_LEASE_LOST: /* whoever holds the lease finishes it */
		break;
	}
	return -EINVAL;
}

uint64_t worker_dial_end_retry(int status, bool draining, unsigned attempt, uint64_t min_ms,
			       uint64_t max_ms)
{
	if (status >= 0 || status == -ECANCELED || draining)
		return 0;
	uint64_t d = backoff_doubled(min_ms ? min_ms : 1, attempt, max_ms ? max_ms : 1);
	return d ? d : 1;
}

/* One refused dial's end, owned here until call_end answers it or its retry is given up. The
 * submission is idempotent (state <> 'ended'), so a failed batch is re-sent with backoff. */
struct dial_end_ctx {
	struct worker *w;
	struct list_node node; /* in w->end_retries while its timer runs */
	uv_timer_t timer;      /* initialised at the first retry */
	bool timer_init;
	unsigned attempt;
	char call[40], org[65], outcome[16], reason[CALL_END_REASON_MAX + 1];
	enum call_end_disposition disposition;
	uint64_t delay_ms;
	char owner[65]; /* the lease the dialer held ("": not fenced) */
	int64_t token;
};

static void dial_end_freed(uv_handle_t *h)
{
	free(h->data);
}

static void dial_end_free(struct dial_end_ctx *c)
{
	if (list_linked(&c->node))
		list_del(&c->node);
	if (c->timer_init)
		uv_close((uv_handle_t *)&c->timer, dial_end_freed);
	else
		free(c);
}

static void dial_end_gave_up(struct dial_end_ctx *c, int status)
{
	LOG_AT(LOG_ERROR, LOG_DIAL, (&(const struct log_ids){ .org = c->org, .call = c->call }),
	       "the end of a refused dial failed (%s) after %u attempts: the maximum-duration "
	       "sweep ends it",
	       dsp_strerror(status), c->attempt + 1);
	dial_end_free(c);
}

static void dial_ended(struct call_end *ce, int status, const struct call_end_result *r,
		       void *data);

static int dial_end_submit(struct dial_end_ctx *c)
{
	struct call_end_req q = { .call = c->call,
				  .outcome = c->outcome,
				  .reason = c->reason,
				  .disposition = c->disposition,
				  .delay_ms = c->delay_ms,
				  .lease_owner = c->owner[0] ? c->owner : NULL,
				  .lease_token = c->token };

	if (!c->w->ends)
		return -ECANCELED;
	return call_end_submit(c->w->ends, &q, dial_ended, c);
}

static void dial_end_retry_cb(uv_timer_t *t)
{
	struct dial_end_ctx *c = t->data;
	int rc;

	list_del(&c->node);
	c->attempt++;
	if ((rc = dial_end_submit(c)))
		dial_end_gave_up(c, rc);
}

static void dial_ended(struct call_end *ce, int status, const struct call_end_result *r, void *data)
{
	struct dial_end_ctx *c = data;
	struct worker *w = c->w;

	(void)ce;
	if (status) {
		uint64_t delay =
			worker_dial_end_retry(status, w->draining, c->attempt,
					      w->o.reconnect_min_ms, w->o.reconnect_max_ms);
		if (!delay) {
			dial_end_gave_up(c, status);
			return;
		}
		LOG_AT(LOG_WARN, LOG_DIAL,
		       (&(const struct log_ids){ .org = c->org, .call = c->call }),
		       "the end of a refused dial failed (%s): retrying in %llu ms",
		       dsp_strerror(status), (unsigned long long)delay);
		if (!c->timer_init) {
			uv_timer_init(w->loop, &c->timer);
			c->timer.data = c;
			c->timer_init = true;
		}
		list_add_tail(&w->end_retries, &c->node);
		uv_timer_start(&c->timer, dial_end_retry_cb, delay, 0);
		return;
	}
	if (r->outcome != CALL_END_ENDED)
		LOG_AT(LOG_DEBUG, LOG_DIAL,
		       (&(const struct log_ids){ .org = c->org, .call = c->call }),
		       "refused dial: call %s", call_end_outcome_name(r->outcome));
	dial_end_free(c);
}

/* The drain gives up the ends still waiting to be re-sent (the sweep ends those calls). */
static void dial_end_retries_cancel(struct worker *w)
{
	struct list_node *pos, *tmp;

	list_for_each_safe (pos, tmp, &w->end_retries) {
		struct dial_end_ctx *c = list_entry(pos, struct dial_end_ctx, node);

		uv_timer_stop(&c->timer);
		dial_end_gave_up(c, -ECANCELED);
	}
}

static void dial_end_default(struct worker *w, const struct dial_result *r, void *data)
{
	struct call_end_req q;
	char reason[CALL_END_REASON_MAX + 1];
	struct dial_end_ctx *c;
	int rc = -ENOMEM;

	(void)data;
	if (worker_dial_end(r, &q, reason, sizeof(reason)))
		return;
	if ((c = calloc(1, sizeof(*c)))) {
		c->w = w;
		list_init(&c->node);
		snprintf(c->call, sizeof(c->call), "%s", r->call->call);
		snprintf(c->org, sizeof(c->org), "%s", r->call->org);
		snprintf(c->outcome, sizeof(c->outcome), "%s", q.outcome);
		snprintf(c->reason, sizeof(c->reason), "%s", q.reason ? q.reason : "");
		c->disposition = q.disposition;
		c->delay_ms = q.delay_ms;
		snprintf(c->owner, sizeof(c->owner), "%s", q.lease_owner ? q.lease_owner : "");
		c->token = q.lease_token;
		if ((rc = dial_end_submit(c)))
			free(c);
	}
	if (rc)
		LOG_AT(LOG_ERROR, LOG_DIAL,
		       (&(const struct log_ids){ .org = r->call->org, .call = r->call->call }),
		       "%s: call not ended (%s): the maximum-duration sweep ends it", reason,
		       dsp_strerror(rc));
}

static void on_dial(struct dial *d, const struct dial_result *r, void *data)
{
	struct worker *w = data;

	(void)d;
	if (r->disposition == DIAL_PLACED || r->disposition == DIAL_UNKNOWN ||
	    r->disposition == DIAL_LEASE_LOST)
		return; /* the events (or the sweep, or the lease's new holder) end the call */
	w->dial_hook(w, r, w->dial_hook_data);
}

/* ---- HTTP ---- */

static void healthz(struct http_request *req, void *data)
{
	(void)data;
	http_respond(req, 200, "application/json", "{\"ok\":true}", 11);
}

static const char *const schema_names[] = { "unknown", "current", "behind" };

/* Ready: not draining, a PostgreSQL connection up and the schema current. The gate mode is
 * reported, never required: postgres mode, or a mode not usable yet, still dials (C11). */
static void readyz(struct http_request *req, void *data)
{
	struct worker *w = data;
	struct gate_mode_state s = { 0 };
	bool pg = pg_pool_up_count(w->pool) > 0 &&
		  /* issue10-g1: and the imports' pool, on a node serving the API */
		  (!w->import_pool || pg_pool_up_count(w->import_pool) > 0);
	char body[512];
	int len;

	if (w->mode)
		gate_mode_get(w->mode, &s);
	bool ok = !w->draining && pg && w->schema == SCHEMA_CURRENT;
	len = snprintf(body, sizeof(body),
		       "{\"ready\":%s,\"postgres\":\"%s\",\"schema\":\"%s\",\"gate_mode\":\"%s\","
		       "\"gate_epoch\":%llu,\"gate_usable\":%s,\"draining\":%s",
		       ok ? "true" : "false", pg ? "up" : "down", schema_names[w->schema],
		       gate_mode_name(s.mode), (unsigned long long)s.epoch,
		       s.usable && !s.switching ? "true" : "false", w->draining ? "true" : "false");
	if (!ok)
		len += snprintf(body + len, sizeof(body) - (size_t)len,
				",\"error\":\"not_ready\",\"message\":\"%s\"",
				w->draining ? "draining"
				: !pg	    ? "no PostgreSQL connection is up"
				: w->schema == SCHEMA_BEHIND
					? "the schema is behind this build: run dispatcher migrate"
					: "the schema has not been read yet");
	len += snprintf(body + len, sizeof(body) - (size_t)len, "}");
	http_respond(req, ok ? 200 : 503, "application/json", body, (size_t)len);
}

static void provider_events(struct http_request *req, void *data)
{
	struct worker *w = data;

	if (w->events)
		w->events(w, req, w->events_data);
	else
		events_handler(req, w->ev);
}

/* --- operator listener, metrics (issue 10 items 7-8) --- */

/* The operator listener's routes, in one place (operator.h: each behind the admin token). */
static size_t operator_routes(struct worker *w, struct http_route *r, size_t max)
{
	const struct http_route routes[] = {
		{ "GET", "/metrics", 0, wmetrics_handler, w->metrics, false },
		{ "GET", "/healthz", 0, healthz, w, false },
		{ "GET", "/status", 0, wstatus_page, w->status, false },      /* issue10-status */
		{ "GET", "/status.json", 0, wstatus_json, w->status, false }, /* issue10-status */
	};
	size_t n = sizeof(routes) / sizeof(routes[0]);

	if (n > max)
		n = max;
	memcpy(r, routes, n * sizeof(*r));
	return n;
}

static void public_decorate(struct http_request *req, int status, void *data)
{
	wmetrics_http(((struct worker *)data)->metrics, "public", req, status);
}

static void operator_decorate(struct http_request *req, int status, void *data)
{
	wmetrics_http(((struct worker *)data)->metrics, "operator", req, status);
}

/* Starts the operator listener. A listener that cannot bind (the port taken: another worker of
 * the host has the default one) is logged and left off: the worker dials without it. */
static void operator_start(struct worker *w)
{
	struct http_route routes[8];
	struct operator_options oo = { .host = w->op_host,
				       .port = w->op_port,
				       .admin_token = w->o.admin_token,
				       .decorate = operator_decorate,
				       .decorate_data = w };
	int rc;

	if (!w->o.operator_listen)
		return;
	size_t n = operator_routes(w, routes, sizeof(routes) / sizeof(routes[0]));
	if ((rc = operator_new(w->loop, &oo, routes, n, &w->op))) {
		log_error(LOG_MAIN,
			  "DISPATCHER_OPERATOR_LISTEN=%s: cannot listen (%s): no /metrics on this "
			  "worker; give each worker of a host its own port, or off",
			  w->o.operator_listen, rc < 0 ? uv_strerror(rc) : "?");
		w->op = NULL;
		return;
	}
	log_info(LOG_MAIN, "operator listener on %s:%d%s", w->op_host, operator_port(w->op),
		 w->o.admin_token && w->o.admin_token[0] ? " (admin token required)" : "");
	wstatus_start(w->status); /* issue10-status: the chart's samples, only with a listener */
}

static int parse_operator_listen(struct worker *w)
{
	const char *l = w->o.operator_listen, *colon = l ? strrchr(l, ':') : NULL;
	char *end;

	if (!l)
		return 0;
	if (!colon || colon == l || (size_t)(colon - l) >= sizeof(w->op_host))
		return -EINVAL;
	long p = strtol(colon + 1, &end, 10);
	if (*end || p < 0 || p > 65535)
		return -EINVAL;
	snprintf(w->op_host, sizeof(w->op_host), "%.*s", (int)(colon - l), l);
	w->op_port = (int)p;
	return 0;
}

struct select *worker_select(struct worker *w)
{
	return w->sel;
}

struct dial *worker_dial(struct worker *w)
{
	return w->dial;
}

struct reconciler *worker_reconciler(struct worker *w)
{
	return w->reconciler;
}

uv_loop_t *worker_loop(struct worker *w)
{
	return w->loop;
}

struct wmetrics *worker_metrics(struct worker *w)
{
	return w->metrics;
}

/* --- issue10-f1 --- */
struct api *worker_api(struct worker *w)
{
	return w->api;
}
/* --- end issue10-f1 --- */

int worker_operator_port(const struct worker *w)
{
	return w->op ? operator_port(w->op) : -1;
}

/* --- end operator listener --- */

/* The public listener's own routes (worker.h), described in dispatcher/api/openapi.json. */
const struct worker_route worker_routes[] = {
	{ "GET", "/healthz", 0, healthz },
	{ "GET", "/readyz", 0, readyz },
	{ "POST", EVENTS_PATH, EVENTS_BODY_MAX, provider_events },
};
const size_t worker_routes_n = sizeof(worker_routes) / sizeof(worker_routes[0]);

/* ---- close and drain ---- */

static void closed_noop(uv_handle_t *h)
{
	(void)h;
}

static void sub_closed(void *data)
{
	struct worker *w = data;

	handoff_free(w->handoff); /* the subscriber is closed: its timers go now */
	w->handoff = NULL;
}

/* The exit line (demo --bench reads it): the selector's admissions and every script's calls
 * over the process's life, as key=value. "admission_tries" counts the admissions sent (each a
 * gate_admit.lua call in redis mode, a waiter's re-try included), "admitted" the calls admitted;
 * "script.<name>" the calls sent, "script_retries" their NOSCRIPT re-sends (all scripts). */
static void log_script_calls(const struct worker *w)
{
	char buf[2048];
	uint64_t retries = 0;
	int len = 0;

	for (size_t i = 0; w->reg && i < redis_scripts_count(w->reg); i++) {
		const struct redis_script *s = redis_scripts_at(w->reg, i);
		struct redis_script_calls c;
		redis_script_get_calls(s, &c);
		retries += c.retries;
		if (len >= 0 && (size_t)len < sizeof(buf))
			len += snprintf(buf + len, sizeof(buf) - (size_t)len, " script.%s=%" PRIu64,
					redis_script_name(s), c.calls);
	}
	log_info(LOG_MAIN,
		 "script calls: worker=%s admission_tries=%" PRIu64 " admitted=%" PRIu64
		 " refused=%" PRIu64 " wakes=%" PRIu64 " early_sent=%" PRIu64
		 " early_freed=%" PRIu64 " script_retries=%" PRIu64 "%s",
		 w->o.worker_id, w->sel_st.admissions, w->sel_st.admitted, w->sel_st.refused,
		 w->sel_st.wakes, w->ev_st.early_sent, w->ev_st.early_freed, retries,
		 len > 0 ? buf : "");
}

/* The last stage: call_end (its batches in flight commit and their gate releases are answered),
 * then the pool and Redis. */
static void ends_closed(void *data)
{
	struct worker *w = data;

	w->ends = NULL;
	log_script_calls(w); /* every script of this process is sent by now */
	if (w->pool)
		pg_pool_close(w->pool, NULL, NULL);
	if (w->conn)
		redis_conn_close(w->conn, NULL, NULL);
	w->conn = NULL;
	if (w->rl_conn) /* issue10-f1 */
		redis_conn_close(w->rl_conn, NULL, NULL);
	w->rl_conn = NULL;
	if (w->import_pool) /* issue10-g1 */
		pg_pool_close(w->import_pool, NULL, NULL);
	w->import_pool = NULL;
	uv_close((uv_handle_t *)&w->end_timer, closed_noop);
}

static void end_timer_cb(uv_timer_t *t)
{
	struct worker *w = t->data;

	call_end_close(w->ends, ends_closed, w);
}

/* call_end is closed once nothing can submit to it any more (events and sweep closed), on a
 * timer started after the dialer's last submissions: its flush runs first, so nothing queued is
 * cancelled. */
static void maybe_close_ends(struct worker *w)
{
	if (!w->final || w->parts)
		return;
	if (w->ends)
		uv_timer_start(&w->end_timer, end_timer_cb, 0, 0);
	else
		ends_closed(w);
}

static void part_closed(void *data)
{
	struct worker *w = data;

	w->parts--;
	maybe_close_ends(w);
}

static void close_sweep(struct worker *w)
{
	if (!w->sweep)
		return;
	w->parts++;
	sweep_close(w->sweep, part_closed, w);
	w->sweep = NULL;
}

static void close_all(struct worker *w)
{
	if (w->final)
		return;
	w->final = true;
	direct_close(w->direct, NULL, NULL); /* issue10-direct: before the flow and the dialer */
	w->direct = NULL;
	api_close(w->api); /* its rate limiter's timer; the HTTP server is closed by now */
	if (w->sel) {
		select_get_stats(w->sel, &w->sel_st);
		select_close(w->sel, NULL, NULL);
	}
	w->sel = NULL;
	if (w->dial)
		dial_close(w->dial, NULL, NULL);
	w->dial = NULL;
	if (w->flow)
		gate_flow_close(w->flow, NULL, NULL);
	w->flow = NULL;
	if (w->refresher)
		refresher_free(w->refresher);
	w->refresher = NULL;
	if (w->reconciler)
		reconciler_close(w->reconciler, NULL, NULL);
	w->reconciler = NULL;
	if (w->mode)
		gate_mode_close(w->mode);
	w->mode = NULL;
	if (w->sub)
		redis_sub_close(w->sub, sub_closed, w);
	w->sub = NULL;
	if (w->ev) {
		w->parts++;
		events_get_stats(w->ev, &w->ev_st);
		events_close(w->ev, part_closed, w);
		w->ev = NULL;
	}
	close_sweep(w);
	if (w->op) /* --- operator listener (issue 10) --- */
		operator_close(w->op, NULL, NULL);
	w->op = NULL;
	wstatus_stop(w->status); /* issue10-status: the sampler's timer */
	if (w->started) {
		uv_close((uv_handle_t *)&w->sigterm, closed_noop);
		uv_close((uv_handle_t *)&w->sigint, closed_noop);
		uv_close((uv_handle_t *)&w->drain_timer, closed_noop);
		w->started = false;
	}
	maybe_close_ends(w);
}

static void http_closed(struct http_server *s, void *data)
{
	struct worker *w = data;

	(void)s;
	w->http = NULL;
	log_info(LOG_MAIN, "drained: closing");
	close_all(w);
}

/* Idle and half-received connections were closed at once, the answers in flight written. */
static void http_drained(struct http_server *s, void *data)
{
	struct http_server_stats st;

	http_server_stats(s, &st);
	log_info(LOG_MAIN, "drain: HTTP done (%llu idle, %llu half-received closed at once)",
		 (unsigned long long)st.drain_idle, (unsigned long long)st.drain_dropped);
	http_server_close(s, http_closed, data);
}

static void dial_drained(void *data)
{
	struct worker *w = data;

	if (w->http)
		http_server_drain(w->http, http_drained, w);
	else
		close_all(w);
}

static void select_drained(void *data)
{
	struct worker *w = data;

	log_info(LOG_MAIN, "drain: contacts handed back; finishing provider requests");
	dial_drain(w->dial, dial_drained, w);
}

static void drain_timeout(uv_timer_t *t)
{
	(void)t;
	log_error(LOG_MAIN, "drain did not finish within DISPATCHER_DRAIN_SECONDS: exiting now "
			    "(leases bring the contacts back)");
	exit(1);
}

void worker_drain(struct worker *w)
{
	if (w->draining)
		return;
	w->draining = true;
	log_info(LOG_MAIN, "drain: stop claiming, handing waiting contacts back");
	dial_end_retries_cancel(w);
	uv_timer_start(&w->drain_timer, drain_timeout, w->o.drain_ms, 0);
	w->exit_code = 0;
	close_sweep(w);		 /* no new sweep passes; a running one finishes */
	direct_drain(w->direct); /* issue10-direct: waiting direct dials answered 503 */
	select_drain(w->sel, select_drained, w);
}

static void on_signal(uv_signal_t *s, int signum)
{
	struct worker *w = s->data;

	if (w->draining) {
		log_warn(LOG_MAIN, "signal %d during the drain: exiting now", signum);
		exit(1);
	}
	worker_drain(w);
}

/* ---- construction ---- */

static int parse_listen(struct worker *w)
{
	const char *colon = strrchr(w->o.listen, ':');
	char *end;

	if (!colon || colon == w->o.listen || (size_t)(colon - w->o.listen) >= sizeof(w->host))
		return -EINVAL;
	long p = strtol(colon + 1, &end, 10);
	if (*end || p < 0 || p > 65535)
		return -EINVAL;
	snprintf(w->host, sizeof(w->host), "%.*s", (int)(colon - w->o.listen), w->o.listen);
	w->port = (int)p;
	return 0;
}

static int build_connections(struct worker *w)
{
	const struct worker_options *o = &w->o;
	struct redis_conn_options ro = { .url = o->redis_url,
					 .name = "gate",
					 .connect_timeout_ms = o->redis_connect_timeout_ms,
					 .command_timeout_ms = o->redis_command_timeout_ms,
					 .reconnect_min_ms = o->reconnect_min_ms,
					 .reconnect_max_ms = o->reconnect_max_ms,
					 .generation_key = GATE_SYS_GEN_KEY,
					 .event_cb = on_redis_event,
					 .data = w };
	struct pg_pool_options po = { .conninfo = o->database_url,
				      .name = "worker",
				      .size = o->pg_pool_size ? o->pg_pool_size : 4,
				      .priority_size = 1,
				      .connect_timeout_ms = o->pg_connect_timeout_ms,
				      .query_timeout_ms = o->pg_query_timeout_ms,
				      .reconnect_min_ms = o->reconnect_min_ms,
				      .reconnect_max_ms = o->reconnect_max_ms,
				      .state_cb = on_pg_state,
				      .data = w };
	int rc;

	if ((rc = redis_scripts_new(&w->reg)) || (rc = gate_scripts_register(w->reg)) ||
	    (rc = gate_recon_scripts_register(w->reg)) ||
	    (rc = lane_fleet_scripts_register(w->reg)) ||
	    (rc = api_scripts_register(w->reg))) /* the API's rate limiter (issue 10) */
		return rc;
	ro.scripts = w->reg;
	if ((rc = redis_conn_new(w->loop, &ro, &w->conn)))
		return rc;
	struct redis_sub_options so = { .url = o->redis_url,
					.name = "wake",
					.connect_timeout_ms = o->redis_connect_timeout_ms,
					.reconnect_min_ms = o->reconnect_min_ms,
					.reconnect_max_ms = o->reconnect_max_ms,
					.publisher = w->conn,
					.state_cb = on_sub_state,
					.data = w };
	if ((rc = redis_sub_new(w->loop, &so, &w->sub)) ||
	    (rc = gate_new(w->conn, w->reg, NULL, &w->gate)) ||
	    (rc = pg_pool_new(w->loop, &po, &w->pool)) ||
	    (rc = gate_pg_new(w->pool, NULL, &w->gpg)) ||
	    (rc = gate_pg_listen(w->pool, on_free_notify, on_mode_notify, w)) ||
	    /* issue10-batchctl */
	    (rc = pg_pool_listen(w->pool, SELECT_CHANNEL_DISPATCH, on_dispatch_notify, w)))
		return rc;
	return 0;
}

/* A rate-limit 429 of the API (dispatcher_ratelimit_refused_total{bucket}). */
static void on_rate_limited(const char *bucket, void *data)
{
	struct worker *w = data;

	wmetrics_ratelimit_refused(w->metrics, bucket);
}

static int build_jobs(struct worker *w)
{
	const struct worker_options *o = &w->o;
	struct gate_flow_options fo = { .loop = w->loop, .gate = w->gate, .pg = w->gpg };
	struct gate_mode_options mo = { .loop = w->loop,
					.pg = w->gpg,
					.gate = w->gate,
					.change_cb = on_mode_change,
					.data = w };
	struct handoff_options ho = {
		.loop = w->loop, .gate = w->gate, .sub = w->sub, .worker = o->worker_id
	};
	struct refresher_options rf = { .owner = o->worker_id,
					.sub = w->sub,
					.period_ms = o->refresh_period_ms,
					.floors_ttl_ms = o->floors_ttl_ms };
	struct reconciler_options rc_o = { .loop = w->loop,
					   .pool = w->pool,
					   .pg = w->gpg,
					   .conn = w->conn,
					   .reg = w->reg,
					   .owner = o->worker_id,
					   .period_ms = o->reconcile_ms };
	struct claim_options co = { .owner = o->worker_id, .lease_ms = o->lease_ms };
	struct dial_options dopt = { .loop = w->loop,
				     .pool = w->pool,
				     .provider_url = o->provider_url,
				     .token = o->provider_token,
				     .callback_url = w->callback,
				     .timeout_ms = o->provider_timeout_ms,
				     .lane_probe_ms = o->lane_probe_ms,
				     .redis = w->conn, /* fleet-wide lanes (lane_fleet.h) */
				     .scripts = w->reg,
				     .owner = o->worker_id, /* leases of calls in care (dial.h) */
				     .lease_ms = o->lease_ms,
				     .done_cb = on_dial,
				     .data = w };
	int rc;

	struct call_end_options ceo = { .loop = w->loop, .pool = w->pool, .gate = w->gate };
	struct sweep_options swo = { .loop = w->loop,
				     .pool = w->pool,
				     .worker_id = o->worker_id,
				     .lease_sweep_s = o->lease_sweep_s ? o->lease_sweep_s : 5,
				     .call_sweep_s = o->call_sweep_s ? o->call_sweep_s : 30,
				     .max_call_s = o->max_call_s,
				     .retention_period_s = o->retention_period_s
								   ? o->retention_period_s
								   : RETENTION_PERIOD_S,
				     .retention_days = (uint32_t)o->retention_days };
	if (rf.period_ms && rf.period_ms * 3 > REFRESHER_LEASE_MS)
		rf.lease_ms = rf.period_ms * 3;
	/* A contact reaches the dialer at most two slot waits (claimed set, then the waiting
	 * admission) and one call-row write after its claim. */
	/* It must cover the first request whole (timeout + the send fence's 1 s): settings.c
	 * refuses a shorter lease at start; here too for callers that skip it. */
	uint64_t timeout = o->provider_timeout_ms ? o->provider_timeout_ms : 10000;
	if (o->lease_ms < 2 * o->slot_wait_ms + GATE_PG_WRITE_DEADLINE_MS + timeout + 1000) {
		log_error(LOG_MAIN,
			  "lease %llu ms does not cover 2 x the slot wait (%llu ms), the call-row "
			  "write (%u ms) and one provider request (%llu ms + 1 s)",
			  (unsigned long long)o->lease_ms, (unsigned long long)o->slot_wait_ms,
			  GATE_PG_WRITE_DEADLINE_MS, (unsigned long long)timeout);
		return -EINVAL;
	}
	dopt.lease_left_ms = o->lease_ms - 2 * o->slot_wait_ms - GATE_PG_WRITE_DEADLINE_MS;
	lane_config_defaults(&dopt.lane);
	dopt.lane.rate_per_s = o->lane_rate_per_s;
	if (o->lane_burst)
		dopt.lane.burst = o->lane_burst;
	retry_policy_defaults(&dopt.policy);
	if ((rc = gate_flow_new(&fo, &w->flow)) || (rc = gate_mode_new(&mo, &w->mode)) ||
	    (rc = handoff_new(&ho, &w->handoff)) ||
	    (rc = refresher_new(w->loop, w->pool, w->gate, w->gpg, &rf, &w->refresher)) ||
	    (rc = reconciler_new(&rc_o, &w->reconciler)) ||
	    (rc = claim_new(w->pool, &co, &w->claim)) || (rc = dial_new(&dopt, &w->dial)) ||
	    (rc = call_end_new(&ceo, &w->ends)))
		return rc;
	struct events_options eo = { .loop = w->loop,
				     .pool = w->pool,
				     .ends = w->ends,
				     .secret = o->webhook_secret,
				     .gate = w->gate,
				     .mode = w->mode };
	swo.ends = w->ends;
	swo.dial = w->dial; /* re-send of orphaned calls (sweep.h) */
	swo.lease_ms = o->lease_ms;
	swo.resend_max_sends = dopt.policy.server_tries;
	if ((rc = events_new(&eo, &w->ev)) || (rc = sweep_new(&swo, &w->sweep)))
		return rc;
	struct select_options so = { .loop = w->loop,
				     .claim = w->claim,
				     .gate = w->gate,
				     .flow = w->flow,
				     .gpg = w->gpg,
				     .mode = w->mode,
				     .handoff = w->handoff,
				     .dial = w->dial,
				     .slot_wait_ms = o->slot_wait_ms,
				     .claim_page = o->claim_page };
	/* --- issue10-direct: the direct dials, on the same flow, gate and dialer --- */
	struct direct_options dro = { .loop = w->loop,
				      .pool = w->pool,
				      .gate = w->gate,
				      .flow = w->flow,
				      .gpg = w->gpg,
				      .mode = w->mode,
				      .handoff = w->handoff,
				      .dial = w->dial };
	if ((rc = direct_new(&dro, &w->direct)))
		return rc;
	/* --- end issue10-direct --- */
	return select_new(&so, &w->sel);
}

/* --- issue10-calls: POST /v2/calls's dialer (api.h struct api_dialer) over direct.h --- */
struct api_dial {
	struct direct_dial *dd;
	api_dial_cb cb;
	void *data;
};

static void api_dial_done(struct direct *d, const struct direct_dial_result *r, void *data)
{
	static const enum api_dial_outcome map[] = { [DIRECT_PLACED] = API_DIAL_PLACED,
						     [DIRECT_BUSY] = API_DIAL_BUSY,
						     [DIRECT_NOT_FOUND] = API_DIAL_NOT_FOUND,
						     [DIRECT_UNAVAILABLE] = API_DIAL_UNAVAILABLE };
	struct api_dial *x = data;
	char body[DIRECT_BUSY_BODY_MAX];
	struct api_dial_result ar = { .outcome = (unsigned)r->outcome < 4 ? map[r->outcome]
									  : API_DIAL_UNAVAILABLE,
				      .call = r->call,
				      .state = r->state,
				      .from = r->from,
				      .retry_after_s = DIRECT_RETRY_AFTER_S,
				      .message = r->message,
				      .waited_ms = r->waited_ms };

	(void)d;
	if (r->outcome == DIRECT_BUSY &&
	    direct_busy_body(r->running, r->limit, body, sizeof(body)) >= 0)
		ar.busy_body = body;
	x->cb(&ar, x->data);
	free(x);
}

static int api_dial_submit(void *ctx, const struct api_dial_req *req, api_dial_cb cb, void *data,
			   void **handle)
{
	struct worker *w = ctx;
	struct direct_dial_req dr = { .org = req->org,
				      .agent = req->agent,
				      .to_number = req->to_number,
				      .from_number = req->from_number };
	struct api_dial *x;
	int rc;

	if (!w->direct || w->draining)
		return -ESHUTDOWN;
	if (!(x = calloc(1, sizeof(*x))))
		return -ENOMEM;
	x->cb = cb;
	x->data = data;
	if ((rc = direct_dial_submit(w->direct, &dr, api_dial_done, x, &x->dd))) {
		free(x);
		return rc;
	}
	*handle = x;
	return 0;
}

static void api_dial_cancel(void *handle)
{
	struct api_dial *x = handle;

	direct_dial_cancel(x->dd);
	free(x);
}
/* --- end issue10-calls --- */

int worker_new(uv_loop_t *loop, const struct worker_options *o, struct worker **out)
{
	struct worker *w;
	int rc;

	if (!loop || !o || !out || !o->database_url || !o->redis_url || !o->listen ||
	    !o->worker_id || !o->provider_url || !o->public_url || !o->webhook_secret ||
	    !o->webhook_secret[0] || !o->slot_wait_ms || o->retention_days > UINT32_MAX ||
	    !o->lease_ms || !o->drain_ms)
		return -EINVAL;
	if (!(w = calloc(1, sizeof(*w))))
		return -ENOMEM;
	w->loop = loop;
	list_init(&w->end_retries);
	w->o = *o;
	w->exit_code = 1;
	w->dial_hook = dial_end_default;
	if (!(w->schema_names = schema_names_literal())) {
		free(w);
		return -ENOMEM;
	}
	size_t ul = strlen(o->public_url);
	while (ul && o->public_url[ul - 1] == '/')
		ul--;
	snprintf(w->callback, sizeof(w->callback), "%.*s/provider/events", (int)ul, o->public_url);
	if ((rc = parse_listen(w)) || (rc = parse_operator_listen(w))) {
		log_error(LOG_MAIN,
			  "DISPATCHER_LISTEN=%s / DISPATCHER_OPERATOR_LISTEN=%s: expected "
			  "host:port",
			  o->listen, o->operator_listen ? o->operator_listen : "off");
		free(w->schema_names);
		free(w);
		return rc;
	}
	if ((rc = wmetrics_new(w, &w->metrics))) {
		free(w->schema_names);
		free(w);
		return rc;
	}
	if ((rc = wstatus_new(w, &w->status))) { /* issue10-status */
		wmetrics_free(w->metrics);
		free(w->schema_names);
		free(w);
		return rc;
	}
	uv_timer_init(loop, &w->end_timer); /* closed by close_all(), last */
	w->end_timer.data = w;
	if ((rc = build_connections(w)) || (rc = build_jobs(w))) {
		log_error(LOG_MAIN, "worker: cannot build: %s", dsp_strerror(rc));
		*out = w;
		return rc;
	}
	*out = w;
	/* --- the API (issue 10): dispatcher/api/api.h --- */
	if (o->role != WORKER_ROLE_WORKER) {
		/* issue10-f1: the rate limiter has its own Redis connection, as the gate's (same URL
		 * and deadlines, no mode events), so a burst of API calls never queues behind or
		 * ahead of admissions, nor makes the mode controller switch. */
		struct redis_conn_options rlo = { .url = o->redis_url,
						  .name = "ratelimit",
						  .connect_timeout_ms = o->redis_connect_timeout_ms,
						  .command_timeout_ms = o->redis_command_timeout_ms,
						  .reconnect_min_ms = o->reconnect_min_ms,
						  .reconnect_max_ms = o->reconnect_max_ms,
						  .scripts = w->reg };
		if ((rc = redis_conn_new(w->loop, &rlo, &w->rl_conn)))
			return rc;
		/* issue10-g1: the imports' own pool (api.h), so that an upload never holds one of
		 * the worker's connections (connection 0 holds every LISTEN) in its transaction. */
		struct pg_pool_options ipo = { .conninfo = o->database_url,
					       .name = "import",
					       .size = API_IMPORT_POOL_SIZE,
					       .connect_timeout_ms = o->pg_connect_timeout_ms,
					       .query_timeout_ms = o->pg_query_timeout_ms,
					       .reconnect_min_ms = o->reconnect_min_ms,
					       .reconnect_max_ms = o->reconnect_max_ms };
		if ((rc = pg_pool_new(w->loop, &ipo, &w->import_pool)))
			return rc;
		struct api_options ao = { .loop = w->loop,
					  .pool = w->pool,
					  .import_pool = w->import_pool, /* issue10-g1 */
					  .gate = w->gate,
					  .conn = w->rl_conn, /* issue10-f1 */
					  .reg = w->reg,
					  .on_limited = on_rate_limited,
					  .on_limited_data = w };
		/* issue10-calls: the direct dials of POST /v2/calls, placed by this process */
		w->api_dialer = (struct api_dialer){ .ctx = w,
						     .submit = api_dial_submit,
						     .cancel = api_dial_cancel };
		ao.dialer = &w->api_dialer;
		if ((rc = api_new(&ao, &w->api)))
			return rc;
	}
	/* --- end the API --- */
	return 0;
}

void worker_set_events_handler(struct worker *w, worker_events_handler h, void *data)
{
	w->events = h;
	w->events_data = data;
}

void worker_set_dial_hook(struct worker *w, worker_dial_hook h, void *data)
{
	w->dial_hook = h ? h : dial_end_default;
	w->dial_hook_data = data;
}

int worker_start(struct worker *w)
{
	struct http_server_config hc;
	int rc;

	http_server_config_defaults(&hc);
	hc.host = w->host;
	hc.port = w->port;
	hc.reuseport = true;
	hc.decorate = public_decorate; /* the requests' metrics (issue 10) */
	hc.decorate_data = w;
	if (w->o.http_max_connections)
		hc.max_connections = w->o.http_max_connections;
	if (w->o.http_body_timeout_ms) /* review finding: an idle timeout, see http_server.h */
		hc.body_timeout_ms = w->o.http_body_timeout_ms;
	if (w->o.http_body_min_rate)
		hc.body_min_rate = w->o.http_body_min_rate;
	struct http_route routes[64];
	size_t nroutes = 0;
	for (size_t i = 0; i < worker_routes_n; i++)
		routes[nroutes++] = (struct http_route){ .method = worker_routes[i].method,
							 .pattern = worker_routes[i].pattern,
							 .max_body = worker_routes[i].max_body,
							 .handler = worker_routes[i].handler,
							 .data = w };
	if (w->api) {
		size_t n = api_routes(w->api, routes + nroutes,
				      sizeof(routes) / sizeof(routes[0]) - nroutes);
		if (nroutes + n > sizeof(routes) / sizeof(routes[0]))
			return -ENOMEM; /* a build with more routes than the array: caught by the tests */
		nroutes += n;
	}
	if ((rc = http_server_new(w->loop, &hc, routes, nroutes, &w->http))) {
		log_error(LOG_MAIN, "DISPATCHER_LISTEN=%s: cannot listen: %s", w->o.listen,
			  uv_strerror(rc));
		return rc;
	}
	operator_start(w);
	uv_signal_init(w->loop, &w->sigterm);
	uv_signal_init(w->loop, &w->sigint);
	uv_timer_init(w->loop, &w->drain_timer);
	w->sigterm.data = w;
	w->sigint.data = w;
	w->drain_timer.data = w;
	w->started = true;
	uv_signal_start(&w->sigterm, on_signal, SIGTERM);
	uv_signal_start(&w->sigint, on_signal, SIGINT);
	if ((rc = pg_pool_start(w->pool)) || (rc = redis_conn_start(w->conn)) ||
	    (w->rl_conn && (rc = redis_conn_start(w->rl_conn))) ||	/* issue10-f1 */
	    (w->import_pool && (rc = pg_pool_start(w->import_pool))) || /* issue10-g1 */
	    (rc = redis_sub_start(w->sub)) || (rc = gate_mode_start(w->mode)) ||
	    (rc = refresher_start(w->refresher)) || (rc = reconciler_start(w->reconciler)) ||
	    (w->o.role != WORKER_ROLE_API && (rc = select_start(w->sel))))
		return rc;
	sweep_start(w->sweep);
	log_info(LOG_MAIN, "worker %s listening on %s:%d (callback %s)", w->o.worker_id, w->host,
		 http_server_port(w->http), w->callback);
	return 0;
}

struct pg_pool *worker_pool(struct worker *w)
{
	return w->pool;
}

struct gate *worker_gate(struct worker *w)
{
	return w->gate;
}

struct gate_pg *worker_gate_pg(struct worker *w)
{
	return w->gpg;
}

struct gate_mode_ctl *worker_gate_mode(struct worker *w)
{
	return w->mode;
}

struct call_end *worker_call_end(struct worker *w)
{
	return w->ends;
}

struct direct *worker_direct(struct worker *w) /* issue10-direct */
{
	return w->direct;
}

int worker_exit_code(const struct worker *w)
{
	return w->exit_code;
}

void worker_free(struct worker *w)
{
	if (!w)
		return;
	gate_pg_free(w->gpg);
	gate_free(w->gate);
	claim_free(w->claim);
	api_free(w->api);
	redis_scripts_free(w->reg);
	wmetrics_free(w->metrics);
	wstatus_free(w->status); /* issue10-status: after gate_free() answered its reads */
	free(w->schema_names);
	free(w);
}

int worker_run(const struct worker_options *o)
{
	uv_loop_t *loop = uv_default_loop();
	struct worker *w = NULL;
	char msg[512];
	struct gate_startup_options so = { .redis_url = o->redis_url,
					   .connect_timeout_ms = o->redis_connect_timeout_ms,
					   .database_url = o->database_url,
					   .pg_connect_timeout_ms = o->pg_connect_timeout_ms };
	int rc;

	signal(SIGPIPE, SIG_IGN);
	if ((rc = gate_startup_check(&so, msg, sizeof(msg)))) {
		fprintf(stderr, "dispatcher: run: %s\n", msg);
		return 2;
	}
	curl_global_init(CURL_GLOBAL_DEFAULT);
	rc = worker_new(loop, o, &w);
	if (!rc)
		rc = worker_start(w);
	if (rc && w) {
		w->draining = true;
		if (w->http)
			http_server_close(w->http, NULL, NULL);
		close_all(w);
	}
	uv_run(loop, UV_RUN_DEFAULT);
	int code = rc ? 2 : worker_exit_code(w);
	worker_free(w);
	uv_loop_close(loop);
	curl_global_cleanup();
	return code;
}
