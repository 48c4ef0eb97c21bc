/* The worker's periodic jobs (SPEC C9, R7, §7): each runs on its own period, one pass at a
 * time, in bounded statements, never holding the loop.
 *
 * Lease sweeper (C9), every worker: claimed contacts whose lease has expired and that have NO
 * live call row go back to pending ('held' when their batch or campaign is paused, 'cancelled'
 * when stopped), nothing charged, lease_batch at a time. Each batch is one transaction: the
 * first statement locks the candidates (FOR UPDATE SKIP LOCKED: a call-row write holding one
 * is skipped), the second, with a snapshot taken after the locks were granted, re-pends those
 * that still have no live call row. So a call row committed before the sweep locked its
 * contact is always seen, and a write that comes after waits for the sweep and finds its lease
 * gone (gate_pg.h: GATE_PG_LEASE_LOST). A contact whose call row exists is never re-pended: it
 * is finished by its events, a re-send with the stored key, or the maximum-duration sweep.
 *
 * Re-send of orphaned calls (C9, D1), every worker with a dialer (sweep_options.dial): calls
 * dialing or unknown with no event yet (no provider_call_id, no sequence), fewer than
 * resend_max_sends dial_attempts rows, whose contact's lease has expired (its owner stopped
 * renewing: dead, or cut off from PostgreSQL — dial.h, "Leases"). ONE statement per page locks
 * those contacts (FOR UPDATE SKIP LOCKED; the expiry re-checked on the newest row version) and
 * moves the lease to this worker (owner, a fresh token, lease_until = now() + lease_ms), so two
 * sweepers never take the same call and the old owner's renewal fails; each call taken is
 * handed to dial_resend(): the same Idempotency-Key and body, from the call row. Its slots stay
 * held throughout (the call row holds them); a definitive refusal ends it through call_end.
 *
 * Maximum-duration sweep (R7), every worker: calls dialing, live or unknown created more than
 * max_call_s ago are ended through call_end (outcome 'swept', disposition FAIL: the contact
 * ends 'failed' with last_error SWEEP_REASON and no attempt charged — the call may have been
 * placed, so it is never dialled again under a new key (SPEC C9), and an unknown outcome uses
 * up no attempt (D5)), call_batch at a time. call_end ends each one
 * exactly once, whichever worker's sweep gets there first.
 *
 * Retention (§7), one elected worker: the one holding the leases row 'retention' (taken or
 * renewed, in the same transaction as each delete, for retention_lease_s) deletes ended calls
 * (ended_at older than retention_days), dial_attempts and provider_events (created/received
 * before then) of calls that are not live, retention_batch rows per statement, until a
 * statement deletes fewer. A delete commits only with the lease held by this worker.
 *
 * Async contract: if a sweep_run_*() returns an error the callback is never called; otherwise
 * it is called exactly once, with the pass's report, or with a negative status (the
 * statement's failure, -ECANCELED on close) and the report of what was done before it.
 */
#ifndef DSP_WORKER_SWEEP_H
#define DSP_WORKER_SWEEP_H

/* The outcome_reason of a swept call and the last_error of its contact. */
#define SWEEP_REASON                                                                               \
	"no terminal event within the maximum call duration: the call may have been placed;"       \
	" not dialled again"

#include "call_end.h"
#include "dial.h"
#include "pg_pool.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

struct sweep;

struct sweep_options {
	uv_loop_t *loop;	     /* borrowed */
	struct pg_pool *pool;	     /* borrowed; not started yet (statements are prepared) */
	struct call_end *ends;	     /* borrowed: outlives the sweep */
	const char *worker_id;	     /* lease owner name (copied), 1..64 bytes */
	uint64_t lease_sweep_s;	     /* lease sweeper period, 0: not periodic [set by caller] */
	uint32_t lease_batch;	     /* contacts per transaction [500] */
	uint64_t call_sweep_s;	     /* maximum-duration sweep period, 0: not periodic */
	uint64_t max_call_s;	     /* the maximum call duration [7200] */
	uint32_t call_batch;	     /* calls per page [CALL_END_BATCH_MAX] */
	uint64_t retention_period_s; /* retention period, 0: not periodic */
	uint32_t retention_days;     /* [30] */
	uint32_t retention_batch;    /* rows per delete [5000] */
	uint64_t retention_lease_s;  /* the retention lease's length [300] */
	struct dial *dial;	     /* borrowed (outlives the sweep); NULL: no re-send job */
	uint64_t lease_ms;	     /* the lease a takeover writes (with dial) */
	uint64_t resend_period_s;    /* re-send sweep period [lease_sweep_s], 0 with
				      * lease_sweep_s 0: not periodic */
	uint32_t resend_batch;	     /* calls per takeover statement [100] */
	uint32_t resend_max_sends;   /* calls with this many attempt rows are left to their
				      * events or the maximum-duration sweep (D2) [4] */
};

/* What one pass did. */
struct sweep_report {
	uint64_t repended;   /* lease sweeper: contacts back to pending */
	uint64_t held;	     /* lease sweeper: of which to held (paused) */
	uint64_t swept;	     /* maximum-duration: calls this pass ended (call_end ENDED) */
	uint64_t found;	     /* maximum-duration: overdue calls found */
	uint64_t taken;	     /* re-send: calls taken over and handed to the dialer */
	bool elected;	     /* retention: this worker held the lease */
	uint64_t calls;	     /* retention: call rows deleted */
	uint64_t attempts;   /* retention: dial_attempts rows deleted */
	uint64_t events;     /* retention: provider_events rows deleted */
	uint64_t statements; /* statements (batches) sent by the pass */
};

typedef void (*sweep_done_cb)(struct sweep *s, int status, const struct sweep_report *r,
			      void *data);

/* Creates the jobs and prepares their statements on o->pool (before pg_pool_start()). *out is
 * owned by the caller until sweep_close(). Returns 0, -EINVAL, -EBUSY or -ENOMEM. */
int sweep_new(const struct sweep_options *o, struct sweep **out);

/* Starts the periodic jobs whose period is not 0 (first pass after one period). */
void sweep_start(struct sweep *s);

/* Runs one pass of a job now (whole: batch after batch until a short one). cb may be NULL.
 * Returns 0, -EBUSY (a pass of that job is running) or -ESHUTDOWN. */
int sweep_run_leases(struct sweep *s, sweep_done_cb cb, void *data);
int sweep_run_calls(struct sweep *s, sweep_done_cb cb, void *data);
int sweep_run_retention(struct sweep *s, sweep_done_cb cb, void *data);
/* -EINVAL without a dialer. */
int sweep_run_resend(struct sweep *s, sweep_done_cb cb, void *data);

/* Stops the timers, lets running passes finish (closing the pool or call_end cancels them),
 * frees s and calls closed_cb (may be NULL). */
void sweep_close(struct sweep *s, void (*closed_cb)(void *data), void *data);

#endif
