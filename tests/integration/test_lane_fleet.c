/* Fleet-wide lanes (issue 9 item 5; dispatcher/worker/lane_fleet.h, dial.h) against a real Redis
 * (and PostgreSQL for the dialer's attempt rows):
 *   - lane_take.lua's bucket equals core/token_bucket.c over ≥ 10,000 random steps (pinned
 *     clock: the lane hash's clock_ms);
 *   - three connections taking one lane's tokens as fast as they can get at most
 *     rate × T + burst (+1) over the window their takes saw on Redis's clock; the script's cost
 *     from INFO commandstats;
 *   - two dialers (two workers) on one lane send at the lane's rate together, not twice it;
 *   - a park written by one dialer holds the other's next send until it ends;
 *   - a 401 on one dialer stops the lane for the other (its call ends STOPPED, unsent), and the
 *     lane probes again after the interval: one probe, which clears the stop for both.
 * With per-worker lanes (the old dialer) the last three fail: each dialer sends at the full rate,
 * ignores the other's park and sends into the other's stop. */
#include "dial.h"
#include "fixture.h"
#include "http_server.h"
#include "lane_fleet.h"
#include "pg_pool.h"
#include "redis_conn.h"
#include "token_bucket.h"

#include <curl/curl.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#define WAIT_MS	 60000
#define NCONN	 3
#define PROVIDER "prov"

static struct embedded svc;
static redisContext *rc; /* blocking, for the test's own reads and writes */

/* ---- the test's blocking Redis ---- */

static long long rint_cmd(const char *fmt, ...)
{
	va_list ap;
	redisReply *r;
	long long v = 0;

	va_start(ap, fmt);
	r = redisvCommand(rc, fmt, ap);
	va_end(ap);
	assert_non_null(r);
	assert_int_not_equal(r->type, REDIS_REPLY_ERROR);
	if (r->type == REDIS_REPLY_INTEGER)
		v = r->integer;
	else if (r->type == REDIS_REPLY_STRING)
		v = strtoll(r->str, NULL, 10);
	else if (r->type == REDIS_REPLY_NIL)
		v = -1;
	freeReplyObject(r);
	return v;
}

static long long redis_now_ms(void)
{
	redisReply *r = redisCommand(rc, "TIME");
	long long v;

	assert_non_null(r);
	v = strtoll(r->element[0]->str, NULL, 10) * 1000 +
	    strtoll(r->element[1]->str, NULL, 10) / 1000;
	freeReplyObject(r);
	return v;
}

static const char *key_of(char *buf, size_t size, const char *org)
{
	snprintf(buf, size, "dsp:v1:{o:%s}:lane:" PROVIDER, org);
	return buf;
}

/* A field of org's lane, -1 when absent. */
static long long lane_field(const char *org, const char *field)
{
	char k[128];

	return rint_cmd("HGET %s %s", key_of(k, sizeof(k), org), field);
}

/* ---- connections with the lane scripts ---- */

struct env {
	uv_loop_t loop;
	struct redis_scripts *reg;
	struct redis_conn *conn[NCONN];
	struct lane_fleet *f[NCONN];
	int ups, closed;
};

static void on_conn(struct redis_conn *c, const struct redis_conn_event *ev, void *data)
{
	(void)c;
	if (ev->type == REDIS_CONN_UP)
		(*(int *)data)++;
}

static void env_open(struct env *e)
{
	memset(e, 0, sizeof(*e));
	assert_int_equal(uv_loop_init(&e->loop), 0);
	assert_int_equal(redis_scripts_new(&e->reg), 0);
	assert_int_equal(lane_fleet_scripts_register(e->reg), 0);
	for (int i = 0; i < NCONN; i++) {
		char name[16];
		snprintf(name, sizeof(name), "lane%d", i);
		struct redis_conn_options o = { .url = svc.redis_url,
						.name = name,
						.connect_timeout_ms = 10000,
						.command_timeout_ms = 30000,
						.reconnect_min_ms = 20,
						.reconnect_max_ms = 200,
						.scripts = e->reg,
						.event_cb = on_conn,
						.data = &e->ups };
		assert_int_equal(redis_conn_new(&e->loop, &o, &e->conn[i]), 0);
		assert_int_equal(redis_conn_start(e->conn[i]), 0);
		assert_int_equal(lane_fleet_new(e->conn[i], e->reg, PROVIDER, 5000, &e->f[i]), 0);
	}
	fixture_run_until_count(&e->loop, &e->ups, NCONN, WAIT_MS);
}

static void count_cb(void *data)
{
	(*(int *)data)++;
}

static void env_close(struct env *e)
{
	for (int i = 0; i < NCONN; i++) {
		lane_fleet_free(e->f[i]);
		redis_conn_close(e->conn[i], count_cb, &e->closed);
	}
	fixture_run_until_count(&e->loop, &e->closed, NCONN, WAIT_MS);
	redis_scripts_free(e->reg);
	fixture_loop_close(&e->loop);
}

struct take_out {
	int done;
	struct lane_take t;
};

static void took(const struct lane_take *t, void *data)
{
	struct take_out *o = data;

	o->t = *t;
	o->done = 1;
}

static struct lane_take take_sync(struct env *e, int i, const char *org, uint32_t rate,
				  uint32_t burst, uint32_t n)
{
	struct take_out o = { 0 };

	assert_int_equal(lane_fleet_take(e->f[i], org, rate, burst, n, took, &o), 0);
	fixture_run_until_count(&e->loop, &o.done, 1, WAIT_MS);
	assert_int_equal(o.t.status, 0);
	return o.t;
}

/* ---- Lua bucket == C bucket ---- */

static uint64_t rnd_state = 0x2545f4914f6cdd1dULL;

static uint32_t rnd(void)
{
	rnd_state ^= rnd_state << 13;
	rnd_state ^= rnd_state >> 7;
	rnd_state ^= rnd_state << 17;
	return (uint32_t)(rnd_state >> 16);
}

static void lua_bucket_equals_c(void **state)
{
	static const uint32_t rates[] = { 0, 1, 3, 7, 10, 50, 333, 1000, 4999, 100000 };
	struct env e;
	int steps = 0;
	char k[128];

	(void)state;
	env_open(&e);
	for (int seq = 0; seq < 24; seq++) {
		char org[16];
		struct token_bucket tb;
		uint32_t rate = rates[rnd() % (sizeof(rates) / sizeof(rates[0]))];
		uint32_t burst = rnd() % 8 == 0 ? 0 : 1 + rnd() % 20;
		int64_t now = 1700000000000LL + rnd() % 1000000;

		snprintf(org, sizeof(org), "eq%d", seq);
		rint_cmd("DEL %s", key_of(k, sizeof(k), org));
		token_bucket_init(&tb, rate, burst, now);
		for (int i = 0; i < 500; i++, steps++) {
			uint32_t r = rnd() % 100;
			uint32_t n = rnd() % 5 == 0 ? 1 + rnd() % 4 : 1;
			if (r < 30)
				; /* same millisecond */
			else if (r < 60)
				now += rnd() % 5;
			else if (r < 94)
				now += rnd() % (rate ? 2000 / rate + 3 : 10);
			else if (r < 97)
				now -= rnd() % 50; /* the clock went back: no refill */
			else
				now += rnd() % 100000;
			rint_cmd("HSET %s clock_ms %lld", k, (long long)now);
			struct lane_take t = take_sync(&e, i % NCONN, org, rate, burst, n);
			uint32_t granted = 0;
			uint64_t wait = 0;
			while (granted < n && !(wait = token_bucket_take(&tb, now)))
				granted++;
			assert_int_equal(t.now_ms, now);
			assert_int_equal(t.granted, granted);
			assert_int_equal(t.wait_ms, granted < n ? wait : 0);
			assert_int_equal(t.what, granted == n ? LANE_FLEET_GO : LANE_FLEET_BUCKET);
			if (rate)
				assert_int_equal(lane_field(org, "milli"), (long long)tb.milli);
		}
	}
	print_message("%d random steps: the Lua bucket and token_bucket.c agree\n", steps);
	assert_true(steps >= 10000);
	env_close(&e);
}

/* ---- three connections, one lane ---- */

#define RT_RATE	    500
#define RT_BURST    10
#define RT_INFLIGHT 4

struct racer {
	struct env *e;
	int i;
	long long granted, takes;
	int64_t first, last;
	long long stop_at;
	int inflight;
};

static void race_taken(const struct lane_take *t, void *data);

static void race_take(struct racer *r)
{
	assert_int_equal(lane_fleet_take(r->e->f[r->i], "rt", RT_RATE, RT_BURST, 1, race_taken, r),
			 0);
	r->inflight++;
	r->takes++;
}

static void race_taken(const struct lane_take *t, void *data)
{
	struct racer *r = data;

	r->inflight--;
	assert_int_equal(t->status, 0);
	r->granted += t->granted;
	if (!r->first || t->now_ms < r->first)
		r->first = t->now_ms;
	if (t->now_ms > r->last)
		r->last = t->now_ms;
	if (fixture_now_ms() < r->stop_at)
		race_take(r);
}

static bool races_done(void *arg)
{
	struct racer *r = arg;

	for (int i = 0; i < NCONN; i++)
		if (r[i].inflight)
			return false;
	return true;
}

static void three_connections_stay_under_rate(void **state)
{
	struct env e;
	struct racer r[NCONN];
	char k[128], info[256] = "";
	long long total = 0, takes = 0;
	int64_t first = INT64_MAX, last = 0;

	(void)state;
	env_open(&e);
	rint_cmd("DEL %s", key_of(k, sizeof(k), "rt"));
	rint_cmd("CONFIG RESETSTAT");
	long long stop_at = fixture_now_ms() + 2500;
	for (int i = 0; i < NCONN; i++) {
		r[i] = (struct racer){ .e = &e, .i = i, .stop_at = stop_at };
		for (int j = 0; j < RT_INFLIGHT; j++)
			race_take(&r[i]);
	}
	fixture_run_until(&e.loop, races_done, r, WAIT_MS);
	for (int i = 0; i < NCONN; i++) {
		total += r[i].granted;
		takes += r[i].takes;
		first = r[i].first < first ? r[i].first : first;
		last = r[i].last > last ? r[i].last : last;
		assert_true(r[i].granted > 0); /* every connection got tokens */
	}
	int64_t T = last - first;
	long long bound = (long long)RT_RATE * T / 1000 + RT_BURST + 1;
	print_message("%lld takes, %lld tokens over %" PRId64 " ms of Redis time (bound %lld)\n",
		      takes, total, T, bound);
	assert_true(T >= 1000);
	assert_true(total <= bound);
	assert_true(total * 2 >= bound); /* paced, not starved */
	/* The script's cost, from Redis' own accounting. */
	redisReply *rep = redisCommand(rc, "INFO commandstats");
	assert_non_null(rep);
	const char *p = strstr(rep->str, "cmdstat_evalsha:");
	assert_non_null(p);
	snprintf(info, sizeof(info), "%.*s", (int)strcspn(p, "\r\n"), p);
	freeReplyObject(rep);
	double usec = 0;
	long long calls = 0;
	assert_int_equal(sscanf(strstr(info, "calls="), "calls=%lld", &calls), 1);
	assert_int_equal(sscanf(strstr(info, "usec_per_call="), "usec_per_call=%lf", &usec), 1);
	print_message("lane_take.lua: %.2f us of Redis CPU per take (%s)\n", usec, info);
	assert_true(calls >= takes);
	env_close(&e);
}

/* ---- two dialers, one provider ---- */

enum pmode { P_OK = 0, P_429, P_401, P_500 };

struct provider {
	struct http_server *srv;
	enum pmode mode;
	int posts;
	long long at[256]; /* fixture_now_ms() of each POST */
};

static void provider_calls(struct http_request *req, void *data)
{
	struct provider *p = data;

	if (p->posts < 256)
		p->at[p->posts] = fixture_now_ms();
	p->posts++;
	switch (p->mode) {
	case P_429:
		http_response_header(req, "Retry-After", "3");
		http_respond(req, 429, "application/json", "{}", 2);
		p->mode = P_OK; /* one 429 */
		break;
	case P_401:
		http_respond(req, 401, "application/json", "{}", 2);
		break;
	case P_500: /* one 500: the call may exist, re-sent with its key */
		http_respond(req, 500, "application/json", "{}", 2);
		p->mode = P_OK;
		break;
	default:
		http_respond(req, 201, "application/json", "{\"call_id\":\"pc\"}", 16);
	}
}

struct dres {
	int n, placed, stopped, refused, drained, other;
};

static void dialed(struct dial *d, const struct dial_result *r, void *data)
{
	struct dres *x = data;

	(void)d;
	x->n++;
	if (r->disposition == DIAL_PLACED)
		x->placed++;
	else if (r->disposition == DIAL_STOPPED)
		x->stopped++;
	else if (r->disposition == DIAL_REFUSED)
		x->refused++;
	else if (r->disposition == DIAL_DRAINED)
		x->drained++;
	else
		x->other++;
}

struct denv {
	struct env e;
	struct pg_pool *pool;
	struct provider prov;
	struct dial *d[2];
	struct dres res[2];
	int closed, which;
};

static bool pool_up(void *arg)
{
	struct denv *w = arg;

	return pg_pool_up_count(w->pool) == pg_pool_size(w->pool);
}

/* dead0: dialer 0's Redis connection never comes up (env's third connection is replaced by one
 * to a socket that does not exist). */
static void denv_open(struct denv *w, uint32_t rate, uint32_t burst, uint64_t probe_ms, bool dead0)
{
	struct pg_pool_options po = { .conninfo = svc.database_url,
				      .name = "lanes",
				      .size = 2,
				      .priority_size = 1,
				      .connect_timeout_ms = 10000,
				      .query_timeout_ms = 60000,
				      .reconnect_min_ms = 20,
				      .reconnect_max_ms = 200 };
	struct http_server_config hc;
	char url[64];

	memset(w, 0, sizeof(*w));
	env_open(&w->e);
	if (dead0) {
		struct redis_conn_options d = { .url = "unix:///nonexistent/redis.sock",
						.name = "dead",
						.connect_timeout_ms = 1000,
						.command_timeout_ms = 1000,
						.reconnect_min_ms = 1000,
						.reconnect_max_ms = 5000,
						.scripts = w->e.reg };
		redis_conn_close(w->e.conn[2], count_cb, &w->closed);
		fixture_run_until_count(&w->e.loop, &w->closed, 1, WAIT_MS);
		w->closed = 0;
		assert_int_equal(redis_conn_new(&w->e.loop, &d, &w->e.conn[2]), 0);
		assert_int_equal(redis_conn_start(w->e.conn[2]), 0);
	}
	assert_int_equal(pg_pool_new(&w->e.loop, &po, &w->pool), 0);
	http_server_config_defaults(&hc);
	struct http_route route = { "POST", "/calls", 65536, provider_calls, &w->prov, false };
	assert_int_equal(http_server_new(&w->e.loop, &hc, &route, 1, &w->prov.srv), 0);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d", http_server_port(w->prov.srv));
	for (int i = 0; i < 2; i++) {
		struct dial_options o = { .loop = &w->e.loop,
					  .pool = w->pool,
					  .provider_url = url,
					  .callback_url = "http://127.0.0.1:1/provider/events",
					  .provider_name = PROVIDER,
					  .lane_probe_ms = probe_ms,
					  .redis = w->e.conn[dead0 && i == 0 ? 2 : i],
					  .scripts = w->e.reg,
					  .done_cb = dialed,
					  .data = &w->res[i] };
		lane_config_defaults(&o.lane);
		o.lane.rate_per_s = rate;
		o.lane.burst = burst;
		retry_policy_defaults(&o.policy);
		assert_int_equal(dial_new(&o, &w->d[i]), 0);
	}
	assert_int_equal(pg_pool_start(w->pool), 0);
	fixture_run_until(&w->e.loop, pool_up, w, WAIT_MS);
}

static void srv_closed(struct http_server *s, void *data)
{
	(void)s;
	(*(int *)data)++;
}

static void denv_close(struct denv *w)
{
	dial_close(w->d[0], count_cb, &w->closed);
	dial_close(w->d[1], count_cb, &w->closed);
	fixture_run_until_count(&w->e.loop, &w->closed, 2, WAIT_MS);
	http_server_close(w->prov.srv, srv_closed, &w->closed);
	pg_pool_close(w->pool, count_cb, &w->closed);
	fixture_run_until_count(&w->e.loop, &w->closed, 4, WAIT_MS);
	env_close(&w->e);
}

static void start_call(struct denv *w, int i, const char *org, int id)
{
	char call[40];
	struct dial_call c = {
		.call = call, .org = org, .agent = "a0", .attempt = 1, .to = "+15550000001"
	};

	snprintf(call, sizeof(call), "00000000-0000-4000-8000-%012d", id);
	assert_int_equal(dial_start(w->d[i], &c), 0);
}

struct count_at_least {
	const int *v;
	int n;
};

static bool at_least(void *arg)
{
	struct count_at_least *c = arg;

	return *c->v >= c->n;
}

static void run_until_at_least(struct denv *w, const int *v, int n)
{
	struct count_at_least c = { v, n };

	fixture_run_until(&w->e.loop, at_least, &c, WAIT_MS);
}

#define DR_RATE	 20
#define DR_BURST 2
#define DR_CALLS 40

/* Two dialers with 40 calls each on one lane at 20/s, burst 2: the provider's first 40 POSTs
 * take ≥ (40 − 2 − 1) / 20 s, less 250 ms for the loop's scheduling. Per-worker lanes would send
 * them in about half that. */
static void two_dialers_share_the_rate(void **state)
{
	struct denv w;

	(void)state;
	denv_open(&w, DR_RATE, DR_BURST, 300000, false);
	rint_cmd("DEL dsp:v1:{o:dr}:lane:" PROVIDER);
	for (int i = 0; i < DR_CALLS; i++) {
		start_call(&w, 0, "dr", 1000 + i);
		start_call(&w, 1, "dr", 2000 + i);
	}
	run_until_at_least(&w, &w.prov.posts, DR_CALLS);
	long long span = w.prov.at[DR_CALLS - 1] - w.prov.at[0];
	long long least = (long long)(DR_CALLS - DR_BURST - 1) * 1000 / DR_RATE - 250;
	struct dial_stats s0, s1;
	dial_get_stats(w.d[0], &s0);
	dial_get_stats(w.d[1], &s1);
	print_message("%d POSTs in %lld ms (at least %lld); sends %llu + %llu, takes %llu + %llu\n",
		      DR_CALLS, span, least, (unsigned long long)s0.sends,
		      (unsigned long long)s1.sends, (unsigned long long)s0.fleet_takes,
		      (unsigned long long)s1.fleet_takes);
	assert_true(span >= least);
	assert_true(s0.sends > 0 && s1.sends > 0); /* both dialers sent */
	assert_int_equal(s0.fleet_local + s1.fleet_local, 0);
	denv_close(&w);
}

struct field_wait {
	const char *org, *field;
	bool present;
};

static bool field_is(void *arg)
{
	struct field_wait *f = arg;

	return (lane_field(f->org, f->field) >= 0) == f->present;
}

/* Runs the loop until org's field is present (or absent): a mark is on its way. */
static void wait_field(struct denv *w, const char *org, const char *field, bool present)
{
	struct field_wait f = { org, field, present };

	fixture_run_until(&w->e.loop, field_is, &f, WAIT_MS);
}

/* A 429 with Retry-After: 3 on dialer 0 parks the lane fleet-wide: dialer 1's next call is not
 * sent before the park ends (on Redis's clock). */
static void park_seen_by_the_other(void **state)
{
	struct denv w;

	(void)state;
	denv_open(&w, 0, 1, 300000, false);
	rint_cmd("DEL dsp:v1:{o:pk}:lane:" PROVIDER);
	w.prov.mode = P_429;
	start_call(&w, 0, "pk", 1);
	run_until_at_least(&w, &w.res[0].refused, 1);
	wait_field(&w, "pk", "parked_until_ms", true);
	long long left = lane_field("pk", "parked_until_ms") - redis_now_ms();
	long long t0 = fixture_now_ms();
	assert_true(left > 1000);
	start_call(&w, 1, "pk", 2);
	run_until_at_least(&w, &w.res[1].placed, 1);
	long long waited = w.prov.at[1] - t0;
	print_message("park: %lld ms left, the other dialer's call went after %lld ms\n", left,
		      waited);
	assert_int_equal(w.prov.posts, 2);
	assert_true(waited >= left - 20); /* ms rounding between the two clocks */
	denv_close(&w);
}

static bool lane_resumed(void *arg)
{
	struct denv *w = arg;

	return !dial_lane_stopped(w->d[w->which], "st");
}

/* A 401 on dialer 0 stops the lane for dialer 1 too: its call ends STOPPED without a POST; after
 * the probe interval one probe goes, succeeds, clears the stop, and both dial again. */
static void stop_seen_fleet_wide(void **state)
{
	struct denv w;

	(void)state;
	denv_open(&w, 0, 1, 1500, false);
	rint_cmd("DEL dsp:v1:{o:st}:lane:" PROVIDER);
	w.prov.mode = P_401;
	start_call(&w, 0, "st", 1);
	run_until_at_least(&w, &w.res[0].stopped, 1);
	wait_field(&w, "st", "stopped_until_ms", true);
	long long t_stop = fixture_now_ms();
	w.prov.mode = P_OK;
	start_call(&w, 1, "st", 2);
	run_until_at_least(&w, &w.res[1].stopped, 1);
	assert_int_equal(w.prov.posts, 1); /* not sent */
	assert_true(dial_lane_stopped(w.d[1], "st"));
	struct dial_stats s0, s1;
	dial_get_stats(w.d[0], &s0);
	dial_get_stats(w.d[1], &s1);
	assert_int_equal(s0.lane_stops, 1); /* the alert, once, where the 401 came */
	assert_int_equal(s1.lane_stops, 0);
	assert_int_equal(s1.fleet_stops, 1);
	/* Probes again after the interval. */
	w.which = 1;
	fixture_run_until(&w.e.loop, lane_resumed, &w, WAIT_MS);
	assert_true(fixture_now_ms() - t_stop >= 1500 - 100);
	start_call(&w, 1, "st", 3);
	run_until_at_least(&w, &w.res[1].placed, 1);
	wait_field(&w, "st", "stopped_until_ms", false); /* the probe's success clears it */
	w.which = 0;
	fixture_run_until(&w.e.loop, lane_resumed, &w, WAIT_MS);
	start_call(&w, 0, "st", 4);
	run_until_at_least(&w, &w.res[0].placed, 1);
	assert_int_equal(w.prov.posts, 3);
	denv_close(&w);
}

/* A call answered 500 (it may have been placed: re-sent with its key after the backoff) whose
 * re-send meets the lane stopped fleet-wide (another worker's 401, written here as that worker's
 * lane_mark.lua would): the re-send is not sent, and the call ends DIAL_UNKNOWN (slots kept, the
 * contact not handed back), never DIAL_STOPPED — that released the slots of a call that may be
 * live at the provider and handed its contact back to be dialled again (issue 9: more live calls
 * at the provider than the org's limit). A drain ends it the same way (DIAL_DRAINED before). */
static void stop_keeps_maybe_delivered(void **state)
{
	struct denv w;
	char k[128];

	(void)state;
	denv_open(&w, 0, 1, 300000, false);
	rint_cmd("DEL %s", key_of(k, sizeof(k), "sk"));
	w.prov.mode = P_500;
	start_call(&w, 0, "sk", 5001);
	fixture_run_until_count(&w.e.loop, &w.prov.posts, 1, WAIT_MS);
	/* The re-send is due 250-500 ms after the answer: the stop is there before it. */
	rint_cmd("HSET %s stopped_until_ms %lld", k, redis_now_ms() + 60000);
	run_until_at_least(&w, &w.res[0].n, 1);
	assert_int_equal(w.prov.posts, 1); /* the re-send was not sent */
	assert_int_equal(w.res[0].stopped, 0);
	assert_int_equal(w.res[0].other, 1); /* DIAL_UNKNOWN */
	rint_cmd("DEL %s", k);
	denv_close(&w);
}

/* Redis unreachable (a connection that never comes up): the lane is paced by the dialer's own
 * bucket, never unpaced — 30 calls at 20/s, burst 2, take ≥ (30 − 2 − 1) / 20 s (less 250 ms). */
static void unreachable_redis_paces_locally(void **state)
{
	struct denv w;

	(void)state;
	denv_open(&w, DR_RATE, DR_BURST, 300000, true);
	for (int i = 0; i < 30; i++)
		start_call(&w, 0, "lo", 3000 + i);
	run_until_at_least(&w, &w.res[0].placed, 30);
	long long span = w.prov.at[29] - w.prov.at[0];
	struct dial_stats st;
	dial_get_stats(w.d[0], &st);
	print_message("Redis down: 30 POSTs in %lld ms, %llu paced locally\n", span,
		      (unsigned long long)st.fleet_local);
	assert_true(span >= (30 - DR_BURST - 1) * 1000 / DR_RATE - 250);
	assert_int_equal(st.fleet_local, 30);
	assert_int_equal(st.fleet_takes, 0);
	denv_close(&w);
}

static int setup(void **state)
{
	(void)state;
	fixture_start(&svc, true, true, false, true);
	const char *path = strstr(svc.redis_url, "unix://");
	assert_non_null(path);
	rc = redisConnectUnix(path + 7);
	assert_true(rc && !rc->err);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	redisFree(rc);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(lua_bucket_equals_c),
		cmocka_unit_test(three_connections_stay_under_rate),
		cmocka_unit_test(two_dialers_share_the_rate),
		cmocka_unit_test(park_seen_by_the_other),
		cmocka_unit_test(stop_seen_fleet_wide),
		cmocka_unit_test(stop_keeps_maybe_delivered),
		cmocka_unit_test(unreachable_redis_paces_locally),
	};

	int r;

	curl_global_init(CURL_GLOBAL_DEFAULT);
	r = cmocka_run_group_tests(tests, setup, teardown);
	curl_global_cleanup();
	return r;
}
