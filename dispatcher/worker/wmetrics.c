/* The worker's metric families and the /metrics scrape (wmetrics.h). */
#include "wmetrics.h"

#include "api.h"
#include "dial.h"
#include "gate.h"
#include "gate_mode.h"
#include "log.h"
#include "metrics.h"
#include "ratelimit_redis.h"
#include "reconciler.h"
#include "select.h"
#include "worker.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ID_MAX 65

struct slot_row {
	char org[ID_MAX], id[ID_MAX];
	uint32_t running;
};

struct rows {
	struct slot_row *v;
	size_t n, cap;
};

struct scrape;

struct read {
	struct scrape *sc;
	char org[ID_MAX];
};

/* One GET /metrics: the gate reads, then the render. Freed once answered, every read answered
 * and the timer closed. */
struct scrape {
	struct wmetrics *m;
	struct http_request *req; /* NULL once answered */
	uv_timer_t timer;
	bool timer_open;
	struct read *reads; /* owned, n_reads */
	unsigned n_reads, pending;
	bool complete; /* every org known was read (and answered in time) */
	bool sending;  /* inside send_reads(): an answer now does not render yet */
	bool sys_known;
	uint32_t sys_running;
	struct rows orgs, camps, agents;
};

struct wmetrics {
	struct worker *w;
	struct metrics *reg;
	struct metrics_family *http, *ratelimit;
	const struct scrape *snap; /* the scrape being rendered, NULL outside */
};

/* ---- collectors: read the modules' own counters at scrape time ---- */

/* The select statistics, one family each; c_select() emits the one asked. */
enum sel_stat {
	SEL_REQUESTS,
	SEL_ADMITTED,
	SEL_REFUSALS,
	SEL_FCFS,
	SEL_SLOT_WAIT,
	SEL_REQUEUED,
	SEL_HELD
};

static void c_select(struct metrics_out *o, void *data, enum sel_stat what)
{
	struct wmetrics *m = data;
	struct select *s = worker_select(m->w);
	struct select_stats st;

	if (!s)
		return;
	select_get_stats(s, &st);
	switch (what) {
	case SEL_REQUESTS:
		metrics_emit_u64(o, NULL, st.admissions);
		break;
	case SEL_ADMITTED:
		metrics_emit_u64(o, NULL, st.admitted);
		break;
	case SEL_REFUSALS:
		for (int l = FAIRSHARE_LEVEL_SYSTEM; l < FAIRSHARE_LEVEL_COUNT; l++)
			metrics_emit_u64(o, (const char *[]){ fairshare_level_name(l) },
					 st.refused_level[l]);
		break;
	case SEL_FCFS:
		metrics_emit_u64(o, NULL, st.fcfs);
		break;
	case SEL_SLOT_WAIT:
		metrics_emit_histogram(o, NULL, &st.slot_wait);
		break;
	case SEL_REQUEUED:
		metrics_emit_u64(o, NULL, st.handed_back);
		break;
	case SEL_HELD:
		metrics_emit_u64(o, NULL, st.held);
		break;
	}
}

/* A metrics_collect_cb for one select statistic. */
#define SELECT_COLLECTOR(fn, what)                                                                 \
	static void fn(struct metrics_out *o, void *d)                                             \
	{                                                                                          \
		c_select(o, d, what);                                                              \
	}
SELECT_COLLECTOR(c_requests, SEL_REQUESTS)
SELECT_COLLECTOR(c_admitted, SEL_ADMITTED)
SELECT_COLLECTOR(c_refusals, SEL_REFUSALS)
SELECT_COLLECTOR(c_fcfs, SEL_FCFS)
SELECT_COLLECTOR(c_slot_wait, SEL_SLOT_WAIT)
SELECT_COLLECTOR(c_requeued, SEL_REQUEUED)
SELECT_COLLECTOR(c_held, SEL_HELD)

static void c_dial_attempts(struct metrics_out *o, void *data)
{
	struct wmetrics *m = data;
	struct dial *d = worker_dial(m->w);
	struct dial_stats st;

	if (!d)
		return;
	dial_get_stats(d, &st);
	for (unsigned v = 0; v < DIAL_CLASSES; v++)
		metrics_emit_u64(o, (const char *[]){ retry_verdict_name((enum retry_verdict)v) },
				 st.attempts[v]);
}

static void c_lanes(struct metrics_out *o, void *data)
{
	struct wmetrics *m = data;
	struct dial *d = worker_dial(m->w);
	uint32_t n[DIAL_LANE_STATES];

	if (!d)
		return;
	dial_lane_states(d, n);
	for (unsigned i = 0; i < DIAL_LANE_STATES; i++)
		metrics_emit_u64(
			o, (const char *[]){ dial_lane_state_name((enum dial_lane_state)i) }, n[i]);
}

static void c_reconciler(struct metrics_out *o, void *data)
{
	struct wmetrics *m = data;
	struct reconciler *r = worker_reconciler(m->w);
	struct reconciler_stats st;

	if (!r)
		return;
	reconciler_get_stats(r, &st);
	metrics_emit_u64(o, (const char *[]){ "released" }, st.released);
	metrics_emit_u64(o, (const char *[]){ "fenced" }, st.fenced);
	metrics_emit_u64(o, (const char *[]){ "added" }, st.added);
}

static bool mode_state(struct wmetrics *m, struct gate_mode_state *s)
{
	struct gate_mode_ctl *c = worker_gate_mode(m->w);

	if (!c)
		return false;
	gate_mode_get(c, s);
	return true;
}

static void c_gate_mode(struct metrics_out *o, void *data)
{
	struct gate_mode_state s;

	if (!mode_state(data, &s))
		return;
	metrics_emit_u64(o, (const char *[]){ "redis" }, s.mode == GATE_MODE_REDIS);
	metrics_emit_u64(o, (const char *[]){ "postgres" }, s.mode == GATE_MODE_POSTGRES);
}

static void c_gate_epoch(struct metrics_out *o, void *data)
{
	struct gate_mode_state s;

	if (mode_state(data, &s))
		metrics_emit_u64(o, NULL, s.epoch);
}

static void c_gate_usable(struct metrics_out *o, void *data)
{
	struct gate_mode_state s;

	if (mode_state(data, &s))
		metrics_emit_u64(o, NULL, s.usable && !s.switching);
}

/* Slots in use, from the scrape's gate reads. */
static void c_sys_slots(struct metrics_out *o, void *data)
{
	const struct scrape *sc = ((struct wmetrics *)data)->snap;

	if (sc && sc->sys_known)
		metrics_emit_u64(o, NULL, sc->sys_running);
}

/* Rows as {org} (the org family: one label) or {org, id}. */
static void emit_rows(struct metrics_out *o, const struct rows *r)
{
	for (size_t i = 0; i < r->n; i++)
		metrics_emit_u64(o, (const char *[]){ r->v[i].org, r->v[i].id }, r->v[i].running);
}

static void c_org_slots(struct metrics_out *o, void *data)
{
	const struct scrape *sc = ((struct wmetrics *)data)->snap;

	if (sc)
		emit_rows(o, &sc->orgs);
}

static void c_camp_slots(struct metrics_out *o, void *data)
{
	const struct scrape *sc = ((struct wmetrics *)data)->snap;

	if (sc)
		emit_rows(o, &sc->camps);
}

static void c_agent_slots(struct metrics_out *o, void *data)
{
	const struct scrape *sc = ((struct wmetrics *)data)->snap;

	if (sc)
		emit_rows(o, &sc->agents);
}

static void c_read_complete(struct metrics_out *o, void *data)
{
	const struct scrape *sc = ((struct wmetrics *)data)->snap;

	if (sc)
		metrics_emit_u64(o, NULL, sc->complete);
}

/* ---- the families, in the order rendered ---- */

/* --- issue10-f1: the API's key checks and buffered bodies (api_get_stats) --- */
static void c_api_auth(struct metrics_out *o, void *data)
{
	struct wmetrics *m = data;
	struct api *a = worker_api(m->w);
	struct api_stats st;

	if (!a)
		return;
	api_get_stats(a, &st);
	metrics_emit_u64(o, (const char *[]){ "cache_hit" }, st.key_cache_hits);
	metrics_emit_u64(o, (const char *[]){ "lookup" }, st.key_lookups);
	metrics_emit_u64(o, (const char *[]){ "negative_hit" }, st.key_negative_hits);
	metrics_emit_u64(o, (const char *[]){ "unauthorized" }, st.unauthorized);
	metrics_emit_u64(o, (const char *[]){ "lookup_failed" }, st.unavailable);
	metrics_emit_u64(o, (const char *[]){ "lookup_refused" }, st.lookups_refused);
}

static void c_api_bodies(struct metrics_out *o, void *data)
{
	struct wmetrics *m = data;
	struct api *a = worker_api(m->w);
	struct api_stats st;

	if (!a)
		return;
	api_get_stats(a, &st);
	metrics_emit_u64(o, NULL, st.bodies_refused);
}
/* --- end issue10-f1 --- */

/* The rate limiter (R3: its fail-opens are visible). */
static void c_limiter(struct metrics_out *o, void *data, int what)
{
	struct wmetrics *m = data;
	struct api *a = worker_api(m->w);
	struct ratelimit_redis_stats st;

	if (!a)
		return;
	api_get_limiter_stats(a, &st);
	if (what == 0) {
		for (int b = 0; b < RATELIMIT_BUCKETS; b++)
			metrics_emit_u64(
				o,
				(const char *[]){ ratelimit_bucket_name((enum ratelimit_bucket)b) },
				st.checks[b]);
	} else if (what == 1) {
		metrics_emit_u64(o, (const char *[]){ "deadline" }, st.fail_open_deadline);
		metrics_emit_u64(o, (const char *[]){ "redis" },
				 st.fail_opens - st.fail_open_deadline);
	} else {
		metrics_emit_u64(o, NULL, st.late_replies);
	}
}

static void c_limiter_checks(struct metrics_out *o, void *data)
{
	c_limiter(o, data, 0);
}

static void c_limiter_fail_open(struct metrics_out *o, void *data)
{
	c_limiter(o, data, 1);
}

static void c_limiter_late(struct metrics_out *o, void *data)
{
	c_limiter(o, data, 2);
}

static const char *const
	l_level[] = { "level" },
	*const l_class[] = { "class" }, *const l_state[] = { "state" },
	*const l_action[] = { "action" }, *const l_mode[] = { "mode" }, *const l_org[] = { "org" },
	*const l_camp[] = { "org", "campaign" }, *const l_agent[] = { "org", "agent" },
	*const l_http[] = { "listener", "route", "status" }, *const l_bucket[] = { "bucket" },
	*const l_result[] = { "result" }, /* issue10-f1 */
		*const l_reason[] = { "reason" };

#define FAM(n, h, t, l, nl, cb)                                                                    \
	{                                                                                          \
		.name = n, .help = h, .type = t, .labels = l, .n_labels = nl, .collect = cb        \
	}

static const struct metrics_desc families[] = {
	FAM("dispatcher_system_slots_in_use",
	    "Live calls of the whole system (all organisations), as the gate counts them (read at "
	    "scrape time).",
	    METRICS_GAUGE, NULL, 0, c_sys_slots),
	FAM("dispatcher_org_slots_in_use",
	    "Live calls of each organisation this worker knows, as the gate counts them.",
	    METRICS_GAUGE, l_org, 1, c_org_slots),
	FAM("dispatcher_campaign_slots_in_use",
	    "Live calls of each campaign of those organisations (campaign \"*\": direct dials).",
	    METRICS_GAUGE, l_camp, 2, c_camp_slots),
	FAM("dispatcher_agent_slots_in_use",
	    "Live calls on each agent of those organisations, direct dials included.",
	    METRICS_GAUGE, l_agent, 2, c_agent_slots),
	FAM("dispatcher_slots_read_complete",
	    "1 when this scrape read every organisation's slots from the gate in time; 0 when some "
	    "are missing (postgres mode, Redis slow, more organisations than the scrape reads).",
	    METRICS_GAUGE, NULL, 0, c_read_complete),
	FAM("dispatcher_admission_requests_total",
	    "Admissions sent to the gate by this worker (either mode, re-tries of waiters "
	    "included).",
	    METRICS_COUNTER, NULL, 0, c_requests),
	FAM("dispatcher_admitted_total", "Calls admitted by the gate and written, by this worker.",
	    METRICS_COUNTER, NULL, 0, c_admitted),
	FAM("dispatcher_refusals_total",
	    "Candidates refused by the gate, by the level that refused (as the gate counts them: "
	    "one per candidate decision).",
	    METRICS_COUNTER, l_level, 1, c_refusals),
	FAM("dispatcher_fcfs_decisions_total",
	    "Candidate decisions made first come first served: enforcement on and no valid floors "
	    "installed (R9).",
	    METRICS_COUNTER, NULL, 0, c_fcfs),
	{ .name = "dispatcher_slot_wait_seconds",
	  .help = "Time from an admission's first ask to the gate to its admission.",
	  .type = METRICS_HISTOGRAM,
	  .le = select_slot_wait_le,
	  .n_le = SELECT_SLOT_WAIT_N,
	  .collect = c_slot_wait },
	FAM("dispatcher_requeued_total",
	    "Claimed contacts handed back to the queue undialled (slot wait over, drain).",
	    METRICS_COUNTER, NULL, 0, c_requeued),
	FAM("dispatcher_claimed_held", "Claimed contacts held in memory waiting for a slot now.",
	    METRICS_GAUGE, NULL, 0, c_held),
	FAM("dispatcher_dial_attempts_total",
	    "Requests to the provider (dial_attempts rows), by class: the retry verdict of the "
	    "answer.",
	    METRICS_COUNTER, l_class, 1, c_dial_attempts),
	FAM("dispatcher_lanes", "This worker's provider lanes, by state.", METRICS_GAUGE, l_state,
	    1, c_lanes),
	FAM("dispatcher_reconciler_corrections_total",
	    "Corrections of the gate made by this worker's reconciler runs, by action.",
	    METRICS_COUNTER, l_action, 1, c_reconciler),
	FAM("dispatcher_gate_mode", "1 for the gate's current mode, 0 for the other.",
	    METRICS_GAUGE, l_mode, 1, c_gate_mode),
	FAM("dispatcher_gate_epoch", "The gate mode's epoch (bumped by every switch).",
	    METRICS_GAUGE, NULL, 0, c_gate_epoch),
	FAM("dispatcher_gate_usable", "1 when admissions may be made now in the current mode.",
	    METRICS_GAUGE, NULL, 0, c_gate_usable),
	FAM("dispatcher_http_requests_total",
	    "HTTP responses, by listener, route pattern (\"unmatched\" when no route matched) and "
	    "status.",
	    METRICS_COUNTER, l_http, 3, NULL),
	/* --- issue10-f1 --- */
	FAM("dispatcher_api_auth_total",
	    "API key checks, by result: cache_hit, lookup (a PostgreSQL query), negative_hit (a "
	    "hash "
	    "found unknown within the last 2 s: 401 without a query), unauthorized (every 401), "
	    "lookup_failed and lookup_refused (503s: the database failed, too many lookups in "
	    "flight).",
	    METRICS_COUNTER, l_result, 1, c_api_auth),
	FAM("dispatcher_api_bodies_refused_total",
	    "API requests answered 503 because their body would have crossed the budget of "
	    "buffered "
	    "bodies.",
	    METRICS_COUNTER, NULL, 0, c_api_bodies),
	/* --- end issue10-f1 --- */
	FAM("dispatcher_ratelimit_refused_total",
	    "Requests the API rate limiter answered 429, by bucket.", METRICS_COUNTER, l_bucket, 1,
	    NULL),
	FAM("dispatcher_ratelimit_checks_total",
	    "API rate-limit decisions, by bucket (fail-opens included).", METRICS_COUNTER, l_bucket,
	    1, c_limiter_checks),
	FAM("dispatcher_ratelimit_fail_open_total",
	    "Requests allowed because Redis could not answer the rate limiter (R3), by reason: "
	    "deadline (no reply within it) or redis (connection down, command lost, error).",
	    METRICS_COUNTER, l_reason, 1, c_limiter_fail_open),
	FAM("dispatcher_ratelimit_late_replies_total",
	    "Rate-limiter replies that came after their deadline (the request was allowed).",
	    METRICS_COUNTER, NULL, 0, c_limiter_late),
};

int wmetrics_new(struct worker *w, struct wmetrics **out)
{
	struct wmetrics *m;
	struct metrics_family *f;
	int rc;

	if (!w || !out)
		return -EINVAL;
	if (!(m = calloc(1, sizeof(*m))))
		return -ENOMEM;
	m->w = w;
	if ((rc = metrics_new(&m->reg)))
		goto fail;
	for (size_t i = 0; i < sizeof(families) / sizeof(families[0]); i++) {
		struct metrics_desc d = families[i];
		d.data = m;
		if ((rc = metrics_add(m->reg, &d, &f)))
			goto fail;
		if (strcmp(d.name, "dispatcher_http_requests_total") == 0)
			m->http = f;
		else if (strcmp(d.name, "dispatcher_ratelimit_refused_total") == 0)
			m->ratelimit = f;
	}
	*out = m;
	return 0;
fail:
	wmetrics_free(m);
	return rc;
}

void wmetrics_free(struct wmetrics *m)
{
	if (!m)
		return;
	metrics_free(m->reg);
	free(m);
}

void wmetrics_http(struct wmetrics *m, const char *listener, struct http_request *req, int status)
{
	const char *route = http_request_route(req);
	char st[8];

	if (!m)
		return;
	snprintf(st, sizeof(st), "%d", status);
	uint64_t *c = metrics_counter(
		m->http, (const char *[]){ listener, route ? route : "unmatched", st });
	if (c)
		(*c)++;
}

void wmetrics_ratelimit_refused(struct wmetrics *m, const char *bucket)
{
	uint64_t *c;

	if (m && bucket && (c = metrics_counter(m->ratelimit, (const char *[]){ bucket })))
		(*c)++;
}

/* ---- the scrape ---- */

static void rows_free(struct rows *r)
{
	free(r->v);
	memset(r, 0, sizeof(*r));
}

static void scrape_maybe_free(struct scrape *sc)
{
	if (sc->req || sc->pending || sc->timer_open)
		return;
	rows_free(&sc->orgs);
	rows_free(&sc->camps);
	rows_free(&sc->agents);
	free(sc->reads);
	free(sc);
}

static void timer_closed(uv_handle_t *h)
{
	struct scrape *sc = h->data;

	sc->timer_open = false;
	scrape_maybe_free(sc);
}

static void answer(struct scrape *sc)
{
	struct wmetrics *m = sc->m;
	char *text = NULL;
	size_t len = 0;

	if (sc->pending)
		sc->complete = false;
	m->snap = sc;
	int rc = metrics_render(m->reg, &text, &len);
	m->snap = NULL;
	if (rc)
		http_respond_error(sc->req, 500, "internal", "The metrics could not be rendered.");
	else
		http_respond(sc->req, 200, METRICS_CONTENT_TYPE, text, len);
	free(text);
	sc->req = NULL;
	if (sc->timer_open)
		uv_close((uv_handle_t *)&sc->timer, timer_closed);
	else
		scrape_maybe_free(sc);
}

static int row_add(struct rows *r, const char *org, const char *id, uint32_t running)
{
	if (r->n == r->cap) {
		size_t cap = r->cap ? 2 * r->cap : 16;
		struct slot_row *v = realloc(r->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		r->v = v;
		r->cap = cap;
	}
	struct slot_row *w = &r->v[r->n++];
	snprintf(w->org, sizeof(w->org), "%s", org);
	snprintf(w->id, sizeof(w->id), "%s", id ? id : "*");
	w->running = running;
	return 0;
}

static void read_cb(struct gate *g, int status, const struct gate_view *v, void *data)
{
	struct read *rd = data;
	struct scrape *sc = rd->sc;
	int rc = 0;

	(void)g;
	sc->pending--;
	if (!sc->req) { /* answered already (deadline) */
		scrape_maybe_free(sc);
		return;
	}
	if (status) {
		sc->complete = false;
	} else {
		sc->sys_known = true;
		sc->sys_running = v->system_running;
		rc = row_add(&sc->orgs, rd->org, NULL, v->org_running);
		for (uint32_t i = 0; !rc && i < v->n_campaigns; i++)
			rc = row_add(&sc->camps, rd->org, v->campaigns[i].id,
				     v->campaigns[i].running);
		for (uint32_t i = 0; !rc && i < v->n_agents; i++)
			rc = row_add(&sc->agents, rd->org, v->agents[i].id, v->agents[i].running);
		if (rc)
			sc->complete = false;
	}
	if (!sc->pending && !sc->sending)
		answer(sc);
}

static void deadline_cb(uv_timer_t *t)
{
	struct scrape *sc = t->data;

	if (sc->req)
		answer(sc);
}

struct org_list {
	struct scrape *sc;
	unsigned cap;
};

static void add_org(const char *org, void *data)
{
	struct org_list *l = data;
	struct scrape *sc = l->sc;

	if (sc->n_reads == l->cap) {
		sc->complete = false; /* more than WMETRICS_ORGS_MAX */
		return;
	}
	sc->reads[sc->n_reads].sc = sc;
	snprintf(sc->reads[sc->n_reads++].org, ID_MAX, "%s", org);
}

/* The reads of redis mode: one gate_read() per organisation the selector knows. */
static void send_reads(struct scrape *sc, uv_loop_t *loop)
{
	struct wmetrics *m = sc->m;
	struct select *s = worker_select(m->w);
	struct gate *g = worker_gate(m->w);
	struct gate_mode_state ms;
	struct org_list l = { .sc = sc, .cap = WMETRICS_ORGS_MAX };

	if (!s || !g || !mode_state(m, &ms) || ms.mode != GATE_MODE_REDIS || !ms.usable) {
		sc->complete = false;
		return;
	}
	if (!(sc->reads = calloc(WMETRICS_ORGS_MAX, sizeof(*sc->reads)))) {
		sc->complete = false;
		return;
	}
	select_foreach_org(s, add_org, &l);
	uv_timer_init(loop, &sc->timer);
	sc->timer.data = sc;
	sc->timer_open = true;
	uv_timer_start(&sc->timer, deadline_cb, WMETRICS_READ_MS, 0);
	sc->sending = true;
	for (unsigned i = 0; i < sc->n_reads; i++) {
		sc->pending++;
		if (gate_read(g, sc->reads[i].org, read_cb, &sc->reads[i])) {
			sc->pending--;
			sc->complete = false;
		}
	}
	sc->sending = false;
}

void wmetrics_handler(struct http_request *req, void *data)
{
	struct wmetrics *m = data;
	struct scrape *sc = calloc(1, sizeof(*sc));

	if (!sc) {
		http_respond_error(req, 500, "internal", "Out of memory.");
		return;
	}
	sc->m = m;
	sc->req = req;
	sc->complete = true;
	send_reads(sc, worker_loop(m->w));
	if (!sc->pending)
		answer(sc);
}
