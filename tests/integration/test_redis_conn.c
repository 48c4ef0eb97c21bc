/* The Redis layer against a real server: commands, error replies, deadlines (CLIENT PAUSE), and
 * recovery from a server restart without the caller doing anything. */
#include "fixture.h"
#include "redis_conn.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <cmocka.h>

struct probe {
	int ups, downs;
	int calls;
	int status;
	int type; /* reply type of the last reply */
	long long integer;
	char str[128];
};

static struct embedded svc;

static void state_cb(struct redis_conn *conn, bool up, void *data)
{
	struct probe *p = data;
	if (up)
		p->ups++;
	else
		p->downs++;
}

static void reply_cb(struct redis_conn *conn, int status, redisReply *r, void *data)
{
	struct probe *p = data;
	p->calls++;
	p->status = status;
	p->type = r ? r->type : -1;
	p->integer = r && r->type == REDIS_REPLY_INTEGER ? r->integer : 0;
	snprintf(p->str, sizeof(p->str), "%s", r && r->str ? r->str : "");
}

static bool is_up(void *arg)
{
	return redis_conn_is_up(arg);
}

static bool is_down(void *arg)
{
	return !redis_conn_is_up(arg);
}

/* A connection with the given connect and command deadlines and fast reconnects. */
static struct redis_conn *open_conn_at(uv_loop_t *loop, const char *url, struct probe *p,
				       uint64_t connect_ms, uint64_t command_ms)
{
	struct redis_conn_options o = {
		.url = url,
		.connect_timeout_ms = connect_ms,
		.command_timeout_ms = command_ms,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 200,
		.state_cb = state_cb,
		.data = p,
	};
	struct redis_conn *c;

	assert_int_equal(redis_conn_new(loop, &o, &c), 0);
	return c;
}

static struct redis_conn *open_conn(uv_loop_t *loop, const char *url, struct probe *p,
				    uint64_t command_ms)
{
	return open_conn_at(loop, url, p, 5000, command_ms);
}

static int command(uv_loop_t *loop, struct redis_conn *c, struct probe *p, const char *fmt, ...)
{
	int want = p->calls + 1;
	int argc = 0;
	const char *argv[8];
	va_list ap;

	va_start(ap, fmt);
	for (const char *a = fmt; a && argc < 8; a = va_arg(ap, const char *))
		argv[argc++] = a;
	va_end(ap);
	assert_int_equal(redis_conn_command_argv(c, reply_cb, p, argc, argv, NULL), 0);
	fixture_run_until_count(loop, &p->calls, want, 60000);
	return p->status;
}

static void url_parsing(void **state)
{
	char host[64], path[108], pw[64];
	int port;

	assert_int_equal(redis_url_parse("redis://127.0.0.1:6380", host, sizeof(host), &port, path,
					 sizeof(path), pw, sizeof(pw)),
			 0);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(port, 6380);
	assert_int_equal(redis_url_parse("redis://:s3cret@cache/0", host, sizeof(host), &port, path,
					 sizeof(path), pw, sizeof(pw)),
			 0);
	assert_string_equal(host, "cache");
	assert_string_equal(pw, "s3cret");
	assert_int_equal(port, 6379);
	assert_int_equal(redis_url_parse("unix:///tmp/r.sock", host, sizeof(host), &port, path,
					 sizeof(path), pw, sizeof(pw)),
			 0);
	assert_string_equal(path, "/tmp/r.sock");
	const char *bad[] = { "http://x",      "redis://",	  "redis://h:0", "redis://h:65536",
			      "redis://h:12x", "unix://relative", NULL };
	for (int i = 0; bad[i]; i++)
		assert_int_equal(redis_url_parse(bad[i], host, sizeof(host), &port, path,
						 sizeof(path), pw, sizeof(pw)),
				 -EINVAL);
}

static void commands_and_errors(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };

	uv_loop_init(&loop);
	struct redis_conn *c = open_conn(&loop, svc.redis_url, &p, 2000);
	assert_int_equal(redis_conn_command(c, reply_cb, &p, "PING"), -ENOTCONN); /* not yet up */
	fixture_run_until(&loop, is_up, c, 60000);
	assert_int_equal(p.ups, 1);

	assert_int_equal(command(&loop, c, &p, "SET", "k", "v", NULL), 0);
	assert_int_equal(command(&loop, c, &p, "GET", "k", NULL), 0);
	assert_string_equal(p.str, "v");
	assert_int_equal(command(&loop, c, &p, "INCRBY", "k", "1", NULL), 0);
	assert_int_equal(p.type, REDIS_REPLY_ERROR); /* the command's own answer, status 0 */

	/* Commands whose replies keep coming are refused: each command gets one callback. */
	const char *sub[] = { "Subscribe", "ch" };
	assert_int_equal(redis_conn_command_argv(c, reply_cb, &p, 2, sub, NULL), -EINVAL);
	assert_int_equal(redis_conn_command(c, reply_cb, &p, "PSUBSCRIBE %s", "c*"), -EINVAL);
	assert_int_equal(redis_conn_command(c, reply_cb, &p, "MONITOR"), -EINVAL);
	assert_int_equal(command(&loop, c, &p, "PUBLISH", "ch", "x", NULL), 0); /* still fine */

	int want = p.calls + 1000;
	for (int i = 0; i < 1000; i++)
		assert_int_equal(redis_conn_command(c, reply_cb, &p, "INCR %s", "n"), 0);
	fixture_run_until_count(&loop, &p.calls, want, 60000);
	assert_int_equal(p.integer, 1000); /* in order, each once */

	redis_conn_close(c, NULL, NULL);
	assert_int_equal(p.downs, 0);
	fixture_loop_close(&loop);
}

static void pause_hits_deadline_then_recovers(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	struct probe admin_p = { 0 };
	struct redis_conn_stats st;

	uv_loop_init(&loop);
	struct redis_conn *admin = open_conn(&loop, svc.redis_url, &admin_p, 5000);
	struct redis_conn *c = open_conn(&loop, svc.redis_url, &p, 1000);
	fixture_run_until(&loop, is_up, admin, 60000);
	fixture_run_until(&loop, is_up, c, 60000);

	/* CLIENT PAUSE stalls every other client's commands past the 200 ms deadline. */
	assert_int_equal(command(&loop, admin, &admin_p, "CLIENT", "PAUSE", "1500", "ALL", NULL),
			 0);
	assert_int_equal(command(&loop, c, &p, "GET", "x", NULL), -ETIMEDOUT);
	assert_int_equal(p.downs, 1);
	fixture_run_until(&loop, is_up, c, 60000);
	assert_int_equal(command(&loop, c, &p, "PING", NULL), 0);
	assert_string_equal(p.str, "PONG");
	redis_conn_get_stats(c, &st);
	/* The GET, and the handshakes of reconnects made while the pause lasted. */
	assert_true(st.timeouts >= 1);
	assert_int_equal(st.disconnects, 1);
	assert_int_equal(p.downs, 1); /* one up -> down transition, however many attempts */

	redis_conn_close(c, NULL, NULL);
	redis_conn_close(admin, NULL, NULL);
	fixture_loop_close(&loop);
}

static void server_restart_recovers(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	struct probe blocked = { 0 };

	uv_loop_init(&loop);
	struct redis_conn *c = open_conn(&loop, svc.redis_url, &p, 60000);
	fixture_run_until(&loop, is_up, c, 60000);

	/* A command in flight when the server goes away completes once, with -ECONNRESET. */
	assert_int_equal(redis_conn_command(c, reply_cb, &blocked, "BLPOP nothing 30"), 0);
	uv_run(&loop, UV_RUN_NOWAIT);
	assert_int_equal(embedded_redis_stop(&svc), 0);
	fixture_run_until(&loop, is_down, c, 60000);
	assert_int_equal(blocked.calls, 1);
	assert_int_equal(blocked.status, -ECONNRESET);
	assert_int_equal(p.downs, 1);

	/* While down: refused at once. */
	assert_int_equal(redis_conn_command(c, reply_cb, &p, "PING"), -ENOTCONN);

	assert_int_equal(embedded_redis_start(&svc), 0);
	fixture_run_until(&loop, is_up, c, 60000);
	assert_int_equal(p.ups, 2);
	assert_int_equal(command(&loop, c, &p, "PING", NULL), 0);
	assert_string_equal(p.str, "PONG");
	assert_int_equal(blocked.calls, 1);

	redis_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

static void close_cancels_pending(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	struct probe q = { 0 };

	uv_loop_init(&loop);
	struct redis_conn *c = open_conn(&loop, svc.redis_url, &p, 5000);
	fixture_run_until(&loop, is_up, c, 60000);
	for (int i = 0; i < 3; i++)
		assert_int_equal(redis_conn_command(c, reply_cb, &q, "BLPOP nothing 2"), 0);
	redis_conn_close(c, NULL, NULL);
	assert_int_equal(q.calls, 3);
	assert_int_equal(q.status, -ECANCELED);
	fixture_loop_close(&loop);
}

static bool two_failures(void *arg)
{
	struct redis_conn_stats st;
	redis_conn_get_stats(arg, &st);
	return st.failed_connects >= 2;
}

static void refused_connect_keeps_trying(void **state)
{
	uv_loop_t loop;
	uv_tcp_t bound;
	struct sockaddr_in addr;
	int len = sizeof(addr);
	struct probe p = { 0 };
	char url[64];

	/* A port this test holds bound but never listens on: every connect is refused (hiredis'
	 * non-blocking connect reports it through the adapter), and retried. Deadlines of a minute:
	 * the failures must be seen, not waited out. */
	uv_loop_init(&loop);
	uv_tcp_init(&loop, &bound);
	uv_ip4_addr("127.0.0.1", 0, &addr);
	assert_int_equal(uv_tcp_bind(&bound, (struct sockaddr *)&addr, 0), 0);
	uv_tcp_getsockname(&bound, (struct sockaddr *)&addr, &len);
	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", ntohs(addr.sin_port));
	struct redis_conn *c = open_conn_at(&loop, url, &p, 60000, 60000);
	fixture_run_until(&loop, two_failures, c, 30000);
	assert_false(redis_conn_is_up(c));
	assert_int_equal(p.ups + p.downs, 0);
	assert_int_equal(redis_conn_command(c, reply_cb, &p, "PING"), -ENOTCONN);
	redis_conn_close(c, NULL, NULL);
	uv_close((uv_handle_t *)&bound, NULL);
	fixture_loop_close(&loop);
}

/* A server that accepts and resets at once (SO_LINGER 0): epoll reports an error on the socket,
 * which Debian's hiredis libuv adapter drops (the connect would then hang until its deadline).
 * With deadlines of a minute, a failed attempt must still be seen within seconds. */
static void rst_alloc_cb(uv_handle_t *h, size_t size, uv_buf_t *buf)
{
	static char mem[4096];
	*buf = uv_buf_init(mem, sizeof(mem));
}

/* Resets the connection once the client's first bytes (its PING) arrived, so the client is
 * then waiting to read: the reset reaches it as a poll error. */
static void free_handle_cb(uv_handle_t *h)
{
	free(h);
}

static void rst_read_cb(uv_stream_t *client, ssize_t nread, const uv_buf_t *buf)
{
	static uv_os_fd_t fd; /* static: gcc 12 misreads uv_fileno's out-parameter as dangling */
	struct linger lg = { 1, 0 };

	if (nread == 0)
		return;
	if (nread > 0 && uv_fileno((uv_handle_t *)client, &fd) == 0)
		setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	uv_close((uv_handle_t *)client, free_handle_cb);
}

static void rst_accept_cb(uv_stream_t *server, int status)
{
	uv_tcp_t *client = malloc(sizeof(*client));

	assert_int_equal(status, 0);
	uv_tcp_init(server->loop, client);
	assert_int_equal(uv_accept(server, (uv_stream_t *)client), 0);
	uv_read_start((uv_stream_t *)client, rst_alloc_cb, rst_read_cb);
}

static void reset_by_peer_is_seen(void **state)
{
	uv_loop_t loop;
	uv_tcp_t server;
	struct sockaddr_in addr;
	int len = sizeof(addr);
	struct probe p = { 0 };
	char url[64];

	uv_loop_init(&loop);
	uv_tcp_init(&loop, &server);
	uv_ip4_addr("127.0.0.1", 0, &addr);
	assert_int_equal(uv_tcp_bind(&server, (struct sockaddr *)&addr, 0), 0);
	assert_int_equal(uv_listen((uv_stream_t *)&server, 16, rst_accept_cb), 0);
	uv_tcp_getsockname(&server, (struct sockaddr *)&addr, &len);
	snprintf(url, sizeof(url), "redis://127.0.0.1:%d", ntohs(addr.sin_port));

	struct redis_conn *c = open_conn_at(&loop, url, &p, 60000, 60000);
	fixture_run_until(&loop, two_failures, c, 30000);
	assert_false(redis_conn_is_up(c));
	redis_conn_close(c, NULL, NULL);
	uv_close((uv_handle_t *)&server, NULL);
	fixture_loop_close(&loop);
}

static int setup(void **state)
{
	fixture_start(&svc, false, true, true, false);
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
		cmocka_unit_test(url_parsing),
		cmocka_unit_test(commands_and_errors),
		cmocka_unit_test(pause_hits_deadline_then_recovers),
		cmocka_unit_test(server_restart_recovers),
		cmocka_unit_test(close_cancels_pending),
		cmocka_unit_test(refused_connect_keeps_trying),
		cmocka_unit_test(reset_by_peer_is_seen),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
