/* Reconcile plan (SPEC C11): what the reconciler corrects in one organisation's Redis slot
 * records, given the records, PostgreSQL's call rows and the Redis clock.
 *
 * Pure: no I/O, no clock (now_ms is an argument), no allocation. The caller reads, in this
 * order, (1) the org's live call rows from PostgreSQL, (2) the org's slot records from Redis
 * with Redis' own time (now_ms), (3) from PostgreSQL again, the state of every call id seen in
 * (1) or (2); then calls reconcile_plan() and carries out its actions.
 *
 * The rule for a slot record (call id, taken_ms) whose call has no row: it is an orphan only
 * when it is older than the call-row write deadline, now_ms - taken_ms > orphan_after_ms;
 * younger, its write may still be in flight and it is kept. taken_ms and now_ms are both Redis
 * time (the admission script's TIME and the reconciler's read), so no two clocks are compared.
 * The age is only the reconciler's patience, never the safety argument: an orphan is not
 * released in Redis until the fence (dispatcher/gate/gate_pg.h, gate_pg_fence) has made its
 * call-row write impossible — or found that the row was written after all, and then the slot
 * stays. A record taken "in the future" (a Redis clock stepped back) has age 0.
 *
 * Ordering assumptions of the callers, stated here because the plan depends on them: a slot is
 * always taken before its call row is written, and a call's row leaves the live states before
 * its slot is released — where "leaves" means ended, or its terminal provider event recorded
 * (the worker's early release frees the slots once that event is committed, before the end;
 * step 3 reads such a row as ended). A live row without a slot record is then a lost slot
 * (ADD), and a slot record whose row has ended is a lost release (RELEASE).
 */
#ifndef DSP_CORE_RECONCILE_H
#define DSP_CORE_RECONCILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RECONCILE_GEN_MAX 64 /* bytes of a generation string, as the Redis gate allows */

/* What PostgreSQL says about a call id, at the re-check (step 3). */
enum reconcile_row {
	RECONCILE_ROW_ABSENT = 0, /* no call row with this id */
	RECONCILE_ROW_LIVE,	  /* state dialing, live or unknown: the call holds its slots */
	RECONCILE_ROW_ENDED,	  /* state ended: the call holds nothing */
};

enum reconcile_action {
	RECONCILE_KEEP = 0, /* slot record and live row agree; nothing to do */
	RECONCILE_YOUNG,    /* no row yet, taken within orphan_after_ms: its write may be in
			       * flight; kept */
	RECONCILE_RELEASE,  /* the row has ended: its release was lost; release the slot
			       * (idempotent per call id; no fence needed, an ended row never
			       * becomes live again) */
	RECONCILE_FENCE,    /* no row, older than orphan_after_ms: fence the call id
			       * (gate_pg_fence), then release the slot only if the fence answers
			       * fenced */
	RECONCILE_ADD,	    /* a row live at both reads without a slot record: the Redis
			       * counts miss a live call; add its slot */
	RECONCILE_GONE,	    /* a row live at step 1 that is no longer live at step 3 and has
			       * no slot record: it ended and was released meanwhile; nothing */
	RECONCILE_ACTION_COUNT,
};

/* A Redis slot record of the org (step 2). */
struct reconcile_slot {
	const char *call;	      /* call id, borrowed */
	uint64_t taken_ms;	      /* Redis time the slot was taken */
	enum reconcile_row row;	      /* in: the call's row at step 3 */
	enum reconcile_action action; /* out: KEEP, YOUNG, RELEASE or FENCE */
};

/* A call row of the org that was live at step 1. */
struct reconcile_call {
	const char *call;	      /* call id, borrowed */
	enum reconcile_row row;	      /* in: its row at step 3 */
	enum reconcile_action action; /* out: KEEP (has a slot record), ADD or GONE */
};

/* How many of each action (the reconciler's correction counters: RELEASE, FENCE and ADD are
 * corrections; KEEP, YOUNG and GONE are not). */
struct reconcile_summary {
	uint32_t count[RECONCILE_ACTION_COUNT];
	uint32_t corrections;	  /* RELEASE + FENCE + ADD */
	uint64_t oldest_young_ms; /* the largest age among YOUNG records (0: none) */
};

/* Classifies every slot record and every live call. Sorts both arrays in place by call id
 * (case-insensitive: uuids in either case name one call) and fills each entry's action and *sum. now_ms is Redis time; orphan_after_ms
 * is the call-row write deadline (plus whatever margin the caller wants). A call id present in
 * both arrays is one call. Returns 0, or -EINVAL (NULL arrays with a non-zero size, a NULL call
 * id, a call id twice in one array, a row state out of range). */
int reconcile_plan(struct reconcile_slot *slots, uint32_t n_slots, struct reconcile_call *calls,
		   uint32_t n_calls, uint64_t now_ms, uint64_t orphan_after_ms,
		   struct reconcile_summary *sum);

/* Whether a slot record of age now_ms - taken_ms is an orphan candidate (older than
 * orphan_after_ms; a record from the future has age 0). */
bool reconcile_is_orphan_age(uint64_t taken_ms, uint64_t now_ms, uint64_t orphan_after_ms);

/* Writes the generation string of a rebuild, "e<epoch>.<nonce as 16 hex digits>", into buf
 * (the C11 epoch it is built for and a random part the caller draws). Returns its length, or
 * -ENOSPC when size is too small (buf is then left empty when size > 0). */
int reconcile_generation(uint64_t epoch, uint64_t nonce, char *buf, size_t size);

/* Static names for logs and metrics labels. Never NULL ("unknown"). */
const char *reconcile_action_name(enum reconcile_action action);

#endif
