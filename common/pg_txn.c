/* Interactive transactions on one connection (pg_txn.h).
 *
 * The begin request (REQ_HOLD) waits on the queue like any other; when it is sent, its
 * transaction becomes the holder and the connection sends only from holdq until COMMIT or
 * ROLLBACK is sent. The owner gets the handle once BEGIN has succeeded, so no statement of
 * the transaction can ever run outside it. A lost connection sets txn->fail before any
 * callback runs; from then on the handle never touches a connection again, so a reconnect
 * cannot hand the transaction a fresh one.
 */
#include "pg_conn_int.h"

#include "error.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *const begin_sql[] = {
	[PG_READ_COMMITTED] = "BEGIN",
	[PG_REPEATABLE_READ] = "BEGIN ISOLATION LEVEL REPEATABLE READ",
	[PG_SERIALIZABLE] = "BEGIN ISOLATION LEVEL SERIALIZABLE",
};

/* Frees txn once its owner has given it up and none of its requests is pending. */
static void free_if_done(struct pg_txn *txn)
{
	if (!txn->ending || txn->pending > 0)
		return;
	list_del(&txn->node);
	if (txn->error)
		PQclear(txn->error);
	free(txn);
}

int pg_conn_begin(struct pg_conn *conn, const struct pg_txn_options *opts, pg_txn_cb cb, void *data)
{
	if (!cb || (opts && (unsigned)opts->isolation > PG_SERIALIZABLE))
		return -EINVAL;
	struct pg_txn *txn = calloc(1, sizeof(*txn));
	if (!txn)
		return -ENOMEM;
	if (opts)
		txn->opts = *opts;
	if (!txn->opts.timeout_ms)
		txn->opts.timeout_ms = conn->opts.query_timeout_ms;
	list_init(&txn->node);
	txn->conn = conn;
	txn->begin_cb = cb;
	txn->begin_data = data;
	struct pg_req *req =
		req_new(&(struct pg_query){ .sql = begin_sql[txn->opts.isolation] }, 1);
	int rc = req ? 0 : -ENOMEM;
	if (req) {
		req->kind = REQ_HOLD;
		req->txn = txn;
		rc = req_enqueue(conn, req);
	}
	if (rc < 0) {
		if (req)
			req_free(req);
		free(txn);
		return rc;
	}
	list_add_tail(&conn->txns, &txn->node);
	return 0;
}

void txn_take_hold(struct pg_conn *conn, struct pg_req *hold)
{
	struct pg_txn *txn = hold->txn;

	txn->deadline = uv_now(conn->loop) + txn->opts.timeout_ms;
	hold->fixed_deadline = txn->deadline;
	conn->holder = txn;
}

void txn_release_hold(struct pg_conn *conn)
{
	struct pg_txn *txn = conn->holder;

	if (!txn)
		return;
	conn->holder = NULL;
	conn->claims--;
	pipe_schedule(conn);
}

/* BEGIN answered, or the begin request failed. */
static void hold_done(struct pg_conn *conn, struct pg_req *req, int status)
{
	struct pg_txn *txn = req->txn;

	if (status == 0 && !txn->fail) {
		txn->begin_cb(0, txn, txn->begin_data);
		return;
	}
	if (status == 0)
		status = txn->fail;
	if (status == DSP_EPG)
		PG_LOG(conn, LOG_ERROR, "BEGIN failed: %s", PQresultErrorMessage(req->res[0]));
	if (conn->holder == txn)
		txn_release_hold(conn);
	else if (!req->deadline)
		conn->claims--; /* never sent: the claim it took when queued */
	list_del(&txn->node);
	txn->begin_cb(status, NULL, txn->begin_data);
	free(txn);
}

static bool rolled_back_commit(const struct pg_req *req, int status)
{
	return status == 0 && req->ends_hold && req->nres > 0 &&
	       strcmp(req->q[0].sql, "COMMIT") == 0 &&
	       strcmp(PQcmdStatus(req->res[0]), "ROLLBACK") == 0;
}

void txn_request_done(struct pg_conn *conn, struct pg_req *req, int status, struct pg_results *r)
{
	struct pg_txn *txn = req->txn;

	if (req->kind == REQ_HOLD) {
		hold_done(conn, req, status);
		return;
	}
	if (rolled_back_commit(req, status)) {
		/* An earlier statement failed: PostgreSQL answered COMMIT with ROLLBACK. */
		status = DSP_EPG;
		r->error = txn->error;
	}
	/* The request stays pending during its callback, so that the owner giving the handle up
	 * there (or closing the connection, which completes the others) cannot free it under us. */
	if (req->cb)
		req->cb(status, r, req->data);
	if (status == DSP_EPG && !txn->error && !req->ends_hold && r->error) {
		txn->error = req->res[req->nres - 1]; /* kept for the commit's answer */
		req->res[req->nres - 1] = NULL;
	}
	txn->pending--;
	free_if_done(txn);
}

void txn_idle_deadline(struct pg_conn *conn, uint64_t now)
{
	struct pg_txn *txn = conn->holder;

	if (!txn || txn->deadline > now)
		return;
	conn->stats.timeouts++;
	if (!txn->fail)
		txn->fail = -ETIMEDOUT;
	if (txn->pending > 0) {
		conn_lost(conn, "transaction past its deadline");
		return;
	}
	PG_LOG(conn, LOG_WARN, "transaction idle past its deadline; rolling it back");
	struct pg_req *rb = req_new(&(struct pg_query){ .sql = "ROLLBACK" }, 1);
	if (!rb) {
		conn_lost(conn, "out of memory");
		return;
	}
	txn_release_hold(conn);
	rb->kind = REQ_PIPE;
	rb->queued_at = now;
	list_add_head(&conn->waitq, &rb->node);
	conn->nwait++;
	pipe_schedule(conn);
}

void txn_conn_gone(struct pg_conn *conn, int status)
{
	struct list_node *pos, *tmp;

	list_for_each_safe (pos, tmp, &conn->txns) {
		struct pg_txn *txn = list_entry(pos, struct pg_txn, node);
		if (!txn->fail)
			txn->fail = status;
		txn->conn = NULL;
		list_del(pos);
	}
	conn->holder = NULL;
}

int pg_txn_exec(struct pg_txn *txn, const struct pg_query *q, pg_result_cb cb, void *data)
{
	if (txn->ending)
		return -EBUSY;
	if (txn->fail)
		return txn->fail;
	if (!cb)
		return -EINVAL;
	int rc = conn_check_query(txn->conn, q);
	if (rc < 0)
		return rc;
	struct pg_req *req = req_new(q, 1);
	if (!req)
		return -ENOMEM;
	req->kind = REQ_PIPE;
	req->txn = txn;
	req->fixed_deadline = txn->deadline;
	req->cb = cb;
	req->data = data;
	txn->pending++;
	req_enqueue_held(txn->conn, req);
	return 0;
}

static int end(struct pg_txn *txn, const char *sql, pg_result_cb cb, void *data)
{
	if (txn->ending)
		return -EBUSY;
	if (txn->fail) {
		int rc = txn->fail;
		txn->ending = true;
		free_if_done(txn);
		return rc;
	}
	struct pg_req *req = req_new(&(struct pg_query){ .sql = sql }, 1);
	if (!req)
		return -ENOMEM;
	txn->ending = true;
	req->kind = REQ_PIPE;
	req->txn = txn;
	req->ends_hold = true;
	req->fixed_deadline = txn->deadline;
	req->cb = cb;
	req->data = data;
	txn->pending++;
	req_enqueue_held(txn->conn, req);
	return 0;
}

int pg_txn_commit(struct pg_txn *txn, pg_result_cb cb, void *data)
{
	return end(txn, "COMMIT", cb, data);
}

int pg_txn_rollback(struct pg_txn *txn, pg_result_cb cb, void *data)
{
	return end(txn, "ROLLBACK", cb, data);
}
