/* The Redis subscriber against a real server: channels and patterns, binary payloads, a
 * subscription added while up, re-made by itself after CLIENT KILL and after a server restart
 * (the owner told each time, messages published from then on arriving), a connection stalled by
 * CLIENT PAUSE past its liveness deadline detected and re-made, no liveness verdict while the
 * publisher is down or when a ping is lost with the publisher's connection, and a close from
 * inside a message callback. */
#include "fixture.h"
#include "redis_conn.h"
#include "redis_sub.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static struct embedded svc;

struct sub_probe {
	int ups, downs;
	int messages;
	char channel[64];
	char payload[64];
	size_t payload_len;
	bool close_on_message;
	int closed;
};

struct reply {
	int calls;
	int status;
	long long integer;
};

static void state_cb(struct redis_sub *sub, bool up, void *data)
{
	struct sub_probe *p = data;
	if (up)
		p->ups++;
	else
		p->downs++;
}

static void closed_cb(void *data)
{
	((struct sub_probe *)data)->closed++;
}

static void message_cb(struct redis_sub *sub, const char *channel, size_t channel_len,
		       const char *payload, size_t len, void *data)
{
	struct sub_probe *p = data;

	assert_int_equal(channel[channel_len], '\0');
	snprintf(p->channel, sizeof(p->channel), "%.*s", (int)channel_len, channel);
	memcpy(p->payload, payload, len < sizeof(p->payload) ? len : sizeof(p->payload));
	p->payload_len = len;
	p->messages++;
	if (p->close_on_message)
		redis_sub_close(sub, closed_cb, p);
}

static void reply_cb(struct redis_conn *conn, int status, redisReply *r, void *data)
{
	struct reply *p = data;
	p->calls++;
	p->status = status;
	p->integer = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
}

static bool conn_up(void *arg)
{
	return redis_conn_is_up(arg);
}

static bool sub_up(void *arg)
{
	return redis_sub_is_up(arg);
}

/* A command connection (the publisher, or an admin) with a long command deadline: a CLIENT
 * PAUSE must not make it drop. */
static struct redis_conn *conn_new(uv_loop_t *loop, const char *name, bool start)
{
	struct redis_conn_options o = {
		.url = svc.redis_url,
		.name = name,
		.connect_timeout_ms = 60000,
		.command_timeout_ms = 60000,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 100,
	};
	struct redis_conn *c;

	assert_int_equal(redis_conn_new(loop, &o, &c), 0);
	if (start) {
		assert_int_equal(redis_conn_start(c), 0);
		fixture_run_until(loop, conn_up, c, 60000);
	}
	return c;
}

static struct redis_sub *sub_new(uv_loop_t *loop, struct redis_conn *pub, struct sub_probe *p,
				 uint64_t interval_ms, uint64_t timeout_ms)
{
	struct redis_sub_options o = {
		.url = svc.redis_url,
		.connect_timeout_ms = 2000,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 200,
		.liveness_interval_ms = interval_ms,
		.liveness_timeout_ms = timeout_ms,
		.publisher = pub,
		.state_cb = state_cb,
		.data = p,
	};
	struct redis_sub *sub;

	assert_int_equal(redis_sub_new(loop, &o, &sub), 0);
	return sub;
}

/* Runs one command (NULL-terminated argv, argvlen may be NULL) and waits for its answer. */
static long long run(uv_loop_t *loop, struct redis_conn *c, const size_t *lens, ...)
{
	struct reply r = { 0 };
	const char *argv[8];
	int argc = 0;
	va_list ap;

	va_start(ap, lens);
	for (const char *a = va_arg(ap, const char *); a && argc < 8; a = va_arg(ap, const char *))
		argv[argc++] = a;
	va_end(ap);
	assert_int_equal(redis_conn_command_argv(c, reply_cb, &r, argc, argv, lens), 0);
	fixture_run_until_count(loop, &r.calls, 1, 60000);
	assert_int_equal(r.status, 0);
	return r.integer;
}

/* Publishes until someone receives it (a subscription added while up is active once Redis has
 * confirmed it), then waits for the message. */
static void publish_seen(uv_loop_t *loop, struct redis_conn *pub, struct sub_probe *p,
			 const char *channel, const char *payload)
{
	int want = p->messages + 1;

	while (run(loop, pub, NULL, "PUBLISH", channel, payload, NULL) < 1)
		fixture_sleep_ms(5);
	fixture_run_until_count(loop, &p->messages, want, 60000);
	assert_string_equal(p->channel, channel);
	assert_int_equal(p->payload_len, strlen(payload));
	assert_memory_equal(p->payload, payload, p->payload_len);
}

static bool pings_answered(void *arg)
{
	struct redis_sub_stats st;
	redis_sub_get_stats(arg, &st);
	return st.pings_answered >= 2;
}

static void messages_arrive(void **state)
{
	uv_loop_t loop;
	struct sub_probe p = { 0 }, q = { 0 }, late = { 0 };
	struct redis_sub_stats st;

	uv_loop_init(&loop);
	struct redis_conn *pub = conn_new(&loop, "pub", true);
	struct redis_sub *sub = sub_new(&loop, pub, &p, 50, 3000);
	assert_string_equal(redis_sub_label(sub), "redis[sub]");
	assert_int_equal(redis_sub_subscribe(sub, "t:ch", message_cb, &p), 0);
	assert_int_equal(redis_sub_psubscribe(sub, "t:pat.*", message_cb, &q), 0);
	assert_int_equal(redis_sub_subscribe(sub, "t:ch", message_cb, &p), -EEXIST);
	assert_int_equal(redis_sub_subscribe(sub, "", message_cb, &p), -EINVAL);
	assert_int_equal(redis_sub_start(sub), 0);
	assert_int_equal(redis_sub_start(sub), -EBUSY);
	fixture_run_until(&loop, sub_up, sub, 60000);
	assert_int_equal(p.ups, 1);

	/* Up means confirmed: the first publish is received at once. */
	assert_int_equal(run(&loop, pub, NULL, "PUBLISH", "t:ch", "hello", NULL), 1);
	fixture_run_until_count(&loop, &p.messages, 1, 60000);
	assert_string_equal(p.payload, "hello");
	const size_t lens[] = { 7, 7, 3 };
	assert_int_equal(run(&loop, pub, lens, "PUBLISH", "t:pat.x", "a\0b", NULL), 1);
	fixture_run_until_count(&loop, &q.messages, 1, 60000);
	assert_string_equal(q.channel, "t:pat.x"); /* the channel, not the pattern */
	assert_int_equal(q.payload_len, 3);
	assert_memory_equal(q.payload, "a\0b", 3);

	assert_int_equal(redis_sub_subscribe(sub, "t:late", message_cb, &late), 0);
	publish_seen(&loop, pub, &late, "t:late", "x");

	/* The liveness pings go round, and are not messages of the owner. */
	fixture_run_until(&loop, pings_answered, sub, 60000);
	redis_sub_get_stats(sub, &st);
	assert_int_equal(st.messages, 3);
	assert_int_equal(st.liveness_failures, 0);
	redis_sub_close(sub, NULL, NULL);
	redis_conn_close(pub, NULL, NULL);
	fixture_loop_close(&loop);
}

static void killed_is_remade(void **state)
{
	uv_loop_t loop;
	struct sub_probe p = { 0 };
	struct redis_sub_stats st;

	uv_loop_init(&loop);
	struct redis_conn *pub = conn_new(&loop, "pub", true);
	struct redis_sub *sub = sub_new(&loop, pub, &p, 1000, 3000);
	assert_int_equal(redis_sub_subscribe(sub, "t:wake", message_cb, &p), 0);
	assert_int_equal(redis_sub_start(sub), 0);
	fixture_run_until(&loop, sub_up, sub, 60000);

	/* At least ours (an earlier test's closed subscriber may not be reaped yet). */
	assert_true(run(&loop, pub, NULL, "CLIENT", "KILL", "TYPE", "pubsub", NULL) >= 1);
	fixture_run_until_count(&loop, &p.ups, 2, 60000); /* re-made by itself, owner told */
	assert_int_equal(p.downs, 1);
	assert_int_equal(run(&loop, pub, NULL, "PUBLISH", "t:wake", "after", NULL), 1);
	fixture_run_until_count(&loop, &p.messages, 1, 60000);
	assert_string_equal(p.payload, "after");
	redis_sub_get_stats(sub, &st);
	assert_int_equal(st.disconnects, 1);
	assert_int_equal(st.connects, 2);
	redis_sub_close(sub, NULL, NULL);
	redis_conn_close(pub, NULL, NULL);
	fixture_loop_close(&loop);
}

static bool liveness_failed(void *arg)
{
	struct redis_sub_stats st;
	redis_sub_get_stats(arg, &st);
	return st.liveness_failures >= 1;
}

struct pings_wait {
	struct redis_sub *sub;
	uint64_t answered; /* more than this */
};

static bool more_pings_answered(void *arg)
{
	struct pings_wait *w = arg;
	struct redis_sub_stats st;
	redis_sub_get_stats(w->sub, &st);
	return st.pings_answered > w->answered;
}

/* CLIENT PAUSE WRITE holds every PUBLISH until the test ends it: a ping sent meanwhile cannot
 * come back however slow the machine, and the subscriber is dropped at its 400 ms deadline and
 * re-made (SUBSCRIBE is no write). The publisher's deadline is a minute: its connection stays,
 * so the lost ping is a verdict on the subscriber. */
static void paused_past_liveness_is_remade(void **state)
{
	uv_loop_t loop;
	struct sub_probe p = { 0 };
	struct redis_sub_stats st;

	uv_loop_init(&loop);
	struct redis_conn *pub = conn_new(&loop, "pub", true);
	struct redis_conn *admin = conn_new(&loop, "admin", true);
	struct redis_sub *sub = sub_new(&loop, pub, &p, 100, 400);
	assert_int_equal(redis_sub_subscribe(sub, "t:wake", message_cb, &p), 0);
	assert_int_equal(redis_sub_start(sub), 0);
	fixture_run_until(&loop, pings_answered, sub, 60000);

	run(&loop, admin, NULL, "CLIENT", "PAUSE", "600000", "WRITE", NULL);
	fixture_run_until(&loop, liveness_failed, sub, 60000);
	assert_true(p.downs >= 1);
	redis_sub_get_stats(sub, &st);
	struct pings_wait w = { sub, st.pings_answered };
	run(&loop, admin, NULL, "CLIENT", "UNPAUSE", NULL);
	fixture_run_until_count(&loop, &p.ups, p.downs + 1, 60000);
	/* Re-made and alive again: its own pings come back (a ping held by the pause may have
	 * dropped the new connection once more before the UNPAUSE: then it is re-made again). */
	fixture_run_until(&loop, more_pings_answered, &w, 60000);
	publish_seen(&loop, pub, &p, "t:wake", "again");
	redis_sub_get_stats(sub, &st);
	assert_int_equal(st.disconnects, (uint64_t)p.downs);
	assert_int_equal(st.connects, (uint64_t)p.ups);
	redis_sub_close(sub, NULL, NULL);
	redis_conn_close(admin, NULL, NULL);
	redis_conn_close(pub, NULL, NULL);
	fixture_loop_close(&loop);
}

static void restart_resubscribes(void **state)
{
	uv_loop_t loop;
	struct sub_probe p = { 0 };

	uv_loop_init(&loop);
	struct redis_conn *pub = conn_new(&loop, "pub", true);
	struct redis_sub *sub = sub_new(&loop, pub, &p, 1000, 3000);
	assert_int_equal(redis_sub_subscribe(sub, "t:wake", message_cb, &p), 0);
	assert_int_equal(redis_sub_start(sub), 0);
	fixture_run_until(&loop, sub_up, sub, 60000);
	assert_int_equal(embedded_redis_stop(&svc), 0);
	fixture_run_until_count(&loop, &p.downs, 1, 60000);
	assert_int_equal(embedded_redis_start(&svc), 0);
	fixture_run_until_count(&loop, &p.ups, 2, 60000);
	fixture_run_until(&loop, conn_up, pub, 60000);
	assert_int_equal(run(&loop, pub, NULL, "PUBLISH", "t:wake", "back", NULL), 1);
	fixture_run_until_count(&loop, &p.messages, 1, 60000);
	assert_string_equal(p.payload, "back");
	redis_sub_close(sub, NULL, NULL);
	redis_conn_close(pub, NULL, NULL);
	fixture_loop_close(&loop);
}

static bool pings_skipped(void *arg)
{
	struct redis_sub_stats st;
	redis_sub_get_stats(arg, &st);
	return st.pings_skipped >= 3;
}

/* With its publisher down the subscriber cannot check itself: no ping, no verdict. */
static void publisher_down_skips_pings(void **state)
{
	uv_loop_t loop;
	struct sub_probe p = { 0 };
	struct redis_sub_stats st;

	uv_loop_init(&loop);
	struct redis_conn *pub = conn_new(&loop, "pub", false); /* never started: down */
	struct redis_sub *sub = sub_new(&loop, pub, &p, 20, 100);
	assert_int_equal(redis_sub_start(sub), 0);
	fixture_run_until(&loop, pings_skipped, sub, 60000);
	redis_sub_get_stats(sub, &st);
	assert_true(redis_sub_is_up(sub));
	assert_int_equal(st.pings_sent, 0);
	assert_int_equal(st.liveness_failures, 0);
	assert_int_equal(p.downs, 0);
	redis_sub_close(sub, NULL, NULL);
	redis_conn_close(pub, NULL, NULL);
	fixture_loop_close(&loop);
}

static bool publisher_dropped_twice(void *arg)
{
	struct redis_conn_stats st;
	redis_conn_get_stats(arg, &st);
	return st.disconnects >= 2;
}

/* A ping lost with its publisher's connection says nothing about the subscriber. CLIENT PAUSE
 * WRITE holds every PUBLISH (and no read: the subscriber and the handshakes go on) until the
 * test ends it; the publisher's 100 ms command deadline drops it with the ping out, always before
 * the subscriber's 1 s liveness deadline (both timers start in the same turn of the loop). */
static void publisher_lost_with_ping_is_no_verdict(void **state)
{
	uv_loop_t loop;
	struct sub_probe p = { 0 };
	struct redis_sub_stats st;
	struct redis_conn_options o = {
		.url = svc.redis_url,
		.name = "pub",
		.connect_timeout_ms = 60000,
		.command_timeout_ms = 100,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 100,
	};
	struct redis_conn *pub;

	uv_loop_init(&loop);
	struct redis_conn *admin = conn_new(&loop, "admin", true);
	assert_int_equal(redis_conn_new(&loop, &o, &pub), 0);
	assert_int_equal(redis_conn_start(pub), 0);
	fixture_run_until(&loop, conn_up, pub, 60000);
	struct redis_sub *sub = sub_new(&loop, pub, &p, 20, 1000);
	assert_int_equal(redis_sub_start(sub), 0);
	fixture_run_until(&loop, pings_answered, sub, 60000);

	run(&loop, admin, NULL, "CLIENT", "PAUSE", "60000", "WRITE", NULL);
	fixture_run_until(&loop, publisher_dropped_twice, pub, 60000);
	redis_sub_get_stats(sub, &st);
	assert_int_equal(st.liveness_failures, 0);
	assert_int_equal(p.downs, 0);
	assert_true(st.pings_skipped >= 1);
	run(&loop, admin, NULL, "CLIENT", "UNPAUSE", NULL);
	redis_sub_close(sub, NULL, NULL);
	redis_conn_close(pub, NULL, NULL);
	redis_conn_close(admin, NULL, NULL);
	fixture_loop_close(&loop);
}

static void close_inside_message_cb(void **state)
{
	uv_loop_t loop;
	struct sub_probe p = { .close_on_message = true };

	uv_loop_init(&loop);
	struct redis_conn *pub = conn_new(&loop, "pub", true);
	struct redis_sub *sub = sub_new(&loop, pub, &p, 1000, 3000);
	assert_int_equal(redis_sub_subscribe(sub, "t:bye", message_cb, &p), 0);
	assert_int_equal(redis_sub_start(sub), 0);
	fixture_run_until(&loop, sub_up, sub, 60000);
	/* Two messages, most likely in one read: the first closes the subscriber, the second is
	 * never handed over. */
	assert_int_equal(redis_conn_command(pub, NULL, NULL, "PUBLISH t:bye 1"), 0);
	run(&loop, pub, NULL, "PUBLISH", "t:bye", "2", NULL);
	fixture_run_until_count(&loop, &p.closed, 1, 60000);
	assert_int_equal(p.messages, 1);
	assert_int_equal(p.ups, 1);
	assert_int_equal(p.downs, 0); /* no callback after close */
	redis_conn_close(pub, NULL, NULL);
	fixture_loop_close(&loop);
}

static int setup(void **state)
{
	fixture_start(&svc, false, true, false, false);
	return 0;
}

static int teardown(void **state)
{
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(messages_arrive),
		cmocka_unit_test(killed_is_remade),
		cmocka_unit_test(paused_past_liveness_is_remade),
		cmocka_unit_test(restart_resubscribes),
		cmocka_unit_test(publisher_down_skips_pings),
		cmocka_unit_test(close_inside_message_cb),
		/* Last: when it fails, the pause it sets stays on. */
		cmocka_unit_test(publisher_lost_with_ping_is_no_verdict),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
