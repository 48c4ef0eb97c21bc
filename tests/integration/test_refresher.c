/* The refresher (dispatcher/gate/refresher.h) against a real PostgreSQL and Redis:
 *   - the capped due count is an index range scan on contacts_dialable_idx under a Limit;
 *   - election: of two refreshers, one installs and the other installs nothing;
 *   - C4: a limit changed in PostgreSQL reaches the gate's decisions within two refresher
 *     cycles of the commit (the bound is the period, not a wall-clock guess);
 *   - takeover: the holder (a forked child) is SIGSTOPped between its renew and its install,
 *     another refresher takes over once the lease has run out, the woken holder's install is
 *     refused by version in Redis and in PostgreSQL, and the carry stored after the change of
 *     holder equals a single refresher's on the same inputs and elapsed times.
 * Time is an argument (refresher_step()'s elapsed), so the carries are exact. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "fairshare.h"
#include "gate_harness.h"
#include "gate_pg_test.h"
#include "queue_sql.h"
#include "refresher.h"
#include "redis_sub.h"
#include "refresher_sql.h"

#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#define N_CAMP	 6
#define LEASE_MS 1000

static struct embedded svc;
static PGconn *admin;
static struct gate_env env;

/* A pool, the gate's PostgreSQL side and refreshers on env's loop. */
struct side {
	struct pg_pool *pool;
	struct gate_pg *gpg;
	struct refresher *r[2];
	int closed;
};

static void side_open(struct side *s, struct gate_env *e, const char *name, int n,
		      const struct refresher_options *opts)
{
	struct pg_pool_options o = {
		.conninfo = svc.database_url,
		.name = name,
		.size = 2,
		.connect_timeout_ms = 10000,
		.query_timeout_ms = 60000,
		.reconnect_min_ms = 20,
		.reconnect_max_ms = 200,
	};
	memset(s, 0, sizeof(*s));
	assert_int_equal(pg_pool_new(&e->loop, &o, &s->pool), 0);
	assert_int_equal(gate_pg_new(s->pool, NULL, &s->gpg), 0);
	for (int i = 0; i < n; i++)
		assert_int_equal(refresher_new(&e->loop, s->pool, e->g, s->gpg, &opts[i], &s->r[i]),
				 0);
	assert_int_equal(pg_pool_start(s->pool), 0);
	struct gp gp = { .pool = s->pool };
	fixture_run_until(&e->loop, gp_all_up, &gp, 60000);
}

static void side_close(struct side *s, struct gate_env *e)
{
	for (int i = 0; i < 2; i++)
		refresher_free(s->r[i]);
	pg_pool_close(s->pool, gp_closed_cb, &s->closed);
	fixture_run_until_count(&e->loop, &s->closed, 1, 60000);
	gate_pg_free(s->gpg);
}

struct step {
	int calls, status;
};

static void step_cb(struct refresher *r, int status, void *data)
{
	struct step *p = data;
	(void)r;
	p->calls++;
	p->status = status;
}

static int step_sync(struct gate_env *e, struct refresher *r, uint64_t elapsed)
{
	struct step p = { 0 };
	assert_int_equal(refresher_step(r, elapsed, step_cb, &p), 0);
	fixture_run_until_count(&e->loop, &p.calls, 1, 60000);
	return p.status;
}

/* Adds an organisation: org_limit 20, n campaigns "<org>_c<i>" on agents "<org>_a<i>", each
 * with `due` pending contacts due now. */
static void add_org(const char *org, int n, int due)
{
	gp_sql(admin, "INSERT INTO organisations (id, name) VALUES ('%s', '%s')", org, org);
	for (int i = 0; i < n; i++) {
		gp_sql(admin, "INSERT INTO agents (id, org_id) VALUES ('%s_a%d', '%s')", org, i,
		       org);
		gp_sql(admin,
		       "INSERT INTO campaigns (id, org_id, agent_id) VALUES ('%s_c%d', '%s', "
		       "'%s_a%d')",
		       org, i, org, org, i);
		gp_sql(admin,
		       "INSERT INTO batches (id, org_id, campaign_id) VALUES ('%s_b%d', '%s', "
		       "'%s_c%d')",
		       org, i, org, org, i);
		gp_sql(admin,
		       "INSERT INTO contacts (org_id, campaign_id, batch_id, phone, "
		       "next_attempt_at)"
		       " SELECT '%s', '%s_c%d', '%s_b%d', '+1415555' || lpad(g::text, 4, '0'),"
		       " now() - interval '1 minute' FROM generate_series(1, %d) g",
		       org, org, i, org, i, due);
	}
}

/* A fresh database and Redis state with the organisations of orgs (NULL-terminated), each as
 * add_org() makes it. */
static void seed_orgs(const char *const *orgs, int n, int due)
{
	gp_sql(admin, "TRUNCATE organisations, fair_share_installs, fair_share_floors,"
		      " fair_share_carries CASCADE");
	gp_sql(admin, "UPDATE leases SET owner = NULL, lease_until = '-infinity'"
		      " WHERE name = 'refresher'");
	for (int i = 0; orgs[i]; i++)
		add_org(orgs[i], n, due);
	genv_fresh(&env, 1000, orgs);
}

static void seed(const char *org, int n, int due)
{
	const char *orgs[] = { org, NULL };
	seed_orgs(orgs, n, due);
}

static long long org_version(const char *org)
{
	return gp_int(admin, "SELECT limits_version FROM organisations WHERE id = '%s'", org);
}

static uint64_t fv(uint64_t lease, uint64_t seq)
{
	uint64_t v = 0;
	assert_int_equal(gate_floors_version(lease, seq, &v), 0);
	return v;
}

static int setup(void **state)
{
	(void)state;
	fixture_start(&svc, true, true, false, true);
	admin = fixture_pg(&svc);
	genv_open(&env, svc.redis_url, "refresher-test", true);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	genv_close(&env);
	PQfinish(admin);
	embedded_stop(&svc);
	return 0;
}

static void plan_has(const char *explain, const char *const *values, int n, const char *want)
{
	PGresult *res = PQexecParams(admin, explain, n, NULL, values, NULL, NULL, 0);
	assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
	char plan[8192] = "";
	for (int i = 0; i < PQntuples(res); i++) {
		strncat(plan, PQgetvalue(res, i, 0), sizeof(plan) - strlen(plan) - 2);
		strcat(plan, "\n");
	}
	PQclear(res);
	if (!strstr(plan, want) || strstr(plan, "Seq Scan on contacts"))
		fail_msg("plan without %s:\n%s", want, plan);
}

/* The capped due count reads at most the cap's entries of the dialable index, alone and inside
 * the refresher's per-organisation statement, in custom and generic plans, on 60,000 contacts
 * over 6 campaigns (a third done, due times spread over a day). */
static void test_due_capped_plan(void **state)
{
	(void)state;
	seed("op", 6, 0);
	gp_sql(admin, "INSERT INTO contacts (org_id, campaign_id, batch_id, phone, state,"
		      " next_attempt_at) SELECT 'op', 'op_c' || (g %% 6), 'op_b' || (g %% 6),"
		      " '+1415' || lpad(g::text, 7, '0'), (CASE WHEN g %% 3 = 0 THEN 'done'"
		      " ELSE 'pending' END)::contact_state,"
		      " now() - interval '12 hours' + (g %% 1440) * interval '1 minute'"
		      " FROM generate_series(1, 60000) g");
	gp_sql(admin, "ANALYZE contacts");
	const char *modes[] = { "force_custom_plan", "force_generic_plan" };
	const char *v[] = { "op_c1", "20" }, *ov[] = { "op" };
	for (int m = 0; m < 2; m++) {
		gp_sql(admin, "SET plan_cache_mode = %s", modes[m]);
		plan_has("EXPLAIN (COSTS OFF) " SQL_COUNT_DUE_CAPPED, v, 2,
			 "contacts_dialable_idx");
		plan_has("EXPLAIN (COSTS OFF) " SQL_COUNT_DUE_CAPPED, v, 2, "Limit");
		plan_has("EXPLAIN (COSTS OFF) " SQL_REFRESHER_CAMPAIGNS, ov, 1,
			 "contacts_dialable_idx");
	}
	gp_sql(admin, "RESET plan_cache_mode");
	PGresult *res = PQexecParams(admin, SQL_COUNT_DUE_CAPPED, 2, NULL, v, NULL, NULL, 0);
	assert_string_equal(PQgetvalue(res, 0, 0), "20");
	PQclear(res);
}

/* Two refreshers: the first installs, the second finds it holding and installs nothing. */
static void test_election(void **state)
{
	(void)state;
	seed("oe", 3, 10);
	struct refresher_options o[2] = {
		{ .owner = "E1", .manual = true, .period_ms = 100, .lease_ms = 5000 },
		{ .owner = "E2", .manual = true, .period_ms = 100, .lease_ms = 5000 },
	};
	struct side s;
	side_open(&s, &env, "refr-e", 2, o);
	assert_int_equal(step_sync(&env, s.r[0], 0), 0);
	assert_int_equal(step_sync(&env, s.r[1], 0), -EAGAIN);
	assert_int_equal(step_sync(&env, s.r[0], 500), 0);
	assert_int_equal(step_sync(&env, s.r[1], 500), -EAGAIN);

	struct refresher_stats a, b;
	refresher_get_stats(s.r[0], &a);
	refresher_get_stats(s.r[1], &b);
	assert_int_equal(a.installs, 2);
	assert_int_equal(a.limits_installs, 1);
	assert_int_equal(b.installs, 0);
	assert_int_equal(b.not_holder, 2);
	assert_int_equal(b.lease_version, 0);
	uint64_t lease =
		(uint64_t)gp_int(admin, "SELECT version FROM leases WHERE name = 'refresher'");
	assert_int_equal(a.lease_version, lease);
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM leases WHERE owner = 'E1'"), 1);

	struct view_copy v;
	assert_int_equal(genv_read(&env, "oe", &v), 0);
	assert_int_equal(v.v.floors_version, fv(lease, 1));
	assert_int_equal(v.v.limits_version, org_version("oe")); /* bumped by every insert (0011) */
	assert_int_equal(v.v.org_limit, 20);
	/* need 10 each: floors 10, 10, 0 would not be fair; 20 over 3 is 7, 7, 6 */
	uint32_t sum = 0;
	for (int i = 0; i < 3; i++) {
		char id[16];
		snprintf(id, sizeof(id), "oe_c%d", i);
		uint32_t f = view_floor(&v, id);
		assert_true(f == 6 || f == 7);
		sum += f;
	}
	assert_int_equal(sum, 20);
	assert_int_equal(
		gp_int(admin, "SELECT version FROM fair_share_installs WHERE org_id = 'oe'"),
		(long long)fv(lease, 1));
	assert_int_equal(
		gp_int(admin, "SELECT sum(floor) FROM fair_share_floors WHERE org_id = 'oe'"), 20);
	side_close(&s, &env);
}

/* C4: a limit changed in PostgreSQL is in the gate's decisions within two cycles. */
struct c4_watch {
	struct gate_env *e;
	uint64_t want;
};

static bool limits_seen(void *arg)
{
	struct c4_watch *w = arg;
	struct view_copy v;
	return genv_read(w->e, "oc", &v) == 0 && v.v.limits_version >= w->want &&
	       v.v.floors_version > 0;
}

static void test_limit_change(void **state)
{
	(void)state;
	seed("oc", 2, 10);
	struct refresher_options o = { .owner = "C", .period_ms = 200, .lease_ms = 3000 };
	struct side s;
	side_open(&s, &env, "refr-c", 1, &o);
	assert_int_equal(refresher_start(s.r[0]), 0);
	struct c4_watch w = { &env, 1 };
	fixture_run_until(&env.loop, limits_seen, &w, 60000);

	gp_sql(admin, "UPDATE organisations SET org_limit = 3, limits_version = limits_version + 1"
		      " WHERE id = 'oc'");
	struct refresher_stats st;
	refresher_get_stats(s.r[0], &st);
	uint64_t c0 = st.cycles;
	w.want = (uint64_t)org_version("oc");
	fixture_run_until(&env.loop, limits_seen, &w, 60000);
	refresher_get_stats(s.r[0], &st);
	/* The cycle in progress at the commit (index c0) may have read before it; the next one
	 * (c0 + 1) cannot: the bound is one period plus one cycle, whatever the wall clock. */
	assert_int_equal(st.limits_installs, 2);
	assert_true(st.limits_cycle >= c0 && st.limits_cycle <= c0 + 1);

	struct view_copy v;
	assert_int_equal(genv_read(&env, "oc", &v), 0);
	assert_int_equal(v.v.org_limit, 3);
	char call[37];
	for (unsigned i = 0; i < 3; i++) {
		struct admit_out a = genv_admit(&env, "oc", gp_uuid(call, 100 + i), "oc_c0 oc_c1");
		assert_int_equal(a.status, 0);
		assert_int_equal(a.r.outcome, GATE_ADMITTED);
	}
	struct admit_out a = genv_admit(&env, "oc", gp_uuid(call, 103), "oc_c0 oc_c1");
	assert_int_equal(a.r.outcome, GATE_REFUSED);
	assert_int_equal(a.r.decisions[0].level, FAIRSHARE_LEVEL_ORG);
	side_close(&s, &env);
}

struct sys_watch {
	struct gate_env *e;
	uint32_t limit;	     /* wait for this system limit in Redis... */
	struct refresher *r; /* ...or for this refresher's cycles */
	uint64_t cycles;
};

static bool sys_limit_seen(void *arg)
{
	struct sys_watch *w = arg;
	struct view_copy v;
	return genv_read(w->e, "os", &v) == 0 && v.v.system_limit == w->limit;
}

static bool cycles_done(void *arg)
{
	struct sys_watch *w = arg;
	struct refresher_stats st;
	refresher_get_stats(w->r, &st);
	return st.cycles >= w->cycles;
}

/* A system-limit change must not be lost at a rebuild (issue 8 review): the refresher installs
 * the system limit; then Redis gets an older system limit and version behind its back (as a
 * way back built from limits read before the change writes them). The next cycles must
 * install PostgreSQL's value again — decided from the version Redis holds, not from the
 * refresher's memory of what it installed. */
static void test_system_limit_restored(void **state)
{
	(void)state;
	seed("os", 2, 10);
	gp_sql(admin, "UPDATE system_settings SET global_limit = 500,"
		      " limits_version = limits_version + 1");
	struct refresher_options o = { .owner = "S", .period_ms = 100, .lease_ms = 3000 };
	struct side s;
	side_open(&s, &env, "refr-s", 1, &o);
	assert_int_equal(refresher_start(s.r[0]), 0);
	struct sys_watch w = { .e = &env, .limit = 500, .r = s.r[0] };
	fixture_run_until(&env.loop, sys_limit_seen, &w, 60000);

	/* The rebuild's system init: the old limit 1000 at the old version 1. */
	genv_cmd(&env, NULL, 0, "EVAL",
		 "local raw = redis.call('HGET', KEYS[1], 'v')"
		 " local _, running = struct.unpack('<I4I4d', raw)"
		 " redis.call('HSET', KEYS[1], 'v', struct.pack('<I4I4d', tonumber(ARGV[1]),"
		 " running, tonumber(ARGV[2]))) return 1",
		 "1", GATE_SYS_STATE_KEY, "1000", "1", NULL);
	struct view_copy v;
	assert_int_equal(genv_read(&env, "os", &v), 0);
	assert_int_equal(v.v.system_limit, 1000);
	assert_int_equal(v.v.system_version, 1);

	/* Two more cycles: the one in progress may have read before the write, the next not. */
	struct refresher_stats st;
	refresher_get_stats(s.r[0], &st);
	w.cycles = st.cycles + 2;
	fixture_run_until(&env.loop, cycles_done, &w, 60000);
	assert_int_equal(genv_read(&env, "os", &v), 0);
	assert_int_equal(v.v.system_limit, 500);
	assert_int_equal((long long)v.v.system_version,
			 gp_int(admin, "SELECT limits_version FROM system_settings"));
	side_close(&s, &env);
	gp_sql(admin, "UPDATE system_settings SET global_limit = 1000,"
		      " limits_version = limits_version + 1");
}

/* Redis and PostgreSQL hold the same floors for org (every campaign of 0..n-1). */
static void floors_agree(const char *org, int n)
{
	struct view_copy v;
	assert_int_equal(genv_read(&env, org, &v), 0);
	assert_int_equal(
		v.v.floors_version,
		(uint64_t)gp_int(
			admin, "SELECT version FROM fair_share_installs WHERE org_id = '%s'", org));
	for (int i = 0; i < n; i++) {
		char id[32];
		snprintf(id, sizeof(id), "%s_c%d", org, i);
		assert_int_equal(view_floor(&v, id),
				 gp_int(admin,
					"SELECT coalesce((SELECT floor FROM fair_share_floors WHERE"
					" org_id = '%s' AND campaign_id = '%s'), 0)",
					org, id));
	}
}

/* A holder whose successor has installed in PostgreSQL (not yet in Redis) is refused by
 * PostgreSQL and then writes nothing to Redis: the fenced holder's floors never land in either
 * store once its successor began installing the organisation. Before that, the holder's second
 * and later installs are deltas against the floors it read, and agree with PostgreSQL's. */
static void test_fenced_writes_nothing(void **state)
{
	(void)state;
	seed("of", 3, 10);
	struct refresher_options o = {
		.owner = "F", .manual = true, .period_ms = 100, .lease_ms = 5000
	};
	struct side s;
	side_open(&s, &env, "refr-f", 1, &o);
	assert_int_equal(step_sync(&env, s.r[0], 0), 0);
	struct refresher_stats st;
	refresher_get_stats(s.r[0], &st);
	uint64_t lease = st.lease_version;
	assert_int_equal(st.delta_installs, 0); /* nothing installed before: in full */
	assert_int_equal(step_sync(&env, s.r[0], 700), 0);
	assert_int_equal(step_sync(&env, s.r[0], 300), 0);
	refresher_get_stats(s.r[0], &st);
	assert_int_equal(st.installs, 3);
	assert_int_equal(st.delta_installs, 2);
	floors_agree("of", 3);

	struct view_copy v;
	/* A successor's tenure installed in PostgreSQL only. */
	uint64_t succ = fv(lease + 1, 0);
	gp_sql(admin, "UPDATE fair_share_installs SET version = %llu WHERE org_id = 'of'",
	       (unsigned long long)succ);
	assert_int_equal(genv_read(&env, "of", &v), 0);
	uint64_t redis_before = v.v.floors_version;
	assert_int_equal(step_sync(&env, s.r[0], 500), -ESTALE);
	refresher_get_stats(s.r[0], &st);
	assert_int_equal(st.refused_pg, 1);
	assert_int_equal(st.refused_redis, 0);
	assert_int_equal(st.lease_version, 0);
	assert_int_equal(genv_read(&env, "of", &v), 0);
	assert_int_equal(v.v.floors_version, redis_before); /* nothing landed in Redis */
	side_close(&s, &env);
}

/* A cycle longer than half the lease renews it between organisations; one that finds the lease
 * taken meanwhile installs nothing more. */
struct slow {
	int sleep_ms;
	bool steal;
	int calls;
};

static void slow_hook(struct refresher *r, const char *org, uint64_t version, void *data)
{
	struct slow *w = data;
	(void)r;
	(void)version;
	if (strcmp(org, "la") != 0)
		return;
	w->calls++;
	fixture_sleep_ms(w->sleep_ms);
	if (w->steal)
		gp_sql(admin, "UPDATE leases SET owner = 'Z', version = version + 1,"
			      " lease_until = clock_timestamp() + interval '1 minute'"
			      " WHERE name = 'refresher'");
}

static void test_long_cycle(void **state)
{
	(void)state;
	const char *orgs[] = { "la", "lb", NULL };
	seed_orgs(orgs, 3, 10);
	struct slow w = { .sleep_ms = 500 };
	struct refresher_options o = { .owner = "L",
				       .manual = true,
				       .period_ms = 100,
				       .lease_ms = 800,
				       .before_install_cb = slow_hook,
				       .hook_data = &w };
	struct side s;
	side_open(&s, &env, "refr-l", 1, &o);
	/* la's hook takes more than half the lease: renewed before lb, both installed */
	assert_int_equal(step_sync(&env, s.r[0], 0), 0);
	struct refresher_stats st;
	refresher_get_stats(s.r[0], &st);
	uint64_t lease = st.lease_version;
	assert_true(lease > 0);
	assert_int_equal(st.installs, 2);
	assert_int_equal(gp_int(admin, "SELECT version FROM leases WHERE name = 'refresher'"),
			 (long long)lease);

	/* la's hook outlasts the lease and Z takes it: la was already past its checks (the
	 * versions fence that window), lb is not installed. */
	w.sleep_ms = 900;
	w.steal = true;
	assert_int_equal(step_sync(&env, s.r[0], 500), -EAGAIN);
	refresher_get_stats(s.r[0], &st);
	assert_int_equal(st.lease_version, 0);
	assert_int_equal(st.lost, 1);
	struct view_copy v;
	assert_int_equal(genv_read(&env, "lb", &v), 0);
	assert_int_equal(v.v.floors_version, fv(lease, 1)); /* the first cycle's, no later */
	assert_int_equal(
		gp_int(admin, "SELECT version FROM fair_share_installs WHERE org_id = 'lb'"),
		(long long)fv(lease, 1));
	side_close(&s, &env);
}

/* A delta whose base moved between the cycle's read and its install (another install landed,
 * older than the refresher's version) is refused by Redis and sent in full. Two organisations
 * share the sequence, so da's versions leave a gap the hook fills. */
struct skew {
	struct gate_env e; /* its own loop: the hook runs inside the refresher's */
	uint64_t version;
	bool armed;
};

static void skew_hook(struct refresher *r, const char *org, uint64_t version, void *data)
{
	struct skew *k = data;
	(void)r;
	if (!k->armed || strcmp(org, "da") != 0)
		return;
	k->armed = false;
	struct gate_install_result res;
	assert_true(k->version < version);
	assert_int_equal(genv_floors(&k->e, "da", k->version, 10000, "da_c0:20", &res), 0);
	assert_true(res.applied);
}

static void test_delta_fallback(void **state)
{
	(void)state;
	const char *orgs[] = { "da", "db", NULL };
	seed_orgs(orgs, 3, 10);
	struct skew k = { 0 };
	genv_open(&k.e, svc.redis_url, "refresher-skew", true);
	struct refresher_options o = { .owner = "D",
				       .manual = true,
				       .period_ms = 100,
				       .lease_ms = 5000,
				       .before_install_cb = skew_hook,
				       .hook_data = &k };
	struct side s;
	side_open(&s, &env, "refr-d", 1, &o);
	assert_int_equal(step_sync(&env, s.r[0], 0), 0); /* da fv(L, 0), db fv(L, 1) */
	struct refresher_stats st;
	refresher_get_stats(s.r[0], &st);
	uint64_t lease = st.lease_version;
	k.version = fv(lease, 1);
	k.armed = true;
	assert_int_equal(step_sync(&env, s.r[0], 700), 0); /* da fv(L, 2) on base fv(L, 0) */
	refresher_get_stats(s.r[0], &st);
	assert_int_equal(st.installs, 4);
	assert_int_equal(st.delta_installs, 1); /* db's; da's went in full */
	assert_int_equal(st.refused_redis, 0);
	floors_agree("da", 3);
	floors_agree("db", 3);
	side_close(&s, &env);
	genv_close(&k.e);
}

/* --- takeover: the holder in a child process --- */

struct cmd {
	char op; /* 's' step, 'S' step that pauses before its install, 'g' go on, 'q' quit */
	uint64_t elapsed;
};

struct reply {
	char kind; /* 'r' ready to install (paused in the hook), 'd' step done */
	int status;
	uint64_t version, lease_version, refused_redis, refused_pg;
};

static int child_cmd = -1, child_rep = -1;
static bool child_armed;

static void xwrite(int fd, const void *p, size_t n)
{
	if (write(fd, p, n) != (ssize_t)n)
		_exit(3);
}

static void xread_child(void *p, size_t n)
{
	if (read(child_cmd, p, n) != (ssize_t)n)
		_exit(4);
}

static void child_hook(struct refresher *r, const char *org, uint64_t version, void *data)
{
	(void)r;
	(void)org;
	(void)data;
	if (!child_armed)
		return;
	child_armed = false;
	struct reply rep = { .kind = 'r', .version = version };
	xwrite(child_rep, &rep, sizeof(rep));
	struct cmd c;
	xread_child(&c, sizeof(c)); /* the parent SIGSTOPs us here, then says 'g' */
}

static void child_main(void)
{
	struct gate_env e;
	struct side s;
	genv_open(&e, svc.redis_url, "refresher-A", true);
	struct refresher_options o = { .owner = "A",
				       .manual = true,
				       .period_ms = 100,
				       .lease_ms = LEASE_MS,
				       .before_install_cb = child_hook };
	side_open(&s, &e, "refr-a", 1, &o);
	for (;;) {
		struct cmd c;
		xread_child(&c, sizeof(c));
		if (c.op == 'q')
			break;
		child_armed = c.op == 'S';
		int status = step_sync(&e, s.r[0], c.elapsed);
		struct refresher_stats st;
		refresher_get_stats(s.r[0], &st);
		struct reply rep = { .kind = 'd',
				     .status = status,
				     .version = st.last_version,
				     .lease_version = st.lease_version,
				     .refused_redis = st.refused_redis,
				     .refused_pg = st.refused_pg };
		xwrite(child_rep, &rep, sizeof(rep));
	}
	side_close(&s, &e);
	genv_close(&e);
	_exit(0);
}

static void send_cmd(int fd, char op, uint64_t elapsed)
{
	struct cmd c = { .op = op, .elapsed = elapsed };
	assert_int_equal(write(fd, &c, sizeof(c)), sizeof(c));
}

static struct reply get_reply(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	struct reply rep;
	assert_int_equal(poll(&p, 1, 120000), 1);
	assert_int_equal(read(fd, &rep, sizeof(rep)), sizeof(rep));
	return rep;
}

static struct reply child_step(int cmd, int rep, uint64_t elapsed)
{
	send_cmd(cmd, 's', elapsed);
	struct reply r = get_reply(rep);
	assert_int_equal(r.kind, 'd');
	return r;
}

/* The single refresher: the same inputs (6 campaigns, 20 due each, nothing running or
 * waiting, org_limit 20) through the elapsed times, from a zero carry. */
static void reference(const uint64_t *elapsed, int steps, struct fairshare_result *out)
{
	static char ids[N_CAMP][16];
	struct fairshare_campaign in[N_CAMP];
	uint32_t agent_running[N_CAMP] = { 0 };
	for (int i = 0; i < N_CAMP; i++) {
		snprintf(ids[i], sizeof(ids[i]), "ot_c%d", i);
		in[i] = (struct fairshare_campaign){ .id = ids[i],
						     .due = 20,
						     .ceiling = FAIRSHARE_UNLIMITED,
						     .agent = (uint32_t)i };
	}
	size_t ws = fairshare_work_size(N_CAMP, N_CAMP);
	void *work = malloc(ws);
	assert_non_null(work);
	for (int k = 0; k < steps; k++) {
		struct fairshare_org org = { .system_limit = 1000,
					     .org_limit = 20,
					     .per_agent = FAIRSHARE_UNLIMITED,
					     .enforced = true,
					     .elapsed_ms = elapsed[k],
					     .agent_running = agent_running,
					     .n_agents = N_CAMP };
		assert_int_equal(fairshare_recompute(&org, in, N_CAMP, out, NULL, work, ws), 0);
		for (int i = 0; i < N_CAMP; i++)
			in[i].carry = out[i].carry;
	}
	free(work);
}

static void test_takeover(void **state)
{
	(void)state;
	seed("ot", N_CAMP, 25);
	int to_child[2], from_child[2];
	assert_int_equal(pipe(to_child), 0);
	assert_int_equal(pipe(from_child), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(to_child[1]);
		close(from_child[0]);
		child_cmd = to_child[0];
		child_rep = from_child[1];
		child_main();
	}
	close(to_child[0]);
	close(from_child[1]);
	int cmd = to_child[1], rep = from_child[0];

	/* A holds: three installs, elapsed 0, 700, 1300 ms. */
	const uint64_t elapsed[] = { 0, 700, 1300, 900, 600 };
	struct reply r = child_step(cmd, rep, elapsed[0]);
	assert_int_equal(r.status, 0);
	uint64_t va = r.lease_version;
	assert_true(va > 0);
	assert_int_equal(child_step(cmd, rep, elapsed[1]).status, 0);
	r = child_step(cmd, rep, elapsed[2]);
	assert_int_equal(r.status, 0);
	assert_int_equal(r.version, fv(va, 2));

	/* A renews, recomputes and stops right before installing. */
	send_cmd(cmd, 'S', 900);
	r = get_reply(rep);
	assert_int_equal(r.kind, 'r');
	assert_int_equal(r.version, fv(va, 3));
	assert_int_equal(kill(pid, SIGSTOP), 0);
	int ws;
	assert_int_equal(waitpid(pid, &ws, WUNTRACED), pid);
	assert_true(WIFSTOPPED(ws));

	/* B takes over once A's lease has run out (the database's clock decides). */
	struct refresher_options o = {
		.owner = "B", .manual = true, .period_ms = 100, .lease_ms = LEASE_MS * 30
	};
	struct side s;
	side_open(&s, &env, "refr-b", 1, &o);
	long long deadline = fixture_now_ms() + 60000;
	int status;
	while ((status = step_sync(&env, s.r[0], elapsed[3])) == -EAGAIN) {
		assert_true(fixture_now_ms() < deadline);
		fixture_sleep_ms(50);
	}
	assert_int_equal(status, 0);
	struct refresher_stats st;
	refresher_get_stats(s.r[0], &st);
	uint64_t vb = st.lease_version;
	assert_int_equal(vb, va + 1);
	assert_int_equal(step_sync(&env, s.r[0], elapsed[4]), 0);
	uint64_t b_last = fv(vb, 1);

	/* A wakes up and installs what it computed: refused in Redis and in PostgreSQL. */
	assert_int_equal(kill(pid, SIGCONT), 0);
	send_cmd(cmd, 'g', 0);
	r = get_reply(rep);
	assert_int_equal(r.kind, 'd');
	assert_int_equal(r.status, -ESTALE);
	assert_int_equal(r.refused_redis, 0); /* PostgreSQL refused first: nothing sent to Redis */
	assert_int_equal(r.refused_pg, 1);
	assert_int_equal(r.lease_version, 0);
	struct view_copy v;
	assert_int_equal(genv_read(&env, "ot", &v), 0);
	assert_int_equal(v.v.floors_version, b_last);
	assert_int_equal(
		gp_int(admin, "SELECT version FROM fair_share_installs WHERE org_id = 'ot'"),
		(long long)b_last);
	/* Only changed floors rows are written: none carries A's fenced version, and the
	 * carries row is B's last install. */
	assert_int_equal(gp_int(admin,
				"SELECT count(*) FROM fair_share_floors WHERE org_id = 'ot'"
				" AND version >= %llu",
				(unsigned long long)fv(va, 3)),
			 gp_int(admin,
				"SELECT count(*) FROM fair_share_floors WHERE org_id = 'ot'"
				" AND version >= %llu",
				(unsigned long long)fv(vb, 0)));
	assert_int_equal(
		gp_int(admin, "SELECT version FROM fair_share_carries WHERE org_id = 'ot'"),
		(long long)b_last);
	/* Its next cycle finds B holding: it installs nothing. */
	assert_int_equal(child_step(cmd, rep, 500).status, -EAGAIN);
	send_cmd(cmd, 'q', 0);
	assert_int_equal(fixture_wait(pid), 0);
	close(cmd);
	close(rep);

	/* The carry equals a single refresher's through the same elapsed times. */
	struct fairshare_result ref[N_CAMP];
	reference(elapsed, 5, ref);
	for (int i = 0; i < N_CAMP; i++) {
		PGresult *res;
		char sql[512];
		snprintf(sql, sizeof(sql),
			 "SELECT t.floor, t.deficit_us, t.fluid_num, t.fluid_den, t.idle_ms FROM"
			 " fair_share_carries, unnest(campaign_ids, floors, deficit_us, fluid_num,"
			 " fluid_den, idle_ms) AS t(id, floor, deficit_us, fluid_num, fluid_den,"
			 " idle_ms) WHERE org_id = 'ot' AND t.id = 'ot_c%d'",
			 i);
		res = fixture_sql(admin, sql);
		assert_int_equal(PQntuples(res), 1);
		assert_int_equal(atoll(PQgetvalue(res, 0, 0)), ref[i].floor);
		assert_int_equal(atoll(PQgetvalue(res, 0, 1)), ref[i].carry.deficit);
		assert_int_equal(atoll(PQgetvalue(res, 0, 2)), ref[i].carry.fluid_num);
		assert_int_equal(atoll(PQgetvalue(res, 0, 3)), ref[i].carry.fluid_den);
		assert_int_equal(atoll(PQgetvalue(res, 0, 4)), (long long)ref[i].carry.idle_ms);
		char id[16];
		snprintf(id, sizeof(id), "ot_c%d", i);
		assert_int_equal(view_floor(&v, id), ref[i].floor);
		PQclear(res);
	}
	/* and the rotation is under way: somebody has a non-zero deficit */
	assert_true(gp_int(admin, "SELECT count(*) FROM fair_share_carries, unnest(deficit_us) d"
				  " WHERE org_id = 'ot' AND d <> 0") > 0);
	side_close(&s, &env);
}

struct wake_op {
	int calls, status;
	uint32_t woken;
};

static void wake_op_cb(struct gate *g, int status, const struct gate_admit_result *res, void *data)
{
	struct wake_op *o = data;
	(void)g;
	(void)res;
	o->calls++;
	o->status = status;
}

static void beat_cb(struct gate *g, int status, const struct gate_handoff_result *res, void *data)
{
	struct wake_op *o = data;
	(void)g;
	o->calls++;
	o->status = status;
	o->woken = status ? 0 : res->woken;
}

/* C9: newly installed floors wake the waiter the rule now admits. ow_c0 alone is active (floor
 * 20) and runs 15: the 5 free lines are its shortfall, so ow_c1's contact is refused and waits.
 * ow_c1's contacts fall due; the next recompute installs 10/10, which admits ow_c1 (under its
 * floor): the refresher's install wakes exactly that waiter, and its admission then succeeds. */
static void test_install_wakes_waiter(void **state)
{
	(void)state;
	seed("ow", 2, 20);
	gp_sql(admin, "UPDATE contacts SET next_attempt_at = now() + interval '1 hour'"
		      " WHERE campaign_id = 'ow_c1'");
	struct refresher_options o[1] = {
		{ .owner = "W1", .manual = true, .period_ms = 100, .lease_ms = 5000 },
	};
	struct side s;
	side_open(&s, &env, "refr-w", 1, o);
	assert_int_equal(step_sync(&env, s.r[0], 0), 0);
	struct view_copy v;
	assert_int_equal(genv_read(&env, "ow", &v), 0);
	assert_int_equal(view_floor(&v, "ow_c0"), 20);
	assert_int_equal(view_floor(&v, "ow_c1"), 0);
	for (int i = 0; i < 15; i++) {
		char call[16];
		snprintf(call, sizeof(call), "f%d", i);
		assert_int_equal(genv_admit(&env, "ow", call, "ow_c0").r.outcome, GATE_ADMITTED);
	}

	struct wake_op w = { 0 };
	assert_int_equal(gate_handoff_beat(env.g, "ow", "wk", 600000, beat_cb, &w), 0);
	fixture_run_until_count(&env.loop, &w.calls, 1, 60000);
	assert_int_equal(w.status, 0);
	const char *cands[1] = { "ow_c1" };
	struct gate_admit_req req = {
		.org = "ow",
		.call = "x1",
		.campaigns = cands,
		.n_campaigns = 1,
		.wait = true,
		.worker = "wk",
	};
	struct wake_op a = { 0 };
	assert_int_equal(gate_admit(env.g, &req, wake_op_cb, &a), 0);
	fixture_run_until_count(&env.loop, &a.calls, 1, 60000);
	assert_int_equal(a.status, 0);
	assert_int_equal(genv_admit(&env, "ow", "x0", "ow_c1").r.outcome, GATE_REFUSED);

	/* Nothing changed yet: an install of the same floors wakes nobody. */
	assert_int_equal(step_sync(&env, s.r[0], 100), 0);
	struct refresher_stats st;
	refresher_get_stats(s.r[0], &st);
	assert_int_equal(st.woken, 0);
	assert_int_equal(st.wake_errors, 0);

	gp_sql(admin, "UPDATE contacts SET next_attempt_at = now() - interval '1 minute'"
		      " WHERE campaign_id = 'ow_c1'");
	assert_int_equal(step_sync(&env, s.r[0], 100), 0);
	assert_int_equal(genv_read(&env, "ow", &v), 0);
	assert_int_equal(view_floor(&v, "ow_c1"), 10);
	refresher_get_stats(s.r[0], &st);
	assert_int_equal(st.woken, 1);
	assert_int_equal(st.wake_errors, 0);
	/* The woken waiter's admission succeeds (its wake consumed). */
	assert_int_equal(genv_admit(&env, "ow", "x1", "ow_c1").r.outcome, GATE_ADMITTED);
	side_close(&s, &env);
}

/* --- kicks (SPEC C4/C5: "at once when the active set, a ceiling or a limit changes or the gate
 * reports a campaign's demand below its floor"). The period is a minute, so within the tests'
 * 20 s deadlines only a kick can explain a cycle. --- */

#define KICK_PERIOD_MS 60000
#define KICK_WAIT_MS   20000

struct kick_watch {
	struct refresher *r;
	const char *org, *campaign;
	uint64_t cycles;  /* wait for this many cycles... */
	uint32_t ceiling; /* ...or this ceiling of campaign in Redis */
	bool floor;	  /* ...or a floor for campaign in Redis */
};

static bool kick_cycles(void *arg)
{
	struct kick_watch *w = arg;
	struct refresher_stats st;
	refresher_get_stats(w->r, &st);
	return st.cycles >= w->cycles;
}

static bool kick_ceiling(void *arg)
{
	struct kick_watch *w = arg;
	struct view_copy v;
	if (genv_read(&env, w->org, &v))
		return false;
	for (uint32_t i = 0; i < v.n_campaigns; i++)
		if (!strcmp(v.campaigns[i].id, w->campaign))
			return v.campaigns[i].ceiling == w->ceiling;
	return false;
}

static bool kick_floor(void *arg)
{
	struct kick_watch *w = arg;
	struct view_copy v;
	return genv_read(&env, w->org, &v) == 0 && view_floor(&v, w->campaign) > 0;
}

/* Opens a side with one started refresher of a long period and waits for its first cycle. */
static struct refresher *kick_open(struct side *s, const char *name, struct refresher_options *o)
{
	o->period_ms = KICK_PERIOD_MS;
	o->lease_ms = 2 * KICK_PERIOD_MS;
	side_open(s, &env, name, 1, o);
	assert_int_equal(refresher_start(s->r[0]), 0);
	struct kick_watch w = { .r = s->r[0], .cycles = 1 };
	fixture_run_until(&env.loop, kick_cycles, &w, 60000);
	return s->r[0];
}

/* A ceiling changed in PostgreSQL (with a hand bump of limits_version, still fine since 0011, C4)
 * is installed in Redis by a cycle the NOTIFY of migration 0004 started, not by the period. */
static void test_kick_ceiling(void **state)
{
	(void)state;
	seed("ok", 2, 10);
	struct refresher_options o = { .owner = "K" };
	struct side s;
	struct refresher *r = kick_open(&s, "refr-k", &o);
	struct kick_watch w = { .r = r, .org = "ok", .campaign = "ok_c0", .ceiling = 0 };
	assert_true(kick_ceiling(&w));

	long long t0 = fixture_now_ms();
	gp_sql(admin, "BEGIN; UPDATE campaigns SET max_concurrent_calls = 1 WHERE id = 'ok_c0';"
		      " UPDATE organisations SET limits_version = limits_version + 1"
		      " WHERE id = 'ok'; COMMIT");
	w.ceiling = 1;
	fixture_run_until(&env.loop, kick_ceiling, &w, KICK_WAIT_MS);
	assert_true(fixture_now_ms() - t0 < KICK_PERIOD_MS);
	struct refresher_stats st;
	refresher_get_stats(r, &st);
	assert_true(st.notifies >= 1);
	assert_true(st.kicked >= 1);
	assert_int_equal(st.limits_installs, 2);
	side_close(&s, &env);
}

/* An idle campaign (no due contact: no floor) gets a floor as soon as a batch of contacts is
 * inserted: one statement, one NOTIFY for its org. */
static void test_kick_new_batch(void **state)
{
	(void)state;
	seed("on", 2, 3);
	gp_sql(admin, "DELETE FROM contacts WHERE campaign_id = 'on_c1'");
	struct refresher_options o = { .owner = "N" };
	struct side s;
	struct refresher *r = kick_open(&s, "refr-n", &o);
	struct kick_watch w = { .r = r, .org = "on", .campaign = "on_c1" };
	assert_false(kick_floor(&w));
	w.campaign = "on_c0";
	assert_true(kick_floor(&w));

	gp_sql(admin, "INSERT INTO contacts (org_id, campaign_id, batch_id, phone, next_attempt_at)"
		      " SELECT 'on', 'on_c1', 'on_b1', '+1415666' || lpad(g::text, 4, '0'),"
		      " now() - interval '1 minute' FROM generate_series(1, 50) g");
	w.campaign = "on_c1";
	fixture_run_until(&env.loop, kick_floor, &w, KICK_WAIT_MS);
	struct refresher_stats st;
	refresher_get_stats(r, &st);
	assert_int_equal(st.notifies, 1); /* 50 rows, one statement: one notification */
	assert_true(st.kicked >= 1);
	side_close(&s, &env);
}

/* Plain SQL, no version bump by hand (migration 0011): the database bumps
 * organisations.limits_version, so the cycle the NOTIFY starts installs the limits. A new
 * campaign is known to the gate (admitted, not refused `unknown`) and a changed org_limit is
 * enforced, each within one kick of a 60 s period; a writer who bumps by hand in the same
 * statement gets one bump, not two. */
static bool kick_known(void *arg)
{
	struct kick_watch *w = arg;
	struct view_copy v;
	if (genv_read(&env, w->org, &v))
		return false;
	for (uint32_t i = 0; i < v.n_campaigns; i++)
		if (!strcmp(v.campaigns[i].id, w->campaign))
			return v.campaigns[i].known;
	return false;
}

static bool kick_org_limit(void *arg)
{
	struct kick_watch *w = arg;
	struct view_copy v;
	return genv_read(&env, w->org, &v) == 0 && v.v.org_limit == w->ceiling;
}

static void test_plain_sql_limits(void **state)
{
	(void)state;
	seed("ol", 2, 3);
	struct refresher_options o = { .owner = "L" };
	struct side s;
	struct refresher *r = kick_open(&s, "refr-l", &o);
	char call[37];
	struct admit_out a = genv_admit(&env, "ol", gp_uuid(call, 300), "ol_new");
	assert_int_equal(a.r.outcome, GATE_REFUSED);
	assert_int_equal(a.r.decisions[0].reason, GATE_REASON_UNKNOWN);

	long long v0 = org_version("ol");
	long long t0 = fixture_now_ms();
	gp_sql(admin, "INSERT INTO campaigns (id, org_id, agent_id, max_concurrent_calls)"
		      " VALUES ('ol_new', 'ol', 'ol_a0', 2)");
	assert_int_equal(org_version("ol"), v0 + 1);
	struct kick_watch w = { .r = r, .org = "ol", .campaign = "ol_new" };
	fixture_run_until(&env.loop, kick_known, &w, KICK_WAIT_MS);
	assert_true(fixture_now_ms() - t0 < KICK_PERIOD_MS);
	a = genv_admit(&env, "ol", gp_uuid(call, 301), "ol_new");
	assert_int_equal(a.status, 0);
	assert_int_equal(a.r.outcome, GATE_ADMITTED);

	gp_sql(admin, "UPDATE organisations SET org_limit = 1 WHERE id = 'ol'");
	assert_int_equal(org_version("ol"), v0 + 2);
	w.ceiling = 1;
	fixture_run_until(&env.loop, kick_org_limit, &w, KICK_WAIT_MS);
	a = genv_admit(&env, "ol", gp_uuid(call, 302), "ol_c0 ol_c1 ol_new");
	assert_int_equal(a.r.outcome, GATE_REFUSED);
	assert_int_equal(a.r.decisions[0].level, FAIRSHARE_LEVEL_ORG);

	/* bumped by hand in the same statement: one bump */
	gp_sql(admin, "UPDATE organisations SET org_limit = 2, limits_version = limits_version + 1"
		      " WHERE id = 'ol'");
	assert_int_equal(org_version("ol"), v0 + 3);
	w.ceiling = 2;
	fixture_run_until(&env.loop, kick_org_limit, &w, KICK_WAIT_MS);
	struct refresher_stats st;
	refresher_get_stats(r, &st);
	assert_int_equal(st.limits_installs, 4);
	assert_true(st.kicked >= 3);
	side_close(&s, &env);
}

static void sub_closed_cb(void *data)
{
	++*(int *)data;
}

/* A message on dsp:v1:refresh (what gate_release.lua publishes when a release leaves a
 * campaign below its floor with nobody waiting) starts a cycle. */
static void test_kick_publish(void **state)
{
	(void)state;
	seed("op", 2, 3);
	struct redis_sub_options so = { .url = svc.redis_url,
					.name = "refr-sub",
					.connect_timeout_ms = 10000,
					.reconnect_min_ms = 10,
					.reconnect_max_ms = 200 };
	struct redis_sub *sub;
	assert_int_equal(redis_sub_new(&env.loop, &so, &sub), 0);
	struct refresher_options o = { .owner = "P", .sub = sub };
	struct side s;
	struct refresher *r = kick_open(&s, "refr-p", &o);
	assert_int_equal(redis_sub_start(sub), 0);
	while (!redis_sub_is_up(sub))
		uv_run(&env.loop, UV_RUN_ONCE);
	struct refresher_stats st;
	refresher_get_stats(r, &st);
	assert_int_equal(st.messages, 0);

	assert_int_equal(genv_cmd(&env, NULL, 0, "PUBLISH", REFRESHER_CHANNEL_REDIS, "op", NULL),
			 1);
	struct kick_watch w = { .r = r, .cycles = st.cycles + 1 };
	fixture_run_until(&env.loop, kick_cycles, &w, KICK_WAIT_MS);
	refresher_get_stats(r, &st);
	assert_int_equal(st.messages, 1);
	assert_int_equal(st.kicked, 1);
	int closed = 0;
	redis_sub_close(sub, sub_closed_cb, &closed);
	side_close(&s, &env);
	fixture_run_until_count(&env.loop, &closed, 1, 60000);
}

/* 100 NOTIFYs, each in its own transaction, all sent while one cycle runs (from its
 * before-install hook): they cost one more cycle, not 100. */
struct burst {
	bool armed;
	int sent;
};

static void burst_hook(struct refresher *r, const char *org, uint64_t version, void *data)
{
	struct burst *b = data;
	(void)r;
	(void)org;
	(void)version;
	if (!b->armed)
		return;
	b->armed = false;
	for (; b->sent < 100; b->sent++)
		gp_sql(admin, "SELECT pg_notify('" REFRESHER_CHANNEL_PG "', 'oq')");
}

static bool burst_seen(void *arg)
{
	struct kick_watch *w = arg;
	struct refresher_stats st;
	refresher_get_stats(w->r, &st);
	return st.notifies >= 100 && st.cycles >= w->cycles;
}

static void test_kick_coalesced(void **state)
{
	(void)state;
	seed("oq", 2, 3);
	struct burst b = { 0 };
	struct refresher_options o = { .owner = "Q",
				       .before_install_cb = burst_hook,
				       .hook_data = &b };
	struct side s;
	struct refresher *r = kick_open(&s, "refr-q", &o);
	struct refresher_stats st0, st;
	refresher_get_stats(r, &st0);
	b.armed = true;
	refresher_kick(r, "oq"); /* one cycle, during which the 100 NOTIFYs are sent */
	struct kick_watch w = { .r = r, .cycles = st0.cycles + 2 };
	fixture_run_until(&env.loop, burst_seen, &w, KICK_WAIT_MS);
	/* quiet: at least twice the gap with nothing more to do */
	long long until = fixture_now_ms() + 10 * REFRESHER_KICK_GAP_MS;
	while (fixture_now_ms() < until)
		uv_run(&env.loop, UV_RUN_NOWAIT);
	refresher_get_stats(r, &st);
	assert_int_equal(b.sent, 100);
	assert_int_equal(st.notifies - st0.notifies, 100);
	assert_int_equal(st.kicks - st0.kicks, 101);
	/* the kicked cycle and one more for the burst (a third only if the notifications were
	 * read after that cycle had ended: then they would all be served by it) */
	assert_true(st.cycles - st0.cycles >= 2 && st.cycles - st0.cycles <= 3);
	assert_int_equal(st.kicked - st0.kicked, st.cycles - st0.cycles);
	side_close(&s, &env);
}

/* n call rows of org in state, of campaign (NULL: direct dials) on agent, admitted in the
 * current mode and epoch. */
static void calls_add(const char *org, const char *campaign, const char *agent, int n,
		      const char *state)
{
	char camp[80] = "NULL";
	if (campaign)
		snprintf(camp, sizeof(camp), "'%s'", campaign);
	gp_sql(admin,
	       "INSERT INTO calls (id, org_id, campaign_id, agent_id, to_number, state, gate_mode,"
	       " gate_epoch, ended_at) SELECT gen_random_uuid(), '%s', %s, '%s', '+14155550100',"
	       " '%s', gate_mode, gate_epoch, CASE WHEN '%s' = 'ended' THEN now() END"
	       " FROM system_settings, generate_series(1, %d)",
	       org, camp, agent, state, state, n);
}

static long long pg_floor(const char *org, const char *campaign)
{
	return gp_int(admin,
		      "SELECT coalesce((SELECT floor FROM fair_share_floors WHERE org_id = '%s'"
		      " AND campaign_id = '%s'), 0)",
		      org, campaign);
}

/* Whether admin got a NOTIFY on channel with payload since the last call. */
static bool notified(const char *channel, const char *payload)
{
	bool seen = false;
	PGnotify *n;

	gp_sql(admin, "SELECT 1"); /* a transaction's end reads the notification queue */
	while ((n = PQnotifies(admin))) {
		seen = seen || (!strcmp(n->relname, channel) && !strcmp(n->extra, payload));
		PQfreemem(n);
	}
	return seen;
}

/* SPEC C11: during a Redis outage the fleet keeps dialling with the limits held, fair share
 * included. With the gate in postgres mode (Redis up but holding none of the calls), a refresh
 * counts the running calls from the call rows and installs the floors where the postgres-mode
 * gate reads them: org_limit 20, campaign c0 with 7 live calls (dialing, live, unknown) and 2
 * due, c1 with 10 live and 2 due, a direct call and ended calls beside them. Needs 9 and 12
 * (R2), so the max-min floors are 9 and 11 — from Redis' counts (none) they would be 2 and 2.
 * Nothing goes to Redis, and the postgres-mode waiters are woken. Then, back in redis mode with
 * Redis not answering, the refresher falls back to the call rows the same way. */
static void test_pg_mode_counts(void **state)
{
	(void)state;
	const char *orgs[] = { "opm", "opx", NULL };
	seed_orgs(orgs, 2, 2);
	gp_sql(admin, "UPDATE system_settings SET gate_mode = 'postgres',"
		      " gate_epoch = gate_epoch + 1");
	calls_add("opm", "opm_c0", "opm_a0", 3, "dialing");
	calls_add("opm", "opm_c0", "opm_a0", 2, "live");
	calls_add("opm", "opm_c0", "opm_a0", 2, "unknown");
	calls_add("opm", "opm_c0", "opm_a0", 4, "ended");
	calls_add("opm", "opm_c1", "opm_a1", 10, "live");
	calls_add("opm", NULL, "opm_a0", 1, "live");
	calls_add("opx", "opx_c0", "opx_a0", 5, "live");
	gp_sql(admin, "LISTEN " GATE_PG_CHANNEL_FREE);
	(void)notified("", "");

	struct refresher_options o = { .owner = "PM", .manual = true, .lease_ms = 5000 };
	struct side s;
	side_open(&s, &env, "refr-pm", 1, &o);
	assert_int_equal(step_sync(&env, s.r[0], 0), 0);
	assert_int_equal(pg_floor("opm", "opm_c0"), 9);
	assert_int_equal(pg_floor("opm", "opm_c1"), 11);
	assert_true(gp_int(admin, "SELECT version FROM fair_share_installs WHERE org_id = 'opm'") >
		    0);
	struct view_copy v;
	assert_int_equal(genv_read(&env, "opm", &v), 0);
	assert_int_equal(v.v.floors_version, 0); /* nothing installed in Redis */
	assert_true(notified(GATE_PG_CHANNEL_FREE, "opm"));
	struct refresher_stats st;
	refresher_get_stats(s.r[0], &st);
	assert_int_equal(st.pg_counts, 2);
	assert_int_equal(st.redis_fallbacks, 0);
	assert_int_equal(st.pg_only_installs, 2);
	assert_int_equal(st.pg_wakes, 2);
	assert_int_equal(st.installs, 0);
	side_close(&s, &env);

	/* Redis mode, Redis not answering: two more live calls of c0 make the needs 11 and 12,
	 * the floors 10 and 10, counted from the call rows; again only in PostgreSQL. */
	gp_sql(admin,
	       "UPDATE system_settings SET gate_mode = 'redis', gate_epoch = gate_epoch + 1");
	gp_sql(admin, "UPDATE leases SET owner = NULL, lease_until = '-infinity'"
		      " WHERE name = 'refresher'");
	calls_add("opm", "opm_c0", "opm_a0", 2, "dialing");
	struct gate_env dead;
	genv_open(&dead, "redis://127.0.0.1:1", "refresher-dead", false);
	side_open(&s, &dead, "refr-pd", 1, &o);
	assert_int_equal(step_sync(&dead, s.r[0], 0), 0);
	assert_int_equal(pg_floor("opm", "opm_c0"), 10);
	assert_int_equal(pg_floor("opm", "opm_c1"), 10);
	assert_false(notified(GATE_PG_CHANNEL_FREE, "opm")); /* redis mode: no NOTIFY */
	refresher_get_stats(s.r[0], &st);
	assert_int_equal(st.redis_fallbacks, 2);
	assert_int_equal(st.pg_counts, 2);
	assert_int_equal(st.pg_only_installs, 2);
	side_close(&s, &dead);
	genv_close(&dead);
	gp_sql(admin, "UNLISTEN *");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_due_capped_plan),
		cmocka_unit_test(test_election),
		cmocka_unit_test(test_install_wakes_waiter),
		cmocka_unit_test(test_limit_change),
		cmocka_unit_test(test_fenced_writes_nothing),
		cmocka_unit_test(test_long_cycle),
		cmocka_unit_test(test_delta_fallback),
		cmocka_unit_test(test_takeover),
		cmocka_unit_test(test_system_limit_restored),
		cmocka_unit_test(test_kick_ceiling),
		cmocka_unit_test(test_kick_new_batch),
		cmocka_unit_test(test_kick_publish),
		cmocka_unit_test(test_kick_coalesced),
		cmocka_unit_test(test_plain_sql_limits),
		cmocka_unit_test(test_pg_mode_counts),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
