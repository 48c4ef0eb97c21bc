/* The hand-off's waking order and its index (issue 8, SPEC C9; dispatcher/gate/README.md
 * "Hand-off", gate_wc.lua.inc) beyond the eight campaigns the wake used to examine, after floors
 * installs (full and delta), for a batch waiter refused on several candidates, and the "demand
 * below floor" report a release publishes on dsp:v1:refresh, on both of its paths, and the
 * cost cuts' fast paths (merged_paths). One process against a real Redis;
 * the markers are the scripts' replies (who was woken, refresh), the hand-off keys and, for the
 * refresh, a subscriber's count of the messages; a batch waiter refused again re-registered
 * under its latest candidates (reregistered_under_latest). */
#include "fixture.h"
#include "gate_harness.h"
#include "redis_sub.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static struct embedded svc;
static const char *const org1[] = { "o1", NULL };

struct op {
	int calls, status, outcome, waiter;
	struct gate_handoff_result h;
};

static void op_admit_cb(struct gate *g, int status, const struct gate_admit_result *r, void *data)
{
	struct op *o = data;
	o->status = status;
	o->outcome = r ? (int)r->outcome : -1;
	o->waiter = r ? r->waiter : 0;
	o->calls++;
}

static void op_handoff_cb(struct gate *g, int status, const struct gate_handoff_result *r,
			  void *data)
{
	struct op *o = data;
	o->status = status;
	if (r)
		o->h = *r;
	o->calls++;
}

static long long key_count(struct gate_env *e, const char *cmd, const char *what)
{
	char key[128];

	assert_true(gate_org_key("o1", what, key, sizeof(key)) > 0);
	return genv_cmd(e, NULL, 0, cmd, key, NULL);
}

/* An admission with the wait flag for worker "walive", candidates space-separated; its outcome
 * (and, when waiter is not NULL, the reply's waiter: +1 registered, -1 withdrawn, 0 none). */
static int admit_wait_w(struct gate_env *e, const char *call, const char *candidates, int *waiter)
{
	char buf[256], *save = NULL;
	const char *cands[16];
	uint32_t n = 0;
	struct op o = { 0 };

	snprintf(buf, sizeof(buf), "%s", candidates);
	for (char *t = strtok_r(buf, " ", &save); t && n < 16; t = strtok_r(NULL, " ", &save))
		cands[n++] = t;
	assert_int_equal(gate_admit(e->g,
				    &(struct gate_admit_req){ .org = "o1",
							      .call = call,
							      .campaigns = cands,
							      .n_campaigns = n,
							      .wait = true,
							      .worker = "walive" },
				    op_admit_cb, &o),
			 0);
	fixture_run_until_count(&e->loop, &o.calls, 1, GENV_TIMEOUT_MS);
	assert_int_equal(o.status, 0);
	if (waiter)
		*waiter = o.waiter;
	return o.outcome;
}

static int admit_wait(struct gate_env *e, const char *call, const char *candidates)
{
	return admit_wait_w(e, call, candidates, NULL);
}

static void register_waiter(struct gate_env *e, const char *call, const char *candidates)
{
	assert_int_equal(admit_wait(e, call, candidates), GATE_REFUSED);
}

static void beat(struct gate_env *e)
{
	struct op o = { 0 };

	assert_int_equal(gate_handoff_beat(e->g, "o1", "walive", 600000, op_handoff_cb, &o), 0);
	fixture_run_until_count(&e->loop, &o.calls, 1, GENV_TIMEOUT_MS);
	assert_int_equal(o.status, 0);
}

static void admit_fill(struct gate_env *e, const char *call, const char *campaign)
{
	struct admit_out o = genv_admit(e, "o1", call, campaign);
	assert_int_equal(o.status, 0);
	assert_int_equal(o.r.outcome, GATE_ADMITTED);
}

static struct release_out release_one(struct gate_env *e, const char *call)
{
	struct release_out r = genv_release(e, "o1", call);
	assert_int_equal(r.status, 0);
	assert_int_equal(r.r.outcome, GATE_FREED);
	return r;
}

/* Releases call and checks that exactly want was woken (NULL: nobody). */
static void release_wakes(struct gate_env *e, const char *call, const char *want)
{
	struct release_out r = release_one(e, call);

	print_message("release %s: woken %u %s\n", call, r.r.woken, r.woken_call);
	assert_int_equal(r.r.woken, want ? 1 : 0);
	assert_string_equal(r.woken_call, want ? want : "");
}

/* Fourteen campaigns wait (one waiter each, two on zs), eight of them at their ceiling (k1..k8,
 * running - floor 0): C9's order is zs (-2), then ys and zs (-1, ties by id), then wa and xa
 * (+1), then va (+2); the k's only once a line of theirs ends. The wake used to examine the 8
 * lowest scores: the eight k's, all refused, and woke nobody from the fourth release on. */
static void order_beyond_eight(void **state)
{
	static const struct {
		const char *release, *woken, *campaign;
	} steps[] = {
		{ "f1", "zs1", "zs" },	{ "f2", "ys1", "ys" }, { "f3", "zs2", "zs" },
		{ "f4", "wa1", "wa" },	{ "f5", "xa1", "xa" }, { "f6", "va1", "va" },
		{ "k1c", "k1w", "k1" },
	};
	struct gate_env e;
	char call[16], camp[16];

	genv_open(&e, svc.redis_url, "parent", true);
	assert_int_equal(gate_set_wake_deadline(e.g, 60000), 0);
	genv_fresh(&e, 1000, org1);
	assert_int_equal(genv_limits(&e, "o1", 1, 100, 0, true,
				     "zs:: ys:: wa:: xa:: va:: f:: k1:1: k2:1: k3:1: k4:1: k5:1: "
				     "k6:1: k7:1: k8:1:",
				     NULL),
			 0);
	assert_int_equal(genv_floors(&e, "o1", 1, 600000,
				     "zs:2 ys:1 k1:1 k2:1 k3:1 k4:1 k5:1 k6:1 k7:1 k8:1", NULL),
			 0);
	for (int i = 1; i <= 8; i++) {
		snprintf(call, sizeof(call), "k%dc", i);
		snprintf(camp, sizeof(camp), "k%d", i);
		admit_fill(&e, call, camp);
	}
	admit_fill(&e, "xa0", "xa");
	admit_fill(&e, "wa0", "wa");
	admit_fill(&e, "va0", "va");
	admit_fill(&e, "va00", "va");
	for (int i = 1; i <= 6; i++) {
		snprintf(call, sizeof(call), "f%d", i);
		admit_fill(&e, call, "f");
	}
	/* The org is full (18 of 18). */
	assert_int_equal(genv_limits(&e, "o1", 2, 18, 0, true,
				     "zs:: ys:: wa:: xa:: va:: f:: k1:1: k2:1: k3:1: k4:1: k5:1: "
				     "k6:1: k7:1: k8:1:",
				     NULL),
			 0);
	beat(&e);
	register_waiter(&e, "zs1", "zs");
	register_waiter(&e, "zs2", "zs");
	register_waiter(&e, "ys1", "ys");
	for (int i = 1; i <= 8; i++) {
		snprintf(call, sizeof(call), "k%dw", i);
		snprintf(camp, sizeof(camp), "k%d", i);
		register_waiter(&e, call, camp);
	}
	register_waiter(&e, "xa1", "xa");
	register_waiter(&e, "wa1", "wa");
	register_waiter(&e, "va1", "va");
	assert_int_equal(key_count(&e, "ZCARD", "wc"), 13);

	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		release_wakes(&e, steps[i].release, steps[i].woken);
		/* The woken waiter takes its line (org full again). */
		assert_int_equal(admit_wait(&e, steps[i].woken, steps[i].campaign), GATE_ADMITTED);
	}
	assert_int_equal(key_count(&e, "ZCARD", "wc"), 7); /* k2..k8 */
	assert_int_equal(key_count(&e, "ZCARD", "wdl"), 0);
	genv_close(&e);
}

/* Ten campaigns wait, running 1 each: c0..c7 at their floor (1), c8 and c9 above it (floor 0).
 * A full floors install gives c9 floor 2 (a shortfall): the next free line is c9's, though
 * c0..c7 were ahead before. A delta install then gives c8 floor 3: c8 (-2) comes first. The
 * wake used to re-score only the 8 lowest stored scores (c0..c7, refused: c9's shortfall is
 * reserved) and woke nobody. */
static void order_after_floors_install(void **state)
{
	struct gate_env e;
	char call[16], camp[16], limits[256] = "f::";

	genv_open(&e, svc.redis_url, "parent", true);
	assert_int_equal(gate_set_wake_deadline(e.g, 60000), 0);
	genv_fresh(&e, 1000, org1);
	for (int i = 0; i < 10; i++) {
		size_t len = strlen(limits);
		snprintf(limits + len, sizeof(limits) - len, " c%d::", i);
	}
	assert_int_equal(genv_limits(&e, "o1", 1, 100, 0, true, limits, NULL), 0);
	assert_int_equal(genv_floors(&e, "o1", 1, 600000,
				     "c0:1 c1:1 c2:1 c3:1 c4:1 c5:1 c6:1 c7:1 c8:0 c9:0", NULL),
			 0);
	for (int i = 0; i < 10; i++) {
		snprintf(call, sizeof(call), "r%d", i);
		snprintf(camp, sizeof(camp), "c%d", i);
		admit_fill(&e, call, camp);
	}
	admit_fill(&e, "f1", "f");
	admit_fill(&e, "f2", "f");
	assert_int_equal(genv_limits(&e, "o1", 2, 12, 0, true, limits, NULL), 0); /* full */
	beat(&e);
	for (int i = 0; i < 10; i++) {
		snprintf(call, sizeof(call), "w%d", i);
		snprintf(camp, sizeof(camp), "c%d", i);
		register_waiter(&e, call, camp);
	}

	assert_int_equal(genv_floors(&e, "o1", 2, 600000,
				     "c0:1 c1:1 c2:1 c3:1 c4:1 c5:1 c6:1 c7:1 c8:0 c9:2", NULL),
			 0);
	release_wakes(&e, "f1", "w9");
	assert_int_equal(admit_wait(&e, "w9", "c9"), GATE_ADMITTED);

	assert_int_equal(genv_floors_delta(&e, "o1", 2, 3, 600000, "c8:3", NULL), 0);
	release_wakes(&e, "f2", "w8");
	assert_int_equal(admit_wait(&e, "w8", "c8"), GATE_ADMITTED);
	genv_close(&e);
}

/* A batch waiter refused on A (at its ceiling) and B waits under both: the free line wakes it
 * through B, once; its entry under A goes with it, so a later line of A wakes w2 (queued under A
 * after it), not it. It used to wait under A only, where nothing could wake it. */
static void multi_candidate_woken_once(void **state)
{
	struct gate_env e;

	genv_open(&e, svc.redis_url, "parent", true);
	assert_int_equal(gate_set_wake_deadline(e.g, 60000), 0);
	genv_fresh(&e, 1000, org1);
	assert_int_equal(genv_limits(&e, "o1", 1, 4, 0, true, "A:1: B:: F::", NULL), 0);
	admit_fill(&e, "a1", "A");
	admit_fill(&e, "f1", "F");
	admit_fill(&e, "f2", "F");
	admit_fill(&e, "f3", "F");
	beat(&e);
	register_waiter(&e, "m", "A B");
	register_waiter(&e, "w2", "A");
	assert_int_equal(key_count(&e, "ZCARD", "wq"), 3); /* m under A and B, w2 under A */
	assert_int_equal(key_count(&e, "ZCARD", "wc"), 2);

	release_wakes(&e, "f1", "m");
	assert_int_equal(key_count(&e, "ZCARD", "wq"), 1); /* w2 only */
	assert_int_equal(key_count(&e, "ZCARD", "wc"), 1); /* A */
	/* Another line: A is still at its ceiling, m is already woken: nobody. */
	release_wakes(&e, "f2", NULL);
	assert_int_equal(key_count(&e, "ZCARD", "wdl"), 1);

	assert_int_equal(admit_wait(&e, "m", "A B"), GATE_ADMITTED); /* on B */
	assert_int_equal(key_count(&e, "ZCARD", "wdl"), 0);
	assert_int_equal(key_count(&e, "HLEN", "bwait"), 1);
	release_wakes(&e, "a1", "w2");
	assert_int_equal(admit_wait(&e, "w2", "A"), GATE_ADMITTED);
	assert_int_equal(key_count(&e, "ZCARD", "wq"), 0);
	assert_int_equal(key_count(&e, "ZCARD", "wc"), 0);
	assert_int_equal(key_count(&e, "HLEN", "bwait"), 0);
	genv_close(&e);
}

/* The admission and release without per-call tables (issue8-perf) merged with the exact order:
 * an admission that puts A at its ceiling re-scores A by wc_score (2^32 band: it sorts after
 * every campaign the rule can admit), not running - floor; a woken sole waiter (its record in
 * :bwait only, :wq and :wc gone) is withdrawn by its admission, the fast path's EXISTS
 * :bwait :wc seeing it; a release that goes through the wake (someone queued) and leaves B
 * below its floor with nobody of B waiting reports demand below floor too. */
static void merged_paths(void **state)
{
	struct gate_env e;
	char key[128], score[64];
	int waiter = 0;

	genv_open(&e, svc.redis_url, "parent", true);
	assert_int_equal(gate_set_wake_deadline(e.g, 60000), 0);
	genv_fresh(&e, 1000, org1);
	assert_int_equal(genv_limits(&e, "o1", 1, 4, 0, true, "A:2: B:: F:1:", NULL), 0);
	assert_int_equal(genv_floors(&e, "o1", 1, 600000, "B:2", NULL), 0);
	admit_fill(&e, "a1", "A");
	admit_fill(&e, "b1", "B");
	admit_fill(&e, "b2", "B");
	admit_fill(&e, "f1", "F"); /* 4 of 4 */
	beat(&e);
	register_waiter(&e, "w1", "A");
	register_waiter(&e, "w2", "A");
	release_wakes(&e, "f1", "w1"); /* A: running 1 of its ceiling 2 */
	admit_fill(&e, "a2", "A");     /* the promised line taken by an arrival: A at its ceiling */
	assert_true(gate_org_key("o1", "wc", key, sizeof(key)) > 0);
	genv_cmd(&e, score, sizeof(score), "ZSCORE", key, "A", NULL);
	print_message("A's score at its ceiling: %s\n", score);
	assert_true(strtoll(score, NULL, 10) >= 4294967296LL);

	/* w1 refused (org full), back to its place; woken again and admitted; then w2 alone. */
	assert_int_equal(admit_wait(&e, "w1", "A"), GATE_REFUSED);
	release_wakes(&e, "a2", "w1");
	assert_int_equal(key_count(&e, "ZCARD", "wc"), 1); /* w2 still queued under A */
	assert_int_equal(admit_wait_w(&e, "w1", "A", &waiter), GATE_ADMITTED);
	assert_int_equal(waiter, -1);
	release_wakes(&e, "w1", "w2");
	assert_int_equal(key_count(&e, "ZCARD", "wq"), 0); /* only w2's record and wake are left */
	assert_int_equal(key_count(&e, "EXISTS", "wc"), 0);
	assert_int_equal(key_count(&e, "HLEN", "bwait"), 1);
	assert_int_equal(admit_wait_w(&e, "w2", "A", &waiter), GATE_ADMITTED);
	assert_int_equal(waiter, -1);
	assert_int_equal(key_count(&e, "HLEN", "bwait"), 0);
	assert_int_equal(key_count(&e, "ZCARD", "wdl"), 0);

	/* 4 of 4 (a1 w2 b1 b2). F waits; b1's release leaves B below its floor, and its line is
	 * reserved for B's shortfall (F not woken): the release went through the wake (someone
	 * queued) and reports. */
	register_waiter(&e, "wf", "F");
	struct release_out r = release_one(&e, "b1");
	assert_int_equal(r.r.woken, 0);
	assert_true(r.r.refresh);
	genv_close(&e);
}

/* A batch waiter refused again waits under that admission's candidates (issue 10 item 4: a
 * campaign entering 'active' makes the worker re-propose its waiters with it): its record is
 * rewritten in place (one record, its since kept, the reply says "unchanged"), its queue entries
 * follow, and :wc with them. A and B have floors 1 of 2 lines; A holds both and w1, w2 wait under
 * A only. Re-proposed with B, w1 is woken by a1's release (B is short: A's waiters are not);
 * before, w1 stayed under A and the release woke nobody. w2 re-proposed with B alone leaves A's
 * queue and A leaves :wc. */
static void reregistered_under_latest(void **state)
{
	struct gate_env e;
	char key[128], rec[256], rec2[256];
	int waiter = 7;

	genv_open(&e, svc.redis_url, "parent", true);
	assert_int_equal(gate_set_wake_deadline(e.g, 60000), 0);
	genv_fresh(&e, 1000, org1);
	assert_int_equal(genv_limits(&e, "o1", 1, 2, 0, true, "A:: B::", NULL), 0);
	admit_fill(&e, "a1", "A");
	admit_fill(&e, "a2", "A"); /* 2 of 2, before B's floor */
	assert_int_equal(genv_floors(&e, "o1", 1, 600000, "A:1 B:1", NULL), 0);
	beat(&e);
	register_waiter(&e, "w1", "A");
	register_waiter(&e, "w2", "A");
	assert_true(gate_org_key("o1", "bwait", key, sizeof(key)) > 0);
	genv_cmd(&e, rec, sizeof(rec), "HGET", key, "w1", NULL);
	assert_int_equal(strncmp(rec, "A|", 2), 0);

	assert_int_equal(admit_wait_w(&e, "w1", "A B", &waiter), GATE_REFUSED);
	assert_int_equal(waiter, 0); /* re-registered, not registered twice */
	assert_int_equal(key_count(&e, "HLEN", "bwait"), 2);
	genv_cmd(&e, rec2, sizeof(rec2), "HGET", key, "w1", NULL);
	print_message("w1: %s -> %s\n", rec, rec2);
	assert_int_equal(strncmp(rec2, "A,B|", 4), 0);
	assert_string_equal(rec2 + 3, rec + 1);		   /* its since and worker kept */
	assert_int_equal(key_count(&e, "ZCARD", "wq"), 3); /* w1 under A and B, w2 under A */
	assert_int_equal(key_count(&e, "ZCARD", "wc"), 2);

	release_wakes(&e, "a1", "w1");
	assert_int_equal(admit_wait_w(&e, "w1", "A B", &waiter), GATE_ADMITTED); /* on B */
	assert_int_equal(waiter, -1);
	assert_int_equal(key_count(&e, "HLEN", "bwait"), 1);
	assert_int_equal(key_count(&e, "ZCARD", "wq"), 1);

	assert_int_equal(admit_wait_w(&e, "w2", "B", &waiter), GATE_REFUSED); /* 2 of 2 again */
	assert_int_equal(waiter, 0);
	assert_int_equal(key_count(&e, "HLEN", "bwait"), 1);
	assert_int_equal(key_count(&e, "ZCARD", "wq"), 1); /* under B only */
	assert_true(gate_org_key("o1", "wc", key, sizeof(key)) > 0);
	assert_int_equal(genv_cmd(&e, NULL, 0, "ZCARD", key, NULL), 1);
	rec[0] = 0;
	genv_cmd(&e, rec, sizeof(rec), "ZSCORE", key, "A", NULL);
	assert_string_equal(rec, ""); /* A left :wc, B is in it */
	genv_cmd(&e, rec, sizeof(rec), "ZSCORE", key, "B", NULL);
	assert_true(rec[0] != 0);
	genv_close(&e);
}

struct refresh_probe {
	int o1, end;
};

static void refresh_cb(struct redis_sub *sub, const char *channel, size_t channel_len,
		       const char *payload, size_t payload_len, void *data)
{
	struct refresh_probe *p = data;

	if (payload_len == 2 && !memcmp(payload, "o1", 2))
		p->o1++;
	else if (payload_len == 3 && !memcmp(payload, "end", 3))
		p->end++;
}

static bool sub_up(void *arg)
{
	return redis_sub_is_up(arg);
}

/* A release that leaves A below its floor with no waiter of A publishes "o1" on
 * dsp:v1:refresh, at most once per 100 ms of Redis time (a pinned clock here): releases at
 * T, T (rate-limited), T + 100, and at T + 200 one with a waiter of A still queued (none). */
static void refresh_on_demand_below_floor(void **state)
{
	const int64_t T = 1800000000000;
	struct gate_env e;
	struct redis_sub *sub;
	struct refresh_probe p = { 0 };
	struct redis_sub_options so = {
		.url = svc.redis_url,
		.name = "refresh-probe",
		.connect_timeout_ms = 10000,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 200,
	};

	genv_open(&e, svc.redis_url, "parent", true);
	assert_int_equal(gate_set_wake_deadline(e.g, 60000), 0);
	genv_fresh(&e, 1000, org1);
	assert_int_equal(redis_sub_new(&e.loop, &so, &sub), 0);
	assert_int_equal(redis_sub_subscribe(sub, "dsp:v1:refresh", refresh_cb, &p), 0);
	assert_int_equal(redis_sub_start(sub), 0);
	fixture_run_until(&e.loop, sub_up, sub, GENV_TIMEOUT_MS);

	assert_int_equal(genv_limits(&e, "o1", 1, 5, 0, true, "A:: F::", NULL), 0);
	assert_int_equal(genv_pin_clock(&e, "o1", T), 0);
	assert_int_equal(genv_floors(&e, "o1", 1, 600000, "A:4", NULL), 0);
	admit_fill(&e, "a1", "A");
	admit_fill(&e, "a2", "A");
	admit_fill(&e, "a3", "A");
	admit_fill(&e, "a4", "A");
	admit_fill(&e, "f1", "F");
	assert_false(release_one(&e, "f1").r.refresh); /* F has no floor */
	assert_true(release_one(&e, "a1").r.refresh);
	assert_false(release_one(&e, "a2").r.refresh); /* within 100 ms */
	assert_int_equal(genv_pin_clock(&e, "o1", T + 100), 0);
	assert_true(release_one(&e, "a3").r.refresh);

	/* A waiter of A queued behind the one this release wakes: no report. */
	assert_int_equal(genv_pin_clock(&e, "o1", T + 200), 0);
	admit_fill(&e, "a5", "A");
	admit_fill(&e, "a6", "A");
	admit_fill(&e, "a7", "A");
	admit_fill(&e, "f2", "F"); /* 5 of 5 */
	beat(&e);
	register_waiter(&e, "wa1", "A");
	register_waiter(&e, "wa2", "A");
	struct release_out r = release_one(&e, "a4");
	assert_string_equal(r.woken_call, "wa1");
	assert_false(r.r.refresh);

	genv_cmd(&e, NULL, 0, "PUBLISH", "dsp:v1:refresh", "end", NULL);
	fixture_run_until_count(&e.loop, &p.end, 1, GENV_TIMEOUT_MS);
	assert_int_equal(p.o1, 2);
	redis_sub_close(sub, NULL, NULL);
	genv_close(&e);
}

static int setup(void **state)
{
	fixture_start(&svc, false, true, false, false);
	return 0;
}

static int teardown(void **state)
{
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(order_beyond_eight),
		cmocka_unit_test(order_after_floors_install),
		cmocka_unit_test(multi_candidate_woken_once),
		cmocka_unit_test(refresh_on_demand_below_floor),
		cmocka_unit_test(merged_paths),
		cmocka_unit_test(reregistered_under_latest),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
