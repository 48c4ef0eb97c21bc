/* The Redis layer against a real server: commands, error replies, deadlines (CLIENT PAUSE),
 * recovery from a server restart without the caller doing anything (reported as a new run_id),
 * on-connect hooks (the maxmemory-policy check) and the generation key. */
#include "error.h"
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
	int ups, downs, refusals;
	bool new_server;     /* of the last up */
	char run_id[41];     /* of the last up */
	char generation[64]; /* of the last up; "(nil)" when absent */
	int refusal_status;  /* of the last refusal */
	char refusal[512];   /* its message */
	int calls;
	int status;
	int type; /* reply type of the last reply */
	long long integer;
	char str[128];
};

static struct embedded svc;

static void event_cb(struct redis_conn *conn, const struct redis_conn_event *ev, void *data)
{
	struct probe *p = data;

	switch (ev->type) {
	case REDIS_CONN_UP:
		p->ups++;
		p->new_server = ev->new_server;
		snprintf(p->run_id, sizeof(p->run_id), "%s", ev->run_id);
		if (ev->generation)
			snprintf(p->generation, sizeof(p->generation), "%.*s",
				 (int)ev->generation_len, ev->generation);
		else
			snprintf(p->generation, sizeof(p->generation), "(nil)");
		break;
	case REDIS_CONN_DOWN:
		p->downs++;
		break;
	case REDIS_CONN_REFUSED:
		p->refusals++;
		p->refusal_status = ev->status;
		snprintf(p->refusal, sizeof(p->refusal), "%s", ev->message);
		break;
	}
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
		.event_cb = event_cb,
		.data = p,
	};
	struct redis_conn *c;

	assert_int_equal(redis_conn_new(loop, &o, &c), 0);
	assert_int_equal(redis_conn_start(c), 0);
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
	struct redis_url u;

	assert_int_equal(redis_url_parse("redis://127.0.0.1:6380", &u), 0);
	assert_string_equal(u.host, "127.0.0.1");
	assert_int_equal(u.port, 6380);
	assert_false(u.auth);
	assert_int_equal(u.db, 0);
	assert_int_equal(redis_url_parse("redis://:s3cret@cache/0", &u), 0);
	assert_string_equal(u.host, "cache");
	assert_string_equal(u.user, "");
	assert_string_equal(u.password, "s3cret");
	assert_true(u.auth);
	assert_int_equal(u.port, 6379);
	/* The username is kept (AUTH user pass), the database selected, escapes decoded. */
	assert_int_equal(redis_url_parse("redis://app:p%40ss%3Aw@10.0.0.5:7000/12", &u), 0);
	assert_string_equal(u.user, "app");
	assert_string_equal(u.password, "p@ss:w");
	assert_string_equal(u.host, "10.0.0.5");
	assert_int_equal(u.port, 7000);
	assert_int_equal(u.db, 12);
	assert_int_equal(redis_url_parse("redis://app@h", &u), 0); /* a nopass user */
	assert_string_equal(u.user, "app");
	assert_true(u.auth);
	assert_int_equal(redis_url_parse("redis://[::1]:6390/", &u), 0);
	assert_string_equal(u.host, "::1");
	assert_int_equal(u.port, 6390);
	assert_int_equal(redis_url_parse("unix:///tmp/r.sock", &u), 0);
	assert_string_equal(u.path, "/tmp/r.sock");
	assert_int_equal(redis_url_parse("unix:///tmp/r.sock?db=4", &u), 0);
	assert_string_equal(u.path, "/tmp/r.sock");
	assert_int_equal(u.db, 4);
	const char *bad[] = { "http://x",
			      "redis://",
			      "redis://h:0",
			      "redis://h:65536",
			      "redis://h:12x",
			      "unix://relative",
			      "redis://h/x",
			      "redis://h/-1",
			      "redis://h/65536",
			      "redis://h:/1",
			      "redis://[::1",
			      "unix:///s?db=",
			      "unix:///s?x=1",
			      "redis://u:%4@h",
			      "redis://u:%00@h",
			      "redis://h h:1",
			      "",
			      NULL };
	for (int i = 0; bad[i]; i++)
		if (redis_url_parse(bad[i], &u) != -EINVAL)
			fail_msg("%s accepted", bad[i]);
	assert_int_equal(redis_url_parse(NULL, &u), -EINVAL);
}

/* A URL with an ACL user, a password that needs escaping and a database: the connection
 * authenticates as that user (AUTH user pass) and works in that database before it is up. */
static void acl_user_and_database(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	char url[256];

	uv_loop_init(&loop);
	struct redis_conn *admin = open_conn(&loop, svc.redis_url, &p, 5000);
	fixture_run_until(&loop, is_up, admin, 60000);
	assert_int_equal(command(&loop, admin, &p, "ACL", "SETUSER", "dsp_app", "on", ">p@ss:w",
				 "~*", "&*", "+@all", NULL),
			 0);
	assert_int_equal(p.type, REDIS_REPLY_STATUS);
	assert_int_equal(command(&loop, admin, &p, "DEL", "acl_db_probe", NULL), 0);

	snprintf(url, sizeof(url), "redis://dsp_app:p%%40ss%%3Aw@127.0.0.1:%d/3", svc.redis_port);
	struct redis_conn *c = open_conn(&loop, url, &p, 5000);
	fixture_run_until(&loop, is_up, c, 60000);
	assert_int_equal(command(&loop, c, &p, "ACL", "WHOAMI", NULL), 0);
	assert_string_equal(p.str, "dsp_app");
	assert_int_equal(command(&loop, c, &p, "SET", "acl_db_probe", "3", NULL), 0);
	/* Written in database 3, not in the admin's 0. */
	assert_int_equal(command(&loop, admin, &p, "EXISTS", "acl_db_probe", NULL), 0);
	assert_int_equal(p.integer, 0);
	assert_int_equal(command(&loop, admin, &p, "SELECT", "3", NULL), 0);
	assert_int_equal(command(&loop, admin, &p, "GET", "acl_db_probe", NULL), 0);
	assert_string_equal(p.str, "3");
	assert_int_equal(command(&loop, admin, &p, "DEL", "acl_db_probe", NULL), 0);
	assert_int_equal(command(&loop, admin, &p, "ACL", "DELUSER", "dsp_app", NULL), 0);
	redis_conn_close(c, NULL, NULL);
	redis_conn_close(admin, NULL, NULL);
	fixture_loop_close(&loop);
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
	/* The name is the formatted command's, not the format's: hiredis would keep the callback
	 * in its subscription table and call it again for each message (and at the disconnect)
	 * after the request is freed. */
	assert_int_equal(redis_conn_command(c, reply_cb, &p, "%s %s", "SUBSCRIBE", "ch"), -EINVAL);
	assert_int_equal(redis_conn_command(c, reply_cb, &p, "%b ch", "psubscribe", (size_t)10),
			 -EINVAL);
	/* hiredis refuses UNSUBSCRIBE on a connection that is not subscribed: no -ENOMEM. */
	const char *unsub[] = { "UNSUBSCRIBE" };
	assert_int_equal(redis_conn_command_argv(c, reply_cb, &p, 1, unsub, NULL), -EINVAL);
	assert_int_equal(command(&loop, c, &p, "PUBLISH", "ch", "x", NULL), 0); /* still fine */
	assert_int_equal(p.integer, 0); /* and nobody on this connection listens */

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

	/* CLIENT PAUSE WRITE holds every write until the test ends it, so the INCR sent after it
	 * cannot be answered before its 1 s deadline however slow the machine; reads, and so the
	 * handshake of the reconnect, go on. */
	assert_int_equal(
		command(&loop, admin, &admin_p, "CLIENT", "PAUSE", "600000", "WRITE", NULL), 0);
	assert_int_equal(command(&loop, c, &p, "INCR", "x", NULL), -ETIMEDOUT);
	assert_int_equal(p.downs, 1);
	fixture_run_until(&loop, is_up, c, 60000);
	assert_int_equal(command(&loop, admin, &admin_p, "CLIENT", "UNPAUSE", NULL), 0);
	assert_int_equal(command(&loop, c, &p, "INCR", "x", NULL), 0);
	redis_conn_get_stats(c, &st);
	assert_int_equal(st.timeouts, 1);
	assert_int_equal(st.disconnects, 1);
	assert_int_equal(p.downs, 1);
	assert_int_equal(p.ups, 2);

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
	char first_run_id[41];
	assert_int_equal(strlen(p.run_id), 40);
	assert_false(p.new_server); /* nothing to compare with yet */
	snprintf(first_run_id, sizeof(first_run_id), "%s", p.run_id);

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

	/* The restarted server is another one (it lost everything): a new run_id, reported. */
	struct redis_conn_stats st;
	redis_conn_get_stats(c, &st);
	assert_true(p.new_server);
	assert_int_equal(strlen(p.run_id), 40);
	assert_string_not_equal(p.run_id, first_run_id);
	assert_string_equal(redis_conn_run_id(c), p.run_id);
	assert_int_equal(st.new_servers, 1);

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

/* A connection that is created, not started, with a name and a generation key. */
static struct redis_conn *new_conn(uv_loop_t *loop, struct probe *p, const char *name,
				   const char *gen_key)
{
	struct redis_conn_options o = {
		.url = svc.redis_url,
		.name = name,
		.connect_timeout_ms = 5000,
		.command_timeout_ms = 5000,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 100,
		.generation_key = gen_key,
		.event_cb = event_cb,
		.data = p,
	};
	struct redis_conn *c;

	assert_int_equal(redis_conn_new(loop, &o, &c), 0);
	return c;
}

static void hook_never_cb(struct redis_conn *conn, uint64_t run, void *data)
{
	fail_msg("a hook added after start ran");
}

static void create_then_start(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	struct redis_conn *c;
	struct redis_conn_options bad = { .url = svc.redis_url,
					  .name = "has space",
					  .connect_timeout_ms = 1,
					  .command_timeout_ms = 1 };

	uv_loop_init(&loop);
	assert_int_equal(redis_conn_new(&loop, &bad, &c), -EINVAL);
	c = new_conn(&loop, &p, "gate", NULL);
	assert_string_equal(redis_conn_label(c), "redis[gate]");
	uv_run(&loop, UV_RUN_NOWAIT);
	assert_int_equal(redis_conn_command(c, reply_cb, &p, "PING"), -ENOTCONN); /* not started */
	assert_int_equal(redis_conn_start(c), 0);
	assert_int_equal(redis_conn_start(c), -EBUSY);
	assert_int_equal(redis_conn_add_hook(c, "late", hook_never_cb, NULL), -EBUSY);
	fixture_run_until(&loop, is_up, c, 60000);
	/* The name is the client's name on the server too (CLIENT LIST, CLIENT KILL). */
	assert_int_equal(command(&loop, c, &p, "CLIENT", "GETNAME", NULL), 0);
	assert_string_equal(p.str, "gate");
	assert_int_equal(strncmp(redis_conn_server_version(c), "7.", 2), 0);
	redis_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

/* The built-in check, which every connection runs unless its owner opts out, refuses a server
 * that may evict keys, says which setting to change, keeps retrying, and comes up by itself once
 * an operator has fixed the setting. */
static bool refused_twice(void *arg)
{
	return ((struct probe *)arg)->refusals >= 2;
}

static bool up_or_refused(void *arg)
{
	const struct probe *p = arg;
	return p->ups + p->refusals >= 1;
}

static void maxmemory_policy_refused_until_fixed(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	struct probe admin_p = { 0 };
	struct redis_conn_stats st;

	uv_loop_init(&loop);
	struct redis_conn *admin = open_conn(&loop, svc.redis_url, &admin_p, 5000);
	fixture_run_until(&loop, is_up, admin, 60000);
	assert_int_equal(command(&loop, admin, &admin_p, "CONFIG", "SET", "maxmemory-policy",
				 "allkeys-lru", NULL),
			 0);
	assert_string_equal(admin_p.str, "OK");

	/* No hook added: the check is not the owner's to remember. */
	struct redis_conn *c = new_conn(&loop, &p, "gate", NULL);
	assert_int_equal(redis_conn_start(c), 0);
	fixture_run_until(&loop, up_or_refused, &p, 60000);
	assert_int_equal(p.ups, 0);
	fixture_run_until(&loop, refused_twice, &p, 60000);
	assert_false(redis_conn_is_up(c));
	assert_int_equal(p.ups, 0);
	assert_int_equal(p.refusal_status, DSP_ECONFIG);
	assert_non_null(strstr(p.refusal, "maxmemory-policy is allkeys-lru"));
	assert_non_null(strstr(p.refusal, "CONFIG SET maxmemory-policy noeviction"));
	assert_int_equal(redis_conn_command(c, reply_cb, &p, "PING"), -ENOTCONN);

	/* An owner that stores nothing that matters may opt out. */
	struct redis_conn_options o = { .url = svc.redis_url,
					.connect_timeout_ms = 5000,
					.command_timeout_ms = 5000,
					.allow_eviction = true };
	struct redis_conn *tool;
	assert_int_equal(redis_conn_new(&loop, &o, &tool), 0);
	assert_int_equal(redis_conn_start(tool), 0);
	fixture_run_until(&loop, is_up, tool, 60000);
	redis_conn_close(tool, NULL, NULL);

	assert_int_equal(command(&loop, admin, &admin_p, "CONFIG", "SET", "maxmemory-policy",
				 "noeviction", NULL),
			 0);
	fixture_run_until(&loop, is_up, c, 60000);
	redis_conn_get_stats(c, &st);
	assert_int_equal(p.ups, 1);
	assert_true(st.refusals >= 2);
	assert_int_equal((int)st.refusals, p.refusals);
	redis_conn_close(c, NULL, NULL);
	redis_conn_close(admin, NULL, NULL);
	fixture_loop_close(&loop);
}

/* Hooks: in order, after PING and before up, with commands of their own; a refusal is retried;
 * a run that is over can neither send nor end anything. */
struct hooks_probe {
	struct redis_conn *conn;
	char order[16];
	int runs_c;
	uint64_t first_run;
	int owner_rc; /* what an owner's command got while a hook ran */
};

static void hook_a_reply_cb(struct redis_conn *conn, int status, redisReply *r, void *data)
{
	struct hooks_probe *h = data;
	assert_int_equal(status, 0);
	assert_string_equal(r->str, "OK");
	strcat(h->order, "a");
	redis_conn_hook_done(conn, h->first_run, 0, NULL);
}

static void hook_a_cb(struct redis_conn *conn, uint64_t run, void *data)
{
	struct hooks_probe *h = data;
	const char *argv[] = { "SET", "hook:a", "1" };

	h->first_run = run;
	h->owner_rc = redis_conn_command(conn, reply_cb, NULL, "PING");
	assert_int_equal(redis_conn_hook_command_argv(conn, run, hook_a_reply_cb, h, 3, argv, NULL),
			 0);
}

static void hook_b_cb(struct redis_conn *conn, uint64_t run, void *data)
{
	struct hooks_probe *h = data;
	strcat(h->order, "b");
	redis_conn_hook_done(conn, run, 0, NULL);
}

/* Refuses the first server it sees, accepts the second try. */
static void hook_c_cb(struct redis_conn *conn, uint64_t run, void *data)
{
	struct hooks_probe *h = data;
	strcat(h->order, "c");
	if (h->runs_c++ == 0)
		redis_conn_hook_done(conn, run, -EPERM, "not this time: set nothing, just retry");
	else
		redis_conn_hook_done(conn, run, 0, NULL);
}

static void hooks_run_in_order_before_up(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	struct hooks_probe h = { 0 };
	const char *argv[] = { "PING" };

	uv_loop_init(&loop);
	struct redis_conn *c = new_conn(&loop, &p, "hooks", NULL);
	assert_int_equal(redis_conn_add_hook(c, "a", hook_a_cb, &h), 0);
	assert_int_equal(redis_conn_add_hook(c, "b", hook_b_cb, &h), 0);
	assert_int_equal(redis_conn_add_hook(c, "c", hook_c_cb, &h), 0);
	assert_int_equal(redis_conn_start(c), 0);
	fixture_run_until(&loop, is_up, c, 60000);
	assert_string_equal(h.order, "abcabc"); /* refused once by c, then the whole list again */
	assert_int_equal(p.refusals, 1);
	assert_int_equal(p.refusal_status, -EPERM);
	assert_string_equal(p.refusal, "hook c: not this time: set nothing, just retry");
	assert_int_equal(p.ups, 1);
	assert_int_equal(h.owner_rc, -ENOTCONN); /* the owner waits for up */
	assert_int_equal(command(&loop, c, &p, "GET", "hook:a", NULL), 0);
	assert_string_equal(p.str, "1");

	/* A finished run is stale: no command, and its late verdict changes nothing. */
	assert_int_equal(redis_conn_hook_command_argv(c, h.first_run, reply_cb, &p, 1, argv, NULL),
			 -ESTALE);
	redis_conn_hook_done(c, h.first_run, -EPERM, "late");
	assert_true(redis_conn_is_up(c));
	assert_int_equal(p.refusals, 1);
	redis_conn_close(c, NULL, NULL);
	fixture_loop_close(&loop);
}

/* The generation key is read on every up: a FLUSHALL of a live server (same run_id) shows as
 * a missing generation on the next connection, where the run_id alone says nothing. */
static void generation_key_reported_on_every_up(void **state)
{
	uv_loop_t loop;
	struct probe p = { 0 };
	struct probe admin_p = { 0 };

	uv_loop_init(&loop);
	struct redis_conn *admin = open_conn(&loop, svc.redis_url, &admin_p, 5000);
	fixture_run_until(&loop, is_up, admin, 60000);
	assert_int_equal(command(&loop, admin, &admin_p, "SET", "t:gen", "g7", NULL), 0);

	struct redis_conn *c = new_conn(&loop, &p, "gen", "t:gen");
	assert_int_equal(redis_conn_start(c), 0);
	fixture_run_until(&loop, is_up, c, 60000);
	assert_string_equal(p.generation, "g7");

	assert_int_equal(command(&loop, admin, &admin_p, "FLUSHALL", NULL), 0);
	assert_int_equal(command(&loop, c, &p, "CLIENT", "ID", NULL), 0);
	char id[32];
	snprintf(id, sizeof(id), "%lld", p.integer);
	assert_int_equal(command(&loop, admin, &admin_p, "CLIENT", "KILL", "ID", id, NULL), 0);
	assert_int_equal(admin_p.integer, 1);
	fixture_run_until_count(&loop, &p.ups, 2, 60000);
	assert_string_equal(p.generation, "(nil)");
	assert_false(p.new_server); /* the same server: only the generation tells */
	redis_conn_close(c, NULL, NULL);
	redis_conn_close(admin, NULL, NULL);
	fixture_loop_close(&loop);
}

static int setup(void **state)
{
	fixture_start(&svc, false, true, true, false); /* tcp: the ACL test's URL */
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
		cmocka_unit_test(acl_user_and_database),
		cmocka_unit_test(create_then_start),
		cmocka_unit_test(commands_and_errors),
		cmocka_unit_test(pause_hits_deadline_then_recovers),
		cmocka_unit_test(server_restart_recovers),
		cmocka_unit_test(close_cancels_pending),
		cmocka_unit_test(refused_connect_keeps_trying),
		cmocka_unit_test(reset_by_peer_is_seen),
		cmocka_unit_test(maxmemory_policy_refused_until_fixed),
		cmocka_unit_test(hooks_run_in_order_before_up),
		cmocka_unit_test(generation_key_reported_on_every_up),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
