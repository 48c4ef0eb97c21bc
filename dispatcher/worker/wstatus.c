/* The operator's status page: GET /status and GET /status.json, the sample ring (wstatus.h). */
#include "wstatus.h"

#include "capacity.h"
#include "embedded_file.h"
#include "gate.h"
#include "gate_capacity.h"
#include "gate_mode.h"
#include "gate_pg.h"
#include "gate_pg_int.h" /* pgarr */
#include "log.h"
#include "pg_pool.h"
#include "select.h"
#include "worker.h"

#include <cjson/cJSON.h>
#include <libpq-fe.h>

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <uv.h>

extern const struct embedded_file status_html[];
extern const size_t status_html_count;

#define ID_MAX 65
#define ABSENT UINT32_MAX /* no value in a sample: the organisation was not read */
#define LIVE   "('dialing', 'live', 'unknown')"

/* $1 the organisations (text[]). Each organisation (also one without campaigns), then its
 * campaigns that are active or paused, hold a floor row or have live calls, sorted bytewise
 * (gate_capacity.h's meta order), with their pending contacts and live calls. */
static const char SQL_ORGS[] =
	"SELECT o.id, o.name, c.id, c.name, c.status::text, coalesce(f.active, false),"
	" CASE WHEN c.id IS NULL THEN 0 ELSE (SELECT count(*) FROM contacts k"
	" WHERE k.campaign_id = c.id AND k.org_id = o.id AND k.state = 'pending') END,"
	" CASE WHEN c.id IS NULL THEN 0 ELSE (SELECT count(*) FROM calls l"
	" WHERE l.org_id = o.id AND l.campaign_id = c.id AND l.state IN " LIVE ") END"
	" FROM organisations o LEFT JOIN campaigns c ON c.org_id = o.id"
	" AND (c.status IN ('active', 'paused')"
	" OR EXISTS (SELECT 1 FROM fair_share_floors f2 WHERE f2.org_id = o.id"
	" AND f2.campaign_id = c.id)"
	" OR EXISTS (SELECT 1 FROM calls l2 WHERE l2.org_id = o.id AND l2.campaign_id = c.id"
	" AND l2.state IN " LIVE "))"
	" LEFT JOIN fair_share_floors f ON f.org_id = o.id AND f.campaign_id = c.id"
	" WHERE o.id = ANY($1::text[])"
	" ORDER BY o.id COLLATE \"C\", c.id COLLATE \"C\"";

struct series {
	char org[ID_MAX], campaign[ID_MAX]; /* campaign "" for the direct dials */
	uint64_t last_ms;		    /* the last sample with a value above 0 */
	bool used;
};

struct sample {
	uint64_t t_ms; /* wall clock */
	uint32_t v[WSTATUS_SERIES_MAX];
};

struct wstatus {
	struct worker *w;
	uv_timer_t timer;
	bool started;
	uint64_t last_view, last_sample; /* loop clock */
	bool sampling;			 /* a round in flight */
	struct series series[WSTATUS_SERIES_MAX];
	struct sample *ring; /* WSTATUS_RING */
	unsigned head, n;    /* next slot, samples kept */
	uint64_t series_dropped;
};

static uint64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static bool gate_usable(struct wstatus *s, struct gate_mode_state *ms)
{
	struct gate_mode_ctl *c = worker_gate_mode(s->w);

	memset(ms, 0, sizeof(*ms));
	if (!c)
		return false;
	gate_mode_get(c, ms);
	return ms->mode == GATE_MODE_REDIS && ms->usable && worker_gate(s->w);
}

struct org_list {
	char (*ids)[ID_MAX];
	unsigned n, cap;
	bool truncated;
};

static void add_org(const char *org, void *data)
{
	struct org_list *l = data;

	if (l->n == l->cap) {
		l->truncated = true;
		return;
	}
	snprintf(l->ids[l->n++], ID_MAX, "%s", org);
}

static int cmp_id(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* The organisations the selector knows, sorted; l->ids is the caller's to free. */
static int list_orgs(struct wstatus *s, struct org_list *l)
{
	struct select *sel = worker_select(s->w);

	memset(l, 0, sizeof(*l));
	if (!(l->ids = calloc(WSTATUS_ORGS_MAX, ID_MAX)))
		return -ENOMEM;
	l->cap = WSTATUS_ORGS_MAX;
	if (sel)
		select_foreach_org(sel, add_org, l);
	qsort(l->ids, l->n, ID_MAX, cmp_id);
	return 0;
}

/* ---- the sample ring ---- */

static int series_find(struct wstatus *s, const char *org, const char *campaign, bool create)
{
	int free_slot = -1;
	uint64_t oldest = s->n ? s->ring[(s->head + WSTATUS_RING - s->n) % WSTATUS_RING].t_ms : 0;

	for (int i = 0; i < WSTATUS_SERIES_MAX; i++) {
		struct series *x = &s->series[i];
		if (x->used && strcmp(x->org, org) == 0 && strcmp(x->campaign, campaign) == 0)
			return i;
		/* free, or above 0 in no kept sample: its column can be reused */
		if (free_slot < 0 && (!x->used || x->last_ms < oldest))
			free_slot = i;
	}
	if (!create)
		return -1;
	if (free_slot < 0) {
		s->series_dropped++;
		return -1;
	}
	struct series *x = &s->series[free_slot];
	snprintf(x->org, sizeof(x->org), "%s", org);
	snprintf(x->campaign, sizeof(x->campaign), "%s", campaign);
	x->used = true;
	x->last_ms = 0;
	for (unsigned k = 0; k < WSTATUS_RING; k++) /* no history of the series it replaces */
		s->ring[k].v[free_slot] = ABSENT;
	return free_slot;
}

struct round;

struct round_read {
	struct round *r;
	char org[ID_MAX];
};

/* One sample being taken: a gate_read() per organisation. */
struct round {
	struct wstatus *s;
	unsigned pending;
	bool sending;
	struct sample smp;
	struct round_read *reads;
};

static void round_commit(struct round *r)
{
	struct wstatus *s = r->s;

	s->sampling = false;
	s->ring[s->head] = r->smp;
	s->head = (s->head + 1) % WSTATUS_RING;
	if (s->n < WSTATUS_RING)
		s->n++;
	free(r->reads);
	free(r);
}

static void round_read_cb(struct gate *g, int status, const struct gate_view *v, void *data)
{
	struct round_read *rr = data;
	struct round *r = rr->r;
	struct wstatus *s = r->s;

	(void)g;
	r->pending--;
	if (status == 0) {
		/* every series of the organisation reads 0 unless the view lists it */
		for (int i = 0; i < WSTATUS_SERIES_MAX; i++)
			if (s->series[i].used && strcmp(s->series[i].org, rr->org) == 0)
				r->smp.v[i] = 0;
		for (uint32_t i = 0; i < v->n_campaigns; i++) {
			const struct gate_campaign_view *c = &v->campaigns[i];
			int k = series_find(s, rr->org, c->id ? c->id : "", c->running > 0);
			if (k < 0)
				continue;
			r->smp.v[k] = c->running;
			if (c->running)
				s->series[k].last_ms = r->smp.t_ms;
		}
	}
	if (!r->pending && !r->sending)
		round_commit(r);
}

static void take_sample(struct wstatus *s)
{
	struct gate_mode_state ms;
	struct org_list l;
	struct round *r;

	if (!gate_usable(s, &ms) || list_orgs(s, &l))
		return;
	if (!l.n || !(r = calloc(1, sizeof(*r))) || !(r->reads = calloc(l.n, sizeof(*r->reads)))) {
		if (l.n)
			free(r);
		free(l.ids);
		return;
	}
	r->s = s;
	r->smp.t_ms = wall_ms();
	for (int i = 0; i < WSTATUS_SERIES_MAX; i++)
		r->smp.v[i] = ABSENT;
	s->sampling = true;
	r->sending = true;
	for (unsigned i = 0; i < l.n; i++) {
		r->reads[i].r = r;
		snprintf(r->reads[i].org, ID_MAX, "%s", l.ids[i]);
		r->pending++;
		if (gate_read(worker_gate(s->w), r->reads[i].org, round_read_cb, &r->reads[i]))
			r->pending--;
	}
	r->sending = false;
	free(l.ids);
	if (!r->pending)
		round_commit(r);
}

static void tick(uv_timer_t *t)
{
	struct wstatus *s = t->data;
	uint64_t now = uv_now(t->loop);
	bool watched = s->last_view && now - s->last_view < WSTATUS_VIEW_HOLD_MS;

	if (s->sampling)
		return; /* the last round is not answered yet */
	if (!watched && s->last_sample && now - s->last_sample < WSTATUS_IDLE_MS)
		return;
	s->last_sample = now;
	take_sample(s);
}

int wstatus_new(struct worker *w, struct wstatus **out)
{
	struct wstatus *s;

	if (!w || !out)
		return -EINVAL;
	if (status_html_count != 1)
		return -EINVAL;
	if (!(s = calloc(1, sizeof(*s))) || !(s->ring = calloc(WSTATUS_RING, sizeof(*s->ring)))) {
		free(s);
		return -ENOMEM;
	}
	s->w = w;
	*out = s;
	return 0;
}

void wstatus_start(struct wstatus *s)
{
	if (!s || s->started)
		return;
	uv_timer_init(worker_loop(s->w), &s->timer);
	s->timer.data = s;
	s->started = true;
	uv_timer_start(&s->timer, tick, 0, WSTATUS_SAMPLE_MS);
}

static void noop_closed(uv_handle_t *h)
{
	(void)h;
}

void wstatus_stop(struct wstatus *s)
{
	if (!s || !s->started)
		return;
	s->started = false;
	uv_close((uv_handle_t *)&s->timer, noop_closed);
}

void wstatus_free(struct wstatus *s)
{
	if (!s)
		return;
	free(s->ring);
	free(s);
}

/* ---- GET /status ---- */

void wstatus_page(struct http_request *req, void *data)
{
	(void)data;
	http_response_header(req, "Cache-Control", "no-store");
	http_response_header(req, "Content-Security-Policy",
			     "default-src 'none'; script-src 'unsafe-inline'; style-src "
			     "'unsafe-inline'; connect-src 'self'; img-src data:");
	http_respond(req, 200, "text/html; charset=utf-8", status_html[0].text, status_html[0].len);
}

/* ---- GET /status.json ---- */

struct jorg;

/* One answer being built. Freed once answered and every read answered. */
struct jreq {
	struct wstatus *s;
	struct http_request *req; /* NULL once answered */
	cJSON *root, *orgs;	  /* orgs: borrowed from root */
	struct jorg *o;		  /* n_orgs */
	unsigned n_orgs, pending;
	bool sending, complete, gate, sys_known;
	uint32_t sys_limit, sys_running;
	PGresult *pg; /* the SQL_ORGS answer, kept while the gate reads run; NULL if none */
};

struct jorg {
	struct jreq *j;
	char id[ID_MAX];
	cJSON *obj;		    /* borrowed from j->orgs */
	int row0, rows;		    /* its campaign rows in j->pg (rows 0: none) */
	struct capacity_meta *meta; /* rows entries */
};

static void jreq_maybe_free(struct jreq *j)
{
	if (j->req || j->pending)
		return;
	for (unsigned i = 0; i < j->n_orgs; i++)
		free(j->o[i].meta);
	free(j->o);
	PQclear(j->pg);
	cJSON_Delete(j->root);
	free(j);
}

static enum fairshare_state state_of(const char *status)
{
	if (strcmp(status, "active") == 0)
		return FAIRSHARE_RUNNING;
	if (strcmp(status, "paused") == 0)
		return FAIRSHARE_PAUSED;
	return FAIRSHARE_STOPPED; /* stopped, completed */
}

static const char *state_name(enum fairshare_state st)
{
	return st == FAIRSHARE_RUNNING ? "running" : st == FAIRSHARE_PAUSED ? "paused" : "stopped";
}

/* The campaign's row in o's rows, or -1. */
static int pg_row(const struct jorg *o, const char *campaign)
{
	for (int i = 0; campaign && i < o->rows; i++)
		if (strcmp(o->meta[i].id, campaign) == 0)
			return o->row0 + i;
	return -1;
}

static void add_history(struct jreq *j)
{
	struct wstatus *s = j->s;
	uint64_t now = wall_ms();
	cJSON *h = cJSON_AddObjectToObject(j->root, "history"), *t, *ser;
	unsigned first = 0;

	if (!h)
		return;
	cJSON_AddNumberToObject(h, "interval_ms", WSTATUS_SAMPLE_MS);
	cJSON_AddNumberToObject(h, "window_ms", WSTATUS_WINDOW_MS);
	cJSON_AddNumberToObject(h, "series_dropped", (double)s->series_dropped);
	t = cJSON_AddArrayToObject(h, "t");
	ser = cJSON_AddArrayToObject(h, "series");
	if (!t || !ser)
		return;
	/* the kept samples within the window, oldest first */
	while (first < s->n) {
		const struct sample *x =
			&s->ring[(s->head + WSTATUS_RING - s->n + first) % WSTATUS_RING];
		if (x->t_ms + WSTATUS_WINDOW_MS >= now)
			break;
		first++;
	}
	for (unsigned k = first; k < s->n; k++)
		cJSON_AddItemToArray(
			t,
			cJSON_CreateNumber(
				(double)s->ring[(s->head + WSTATUS_RING - s->n + k) % WSTATUS_RING]
					.t_ms));
	for (int i = 0; i < WSTATUS_SERIES_MAX; i++) {
		const struct series *x = &s->series[i];
		bool any = false;
		if (!x->used)
			continue;
		cJSON *o = cJSON_CreateObject(),
		      *v = o ? cJSON_AddArrayToObject(o, "values") : NULL;
		if (!v) {
			cJSON_Delete(o);
			continue;
		}
		cJSON_AddStringToObject(o, "org", x->org);
		if (x->campaign[0])
			cJSON_AddStringToObject(o, "campaign", x->campaign);
		else
			cJSON_AddNullToObject(o, "campaign");
		for (unsigned k = first; k < s->n; k++) {
			uint32_t val =
				s->ring[(s->head + WSTATUS_RING - s->n + k) % WSTATUS_RING].v[i];
			cJSON_AddItemToArray(v, val == ABSENT ? cJSON_CreateNull()
							      : cJSON_CreateNumber(val));
			any = any || (val != ABSENT && val > 0);
		}
		if (any)
			cJSON_AddItemToArray(ser, o);
		else
			cJSON_Delete(o);
	}
}

static void answer(struct jreq *j)
{
	char *text;

	cJSON_AddBoolToObject(j->root, "complete", j->complete);
	if (j->sys_known) {
		cJSON *sys = cJSON_AddObjectToObject(j->root, "system");
		if (sys) {
			cJSON_AddNumberToObject(sys, "limit", j->sys_limit);
			cJSON_AddNumberToObject(sys, "running", j->sys_running);
		}
	} else {
		cJSON_AddNullToObject(j->root, "system");
	}
	add_history(j);
	text = cJSON_PrintUnformatted(j->root);
	http_response_header(j->req, "Cache-Control", "no-store");
	if (text)
		http_respond(j->req, 200, "application/json", text, strlen(text));
	else
		http_respond_error(j->req, 500, "internal", "Out of memory.");
	free(text);
	j->req = NULL;
}

static void maybe_answer(struct jreq *j)
{
	if (!j->pending && !j->sending && j->req)
		answer(j);
}

/* The organisation's campaigns from the gate's view: the C12 answer of each (core/capacity.h,
 * through gate_capacity_snapshot(): the capacity endpoint's code), the PostgreSQL rows' names
 * and pending counts beside it. */
static int campaigns_from_view(struct jorg *o, const struct gate_view *v, cJSON *arr)
{
	const PGresult *pg = o->j->pg;
	uint32_t n = 0, cap = v->n_campaigns + (uint32_t)o->rows + 1;
	struct capacity_campaign *cs = calloc(cap, sizeof(*cs));
	size_t na = (size_t)v->n_agents + v->n_campaigns + 1; /* gate_capacity_snapshot() */
	uint32_t *agents = calloc(na, sizeof(*agents));
	uint64_t *work = calloc(na, sizeof(*work));
	struct capacity_org org;
	struct capacity_sums sums;
	unsigned listed = 0;
	int rc = -ENOMEM;

	if (!cs || !agents || !work)
		goto out;
	if ((rc = gate_capacity_snapshot(v, o->meta, (uint32_t)o->rows, NULL, &org, cs, agents,
					 &n)))
		goto out;
	/* campaigns the gate holds nothing for (no floor, no call): zero counts, inactive
	 * (reading V2 of capacity.h, as gate_capacity_snapshot() adds the one it is asked for) */
	for (int i = 0; i < o->rows; i++)
		if (capacity_find(cs, n, o->meta[i].id) == UINT32_MAX)
			cs[n++] = (struct capacity_campaign){ .id = o->meta[i].id,
							      .ceiling = FAIRSHARE_UNLIMITED,
							      .agent = FAIRSHARE_NO_AGENT,
							      .state = o->meta[i].state };
	if ((rc = capacity_sum(&org, cs, n, work, &sums)))
		goto out;
	for (uint32_t i = 0; i < n; i++) {
		struct capacity_answer a;
		char why[160];
		int row = pg_row(o, cs[i].id);
		cJSON *c;

		if (listed == WSTATUS_CAMPAIGNS_MAX) {
			cJSON_AddNumberToObject(o->obj, "campaigns_omitted", n - i);
			break;
		}
		capacity_answer(&org, cs, &sums, work, i, &a);
		if (fairshare_limited_by_format(a.limited_by, a.limited_by_value, why,
						sizeof(why)) < 0)
			why[0] = 0;
		if (!(c = cJSON_CreateObject()))
			break;
		cJSON_AddItemToArray(arr, c);
		listed++;
		if (cs[i].direct) {
			cJSON_AddNullToObject(c, "id");
			cJSON_AddStringToObject(c, "name", "direct dials");
		} else {
			cJSON_AddStringToObject(c, "id", cs[i].id);
			cJSON_AddStringToObject(c, "name",
						row >= 0 && PQgetvalue(pg, row, 3)[0]
							? PQgetvalue(pg, row, 3)
							: cs[i].id);
		}
		cJSON_AddStringToObject(c, "state", state_name(cs[i].state));
		cJSON_AddBoolToObject(c, "active", cs[i].active);
		cJSON_AddNumberToObject(c, "running", a.running_now);
		cJSON_AddNumberToObject(c, "floor", a.guaranteed_floor);
		cJSON_AddNumberToObject(c, "effective_limit", a.effective_limit);
		if (a.campaign_limit == FAIRSHARE_UNLIMITED)
			cJSON_AddNullToObject(c, "campaign_limit");
		else
			cJSON_AddNumberToObject(c, "campaign_limit", a.campaign_limit);
		cJSON_AddNumberToObject(c, "available_now", a.available_now);
		if (row >= 0)
			cJSON_AddNumberToObject(c, "pending", strtod(PQgetvalue(pg, row, 6), NULL));
		else
			cJSON_AddNullToObject(c, "pending");
		cJSON_AddStringToObject(c, "limited_by", why);
		cJSON_AddStringToObject(c, "limited_by_level", fairshare_limit_name(a.limited_by));
	}
	cJSON_AddNumberToObject(o->obj, "org_limit", org.org_limit);
	cJSON_AddNumberToObject(o->obj, "running", sums.org_running);
	cJSON_AddBoolToObject(o->obj, "enforced", org.enforced);
	cJSON_AddBoolToObject(o->obj, "floors_valid", org.floors_valid);
	cJSON_AddNumberToObject(o->obj, "direct_waiting", org.direct_waiting);
	cJSON_AddNumberToObject(o->obj, "active_campaigns", sums.active_campaigns);
	rc = 0;
out:
	free(cs);
	free(agents);
	free(work);
	return rc;
}

static void read_cb(struct gate *g, int status, const struct gate_view *v, void *data)
{
	struct jorg *o = data;
	struct jreq *j = o->j;
	cJSON *arr;

	(void)g;
	j->pending--;
	if (j->req) {
		if (status == 0 && (arr = cJSON_AddArrayToObject(o->obj, "campaigns")) &&
		    campaigns_from_view(o, v, arr) == 0) {
			j->sys_known = true;
			j->sys_limit = v->system_limit;
			j->sys_running = v->system_running;
		} else {
			j->complete = false;
			cJSON_AddStringToObject(o->obj, "error",
						status ? "the gate could not be read"
						       : "the gate's view could not be computed");
		}
	}
	maybe_answer(j);
	jreq_maybe_free(j);
}

static void stats_cb(struct gate *g, int status, const struct gate_stats *st, void *data)
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
	struct jorg *o = data;
	struct jreq *j = o->j;

	(void)g;
	j->pending--;
	if (j->req) {
		cJSON *r = status ? NULL : cJSON_AddObjectToObject(o->obj, "refusals_last_minute");
		if (r) {
			for (size_t i = 0; i < sizeof(levels) / sizeof(levels[0]); i++)
				cJSON_AddNumberToObject(
					r, levels[i].name,
					(double)st->minute.refused[levels[i].level]);
			cJSON_AddNumberToObject(o->obj, "admitted_last_minute",
						(double)st->minute.admitted);
			cJSON_AddNumberToObject(o->obj, "fcfs_last_minute",
						(double)st->minute.fcfs);
		} else {
			cJSON_AddNullToObject(o->obj, "refusals_last_minute");
		}
	}
	maybe_answer(j);
	jreq_maybe_free(j);
}

/* Postgres mode (or the gate not usable): the campaigns from PostgreSQL's rows alone. */
static void campaigns_from_pg(struct jorg *o)
{
	const PGresult *pg = o->j->pg;
	cJSON *arr = cJSON_AddArrayToObject(o->obj, "campaigns");
	double running = 0;

	for (int i = 0; arr && i < o->rows; i++) {
		int row = o->row0 + i;
		cJSON *c = cJSON_CreateObject();
		if (!c)
			break;
		cJSON_AddItemToArray(arr, c);
		cJSON_AddStringToObject(c, "id", PQgetvalue(pg, row, 2));
		cJSON_AddStringToObject(c, "name",
					PQgetvalue(pg, row, 3)[0] ? PQgetvalue(pg, row, 3)
								  : PQgetvalue(pg, row, 2));
		cJSON_AddStringToObject(c, "state", state_name(o->meta[i].state));
		cJSON_AddNumberToObject(c, "running", strtod(PQgetvalue(pg, row, 7), NULL));
		cJSON_AddNumberToObject(c, "pending", strtod(PQgetvalue(pg, row, 6), NULL));
		running += strtod(PQgetvalue(pg, row, 7), NULL);
	}
	cJSON_AddNumberToObject(o->obj, "running", running);
}

static void pg_done(int status, const struct pg_results *r, void *data)
{
	struct jreq *j = data;
	const PGresult *res = status == 0 && r->n == 1 ? r->res[0] : NULL;
	struct gate *g = worker_gate(j->s->w);

	j->pending--;
	if (!j->req) { /* cannot happen: nothing else answers while the statement runs */
		jreq_maybe_free(j);
		return;
	}
	if (!res || PQnfields(res) != 8) {
		http_respond_error(j->req, 503, "unavailable",
				   "PostgreSQL could not be read for the status page.");
		j->req = NULL;
		jreq_maybe_free(j);
		return;
	}
	j->pg = PQcopyResult(res, PG_COPYRES_ATTRS | PG_COPYRES_TUPLES);
	if (!j->pg) {
		http_respond_error(j->req, 500, "internal", "Out of memory.");
		j->req = NULL;
		jreq_maybe_free(j);
		return;
	}
	/* the rows, grouped by organisation (both sorted bytewise) */
	int row = 0, nrows = PQntuples(j->pg);
	for (unsigned i = 0; i < j->n_orgs; i++) {
		struct jorg *o = &j->o[i];
		while (row < nrows && strcmp(PQgetvalue(j->pg, row, 0), o->id) < 0)
			row++;
		if (row < nrows && strcmp(PQgetvalue(j->pg, row, 0), o->id) == 0)
			cJSON_AddStringToObject(o->obj, "name", PQgetvalue(j->pg, row, 1));
		o->row0 = row;
		while (row < nrows && strcmp(PQgetvalue(j->pg, row, 0), o->id) == 0 &&
		       !PQgetisnull(j->pg, row, 2))
			row++, o->rows++;
		if (o->rows == 0 && row < nrows && strcmp(PQgetvalue(j->pg, row, 0), o->id) == 0)
			row++; /* the organisation's row without campaigns */
		if (o->rows && !(o->meta = calloc((size_t)o->rows, sizeof(*o->meta)))) {
			o->rows = 0;
			j->complete = false;
		}
		for (int k = 0; k < o->rows; k++)
			o->meta[k] = (struct capacity_meta){
				.id = PQgetvalue(j->pg, o->row0 + k, 2),
				.state = state_of(PQgetvalue(j->pg, o->row0 + k, 4)),
				.active = PQgetvalue(j->pg, o->row0 + k, 5)[0] == 't',
			};
	}
	j->sending = true;
	for (unsigned i = 0; i < j->n_orgs; i++) {
		struct jorg *o = &j->o[i];
		if (!j->gate) {
			campaigns_from_pg(o);
			continue;
		}
		j->pending++;
		if (gate_read(g, o->id, read_cb, o)) {
			j->pending--;
			j->complete = false;
			cJSON_AddStringToObject(o->obj, "error", "the gate could not be read");
		}
		j->pending++;
		if (gate_read_stats(g, o->id, stats_cb, o))
			j->pending--;
	}
	j->sending = false;
	maybe_answer(j);
	jreq_maybe_free(j);
}

void wstatus_json(struct http_request *req, void *data)
{
	struct wstatus *s = data;
	struct gate_mode_state ms;
	struct org_list l = { 0 };
	struct jreq *j = calloc(1, sizeof(*j));
	struct pgarr arr;
	int rc;

	s->last_view = uv_now(worker_loop(s->w));
	if (!j || list_orgs(s, &l) || !(j->root = cJSON_CreateObject()) ||
	    !(j->o = calloc(l.n ? l.n : 1, sizeof(*j->o)))) {
		if (j)
			cJSON_Delete(j->root);
		free(j);
		free(l.ids);
		http_respond_error(req, 500, "internal", "Out of memory.");
		return;
	}
	j->s = s;
	j->req = req;
	j->complete = !l.truncated;
	j->gate = gate_usable(s, &ms);
	j->n_orgs = l.n;
	cJSON_AddNumberToObject(j->root, "now_ms", (double)wall_ms());
	cJSON_AddStringToObject(j->root, "gate_mode", gate_mode_name(ms.mode));
	cJSON_AddBoolToObject(j->root, "gate_usable", j->gate);
	if (!j->gate)
		cJSON_AddStringToObject(
			j->root, "note",
			"The gate is not in a usable redis mode: the campaigns are listed from "
			"PostgreSQL (live calls and pending contacts); limits, the binding limit "
			"and "
			"refusals are the Redis gate's and are not shown, and no sample is taken.");
	j->orgs = cJSON_AddArrayToObject(j->root, "organisations");
	for (unsigned i = 0; i < l.n && j->orgs; i++) {
		struct jorg *o = &j->o[i];
		o->j = j;
		snprintf(o->id, sizeof(o->id), "%s", l.ids[i]);
		if ((o->obj = cJSON_CreateObject())) {
			cJSON_AddItemToArray(j->orgs, o->obj);
			cJSON_AddStringToObject(o->obj, "id", o->id);
		}
	}
	free(l.ids);
	if (!j->orgs || (l.n && !j->o[l.n - 1].obj)) {
		http_respond_error(req, 500, "internal", "Out of memory.");
		j->req = NULL;
		jreq_maybe_free(j);
		return;
	}
	if (!j->n_orgs) {
		answer(j);
		jreq_maybe_free(j);
		return;
	}
	pgarr_init(&arr);
	for (unsigned i = 0; i < j->n_orgs; i++)
		pgarr_text(&arr, j->o[i].id);
	const char *lit = pgarr_end(&arr);
	struct pg_query q = { .sql = SQL_ORGS,
			      .nparams = 1,
			      .values = (const char *const[]){ lit } };
	j->pending++;
	rc = lit ? pg_pool_exec(worker_pool(s->w), PG_LANE_NORMAL, &q, pg_done, j) : -ENOMEM;
	pgarr_free(&arr);
	if (rc) {
		j->pending--;
		http_respond_error(req, 503, "unavailable",
				   "PostgreSQL could not be read for the status page.");
		j->req = NULL;
		jreq_maybe_free(j);
	}
}
