/* Reconcile plan: see reconcile.h for the read protocol and the orphan rule. */
#include "reconcile.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool reconcile_is_orphan_age(uint64_t taken_ms, uint64_t now_ms, uint64_t orphan_after_ms)
{
	uint64_t age = now_ms > taken_ms ? now_ms - taken_ms : 0;

	return age > orphan_after_ms;
}

/* Call ids are uuids, which gate_pg_write() takes in either case while PostgreSQL answers them
 * in lower case (id::text), and Redis keeps them as the worker spelled them: one call whatever
 * the case, or a live call would look like a lost slot (ADD) and be counted twice. */
static int id_cmp(const char *a, const char *b)
{
	return strcasecmp(a, b);
}

static int cmp_slot(const void *a, const void *b)
{
	return id_cmp(((const struct reconcile_slot *)a)->call,
		      ((const struct reconcile_slot *)b)->call);
}

static int cmp_call(const void *a, const void *b)
{
	return id_cmp(((const struct reconcile_call *)a)->call,
		      ((const struct reconcile_call *)b)->call);
}

static bool row_ok(enum reconcile_row r)
{
	return (unsigned)r <= RECONCILE_ROW_ENDED;
}

/* Checks the inputs and sorts them; -EINVAL on a NULL id, a bad row state or a duplicate. */
static int prepare(struct reconcile_slot *slots, uint32_t n_slots, struct reconcile_call *calls,
		   uint32_t n_calls)
{
	for (uint32_t i = 0; i < n_slots; i++)
		if (!slots[i].call || !row_ok(slots[i].row))
			return -EINVAL;
	for (uint32_t i = 0; i < n_calls; i++)
		if (!calls[i].call || !row_ok(calls[i].row))
			return -EINVAL;
	if (n_slots > 1)
		qsort(slots, n_slots, sizeof(*slots), cmp_slot);
	if (n_calls > 1)
		qsort(calls, n_calls, sizeof(*calls), cmp_call);
	for (uint32_t i = 1; i < n_slots; i++)
		if (id_cmp(slots[i - 1].call, slots[i].call) == 0)
			return -EINVAL;
	for (uint32_t i = 1; i < n_calls; i++)
		if (id_cmp(calls[i - 1].call, calls[i].call) == 0)
			return -EINVAL;
	return 0;
}

static enum reconcile_action slot_action(const struct reconcile_slot *s, uint64_t now_ms,
					 uint64_t orphan_after_ms)
{
	switch (s->row) {
	case RECONCILE_ROW_LIVE:
		return RECONCILE_KEEP;
	case RECONCILE_ROW_ENDED:
		return RECONCILE_RELEASE;
	case RECONCILE_ROW_ABSENT:
	default:
		return reconcile_is_orphan_age(s->taken_ms, now_ms, orphan_after_ms)
			       ? RECONCILE_FENCE
			       : RECONCILE_YOUNG;
	}
}

int reconcile_plan(struct reconcile_slot *slots, uint32_t n_slots, struct reconcile_call *calls,
		   uint32_t n_calls, uint64_t now_ms, uint64_t orphan_after_ms,
		   struct reconcile_summary *sum)
{
	uint32_t j = 0;
	int rc;

	if (!sum || (n_slots && !slots) || (n_calls && !calls))
		return -EINVAL;
	rc = prepare(slots, n_slots, calls, n_calls);
	if (rc)
		return rc;
	*sum = (struct reconcile_summary){ 0 };
	for (uint32_t i = 0; i < n_slots; i++) {
		struct reconcile_slot *s = &slots[i];

		s->action = slot_action(s, now_ms, orphan_after_ms);
		if (s->action == RECONCILE_YOUNG && now_ms > s->taken_ms &&
		    now_ms - s->taken_ms > sum->oldest_young_ms)
			sum->oldest_young_ms = now_ms - s->taken_ms;
		sum->count[s->action]++;
	}
	/* Merge: a call that has a slot record was classified with the record. */
	for (uint32_t i = 0; i < n_calls; i++) {
		struct reconcile_call *c = &calls[i];
		int order = 1;

		while (j < n_slots && (order = id_cmp(slots[j].call, c->call)) < 0)
			j++;
		if (j < n_slots && order == 0)
			c->action = RECONCILE_KEEP; /* counted with its slot record */
		else if (c->row == RECONCILE_ROW_LIVE)
			sum->count[c->action = RECONCILE_ADD]++;
		else
			sum->count[c->action = RECONCILE_GONE]++;
	}
	sum->corrections = sum->count[RECONCILE_RELEASE] + sum->count[RECONCILE_FENCE] +
			   sum->count[RECONCILE_ADD];
	return 0;
}

int reconcile_generation(uint64_t epoch, uint64_t nonce, char *buf, size_t size)
{
	int n;

	if (!buf || size == 0)
		return -ENOSPC;
	n = snprintf(buf, size, "e%" PRIu64 ".%016" PRIx64, epoch, nonce);
	if (n < 0 || (size_t)n >= size || n > RECONCILE_GEN_MAX) {
		buf[0] = '\0';
		return -ENOSPC;
	}
	return n;
}

const char *reconcile_action_name(enum reconcile_action action)
{
	static const char *const names[] = {
		[RECONCILE_KEEP] = "keep",	 [RECONCILE_YOUNG] = "young",
		[RECONCILE_RELEASE] = "release", [RECONCILE_FENCE] = "fence",
		[RECONCILE_ADD] = "add",	 [RECONCILE_GONE] = "gone",
	};

	if ((unsigned)action < RECONCILE_ACTION_COUNT)
		return names[action];
	return "unknown";
}
