/* One PostgreSQL connection: its lifecycle (connect, set-up, up, down, reconnect, close).
 * Requests and results live in pg_pipe.c. */
#include "pg_conn_int.h"

#include "error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void start_connect(struct pg_conn *conn);
static void poll_cb(uv_poll_t *handle, int status, int events);

/* --- statement sets --- */

int pg_stmts_new(struct pg_stmts **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

int pg_stmts_add(struct pg_stmts *set, const char *sql, int nparams, const struct pg_stmt **out)
{
	if (!sql || nparams < 0 || nparams > 65535 || conn_sql_is_copy(sql) ||
	    conn_sql_is_txn_control(sql))
		return -EINVAL;
	if (set->frozen)
		return -EBUSY;
	struct pg_stmt **grown = realloc(set->v, sizeof(*grown) * (size_t)(set->n + 1));
	if (!grown)
		return -ENOMEM;
	set->v = grown;
	struct pg_stmt *s = calloc(1, sizeof(*s));
	if (!s || !(s->sql = strdup(sql))) {
		free(s);
		return -ENOMEM;
	}
	s->set = set;
	s->nparams = nparams;
	snprintf(s->name, sizeof(s->name), "dsp_%d", set->n + 1);
	set->v[set->n++] = s;
	*out = s;
	return 0;
}

void pg_stmts_free(struct pg_stmts *set)
{
	if (!set)
		return;
	for (int i = 0; i < set->n; i++) {
		free(set->v[i]->sql);
		free(set->v[i]);
	}
	free(set->v);
	free(set);
}

/* --- the socket --- */

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
	if (conn->poll->events == events)
		return 0;
	int rc = uv_poll_start(&conn->poll->handle, events, poll_cb);
	conn->poll->events = rc < 0 ? 0 : events;
	return rc;
}

int conn_watch(struct pg_conn *conn, int events)
{
	/* Once a send failed the descriptor may be closed: nothing watches it again. */
	return conn->io_failed ? -EPIPE : watch(conn, events, false);
}

void conn_io_failed(struct pg_conn *conn)
{
	conn->io_failed = true;
	unwatch(conn);
	pipe_schedule(conn);
}

static void notice_cb(void *arg, const char *message)
{
	const struct pg_conn *conn = arg;
	int n = (int)strcspn(message, "\n");

	if (conn)
		PG_LOG(conn, LOG_DEBUG, "server notice: %.*s", n, message);
	else
		log_debug(LOG_PG, "server notice: %.*s", n, message);
}

void pg_route_notices(PGconn *pg)
{
	PQsetNoticeProcessor(pg, notice_cb, NULL);
}

/* --- down, reconnect --- */

static void reconnect_cb(uv_timer_t *t)
{
	start_connect(t->data);
}

static void schedule_reconnect(struct pg_conn *conn)
{
	uint64_t delay = backoff_next(&conn->backoff, backoff_random(&conn->rng));

	conn->state = ST_DOWN;
	uv_timer_start(&conn->retry_timer, reconnect_cb, delay, 0);
}

static void teardown(struct pg_conn *conn)
{
	hosts_abandon(conn->hosts);
	unwatch(conn);
	if (conn->pg) {
		PQfinish(conn->pg);
		conn->pg = NULL;
	}
	uv_timer_stop(&conn->deadline_timer);
	conn->deadline_due = 0;
	conn->excl = NULL;
	conn->io_failed = false;
}

/* Tears the connection down and fails what was waiting on it (pg_pipe.c says how). The state is
 * down before any callback runs, so a callback that sends again is refused at once. */
void conn_lost(struct pg_conn *conn, const char *why)
{
	bool was_up = conn->state == ST_UP;

	if (conn->state == ST_CLOSED || conn->state == ST_DOWN)
		return;
	teardown(conn);
	if (was_up) {
		conn->stats.disconnects++;
		PG_LOG(conn, LOG_WARN, "connection lost: %s", why);
	} else if ((conn->backoff.attempt & (conn->backoff.attempt - 1)) == 0) {
		/* Never up: say so at the 1st, 2nd, 4th, 8th... failed attempt, so a wrong
		 * DATABASE_URL is visible without flooding the log. */
		PG_LOG(conn, LOG_WARN, "cannot connect (attempt %u): %s", conn->backoff.attempt + 1,
		       why);
	}
	schedule_reconnect(conn);
	pipe_fail_all(conn, -ECONNRESET, -ENOTCONN);
	if (was_up && conn->state != ST_CLOSED && conn->opts.state_cb)
		conn->opts.state_cb(conn, false, conn->opts.data);
}

void conn_lost_pq(struct pg_conn *conn)
{
	char why[256];
	const char *msg = conn->pg ? PQerrorMessage(conn->pg) : "";
	size_t n = strcspn(msg, "\n");

	snprintf(why, sizeof(why), "%.*s", (int)n, *msg ? msg : "connection closed");
	conn_lost(conn, why);
}

/* --- connect, set up, up --- */

static void become_up(struct pg_conn *conn)
{
	conn->state = ST_UP;
	conn->stats.connects++;
	uv_timer_stop(&conn->retry_timer);
	backoff_reset(&conn->backoff);
	PG_LOG(conn, LOG_INFO, "connected (%d statements prepared, %d channels listened to)",
	       conn->stmts->n, conn->nlistens);
	if (conn->opts.state_cb)
		conn->opts.state_cb(conn, true, conn->opts.data);
	pipe_schedule(conn);
}

static void became_ready(struct pg_conn *conn, int status)
{
	if (conn->state != ST_SETUP)
		return; /* the set-up request failed with the connection */
	if (status != 0) {
		PG_LOG(conn, LOG_ERROR, "preparing statements or listening failed");
		conn_lost(conn, "set-up failed");
		return;
	}
	become_up(conn);
}

static void setup_cb(int status, const struct pg_results *r, void *data)
{
	struct pg_conn *conn = data;

	if (status == DSP_EPG && conn->state == ST_SETUP)
		PG_LOG(conn, LOG_ERROR, "set-up statement %d failed: %s", r->failed,
		       PQresultErrorMessage(r->error));
	became_ready(conn, status);
}

/* The set-up request: every registered statement prepared, every channel listened to. */
static struct pg_req *setup_request(struct pg_conn *conn)
{
	int n = conn->stmts->n + conn->nlistens;
	struct pg_query *q = calloc((size_t)n, sizeof(*q));
	char(*listen)[80] = calloc((size_t)conn->nlistens + 1, sizeof(*listen));
	struct pg_req *req = NULL;

	if (!q || !listen)
		goto out;
	for (int i = 0; i < conn->stmts->n; i++)
		q[i].stmt = conn->stmts->v[i];
	for (int i = 0; i < conn->nlistens; i++) {
		snprintf(listen[i], sizeof(listen[i]), "LISTEN \"%s\"", conn->listens[i].channel);
		q[conn->stmts->n + i].sql = listen[i];
	}
	req = req_new(q, n);
	if (req) {
		for (int i = 0; i < conn->stmts->n; i++)
			req->q[i].op = Q_PREPARE;
		req->cb = setup_cb;
		req->data = conn;
	}
out:
	free(q);
	free(listen);
	return req;
}

static void connected(struct pg_conn *conn)
{
	if (PQsetnonblocking(conn->pg, 1) != 0 || !PQenterPipelineMode(conn->pg)) {
		conn_lost_pq(conn);
		return;
	}
	conn->state = ST_SETUP;
	if (conn->stmts->n + conn->nlistens == 0) {
		/* Readable from now on: notices, a terminated backend, answers. */
		if (conn_watch(conn, UV_READABLE) < 0)
			conn_lost(conn, "cannot watch the socket");
		else
			become_up(conn);
		return;
	}
	struct pg_req *req = setup_request(conn);
	if (!req) {
		conn_lost(conn, "out of memory");
		return;
	}
	pipe_send_setup(conn, req);
}

static void continue_connect(struct pg_conn *conn)
{
	switch (PQconnectPoll(conn->pg)) {
	case PGRES_POLLING_READING:
		if (watch(conn, UV_READABLE, true) < 0)
			conn_lost_pq(conn);
		break;
	case PGRES_POLLING_WRITING:
		if (watch(conn, UV_WRITABLE, true) < 0)
			conn_lost_pq(conn);
		break;
	case PGRES_POLLING_OK:
		connected(conn);
		break;
	default:
		conn_lost_pq(conn);
		break;
	}
}

static void connect_deadline_cb(uv_timer_t *t)
{
	struct pg_conn *conn = t->data;

	if (conn->state == ST_CONNECTING || conn->state == ST_SETUP)
		conn_lost(conn, "connect timed out");
}

void conn_connect(struct pg_conn *conn, const char *const *kw, const char *const *val)
{
	conn->pg = kw ? PQconnectStartParams(kw, val, 0) : PQconnectStart(conn->conninfo);
	if (!conn->pg || PQstatus(conn->pg) == CONNECTION_BAD) {
		conn_lost_pq(conn);
		return;
	}
	PQsetNoticeProcessor(conn->pg, notice_cb, conn);
	/* libpq: behave as if PQconnectPoll had returned PGRES_POLLING_WRITING. */
	if (watch(conn, UV_WRITABLE, true) < 0)
		conn_lost_pq(conn);
}

/* One attempt: the connect deadline covers the host lookups (off the loop,
 * pg_conn_hosts.c), the connect and the set-up. */
static void start_connect(struct pg_conn *conn)
{
	if (conn->state == ST_CLOSED)
		return;
	conn->state = ST_CONNECTING;
	uv_timer_start(&conn->retry_timer, connect_deadline_cb, conn->opts.connect_timeout_ms, 0);
	if (conn->hosts)
		hosts_begin(conn);
	else
		conn_connect(conn, NULL, NULL);
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
	if (status < 0) {
		/* libuv has stopped the handle (its POLLERR path): it must be started again, and
		 * libpq must find the error. */
		p->events = 0;
		events = UV_READABLE | UV_WRITABLE;
	}
	if (events & UV_WRITABLE) {
		pipe_writable(conn);
		if (conn->poll != p)
			return;
	}
	if (events & UV_READABLE)
		pipe_input(conn);
}

/* --- notifications --- */

void conn_dispatch_notifies(struct pg_conn *conn)
{
	PGnotify *n;

	while (conn->pg && (n = PQnotifies(conn->pg)) != NULL) {
		conn->stats.notifies++;
		for (int i = 0; i < conn->nlistens; i++) {
			const struct listen *l = &conn->listens[i];
			if (strcmp(l->channel, n->relname) == 0)
				l->cb(n->relname, n->extra, l->data);
		}
		PQfreemem(n);
	}
}

static bool channel_ok(const char *channel)
{
	size_t n = channel ? strlen(channel) : 0;

	if (n == 0 || n > 63 || (channel[0] >= '0' && channel[0] <= '9') || channel[0] == '$')
		return false;
	return strspn(channel,
		      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_$") == n;
}

/* --- the API --- */

int pg_conn_new(uv_loop_t *loop, const struct pg_conn_options *opts, struct pg_conn **out)
{
	struct pg_conn *conn;

	if (!opts->conninfo || !opts->connect_timeout_ms || !opts->query_timeout_ms)
		return -EINVAL;
	conn = calloc(1, sizeof(*conn));
	if (!conn)
		return -ENOMEM;
	conn->conninfo = strdup(opts->conninfo);
	if (!conn->conninfo || (!opts->stmts && pg_stmts_new(&conn->own_stmts) < 0)) {
		free(conn->conninfo);
		free(conn);
		return -ENOMEM;
	}
	conn->loop = loop;
	conn->opts = *opts;
	conn->opts.conninfo = conn->conninfo;
	if (hosts_new(conn) < 0) {
		pg_stmts_free(conn->own_stmts);
		free(conn->conninfo);
		free(conn);
		return -ENOMEM;
	}
	snprintf(conn->label, sizeof(conn->label), "pg[%s]", opts->name ? opts->name : "main");
	conn->opts.name = NULL; /* the label keeps it */
	conn->stmts = opts->stmts ? opts->stmts : conn->own_stmts;
	if (!conn->opts.max_queue)
		conn->opts.max_queue = 10000;
	if (!conn->opts.max_inflight)
		conn->opts.max_inflight = 1024;
	if (!conn->opts.queue_timeout_ms)
		conn->opts.queue_timeout_ms = opts->query_timeout_ms;
	list_init(&conn->waitq);
	list_init(&conn->holdq);
	list_init(&conn->inflight);
	list_init(&conn->txns);
	conn->rng = backoff_seed(uv_hrtime(), conn);
	backoff_init(&conn->backoff, opts->reconnect_min_ms, opts->reconnect_max_ms);
	uv_timer_init(loop, &conn->retry_timer);
	uv_timer_init(loop, &conn->deadline_timer);
	uv_idle_init(loop, &conn->flush);
	conn->retry_timer.data = conn->deadline_timer.data = conn->flush.data = conn;
	conn->open_handles = 3;
	*out = conn;
	return 0;
}

int pg_conn_prepare(struct pg_conn *conn, const char *sql, int nparams, const struct pg_stmt **out)
{
	if (conn->state != ST_IDLE)
		return -EBUSY;
	return pg_stmts_add(conn->stmts, sql, nparams, out);
}

int pg_conn_listen(struct pg_conn *conn, const char *channel, pg_notify_cb cb, void *data)
{
	if (conn->state != ST_IDLE)
		return -EBUSY;
	if (!channel_ok(channel) || !cb)
		return -EINVAL;
	struct listen *grown =
		realloc(conn->listens, sizeof(*grown) * (size_t)(conn->nlistens + 1));
	if (!grown)
		return -ENOMEM;
	conn->listens = grown;
	struct listen *l = &conn->listens[conn->nlistens++];
	snprintf(l->channel, sizeof(l->channel), "%s", channel);
	l->cb = cb;
	l->data = data;
	return 0;
}

int pg_conn_start(struct pg_conn *conn)
{
	if (conn->state != ST_IDLE)
		return -EBUSY;
	conn->stmts->frozen = true;
	start_connect(conn);
	return 0;
}

bool pg_conn_is_up(const struct pg_conn *conn)
{
	return conn->state == ST_UP;
}

unsigned pg_conn_pending(const struct pg_conn *conn)
{
	return conn->nwait + conn->nhold + conn->ninflight + (conn->holder ? 1 : 0);
}

bool pg_conn_is_claimed(const struct pg_conn *conn)
{
	return conn->claims > 0;
}

const char *pg_conn_label(const struct pg_conn *conn)
{
	return conn->label;
}

void pg_conn_get_stats(const struct pg_conn *conn, struct pg_conn_stats *out)
{
	*out = conn->stats;
	out->lookups = hosts_lookups(conn->hosts);
}

static void handle_closed_cb(uv_handle_t *h)
{
	struct pg_conn *conn = h->data;

	if (--conn->open_handles > 0)
		return;
	if (conn->closed_cb)
		conn->closed_cb(conn->closed_data);
	pg_stmts_free(conn->own_stmts);
	hosts_free(conn->hosts);
	free(conn->listens);
	free(conn->conninfo);
	free(conn);
}

void pg_conn_close(struct pg_conn *conn, void (*closed_cb)(void *data), void *data)
{
	conn->state = ST_CLOSED;
	conn->closed_cb = closed_cb;
	conn->closed_data = data;
	teardown(conn);
	uv_close((uv_handle_t *)&conn->retry_timer, handle_closed_cb);
	uv_close((uv_handle_t *)&conn->deadline_timer, handle_closed_cb);
	uv_close((uv_handle_t *)&conn->flush, handle_closed_cb);
	txn_conn_gone(conn, -ECANCELED);
	pipe_fail_all(conn, -ECANCELED, -ECANCELED);
}
