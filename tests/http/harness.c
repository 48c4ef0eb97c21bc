#include "harness.h"

#include <cjson/cJSON.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static void on_event(struct http_request *req, void *data)
{
	struct harness *h = data;
	size_t len;
	const char *body = http_request_body(req, &len);
	const char *sig = http_request_header(req, "X-Signature");

	if (h->nevents < HARNESS_MAX_EVENTS) {
		struct received *e = &h->events[h->nevents++];
		snprintf(e->body, sizeof(e->body), "%.*s", (int)len, body);
		snprintf(e->signature, sizeof(e->signature), "%s", sig ? sig : "");
	}
	http_respond(req, h->recv_status, "application/json", "{}", 2);
}

struct harness *harness_start(const struct stub_config *cfg)
{
	struct harness *h = calloc(1, sizeof(*h));
	struct stub_config sc;
	struct http_server_config rc;
	const struct http_route routes[] = { { "POST", "/events", 65536, on_event, h, false } };

	h->recv_status = 200;
	assert_int_equal(uv_loop_init(&h->loop), 0);
	if (cfg)
		sc = *cfg;
	else
		stub_config_defaults(&sc);
	assert_int_equal(stub_new(&h->loop, &sc, &h->stub), 0);
	h->stub_port = stub_port(h->stub);
	http_server_config_defaults(&rc);
	assert_int_equal(http_server_new(&h->loop, &rc, routes, 1, &h->recv), 0);
	h->recv_port = http_server_port(h->recv);
	struct http_client_config cc;
	http_client_config_defaults(&cc);
	cc.no_proxy = true; /* the tests talk to loopback only, whatever the environment says */
	assert_int_equal(http_client_new(&h->loop, &cc, &h->client), 0);
	return h;
}

static void on_stub_closed(struct stub *s, void *data)
{
	((struct harness *)data)->stub_closed = true;
}

static void on_recv_closed(struct http_server *s, void *data)
{
	((struct harness *)data)->recv_closed = true;
}

static void on_client_closed(struct http_client *c, void *data)
{
	((struct harness *)data)->client_closed = true;
}

void harness_stop(struct harness *h)
{
	if (h->stub) /* NULL: the test closed it, and it is freed */
		stub_close(h->stub, on_stub_closed, h);
	http_client_close(h->client, on_client_closed, h);
	http_server_close(h->recv, on_recv_closed, h);
	uv_run(&h->loop, UV_RUN_DEFAULT);
	assert_true(h->stub_closed && h->recv_closed && h->client_closed);
	assert_int_equal(uv_loop_close(&h->loop), 0);
	free(h);
}

static void on_deadline(uv_timer_t *t)
{
	*(bool *)t->data = true;
}

static void on_wait_closed(uv_handle_t *h)
{
}

struct wait {
	struct harness *h;
	bool (*done)(struct harness *, const void *);
	const void *arg;
};

/* Before the loop blocks for I/O: a condition met by a timer or idle callback of this
 * iteration must not wait for the next event to be seen. */
static void on_wait_prepare(uv_prepare_t *p)
{
	struct wait *w = p->data;

	if (w->done(w->h, w->arg))
		uv_stop(p->loop);
}

/* Runs the loop until done(h, arg) holds, failing the test after HARNESS_DEADLINE_MS. */
static void wait_for(struct harness *h, bool (*done)(struct harness *, const void *),
		     const void *arg)
{
	struct wait w = { h, done, arg };
	uv_timer_t t;
	uv_prepare_t p;
	bool expired = false;

	uv_timer_init(&h->loop, &t);
	t.data = &expired;
	uv_timer_start(&t, on_deadline, HARNESS_DEADLINE_MS, 0);
	uv_prepare_init(&h->loop, &p);
	p.data = &w;
	uv_prepare_start(&p, on_wait_prepare);
	while (!done(h, arg) && !expired)
		uv_run(&h->loop, UV_RUN_ONCE);
	uv_close((uv_handle_t *)&t, on_wait_closed);
	uv_close((uv_handle_t *)&p, on_wait_closed);
	uv_run(&h->loop, UV_RUN_NOWAIT);
	assert_false(expired);
}

static bool flag_set(struct harness *h, const void *arg)
{
	return *(const bool *)arg;
}

static bool have_events(struct harness *h, const void *arg)
{
	return h->nevents >= *(const unsigned *)arg;
}

struct stat_goal {
	const char *path;
	double v;
};

static bool stat_reached(struct harness *h, const void *arg)
{
	const struct stat_goal *g = arg;

	return harness_stat(h, g->path) >= g->v;
}

void harness_wait(struct harness *h, const bool *flag)
{
	wait_for(h, flag_set, flag);
}

void harness_wait_events(struct harness *h, unsigned n)
{
	wait_for(h, have_events, &n);
}

void harness_wait_stat(struct harness *h, const char *path, double v)
{
	struct stat_goal g = { path, v };

	wait_for(h, stat_reached, &g);
}

static void on_reply(const struct http_client_response *resp, void *data)
{
	struct reply *r = data;
	const char *ra = http_client_response_header(resp, "Retry-After");

	r->cls = resp->cls;
	r->status = resp->status;
	r->new_connections = resp->new_connections;
	snprintf(r->body, sizeof(r->body), "%s", resp->body);
	snprintf(r->retry_after, sizeof(r->retry_after), "%s", ra ? ra : "");
	r->events_at_done = r->h ? r->h->nevents : 0;
	r->done = true;
}

static void request_async(struct harness *h, const char *method, const char *path, const char *body,
			  const char *const *headers, size_t nheaders, uint64_t timeout_ms,
			  struct reply *r)
{
	char url[256];
	struct http_client_request req = { .method = method,
					   .url = url,
					   .headers = headers,
					   .nheaders = nheaders,
					   .body = body,
					   .body_len = body ? strlen(body) : 0,
					   .timeout_ms = timeout_ms };

	memset(r, 0, sizeof(*r));
	r->h = h;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", h->stub_port, path);
	assert_int_equal(http_client_send(h->client, &req, on_reply, r, NULL), 0);
}

void harness_request(struct harness *h, const char *method, const char *path, const char *body,
		     const char *const *headers, size_t nheaders, uint64_t timeout_ms,
		     struct reply *r)
{
	request_async(h, method, path, body, headers, nheaders, timeout_ms, r);
	harness_wait(h, &r->done);
}

void harness_dial_async(struct harness *h, const char *key, const char *org, const char *campaign,
			const char *contact, int attempt, struct reply *r)
{
	char body[1024], hk[256];
	const char *headers[] = { "Content-Type: application/json", hk };

	snprintf(hk, sizeof(hk), "Idempotency-Key: %s", key);
	snprintf(body, sizeof(body),
		 "{\"to\":\"+15551230000\",\"from\":null,\"org_id\":\"%s\",\"campaign_id\":\"%s\","
		 "\"agent_id\":\"ag1\",\"contact_id\":\"%s\",\"attempt\":%d,"
		 "\"callback_url\":\"http://127.0.0.1:%d/events\"}",
		 org, campaign, contact, attempt, h->recv_port);
	request_async(h, "POST", "/calls", body, headers, 2, 0, r);
}

void harness_dial(struct harness *h, const char *key, const char *org, const char *campaign,
		  const char *contact, int attempt, struct reply *r)
{
	harness_dial_async(h, key, org, campaign, contact, attempt, r);
	harness_wait(h, &r->done);
}

double harness_stat(struct harness *h, const char *path)
{
	char *text = stub_stats_json(h->stub); /* same JSON as GET /stats, without a round trip */
	cJSON *root = cJSON_Parse(text), *j = root;
	char buf[128], *save = NULL;
	double v = -1;

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *tok = strtok_r(buf, ".", &save); tok && j; tok = strtok_r(NULL, ".", &save))
		j = cJSON_GetObjectItemCaseSensitive(j, tok);
	if (cJSON_IsNumber(j))
		v = j->valuedouble;
	cJSON_Delete(root);
	free(text);
	return v;
}

int harness_control(struct harness *h, const char *route, const char *json)
{
	struct reply r;
	const char *headers[] = { "Content-Type: application/json" };

	harness_request(h, "POST", route, json, headers, 1, 0, &r);
	return r.status;
}
