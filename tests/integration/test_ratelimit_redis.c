/* The API rate limiter's Redis side (dispatcher/api/ratelimit_redis.h, ratelimit.lua) against a
 * real Redis:
 *   - ratelimit.lua computes exactly core/ratelimit.c's ratelimit_check() on 20,000 random
 *     states (fixed seed; pinned clock: the hash's clock_ms): the decision, Reset, Retry-After,
 *     the state written back, nothing written on a refusal, the TTL;
 *   - the source document's worked example (400 last minute, 15 s in, 150 this minute ->
 *     remaining 150; at 30 s -> 350) and its 429 (Reset 12, Retry-After 12);
 *   - each bucket's default limit below, at and above (599 / 600 / 601 for calls.create ...);
 *   - the window's roll-over, Retry-After waited out exactly;
 *   - per organisation and bucket, never per key: two organisations independent, one hash each;
 *   - the key's TTL;
 *   - fails open: Redis SIGSTOPped past the deadline (the late reply ignored, and counted), and
 *     the connection closed (the callback on the next loop turn, never inside the call). */
#include "fixture.h"
#include "ratelimit.h"
#include "ratelimit_redis.h"
#include "redis_conn.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <inttypes.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#define WAIT_MS 60000
#define W	RATELIMIT_WINDOW_MS
#define T0	(INT64_C(28333333) * W) /* a window's start, about Nov 2023 */
#define VECTORS 20000
#define NBATCH	1000 /* checks in flight at once */

static struct embedded svc;
static redisContext *rc; /* blocking, for the test's own reads and writes */

/* ---- the test's blocking Redis ---- */

static void rconnect(void)
{
	const char *path = strstr(svc.redis_url, "unix://");

	assert_non_null(path);
	if (rc)
		redisFree(rc);
	rc = redisConnectUnix(path + 7);
	assert_true(rc && !rc->err);
}

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

static const char *key_of(char *buf, size_t size, const char *org, enum ratelimit_bucket b)
{
	assert_true(ratelimit_redis_key(org, b, buf, size) > 0);
	return buf;
}

/* Writes a state (and the pinned clock) into org's bucket, replacing what was there. */
static void put_state(const char *org, enum ratelimit_bucket b, int64_t w, uint64_t c, uint64_t p,
		      int64_t now)
{
	char k[128];

	key_of(k, sizeof(k), org, b);
	rint_cmd("DEL %s", k);
	rint_cmd("HSET %s w %lld c %llu p %llu clock_ms %lld", k, (long long)w,
		 (unsigned long long)c, (unsigned long long)p, (long long)now);
}

static void pin(const char *org, enum ratelimit_bucket b, int64_t now)
{
	char k[128];

	rint_cmd("HSET %s clock_ms %lld", key_of(k, sizeof(k), org, b), (long long)now);
}

/* Reads w, c, p of org's bucket (false when one is missing). */
static bool get_state(const char *org, enum ratelimit_bucket b, struct ratelimit_state *st)
{
	char k[128];
	redisReply *r = redisCommand(rc, "HMGET %s w c p", key_of(k, sizeof(k), org, b));
	bool ok;

	assert_non_null(r);
	assert_int_equal(r->type, REDIS_REPLY_ARRAY);
	ok = r->element[0]->str && r->element[1]->str && r->element[2]->str;
	if (ok) {
		st->window = strtoll(r->element[0]->str, NULL, 10);
		st->current = strtoull(r->element[1]->str, NULL, 10);
		st->previous = strtoull(r->element[2]->str, NULL, 10);
	}
	freeReplyObject(r);
	return ok;
}

/* ---- a connection and two limiters: a patient one (10 s: the machine may be loaded) and one
 * with the production deadline (100 ms) ---- */

struct env {
	uv_loop_t loop;
	struct redis_scripts *reg;
	struct redis_conn *conn;
	struct ratelimit_redis *rl, *fast;
	int ups, downs, closed;
};

static void on_conn(struct redis_conn *c, const struct redis_conn_event *ev, void *data)
{
	struct env *e = data;

	(void)c;
	if (ev->type == REDIS_CONN_UP)
		e->ups++;
	else if (ev->type == REDIS_CONN_DOWN)
		e->downs++;
}

static void env_open(struct env *e)
{
	struct ratelimit_redis_options patient = { .deadline_ms = 10000 };

	memset(e, 0, sizeof(*e));
	assert_int_equal(uv_loop_init(&e->loop), 0);
	assert_int_equal(redis_scripts_new(&e->reg), 0);
	assert_int_equal(ratelimit_redis_scripts_register(e->reg), 0);
	struct redis_conn_options o = { .url = svc.redis_url,
					.name = "rl",
					.connect_timeout_ms = 10000,
					.command_timeout_ms = 30000,
					.reconnect_min_ms = 20,
					.reconnect_max_ms = 200,
					.scripts = e->reg,
					.event_cb = on_conn,
					.data = e };
	assert_int_equal(redis_conn_new(&e->loop, &o, &e->conn), 0);
	assert_int_equal(redis_conn_start(e->conn), 0);
	assert_int_equal(ratelimit_redis_new(&e->loop, e->conn, e->reg, &patient, &e->rl), 0);
	assert_int_equal(ratelimit_redis_new(&e->loop, e->conn, e->reg, NULL, &e->fast), 0);
	fixture_run_until_count(&e->loop, &e->ups, 1, WAIT_MS);
}

static void count_cb(void *data)
{
	(*(int *)data)++;
}

static void env_close(struct env *e)
{
	ratelimit_redis_close(e->rl);
	ratelimit_redis_close(e->fast);
	redis_conn_close(e->conn, count_cb, &e->closed);
	fixture_run_until_count(&e->loop, &e->closed, 1, WAIT_MS);
	redis_scripts_free(e->reg);
	fixture_loop_close(&e->loop);
}

struct out {
	int done;
	struct ratelimit_result r;
};

static void checked(const struct ratelimit_result *r, void *data)
{
	struct out *o = data;

	o->r = *r;
	o->done++;
}

static struct ratelimit_result check_on(struct env *e, struct ratelimit_redis *rl, const char *org,
					enum ratelimit_bucket b, uint32_t limit)
{
	struct out o = { 0 };

	assert_int_equal(ratelimit_redis_check(rl, org, b, limit, checked, &o), 0);
	assert_int_equal(o.done, 0); /* never from inside the call */
	fixture_run_until_count(&e->loop, &o.done, 1, WAIT_MS);
	assert_int_equal(o.done, 1);
	return o.r;
}

static struct ratelimit_result check(struct env *e, const char *org, enum ratelimit_bucket b,
				     uint32_t limit)
{
	struct ratelimit_result r = check_on(e, e->rl, org, b, limit);

	assert_false(r.fail_open);
	assert_int_equal(r.status, 0);
	assert_int_equal(r.bucket, b);
	return r;
}

static void assert_decision(const struct ratelimit_decision *got,
			    const struct ratelimit_decision *want)
{
	assert_int_equal(got->allowed, want->allowed);
	assert_int_equal(got->limit, want->limit);
	assert_int_equal(got->estimated, want->estimated);
	assert_int_equal(got->remaining, want->remaining);
	assert_int_equal(got->reset_s, want->reset_s);
	assert_int_equal(got->retry_after_s, want->retry_after_s);
}

/* ---- Lua == C ---- */

static uint64_t rnd_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
	uint64_t x = rnd_state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rnd_state = x;
}

static uint64_t rnd_below(uint64_t n)
{
	return rnd() % n;
}

static uint32_t rnd_limit(void)
{
	static const uint32_t common[] = { 1, 2, 3, 10, 600, 1000 };

	switch (rnd_below(4)) {
	case 0:
		return common[rnd_below(6)];
	case 1:
		return 1 + (uint32_t)rnd_below(100);
	case 2:
		return 1 + (uint32_t)rnd_below(5000);
	default:
		return 1 + (uint32_t)rnd_below(RATELIMIT_LIMIT_MAX);
	}
}

static uint64_t rnd_count(uint32_t limit)
{
	switch (rnd_below(8)) {
	case 0:
		return 0;
	case 1:
	case 2:
		return rnd_below((uint64_t)limit + 3);
	case 3: { /* around the limit: limit - 2 .. limit + 2 */
		uint64_t d = rnd_below(5);
		return (uint64_t)limit + 2 >= d ? (uint64_t)limit + 2 - d : 0;
	}
	case 4:
		return rnd_below(2 * (uint64_t)limit + 2);
	case 5: /* beyond the clamp (L8), up to 2^64 - 1 */
		return rnd_below(4) == 0 ? UINT64_MAX : RATELIMIT_COUNT_CAP - 2 + rnd_below(5);
	case 6:
		return rnd() >> rnd_below(64);
	default:
		return rnd_below(100);
	}
}

static int64_t rnd_elapsed(void)
{
	switch (rnd_below(5)) {
	case 0:
		return rnd_below(3);
	case 1:
		return W - 1 - (int64_t)rnd_below(3);
	default:
		return (int64_t)rnd_below(W);
	}
}

struct vec {
	struct out o;
	struct ratelimit_state before, want;
	struct ratelimit_decision d;
	bool present;
	uint32_t limit;
	int64_t now;
	char org[16];
};

/* 20,000 random states through the script and through ratelimit_check(): equal decisions; an
 * allowed check leaves exactly C's state and a 120 s TTL, a refused one leaves the hash as it
 * was (no write, no TTL). Checks go out NBATCH at a time, pipelined, each on its own org. */
static void lua_equals_c(void **state)
{
	static struct vec v[NBATCH];
	static const int64_t shifts[] = { 0, 0, 0, -1, -1, -1, -2, -3, -1000, 1, 2 };
	const enum ratelimit_bucket b = RATELIMIT_CALLS_CREATE;
	struct env e;
	int allowed = 0, refused = 0, absent = 0, clamped = 0, back = 0;
	(void)state;

	env_open(&e);
	for (int done = 0; done < VECTORS; done += NBATCH) {
		int target = 0;

		for (int i = 0; i < NBATCH; i++) {
			struct vec *x = &v[i];
			int64_t win;

			memset(x, 0, sizeof(*x));
			snprintf(x->org, sizeof(x->org), "v%d", i);
			x->limit = rnd_limit();
			x->now = T0 + (int64_t)rnd_below(1000) * W + rnd_elapsed();
			win = x->now / W;
			x->present = rnd_below(10) != 0;
			if (x->present) {
				x->before.window = win + shifts[rnd_below(11)];
				x->before.current = rnd_count(x->limit);
				x->before.previous = rnd_count(x->limit);
				put_state(x->org, b, x->before.window, x->before.current,
					  x->before.previous, x->now);
				clamped += x->before.current > RATELIMIT_COUNT_CAP ||
					   x->before.previous > RATELIMIT_COUNT_CAP;
				back += x->before.window > win;
			} else {
				char k[128];
				rint_cmd("DEL %s", key_of(k, sizeof(k), x->org, b));
				pin(x->org, b, x->now);
				ratelimit_state_init(&x->before, x->now);
				absent++;
			}
			x->want = x->before;
			assert_int_equal(ratelimit_check(&x->want, x->limit, x->now, &x->d), 0);
			assert_int_equal(
				ratelimit_redis_check(e.rl, x->org, b, x->limit, checked, &x->o),
				0);
		}
		for (int i = 0; i < NBATCH; i++) {
			fixture_run_until_count(&e.loop, &v[i].o.done, 1, WAIT_MS);
			target++;
		}
		for (int i = 0; i < NBATCH; i++) {
			struct vec *x = &v[i];
			struct ratelimit_state got;
			char k[128];
			long long ttl = rint_cmd("PTTL %s", key_of(k, sizeof(k), x->org, b));

			assert_false(x->o.r.fail_open);
			assert_int_equal(x->o.r.now_ms, x->now);
			assert_decision(&x->o.r.d, &x->d);
			if (x->d.allowed) {
				allowed++;
				assert_true(get_state(x->org, b, &got));
				assert_int_equal(got.window, x->want.window);
				assert_int_equal(got.current, x->want.current);
				assert_int_equal(got.previous, x->want.previous);
				assert_true(ttl > 0 && ttl <= RATELIMIT_REDIS_TTL_MS);
			} else {
				refused++;
				assert_int_equal(ttl, -1); /* never written */
				if (x->present) {
					assert_true(get_state(x->org, b, &got));
					assert_int_equal(got.window, x->before.window);
					assert_int_equal(got.current, x->before.current);
					assert_int_equal(got.previous, x->before.previous);
				}
			}
		}
		(void)target;
	}
	{
		redisReply *r = redisCommand(rc, "INFO commandstats");
		const char *line = r && r->str ? strstr(r->str, "cmdstat_evalsha:") : NULL;

		assert_non_null(line);
		print_message("%.*s\n", (int)strcspn(line, "\r\n"), line);
		freeReplyObject(r);
	}
	print_message("%d vectors: %d allowed, %d refused; %d without a state, %d beyond the "
		      "clamp, %d with the clock behind the state\n",
		      VECTORS, allowed, refused, absent, clamped, back);
	assert_true(allowed > VECTORS / 10 && refused > VECTORS / 10);
	assert_true(clamped > 100 && back > 100 && absent > 100);
	env_close(&e);
}

/* A hash that is not a state (a field missing or not a number) is read as empty. */
static void malformed_state_is_empty(void **state)
{
	static const char *const bad[] = { "abc", "-1", "1.5", "", "1e3" };
	struct env e;
	char k[128];
	(void)state;

	env_open(&e);
	key_of(k, sizeof(k), "bad", RATELIMIT_DEFAULT);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct ratelimit_result r;

		put_state("bad", RATELIMIT_DEFAULT, T0 / W, 5, 5, T0 + 1000);
		rint_cmd("HSET %s c %s", k, bad[i]);
		r = check(&e, "bad", RATELIMIT_DEFAULT, 5);
		assert_true(r.d.allowed);
		assert_int_equal(r.d.remaining, 4); /* an empty window: this request only */
	}
	put_state("bad", RATELIMIT_DEFAULT, T0 / W, 5, 5, T0 + 1000);
	rint_cmd("HDEL %s p", k);
	assert_int_equal(check(&e, "bad", RATELIMIT_DEFAULT, 5).d.remaining, 4);
	env_close(&e);
}

/* ---- the document ---- */

static void worked_example(void **state)
{
	struct ratelimit_result r;
	struct env e;
	char msg[160];
	(void)state;

	env_open(&e);
	/* 400 last minute, 15 s in, 150 this minute (149 before this one, L1): 450, remaining
	 * 150, 45 s left in the window. */
	put_state("doc", RATELIMIT_CALLS_CREATE, T0 / W, 149, 400, T0 + 15000);
	r = check(&e, "doc", RATELIMIT_CALLS_CREATE, 600);
	assert_true(r.d.allowed);
	assert_int_equal(r.d.estimated, 450);
	assert_int_equal(r.d.remaining, 150);
	assert_int_equal(r.d.reset_s, 45);
	assert_int_equal(r.d.retry_after_s, 0);
	assert_int_equal(r.now_ms, T0 + 15000);
	/* The same history at 30 s: 350 estimated. */
	put_state("doc", RATELIMIT_CALLS_CREATE, T0 / W, 149, 400, T0 + 30000);
	r = check(&e, "doc", RATELIMIT_CALLS_CREATE, 600);
	assert_true(r.d.allowed);
	assert_int_equal(r.d.estimated, 350);
	assert_int_equal(r.d.remaining, 250);
	assert_int_equal(r.d.reset_s, 30);
	/* The document's 429: 500 last minute, 599 this one, 48 s in -> 700: refused, Remaining
	 * 0, Reset 12, Retry-After 12, and the message. */
	put_state("doc", RATELIMIT_CALLS_CREATE, T0 / W, 599, 500, T0 + 48000);
	r = check(&e, "doc", RATELIMIT_CALLS_CREATE, 600);
	assert_false(r.d.allowed);
	assert_int_equal(r.d.estimated, 700);
	assert_int_equal(r.d.remaining, 0);
	assert_int_equal(r.d.reset_s, 12);
	assert_int_equal(r.d.retry_after_s, 12);
	ratelimit_message(&r.d, msg, sizeof(msg));
	assert_string_equal(msg, "Rate limit exceeded: 600 requests per minute for this "
				 "organization. Retry in 12s.");
	env_close(&e);
}

/* ---- limits ---- */

/* Each bucket's default limit from a fresh window: limit - 1 requests leave 1, the limit-th
 * leaves 0, the next is refused (and not counted); the counters by bucket. */
static void limits_below_at_above(void **state)
{
	struct ratelimit_limits lim;
	struct env e;
	(void)state;

	ratelimit_limits_default(&lim);
	env_open(&e);
	for (int b = 0; b < RATELIMIT_BUCKETS; b++) {
		uint32_t n = lim.per_minute[b];
		struct out *o = calloc(n + 1, sizeof(*o));
		struct ratelimit_redis_stats st;
		struct ratelimit_state s;
		char k[128];

		assert_non_null(o);
		rint_cmd("DEL %s", key_of(k, sizeof(k), "lim", (enum ratelimit_bucket)b));
		pin("lim", (enum ratelimit_bucket)b, T0 + 1000);
		for (uint32_t i = 0; i <= n; i++) /* pipelined, answered in order */
			assert_int_equal(ratelimit_redis_check(e.rl, "lim",
							       (enum ratelimit_bucket)b, n, checked,
							       &o[i]),
					 0);
		for (uint32_t i = 0; i <= n; i++)
			fixture_run_until_count(&e.loop, &o[i].done, 1, WAIT_MS);
		for (uint32_t i = 0; i < n; i++) {
			assert_false(o[i].r.fail_open);
			assert_true(o[i].r.d.allowed);
			assert_int_equal(o[i].r.d.remaining, n - 1 - i);
			assert_int_equal(o[i].r.d.limit, n);
			assert_int_equal(o[i].r.d.reset_s, 59);
		}
		/* below: the (n-1)-th leaves 1; at: the n-th leaves 0; above: refused */
		assert_int_equal(o[n - 2].r.d.remaining, 1);
		assert_int_equal(o[n - 1].r.d.remaining, 0);
		assert_false(o[n].r.d.allowed);
		assert_int_equal(o[n].r.d.remaining, 0);
		assert_int_equal(o[n].r.d.estimated, n + 1);
		/* fits again in the next window, once n x (W - e) / W + 1 <= n */
		assert_int_equal(o[n].r.d.retry_after_s, (W - 1000 + (W + n - 1) / n + 999) / 1000);
		assert_true(get_state("lim", (enum ratelimit_bucket)b, &s));
		assert_int_equal(s.current, n); /* the refusal was not counted */
		ratelimit_redis_get_stats(e.rl, &st);
		assert_int_equal(st.refusals[b], 1);
		printf("bucket %s: %" PRIu32 " allowed, refused at %" PRIu32 "\n",
		       ratelimit_bucket_name((enum ratelimit_bucket)b), n, n + 1);
		free(o);
	}
	{
		struct ratelimit_redis_stats st;
		struct redis_script_calls calls;

		ratelimit_redis_get_stats(e.rl, &st);
		assert_int_equal(st.checks[RATELIMIT_CALLS_CREATE], 601);
		assert_int_equal(st.checks[RATELIMIT_EXECUTIONS_LIST], 601);
		assert_int_equal(st.checks[RATELIMIT_DEFAULT], 1001);
		assert_int_equal(st.fail_opens, 0);
		/* one round trip each: one EVALSHA per check, no NOSCRIPT retry */
		assert_int_equal(redis_scripts_calls(e.reg, "ratelimit.lua", &calls), 0);
		assert_int_equal(calls.calls, 601 + 601 + 1001);
		assert_int_equal(calls.retries, 0);
	}
	env_close(&e);
}

/* The window's end: full at 59 s, refused with Retry-After 7; at 60 s (new window, the old
 * count at full weight) still refused with Retry-After 6; at 65.999 s refused; at 66 s allowed
 * (exactly what Retry-After said); two windows later everything is forgotten. */
static void window_rolls_over(void **state)
{
	const enum ratelimit_bucket b = RATELIMIT_DEFAULT;
	struct ratelimit_result r;
	struct ratelimit_state s;
	struct env e;
	char k[128];
	(void)state;

	env_open(&e);
	rint_cmd("DEL %s", key_of(k, sizeof(k), "roll", b));
	pin("roll", b, T0 + 59000);
	for (int i = 0; i < 10; i++)
		assert_true(check(&e, "roll", b, 10).d.allowed);
	r = check(&e, "roll", b, 10);
	assert_false(r.d.allowed);
	assert_int_equal(r.d.reset_s, 1);
	assert_int_equal(r.d.retry_after_s, 7); /* 1 s to the window + 6 s for 10 x w <= 9 */
	pin("roll", b, T0 + W);
	r = check(&e, "roll", b, 10);
	assert_false(r.d.allowed);
	assert_int_equal(r.d.estimated, 11);
	assert_int_equal(r.d.reset_s, 60);
	assert_int_equal(r.d.retry_after_s, 6);
	pin("roll", b, T0 + W + 5999);
	assert_false(check(&e, "roll", b, 10).d.allowed);
	pin("roll", b, T0 + W + 6000);
	r = check(&e, "roll", b, 10);
	assert_true(r.d.allowed);
	assert_int_equal(r.d.remaining, 0);
	assert_true(get_state("roll", b, &s));
	assert_int_equal(s.window, T0 / W + 1);
	assert_int_equal(s.previous, 10);
	assert_int_equal(s.current, 1);
	/* two windows on: both counts weigh nothing */
	pin("roll", b, T0 + 3 * W);
	r = check(&e, "roll", b, 10);
	assert_int_equal(r.d.remaining, 9);
	assert_true(get_state("roll", b, &s));
	assert_int_equal(s.previous, 0);
	assert_int_equal(s.current, 1);
	env_close(&e);
}

/* ---- per organisation ---- */

static void per_org_not_per_key(void **state)
{
	const enum ratelimit_bucket b = RATELIMIT_CALLS_CREATE;
	struct env e;
	char k[128];
	redisReply *keys;
	(void)state;

	env_open(&e);
	rint_cmd("FLUSHALL");
	pin("orgA", b, T0 + 20000);
	pin("orgB", b, T0 + 20000);
	for (int i = 0; i < 5; i++)
		assert_true(check(&e, "orgA", b, 5).d.allowed);
	assert_false(check(&e, "orgA", b, 5).d.allowed);
	/* another organisation is untouched ... */
	assert_int_equal(check(&e, "orgB", b, 5).d.remaining, 4);
	/* ... and so is another bucket of the same one */
	pin("orgA", RATELIMIT_DEFAULT, T0 + 20000);
	assert_int_equal(check(&e, "orgA", RATELIMIT_DEFAULT, 5).d.remaining, 4);
	/* one hash per organisation and bucket, under the organisation's hash tag */
	keys = redisCommand(rc, "KEYS *");
	assert_non_null(keys);
	assert_int_equal(keys->elements, 3);
	freeReplyObject(keys);
	assert_string_equal(key_of(k, sizeof(k), "orgA", b), "dsp:v1:{o:orgA}:rl:calls.create");
	assert_int_equal(rint_cmd("EXISTS %s", k), 1);
	assert_int_equal(rint_cmd("HGET %s c", k), 5);
	/* bad arguments never reach Redis */
	assert_int_equal(ratelimit_redis_check(e.rl, "a:b", b, 5, checked, NULL), -EINVAL);
	assert_int_equal(ratelimit_redis_check(e.rl, "orgA", b, 0, checked, NULL), -EINVAL);
	assert_int_equal(ratelimit_redis_check(e.rl, "orgA", RATELIMIT_BUCKETS, 5, checked, NULL),
			 -EINVAL);
	env_close(&e);
}

/* An allowed request sets the key's TTL to 120 s (two windows); a refusal leaves it. */
static void key_ttl_set(void **state)
{
	const enum ratelimit_bucket b = RATELIMIT_EXECUTIONS_LIST;
	struct env e;
	char k[128];
	long long ttl;
	(void)state;

	env_open(&e);
	key_of(k, sizeof(k), "ttl", b);
	rint_cmd("DEL %s", k);
	assert_true(check(&e, "ttl", b, 1).d.allowed);
	ttl = rint_cmd("PTTL %s", k);
	assert_true(ttl > 60000 && ttl <= RATELIMIT_REDIS_TTL_MS);
	rint_cmd("PEXPIRE %s 90000", k);
	assert_false(check(&e, "ttl", b, 1).d.allowed);
	ttl = rint_cmd("PTTL %s", k);
	assert_true(ttl > 0 && ttl <= 90000); /* the refusal did not write */
	env_close(&e);
}

/* ---- fails open ---- */

static bool late_reply_came(void *arg)
{
	struct ratelimit_redis_stats st;

	ratelimit_redis_get_stats(arg, &st);
	return st.late_replies == 1;
}

/* Redis stopped (SIGSTOP) past the deadline: the check is allowed with the full limit at the
 * deadline; the reply that comes after SIGCONT is ignored, and the request it allowed is
 * counted in Redis. */
static void fail_open_past_deadline(void **state)
{
	const enum ratelimit_bucket b = RATELIMIT_CALLS_CREATE;
	struct ratelimit_redis_stats st;
	struct ratelimit_result r;
	struct ratelimit_state s;
	struct env e;
	char k[128];
	long long t;
	(void)state;

	env_open(&e);
	rint_cmd("DEL %s", key_of(k, sizeof(k), "stop", b));
	pin("stop", b, T0 + 1000);
	assert_int_equal(embedded_redis_signal(&svc, SIGSTOP), 0);
	uv_update_time(&e.loop); /* the deadline counts from the loop's time */
	t = fixture_now_ms();
	r = check_on(&e, e.fast, "stop", b, 600);
	t = fixture_now_ms() - t;
	assert_int_equal(embedded_redis_signal(&svc, SIGCONT), 0);
	print_message("failed open after %lld ms (deadline %d)\n", t, RATELIMIT_REDIS_DEADLINE_MS);
	assert_true(t >= RATELIMIT_REDIS_DEADLINE_MS - 5);
	assert_true(r.fail_open);
	assert_int_equal(r.status, -ETIMEDOUT);
	assert_true(r.d.allowed);
	assert_int_equal(r.d.limit, 600);
	assert_int_equal(r.d.remaining, 600); /* R3: the full limit */
	assert_true(r.d.reset_s >= 1 && r.d.reset_s <= 60);
	assert_int_equal(r.d.retry_after_s, 0);
	fixture_run_until(&e.loop, late_reply_came, e.fast, WAIT_MS);
	ratelimit_redis_get_stats(e.fast, &st);
	assert_int_equal(st.fail_opens, 1);
	assert_int_equal(st.fail_open_deadline, 1);
	assert_int_equal(st.checks[b], 1);
	assert_true(get_state("stop", b, &s));
	assert_int_equal(s.current, 1); /* ran late, and counted */
	/* Redis answers again: the fast limiter's next check runs whether or not a loaded machine
	 * makes it miss 100 ms once more (its reply comes before the next one's, same connection) */
	(void)check_on(&e, e.fast, "stop", b, 600);
	assert_int_equal(check(&e, "stop", b, 600).d.remaining, 600 - 3);
	env_close(&e);
}

/* The connection closed (Redis stopped): every check fails open at once with the full limit,
 * on the next loop turn; when Redis is back the limiter decides again (on an empty server). */
static void fail_open_connection_closed(void **state)
{
	const enum ratelimit_bucket b = RATELIMIT_DEFAULT;
	struct ratelimit_redis_stats st;
	struct ratelimit_result r;
	struct env e;
	(void)state;

	env_open(&e);
	assert_int_equal(embedded_redis_stop(&svc), 0);
	fixture_run_until_count(&e.loop, &e.downs, 1, WAIT_MS);
	for (int i = 0; i < 3; i++) {
		r = check_on(&e, e.rl, "gone", b, 1000);
		assert_true(r.fail_open);
		assert_int_equal(r.status, -ENOTCONN);
		assert_true(r.d.allowed);
		assert_int_equal(r.d.remaining, 1000);
		assert_int_equal(r.d.limit, 1000);
		assert_int_equal(r.d.retry_after_s, 0);
	}
	ratelimit_redis_get_stats(e.rl, &st);
	assert_int_equal(st.fail_opens, 3);
	assert_int_equal(st.fail_open_deadline, 0);
	assert_int_equal(st.checks[b], 3);
	assert_int_equal(embedded_redis_start(&svc), 0);
	rconnect();
	fixture_run_until_count(&e.loop, &e.ups, 2, WAIT_MS);
	pin("gone", b, T0 + 1000);
	assert_int_equal(check(&e, "gone", b, 1000).d.remaining, 999);
	env_close(&e);
}

/* Closing the limiter answers its pending checks fail-open (-ECANCELED) at once. */
static void close_answers_pending(void **state)
{
	struct env e;
	struct out o = { 0 };
	(void)state;

	env_open(&e);
	assert_int_equal(ratelimit_redis_check(e.rl, "cl", RATELIMIT_DEFAULT, 7, checked, &o), 0);
	ratelimit_redis_close(e.rl);
	assert_int_equal(o.done, 1);
	assert_true(o.r.fail_open);
	assert_int_equal(o.r.status, -ECANCELED);
	assert_int_equal(o.r.d.remaining, 7);
	e.rl = NULL;
	env_close(&e); /* the reply still due is dropped (ASan: no leak, no use after free) */
}

static int setup(void **state)
{
	(void)state;
	fixture_start(&svc, false, true, false, false);
	rconnect();
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
		cmocka_unit_test(lua_equals_c),
		cmocka_unit_test(malformed_state_is_empty),
		cmocka_unit_test(worked_example),
		cmocka_unit_test(limits_below_at_above),
		cmocka_unit_test(window_rolls_over),
		cmocka_unit_test(per_org_not_per_key),
		cmocka_unit_test(key_ttl_set),
		cmocka_unit_test(close_answers_pending),
		cmocka_unit_test(fail_open_past_deadline),
		cmocka_unit_test(fail_open_connection_closed),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
