/* The worker process (`dispatcher run`, SPEC §1, R8; issue 9 item 1): one libuv loop that holds
 * the connections (a PostgreSQL pool, a Redis command connection for the gate, a Redis
 * subscriber for the hand-off), the gate and everything around it (gate_flow, gate_mode,
 * handoff, refresher, reconciler, gate_pgmode), the claim/select/admit path, the dialer and the
 * HTTP server (/healthz, /readyz, POST /provider/events).
 *
 * Start: gate_startup_check() (Redis evicts nothing, schema current), then the connections.
 * /readyz answers 200 while PostgreSQL is up and the gate mode is usable, 503 otherwise.
 * The listening socket is created with SO_REUSEPORT (http_server_config.reuseport), so every
 * worker of a host shares the one public URL the provider calls back.
 *
 * SIGTERM drain (R8): stop claiming, withdraw the waiters, hand every claimed contact back
 * (pending, nothing charged), let the admissions and provider requests in flight finish, close
 * the HTTP server (idle connections at once), then close everything and exit 0 — within
 * drain_ms; past it, or at a second SIGTERM or SIGINT, the process exits at once (exit 1):
 * leases bring back whatever was left claimed.
 */
#ifndef DSP_WORKER_H
#define DSP_WORKER_H

#include "dial.h"
#include "http_server.h"

#include <stdint.h>
#include <uv.h>

struct worker;

/* The events endpoint's handler (POST /provider/events): the registration point of the events
 * module (events.h). Until one is registered the route answers 503. */
typedef void (*worker_events_handler)(struct worker *w, struct http_request *req, void *data);
/* The dial results the worker does not settle itself (refused, invalid, stopped, drained): the
 * registration point of call_end (call_end.h). Until one is registered they are logged. */
typedef void (*worker_dial_hook)(struct worker *w, const struct dial_result *r, void *data);

struct worker_options {
	const char *database_url, *redis_url;
	const char *listen;	  /* host:port */
	const char *worker_id;	  /* ^[A-Za-z0-9_-]{1,64}$ */
	const char *provider_url; /* POST <provider_url>/calls */
	const char *provider_token;
	const char *public_url; /* callback_url = <public_url>/provider/events */
	uint64_t slot_wait_ms, lease_ms, drain_ms, provider_timeout_ms, lane_probe_ms;
	uint32_t claim_page;
	uint64_t refresh_period_ms, floors_ttl_ms, reconcile_ms;
	uint64_t pg_connect_timeout_ms, pg_query_timeout_ms;
	uint64_t redis_connect_timeout_ms, redis_command_timeout_ms;
	uint64_t reconnect_min_ms, reconnect_max_ms;
	unsigned http_max_connections;
	unsigned pg_pool_size; /* 0: 4 */
};

/* Builds the worker on loop (borrowed). Nothing connects until worker_start(). Returns 0,
 * -EINVAL, -ENOMEM, or a code naming what could not be created (logged). */
int worker_new(uv_loop_t *loop, const struct worker_options *o, struct worker **out);

/* Registration points for the events module and call_end (before worker_start()). */
void worker_set_events_handler(struct worker *w, worker_events_handler h, void *data);
void worker_set_dial_hook(struct worker *w, worker_dial_hook h, void *data);

/* Starts the connections, the jobs, the HTTP server and the signal handlers. Returns 0 or a
 * negative code (the listen address taken...). */
int worker_start(struct worker *w);

/* Borrowed pieces, for the events module and call_end. */
struct pg_pool *worker_pool(struct worker *w);
struct gate *worker_gate(struct worker *w);
struct gate_pg *worker_gate_pg(struct worker *w);
struct gate_mode_ctl *worker_gate_mode(struct worker *w);

/* Starts the drain (as SIGTERM does). */
void worker_drain(struct worker *w);

/* The process's exit code once the loop has stopped: 0 after a completed drain. */
int worker_exit_code(const struct worker *w);

/* `dispatcher run`: runs a worker on the default loop until it has drained. Returns the exit
 * code. */
int worker_run(const struct worker_options *o);

void worker_free(struct worker *w);

#endif
