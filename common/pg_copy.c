/* COPY FROM STDIN on one connection (pg_copy.h).
 *
 * pg_pipe.c runs the COPY request alone, outside pipeline mode: copy_start() sends the
 * statement, copy_result() turns PGRES_COPY_IN into the streaming phase, during which no
 * PQgetResult is called; pg_copy_end() sends CopyDone and the final result completes the
 * request through copy_complete(). Back-pressure: libpq buffers whatever PQputCopyData is given
 * (its buffer grows), so every COPY_FLUSH_BYTES the data is flushed, and when the socket takes
 * no more the caller is told to wait (put returns 1) until it has drained.
 */
#include "pg_conn_int.h"

#include "error.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COPY_FLUSH_BYTES (64 * 1024)

enum copy_phase {
	CP_QUEUED,    /* waiting for its turn */
	CP_SENT,      /* COPY sent, PGRES_COPY_IN not yet seen */
	CP_STREAMING, /* taking data */
	CP_ENDING,    /* CopyDone or CopyFail sent (or failing): waiting for the result */
};

struct pg_copy {
	struct pg_conn *conn;
	struct pg_copy_options opts;
	enum copy_phase phase;
	bool full;	  /* put returned 1 (or -EAGAIN): ready_cb owed once the socket drains */
	bool end_pending; /* PQputCopyEnd could not be queued yet */
	bool aborting;	  /* end with CopyFail and reason */
	char reason[128];
	size_t unflushed; /* bytes handed to libpq since the last flush */
};

int pg_conn_copy_in(struct pg_conn *conn, const char *sql, const struct pg_copy_options *opts)
{
	if (!opts || !opts->ready_cb || !opts->done_cb || !conn_sql_is_copy(sql))
		return -EINVAL;
	struct pg_req *req = req_new(&(struct pg_query){ .sql = sql }, 1);
	struct pg_copy *copy = calloc(1, sizeof(*copy));
	if (!req || !copy) {
		free(copy);
		if (req)
			req_free(req);
		return -ENOMEM;
	}
	copy->conn = conn;
	copy->opts = *opts;
	req->kind = REQ_COPY;
	req->copy = copy;
	req->timeout_ms = opts->timeout_ms;
	int rc = req_enqueue(conn, req);
	if (rc < 0)
		req_free(req); /* frees copy */
	return rc;
}

/* --- COPY inside an interactive transaction (pg_txn_copy_in) --- */
int pg_txn_copy_in(struct pg_txn *txn, const char *sql, const struct pg_copy_options *opts)
{
	if (!txn || !opts || !opts->ready_cb || !opts->done_cb || !conn_sql_is_copy(sql))
		return -EINVAL;
	if (txn->ending)
		return -EBUSY;
	if (txn->fail)
		return txn->fail;
	struct pg_req *req = req_new(&(struct pg_query){ .sql = sql }, 1);
	struct pg_copy *copy = calloc(1, sizeof(*copy));
	if (!req || !copy) {
		free(copy);
		if (req)
			req_free(req);
		return -ENOMEM;
	}
	copy->conn = txn->conn;
	copy->opts = *opts;
	req->kind = REQ_COPY;
	req->copy = copy;
	req->txn = txn;
	req->fixed_deadline = txn->deadline; /* the transaction's, not opts->timeout_ms */
	txn->pending++;
	req_enqueue_held(txn->conn, req);
	return 0;
}
/* --- end COPY inside a transaction --- */

void copy_free(struct pg_copy *copy)
{
	free(copy);
}

bool copy_start(struct pg_conn *conn, struct pg_req *req)
{
	req->copy->phase = CP_SENT;
	return PQsendQueryParams(conn->pg, req->q[0].sql, 0, NULL, NULL, NULL, NULL, 0) == 1;
}

bool copy_streaming(const struct pg_copy *copy)
{
	return copy->phase == CP_STREAMING;
}

bool copy_result(struct pg_conn *conn, struct pg_req *req, PGresult *res)
{
	struct pg_copy *copy = req->copy;

	if (!res || copy->phase != CP_SENT)
		return false;
	ExecStatusType st = PQresultStatus(res);
	if (st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH) {
		PQclear(res);
		PG_LOG(conn, LOG_ERROR,
		       "pg_conn_copy_in() was given a COPY that is not FROM STDIN");
		conn_lost(conn, "COPY in the wrong direction");
		return true;
	}
	if (st != PGRES_COPY_IN)
		return false;
	PQclear(res);
	copy->phase = CP_STREAMING;
	copy->opts.ready_cb(copy, copy->opts.data);
	return true;
}

/* The connection broke while the caller was handing data: the next flush drops it (no callback
 * may run from the caller's own call). */
static void fail_io(struct pg_copy *copy)
{
	copy->phase = CP_ENDING;
	conn_io_failed(copy->conn);
}

int pg_copy_put(struct pg_copy *copy, const void *buf, size_t len)
{
	struct pg_conn *conn = copy->conn;

	if (copy->phase != CP_STREAMING || conn->io_failed)
		return -EPIPE;
	if (len > INT_MAX)
		return -EINVAL;
	int r = PQputCopyData(conn->pg, buf, (int)len);
	if (r < 0) {
		fail_io(copy);
		return -EPIPE;
	}
	if (r > 0) {
		copy->unflushed += len;
		if (copy->unflushed < COPY_FLUSH_BYTES)
			return 0;
		copy->unflushed = 0;
		r = PQflush(conn->pg);
		if (r < 0) {
			fail_io(copy);
			return -EPIPE;
		}
		if (r == 0)
			return 0;
	}
	/* The socket is full (r == 1: taken), or libpq could not queue the data (r == 0). */
	bool taken = r == 1;
	copy->full = true;
	if (conn_watch(conn, UV_READABLE | UV_WRITABLE) < 0) {
		fail_io(copy);
		return -EPIPE;
	}
	return taken ? 1 : -EAGAIN;
}

static void send_end(struct pg_copy *copy)
{
	struct pg_conn *conn = copy->conn;
	int r = PQputCopyEnd(conn->pg, copy->aborting ? copy->reason : NULL);

	if (r < 0) {
		fail_io(copy);
		return;
	}
	copy->end_pending = r == 0;
	if (copy->end_pending) {
		if (conn_watch(conn, UV_READABLE | UV_WRITABLE) < 0)
			fail_io(copy);
		return;
	}
	pipe_flush_out(conn);
	pipe_schedule(conn); /* the answer may already be in libpq's buffer */
}

static int finish_data(struct pg_copy *copy, const char *reason)
{
	if (copy->phase != CP_STREAMING || copy->conn->io_failed)
		return -EPIPE;
	copy->phase = CP_ENDING;
	if (reason) {
		copy->aborting = true;
		snprintf(copy->reason, sizeof(copy->reason), "%s", reason);
	}
	send_end(copy);
	return 0;
}

int pg_copy_end(struct pg_copy *copy)
{
	return finish_data(copy, NULL);
}

int pg_copy_abort(struct pg_copy *copy, const char *reason)
{
	return finish_data(copy, reason ? reason : "aborted by the caller");
}

void copy_writable(struct pg_conn *conn, struct pg_req *req)
{
	struct pg_copy *copy = req->copy;
	int r = PQflush(conn->pg);

	if (r < 0) {
		conn_lost_pq(conn);
		return;
	}
	if (r == 1) {
		/* Still full: keep watching (again, if an error report stopped the handle). */
		if (conn_watch(conn, UV_READABLE | UV_WRITABLE) < 0)
			conn_lost(conn, "cannot watch the socket");
		return;
	}
	if (copy->end_pending) {
		send_end(copy);
		return;
	}
	if (conn_watch(conn, UV_READABLE) < 0) {
		conn_lost(conn, "cannot watch the socket");
		return;
	}
	if (copy->full && copy->phase == CP_STREAMING) {
		copy->full = false;
		copy->opts.ready_cb(copy, copy->opts.data);
	}
}

/* The line PostgreSQL names in a COPY error's CONTEXT ("COPY t, line 3, column a: ..."), or 0. */
static long error_line(const PGresult *err)
{
	const char *ctx = err ? PQresultErrorField(err, PG_DIAG_CONTEXT) : NULL;
	const char *at = ctx ? strstr(ctx, ", line ") : NULL;

	return at ? strtol(at + 7, NULL, 10) : 0;
}

void copy_complete(struct pg_req *req, int status, const struct pg_results *r)
{
	struct pg_copy *copy = req->copy;
	struct pg_copy_report rep = { 0 };

	if (status == 0 && r->n > 0)
		rep.rows = strtoull(PQcmdTuples((PGresult *)r->res[r->n - 1]), NULL, 10);
	if (status == DSP_EPG) {
		rep.error = r->error;
		rep.line = error_line(r->error);
	}
	copy->phase = CP_ENDING; /* no more data from inside done_cb */
	copy->opts.done_cb(status, &rep, copy->opts.data);
}
