/* Host names are looked up off the loop (common/resolve.h): the Redis connection, the Redis
 * subscriber and the PostgreSQL connection given "localhost" come up without getaddrinfo() ever
 * running on the loop's thread, and a lookup that hangs does not stop the loop (a timer keeps
 * firing meanwhile). The test wraps getaddrinfo() (defined here, it takes precedence over the
 * C library's for libuv, hiredis and libpq): it records the calling thread of every lookup of a
 * name and holds the lookup of STALL until the test releases it; every other lookup is the
 * C library's. */
#define _GNU_SOURCE
#include "fixture.h"
#include "pg_conn.h"
#include "redis_conn.h"
#include "redis_sub.h"

#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netdb.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>

#define STALL "stall.dsp.invalid"

static struct embedded svc;
static pthread_t loop_thread;
static atomic_int name_lookups;	       /* getaddrinfo() calls for a name */
static atomic_int loop_thread_lookups; /* ... of which on the loop's thread */
static atomic_int stalled;	       /* a lookup of STALL is being held */
static pthread_mutex_t stall_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t stall_cv = PTHREAD_COND_INITIALIZER;
static bool released;

static bool is_name(const char *node)
{
	unsigned char buf[16];

	return node && node[0] && inet_pton(AF_INET, node, buf) != 1 &&
	       inet_pton(AF_INET6, node, buf) != 1;
}

int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints,
		struct addrinfo **res)
{
	int (*real)(const char *, const char *, const struct addrinfo *, struct addrinfo **);

	if (is_name(node)) {
		atomic_fetch_add(&name_lookups, 1);
		if (pthread_equal(pthread_self(), loop_thread))
			atomic_fetch_add(&loop_thread_lookups, 1);
	}
	if (node && strcmp(node, STALL) == 0) {
		/* Held until released; on the loop's thread (the old code) nothing can release
		 * it and the loop is stuck here: a slow DNS answer of 2 s, then a failure. */
		struct timespec until;
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += pthread_equal(pthread_self(), loop_thread) ? 2 : 60;
		pthread_mutex_lock(&stall_mu);
		atomic_store(&stalled, 1);
		while (!released && pthread_cond_timedwait(&stall_cv, &stall_mu, &until) == 0)
			;
		atomic_store(&stalled, 0);
		pthread_mutex_unlock(&stall_mu);
		return EAI_AGAIN;
	}
	*(void **)&real = dlsym(RTLD_NEXT, "getaddrinfo");
	return real(node, service, hints, res);
}

static void release_stall(void)
{
	pthread_mutex_lock(&stall_mu);
	released = true;
	pthread_cond_broadcast(&stall_cv);
	pthread_mutex_unlock(&stall_mu);
}

static void reset(void)
{
	atomic_store(&name_lookups, 0);
	atomic_store(&loop_thread_lookups, 0);
	pthread_mutex_lock(&stall_mu);
	released = false;
	pthread_mutex_unlock(&stall_mu);
}

/* A timer that keeps firing: counts its ticks while a lookup of STALL is held, and releases
 * it after three such ticks. */
struct ticker {
	uv_timer_t timer;
	int ticks_while_stalled;
};

static void tick_cb(uv_timer_t *t)
{
	struct ticker *tk = t->data;

	if (atomic_load(&stalled) && ++tk->ticks_while_stalled >= 3)
		release_stall();
}

static void ticker_start(uv_loop_t *loop, struct ticker *tk)
{
	tk->ticks_while_stalled = 0;
	uv_timer_init(loop, &tk->timer);
	tk->timer.data = tk;
	uv_timer_start(&tk->timer, tick_cb, 5, 5);
}

static bool redis_up(void *arg)
{
	return redis_conn_is_up(arg);
}

static bool sub_up(void *arg)
{
	return redis_sub_is_up(arg);
}

static bool pg_up(void *arg)
{
	return pg_conn_is_up(arg);
}

static struct redis_conn *redis_open(uv_loop_t *loop, const char *host, uint64_t connect_ms)
{
	char url[128];
	struct redis_conn_options o = {
		.url = url,
		.connect_timeout_ms = connect_ms,
		.command_timeout_ms = 5000,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 50,
	};
	struct redis_conn *c;

	snprintf(url, sizeof(url), "redis://%s:%d", host, svc.redis_port);
	assert_int_equal(redis_conn_new(loop, &o, &c), 0);
	assert_int_equal(redis_conn_start(c), 0);
	return c;
}

static struct pg_conn *pg_open(uv_loop_t *loop, const char *host)
{
	char conninfo[600];
	struct pg_conn_options o = {
		.conninfo = conninfo,
		.connect_timeout_ms = 30000,
		.query_timeout_ms = 5000,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 50,
	};
	struct pg_conn *c;

	/* database_url_tcp says host=127.0.0.1; a later host= wins. */
	snprintf(conninfo, sizeof(conninfo), "%s host=%s", svc.database_url_tcp, host);
	assert_int_equal(pg_conn_new(loop, &o, &c), 0);
	assert_int_equal(pg_conn_start(c), 0);
	return c;
}

static void redis_localhost(void **state)
{
	uv_loop_t loop;
	struct redis_conn_stats st;

	reset();
	uv_loop_init(&loop);
	struct redis_conn *c = redis_open(&loop, "localhost", 30000);
	fixture_run_until(&loop, redis_up, c, 60000);
	redis_conn_get_stats(c, &st);
	assert_int_equal(st.lookups, 1);
	assert_true(atomic_load(&name_lookups) >= 1);
	assert_int_equal(atomic_load(&loop_thread_lookups), 0);
	redis_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

static void sub_localhost(void **state)
{
	uv_loop_t loop;
	char url[128];
	struct redis_sub_stats st;
	struct redis_sub_options o = {
		.url = url,
		.connect_timeout_ms = 30000,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 50,
	};
	struct redis_sub *s;

	reset();
	uv_loop_init(&loop);
	snprintf(url, sizeof(url), "redis://localhost:%d", svc.redis_port);
	assert_int_equal(redis_sub_new(&loop, &o, &s), 0);
	assert_int_equal(redis_sub_start(s), 0);
	fixture_run_until(&loop, sub_up, s, 60000);
	redis_sub_get_stats(s, &st);
	assert_int_equal(st.lookups, 1);
	assert_int_equal(atomic_load(&loop_thread_lookups), 0);
	redis_sub_close(s, NULL, NULL);
	fixture_loop_close(&loop);
}

static void pg_localhost(void **state)
{
	uv_loop_t loop;
	struct pg_conn_stats st;

	reset();
	uv_loop_init(&loop);
	struct pg_conn *c = pg_open(&loop, "localhost");
	fixture_run_until(&loop, pg_up, c, 60000);
	pg_conn_get_stats(c, &st);
	assert_int_equal(st.lookups, 1);
	assert_true(atomic_load(&name_lookups) >= 1);
	assert_int_equal(atomic_load(&loop_thread_lookups), 0);
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

/* A host list: a socket directory with no server, then a name (a port each): libpq gets
 * host=/nonexistent,localhost hostaddr=,127.0.0.1 port=P,P and tries them in turn. */
static void pg_host_list(void **state)
{
	uv_loop_t loop;
	char conninfo[600];
	struct pg_conn_stats st;
	struct pg_conn_options o = {
		.conninfo = conninfo,
		.connect_timeout_ms = 30000,
		.query_timeout_ms = 5000,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 50,
	};
	struct pg_conn *c;

	reset();
	uv_loop_init(&loop);
	snprintf(conninfo, sizeof(conninfo), "%s host=/nonexistent,localhost port=%d,%d",
		 svc.database_url_tcp, svc.pg_port, svc.pg_port);
	assert_int_equal(pg_conn_new(&loop, &o, &c), 0);
	assert_int_equal(pg_conn_start(c), 0);
	fixture_run_until(&loop, pg_up, c, 60000);
	pg_conn_get_stats(c, &st);
	assert_int_equal(st.lookups, 1);
	assert_int_equal(atomic_load(&loop_thread_lookups), 0);
	pg_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

static bool redis_failed(void *arg)
{
	struct redis_conn_stats st;

	redis_conn_get_stats(arg, &st);
	return st.failed_connects >= 1;
}

/* The loop turns while the lookup hangs; the failed lookup is a failed attempt. */
static void redis_stalled_lookup(void **state)
{
	uv_loop_t loop;
	struct ticker tk;

	reset();
	uv_loop_init(&loop);
	ticker_start(&loop, &tk);
	struct redis_conn *c = redis_open(&loop, STALL, 30000);
	fixture_run_until_count(&loop, &tk.ticks_while_stalled, 3, 30000);
	fixture_run_until(&loop, redis_failed, c, 30000);
	assert_false(redis_conn_is_up(c));
	assert_int_equal(atomic_load(&loop_thread_lookups), 0);
	redis_conn_close(c, NULL, NULL);
	release_stall(); /* a retry's lookup may be held again */
	fixture_loop_close(&loop);
}

static bool pg_second_lookup(void *arg)
{
	struct pg_conn_stats st;

	pg_conn_get_stats(arg, &st);
	return st.lookups >= 2;
}

static void pg_stalled_lookup(void **state)
{
	uv_loop_t loop;
	struct ticker tk;

	reset();
	uv_loop_init(&loop);
	ticker_start(&loop, &tk);
	struct pg_conn *c = pg_open(&loop, STALL);
	fixture_run_until_count(&loop, &tk.ticks_while_stalled, 3, 30000);
	/* The failed lookup ends the attempt; the next one looks up again. */
	fixture_run_until(&loop, pg_second_lookup, c, 30000);
	assert_false(pg_conn_is_up(c));
	assert_int_equal(atomic_load(&loop_thread_lookups), 0);
	pg_conn_close(c, NULL, NULL);
	release_stall();
	fixture_loop_close(&loop);
}

static bool redis_failed_twice(void *arg)
{
	struct redis_conn_stats st;

	redis_conn_get_stats(arg, &st);
	return st.failed_connects >= 2;
}

/* Connect deadlines pass while one lookup hangs: the attempts wait for that lookup instead of
 * piling new ones on the thread pool, and closing the connection meanwhile frees it. */
static void deadline_during_lookup_then_close(void **state)
{
	uv_loop_t loop;
	struct redis_conn_stats st;

	reset();
	uv_loop_init(&loop);
	struct redis_conn *c = redis_open(&loop, STALL, 20);
	fixture_run_until(&loop, redis_failed_twice, c, 30000);
	redis_conn_get_stats(c, &st);
	assert_true(atomic_load(&stalled));
	assert_int_equal(st.lookups, 1);
	assert_int_equal(atomic_load(&name_lookups), 1);
	redis_conn_close(c, NULL, NULL);
	release_stall();
	fixture_loop_close(&loop); /* runs until the held lookup is back, then frees it */
}

static int setup(void **state)
{
	loop_thread = pthread_self();
	fixture_start(&svc, true, true, true, false);
	return 0;
}

static int teardown(void **state)
{
	release_stall();
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(redis_localhost),
		cmocka_unit_test(sub_localhost),
		cmocka_unit_test(pg_localhost),
		cmocka_unit_test(pg_host_list),
		cmocka_unit_test(redis_stalled_lookup),
		cmocka_unit_test(pg_stalled_lookup),
		cmocka_unit_test(deadline_during_lookup_then_close),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
