/* Helpers shared by the tests of the gate's PostgreSQL side (issue 8): a loop with a pool and a
 * gate_pg on it, call ids, the organisations and claimed contacts they dial, probes for the
 * callbacks, and the pg_locks watches that make overlaps certain (PLATFORM.md).
 * Include after cmocka.h. */
#ifndef DSP_TEST_GATE_PG_TEST_H
#define DSP_TEST_GATE_PG_TEST_H

#include "gate_pg.h"
#include "gate_pgmode.h"
#include "pg_test.h"

#include <string.h>

struct gp {
	uv_loop_t loop; /* its own loop (gp_open), unused with gp_open_on() */
	uv_loop_t *lp;	/* the loop it runs on */
	struct pg_pool *pool;
	struct gate_pg *g;
	int closed;
};

static inline void gp_closed_cb(void *data)
{
	(*(int *)data)++;
}

static inline bool gp_all_up(void *arg)
{
	struct gp *e = arg;
	return pg_pool_up_count(e->pool) == pg_pool_size(e->pool);
}

/* Opens a pool of size ordinary connections and one priority connection, with a gate_pg on it,
 * on a loop of its own (shared when loop is not NULL). The client's query timeout is long: the
 * server's bounds are what the tests watch. */
static inline void gp_open_on(struct gp *e, uv_loop_t *loop, const struct embedded *svc,
			      unsigned size, const char *name, pg_notify_cb free_cb,
			      pg_notify_cb mode_cb, void *data)
{
	struct pg_pool_options o = {
		.conninfo = svc->database_url,
		.name = name,
		.size = size,
		.priority_size = 1,
		.connect_timeout_ms = 10000,
		.query_timeout_ms = 120000,
		.reconnect_min_ms = 20,
		.reconnect_max_ms = 200,
	};

	/* A fence waits for the epoch lock as long as the tests hold it. */
	struct gate_pg_options go = { .fence_lock_ms = 60000 };

	e->lp = loop;
	assert_int_equal(pg_pool_new(loop, &o, &e->pool), 0);
	assert_int_equal(gate_pg_new(e->pool, &go, &e->g), 0);
	if (free_cb || mode_cb)
		assert_int_equal(gate_pg_listen(e->pool, free_cb, mode_cb, data), 0);
	assert_int_equal(pg_pool_start(e->pool), 0);
	fixture_run_until(loop, gp_all_up, e, 60000);
}

static inline void gp_open(struct gp *e, const struct embedded *svc, unsigned size,
			   const char *name)
{
	uv_loop_init(&e->loop);
	gp_open_on(e, &e->loop, svc, size, name, NULL, NULL, NULL);
}

/* Closes the pool (pending callbacks run with -ECANCELED), frees the gate. */
static inline void gp_close_pool(struct gp *e)
{
	int want = e->closed + 1;
	pg_pool_close(e->pool, gp_closed_cb, &e->closed);
	fixture_run_until_count(e->lp, &e->closed, want, 60000);
	gate_pg_free(e->g);
}

static inline void gp_close(struct gp *e)
{
	gp_close_pool(e);
	fixture_loop_close(&e->loop);
}

/* A call id: a uuid built from n. buf holds 37 bytes. */
static inline const char *gp_uuid(char *buf, unsigned n)
{
	snprintf(buf, 37, "00000000-0000-4000-8000-%012x", n);
	return buf;
}

/* Runs sql (printf-style) on the admin connection; fails the test unless it succeeds. */
static inline void gp_sql(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void gp_sql(PGconn *c, const char *fmt, ...)
{
	char sql[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(sql, sizeof(sql), fmt, ap);
	va_end(ap);
	PQclear(fixture_sql(c, sql));
}

static inline long long gp_int(PGconn *c, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static inline long long gp_int(PGconn *c, const char *fmt, ...)
{
	char sql[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(sql, sizeof(sql), fmt, ap);
	va_end(ap);
	return admin_int(c, sql);
}

/* An organisation with one agent per campaign name given ("a1", "a2": agent of campaign i is
 * agents[i]), a batch per campaign and `contacts` claimed contacts per campaign, each claimed
 * with lease_token = id + 1000. Campaign ids are "<org>_c<i>", agents "<org>_<agent>". */
static inline void gp_seed_org(PGconn *admin, const char *org, int org_limit, int per_agent,
			       int n_campaigns, const char *const *agents, const int *ceilings,
			       int contacts)
{
	char per[16] = "NULL";

	if (per_agent > 0)
		snprintf(per, sizeof(per), "%d", per_agent);
	gp_sql(admin,
	       "INSERT INTO organisations (id, name, org_limit, per_agent_limit)"
	       " VALUES ('%s', '%s', %d, %s)",
	       org, org, org_limit, per);
	for (int i = 0; i < n_campaigns; i++) {
		char ceil[16] = "NULL";
		if (ceilings && ceilings[i] > 0)
			snprintf(ceil, sizeof(ceil), "%d", ceilings[i]);
		gp_sql(admin,
		       "INSERT INTO agents (id, org_id) VALUES ('%s_%s', '%s')"
		       " ON CONFLICT DO NOTHING",
		       org, agents[i], org);
		gp_sql(admin,
		       "INSERT INTO campaigns (id, org_id, agent_id, max_concurrent_calls)"
		       " VALUES ('%s_c%d', '%s', '%s_%s', %s)",
		       org, i, org, org, agents[i], ceil);
		gp_sql(admin,
		       "INSERT INTO batches (id, org_id, campaign_id) VALUES ('%s_b%d', '%s', "
		       "'%s_c%d')",
		       org, i, org, org, i);
		gp_sql(admin,
		       "INSERT INTO contacts (org_id, campaign_id, batch_id, phone, state,"
		       " lease_token, lease_until) SELECT '%s', '%s_c%d', '%s_b%d', '+1415555' ||"
		       " lpad(g::text, 4, '0'), 'claimed', 0, now() + interval '1 hour'"
		       " FROM generate_series(1, %d) g",
		       org, org, i, org, i, contacts);
	}
	gp_sql(admin, "UPDATE contacts SET lease_token = id + 1000 WHERE org_id = '%s'", org);
}

/* The id of the k-th (0-based) contact of campaign i of org, in id order. */
static inline long long gp_contact(PGconn *admin, const char *org, int i, int k)
{
	return gp_int(admin,
		      "SELECT id FROM contacts WHERE campaign_id = '%s_c%d' ORDER BY id"
		      " OFFSET %d LIMIT 1",
		      org, i, k);
}

/* Locks that sessions wait for now (all kinds), optionally of one locktype. */
static inline long long gp_waiting(PGconn *admin, const char *locktype)
{
	if (locktype)
		return gp_int(admin,
			      "SELECT count(*) FROM pg_locks WHERE NOT granted"
			      " AND locktype = '%s'",
			      locktype);
	return gp_int(admin, "SELECT count(*) FROM pg_locks WHERE NOT granted");
}

struct gp_wait {
	PGconn *admin;
	const char *locktype;
	long long n;
};

static inline bool gp_wait_seen(void *arg)
{
	struct gp_wait *w = arg;
	return gp_waiting(w->admin, w->locktype) >= w->n;
}

/* Runs loop until at least n locks (of locktype, or any) are waited for. */
static inline void gp_wait_for(uv_loop_t *loop, PGconn *admin, const char *locktype, long long n)
{
	struct gp_wait w = { admin, locktype, n };
	fixture_run_until(loop, gp_wait_seen, &w, 60000);
}

/* --- probes --- */

struct gp_write {
	int calls;
	uint32_t n;
	enum gate_pg_outcome out[GATE_PG_WRITE_MAX];
};

static inline void gp_write_cb(struct gate_pg *g, const enum gate_pg_outcome *out, uint32_t n,
			       void *data)
{
	struct gp_write *w = data;

	w->calls++;
	w->n = n;
	memcpy(w->out, out, n * sizeof(*out));
}

struct gp_switch {
	int calls, status;
	struct gate_pg_switch_result r;
};

static inline void gp_switch_cb(struct gate_pg *g, int status,
				const struct gate_pg_switch_result *r, void *data)
{
	struct gp_switch *s = data;

	s->calls++;
	s->status = status;
	if (r)
		s->r = *r;
}

struct gp_fence {
	int calls, status;
	uint32_t n;
	bool written[GATE_PG_WRITE_MAX];
};

static inline void gp_fence_cb(struct gate_pg *g, int status, const bool *written, uint32_t n,
			       void *data)
{
	struct gp_fence *f = data;

	f->calls++;
	f->status = status;
	f->n = n;
	if (written)
		memcpy(f->written, written, n * sizeof(*written));
}

/* A batch dial of contact id for campaign i of org. */
static inline struct gate_pg_call gp_call(const char *call, const char *org, char *campaign,
					  char *agent, long long contact)
{
	return (struct gate_pg_call){
		.call = call,
		.org = org,
		.dial = { .campaign = campaign,
			  .agent = agent,
			  .contact = contact,
			  .lease_token = contact + 1000,
			  .attempt = 1,
			  .to_number = "+14155550100" },
	};
}

/* The current epoch (admin read). */
static inline long long gp_epoch(PGconn *admin)
{
	return admin_int(admin, "SELECT gate_epoch FROM system_settings");
}

#endif
