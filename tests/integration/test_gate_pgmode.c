/* The gate in postgres mode against a real server (dispatcher/gate/gate_pgmode.h): every level
 * refusing in the model's decision order, counted from the call rows; several admissions in one
 * transaction; floors installed in PostgreSQL (fenced by version, expiring on PostgreSQL's
 * clock); waiting direct dials, their reserve and their withdrawal; the release that wakes waiters by NOTIFY;
 * and admissions from several workers' connections, released at random, never exceeding any
 * level — the system row held by the test so that every round certainly overlaps, and every
 * level re-counted from the call rows after every step. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gate_pg_int.h" /* the statements' text, for the plan check */
#include "gate_pg_test.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static struct embedded svc;
static PGconn *admin, *holder;
static unsigned next_call = 1000;

struct adm {
	int calls, status;
	struct gate_pgmode_answer a;
	struct gate_pgmode_result r[GATE_PGMODE_REQS_MAX];
};

static void adm_cb(struct gate_pg *g, int status, const struct gate_pgmode_answer *a, void *data)
{
	struct adm *p = data;

	p->calls++;
	p->status = status;
	if (a) {
		p->a = *a;
		memcpy(p->r, a->results, a->n * sizeof(*a->results));
		p->a.results = p->r;
	}
}

static struct gate_pg_dial cand(const char *campaign, long long contact)
{
	return (struct gate_pg_dial){ .campaign = campaign,
				      .contact = contact,
				      .lease_token = contact + 1000,
				      .attempt = 1,
				      .to_number = "+14155550100" };
}

static struct gate_pg_dial direct(const char *agent)
{
	return (struct gate_pg_dial){ .agent = agent, .attempt = 1, .to_number = "+14155550199" };
}

static int admit_sync(struct gp *e, const char *org, const struct gate_pgmode_req *reqs, uint32_t n,
		      struct adm *p)
{
	memset(p, 0, sizeof(*p));
	assert_int_equal(
		gate_pgmode_admit(e->g, org, (uint64_t)gp_epoch(admin), 10000, reqs, n, adm_cb, p),
		0);
	fixture_run_until_count(e->lp, &p->calls, 1, 60000);
	return p->status;
}

/* One request per candidate list; call ids drawn from next_call. */
static struct gate_pgmode_req req(char *idbuf, const struct gate_pg_dial *c, uint32_t n)
{
	return (struct gate_pgmode_req){ .call = gp_uuid(idbuf, next_call++),
					 .candidates = c,
					 .n_candidates = n };
}

static void assert_decision(const struct gate_pgmode_result *r, uint32_t i,
			    enum fairshare_level level, enum fairshare_reason reason)
{
	assert_true(i < r->n_decisions);
	if (r->decisions[i].level != level || r->decisions[i].reason != reason)
		fail_msg("decision %u: level %s reason %s, expected %s %s", i,
			 fairshare_level_name(r->decisions[i].level),
			 fairshare_reason_name(r->decisions[i].reason), fairshare_level_name(level),
			 fairshare_reason_name(reason));
}

static long long live(const char *where)
{
	return gp_int(admin,
		      "SELECT count(*) FROM calls WHERE state IN ('dialing', 'live', 'unknown')"
		      " AND %s",
		      where);
}

/* org lv: limit 3, per_agent 2 (gating); c0 on a0 with ceiling 1, c1 on a0, c2 on a1. */
static void levels_from_call_rows(void **state)
{
	struct gp e;
	struct adm p;
	char id[8][37];
	long long k[3][4];

	for (int c = 0; c < 3; c++)
		for (int i = 0; i < 4; i++)
			k[c][i] = gp_contact(admin, "lv", c, i);
	gp_open(&e, &svc, 1, "levels");
	struct gate_pg_dial r0[] = { cand("lv_c0", k[0][0]) };
	struct gate_pg_dial r1[] = { cand("lv_c0", k[0][1]), cand("lv_c1", k[1][0]) };
	struct gate_pg_dial r2[] = { cand("lv_c1", k[1][1]), cand("lv_c2", k[2][0]) };
	struct gate_pg_dial r3[] = { cand("lv_c2", k[2][1]), cand("lv_c1", k[1][2]) };
	struct gate_pgmode_req reqs[] = { req(id[0], r0, 1), req(id[1], r1, 2), req(id[2], r2, 2),
					  req(id[3], r3, 2) };
	/* Four admissions in one transaction, each seeing the ones before it. */
	assert_int_equal(admit_sync(&e, "lv", reqs, 4, &p), 0);
	assert_int_equal(p.a.n, 4);
	assert_int_equal(p.a.org_running, 0);
	assert_false(p.a.floors_valid);
	assert_int_equal(p.r[0].outcome, GATE_PGMODE_ADMITTED);
	assert_int_equal(p.r[0].index, 0);
	assert_true(p.r[0].decisions[0].fcfs); /* no floors installed: first come first served */
	assert_int_equal(p.r[1].outcome, GATE_PGMODE_ADMITTED);
	assert_int_equal(p.r[1].index, 1);
	assert_decision(&p.r[1], 0, FAIRSHARE_LEVEL_CAMPAIGN, FAIRSHARE_REASON_FULL);
	assert_int_equal(p.r[2].outcome, GATE_PGMODE_ADMITTED);
	assert_int_equal(p.r[2].index, 1);
	assert_decision(&p.r[2], 0, FAIRSHARE_LEVEL_AGENT, FAIRSHARE_REASON_FULL);
	assert_int_equal(p.r[3].outcome, GATE_PGMODE_REFUSED);
	assert_int_equal(p.r[3].n_decisions, 1); /* the org is full: the walk ends */
	assert_decision(&p.r[3], 0, FAIRSHARE_LEVEL_ORG, FAIRSHARE_REASON_FULL);
	assert_int_equal(live("org_id = 'lv' AND gate_mode = 'postgres'"), 3);
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM contacts WHERE org_id = 'lv' AND"
				       " state = 'dialing'"),
			 3);

	/* The same from the rows, in a new transaction: still full. */
	struct gate_pgmode_req again[] = { req(id[4], r3, 2) };
	assert_int_equal(admit_sync(&e, "lv", again, 1, &p), 0);
	assert_int_equal(p.a.org_running, 3);
	assert_decision(&p.r[0], 0, FAIRSHARE_LEVEL_ORG, FAIRSHARE_REASON_FULL);

	/* Enforcement off: only the system level refuses. */
	gp_sql(admin, "UPDATE organisations SET concurrency_management_enabled = false"
		      " WHERE id = 'lv'");
	struct gate_pgmode_req off[] = { req(id[5], r3, 2) };
	assert_int_equal(admit_sync(&e, "lv", off, 1, &p), 0);
	assert_int_equal(p.r[0].outcome, GATE_PGMODE_ADMITTED);
	assert_false(p.r[0].decisions[0].fcfs);
	/* The system level: full at the current live count. */
	long long all = live("true");
	gp_sql(admin, "UPDATE system_settings SET global_limit = %lld", all);
	struct gate_pg_dial r4[] = { cand("lv_c1", k[1][3]) };
	struct gate_pgmode_req sys[] = { req(id[6], r4, 1) };
	assert_int_equal(admit_sync(&e, "lv", sys, 1, &p), 0);
	assert_int_equal(p.a.system_running, all);
	assert_decision(&p.r[0], 0, FAIRSHARE_LEVEL_SYSTEM, FAIRSHARE_REASON_FULL);
	gp_sql(admin, "UPDATE system_settings SET global_limit = 1000");
	gp_sql(admin, "UPDATE organisations SET concurrency_management_enabled = true"
		      " WHERE id = 'lv'");

	/* An unknown campaign is refused (campaign, unknown) and the next candidate decided. */
	gp_sql(admin, "UPDATE organisations SET org_limit = 10, per_agent_limit = NULL"
		      " WHERE id = 'lv'");
	struct gate_pg_dial r5[] = { cand("lv_nope", 1), cand("lv_c2", k[2][2]) };
	struct gate_pgmode_req unk[] = { req(id[7], r5, 2) };
	assert_int_equal(admit_sync(&e, "lv", unk, 1, &p), 0);
	assert_true(p.r[0].decisions[0].unknown);
	assert_int_equal(p.r[0].decisions[0].level, FAIRSHARE_LEVEL_CAMPAIGN);
	assert_int_equal(p.r[0].index, 1);

	/* The wrong epoch, a missing organisation, bad requests. */
	memset(&p, 0, sizeof(p));
	assert_int_equal(gate_pgmode_admit(e.g, "lv", (uint64_t)gp_epoch(admin) + 1, 10000, unk, 1,
					   adm_cb, &p),
			 0);
	fixture_run_until_count(e.lp, &p.calls, 1, 60000);
	assert_int_equal(p.status, -ESTALE);
	assert_int_equal(p.a.mode.mode, GATE_MODE_POSTGRES);
	assert_int_equal(admit_sync(&e, "nobody", unk, 1, &p), -ENOENT);
	struct gate_pgmode_req twice[] = { unk[0], unk[0] };
	assert_int_equal(gate_pgmode_admit(e.g, "lv", 1, 10000, twice, 2, adm_cb, &p), -EINVAL);
	struct gate_pgmode_req waitbatch = unk[0];
	waitbatch.wait = true;
	assert_int_equal(gate_pgmode_admit(e.g, "lv", 1, 10000, &waitbatch, 1, adm_cb, &p),
			 -EINVAL);
	assert_int_equal(gate_pgmode_admit(e.g, "lv", 1, 0, unk, 1, adm_cb, &p), -ETIMEDOUT);
	gp_sql(admin, "UPDATE calls SET state = 'ended', ended_at = now() WHERE org_id = 'lv'");
	gp_close(&e);
}

struct inst {
	int calls, status;
	bool applied;
};

static void inst_cb(struct gate_pg *g, int status, bool applied, void *data)
{
	struct inst *p = data;

	p->calls++;
	p->status = status;
	p->applied = applied;
}

static bool install(struct gp *e, const char *org, uint64_t version, uint64_t ttl_ms,
		    const struct gate_pgmode_floor *f, uint32_t n)
{
	struct inst p = { 0 };

	assert_int_equal(gate_pgmode_install_floors(e->g, org, version, ttl_ms, f, n, inst_cb, &p),
			 0);
	fixture_run_until_count(e->lp, &p.calls, 1, 60000);
	assert_int_equal(p.status, 0);
	return p.applied;
}

struct notes {
	int n;
	char last[80];
};

static void free_note_cb(const char *channel, const char *payload, void *data)
{
	struct notes *m = data;

	m->n++;
	snprintf(m->last, sizeof(m->last), "%s", payload);
}

struct rel {
	int calls, status;
	bool ended[8];
};

static void rel_cb(struct gate_pg *g, int status, const bool *ended, uint32_t n, void *data)
{
	struct rel *p = data;

	p->calls++;
	p->status = status;
	for (uint32_t i = 0; ended && i < n && i < 8; i++)
		p->ended[i] = ended[i];
}

struct unw {
	int calls, status;
};

static void unw_cb(struct gate_pg *g, int status, void *data)
{
	struct unw *u = data;

	(void)g;
	u->calls++;
	u->status = status;
}

static void release_sync(struct gp *e, const char *call, struct rel *p)
{
	const char *ids[] = { call };

	memset(p, 0, sizeof(*p));
	assert_int_equal(gate_pgmode_release(e->g, ids, 1, "completed", rel_cb, p), 0);
	fixture_run_until_count(e->lp, &p->calls, 1, 60000);
	assert_int_equal(p->status, 0);
}

/* org fl: limit 2; c0 on a0, c1 on a1; floors 1 and 1. */
static void floors_waiters_release(void **state)
{
	struct gp e;
	struct adm p;
	struct rel r;
	struct notes notes = { 0 };
	char id[10][37];
	long long k0[3] = { gp_contact(admin, "fl", 0, 0), gp_contact(admin, "fl", 0, 1),
			    gp_contact(admin, "fl", 0, 2) };
	long long k1[2] = { gp_contact(admin, "fl", 1, 0), gp_contact(admin, "fl", 1, 1) };
	struct gate_pgmode_floor floors[] = {
		{ .campaign = "fl_c0", .floor = 1, .active = true, .carry = { .deficit = -5 } },
		{ .campaign = "fl_c1",
		  .floor = 1,
		  .active = true,
		  .carry = { .fluid_num = 1, .fluid_den = 1 } },
		{ .campaign = NULL, .floor = 0 },
	};

	uv_loop_init(&e.loop);
	gp_open_on(&e, &e.loop, &svc, 1, "floors", free_note_cb, NULL, &notes);
	assert_true(install(&e, "fl", 5, 60000, floors, 3));
	assert_false(install(&e, "fl", 5, 60000, floors, 3)); /* not newer: fenced */
	assert_false(install(&e, "fl", 4, 60000, floors, 2));
	/* floors rows: those with a floor or active; carries: every entry */
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM fair_share_floors WHERE org_id = 'fl'"
				       " AND version = 5"),
			 2);
	assert_int_equal(gp_int(admin, "SELECT cardinality(campaign_ids) FROM fair_share_carries"
				       " WHERE org_id = 'fl'"),
			 3);
	assert_int_equal(gp_int(admin, "SELECT deficit_us[array_position(campaign_ids, 'fl_c0')]"
				       " FROM fair_share_carries WHERE org_id = 'fl'"),
			 -5);
	assert_int_equal(gp_int(admin,
				"SELECT fluid_num[array_position(campaign_ids, 'fl_c1')]"
				" FROM fair_share_carries WHERE org_id = 'fl' AND version = 5"),
			 1);

	struct gate_pg_dial a[] = { cand("fl_c0", k0[0]) }, b[] = { cand("fl_c0", k0[1]) },
			    c[] = { cand("fl_c1", k1[0]) };
	struct gate_pgmode_req reqs[] = { req(id[0], a, 1), req(id[1], b, 1), req(id[2], c, 1) };
	assert_int_equal(admit_sync(&e, "fl", reqs, 3, &p), 0);
	assert_true(p.a.floors_valid);
	assert_int_equal(p.r[0].outcome, GATE_PGMODE_ADMITTED);
	assert_false(p.r[0].decisions[0].fcfs);
	/* c0 at its floor; the free line is c1's floor. */
	assert_decision(&p.r[1], 0, FAIRSHARE_LEVEL_FAIR_SHARE, FAIRSHARE_REASON_FLOORS);
	assert_int_equal(p.r[2].outcome, GATE_PGMODE_ADMITTED);

	/* A direct dial finds the org full and waits; a freed line is then held for it. */
	struct gate_pg_dial d[] = { direct("fl_a0") };
	struct gate_pgmode_req dr = req(id[3], d, 1);
	dr.wait = true;
	assert_int_equal(admit_sync(&e, "fl", &dr, 1, &p), 0);
	assert_int_equal(p.r[0].outcome, GATE_PGMODE_REFUSED);
	assert_int_equal(p.r[0].waiter, 1);
	assert_decision(&p.r[0], 0, FAIRSHARE_LEVEL_ORG, FAIRSHARE_REASON_FULL);
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM gate_direct_waiters WHERE"
				       " org_id = 'fl'"),
			 1);
	assert_int_equal(admit_sync(&e, "fl", &dr, 1, &p), 0); /* again: still one waiter */
	assert_int_equal(p.r[0].waiter, 0);
	/* withdrawn (a timed-out dial): the row goes at once; twice is a no-op; then again */
	for (int i = 0; i < 2; i++) {
		struct unw u = { 0 };
		assert_int_equal(gate_pgmode_unwait(e.g, id[3], unw_cb, &u), 0);
		fixture_run_until_count(e.lp, &u.calls, 1, 60000);
		assert_int_equal(u.status, 0);
		assert_int_equal(gp_int(admin, "SELECT count(*) FROM gate_direct_waiters WHERE"
					       " org_id = 'fl'"),
				 0);
	}
	assert_int_equal(gate_pgmode_unwait(e.g, "not-a-uuid", unw_cb, NULL), -EINVAL);
	assert_int_equal(admit_sync(&e, "fl", &dr, 1, &p), 0);
	assert_int_equal(p.r[0].outcome, GATE_PGMODE_REFUSED);
	assert_int_equal(p.r[0].waiter, 1);

	release_sync(&e, id[0], &r);
	assert_true(r.ended[0]);
	fixture_run_until_count(e.lp, &notes.n, 1, 60000);
	assert_string_equal(notes.last, "fl"); /* the org's waiters are woken */
	release_sync(&e, id[0], &r);
	assert_false(r.ended[0]); /* a duplicate release frees nothing */

	struct gate_pg_dial b2[] = { cand("fl_c1", k1[1]) };
	struct gate_pgmode_req batch = req(id[4], b2, 1);
	assert_int_equal(admit_sync(&e, "fl", &batch, 1, &p), 0);
	assert_decision(&p.r[0], 0, FAIRSHARE_LEVEL_FAIR_SHARE, FAIRSHARE_REASON_DIRECT_RESERVE);
	assert_int_equal(admit_sync(&e, "fl", &dr, 1, &p), 0);
	assert_int_equal(p.r[0].outcome, GATE_PGMODE_ADMITTED);
	assert_int_equal(p.r[0].waiter, -1);
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM gate_direct_waiters WHERE"
				       " org_id = 'fl'"),
			 0);
	assert_int_equal(live("org_id = 'fl' AND campaign_id IS NULL"), 1);

	/* Floors that expired: first come first served (R9). */
	assert_true(install(&e, "fl", 6, 0, floors, 3));
	release_sync(&e, id[3], &r);
	fixture_run_until_count(e.lp, &notes.n, 2, 60000);
	assert_string_equal(notes.last, "fl");
	struct gate_pg_dial b3[] = { cand("fl_c0", k0[2]) };
	struct gate_pgmode_req fcfs = req(id[5], b3, 1);
	assert_int_equal(admit_sync(&e, "fl", &fcfs, 1, &p), 0);
	assert_false(p.a.floors_valid);
	assert_int_equal(p.r[0].outcome, GATE_PGMODE_ADMITTED);
	assert_true(p.r[0].decisions[0].fcfs);

	/* In redis mode, a release notifies nobody (a marker NOTIFY arrives next). */
	int before = notes.n;
	gp_sql(admin,
	       "UPDATE system_settings SET gate_mode = 'redis', gate_epoch = gate_epoch + 1");
	release_sync(&e, id[5], &r);
	assert_true(r.ended[0]);
	gp_sql(admin, "NOTIFY " GATE_PG_CHANNEL_FREE ", 'marker'");
	fixture_run_until_count(e.lp, &notes.n, before + 1, 60000);
	assert_string_equal(notes.last, "marker");
	gp_sql(admin, "UPDATE system_settings SET gate_mode = 'postgres',"
		      " gate_epoch = gate_epoch + 1");
	const char *bad[] = { id[5] };
	assert_int_equal(gate_pgmode_release(e.g, bad, 1, "exploded", rel_cb, &r), -EINVAL);
	gp_sql(admin, "UPDATE calls SET state = 'ended', ended_at = now() WHERE org_id = 'fl'");
	gp_close(&e);
}

/* A transaction whose connection is lost before its COMMIT admits nothing, and says so. */
static void lost_before_commit_admits_nothing(void **state)
{
	struct gp e;
	struct adm p = { 0 };
	char id[37], pid[24];
	struct gate_pg_dial c[] = { cand("fl_c1", gp_contact(admin, "fl", 1, 5)) };
	struct gate_pgmode_req r = req(id, c, 1);

	gp_open(&e, &svc, 1, "lost");
	gp_sql(holder, "BEGIN");
	gp_sql(holder, "SELECT 1 FROM organisations WHERE id = 'fl' FOR UPDATE");
	assert_int_equal(
		gate_pgmode_admit(e.g, "fl", (uint64_t)gp_epoch(admin), 60000, &r, 1, adm_cb, &p),
		0);
	gp_wait_for(e.lp, admin, "transactionid", 1);
	snprintf(pid, sizeof(pid), "%lld",
		 gp_int(admin, "SELECT pid FROM pg_locks WHERE NOT granted AND"
			       " locktype = 'transactionid'"));
	terminate_backend(admin, pid);
	fixture_run_until_count(e.lp, &p.calls, 1, 60000);
	assert_int_equal(p.status, -ECONNRESET);
	gp_sql(holder, "COMMIT");
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM calls WHERE id = '%s'", id), 0);
	gp_close(&e);
}

/* The deadline bounds the whole transaction on the server, not each statement: the admission
 * waits for the org row (held by the test) for most of its deadline, then its write waits for
 * the contact's row (held too). The write gets only what is left, so PostgreSQL ends the
 * transaction at the deadline (-ETIMEDOUT, nothing written) — before the client's own bound
 * (deadline + 1 s), which would drop the connection. With the budget set once, the write's
 * lock wait got the whole deadline again and outlived the client's bound. */
static void deadline_bounds_the_transaction(void **state)
{
	static const char *const agents[] = { "a0" };
	struct gp e;
	struct adm p = { 0 };
	struct pg_conn_stats st;
	char id[37];
	PGconn *row_holder = fixture_pg(&svc);
	long long t0;

	gp_seed_org(admin, "dl", 5, 0, 1, agents, NULL, 2);
	long long k = gp_contact(admin, "dl", 0, 0);
	struct gate_pg_dial c[] = { cand("dl_c0", k) };
	struct gate_pgmode_req r = req(id, c, 1);

	gp_open(&e, &svc, 1, "deadline");
	gp_sql(row_holder, "BEGIN");
	gp_sql(row_holder, "SELECT 1 FROM contacts WHERE id = %lld FOR UPDATE", k);
	gp_sql(holder, "BEGIN");
	gp_sql(holder, "SELECT 1 FROM organisations WHERE id = 'dl' FOR UPDATE");
	t0 = fixture_now_ms();
	assert_int_equal(
		gate_pgmode_admit(e.g, "dl", (uint64_t)gp_epoch(admin), 2000, &r, 1, adm_cb, &p),
		0);
	gp_wait_for(e.lp, admin, "transactionid", 1); /* on the org row */
	if (fixture_now_ms() - t0 < 1500)
		fixture_sleep_ms((long)(1500 - (fixture_now_ms() - t0)));
	gp_sql(holder, "COMMIT"); /* the admission goes on; its write waits for the contact */
	fixture_run_until_count(e.lp, &p.calls, 1, 60000);
	assert_int_equal(p.status, -ETIMEDOUT);
	pg_pool_get_stats(e.pool, &st);
	assert_int_equal(st.timeouts + st.disconnects, 0); /* the server ended it */
	gp_sql(row_holder, "COMMIT");
	PQfinish(row_holder);
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM calls WHERE id = '%s'", id), 0);
	assert_int_equal(gp_int(admin,
				"SELECT count(*) FROM contacts WHERE id = %lld AND"
				" state = 'claimed'",
				k),
			 1);
	gp_close(&e);
}

/* The call row's created_at is the write's own time, after the org row's lock was granted:
 * not the transaction's start (now()), which came before the wait, so intervals from
 * created_at overlapped beyond the limit though the live calls never did. */
static void created_at_after_the_lock(void **state)
{
	static const char *const agents[] = { "a0" };
	struct gp e;
	struct adm p = { 0 };
	char id[37], granted[64];

	(void)state;
	gp_seed_org(admin, "ca", 5, 0, 1, agents, NULL, 2);
	struct gate_pg_dial c[] = { cand("ca_c0", gp_contact(admin, "ca", 0, 0)) };
	struct gate_pgmode_req r = req(id, c, 1);

	gp_open(&e, &svc, 1, "created");
	gp_sql(holder, "BEGIN");
	gp_sql(holder, "SELECT 1 FROM organisations WHERE id = 'ca' FOR UPDATE");
	assert_int_equal(
		gate_pgmode_admit(e.g, "ca", (uint64_t)gp_epoch(admin), 60000, &r, 1, adm_cb, &p),
		0);
	gp_wait_for(e.lp, admin, "transactionid", 1); /* on the org row, its transaction begun */
	PGresult *t = fixture_sql(holder, "SELECT clock_timestamp()::text");
	snprintf(granted, sizeof(granted), "%s", PQgetvalue(t, 0, 0));
	PQclear(t);
	gp_sql(holder, "COMMIT"); /* the lock is granted after this instant */
	fixture_run_until_count(e.lp, &p.calls, 1, 60000);
	assert_int_equal(p.status, 0);
	assert_int_equal(p.a.results[0].outcome, GATE_PGMODE_ADMITTED);
	assert_int_equal(gp_int(admin,
				"SELECT count(*) FROM calls WHERE id = '%s'"
				" AND created_at >= '%s'::timestamptz",
				id, granted),
			 1);
	gp_sql(admin, "UPDATE calls SET state = 'ended', ended_at = now() WHERE org_id = 'ca'");
	gp_close(&e);
}

/* --- several workers at once --- */

#define WORKERS	    3
#define CC_CAMPS    4
#define CC_LIMIT    5
#define CC_AGENT    3
#define CC_CEILING  2
#define SYS_EXTRA   7
#define ROUNDS	    12
#define CC_CONTACTS 300

struct cc {
	long long contacts[CC_CAMPS + 1][CC_CONTACTS];
	int used[CC_CAMPS + 1];
	long long sys_limit;
	int steps, admitted;
};

static struct cc cc;

/* Every level re-counted from the call rows, independently of the gate. */
static void check_levels(void)
{
	assert_true(live("true") <= cc.sys_limit);
	assert_true(live("org_id = 'cc'") <= CC_LIMIT);
	assert_true(live("org_id = 'cc' AND agent_id = 'cc_a0'") <= CC_AGENT);
	assert_true(live("org_id = 'cc' AND agent_id = 'cc_a1'") <= CC_AGENT);
	assert_true(live("campaign_id = 'cc_c0'") <= CC_CEILING);
	assert_true(live("org_id = 'cd'") <= 10);
}

static void cc_cb(struct gate_pg *g, int status, const struct gate_pgmode_answer *a, void *data)
{
	assert_int_equal(status, 0);
	cc.steps++;
	for (uint32_t i = 0; i < a->n; i++)
		cc.admitted += a->results[i].outcome == GATE_PGMODE_ADMITTED;
	check_levels();
}

static void send_one(struct gp *w, int round, int t)
{
	static const char *const camps[] = { "cc_c0", "cc_c1", "cc_c2", "cc_c3", "cd_c0" };
	struct gate_pg_dial c[3][3];
	struct gate_pgmode_req reqs[3];
	char ids[3][37];
	bool other = (round + t) % 3 == 0; /* org cd competes for the system level */
	uint32_t n = 1 + (uint32_t)(rand() % 3);

	for (uint32_t i = 0; i < n; i++) {
		uint32_t nc = other ? 1 : 1 + (uint32_t)(rand() % 3);
		int start = rand() % CC_CAMPS;
		for (uint32_t j = 0; j < nc; j++) { /* distinct campaigns, in a random order */
			int camp = other ? CC_CAMPS : (start + (int)j) % CC_CAMPS;
			c[i][j] = cand(camps[camp], cc.contacts[camp][cc.used[camp]++]);
		}
		reqs[i] = req(ids[i], c[i], nc);
	}
	assert_int_equal(gate_pgmode_admit(w->g, other ? "cd" : "cc", (uint64_t)gp_epoch(admin),
					   30000, reqs, n, cc_cb, NULL),
			 0);
}

static void release_some(struct gp *w)
{
	PGresult *res = fixture_sql(admin, "SELECT id FROM calls WHERE state = 'dialing' AND"
					   " org_id IN ('cc', 'cd') ORDER BY random() LIMIT 4");
	const char *ids[4];
	struct rel r = { 0 };
	int n = PQntuples(res);

	for (int i = 0; i < n; i++)
		ids[i] = PQgetvalue(res, i, 0);
	if (n > 0) {
		assert_int_equal(gate_pgmode_release(w->g, ids, (uint32_t)(rand() % n + 1),
						     "completed", rel_cb, &r),
				 0);
		fixture_run_until_count(w->lp, &r.calls, 1, 60000);
	}
	PQclear(res);
	check_levels();
}

static void concurrent_admissions_never_exceed(void **state)
{
	uv_loop_t loop;
	struct gp w[WORKERS];

	srand(7);
	for (int c = 0; c <= CC_CAMPS; c++)
		for (int i = 0; i < CC_CONTACTS; i++)
			cc.contacts[c][i] = gp_contact(admin, c < CC_CAMPS ? "cc" : "cd",
						       c < CC_CAMPS ? c : 0, i);
	cc.sys_limit = live("true") + SYS_EXTRA;
	gp_sql(admin, "UPDATE system_settings SET global_limit = %lld", cc.sys_limit);
	uv_loop_init(&loop);
	for (int i = 0; i < WORKERS; i++) {
		char name[16];
		snprintf(name, sizeof(name), "cc%d", i);
		gp_open_on(&w[i], &loop, &svc, 2, name, NULL, NULL, NULL);
	}
	for (int round = 0; round < ROUNDS; round++) {
		int want = cc.steps + 2 * WORKERS;

		/* The test holds the system row: every transaction of the round queues on it. */
		gp_sql(holder, "BEGIN");
		gp_sql(holder, "SELECT 1 FROM system_settings FOR UPDATE");
		for (int t = 0; t < 2 * WORKERS; t++)
			send_one(&w[t % WORKERS], round, t);
		gp_wait_for(&loop, admin, NULL, 2 * WORKERS);
		assert_int_equal(cc.steps, want - 2 * WORKERS);
		gp_sql(holder, "COMMIT");
		fixture_run_until_count(&loop, &cc.steps, want, 60000);
		if (round % 2)
			release_some(&w[round % WORKERS]);
	}
	print_message("%d transactions, %d admitted, levels re-counted after each\n", cc.steps,
		      cc.admitted);
	/* Saturated at some point: the org reached its limit or the system its own. */
	assert_true(cc.admitted >= CC_LIMIT);
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM calls WHERE org_id IN ('cc', 'cd')"
				       " AND gate_mode = 'postgres'"),
			 cc.admitted);
	for (int i = 0; i < WORKERS; i++)
		gp_close_pool(&w[i]);
	fixture_loop_close(&loop);
	gp_sql(admin, "UPDATE system_settings SET global_limit = 1000");
}

static const char *stmt_sql(const struct stmt_def *defs, size_t n, enum stmt_id id)
{
	for (size_t i = 0; i < n; i++)
		if (defs[i].id == id)
			return defs[i].sql;
	fail_msg("no statement %d", id);
	return NULL;
}

/* The admission's campaign read looks campaigns up by key: with 10,000 campaigns in the org,
 * neither the custom nor the generic plan scans them (SPEC P5: cost flat in campaigns). */
static void campaign_read_is_flat(void **state)
{
	const char *sql = stmt_sql(gate_pgmode_stmts, gate_pgmode_n_stmts, ST_CAMPAIGNS);
	char *prep = malloc(strlen(sql) + 64);

	gp_sql(admin, "INSERT INTO campaigns (id, org_id, agent_id) SELECT 'lv_x' || g, 'lv',"
		      " 'lv_a0' FROM generate_series(1, 10000) g");
	gp_sql(admin,
	       "INSERT INTO fair_share_floors (org_id, campaign_id, floor, version)"
	       " SELECT 'lv', 'lv_x' || g, (g <= 3)::int, 1 FROM generate_series(1, 10000) g");
	/* A busy system: the planner's guess of an org's live calls is large. */
	gp_sql(admin, "INSERT INTO calls (id, org_id, campaign_id, agent_id, to_number, gate_mode,"
		      " gate_epoch) SELECT gen_random_uuid(), 'lv', 'lv_x' || (g %% 50), 'lv_a0',"
		      " '+14155550100', 'postgres', 1 FROM generate_series(1, 400) g");
	gp_sql(admin, "ANALYZE campaigns, fair_share_floors, calls");
	sprintf(prep, "PREPARE campaigns_read AS %s", sql);
	PQclear(fixture_sql(admin, prep));
	for (int generic = 0; generic < 2; generic++) {
		gp_sql(admin, "SET plan_cache_mode = %s",
		       generic ? "force_generic_plan" : "force_custom_plan");
		PGresult *res =
			fixture_sql(admin, "EXPLAIN EXECUTE campaigns_read('lv', '{lv_c1}')");
		for (int i = 0; i < PQntuples(res); i++) {
			const char *line = PQgetvalue(res, i, 0);
			if (strstr(line, "Scan on campaigns") && !strstr(line, "Index Scan"))
				fail_msg("the campaign read scans campaigns: %s", line);
		}
		PQclear(res);
	}
	gp_sql(admin, "RESET plan_cache_mode");
	gp_sql(admin, "DEALLOCATE campaigns_read");
	gp_sql(admin, "DELETE FROM calls WHERE campaign_id LIKE 'lv\\_x%%'");
	gp_sql(admin, "DELETE FROM fair_share_floors WHERE org_id = 'lv'");
	gp_sql(admin, "DELETE FROM campaigns WHERE id LIKE 'lv\\_x%%'");
	free(prep);
}

static int setup(void **state)
{
	static const char *const lv[] = { "a0", "a0", "a1" };
	static const char *const fl[] = { "a0", "a1" };
	static const char *const ccag[] = { "a0", "a0", "a1", "a1" };
	static const int lv_ceil[] = { 1, 0, 0 }, cc_ceil[] = { CC_CEILING, 0, 0, 0 };

	fixture_start(&svc, true, false, false, true);
	admin = fixture_pg(&svc);
	holder = fixture_pg(&svc);
	gp_seed_org(admin, "lv", 3, 2, 3, lv, lv_ceil, 10);
	gp_seed_org(admin, "fl", 2, 0, 2, fl, NULL, 10);
	gp_seed_org(admin, "cc", CC_LIMIT, CC_AGENT, CC_CAMPS, ccag, cc_ceil, CC_CONTACTS);
	gp_seed_org(admin, "cd", 10, 0, 1, fl, NULL, CC_CONTACTS);
	gp_sql(admin, "UPDATE system_settings SET gate_mode = 'postgres',"
		      " gate_epoch = gate_epoch + 1");
	return 0;
}

static int teardown(void **state)
{
	PQfinish(holder);
	PQfinish(admin);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(levels_from_call_rows),
		cmocka_unit_test(floors_waiters_release),
		cmocka_unit_test(lost_before_commit_admits_nothing),
		cmocka_unit_test(deadline_bounds_the_transaction),
		cmocka_unit_test(created_at_after_the_lock),
		cmocka_unit_test(concurrent_admissions_never_exceed),
		cmocka_unit_test(campaign_read_is_flat),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
