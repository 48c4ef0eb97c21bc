/* A PostgreSQL connection on a libuv loop that reconnects by itself.
 *
 * libpq in non-blocking mode: PQconnectStart/PQconnectPoll to connect, PQsendQueryParams /
 * PQsendQueryPrepared to send, PQflush until the request is out, PQconsumeInput/PQisBusy/
 * PQgetResult when the socket is readable, all driven by one uv_poll_t on libpq's socket (the
 * shape of PgBouncer's test/asynctest.c). Statements registered with pg_conn_prepare() are
 * prepared again on every connection before it is reported up.
 *
 * One statement runs at a time; others wait in a FIFO queue. While the connection is down,
 * requests are refused at once with -ENOTCONN. When it goes down, the request in flight
 * completes with -ECONNRESET (it may or may not have been executed) and every queued request
 * with -ENOTCONN. A statement past its deadline completes with -ETIMEDOUT and the connection is
 * dropped and re-made (libpq 15 can only cancel with a blocking call). Reconnects follow a
 * capped, jittered backoff.
 *
 * Async contract: if pg_conn_exec*() returns an error the callback is never called; otherwise
 * it is called exactly once, also on pg_conn_close() (with -ECANCELED).
 */
#ifndef DSP_PG_CONN_H
#define DSP_PG_CONN_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

struct pg_conn;

/* status: 0 when the statement succeeded (res is PGRES_COMMAND_OK or PGRES_TUPLES_OK);
 * DSP_EPG when PostgreSQL reported an error (res holds it: PQresultErrorField(res,
 * PG_DIAG_SQLSTATE)); a negative errno with res NULL on a transport error (-ECONNRESET,
 * -ENOTCONN, -ETIMEDOUT, -ECANCELED) or when libpq refused a queued statement (-EINVAL). res is
 * borrowed: valid only during the callback. */
typedef void (*pg_result_cb)(struct pg_conn *conn, int status, const PGresult *res, void *data);

/* Called on each transition: up once connected and every statement prepared; down when an up
 * connection is lost. */
typedef void (*pg_state_cb)(struct pg_conn *conn, bool up, void *data);

struct pg_conn_options {
	const char *conninfo;	     /* libpq connection string or URI (copied) */
	uint64_t connect_timeout_ms; /* deadline of one connect + prepare */
	uint64_t query_timeout_ms;   /* deadline of one statement, from when it is sent */
	uint64_t reconnect_min_ms;   /* first reconnect delay */
	uint64_t reconnect_max_ms;   /* cap on the reconnect delay */
	unsigned max_queue;	     /* requests waiting at most (0: 10000); past it -EAGAIN */
	pg_state_cb state_cb;	     /* may be NULL */
	void *data;		     /* passed to state_cb, borrowed */
};

struct pg_conn_stats {
	uint64_t connects;    /* connections that came up */
	uint64_t disconnects; /* up -> down transitions */
	uint64_t timeouts;    /* statements past their deadline */
	uint64_t refused;     /* requests refused because the connection was down */
	uint64_t queries;     /* statements completed (any status) */
};

/* Creates a connection object; it connects when pg_conn_start() is called. *out is owned by the
 * caller until pg_conn_close(). Returns 0, -EINVAL or -ENOMEM. */
int pg_conn_new(uv_loop_t *loop, const struct pg_conn_options *opts, struct pg_conn **out);

/* Registers a named statement (name and sql copied), prepared on every connection. Only before
 * pg_conn_start(): returns -EBUSY afterwards, 0 or -ENOMEM otherwise. */
int pg_conn_prepare(struct pg_conn *conn, const char *name, const char *sql, int nparams);

/* Starts connecting. Returns 0 or -EBUSY if already started. */
int pg_conn_start(struct pg_conn *conn);

/* Queues a statement with text parameters (copied; NULL values are SQL NULL); sends it at once
 * when the connection is idle. Returns 0, -EINVAL (nparams outside 0..65535, or libpq refused
 * the statement itself), -ENOTCONN while down,
 * -ECONNRESET (the connection broke as it was sent; it is re-made), -EAGAIN when the queue is
 * full, -ESHUTDOWN after close, -ENOMEM. Never calls a callback before returning. */
int pg_conn_exec(struct pg_conn *conn, const char *sql, int nparams, const char *const *values,
		 pg_result_cb cb, void *data);

/* As pg_conn_exec() for a statement registered with pg_conn_prepare(); -ENOENT if the name is
 * unknown. */
int pg_conn_exec_prepared(struct pg_conn *conn, const char *name, int nparams,
			  const char *const *values, pg_result_cb cb, void *data);

/* Whether the connection is up (connected and prepared) now. */
bool pg_conn_is_up(const struct pg_conn *conn);

/* Counters since creation. */
void pg_conn_get_stats(const struct pg_conn *conn, struct pg_conn_stats *out);

/* Routes the server's NOTICE/WARNING messages on pg (any libpq connection, borrowed) into the
 * JSON log at debug level instead of libpq's raw lines on stderr. */
void pg_route_notices(PGconn *pg);

/* Stops reconnecting, completes every request with -ECANCELED, closes the connection, and frees
 * conn once its libuv handles are closed (then calls closed_cb, which may be NULL). */
void pg_conn_close(struct pg_conn *conn, void (*closed_cb)(void *data), void *data);

#endif
