/* The gate mode and epoch against a real server (dispatcher/gate/gate_pg.h): several workers,
 * each with its own connections, notice Redis down together and move the epoch by exactly one
 * (all of them certainly waiting on the epoch lock the test holds); the reconciler's way back
 * (every live call read under the exclusive lock, writes held meanwhile and refused after,
 * mode redis with epoch + 1, a stale or unleased reconciler refused, a failed rebuild rolled
 * back); the reconciler's reads feeding the reconcile plan; pruning. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "gate_pg_test.h"
#include "reconcile.h"

#include <errno.h>
#include <stdlib.h>

#define WORKERS 4

static struct embedded svc;
static PGconn *admin, *holder;
static char C0[] = "md_c0", A0[] = "md_a0";

struct mode_notes {
	int n;
	char last[64];
};

static void mode_note_cb(const char *channel, const char *payload, void *data)
{
	struct mode_notes *m = data;

	assert_string_equal(channel, GATE_PG_CHANNEL_MODE);
	m->n++;
	snprintf(m->last, sizeof(m->last), "%s", payload);
}

static void several_workers_bump_once(void **state)
{
	uv_loop_t loop;
	struct gp w[WORKERS], listener;
	struct gp_switch s[WORKERS + 1] = { 0 };
	struct mode_notes notes = { 0 };
	struct gate_pg_mode parsed;
	long long epoch = gp_epoch(admin);
	int switched = 0;

	uv_loop_init(&loop);
	gp_open_on(&listener, &loop, &svc, 1, "listener", NULL, mode_note_cb, &notes);
	for (int i = 0; i < WORKERS; i++) {
		char name[16];
		snprintf(name, sizeof(name), "worker%d", i);
		gp_open_on(&w[i], &loop, &svc, 1, name, NULL, NULL, NULL);
	}
	/* Every worker saw the same epoch and noticed Redis down; they queue on the lock. */
	gp_sql(holder, "SELECT pg_advisory_lock(%lld)", GATE_PG_EPOCH_LOCK_KEY);
	for (int i = 0; i < WORKERS; i++)
		assert_int_equal(gate_pg_switch_to_postgres(w[i].g, (uint64_t)epoch, 60000,
							    gp_switch_cb, &s[i]),
				 0);
	gp_wait_for(&loop, admin, "advisory", WORKERS);
	gp_sql(holder, "SELECT pg_advisory_unlock(%lld)", GATE_PG_EPOCH_LOCK_KEY);
	for (int i = 0; i < WORKERS; i++) {
		fixture_run_until_count(&loop, &s[i].calls, 1, 60000);
		assert_int_equal(s[i].status, 0);
		assert_int_equal(s[i].r.now.mode, GATE_MODE_POSTGRES);
		assert_int_equal(s[i].r.now.epoch, epoch + 1);
		switched += s[i].r.switched;
	}
	assert_int_equal(switched, 1);
	assert_int_equal(gp_epoch(admin), epoch + 1);
	fixture_run_until_count(&loop, &notes.n, 1, 60000);

	/* A worker that learns late, with the old epoch: nothing moves. */
	assert_int_equal(gate_pg_switch_to_postgres(w[0].g, (uint64_t)epoch, 60000, gp_switch_cb,
						    &s[WORKERS]),
			 0);
	fixture_run_until_count(&loop, &s[WORKERS].calls, 1, 60000);
	assert_false(s[WORKERS].r.switched);
	assert_int_equal(s[WORKERS].r.now.epoch, epoch + 1);
	/* And one that knows the new epoch: already postgres, nothing moves either. */
	memset(&s[WORKERS], 0, sizeof(s[WORKERS]));
	assert_int_equal(gate_pg_switch_to_postgres(w[1].g, (uint64_t)epoch + 1, 60000,
						    gp_switch_cb, &s[WORKERS]),
			 0);
	fixture_run_until_count(&loop, &s[WORKERS].calls, 1, 60000);
	assert_false(s[WORKERS].r.switched);
	assert_int_equal(gp_epoch(admin), epoch + 1);
	/* One notification in all, for the one switch (a marker NOTIFY comes after it). */
	gp_sql(admin, "NOTIFY " GATE_PG_CHANNEL_MODE ", 'marker 1'");
	fixture_run_until_count(&loop, &notes.n, 2, 60000);
	assert_string_equal(notes.last, "marker 1");
	assert_int_equal(notes.n, 2);
	struct gate_pg_stats st;
	int made = 0;
	for (int i = 0; i < WORKERS; i++) {
		gate_pg_get_stats(w[i].g, &st);
		made += (int)st.switches;
	}
	assert_int_equal(made, 1);

	char payload[32];
	snprintf(payload, sizeof(payload), "postgres %lld", epoch + 1);
	assert_int_equal(gate_pg_parse_mode(payload, &parsed), 0);
	assert_int_equal(parsed.mode, GATE_MODE_POSTGRES);
	assert_int_equal(parsed.epoch, epoch + 1);
	assert_int_equal(gate_pg_parse_mode("redis 0", &parsed), -EINVAL);
	assert_int_equal(gate_pg_parse_mode("memory 3", &parsed), -EINVAL);
	assert_int_equal(gate_pg_parse_mode("redis 3 x", &parsed), -EINVAL);

	for (int i = 0; i < WORKERS; i++)
		gp_close_pool(&w[i]);
	gp_close_pool(&listener);
	fixture_loop_close(&loop);
}

struct rebuild_probe {
	int calls, status;
	struct gate_pg_rebuild *rb;
	uint32_t n;
	char ids[8][40];
	struct gate_pg_mode mode;
};

static void rebuild_cb(struct gate_pg_rebuild *rb, int status,
		       const struct gate_pg_live_call *calls, uint32_t n,
		       const struct gate_pg_mode *mode, void *data)
{
	struct rebuild_probe *p = data;

	p->calls++;
	p->status = status;
	p->rb = rb;
	p->n = n;
	for (uint32_t i = 0; i < n && i < 8; i++) {
		snprintf(p->ids[i], sizeof(p->ids[i]), "%s", calls[i].call);
		assert_string_equal(calls[i].org, "md");
		assert_string_equal(calls[i].agent, "md_a0");
	}
	if (mode)
		p->mode = *mode;
}

/* Switches to postgres mode; returns the new epoch. */
static uint64_t to_postgres(struct gp *e)
{
	struct gp_switch s = { 0 };

	assert_int_equal(gate_pg_switch_to_postgres(e->g, (uint64_t)gp_epoch(admin), 60000,
						    gp_switch_cb, &s),
			 0);
	fixture_run_until_count(e->lp, &s.calls, 1, 60000);
	assert_int_equal(s.status, 0);
	assert_int_equal(s.r.now.mode, GATE_MODE_POSTGRES);
	return s.r.now.epoch;
}

static void rebuild_begin_sync(struct gp *e, uint64_t seen, const char *owner, uint64_t version,
			       struct rebuild_probe *p)
{
	memset(p, 0, sizeof(*p));
	assert_int_equal(gate_pg_rebuild_begin(e->g, seen, owner, version, 60000, rebuild_cb, p),
			 0);
	fixture_run_until_count(e->lp, &p->calls, 1, 60000);
}

static void switch_back(void **state)
{
	struct gp e;
	struct rebuild_probe p;
	struct gp_write live = { 0 }, held = { 0 };
	struct gp_switch done = { 0 }, rolled = { 0 };
	char id[4][37];

	gp_open(&e, &svc, 2, "back");
	uint64_t epoch = to_postgres(&e);
	/* Two live calls written in postgres mode, one ended. */
	struct gate_pg_call calls[3] = {
		gp_call(gp_uuid(id[0], 10), "md", C0, A0, gp_contact(admin, "md", 0, 0)),
		gp_call(gp_uuid(id[1], 11), "md", NULL, A0, 0),
		gp_call(gp_uuid(id[2], 12), "md", NULL, A0, 0),
	};
	assert_int_equal(
		gate_pg_write(e.g, GATE_MODE_POSTGRES, epoch, 10000, calls, 3, gp_write_cb, &live),
		0);
	fixture_run_until_count(e.lp, &live.calls, 1, 60000);
	for (int i = 0; i < 3; i++)
		assert_int_equal(live.out[i], GATE_PG_WRITTEN);
	gp_sql(admin, "UPDATE calls SET state = 'ended', ended_at = now() WHERE id = '%s'", id[2]);

	rebuild_begin_sync(&e, epoch, NULL, 0, &p);
	assert_int_equal(p.status, 0);
	assert_non_null(p.rb);
	assert_int_equal(p.mode.mode, GATE_MODE_POSTGRES);
	assert_int_equal(p.n, 2);
	assert_string_equal(p.ids[0], id[0]); /* ordered by org, then call id */
	assert_string_equal(p.ids[1], id[1]);
	/* The exclusive lock is held while Redis is rebuilt: a write waits... */
	struct gate_pg_call more = gp_call(gp_uuid(id[3], 13), "md", NULL, A0, 0);
	assert_int_equal(
		gate_pg_write(e.g, GATE_MODE_POSTGRES, epoch, 60000, &more, 1, gp_write_cb, &held),
		0);
	gp_wait_for(e.lp, admin, "advisory", 1);
	assert_int_equal(gate_pg_rebuild_finish(p.rb, true, "e2.test", NULL, gp_switch_cb, &done),
			 0);
	assert_int_equal(gate_pg_rebuild_finish(p.rb, true, "e2.test", NULL, gp_switch_cb, &done),
			 -EBUSY);
	fixture_run_until_count(e.lp, &done.calls, 1, 60000);
	assert_int_equal(done.status, 0);
	assert_true(done.r.switched);
	assert_int_equal(done.r.now.mode, GATE_MODE_REDIS);
	assert_int_equal(done.r.now.epoch, epoch + 1);
	/* The commit records the rebuild's generation with the mode and epoch (issue 8). */
	assert_string_equal(done.r.now.generation, "e2.test");
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM system_settings WHERE"
				       " gate_generation = 'e2.test'"),
			 1);
	/* ... and is refused once the mode is back: it was decided under the old epoch. */
	fixture_run_until_count(e.lp, &held.calls, 1, 60000);
	assert_int_equal(held.out[0], GATE_PG_STALE_EPOCH);

	/* A reconciler that saw the old epoch, or finds redis mode, changes nothing. */
	rebuild_begin_sync(&e, epoch, NULL, 0, &p);
	assert_int_equal(p.status, -ESTALE);
	assert_null(p.rb);
	assert_int_equal(p.mode.mode, GATE_MODE_REDIS);

	/* The lease: only its holder at its version may switch back. */
	epoch = to_postgres(&e);
	gp_sql(admin, "UPDATE leases SET owner = 'rec-1', version = 3,"
		      " lease_until = now() + interval '1 minute' WHERE name = 'reconciler'");
	rebuild_begin_sync(&e, epoch, "rec-1", 2, &p);
	assert_int_equal(p.status, -EPERM);
	rebuild_begin_sync(&e, epoch, "rec-2", 3, &p);
	assert_int_equal(p.status, -EPERM);
	rebuild_begin_sync(&e, epoch, "rec-1", 3, &p);
	assert_int_equal(p.status, 0);
	/* The Redis rebuild failed: roll back, the fleet stays in postgres mode. */
	assert_int_equal(gate_pg_rebuild_finish(p.rb, false, NULL, NULL, gp_switch_cb, &rolled), 0);
	fixture_run_until_count(e.lp, &rolled.calls, 1, 60000);
	assert_int_equal(rolled.status, 0);
	assert_false(rolled.r.switched);
	assert_int_equal(gp_epoch(admin), (long long)epoch);
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM system_settings WHERE"
				       " gate_mode = 'postgres'"),
			 1);
	/* Back to redis mode for the other tests. */
	rebuild_begin_sync(&e, epoch, "rec-1", 3, &p);
	assert_int_equal(p.status, 0);
	memset(&done, 0, sizeof(done));
	assert_int_equal(gate_pg_rebuild_finish(p.rb, true, "e2.test", NULL, gp_switch_cb, &done),
			 0);
	fixture_run_until_count(e.lp, &done.calls, 1, 60000);
	assert_true(done.r.switched);
	gp_sql(admin, "UPDATE calls SET state = 'ended', ended_at = now() WHERE org_id = 'md'");
	gp_close(&e);
}

struct calls_probe {
	int calls, status;
	uint32_t n;
	char ids[8][40];
};

static void calls_cb(struct gate_pg *g, int status, const struct gate_pg_live_call *calls,
		     uint32_t n, void *data)
{
	struct calls_probe *p = data;

	p->calls++;
	p->status = status;
	p->n = n;
	for (uint32_t i = 0; i < n && i < 8; i++)
		snprintf(p->ids[i], sizeof(p->ids[i]), "%s", calls[i].call);
}

struct rows_probe {
	int calls, status;
	int rows[8];
};

static void rows_cb(struct gate_pg *g, int status, const int *rows, uint32_t n, void *data)
{
	struct rows_probe *p = data;

	p->calls++;
	p->status = status;
	for (uint32_t i = 0; rows && i < n && i < 8; i++)
		p->rows[i] = rows[i];
}

/* Steps 1 and 3 of the reconciler's read protocol against real rows, and the plan on them. */
static void reconciler_reads_and_plan(void **state)
{
	struct gp e;
	struct gp_write w = { 0 };
	struct calls_probe live = { 0 };
	struct rows_probe rows = { 0 };
	char id[4][37];
	long long epoch = gp_epoch(admin);

	gp_open(&e, &svc, 1, "reads");
	struct gate_pg_call calls[2] = { gp_call(gp_uuid(id[0], 20), "md", NULL, A0, 0),
					 gp_call(gp_uuid(id[1], 21), "md", NULL, A0, 0) };
	assert_int_equal(gate_pg_write(e.g, GATE_MODE_REDIS, (uint64_t)epoch, 10000, calls, 2,
				       gp_write_cb, &w),
			 0);
	fixture_run_until_count(e.lp, &w.calls, 1, 60000);
	assert_int_equal(gate_pg_org_live_calls(e.g, "md", calls_cb, &live), 0);
	fixture_run_until_count(e.lp, &live.calls, 1, 60000);
	assert_int_equal(live.status, 0);
	assert_int_equal(live.n, 2);
	/* Meanwhile one ends (its release came through), and Redis holds a record of it, one of
	 * a call never written (old), and one of a call being written (young). */
	gp_sql(admin, "UPDATE calls SET state = 'ended', ended_at = now() WHERE id = '%s'", id[1]);
	const char *ask[] = { id[0], id[1], gp_uuid(id[2], 22), gp_uuid(id[3], 23) };
	assert_int_equal(gate_pg_call_rows(e.g, ask, 4, rows_cb, &rows), 0);
	fixture_run_until_count(e.lp, &rows.calls, 1, 60000);
	assert_int_equal(rows.status, 0);
	assert_int_equal(rows.rows[0], RECONCILE_ROW_LIVE);
	assert_int_equal(rows.rows[1], RECONCILE_ROW_ENDED);
	assert_int_equal(rows.rows[2], RECONCILE_ROW_ABSENT);
	assert_int_equal(rows.rows[3], RECONCILE_ROW_ABSENT);

	uint64_t now = 1000000;
	struct reconcile_slot slots[] = {
		{ .call = id[1], .taken_ms = now - 50, .row = (enum reconcile_row)rows.rows[1] },
		{ .call = id[2], .taken_ms = now - 60000, .row = (enum reconcile_row)rows.rows[2] },
		{ .call = id[3], .taken_ms = now - 100, .row = (enum reconcile_row)rows.rows[3] },
	};
	struct reconcile_call rc[] = {
		{ .call = live.ids[0], .row = (enum reconcile_row)rows.rows[0] },
		{ .call = live.ids[1], .row = (enum reconcile_row)rows.rows[1] },
	};
	struct reconcile_summary sum;
	assert_int_equal(reconcile_plan(slots, 3, rc, 2, now, GATE_PG_WRITE_DEADLINE_MS, &sum), 0);
	assert_int_equal(sum.count[RECONCILE_RELEASE], 1); /* id[1]: ended, record left */
	assert_int_equal(sum.count[RECONCILE_FENCE], 1);   /* id[2]: never written, old */
	assert_int_equal(sum.count[RECONCILE_YOUNG], 1);   /* id[3]: maybe in flight */
	assert_int_equal(sum.count[RECONCILE_ADD], 1);	   /* id[0]: live, no record */
	assert_int_equal(sum.corrections, 3);
	assert_int_equal(gate_pg_org_live_calls(e.g, "bad org", calls_cb, &live), -EINVAL);
	assert_int_equal(gate_pg_call_rows(e.g, ask, 0, rows_cb, &rows), -EINVAL);
	gp_sql(admin, "UPDATE calls SET state = 'ended', ended_at = now() WHERE org_id = 'md'");
	gp_close(&e);
}

struct count_probe {
	int calls, status;
	uint64_t n;
};

static void count_cb(struct gate_pg *g, int status, uint64_t n, void *data)
{
	struct count_probe *p = data;

	p->calls++;
	p->status = status;
	p->n = n;
}

static void prune_old_fences(void **state)
{
	struct gp e;
	struct count_probe p = { 0 };
	char id[3][37];

	gp_open(&e, &svc, 1, "prune");
	gp_sql(admin,
	       "INSERT INTO gate_fences (call_id, org_id, created_at) VALUES"
	       " ('%s', 'md', now() - interval '2 days'), ('%s', 'md', now())",
	       gp_uuid(id[0], 30), gp_uuid(id[1], 31));
	gp_sql(admin,
	       "INSERT INTO gate_direct_waiters (call_id, org_id, expires_at) VALUES"
	       " ('%s', 'md', now() - interval '1 second')",
	       gp_uuid(id[2], 32));
	assert_int_equal(gate_pg_prune(e.g, 86400, count_cb, &p), 0);
	fixture_run_until_count(e.lp, &p.calls, 1, 60000);
	assert_int_equal(p.status, 0);
	assert_int_equal(p.n, 2);
	assert_int_equal(
		gp_int(admin, "SELECT count(*) FROM gate_fences WHERE call_id = '%s'", id[1]), 1);
	gp_close(&e);
}

static int setup(void **state)
{
	static const char *const agents[] = { "a0" };

	fixture_start(&svc, true, false, false, true);
	admin = fixture_pg(&svc);
	holder = fixture_pg(&svc);
	gp_seed_org(admin, "md", 20, 0, 1, agents, NULL, 10);
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
		cmocka_unit_test(several_workers_bump_once),
		cmocka_unit_test(switch_back),
		cmocka_unit_test(reconciler_reads_and_plan),
		cmocka_unit_test(prune_old_fences),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
