/* Deficit round robin across one organisation's active campaigns (SPEC C8): which campaign's
 * contact is picked next.
 *
 * Campaigns sit on a ring in the order they joined. The campaign whose turn it is receives
 * `quantum` picks; it keeps being picked while it has picks left and the caller's ready callback
 * says it can use one (a ready contact and a slot the gate would grant). When it cannot, or its
 * picks are used up, the turn passes to the next campaign; the unused remainder is carried into
 * its next turn, capped at `carry_max`.
 *
 * Bounds (tests/unit/test_drr.c checks them):
 *   - A turn starts with at most quantum + carry_max picks; between turns a campaign holds at
 *     most carry_max. A newcomer joins at the end of the current round with 0 carried.
 *   - Campaigns that are ready at every visit get exactly `quantum` picks per round, so over any
 *     window of picks their counts differ by at most one quantum. A large old backlog cannot
 *     fill a page: with quantum 1 and two ready campaigns a page alternates.
 *   - drr_next() costs O(1) per pick plus O(1) per campaign whose turn it passes over; it
 *     visits each campaign at most once per call, so a call that finds nobody ready is
 *     O(campaigns) and returns -EAGAIN.
 *
 * Pure: no I/O, no allocation (entries are the caller's, indexed by the caller's slot numbers).
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

/* Whether campaign `slot` can use a pick now. ctx is the caller's, passed through. */
typedef bool drr_ready_cb(void *ctx, uint32_t slot);

/* Initialises d over entries[0..capacity) (borrowed until d is no longer used), with an empty
 * ring. Returns 0 or -EINVAL (NULL entries with a non-zero capacity, quantum 0, capacity equal
 * to DRR_NONE, quantum + carry_max above UINT32_MAX). */
int drr_init(struct drr *d, struct drr_entry *entries, uint32_t capacity, uint32_t quantum,
	     uint32_t carry_max);

/* Puts campaign `slot` on the ring, last in the current round, with nothing carried. O(1).
 * Returns 0, -EINVAL (slot out of range) or -EEXIST (already on the ring). */
int drr_add(struct drr *d, uint32_t slot);

/* Takes campaign `slot` off the ring (paused, stopped, no more demand) and forgets its carry.
 * If it had the turn, the turn passes to its successor. O(1). Returns 0, -EINVAL or -ENOENT. */
int drr_remove(struct drr *d, uint32_t slot);

/* True when `slot` is on the ring. */
bool drr_contains(const struct drr *d, uint32_t slot);

/* Picks the next campaign: returns 0 with *slot set (one pick charged to it), or -EAGAIN when no
 * campaign on the ring is ready (each was offered its turn once and carried its remainder), or
 * -EINVAL. ready is called at most once per campaign per call and must not change the ring. */
int drr_next(struct drr *d, drr_ready_cb *ready, void *ctx, uint32_t *slot);

#endif
