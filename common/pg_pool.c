/* A small pool of PostgreSQL connections with routing (pg_pool.h). */
#include "pg_pool.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POOL_MAX   64
#define CLAIM_LOAD (UINT_MAX / 2) /* a taken connection is chosen only when all are */

struct member {
	struct pg_pool *pool;
	unsigned index;
	struct pg_conn *conn;
};

struct pg_pool {
	struct pg_pool_options opts;
	struct pg_stmts *stmts;
	struct member *m; /* n members: size ordinary, then priority_size */
	unsigned n;
	unsigned rr; /* round-robin start */
	bool started;
	unsigned closing; /* connections not yet closed */
	void (*closed_cb)(void *data);
	void *closed_data;
};

static void member_state_cb(struct pg_conn *conn, bool up, void *data)
{
	struct member *m = data;

	if (m->pool->opts.state_cb)
		m->pool->opts.state_cb(m->pool, m->index, up, m->pool->opts.data);
}

static int make_member(struct pg_pool *pool, uv_loop_t *loop, const char *name, unsigned i)
{
	char label[40];
	const struct pg_pool_options *o = &pool->opts;
	bool prio = i >= o->size;

	snprintf(label, sizeof(label), prio ? "%.24s.p%u" : "%.24s.%u", name,
		 prio ? i - o->size : i);
	struct pg_conn_options co = {
		.conninfo = o->conninfo,
		.name = label,
		.connect_timeout_ms = o->connect_timeout_ms,
		.query_timeout_ms = o->query_timeout_ms,
		.queue_timeout_ms = o->queue_timeout_ms,
		.reconnect_min_ms = o->reconnect_min_ms,
		.reconnect_max_ms = o->reconnect_max_ms,
		.max_queue = o->max_queue,
		.max_inflight = o->max_inflight,
		.stmts = pool->stmts,
		.state_cb = member_state_cb,
		.data = &pool->m[i],
	};
	pool->m[i].pool = pool;
	pool->m[i].index = i;
	return pg_conn_new(loop, &co, &pool->m[i].conn);
}

static void free_pool(struct pg_pool *pool)
{
	pg_stmts_free(pool->stmts);
	free(pool->m);
	free(pool);
}

int pg_pool_new(uv_loop_t *loop, const struct pg_pool_options *opts, struct pg_pool **out)
{
	unsigned size = opts->size ? opts->size : 2;

	if (!opts->conninfo || size > POOL_MAX || opts->priority_size > POOL_MAX - size)
		return -EINVAL;
	struct pg_pool *pool = calloc(1, sizeof(*pool));
	if (!pool)
		return -ENOMEM;
	pool->opts = *opts;
	pool->opts.size = size;
	pool->n = size + opts->priority_size;
	pool->m = calloc(pool->n, sizeof(*pool->m));
	if (!pool->m || pg_stmts_new(&pool->stmts) < 0) {
		free_pool(pool);
		return -ENOMEM;
	}
	for (unsigned i = 0; i < pool->n; i++) {
		int rc = make_member(pool, loop, opts->name ? opts->name : "pool", i);
		if (rc < 0) {
			/* Nothing started: the members are freed by their close callbacks and
			 * touch neither the pool nor the statements while closing. */
			for (unsigned j = 0; j < i; j++)
				pg_conn_close(pool->m[j].conn, NULL, NULL);
			free_pool(pool);
			return rc;
		}
	}
	pool->opts.conninfo = NULL; /* each connection has its copy */
	pool->opts.name = NULL;
	*out = pool;
	return 0;
}

int pg_pool_prepare(struct pg_pool *pool, const char *sql, int nparams, const struct pg_stmt **out)
{
	if (pool->started)
		return -EBUSY;
	return pg_stmts_add(pool->stmts, sql, nparams, out);
}

int pg_pool_listen(struct pg_pool *pool, const char *channel, pg_notify_cb cb, void *data)
{
	return pg_conn_listen(pool->m[0].conn, channel, cb, data);
}

int pg_pool_start(struct pg_pool *pool)
{
	if (pool->started)
		return -EBUSY;
	pool->started = true;
	for (unsigned i = 0; i < pool->n; i++)
		pg_conn_start(pool->m[i].conn);
	return 0;
}

/* The up connection of members [from, to) with the least load, round-robin among equals; a
 * taken one only when every up one is. NULL when none is up. */
static struct pg_conn *pick(struct pg_pool *pool, unsigned from, unsigned to)
{
	struct pg_conn *best = NULL;
	unsigned best_load = UINT_MAX, n = to - from;

	for (unsigned k = 0; k < n; k++) {
		struct pg_conn *c = pool->m[from + (pool->rr + k) % n].conn;
		if (!pg_conn_is_up(c))
			continue;
		unsigned load = pg_conn_pending(c) + (pg_conn_is_claimed(c) ? CLAIM_LOAD : 0);
		if (load < best_load) {
			best = c;
			best_load = load;
		}
	}
	pool->rr++;
	return best;
}

static struct pg_conn *route(struct pg_pool *pool, enum pg_lane lane)
{
	struct pg_conn *c = NULL;

	if (lane == PG_LANE_PRIORITY && pool->opts.priority_size)
		c = pick(pool, pool->opts.size, pool->n);
	return c ? c : pick(pool, 0, pool->opts.size);
}

int pg_pool_exec(struct pg_pool *pool, enum pg_lane lane, const struct pg_query *q, pg_result_cb cb,
		 void *data)
{
	struct pg_conn *c = route(pool, lane);

	return c ? pg_conn_exec(c, q, cb, data) : -ENOTCONN;
}

int pg_pool_batch(struct pg_pool *pool, enum pg_lane lane, const struct pg_query *q, int nq,
		  pg_result_cb cb, void *data)
{
	struct pg_conn *c = route(pool, lane);

	return c ? pg_conn_batch(c, q, nq, cb, data) : -ENOTCONN;
}

int pg_pool_script(struct pg_pool *pool, const char *sql, pg_result_cb cb, void *data)
{
	struct pg_conn *c = route(pool, PG_LANE_NORMAL);

	return c ? pg_conn_script(c, sql, cb, data) : -ENOTCONN;
}

int pg_pool_begin(struct pg_pool *pool, const struct pg_txn_options *opts, pg_txn_cb cb, void *data)
{
	struct pg_conn *c = route(pool, PG_LANE_NORMAL);

	return c ? pg_conn_begin(c, opts, cb, data) : -ENOTCONN;
}

int pg_pool_copy_in(struct pg_pool *pool, const char *sql, const struct pg_copy_options *opts)
{
	struct pg_conn *c = route(pool, PG_LANE_NORMAL);

	return c ? pg_conn_copy_in(c, sql, opts) : -ENOTCONN;
}

unsigned pg_pool_size(const struct pg_pool *pool)
{
	return pool->n;
}

unsigned pg_pool_up_count(const struct pg_pool *pool)
{
	unsigned up = 0;

	for (unsigned i = 0; i < pool->n; i++)
		up += pg_conn_is_up(pool->m[i].conn);
	return up;
}

struct pg_conn *pg_pool_conn(struct pg_pool *pool, unsigned index)
{
	return index < pool->n ? pool->m[index].conn : NULL;
}

void pg_pool_get_stats(const struct pg_pool *pool, struct pg_conn_stats *out)
{
	memset(out, 0, sizeof(*out));
	for (unsigned i = 0; i < pool->n; i++) {
		struct pg_conn_stats s;
		pg_conn_get_stats(pool->m[i].conn, &s);
		out->connects += s.connects;
		out->disconnects += s.disconnects;
		out->timeouts += s.timeouts;
		out->queue_timeouts += s.queue_timeouts;
		out->refused += s.refused;
		out->queries += s.queries;
		out->notifies += s.notifies;
		if (s.inflight_peak > out->inflight_peak)
			out->inflight_peak = s.inflight_peak;
	}
}

static void member_closed_cb(void *data)
{
	struct pg_pool *pool = data;

	if (--pool->closing > 0)
		return;
	if (pool->closed_cb)
		pool->closed_cb(pool->closed_data);
	free_pool(pool);
}

void pg_pool_close(struct pg_pool *pool, void (*closed_cb)(void *data), void *data)
{
	pool->closed_cb = closed_cb;
	pool->closed_data = data;
	pool->closing = pool->n;
	for (unsigned i = 0; i < pool->n; i++)
		pg_conn_close(pool->m[i].conn, member_closed_cb, pool);
}
