/* The handshake of a Redis command connection (see redis_conn.h): hello (AUTH, PING, CLIENT
 * SETNAME, INFO server), the owner's hooks, then SCRIPT LOAD and the generation key, before the
 * connection reports up. Each step runs only while the connection is still connecting: a reply
 * that comes with an error status belongs to a connection already lost and is ignored. */
#include "redis_conn_int.h"

#include "error.h"
#include "log.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void load_scripts(struct redis_conn *conn);

/* Copies the value of field ("run_id") of an INFO reply into out. Returns whether it is there. */
static bool info_field(const redisReply *r, const char *field, char *out, size_t outlen)
{
	size_t fl = strlen(field);

	if (r->type != REDIS_REPLY_STRING)
		return false;
	for (const char *p = r->str; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (strncmp(p, field, fl) == 0 && p[fl] == ':') {
			snprintf(out, outlen, "%.*s", (int)strcspn(p + fl + 1, "\r\n"), p + fl + 1);
			return true;
		}
	}
	return false;
}

static bool connecting(const struct redis_conn *conn, int status)
{
	return status == 0 && conn->state == ST_CONNECTING;
}

/* The server answered the hello with an error: drop (logged at error) and retry later. */
static void hello_failed(struct redis_conn *conn, const char *what, const redisReply *r)
{
	char why[256];

	snprintf(why, sizeof(why), "%s refused: %s", what,
		 r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
	conn->refusing = true;
	conn_drop(conn, why);
}

/* A hook or a script load refused the server: drop, count, tell the owner, retry later. */
static void refuse(struct redis_conn *conn, int status, const char *message)
{
	char msg[512];

	snprintf(msg, sizeof(msg), "refused: %s", message);
	conn->stats.refusals++;
	conn->refusing = true;
	conn_drop(conn, msg);
	if (conn->opts.event_cb) {
		struct redis_conn_event ev = {
			.type = REDIS_CONN_REFUSED,
			.status = status,
			.message = message,
		};
		conn->opts.event_cb(conn, &ev, conn->opts.data);
	}
}

static void auth_cb(struct redis_conn *conn, int status, redisReply *r, void *data)
{
	if (connecting(conn, status) && r->type == REDIS_REPLY_ERROR)
		hello_failed(conn, "AUTH", r);
}

static void select_cb(struct redis_conn *conn, int status, redisReply *r, void *data)
{
	if (connecting(conn, status) && r->type == REDIS_REPLY_ERROR)
		hello_failed(conn, "SELECT", r);
}

static void ping_cb(struct redis_conn *conn, int status, redisReply *r, void *data)
{
	if (connecting(conn, status) &&
	    (r->type != REDIS_REPLY_STATUS || strcmp(r->str, "PONG") != 0))
		hello_failed(conn, "PING", r);
}

static void setname_cb(struct redis_conn *conn, int status, redisReply *r, void *data)
{
	if (connecting(conn, status) && r->type == REDIS_REPLY_ERROR)
		LOG_CONN(LOG_WARN, LOG_REDIS, conn->label, "CLIENT SETNAME refused: %s", r->str);
}

static void next_hook(struct redis_conn *conn)
{
	struct list_node *n = conn->hook ? conn->hook->node.next : conn->hooks.next;

	if (n == &conn->hooks) {
		conn->hook = NULL;
		conn->hook_run = 0;
		load_scripts(conn);
		return;
	}
	conn->hook = list_entry(n, struct hook, node);
	conn->hook_run = ++conn->hook_seq;
	LOG_CONN(LOG_DEBUG, LOG_REDIS, conn->label, "on-connect hook %s", conn->hook->name);
	conn->hook->cb(conn, conn->hook_run, conn->hook->data);
}

static void info_cb(struct redis_conn *conn, int status, redisReply *r, void *data)
{
	if (!connecting(conn, status))
		return;
	if (!info_field(r, "run_id", conn->run_id, sizeof(conn->run_id)))
		LOG_CONN(LOG_WARN, LOG_REDIS, conn->label,
			 "INFO server gave no run_id (%s): a restart of the server cannot be told",
			 r->type == REDIS_REPLY_ERROR ? r->str : "field missing");
	info_field(r, "redis_version", conn->version, sizeof(conn->version));
	conn->phase = PH_HOOKS;
	conn->hook = NULL;
	next_hook(conn);
}

void handshake_begin(struct redis_conn *conn)
{
	const char *auth_user[] = { "AUTH", conn->addr.user, conn->addr.password };
	const char *auth[] = { "AUTH", conn->addr.password };
	bool user = conn->addr.user[0] != '\0';
	char db[16];
	const char *select[] = { "SELECT", db };
	const char *ping[] = { "PING" };
	const char *setname[] = { "CLIENT", "SETNAME", conn->name };
	const char *info[] = { "INFO", "server" };
	int rc = 0;

	conn->phase = PH_HELLO;
	conn->run_id[0] = conn->version[0] = '\0';
	snprintf(db, sizeof(db), "%d", conn->addr.db);
	if (conn->addr.auth)
		rc = conn_send_argv(conn, auth_cb, NULL, user ? 3 : 2, user ? auth_user : auth,
				    NULL);
	if (rc == 0 && conn->addr.db != 0) /* before anything else touches a key */
		rc = conn_send_argv(conn, select_cb, NULL, 2, select, NULL);
	if (rc == 0)
		rc = conn_send_argv(conn, ping_cb, NULL, 1, ping, NULL);
	if (rc == 0 && conn->name)
		rc = conn_send_argv(conn, setname_cb, NULL, 3, setname, NULL);
	if (rc == 0)
		rc = conn_send_argv(conn, info_cb, NULL, 2, info, NULL);
	if (rc < 0)
		conn_drop(conn, "could not queue the handshake");
}

int redis_conn_hook_command_argv(struct redis_conn *conn, uint64_t run, redis_reply_cb cb,
				 void *data, int argc, const char **argv, const size_t *argvlen)
{
	if (run == 0 || run != conn->hook_run || conn->state != ST_CONNECTING)
		return -ESTALE;
	if (argc < 1 || conn_streaming(argv[0], argvlen ? argvlen[0] : strlen(argv[0])))
		return -EINVAL;
	return conn_send_argv(conn, cb, data, argc, argv, argvlen);
}

void redis_conn_hook_done(struct redis_conn *conn, uint64_t run, int status, const char *message)
{
	char msg[400];

	if (run == 0 || run != conn->hook_run || conn->state != ST_CONNECTING)
		return;
	if (status == 0) {
		next_hook(conn);
		return;
	}
	snprintf(msg, sizeof(msg), "hook %s: %s", conn->hook->name,
		 message ? message : dsp_strerror(status));
	refuse(conn, status, msg);
}

static void noeviction_cb(struct redis_conn *conn, int status, redisReply *r, void *data)
{
	uint64_t run = (uint64_t)(uintptr_t)data;
	char policy[64], msg[320];

	if (status < 0) {
		redis_conn_hook_done(conn, run, status, "INFO memory failed");
		return;
	}
	if (!info_field(r, "maxmemory_policy", policy, sizeof(policy))) {
		snprintf(msg, sizeof(msg),
			 "INFO memory gave no maxmemory_policy (%s): cannot check that "
			 "maxmemory-policy is noeviction",
			 r->type == REDIS_REPLY_ERROR ? r->str : "field missing");
		redis_conn_hook_done(conn, run, DSP_ECONFIG, msg);
		return;
	}
	if (strcmp(policy, "noeviction") == 0) {
		redis_conn_hook_done(conn, run, 0, NULL);
		return;
	}
	snprintf(msg, sizeof(msg),
		 "maxmemory-policy is %s, so Redis may evict keys and lose their data: set "
		 "maxmemory-policy noeviction (CONFIG SET maxmemory-policy noeviction, and in "
		 "redis.conf so that it survives a restart)",
		 policy);
	redis_conn_hook_done(conn, run, DSP_ECONFIG, msg);
}

void redis_hook_noeviction(struct redis_conn *conn, uint64_t run, void *data)
{
	const char *argv[] = { "INFO", "memory" };
	int rc = redis_conn_hook_command_argv(conn, run, noeviction_cb, (void *)(uintptr_t)run, 2,
					      argv, NULL);

	if (rc < 0)
		redis_conn_hook_done(conn, run, rc, "could not send INFO memory");
}

static void up(struct redis_conn *conn)
{
	bool changed =
		conn->up_run_id[0] && conn->run_id[0] && strcmp(conn->up_run_id, conn->run_id) != 0;
	struct redis_conn_event ev = {
		.type = REDIS_CONN_UP,
		.run_id = conn->run_id,
		.new_server = changed,
		.generation = conn->generation,
		.generation_len = conn->generation_len,
	};

	conn->state = ST_UP;
	conn->stats.connects++;
	conn->stats.new_servers += changed;
	uv_timer_stop(&conn->retry_timer);
	backoff_reset(&conn->backoff);
	LOG_CONN(changed ? LOG_WARN : LOG_INFO, LOG_REDIS, conn->label,
		 "connected to %s (Redis %s, run_id %.8s%s%s)",
		 conn->addr.path[0] ? conn->addr.path : conn->addr.host, conn->version,
		 conn->run_id, changed ? ", a new server: it may have lost data" : "",
		 conn->gen_key && !conn->generation ? ", no generation key" : "");
	memcpy(conn->up_run_id, conn->run_id, sizeof(conn->up_run_id));
	memcpy(conn->up_version, conn->version, sizeof(conn->up_version));
	if (conn->opts.event_cb)
		conn->opts.event_cb(conn, &ev, conn->opts.data);
}

static void step_done(struct redis_conn *conn)
{
	if (--conn->hs_left == 0)
		up(conn);
}

static void load_cb(struct redis_conn *conn, int status, redisReply *r, void *data)
{
	const struct redis_script *s = data;
	char msg[320];

	if (!connecting(conn, status))
		return;
	if (r->type == REDIS_REPLY_STRING && strcmp(r->str, redis_script_sha(s)) == 0) {
		conn->stats.script_loads++;
		step_done(conn);
		return;
	}
	snprintf(msg, sizeof(msg), "SCRIPT LOAD of %s failed: %s", redis_script_name(s),
		 r->type == REDIS_REPLY_ERROR ? r->str : "the server's SHA-1 differs from ours");
	refuse(conn, DSP_EREDIS, msg);
}

static void generation_cb(struct redis_conn *conn, int status, redisReply *r, void *data)
{
	char msg[320];

	if (!connecting(conn, status))
		return;
	if (r->type == REDIS_REPLY_STRING) {
		conn->generation = malloc(r->len + 1);
		if (!conn->generation) {
			conn_drop(conn, "out of memory");
			return;
		}
		memcpy(conn->generation, r->str, r->len + 1);
		conn->generation_len = r->len;
	} else if (r->type != REDIS_REPLY_NIL) {
		snprintf(msg, sizeof(msg), "GET of the generation key %s failed: %s", conn->gen_key,
			 r->type == REDIS_REPLY_ERROR ? r->str : "not a string");
		refuse(conn, DSP_EREDIS, msg);
		return;
	}
	step_done(conn);
}

static void load_scripts(struct redis_conn *conn)
{
	struct redis_scripts *reg = conn->opts.scripts;
	size_t n = reg ? redis_scripts_count(reg) : 0;
	const char *get[] = { "GET", conn->gen_key };
	int rc = 0;

	conn->phase = PH_LOAD;
	conn->hs_left = 0;
	free(conn->generation);
	conn->generation = NULL;
	conn->generation_len = 0;
	for (size_t i = 0; i < n && rc == 0; i++) {
		const struct redis_script *s = redis_scripts_at(reg, i);
		size_t lens[3] = { 6, 4, 0 };
		const char *argv[] = { "SCRIPT", "LOAD", redis_script_text(s, &lens[2]) };
		rc = conn_send_argv(conn, load_cb, (void *)s, 3, argv, lens);
		conn->hs_left += rc == 0;
	}
	if (rc == 0 && conn->gen_key) {
		rc = conn_send_argv(conn, generation_cb, NULL, 2, get, NULL);
		conn->hs_left += rc == 0;
	}
	if (rc < 0)
		conn_drop(conn, "could not queue the script loads");
	else if (conn->hs_left == 0)
		up(conn);
}
