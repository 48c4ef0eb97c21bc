/* The Redis command connection: state, pipelined requests, deadlines, EVALSHA with its NOSCRIPT
 * retry. The handshake (hooks, script loading, lost-data guard) is in redis_handshake.c. */
#include "redis_conn_int.h"

#include "log.h"
#include "redis_uv.h"

#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define SERVER(conn) ((conn)->addr.path[0] ? (conn)->addr.path : (conn)->addr.host)

static void start_connect(struct redis_conn *conn);
static void deadline_cb(uv_timer_t *t);

static void arm_deadline(struct redis_conn *conn)
{
	struct list_node *head = list_first(&conn->pending);

	if (!head || uv_is_active((uv_handle_t *)&conn->deadline_timer))
		return;
	uint64_t deadline = list_entry(head, struct request, node)->deadline;
	uint64_t now = uv_now(conn->loop);
	uv_timer_start(&conn->deadline_timer, deadline_cb, deadline > now ? deadline - now : 0, 0);
}

static void reconnect_cb(uv_timer_t *t)
{
	start_connect(t->data);
}

static void schedule_reconnect(struct redis_conn *conn)
{
	uint64_t delay = backoff_next(&conn->backoff, backoff_random(&conn->rng));

	conn->state = ST_DOWN;
	conn->hook_run = 0;
	uv_timer_stop(&conn->deadline_timer);
	uv_timer_start(&conn->retry_timer, reconnect_cb, delay, 0);
	LOG_CONN(LOG_DEBUG, LOG_REDIS, conn->label, "reconnecting in %llu ms",
		 (unsigned long long)delay);
}

static void log_failed_connect(struct redis_conn *conn, const char *why)
{
	/* Never up: the 1st, 2nd, 4th, 8th... failure at warn (a refusal at error), the others
	 * at debug. */
	unsigned n = conn->backoff.attempt;
	bool loud = (n & (n - 1)) == 0;
	enum log_level level = !loud ? LOG_DEBUG : conn->refusing ? LOG_ERROR : LOG_WARN;

	LOG_CONN(level, LOG_REDIS, conn->label, "connect to %s failed (attempt %u): %s",
		 SERVER(conn), n + 1, why);
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
		LOG_CONN(LOG_WARN, LOG_REDIS, conn->label, "connection to %s lost: %s",
			 SERVER(conn), why);
	} else {
		conn->stats.failed_connects++;
		log_failed_connect(conn, why);
	}
	conn->refusing = false;
	resolve_cursor_abandon(&conn->target);
	if (was_up)
		resolve_cursor_forget(&conn->target);
	schedule_reconnect(conn);
	if (was_up && conn->opts.event_cb) {
		struct redis_conn_event ev = { .type = REDIS_CONN_DOWN };
		conn->opts.event_cb(conn, &ev, conn->opts.data);
	}
}

void conn_drop(struct redis_conn *conn, const char *why)
{
	redisAsyncContext *ac = conn->ac;

	lost(conn, why);
	if (ac)
		redisAsyncFree(
			ac); /* pending callbacks run with NULL; deferred inside a callback */
}

static void request_free(struct request *req)
{
	free(req->cmd);
	free(req);
}

/* The formatted EVALSHA command cmd turned into EVAL with the script's text: the same first
 * line (argument count), then EVAL, the text, and everything after the SHA unchanged. Returns a
 * malloc'd, NUL-terminated command and its length (without the NUL), or NULL. */
static char *eval_command(const struct request *req, size_t *outlen)
{
	static const char evalsha[] = "$7\r\nEVALSHA\r\n$40\r\n";
	const char *nl = memchr(req->cmd, '\n', req->cmdlen);
	size_t first = nl ? (size_t)(nl + 1 - req->cmd) : 0;
	size_t skip = first + sizeof(evalsha) - 1 + 40 + 2;
	size_t textlen;
	const char *text = redis_script_text(req->script, &textlen);
	char head[64];

	if (!nl || req->cmdlen < skip || memcmp(req->cmd + first, evalsha, sizeof(evalsha) - 1))
		return NULL;
	int hl = snprintf(head, sizeof(head), "$4\r\nEVAL\r\n$%zu\r\n", textlen);
	size_t len = first + (size_t)hl + textlen + 2 + (req->cmdlen - skip);
	char *cmd = malloc(len + 1); /* NUL-terminated: hiredis 0.14 scans it with strchr */
	if (!cmd)
		return NULL;
	char *p = cmd;
	memcpy(p, req->cmd, first);
	memcpy(p += first, head, (size_t)hl);
	memcpy(p += hl, text, textlen);
	memcpy(p += textlen, "\r\n", 2);
	memcpy(p + 2, req->cmd + skip, req->cmdlen - skip);
	cmd[len] = '\0';
	*outlen = len;
	return cmd;
}

/* A NOSCRIPT answer to an EVALSHA not yet retried: sends it again as EVAL (which also puts the
 * script back in the server's cache) with the same request. Returns whether it did. */
static bool retry_noscript(struct redis_conn *conn, struct request *req, redisReply *reply,
			   redisCallbackFn *fn)
{
	size_t len = 0;
	char *cmd;

	/* Not while a MULTI of this connection is open: the EVAL would join that transaction. */
	if (!redis_reply_is_noscript(reply) || conn->state != ST_UP || !conn->ac || conn->in_multi)
		return false;
	cmd = eval_command(req, &len);
	if (!cmd)
		return false;
	int rc = redisAsyncFormattedCommand(conn->ac, fn, req, cmd, len);
	free(cmd);
	if (rc != REDIS_OK)
		return false;
	conn->stats.script_reloads++;
	redis_scripts_note_call(conn->opts.scripts, req->script, true);
	LOG_CONN(LOG_INFO, LOG_REDIS, conn->label,
		 "script %s was not in the server's cache: sent again with EVAL",
		 redis_script_name(req->script));
	req->script = NULL; /* once */
	req->deadline = uv_now(conn->loop) + conn->opts.command_timeout_ms;
	list_add_tail(&conn->pending, &req->node);
	arm_deadline(conn);
	return true;
}

static void reply_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct request *req = privdata;
	struct redis_conn *conn = req->conn;
	int status = 0;

	list_del(&req->node);
	if (!r) {
		if (conn->ac == ac)
			lost(conn, ac->errstr[0] ? ac->errstr : "connection closed");
		status = req->timed_out		    ? -ETIMEDOUT
			 : conn->state == ST_CLOSED ? -ECANCELED
						    : -ECONNRESET;
	} else if (req->script && retry_noscript(conn, req, r, reply_cb)) {
		return;
	}
	if (req->cb)
		req->cb(conn, status, r, req->data);
	request_free(req);
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
	list_add_tail(&conn->pending, &req->node);
	arm_deadline(conn);
}

/* Follows MULTI ... EXEC/DISCARD on the connection from the names of the commands sent. */
static void note_sent(struct redis_conn *conn, const char *name, size_t len)
{
	if (len == 5 && strncasecmp(name, "MULTI", len) == 0)
		conn->in_multi = true;
	else if ((len == 4 && strncasecmp(name, "EXEC", len) == 0) ||
		 (len == 7 && strncasecmp(name, "DISCARD", len) == 0))
		conn->in_multi = false;
}

int conn_send_argv(struct redis_conn *conn, redis_reply_cb cb, void *data, int argc,
		   const char **argv, const size_t *argvlen)
{
	if (!conn->ac)
		return -ENOTCONN;
	struct request *req = request_new(conn, cb, data);
	if (!req)
		return -ENOMEM;
	if (redisAsyncCommandArgv(conn->ac, reply_cb, req, argc, argv, argvlen) != REDIS_OK) {
		request_free(req);
		return -ENOMEM;
	}
	request_link(conn, req);
	note_sent(conn, argv[0], argvlen ? argvlen[0] : strlen(argv[0]));
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
		conn_drop(conn, conn->ac ? "connect timed out" : "connect timed out (host lookup)");
}

/* The attempt's address is known (a literal, "" with a socket path) or its lookup failed. */
static void target_cb(int status, const char *host, void *data)
{
	struct redis_conn *conn = data;
	redisAsyncContext *ac;
	char why[384];

	if (status < 0) {
		snprintf(why, sizeof(why), "cannot resolve %s: %s", conn->addr.host,
			 uv_strerror(status));
		lost(conn, why);
		return;
	}
	if (redis_uv_connect(conn->loop, host, conn->addr.port, conn->addr.path, conn->label, &ac) <
	    0) {
		conn->stats.failed_connects++;
		schedule_reconnect(conn);
		return;
	}
	ac->data = conn;
	redisAsyncSetConnectCallback(ac, connect_cb);
	redisAsyncSetDisconnectCallback(ac, disconnect_cb);
	conn->ac = ac;
	handshake_begin(conn);
}

/* One attempt: the connect deadline covers the host lookup (off the loop, resolve.h), the
 * connect and the handshake. hiredis is only ever given a numeric address or a socket path, so
 * it never calls getaddrinfo() on the loop. */
static void start_connect(struct redis_conn *conn)
{
	if (conn->state == ST_CLOSED)
		return;
	conn->in_multi = false;
	conn->state = ST_CONNECTING;
	uv_timer_start(&conn->retry_timer, connect_deadline_cb, conn->opts.connect_timeout_ms, 0);
	resolve_cursor_next(&conn->target);
}

static void deadline_cb(uv_timer_t *t)
{
	struct redis_conn *conn = t->data;
	struct list_node *first = list_first(&conn->pending);

	if (!first)
		return;
	struct request *head = list_entry(first, struct request, node);
	if (head->deadline > uv_now(conn->loop)) {
		arm_deadline(conn);
		return;
	}
	head->timed_out = true;
	conn->stats.timeouts++;
	conn_drop(conn, "command timed out");
}

/* Copies the option strings and checks the name (a client name is printable, no space). */
static int copy_options(struct redis_conn *conn, const struct redis_conn_options *opts)
{
	conn->opts = *opts;
	conn->url = strdup(opts->url);
	conn->name = opts->name ? strdup(opts->name) : NULL;
	conn->gen_key = opts->generation_key ? strdup(opts->generation_key) : NULL;
	if (!conn->url || (opts->name && !conn->name) || (opts->generation_key && !conn->gen_key))
		return -ENOMEM;
	conn->opts.url = conn->url;
	conn->opts.name = conn->name;
	conn->opts.generation_key = conn->gen_key;
	if (conn->name && (conn->name[0] == '\0' || strlen(conn->name) > 64))
		return -EINVAL;
	for (const char *p = conn->name; p && *p; p++) {
		if (*p <= ' ' || *p > '~')
			return -EINVAL;
	}
	if (conn->name)
		snprintf(conn->label, sizeof(conn->label), "redis[%s]", conn->name);
	else
		snprintf(conn->label, sizeof(conn->label), "redis");
	return 0;
}

static void conn_free(struct redis_conn *conn)
{
	struct list_node *n, *tmp;

	list_for_each_safe (n, tmp, &conn->hooks) {
		struct hook *h = list_entry(n, struct hook, node);
		free(h->name);
		free(h);
	}
	free(conn->generation);
	free(conn->url);
	free(conn->name);
	free(conn->gen_key);
	free(conn);
}

int redis_conn_new(uv_loop_t *loop, const struct redis_conn_options *opts, struct redis_conn **out)
{
	struct redis_conn *conn;

	if (!opts->url || opts->connect_timeout_ms == 0 || opts->command_timeout_ms == 0)
		return -EINVAL;
	conn = calloc(1, sizeof(*conn));
	if (!conn)
		return -ENOMEM;
	list_init(&conn->pending);
	list_init(&conn->hooks);
	int rc = copy_options(conn, opts);
	if (rc == 0 && redis_url_parse(opts->url, &conn->addr) < 0)
		rc = -EINVAL;
	/* The first hook, and not the owner's to remember: SPEC §7. */
	if (rc == 0 && !opts->allow_eviction)
		rc = redis_conn_add_hook(conn, "maxmemory-policy", redis_hook_noeviction, NULL);
	if (rc < 0) {
		conn_free(conn);
		return rc;
	}
	conn->loop = loop;
	resolve_cursor_init(&conn->target, loop, conn->addr.path[0] ? "" : conn->addr.host,
			    target_cb, conn);
	conn->rng = backoff_seed(uv_hrtime(), conn);
	backoff_init(&conn->backoff, opts->reconnect_min_ms, opts->reconnect_max_ms);
	uv_timer_init(loop, &conn->retry_timer);
	uv_timer_init(loop, &conn->deadline_timer);
	conn->retry_timer.data = conn->deadline_timer.data = conn;
	conn->open_handles = 2;
	*out = conn;
	return 0;
}

int redis_conn_add_hook(struct redis_conn *conn, const char *name, redis_hook_cb cb, void *data)
{
	if (conn->state != ST_NEW)
		return -EBUSY;
	struct hook *h = calloc(1, sizeof(*h));
	if (!h || !(h->name = strdup(name ? name : "hook"))) {
		free(h);
		return -ENOMEM;
	}
	h->cb = cb;
	h->data = data;
	list_add_tail(&conn->hooks, &h->node);
	return 0;
}

int redis_conn_start(struct redis_conn *conn)
{
	if (conn->state != ST_NEW)
		return -EBUSY;
	if (conn->opts.scripts)
		redis_scripts_freeze(conn->opts.scripts);
	conn->state = ST_DOWN;
	start_connect(conn);
	return 0;
}

bool conn_streaming(const char *name, size_t len)
{
	/* hiredis 0.14.1 drops one leading 'p' before it compares with the first three, and keeps
	 * a callback of those in its subscription table (or refuses UNSUBSCRIBE when the
	 * connection is not subscribed); SSUBSCRIBE it does not know, and its messages would have
	 * no callback at all. */
	static const char *const names[] = { "subscribe", "unsubscribe", "monitor" };

	if (len == 10 && strncasecmp(name, "ssubscribe", len) == 0)
		return true;
	if (len > 0 && (name[0] == 'p' || name[0] == 'P')) {
		name++;
		len--;
	}
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (len == strlen(names[i]) && strncasecmp(name, names[i], len) == 0)
			return true;
	}
	return false;
}

/* The name (first argument) of a formatted command "*N\r\n$L\r\nNAME\r\n...", or NULL. */
static const char *formatted_name(const char *cmd, size_t cmdlen, size_t *len)
{
	const char *end = cmd + cmdlen;
	const char *p = memchr(cmd, '\n', cmdlen);
	char *q;

	if (!p || ++p >= end || *p != '$')
		return NULL;
	unsigned long n = strtoul(p + 1, &q, 10);
	if (q + 2 > end || q[0] != '\r' || q[1] != '\n' || n > (size_t)(end - (q + 2)))
		return NULL;
	*len = n;
	return q + 2;
}

/* Whether the owner may send now: 0, -ESHUTDOWN or -ENOTCONN (counted). */
static int sendable(struct redis_conn *conn)
{
	if (conn->state == ST_CLOSED)
		return -ESHUTDOWN;
	if (conn->state != ST_UP || !conn->ac) {
		conn->stats.refused++;
		return -ENOTCONN;
	}
	return 0;
}

int redis_conn_command_argv(struct redis_conn *conn, redis_reply_cb cb, void *data, int argc,
			    const char **argv, const size_t *argvlen)
{
	if (argc < 1 || conn_streaming(argv[0], argvlen ? argvlen[0] : strlen(argv[0])))
		return -EINVAL;
	int rc = sendable(conn);
	return rc < 0 ? rc : conn_send_argv(conn, cb, data, argc, argv, argvlen);
}

/* Queues an already formatted command (ownership of cmd stays with the caller unless the
 * request keeps it, see redis_conn_evalsha). */
static int send_formatted(struct redis_conn *conn, struct request *req, const char *cmd, size_t len)
{
	if (redisAsyncFormattedCommand(conn->ac, reply_cb, req, cmd, len) != REDIS_OK)
		return -ENOMEM;
	request_link(conn, req);
	return 0;
}

int redis_conn_command(struct redis_conn *conn, redis_reply_cb cb, void *data, const char *fmt, ...)
{
	va_list ap;
	char *cmd = NULL;
	size_t namelen = 0;

	va_start(ap, fmt);
	int len = redisvFormatCommand(&cmd, fmt, ap);
	va_end(ap);
	if (len < 0)
		return -EINVAL;
	/* The name as sent, whatever the format looks like ("%s %s", "SUBSCRIBE", ...). */
	const char *name = formatted_name(cmd, (size_t)len, &namelen);
	int rc = !name || conn_streaming(name, namelen) ? -EINVAL : sendable(conn);
	if (rc < 0) {
		redisFreeCommand(cmd);
		return rc;
	}
	struct request *req = request_new(conn, cb, data);
	rc = req ? send_formatted(conn, req, cmd, (size_t)len) : -ENOMEM;
	if (rc < 0)
		free(req);
	else
		note_sent(conn, name, namelen);
	redisFreeCommand(cmd);
	return rc;
}

/* Formats EVALSHA sha numkeys argv... (EVAL text numkeys argv... when eval) into *cmd. Returns
 * its length or a negative code. */
static int format_evalsha(const struct redis_script *script, bool eval, int argc, const char **argv,
			  const size_t *argvlen, char **cmd)
{
	enum { SMALL = 32 };
	const char *sv[SMALL + 3];
	size_t sl[SMALL + 3];
	const char **v = sv;
	size_t *l = sl;
	char numkeys[16];

	if (argc > SMALL) {
		v = malloc((size_t)(argc + 3) * sizeof(*v));
		l = malloc((size_t)(argc + 3) * sizeof(*l));
	}
	int len = -ENOMEM;
	if (v && l) {
		snprintf(numkeys, sizeof(numkeys), "%d", redis_script_numkeys(script));
		v[0] = eval ? "EVAL" : "EVALSHA";
		v[1] = eval ? redis_script_text(script, &l[1]) : redis_script_sha(script);
		v[2] = numkeys;
		for (int i = 0; i < argc + 3; i++) {
			if (i >= 3)
				v[i] = argv[i - 3];
			if (i != 1 || !eval)
				l[i] = i >= 3 && argvlen ? argvlen[i - 3] : strlen(v[i]);
		}
		len = redisFormatCommandArgv(cmd, argc + 3, v, l);
		len = len < 0 ? -ENOMEM : len;
	}
	if (v != sv)
		free(v);
	if (l != sl)
		free(l);
	return len;
}

int redis_conn_evalsha(struct redis_conn *conn, const struct redis_script *script,
		       redis_reply_cb cb, void *data, int argc, const char **argv,
		       const size_t *argvlen)
{
	char *cmd = NULL;

	if (!script || redis_script_registry(script) != conn->opts.scripts || argc < 0 ||
	    (argc > 0 && !argv) || !redis_script_fits(script, argc))
		return -EINVAL;
	int rc = sendable(conn);
	if (rc < 0)
		return rc;
	/* Inside MULTI a NOSCRIPT would come in EXEC's answer, after the rest of the transaction
	 * has run, and could not be retried: send the text. */
	bool eval = conn->in_multi;
	int len = format_evalsha(script, eval, argc, argv, argvlen, &cmd);
	if (len < 0)
		return len;
	struct request *req = request_new(conn, cb, data);
	rc = req ? send_formatted(conn, req, cmd, (size_t)len) : -ENOMEM;
	if (rc < 0) {
		free(req);
		redisFreeCommand(cmd);
		return rc;
	}
	redis_scripts_note_call(conn->opts.scripts, script, false);
	if (eval) {
		redisFreeCommand(cmd); /* nothing to retry */
		return 0;
	}
	req->script = script;
	req->cmd = cmd;
	req->cmdlen = (size_t)len;
	return 0;
}

bool redis_conn_is_up(const struct redis_conn *conn)
{
	return conn->state == ST_UP;
}

const char *redis_conn_label(const struct redis_conn *conn)
{
	return conn->label;
}

const char *redis_conn_run_id(const struct redis_conn *conn)
{
	return conn->up_run_id;
}

const char *redis_conn_server_version(const struct redis_conn *conn)
{
	return conn->up_version;
}

void redis_conn_get_stats(const struct redis_conn *conn, struct redis_conn_stats *out)
{
	*out = conn->stats;
	out->lookups = conn->target.lookups;
}

static void handle_closed_cb(uv_handle_t *h)
{
	struct redis_conn *conn = h->data;

	if (--conn->open_handles > 0)
		return;
	if (conn->closed_cb)
		conn->closed_cb(conn->closed_data);
	conn_free(conn);
}

void redis_conn_close(struct redis_conn *conn, void (*closed_cb)(void *data), void *data)
{
	redisAsyncContext *ac = conn->ac;

	conn->state = ST_CLOSED;
	conn->ac = NULL;
	conn->hook_run = 0;
	conn->closed_cb = closed_cb;
	conn->closed_data = data;
	resolve_cursor_close(&conn->target);
	if (ac)
		redisAsyncFree(ac); /* every pending callback runs now with -ECANCELED */
	uv_close((uv_handle_t *)&conn->retry_timer, handle_closed_cb);
	uv_close((uv_handle_t *)&conn->deadline_timer, handle_closed_cb);
}
