/* Helpers of the worker's events / call_end / sweep tests (issue 9): one loop with the Redis
 * gate (gate_harness.h), a pool with call_end, events and sweep prepared on it, the events
 * endpoint on a server, a client that posts signed events, and the rows a call needs. Include
 * after cmocka.h. */
#ifndef DSP_TEST_WORKER_ENV_H
#define DSP_TEST_WORKER_ENV_H

#include "call_end.h"
#include "dial.h"
#include "events.h"
#include "gate_harness.h"
#include "gate_pg_test.h"
#include "http_client.h"
#include "http_server.h"
#include "signing.h"
#include "sweep.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#define WENV_SECRET "whsec-test"

struct wenv {
	struct gate_env ge;
	struct pg_pool *pool;
	struct dial *dial;	    /* wenv_open_dial(): the sweep's re-send dialer, else NULL */
	int dialed;		    /* its done_cb calls */
	enum dial_disposition last; /* the last one's disposition */
	struct call_end *ce;
	struct events *ev;
	struct sweep *sw;
	struct http_server *srv;
	struct http_client *cli;
	int closed;
	int notifies;	   /* NOTIFYs on the free channel */
	char notified[65]; /* the last payload */
};

static inline void wenv_free_cb(const char *channel, const char *payload, void *data)
{
	struct wenv *w = data;

	(void)channel;
	w->notifies++;
	snprintf(w->notified, sizeof(w->notified), "%s", payload);
}

static inline bool wenv_up(void *arg)
{
	struct wenv *w = arg;
	return pg_pool_up_count(w->pool) == pg_pool_size(w->pool);
}

static inline void wenv_dialed(struct dial *d, const struct dial_result *r, void *data)
{
	struct wenv *w = data;

	(void)d;
	w->last = r->disposition;
	w->dialed++;
}

static inline void wenv_open_ex(struct wenv *w, const struct embedded *svc,
				const struct sweep_options *so, bool with_dial, const char *url,
				uint64_t timeout_ms);

/* Opens everything; so (may be NULL) are the sweep's options (loop, pool, ends, worker_id are
 * filled in). */
static inline void wenv_open(struct wenv *w, const struct embedded *svc,
			     const struct sweep_options *so)
{
	wenv_open_ex(w, svc, so, false, NULL, 0);
}

/* As wenv_open(), with a dialer (w->dial), also the sweep's re-send job's (owner: the sweep's
 * worker id, lease so->lease_ms), whose provider is url (NULL: a closed port: what it is handed
 * is counted, never placed) with the request deadline timeout_ms (0: the default). */
static inline void wenv_open_dial(struct wenv *w, const struct embedded *svc,
				  const struct sweep_options *so, const char *url,
				  uint64_t timeout_ms)
{
	wenv_open_ex(w, svc, so, true, url, timeout_ms);
}

static inline void wenv_open_ex(struct wenv *w, const struct embedded *svc,
				const struct sweep_options *so, bool with_dial, const char *url,
				uint64_t timeout_ms)
{
	struct pg_pool_options po = {
		.conninfo = svc->database_url,
		.name = "worker",
		.size = 2,
		.priority_size = 1,
		.connect_timeout_ms = 10000,
		.query_timeout_ms = 60000,
		.reconnect_min_ms = 20,
		.reconnect_max_ms = 200,
	};
	struct sweep_options sopt = { 0 };
	struct http_server_config hc;

	memset(w, 0, sizeof(*w));
	genv_open(&w->ge, svc->redis_url, "worker", true);
	assert_int_equal(pg_pool_new(&w->ge.loop, &po, &w->pool), 0);
	struct call_end_options co = { .loop = &w->ge.loop, .pool = w->pool, .gate = w->ge.g };
	assert_int_equal(call_end_new(&co, &w->ce), 0);
	struct events_options eo = {
		.loop = &w->ge.loop, .pool = w->pool, .ends = w->ce, .secret = WENV_SECRET
	};
	assert_int_equal(events_new(&eo, &w->ev), 0);
	if (so)
		sopt = *so;
	sopt.loop = &w->ge.loop;
	sopt.pool = w->pool;
	sopt.ends = w->ce;
	if (!sopt.worker_id)
		sopt.worker_id = "w1";
	if (with_dial) {
		struct dial_options dopt = { .loop = &w->ge.loop,
					     .pool = w->pool,
					     .provider_url = url ? url : "http://127.0.0.1:1",
					     .timeout_ms = timeout_ms,
					     .callback_url = "http://127.0.0.1:1/provider/events",
					     .owner = sopt.worker_id,
					     .lease_ms = sopt.lease_ms,
					     .lease_left_ms = sopt.lease_ms,
					     .done_cb = wenv_dialed,
					     .data = w };
		lane_config_defaults(&dopt.lane);
		retry_policy_defaults(&dopt.policy);
		assert_int_equal(dial_new(&dopt, &w->dial), 0);
		sopt.dial = w->dial;
	}
	assert_int_equal(sweep_new(&sopt, &w->sw), 0);
	assert_int_equal(pg_pool_listen(w->pool, GATE_PG_CHANNEL_FREE, wenv_free_cb, w), 0);
	assert_int_equal(pg_pool_start(w->pool), 0);
	fixture_run_until(&w->ge.loop, wenv_up, w, 60000);
	http_server_config_defaults(&hc);
	struct http_route route = events_route(w->ev);
	assert_int_equal(http_server_new(&w->ge.loop, &hc, &route, 1, &w->srv), 0);
	assert_int_equal(http_client_new(&w->ge.loop, NULL, &w->cli), 0);
}

static inline void wenv_count_cb(void *data)
{
	(*(int *)data)++;
}

static inline void wenv_srv_closed(struct http_server *s, void *data)
{
	(void)s;
	(*(int *)data)++;
}

static inline void wenv_cli_closed(struct http_client *c, void *data)
{
	(void)c;
	(*(int *)data)++;
}

static inline void wenv_close(struct wenv *w)
{
	if (w->dial) {
		int n = 0;
		dial_close(w->dial, wenv_count_cb, &n);
		fixture_run_until_count(&w->ge.loop, &n, 1, 60000);
	}
	events_close(w->ev, wenv_count_cb, &w->closed);
	sweep_close(w->sw, wenv_count_cb, &w->closed);
	call_end_close(w->ce, wenv_count_cb, &w->closed);
	http_server_close(w->srv, wenv_srv_closed, &w->closed);
	http_client_close(w->cli, wenv_cli_closed, &w->closed);
	pg_pool_close(w->pool, wenv_count_cb, &w->closed);
	fixture_run_until_count(&w->ge.loop, &w->closed, 6, 60000);
	genv_close(&w->ge);
}

/* --- posting events --- */

struct wpost {
	int done, status;
	char body[256];
};

static inline void wenv_posted(const struct http_client_response *r, void *data)
{
	struct wpost *p = data;

	p->done++;
	p->status = r->cls == HTTP_CLIENT_OK ? r->status : -1;
	snprintf(p->body, sizeof(p->body), "%s", r->body ? r->body : "");
}

/* Sends body with header sig ("" for no X-Signature; NULL: signed now with the secret) without
 * waiting. */
static inline void wenv_post_async(struct wenv *w, const char *body, const char *sig,
				   struct wpost *p)
{
	char url[64], hdr[SIGNING_HEADER_MAX + 16] = "X-Signature: ";
	const char *headers[2] = { "Content-Type: application/json", hdr };
	size_t nh = 2;

	snprintf(url, sizeof(url), "http://127.0.0.1:%d" EVENTS_PATH, http_server_port(w->srv));
	if (!sig)
		assert_int_equal(signing_sign(WENV_SECRET, (int64_t)time(NULL), body, strlen(body),
					      hdr + 13, sizeof(hdr) - 13),
				 0);
	else if (sig[0])
		snprintf(hdr + 13, sizeof(hdr) - 13, "%s", sig);
	else
		nh = 1;
	struct http_client_request req = { .method = "POST",
					   .url = url,
					   .headers = headers,
					   .nheaders = nh,
					   .body = body,
					   .body_len = strlen(body) };
	memset(p, 0, sizeof(*p));
	assert_int_equal(http_client_send(w->cli, &req, wenv_posted, p, NULL), 0);
}

static inline int wenv_post(struct wenv *w, const char *body, const char *sig)
{
	struct wpost p;

	wenv_post_async(w, body, sig, &p);
	fixture_run_until_count(&w->ge.loop, &p.done, 1, 60000);
	return p.status;
}

/* An event body for call (our id) with the provider id pc. */
static inline const char *wenv_event(char *buf, size_t size, const char *call, const char *pc,
				     const char *status, int seq)
{
	snprintf(buf, size,
		 "{\"call_id\":\"%s\",\"idempotency_key\":\"%s\",\"status\":\"%s\","
		 "\"sequence\":%d,\"occurred_at\":\"2024-05-01T12:00:00.250Z\"}",
		 pc, call, status, seq);
	return buf;
}

/* --- rows --- */

/* A call of contact k of campaign <org>_c0 holding a Redis slot, with its call row written
 * (state dialing, no provider id: as before the dial's 201) and the contact dialing. */
static inline void wenv_call(struct wenv *w, PGconn *admin, const char *org, const char *call,
			     long long k)
{
	char camp[32];

	snprintf(camp, sizeof(camp), "%s_c0", org);
	struct admit_out a = genv_admit(&w->ge, org, call, camp);
	assert_int_equal(a.status, 0);
	assert_int_equal(a.r.outcome, GATE_ADMITTED);
	gp_sql(admin,
	       "INSERT INTO calls (id, org_id, campaign_id, agent_id, contact_id, to_number,"
	       " gate_mode, gate_epoch) SELECT '%s', org_id, campaign_id, '%s_a0', id, phone,"
	       " 'redis', (SELECT gate_epoch FROM system_settings) FROM contacts WHERE id = %lld",
	       call, org, k);
	gp_sql(admin, "UPDATE contacts SET state = 'dialing' WHERE id = %lld", k);
}

/* The org's live calls as the Redis gate counts them. */
static inline uint32_t wenv_running(struct wenv *w, const char *org)
{
	struct view_copy v;

	assert_int_equal(genv_read(&w->ge, org, &v), 0);
	return v.v.org_running;
}

/* A text cell (admin read) into buf ("" for NULL). */
static inline const char *wenv_text(PGconn *admin, char *buf, size_t size, const char *sql)
{
	PGresult *r = fixture_sql(admin, sql);

	snprintf(buf, size, "%s", PQntuples(r) ? PQgetvalue(r, 0, 0) : "");
	PQclear(r);
	return buf;
}

#endif
