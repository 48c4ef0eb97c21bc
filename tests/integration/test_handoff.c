/* The hand-off (issue 8, SPEC C9; dispatcher/gate/README.md "Hand-off", handoff.h) across
 * worker processes: each waiter lives in its own forked process with its own loop, gate, Redis
 * connection, subscriber and handoff. With the org full, each release wakes exactly one waiter,
 * in C9's order (the direct dial, the campaign under its floor, then by running - floor); a
 * wake whose worker is stopped (SIGSTOP) passes to the next waiter after its deadline; a wake
 * published while the waiter's subscriber was killed (CLIENT KILL) is not lost: the waiter
 * re-checks when its subscriber is back. Markers: the release's reply (who was woken, how many
 * subscribers heard it), the gate's hand-off keys, and each child's report in t:order
 * ("<call>:<wakes>:<rechecks>") once admitted. */
#include "fixture.h"
#include "gate_harness.h"
#include "handoff.h"
#include "log.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

static struct embedded svc;
static const char *const org1[] = { "o1", NULL };

/* One child: a waiter until admitted. */
struct child {
	struct gate_env e;
	struct redis_sub *sub;
	struct handoff *h;
	const char *org, *call, *campaign; /* campaign NULL: a direct dial */
	int wakes, rechecks, admitted, failed;
};

static void child_admit_cb(struct gate *g, int status, const struct gate_admit_result *r,
			   void *data)
{
	struct child *c = data;

	if (status)
		c->failed = status;
	else if (r->outcome == GATE_ADMITTED || r->outcome == GATE_HELD)
		c->admitted = 1;
}

static void child_admit(struct child *c)
{
	const char *cands[1] = { c->campaign };
	struct gate_admit_req req = {
		.org = c->org,
		.call = c->call,
		.campaigns = c->campaign ? cands : NULL,
		.n_campaigns = c->campaign ? 1 : 0,
		.direct = !c->campaign,
		.wait = true,
		.worker = handoff_worker(c->h),
	};

	if (gate_admit(c->e.g, &req, child_admit_cb, c))
		c->failed = -EIO;
}

static void wake_cb(struct handoff *h, const char *org, const char *call, enum handoff_why why,
		    void *data)
{
	struct child *c = data;

	if (why == HANDOFF_WOKEN)
		c->wakes++;
	else
		c->rechecks++;
	child_admit(c);
}

static void sub_state_cb(struct redis_sub *sub, bool up, void *data)
{
	struct child *c = data;

	if (up && c->h)
		handoff_resubscribed(c->h);
}

static bool child_up(void *arg)
{
	return redis_sub_is_up(((struct child *)arg)->sub);
}

static bool child_done(void *arg)
{
	struct child *c = arg;
	return c->admitted || c->failed;
}

/* The child's body; never returns. Exit 0 once admitted and reported. */
static void child_main(const char *worker, const char *org, const char *call, const char *campaign)
{
	struct child c = { .org = org, .call = call, .campaign = campaign };
	struct redis_sub_options so = {
		.url = svc.redis_url,
		.name = worker,
		.connect_timeout_ms = 10000,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 200,
		.state_cb = sub_state_cb,
		.data = &c,
	};
	struct handoff_options ho = {
		.worker = worker,
		.heartbeat_ms = 100,
		.heartbeat_ttl_ms = 600000,
	};
	char report[128];

	log_set_level(getenv("HO_DEBUG") ? LOG_DEBUG : LOG_ERROR);
	genv_open(&c.e, svc.redis_url, worker, true);
	so.publisher = c.e.conn;
	if (redis_sub_new(&c.e.loop, &so, &c.sub) || redis_sub_start(c.sub))
		_exit(3);
	ho.loop = &c.e.loop;
	ho.gate = c.e.g;
	ho.sub = c.sub;
	if (handoff_new(&ho, &c.h))
		_exit(4);
	fixture_run_until(&c.e.loop, child_up, &c, GENV_TIMEOUT_MS);
	if (handoff_add(c.h, org, call, wake_cb, &c))
		_exit(5);
	child_admit(&c);
	fixture_run_until(&c.e.loop, child_done, &c, 120000);
	if (c.failed)
		_exit(6);
	snprintf(report, sizeof(report), "%s:%d:%d", call, c.wakes, c.rechecks);
	genv_cmd(&c.e, NULL, 0, "RPUSH", "t:order", report, NULL);
	_exit(0);
}

static pid_t spawn(const char *worker, const char *org, const char *call, const char *campaign)
{
	pid_t pid;

	fflush(NULL);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		child_main(worker, org, call, campaign);
	return pid;
}

static long long key_count(struct gate_env *e, const char *cmd, const char *what)
{
	char key[128];

	assert_true(gate_org_key("o1", what, key, sizeof(key)) > 0);
	return genv_cmd(e, NULL, 0, cmd, key, NULL);
}

/* Waits (polling Redis, generous deadline) until the org's queue holds n waiters. */
static void wait_queued(struct gate_env *e, long long n)
{
	long long t0 = fixture_now_ms();

	while (key_count(e, "ZCARD", "wq") < n) {
		assert_true(fixture_now_ms() - t0 < 120000);
		fixture_sleep_ms(5);
	}
}

/* Waits until t:order has n reports; copies the n-th into out. */
static void wait_report(struct gate_env *e, long long n, char *out, size_t size)
{
	long long t0 = fixture_now_ms();
	char idx[16];

	while (genv_cmd(e, NULL, 0, "LLEN", "t:order", NULL) < n) {
		assert_true(fixture_now_ms() - t0 < 120000);
		fixture_sleep_ms(5);
	}
	snprintf(idx, sizeof(idx), "%lld", n - 1);
	genv_cmd(e, out, size, "LINDEX", "t:order", idx, NULL);
}

static void reap(pid_t *pids, int n)
{
	for (int i = 0; i < n; i++) {
		kill(pids[i], SIGCONT);
		kill(pids[i], SIGKILL);
		waitpid(pids[i], NULL, 0);
	}
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

/* Org 8 full: A 1 (floor 1), B 3 (floor 2), C 2 (floor 2), D 2 (floor 0). Waiters in four
 * processes: a direct dial X, and one on each of A, B, C. Releases of d1, a1, d2, c1 wake
 * exactly one each: X (direct first), A (under its floor once a1 ends), C (running - floor 0),
 * B (+1): C9's order. Each woken waiter is admitted; no other got a wake. */
static void order(void **state)
{
	static const struct {
		const char *release, *woken;
	} steps[] = { { "d1", "wx" }, { "a1", "wa" }, { "d2", "wc" }, { "c1", "wb" } };
	struct gate_env e;
	pid_t pids[4];
	char rep[128], want[128];

	genv_open(&e, svc.redis_url, "parent", true);
	genv_fresh(&e, 1000, org1);
	genv_cmd(&e, NULL, 0, "DEL", "t:order", NULL);
	assert_int_equal(genv_limits(&e, "o1", 1, 8, 0, true, "A:: B:: C:: D::", NULL), 0);
	assert_int_equal(genv_floors(&e, "o1", 1, 600000, "A:1 B:2 C:2 D:0", NULL), 0);
	const char *fill[][2] = { { "a1", "A" }, { "b1", "B" }, { "b2", "B" }, { "c1", "C" },
				  { "c2", "C" }, { "b3", "B" }, { "d1", "D" }, { "d2", "D" } };
	for (size_t i = 0; i < 8; i++)
		admit_fill(&e, fill[i][0], fill[i][1]);

	pids[0] = spawn("w1", "o1", "wx", NULL);
	wait_queued(&e, 1);
	pids[1] = spawn("w2", "o1", "wa", "A");
	pids[2] = spawn("w3", "o1", "wb", "B");
	pids[3] = spawn("w4", "o1", "wc", "C");
	wait_queued(&e, 4);

	for (size_t i = 0; i < 4; i++) {
		struct release_out r = release_one(&e, steps[i].release);
		print_message("release %s: woken %u %s receivers %u passed %u\n", steps[i].release,
			      r.r.woken, r.woken_call, r.r.receivers, r.r.passed);
		assert_int_equal(r.r.woken, 1);
		assert_string_equal(r.woken_call, steps[i].woken);
		assert_int_equal(r.r.receivers, 1);
		wait_report(&e, (long long)i + 1, rep, sizeof(rep));
		snprintf(want, sizeof(want), "%s:1:", steps[i].woken);
		assert_memory_equal(rep, want, strlen(want));
	}
	for (int i = 0; i < 4; i++)
		assert_int_equal(fixture_wait(pids[i]), 0);
	assert_int_equal(genv_cmd(&e, NULL, 0, "LLEN", "t:order", NULL), 4);
	assert_int_equal(key_count(&e, "ZCARD", "wq"), 0);
	assert_int_equal(key_count(&e, "ZCARD", "wdl"), 0);
	assert_int_equal(key_count(&e, "HLEN", "bwait"), 0);
	assert_int_equal(key_count(&e, "HLEN", "wait"), 0);
	genv_close(&e);
}

/* Org 2 full; waiters on A (worker w1) and B (w2), fcfs: A first (ties by id). w1 is stopped:
 * the release wakes it, nobody takes the line, and after the deadline w2's heartbeat sweep
 * passes the wake to w2, which is admitted. w1's registration is dropped. */
static void stopped_worker(void **state)
{
	struct gate_env e;
	pid_t pids[2];
	char rep[128];

	genv_open(&e, svc.redis_url, "parent", true);
	assert_int_equal(gate_set_wake_deadline(e.g, 300), 0);
	genv_fresh(&e, 1000, org1);
	genv_cmd(&e, NULL, 0, "DEL", "t:order", NULL);
	assert_int_equal(genv_limits(&e, "o1", 1, 2, 0, true, "A:: B:: D::", NULL), 0);
	admit_fill(&e, "d1", "D");
	admit_fill(&e, "d2", "D");
	pids[0] = spawn("w1", "o1", "sa", "A");
	wait_queued(&e, 1);
	pids[1] = spawn("w2", "o1", "sb", "B");
	wait_queued(&e, 2);

	assert_int_equal(kill(pids[0], SIGSTOP), 0);
	struct release_out r = release_one(&e, "d1");
	assert_int_equal(r.r.woken, 1);
	assert_string_equal(r.woken_call, "sa");
	wait_report(&e, 1, rep, sizeof(rep));
	assert_string_equal(rep, "sb:1:0");
	assert_int_equal(fixture_wait(pids[1]), 0);
	/* w1's wake expired and its registration went with it. */
	assert_int_equal(key_count(&e, "ZCARD", "wdl"), 0);
	char key[128];
	assert_true(gate_org_key("o1", "bwait", key, sizeof(key)) > 0);
	assert_int_equal(genv_cmd(&e, NULL, 0, "HEXISTS", key, "sa", NULL), 0);
	reap(pids, 1);
	genv_close(&e);
}

/* A waiter's subscriber is killed (CLIENT KILL TYPE pubsub) while its process is stopped; the
 * release's wake reaches no subscriber (receivers 0: lost). Its deadline is long, so nothing
 * passes it on: the waiter is admitted only because it re-checks when its subscriber is back. */
static void killed_subscriber(void **state)
{
	struct gate_env e;
	pid_t pid;
	char rep[128];

	genv_open(&e, svc.redis_url, "parent", true);
	assert_int_equal(gate_set_wake_deadline(e.g, 60000), 0);
	genv_fresh(&e, 1000, org1);
	genv_cmd(&e, NULL, 0, "DEL", "t:order", NULL);
	assert_int_equal(genv_limits(&e, "o1", 1, 1, 0, true, "A:: D::", NULL), 0);
	admit_fill(&e, "d1", "D");
	pid = spawn("w1", "o1", "ka", "A");
	wait_queued(&e, 1);

	assert_int_equal(kill(pid, SIGSTOP), 0);
	assert_true(genv_cmd(&e, NULL, 0, "CLIENT", "KILL", "TYPE", "pubsub", NULL) >= 1);
	struct release_out r = release_one(&e, "d1");
	assert_int_equal(r.r.woken, 1);
	assert_string_equal(r.woken_call, "ka");
	assert_int_equal(r.r.receivers, 0); /* the wake was published to nobody */
	assert_int_equal(kill(pid, SIGCONT), 0);
	wait_report(&e, 1, rep, sizeof(rep));
	assert_memory_equal(rep, "ka:0:", 5); /* admitted on a re-check, never woken */
	assert_true(rep[5] >= '1');
	assert_int_equal(fixture_wait(pid), 0);
	assert_int_equal(key_count(&e, "ZCARD", "wdl"), 0);
	genv_close(&e);
}

struct op {
	int calls, status, outcome;
	struct gate_handoff_result h;
};

static void op_admit_cb(struct gate *g, int status, const struct gate_admit_result *r, void *data)
{
	struct op *o = data;
	o->status = status;
	o->outcome = r ? (int)r->outcome : -1;
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

/* A batch waiter of worker on campaign, registered by its refused admission. */
static void register_waiter(struct gate_env *e, const char *call, const char *campaign,
			    const char *worker)
{
	const char *cands[1] = { campaign };
	struct op o = { 0 };

	assert_int_equal(gate_admit(e->g,
				    &(struct gate_admit_req){ .org = "o1",
							      .call = call,
							      .campaigns = cands,
							      .n_campaigns = 1,
							      .wait = true,
							      .worker = worker },
				    op_admit_cb, &o),
			 0);
	fixture_run_until_count(&e->loop, &o.calls, 1, GENV_TIMEOUT_MS);
	assert_int_equal(o.status, 0);
	assert_int_equal(o.outcome, GATE_REFUSED);
}

static struct gate_handoff_result beat_or_wake(struct gate_env *e, const char *worker,
					       uint64_t ttl_ms)
{
	struct op o = { 0 };

	if (worker)
		assert_int_equal(gate_handoff_beat(e->g, "o1", worker, ttl_ms, op_handoff_cb, &o),
				 0);
	else
		assert_int_equal(gate_handoff_wake(e->g, "o1", 16, op_handoff_cb, &o), 0);
	fixture_run_until_count(&e->loop, &o.calls, 1, GENV_TIMEOUT_MS);
	assert_int_equal(o.status, 0);
	return o.h;
}

/* One process, no subscriber (the scripts' markers only): a waiter whose worker's heartbeat has
 * expired is dropped when the wake meets it and the next one is woken; a raised limit then
 * wakes exactly as many waiters as it frees lines (gate_handoff_wake after the install). */
static void dead_worker_and_raised_limit(void **state)
{
	struct gate_env e;
	struct gate_handoff_result h;
	char key[128];

	genv_open(&e, svc.redis_url, "parent", true);
	genv_fresh(&e, 1000, org1);
	assert_int_equal(genv_limits(&e, "o1", 1, 2, 0, true, "A:: B:: C:: D::", NULL), 0);
	admit_fill(&e, "d1", "D");
	admit_fill(&e, "d2", "D");
	beat_or_wake(&e, "wdead", 1);
	beat_or_wake(&e, "walive", 600000);
	register_waiter(&e, "x1", "A", "wdead");
	register_waiter(&e, "x2", "B", "walive");
	register_waiter(&e, "x3", "C", "walive");
	fixture_sleep_ms(20); /* wdead's 1 ms heartbeat is over (Redis time) */

	struct release_out r = release_one(&e, "d1");
	assert_int_equal(r.r.woken, 1);
	assert_string_equal(r.woken_call, "x2"); /* x1 (A, first by id) dropped: dead worker */
	assert_int_equal(r.r.receivers, 0);	 /* nobody subscribed in this test */
	assert_true(gate_org_key("o1", "bwait", key, sizeof(key)) > 0);
	assert_int_equal(genv_cmd(&e, NULL, 0, "HEXISTS", key, "x1", NULL), 0);

	/* Nothing is free (d2 runs, x2 holds the promised line): no wake. */
	h = beat_or_wake(&e, NULL, 0);
	assert_int_equal(h.woken, 0);
	/* The limit goes to 4: two lines free, one waiter left: x3 woken, once. */
	assert_int_equal(genv_limits(&e, "o1", 2, 4, 0, true, "A:: B:: C:: D::", NULL), 0);
	h = beat_or_wake(&e, NULL, 0);
	assert_int_equal(h.woken, 1);
	assert_int_equal(key_count(&e, "ZCARD", "wdl"), 2);
	assert_int_equal(key_count(&e, "ZCARD", "wq"), 0);
	h = beat_or_wake(&e, NULL, 0);
	assert_int_equal(h.woken, 0);

	/* Woken lines are not reserved against new admissions: d3..d5 take them (org 4 of 4), x4
	 * waits. Two releases free two lines, both still promised to x2 and x3: no wake. x2 gives
	 * up while woken: its line goes at once to the next waiter (x4). */
	admit_fill(&e, "d3", "D");
	admit_fill(&e, "d4", "D");
	admit_fill(&e, "d5", "D");
	register_waiter(&e, "x4", "D", "walive");
	assert_int_equal(release_one(&e, "d5").r.woken, 0);
	assert_int_equal(release_one(&e, "d4").r.woken, 0);
	struct op o = { 0 };
	assert_int_equal(gate_handoff_unwait(e.g, "o1", "x2", op_handoff_cb, &o), 0);
	fixture_run_until_count(&e.loop, &o.calls, 1, GENV_TIMEOUT_MS);
	assert_int_equal(o.status, 0);
	assert_int_equal(o.h.dropped, 1);
	assert_int_equal(o.h.woken, 1);
	assert_int_equal(genv_cmd(&e, NULL, 0, "HEXISTS", key, "x2", NULL), 0);
	assert_int_equal(key_count(&e, "ZCARD", "wdl"), 2); /* x3 and x4 */
	genv_close(&e);
}

/* A woken waiter whose line an arrival took goes back to the queue, and its campaign back in
 * the waking order: a release that met no queued waiter of the campaign while the only one was
 * woken took the campaign out of :wc, and the next free line must still wake it. Also, a
 * campaign whose first HW_SCAN (8) waiters belong to a dead worker keeps its place: the live
 * waiter behind them is woken by a later release. (Review of issue 8: both were lost wakes.) */
static void woken_refused_is_woken_again(void **state)
{
	struct gate_env e;
	struct release_out r;
	char call[16];

	genv_open(&e, svc.redis_url, "parent", true);
	assert_int_equal(gate_set_wake_deadline(e.g, 60000), 0); /* no wake expires here */
	genv_fresh(&e, 1000, org1);
	assert_int_equal(genv_limits(&e, "o1", 1, 2, 0, true, "A:: B:: D::", NULL), 0);
	beat_or_wake(&e, "walive", 600000);
	admit_fill(&e, "d1", "D");
	admit_fill(&e, "d2", "D");
	register_waiter(&e, "x1", "A", "walive");
	assert_string_equal(release_one(&e, "d1").woken_call, "x1");
	/* d2 ends: the line is admissible for A but its only waiter is already woken. */
	assert_int_equal(release_one(&e, "d2").r.woken, 0);
	/* Arrivals take both lines; x1 tries, is refused and goes back to its place. */
	admit_fill(&e, "d3", "D");
	admit_fill(&e, "d4", "D");
	register_waiter(&e, "x1", "A", "walive");
	assert_int_equal(key_count(&e, "ZCARD", "wq"), 1);
	assert_int_equal(key_count(&e, "ZCARD", "wdl"), 0);
	r = release_one(&e, "d3");
	assert_int_equal(r.r.woken, 1);
	assert_string_equal(r.woken_call, "x1");

	/* Nine waiters of a dead worker on B, then a live one. */
	genv_fresh(&e, 1000, org1);
	assert_int_equal(genv_limits(&e, "o1", 1, 1, 0, true, "A:: B:: D::", NULL), 0);
	beat_or_wake(&e, "walive", 600000);
	beat_or_wake(&e, "wdead", 1);
	admit_fill(&e, "d1", "D");
	for (int i = 0; i < 9; i++) {
		snprintf(call, sizeof(call), "y%d", i);
		register_waiter(&e, call, "B", "wdead");
	}
	register_waiter(&e, "z1", "B", "walive");
	fixture_sleep_ms(20);	   /* wdead's heartbeat is over (Redis time) */
	r = release_one(&e, "d1"); /* drops 8 dead waiters; z1 not reached yet */
	assert_int_equal(r.r.woken, 0);
	assert_int_equal(key_count(&e, "ZCARD", "wc"), 1); /* B keeps its place */
	admit_fill(&e, "d2", "D");
	r = release_one(&e, "d2");
	assert_int_equal(r.r.woken, 1);
	assert_string_equal(r.woken_call, "z1");
	genv_close(&e);
}

/* Waiters registered under campaigns the gate has no limits for (refused "unknown": not yet
 * installed, or deleted) that gave up leave their campaigns in :wc. Eight of them took every
 * place the wake scans, and no batch waiter of the org was woken again. (Review of issue 8.) */
static void stale_campaigns_do_not_block_wakes(void **state)
{
	struct gate_env e;
	struct release_out r;
	char call[16], camp[16];

	genv_open(&e, svc.redis_url, "parent", true);
	assert_int_equal(gate_set_wake_deadline(e.g, 60000), 0);
	genv_fresh(&e, 1000, org1);
	assert_int_equal(genv_limits(&e, "o1", 1, 1, 0, true, "D:: Z::", NULL), 0);
	beat_or_wake(&e, "walive", 600000);
	admit_fill(&e, "d1", "D");
	for (int i = 0; i < 8; i++) {
		struct op o = { 0 };

		snprintf(call, sizeof(call), "u%d", i);
		snprintf(camp, sizeof(camp), "U%d", i);
		register_waiter(&e, call, camp, "walive");
		assert_int_equal(gate_handoff_unwait(e.g, "o1", call, op_handoff_cb, &o), 0);
		fixture_run_until_count(&e.loop, &o.calls, 1, GENV_TIMEOUT_MS);
		assert_int_equal(o.status, 0);
	}
	register_waiter(&e, "z1", "Z", "walive");
	assert_int_equal(key_count(&e, "ZCARD", "wq"), 1);
	r = release_one(&e, "d1");
	assert_int_equal(r.r.woken, 1);
	assert_string_equal(r.woken_call, "z1");
	/* :wc holds exactly the campaigns with a queued waiter: the U's left with their waiters'
	 * unwait, Z with its only waiter's wake. */
	assert_int_equal(key_count(&e, "ZCARD", "wc"), 0);
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
		cmocka_unit_test(order),
		cmocka_unit_test(stopped_worker),
		cmocka_unit_test(killed_subscriber),
		cmocka_unit_test(dead_worker_and_raised_limit),
		cmocka_unit_test(woken_refused_is_woken_again),
		cmocka_unit_test(stale_campaigns_do_not_block_wakes),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
