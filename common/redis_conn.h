/* A Redis command connection on a libuv loop that reconnects by itself.
 *
 * Wraps one hiredis async context (through redis_uv.c). Created with redis_conn_new(), it
 * connects when redis_conn_start() is called. Each connection performs a handshake before it
 * reports itself up, in this order:
 *   1. AUTH (when the URL has a password), PING, CLIENT SETNAME (with a name), INFO server
 *      (the server's run_id), pipelined;
 *   2. the on-connect hooks, one after the other: first the built-in redis_hook_noeviction()
 *      (maxmemory-policy must be noeviction, SPEC §7), which every connection runs unless its
 *      options say allow_eviction, then the owner's (redis_conn_add_hook()); a hook may refuse
 *      the server;
 *   3. SCRIPT LOAD of every script of the registry (redis_script.h) and GET of the generation
 *      key, pipelined.
 * The whole handshake has the connect deadline. A refused or failed handshake drops the
 * connection and retries after the backoff (an operator may fix the server meanwhile).
 *
 * The lost-data guard. Every up event carries the server's run_id and whether it differs from
 * the previous up connection's (a restart, or a failover to a replica that may lag), and the
 * value of the generation key (redis_conn_options.generation_key), which the owner writes when
 * it builds its state and checks in every script (REDIS_SCRIPT_GUARDED): together they see a
 * restart, a failover and a FLUSHALL of a live server.
 *
 * Commands are pipelined. While the connection is down, they are refused at once with
 * -ENOTCONN; when it goes down, every command sent and not yet answered completes with
 * -ECONNRESET (the command may or may not have run), and the one whose deadline passed with
 * -ETIMEDOUT. Reconnects follow a capped, jittered backoff. Every log line names the connection
 * ("conn":"redis[<name>]").
 *
 * The process must ignore SIGPIPE (signal(SIGPIPE, SIG_IGN), as `dispatcher run` does): hiredis
 * 0.14 writes with write(2), and a command written in the instant the server closes the socket
 * would otherwise kill the process without a word instead of failing with -ECONNRESET.
 *
 * Async contract: if redis_conn_command*(), redis_conn_evalsha() or redis_conn_hook_command_argv()
 * returns an error the callback is never called; otherwise it is called exactly once: with the
 * reply, with a transport error, or with -ECANCELED when the connection is closed by its owner.
 * Callbacks may send commands and may close the connection.
 */
#ifndef DSP_REDIS_CONN_H
#define DSP_REDIS_CONN_H

#include "redis_script.h"

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct redis_conn;

/* status: 0 with reply (borrowed: valid only during the callback; it may be an error reply,
 * REDIS_REPLY_ERROR, which is the command's own answer), or a negative code with reply NULL. */
typedef void (*redis_reply_cb)(struct redis_conn *conn, int status, redisReply *reply, void *data);

enum redis_conn_event_type {
	REDIS_CONN_UP,	    /* handshake done: hooks passed, scripts loaded, generation read */
	REDIS_CONN_DOWN,    /* an up connection was lost */
	REDIS_CONN_REFUSED, /* a hook (or a script load) refused the server; retried later */
};

/* What the owner is told. Every pointer is borrowed: valid only during the callback. */
struct redis_conn_event {
	enum redis_conn_event_type type;
	const char *run_id;	/* UP: the server's run_id (INFO server); "" if not reported */
	bool new_server;	/* UP: run_id differs from the previous up connection's (false on
				 * the first up, and when either run_id is unknown) */
	const char *generation; /* UP: value of the generation key; NULL when it is absent or no
				 * key is configured */
	size_t generation_len;	/* UP: its length (binary-safe) */
	int status;		/* REFUSED: the hook's code (redis_hook_noeviction: DSP_ECONFIG) */
	const char *message;	/* REFUSED: why, naming the setting and the fix */
};

/* Called on each transition (up; down only after an up) and on each refusal. May close conn. */
typedef void (*redis_event_cb)(struct redis_conn *conn, const struct redis_conn_event *ev,
			       void *data);

struct redis_conn_options {
	const char *url;	       /* a REDIS_URL, see redis_url_parse() (copied) */
	const char *name;	       /* labels log lines "redis[<name>]" and is set as the client
					* name (CLIENT SETNAME; printable ASCII, no space); NULL:
					* "redis", no client name. Copied. */
	uint64_t connect_timeout_ms;   /* deadline of one connect + handshake (hooks included) */
	uint64_t command_timeout_ms;   /* deadline of one command; past it the connection drops */
	uint64_t reconnect_min_ms;     /* first reconnect delay */
	uint64_t reconnect_max_ms;     /* cap on the reconnect delay */
	struct redis_scripts *scripts; /* loaded on every connect; borrowed, must outlive conn;
					* frozen by redis_conn_start(). May be NULL. */
	const char *generation_key;    /* read on every connect and reported on up; NULL: none.
					* Copied. */
	bool allow_eviction;	       /* skip the maxmemory-policy check (see above): only for
					* connections that store nothing that matters */
	redis_event_cb event_cb;       /* may be NULL */
	void *data;		       /* passed to event_cb, borrowed (hooks get their own) */
};

struct redis_conn_stats {
	uint64_t connects;	  /* handshakes completed (ups) */
	uint64_t disconnects;	  /* up -> down transitions */
	uint64_t timeouts;	  /* commands past their deadline */
	uint64_t refused;	  /* commands refused because the connection was down */
	uint64_t failed_connects; /* connect attempts that failed (refused, reset, timed out) */
	uint64_t refusals;	  /* handshakes a hook or a script load refused */
	uint64_t new_servers;	  /* ups whose run_id differed from the previous up's */
	uint64_t script_loads;	  /* SCRIPT LOADs answered during handshakes */
	uint64_t script_reloads;  /* calls retried with EVAL after a NOSCRIPT answer */
	uint64_t lookups;	  /* host-name lookups started (on libuv's thread pool) */
};

/* Creates a connection; it connects when redis_conn_start() is called. *out is owned by the
 * caller until redis_conn_close(). Returns 0, -EINVAL (bad URL, name or options) or -ENOMEM. */
int redis_conn_new(uv_loop_t *loop, const struct redis_conn_options *opts, struct redis_conn **out);

/* One run of an on-connect hook: it may send commands with redis_conn_hook_command_argv(conn,
 * run, ...) and must end with redis_conn_hook_done(conn, run, ...) exactly once (at once or from
 * a reply callback, within the connect deadline). data is the hook's own (redis_conn_add_hook). */
typedef void (*redis_hook_cb)(struct redis_conn *conn, uint64_t run, void *data);

/* Adds a hook (name copied, for log lines) run on every connect after PING and before the
 * scripts load, in the order added, after the built-in maxmemory-policy check. Only before
 * redis_conn_start(): returns -EBUSY afterwards, 0 or -ENOMEM otherwise. */
int redis_conn_add_hook(struct redis_conn *conn, const char *name, redis_hook_cb cb, void *data);

/* Starts connecting (and freezes the script registry). Returns 0, or -EBUSY if already
 * started. */
int redis_conn_start(struct redis_conn *conn);

/* Sends a command from inside a hook's run (the connection is not up yet). Same as
 * redis_conn_command_argv() otherwise. Returns 0, -ESTALE when run is not the hook run in
 * progress (the connection was lost meanwhile), -EINVAL, -ENOMEM. */
int redis_conn_hook_command_argv(struct redis_conn *conn, uint64_t run, redis_reply_cb cb,
				 void *data, int argc, const char **argv, const size_t *argvlen);

/* Ends a hook's run: status 0 lets the handshake go on; a negative code refuses the server with
 * message (copied; it should name the setting and the fix): logged at error, reported as
 * REDIS_CONN_REFUSED, connection dropped and retried after the backoff. Ignored when run is not
 * the hook run in progress. */
void redis_conn_hook_done(struct redis_conn *conn, uint64_t run, int status, const char *message);

/* The built-in hook, run first on every connection whose options do not say allow_eviction
 * (adding it again runs it twice): refuses (DSP_ECONFIG) a server whose maxmemory-policy (read
 * from INFO memory, which works where CONFIG is renamed) is not noeviction: an evicted key would
 * lose data silently. data is unused. */
void redis_hook_noeviction(struct redis_conn *conn, uint64_t run, void *data);

/* Sends a command given as argv (copied by hiredis; binary-safe with argvlen, which may be NULL
 * for NUL-terminated strings). cb may be NULL when the answer is not wanted. Returns 0,
 * -ENOTCONN while down, -ESHUTDOWN after close, -ENOMEM, or -EINVAL for SUBSCRIBE, PSUBSCRIBE,
 * SSUBSCRIBE and MONITOR, whose replies keep coming (see redis_sub.h), and for (P)UNSUBSCRIBE. */
int redis_conn_command_argv(struct redis_conn *conn, redis_reply_cb cb, void *data, int argc,
			    const char **argv, const size_t *argvlen);

/* printf-style variant of redis_conn_command_argv (hiredis formatting: %s, %b, %d ...). The
 * commands refused are recognised in the formatted command, so "%s", "SUBSCRIBE" is refused
 * too; -EINVAL also when fmt formats no command. */
int redis_conn_command(struct redis_conn *conn, redis_reply_cb cb, void *data, const char *fmt,
		       ...);

/* Runs script (a handle of this connection's registry) with EVALSHA: argv holds its keys then
 * its arguments (copied; argvlen may be NULL), checked against the script's header. A NOSCRIPT
 * answer (the server lost its script cache) is retried once with EVAL before cb sees anything
 * (counted in script_reloads); the retried call then runs, and is answered, after the commands
 * sent after it. Between a MULTI sent on this connection and its EXEC or DISCARD the call goes
 * out as EVAL (a NOSCRIPT inside a transaction could not be retried), and a NOSCRIPT read then
 * is handed to cb as it is (a retry would join that transaction). Returns 0, -EINVAL (script
 * not in this connection's registry, or argc does not fit its header), -ENOTCONN, -ESHUTDOWN,
 * -ENOMEM. */
int redis_conn_evalsha(struct redis_conn *conn, const struct redis_script *script,
		       redis_reply_cb cb, void *data, int argc, const char **argv,
		       const size_t *argvlen);

/* Whether the handshake has completed and the connection is usable now. */
bool redis_conn_is_up(const struct redis_conn *conn);

/* The label of log lines, "redis[<name>]" (borrowed, lives as long as conn). */
const char *redis_conn_label(const struct redis_conn *conn);

/* The run_id and version (INFO server) of the server of the last up connection; "" before the
 * first. Borrowed; valid until the next event. */
const char *redis_conn_run_id(const struct redis_conn *conn);
const char *redis_conn_server_version(const struct redis_conn *conn);

/* Counters since creation. */
void redis_conn_get_stats(const struct redis_conn *conn, struct redis_conn_stats *out);

/* Stops reconnecting, completes every pending command with -ECANCELED, and frees conn once its
 * libuv handles are closed (then calls closed_cb, which may be NULL). conn must not be used
 * after this call. Safe from any callback of conn. */
void redis_conn_close(struct redis_conn *conn, void (*closed_cb)(void *data), void *data);

/* A REDIS_URL, parsed. */
struct redis_url {
	char host[256];	    /* TCP: name or address ("::1" without brackets); "" for a socket */
	int port;	    /* TCP port, 6379 when not given */
	char path[108];	    /* unix socket path; "" for TCP */
	char user[128];	    /* ACL user ("" = the default user) */
	char password[256]; /* "" = no AUTH (with a user: AUTH user "", for a nopass user) */
	bool auth;	    /* send AUTH: a user or a password was given */
	int db;		    /* logical database, SELECTed before the connection is up (0..65535) */
};

/* Parses a REDIS_URL: redis://[user[:password]@]host[:port][/db] (host may be a bracketed IPv6
 * literal; user and password may be percent-encoded) or unix:///path[?db=N]. Returns 0 or
 * -EINVAL; *out is fully written either way. Exposed for tests and for the settings check. */
int redis_url_parse(const char *url, struct redis_url *out);

#endif
