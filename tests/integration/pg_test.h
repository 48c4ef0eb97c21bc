/* Helpers shared by the PostgreSQL-layer integration tests (issue 7): a probe that records
 * what a result callback saw, and blocking admin-side checks (pg_locks, row counts,
 * pg_terminate_backend) used to make overlaps certain instead of likely (PLATFORM.md).
 * Include after cmocka.h. */
#ifndef DSP_TEST_PG_TEST_H
#define DSP_TEST_PG_TEST_H

#include "error.h"
#include "fixture.h"
#include "pg_conn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct probe {
	int ups, downs;	  /* state_cb transitions */
	int calls;	  /* result callbacks */
	int status;	  /* last status */
	int nres;	  /* results of the last request */
	int failed;	  /* r->failed of the last request */
	char value[64];	  /* first cell of the first result of the last request */
	char last[64];	  /* first cell of the last result of the last request */
	char sqlstate[8]; /* SQLSTATE of the last error */
};

static inline void probe_result_cb(int status, const struct pg_results *r, void *data)
{
	struct probe *p = data;

	p->calls++;
	p->status = status;
	p->nres = r->n;
	p->failed = r->failed;
	p->value[0] = p->last[0] = p->sqlstate[0] = '\0';
	if (status == 0 && r->n > 0 && PQntuples(r->res[0]) > 0)
		snprintf(p->value, sizeof(p->value), "%s", PQgetvalue(r->res[0], 0, 0));
	if (status == 0 && r->n > 0 && PQntuples(r->res[r->n - 1]) > 0)
		snprintf(p->last, sizeof(p->last), "%s", PQgetvalue(r->res[r->n - 1], 0, 0));
	if (status == DSP_EPG && r->error)
		snprintf(p->sqlstate, sizeof(p->sqlstate), "%s",
			 PQresultErrorField(r->error, PG_DIAG_SQLSTATE));
	if (status < 0 && status != DSP_EPG)
		assert_int_equal(r->n, 0);
}

/* One integer from a blocking statement on the admin connection. */
static inline long long admin_int(PGconn *admin, const char *sql)
{
	PGresult *res = fixture_sql(admin, sql);
	long long v = atoll(PQgetvalue(res, 0, 0));
	PQclear(res);
	return v;
}

/* Whether a session waits for the advisory lock key (taken with pg_advisory_lock(key)). */
static inline bool advisory_waiting(PGconn *admin, int key)
{
	char sql[160];

	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objid = %d "
		 "AND NOT granted",
		 key);
	return admin_int(admin, sql) > 0;
}

struct lock_wait {
	PGconn *admin;
	int key;
};

static inline bool lock_wait_seen(void *arg)
{
	const struct lock_wait *w = arg;
	return advisory_waiting(w->admin, w->key);
}

/* Runs loop until some session waits for the advisory lock key. */
static inline void wait_for_lock_waiter(uv_loop_t *loop, PGconn *admin, int key)
{
	struct lock_wait w = { admin, key };
	fixture_run_until(loop, lock_wait_seen, &w, 60000);
}

/* Terminates the backend with that pid (text); fails the test unless it existed. */
static inline void terminate_backend(PGconn *admin, const char *pid)
{
	const char *v[] = { pid };
	PGresult *res = PQexecParams(admin, "SELECT pg_terminate_backend($1::int)", 1, NULL, v,
				     NULL, NULL, 0);
	assert_string_equal(PQgetvalue(res, 0, 0), "t");
	PQclear(res);
}

static inline bool conn_up(void *arg)
{
	return pg_conn_is_up(arg);
}

static inline bool conn_down(void *arg)
{
	return !pg_conn_is_up(arg);
}

#endif
