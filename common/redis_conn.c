#include "redis_conn.h"

#include "backoff.h"
#include "log.h"
#include "redis_uv.h"

#include <errno.h>
#include <hiredis/async.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum state {
	ST_DOWN,       /* waiting for the reconnect timer */
	ST_CONNECTING, /* connect + handshake under way, deadline armed */
	ST_UP,	       /* handshake done, commands accepted */
	ST_CLOSED,     /* owner closed it; waiting for handles to close */
};

struct request {
	struct request *prev, *next; /* pending list, in send order (= reply order) */
	struct redis_conn *conn;
	redis_reply_cb cb; /* NULL for handshake commands */
	void *data;
	uint64_t deadline; /* uv_now() ms */
	bool timed_out;
};

struct redis_conn {
	uv_loop_t *loop;
	struct redis_conn_options opts;
	char *url; /* owned copy of opts.url */
	char host[256];
	int port;
	char path[108];
	char password[256];
	redisAsyncContext *ac; /* NULL when down; owned by hiredis once connected */
	enum state state;
	bool was_up;		   /* a down transition is reported only after an up one */
	uv_timer_t retry_timer;	   /* reconnect delay, then connect deadline */
	uv_timer_t deadline_timer; /* deadline of the oldest pending command */
	struct backoff backoff;
	uint64_t rng;
	struct request pending; /* sentinel of the pending list */
	int open_handles;
	void (*closed_cb)(void *data);
	void *closed_data;
	struct redis_conn_stats stats;
};

static void start_connect(struct redis_conn *conn);
static void deadline_cb(uv_timer_t *t);

int redis_url_parse(const char *url, char *host, size_t hostlen, int *port, char *path,
		    size_t pathlen, char *password, size_t pwlen)
{
	host[0] = path[0] = password[0] = '\0';
	*port = 6379;
	if (!url)
		return -EINVAL;
	if (strncmp(url, "unix://", 7) == 0) {
		const char *p = url + 7;
		if (*p != '/' || strlen(p) >= pathlen)
			return -EINVAL;
		snprintf(path, pathlen, "%s", p);
		return 0;
	}
	if (strncmp(url, "redis://", 8) != 0)
		return -EINVAL;
	const char *p = url + 8;
	const char *at = strrchr(p, '@');
	if (at) {
		const char *colon = memchr(p, ':', (size_t)(at - p));
		const char *pw = colon ? colon + 1 : p;
		if ((size_t)(at - pw) >= pwlen)
			return -EINVAL;
		snprintf(password, pwlen, "%.*s", (int)(at - pw), pw);
		p = at + 1;
	}
	size_t n = strcspn(p, ":/");
	if (n == 0 || n >= hostlen)
		return -EINVAL;
	snprintf(host, hostlen, "%.*s", (int)n, p);
	if (p[n] == ':') {
		char *end;
		long v = strtol(p + n + 1, &end, 10);
		if (end == p + n + 1 || v < 1 || v > 65535 || (*end && *end != '/'))
			return -EINVAL;
		*port = (int)v;
	}
	return 0;
}

static void list_remove(struct request *r)
{
	r->prev->next = r->next;
	r->next->prev = r->prev;
	r->prev = r->next = r;
}

static void arm_deadline(struct redis_conn *conn)
{
	struct request *head = conn->pending.next;

	if (head == &conn->pending || uv_is_active((uv_handle_t *)&conn->deadline_timer))
		return;
	uint64_t now = uv_now(conn->loop);
	uv_timer_start(&conn->deadline_timer, deadline_cb,
		       head->deadline > now ? head->deadline - now : 0, 0);
}

static void reconnect_cb(uv_timer_t *t)
{
	start_connect(t->data);
}

static void schedule_reconnect(struct redis_conn *conn)
{
	uint64_t delay = backoff_next(&conn->backoff, backoff_random(&conn->rng));

	conn->state = ST_DOWN;
	uv_timer_stop(&conn->deadline_timer);
	uv_timer_start(&conn->retry_timer, reconnect_cb, delay, 0);
	log_debug(LOG_REDIS, "reconnecting in %llu ms", (unsigned long long)delay);
}

/* The connection is gone (hiredis freed it, or is freeing it now): report and reconnect. */
static void lost(struct redis_conn *conn, const char *why)
{
	bool was_up = conn->state == ST_UP;

	conn->ac = NULL;
	if (conn->state == ST_CLOSED)
		return;
	if (was_up) {
		conn->stats.disconnects++;
		log_warn(LOG_REDIS, "connection to %s lost: %s",
			 conn->path[0] ? conn->path : conn->host, why);
	} else {
		conn->stats.failed_connects++;
		/* Never up: the 1st, 2nd, 4th, 8th... failure at warn, the others at debug. */
		unsigned n = conn->backoff.attempt;
		LOG_AT((n & (n - 1)) == 0 ? LOG_WARN : LOG_DEBUG, LOG_REDIS, NULL,
		       "connect to %s failed (attempt %u): %s",
		       conn->path[0] ? conn->path : conn->host, n + 1, why);
	}
	schedule_reconnect(conn);
	if (was_up && conn->opts.state_cb)
		conn->opts.state_cb(conn, false, conn->opts.data);
}

/* Drops the current context on our own initiative (deadline, failed handshake). */
static void drop(struct redis_conn *conn, const char *why)
{
	redisAsyncContext *ac = conn->ac;

	lost(conn, why);
	if (ac)
		redisAsyncFree(
			ac); /* pending callbacks run with NULL; deferred inside a callback */
}

static void reply_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct request *req = privdata;
	struct redis_conn *conn = req->conn;
	int status = 0;

	list_remove(req);
	if (!r) {
		if (conn->ac == ac)
			lost(conn, ac->errstr[0] ? ac->errstr : "connection closed");
		status = req->timed_out		    ? -ETIMEDOUT
			 : conn->state == ST_CLOSED ? -ECANCELED
						    : -ECONNRESET;
	}
	if (req->cb)
		req->cb(conn, status, r, req->data);
	free(req);
}

static void handshake_cb(struct redis_conn *conn, int status, redisReply *reply, void *data)
{
	(void)data;
}

static void ping_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct request *req = privdata;
	struct redis_conn *conn = req->conn;
	redisReply *reply = r;
	bool ok = reply && reply->type == REDIS_REPLY_STATUS && strcmp(reply->str, "PONG") == 0;

	reply_cb(ac, r, privdata);
	if (!reply || conn->ac != ac || conn->state != ST_CONNECTING)
		return;
	if (!ok) {
		char why[160];
		snprintf(why, sizeof(why), "handshake refused: %s",
			 reply->type == REDIS_REPLY_ERROR ? reply->str
							  : "unexpected reply to PING");
		log_error(LOG_REDIS, "%s", why);
		drop(conn, why);
		return;
	}
	conn->state = ST_UP;
	conn->was_up = true;
	conn->stats.connects++;
	uv_timer_stop(&conn->retry_timer);
	backoff_reset(&conn->backoff);
	log_info(LOG_REDIS, "connected to %s", conn->path[0] ? conn->path : conn->host);
	if (conn->opts.state_cb)
		conn->opts.state_cb(conn, true, conn->opts.data);
}

static struct request *request_new(struct redis_conn *conn, redis_reply_cb cb, void *data)
{
	struct request *req = calloc(1, sizeof(*req));

	if (!req)
		return NULL;
	req->conn = conn;
	req->cb = cb;
	req->data = data;
	req->deadline = uv_now(conn->loop) + conn->opts.command_timeout_ms;
	return req;
}

static void request_link(struct redis_conn *conn, struct request *req)
{
	req->prev = conn->pending.prev;
	req->next = &conn->pending;
	conn->pending.prev->next = req;
	conn->pending.prev = req;
	arm_deadline(conn);
}

/* Queues an internal command of the handshake; fails the connect on error. */
static int send_internal(struct redis_conn *conn, redisCallbackFn *fn, int argc, const char **argv)
{
	struct request *req = request_new(conn, handshake_cb, NULL);

	if (!req)
		return -ENOMEM;
	if (redisAsyncCommandArgv(conn->ac, fn, req, argc, argv, NULL) != REDIS_OK) {
		free(req);
		return -EIO;
	}
	request_link(conn, req);
	return 0;
}

static void connect_cb(const redisAsyncContext *ac, int status)
{
	struct redis_conn *conn = ac->data;

	if (status != REDIS_OK && conn->ac == ac)
		lost(conn, ac->errstr[0] ? ac->errstr : "connect failed"); /* hiredis frees ac */
}

static void disconnect_cb(const redisAsyncContext *ac, int status)
{
	struct redis_conn *conn = ac->data;

	if (conn->ac == ac)
		lost(conn, ac->errstr[0] ? ac->errstr : "disconnected");
}

static void connect_deadline_cb(uv_timer_t *t)
{
	struct redis_conn *conn = t->data;

	if (conn->state == ST_CONNECTING)
		drop(conn, "connect timed out");
}

static int open_context(struct redis_conn *conn)
{
	redisAsyncContext *ac = conn->path[0] ? redisAsyncConnectUnix(conn->path)
					      : redisAsyncConnect(conn->host, conn->port);
	if (!ac)
		return -ENOMEM;
	if (ac->err) {
		log_debug(LOG_REDIS, "connect: %s", ac->errstr);
		redisAsyncFree(ac);
		return -ECONNREFUSED;
	}
	if (redis_uv_attach(ac, conn->loop) < 0) {
		redisAsyncFree(ac);
		return -ENOMEM;
	}
	ac->data = conn;
	redisAsyncSetConnectCallback(ac, connect_cb);
	redisAsyncSetDisconnectCallback(ac, disconnect_cb);
	conn->ac = ac;
	return 0;
}

static void start_connect(struct redis_conn *conn)
{
	const char *auth[] = { "AUTH", conn->password };
	const char *ping[] = { "PING" };

	if (conn->state == ST_CLOSED)
		return;
	if (open_context(conn) < 0) {
		conn->stats.failed_connects++;
		schedule_reconnect(conn);
		return;
	}
	conn->state = ST_CONNECTING;
	uv_timer_start(&conn->retry_timer, connect_deadline_cb, conn->opts.connect_timeout_ms, 0);
	int rc = conn->password[0] ? send_internal(conn, reply_cb, 2, auth) : 0;
	if (rc == 0)
		rc = send_internal(conn, ping_cb, 1, ping);
	if (rc < 0)
		drop(conn, "could not queue the handshake");
}

static void deadline_cb(uv_timer_t *t)
{
	struct redis_conn *conn = t->data;
	struct request *head = conn->pending.next;

	if (head == &conn->pending)
		return;
	if (head->deadline > uv_now(conn->loop)) {
		arm_deadline(conn);
		return;
	}
	head->timed_out = true;
	conn->stats.timeouts++;
	drop(conn, "command timed out");
}

int redis_conn_new(uv_loop_t *loop, const struct redis_conn_options *opts, struct redis_conn **out)
{
	struct redis_conn *conn;

	if (!opts->url || opts->connect_timeout_ms == 0 || opts->command_timeout_ms == 0)
		return -EINVAL;
	conn = calloc(1, sizeof(*conn));
	if (!conn)
		return -ENOMEM;
	if (redis_url_parse(opts->url, conn->host, sizeof(conn->host), &conn->port, conn->path,
			    sizeof(conn->path), conn->password, sizeof(conn->password)) < 0) {
		free(conn);
		return -EINVAL;
	}
	conn->url = strdup(opts->url);
	if (!conn->url) {
		free(conn);
		return -ENOMEM;
	}
	conn->loop = loop;
	conn->opts = *opts;
	conn->opts.url = conn->url;
	conn->pending.prev = conn->pending.next = &conn->pending;
	conn->rng = backoff_seed(uv_hrtime(), conn);
	backoff_init(&conn->backoff, opts->reconnect_min_ms, opts->reconnect_max_ms);
	uv_timer_init(loop, &conn->retry_timer);
	uv_timer_init(loop, &conn->deadline_timer);
	conn->retry_timer.data = conn->deadline_timer.data = conn;
	conn->open_handles = 2;
	start_connect(conn);
	*out = conn;
	return 0;
}

/* Whether a command name (len bytes) is one whose callback hiredis calls more than once
 * (subscriptions, MONITOR): this layer frees its request at the first reply. */
static bool streaming(const char *name, size_t len)
{
	static const char *const names[] = { "subscribe", "psubscribe", "ssubscribe", "monitor" };

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (len == strlen(names[i]) && strncasecmp(name, names[i], len) == 0)
			return true;
	}
	return false;
}

int redis_conn_command_argv(struct redis_conn *conn, redis_reply_cb cb, void *data, int argc,
			    const char **argv, const size_t *argvlen)
{
	if (argc < 1 || streaming(argv[0], argvlen ? argvlen[0] : strlen(argv[0])))
		return -EINVAL;
	if (conn->state == ST_CLOSED)
		return -ESHUTDOWN;
	if (conn->state != ST_UP) {
		conn->stats.refused++;
		return -ENOTCONN;
	}
	struct request *req = request_new(conn, cb, data);
	if (!req)
		return -ENOMEM;
	if (redisAsyncCommandArgv(conn->ac, reply_cb, req, argc, argv, argvlen) != REDIS_OK) {
		free(req);
		return -ENOMEM;
	}
	request_link(conn, req);
	return 0;
}

int redis_conn_command(struct redis_conn *conn, redis_reply_cb cb, void *data, const char *fmt, ...)
{
	va_list ap;
	char *cmd = NULL;
	size_t skip = strspn(fmt, " ");

	if (streaming(fmt + skip, strcspn(fmt + skip, " ")))
		return -EINVAL;
	va_start(ap, fmt);
	int len = redisvFormatCommand(&cmd, fmt, ap);
	va_end(ap);
	if (len < 0)
		return -EINVAL;
	int rc;
	if (conn->state == ST_CLOSED) {
		rc = -ESHUTDOWN;
	} else if (conn->state != ST_UP) {
		conn->stats.refused++;
		rc = -ENOTCONN;
	} else {
		struct request *req = request_new(conn, cb, data);
		rc = req ? 0 : -ENOMEM;
		if (req && redisAsyncFormattedCommand(conn->ac, reply_cb, req, cmd, (size_t)len) !=
				   REDIS_OK) {
			free(req);
			rc = -ENOMEM;
		} else if (req) {
			request_link(conn, req);
		}
	}
	redisFreeCommand(cmd);
	return rc;
}

bool redis_conn_is_up(const struct redis_conn *conn)
{
	return conn->state == ST_UP;
}

void redis_conn_get_stats(const struct redis_conn *conn, struct redis_conn_stats *out)
{
	*out = conn->stats;
}

static void handle_closed_cb(uv_handle_t *h)
{
	struct redis_conn *conn = h->data;

	if (--conn->open_handles > 0)
		return;
	if (conn->closed_cb)
		conn->closed_cb(conn->closed_data);
	free(conn->url);
	free(conn);
}

void redis_conn_close(struct redis_conn *conn, void (*closed_cb)(void *data), void *data)
{
	redisAsyncContext *ac = conn->ac;

	conn->state = ST_CLOSED;
	conn->ac = NULL;
	conn->closed_cb = closed_cb;
	conn->closed_data = data;
	if (ac)
		redisAsyncFree(ac); /* every pending callback runs now with -ECANCELED */
	uv_close((uv_handle_t *)&conn->retry_timer, handle_closed_cb);
	uv_close((uv_handle_t *)&conn->deadline_timer, handle_closed_cb);
}
