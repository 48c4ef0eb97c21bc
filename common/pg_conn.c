#include "pg_conn.h"

#include "backoff.h"
#include "error.h"
#include "log.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

enum state {
	ST_IDLE,       /* created, not started */
	ST_DOWN,       /* waiting for the reconnect timer */
	ST_CONNECTING, /* PQconnectPoll under way */
	ST_PREPARING,  /* connected, preparing the registered statements */
	ST_UP,	       /* accepting requests */
	ST_CLOSED,     /* closed by the owner */
};

struct statement {
	char *name;
	char *sql;
	int nparams;
};

struct request {
	struct request *next;
	pg_result_cb cb;
	void *data;
	const struct statement *stmt; /* prepared statement, or NULL for sql */
	char *sql;		      /* owned; NULL for a prepared statement */
	int nparams;
	char **values;	  /* owned, one block with the strings */
	PGresult *result; /* first result received */
};

struct pg_poll {
	uv_poll_t handle;
	struct pg_conn *conn; /* NULL once detached */
};

struct pg_conn {
	uv_loop_t *loop;
	struct pg_conn_options opts;
	char *conninfo;	      /* owned copy */
	PGconn *pg;	      /* NULL when down */
	struct pg_poll *poll; /* watches PQsocket(pg) */
	enum state state;
	struct statement *stmts;
	int nstmts;
	int preparing; /* index of the statement being prepared */
	struct request *head, *tail;
	unsigned queued;
	struct request *inflight;
	uv_timer_t retry_timer; /* reconnect delay, then connect deadline */
	uv_timer_t query_timer; /* deadline of the statement in flight */
	struct backoff backoff;
	uint64_t rng;
	int open_handles;
	void (*closed_cb)(void *data);
	void *closed_data;
	struct pg_conn_stats stats;
};

static void start_connect(struct pg_conn *conn);
static void poll_cb(uv_poll_t *handle, int status, int events);
static void pump(struct pg_conn *conn);
static void query_deadline_cb(uv_timer_t *t);

static void poll_closed_cb(uv_handle_t *h)
{
	free(h->data);
}

static void unwatch(struct pg_conn *conn)
{
	if (!conn->poll)
		return;
	conn->poll->conn = NULL;
	uv_close((uv_handle_t *)&conn->poll->handle, poll_closed_cb);
	conn->poll = NULL;
}

/* Watches libpq's socket for events. During connect libpq may switch sockets (several
 * addresses), so the caller passes renew to start from a fresh handle. Returns 0 or < 0. */
static int watch(struct pg_conn *conn, int events, bool renew)
{
	if (renew)
		unwatch(conn);
	if (!conn->poll) {
		struct pg_poll *p = calloc(1, sizeof(*p));
		if (!p)
			return -ENOMEM;
		int rc = uv_poll_init(conn->loop, &p->handle, PQsocket(conn->pg));
		if (rc < 0) {
			free(p);
			return rc;
		}
		p->handle.data = p;
		p->conn = conn;
		conn->poll = p;
	}
	return uv_poll_start(&conn->poll->handle, events, poll_cb);
}

static void request_free(struct request *req)
{
	if (req->result)
		PQclear(req->result);
	free(req->sql);
	free(req->values);
	free(req);
}

static void complete(struct pg_conn *conn, struct request *req, int status)
{
	conn->stats.queries++;
	/* A transport error carries no result, even when a FATAL message came before the end. */
	req->cb(conn, status, status < 0 && status != DSP_EPG ? NULL : req->result, req->data);
	request_free(req);
}

static void notice_cb(void *arg, const char *message)
{
	(void)arg;
	log_debug(LOG_PG, "server notice: %.*s", (int)strcspn(message, "\n"), message);
}

void pg_route_notices(PGconn *pg)
{
	PQsetNoticeProcessor(pg, notice_cb, NULL);
}

static void reconnect_cb(uv_timer_t *t)
{
	start_connect(t->data);
}

static void schedule_reconnect(struct pg_conn *conn)
{
	uint64_t delay = backoff_next(&conn->backoff, backoff_random(&conn->rng));

	if (conn->state == ST_CLOSED)
		return;
	conn->state = ST_DOWN;
	uv_timer_start(&conn->retry_timer, reconnect_cb, delay, 0);
}

/* Tears the connection down and fails what was waiting on it: the request in flight with
 * inflight_status, the queued ones with -ENOTCONN. The state is down before any callback runs,
 * so a callback that sends again is refused at once. */
static void lost_with(struct pg_conn *conn, const char *why, int inflight_status)
{
	bool was_up = conn->state == ST_UP;
	struct request *inflight = conn->inflight;
	struct request *queue = conn->head;

	conn->inflight = NULL;
	conn->head = conn->tail = NULL;
	conn->queued = 0;
	uv_timer_stop(&conn->query_timer);
	unwatch(conn);
	if (conn->pg) {
		PQfinish(conn->pg);
		conn->pg = NULL;
	}
	if (was_up) {
		conn->stats.disconnects++;
		log_warn(LOG_PG, "connection lost: %s", why);
	} else if ((conn->backoff.attempt & (conn->backoff.attempt - 1)) == 0) {
		/* Never up: say so at the 1st, 2nd, 4th, 8th... failed attempt, so a wrong
		 * DATABASE_URL is visible without flooding the log. */
		log_warn(LOG_PG, "cannot connect (attempt %u): %s", conn->backoff.attempt + 1, why);
	}
	schedule_reconnect(conn);
	if (inflight)
		complete(conn, inflight, inflight_status);
	while (queue) {
		struct request *next = queue->next;
		complete(conn, queue, -ENOTCONN);
		queue = next;
	}
	if (was_up && conn->state != ST_CLOSED && conn->opts.state_cb)
		conn->opts.state_cb(conn, false, conn->opts.data);
}

static void lost(struct pg_conn *conn, const char *why)
{
	lost_with(conn, why, -ECONNRESET);
}

static void lost_pq(struct pg_conn *conn)
{
	char why[256];
	const char *msg = conn->pg ? PQerrorMessage(conn->pg) : "";
	size_t n = strcspn(msg, "\n");

	snprintf(why, sizeof(why), "%.*s", (int)n, *msg ? msg : "connection closed");
	lost(conn, why);
}

static void become_up(struct pg_conn *conn)
{
	conn->state = ST_UP;
	conn->stats.connects++;
	uv_timer_stop(&conn->retry_timer);
	backoff_reset(&conn->backoff);
	log_info(LOG_PG, "connected (%d statements prepared)", conn->nstmts);
	if (conn->opts.state_cb)
		conn->opts.state_cb(conn, true, conn->opts.data);
	pump(conn);
}

static void deferred_lost_cb(uv_timer_t *t)
{
	struct pg_conn *conn = t->data;

	if (conn->state == ST_UP || conn->state == ST_PREPARING)
		lost_pq(conn);
}

/* After a send: flush what libpq buffered and watch for the answer (and for writability while
 * the send is not all out). A failure tears the connection down from the next loop turn, never
 * from inside the caller (pg_conn_exec() must not run callbacks before it returns). */
static void flush_and_watch(struct pg_conn *conn)
{
	int r = PQflush(conn->pg);

	if (r < 0 || watch(conn, UV_READABLE | (r == 1 ? UV_WRITABLE : 0), false) < 0)
		uv_timer_start(&conn->retry_timer, deferred_lost_cb, 0, 0);
}

static void prepare_next(struct pg_conn *conn)
{
	if (conn->preparing >= conn->nstmts) {
		become_up(conn);
		return;
	}
	const struct statement *s = &conn->stmts[conn->preparing];
	if (!PQsendPrepare(conn->pg, s->name, s->sql, s->nparams, NULL)) {
		lost_pq(conn);
		return;
	}
	flush_and_watch(conn);
}

static void connected(struct pg_conn *conn)
{
	if (PQsetnonblocking(conn->pg, 1) != 0) {
		lost_pq(conn);
		return;
	}
	conn->state = ST_PREPARING;
	conn->preparing = 0;
	prepare_next(conn);
}

static void continue_connect(struct pg_conn *conn)
{
	switch (PQconnectPoll(conn->pg)) {
	case PGRES_POLLING_READING:
		if (watch(conn, UV_READABLE, true) < 0)
			lost_pq(conn);
		break;
	case PGRES_POLLING_WRITING:
		if (watch(conn, UV_WRITABLE, true) < 0)
			lost_pq(conn);
		break;
	case PGRES_POLLING_OK:
		connected(conn);
		break;
	default:
		lost_pq(conn);
		break;
	}
}

static void connect_deadline_cb(uv_timer_t *t)
{
	struct pg_conn *conn = t->data;

	if (conn->state == ST_CONNECTING || conn->state == ST_PREPARING)
		lost(conn, "connect timed out");
}

static void start_connect(struct pg_conn *conn)
{
	if (conn->state == ST_CLOSED)
		return;
	conn->pg = PQconnectStart(conn->conninfo);
	if (!conn->pg || PQstatus(conn->pg) == CONNECTION_BAD) {
		lost_pq(conn);
		return;
	}
	pg_route_notices(conn->pg);
	conn->state = ST_CONNECTING;
	uv_timer_start(&conn->retry_timer, connect_deadline_cb, conn->opts.connect_timeout_ms, 0);
	/* libpq: behave as if PQconnectPoll had returned PGRES_POLLING_WRITING. */
	if (watch(conn, UV_WRITABLE, true) < 0)
		lost_pq(conn);
}

/* A result (or the end of results) of the statement being prepared. */
static void prepared_result(struct pg_conn *conn, PGresult *res)
{
	if (res) {
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			log_error(LOG_PG, "preparing statement %s failed: %s",
				  conn->stmts[conn->preparing].name, PQresultErrorMessage(res));
			PQclear(res);
			lost(conn, "a statement could not be prepared");
			return;
		}
		PQclear(res);
		return;
	}
	conn->preparing++;
	prepare_next(conn);
}

/* A result (or the end of results) of the request in flight. */
static void request_result(struct pg_conn *conn, PGresult *res)
{
	struct request *req = conn->inflight;

	if (res) {
		if (!req->result)
			req->result = res;
		else
			PQclear(res);
		return;
	}
	conn->inflight = NULL;
	uv_timer_stop(&conn->query_timer);
	ExecStatusType st = req->result ? PQresultStatus(req->result) : PGRES_FATAL_ERROR;
	int status = (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) ? 0 : DSP_EPG;
	if (status < 0 && req->result)
		log_debug(LOG_PG, "statement failed: %s", PQresultErrorMessage(req->result));
	complete(conn, req, status);
	pump(conn);
}

/* Reads what the server sent and hands complete results on. */
static void handle_input(struct pg_conn *conn)
{
	if (!PQconsumeInput(conn->pg)) {
		lost_pq(conn);
		return;
	}
	while (conn->pg && !PQisBusy(conn->pg)) {
		enum state before = conn->state;
		if (before == ST_PREPARING) {
			prepared_result(conn, PQgetResult(conn->pg));
		} else if (before == ST_UP && conn->inflight) {
			request_result(conn, PQgetResult(conn->pg));
		} else {
			break;
		}
		if (conn->state != before || (before == ST_UP && !conn->inflight))
			break;
	}
	if (conn->pg && PQstatus(conn->pg) == CONNECTION_BAD)
		lost_pq(conn);
}

static void poll_cb(uv_poll_t *handle, int status, int events)
{
	struct pg_poll *p = handle->data;
	struct pg_conn *conn = p->conn;

	if (!conn)
		return;
	if (conn->state == ST_CONNECTING) {
		continue_connect(conn);
		return;
	}
	if (status < 0)
		events = UV_READABLE | UV_WRITABLE; /* let libpq find the error */
	if (events & UV_WRITABLE) {
		flush_and_watch(conn);
		if (conn->poll != p)
			return;
	}
	if (events & UV_READABLE)
		handle_input(conn);
}

static void query_deadline_cb(uv_timer_t *t)
{
	struct pg_conn *conn = t->data;
	struct request *req = conn->inflight;

	if (!req)
		return;
	conn->stats.timeouts++;
	log_warn(LOG_PG, "statement timed out after %llu ms; dropping the connection",
		 (unsigned long long)conn->opts.query_timeout_ms);
	lost_with(conn, "statement timed out", -ETIMEDOUT);
}

/* Hands req to libpq and makes it the request in flight. Returns 0; -EINVAL when libpq refused
 * it on a healthy connection (the request's own fault); -ECONNRESET when the connection is
 * broken (req is then not in flight). */
static int send_request(struct pg_conn *conn, struct request *req)
{
	int ok;

	if (req->stmt)
		ok = PQsendQueryPrepared(conn->pg, req->stmt->name, req->nparams,
					 (const char *const *)req->values, NULL, NULL, 0);
	else
		ok = PQsendQueryParams(conn->pg, req->sql, req->nparams, NULL,
				       (const char *const *)req->values, NULL, NULL, 0);
	if (!ok) {
		bool healthy = PQstatus(conn->pg) == CONNECTION_OK;
		log_debug(LOG_PG, "send refused: %s", PQerrorMessage(conn->pg));
		return healthy ? -EINVAL : -ECONNRESET;
	}
	conn->inflight = req;
	uv_timer_start(&conn->query_timer, query_deadline_cb, conn->opts.query_timeout_ms, 0);
	flush_and_watch(conn);
	return 0;
}

/* Sends the queued requests, one at a time, while the connection is up and idle. */
static void pump(struct pg_conn *conn)
{
	while (conn->state == ST_UP && !conn->inflight && conn->head) {
		struct request *req = conn->head;
		conn->head = req->next;
		if (!conn->head)
			conn->tail = NULL;
		conn->queued--;
		int rc = send_request(conn, req);
		if (rc == -ECONNRESET) {
			/* Never sent: back at the head, so it fails with the queue (-ENOTCONN). */
			req->next = conn->head;
			conn->head = req;
			if (!conn->tail)
				conn->tail = req;
			conn->queued++;
			lost_pq(conn);
			return;
		}
		if (rc < 0)
			complete(conn, req, rc);
	}
}

int pg_conn_new(uv_loop_t *loop, const struct pg_conn_options *opts, struct pg_conn **out)
{
	struct pg_conn *conn;

	if (!opts->conninfo || !opts->connect_timeout_ms || !opts->query_timeout_ms)
		return -EINVAL;
	conn = calloc(1, sizeof(*conn));
	if (!conn)
		return -ENOMEM;
	conn->conninfo = strdup(opts->conninfo);
	if (!conn->conninfo) {
		free(conn);
		return -ENOMEM;
	}
	conn->loop = loop;
	conn->opts = *opts;
	conn->opts.conninfo = conn->conninfo;
	if (!conn->opts.max_queue)
		conn->opts.max_queue = 10000;
	conn->rng = backoff_seed(uv_hrtime(), conn);
	backoff_init(&conn->backoff, opts->reconnect_min_ms, opts->reconnect_max_ms);
	uv_timer_init(loop, &conn->retry_timer);
	uv_timer_init(loop, &conn->query_timer);
	conn->retry_timer.data = conn->query_timer.data = conn;
	conn->open_handles = 2;
	*out = conn;
	return 0;
}

int pg_conn_prepare(struct pg_conn *conn, const char *name, const char *sql, int nparams)
{
	if (conn->state != ST_IDLE)
		return -EBUSY;
	struct statement *grown = realloc(conn->stmts, sizeof(*grown) * (size_t)(conn->nstmts + 1));
	if (!grown)
		return -ENOMEM;
	conn->stmts = grown;
	struct statement *s = &conn->stmts[conn->nstmts];
	s->name = strdup(name);
	s->sql = strdup(sql);
	s->nparams = nparams;
	if (!s->name || !s->sql) {
		free(s->name);
		free(s->sql);
		return -ENOMEM;
	}
	conn->nstmts++;
	return 0;
}

int pg_conn_start(struct pg_conn *conn)
{
	if (conn->state != ST_IDLE)
		return -EBUSY;
	start_connect(conn);
	return 0;
}

/* Copies values into one block: the pointer array followed by the strings. */
static int copy_values(struct request *req, int nparams, const char *const *values)
{
	size_t size = sizeof(char *) * (size_t)nparams;

	for (int i = 0; i < nparams; i++)
		size += values[i] ? strlen(values[i]) + 1 : 0;
	req->values = malloc(size ? size : 1);
	if (!req->values)
		return -ENOMEM;
	char *p = (char *)(req->values + nparams);
	for (int i = 0; i < nparams; i++) {
		if (!values[i]) {
			req->values[i] = NULL;
			continue;
		}
		size_t n = strlen(values[i]) + 1;
		memcpy(p, values[i], n);
		req->values[i] = p;
		p += n;
	}
	req->nparams = nparams;
	return 0;
}

static int enqueue(struct pg_conn *conn, const struct statement *stmt, const char *sql, int nparams,
		   const char *const *values, pg_result_cb cb, void *data)
{
	if (conn->state == ST_CLOSED)
		return -ESHUTDOWN;
	if (conn->state != ST_UP) {
		conn->stats.refused++;
		return -ENOTCONN;
	}
	if (nparams < 0 || nparams > 65535 || (nparams > 0 && !values) || (!stmt && !sql))
		return -EINVAL;
	if (conn->queued >= conn->opts.max_queue)
		return -EAGAIN;
	struct request *req = calloc(1, sizeof(*req));
	if (!req)
		return -ENOMEM;
	req->cb = cb;
	req->data = data;
	req->stmt = stmt;
	if ((sql && !(req->sql = strdup(sql))) || copy_values(req, nparams, values) < 0) {
		request_free(req);
		return -ENOMEM;
	}
	if (!conn->inflight && !conn->head) {
		/* Idle: send now. A refusal is returned; no callback is owed. */
		int rc = send_request(conn, req);
		if (rc < 0) {
			request_free(req);
			if (rc == -ECONNRESET)
				uv_timer_start(&conn->retry_timer, deferred_lost_cb, 0, 0);
		}
		return rc;
	}
	if (conn->tail)
		conn->tail->next = req;
	else
		conn->head = req;
	conn->tail = req;
	conn->queued++;
	return 0;
}

int pg_conn_exec(struct pg_conn *conn, const char *sql, int nparams, const char *const *values,
		 pg_result_cb cb, void *data)
{
	return enqueue(conn, NULL, sql, nparams, values, cb, data);
}

int pg_conn_exec_prepared(struct pg_conn *conn, const char *name, int nparams,
			  const char *const *values, pg_result_cb cb, void *data)
{
	for (int i = 0; i < conn->nstmts; i++) {
		if (strcmp(conn->stmts[i].name, name) == 0)
			return enqueue(conn, &conn->stmts[i], NULL, nparams, values, cb, data);
	}
	return -ENOENT;
}

bool pg_conn_is_up(const struct pg_conn *conn)
{
	return conn->state == ST_UP;
}

void pg_conn_get_stats(const struct pg_conn *conn, struct pg_conn_stats *out)
{
	*out = conn->stats;
}

static void handle_closed_cb(uv_handle_t *h)
{
	struct pg_conn *conn = h->data;

	if (--conn->open_handles > 0)
		return;
	if (conn->closed_cb)
		conn->closed_cb(conn->closed_data);
	for (int i = 0; i < conn->nstmts; i++) {
		free(conn->stmts[i].name);
		free(conn->stmts[i].sql);
	}
	free(conn->stmts);
	free(conn->conninfo);
	free(conn);
}

void pg_conn_close(struct pg_conn *conn, void (*closed_cb)(void *data), void *data)
{
	struct request *inflight = conn->inflight;
	struct request *queue = conn->head;

	conn->state = ST_CLOSED;
	conn->inflight = NULL;
	conn->head = conn->tail = NULL;
	conn->closed_cb = closed_cb;
	conn->closed_data = data;
	unwatch(conn);
	if (conn->pg) {
		PQfinish(conn->pg);
		conn->pg = NULL;
	}
	uv_close((uv_handle_t *)&conn->retry_timer, handle_closed_cb);
	uv_close((uv_handle_t *)&conn->query_timer, handle_closed_cb);
	if (inflight)
		complete(conn, inflight, -ECANCELED);
	while (queue) {
		struct request *next = queue->next;
		complete(conn, queue, -ECANCELED);
		queue = next;
	}
}
