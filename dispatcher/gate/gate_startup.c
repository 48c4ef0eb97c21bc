/* The gate's start-up checks (SPEC §7): Redis evicts nothing, and the schema is current. Both
 * block: they run before the worker's loop serves anything. */
#include "gate.h"

#include "error.h"
#include "log.h"
#include "migrate.h"
#include "pg_conn.h"

#include <libpq-fe.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

/* One Redis handshake on a private loop, by the Redis layer itself (its built-in
 * maxmemory-policy hook runs on every command connection). */
struct probe {
	int status; /* 1 while waiting */
	char *msg;
	size_t size;
	struct redis_conn *conn;
	uv_timer_t timer;
};

static void probe_event_cb(struct redis_conn *conn, const struct redis_conn_event *ev, void *data)
{
	struct probe *p = data;

	if (p->status != 1)
		return;
	if (ev->type == REDIS_CONN_UP) {
		p->status = 0;
	} else if (ev->type == REDIS_CONN_REFUSED) {
		p->status = ev->status ? ev->status : DSP_ECONFIG;
		snprintf(p->msg, p->size, "%s", ev->message ? ev->message : "Redis refused");
	} else {
		return;
	}
	uv_timer_stop(&p->timer);
}

static void probe_timeout_cb(uv_timer_t *t)
{
	struct probe *p = t->data;

	if (p->status == 1)
		p->status = -ETIMEDOUT;
}

static int check_redis(const struct gate_startup_options *o, char *msg, size_t size)
{
	struct probe p = { .status = 1, .msg = msg, .size = size };
	struct redis_conn_options ro = {
		.url = o->redis_url,
		.name = "gate-startup",
		.connect_timeout_ms = o->connect_timeout_ms,
		.command_timeout_ms = o->connect_timeout_ms,
		.reconnect_min_ms = 100,
		.reconnect_max_ms = 1000,
		.event_cb = probe_event_cb,
		.data = &p,
	};
	uv_loop_t loop;
	int rc;

	if (uv_loop_init(&loop))
		return -ENOMEM;
	rc = redis_conn_new(&loop, &ro, &p.conn);
	if (rc == 0) {
		uv_timer_init(&loop, &p.timer);
		p.timer.data = &p;
		uv_timer_start(&p.timer, probe_timeout_cb, o->connect_timeout_ms, 0);
		rc = redis_conn_start(p.conn);
		while (rc == 0 && p.status == 1 && uv_run(&loop, UV_RUN_ONCE))
			;
		rc = rc ? rc : p.status;
		redis_conn_close(p.conn, NULL, NULL);
		uv_close((uv_handle_t *)&p.timer, NULL);
		uv_run(&loop, UV_RUN_DEFAULT);
	}
	uv_loop_close(&loop);
	if (rc == -ETIMEDOUT)
		snprintf(msg, size,
			 "Redis at REDIS_URL did not complete a handshake within %llu ms; check "
			 "that "
			 "it runs and is reachable",
			 (unsigned long long)o->connect_timeout_ms);
	else if (rc && !msg[0])
		snprintf(msg, size, "REDIS_URL: %s", dsp_strerror(rc));
	return rc;
}

static int check_schema(const char *url, uint64_t timeout_ms, char *msg, size_t size)
{
	struct migrate_report r;
	PGconn *conn;
	char why[256];
	int rc;

	/* Bounded: a server that accepts and never answers would otherwise hold `run` for ever. */
	if (pg_connect_blocking(url, timeout_ms, &conn, why, sizeof(why)) < 0) {
		snprintf(msg, size,
			 "cannot connect to DATABASE_URL: %s "
			 "(DISPATCHER_PG_CONNECT_TIMEOUT_MS=%llu)",
			 why, (unsigned long long)timeout_ms);
		return DSP_EPG;
	}
	pg_route_notices(conn);
	rc = migrate_status(conn, &r);
	PQfinish(conn);
	if (rc) {
		snprintf(msg, size, "cannot read the schema version: %s", dsp_strerror(rc));
		return rc;
	}
	if (r.applied < r.known) {
		snprintf(msg, size,
			 "the database schema is not current: %d of %d migrations applied; run "
			 "`dispatcher migrate` (DATABASE_URL) before starting the worker",
			 r.applied, r.known);
		return DSP_ESCHEMA;
	}
	if (r.foreign)
		log_warn(LOG_GATE, "the database has %d migrations newer than this build",
			 r.foreign);
	return 0;
}

int gate_startup_check(const struct gate_startup_options *o, char *msg, size_t size)
{
	int rc;

	if (!o || !o->redis_url || !msg || !size || !o->connect_timeout_ms)
		return -EINVAL;
	msg[0] = '\0';
	if (o->database_url) {
		rc = check_schema(o->database_url,
				  o->pg_connect_timeout_ms ? o->pg_connect_timeout_ms
							   : o->connect_timeout_ms,
				  msg, size);
		if (rc)
			goto fail;
	}
	rc = check_redis(o, msg, size);
	if (rc)
		goto fail;
	return 0;
fail:
	log_error(LOG_GATE, "start-up check refused: %s", msg);
	return rc;
}
