/* Deficit round robin across one organisation's active campaigns (SPEC C8): which campaign's
 * contact is picked next.
 *
 * Campaigns sit on a ring in the order they joined. The campaign whose turn it is receives
 * `quantum` picks; it keeps being picked while it has picks left and the caller's ready callback
 * says it can use one (a ready contact and a slot the gate would grant). When it cannot, or its
 * picks are used up, the turn passes to the next campaign; the unused remainder is carried into
 * its next turn, capped at `carry_max`.
 *
 * The ready callback answers in three ways: DRR_READY (the campaign takes the pick), DRR_NOT_READY
 * (this campaign cannot: no ready contact, or a level of its own refused) and DRR_BLOCKED (nobody
 * can: the organisation or the system level is full, or every free line is held for direct
 * dials; the gate tells it from the refusal's level, fairshare_gate_blocks_org()). A call that
 * makes no pick — a DRR_BLOCKED answer, or every campaign DRR_NOT_READY — leaves the selector
 * exactly as it was: the quanta it granted and the carries it trimmed are undone and the turn
 * stays where it was. So a stretch of "nobody can dial" between freed lines charges nobody and
 * moves no turn: with alternating "one line free" / "all refused", picks still rotate.
 *
 * Bounds (tests/unit/test_drr.c checks them):
 *   - A turn starts with at most quantum + carry_max picks; between turns a campaign holds at
 *     most carry_max. A newcomer joins at the end of the current round with 0 carried.
 *   - Campaigns that are ready at every visit get exactly `quantum` picks per round, so over any
 *     window of picks their counts differ by at most one quantum. A large old backlog cannot
 *     fill a page: with quantum 1 and two ready campaigns a page alternates.
 *   - drr_next() costs O(1) per pick plus O(1) per campaign whose turn it passes over; it
 *     visits each campaign at most once per call. A DRR_BLOCKED answer ends the call at once
 *     (one callback when the org is full); a call where every campaign is DRR_NOT_READY is
 *     O(campaigns). Both return -EAGAIN and change nothing.
 *
 * Pure: no I/O, no allocation (entries are the caller's, indexed by the caller's slot numbers).
 * The caller grows the entries when it has more campaigns (drr_grow(): a larger copy of the
 * same entries, the ring, deficits and turn unchanged) and may start over with none once the
 * ring is empty (drr_init()).
 */
#ifndef DSP_CORE_DRR_H
#define DSP_CORE_DRR_H

#include <stdbool.h>
#include <stdint.h>

#define DRR_NONE UINT32_MAX

struct drr_entry {
	uint32_t next;	  /* ring successor (internal) */
	uint32_t prev;	  /* ring predecessor (internal) */
	uint32_t deficit; /* picks left in the current turn, or carried into the next */
	uint32_t saved;	  /* deficit before this call's visit, to undo a call without a pick */
	bool linked;	  /* on the ring */
};

struct drr {
	struct drr_entry *entries; /* borrowed for the selector's life */
	uint32_t capacity;	   /* entries */
	uint32_t head;		   /* campaign whose turn it is, DRR_NONE when the ring is empty */
	uint32_t count;		   /* campaigns on the ring */
	uint32_t quantum;	   /* picks granted per turn, >= 1 */
	uint32_t carry_max;	   /* largest remainder carried into a next turn */
	bool in_turn;		   /* head's quantum has been granted */
};

/* The ready callback's answer. */
enum drr_ready {
	DRR_READY = 0, /* the campaign uses the pick (the caller has taken its slot) */
	DRR_NOT_READY, /* this campaign cannot use a pick now; its turn passes */
	DRR_BLOCKED,   /* no campaign can use a pick now (org or system level full) */
};

/* Whether campaign `slot` can use a pick now. ctx is the caller's, passed through. */
typedef enum drr_ready drr_ready_cb(void *ctx, uint32_t slot);

/* Initialises d over entries[0..capacity) (borrowed until d is no longer used), with an empty
 * ring. Returns 0 or -EINVAL (NULL entries with a non-zero capacity, quantum 0, capacity equal
 * to DRR_NONE, quantum + carry_max above UINT32_MAX). */
int drr_init(struct drr *d, struct drr_entry *entries, uint32_t capacity, uint32_t quantum,
	     uint32_t carry_max);

/* Moves d onto entries[0..capacity), a larger array whose first d->capacity entries are a copy
 * of d's (realloc() of the old array gives one): the new entries are initialised off the ring;
 * the ring, the deficits and the turn are unchanged. The old array is no longer used. Returns 0
 * or -EINVAL (NULL entries, capacity below d->capacity or equal to DRR_NONE). O(new entries). */
int drr_grow(struct drr *d, struct drr_entry *entries, uint32_t capacity);

/* The picks campaign `slot` gets at its next visit of a walk: its deficit, plus the quantum
 * unless it is the campaign whose turn it is and its quantum has been granted already. 0 when
 * it is not on the ring. The worker claims no more contacts for a campaign than that when its
 * ring is larger than what one claim covers. */
uint32_t drr_turn_picks(const struct drr *d, uint32_t slot);

/* A pick the caller made for campaign `slot` out of turn: an asynchronous admission answered
 * after the ring had already passed the campaign (its proposal stale, drr_charge() -ESTALE).
 * The pick is taken from what the campaign carries; the ring and the turn do not move (walking
 * to it instead would pass every other campaign for a whole round). Returns 0, -ENOENT (not on
 * the ring), -EAGAIN (nothing carried: the pick goes uncharged, drr_charge()'s bounded error of
 * one pick) or -EINVAL. O(1). */
int drr_debit(struct drr *d, uint32_t slot);

/* Puts campaign `slot` on the ring, last in the current round, with nothing carried. O(1).
 * Returns 0, -EINVAL (slot out of range) or -EEXIST (already on the ring). */
int drr_add(struct drr *d, uint32_t slot);

/* Takes campaign `slot` off the ring (paused, stopped, no more demand) and forgets its carry.
 * If it had the turn, the turn passes to its successor. O(1). Returns 0, -EINVAL or -ENOENT. */
int drr_remove(struct drr *d, uint32_t slot);

/* True when `slot` is on the ring. */
bool drr_contains(const struct drr *d, uint32_t slot);

/* Picks the next campaign: returns 0 with *slot set (one pick charged to it, and the turns it
 * passed over carried), or -EAGAIN when no pick was made (an answer DRR_BLOCKED, or every
 * campaign DRR_NOT_READY; the selector is left as it was), or -EINVAL. ready is called at most
 * once per campaign per call and must not change the ring. */
int drr_next(struct drr *d, drr_ready_cb *ready, void *ctx, uint32_t *slot);

/* The asynchronous face, for a gate that answers an ordered list of candidates in one round
 * trip (dispatcher/gate/gate.h, struct gate_admit_req):
 *
 *     drr_propose(d, 0, cand, 16, &n);         candidates, in drr_next's order
 *     ... the gate admits the first it can, answering each candidate it evaluated ...
 *     drr_charge(d, cand, answers, k, &slot);  the same effect as drr_next with those answers
 *
 * drr_propose() changes nothing; drr_charge() leaves the selector exactly as drr_next() would
 * have left it had its ready callback answered answers[i] for cand[i] (tests/unit/test_drr.c
 * runs every drr_next test through this face too, and compares the two on random histories).
 * A walk longer than one request continues with skip: drr_propose(d, 16, cand + 16, 16, &m)
 * lists the next candidates, and the answers of both requests are charged together. */

/* Lists the campaigns drr_next() would ask, in the order it would ask them, leaving out the
 * first skip of them: writes up to max slots into out[] and their number into *n (fewer when the
 * walk ends; each campaign is listed at most once per walk). Changes nothing; O(skip + max).
 * Returns 0 or -EINVAL. */
int drr_propose(const struct drr *d, uint32_t skip, uint32_t *out, uint32_t max, uint32_t *n);

/* Applies the answers to the candidates cand[0..n) that drr_propose() listed from skip 0:
 * answers[i] is DRR_READY (admitted: cand[i] is charged one pick), DRR_NOT_READY (refused at a
 * level of its own, or no contact ready) or DRR_BLOCKED (refused for every campaign). Answers
 * after the first DRR_READY or DRR_BLOCKED are ignored; candidates past n count as not asked (no
 * pick). Returns 0 with *slot set to the charged campaign; -EAGAIN when no pick was made (the
 * selector is left as it was); -ESTALE when the ring changed since drr_propose() so that
 * cand[] is no longer the start of drr_next()'s walk (nothing changes: an admitted pick goes
 * uncharged, a bounded error of one pick); -EINVAL (an answer out of range, NULL arrays). cand
 * and answers are borrowed for the call. */
int drr_charge(struct drr *d, const uint32_t *cand, const enum drr_ready *answers, uint32_t n,
	       uint32_t *slot);

#endif
