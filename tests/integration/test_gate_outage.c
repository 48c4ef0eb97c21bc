/* The slot gate through a Redis outage and a FLUSHALL under concurrent workers (SPEC C11,
 * issue 8): forked worker processes, each with its own loop, pool, Redis connection, gate,
 * gate_pg and gate mode controller, admit and release calls without pause — in redis mode
 * gate_admit → gate_pg_write (epoch fence, lease fence) → hold → end the row → gate_release; in
 * postgres mode gate_pgmode_admit → hold → gate_pgmode_release — while the test stops Redis
 * (scenario A) or flushes it (scenario B). The workers' controllers switch the fleet to postgres
 * mode (the epoch moves once), Redis comes back (restart / still up), the reconciler's run
 * rebuilds it from the live call rows and sets redis mode (epoch + 1): right after the rebuild,
 * with the workers frozen (each lane parked at a checkpoint, its live calls held), the Redis
 * slot records equal PostgreSQL's live calls. Then more load in redis mode, and the proof.
 * Scenario C: CLIENT PAUSE WRITE past the workers' command deadline (a timeout-triggered
 * switch, Redis' data kept), unpaused, and the way back with the workers NOT frozen: they keep
 * admitting in postgres mode and releasing through the rebuild and its commit, then adopt the
 * rebuilt state; the records are compared with the rows later, frozen after a periodic pass.
 *
 * The proof is an observer independent of both gates: every worker writes a ledger line for
 * each call with the CLOCK_MONOTONIC instant after its row was written (t1: the call is live at
 * both gates by then) and the instant before its release was sent (t2: it still is). The real
 * interval during which the call counts contains [t1, t2], so if the merged intervals ever
 * overlap beyond a limit, a gate exceeded it: the replay proves no instant above any level
 * (system, organisation, agent where it gates, campaign ceiling), every admitted call released
 * once, and afterwards no live call row and every Redis count at zero. No wall-clock
 * assertion: every wait is for an observable marker (a shared counter, a mode) with a
 * generous deadline. */
#include "error.h"
#include "fixture.h"
#include "gate_harness.h"
#include "gate_mode.h"
#include "gate_recon.h"
#include "log.h"
#include "reconciler.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "gate_pg_test.h"

#define WORKERS	  3
#define LANES	  6 /* per worker: 0..4 on org oa, 5 on org ob */
#define LANES_OA  5
#define PHASE_N	  40 /* admissions per phase */
#define SYS_LIMIT 8
#define CONTACTS                                                                                   \
	3600 /* per campaign, split between the lanes (1800 ran out once in CI: refusals under the outage phases use contacts too) */
#define DEADLINE 2000
#define WAIT_MS	 240000

/* The organisations: oa (org_limit 6, per_agent 3 < 6 so the agent level gates, campaign c0
 * with ceiling 2; agent a0 dials c0 and c1, a1 dials c2) and ob (org_limit 10, one campaign),
 * sharing a system limit of 8. */
#define N_CAMP 3
static const struct {
	const char *id;
	int org_limit, per_agent, n_camp;
	int ceiling[N_CAMP];
	int agent[N_CAMP]; /* agent index */
	const char *agents[N_CAMP];
} orgs[2] = {
	{ "oa", 6, 3, 3, { 2, 0, 0 }, { 0, 0, 1 }, { "a0", "a0", "a1" } },
	{ "ob", 10, 0, 1, { 0, 0, 0 }, { 0, 0, 0 }, { "b0", NULL, NULL } },
};

enum rec_type { REC_ADMIT = 1, REC_RELEASE = 2 };

struct rec {
	uint8_t type, worker, lane, org, campaign, agent, mode, ended;
	uint64_t seq;
	int64_t t; /* admit: after the row is written (t1); release: before it is sent (t2) */
};

/* Shared between the test and its workers (MAP_SHARED, before fork). */
struct shm {
	atomic_int freeze, stop;
	atomic_int parked[WORKERS], finished[WORKERS];
	atomic_int mode[WORKERS], usable[WORKERS];
	atomic_int redis_ups[WORKERS]; /* each worker's Redis connection: ups so far */
	atomic_int redis_up[WORKERS];  /* each worker's Redis connection: up now */
	atomic_llong epoch[WORKERS];
	atomic_long admitted[2]; /* by the mode admitted in */
	atomic_long refused, lease_lost, stale, not_held, transport, errors;
};

static struct embedded svc;
static PGconn *admin;
static char dir[64];
static struct shm *sh;
/* The workers' Redis command deadline (set before the fork): past it a gate operation answers
 * -ETIMEDOUT and the worker switches the fleet. */
static uint64_t worker_command_timeout_ms = 30000;
/* A call is held 1..worker_hold_ms ms (set before the fork). Short, the limits bind when the
 * test freezes the lanes; long enough, they bind throughout (the running way back). */
static uint32_t worker_hold_ms = 8;
static long long contact_base[2][N_CAMP];
/* The running scenario's worker processes (0: not running or reaped). */
static pid_t pids[WORKERS];

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- the worker processes ---- */

struct worker;

struct lane {
	struct worker *w;
	int idx, org, campaign, parked;
	int order[N_CAMP]; /* postgres mode: the candidates' campaigns */
	uint64_t seq, epoch;
	enum gate_mode mode; /* the mode the current operation was sent in */
	char call[37], camp[16], agent[16];
	long long contact;
	uv_timer_t timer;
};

struct worker {
	int id, lanes_done, closed;
	uv_loop_t loop;
	struct redis_scripts *reg;
	struct redis_conn *conn;
	struct gate *g;
	struct pg_pool *pool;
	struct gate_pg *pg;
	struct gate_mode_ctl *ctl;
	FILE *ledger;
	uint64_t rng, next_seq;
	int cursor[LANES][N_CAMP];
	bool started;
	struct lane lanes[LANES];
};

static uint32_t rnd(struct worker *w, uint32_t n)
{
	w->rng ^= w->rng << 13;
	w->rng ^= w->rng >> 7;
	w->rng ^= w->rng << 17;
	return (uint32_t)(w->rng % n);
}

/* Diagnostics (issue 8): every non-zero admission/write status with its call id. */
static void diag(struct lane *l, const char *what, const char *detail)
{
	fprintf(stderr, "outage diag %.3f w%d lane %d call %s: %s %s\n", mono_ns() / 1e9, l->w->id,
		l->idx, l->call, what, detail);
}

static void fail_worker(struct worker *w, const char *what, int status)
{
	fprintf(stderr, "outage worker %d: %s: %s\n", w->id, what, dsp_strerror(status));
	atomic_fetch_add(&sh->errors, 1);
}

static void write_rec(struct lane *l, uint8_t type, uint8_t ended, int64_t t)
{
	struct rec r = { .type = type,
			 .worker = (uint8_t)l->w->id,
			 .lane = (uint8_t)l->idx,
			 .org = (uint8_t)l->org,
			 .campaign = (uint8_t)l->campaign,
			 .agent = (uint8_t)orgs[l->org].agent[l->campaign],
			 .mode = (uint8_t)l->mode,
			 .ended = ended,
			 .seq = l->seq,
			 .t = t };

	if (fwrite(&r, sizeof(r), 1, l->w->ledger) != 1)
		atomic_fetch_add(&sh->errors, 1);
}

static void lane_next(struct lane *l, uint64_t ms);

/* The contact of campaign c the lane dials next: each lane has its own share of the claimed
 * contacts, so only the fences can refuse a write. */
static long long next_contact(struct lane *l, int c)
{
	int k = (l->w->cursor[l->idx][c] * WORKERS + l->w->id) * LANES + l->idx;

	if (k >= CONTACTS) {
		fail_worker(l->w, "out of contacts", -ENOSPC);
		k = 0;
	}
	return contact_base[l->org][c] + k;
}

static void set_call(struct lane *l, int c)
{
	l->campaign = c;
	snprintf(l->camp, sizeof(l->camp), "%s_c%d", orgs[l->org].id, c);
	snprintf(l->agent, sizeof(l->agent), "%s_%s", orgs[l->org].id, orgs[l->org].agents[c]);
	l->contact = next_contact(l, c);
	l->w->cursor[l->idx][c]++;
}

static void redis_release_cb(struct gate *g, int status, const struct gate_release_result *res,
			     void *data)
{
	struct lane *l = data;

	(void)g;
	if (status) {
		atomic_fetch_add(&sh->transport, 1);
		gate_mode_report(l->w->ctl, l->epoch, status);
	} else if (res->outcome == GATE_NOT_HELD) {
		atomic_fetch_add(&sh->not_held, 1); /* the rebuild already left it out */
	} else if (res->outcome != GATE_FREED) {
		fail_worker(l->w, "release out of range", -ERANGE);
	}
	lane_next(l, 0);
}

/* After the row ended: in redis mode the Redis half of the release. In postgres mode there is
 * none (a rebuild reads the rows; a record left behind is the reconciler's RELEASE). */
static void redis_half(uv_timer_t *t)
{
	struct lane *l = t->data;
	struct gate_mode_state s;

	gate_mode_get(l->w->ctl, &s);
	if (s.mode == GATE_MODE_REDIS && (!s.usable || s.switching)) {
		uv_timer_start(&l->timer, redis_half, 5, 0);
		return;
	}
	if (s.mode != GATE_MODE_REDIS) {
		lane_next(l, 0);
		return;
	}
	l->epoch = s.epoch;
	int rc = gate_release(l->w->g, orgs[l->org].id, l->call, redis_release_cb, l);
	if (rc) {
		atomic_fetch_add(&sh->transport, 1);
		gate_mode_report(l->w->ctl, l->epoch, rc);
		lane_next(l, 5);
	}
}

static void release_send(uv_timer_t *t);

static void row_end_cb(struct gate_pg *g, int status, const bool *ended, uint32_t n, void *data)
{
	struct lane *l = data;

	(void)g;
	(void)n;
	if (status) { /* the row is still live: end it again (the ledger has its t2 already) */
		fail_worker(l->w, "row end", status);
		uv_timer_start(&l->timer, release_send, 20, 0);
		return;
	}
	write_rec(l, REC_RELEASE, ended[0], 0);
	redis_half(&l->timer);
}

/* The hold is over: t2 before anything is sent, then the row ends first (README-pg.md: a row
 * leaves the live states before its slot is released). Frozen: keep holding. */
static void release_send(uv_timer_t *t)
{
	struct lane *l = t->data;
	const char *calls[1] = { l->call };

	if (atomic_load(&sh->freeze) && !atomic_load(&sh->stop)) {
		if (!l->parked++)
			atomic_fetch_add(&sh->parked[l->w->id], 1);
		uv_timer_start(&l->timer, release_send, 5, 0);
		return;
	}
	if (l->parked) {
		l->parked = 0;
		atomic_fetch_sub(&sh->parked[l->w->id], 1);
	}
	write_rec(l, REC_RELEASE, 2, mono_ns()); /* ended 2: the t2 line */
	int rc = gate_pgmode_release(l->w->pg, calls, 1, "completed", row_end_cb, l);
	if (rc) {
		fail_worker(l->w, "row end send", rc);
		uv_timer_start(&l->timer, release_send, 20, 0);
	}
}

static void admitted(struct lane *l)
{
	write_rec(l, REC_ADMIT, 0, mono_ns());
	atomic_fetch_add(&sh->admitted[l->mode], 1);
	uv_timer_start(&l->timer, release_send, 1 + rnd(l->w, worker_hold_ms), 0);
}

static void write_cb(struct gate_pg *g, const enum gate_pg_outcome *out, uint32_t n, void *data)
{
	struct lane *l = data;

	(void)g;
	(void)n;
	if (out[0] == GATE_PG_WRITTEN) {
		admitted(l);
		return;
	}
	diag(l, "redis-mode write", gate_pg_outcome_name(out[0]));
	if (out[0] == GATE_PG_STALE_EPOCH)
		atomic_fetch_add(&sh->stale, 1);
	else if (out[0] == GATE_PG_LEASE_LOST)
		atomic_fetch_add(&sh->lease_lost, 1);
	if (!gate_pg_outcome_releases(out[0])) {
		fail_worker(l->w, gate_pg_outcome_name(out[0]), -EIO);
		lane_next(l, 5);
		return;
	}
	/* Not written: its slots go back (the Redis half alone). */
	int rc = gate_release(l->w->g, orgs[l->org].id, l->call, redis_release_cb, l);
	if (rc) {
		gate_mode_report(l->w->ctl, l->epoch, rc);
		lane_next(l, 5);
	}
}

static void admit_cb(struct gate *g, int status, const struct gate_admit_result *res, void *data)
{
	struct lane *l = data;
	struct worker *w = l->w;

	(void)g;
	if (status) {
		diag(l, "redis admit status", dsp_strerror(status));
		atomic_fetch_add(&sh->transport, 1);
		gate_mode_report(w->ctl, l->epoch, status);
		lane_next(l, 5);
		return;
	}
	if (res->outcome != GATE_ADMITTED) {
		if (res->outcome == GATE_HELD)
			fail_worker(w, "held a fresh call id", -EEXIST);
		atomic_fetch_add(&sh->refused, 1);
		lane_next(l, 1 + rnd(w, 3));
		return;
	}
	int c = res->campaign ? atoi(strrchr(res->campaign, 'c') + 1) : 0;
	set_call(l, c);
	struct gate_pg_call call = gp_call(l->call, orgs[l->org].id, l->camp, l->agent, l->contact);
	int rc = gate_pg_write(w->pg, GATE_MODE_REDIS, l->epoch, DEADLINE, &call, 1, write_cb, l);
	if (rc) {
		enum gate_pg_outcome o = GATE_PG_FAILED;
		write_cb(w->pg, &o, 1, l);
	}
}

static void pgmode_cb(struct gate_pg *g, int status, const struct gate_pgmode_answer *a, void *data)
{
	struct lane *l = data;

	(void)g;
	if (status)
		diag(l, "pgmode admit status", dsp_strerror(status));
	else if (a->results[0].outcome == GATE_PGMODE_NOT_WRITTEN)
		diag(l, "pgmode not written", gate_pg_outcome_name(a->results[0].write));
	if (status == -ESTALE) {
		atomic_fetch_add(&sh->stale, 1);
		gate_mode_pg_up(l->w->ctl); /* re-read the mode (the NOTIFY may still be coming) */
		lane_next(l, 5);
		return;
	}
	if (status) {
		atomic_fetch_add(&sh->transport, 1);
		lane_next(l, 5);
		return;
	}
	const struct gate_pgmode_result *r = &a->results[0];
	if (r->outcome == GATE_PGMODE_ADMITTED) {
		set_call(l, l->order[r->index]);
		admitted(l);
		return;
	}
	if (r->outcome == GATE_PGMODE_NOT_WRITTEN) {
		set_call(l, l->order[r->index]); /* its contact may be spent: take the next */
		if (r->write == GATE_PG_LEASE_LOST)
			atomic_fetch_add(&sh->lease_lost, 1);
		else if (r->write == GATE_PG_UNKNOWN)
			fail_worker(l->w, "postgres-mode write unknown", -EIO);
	} else {
		atomic_fetch_add(&sh->refused, 1);
	}
	lane_next(l, 1 + rnd(l->w, 3));
}

/* A new call: the controller says which gate and which epoch. */
static void lane_start(uv_timer_t *t)
{
	struct lane *l = t->data;
	struct worker *w = l->w;
	struct gate_mode_state s;
	int order[N_CAMP], n = orgs[l->org].n_camp;

	if (atomic_load(&sh->stop)) {
		if (l->parked)
			atomic_fetch_sub(&sh->parked[w->id], 1);
		l->parked = 0;
		if (++w->lanes_done == LANES) {
			gate_mode_close(w->ctl);
			w->ctl = NULL;
			pg_pool_close(w->pool, gp_closed_cb, &w->closed);
			redis_conn_close(w->conn, gp_closed_cb, &w->closed);
		}
		return;
	}
	if (atomic_load(&sh->freeze)) {
		if (!l->parked++)
			atomic_fetch_add(&sh->parked[w->id], 1);
		uv_timer_start(&l->timer, lane_start, 5, 0);
		return;
	}
	if (l->parked) {
		l->parked = 0;
		atomic_fetch_sub(&sh->parked[w->id], 1);
	}
	gate_mode_get(w->ctl, &s);
	if (!s.usable || s.switching) {
		uv_timer_start(&l->timer, lane_start, 5, 0);
		return;
	}
	l->mode = s.mode;
	l->epoch = s.epoch;
	l->seq = ++w->next_seq;
	snprintf(l->call, sizeof(l->call), "00000000-0000-4000-8%03x-%012llx", w->id,
		 (unsigned long long)l->seq);
	/* 1..n candidates in a random order (the selector's DRR order stands in). */
	for (int i = 0; i < n; i++)
		order[i] = i;
	for (int i = n - 1; i > 0; i--) {
		int j = (int)rnd(w, (uint32_t)i + 1), x = order[i];
		order[i] = order[j];
		order[j] = x;
	}
	uint32_t k = 1 + rnd(w, (uint32_t)n);
	int rc;
	if (s.mode == GATE_MODE_REDIS) {
		char names[N_CAMP][16];
		const char *c[N_CAMP];
		for (uint32_t i = 0; i < k; i++) {
			snprintf(names[i], sizeof(names[i]), "%s_c%d", orgs[l->org].id, order[i]);
			c[i] = names[i];
		}
		struct gate_admit_req req = {
			.org = orgs[l->org].id, .call = l->call, .campaigns = c, .n_campaigns = k
		};
		rc = gate_admit(w->g, &req, admit_cb, l);
		if (rc) {
			atomic_fetch_add(&sh->transport, 1);
			gate_mode_report(w->ctl, l->epoch, rc);
			lane_next(l, 5);
		}
		return;
	}
	char names[N_CAMP][16];
	struct gate_pg_dial d[N_CAMP];
	for (uint32_t i = 0; i < k; i++) {
		snprintf(names[i], sizeof(names[i]), "%s_c%d", orgs[l->org].id, order[i]);
		long long contact = next_contact(l, order[i]);
		d[i] = (struct gate_pg_dial){ .campaign = names[i],
					      .contact = contact,
					      .lease_token = contact + 1000,
					      .attempt = 1,
					      .to_number = "+14155550100" };
	}
	struct gate_pgmode_req req = { .call = l->call, .candidates = d, .n_candidates = k };
	/* pgmode_cb learns the admitted candidate's campaign from its index. */
	memcpy(l->order, order, sizeof(order));
	rc = gate_pgmode_admit(w->pg, orgs[l->org].id, s.epoch, DEADLINE, &req, 1, pgmode_cb, l);
	if (rc) {
		atomic_fetch_add(&sh->transport, 1);
		lane_next(l, 5);
	}
}

static void lane_next(struct lane *l, uint64_t ms)
{
	uv_timer_start(&l->timer, lane_start, ms, 0);
}

static void publish_state(struct worker *w)
{
	struct gate_mode_state s;

	gate_mode_get(w->ctl, &s);
	atomic_store(&sh->mode[w->id], (int)s.mode);
	atomic_store(&sh->epoch[w->id], (long long)s.epoch);
	atomic_store(&sh->usable[w->id], s.usable && !s.switching);
}

static void w_change_cb(struct gate_mode_ctl *c, const struct gate_mode_state *s, void *data)
{
	struct worker *w = data;

	(void)c;
	(void)s;
	publish_state(w);
	if (!w->started && s->usable) {
		w->started = true;
		for (int i = 0; i < LANES; i++)
			lane_next(&w->lanes[i], 0);
	}
}

static void w_redis_event(struct redis_conn *conn, const struct redis_conn_event *ev, void *data)
{
	struct worker *w = data;

	(void)conn;
	if (ev->type == REDIS_CONN_UP)
		atomic_fetch_add(&sh->redis_ups[w->id], 1);
	if (ev->type == REDIS_CONN_UP || ev->type == REDIS_CONN_DOWN)
		atomic_store(&sh->redis_up[w->id], ev->type == REDIS_CONN_UP);
	if (w->ctl)
		gate_mode_redis_event(w->ctl, ev);
}

static void w_mode_notify(const char *channel, const char *payload, void *data)
{
	struct worker *w = data;

	(void)channel;
	if (w->ctl)
		gate_mode_notify(w->ctl, payload);
}

static void w_pg_state(struct pg_pool *pool, unsigned index, bool up, void *data)
{
	struct worker *w = data;

	(void)pool;
	(void)index;
	if (up && w->ctl)
		gate_mode_pg_up(w->ctl);
}

static int worker_main(int id)
{
	static struct worker w;
	char path[128];
	struct redis_conn_options ro = {
		.url = svc.redis_url,
		.name = "outage",
		.connect_timeout_ms = 10000,
		.command_timeout_ms = worker_command_timeout_ms,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 200,
		.generation_key = GATE_SYS_GEN_KEY,
		.event_cb = w_redis_event,
		.data = &w,
	};
	struct pg_pool_options po = {
		.conninfo = svc.database_url,
		.name = "outage",
		.size = 3,
		.priority_size = 1,
		.connect_timeout_ms = 10000,
		.query_timeout_ms = 120000,
		.reconnect_min_ms = 20,
		.reconnect_max_ms = 200,
		.state_cb = w_pg_state,
		.data = &w,
	};
	struct gate_pg_options go = { .fence_lock_ms = 10000 };
	struct gate_mode_options mo = { .retry_ms = 50, .change_cb = w_change_cb, .data = &w };

	w.id = id;
	w.rng = 0x9e3779b97f4a7c15ULL * (uint64_t)(id + 1);
	snprintf(path, sizeof(path), "%s/ledger.%d", dir, id);
	w.ledger = fopen(path, "wb");
	if (!w.ledger || uv_loop_init(&w.loop) || redis_scripts_new(&w.reg) ||
	    gate_scripts_register(w.reg) || gate_recon_scripts_register(w.reg))
		return 10;
	ro.scripts = w.reg;
	if (redis_conn_new(&w.loop, &ro, &w.conn) || gate_new(w.conn, w.reg, NULL, &w.g) ||
	    pg_pool_new(&w.loop, &po, &w.pool) || gate_pg_new(w.pool, &go, &w.pg) ||
	    gate_pg_listen(w.pool, NULL, w_mode_notify, &w))
		return 11;
	mo.loop = &w.loop;
	mo.pg = w.pg;
	mo.gate = w.g;
	if (gate_mode_new(&mo, &w.ctl))
		return 12;
	for (int i = 0; i < LANES; i++) {
		w.lanes[i].w = &w;
		w.lanes[i].idx = i;
		w.lanes[i].org = i < LANES_OA ? 0 : 1;
		uv_timer_init(&w.loop, &w.lanes[i].timer);
		w.lanes[i].timer.data = &w.lanes[i];
	}
	if (pg_pool_start(w.pool) || redis_conn_start(w.conn) || gate_mode_start(w.ctl))
		return 13;
	/* Ends when every lane has stopped and the pool and connection are closed. */
	while (w.closed < 2)
		uv_run(&w.loop, UV_RUN_ONCE);
	for (int i = 0; i < LANES; i++)
		uv_close((uv_handle_t *)&w.lanes[i].timer, NULL);
	uv_run(&w.loop, UV_RUN_DEFAULT);
	uv_loop_close(&w.loop);
	gate_pg_free(w.pg);
	gate_free(w.g);
	redis_scripts_free(w.reg);
	if (fclose(w.ledger))
		atomic_fetch_add(&sh->errors, 1);
	atomic_store(&sh->finished[id], 1);
	return 0;
}

/* ---- the test process: the reconciler, the faults, the observer ---- */

struct env {
	bool open;	    /* between env_open() and env_close() */
	struct gate_env ge; /* loop, registry, connection, a gate for the checks */
	struct pg_pool *pool;
	struct gate_pg *pg;
	struct reconciler *rec;
	struct gate_mode_ctl *ctl;
	int closed;
};

static void on_redis_event(struct redis_conn *conn, const struct redis_conn_event *ev, void *data)
{
	struct env *e = data;

	(void)conn;
	if (ev->type == REDIS_CONN_UP)
		e->ge.ups++;
	if (e->ctl)
		gate_mode_redis_event(e->ctl, ev);
}

static void mode_notify_cb(const char *channel, const char *payload, void *data)
{
	struct env *e = data;

	(void)channel;
	if (e->ctl)
		gate_mode_notify(e->ctl, payload);
}

static bool env_up(void *arg)
{
	struct env *e = arg;
	return redis_conn_is_up(e->ge.conn) && pg_pool_up_count(e->pool) == pg_pool_size(e->pool);
}

static void env_open(struct env *e)
{
	struct redis_conn_options ro = {
		.url = svc.redis_url,
		.name = "outage-test",
		.connect_timeout_ms = 10000,
		.command_timeout_ms = 60000,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 200,
		.generation_key = GATE_SYS_GEN_KEY,
		.event_cb = on_redis_event,
		.data = e,
	};
	struct pg_pool_options po = {
		.conninfo = svc.database_url,
		.name = "outage-test",
		.size = 2,
		.priority_size = 1,
		.connect_timeout_ms = 10000,
		.query_timeout_ms = 120000,
		.reconnect_min_ms = 20,
		.reconnect_max_ms = 200,
	};
	struct gate_pg_options go = { .fence_lock_ms = 60000 };

	memset(e, 0, sizeof(*e));
	assert_int_equal(uv_loop_init(&e->ge.loop), 0);
	assert_int_equal(redis_scripts_new(&e->ge.reg), 0);
	assert_int_equal(gate_test_scripts_register(e->ge.reg), 0);
	assert_int_equal(gate_recon_scripts_register(e->ge.reg), 0);
	ro.scripts = e->ge.reg;
	assert_int_equal(redis_conn_new(&e->ge.loop, &ro, &e->ge.conn), 0);
	assert_int_equal(gate_new(e->ge.conn, e->ge.reg, NULL, &e->ge.g), 0);
	assert_int_equal(pg_pool_new(&e->ge.loop, &po, &e->pool), 0);
	assert_int_equal(gate_pg_new(e->pool, &go, &e->pg), 0);
	assert_int_equal(gate_pg_listen(e->pool, NULL, mode_notify_cb, e), 0);
	struct reconciler_options rop = {
		.loop = &e->ge.loop,
		.pool = e->pool,
		.pg = e->pg,
		.conn = e->ge.conn,
		.reg = e->ge.reg,
		.owner = "outage-test",
		.period_ms = RECONCILER_PERIOD_MAX_MS,
		.write_deadline_ms = DEADLINE,
		.margin_ms = 1000,
		.rebuild_timeout_ms = 60000,
	};
	assert_int_equal(reconciler_new(&rop, &e->rec), 0);
	struct gate_mode_options mo = {
		.loop = &e->ge.loop, .pg = e->pg, .gate = e->ge.g, .retry_ms = 50
	};
	assert_int_equal(gate_mode_new(&mo, &e->ctl), 0);
	assert_int_equal(pg_pool_start(e->pool), 0);
	assert_int_equal(redis_conn_start(e->ge.conn), 0);
	e->open = true;
	fixture_run_until(&e->ge.loop, env_up, e, 60000);
	assert_int_equal(gate_mode_start(e->ctl), 0);
}

/* The scenario's environment (not on its stack: a failed scenario's is closed by its
 * teardown). */
static struct env scenario_env;

static void env_close(struct env *e)
{
	e->open = false;
	gate_mode_close(e->ctl);
	e->ctl = NULL;
	reconciler_close(e->rec, gp_closed_cb, &e->closed);
	pg_pool_close(e->pool, gp_closed_cb, &e->closed);
	redis_conn_close(e->ge.conn, gp_closed_cb, &e->closed);
	fixture_run_until_count(&e->ge.loop, &e->closed, 3, 60000);
	gate_pg_free(e->pg);
	gate_free(e->ge.g);
	fixture_loop_close(&e->ge.loop);
	redis_scripts_free(e->ge.reg);
}

struct run_probe {
	int done, status;
};

static void run_cb(struct reconciler *r, int status, void *data)
{
	struct run_probe *p = data;

	(void)r;
	p->status = status;
	p->done++;
}

static int rec_run(struct env *e)
{
	struct run_probe p = { 0 };

	assert_int_equal(reconciler_run(e->rec, run_cb, &p), 0);
	fixture_run_until_count(&e->ge.loop, &p.done, 1, 60000);
	return p.status;
}

/* A worker that exited while the scenario waits for it fails the test at once (with how it
 * ended) instead of at the wait's deadline, with the other workers spending their contacts. */
static int worker_gone(void)
{
	for (int i = 0; i < WORKERS; i++) {
		int st;
		if (pids[i] > 0 && waitpid(pids[i], &st, WNOHANG) == pids[i]) {
			pids[i] = 0;
			fprintf(stderr, "outage worker %d ended during the scenario: %s %d\n", i,
				WIFSIGNALED(st) ? "signal" : "exit status",
				WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
			return i + 1;
		}
	}
	return 0;
}

struct alive_wait {
	bool (*cond)(void *arg);
	void *arg;
	int gone;
};

static bool cond_or_gone(void *arg)
{
	struct alive_wait *a = arg;

	if ((a->gone = worker_gone()))
		return true;
	return a->cond(a->arg);
}

/* fixture_run_until, failing as soon as a worker process has ended. */
static void run_until(struct env *e, bool (*cond)(void *arg), void *arg)
{
	struct alive_wait a = { cond, arg, 0 };

	fixture_run_until(&e->ge.loop, cond_or_gone, &a, WAIT_MS);
	if (a.gone)
		fail_msg("worker %d ended while the scenario waited for it", a.gone - 1);
}

struct mode_want {
	struct env *e;
	enum gate_mode mode;
	long long epoch;
};

static bool mode_is(void *arg)
{
	struct mode_want *w = arg;
	struct gate_mode_state s;

	gate_mode_get(w->e->ctl, &s);
	return s.mode == w->mode && (long long)s.epoch == w->epoch && s.usable && !s.switching;
}

/* The test's own controller is usable in mode at epoch. */
static void wait_mode(struct env *e, enum gate_mode mode, long long epoch)
{
	struct mode_want w = { e, mode, epoch };
	run_until(e, mode_is, &w);
}

/* Every worker's controller is usable in mode at epoch. */
static bool workers_in(void *arg)
{
	struct mode_want *w = arg;

	for (int i = 0; i < WORKERS; i++)
		if (atomic_load(&sh->mode[i]) != (int)w->mode ||
		    atomic_load(&sh->epoch[i]) != w->epoch || !atomic_load(&sh->usable[i]))
			return false;
	return true;
}

static void wait_workers(struct env *e, enum gate_mode mode, long long epoch)
{
	struct mode_want w = { e, mode, epoch };
	run_until(e, workers_in, &w);
}

struct count_want {
	int mode;
	long n;
};

static bool admitted_reached(void *arg)
{
	struct count_want *c = arg;
	return atomic_load(&sh->admitted[c->mode]) >= c->n;
}

/* Runs the test's loop until n admissions in mode (cumulative) have been made. */
static long wait_admitted(struct env *e, enum gate_mode mode, long n)
{
	struct count_want c = { (int)mode, n };
	run_until(e, admitted_reached, &c);
	return atomic_load(&sh->admitted[mode]);
}

/* Every worker's Redis connection came up since the counts in arg were taken. */
static bool workers_redis_up(void *arg)
{
	const int *before = arg;

	for (int i = 0; i < WORKERS; i++)
		if (atomic_load(&sh->redis_ups[i]) <= before[i])
			return false;
	return true;
}

/* Every worker's Redis connection is up now. */
static bool workers_redis_up_now(void *arg)
{
	(void)arg;
	for (int i = 0; i < WORKERS; i++)
		if (!atomic_load(&sh->redis_up[i]))
			return false;
	return true;
}

static bool all_parked(void *arg)
{
	(void)arg;
	for (int i = 0; i < WORKERS; i++)
		if (atomic_load(&sh->parked[i]) != LANES)
			return false;
	return true;
}

/* Freezes every lane at a checkpoint (before a new admission or before a release): nothing is
 * admitted, written or released until thaw(); the live calls stay live. */
static void freeze(struct env *e)
{
	atomic_store(&sh->freeze, 1);
	run_until(e, all_parked, NULL);
}

static void thaw(void)
{
	atomic_store(&sh->freeze, 0);
}

/* Rows written in redis mode at epoch. */
static long long redis_rows(long long epoch)
{
	return gp_int(admin,
		      "SELECT count(*) FROM calls WHERE gate_mode = 'redis' AND gate_epoch = %lld",
		      epoch);
}

static long long live_rows(const char *org)
{
	return gp_int(admin,
		      "SELECT count(*) FROM calls WHERE org_id = '%s'"
		      " AND state IN ('dialing', 'live', 'unknown')",
		      org);
}

struct slots_probe {
	int done, status;
	uint32_t n;
	char calls[64][40];
	char campaigns[64][16], agents[64][16];
};

static void slots_cb(int status, const struct gate_slots *s, void *data)
{
	struct slots_probe *p = data;

	p->status = status;
	p->done++;
	if (status)
		return;
	p->n = s->n;
	for (uint32_t i = 0; i < s->n && i < 64; i++) {
		snprintf(p->calls[i], sizeof(p->calls[i]), "%s", s->records[i].call);
		snprintf(p->campaigns[i], sizeof(p->campaigns[i]), "%s",
			 s->records[i].campaign ? s->records[i].campaign : "*");
		snprintf(p->agents[i], sizeof(p->agents[i]), "%s",
			 s->records[i].agent ? s->records[i].agent : "");
	}
}

/* The org's slot records (gate_slots_read, under the rebuilt generation) are exactly its live
 * call rows, each with the row's campaign and agent; the org's and the system's counts agree.
 * Returns the number of live calls. */
static long long assert_records_equal_rows(struct env *e, const char *org)
{
	struct slots_probe p = { 0 };
	struct view_copy v;
	PGresult *res;
	char sql[256];

	assert_int_equal(gate_slots_read(e->ge.g, e->ge.reg, org, slots_cb, &p), 0);
	fixture_run_until_count(&e->ge.loop, &p.done, 1, 60000);
	assert_int_equal(p.status, 0);
	snprintf(sql, sizeof(sql),
		 "SELECT id::text, campaign_id, agent_id FROM calls WHERE org_id = '%s'"
		 " AND state IN ('dialing', 'live', 'unknown')",
		 org);
	res = fixture_sql(admin, sql);
	assert_int_equal(p.n, PQntuples(res));
	for (int i = 0; i < PQntuples(res); i++) {
		bool found = false;
		for (uint32_t j = 0; j < p.n; j++) {
			if (strcmp(p.calls[j], PQgetvalue(res, i, 0)) != 0)
				continue;
			found = true;
			assert_string_equal(p.campaigns[j], PQgetvalue(res, i, 1));
			assert_string_equal(p.agents[j], PQgetvalue(res, i, 2));
		}
		assert_true(found);
	}
	PQclear(res);
	assert_int_equal(genv_read(&e->ge, org, &v), 0);
	assert_int_equal(v.v.org_running, p.n);
	assert_int_equal(v.v.slots, p.n);
	return p.n;
}

/* ---- the ledger and its replay ---- */

#define MAX_SEQ 100000

struct event {
	int64_t t;
	int delta;
	uint8_t org, campaign, agent, mode;
};

static int cmp_event(const void *a, const void *b)
{
	const struct event *x = a, *y = b;

	if (x->t != y->t)
		return x->t < y->t ? -1 : 1;
	return y->delta - x->delta; /* at one instant, admissions first: closed intervals */
}

static struct rec *read_ledgers(size_t *n)
{
	struct rec *all = NULL;
	size_t cap = 0;

	*n = 0;
	for (int i = 0; i < WORKERS; i++) {
		char path[128];
		struct rec r;
		snprintf(path, sizeof(path), "%s/ledger.%d", dir, i);
		FILE *f = fopen(path, "rb");
		assert_non_null(f);
		while (fread(&r, sizeof(r), 1, f) == 1) {
			if (*n == cap) {
				cap = cap ? 2 * cap : 4096;
				all = realloc(all, cap * sizeof(*all));
				assert_non_null(all);
			}
			all[(*n)++] = r;
		}
		fclose(f);
		unlink(path);
	}
	return all;
}

/* Every admitted call: one t2 line after its t1, and its row ended exactly once by its own
 * release; no other call released. Then the replay of the intervals [t1, t2]: at no instant
 * more live calls than any limit. Returns the number of admitted calls. */
static size_t replay(const struct rec *r, size_t n)
{
	size_t *t1 = malloc(WORKERS * (size_t)MAX_SEQ * sizeof(size_t));
	uint8_t *ends = calloc(WORKERS * (size_t)MAX_SEQ, 1);
	struct event *ev = calloc(2 * n + 1, sizeof(*ev));
	size_t n_ev = 0, calls = 0;
	int sys = 0, org[2] = { 0 }, camp[2][N_CAMP] = { { 0 } }, agent[2][N_CAMP] = { { 0 } };
	int max_sys = 0, max_org[2] = { 0 }, max_agent = 0, max_c0 = 0;
	int max_sys_mode[2] = { 0 }; /* the system's count when a call of that mode began */

	assert_non_null(t1);
	assert_non_null(ends);
	assert_non_null(ev);
	for (size_t i = 0; i < WORKERS * (size_t)MAX_SEQ; i++)
		t1[i] = SIZE_MAX;
	for (size_t i = 0; i < n; i++) {
		if (r[i].type != REC_ADMIT)
			continue;
		assert_true(r[i].seq < MAX_SEQ);
		size_t k = r[i].worker * (size_t)MAX_SEQ + r[i].seq;
		assert_int_equal(t1[k], SIZE_MAX); /* admitted once */
		t1[k] = i;
		calls++;
	}
	for (size_t i = 0; i < n; i++) {
		const struct rec *x = &r[i];
		if (x->type != REC_RELEASE)
			continue;
		size_t k = x->worker * (size_t)MAX_SEQ + x->seq;
		assert_int_not_equal(t1[k], SIZE_MAX); /* only admitted calls are released */
		const struct rec *a = &r[t1[k]];
		if (x->ended == 2) {
			assert_true(x->t >= a->t);
			assert_int_equal(x->campaign, a->campaign);
			ev[n_ev++] =
				(struct event){ a->t, +1, a->org, a->campaign, a->agent, a->mode };
			ev[n_ev++] =
				(struct event){ x->t, -1, a->org, a->campaign, a->agent, a->mode };
			ends[k] |= 1;
		} else {
			assert_int_equal(x->ended, 1); /* its row was live and now ended */
			assert_false(ends[k] & 2);     /* once */
			ends[k] |= 2;
		}
	}
	for (size_t k = 0; k < WORKERS * (size_t)MAX_SEQ; k++)
		if (t1[k] != SIZE_MAX)
			assert_int_equal(ends[k], 3); /* released, its row ended */
	qsort(ev, n_ev, sizeof(*ev), cmp_event);
	for (size_t i = 0; i < n_ev; i++) {
		const struct event *e = &ev[i];
		sys += e->delta;
		org[e->org] += e->delta;
		camp[e->org][e->campaign] += e->delta;
		agent[e->org][e->agent] += e->delta;
		assert_true(sys >= 0 && sys <= SYS_LIMIT);
		assert_true(org[e->org] <= orgs[e->org].org_limit);
		if (orgs[e->org].ceiling[e->campaign])
			assert_true(camp[e->org][e->campaign] <= orgs[e->org].ceiling[e->campaign]);
		if (orgs[e->org].per_agent && orgs[e->org].per_agent < orgs[e->org].org_limit)
			assert_true(agent[e->org][e->agent] <= orgs[e->org].per_agent);
		max_sys = sys > max_sys ? sys : max_sys;
		if (e->delta > 0 && sys > max_sys_mode[e->mode & 1])
			max_sys_mode[e->mode & 1] = sys;
		max_org[e->org] = org[e->org] > max_org[e->org] ? org[e->org] : max_org[e->org];
		if (e->org == 0) {
			max_agent = agent[0][e->agent] > max_agent ? agent[0][e->agent] : max_agent;
			max_c0 = camp[0][0] > max_c0 ? camp[0][0] : max_c0;
		}
	}
	assert_int_equal(sys, 0);
	print_message("replayed %zu calls: max system %d/%d (at a redis-mode admission %d,"
		      " postgres-mode %d), oa %d/%d, ob %d/%d, agent %d/%d, oa_c0 %d/%d\n",
		      calls, max_sys, SYS_LIMIT, max_sys_mode[GATE_MODE_REDIS],
		      max_sys_mode[GATE_MODE_POSTGRES], max_org[0], orgs[0].org_limit, max_org[1],
		      orgs[1].org_limit, max_agent, orgs[0].per_agent, max_c0, orgs[0].ceiling[0]);
	/* The load made the limits bind, or the replay proves little. */
	assert_true(max_sys >= SYS_LIMIT - 1);
	assert_true(max_org[0] >= orgs[0].org_limit - 1);
	free(ev);
	free(ends);
	free(t1);
	return calls;
}

/* ---- the scenarios ---- */

static void reset(void)
{
	gp_sql(admin, "DELETE FROM calls");
	gp_sql(admin, "DELETE FROM gate_fences");
	gp_sql(admin, "UPDATE leases SET owner = NULL, lease_until = '-infinity'"
		      " WHERE name = 'reconciler'");
	gp_sql(admin,
	       "UPDATE contacts SET state = 'claimed', lease_until = now() + interval '1 hour'");
	memset(sh, 0, sizeof(*sh));
}

/* The way back with the workers running (FAULT_PAUSE): the reconciler's run while they admit
 * in postgres mode and release, then the fleet adopts the rebuilt state (same server: its
 * run_id is the committed one) and admits in Redis. Returns with every worker usable in redis
 * mode at e0 + 2. */
static void way_back_running(struct env *e, long long e0)
{
	long p = atomic_load(&sh->admitted[GATE_MODE_POSTGRES]);

	fprintf(stderr, "outage diag %.3f test: rebuild starts, workers running\n",
		mono_ns() / 1e9);
	assert_int_equal(rec_run(e), 0);
	assert_int_equal(gp_epoch(admin), e0 + 2);
	wait_mode(e, GATE_MODE_REDIS, e0 + 2);
	wait_workers(e, GATE_MODE_REDIS, e0 + 2);
	/* A periodic pass, the workers still running, as the elected reconciler's next run: the
	 * records of releases that ended their rows while their worker still saw postgres mode
	 * after the commit (a count above the live calls, never below) are released. */
	struct reconciler_stats st;
	assert_int_equal(rec_run(e), 0);
	reconciler_get_stats(e->rec, &st);
	assert_int_equal(st.missing, 0);
	print_message("postgres-mode admissions during the phase and the way back: %ld; lost"
		      " releases after the commit, released by the pass: %llu\n",
		      atomic_load(&sh->admitted[GATE_MODE_POSTGRES]) - p,
		      (unsigned long long)st.released);
}

/* With the workers running through the way back there is no instant to compare the rebuilt
 * records with the rows at: they are compared once the load in redis mode went on, with the
 * workers frozen and a periodic pass run (it releases the records of releases that ended their
 * rows while their worker still saw postgres mode). Every live call has its record and no
 * record is left without one: the org's and the system's counts equal the live rows. */
static void check_frozen_records(struct env *e)
{
	struct reconciler_stats st;
	struct view_copy v;
	long long live_oa, live_ob;

	freeze(e);
	live_oa = live_rows("oa");
	live_ob = live_rows("ob");
	assert_int_equal(rec_run(e), 0);
	reconciler_get_stats(e->rec, &st);
	assert_int_equal(st.missing, 0); /* no live call without its record */
	assert_int_equal(st.fenced, 0);
	assert_int_equal(assert_records_equal_rows(e, "oa"), live_oa);
	assert_int_equal(assert_records_equal_rows(e, "ob"), live_ob);
	assert_int_equal(genv_read(&e->ge, "oa", &v), 0);
	assert_int_equal(v.v.system_running, live_oa + live_ob);
	print_message("frozen after the way back: live oa %lld ob %lld, records equal;"
		      " lost releases the pass released %llu\n",
		      live_oa, live_ob, (unsigned long long)st.released);
	thaw();
}

/* The way back with the workers frozen: their live calls are held, nothing moves; right after
 * it the Redis slot records equal PostgreSQL's live calls. *live_oa and *live_ob are those
 * calls. Returns the postgres-mode admissions made; every worker is usable in redis mode at
 * e0 + 2 and thawed when it returns. */
static long way_back_frozen(struct env *e, long long e0, long long *live_oa, long long *live_ob)
{
	struct view_copy v;
	long p2;

	freeze(e);
	fprintf(stderr, "outage diag %.3f test: all parked\n", mono_ns() / 1e9);
	*live_oa = live_rows("oa");
	*live_ob = live_rows("ob");
	/* The frozen live calls, kept to name any row that turns live while frozen. */
	gp_sql(admin, "DROP TABLE IF EXISTS outage_frozen");
	gp_sql(admin, "CREATE TABLE outage_frozen AS SELECT id FROM calls"
		      " WHERE state IN ('dialing', 'live', 'unknown')");
	fprintf(stderr, "outage diag %.3f test: rebuild starts (live oa %lld ob %lld)\n",
		mono_ns() / 1e9, *live_oa, *live_ob);
	assert_int_equal(rec_run(e), 0);
	PGresult *d = fixture_sql(admin, "SELECT id, gate_mode, gate_epoch, created_at FROM calls"
					 " WHERE state IN ('dialing', 'live', 'unknown')"
					 " AND id NOT IN (SELECT id FROM outage_frozen)");
	for (int i = 0; i < PQntuples(d); i++)
		print_message("live while frozen: %s %s epoch %s at %s\n", PQgetvalue(d, i, 0),
			      PQgetvalue(d, i, 1), PQgetvalue(d, i, 2), PQgetvalue(d, i, 3));
	assert_int_equal(PQntuples(d), 0);
	PQclear(d);
	assert_int_equal(gp_epoch(admin), e0 + 2);
	wait_mode(e, GATE_MODE_REDIS, e0 + 2);
	assert_int_equal(assert_records_equal_rows(e, "oa"), *live_oa);
	assert_int_equal(assert_records_equal_rows(e, "ob"), *live_ob);
	assert_int_equal(genv_read(&e->ge, "oa", &v), 0);
	assert_int_equal(v.v.system_running, *live_oa + *live_ob);
	p2 = atomic_load(&sh->admitted[GATE_MODE_POSTGRES]);
	/* Thawed once every worker admits in Redis again: the held calls' releases then free
	 * their rebuilt records themselves. */
	wait_workers(e, GATE_MODE_REDIS, e0 + 2);
	thaw();
	return p2;
}

/* FAULT_PAUSE: CLIENT PAUSE WRITE until every worker has switched (their scripts wait past
 * the command deadline: -ETIMEDOUT), then CLIENT UNPAUSE — the same server, its data and
 * generation intact — and the way back runs with the workers still running. */
enum fault { FAULT_STOP, FAULT_FLUSHALL, FAULT_PAUSE };

static const char *fault_name(enum fault f)
{
	return f == FAULT_STOP	     ? "redis stopped"
	       : f == FAULT_FLUSHALL ? "FLUSHALL"
				     : "CLIENT PAUSE";
}

static void outage(enum fault fault)
{
	struct env *e = &scenario_env;
	long long e0, live_oa = 0, live_ob = 0;
	long a1, p2, a3;
	size_t n;
	/* The workers keep running through the way back (else they are frozen for it). */
	bool running = fault == FAULT_PAUSE;

	reset();
	worker_command_timeout_ms = running ? 3000 : 30000;
	worker_hold_ms = running ? 40 : 8;
	/* Start from a rebuild: postgres mode, empty Redis, the reconciler's way back. */
	env_open(e);
	genv_cmd(&e->ge, NULL, 0, "FLUSHALL", NULL);
	gp_sql(admin,
	       "UPDATE system_settings SET gate_mode = 'postgres', gate_epoch = gate_epoch + 1");
	gate_mode_pg_up(e->ctl);
	assert_int_equal(rec_run(e), 0);
	e0 = gp_epoch(admin);
	wait_mode(e, GATE_MODE_REDIS, e0);
	env_close(e);

	fflush(NULL);
	for (int i = 0; i < WORKERS; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			log_set_level(LOG_WARN);
			_exit(worker_main(i));
		}
	}
	env_open(e);
	wait_mode(e, GATE_MODE_REDIS, e0);
	wait_workers(e, GATE_MODE_REDIS, e0);

	/* Phase 1: redis mode. */
	a1 = wait_admitted(e, GATE_MODE_REDIS, PHASE_N);

	/* The fault: every worker switches; the fleet's epoch moves once. */
	if (fault == FAULT_STOP)
		assert_int_equal(embedded_redis_stop(&svc), 0);
	else if (fault == FAULT_FLUSHALL)
		genv_cmd(&e->ge, NULL, 0, "FLUSHALL", NULL);
	else /* scripts wait; reads and CLIENT UNPAUSE do not (bounded, should the test fail) */
		genv_cmd(&e->ge, NULL, 0, "CLIENT", "PAUSE", "120000", "WRITE", NULL);
	wait_workers(e, GATE_MODE_POSTGRES, e0 + 1);
	wait_mode(e, GATE_MODE_POSTGRES, e0 + 1);
	assert_int_equal(gp_epoch(admin), e0 + 1);
	if (fault == FAULT_PAUSE)
		genv_cmd(&e->ge, NULL, 0, "CLIENT", "UNPAUSE", NULL);
	/* The calls admitted in redis mode before the switch are the rows of epoch e0, all
	 * committed before it (the epoch fence); a worker's counter may still miss one whose write
	 * answered after its controller saw the switch (another connection). */
	a1 = (long)redis_rows(e0);

	int redis_ups[WORKERS];
	for (int i = 0; i < WORKERS; i++)
		redis_ups[i] = atomic_load(&sh->redis_ups[i]);

	/* Phase 2: postgres mode. */
	p2 = wait_admitted(e, GATE_MODE_POSTGRES, PHASE_N);
	assert_int_equal(gp_epoch(admin), e0 + 1);
	assert_int_equal(redis_rows(e0), a1); /* none after the switch */
	assert_int_equal(atomic_load(&sh->admitted[GATE_MODE_REDIS]), a1);

	if (fault == FAULT_STOP) {
		int ups = e->ge.ups;
		assert_int_equal(embedded_redis_start(&svc), 0);
		fixture_run_until_count(&e->ge.loop, &e->ge.ups, ups + 1, WAIT_MS);
		/* Every worker's connection too: one that comes up on the restarted server only
		 * after the rebuild set redis mode sees a new server (run_id) and, by design,
		 * switches the fleet to postgres mode again (gate_mode.h). */
		run_until(e, workers_redis_up, redis_ups);
	}
	if (running) {
		/* Every worker's connection up again on the paused server (those whose scripts
		 * timed out dropped it), so each admits in postgres mode beside a reachable Redis
		 * when the way back runs. */
		run_until(e, workers_redis_up_now, NULL);
		way_back_running(e, e0);
	} else {
		p2 = way_back_frozen(e, e0, &live_oa, &live_ob);
	}

	/* Phase 3: redis mode again. */
	a3 = wait_admitted(e, GATE_MODE_REDIS, a1 + PHASE_N) - a1;
	if (running)
		check_frozen_records(e);
	atomic_store(&sh->stop, 1);
	for (int i = 0; i < WORKERS; i++) {
		pid_t pid = pids[i];
		pids[i] = 0; /* reaped by fixture_wait(), whatever it returns */
		assert_int_equal(fixture_wait(pid), 0);
	}
	a3 = atomic_load(&sh->admitted[GATE_MODE_REDIS]) - a1;
	assert_int_equal(atomic_load(&sh->errors), 0);
	if (running) /* a postgres-mode admission may answer after its worker saw redis mode */
		p2 = atomic_load(&sh->admitted[GATE_MODE_POSTGRES]);
	assert_int_equal(atomic_load(&sh->admitted[GATE_MODE_POSTGRES]), p2);
	assert_int_equal(gp_epoch(admin), e0 + 2);

	/* Afterwards: no live call; a periodic pass releases any record a release sent while
	 * the worker still saw postgres mode left behind; then every count is zero. */
	assert_int_equal(live_rows("oa") + live_rows("ob"), 0);
	assert_int_equal(rec_run(e), 0);
	struct reconciler_stats st;
	struct view_copy v;
	reconciler_get_stats(e->rec, &st);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(assert_records_equal_rows(e, orgs[i].id), 0);
		assert_int_equal(genv_read(&e->ge, orgs[i].id, &v), 0);
		assert_int_equal(v.v.system_running, 0);
		for (uint32_t c = 0; c < v.n_campaigns; c++)
			assert_int_equal(v.campaigns[c].running, 0);
		for (uint32_t a = 0; a < v.n_agents; a++)
			assert_int_equal(v.agents[a].running, 0);
	}
	struct rec *r = read_ledgers(&n);
	size_t calls = replay(r, n);
	assert_int_equal(calls, a1 + p2 + a3);
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM calls"), (long long)calls);
	print_message("%s: epochs %lld → %lld (postgres) → %lld (redis); admitted redis %ld,"
		      " postgres %ld, redis %ld; frozen live at the rebuild oa %lld ob %lld;"
		      " refused %ld, stale %ld, lease lost %ld, not held %ld, transport %ld;"
		      " reconciler released %llu fenced %llu missing %llu\n",
		      fault_name(fault), e0, e0 + 1, e0 + 2, a1, p2, a3, live_oa, live_ob,
		      atomic_load(&sh->refused), atomic_load(&sh->stale),
		      atomic_load(&sh->lease_lost), atomic_load(&sh->not_held),
		      atomic_load(&sh->transport), (unsigned long long)st.released,
		      (unsigned long long)st.fenced, (unsigned long long)st.missing);
	/* Nothing left for the reconciler: the workers' own releases freed every record. Running
	 * through the way back, a release whose worker still saw postgres mode after the commit
	 * ends its row only: its record is a lost release, the pass's RELEASE (a count above
	 * the live calls until then, never below). No orphan, no live call without a record. */
	if (running)
		assert_int_equal(st.fenced + st.missing, 0);
	else
		assert_int_equal(st.released + st.fenced + st.missing, 0);
	free(r);
	env_close(e);
}

static void redis_stopped_under_load(void **state)
{
	(void)state;
	outage(FAULT_STOP);
}

static void flushall_under_load(void **state)
{
	(void)state;
	outage(FAULT_FLUSHALL);
}

/* A timeout-triggered switch with Redis' data surviving (CLIENT PAUSE past the workers'
 * command deadline, then unpaused), and the way back run while the workers keep admitting and
 * releasing: the ledger proves no instant above any limit through it. */
static void pause_way_back_under_load(void **state)
{
	(void)state;
	outage(FAULT_PAUSE);
}

static int setup(void **state)
{
	static const char *const a_agents[] = { "a0", "a0", "a1" };
	static const char *const b_agents[] = { "b0" };
	static const int a_ceil[] = { 2, 0, 0 };

	(void)state;
	snprintf(dir, sizeof(dir), "/tmp/dsp-gate-outage-XXXXXX");
	assert_non_null(mkdtemp(dir));
	sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	assert_true(sh != MAP_FAILED);
	fixture_start(&svc, true, true, false, true);
	admin = fixture_pg(&svc);
	gp_sql(admin,
	       "UPDATE system_settings SET global_limit = %d,"
	       " limits_version = limits_version + 1",
	       SYS_LIMIT);
	gp_seed_org(admin, "oa", orgs[0].org_limit, orgs[0].per_agent, 3, a_agents, a_ceil,
		    CONTACTS);
	gp_seed_org(admin, "ob", orgs[1].org_limit, 0, 1, b_agents, NULL, CONTACTS);
	for (int o = 0; o < 2; o++)
		for (int c = 0; c < orgs[o].n_camp; c++) {
			contact_base[o][c] = gp_contact(admin, orgs[o].id, c, 0);
			/* contiguous ids: a lane's share is base + k */
			assert_int_equal(gp_contact(admin, orgs[o].id, c, CONTACTS - 1),
					 contact_base[o][c] + CONTACTS - 1);
		}
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	PQfinish(admin);
	embedded_stop(&svc);
	munmap(sh, sizeof(*sh));
	rmdir(dir);
	return 0;
}

/* After each scenario, passed or failed: no worker of it is left running into the next (a
 * failed assertion leaves them admitting until the run's timeout). */
static int scenario_teardown(void **state)
{
	(void)state;
	atomic_store(&sh->stop, 1);
	for (int i = 0; i < WORKERS; i++) {
		if (pids[i] > 0) {
			kill(pids[i], SIGKILL);
			waitpid(pids[i], NULL, 0);
			pids[i] = 0;
		}
	}
	if (scenario_env.open)
		env_close(&scenario_env);
	assert_int_equal(embedded_redis_start(&svc), 0); /* stopped by a failed scenario A */
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(redis_stopped_under_load, scenario_teardown),
		cmocka_unit_test_teardown(flushall_under_load, scenario_teardown),
		cmocka_unit_test_teardown(pause_way_back_under_load, scenario_teardown),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
