/* A Redis connection on a libuv loop that reconnects by itself.
 *
 * Wraps one hiredis async context (through redis_uv.c). The connection performs a handshake
 * (AUTH when the URL has a password, then PING) before it reports itself up. While it is down,
 * commands are refused at once with -ENOTCONN; when it goes down, every command sent and not yet
 * answered completes with -ECONNRESET (the command may or may not have run), and the one whose
 * deadline passed with -ETIMEDOUT. Reconnects follow a capped, jittered backoff.
 *
 * Async contract: if redis_conn_command*() returns an error the callback is never called;
 * otherwise it is called exactly once: with the reply, with a transport error, or with
 * -ECANCELED when the connection is closed by its owner.
 */
#ifndef DSP_REDIS_CONN_H
#define DSP_REDIS_CONN_H

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct redis_conn;

/* status: 0 with reply (borrowed: valid only during the callback; it may be an error reply,
 * REDIS_REPLY_ERROR, which is the command's own answer), or a negative code with reply NULL. */
typedef void (*redis_reply_cb)(struct redis_conn *conn, int status, redisReply *reply, void *data);

/* Called on each transition: up after a successful handshake, down when an up connection is
 * lost or a connect attempt fails while it was up before. */
typedef void (*redis_state_cb)(struct redis_conn *conn, bool up, void *data);

struct redis_conn_options {
	const char *url;	     /* redis://[:password@]host:port or unix:///path (copied) */
	uint64_t connect_timeout_ms; /* deadline of one connect + handshake */
	uint64_t command_timeout_ms; /* deadline of one command; past it the connection drops */
	uint64_t reconnect_min_ms;   /* first reconnect delay */
	uint64_t reconnect_max_ms;   /* cap on the reconnect delay */
	redis_state_cb state_cb;     /* may be NULL */
	void *data;		     /* passed to state_cb, borrowed */
};

struct redis_conn_stats {
	uint64_t connects;	  /* successful handshakes */
	uint64_t disconnects;	  /* up -> down transitions */
	uint64_t timeouts;	  /* commands past their deadline */
	uint64_t refused;	  /* commands refused because the connection was down */
	uint64_t failed_connects; /* connect attempts that failed (refused, reset, timed out) */
};

/* Creates a connection and starts connecting. *out is owned by the caller until
 * redis_conn_close(). Returns 0, -EINVAL (bad URL or options) or -ENOMEM. */
int redis_conn_new(uv_loop_t *loop, const struct redis_conn_options *opts, struct redis_conn **out);

/* Sends a command given as argv (copied by hiredis). Returns 0, -ENOTCONN while down,
 * -ESHUTDOWN after close, -ENOMEM, or -EINVAL for SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE and MONITOR,
 * whose replies keep coming (this layer answers each command exactly once). */
int redis_conn_command_argv(struct redis_conn *conn, redis_reply_cb cb, void *data, int argc,
			    const char **argv, const size_t *argvlen);

/* printf-style variant of redis_conn_command_argv (hiredis formatting: %s, %b, %d ...). */
int redis_conn_command(struct redis_conn *conn, redis_reply_cb cb, void *data, const char *fmt,
		       ...);

/* Whether the handshake has completed and the connection is usable now. */
bool redis_conn_is_up(const struct redis_conn *conn);

/* Counters since creation. */
void redis_conn_get_stats(const struct redis_conn *conn, struct redis_conn_stats *out);

/* Stops reconnecting, completes every pending command with -ECANCELED, and frees conn once its
 * libuv handles are closed (then calls closed_cb, which may be NULL). conn must not be used
 * after this call. */
void redis_conn_close(struct redis_conn *conn, void (*closed_cb)(void *data), void *data);

/* Parses a REDIS_URL into host/port or a socket path. Returns 0 or -EINVAL. Exposed for tests
 * and for messages. host, path and password are written NUL-terminated, truncated to size. */
int redis_url_parse(const char *url, char *host, size_t hostlen, int *port, char *path,
		    size_t pathlen, char *password, size_t pwlen);

#endif
