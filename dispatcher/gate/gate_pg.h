/* The PostgreSQL side of the slot gate (SPEC §2 Terms, C1, C9, C11, D1): the call-row writes
 * that end every admission, the fence that makes a call id's write impossible, the gate
 * mode/epoch switch and the way back, and the reads of the reconciler. The postgres-mode
 * admission and the release are gate_pgmode.h; the reasoning is dispatcher/gate/README-pg.md.
 *
 * A call-row write (gate_pg_write) takes one loop turn's admissions and writes their call rows
 * in one transaction: one pipelined batch of four statements and one sync. It takes the epoch
 * lock shared (pg_advisory_xact_lock_shared(GATE_PG_EPOCH_LOCK_KEY)), then, in one statement
 * whose snapshot is taken after the lock was granted, writes each call's row (state dialing)
 * only when system_settings still holds the mode and epoch the admission was decided under,
 * the call id has not been fenced, and — for a batch contact — the contact is still claimed
 * with the claim's lease token (checked under the contact's row lock, which is also what the
 * lease sweeper's UPDATE waits on). Each call gets its own outcome. The whole write is bounded
 * on the server by the deadline (statement_timeout and lock_timeout set in the transaction, re-
 * set after the lock to what is left), so a write blocked past its deadline is cancelled by
 * PostgreSQL itself and commits nothing, whatever the client does.
 *
 * The mode switch (gate_pg_switch_to_postgres) and the fence (gate_pg_fence) take the same
 * lock exclusively: they wait for every write in flight, and every write that starts after them
 * sees what they committed. So no call row is ever written under an epoch after the switch to
 * the next one committed, and for each call id exactly one of "row written" and "fenced" ever
 * happens.
 *
 * Connections: a pool (common/pg_pool.h), borrowed. gate_pg_new() registers the statements, so
 * it must be called before pg_pool_start(); the pool must be closed (every request completed)
 * before gate_pg_free(). The pool's query_timeout_ms should exceed the longest write deadline,
 * so the server's own cancellation, not the client's, ends a write that is too slow.
 *
 * Async contract (STYLE rule 4): if a function that takes a callback returns an error, the
 * callback is never called and nothing was sent; otherwise it is called exactly once, also when
 * the pool closes. Results passed to callbacks are borrowed for the callback only. Ids are
 * validated before anything is sent: organisations, campaigns and agents match
 * ^[A-Za-z0-9_-]{1,64}$, call ids are lower- or upper-case uuids, numbers are E.164.
 */
#ifndef DSP_GATE_PG_H
#define DSP_GATE_PG_H

#include "pg_pool.h"

#include <stdbool.h>
#include <stdint.h>

#define GATE_PG_EPOCH_LOCK_KEY	  7564136LL	  /* pg_locks: advisory, classid 0, objid 7564136 */
#define GATE_PG_WRITE_MAX	  256		  /* calls per write */
#define GATE_PG_WRITE_DEADLINE_MS 2000u		  /* default call-row write deadline */
#define GATE_PG_FENCE_LOCK_MS	  1000u		  /* default wait of a fence for the epoch lock */
#define GATE_PG_CHANNEL_FREE	  "dsp_gate_free" /* NOTIFY payload: org id (postgres mode) */
#define GATE_PG_CHANNEL_MODE	  "dsp_gate_mode" /* NOTIFY payload: "<mode> <epoch>" */

struct gate_pg;

enum gate_mode {
	GATE_MODE_REDIS = 0,	/* admissions by the Redis scripts (dispatcher/gate/README.md) */
	GATE_MODE_POSTGRES = 1, /* admissions by gate_pgmode_admit() (Redis unreachable or lost) */
};

#define GATE_PG_GEN_MAX	   64 /* bytes of a generation (GATE_GEN_MAX) */
#define GATE_PG_RUN_ID_MAX 64 /* bytes of a Redis run_id (INFO server: 40) */

struct gate_pg_mode {
	enum gate_mode mode;
	uint64_t epoch; /* system_settings.gate_epoch, >= 1 */
	/* system_settings.gate_generation: the generation the rebuild that set this redis epoch
	 * committed (gate_pg_rebuild_finish()). Filled by gate_pg_read_mode() and the switch
	 * results; "" when NULL or not carried (the NOTIFY payload, gate_pg_parse_mode()). Only
	 * meaningful in redis mode: a postgres epoch keeps the previous redis epoch's value. */
	char generation[GATE_PG_GEN_MAX + 1];
	/* system_settings.gate_redis_run_id (migration 0012): the run_id of the Redis server that
	 * rebuild was built on; filled and "" as generation is. A redis epoch is served only by
	 * that server (gate_mode.h). */
	char run_id[GATE_PG_RUN_ID_MAX + 1];
};

/* What a call row says about one dial, besides its call id and organisation. Borrowed. */
struct gate_pg_dial {
	const char *campaign;	 /* NULL: a direct dial (the org's direct pseudo-campaign) */
	const char *agent;	 /* the agent the call counts on */
	int64_t contact;	 /* > 0 for a batch dial; 0 for a direct dial (no contact) */
	int64_t lease_token;	 /* the contact's claim token (contacts.lease_token) */
	int32_t attempt;	 /* >= 1 */
	const char *to_number;	 /* E.164 */
	const char *from_number; /* NULL: none; at most 32 bytes */
};

/* One call row to write. Borrowed for the call only. */
struct gate_pg_call {
	const char *call; /* uuid: the slot id at every level and the Idempotency-Key */
	const char *org;
	struct gate_pg_dial dial;
};

/* Per call: written, or why not. */
enum gate_pg_outcome {
	GATE_PG_WRITTEN = 0, /* the row is written (state dialing): dial it */
	GATE_PG_STALE_EPOCH, /* mode or epoch moved on: not written; release, re-read the mode */
	GATE_PG_LEASE_LOST,  /* the contact is no longer claimed with this token: not written */
	GATE_PG_FENCED,	     /* the call id was fenced (reconciler, lost write): not written */
	GATE_PG_DEADLINE,    /* the write did not finish within its deadline (cancelled by the
			      * server): not written */
	GATE_PG_FAILED,	     /* PostgreSQL refused the write (logged) or it was never sent */
	GATE_PG_EXISTS,	     /* a row with this call id existed already: not written again; the
			      * call exists, keep its slots */
	GATE_PG_UNKNOWN,     /* the outcome was lost with the connection and the fence that would
			      * settle it failed: keep the slots; the reconciler fences it later */
	GATE_PG_OUTCOME_COUNT,
};

struct gate_pg_options {
	uint64_t fence_lock_ms; /* how long a fence waits for the epoch lock (0: 1000) */
};

struct gate_pg_stats {
	uint64_t writes;			  /* write transactions completed */
	uint64_t outcomes[GATE_PG_OUTCOME_COUNT]; /* calls, by outcome */
	uint64_t fences;			  /* fence transactions completed */
	uint64_t fenced;			  /* call ids fenced */
	uint64_t fence_found;			  /* call ids a fence found written */
	uint64_t switches;			  /* switches this process made (epoch + 1) */
	uint64_t admissions;			  /* postgres-mode transactions completed */
	uint64_t decisions; /* postgres-mode decisions (candidates evaluated) */
	uint64_t releases;  /* call rows ended by gate_pgmode_release() */
	uint64_t cancelled; /* call rows ended by gate_pg_cancel_written() */
};

/* Creates the PostgreSQL side of the gate over pool (borrowed; not started yet: the statements
 * are registered now). opts may be NULL. *out is owned by the caller (gate_pg_free()). Returns
 * 0, -EINVAL, -EBUSY (pool already started) or -ENOMEM. */
int gate_pg_new(struct pg_pool *pool, const struct gate_pg_options *opts, struct gate_pg **out);

/* Frees g. Close its pool first: no operation may still be pending. NULL is ignored. */
void gate_pg_free(struct gate_pg *g);

/* Registers LISTEN on both channels of the gate on the pool (before pg_pool_start()):
 * free_cb gets an org id whenever calls of that org end in postgres mode (waiters of that org
 * try again), mode_cb "<mode> <epoch>" after every switch (gate_pg_parse_mode()). Either may be
 * NULL. Returns as pg_pool_listen(). */
int gate_pg_listen(struct pg_pool *pool, pg_notify_cb free_cb, pg_notify_cb mode_cb, void *data);

/* Parses a mode channel payload. Returns 0 or -EINVAL. */
int gate_pg_parse_mode(const char *payload, struct gate_pg_mode *out);

/* out[i] is the outcome of calls[i]. */
typedef void (*gate_pg_write_cb)(struct gate_pg *g, const enum gate_pg_outcome *out, uint32_t n,
				 void *data);

/* Writes the call rows of calls[0..n) in one transaction, each conditional on its own fences
 * (see the top of this file), the whole bounded on the server by deadline_ms (what is left of
 * the admissions' write deadline). mode and epoch are those the admissions were decided under.
 * A write whose outcome was lost with its connection (-ECONNRESET, -ETIMEDOUT) is settled by a
 * fence before cb is called: written, or fenced (GATE_PG_UNKNOWN only when that fence fails).
 * Every outcome but WRITTEN, EXISTS and UNKNOWN means "release this call's slots now"
 * (gate_pg_outcome_releases()). Returns 0 (cb will be called), -EINVAL (n outside
 * 1..GATE_PG_WRITE_MAX, a bad id or number, a call id or a contact twice, a batch dial without a
 * contact, a direct dial with one), -ETIMEDOUT (deadline_ms is 0), -ENOMEM, or the pool's
 * refusal (-ENOTCONN, -EAGAIN, -ESHUTDOWN): nothing was sent, release every call. */
int gate_pg_write(struct gate_pg *g, enum gate_mode mode, uint64_t epoch, uint64_t deadline_ms,
		  const struct gate_pg_call *calls, uint32_t n, gate_pg_write_cb cb, void *data);

/* status 0: ended[i] says whether calls[i]'s row was ended by this call (false: it is not
 * dialing any more, or was never written: nothing to do for it here). Otherwise (-ETIMEDOUT:
 * not done within the deadline; DSP_EPG, a transport error, -ECANCELED) ended is NULL, and
 * nothing was ended — or, for a lost connection, nothing is known: the rows may stay dialing
 * until the maximum-duration sweep. */
typedef void (*gate_pg_cancel_cb)(struct gate_pg *g, int status, const bool *ended, uint32_t n,
				  void *data);

/* Ends the call rows of calls[0..n) — written by gate_pg_write() (GATE_PG_WRITTEN) but never to
 * be dialled, because their caller gave up while the write was in flight — as the calls they
 * are: state ended, outcome 'refused', outcome_reason 'cancelled before dial', ended_at now,
 * only while still dialing with no provider call; each batch contact back to pending with no
 * attempt or try charged and its claim cleared, only while it is dialing under calls[i]'s lease
 * token. Fenced as the write is (budget, the shared epoch lock, a statement whose snapshot
 * follows it; the contact's lease re-checked under its row lock), bounded on the server by
 * deadline_ms. The caller releases the Redis slots of the rows ended, after cb (a row leaves
 * the live states before its slot is released). Returns 0 (cb will be called), -EINVAL (as
 * gate_pg_write()), -ETIMEDOUT (deadline_ms is 0), -ENOMEM or the pool's refusal. */
int gate_pg_cancel_written(struct gate_pg *g, const struct gate_pg_call *calls, uint32_t n,
			   uint64_t deadline_ms, gate_pg_cancel_cb cb, void *data);

/* Whether a call with this outcome must have its slots released now. */
bool gate_pg_outcome_releases(enum gate_pg_outcome o);

/* Static names for logs and metrics labels. Never NULL ("unknown"). */
const char *gate_pg_outcome_name(enum gate_pg_outcome o);
const char *gate_mode_name(enum gate_mode mode);

/* status 0: written[i] says whether calls[i] has a call row (true) or is now fenced (false),
 * for good either way. Otherwise (-ETIMEDOUT: the epoch lock was not granted in time; DSP_EPG,
 * a transport error, -ECANCELED) nothing was fenced and written is NULL. */
typedef void (*gate_pg_fence_cb)(struct gate_pg *g, int status, const bool *written, uint32_t n,
				 void *data);

/* Settles calls[0..n) (orgs[i] is calls[i]'s organisation): holding the epoch lock exclusively
 * (waiting for it at most fence_lock_ms), each call id that has no call row is recorded in
 * gate_fences, so its write can never commit; one that has a row is reported written. The
 * reconciler calls it before removing an orphaned slot record; gate_pg_write() calls it for a
 * write whose outcome was lost. Returns 0, -EINVAL (n outside 1..GATE_PG_WRITE_MAX, bad ids),
 * -ENOMEM or the pool's refusal. */
int gate_pg_fence(struct gate_pg *g, const char *const *calls, const char *const *orgs, uint32_t n,
		  gate_pg_fence_cb cb, void *data);

/* status 0 with the mode and epoch (after the switch, for the switch calls) and switched true
 * when this call moved the epoch; otherwise a negative code (-ETIMEDOUT: the epoch lock was not
 * granted in time) and r NULL. */
struct gate_pg_switch_result {
	bool switched;
	struct gate_pg_mode now;
};
typedef void (*gate_pg_switch_cb)(struct gate_pg *g, int status,
				  const struct gate_pg_switch_result *r, void *data);

/* Reads the current mode and epoch (switched is false). Returns 0 or the pool's refusal. */
int gate_pg_read_mode(struct gate_pg *g, gate_pg_switch_cb cb, void *data);

/* Switches the fleet to postgres mode with epoch + 1 — by compare-and-set on seen_epoch (the
 * epoch the caller last knew) under the exclusive epoch lock, waiting for it at most
 * lock_wait_ms (0: GATE_PG_WRITE_DEADLINE_MS): several workers that notice Redis down together
 * move the epoch once; the others get switched false and the new mode and epoch. Nothing
 * changes when the epoch is no longer seen_epoch or the mode is already postgres. NOTIFYs the
 * mode channel when it switched. Returns 0 or the pool's refusal. */
int gate_pg_switch_to_postgres(struct gate_pg *g, uint64_t seen_epoch, uint64_t lock_wait_ms,
			       gate_pg_switch_cb cb, void *data);

/* --- The way back to redis mode: the reconciler's transaction (C11) --- */

struct gate_pg_rebuild;

/* A live call row (state dialing, live or unknown), as the Redis rebuild needs it. */
struct gate_pg_live_call {
	const char *call;
	const char *org;
	const char *campaign; /* NULL: a direct dial */
	const char *agent;
};

/* status 0: the transaction holds the epoch lock exclusively and the system row; the fleet's
 * admissions and writes wait. calls[0..n) are every live call of the system, ordered by org
 * then call id, owned by rb until gate_pg_rebuild_finish(); mode is the current one (postgres,
 * seen_epoch). The caller rebuilds Redis from them (gate_system_init, then gate_org_rebuild per
 * org, under a generation from reconcile_generation(seen_epoch + 1, ...)) and then calls
 * gate_pg_rebuild_finish() exactly once. Any other status: rb is NULL and nothing is held:
 * -ESTALE (the mode at seen_epoch is not one gate_pg_rebuild_allowed() accepts), -EPERM (lease_owner no longer holds the
 * reconciler lease at lease_version), -ETIMEDOUT (the lock was not granted in time), DSP_EPG, a
 * transport error or -ECANCELED. */
typedef void (*gate_pg_rebuild_cb)(struct gate_pg_rebuild *rb, int status,
				   const struct gate_pg_live_call *calls, uint32_t n,
				   const struct gate_pg_mode *mode, void *data);

/* True when the way back may start from mode m: postgres mode, or a redis epoch with no
 * generation recorded (system_settings.gate_generation NULL: a fresh install, or a fleet set to
 * redis mode before migration 0003). No worker admits in Redis under such an epoch (gate_mode.h
 * adopts only a recorded generation), so building it is the way back without a switch first:
 * the same transaction, the same guarantee (README-pg.md, "The initial build"). */
bool gate_pg_rebuild_allowed(const struct gate_pg_mode *m);

/* Begins the switch back: an interactive transaction that takes the epoch lock exclusively
 * (waiting at most timeout_ms, which also bounds the whole transaction on the server), locks the
 * system row, checks the mode (gate_pg_rebuild_allowed() at seen_epoch) and, when lease_owner is not NULL, the
 * reconciler lease (leases row 'reconciler' held by lease_owner at lease_version, unexpired),
 * and reads every live call. Returns 0 (cb will be called), -EINVAL, -ENOMEM or the pool's
 * refusal. */
int gate_pg_rebuild_begin(struct gate_pg *g, uint64_t seen_epoch, const char *lease_owner,
			  uint64_t lease_version, uint64_t timeout_ms, gate_pg_rebuild_cb cb,
			  void *data);

/* Ends the switch back: with commit true, sets mode redis with epoch + 1,
 * system_settings.gate_generation = generation (the G the caller rebuilt Redis under, 1..
 * GATE_PG_GEN_MAX bytes; workers adopt only that {sys}:gen, gate_mode.h) and
 * gate_redis_run_id = run_id (the run_id of the server it rebuilt, at most GATE_PG_RUN_ID_MAX
 * bytes; NULL or "" records NULL: a server that reports none; workers adopt only that server)
 * in one statement (NOTIFY on the mode channel) and commits; with commit false (the Redis rebuild failed), rolls back. cb (may be
 * NULL) gets the result: switched true once committed. rb is given up by this call whatever it
 * returns. Returns 0 (cb will be called), -EBUSY (already finished), -EINVAL (commit without a
 * valid generation or a run_id too long: rolled back, no callback) or the transaction's loss status (nothing
 * committed, no callback). */
int gate_pg_rebuild_finish(struct gate_pg_rebuild *rb, bool commit, const char *generation,
			   const char *run_id, gate_pg_switch_cb cb, void *data);

/* --- The reconciler's reads in redis mode (core/reconcile.h, steps 1 and 3) --- */

/* status 0: calls[0..n) are the org's live calls (n may be 0); otherwise calls is NULL. */
typedef void (*gate_pg_calls_cb)(struct gate_pg *g, int status,
				 const struct gate_pg_live_call *calls, uint32_t n, void *data);

/* Reads the live calls of one organisation (step 1). Returns 0, -EINVAL or the pool's refusal. */
int gate_pg_org_live_calls(struct gate_pg *g, const char *org, gate_pg_calls_cb cb, void *data);

/* status 0: rows[i] is the state of calls[i]'s row as enum reconcile_row values (0 absent,
 * 1 live, 2 ended); otherwise rows is NULL. */
typedef void (*gate_pg_rows_cb)(struct gate_pg *g, int status, const int *rows, uint32_t n,
				void *data);

/* Reads the row state of calls[0..n) (step 3; n 1..GATE_PG_WRITE_MAX). Returns 0, -EINVAL or
 * the pool's refusal. */
int gate_pg_call_rows(struct gate_pg *g, const char *const *calls, uint32_t n, gate_pg_rows_cb cb,
		      void *data);

/* Deletes fences older than fence_age_s seconds and expired direct-dial waiters (the documented
 * pruning job; a write is bounded by its deadline, so a fence a day old can no longer matter).
 * cb gets the number of rows deleted in n. Returns 0 or the pool's refusal. */
typedef void (*gate_pg_count_cb)(struct gate_pg *g, int status, uint64_t n, void *data);
int gate_pg_prune(struct gate_pg *g, uint64_t fence_age_s, gate_pg_count_cb cb, void *data);

/* Counters since gate_pg_new(). */
void gate_pg_get_stats(const struct gate_pg *g, struct gate_pg_stats *out);

#endif
