/* One PostgreSQL connection on a libuv loop, in libpq's pipeline mode, that reconnects by itself.
 *
 * libpq in non-blocking pipeline mode on one uv_poll_t (the shape of PgBouncer's
 * test/asynctest.c): PQconnectStart/PQconnectPoll, then PQenterPipelineMode; requests are sent
 * with PQsendQueryParams / PQsendQueryPrepared, each followed by its own PQpipelineSync, so
 * many are in flight at once and their results come back in the order they were sent. A
 * request is one statement (pg_conn_exec) or several (pg_conn_batch): the statements of one
 * request, up to its sync, are one implicit transaction, so a failing statement aborts its own
 * request and nobody else's. Statements registered in a pg_stmts set are prepared on every
 * connection, and LISTEN is issued for every registered channel, before the connection is
 * reported up.
 *
 * Interactive transactions (pg_txn.h) hold the connection: while one is open, no other request
 * is sent on it. Multi-command scripts (pg_conn_script) and COPY (pg_copy.h) run outside
 * pipeline mode: the connection stops sending, waits until everything in flight has been
 * answered, leaves pipeline mode, runs them, and enters it again.
 *
 * Deadlines. A request waits in the send queue at most queue_timeout_ms: past it, it completes
 * with -ETIMEDOUT without being sent, and the connection is kept. Once sent, a request has
 * query_timeout_ms from the moment it left (a transaction: its own deadline for the whole):
 * past it, it completes with -ETIMEDOUT and the connection is dropped and re-made (libpq 15
 * can only cancel with a blocking call). Answers that arrived while the loop was busy are read
 * before anything is declared late.
 *
 * Failures. While the connection is down, requests are refused at once with -ENOTCONN. When it
 * goes down, every request that was sent completes with -ECONNRESET (it may or may not have
 * been executed; a timed-out one with -ETIMEDOUT), every request still queued with -ENOTCONN
 * (never sent), and a held transaction's requests with -ECONNRESET. Reconnects follow a capped,
 * jittered backoff.
 *
 * Async contract: if a function that takes a callback returns an error, the callback is never
 * called; otherwise it is called exactly once, also on pg_conn_close() (with -ECANCELED). No
 * callback is ever called before the function that registered it has returned.
 *
 * Every log line names the connection: "pg[<name>]".
 */
#ifndef DSP_PG_CONN_H
#define DSP_PG_CONN_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

struct pg_conn;
struct pg_stmt;
struct pg_stmts;

/* One statement, as the caller describes it. Everything it points to is borrowed for the call
 * and copied. */
struct pg_query {
	const struct pg_stmt *stmt; /* a registered statement, or NULL to send sql */
	const char *sql;	    /* statement text when stmt is NULL (one command, no COPY) */
	int nparams;		    /* 0..65535, as registered for stmt */
	const char *const *values;  /* nparams text values; a NULL entry is SQL NULL */
};

/* What a request produced. res[i] is the result of statement i (a script: of command i); on a
 * PostgreSQL error, res holds the results up to and including the failing statement's, which
 * is also error. All borrowed: valid only during the callback. */
struct pg_results {
	const PGresult *const *res; /* n results, in order */
	int n;
	const PGresult *error; /* the error PostgreSQL reported (status DSP_EPG), else NULL */
	int failed;	       /* index of the failing statement, or -1 */
};

/* status: 0 when every statement succeeded; DSP_EPG when PostgreSQL reported an error (the
 * SQLSTATE is PQresultErrorField(r->error, PG_DIAG_SQLSTATE)); a negative errno with r->n == 0
 * on a transport error or a deadline (-ECONNRESET, -ENOTCONN, -ETIMEDOUT, -ECANCELED). r is
 * never NULL and is borrowed for the callback. */
typedef void (*pg_result_cb)(int status, const struct pg_results *r, void *data);

/* Called on each transition: up once connected, every statement prepared and every channel
 * listened to; down when an up connection is lost. */
typedef void (*pg_state_cb)(struct pg_conn *conn, bool up, void *data);

/* A notification on a channel listened to. channel and payload are borrowed for the call. */
typedef void (*pg_notify_cb)(const char *channel, const char *payload, void *data);

struct pg_conn_options {
	const char *conninfo;	     /* libpq connection string or URI (copied) */
	const char *name;	     /* names the connection in logs: "pg[name]" (copied; NULL:
				      * "main") */
	uint64_t connect_timeout_ms; /* deadline of one connect + prepare + listen */
	uint64_t query_timeout_ms;   /* deadline of one request, from when it is sent */
	uint64_t queue_timeout_ms;   /* longest wait in the send queue (0: query_timeout_ms) */
	uint64_t reconnect_min_ms;   /* first reconnect delay */
	uint64_t reconnect_max_ms;   /* cap on the reconnect delay */
	unsigned max_queue;	     /* requests waiting at most (0: 10000); past it -EAGAIN */
	unsigned max_inflight;	     /* requests sent and not yet answered (0: 1024) */
	struct pg_stmts *stmts;	     /* statements shared with other connections (borrowed; must
				      * outlive conn), or NULL for a set of its own */
	pg_state_cb state_cb;	     /* may be NULL */
	void *data;		     /* passed to state_cb, borrowed */
};

struct pg_conn_stats {
	uint64_t connects;	 /* connections that came up */
	uint64_t disconnects;	 /* up -> down transitions */
	uint64_t timeouts;	 /* requests past their deadline once sent */
	uint64_t queue_timeouts; /* requests that waited too long and were never sent */
	uint64_t refused;	 /* requests refused because the connection was down */
	uint64_t queries;	 /* requests completed (any status) */
	uint64_t notifies;	 /* notifications delivered */
	uint64_t inflight_peak;	 /* most requests in flight at once */
	uint64_t lookups;	 /* host-name lookups started (on libuv's thread pool) */
};

/* Creates an empty statement set. *out is owned by the caller (pg_stmts_free()). Returns 0 or
 * -ENOMEM. */
int pg_stmts_new(struct pg_stmts **out);

/* Registers a statement (sql copied) and returns its handle in *out, valid until the set is
 * freed. It is prepared under a generated name on every connection using the set. Returns 0,
 * -EINVAL (no sql, nparams outside 0..65535, a COPY or transaction control as in
 * pg_conn_exec()), -EBUSY once a connection using the set has started, or -ENOMEM. */
int pg_stmts_add(struct pg_stmts *set, const char *sql, int nparams, const struct pg_stmt **out);

/* Frees a set and its handles; no connection may still use it. NULL is allowed. */
void pg_stmts_free(struct pg_stmts *set);

/* Creates a connection object; it connects when pg_conn_start() is called. *out is owned by the
 * caller until pg_conn_close(). Returns 0, -EINVAL or -ENOMEM. */
int pg_conn_new(uv_loop_t *loop, const struct pg_conn_options *opts, struct pg_conn **out);

/* Registers a statement in the connection's set (see pg_stmts_add()). Only before
 * pg_conn_start(): -EBUSY afterwards. */
int pg_conn_prepare(struct pg_conn *conn, const char *sql, int nparams, const struct pg_stmt **out);

/* Listens on channel (a plain identifier: letters, digits, _ and $, at most 63 bytes, copied):
 * LISTEN is issued on every (re)connection before the connection is reported up, and cb is
 * called for each notification on it. Notifications sent while the connection is down are
 * lost: a caller that must not miss a change re-reads its state when state_cb reports up.
 * Only before pg_conn_start(). Returns 0, -EINVAL, -EBUSY or -ENOMEM. */
int pg_conn_listen(struct pg_conn *conn, const char *channel, pg_notify_cb cb, void *data);

/* Starts connecting. Returns 0 or -EBUSY if already started. */
int pg_conn_start(struct pg_conn *conn);

/* Queues one statement. Returns 0 (cb will be called once), -EINVAL (bad query: no text, a
 * COPY, transaction control, nparams outside 0..65535 or not the statement's, a handle of
 * another set), -ENOTCONN while down, -EAGAIN when the queue is full, -ESHUTDOWN after close,
 * -ENOMEM. Transaction control is a text whose first keyword (after blanks and comments) is
 * BEGIN, START, COMMIT, END, ABORT, ROLLBACK (but not ROLLBACK TO a savepoint) or PREPARE
 * TRANSACTION: sent as an ordinary statement, a BEGIN would leave the session inside a
 * transaction block that every later caller's statement joins (use pg_txn.h). */
int pg_conn_exec(struct pg_conn *conn, const struct pg_query *q, pg_result_cb cb, void *data);

/* Queues nq statements (1..1000) as one transaction, with nobody else's statement inside it and
 * one deadline for the whole: either every statement succeeds and the transaction commits (cb
 * gets every result), or the first error rolls everything back (cb gets DSP_EPG, the results up
 * to the failing one, r->failed its index). The batch is the implicit transaction that
 * PostgreSQL opens for the statements before one pipeline sync, so transaction control is
 * refused (-EINVAL, as in pg_conn_exec()); a SAVEPOINT fails its batch. Returns as
 * pg_conn_exec(). */
int pg_conn_batch(struct pg_conn *conn, const struct pg_query *q, int nq, pg_result_cb cb,
		  void *data);

/* Queues a text of several commands separated by semicolons (copied), sent with the simple
 * query protocol outside pipeline mode; cb gets one result per command (the first error stops
 * the rest). Without BEGIN in it, the commands are one implicit transaction. A script that
 * leaves a transaction block open (a BEGIN without COMMIT, or an error after BEGIN) is rolled
 * back before the connection takes anything else: cb then gets DSP_EPG with the error, or
 * -EINVAL when no command failed (what an explicit COMMIT in it committed before stays). No
 * COPY: COPY FROM STDIN fails the script (DSP_EPG, SQLSTATE 57014); COPY TO STDOUT drops the
 * connection (-ECONNRESET). Returns as pg_conn_exec(). */
int pg_conn_script(struct pg_conn *conn, const char *sql, pg_result_cb cb, void *data);

/* Whether the connection is up (connected, prepared, listening) now. */
bool pg_conn_is_up(const struct pg_conn *conn);

/* Requests queued, held or in flight on the connection: its load, for routing. */
unsigned pg_conn_pending(const struct pg_conn *conn);

/* Whether the connection is held by an interactive transaction or taken by a COPY or script,
 * now or by one queued: a router keeps other requests off it. */
bool pg_conn_is_claimed(const struct pg_conn *conn);

/* The connection's log label, "pg[name]" (borrowed, lives as long as conn). */
const char *pg_conn_label(const struct pg_conn *conn);

/* Counters since creation. */
void pg_conn_get_stats(const struct pg_conn *conn, struct pg_conn_stats *out);

/* Routes the server's NOTICE/WARNING messages on pg (any libpq connection, borrowed) into the
 * JSON log at debug level instead of libpq's raw lines on stderr. (The connections of this layer
 * do it themselves, with their label.) */
void pg_route_notices(PGconn *pg);

/* Connects synchronously, for a command-line command that runs no loop (`dispatcher migrate`):
 * the TCP connect and the startup exchange are bounded by timeout_ms of our own (libpq's
 * connect_timeout counts whole seconds and per host; a server that accepts and never answers
 * would otherwise hold the command for ever). Host names are resolved before the deadline
 * starts. Returns 0 with *out owned by the caller (PQfinish), or -ETIMEDOUT, -ECONNREFUSED
 * (refused, authentication failed, bad conninfo: the reason in err) or -ENOMEM. Never call it
 * on a loop. */
int pg_connect_blocking(const char *conninfo, uint64_t timeout_ms, PGconn **out, char *err,
			size_t errlen);

/* Stops reconnecting, completes every request with -ECANCELED (an open transaction is lost:
 * pg_txn.h), closes the connection, and frees conn once its libuv handles are closed (then
 * calls closed_cb, which may be NULL). conn must not be used after this call. */
void pg_conn_close(struct pg_conn *conn, void (*closed_cb)(void *data), void *data);

#endif
