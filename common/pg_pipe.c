/* The requests of one PostgreSQL connection: the send queues, sending in pipeline mode, matching
 * results to requests in order, deadlines, and completing every request exactly once.
 *
 * A request waits on waitq (or, for the transaction holding the connection, on holdq) until the
 * flush, a uv_idle_t that runs at the next turn of the loop, so that the requests queued during
 * one turn leave together. (Not a uv_prepare_t: one started from a callback of the prepare
 * phase would run only after the loop has blocked in poll.) Sent requests are on inflight, in the order libpq
 * will return their results: for each statement its results then NULL, then the sync's
 * PGRES_PIPELINE_SYNC, which completes the request (a connection lost before that completes it
 * with -ECONNRESET, even when a FATAL result came first). Scripts and COPY run alone, outside
 * pipeline mode (conn->excl), after everything sent before them has been answered.
 */
#include "pg_conn_int.h"

#include "error.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* --- requests --- */

static PGresult **inline_res(struct pg_req *req)
{
	return (PGresult **)(req->q + req->nq);
}

/* Rounds a block position up to pointer alignment: a statement's values array follows the
 * previous statement's texts, whose lengths are anything. */
static char *align_ptr(char *p)
{
	uintptr_t a = (uintptr_t)p, m = sizeof(char *) - 1;

	return (char *)((a + m) & ~m);
}

static size_t query_size(const struct pg_query *q)
{
	size_t size = sizeof(char *) * (size_t)q->nparams + (q->sql ? strlen(q->sql) + 1 : 0) +
		      sizeof(char *) - 1; /* alignment of the values array */

	for (int i = 0; i < q->nparams; i++)
		size += q->values[i] ? strlen(q->values[i]) + 1 : 0;
	return size;
}

/* Copies q into the block at *p (values first: they need pointer alignment). */
static void query_copy(struct pg_q *dst, const struct pg_query *q, char **p)
{
	*p = align_ptr(*p);
	const char **values = (const char **)*p;

	*p += sizeof(char *) * (size_t)q->nparams;
	for (int i = 0; i < q->nparams; i++) {
		values[i] = NULL;
		if (q->values[i]) {
			size_t n = strlen(q->values[i]) + 1;
			memcpy(*p, q->values[i], n);
			values[i] = *p;
			*p += n;
		}
	}
	dst->sql = NULL;
	if (q->sql) {
		size_t n = strlen(q->sql) + 1;
		memcpy(*p, q->sql, n);
		dst->sql = *p;
		*p += n;
	}
	dst->op = q->stmt ? Q_STMT : Q_SQL;
	dst->stmt = q->stmt;
	dst->nparams = q->nparams;
	dst->values = values;
}

/* A request for nq statements (copied), in one allocation: the request, its statements, room
 * for one result each, then the parameters and texts. Returns NULL when out of memory. */
struct pg_req *req_new(const struct pg_query *q, int nq)
{
	size_t size =
		sizeof(struct pg_req) + (sizeof(struct pg_q) + sizeof(PGresult *)) * (size_t)nq;

	for (int i = 0; i < nq; i++)
		size += query_size(&q[i]);
	struct pg_req *req = calloc(1, size);
	if (!req)
		return NULL;
	list_init(&req->node);
	req->nq = nq;
	req->q = (struct pg_q *)(req + 1);
	req->res = inline_res(req);
	req->rescap = nq;
	req->failed = -1;
	char *p = (char *)(req->res + nq);
	for (int i = 0; i < nq; i++)
		query_copy(&req->q[i], &q[i], &p);
	return req;
}

void req_free(struct pg_req *req)
{
	for (int i = 0; i < req->nres; i++)
		PQclear(req->res[i]); /* NULL (taken by a transaction) is allowed */
	if (req->res != inline_res(req))
		free(req->res);
	if (req->copy)
		copy_free(req->copy);
	free(req);
}

/* Keeps res in the request; drops it when out of memory (the request then fails). */
static void keep(struct pg_req *req, PGresult *res)
{
	if (req->nres == req->rescap) {
		int cap = req->rescap ? req->rescap * 2 : 4;
		PGresult **grown = malloc(sizeof(*grown) * (size_t)cap);
		if (!grown) {
			PQclear(res);
			if (req->failed < 0)
				req->failed = req->nres;
			return;
		}
		memcpy(grown, req->res, sizeof(*grown) * (size_t)req->nres);
		if (req->res != inline_res(req))
			free(req->res);
		req->res = grown;
		req->rescap = cap;
	}
	req->res[req->nres++] = res;
}

/* Calls the request's callback (through its transaction or COPY, if any) and frees it. */
static void complete(struct pg_conn *conn, struct pg_req *req, int status)
{
	struct pg_results r = { .res = (const PGresult *const *)req->res, .failed = -1 };

	conn->stats.queries++;
	if (status == 0 || status == DSP_EPG)
		r.n = req->nres;
	if (status == DSP_EPG && req->nres > 0 && req->failed >= 0) {
		r.failed = req->failed;
		r.error = req->res[req->nres - 1];
	}
	/* A COPY of a transaction (pg_txn_copy_in) took no claim of its own: the hold has it. */
	if ((req->kind == REQ_SCRIPT || req->kind == REQ_COPY) && !req->txn)
		conn->claims--;
	if (req->copy) {
		copy_complete(req, status, &r);
		if (req->txn) /* then the transaction's bookkeeping (req->cb is NULL) */
			txn_request_done(conn, req, status, &r);
	} else if (req->txn)
		txn_request_done(conn, req, status, &r);
	else if (req->cb)
		req->cb(status, &r, req->data);
	req_free(req);
}

static void unqueue(struct pg_conn *conn, struct pg_req *req)
{
	list_del(&req->node);
	if (req->on_holdq)
		conn->nhold--;
	else
		conn->nwait--;
	req->on_holdq = false;
}

int conn_check_query(const struct pg_conn *conn, const struct pg_query *q)
{
	if (!q || q->nparams < 0 || q->nparams > 65535 || (q->nparams > 0 && !q->values))
		return -EINVAL;
	if (q->stmt)
		return q->stmt->set == conn->stmts && q->nparams == q->stmt->nparams ? 0 : -EINVAL;
	if (!q->sql || conn_sql_is_copy(q->sql) || conn_sql_is_txn_control(q->sql))
		return -EINVAL;
	return 0;
}

/* Queues req (not yet on any list). Returns 0, or an error with req untouched (the caller frees
 * it). */
int req_enqueue(struct pg_conn *conn, struct pg_req *req)
{
	if (conn->state == ST_CLOSED)
		return -ESHUTDOWN;
	if (conn->state != ST_UP) {
		conn->stats.refused++;
		return -ENOTCONN;
	}
	if (conn->nwait >= conn->opts.max_queue)
		return -EAGAIN;
	/* The loop's time is that of its last wake-up: a caller that worked (or blocked) since
	 * would otherwise see its request expire before the flush could send it. */
	uv_update_time(conn->loop);
	req->queued_at = uv_now(conn->loop);
	list_add_tail(&conn->waitq, &req->node);
	conn->nwait++;
	if (req->kind != REQ_PIPE)
		conn->claims++;
	if (conn->nwait == 1)
		pipe_arm_deadline(conn, req->queued_at + conn->opts.queue_timeout_ms);
	pipe_schedule(conn);
	return 0;
}

/* Queues a request of the transaction holding the connection. */
void req_enqueue_held(struct pg_conn *conn, struct pg_req *req)
{
	req->queued_at = uv_now(conn->loop);
	req->on_holdq = true;
	list_add_tail(&conn->holdq, &req->node);
	conn->nhold++;
	pipe_schedule(conn);
}

static int submit(struct pg_conn *conn, enum req_kind kind, const struct pg_query *q, int nq,
		  pg_result_cb cb, void *data)
{
	if (conn->state == ST_CLOSED)
		return -ESHUTDOWN;
	if (conn->state != ST_UP) {
		conn->stats.refused++;
		return -ENOTCONN;
	}
	if (!cb || !q || nq < 1 || nq > PG_MAX_BATCH)
		return -EINVAL;
	for (int i = 0; i < nq; i++) {
		int rc = kind == REQ_SCRIPT ? (q[i].sql ? 0 : -EINVAL)
					    : conn_check_query(conn, &q[i]);
		if (rc < 0)
			return rc;
	}
	struct pg_req *req = req_new(q, nq);
	if (!req)
		return -ENOMEM;
	req->kind = kind;
	req->cb = cb;
	req->data = data;
	int rc = req_enqueue(conn, req);
	if (rc < 0)
		req_free(req);
	return rc;
}

int pg_conn_exec(struct pg_conn *conn, const struct pg_query *q, pg_result_cb cb, void *data)
{
	return submit(conn, REQ_PIPE, q, 1, cb, data);
}

int pg_conn_batch(struct pg_conn *conn, const struct pg_query *q, int nq, pg_result_cb cb,
		  void *data)
{
	return submit(conn, REQ_PIPE, q, nq, cb, data);
}

int pg_conn_script(struct pg_conn *conn, const char *sql, pg_result_cb cb, void *data)
{
	return submit(conn, REQ_SCRIPT, &(struct pg_query){ .sql = sql }, 1, cb, data);
}

/* --- sending --- */

void pipe_schedule(struct pg_conn *conn)
{
	if (conn->flush_active || conn->state == ST_CLOSED)
		return;
	conn->flush_active = true;
	uv_idle_start(&conn->flush, pipe_flush_cb);
}

/* Flushes what libpq buffered and watches for answers (and for writability while some is left).
 * A failure marks the connection, which the next flush drops: no callback runs from here. */
void pipe_flush_out(struct pg_conn *conn)
{
	int r = PQflush(conn->pg);

	if (r < 0 || conn_watch(conn, UV_READABLE | (r == 1 ? UV_WRITABLE : 0)) < 0)
		conn_io_failed(conn);
}

static bool send_pipe(struct pg_conn *conn, const struct pg_req *req)
{
	for (int i = 0; i < req->nq; i++) {
		const struct pg_q *q = &req->q[i];
		int ok;
		if (q->op == Q_PREPARE)
			ok = PQsendPrepare(conn->pg, q->stmt->name, q->stmt->sql, q->stmt->nparams,
					   NULL);
		else if (q->op == Q_STMT)
			ok = PQsendQueryPrepared(conn->pg, q->stmt->name, q->nparams, q->values,
						 NULL, NULL, 0);
		else
			ok = PQsendQueryParams(conn->pg, q->sql, q->nparams, NULL, q->values, NULL,
					       NULL, 0);
		if (!ok)
			return false;
	}
	return PQpipelineSync(conn->pg) == 1;
}

static void mark_sent(struct pg_conn *conn, struct pg_req *req)
{
	uint64_t timeout = req->timeout_ms ? req->timeout_ms : conn->opts.query_timeout_ms;

	list_add_tail(&conn->inflight, &req->node);
	if (++conn->ninflight > conn->stats.inflight_peak)
		conn->stats.inflight_peak = conn->ninflight;
	req->deadline = req->fixed_deadline ? req->fixed_deadline : uv_now(conn->loop) + timeout;
	pipe_arm_deadline(conn, req->deadline);
}

void pipe_send_setup(struct pg_conn *conn, struct pg_req *req)
{
	mark_sent(conn, req);
	if (!send_pipe(conn, req)) {
		conn_lost_pq(conn);
		return;
	}
	pipe_flush_out(conn);
}

/* Starts a script or a COPY: the pipeline is empty, so libpq may leave pipeline mode. */
static bool start_exclusive(struct pg_conn *conn, struct pg_req *req)
{
	conn->excl = req;
	if (!PQexitPipelineMode(conn->pg))
		return false;
	if (req->kind == REQ_COPY)
		return copy_start(conn, req);
	return PQsendQuery(conn->pg, req->q[0].sql) == 1;
}

/* Whether req may be sent now. */
static bool may_send(const struct pg_conn *conn, const struct pg_req *req)
{
	if (conn->ninflight >= conn->opts.max_inflight)
		return false;
	/* Scripts and COPY wait until everything sent before them has been answered. */
	return !((req->kind == REQ_SCRIPT || req->kind == REQ_COPY) && conn->ninflight > 0);
}

/* Sends what may be sent: the holding transaction's requests while it holds the connection,
 * else the queue in order. Runs from the flush only. */
static void pump(struct pg_conn *conn)
{
	bool sent = false;

	/* Deadlines count from the send: the loop's time is that of the start of this turn, and
	 * the callbacks that ran since may have taken longer than a deadline. */
	uv_update_time(conn->loop);
	while (conn->state == ST_UP && !conn->excl && !conn->io_failed) {
		struct list_node *n = list_first(conn->holder ? &conn->holdq : &conn->waitq);
		if (!n)
			break;
		struct pg_req *req = list_entry(n, struct pg_req, node);
		if (!may_send(conn, req))
			break;
		unqueue(conn, req);
		if (req->kind == REQ_HOLD)
			txn_take_hold(conn, req); /* sets its deadline: the transaction's */
		mark_sent(conn, req);
		sent = true;
		if (req->kind == REQ_SCRIPT || req->kind == REQ_COPY) {
			if (!start_exclusive(conn, req))
				conn_io_failed(conn);
			break;
		}
		if (req->ends_hold)
			txn_release_hold(conn);
		if (!send_pipe(conn, req))
			conn_io_failed(conn);
	}
	if (sent && !conn->io_failed)
		pipe_flush_out(conn);
}

/* --- results --- */

static void finish(struct pg_conn *conn, struct pg_req *req, int status)
{
	list_del(&req->node);
	conn->ninflight--;
	complete(conn, req, status);
	pipe_schedule(conn);
}

/* A result (or the NULL ending a statement) of a pipelined request. Returns false when the
 * loop must stop and wait for more input. */
static bool pipe_result(struct pg_conn *conn, struct pg_req *req, PGresult *res)
{
	if (req->cur < req->nq) {
		if (!res) {
			req->cur++;
			return true;
		}
		ExecStatusType st = PQresultStatus(res);
		if (st == PGRES_PIPELINE_ABORTED) {
			PQclear(res); /* skipped after an earlier error of the same request */
			return true;
		}
		if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH) {
			PQclear(res);
			conn_lost(conn, "a COPY was sent in pipeline mode");
			return false;
		}
		if (st == PGRES_FATAL_ERROR && req->failed < 0)
			req->failed = req->cur;
		keep(req, res);
		return true;
	}
	if (!res)
		return false;
	if (PQresultStatus(res) != PGRES_PIPELINE_SYNC) {
		PG_LOG(conn, LOG_WARN, "unexpected %s result after a request's statements",
		       PQresStatus(PQresultStatus(res)));
		PQclear(res);
		return true;
	}
	PQclear(res);
	finish(conn, req, req->failed >= 0 ? DSP_EPG : 0);
	return true;
}

/* A COPY started by a script. libpq would return its COPY state from every PQgetResult() for
 * ever: COPY FROM STDIN is failed (the script gets the server's error), anything else drops
 * the connection. Returns false when the loop must stop. */
static bool script_copy(struct pg_conn *conn, PGresult *res)
{
	bool in = PQresultStatus(res) == PGRES_COPY_IN;

	PQclear(res);
	PG_LOG(conn, LOG_ERROR, "a script ran COPY; use pg_conn_copy_in()");
	if (!in) {
		conn_lost(conn, "COPY TO STDOUT in a script");
		return false;
	}
	if (PQputCopyEnd(conn->pg, "COPY is not allowed in a script: use pg_conn_copy_in()") != 1) {
		conn_lost_pq(conn);
		return false;
	}
	pipe_flush_out(conn);
	return true;
}

/* The script's commands are over but it left a transaction block open (a BEGIN without
 * COMMIT, or an error after BEGIN): every later statement on the connection would run inside
 * it, so it is rolled back first. Returns false when the loop must stop. */
static bool script_rollback(struct pg_conn *conn, struct pg_req *req)
{
	if (req->rolled_back) {
		conn_lost(conn, "cannot roll back a script's transaction");
		return false;
	}
	PG_LOG(conn, LOG_WARN, "a script left a transaction open; rolling it back");
	req->rolled_back = true;
	if (!PQsendQuery(conn->pg, "ROLLBACK")) {
		conn_lost_pq(conn);
		return false;
	}
	pipe_flush_out(conn);
	return true;
}

/* A result (or the final NULL) of a script or COPY, outside pipeline mode. */
static bool exclusive_result(struct pg_conn *conn, struct pg_req *req, PGresult *res)
{
	if (req->kind == REQ_COPY && copy_result(conn, req, res))
		return true;
	if (res) {
		ExecStatusType st = PQresultStatus(res);
		if (st == PGRES_COPY_IN || st == PGRES_COPY_OUT || st == PGRES_COPY_BOTH)
			return script_copy(conn, res);
		if (req->rolled_back) {
			PQclear(res); /* the ROLLBACK's */
			return true;
		}
		if (st == PGRES_FATAL_ERROR && req->failed < 0)
			req->failed = req->nres;
		keep(req, res);
		return true;
	}
	if (PQstatus(conn->pg) == CONNECTION_BAD) {
		conn_lost_pq(conn); /* a FATAL result then the end: the connection's, not ours */
		return false;
	}
	if (req->kind == REQ_SCRIPT && PQtransactionStatus(conn->pg) != PQTRANS_IDLE)
		return script_rollback(conn, req);
	conn->excl = NULL;
	bool again = PQenterPipelineMode(conn->pg) == 1;
	finish(conn, req, req->failed >= 0 ? DSP_EPG : req->rolled_back ? -EINVAL : 0);
	if (!again && conn->pg)
		conn_io_failed(conn);
	return true;
}

/* Hands every complete result libpq holds to its request. */
static void pipe_results(struct pg_conn *conn)
{
	while (conn->pg && (conn->state == ST_UP || conn->state == ST_SETUP)) {
		if (PQstatus(conn->pg) == CONNECTION_BAD) {
			conn_lost_pq(conn);
			return;
		}
		struct list_node *n = list_first(&conn->inflight);
		if (!n)
			return;
		struct pg_req *req = list_entry(n, struct pg_req, node);
		if (req->copy && copy_streaming(req->copy))
			return;
		if (PQisBusy(conn->pg))
			return;
		PGresult *res = PQgetResult(conn->pg);
		bool more = conn->excl == req ? exclusive_result(conn, req, res)
					      : pipe_result(conn, req, res);
		if (!more)
			return;
	}
}

void pipe_input(struct pg_conn *conn)
{
	if (!PQconsumeInput(conn->pg)) {
		conn_lost_pq(conn);
		return;
	}
	pipe_results(conn);
	conn_dispatch_notifies(conn);
	if (conn->pg && PQstatus(conn->pg) == CONNECTION_BAD)
		conn_lost_pq(conn);
}

void pipe_writable(struct pg_conn *conn)
{
	if (conn->excl && conn->excl->copy)
		copy_writable(conn, conn->excl);
	else
		pipe_flush_out(conn);
}

void pipe_flush_cb(uv_idle_t *h)
{
	struct pg_conn *conn = h->data;

	conn->flush_active = false;
	uv_idle_stop(&conn->flush);
	if (!conn->io_failed)
		pump(conn);
	if (conn->io_failed) {
		conn_lost_pq(conn);
		return;
	}
	/* Sending may have read answers into libpq's buffer, which no poll event will report. */
	if (conn->pg && conn->state == ST_UP) {
		pipe_results(conn);
		conn_dispatch_notifies(conn);
	}
}

/* --- deadlines --- */

void pipe_arm_deadline(struct pg_conn *conn, uint64_t due)
{
	uint64_t now = uv_now(conn->loop);

	if (conn->state == ST_CLOSED || (conn->deadline_due && conn->deadline_due <= due))
		return;
	conn->deadline_due = due;
	uv_timer_start(&conn->deadline_timer, pipe_deadline_cb, due > now ? due - now : 0, 0);
}

/* Completes, unsent, the queued requests that waited longer than the queue bound. */
static void expire_queued(struct pg_conn *conn, uint64_t now)
{
	struct list_node *n;

	while (conn->state == ST_UP && (n = list_first(&conn->waitq)) != NULL) {
		struct pg_req *req = list_entry(n, struct pg_req, node);
		if (req->queued_at + conn->opts.queue_timeout_ms > now)
			break;
		unqueue(conn, req);
		conn->stats.queue_timeouts++;
		PG_LOG(conn, LOG_WARN, "request waited %llu ms in the queue; not sent",
		       (unsigned long long)(now - req->queued_at));
		complete(conn, req, -ETIMEDOUT);
	}
}

/* Marks the requests in flight past their deadline. Returns how many. */
static int expire_inflight(struct pg_conn *conn, uint64_t now)
{
	struct list_node *pos, *tmp;
	int expired = 0;

	list_for_each_safe (pos, tmp, &conn->inflight) {
		struct pg_req *req = list_entry(pos, struct pg_req, node);
		if (req->deadline > now)
			continue;
		req->expired = true;
		if (req->txn && !req->txn->fail)
			req->txn->fail = -ETIMEDOUT;
		expired++;
	}
	return expired;
}

static void rearm(struct pg_conn *conn)
{
	struct list_node *pos, *tmp, *n = list_first(&conn->waitq);
	uint64_t due = UINT64_MAX;

	if (n)
		due = list_entry(n, struct pg_req, node)->queued_at + conn->opts.queue_timeout_ms;
	list_for_each_safe (pos, tmp, &conn->inflight) {
		uint64_t d = list_entry(pos, struct pg_req, node)->deadline;
		due = d < due ? d : due;
	}
	if (conn->holder && conn->holder->deadline < due)
		due = conn->holder->deadline;
	if (due != UINT64_MAX)
		pipe_arm_deadline(conn, due);
}

void pipe_deadline_cb(uv_timer_t *t)
{
	struct pg_conn *conn = t->data;
	uint64_t now = uv_now(conn->loop);

	conn->deadline_due = 0;
	if (conn->state != ST_UP || conn->io_failed)
		return; /* the flush drops a failed connection */
	/* Timers run before the loop reads its sockets: an answer that arrived while the loop was
	 * busy elsewhere is read first, so that only what is really missing expires. */
	pipe_input(conn);
	if (conn->state != ST_UP)
		return;
	int expired = expire_inflight(conn, now);
	if (expired) {
		conn->stats.timeouts += (uint64_t)expired;
		PG_LOG(conn, LOG_WARN, "%d request(s) past their deadline; dropping the connection",
		       expired);
		conn_lost(conn, "request timed out");
		return;
	}
	expire_queued(conn, now);
	if (conn->state == ST_UP)
		txn_idle_deadline(conn, now);
	if (conn->state == ST_UP)
		rearm(conn);
}

/* --- failing everything --- */

static void complete_list(struct pg_conn *conn, struct list_node *list, int status)
{
	struct list_node *pos, *tmp;

	list_for_each_safe (pos, tmp, list) {
		struct pg_req *req = list_entry(pos, struct pg_req, node);
		int st = status;
		list_del(pos);
		if (req->expired)
			st = -ETIMEDOUT;
		else if (req->txn && req->txn->fail && req->kind != REQ_HOLD)
			st = req->txn->fail;
		complete(conn, req, st);
	}
}

void pipe_fail_all(struct pg_conn *conn, int inflight_status, int queued_status)
{
	struct list_node sent, held, queued;

	list_init(&sent);
	list_init(&held);
	list_init(&queued);
	list_splice_tail(&sent, &conn->inflight);
	list_splice_tail(&held, &conn->holdq);
	list_splice_tail(&queued, &conn->waitq);
	conn->ninflight = conn->nhold = conn->nwait = 0;
	if (conn->holder) {
		if (!conn->holder->fail)
			conn->holder->fail = inflight_status;
		txn_release_hold(conn);
	}
	complete_list(conn, &sent, inflight_status);
	complete_list(conn, &held, inflight_status);
	complete_list(conn, &queued, queued_status);
}
