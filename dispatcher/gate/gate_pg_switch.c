/* The gate mode and epoch (C11): reading them, the compare-and-set switch to postgres mode,
 * the reconciler's way back to redis mode, and the reconciler's reads (gate_pg.h). */
#include "gate_pg_int.h"

#include "error.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Copies the text column name of row into out (max bytes, "" when NULL or absent). */
static int text_col(const PGresult *res, int row, const char *name, char *out, size_t max)
{
	int col = PQfnumber(res, name);

	out[0] = '\0';
	if (col < 0 || PQgetisnull(res, row, col))
		return 0;
	if ((size_t)PQgetlength(res, row, col) > max)
		return -EPROTO;
	memcpy(out, PQgetvalue(res, row, col), (size_t)PQgetlength(res, row, col));
	out[PQgetlength(res, row, col)] = '\0';
	return 0;
}

static int mode_parse(const PGresult *res, int row, struct gate_pg_mode *out)
{
	if (!res || PQntuples(res) <= row || PQnfields(res) < 2)
		return -EPROTO;
	if (text_col(res, row, "gate_generation", out->generation, GATE_PG_GEN_MAX) ||
	    text_col(res, row, "gate_redis_run_id", out->run_id, GATE_PG_RUN_ID_MAX))
		return -EPROTO;
	out->mode = strcmp(PQgetvalue(res, row, 0), "postgres") == 0 ? GATE_MODE_POSTGRES
								     : GATE_MODE_REDIS;
	out->epoch = strtoull(PQgetvalue(res, row, 1), NULL, 10);
	return 0;
}

/* A failed request's status as the callers see it: the server's own bound is -ETIMEDOUT. */
static int map_status(int status, const struct pg_results *r, const char *what)
{
	if (status == DSP_EPG && gate_pg_is_timeout(gate_pg_sqlstate(status, r)))
		return -ETIMEDOUT;
	if (status == DSP_EPG)
		GLOG(LOG_ERROR, "%s refused: %s", what,
		     r && r->error ? PQresultErrorMessage(r->error) : "?");
	return status;
}

struct switch_op {
	struct gate_pg *g;
	gate_pg_switch_cb cb;
	void *data;
};

static void switch_done_cb(int status, const struct pg_results *r, void *data)
{
	struct switch_op *op = data;
	struct gate_pg_switch_result res = { 0 };
	const PGresult *now = NULL;

	status = map_status(status, r, "gate mode switch");
	if (status == 0) {
		now = r->res[r->n - 1];
		res.switched = r->n == 4 && PQntuples(r->res[2]) == 1;
		status = mode_parse(now, 0, &res.now);
	}
	if (status == 0 && res.switched) {
		op->g->stats.switches++;
		GLOG(LOG_INFO, "gate switched to %s mode, epoch %" PRIu64,
		     gate_mode_name(res.now.mode), res.now.epoch);
	}
	op->cb(op->g, status, status ? NULL : &res, op->data);
	free(op);
}

static int switch_send(struct gate_pg *g, const struct pg_query *q, int nq, gate_pg_switch_cb cb,
		       void *data)
{
	struct switch_op *op;
	int rc;

	if (!g || !cb)
		return -EINVAL;
	op = malloc(sizeof(*op));
	if (!op)
		return -ENOMEM;
	*op = (struct switch_op){ .g = g, .cb = cb, .data = data };
	rc = pg_pool_batch(g->pool, PG_LANE_PRIORITY, q, nq, switch_done_cb, op);
	if (rc)
		free(op);
	return rc;
}

int gate_pg_read_mode(struct gate_pg *g, gate_pg_switch_cb cb, void *data)
{
	if (!g)
		return -EINVAL;
	struct pg_query q = { .stmt = g->st[ST_MODE_READ] };
	return switch_send(g, &q, 1, cb, data);
}

int gate_pg_switch_to_postgres(struct gate_pg *g, uint64_t seen_epoch, uint64_t lock_wait_ms,
			       gate_pg_switch_cb cb, void *data)
{
	char budget[24], seen[24];

	if (!g || seen_epoch < 1)
		return -EINVAL;
	gate_pg_ms(budget, lock_wait_ms ? lock_wait_ms : GATE_PG_WRITE_DEADLINE_MS);
	gate_pg_ms(seen, seen_epoch);
	const char *bv[] = { budget }, *sv[] = { seen, "postgres" };
	struct pg_query q[] = {
		{ .stmt = g->st[ST_BUDGET], .nparams = 1, .values = bv },
		{ .stmt = g->st[ST_LOCK_EXCL] },
		{ .stmt = g->st[ST_SWITCH], .nparams = 2, .values = sv },
		{ .stmt = g->st[ST_MODE_READ] },
	};
	return switch_send(g, q, 4, cb, data);
}

/* --- live calls, copied out of a result --- */

struct live_set {
	struct gate_pg_live_call *calls;
	char *strings;
	uint32_t n;
};

static void live_free(struct live_set *s)
{
	free(s->calls);
	free(s->strings);
	*s = (struct live_set){ 0 };
}

static const char *take(char **at, const PGresult *res, int row, int col)
{
	char *start = *at;
	int len;

	if (PQgetisnull(res, row, col))
		return NULL;
	len = PQgetlength(res, row, col);
	memcpy(start, PQgetvalue(res, row, col), (size_t)len);
	start[len] = '\0';
	*at = start + len + 1;
	return start;
}

/* Copies rows (id, org, campaign, agent) into s. Returns 0, -EPROTO or -ENOMEM. */
static int live_copy(const PGresult *res, struct live_set *s)
{
	size_t bytes = 1;
	int rows = PQntuples(res);
	char *at;

	*s = (struct live_set){ 0 };
	if (PQnfields(res) != 4)
		return -EPROTO;
	for (int i = 0; i < rows; i++)
		for (int c = 0; c < 4; c++)
			bytes += (size_t)PQgetlength(res, i, c) + 1;
	s->calls = calloc(rows ? (size_t)rows : 1, sizeof(*s->calls));
	s->strings = malloc(bytes);
	if (!s->calls || !s->strings) {
		live_free(s);
		return -ENOMEM;
	}
	at = s->strings;
	for (int i = 0; i < rows; i++) {
		s->calls[i].call = take(&at, res, i, 0);
		s->calls[i].org = take(&at, res, i, 1);
		s->calls[i].campaign = take(&at, res, i, 2);
		s->calls[i].agent = take(&at, res, i, 3);
	}
	s->n = (uint32_t)rows;
	return 0;
}

/* --- the way back: the reconciler's transaction --- */

bool gate_pg_rebuild_allowed(const struct gate_pg_mode *m)
{
	return m->mode == GATE_MODE_POSTGRES || !m->generation[0];
}

struct gate_pg_rebuild {
	struct gate_pg *g;
	struct pg_txn *txn;
	gate_pg_rebuild_cb cb;
	void *data;
	uint64_t seen_epoch;
	uint64_t timeout_ms;
	char owner[80], version[24];
	bool check_lease;
	int pending; /* statements sent and not answered */
	int status;  /* the first failure */
	bool lease_ok;
	bool delivered; /* the caller got rb */
	bool ended;	/* finish called: the caller gave rb up */
	struct gate_pg_mode mode;
	struct live_set live;
	gate_pg_switch_cb fcb;
	void *fdata;
	struct gate_pg_switch_result res;
};

static void rb_free_if_done(struct gate_pg_rebuild *rb)
{
	if (rb->pending > 0 || (rb->delivered && !rb->ended))
		return;
	live_free(&rb->live);
	free(rb);
}

static void rb_fail(struct gate_pg_rebuild *rb, int status)
{
	if (rb->txn)
		pg_txn_rollback(rb->txn, NULL, NULL);
	rb->txn = NULL;
	rb->cb(NULL, status, NULL, 0, status == -ESTALE ? &rb->mode : NULL, rb->data);
}

/* Every statement sent; decides once the last one has answered. */
static void rb_settle(struct gate_pg_rebuild *rb)
{
	if (rb->pending > 0 || rb->delivered)
		return;
	if (!rb->status &&
	    (!gate_pg_rebuild_allowed(&rb->mode) || rb->mode.epoch != rb->seen_epoch))
		rb->status = -ESTALE;
	if (!rb->status && rb->check_lease && !rb->lease_ok)
		rb->status = -EPERM;
	if (rb->status) {
		rb_fail(rb, rb->status);
		rb_free_if_done(rb);
		return;
	}
	rb->delivered = true;
	rb->cb(rb, 0, rb->live.calls, rb->live.n, &rb->mode, rb->data);
}

static void rb_step(struct gate_pg_rebuild *rb, int status, const struct pg_results *r)
{
	rb->pending--;
	if (status && !rb->status)
		rb->status = map_status(status, r, "gate rebuild transaction");
}

static void rb_plain_cb(int status, const struct pg_results *r, void *data)
{
	struct gate_pg_rebuild *rb = data;

	rb_step(rb, status, r);
	rb_settle(rb);
}

static void rb_system_cb(int status, const struct pg_results *r, void *data)
{
	struct gate_pg_rebuild *rb = data;

	if (status == 0 && mode_parse(r->res[0], 0, &rb->mode))
		status = -EPROTO;
	rb_step(rb, status, r);
	rb_settle(rb);
}

static void rb_lease_cb(int status, const struct pg_results *r, void *data)
{
	struct gate_pg_rebuild *rb = data;

	if (status == 0)
		rb->lease_ok = strcmp(PQgetvalue(r->res[0], 0, 0), "1") == 0;
	rb_step(rb, status, r);
	rb_settle(rb);
}

static void rb_live_cb(int status, const struct pg_results *r, void *data)
{
	struct gate_pg_rebuild *rb = data;

	if (status == 0)
		status = live_copy(r->res[0], &rb->live);
	rb_step(rb, status, r);
	rb_settle(rb);
}

static void rb_exec(struct gate_pg_rebuild *rb, const struct pg_query *q, pg_result_cb cb)
{
	int rc;

	if (rb->status)
		return;
	rc = pg_txn_exec(rb->txn, q, cb, rb);
	if (rc)
		rb->status = rc;
	else
		rb->pending++;
}

static void rb_begin_cb(int status, struct pg_txn *txn, void *data)
{
	struct gate_pg_rebuild *rb = data;
	struct gate_pg *g = rb->g;
	char budget[24];

	if (status) {
		rb->cb(NULL, status, NULL, 0, NULL, rb->data);
		free(rb);
		return;
	}
	rb->txn = txn;
	gate_pg_ms(budget, rb->timeout_ms);
	const char *bv[] = { budget }, *lv[] = { rb->owner, rb->version };
	rb_exec(rb, &(struct pg_query){ .stmt = g->st[ST_BUDGET_TXN], .nparams = 1, .values = bv },
		rb_plain_cb);
	rb_exec(rb, &(struct pg_query){ .stmt = g->st[ST_LOCK_EXCL] }, rb_plain_cb);
	rb_exec(rb, &(struct pg_query){ .stmt = g->st[ST_SYSTEM_LOCK] }, rb_system_cb);
	if (rb->check_lease)
		rb_exec(rb,
			&(struct pg_query){ .stmt = g->st[ST_LEASE], .nparams = 2, .values = lv },
			rb_lease_cb);
	rb_exec(rb, &(struct pg_query){ .stmt = g->st[ST_ALL_LIVE] }, rb_live_cb);
	rb_settle(rb);
}

int gate_pg_rebuild_begin(struct gate_pg *g, uint64_t seen_epoch, const char *lease_owner,
			  uint64_t lease_version, uint64_t timeout_ms, gate_pg_rebuild_cb cb,
			  void *data)
{
	struct gate_pg_rebuild *rb;
	int rc;

	if (!g || !cb || seen_epoch < 1 || timeout_ms == 0 ||
	    (lease_owner && strlen(lease_owner) >= sizeof(rb->owner)))
		return -EINVAL;
	rb = calloc(1, sizeof(*rb));
	if (!rb)
		return -ENOMEM;
	*rb = (struct gate_pg_rebuild){ .g = g,
					.cb = cb,
					.data = data,
					.seen_epoch = seen_epoch,
					.timeout_ms = timeout_ms,
					.check_lease = lease_owner };
	if (lease_owner)
		strcpy(rb->owner, lease_owner);
	gate_pg_ms(rb->version, lease_version);
	/* The client's bound is a little longer, so the server's own ends a stuck transaction. */
	struct pg_txn_options o = { .timeout_ms = timeout_ms + 1000 };
	rc = pg_pool_begin(g->pool, &o, rb_begin_cb, rb);
	if (rc)
		free(rb);
	return rc;
}

static void rb_end_cb(int status, const struct pg_results *r, void *data)
{
	struct gate_pg_rebuild *rb = data;

	rb->pending--;
	status = map_status(status, r, "gate rebuild commit");
	if (status == 0 && rb->res.switched) {
		rb->g->stats.switches++;
		GLOG(LOG_INFO, "gate switched to redis mode, epoch %" PRIu64, rb->res.now.epoch);
	}
	if (status)
		rb->res.switched = false;
	if (rb->fcb)
		rb->fcb(rb->g, status, status ? NULL : &rb->res, rb->fdata);
	rb_free_if_done(rb);
}

static void rb_switch_cb(int status, const struct pg_results *r, void *data)
{
	struct gate_pg_rebuild *rb = data;

	rb->pending--;
	if (status == 0 && PQntuples(r->res[0]) == 1)
		rb->res.switched = mode_parse(r->res[0], 0, &rb->res.now) == 0;
	rb_free_if_done(rb);
}

int gate_pg_rebuild_finish(struct gate_pg_rebuild *rb, bool commit, const char *generation,
			   const char *run_id, gate_pg_switch_cb cb, void *data)
{
	char seen[24];
	int rc = 0;

	if (!rb || rb->ended)
		return -EBUSY;
	rb->ended = true;
	if (!run_id)
		run_id = "";
	if (commit && (!generation || !*generation || strlen(generation) > GATE_PG_GEN_MAX ||
		       strlen(run_id) > GATE_PG_RUN_ID_MAX)) {
		/* Nothing to record: the fleet could not adopt the rebuild. */
		pg_txn_rollback(rb->txn, NULL, NULL);
		rb_free_if_done(rb);
		return -EINVAL;
	}
	rb->fcb = cb;
	rb->fdata = data;
	rb->res.now = rb->mode;
	gate_pg_ms(seen, rb->seen_epoch);
	const char *sv[] = { seen, generation, run_id };
	struct pg_query q = { .stmt = rb->g->st[ST_SWITCH_REDIS], .nparams = 3, .values = sv };
	if (commit) {
		rc = pg_txn_exec(rb->txn, &q, rb_switch_cb, rb);
		if (rc == 0)
			rb->pending++;
	}
	if (commit && rc == 0)
		rc = pg_txn_commit(rb->txn, rb_end_cb, rb);
	else
		rc = pg_txn_rollback(rb->txn, rb_end_cb, rb);
	if (rc == -ENOMEM && pg_txn_rollback(rb->txn, NULL, NULL) == -ENOMEM)
		GLOG(LOG_ERROR, "gate rebuild: cannot end the transaction (out of memory); its"
				" deadline will roll it back");
	if (rc == 0)
		rb->pending++;
	else
		rb->fcb = NULL; /* no callback: the transaction is lost or could not end */
	rb_free_if_done(rb);
	return rc;
}

/* --- the reconciler's reads --- */

struct read_op {
	struct gate_pg *g;
	union {
		gate_pg_calls_cb calls_cb;
		gate_pg_rows_cb rows_cb;
		gate_pg_count_cb count_cb;
	};
	void *data;
	uint32_t n;
};

static void org_live_cb(int status, const struct pg_results *r, void *data)
{
	struct read_op *op = data;
	struct live_set s = { 0 };

	status = map_status(status, r, "live calls read");
	if (status == 0)
		status = live_copy(r->res[0], &s);
	op->calls_cb(op->g, status, status ? NULL : s.calls, s.n, op->data);
	live_free(&s);
	free(op);
}

static struct read_op *read_op_new(struct gate_pg *g, void *data, uint32_t n)
{
	struct read_op *op = calloc(1, sizeof(*op));

	if (op)
		*op = (struct read_op){ .g = g, .data = data, .n = n };
	return op;
}

int gate_pg_org_live_calls(struct gate_pg *g, const char *org, gate_pg_calls_cb cb, void *data)
{
	struct read_op *op;
	int rc;

	if (!g || !cb || !ident_ok(org))
		return -EINVAL;
	op = read_op_new(g, data, 0);
	if (!op)
		return -ENOMEM;
	op->calls_cb = cb;
	const char *v[] = { org };
	struct pg_query q = { .stmt = g->st[ST_ORG_LIVE], .nparams = 1, .values = v };
	rc = pg_pool_exec(g->pool, PG_LANE_NORMAL, &q, org_live_cb, op);
	if (rc)
		free(op);
	return rc;
}

static void call_rows_cb(int status, const struct pg_results *r, void *data)
{
	struct read_op *op = data;
	int *rows = NULL;

	status = map_status(status, r, "call rows read");
	if (status == 0 && PQntuples(r->res[0]) != (int)op->n)
		status = -EPROTO;
	if (status == 0 && !(rows = calloc(op->n, sizeof(*rows))))
		status = -ENOMEM;
	for (uint32_t i = 0; status == 0 && i < op->n; i++)
		rows[i] = atoi(PQgetvalue(r->res[0], (int)i, 0));
	op->rows_cb(op->g, status, status ? NULL : rows, op->n, op->data);
	free(rows);
	free(op);
}

int gate_pg_call_rows(struct gate_pg *g, const char *const *calls, uint32_t n, gate_pg_rows_cb cb,
		      void *data)
{
	struct read_op *op;
	struct pgarr ids;
	int rc = -ENOMEM;

	if (!g || !cb || !calls || n < 1 || n > GATE_PG_WRITE_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		if (!ident_uuid_ok(calls[i]))
			return -EINVAL;
	op = read_op_new(g, data, n);
	if (!op)
		return -ENOMEM;
	op->rows_cb = cb;
	pgarr_init(&ids);
	for (uint32_t i = 0; i < n; i++)
		pgarr_text(&ids, calls[i]);
	if (pgarr_end(&ids)) {
		const char *v[] = { ids.buf };
		struct pg_query q = { .stmt = g->st[ST_CALL_ROWS], .nparams = 1, .values = v };
		rc = pg_pool_exec(g->pool, PG_LANE_NORMAL, &q, call_rows_cb, op);
	}
	pgarr_free(&ids);
	if (rc)
		free(op);
	return rc;
}

static void prune_cb(int status, const struct pg_results *r, void *data)
{
	struct read_op *op = data;
	uint64_t n = 0;

	status = map_status(status, r, "gate prune");
	if (status == 0)
		n = strtoull(PQgetvalue(r->res[0], 0, 0), NULL, 10);
	if (op->count_cb)
		op->count_cb(op->g, status, n, op->data);
	free(op);
}

int gate_pg_prune(struct gate_pg *g, uint64_t fence_age_s, gate_pg_count_cb cb, void *data)
{
	struct read_op *op;
	char age[24];
	int rc;

	if (!g)
		return -EINVAL;
	op = read_op_new(g, data, 0);
	if (!op)
		return -ENOMEM;
	op->count_cb = cb;
	gate_pg_ms(age, fence_age_s);
	const char *v[] = { age };
	struct pg_query q = { .stmt = g->st[ST_PRUNE], .nparams = 1, .values = v };
	rc = pg_pool_exec(g->pool, PG_LANE_NORMAL, &q, prune_cb, op);
	if (rc)
		free(op);
	return rc;
}
