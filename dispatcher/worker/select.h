/* Selection and admission (SPEC C5, C8, C9; issue 9 items 2–4): which claimed contact is
 * offered to the gate, in which campaign order, and what happens when no line is free.
 *
 * Per organisation with demand (the claim's demand scan, every demand_ms):
 *   - claim: a bounded in-memory set of claimed contacts — about what can get a slot soon (the
 *     org's admission tokens times W = min(campaigns, CLAIM_CAMPAIGNS_MAX), at most
 *     2 × org_limit + W: it does not grow with the campaigns), claimed in pages for the
 *     campaigns whose turn comes next along the DRR ring and that are short of their part (≤
 *     CLAIM_CAMPAIGNS_MAX per statement), at most one claim statement in flight per org; any
 *     number of campaigns per org (README, *Many campaigns per organisation*);
 *   - select: the deficit-round-robin selector (core/drr.h) orders the campaigns with a free
 *     claimed contact, starting at the one whose turn it is (≤ GATE_CANDIDATES_MAX
 *     candidates); each candidate offers its oldest claimed contact;
 *   - admit: ONE gate_flow_admit() per admission (redis mode; gate_pgmode_admit() in postgres
 *     mode) with each candidate's contact as its call row (contact id and lease token as fences);
 *     the admitted campaign is charged its pick; the call goes to the dialer;
 *   - wait (C9): a refused admission is registered as a waiter by the admission itself
 *     (gate_admit_req.wait/.worker, handoff.h) and tried again when the gate wakes it; an
 *     admission token waits at most slot_wait_ms, and a claimed contact not admitted within
 *     slot_wait_ms of its claim goes back to pending, nothing charged (its campaign keeps its
 *     deficit).
 * Bounded work per organisation per loop turn: one claim statement and at most tokens_max
 * admissions are started per org per pump.
 *
 * Everything is borrowed from the owner (struct worker) and must outlive the selector.
 */
#ifndef DSP_WORKER_SELECT_H
#define DSP_WORKER_SELECT_H

#include "claim.h"
#include "dial.h"
#include "gate_flow.h"
#include "gate_mode.h"
#include "handoff.h"
#include "metrics.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct select;

struct select_options {
	uv_loop_t *loop;
	struct claim *claim;
	struct gate *gate;
	struct gate_flow *flow;
	struct gate_pg *gpg;
	struct gate_mode_ctl *mode;
	struct handoff *handoff; /* redis-mode waiters */
	struct dial *dial;
	uint64_t slot_wait_ms; /* C9 (BATCH_DISPATCH_SLOT_WAIT_SECONDS) */
	uint64_t demand_ms;    /* demand scan period (0: 500) */
	uint64_t tick_ms;      /* slot-wait checks, postgres-mode retries (0: 100) */
	uint32_t claim_page;   /* contacts per campaign per claim (0: 50) */
	uint32_t tokens_max;   /* admissions in flight or waiting per org (0: min(org_limit, 16)) */
	uint64_t write_deadline_ms; /* postgres-mode admission bound (0: 2000) */
};

struct select_stats {
	uint64_t claims;      /* claim statements completed */
	uint64_t claimed;     /* contacts claimed */
	uint64_t handed_back; /* contacts sent back (slot wait, drain, stop / pause) */
	uint64_t notified;    /* stop / pause / resume notifications that named a known org */
	uint64_t admissions;  /* admissions sent (either mode) */
	uint64_t admitted;    /* calls admitted and written */
	uint64_t refused;     /* admissions refused */
	uint64_t wakes;	      /* waiters woken by the gate */
	uint64_t gave_up;     /* waiters withdrawn after slot_wait_ms */
	uint64_t lost;	      /* contacts dropped: lease lost, row exists, outcome unknown */
	uint64_t errors;      /* admissions answered with an error status */
	/* Metrics (dispatcher/worker/README.md, "Metrics"): the candidates' decisions, counted as
	 * the gate counts them (gate_stats.lua): each candidate refused by its level, fcfs per
	 * decision made without valid floors (R9); slot_wait: seconds from an admission's first
	 * ask to its admission (SELECT_SLOT_WAIT_LE). */
	uint64_t refused_level[FAIRSHARE_LEVEL_COUNT]; /* [FAIRSHARE_LEVEL_NONE]: 0 */
	uint64_t fcfs;
	struct metrics_histogram slot_wait;
	uint32_t orgs; /* organisations known */
	uint32_t held; /* contacts claimed and held in memory now */
};

/* The slot-wait histogram's bounds, in seconds. */
#define SELECT_SLOT_WAIT_N 14
extern const double select_slot_wait_le[SELECT_SLOT_WAIT_N];

/* Calls cb once per organisation the selector knows (with demand, claimed contacts or
 * admissions), in no particular order. */
void select_foreach_org(const struct select *s, void (*cb)(const char *org, void *data),
			void *data);

int select_new(const struct select_options *o, struct select **out);

/* Starts the demand scan and the tick. Returns 0 or -EBUSY. */
int select_start(struct select *s);

/* The gate mode changed (gate_mode change_cb): admissions held meanwhile go out. */
void select_mode_changed(struct select *s);

/* Calls of org ended in postgres mode (GATE_PG_CHANNEL_FREE): its waiters try again. */
void select_org_freed(struct select *s, const char *org);

/* Batch stop / pause (issue 10 item 4, SPEC R6): a batch or a campaign left 'active'. Migration
 * 0015 NOTIFYs SELECT_CHANNEL_DISPATCH at commit with payload "<org> <campaign>" (a campaign) or
 * "<org> <campaign> <batch>" (a batch); the worker LISTENs on its pool. Its claimed contacts that
 * no admission has in flight go back at once (the hand-back writes 'held' or 'cancelled' from
 * the batch's and campaign's status); those of the claim in flight go back when it answers;
 * those in an admission in flight are refused by the call-row write (lease lost) and handed back
 * then (admit.c). A lost notification (connection down) leaves them to that refusal and to the
 * slot wait.
 * Resume (migration 0016): a batch or a campaign entering 'active' (resumed, or a new active
 * batch) NOTIFYs "+<org> <campaign>". The org's waiting admissions were refused under other
 * campaigns and the gate wakes a waiter only under the campaigns it waits under: once a claim
 * brings contacts of that campaign (at once when some are claimed already) they are re-proposed
 * with the current candidates, and refused they wait under it too (admit.c, admit_repropose()).
 * Noted for one slot wait. Returns 0, or -EINVAL for a payload that names nothing. */
#define SELECT_CHANNEL_DISPATCH "dsp_dispatch"
int select_dispatch_notify(struct select *s, const char *payload);

/* The listening connection is up again: a notification sent while it was down is lost, and a
 * lost "+" would leave the org's waiting admissions under the campaigns of their last refusal
 * until they give up (the slot wait). So every org acts as if each of its campaigns had entered
 * 'active': its waiting admissions are re-proposed now (with the campaigns claimed already),
 * and again when a claim within one slot wait brings a campaign that had nothing claimed. A
 * lost stop or pause needs nothing: the fenced write refuses its contacts (gate_pg.c). */
void select_listen_up(struct select *s);

/* Stops claiming and admitting, withdraws the waiters, hands every claimed contact back
 * (pending, nothing charged) once the admissions in flight are answered; cb (may be NULL) once
 * every hand-back is answered. */
void select_drain(struct select *s, void (*cb)(void *data), void *data);

void select_get_stats(const struct select *s, struct select_stats *out);

/* A fresh call id (uuid v4, NUL-terminated; size >= 37): the slot id at every level and the
 * Idempotency-Key. Batch admissions (admit.c) and direct dials (direct.c) draw theirs here. */
void select_new_call_id(char *out, size_t size);

/* Frees the selector once its timers are closed (answers still pending from the gate, the pool
 * or the flow must have been cancelled first: close them before). cb (may be NULL) then. */
void select_close(struct select *s, void (*cb)(void *data), void *data);

#endif
