/* A small pool of PostgreSQL connections (pg_conn.h) with routing.
 *
 * size connections take ordinary requests; priority_size more take only requests sent on the
 * priority lane, so latency-critical statements never queue behind a long one (when no
 * priority connection is up, priority requests use the ordinary ones). Within a lane, a request
 * goes to the connection with the least pending work, round-robin among equals; a connection
 * held by an interactive transaction or taken by a COPY or script is skipped while another is
 * up (and used, queueing behind it within its queue bound, only when all are taken).
 *
 * Every connection prepares the statements registered with pg_pool_prepare(), so a handle works
 * on any of them. LISTENs registered with pg_pool_listen() are kept on one connection, the
 * first ordinary one (index 0): notifications are delivered while it is up, and LISTEN is
 * issued again on every reconnection of it before it is reported up.
 *
 * Interactive transactions (pg_pool_begin) and COPY (pg_pool_copy_in) take a connection out of
 * routing for their duration (pg_txn.h, pg_copy.h). Batches are one pipelined request on one
 * connection (pg_conn_batch()).
 *
 * Connections are labelled "pg[<name>.<i>]" in logs, priority ones "pg[<name>.p<i>]".
 *
 * Async contract as in pg_conn.h: an error return means no callback; otherwise exactly one,
 * -ECANCELED on pg_pool_close().
 */
#ifndef DSP_PG_POOL_H
#define DSP_PG_POOL_H

#include "pg_conn.h"
#include "pg_copy.h"
#include "pg_txn.h"

struct pg_pool;

enum pg_lane {
	PG_LANE_NORMAL = 0,   /* ordinary connections */
	PG_LANE_PRIORITY = 1, /* the priority connections (ordinary ones when none is up) */
};

/* A connection of the pool (index: 0..size-1 ordinary, then the priority ones) went up or
 * down. */
typedef void (*pg_pool_state_cb)(struct pg_pool *pool, unsigned index, bool up, void *data);

struct pg_pool_options {
	const char *conninfo;	     /* libpq connection string or URI (copied) */
	const char *name;	     /* names the connections in logs (copied; NULL: "pool") */
	unsigned size;		     /* ordinary connections (0: 2) */
	unsigned priority_size;	     /* connections for the priority lane only (may be 0) */
	uint64_t connect_timeout_ms; /* as in struct pg_conn_options, for every connection */
	uint64_t query_timeout_ms;
	uint64_t queue_timeout_ms;
	uint64_t reconnect_min_ms;
	uint64_t reconnect_max_ms;
	unsigned max_queue;	   /* per connection */
	unsigned max_inflight;	   /* per connection */
	pg_pool_state_cb state_cb; /* may be NULL */
	void *data;		   /* passed to state_cb, borrowed */
};

/* Creates a pool (connections created, not connecting). *out is owned by the caller until
 * pg_pool_close(). Returns 0, -EINVAL (no conninfo or timeouts, size + priority_size > 64) or
 * -ENOMEM. */
int pg_pool_new(uv_loop_t *loop, const struct pg_pool_options *opts, struct pg_pool **out);

/* Registers a statement prepared on every connection; *out is its handle, valid until the pool
 * is freed. Only before pg_pool_start(). Returns as pg_stmts_add(). */
int pg_pool_prepare(struct pg_pool *pool, const char *sql, int nparams, const struct pg_stmt **out);

/* Listens on channel on connection 0 (see pg_conn_listen()). Only before pg_pool_start(). */
int pg_pool_listen(struct pg_pool *pool, const char *channel, pg_notify_cb cb, void *data);

/* Starts every connection. Returns 0 or -EBUSY if already started. */
int pg_pool_start(struct pg_pool *pool);

/* Put first in a batch (one implicit transaction) whose statements take arrays as parameters
 * and join them to tables by key (the worker's batched writes). Two measured faults of the
 * default planner with such statements:
 * - a prepared statement is planned afresh on every execution (its custom plan, costed on the
 *   arrays' real lengths, always looks cheaper than the generic one): 1.2 ms of planning per
 *   execution;
 * - a generic plan costs an array parameter at 100 elements and hashes the table instead
 *   (one sequential scan of `calls` per call on a table of a few thousand rows).
 * So: the generic plan, built with nested loops (no hash or merge join), which probe the
 * tables' indexes as a batch of a few hundred keys at most wants. (Turning sequential scans
 * off as well made things worse: the planner then reached contacts through a wider index —
 * 1.8 s per call end.) Scoped to the batch's transaction (set_config's is_local);
 * other statements keep the defaults. PG_SQL_BATCH_PLANS_COLS is the select list, for a
 * statement that has other work to do (call_end's epoch lock). */
/* Routes one statement, a batch, or a script to a connection of lane (see pg_conn_exec(),
 * pg_conn_batch(), pg_conn_script()); -ENOTCONN when no connection is up. */
#define PG_SQL_BATCH_PLANS_COLS                                                                    \
	"set_config('plan_cache_mode', 'force_generic_plan', true),"                               \
	" set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true)"
#define PG_SQL_BATCH_PLANS "SELECT " PG_SQL_BATCH_PLANS_COLS

int pg_pool_exec(struct pg_pool *pool, enum pg_lane lane, const struct pg_query *q, pg_result_cb cb,
		 void *data);
int pg_pool_batch(struct pg_pool *pool, enum pg_lane lane, const struct pg_query *q, int nq,
		  pg_result_cb cb, void *data);
int pg_pool_script(struct pg_pool *pool, const char *sql, pg_result_cb cb, void *data);

/* Begins an interactive transaction on an ordinary connection (see pg_conn_begin()). */
int pg_pool_begin(struct pg_pool *pool, const struct pg_txn_options *opts, pg_txn_cb cb,
		  void *data);

/* Runs a COPY FROM STDIN on an ordinary connection (see pg_conn_copy_in()). */
int pg_pool_copy_in(struct pg_pool *pool, const char *sql, const struct pg_copy_options *opts);

/* Connections in the pool (ordinary and priority), and how many are up now. */
unsigned pg_pool_size(const struct pg_pool *pool);
unsigned pg_pool_up_count(const struct pg_pool *pool);

/* Connection index (0..pg_pool_size()-1), borrowed: for statistics and tests. Do not close it. */
struct pg_conn *pg_pool_conn(struct pg_pool *pool, unsigned index);

/* Counters summed over the connections (inflight_peak: the largest). */
void pg_pool_get_stats(const struct pg_pool *pool, struct pg_conn_stats *out);

/* Closes every connection (requests complete with -ECANCELED), then frees the pool and calls
 * closed_cb (may be NULL). The pool and its statement handles must not be used after. */
void pg_pool_close(struct pg_pool *pool, void (*closed_cb)(void *data), void *data);

#endif
