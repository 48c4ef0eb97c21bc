/* The refresher (SPEC C4, C5; issue 8 item 3): the one elected worker that recomputes every
 * organisation's floors and installs floors and limits where the gate reads them.
 *
 * Election. One row of `leases` (name 'refresher') elects it: a compare-and-set on (owner,
 * version, lease_until) renews the tenure of the holder whose lease has not run out (version
 * unchanged) or starts a new tenure (version + 1) for whoever asks once it has run out; the
 * database's clock decides. Each cycle starts with that statement. A refresher whose renew fails
 * (another holds the lease, or the statement failed) installs nothing until it wins again.
 *
 * Fencing. Floors are installed under gate_floors_version(lease_version, seq), seq counting the
 * installs of this tenure, so versions grow within a tenure and across tenures; the Redis gate
 * and fair_share_installs keep only a newer version, so a holder paused between its renew and
 * its install (SIGSTOP, a long GC, a lost network) cannot overwrite its successor's floors when
 * it wakes: its install is refused, counted, and it stops installing. Both stores are written
 * in the same order (PostgreSQL, then Redis), and a refusal by PostgreSQL sends nothing to
 * Redis, so a fenced holder writes to neither once its successor began installing the
 * organisation. When seq would reach
 * 2^26 the next renew starts a new tenure.
 *
 * A cycle, per organisation (one at a time, one loop turn of computation each):
 *   1. read, in parallel: from PostgreSQL (one pipelined batch) the org's limits and
 *      limits_version, the system limit and its version, the elapsed time since the last floors
 *      install (database clock), every campaign with its ceiling, agent, status, the count of
 *      its due contacts capped at org_limit (SQL_COUNT_DUE_CAPPED's form), and the exact carry
 *      stored with the last floors (fair_share_carries); the claimed contacts per campaign
 *      (`waiting`, capped likewise; until the worker registers its waiters, a claimed contact
 *      is counted as waiting); and the running counts per campaign and agent, the system's,
 *      and the waiting direct dials k: from Redis (gate_read, in parallel) in redis mode; from
 *      the call rows and gate_direct_waiters (SQL_REFRESHER_RUNNING, SQL_REFRESHER_LIVE, in the
 *      same batch) when the gate was in postgres mode at the cycle's start (the mode is read
 *      with the lease), and, after the batch, when gate_read failed (Redis cannot answer);
 *   2. fairshare_recompute() with the carry (work area allocated once, grown when needed);
 *   3. install, unless the lease may have run out since its renew (local monotonic clock from
 *      the renew's send; then the tenure ends): the system limit when PostgreSQL's
 *      system_settings.limits_version is newer than the one the gate holds (gate_read's
 *      system_version: a rebuild from older limits is repaired, issue 8), the org's limits when
 *      PostgreSQL's limits_version is newer than the gate's, then the floors in PostgreSQL first (gate_pgmode_install_floors():
 *      the floors with the exact carry and active flag, and fair_share_installs, in one batch)
 *      and, only once PostgreSQL accepted the version, in Redis (TTL floors_ttl_ms): a delta
 *      (gate_install_floors_delta()) against the floors this cycle's gate_read saw installed
 *      when there are some, in full otherwise or when the delta's base moved meanwhile.
 *      Counts from the call rows: only the floors in PostgreSQL (where the postgres-mode gate
 *      reads them) and, in postgres mode, a NOTIFY on GATE_PG_CHANNEL_FREE (its wake); nothing
 *      to Redis.
 *   A cycle whose organisations take more than half the lease renews it before the next one;
 *   a renew that fails ends the tenure and the cycle (-EAGAIN).
 *
 * Timing. A cycle starts every period_ms (C4's bound for a limit change is then one cycle
 * after the change commits), and soon after a kick (refresher_kick()). Kicks come from
 * PostgreSQL (LISTEN REFRESHER_CHANNEL_PG: migrations/0004_refresh_notify.sql NOTIFYs it with the
 * org id when a campaign is inserted or deleted or its status, ceiling or agent changes, an
 * organisation's limits or the system limit change, an agent changes, contacts are inserted or
 * go to or from 'held') and from the gate (SUBSCRIBE REFRESHER_CHANNEL_REDIS on the optional
 * subscriber: gate_release.lua publishes the org id when a release leaves a campaign below its
 * floor with nobody waiting). Kicks are coalesced: a kick while no cycle runs starts one
 * REFRESHER_KICK_GAP_MS after the previous cycle ended (at once when that is past); every kick
 * received while one is pending or running is served by at most one more cycle, started the
 * same gap after the running one ends. So a burst of any size costs at most one cycle in flight
 * plus one, and kicked cycles leave the database at least the gap between them. A kick
 * refreshes every organisation (the org is logged only). A notification or message lost while
 * its connection was down is covered by the period.
 *
 * Async contract (STYLE rule 4): refresher_step()'s callback is called exactly once unless it
 * returns an error, also with -ECANCELED from refresher_free().
 */
#ifndef DSP_REFRESHER_H
#define DSP_REFRESHER_H

#include "gate.h"
#include "gate_pg.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define REFRESHER_LEASE_NAME	   "refresher"
#define REFRESHER_PERIOD_MS	   1000u	 /* default recompute period */
#define REFRESHER_LEASE_MS	   3000u	 /* default lease duration (renewed each cycle) */
#define REFRESHER_FLOORS_TTL_MS	   10000u	 /* default floors lifetime (C5: "default 10 s") */
#define REFRESHER_ELAPSED_MAX_MS   60000u	 /* measured elapsed times are clamped to this */
#define REFRESHER_ELAPSED_MEASURED UINT64_MAX	 /* refresher_step(): measure elapsed */
#define REFRESHER_KICK_GAP_MS	   50u		 /* least time from a cycle's end to a kicked one */
#define REFRESHER_CHANNEL_PG	   "dsp_refresh" /* NOTIFY channel, payload org id or '*' */
#define REFRESHER_CHANNEL_REDIS	   "dsp:v1:refresh" /* PUBLISH channel, payload org id */

struct refresher;
struct redis_sub;

/* Tests only: called after the recompute of org and the lease's deadline check, right before its
 * installs, with the version the floors are about to be installed under. */
typedef void (*refresher_hook_cb)(struct refresher *r, const char *org, uint64_t version,
				  void *data);

struct refresher_options {
	const char *owner;	/* this refresher's name in leases.owner (copied; unique per
				 * process: e.g. "<host>:<pid>") */
	uint64_t period_ms;	/* 0: REFRESHER_PERIOD_MS */
	uint64_t lease_ms;	/* 0: REFRESHER_LEASE_MS; must exceed period_ms */
	uint64_t floors_ttl_ms; /* 0: REFRESHER_FLOORS_TTL_MS */
	bool manual;		/* no timer, no kicks: cycles only by refresher_step() (tests,
				 * bench); nothing listened to or subscribed */
	struct redis_sub *sub;	/* borrowed, may be NULL: kicks from the gate (subscribes
				 * REFRESHER_CHANNEL_REDIS on it); close it before
				 * refresher_free() (subscriptions last until close) */
	refresher_hook_cb before_install_cb; /* tests only; may be NULL */
	void *hook_data;
};

/* Waiters woken at most after one applied floors install (gate_handoff_wake()'s bound). */
#define REFRESHER_WAKE_MAX 16

struct refresher_stats {
	uint64_t cycles;	   /* cycles completed */
	uint64_t held;		   /* cycles run as the holder */
	uint64_t not_holder;	   /* cycles that found another holder (nothing installed) */
	uint64_t lost;		   /* tenures ended: renew refused or install fenced */
	uint64_t recomputes;	   /* organisations recomputed */
	uint64_t installs;	   /* floors installs applied in Redis */
	uint64_t delta_installs;   /*   of which deltas (gate_install_floors_delta()) */
	uint64_t refused_redis;	   /* floors installs refused by version in Redis */
	uint64_t refused_pg;	   /* floors installs refused by version in PostgreSQL */
	uint64_t limits_installs;  /* org limits installs applied */
	uint64_t system_installs;  /* system limit installs applied */
	uint64_t limits_cycle;	   /* index of the cycle (cycles completed before it) that last
				     * applied an org limits install */
	uint64_t pg_counts;	   /* recomputes with the running counts from the call rows */
	uint64_t redis_fallbacks;  /*   of which in redis mode because Redis could not answer */
	uint64_t pg_only_installs; /* floors installs applied in PostgreSQL only (those) */
	uint64_t pg_wakes;	   /*   of which followed by a wake NOTIFY (postgres mode) */
	uint64_t woken;		   /* waiters woken after applied floors installs (C9) */
	uint64_t wake_errors;	   /* wakes after an install that failed (logged; not fatal) */
	uint64_t errors;	   /* organisations whose cycle failed (logged) */
	uint64_t kicks;		   /* refresher_kick() calls (NOTIFYs and messages included) */
	uint64_t notifies;	   /*   of which NOTIFYs on REFRESHER_CHANNEL_PG */
	uint64_t messages;	   /*   of which messages on REFRESHER_CHANNEL_REDIS */
	uint64_t kicked;	/* cycles started by a kick (or a period that found one running) */
	uint64_t lease_version; /* current tenure's version, 0 when not holding */
	uint64_t last_version;	/* last floors version sent */
	uint64_t last_elapsed_ms; /* elapsed time of the last recompute */
	uint64_t last_read_us;	  /* last recompute's phases: reads */
	uint64_t last_compute_us; /*   fairshare_recompute() and the install arrays */
	uint64_t last_install_us; /*   installs */
	uint32_t last_campaigns;  /* campaigns of the last recompute */
};

/* status: 0 when the cycle ran as the holder and every organisation was refreshed (some
 * installs may have been refused: see the stats); -EAGAIN when another refresher holds the
 * lease; -ESTALE when this refresher's floors were refused by version (fenced: it no longer
 * holds the lease); -ECANCELED from refresher_free(); another negative code when a read or
 * install failed (logged). */
typedef void (*refresher_step_cb)(struct refresher *r, int status, void *data);

/* Creates a refresher on loop over pool (borrowed, statements registered now: call before
 * pg_pool_start()), gate (the Redis gate, borrowed, its generation kept current by its owner) and
 * gpg (the gate's PostgreSQL side on the same pool, borrowed). All must outlive it. Unless
 * manual, it LISTENs REFRESHER_CHANNEL_PG on the pool and subscribes opts->sub (when given) with
 * itself as the callbacks' data; neither can be undone, so close the pool and the subscriber
 * before refresher_free() or in the same loop turn (no notification runs between). Not
 * started. *out is owned by the caller (refresher_free()). Returns 0, -EINVAL (no owner, lease
 * not above period), -EEXIST (REFRESHER_CHANNEL_REDIS already subscribed on opts->sub), -EBUSY
 * (pool started), or -ENOMEM. */
int refresher_new(uv_loop_t *loop, struct pg_pool *pool, struct gate *gate, struct gate_pg *gpg,
		  const struct refresher_options *opts, struct refresher **out);

/* Starts the period timer (first cycle at once). Returns 0, -EBUSY (started) or -EINVAL
 * (manual). */
int refresher_start(struct refresher *r);

/* Asks for a cycle soon (coalesced: see Timing above): the active set of org changed, a
 * ceiling or a limit changed, or the gate reported a campaign's demand below its floor. The
 * NOTIFYs and messages call it; the owner may too (e.g. when its subscriber comes back up).
 * Every kick refreshes every organisation (org is logged only). Ignored when manual or not
 * started (refresher_start() runs a first cycle at once). */
void refresher_kick(struct refresher *r, const char *org);

/* Runs one cycle now (see the top of this file), with elapsed_ms as every organisation's
 * elapsed time since its previous recompute (REFRESHER_ELAPSED_MEASURED: measured on the
 * database's clock from the last install, as the timer's cycles do). For tests and benchmarks
 * (time as an argument). Returns 0 (cb will be called) or -EBUSY (a cycle is running). */
int refresher_step(struct refresher *r, uint64_t elapsed_ms, refresher_step_cb cb, void *data);

/* Copies the counters. */
void refresher_get_stats(const struct refresher *r, struct refresher_stats *out);

/* Stops the timer, answers a pending refresher_step() with -ECANCELED, and frees r once its
 * handle is closed and its requests are answered (close the pool and the gate's connection
 * after, or they answer -ECANCELED, which is fine). NULL is ignored. */
void refresher_free(struct refresher *r);

#endif
