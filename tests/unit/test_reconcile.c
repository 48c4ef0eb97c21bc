/* Reconcile plan (dispatcher/core/reconcile.h): a slot record without a call row is an orphan
 * only when older than the write deadline — at, below and above it, and from the future; rows
 * that ended give a release, live rows without a record an add, rows that ended meanwhile
 * nothing; matching of the two lists whatever their order; bad input; the generation string. */
#include "reconcile.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#define DEADLINE 2000u
#define NOW	 1700000000000ull /* Redis time, ms */

static enum reconcile_action one_absent_slot(uint64_t taken_ms)
{
	struct reconcile_slot s = { .call = "c1",
				    .taken_ms = taken_ms,
				    .row = RECONCILE_ROW_ABSENT };
	struct reconcile_summary sum;

	assert_int_equal(reconcile_plan(&s, 1, NULL, 0, NOW, DEADLINE, &sum), 0);
	assert_int_equal(sum.count[s.action], 1);
	assert_int_equal(sum.corrections, s.action == RECONCILE_FENCE ? 1 : 0);
	return s.action;
}

/* Only records strictly older than the deadline are orphans. */
static void orphan_at_below_above_deadline(void **state)
{
	assert_int_equal(one_absent_slot(NOW - DEADLINE + 1), RECONCILE_YOUNG); /* below */
	assert_int_equal(one_absent_slot(NOW - DEADLINE), RECONCILE_YOUNG);	/* at */
	assert_int_equal(one_absent_slot(NOW - DEADLINE - 1), RECONCILE_FENCE); /* above */
	assert_int_equal(one_absent_slot(NOW), RECONCILE_YOUNG);		/* just taken */
	assert_int_equal(one_absent_slot(0), RECONCILE_FENCE);			/* ancient */
	/* Taken after now (the Redis clock stepped back): age 0, kept. */
	assert_int_equal(one_absent_slot(NOW + 60000), RECONCILE_YOUNG);
	assert_false(reconcile_is_orphan_age(NOW - DEADLINE, NOW, DEADLINE));
	assert_true(reconcile_is_orphan_age(NOW - DEADLINE - 1, NOW, DEADLINE));
	assert_false(reconcile_is_orphan_age(UINT64_MAX, 0, 0));
	assert_true(reconcile_is_orphan_age(0, UINT64_MAX, UINT64_MAX - 1));
	/* A zero deadline: anything with an age is an orphan, age 0 is not. */
	assert_false(reconcile_is_orphan_age(NOW, NOW, 0));
	assert_true(reconcile_is_orphan_age(NOW - 1, NOW, 0));
}

/* Age does not matter once the row is known: live keeps, ended releases, however old. */
static void rows_decide_before_age(void **state)
{
	struct reconcile_slot s[] = {
		{ .call = "a", .taken_ms = 0, .row = RECONCILE_ROW_LIVE },
		{ .call = "b", .taken_ms = NOW, .row = RECONCILE_ROW_LIVE },
		{ .call = "c", .taken_ms = 0, .row = RECONCILE_ROW_ENDED },
		{ .call = "d", .taken_ms = NOW, .row = RECONCILE_ROW_ENDED },
	};
	struct reconcile_summary sum;

	assert_int_equal(reconcile_plan(s, 4, NULL, 0, NOW, DEADLINE, &sum), 0);
	assert_int_equal(s[0].action, RECONCILE_KEEP);
	assert_int_equal(s[1].action, RECONCILE_KEEP);
	assert_int_equal(s[2].action, RECONCILE_RELEASE);
	assert_int_equal(s[3].action, RECONCILE_RELEASE);
	assert_int_equal(sum.count[RECONCILE_KEEP], 2);
	assert_int_equal(sum.count[RECONCILE_RELEASE], 2);
	assert_int_equal(sum.corrections, 2);
	assert_int_equal(sum.oldest_young_ms, 0);
}

static const struct reconcile_slot *slot_named(const struct reconcile_slot *s, uint32_t n,
					       const char *call)
{
	for (uint32_t i = 0; i < n; i++)
		if (strcmp(s[i].call, call) == 0)
			return &s[i];
	fail_msg("no slot %s", call);
	return NULL;
}

static const struct reconcile_call *call_named(const struct reconcile_call *c, uint32_t n,
					       const char *call)
{
	for (uint32_t i = 0; i < n; i++)
		if (strcmp(c[i].call, call) == 0)
			return &c[i];
	fail_msg("no call %s", call);
	return NULL;
}

/* Both lists unsorted and overlapping: every action once, matched by call id. */
static void merges_both_lists(void **state)
{
	struct reconcile_slot s[] = {
		{ .call = "k-live", .taken_ms = 0, .row = RECONCILE_ROW_LIVE },
		{ .call = "f-orphan", .taken_ms = NOW - 5000, .row = RECONCILE_ROW_ABSENT },
		{ .call = "y-young", .taken_ms = NOW - 1500, .row = RECONCILE_ROW_ABSENT },
		{ .call = "r-ended", .taken_ms = NOW - 10, .row = RECONCILE_ROW_ENDED },
		{ .call = "b-young", .taken_ms = NOW - 700, .row = RECONCILE_ROW_ABSENT },
	};
	struct reconcile_call c[] = {
		{ .call = "z-missing", .row = RECONCILE_ROW_LIVE },
		{ .call = "k-live", .row = RECONCILE_ROW_LIVE },
		{ .call = "g-ended-meanwhile", .row = RECONCILE_ROW_ENDED },
		{ .call = "a-missing", .row = RECONCILE_ROW_LIVE },
		{ .call = "h-gone", .row = RECONCILE_ROW_ABSENT },
		{ .call = "r-ended", .row = RECONCILE_ROW_ENDED },
	};
	struct reconcile_summary sum;

	assert_int_equal(reconcile_plan(s, 5, c, 6, NOW, DEADLINE, &sum), 0);
	for (int i = 1; i < 5; i++)
		assert_true(strcmp(s[i - 1].call, s[i].call) < 0); /* sorted in place */
	assert_int_equal(slot_named(s, 5, "k-live")->action, RECONCILE_KEEP);
	assert_int_equal(slot_named(s, 5, "f-orphan")->action, RECONCILE_FENCE);
	assert_int_equal(slot_named(s, 5, "y-young")->action, RECONCILE_YOUNG);
	assert_int_equal(slot_named(s, 5, "b-young")->action, RECONCILE_YOUNG);
	assert_int_equal(slot_named(s, 5, "r-ended")->action, RECONCILE_RELEASE);
	assert_int_equal(call_named(c, 6, "k-live")->action, RECONCILE_KEEP);
	assert_int_equal(call_named(c, 6, "r-ended")->action, RECONCILE_KEEP); /* with its slot */
	assert_int_equal(call_named(c, 6, "z-missing")->action, RECONCILE_ADD);
	assert_int_equal(call_named(c, 6, "a-missing")->action, RECONCILE_ADD);
	assert_int_equal(call_named(c, 6, "g-ended-meanwhile")->action, RECONCILE_GONE);
	assert_int_equal(call_named(c, 6, "h-gone")->action, RECONCILE_GONE);
	assert_int_equal(sum.count[RECONCILE_KEEP], 1);
	assert_int_equal(sum.count[RECONCILE_YOUNG], 2);
	assert_int_equal(sum.count[RECONCILE_FENCE], 1);
	assert_int_equal(sum.count[RECONCILE_RELEASE], 1);
	assert_int_equal(sum.count[RECONCILE_ADD], 2);
	assert_int_equal(sum.count[RECONCILE_GONE], 2);
	assert_int_equal(sum.corrections, 4);
	assert_int_equal(sum.oldest_young_ms, 1500);
}

/* A call id spelled in upper case by the worker (so in its Redis record) and in lower case by
 * PostgreSQL (id::text) is one call: kept, not added a second time. */
static void ids_match_whatever_the_case(void **state)
{
	struct reconcile_slot s[] = {
		{ .call = "0000000A-0000-4000-8000-00000000000B",
		  .taken_ms = NOW,
		  .row = RECONCILE_ROW_LIVE },
	};
	struct reconcile_call c[] = {
		{ .call = "0000000a-0000-4000-8000-00000000000b", .row = RECONCILE_ROW_LIVE },
	};
	struct reconcile_slot dup[] = {
		{ .call = "0000000A-0000-4000-8000-00000000000B", .row = RECONCILE_ROW_LIVE },
		{ .call = "0000000a-0000-4000-8000-00000000000b", .row = RECONCILE_ROW_LIVE },
	};
	struct reconcile_summary sum;

	assert_int_equal(reconcile_plan(s, 1, c, 1, NOW, DEADLINE, &sum), 0);
	assert_int_equal(s[0].action, RECONCILE_KEEP);
	assert_int_equal(c[0].action, RECONCILE_KEEP);
	assert_int_equal(sum.count[RECONCILE_ADD], 0);
	assert_int_equal(sum.corrections, 0);
	/* The same call twice in one list is bad input, whatever the case. */
	assert_int_equal(reconcile_plan(dup, 2, NULL, 0, NOW, DEADLINE, &sum), -EINVAL);
}

static void nothing_to_do(void **state)
{
	struct reconcile_summary sum = { .corrections = 99 };

	assert_int_equal(reconcile_plan(NULL, 0, NULL, 0, NOW, DEADLINE, &sum), 0);
	assert_int_equal(sum.corrections, 0);
	for (int a = 0; a < RECONCILE_ACTION_COUNT; a++)
		assert_int_equal(sum.count[a], 0);
}

static void bad_input(void **state)
{
	struct reconcile_summary sum;
	struct reconcile_slot dup[] = { { .call = "x" }, { .call = "x" } };
	struct reconcile_call cdup[] = { { .call = "y" }, { .call = "y" } };
	struct reconcile_slot nul[] = { { .call = NULL } };
	struct reconcile_call bad_row[] = { { .call = "z", .row = (enum reconcile_row)7 } };

	assert_int_equal(reconcile_plan(NULL, 1, NULL, 0, NOW, DEADLINE, &sum), -EINVAL);
	assert_int_equal(reconcile_plan(NULL, 0, NULL, 1, NOW, DEADLINE, &sum), -EINVAL);
	assert_int_equal(reconcile_plan(NULL, 0, NULL, 0, NOW, DEADLINE, NULL), -EINVAL);
	assert_int_equal(reconcile_plan(dup, 2, NULL, 0, NOW, DEADLINE, &sum), -EINVAL);
	assert_int_equal(reconcile_plan(NULL, 0, cdup, 2, NOW, DEADLINE, &sum), -EINVAL);
	assert_int_equal(reconcile_plan(nul, 1, NULL, 0, NOW, DEADLINE, &sum), -EINVAL);
	assert_int_equal(reconcile_plan(NULL, 0, bad_row, 1, NOW, DEADLINE, &sum), -EINVAL);
}

static void generation_and_names(void **state)
{
	char buf[RECONCILE_GEN_MAX + 1], small[8] = "xxxxxxx";

	assert_int_equal(reconcile_generation(42, 0xabcdefULL, buf, sizeof(buf)), 20);
	assert_string_equal(buf, "e42.0000000000abcdef");
	assert_int_equal(reconcile_generation(UINT64_MAX, UINT64_MAX, buf, sizeof(buf)), 38);
	assert_string_equal(buf, "e18446744073709551615.ffffffffffffffff");
	assert_int_equal(reconcile_generation(1, 1, small, sizeof(small)), -ENOSPC);
	assert_string_equal(small, "");
	assert_int_equal(reconcile_generation(1, 1, NULL, 0), -ENOSPC);
	assert_string_equal(reconcile_action_name(RECONCILE_FENCE), "fence");
	assert_string_equal(reconcile_action_name(RECONCILE_GONE), "gone");
	assert_string_equal(reconcile_action_name(RECONCILE_ACTION_COUNT), "unknown");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(orphan_at_below_above_deadline),
		cmocka_unit_test(rows_decide_before_age),
		cmocka_unit_test(merges_both_lists),
		cmocka_unit_test(ids_match_whatever_the_case),
		cmocka_unit_test(nothing_to_do),
		cmocka_unit_test(bad_input),
		cmocka_unit_test(generation_and_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
