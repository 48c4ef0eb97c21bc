/* The provider stub's ground truth (GET /stats), control routes and lifetime. */
#include "stub_int.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* ---- GET /stats ---- */

struct stats_ctx {
	cJSON *obj;
	uint64_t now; /* uv_now of the snapshot */
};

static void add_org(const char *key, void *val, void *data)
{
	struct stub_org *o = val;
	cJSON *j = cJSON_AddObjectToObject(((struct stats_ctx *)data)->obj, key);

	cJSON_AddNumberToObject(j, "live", (double)o->live);
	cJSON_AddNumberToObject(j, "max_live", (double)o->max_live);
	cJSON_AddNumberToObject(j, "live_ms",
				(double)stub_live_ms(o->live_ms, o->live_at, o->live,
						     ((struct stats_ctx *)data)->now));
	cJSON_AddNumberToObject(j, "placed", (double)o->placed);
	cJSON_AddNumberToObject(j, "requests", (double)o->requests);
	cJSON_AddNumberToObject(j, "throttled_429", (double)o->throttled_429);
	cJSON_AddNumberToObject(j, "throttled_body", (double)o->throttled_body);
	cJSON_AddNumberToObject(j, "errors_5xx", (double)o->errors_5xx);
}

static void add_campaign(const char *key, void *val, void *data)
{
	struct stub_campaign *c = val;
	cJSON *j = cJSON_AddObjectToObject(((struct stats_ctx *)data)->obj, key);

	cJSON_AddNumberToObject(j, "live", (double)c->live);
	cJSON_AddNumberToObject(j, "max_live", (double)c->max_live);
	cJSON_AddNumberToObject(j, "live_ms",
				(double)stub_live_ms(c->live_ms, c->live_at, c->live,
						     ((struct stats_ctx *)data)->now));
	cJSON_AddNumberToObject(j, "placed", (double)c->placed);
}

char *stub_stats_json(struct stub *s)
{
	cJSON *j = cJSON_CreateObject();
	struct stats_ctx ctx = { .now = uv_now(s->loop) };
	struct http_server_stats ss = { .accepted = s->accepted_at_close };

	if (s->server && !s->server_closed)
		http_server_stats(s->server, &ss);
	const struct {
		const char *name;
		uint64_t v;
	} top[] = {
		{ "requests", s->requests },
		{ "calls_placed", s->placed },
		{ "replays", s->replays },
		{ "duplicates", s->duplicates },
		{ "throttled_429", s->throttled_429 },
		{ "throttled_body", s->throttled_body },
		{ "errors_5xx", s->errors_5xx },
		{ "rejected", s->rejected },
		{ "live", s->live },
		{ "max_live", s->max_live },
		{ "live_ms", stub_live_ms(s->live_ms, s->live_at, s->live, ctx.now) },
		{ "now_ms", ctx.now },
		{ "first_dial_ms", s->first_dial_at },
		{ "events_sent", s->events_sent },
		{ "events_failed", s->events_failed },
		{ "events_dropped", s->events_dropped },
		{ "events_duplicated", s->events_duplicated },
		{ "events_reordered", s->events_reordered },
		{ "events_early", s->events_early },
		{ "events_pending", 0 },
		{ "connections_accepted", ss.accepted },
	};
	char *out;

	for (size_t i = 0; i < sizeof(top) / sizeof(top[0]); i++)
		cJSON_AddNumberToObject(j, top[i].name, (double)top[i].v);
	unsigned pending = 0;
	struct list_node *n, *tmp;
	list_for_each_safe (n, tmp, &s->events)
		pending++;
	cJSON_ReplaceItemInObject(j, "events_pending", cJSON_CreateNumber(pending));
	ctx.obj = cJSON_AddObjectToObject(j, "outcomes");
	for (int i = 0; i < STUB_OUTCOMES; i++)
		cJSON_AddNumberToObject(ctx.obj, stub_outcome_name((enum stub_outcome)i),
					(double)s->outcomes[i]);
	ctx.obj = cJSON_AddObjectToObject(j, "orgs");
	map_each(&s->orgs, add_org, &ctx);
	ctx.obj = cJSON_AddObjectToObject(j, "campaigns");
	map_each(&s->campaigns, add_campaign, &ctx);
	out = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	return out;
}

static void h_stats(struct http_request *req, void *data)
{
	char *out = stub_stats_json(data);

	if (!out) {
		http_respond_error(req, 500, "internal", "Out of memory.");
		return;
	}
	http_respond(req, 200, "application/json", out, strlen(out));
	free(out);
}

/* GET /handoff: per armed organisation, the hand-off samples since it was armed. */
static void h_handoff_get(struct http_request *req, void *data);

static void h_healthz(struct http_request *req, void *data)
{
	(void)data;
	http_respond(req, 200, "application/json", "{\"ok\":true}", 11);
}

/* ---- control ---- */

/* Reads the body as a JSON object, or answers (400, or 503 once the stub is closing: nothing
 * may start then) and returns NULL. */
static cJSON *json_body(struct stub *s, struct http_request *req)
{
	size_t len;
	const char *b = http_request_body(req, &len);
	cJSON *j;

	if (s->closing) {
		http_respond_error(req, 503, "closing", "The stub is shutting down.");
		return NULL;
	}
	j = cJSON_ParseWithLength(b, len);
	if (!cJSON_IsObject(j)) {
		cJSON_Delete(j);
		http_respond_error(req, 400, "invalid_json", "The body is not a JSON object.");
		return NULL;
	}
	return j;
}

struct end_ctx {
	const char *key, *call_id, *org;
	bool all;
	int status;
	unsigned ended;
};

static void end_one(const char *key, void *val, void *data)
{
	struct stub_call *c = val;
	struct end_ctx *e = data;

	if (c->stage == 3)
		return;
	if (e->all || (e->key && strcmp(e->key, key) == 0) ||
	    (e->call_id && strcmp(e->call_id, c->call_id) == 0) ||
	    (e->org && strcmp(e->org, c->org) == 0)) {
		stub_call_end(c, e->status);
		e->ended++;
	}
}

static const char *opt_str(const cJSON *j, const char *name)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(j, name);

	return cJSON_IsString(f) ? f->valuestring : NULL;
}

static void h_end(struct http_request *req, void *data)
{
	struct stub *s = data;
	cJSON *j = json_body(s, req);
	struct end_ctx e = { 0 };
	char out[48];

	if (!j)
		return;
	e.key = opt_str(j, "idempotency_key");
	e.call_id = opt_str(j, "call_id");
	e.org = opt_str(j, "org_id");
	e.all = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "all"));
	e.status = opt_str(j, "status") ? stub_outcome_parse(opt_str(j, "status")) : -1;
	if (opt_str(j, "status") && e.status < 0) {
		http_respond_error(req, 422, "invalid_field", "Unknown status.");
	} else {
		map_each(&s->calls, end_one, &e);
		snprintf(out, sizeof(out), "{\"ended\":%u}", e.ended);
		http_respond(req, 200, "application/json", out, strlen(out));
	}
	cJSON_Delete(j);
}

static void h_org(struct http_request *req, void *data)
{
	struct stub *s = data;
	cJSON *j = json_body(s, req);
	const char *org;
	struct stub_org_config o;

	if (!j)
		return;
	if (!(org = opt_str(j, "org_id"))) {
		http_respond_error(req, 422, "invalid_field", "org_id is required.");
	} else {
		o = strcmp(org, "*") == 0 ? s->cfg.defaults : *stub_org_cfg(s, org);
		if (stub_org_from_json(&o, j) || stub_set_org(s, org, &o))
			http_respond_error(req, 422, "invalid_field", "A setting is invalid.");
		else
			http_respond(req, 200, "application/json", "{\"ok\":true}", 11);
	}
	cJSON_Delete(j);
}

/* POST /control/handoff {"org_id":o,"lines":L}: (re)starts the hand-off measurement of o with
 * L lines (0: off), forgetting earlier samples. */
static void h_handoff(struct http_request *req, void *data)
{
	struct stub *s = data;
	cJSON *j = json_body(s, req);
	const char *org;
	const cJSON *l;
	struct stub_org *o;

	if (!j)
		return;
	l = cJSON_GetObjectItemCaseSensitive(j, "lines");
	if (!(org = opt_str(j, "org_id")) || !cJSON_IsNumber(l) || l->valuedouble < 0 ||
	    l->valuedouble > 1000000 || l->valuedouble != (double)(uint32_t)l->valuedouble)
		http_respond_error(req, 422, "invalid_field",
				   "org_id and lines (0..1000000) are required.");
	else if (!(o = stub_org_get(s, org)) ||
		 stub_handoff_arm(&o->handoff, (uint32_t)l->valueint))
		http_respond_error(req, 500, "internal", "Out of memory.");
	else
		http_respond(req, 200, "application/json", "{\"ok\":true}", 11);
	cJSON_Delete(j);
}

static void add_handoff(const char *key, void *val, void *data)
{
	struct stub_org *o = val;
	struct stub_handoff_summary sum;
	cJSON *j;

	if (!o->handoff.lines || stub_handoff_summarise(&o->handoff, &sum))
		return;
	j = cJSON_AddObjectToObject(data, key);
	cJSON_AddNumberToObject(j, "lines", o->handoff.lines);
	cJSON_AddNumberToObject(j, "samples", (double)sum.n);
	cJSON_AddNumberToObject(j, "p50_us", sum.p50_us);
	cJSON_AddNumberToObject(j, "p90_us", sum.p90_us);
	cJSON_AddNumberToObject(j, "p99_us", sum.p99_us);
	cJSON_AddNumberToObject(j, "max_us", sum.max_us);
	cJSON_AddNumberToObject(j, "waiting", o->handoff.len);
	cJSON_AddNumberToObject(j, "dropped", (double)o->handoff.dropped);
	cJSON_AddNumberToObject(j, "lost", (double)o->handoff.lost);
}

static void h_handoff_get(struct http_request *req, void *data)
{
	struct stub *s = data;
	cJSON *j = cJSON_CreateObject();
	char *out = NULL;

	if (j)
		map_each(&s->orgs, add_handoff, cJSON_AddObjectToObject(j, "orgs"));
	if (!j || !(out = cJSON_PrintUnformatted(j))) {
		http_respond_error(req, 500, "internal", "Out of memory.");
	} else {
		http_respond(req, 200, "application/json", out, strlen(out));
	}
	cJSON_free(out);
	cJSON_Delete(j);
}

static void h_hold(struct http_request *req, void *data)
{
	struct stub *s = data;
	cJSON *j = json_body(s, req);

	if (!j)
		return;
	s->cfg.hold = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "hold"));
	http_respond(req, 200, "application/json", "{\"ok\":true}", 11);
	cJSON_Delete(j);
}

int stub_config_orgs(struct stub *s, const void *json)
{
	const cJSON *orgs, *o;
	int err = 0;

	if (!json)
		return 0;
	orgs = cJSON_GetObjectItemCaseSensitive(json, "orgs");
	cJSON_ArrayForEach(o, orgs)
	{
		struct stub_org_config c = s->cfg.defaults;
		if (!err && (stub_org_from_json(&c, o) || stub_set_org(s, o->string, &c)))
			err = -EINVAL;
	}
	return err;
}

/* ---- lifetime ---- */

static bool loopback_host(const char *h)
{
	return h &&
	       (strncmp(h, "127.", 4) == 0 || strcmp(h, "localhost") == 0 || strcmp(h, "::1") == 0);
}

int stub_new(uv_loop_t *loop, const struct stub_config *cfg, struct stub **out)
{
	struct stub *s;
	struct http_server_config sc;
	struct http_client_config cc;
	int err;

	if (!loopback_host(cfg->host))
		return -EINVAL;
	if (!(s = calloc(1, sizeof(*s))))
		return -ENOMEM;
	s->loop = loop;
	s->cfg = *cfg;
	list_init(&s->events);
	list_init(&s->delayed);
	const struct http_route routes[] = {
		{ "POST", "/calls", 64 * 1024, stub_handle_dial, s, false },
		{ "GET", "/stats", 0, h_stats, s, false },
		{ "GET", "/healthz", 0, h_healthz, s, false },
		{ "POST", "/control/end", 4096, h_end, s, false },
		{ "POST", "/control/org", 4096, h_org, s, false },
		{ "POST", "/control/hold", 4096, h_hold, s, false },
		{ "POST", "/control/handoff", 4096, h_handoff, s, false },
		{ "GET", "/handoff", 0, h_handoff_get, s, false },
	};
	http_server_config_defaults(&sc);
	sc.host = strcmp(cfg->host, "localhost") == 0 ? "127.0.0.1" : cfg->host;
	sc.port = cfg->port;
	sc.max_connections = 4096;
	http_client_config_defaults(&cc);
	cc.no_proxy = true; /* events go straight to the loopback receiver, never via a proxy */
	if ((err = http_client_new(loop, &cc, &s->client))) {
		free(s);
		return err;
	}
	if ((err = http_server_new(loop, &sc, routes, sizeof(routes) / sizeof(routes[0]),
				   &s->server))) {
		s->server_closed = true;
		stub_close(s, NULL, NULL);
		return err;
	}
	*out = s;
	return 0;
}

int stub_port(const struct stub *s)
{
	return http_server_port(s->server);
}

static void org_free(void *p)
{
	struct stub_org *o = p;

	stub_handoff_free(&o->handoff);
	free(o);
}

static void free_ptr(void *p)
{
	free(p);
}

static void stub_maybe_done(struct stub *s)
{
	if (!s->closing || !s->server_closed || !s->client_closed || s->closing_handles > 0)
		return;
	/* Close whatever started while the close was under way (nothing should: dials and
	 * control are refused once closing), and free only after those handles are closed. */
	stub_events_close(s);
	if (s->closing_handles > 0)
		return;
	stub_calls_free(s);
	map_free(&s->orgs, org_free);
	map_free(&s->campaigns, free_ptr);
	map_free(&s->attempts, free_ptr);
	map_free(&s->key_tries, NULL);
	map_free(&s->call_ids, NULL);
	free(s->cb_in);
	free(s->cb_out);
	if (s->close_cb)
		s->close_cb(s, s->close_data);
	free(s);
}

void stub_handle_closed(struct stub *s)
{
	s->closing_handles--;
	stub_maybe_done(s);
}

static void on_server_closed(struct http_server *srv, void *data)
{
	struct stub *s = data;

	struct http_server_stats ss;

	http_server_stats(srv, &ss);
	s->accepted_at_close = ss.accepted;
	s->server_closed = true;
	stub_maybe_done(s);
}

static void on_client_closed(struct http_client *c, void *data)
{
	struct stub *s = data;

	(void)c;
	s->client_closed = true;
	stub_maybe_done(s);
}

void stub_close(struct stub *s, stub_close_cb cb, void *data)
{
	if (s->closing)
		return;
	s->closing = true;
	s->close_cb = cb;
	s->close_data = data;
	s->closing_handles++; /* held until the end of this function */
	stub_events_close(s);
	stub_delayed_flush(s);
	if (s->server)
		http_server_close(s->server, on_server_closed, s);
	http_client_close(s->client, on_client_closed, s);
	stub_handle_closed(s);
}
