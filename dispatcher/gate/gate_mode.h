/* The gate mode controller (SPEC C11): what every worker runs to know which gate to call —
 * the Redis gate (gate_admit) or the PostgreSQL gate (gate_pgmode_admit) — and with which
 * epoch, and to switch the fleet to postgres mode when Redis fails it.
 *
 * It switches (gate_pg_switch_to_postgres(), compare-and-set on the epoch it saw, so a fleet
 * that notices together moves the epoch once) when, in redis mode:
 *   - the Redis connection goes down (gate_mode_redis_event(), REDIS_CONN_DOWN): a worker
 *     connected during the redis epoch sees every restart or failover of its server;
 *   - it comes up on a new server (new_server: a restart or a failover may have lost slot
 *     records, README.md "Generation") that is not exactly the one the rebuild of the current
 *     epoch committed: its {sys}:gen is not the committed generation (missing, another, a
 *     stale reconciler's), or its run_id is not the committed run_id (system_settings.
 *     gate_redis_run_id, migration 0012: a restart that reloaded a snapshot, or a replica
 *     promoted during the epoch, keeps the generation but may have lost the newest slot
 *     records). The controller is not usable meanwhile: it re-reads the mode with its
 *     committed generation and run_id, then {sys}:gen, and adopts without a switch only the
 *     server the way back rebuilt while this worker's connection was still down (it was down
 *     across the switch and the rebuild: without this the fleet would switch back at every
 *     restart);
 *   - the generation cannot be read while the connection is up, or its connection is not up
 *     after up_wait_ms in a redis epoch (a worker still in its reconnect backoff when the way
 *     back commits waits for its up instead of switching the fleet back);
 *   - the worker reports a gate operation that failed with a command deadline (-ETIMEDOUT), a
 *     lost connection (-ENOTCONN, -ECONNRESET) or GATE_ELOST (gate_mode_report()). For
 *     GATE_ELOST it first re-reads the system generation: if it is exactly the one the rebuild
 *     of the current epoch committed (system_settings.gate_generation) the worker only missed
 *     it, adopts it and does not switch; anything else — even "e<epoch>.…", e.g. a stale
 *     reconciler's writes after another one committed — is a lost state and switches.
 * It follows the mode: the NOTIFYs of the mode channel (gate_mode_notify()), and a re-read on
 * every PostgreSQL up (gate_mode_pg_up()) and after a failed switch (retry_ms). In redis mode it
 * is usable only once the gate's generation is the one committed for that epoch: entering redis
 * mode it reads the committed generation and run_id with the mode from PostgreSQL (a NOTIFY
 * carries neither, so it re-reads), then dsp:v1:{sys}:gen, and gives it to the gate
 * (gate_set_generation()) only when the two generations are equal and the server that answered
 * has the committed run_id (gate_server_run_id(); "" = NULL: a server that reports none);
 * otherwise it switches.
 *
 * The owner wires the events (one connection has one event callback and one pool one state
 * callback, so the owner forwards them). Everything is borrowed; the pool's LISTEN on
 * GATE_PG_CHANNEL_MODE is the owner's too (gate_pg_listen(), mode_cb → gate_mode_notify()).
 */
#ifndef DSP_GATE_MODE_H
#define DSP_GATE_MODE_H

#include "gate.h"
#include "gate_pg.h"

#include <uv.h>

#define GATE_MODE_UP_WAIT_MS 10000u /* default up_wait_ms: 5 s backoff cap + 2 s connect, doubled */

struct gate_mode_ctl;

struct gate_mode_state {
	enum gate_mode mode;
	uint64_t epoch; /* 0 until the first read */
	bool usable;	/* admit now in this mode at this epoch (redis: generation adopted) */
	bool switching; /* a switch to postgres mode is in flight */
};

/* Called after every change of the state (mode, epoch or usable). */
typedef void (*gate_mode_change_cb)(struct gate_mode_ctl *c, const struct gate_mode_state *s,
				    void *data);

struct gate_mode_options {
	uv_loop_t *loop;
	struct gate_pg *pg;	 /* borrowed */
	struct gate *gate;	 /* the worker's Redis gate, borrowed: its generation is set here */
	uint64_t switch_wait_ms; /* the switch's wait for the epoch lock (0: 2000) */
	uint64_t retry_ms;	 /* re-read / retry after a failure (0: 500) */
	/* How long a failed generation read waits for the connection's up when the connection
	 * is not up (the worker's start, or its reconnect backoff outlasting the outage) before
	 * it counts as Redis unreachable (0: GATE_MODE_UP_WAIT_MS; more than the connection's
	 * reconnect_max_ms + connect_timeout_ms). */
	uint64_t up_wait_ms;
	gate_mode_change_cb change_cb; /* may be NULL */
	void *data;
};

struct gate_mode_stats {
	uint64_t switches;	  /* switches this controller made (epoch + 1) */
	uint64_t triggers;	  /* failures that asked for a switch */
	uint64_t adopted;	  /* generations adopted without a switch */
	uint64_t foreign_servers; /* the committed generation refused on another server (run_id) */
	uint64_t reads;		  /* mode reads completed */
};

/* Creates the controller (nothing is sent until gate_mode_start()). *out is owned by the caller
 * (gate_mode_close()). Returns 0, -EINVAL or -ENOMEM. */
int gate_mode_new(const struct gate_mode_options *o, struct gate_mode_ctl **out);

/* Reads the mode (and, in redis mode, the generation). Returns 0 or -EBUSY. */
int gate_mode_start(struct gate_mode_ctl *c);

/* The current state (valid until the next event). */
void gate_mode_get(const struct gate_mode_ctl *c, struct gate_mode_state *out);

/* Events, forwarded by the owner. */
void gate_mode_redis_event(struct gate_mode_ctl *c, const struct redis_conn_event *ev);
void gate_mode_notify(struct gate_mode_ctl *c, const char *payload);
void gate_mode_pg_up(struct gate_mode_ctl *c);

/* The status of a Redis gate operation decided at epoch (the epoch of gate_mode_get() when the
 * operation was sent). Switches for the statuses above; others are ignored. */
void gate_mode_report(struct gate_mode_ctl *c, uint64_t epoch, int status);

void gate_mode_get_stats(const struct gate_mode_ctl *c, struct gate_mode_stats *out);

/* Frees c once its timer is closed and its requests are answered (close the pool and the Redis
 * connection too). No change_cb afterwards. */
void gate_mode_close(struct gate_mode_ctl *c);

#endif
