/* The worker process (`dispatcher run`, SPEC §1, R8; issue 9 item 1): one libuv loop that holds
 * the connections (a PostgreSQL pool, a Redis command connection for the gate, a Redis
 * subscriber for the hand-off), the gate and everything around it (gate_flow, gate_mode,
 * handoff, refresher, reconciler, gate_pgmode), the claim/select/admit path, the dialer, the end
 * of calls (one call_end per worker, fed by the events endpoint, the dialer's refusals and the
 * maximum-duration sweep), the periodic jobs (sweep.h) and the HTTP server (/healthz, /readyz,
 * POST /provider/events).
 *
 * Data flows one way: contact row -> claim -> gate -> dial -> event -> call_end -> release. The
 * release (gate_release() in redis mode, the NOTIFY in postgres mode) wakes this org's waiters
 * through the gate's hand-off; call_end never calls into select or the dialer.
 *
 * The dial results the dialer does not settle itself go to call_end (D2): refused (429, a
 * failed connect) -> RETRY_AT after the policy's delay, tries + 1; invalid (400/404/422) -> FAIL
 * with the provider's reason; lane stopped (401/403) and drained (never sent) -> PENDING,
 * nothing charged. Placed and unknown calls are ended by their events or the sweep.
 *
 * Start: gate_startup_check() (Redis evicts nothing, schema current), then the connections.
 * /readyz answers 200 while PostgreSQL is up and the gate mode is usable, 503 otherwise.
 * The listening socket is created with SO_REUSEPORT (http_server_config.reuseport), so every
 * worker of a host shares the one public URL the provider calls back.
 *
 * SIGTERM drain (R8): stop claiming and sweeping, withdraw the waiters, hand every claimed
 * contact back (pending, nothing charged), let the admissions and provider requests in flight
 * finish (calls never sent end through call_end), close the HTTP server (idle connections at
 * once), let the events and call ends in flight commit, then close everything and exit 0 —
 * within drain_ms; past it, or at a second SIGTERM or SIGINT, the process exits at once (exit
 * 1): leases bring back whatever was left claimed.
 */
#ifndef DSP_WORKER_H
#define DSP_WORKER_H

#include "dial.h"
#include "http_server.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct worker;

/* The events endpoint's handler (POST /provider/events). Default: the worker's own events module
 * (events.h); a test may put another one in its place. */
typedef void (*worker_events_handler)(struct worker *w, struct http_request *req, void *data);
/* The dial results the dialer does not settle itself (refused, invalid, stopped, drained).
 * Default: worker_dial_end() into the worker's call_end. */
typedef void (*worker_dial_hook)(struct worker *w, const struct dial_result *r, void *data);

/* --- the worker's own routes (issue 10 item 7) --- */
/* The routes the worker itself serves on the public listener, before the API's
 * (api_routes()): GET /healthz, GET /readyz, POST /provider/events. worker_start() mounts
 * exactly these, each with the struct worker as its data; tests/unit/test_openapi.c reads them
 * to check dispatcher/api/openapi.json, so a route added here must be described there. */
struct worker_route {
	const char *method;
	const char *pattern;
	size_t max_body;
	http_handler_cb handler;
};
extern const struct worker_route worker_routes[];
extern const size_t worker_routes_n;
/* --- end the worker's own routes --- */

/* DISPATCHER_ROLE, in the order of its choices. */
enum worker_role {
	WORKER_ROLE_ALL = 0,	/* the API and batch dispatch */
	WORKER_ROLE_API = 1,	/* the API only: no claim loop */
	WORKER_ROLE_WORKER = 2, /* batch dispatch only: no API routes */
};

struct worker_options {
	const char *database_url, *redis_url;
	const char *listen;	  /* host:port */
	const char *worker_id;	  /* ^[A-Za-z0-9_-]{1,64}$ */
	const char *provider_url; /* POST <provider_url>/calls */
	const char *provider_token;
	const char *public_url;	    /* callback_url = <public_url>/provider/events */
	const char *webhook_secret; /* PROVIDER_WEBHOOK_SECRET: the events' signatures */
	uint64_t slot_wait_ms, lease_ms, drain_ms, provider_timeout_ms, lane_probe_ms;
	uint32_t claim_page;
	uint32_t lane_rate_per_s, lane_burst; /* fleet-wide pacing per lane (0: unpaced) */
	uint64_t refresh_period_ms, floors_ttl_ms, reconcile_ms;
	uint64_t pg_connect_timeout_ms, pg_query_timeout_ms;
	uint64_t redis_connect_timeout_ms, redis_command_timeout_ms;
	uint64_t reconnect_min_ms, reconnect_max_ms;
	unsigned http_max_connections;
	uint64_t http_body_timeout_ms; /* 0: the HTTP server's default (30000) */
	uint64_t http_body_min_rate;   /* bytes/s; 0: the HTTP server's default (16384) */
	enum worker_role role;
	unsigned pg_pool_size; /* 0: 4 */
	/* The periodic jobs (sweep.h); 0 means the sweep's default. */
	uint64_t lease_sweep_s;	     /* lease sweeper period [5] */
	uint64_t call_sweep_s;	     /* maximum-duration sweep period [30] */
	uint64_t max_call_s;	     /* maximum call duration [7200] */
	uint64_t retention_days;     /* [30] */
	uint64_t retention_period_s; /* retention pass period [3600] */
	/* The operator listener (operator.h, wmetrics.h; issue 10 items 7-8). */
	const char *operator_listen; /* host:port of /metrics, /healthz; NULL: none */
	const char *admin_token;     /* NULL: the operator routes need no token */
};

/* Builds the worker on loop (borrowed). Nothing connects until worker_start(). Returns 0,
 * -EINVAL, -ENOMEM, or a code naming what could not be created (logged). */
int worker_new(uv_loop_t *loop, const struct worker_options *o, struct worker **out);

/* Replace the default handlers (before worker_start()). */
void worker_set_events_handler(struct worker *w, worker_events_handler h, void *data);
void worker_set_dial_hook(struct worker *w, worker_dial_hook h, void *data);

/* Starts the connections, the jobs, the HTTP server and the signal handlers. Returns 0 or a
 * negative code (the listen address taken...). */
int worker_start(struct worker *w);

/* Borrowed pieces (tests, the demo). */
struct pg_pool *worker_pool(struct worker *w);
struct gate *worker_gate(struct worker *w);
struct gate_pg *worker_gate_pg(struct worker *w);
struct gate_mode_ctl *worker_gate_mode(struct worker *w);
struct call_end *worker_call_end(struct worker *w);
/* issue10-direct: the direct dials of POST /v2/calls (direct.h); NULL once the worker closes. */
struct direct;
struct direct *worker_direct(struct worker *w);

/* Borrowed pieces for the metrics (wmetrics.c): NULL once closed (the drain's end). */
struct select *worker_select(struct worker *w);
struct dial *worker_dial(struct worker *w);
struct reconciler *worker_reconciler(struct worker *w);
uv_loop_t *worker_loop(struct worker *w);
/* The worker's metrics: the API layer counts its rate-limit refusals with
 * wmetrics_ratelimit_refused(worker_metrics(w), bucket). */
struct wmetrics *worker_metrics(struct worker *w);
/* --- issue10-f1: the API (its counters in /metrics); NULL for role worker --- */
struct api;
struct api *worker_api(struct worker *w);
/* --- end issue10-f1 --- */
/* The operator listener's bound port, -1 when it is off or could not bind. */
int worker_operator_port(const struct worker *w);

/* Maps a dial result the dialer does not settle (REFUSED, INVALID, STOPPED, DRAINED) onto the
 * call_end request that ends its call (D2). reason (size >= 64) receives outcome_reason. Returns
 * 0, or -EINVAL for a disposition that is not ended here (PLACED, UNKNOWN). Pure: for tests. */
struct call_end_req;
int worker_dial_end(const struct dial_result *r, struct call_end_req *out, char *reason,
		    size_t size);

/* The retry of a refused dial's end whose call_end submission failed with status: the delay in
 * milliseconds before re-sending it (attempt: re-sends made so far; backoff_doubled from min_ms
 * up to max_ms, DISPATCHER_RECONNECT_MIN_MS/MAX_MS), or 0 to give up — status 0, -ECANCELED
 * (call_end closing) or the worker draining (the maximum-duration sweep ends the call). The
 * re-send is safe: ending a call is idempotent. Pure: for tests. */
uint64_t worker_dial_end_retry(int status, bool draining, unsigned attempt, uint64_t min_ms,
			       uint64_t max_ms);

/* Starts the drain (as SIGTERM does). */
void worker_drain(struct worker *w);

/* The process's exit code once the loop has stopped: 0 after a completed drain. */
int worker_exit_code(const struct worker *w);

/* `dispatcher run`: runs a worker on the default loop until it has drained. Returns the exit
 * code. */
int worker_run(const struct worker_options *o);

void worker_free(struct worker *w);

#endif
