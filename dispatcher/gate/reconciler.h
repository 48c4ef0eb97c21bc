/* The reconciler job (SPEC C11): the way back from postgres mode to redis mode, and the periodic
 * correction of the Redis slot records against PostgreSQL's live calls in redis mode.
 *
 * One reconciler works at a time, elected by the leases row 'reconciler' (compare-and-set on
 * PostgreSQL's clock; the lease's version is the fencing version gate_pg_rebuild_begin()
 * checks). Each run (every period_ms, default 5 s, at most 10 s; the first at start):
 *
 *  - postgres mode, or a redis epoch with no generation recorded (gate_pg_rebuild_allowed():
 *    a fresh install, built at once instead of after a switch), Redis connection up: the
 *    rebuild. It reads the limits and the last floors
 *    (system_settings, organisations, campaigns, fair_share_installs/_floors), then
 *    gate_pg_rebuild_begin() (the epoch lock exclusively: the fleet's writes and admissions
 *    wait), draws a generation G = reconcile_generation(epoch + 1, random), runs
 *    gate_system_init() under G, then per organisation gate_org_rebuild() from its live calls,
 *    gate_install_limits() and gate_install_floors() (the last floors, when unexpired), all
 *    pipelined on one connection, and commits with gate_pg_rebuild_finish() (mode redis,
 *    epoch + 1, G and the run_id of the server rebuilt: the connection's run_id when TIME
 *    answered, which must still be its run_id when the last step answered, or the rebuild
 *    rolls back, stats.server_changed). Any failure rolls back: the fleet stays in postgres
 *    mode and the next run tries again.
 *  - redis mode: first {sys}:gen, which must be exactly the generation committed for the
 *    current epoch (system_settings.gate_generation, read with the mode), on the server whose
 *    run_id was committed with it (gate_redis_run_id): otherwise nothing is built or corrected
 *    and the fleet switches to postgres mode (GATE_ELOST, stats.foreign_gen or foreign_server,
 *    and lost). Then per organisation, the three reads of core/reconcile.h (live calls, slot
 *    records with Redis time, the rows of every id seen), reconcile_plan(), and its actions:
 *    RELEASE → gate_release(); FENCE → gate_pg_fence() and gate_release() of those fenced;
 *    ADD → gate_slot_add() (the live call's slot put back, no limit check: the call exists).
 *    A GATE_ELOST answer switches the fleet to postgres mode (gate_pg_switch_to_postgres() at the epoch read),
 *    except for an org never built in Redis (no live call, no :gen, no :slots: created after
 *    the last rebuild), which is built empty under the committed generation and given its
 *    limits.
 *
 * The way back does not wait for the period. A run that finds it to make (as the holder) and
 * does not commit it — Redis not up yet, the rebuild failed or met a concurrent switch — is
 * followed by the next after backoff_doubled(RECONCILER_RETRY_MS, n, period_ms) (n the runs in a
 * row that did so). And a run starts at once (reconciler_kick()) when the mode channel says
 * postgres (it LISTENs GATE_PG_CHANNEL_MODE on the pool) and on every connect of the Redis
 * connection (an on-connect hook), so a fleet on a fresh or restarted Redis is back in redis
 * mode within a few round trips of Redis being reachable (README.md, "Reconciler and mode
 * controller").
 *
 * Connections (all borrowed; they must outlive the reconciler): a pool on which
 * reconciler_new() prepares its statements (so before pg_pool_start()), the gate_pg on that
 * pool, and a Redis connection whose registry holds gate_scripts_register() and
 * gate_recon_scripts_register(). The reconciler makes its own struct gate on that connection
 * (its generation is its own, so the worker's gate never runs under a G being built).
 */
#ifndef DSP_GATE_RECONCILER_H
#define DSP_GATE_RECONCILER_H

#include "gate.h"
#include "gate_pg.h"

#include <uv.h>

#define RECONCILER_PERIOD_MS	   5000u  /* default period */
#define RECONCILER_PERIOD_MAX_MS   10000u /* SPEC C11: at most 10 s */
#define RECONCILER_MARGIN_MS	   1000u  /* default margin over the write deadline */
#define RECONCILER_REBUILD_TIMEOUT 10000u /* default bound of the way back (the fleet waits) */
#define RECONCILER_RETRY_MS	   100u	  /* first retry of a way back not committed */

struct reconciler;

struct reconciler_options {
	uv_loop_t *loop;
	struct pg_pool *pool;		 /* borrowed; not started yet */
	struct gate_pg *pg;		 /* borrowed, on pool */
	struct redis_conn *conn;	 /* borrowed */
	const struct redis_scripts *reg; /* borrowed: conn's registry */
	const char *owner;		 /* lease owner id, copied (1..64 bytes) */
	uint64_t period_ms;		 /* 0: RECONCILER_PERIOD_MS; 1..RECONCILER_PERIOD_MAX_MS */
	uint64_t write_deadline_ms;	 /* the fleet's call-row write deadline (0: 2000) */
	uint64_t margin_ms;		 /* orphan age = deadline + margin (0: 1000) */
	uint64_t rebuild_timeout_ms;	 /* 0: RECONCILER_REBUILD_TIMEOUT */
};

/* Counters since reconciler_new() (/metrics reads them). Corrections are released + fenced +
 * missing (of which added were put back). */
struct reconciler_stats {
	uint64_t runs;		   /* runs that held the lease */
	uint64_t not_leader;	   /* runs that found the lease held by another owner */
	uint64_t failures;	   /* runs ended by an error (logged) */
	uint64_t rebuilds;	   /* ways back committed (mode redis) */
	uint64_t rebuild_failures; /* ways back rolled back or refused */
	uint64_t passes;	   /* periodic passes completed over every org */
	uint64_t released;	   /* RELEASE: slots of ended rows released */
	uint64_t fenced;	   /* FENCE: orphans fenced and released */
	uint64_t fence_found;	   /* FENCE: the fence found the row written: slot kept */
	uint64_t missing;	   /* ADD: live rows without a slot record seen */
	uint64_t added;		   /* ADD: their slots put back (gate_slot_add) */
	uint64_t young;		   /* YOUNG: records without a row kept (write may be in flight) */
	uint64_t lost;		   /* GATE_ELOST seen: the fleet switched to postgres mode */
	uint64_t created;	   /* orgs never built in Redis (no state, no live call) built */
	uint64_t foreign_gen;	   /* passes stopped: {sys}:gen not the one committed for the epoch
			       * (counted in lost too: the fleet switched) */
	uint64_t foreign_server;   /* passes stopped: the server's run_id not the one committed
				  * for the epoch (counted in lost too) */
	uint64_t server_changed;   /* ways back rolled back: the connection's server changed
				  * during the rebuild */
};

/* status 0: the run completed (whatever it found); otherwise why it stopped. */
typedef void (*reconciler_done_cb)(struct reconciler *r, int status, void *data);

/* Creates the reconciler, prepares its statements and LISTENs GATE_PG_CHANNEL_MODE on
 * opts->pool, and adds an on-connect hook to opts->conn (so both before they start). *out is
 * owned by the caller (reconciler_close()). Returns 0, -EINVAL (bad options: period out of
 * bounds, no owner...), -EBUSY (pool or connection already started) or -ENOMEM. */
int reconciler_new(const struct reconciler_options *opts, struct reconciler **out);

/* Starts the runs: the first at once, then one per period (sooner while a way back is wanted,
 * see the top of this file). Returns 0 or -EBUSY. */
int reconciler_start(struct reconciler *r);

/* Asks for a run now (after the one in progress, if any). The mode NOTIFY and the Redis
 * connection's connect call it. Ignored when not started or closing. */
void reconciler_kick(struct reconciler *r);

/* Runs once now (tests, and the daemon after a switch to postgres mode). cb (may be NULL) is
 * called exactly once when it ends, unless this returns an error: -EBUSY (a run is in
 * progress) or -ESHUTDOWN. */
int reconciler_run(struct reconciler *r, reconciler_done_cb cb, void *data);

void reconciler_get_stats(const struct reconciler *r, struct reconciler_stats *out);

/* Stops the timer; frees r once its handle is closed and its run (if any) has ended — close the
 * pool and the Redis connection too, so that the run's requests are answered -ECANCELED.
 * closed_cb (may be NULL) is called then. A run's cb is still called. */
void reconciler_close(struct reconciler *r, void (*closed_cb)(void *data), void *data);

#endif
