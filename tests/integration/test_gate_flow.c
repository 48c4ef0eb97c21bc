/* The admit operation whole (dispatcher/gate/gate_flow.h, issue 8 item 2) against a real Redis
 * and PostgreSQL: the admissions answered in one loop turn are written in ONE gate_pg_write and
 * each is reported written; a call whose contact's lease moved on before the turn ended is
 * reported lease lost and its Redis slots are back (also a stale copy of a contact that another
 * admission of the turn carries: it waits for the next batch); a refusal is reported as one, with no row; a
 * row written after its caller was cancelled by close is ended and its slots released. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "gate_flow.h"
#include "gate_harness.h"
#include "gate_pg_test.h"

static struct embedded svc;
static PGconn *admin, *holder;

#define N_CALLS 4

struct env {
	struct gate_env ge;
	struct gp gp;
	struct gate_flow *flow;
	int closed;
};

struct fprobe {
	int done, status;
	struct gate_flow_result r;
	struct gate_admit_result admit;
	char call[37];
};

static void flow_cb(struct gate_flow *f, int status, const struct gate_flow_result *r, void *data)
{
	struct fprobe *p = data;

	(void)f;
	p->done++;
	p->status = status;
	if (r) {
		p->r = *r;
		p->admit = *r->admit;
		snprintf(p->call, sizeof(p->call), "%s", r->call);
	}
}

static void env_open(struct env *e, const char *org, uint32_t org_limit)
{
	memset(e, 0, sizeof(*e));
	genv_open(&e->ge, svc.redis_url, "flow", true);
	gp_open_on(&e->gp, &e->ge.loop, &svc, 2, "flow", NULL, NULL, NULL);
	const char *const orgs[] = { org, NULL };
	char camps[128];
	snprintf(camps, sizeof(camps), "%s_c0::%s_a0 %s_c1::%s_a1", org, org, org, org);
	genv_fresh(&e->ge, 1000, orgs);
	assert_int_equal(genv_limits(&e->ge, org, 1, org_limit, 0, true, camps, NULL), 0);
	struct gate_flow_options o = { .loop = &e->ge.loop, .gate = e->ge.g, .pg = e->gp.g };
	assert_int_equal(gate_flow_new(&o, &e->flow), 0);
}

static void closed_cb(void *data)
{
	(*(int *)data)++;
}

static void env_close(struct env *e)
{
	gate_flow_close(e->flow, closed_cb, &e->closed);
	fixture_run_until_count(&e->ge.loop, &e->closed, 1, 60000);
	gp_close_pool(&e->gp);
	genv_close(&e->ge);
}

/* Admits call (a batch call of org's campaign c0 on contact k, falling back to c1 on k1). */
static void admit(struct env *e, const char *org, const char *call, long long k, long long k1,
		  struct fprobe *p)
{
	char c0[16], c1[16], a0[16], a1[16];
	snprintf(c0, sizeof(c0), "%s_c0", org);
	snprintf(c1, sizeof(c1), "%s_c1", org);
	snprintf(a0, sizeof(a0), "%s_a0", org);
	snprintf(a1, sizeof(a1), "%s_a1", org);
	const char *camps[2] = { c0, c1 };
	struct gate_admit_req req = {
		.org = org, .call = call, .campaigns = camps, .n_campaigns = 2
	};
	struct gate_pg_dial dials[2] = {
		gp_call(call, org, c0, a0, k).dial,
		gp_call(call, org, c1, a1, k1).dial,
	};
	struct gate_flow_row row = { .mode = GATE_MODE_REDIS,
				     .epoch = (uint64_t)gp_epoch(admin),
				     .dials = dials };
	assert_int_equal(gate_flow_admit(e->flow, &req, &row, flow_cb, p), 0);
	assert_int_equal(p->done, 0); /* never before the call returns */
}

static bool all_done(void *arg)
{
	struct fprobe *p = arg;
	for (int i = 0; i < N_CALLS; i++)
		if (!p[i].done)
			return false;
	return true;
}

static long long rows(const char *call)
{
	return gp_int(admin, "SELECT count(*) FROM calls WHERE id = '%s'", call);
}

/* N_CALLS admissions in one loop turn: one write batch, each call reported written. */
static void one_write_per_turn(void **state)
{
	struct env e;
	struct fprobe p[N_CALLS] = { 0 };
	char id[N_CALLS][37];
	struct gate_pg_stats before, after;
	struct gate_flow_stats fs;

	(void)state;
	env_open(&e, "fa", 10);
	gate_pg_get_stats(e.gp.g, &before);
	for (int i = 0; i < N_CALLS; i++)
		admit(&e, "fa", gp_uuid(id[i], 100 + (unsigned)i), gp_contact(admin, "fa", 0, i),
		      gp_contact(admin, "fa", 1, i), &p[i]);
	fixture_run_until(&e.ge.loop, all_done, p, 60000);
	gate_pg_get_stats(e.gp.g, &after);
	gate_flow_get_stats(e.flow, &fs);
	assert_int_equal(after.writes - before.writes, 1); /* ONE transaction */
	assert_int_equal(fs.batches, 1);
	assert_int_equal(fs.written, N_CALLS);
	for (int i = 0; i < N_CALLS; i++) {
		assert_int_equal(p[i].done, 1);
		assert_int_equal(p[i].status, 0);
		assert_int_equal(p[i].r.outcome, GATE_FLOW_ADMITTED);
		assert_int_equal(p[i].r.write, GATE_PG_WRITTEN);
		assert_string_equal(p[i].call, id[i]);
		assert_int_equal(p[i].admit.index, 0);
		assert_int_equal(rows(id[i]), 1);
	}
	struct view_copy v;
	assert_int_equal(genv_read(&e.ge, "fa", &v), 0);
	assert_int_equal(v.v.org_running, N_CALLS);
	env_close(&e);
}

/* The lease of one contact moves on before the turn ends: that call is lease lost, not written,
 * and its slot is released at once; the others of the batch are written. */
static void lease_lost_releases(void **state)
{
	struct env e;
	struct fprobe p[N_CALLS] = { 0 };
	char id[N_CALLS][37];
	struct gate_flow_stats fs;
	long long lost = gp_contact(admin, "fb", 0, 1);

	(void)state;
	env_open(&e, "fb", 10);
	for (int i = 0; i < N_CALLS; i++)
		admit(&e, "fb", gp_uuid(id[i], 200 + (unsigned)i), gp_contact(admin, "fb", 0, i),
		      gp_contact(admin, "fb", 1, i), &p[i]);
	/* Before the turn ends (the admissions are not even answered yet). */
	gp_sql(admin, "UPDATE contacts SET lease_token = lease_token + 1 WHERE id = %lld", lost);
	fixture_run_until(&e.ge.loop, all_done, p, 60000);
	gate_flow_get_stats(e.flow, &fs);
	assert_int_equal(fs.batches, 1);
	assert_int_equal(fs.written, N_CALLS - 1);
	assert_int_equal(fs.released, 1);
	for (int i = 0; i < N_CALLS; i++) {
		assert_int_equal(p[i].status, 0);
		if (i == 1) {
			assert_int_equal(p[i].r.outcome, GATE_FLOW_NOT_WRITTEN);
			assert_int_equal(p[i].r.write, GATE_PG_LEASE_LOST);
			assert_true(p[i].r.released);
			assert_int_equal(rows(id[i]), 0);
		} else {
			assert_int_equal(p[i].r.outcome, GATE_FLOW_ADMITTED);
			assert_int_equal(rows(id[i]), 1);
		}
	}
	/* The release was sent before the callback: the next read on the connection sees it. */
	struct view_copy v;
	assert_int_equal(genv_read(&e.ge, "fb", &v), 0);
	assert_int_equal(v.v.org_running, N_CALLS - 1);
	assert_int_equal(view_running(&v, "fb_c0"), N_CALLS - 1);
	gp_sql(admin, "UPDATE contacts SET lease_token = id + 1000 WHERE id = %lld", lost);
	env_close(&e);
}

/* org_limit 2: of N_CALLS in one turn two are admitted and written (one batch), the others are
 * refusals at the org level with no row and nothing held. */
static void refusal_has_no_row(void **state)
{
	struct env e;
	struct fprobe p[N_CALLS] = { 0 };
	char id[N_CALLS][37];
	struct gate_flow_stats fs;
	int admitted = 0, refused = 0;

	(void)state;
	env_open(&e, "fc", 2);
	for (int i = 0; i < N_CALLS; i++)
		admit(&e, "fc", gp_uuid(id[i], 300 + (unsigned)i), gp_contact(admin, "fc", 0, i),
		      gp_contact(admin, "fc", 1, i), &p[i]);
	fixture_run_until(&e.ge.loop, all_done, p, 60000);
	gate_flow_get_stats(e.flow, &fs);
	assert_int_equal(fs.batches, 1);
	for (int i = 0; i < N_CALLS; i++) {
		assert_int_equal(p[i].status, 0);
		if (p[i].r.outcome == GATE_FLOW_ADMITTED) {
			admitted++;
			assert_int_equal(rows(id[i]), 1);
		} else {
			refused++;
			assert_int_equal(p[i].r.outcome, GATE_FLOW_REFUSED);
			assert_int_equal(p[i].admit.outcome, GATE_REFUSED);
			assert_true(p[i].admit.n_decisions >= 1);
			assert_int_equal(p[i].admit.decisions[0].level, FAIRSHARE_LEVEL_ORG);
			assert_int_equal(rows(id[i]), 0);
		}
	}
	assert_int_equal(admitted, 2);
	assert_int_equal(refused, N_CALLS - 2);
	assert_int_equal(fs.refused, N_CALLS - 2);
	struct view_copy v;
	assert_int_equal(genv_read(&e.ge, "fc", &v), 0);
	assert_int_equal(v.v.org_running, 2);
	assert_int_equal(v.v.slots, 2);

	/* A turn of refusals only writes nothing. */
	struct fprobe q = { 0 };
	char extra[37];
	admit(&e, "fc", gp_uuid(extra, 310), gp_contact(admin, "fc", 0, 9),
	      gp_contact(admin, "fc", 1, 9), &q);
	fixture_run_until_count(&e.ge.loop, &q.done, 1, 60000);
	assert_int_equal(q.r.outcome, GATE_FLOW_REFUSED);
	gate_flow_get_stats(e.flow, &fs);
	assert_int_equal(fs.batches, 1);
	assert_int_equal(rows(extra), 0);
	env_close(&e);
}

/* Two admissions of one turn carry the same contact: call 1 a stale copy (the lease token of a
 * claim since swept and claimed again), call 2 the current one. The stale copy waits for a
 * second batch of the same turn and is refused alone (lease lost, slots released); the three
 * others are written. Before, gate_pg_calls_check() refused the whole write of four (-EINVAL)
 * and every call was NOT_WRITTEN (failed), the good ones with the stale one. */
static void duplicate_contact_deferred(void **state)
{
	struct env e;
	struct fprobe p[N_CALLS] = { 0 };
	char id[N_CALLS][37];
	struct gate_flow_stats fs;
	long long k = gp_contact(admin, "ff", 0, 0);

	(void)state;
	env_open(&e, "ff", 10);
	for (int i = 0; i < N_CALLS; i++) {
		char c0[] = "ff_c0", c1[] = "ff_c1", a0[] = "ff_a0", a1[] = "ff_a1";
		const char *camps[2] = { c0, c1 };
		gp_uuid(id[i], 600 + (unsigned)i);
		struct gate_admit_req req = {
			.org = "ff", .call = id[i], .campaigns = camps, .n_campaigns = 2
		};
		long long c = i == 1 || i == 2 ? k : gp_contact(admin, "ff", 0, i + 1);
		struct gate_pg_dial dials[2] = {
			gp_call(id[i], "ff", c0, a0, c).dial,
			gp_call(id[i], "ff", c1, a1, gp_contact(admin, "ff", 1, i)).dial,
		};
		if (i == 1)
			dials[0].lease_token--; /* the stale copy */
		struct gate_flow_row row = { .mode = GATE_MODE_REDIS,
					     .epoch = (uint64_t)gp_epoch(admin),
					     .dials = dials };
		assert_int_equal(gate_flow_admit(e.flow, &req, &row, flow_cb, &p[i]), 0);
	}
	fixture_run_until(&e.ge.loop, all_done, p, 60000);
	gate_flow_get_stats(e.flow, &fs);
	assert_true(fs.batches >= 2); /* the copies never in one write */
	assert_int_equal(fs.written, N_CALLS - 1);
	assert_int_equal(fs.released, 1);
	for (int i = 0; i < N_CALLS; i++) {
		assert_int_equal(p[i].status, 0);
		if (i == 1) {
			assert_int_equal(p[i].r.outcome, GATE_FLOW_NOT_WRITTEN);
			assert_int_equal(p[i].r.write, GATE_PG_LEASE_LOST);
			assert_true(p[i].r.released);
			assert_int_equal(rows(id[i]), 0);
		} else {
			assert_int_equal(p[i].r.outcome, GATE_FLOW_ADMITTED);
			assert_int_equal(rows(id[i]), 1);
		}
	}
	struct view_copy v;
	assert_int_equal(genv_read(&e.ge, "ff", &v), 0);
	assert_int_equal(v.v.org_running, N_CALLS - 1);
	env_close(&e);
}

/* Close answers what is pending -ECANCELED from inside the call, and gives slots back. */
static void close_cancels(void **state)
{
	struct env e;
	struct fprobe p = { 0 };
	char id[37];

	(void)state;
	env_open(&e, "fd", 10);
	admit(&e, "fd", gp_uuid(id, 400), gp_contact(admin, "fd", 0, 0),
	      gp_contact(admin, "fd", 1, 0), &p);
	gate_flow_close(e.flow, closed_cb, &e.closed);
	assert_int_equal(p.done, 1);
	assert_int_equal(p.status, -ECANCELED);
	fixture_run_until_count(&e.ge.loop, &e.closed, 1, 60000);
	assert_int_equal(p.done, 1);
	assert_int_equal(rows(id), 0);
	struct view_copy v;
	assert_int_equal(genv_read(&e.ge, "fd", &v), 0);
	assert_int_equal(v.v.org_running, 0); /* admitted after the close: released */
	gp_close_pool(&e.gp);
	genv_close(&e.ge);
}

/* Close while the write is held on the contact's row lock (held by the test): the caller is
 * answered -ECANCELED at once; once the lock goes the write commits the row, and the flow ends
 * it (refused, 'cancelled before dial'), puts the contact back to pending with no attempt
 * charged, and releases the slots — all before closed_cb. (It used to stay dialing with its
 * slots until the maximum-duration sweep.) */
static void close_ends_written_row(void **state)
{
	struct env e;
	struct fprobe p = { 0 };
	char id[37];
	long long k = gp_contact(admin, "fe", 0, 0);
	struct gate_pg_stats ps;

	(void)state;
	env_open(&e, "fe", 10);
	gp_sql(holder, "BEGIN");
	gp_sql(holder, "SELECT 1 FROM contacts WHERE id = %lld FOR UPDATE", k);
	admit(&e, "fe", gp_uuid(id, 500), k, gp_contact(admin, "fe", 1, 0), &p);
	gp_wait_for(&e.ge.loop, admin, "transactionid", 1); /* the write waits on the row */
	assert_int_equal(p.done, 0);
	gate_flow_close(e.flow, closed_cb, &e.closed);
	assert_int_equal(p.done, 1);
	assert_int_equal(p.status, -ECANCELED);
	gp_sql(holder, "ROLLBACK");
	fixture_run_until_count(&e.ge.loop, &e.closed, 1, 60000);
	/* Everything was done before closed_cb. */
	assert_int_equal(rows(id), 1); /* the write did commit it */
	assert_int_equal(
		gp_int(admin,
		       "SELECT count(*) FROM calls WHERE id = '%s' AND state = 'ended'"
		       " AND outcome = 'refused' AND outcome_reason = 'cancelled before dial'"
		       " AND ended_at IS NOT NULL",
		       id),
		1);
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM calls WHERE org_id = 'fe'"
				       " AND state IN ('dialing', 'live', 'unknown')"),
			 0);
	assert_int_equal(
		gp_int(admin,
		       "SELECT count(*) FROM contacts WHERE id = %lld AND state = 'pending'"
		       " AND attempts = 0 AND tries = 0 AND lease_token IS NULL",
		       k),
		1);
	struct view_copy v;
	assert_int_equal(genv_read(&e.ge, "fe", &v), 0);
	assert_int_equal(v.v.org_running, 0);
	assert_int_equal(v.v.slots, 0);
	assert_int_equal(view_running(&v, "fe_c0"), 0);
	assert_int_equal(view_agent_running(&v, "fe_a0"), 0);
	gate_pg_get_stats(e.gp.g, &ps);
	assert_int_equal(ps.cancelled, 1);
	gp_close_pool(&e.gp);
	genv_close(&e.ge);
}

static int setup(void **state)
{
	static const char *const agents[] = { "a0", "a1" };

	(void)state;
	fixture_start(&svc, true, true, false, true);
	admin = fixture_pg(&svc);
	gp_seed_org(admin, "fa", 10, 0, 2, agents, NULL, 10);
	gp_seed_org(admin, "fb", 10, 0, 2, agents, NULL, 10);
	gp_seed_org(admin, "fc", 2, 0, 2, agents, NULL, 10);
	gp_seed_org(admin, "fd", 10, 0, 2, agents, NULL, 10);
	gp_seed_org(admin, "fe", 10, 0, 2, agents, NULL, 10);
	gp_seed_org(admin, "ff", 10, 0, 2, agents, NULL, 10);
	holder = fixture_pg(&svc);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	PQfinish(holder);
	PQfinish(admin);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(one_write_per_turn),
		cmocka_unit_test(lease_lost_releases),
		cmocka_unit_test(refusal_has_no_row),
		cmocka_unit_test(close_cancels),
		cmocka_unit_test(close_ends_written_row),
		cmocka_unit_test(duplicate_contact_deferred),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
