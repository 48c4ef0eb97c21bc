/* Deficit round robin selector; see drr.h for the contract and its bounds. */
#include "drr.h"

#include <errno.h>
#include <stddef.h>

int drr_init(struct drr *d, struct drr_entry *entries, uint32_t capacity, uint32_t quantum,
	     uint32_t carry_max)
{
	if (!d || (capacity && !entries) || quantum == 0 || capacity == DRR_NONE ||
	    carry_max > UINT32_MAX - quantum)
		return -EINVAL;
	*d = (struct drr){
		.entries = entries,
		.capacity = capacity,
		.head = DRR_NONE,
		.quantum = quantum,
		.carry_max = carry_max,
	};
	for (uint32_t i = 0; i < capacity; i++)
		entries[i] = (struct drr_entry){ .next = DRR_NONE, .prev = DRR_NONE };
	return 0;
}

static void advance(struct drr *d)
{
	d->head = d->entries[d->head].next;
	d->in_turn = false;
}

int drr_grow(struct drr *d, struct drr_entry *entries, uint32_t capacity)
{
	if (!d || !entries || capacity < d->capacity || capacity == DRR_NONE)
		return -EINVAL;
	for (uint32_t i = d->capacity; i < capacity; i++)
		entries[i] = (struct drr_entry){ .next = DRR_NONE, .prev = DRR_NONE };
	d->entries = entries;
	d->capacity = capacity;
	return 0;
}

uint32_t drr_turn_picks(const struct drr *d, uint32_t slot)
{
	uint64_t picks;

	if (!d || !drr_contains(d, slot))
		return 0;
	picks = d->entries[slot].deficit +
		(slot == d->head && d->in_turn ? 0 : (uint64_t)d->quantum);
	return picks > UINT32_MAX ? UINT32_MAX : (uint32_t)picks;
}

int drr_debit(struct drr *d, uint32_t slot)
{
	struct drr_entry *e;

	if (!d || slot >= d->capacity)
		return -EINVAL;
	e = &d->entries[slot];
	if (!e->linked)
		return -ENOENT;
	if (e->deficit == 0)
		return -EAGAIN;
	if (--e->deficit == 0 && slot == d->head && d->in_turn)
		advance(d); /* its turn is used up, as drr_next() would leave it */
	return 0;
}

bool drr_contains(const struct drr *d, uint32_t slot)
{
	return slot < d->capacity && d->entries[slot].linked;
}

int drr_add(struct drr *d, uint32_t slot)
{
	struct drr_entry *e;

	if (!d || slot >= d->capacity)
		return -EINVAL;
	e = &d->entries[slot];
	if (e->linked)
		return -EEXIST;
	*e = (struct drr_entry){ .linked = true };
	if (d->head == DRR_NONE) {
		e->next = e->prev = slot;
		d->head = slot;
		d->in_turn = false;
	} else {
		/* Last in the round: just before the campaign whose turn it is. */
		uint32_t tail = d->entries[d->head].prev;

		e->next = d->head;
		e->prev = tail;
		d->entries[tail].next = slot;
		d->entries[d->head].prev = slot;
	}
	d->count++;
	return 0;
}

int drr_remove(struct drr *d, uint32_t slot)
{
	struct drr_entry *e;

	if (!d || slot >= d->capacity)
		return -EINVAL;
	e = &d->entries[slot];
	if (!e->linked)
		return -ENOENT;
	if (--d->count == 0) {
		d->head = DRR_NONE;
		d->in_turn = false;
	} else {
		if (d->head == slot)
			advance(d);
		d->entries[e->prev].next = e->next;
		d->entries[e->next].prev = e->prev;
	}
	*e = (struct drr_entry){ .next = DRR_NONE, .prev = DRR_NONE };
	return 0;
}

/* Restores the `visited` campaigns from `start` on, and the turn, as they were before the call. */
static void undo(struct drr *d, uint32_t start, bool in_turn, uint32_t visited)
{
	uint32_t c = start;

	for (uint32_t i = 0; i < visited; i++) {
		d->entries[c].deficit = d->entries[c].saved;
		c = d->entries[c].next;
	}
	d->head = start;
	d->in_turn = in_turn;
}

/* drr_next's walk, asking ask(ctx, slot); see drr.h. */
static int walk(struct drr *d, drr_ready_cb *ask, void *ctx, uint32_t *slot)
{
	uint32_t start = d->head, visits = 0;
	bool start_in_turn = d->in_turn;

	while (visits < d->count) {
		uint32_t c = d->head;
		struct drr_entry *e = &d->entries[c];
		enum drr_ready r;

		e->saved = e->deficit;
		visits++;
		if (!d->in_turn) {
			e->deficit += d->quantum;
			d->in_turn = true;
		}
		r = e->deficit > 0 ? ask(ctx, c) : DRR_NOT_READY;
		if (r == DRR_READY) {
			if (--e->deficit == 0)
				advance(d);
			*slot = c;
			return 0;
		}
		if (r == DRR_BLOCKED)
			break;
		/* Could not use (the rest of) its turn: carry the remainder, bounded. */
		if (e->deficit > d->carry_max)
			e->deficit = d->carry_max;
		advance(d);
	}
	if (visits)
		undo(d, start, start_in_turn, visits);
	return -EAGAIN;
}

int drr_next(struct drr *d, drr_ready_cb *ready, void *ctx, uint32_t *slot)
{
	if (!d || !ready || !slot)
		return -EINVAL;
	return walk(d, ready, ctx, slot);
}

int drr_propose(const struct drr *d, uint32_t skip, uint32_t *out, uint32_t max, uint32_t *n)
{
	uint32_t c, listed = 0, seen = 0;

	if (!d || !n || (max && !out))
		return -EINVAL;
	c = d->head;
	/* The walk visits each campaign once, from the head; the head alone may be mid-turn. */
	for (uint32_t v = 0; v < d->count && listed < max; v++, c = d->entries[c].next) {
		const struct drr_entry *e = &d->entries[c];
		uint64_t picks = e->deficit + (v == 0 && d->in_turn ? 0 : (uint64_t)d->quantum);

		if (picks == 0)
			continue; /* drr_next passes it without asking */
		if (seen++ >= skip)
			out[listed++] = c;
	}
	*n = listed;
	return 0;
}

/* Answers drr_next's walk from the answers the gate gave to the proposed candidates. */
struct charge {
	const uint32_t *cand;
	const enum drr_ready *answers;
	uint32_t n, asked;
	bool stale;
};

static enum drr_ready charge_ask(void *ctx, uint32_t slot)
{
	struct charge *ch = ctx;

	if (ch->asked >= ch->n)
		return DRR_BLOCKED; /* not asked: no pick this time, nothing changes */
	if (ch->cand[ch->asked] != slot) {
		ch->stale = true;
		return DRR_BLOCKED;
	}
	return ch->answers[ch->asked++];
}

int drr_charge(struct drr *d, const uint32_t *cand, const enum drr_ready *answers, uint32_t n,
	       uint32_t *slot)
{
	struct charge ch = { .cand = cand, .answers = answers, .n = n };
	int rc;

	if (!d || !slot || (n && (!cand || !answers)))
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++) {
		if (answers[i] != DRR_READY && answers[i] != DRR_NOT_READY &&
		    answers[i] != DRR_BLOCKED)
			return -EINVAL;
		if (answers[i] != DRR_NOT_READY)
			break;
	}
	rc = walk(d, charge_ask, &ch, slot);
	return ch.stale ? -ESTALE : rc;
}
