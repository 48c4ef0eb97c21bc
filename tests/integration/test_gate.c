/* The Redis slot gate (dispatcher/gate): its scripts and client against a real Redis. Levels at,
 * below and above each limit; idempotence per call id; version fencing; floor expiry on the
 * Redis clock; ordered candidates; the generation guard; waiting direct dials; counters; the
 * one-round-trip read; an org rebuilt from live calls. */
#include "error.h"
#include "fixture.h"
#include "gate_harness.h"
#include "gate_int.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

static struct embedded svc;
static struct gate_env env;
static const char *const org1[] = { "o1", NULL };

static int setup(void **state)
{
	fixture_start(&svc, false, true, false, false);
	genv_open(&env, svc.redis_url, "gate-test", true);
	return 0;
}

static int teardown(void **state)
{
	genv_close(&env);
	embedded_stop(&svc);
	return 0;
}

static void expect_admitted(struct admit_out o, const char *campaign)
{
	assert_int_equal(o.status, 0);
	assert_int_equal(o.r.outcome, GATE_ADMITTED);
	if (campaign)
		assert_string_equal(o.campaign, campaign);
	else
		assert_null(o.r.campaign);
}

/* The last decision refused at level for reason. */
static void expect_refused(struct admit_out o, enum fairshare_level level, enum gate_reason reason)
{
	assert_int_equal(o.status, 0);
	assert_int_equal(o.r.outcome, GATE_REFUSED);
	assert_true(o.r.n_decisions >= 1);
	assert_int_equal(o.r.decisions[o.r.n_decisions - 1].level, level);
	assert_int_equal(o.r.decisions[o.r.n_decisions - 1].reason, reason);
}

static void expect_freed(struct release_out o)
{
	assert_int_equal(o.status, 0);
	assert_int_equal(o.r.outcome, GATE_FREED);
}

static void expect_zero(const char *org)
{
	struct view_copy v;

	assert_int_equal(genv_read(&env, org, &v), 0);
	assert_int_equal(v.v.org_running, 0);
	assert_int_equal(v.v.system_running, 0);
	assert_int_equal(v.v.slots, 0);
	for (uint32_t i = 0; i < v.n_campaigns; i++)
		assert_int_equal(v.campaigns[i].running, 0);
	for (uint32_t i = 0; i < v.n_agents; i++)
		assert_int_equal(v.agents[i].running, 0);
}

/* Every level at, below and above its limit; enforcement off (C1, C2, C3, C7). */
static void levels(void **state)
{
	struct view_copy v;
	struct admit_out o;

	genv_fresh(&env, 1000, org1);
	/* org 6, per_agent 3 (gates: below 6); A ceiling 2 on a1; B and C on a2; D on a3. */
	assert_int_equal(genv_limits(&env, "o1", 1, 6, 3, true, "A:2:a1 B::a2 C::a2 D::a3", NULL),
			 0);
	expect_admitted(genv_admit(&env, "o1", "c1", "A"), "A");
	expect_admitted(genv_admit(&env, "o1", "c2", "A"), "A"); /* A at its ceiling */
	expect_refused(genv_admit(&env, "o1", "c3", "A"), FAIRSHARE_LEVEL_CAMPAIGN,
		       GATE_REASON_FULL);
	expect_admitted(genv_admit(&env, "o1", "c4", "B"), "B");
	expect_admitted(genv_admit(&env, "o1", "c5", "B"), "B");
	expect_admitted(genv_admit(&env, "o1", "c6", "C"), "C"); /* a2 at per_agent */
	expect_refused(genv_admit(&env, "o1", "c7", "C"), FAIRSHARE_LEVEL_AGENT, GATE_REASON_FULL);
	expect_admitted(genv_admit(&env, "o1", "c8", "D"), "D"); /* the org at 6 of 6 */
	/* The organisation refuses, and that refusal ends the walk. */
	o = genv_admit(&env, "o1", "c9", "D A B");
	expect_refused(o, FAIRSHARE_LEVEL_ORG, GATE_REASON_FULL);
	assert_int_equal(o.r.n_decisions, 1);
	assert_true(o.r.decisions[0].fcfs); /* enforced, no floors ever installed */

	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(v.v.org_running, 6);
	assert_int_equal(v.v.system_running, 6);
	assert_int_equal(view_running(&v, "A"), 2);
	assert_int_equal(view_agent_running(&v, "a2"), 3);
	assert_int_equal(v.v.slots, 6);

	/* Below: a release makes room. The system level at 6 of 6 refuses before the org. */
	expect_freed(genv_release(&env, "o1", "c5"));
	assert_int_equal(genv_system_limit(&env, 2, 6, NULL), 0);
	expect_admitted(genv_admit(&env, "o1", "c10", "D"), "D");
	expect_refused(genv_admit(&env, "o1", "c11", "D"), FAIRSHARE_LEVEL_SYSTEM,
		       GATE_REASON_FULL);

	/* Enforcement off: the counters move, only the system level refuses (C3). */
	assert_int_equal(genv_system_limit(&env, 3, 100, NULL), 0);
	assert_int_equal(genv_limits(&env, "o1", 2, 6, 1, false, "A:2:a1 B::a2 C::a2 D::a3", NULL),
			 0);
	o = genv_admit(&env, "o1", "c12", "A"); /* A 3 > ceiling 2, a1 3 > 1, org 7 > 6 */
	expect_admitted(o, "A");
	assert_false(o.r.decisions[0].fcfs); /* enforcement off: never fcfs */
	expect_admitted(genv_admit(&env, "o1", "c13", "B"), "B");
	assert_int_equal(genv_system_limit(&env, 4, 9, NULL), 0);
	expect_admitted(genv_admit(&env, "o1", "c14", "C"), "C");
	expect_refused(genv_admit(&env, "o1", "c15", "C"), FAIRSHARE_LEVEL_SYSTEM,
		       GATE_REASON_FULL);
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(v.v.org_running, 9);
	assert_int_equal(view_agent_running(&v, "a1"), 3);
	/* A campaign whose limits are not installed yet: the campaign level refuses nothing either
	 * (C3); counted on no agent (none installed), the system level still applies. */
	assert_int_equal(genv_system_limit(&env, 5, 10, NULL), 0);
	o = genv_admit(&env, "o1", "c16", "Z");
	expect_admitted(o, "Z");
	assert_int_equal(o.r.decisions[0].level, FAIRSHARE_LEVEL_NONE);
	expect_refused(genv_admit(&env, "o1", "c17", "Z"), FAIRSHARE_LEVEL_SYSTEM,
		       GATE_REASON_FULL);
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(view_running(&v, "Z"), 1);
	assert_int_equal(v.v.org_running, 10);

	const char *calls[] = { "c1", "c2", "c4", "c6", "c8", "c10", "c12", "c13", "c14", "c16" };
	for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++)
		expect_freed(genv_release(&env, "o1", calls[i]));
	expect_zero("o1");
}

/* Acquire and release are idempotent per call id; counts never go negative. */
static void idempotence(void **state)
{
	struct view_copy v;
	struct release_out r;
	struct admit_out o;

	genv_fresh(&env, 1000, org1);
	assert_int_equal(genv_limits(&env, "o1", 1, 3, 0, true, "A::a1 B::a2", NULL), 0);
	expect_admitted(genv_admit(&env, "o1", "k1", "A"), "A");
	/* A duplicate acquire takes nothing more and says what the call holds. */
	o = genv_admit(&env, "o1", "k1", "B");
	assert_int_equal(o.status, 0);
	assert_int_equal(o.r.outcome, GATE_HELD);
	assert_string_equal(o.campaign, "A");
	assert_string_equal(o.agent, "a1");
	assert_int_equal(o.r.n_decisions, 0);
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(v.v.org_running, 1);
	assert_int_equal(view_running(&v, "B"), 0);

	/* A release frees once; the duplicate frees nothing. */
	r = genv_release(&env, "o1", "k1");
	expect_freed(r);
	assert_string_equal(r.campaign, "A");
	assert_string_equal(r.agent, "a1");
	assert_true(r.r.taken_ms > 0 && r.r.taken_ms <= r.r.now_ms);
	r = genv_release(&env, "o1", "k1");
	assert_int_equal(r.status, 0);
	assert_int_equal(r.r.outcome, GATE_NOT_HELD);

	/* Out of order: the release before the admission frees nothing; the admission then holds
	 * until its own release. An unknown call id frees nothing. */
	r = genv_release(&env, "o1", "k2");
	assert_int_equal(r.r.outcome, GATE_NOT_HELD);
	expect_admitted(genv_admit(&env, "o1", "k2", "B"), "B");
	assert_int_equal(genv_release(&env, "o1", "nobody").r.outcome, GATE_NOT_HELD);
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(v.v.org_running, 1);
	expect_freed(genv_release(&env, "o1", "k2"));
	assert_int_equal(genv_release(&env, "o1", "k2").r.outcome, GATE_NOT_HELD);
	expect_zero("o1");

	/* A damaged count (the reconciler's business) is never driven negative: range, and the
	 * record stays. */
	expect_admitted(genv_admit(&env, "o1", "k3", "A"), "A");
	char key[128];
	assert_true(gate_org_key("o1", "state", key, sizeof(key)) > 0);
	genv_cmd(&env, NULL, 0, "EVAL",
		 "local f = '<I4I4BI4dI4ddddd' .. string.rep('I4', 7) "
		 "local o = {struct.unpack(f, redis.call('HGET', KEYS[1], 'org'))} o[4] = 0 "
		 "redis.call('HSET', KEYS[1], 'org', struct.pack(f, unpack(o, 1, 18))) return 1",
		 "1", key, NULL);
	r = genv_release(&env, "o1", "k3");
	assert_int_equal(r.r.outcome, GATE_RANGE);
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(v.v.slots, 1);
	assert_int_equal(view_running(&v, "A"), 1);
}

/* Limits and floors carry versions: an install not newer changes nothing (C4, C5 fencing). */
static void fencing(void **state)
{
	struct gate_install_result res;
	struct view_copy v;
	uint64_t ver;

	genv_fresh(&env, 1000, org1);
	assert_int_equal(genv_limits(&env, "o1", 5, 10, 0, true, "A:4:a1 B::a2", &res), 0);
	assert_true(res.applied);
	assert_int_equal(genv_limits(&env, "o1", 5, 3, 0, true, "A::a1", &res), 0);
	assert_false(res.applied);
	assert_int_equal(res.version, 5);
	assert_int_equal(genv_limits(&env, "o1", 4, 3, 0, true, "A::a1", &res), 0);
	assert_false(res.applied);
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(v.v.limits_version, 5);
	assert_int_equal(v.v.org_limit, 10);
	assert_int_equal(v.campaigns[0].ceiling, 4); /* A, sorted */
	assert_true(v.campaigns[1].known);	     /* B still there */

	/* Floors: version packed from a lease version and a sequence, below 2^53. */
	assert_int_equal(gate_floors_version(1, 0, &ver), 0);
	assert_int_equal(ver, 1ULL << 26);
	assert_int_equal(gate_floors_version((1ULL << 27) - 1, (1ULL << 26) - 1, &ver), 0);
	assert_int_equal(ver, GATE_VERSION_MAX);
	assert_int_equal(gate_floors_version(1ULL << 27, 0, &ver), -ERANGE);
	assert_int_equal(gate_floors_version(1, 1ULL << 26, &ver), -ERANGE);
	assert_int_equal(gate_floors_version(0, 5, &ver), -ERANGE);

	assert_int_equal(gate_floors_version(7, 3, &ver), 0);
	assert_int_equal(genv_floors(&env, "o1", ver, 60000, "A:3 B:2", &res), 0);
	assert_true(res.applied);
	assert_int_equal(res.shortfall, 5);
	assert_int_equal(genv_floors(&env, "o1", ver, 60000, "A:9", &res), 0); /* same version */
	assert_false(res.applied);
	assert_int_equal(res.version, ver);
	assert_int_equal(gate_floors_version(6, 1000, &ver), 0); /* an older lease, later seq */
	assert_int_equal(genv_floors(&env, "o1", ver, 60000, "A:9", &res), 0);
	assert_false(res.applied);
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(view_floor(&v, "A"), 3);
	assert_int_equal(v.v.shortfall, 5);
	/* The largest version is exact. */
	assert_int_equal(genv_floors(&env, "o1", GATE_VERSION_MAX, 60000, "B:1", &res), 0);
	assert_true(res.applied);
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(v.v.floors_version, GATE_VERSION_MAX);
	assert_int_equal(view_floor(&v, "A"), 0); /* left out: floor 0 */
	assert_int_equal(v.v.shortfall, 1);

	/* The system limit too. */
	assert_int_equal(genv_system_limit(&env, 2, 50, &res), 0);
	assert_true(res.applied);
	assert_int_equal(genv_system_limit(&env, 2, 60, &res), 0);
	assert_false(res.applied);
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(v.v.system_limit, 50);
}

static bool floors_expired(void *arg)
{
	struct view_copy v;

	assert_int_equal(genv_read(&env, arg, &v), 0);
	return !v.v.floors_valid;
}

/* Floors expire on the Redis server's clock (a stored field, not a TTL); acquire and release still
 * use the stored floor afterwards; a pinned clock gives the vectors exact instants. */
static void floor_expiry(void **state)
{
	struct gate_install_result res;
	struct view_copy v;
	struct admit_out o;

	genv_fresh(&env, 1000, org1);
	assert_int_equal(genv_limits(&env, "o1", 1, 10, 0, true, "A::a1 B::a2", NULL), 0);
	assert_int_equal(genv_floors(&env, "o1", 1, 400, "A:3 B:3", &res), 0);
	assert_int_equal(res.expire_ms, res.now_ms + 400);
	o = genv_admit(&env, "o1", "e1", "A");
	expect_admitted(o, "A");
	if (o.r.now_ms < res.expire_ms) /* decided before the expiry (a slow machine may miss it) */
		assert_false(o.r.decisions[0].fcfs);
	/* No key TTL: the state hash never expires. */
	char key[128];
	assert_true(gate_org_key("o1", "state", key, sizeof(key)) > 0);
	assert_int_equal(genv_cmd(&env, NULL, 0, "PTTL", key, NULL), -1);

	/* Wait for the server's clock to pass the expiry (observable through the read). */
	fixture_run_until(&env.loop, floors_expired, "o1", 30000);
	o = genv_admit(&env, "o1", "e2", "A");
	expect_admitted(o, "A");
	assert_true(o.r.decisions[0].fcfs);
	assert_true(o.r.now_ms >= res.expire_ms);
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(v.v.shortfall, 4); /* A 3 - 2 + B 3: the stored floors */
	assert_int_equal(view_agent_shortfall(&v, "a1"), 1);
	expect_freed(genv_release(&env, "o1", "e2"));
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(v.v.shortfall, 5);
	expect_freed(genv_release(&env, "o1", "e1"));

	/* A pinned clock: valid until expire - 1, expired at expire. */
	assert_int_equal(genv_pin_clock(&env, "o1", 1000), 0);
	assert_int_equal(genv_floors(&env, "o1", 2, 500, "A:3 B:3", &res), 0);
	assert_int_equal(res.expire_ms, 1500);
	assert_int_equal(genv_pin_clock(&env, "o1", 1499), 0);
	o = genv_admit(&env, "o1", "e3", "A");
	assert_false(o.r.decisions[0].fcfs);
	assert_int_equal(o.r.now_ms, 1499);
	assert_int_equal(genv_pin_clock(&env, "o1", 1500), 0);
	o = genv_admit(&env, "o1", "e4", "A");
	assert_true(o.r.decisions[0].fcfs);
	assert_int_equal(genv_pin_clock(&env, "o1", -1), 0);
	o = genv_admit(&env, "o1", "e5", "A");
	assert_true(o.r.now_ms > 1000000000000ULL); /* the server's clock again */
}

/* The selector's ordered candidates: one round trip, the first the rule admits, every refusal
 * named; a refusal that holds for every campaign ends the walk. */
static void candidates(void **state)
{
	struct admit_out o;

	genv_fresh(&env, 1000, org1);
	assert_int_equal(genv_limits(&env, "o1", 1, 4, 0, true, "A::a1 B::a2 C:1:a3", NULL), 0);
	assert_int_equal(genv_floors(&env, "o1", 1, 600000, "A:2 B:2", NULL), 0);
	expect_admitted(genv_admit(&env, "o1", "n1", "A"), "A");
	expect_admitted(genv_admit(&env, "o1", "n2", "A"), "A");
	/* A at its floor: 3 + 0 + S 2 > 4, B's floor is reserved; B is under its floor. */
	o = genv_admit(&env, "o1", "n3", "A Z B");
	expect_admitted(o, "B");
	assert_int_equal(o.r.index, 2);
	assert_int_equal(o.r.n_decisions, 3);
	assert_int_equal(o.r.decisions[0].level, FAIRSHARE_LEVEL_FAIR_SHARE);
	assert_int_equal(o.r.decisions[0].reason, GATE_REASON_FLOORS);
	assert_int_equal(o.r.decisions[1].level,
			 FAIRSHARE_LEVEL_CAMPAIGN); /* Z: no limits installed */
	assert_int_equal(o.r.decisions[1].reason, GATE_REASON_UNKNOWN);
	assert_int_equal(o.r.decisions[2].level, FAIRSHARE_LEVEL_NONE);
	assert_false(o.r.decisions[2].fcfs);
	/* C has no floor; the free line is B's: all refused, each named. */
	o = genv_admit(&env, "o1", "n4", "C A");
	expect_refused(o, FAIRSHARE_LEVEL_FAIR_SHARE, GATE_REASON_FLOORS);
	assert_int_equal(o.r.n_decisions, 2);
	assert_int_equal(o.r.decisions[0].level, FAIRSHARE_LEVEL_FAIR_SHARE);
	expect_admitted(genv_admit(&env, "o1", "n5", "C A B"), "B");
	/* The org is full: the first refusal blocks every campaign and ends the walk. */
	o = genv_admit(&env, "o1", "n6", "C A B");
	expect_refused(o, FAIRSHARE_LEVEL_ORG, GATE_REASON_FULL);
	assert_int_equal(o.r.n_decisions, 1);

	/* Bad requests never reach Redis. */
	const char *many[GATE_CANDIDATES_MAX + 1];
	for (int i = 0; i <= GATE_CANDIDATES_MAX; i++)
		many[i] = "A";
	struct gate_admit_req req = { .org = "o1", .call = "n7", .campaigns = many };
	req.n_campaigns = GATE_CANDIDATES_MAX + 1;
	assert_int_equal(gate_admit(env.g, &req, NULL, NULL), -EINVAL);
	req.n_campaigns = 1;
	req.call = "bad id";
	assert_int_equal(gate_admit(env.g, &req, (gate_admit_cb)1, NULL), -EINVAL);
	req.call = "n7";
	req.org = "{o1}";
	assert_int_equal(gate_admit(env.g, &req, (gate_admit_cb)1, NULL), -EINVAL);
}

/* A stale rebuild's system init (another generation in {sys}:gen) while an org still holds the
 * current one: the org's admissions are refused (GATE_ELOST) and take nothing, so nobody admits
 * against another build's system count (README-pg.md, the stale reconciler). */
static void system_generation_checked(void **state)
{
	struct view_copy v;

	genv_fresh(&env, 1000, org1);
	assert_int_equal(genv_limits(&env, "o1", 1, 4, 0, true, "A::a1", NULL), 0);
	expect_admitted(genv_admit(&env, "o1", "s1", "A"), "A");
	genv_cmd(&env, NULL, 0, "SET", GATE_SYS_GEN_KEY, "e9.stale", NULL);
	assert_int_equal(genv_admit(&env, "o1", "s2", "A").status, GATE_ELOST);
	genv_cmd(&env, NULL, 0, "SET", GATE_SYS_GEN_KEY, GENV_GEN, NULL);
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(view_running(&v, "A"), 1); /* s2 took nothing */
	expect_admitted(genv_admit(&env, "o1", "s2", "A"), "A");
}

/* State absent or of another generation: nothing admitted, nothing written, GATE_ELOST. */
static void generation_guard(void **state)
{
	struct view_copy v;
	char key[128];

	genv_fresh(&env, 1000, org1);
	assert_int_equal(genv_limits(&env, "o1", 1, 4, 0, true, "A::a1", NULL), 0);
	expect_admitted(genv_admit(&env, "o1", "g1", "A"), "A");

	genv_cmd(&env, NULL, 0, "FLUSHALL", NULL);
	assert_int_equal(genv_admit(&env, "o1", "g2", "A").status, GATE_ELOST);
	assert_int_equal(genv_admit_direct(&env, "o1", "g3", NULL, true).status, GATE_ELOST);
	assert_int_equal(genv_release(&env, "o1", "g1").status, GATE_ELOST);
	assert_int_equal(genv_limits(&env, "o1", 2, 4, 0, true, "A::a1", NULL), GATE_ELOST);
	assert_int_equal(genv_floors(&env, "o1", 1, 1000, "A:1", NULL), GATE_ELOST);
	assert_int_equal(genv_wait(&env, "o1", "g3", true, NULL), GATE_ELOST);
	assert_int_equal(genv_read(&env, "o1", &v), GATE_ELOST);
	assert_int_equal(genv_rebuild(&env, "o1", NULL, 0), GATE_ELOST); /* no system gen */
	assert_int_equal(genv_cmd(&env, NULL, 0, "DBSIZE", NULL), 0);	 /* nothing written */

	/* Another generation: the state of G1 is refused to a gate of G2, and back. */
	genv_fresh(&env, 1000, org1);
	assert_int_equal(genv_limits(&env, "o1", 1, 4, 0, true, "A::a1", NULL), 0);
	assert_int_equal(gate_set_generation(env.g, "G2"), 0);
	assert_int_equal(genv_admit(&env, "o1", "g4", "A").status, GATE_ELOST);
	assert_int_equal(gate_set_generation(env.g, NULL), 0);
	assert_int_equal(genv_admit(&env, "o1", "g4", "A").status, GATE_ELOST);
	assert_int_equal(gate_set_generation(env.g, GENV_GEN), 0);
	assert_true(gate_org_key("o1", "slots", key, sizeof(key)) > 0);
	assert_int_equal(genv_cmd(&env, NULL, 0, "HLEN", key, NULL), 0);
	expect_admitted(genv_admit(&env, "o1", "g4", "A"), "A");
	/* The org's own generation key gone (another org's state intact): lost too. */
	assert_true(gate_org_key("o1", "gen", key, sizeof(key)) > 0);
	genv_cmd(&env, NULL, 0, "DEL", key, NULL);
	assert_int_equal(genv_admit(&env, "o1", "g5", "A").status, GATE_ELOST);

	/* An org built under the generation but with no limits yet: -ENOENT, nothing admitted. */
	const char *org2[] = { "o2", NULL };
	assert_int_equal(genv_rebuild(&env, org2[0], NULL, 0), 0);
	assert_int_equal(genv_admit(&env, "o2", "g6", "A").status, -ENOENT);
}

/* Waiting direct dials (C5, C10): registered per call id, reserve min(k, max(1, floor)), the
 * reserve does not apply to direct dials, admission withdraws the registration (R6, R8). */
static void direct_waiters(void **state)
{
	struct gate_wait_result w;
	struct view_copy v;
	struct admit_out o;

	genv_fresh(&env, 1000, org1);
	assert_int_equal(genv_limits(&env, "o1", 1, 3, 0, true, "A::a1", NULL), 0);
	assert_int_equal(genv_floors(&env, "o1", 1, 600000, "A:2 *:1", NULL), 0);
	assert_int_equal(genv_wait(&env, "o1", "d1", true, &w), 0);
	assert_true(w.changed);
	assert_int_equal(w.direct_waiting, 1);
	assert_int_equal(genv_wait(&env, "o1", "d1", true, &w), 0); /* idempotent */
	assert_false(w.changed);
	assert_int_equal(w.direct_waiting, 1);
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(v.v.direct_reserve, 1);
	assert_int_equal(v.v.waiters, 1);

	expect_admitted(genv_admit(&env, "o1", "a1c", "A"), "A");
	expect_admitted(genv_admit(&env, "o1", "a2c", "A"), "A");
	/* The last line is held for the waiting direct dial. */
	expect_refused(genv_admit(&env, "o1", "a3c", "A"), FAIRSHARE_LEVEL_FAIR_SHARE,
		       GATE_REASON_DIRECT_RESERVE);
	o = genv_admit_direct(&env, "o1", "d1", "ag9", false);
	expect_admitted(o, NULL);
	assert_int_equal(o.r.index, -1);
	assert_int_equal(o.r.waiter, -1);
	assert_int_equal(o.r.direct_waiting, 0);
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(view_running(&v, "*"), 1);
	assert_int_equal(view_agent_running(&v, "ag9"), 1);

	/* Refused (org full) with wait: registered in the same step; unwait withdraws, once. */
	o = genv_admit_direct(&env, "o1", "d2", NULL, true);
	expect_refused(o, FAIRSHARE_LEVEL_ORG, GATE_REASON_FULL);
	assert_int_equal(o.r.waiter, 1);
	assert_int_equal(o.r.direct_waiting, 1);
	o = genv_admit_direct(&env, "o1", "d2", NULL, true); /* again: already waiting */
	assert_int_equal(o.r.waiter, 0);
	assert_int_equal(o.r.direct_waiting, 1);
	assert_int_equal(genv_wait(&env, "o1", "d2", false, &w), 0);
	assert_true(w.changed);
	assert_int_equal(w.direct_waiting, 0);
	assert_int_equal(genv_wait(&env, "o1", "d2", false, &w), 0);
	assert_false(w.changed);

	expect_freed(genv_release(&env, "o1", "d1"));
	expect_freed(genv_release(&env, "o1", "a1c"));
	expect_freed(genv_release(&env, "o1", "a2c"));
	expect_zero("o1");
}

/* Every decision counted by the level that refused, fcfs likewise, in total and per minute. */
static void stats(void **state)
{
	struct gate_stats s;

	genv_fresh(&env, 1000, org1);
	assert_int_equal(genv_pin_clock(&env, "o1", 5000000), 0);
	assert_int_equal(genv_limits(&env, "o1", 1, 2, 0, true, "A:1:a1 B::a2", NULL), 0);
	expect_admitted(genv_admit(&env, "o1", "s1", "A"), "A"); /* fcfs */
	expect_refused(genv_admit(&env, "o1", "s2", "A"), FAIRSHARE_LEVEL_CAMPAIGN,
		       GATE_REASON_FULL); /* fcfs */
	assert_int_equal(genv_floors(&env, "o1", 1, 600000, "A:1 B:1", NULL), 0);
	expect_admitted(genv_admit(&env, "o1", "s3", "A B"), "B"); /* 2 decisions */
	expect_refused(genv_admit(&env, "o1", "s4", "B A"), FAIRSHARE_LEVEL_ORG, GATE_REASON_FULL);
	assert_int_equal(genv_stats(&env, "o1", &s), 0);
	assert_int_equal(s.now_s, 5000);
	assert_int_equal(s.total.admitted, 2);
	assert_int_equal(s.total.fcfs, 2);
	assert_int_equal(s.total.refused[FAIRSHARE_LEVEL_CAMPAIGN], 2);
	assert_int_equal(s.total.refused[FAIRSHARE_LEVEL_ORG], 1);
	assert_int_equal(s.total.refused[FAIRSHARE_LEVEL_SYSTEM], 0);
	assert_memory_equal(&s.total, &s.minute, sizeof(s.total));

	/* 59 s later the minute still holds them; 60 s later it has rolled over. */
	assert_int_equal(genv_pin_clock(&env, "o1", 5059999), 0);
	expect_refused(genv_admit(&env, "o1", "s5", "A"), FAIRSHARE_LEVEL_ORG, GATE_REASON_FULL);
	assert_int_equal(genv_stats(&env, "o1", &s), 0);
	assert_int_equal(s.minute.refused[FAIRSHARE_LEVEL_ORG], 2);
	assert_int_equal(s.minute.admitted, 2);
	assert_int_equal(genv_pin_clock(&env, "o1", 5060000), 0);
	assert_int_equal(genv_stats(&env, "o1", &s), 0);
	assert_int_equal(s.minute.admitted, 0);
	assert_int_equal(s.minute.refused[FAIRSHARE_LEVEL_ORG], 1);
	assert_int_equal(s.total.refused[FAIRSHARE_LEVEL_ORG], 2);
	assert_int_equal(s.total.admitted, 2);
	/* A second slot reused a minute later starts from zero. */
	assert_int_equal(genv_pin_clock(&env, "o1", 5120000), 0);
	expect_refused(genv_admit(&env, "o1", "s6", "A"), FAIRSHARE_LEVEL_ORG, GATE_REASON_FULL);
	assert_int_equal(genv_stats(&env, "o1", &s), 0);
	assert_int_equal(s.minute.refused[FAIRSHARE_LEVEL_ORG], 1);
	assert_int_equal(s.total.refused[FAIRSHARE_LEVEL_ORG], 3);
}

/* The org's counts and floors in one round trip (capacity view). */
static void read_view(void **state)
{
	struct view_copy v;

	genv_fresh(&env, 900, org1);
	assert_int_equal(genv_limits(&env, "o1", 3, 20, 8, true, "A:50:a1 B::a1 C::a2", NULL), 0);
	assert_int_equal(genv_floors(&env, "o1", 4, 600000, "A:10 B:6 C:4", NULL), 0);
	for (int i = 0; i < 7; i++) {
		char call[16];
		snprintf(call, sizeof(call), "r%d", i);
		expect_admitted(genv_admit(&env, "o1", call, "A"), "A");
	}
	expect_admitted(genv_admit(&env, "o1", "r9", "B"), "B");
	expect_admitted(genv_admit_direct(&env, "o1", "rd", "a2", false), NULL);
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(v.v.limits_version, 3);
	assert_int_equal(v.v.org_limit, 20);
	assert_int_equal(v.v.per_agent, 8);
	assert_true(v.v.enforced);
	assert_int_equal(v.v.org_running, 9);
	assert_int_equal(v.v.system_limit, 900);
	assert_int_equal(v.v.system_running, 9);
	assert_int_equal(v.v.floors_version, 4);
	assert_true(v.v.floors_valid);
	assert_int_equal(v.v.shortfall, 3 + 5 + 4);
	assert_int_equal(v.v.slots, 9);
	assert_int_equal(v.n_campaigns, 4);
	assert_string_equal(v.campaigns[0].id, "*");
	assert_int_equal(v.campaigns[0].running, 1);
	assert_false(v.campaigns[0].known);
	assert_string_equal(v.campaigns[1].id, "A");
	assert_int_equal(v.campaigns[1].running, 7);
	assert_int_equal(v.campaigns[1].floor, 10);
	assert_int_equal(v.campaigns[1].ceiling, 50);
	assert_string_equal(v.campaigns[1].agent, "a1");
	assert_int_equal(v.campaigns[3].ceiling, 0);
	assert_int_equal(view_agent_running(&v, "a1"), 8);
	assert_int_equal(view_agent_shortfall(&v, "a1"), 3 + 5);
	assert_int_equal(view_agent_running(&v, "a2"), 1); /* the direct dial's agent */
	assert_int_equal(view_agent_shortfall(&v, "a2"), 4);
}

/* The reconciler's primitive: an org rebuilt from its live calls keeps limits and floors. */
static void rebuild(void **state)
{
	const struct gate_slot_record recs[] = {
		{ "x1", "A", "a1", 100 },  { "x2", "A", "a1", 200 }, { "x1", "A", "a1", 100 },
		{ "x3", NULL, "a2", 300 }, { "x4", "B", NULL, 400 },
	};
	const char *orgs[] = { "o1", "o2", NULL };
	struct view_copy v;

	genv_fresh(&env, 1000, orgs);
	assert_int_equal(genv_limits(&env, "o1", 1, 10, 0, true, "A::a1 B", NULL), 0);
	assert_int_equal(genv_floors(&env, "o1", 1, 600000, "A:3 B:1", NULL), 0);
	assert_int_equal(genv_limits(&env, "o2", 1, 10, 0, true, "A::a1", NULL), 0);
	expect_admitted(genv_admit(&env, "o2", "y1", "A"), "A");
	expect_admitted(genv_admit(&env, "o1", "y2", "A"), "A");

	assert_int_equal(genv_rebuild(&env, "o1", recs, 5), 0);
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(v.v.org_running, 4); /* x1 counted once; y2 is not a live call */
	assert_int_equal(v.v.system_running, 5);
	assert_int_equal(v.v.slots, 4);
	assert_int_equal(view_running(&v, "A"), 2);
	assert_int_equal(view_running(&v, "*"), 1);
	assert_int_equal(view_agent_running(&v, "a1"), 2);
	assert_int_equal(v.v.shortfall, 1); /* A 3 - 2, B 1 - 1 */
	assert_int_equal(view_agent_shortfall(&v, "a1"), 1);
	assert_int_equal(v.v.limits_version, 1);
	assert_int_equal(genv_release(&env, "o1", "y2").r.outcome, GATE_NOT_HELD);
	struct release_out r = genv_release(&env, "o1", "x2");
	expect_freed(r);
	assert_int_equal(r.r.taken_ms, 200);
	assert_int_equal(genv_rebuild(&env, "o1", NULL, 0), 0);
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(v.v.system_running, 1); /* o2's call */
	assert_int_equal(v.v.shortfall, 4);
}

/* A delta install (the changed floors only, O(changed)) leaves the gate exactly as a full install
 * of the same floors would; it applies only on top of its base version. */
static void delta_install(void **state)
{
	const char *orgs[] = { "o1", "o2", NULL };
	struct gate_install_result res;
	struct view_copy v1, v2;

	genv_fresh(&env, 1000, orgs);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(
			genv_limits(&env, orgs[i], 1, 20, 0, true, "A::a1 B::a1 C::a2 D::a3", NULL),
			0);
		expect_admitted(genv_admit(&env, orgs[i], "d1", "A"), "A");
		expect_admitted(genv_admit(&env, orgs[i], "d2", "A"), "A");
		expect_admitted(genv_admit(&env, orgs[i], "d3", "C"), "C");
	}
	assert_int_equal(genv_floors(&env, "o1", 1, 60000, "A:3 B:2 C:1 *:2", &res), 0);
	assert_int_equal(res.shortfall, 1 + 2);
	assert_int_equal(genv_floors_delta(&env, "o1", 1, 2, 90000, "A:1 D:2 C:0 *:1", &res), 0);
	assert_true(res.applied);
	assert_int_equal(res.expire_ms, res.now_ms + 90000);
	assert_int_equal(genv_floors(&env, "o2", 2, 90000, "A:1 B:2 D:2 *:1", NULL), 0);
	assert_int_equal(genv_read(&env, "o1", &v1), 0);
	assert_int_equal(genv_read(&env, "o2", &v2), 0);
	assert_int_equal(v1.v.shortfall, 4); /* B 2 + D 2 */
	assert_int_equal(v1.v.shortfall, v2.v.shortfall);
	assert_int_equal(v1.v.floors_version, 2);
	assert_int_equal(v1.n_campaigns, v2.n_campaigns);
	for (uint32_t i = 0; i < v1.n_campaigns; i++) {
		assert_string_equal(v1.campaigns[i].id, v2.campaigns[i].id);
		assert_int_equal(v1.campaigns[i].floor, v2.campaigns[i].floor);
	}
	assert_int_equal(v1.n_agents, v2.n_agents);
	for (uint32_t i = 0; i < v1.n_agents; i++) {
		assert_string_equal(v1.agents[i].id, v2.agents[i].id);
		assert_int_equal(v1.agents[i].shortfall, v2.agents[i].shortfall);
	}
	/* Not on top of the stored version: nothing changes, the caller installs in full. */
	assert_int_equal(genv_floors_delta(&env, "o1", 1, 3, 90000, "B:0", &res), 0);
	assert_false(res.applied);
	assert_int_equal(res.version, 2);
	assert_int_equal(genv_floors_delta(&env, "o1", 2, 3, 90000, "B:0", &res), 0);
	assert_true(res.applied);
	assert_int_equal(res.shortfall, 2);
	/* The same campaign twice is a caller's bug, refused before anything changes. */
	assert_int_equal(genv_floors_delta(&env, "o1", 3, 4, 90000, "B:1 B:2", &res), DSP_EREDIS);
	assert_int_equal(genv_read(&env, "o1", &v1), 0);
	assert_int_equal(v1.v.floors_version, 3);
}

struct contract {
	int calls, status;
};

static void contract_cb(struct gate *g, int status, const struct gate_admit_result *r, void *data)
{
	struct contract *c = data;

	c->calls++;
	c->status = status;
	assert_true(status ? r == NULL : r != NULL);
}

static bool conn_down(void *arg)
{
	return !redis_conn_is_up(arg);
}

static bool conn_up(void *arg)
{
	return redis_conn_is_up(arg);
}

/* The async contract (STYLE rule 4): an error return means no callback; otherwise exactly one,
 * -ECANCELED when the gate is freed or the connection closed first. */
static void async_contract(void **state)
{
	struct gate_admit_req req = { .org = "o1", .call = "ac1", .direct = true };
	struct contract c = { 0 };
	struct gate *g2;

	genv_fresh(&env, 1000, org1);
	assert_int_equal(genv_limits(&env, "o1", 1, 4, 0, true, "A::a1", NULL), 0);
	/* Freed with a request in flight: answered -ECANCELED at once; the reply is dropped. */
	assert_int_equal(gate_new(env.conn, env.reg, GENV_GEN, &g2), 0);
	assert_int_equal(gate_admit(g2, &req, contract_cb, &c), 0);
	gate_free(g2);
	assert_int_equal(c.calls, 1);
	assert_int_equal(c.status, -ECANCELED);
	struct release_out r = genv_release(&env, "o1", "ac1"); /* the admission did run */
	assert_int_equal(r.r.outcome, GATE_FREED);
	assert_int_equal(c.calls, 1);

	/* While the connection is down: refused at once, no callback. */
	const char *kill[] = { "CLIENT", "KILL", "TYPE", "normal", "SKIPME", "no" };
	assert_int_equal(redis_conn_command_argv(env.conn, NULL, NULL, 6, kill, NULL), 0);
	fixture_run_until(&env.loop, conn_down, env.conn, GENV_TIMEOUT_MS);
	assert_int_equal(gate_admit(env.g, &req, contract_cb, &c), -ENOTCONN);
	assert_int_equal(c.calls, 1);
	fixture_run_until(&env.loop, conn_up, env.conn, GENV_TIMEOUT_MS);
	expect_admitted(genv_admit_direct(&env, "o1", "ac2", NULL, false), NULL);
}

/* gate_system_init() under the generation already in force would reset the system count while
 * the org, still built under it, keeps admitting: the system limit would be exceeded. */
static void system_init_same_generation(void **state)
{
	struct view_copy v;

	genv_fresh(&env, 1, org1);
	assert_int_equal(genv_limits(&env, "o1", 1, 4, 0, true, "A::a1", NULL), 0);
	expect_admitted(genv_admit(&env, "o1", "s1", "A"), "A");
	assert_int_equal(genv_system_init(&env, 2, 1), -EEXIST);
	assert_int_equal(genv_read(&env, "o1", &v), 0);
	assert_int_equal(v.v.system_running, 1);
	expect_refused(genv_admit(&env, "o1", "s2", "A"), FAIRSHARE_LEVEL_SYSTEM, GATE_REASON_FULL);
}

static void done_never(struct gate *g, int status, void *data)
{
	fail();
}

/* The test clock is not in the product's registry: production cannot pin an org's clock. */
static void test_clock_not_in_product(void **state)
{
	struct redis_scripts *reg;
	struct gate *g2;

	assert_int_equal(redis_scripts_new(&reg), 0);
	assert_int_equal(gate_scripts_register(reg), 0);
	assert_null(redis_scripts_find(reg, "gate_test_clock.lua"));
	assert_non_null(redis_scripts_find(reg, "gate_admit.lua"));
	assert_int_equal(gate_new(env.conn, reg, GENV_GEN, &g2), 0);
	assert_int_equal(gate_test_pin_clock(g2, "o1", 1000, done_never, NULL), -ENOTSUP);
	gate_free(g2);
	redis_scripts_free(reg);
	assert_non_null(redis_scripts_find(env.reg, "gate_test_clock.lua"));
}

struct parsed {
	int calls, status;
	struct gate_admit_result r;
};

static void parsed_cb(struct gate *g, int status, const struct gate_admit_result *r, void *data)
{
	struct parsed *p = data;

	p->calls++;
	p->status = status;
	if (r)
		p->r = *r;
}

/* Feeds a fabricated admission reply {ints..., with a string at index 1 and 6} to the parser. */
static struct parsed parse_fake(bool direct, uint32_t n_candidates, const char *campaign,
				const long long *v, size_t n)
{
	redisReply el[16], *elp[16],
		arr = { .type = REDIS_REPLY_ARRAY, .elements = n, .element = elp };
	struct gate_req req = {
		.op = GATE_OP_ADMIT, .direct = direct, .n_candidates = n_candidates, .what = "admit"
	};
	struct parsed p = { 0 };

	assert_true(n <= 16);
	for (size_t i = 0; i < n; i++) {
		elp[i] = &el[i];
		el[i] = (redisReply){ .type = REDIS_REPLY_INTEGER, .integer = v[i] };
	}
	el[1] = (redisReply){ .type = REDIS_REPLY_STRING,
			      .str = (char *)campaign,
			      .len = strlen(campaign) };
	req.cb.admit = parsed_cb;
	req.data = &p;
	gate_reply_dispatch(&req, 0, &arr);
	assert_int_equal(p.calls, 1);
	return p;
}

/* A reply whose outcome and decisions disagree is malformed, never an admission. */
static void admit_reply_consistency(void **state)
{
	/* Well formed: refused by A (agent), admitted at B. */
	const long long ok[] = { 1, 0, 5, 0, 0, 2, 3, 1, 0, 0, 0, 0 };
	/* Outcome 1, but the only decision refused at the organisation level. */
	const long long refused_as_admitted[] = { 1, 0, 5, 0, 0, 1, 2, 1, 0 };
	/* Outcome 1, the first decision admitted and a second one after it. */
	const long long admitted_first[] = { 1, 0, 5, 0, 0, 2, 0, 0, 0, 5, 3, 0 };
	/* Outcome 0 with an admitting decision. */
	const long long admitted_as_refused[] = { 0, 0, 5, 0, 0, 1, 0, 0, 0 };
	/* Level none with a reason. */
	const long long none_with_reason[] = { 1, 0, 5, 0, 0, 1, 0, 3, 0 };
	struct parsed p;

	p = parse_fake(false, 2, "B", ok, 12);
	assert_int_equal(p.status, 0);
	assert_int_equal(p.r.outcome, GATE_ADMITTED);
	assert_int_equal(p.r.index, 1);
	p = parse_fake(false, 1, "A", refused_as_admitted, 9);
	assert_int_equal(p.status, DSP_EREDIS);
	p = parse_fake(false, 2, "A", admitted_first, 12);
	assert_int_equal(p.status, DSP_EREDIS);
	p = parse_fake(false, 1, "", admitted_as_refused, 9);
	assert_int_equal(p.status, DSP_EREDIS);
	p = parse_fake(false, 1, "A", none_with_reason, 9);
	assert_int_equal(p.status, DSP_EREDIS);
	/* Admitted without a campaign: batch needs a candidate, direct needs "*". */
	p = parse_fake(false, 1, "", (const long long[]){ 1, 0, 5, 0, 0, 1, 0, 0, 0 }, 9);
	assert_int_equal(p.status, DSP_EREDIS);
	p = parse_fake(true, 1, "*", (const long long[]){ 1, 0, 5, 0, 0, 1, 0, 0, 0 }, 9);
	assert_int_equal(p.status, 0);
	p = parse_fake(true, 1, "", (const long long[]){ 1, 0, 5, 0, 0, 1, 0, 0, 0 }, 9);
	assert_int_equal(p.status, DSP_EREDIS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(levels),
		cmocka_unit_test(idempotence),
		cmocka_unit_test(fencing),
		cmocka_unit_test(floor_expiry),
		cmocka_unit_test(candidates),
		cmocka_unit_test(generation_guard),
		cmocka_unit_test(system_generation_checked),
		cmocka_unit_test(direct_waiters),
		cmocka_unit_test(stats),
		cmocka_unit_test(read_view),
		cmocka_unit_test(rebuild),
		cmocka_unit_test(delta_install),
		cmocka_unit_test(async_contract),
		cmocka_unit_test(test_clock_not_in_product),
		cmocka_unit_test(admit_reply_consistency),
		cmocka_unit_test(system_init_same_generation),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
