/* The Redis slot gate under concurrency, checked by an observer independent of the script.
 *
 * Several processes (fork) hammer admissions and releases — ordered candidates, direct dials,
 * duplicate releases, releases sent before their admission, releases of unknown call ids —
 * for two organisations sharing a system limit, while one of them keeps installing floors
 * (some expiring at once, so fcfs decisions happen too). Each process writes its own ledger:
 * every admission with the CLOCK_MONOTONIC instant its answer arrived (t1), every release with
 * the instant it was sent (t2) and its outcome. A call's real slot interval [a, r] contains
 * [t1, t2] (the script admitted it before t1 and released it after t2), so if the intervals
 * [t1, t2] ever overlap beyond a limit, the gate exceeded that limit: the test replays the merged
 * ledger and proves no instant above any level (system, organisation, agent, campaign). Then
 * every call admitted was freed exactly once, every other release freed nothing, the gate's
 * counts are all back to zero, its shortfall aggregates match its floors, and its decision
 * counters match the ledger. */
#include "error.h"
#include "fixture.h"
#include "gate_harness.h"
#include "log.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#define WORKERS	  4	 /* processes: 0..2 on o1, 3 on o2 */
#define LANES	  8	 /* operations in flight per process */
#define OPS	  27000L /* gate operations per process (admits and releases) */
#define SYS_LIMIT 14
#define N_CAMP	  6 /* per org; index 5 is the direct pseudo-campaign */

/* The two organisations: limits, campaigns (ceiling, agent index), agents. */
struct org_conf {
	const char *id;
	uint32_t org_limit, per_agent;
	const char *campaigns[N_CAMP]; /* NULL past the end; "*" direct */
	uint32_t ceiling[N_CAMP];
	int agent[N_CAMP]; /* agent index, -1 none */
	const char *agents[4];
};

static const struct org_conf orgs[2] = {
	{ "o1",
	  10,
	  4,
	  { "A", "B", "C", "D", "E", "*" },
	  { 3, 0, 0, 2, 0, 0 },
	  { 0, 0, 1, 2, 1, -1 },
	  { "a1", "a2", "a3", NULL } },
	{ "o2",
	  10,
	  0,
	  { "X", "Y", NULL, NULL, NULL, "*" },
	  { 0, 0, 0, 0, 0, 0 },
	  { 0, 0, -1, -1, -1, -1 },
	  { "a9", NULL, NULL, NULL } },
};

enum rec_type { REC_ADMIT = 1, REC_RELEASE = 2 };
enum rel_kind { REL_OWN = 0, REL_DUPLICATE, REL_EARLY, REL_UNKNOWN };

/* One ledger line. */
struct rec {
	uint8_t type;	  /* enum rec_type */
	uint8_t org;	  /* 0 or 1 */
	uint8_t campaign; /* index in org_conf.campaigns */
	int8_t agent;	  /* agent index, -1 none */
	uint8_t kind;	  /* release: enum rel_kind */
	uint8_t outcome;  /* release: enum gate_release_outcome */
	uint8_t worker;
	uint8_t fcfs; /* admit: decided fcfs */
	uint64_t seq; /* the call's number within its worker */
	int64_t t;    /* CLOCK_MONOTONIC ns: admit answered (t1) / release sent (t2) */
};

static struct embedded svc;
static char dir[64];

static int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int campaign_index(int org, const char *name)
{
	for (int i = 0; i < N_CAMP; i++)
		if (orgs[org].campaigns[i] &&
		    strcmp(orgs[org].campaigns[i], name ? name : "*") == 0)
			return i;
	return -1;
}

/* ---- the worker processes ---- */

struct worker;

struct lane {
	struct worker *w;
	uint64_t seq;
	char call[32];
	int campaign, agent;
	int64_t t2;
	uv_timer_t hold;
};

struct worker {
	int id, org;
	uv_loop_t loop;
	struct redis_scripts *reg;
	struct redis_conn *conn;
	struct gate *g;
	FILE *ledger;
	long ops;
	uint64_t next_seq, rng, floors_version;
	int errors, lanes_done;
	struct lane lanes[LANES];
};

static uint32_t rnd(struct worker *w, uint32_t n)
{
	w->rng ^= w->rng << 13;
	w->rng ^= w->rng >> 7;
	w->rng ^= w->rng << 17;
	return (uint32_t)(w->rng % n);
}

static void fail_worker(struct worker *w, const char *what, int status)
{
	fprintf(stderr, "worker %d: %s: %s\n", w->id, what, dsp_strerror(status));
	w->errors++;
}

static void write_rec(struct worker *w, struct rec r)
{
	r.worker = (uint8_t)w->id;
	r.org = (uint8_t)w->org;
	if (fwrite(&r, sizeof(r), 1, w->ledger) != 1)
		w->errors++;
}

static void start(struct lane *l);
static void admit(struct lane *l);

static void install_cb(struct gate *g, int status, const struct gate_install_result *res,
		       void *data)
{
	struct worker *w = data;

	if (status || !res->applied)
		fail_worker(w, "floors install", status ? status : -ESTALE);
}

/* Worker 0 plays the refresher: new floors every 300 operations, some expiring at once. */
static void maybe_install(struct worker *w)
{
	static const struct gate_floor a[] = { { "A", 2 }, { "B", 2 }, { "C", 2 },
					       { "D", 1 }, { "E", 2 }, { NULL, 1 } };
	static const struct gate_floor b[] = {
		{ "A", 3 }, { "B", 1 }, { "C", 3 }, { "D", 2 }, { "E", 1 }
	};
	uint64_t v = ++w->floors_version;
	int rc;

	if (w->id != 0 || w->ops % 300 != 0)
		return;
	if (v % 2)
		rc = gate_install_floors(w->g, "o1", v, v % 3 == 0 ? 1 : 2000, a, 6, install_cb, w);
	else
		rc = gate_install_floors(w->g, "o1", v, 2000, b, 5, install_cb, w);
	if (rc)
		fail_worker(w, "floors install", rc);
}

static void lane_done(struct lane *l)
{
	if (++l->w->lanes_done == LANES) {
		gate_free(l->w->g);
		l->w->g = NULL;
		redis_conn_close(l->w->conn, NULL, NULL);
	}
}

static void dup_release_cb(struct gate *g, int status, const struct gate_release_result *res,
			   void *data)
{
	struct lane *l = data;

	if (status) {
		fail_worker(l->w, "duplicate release", status);
		lane_done(l);
		return;
	}
	write_rec(l->w, (struct rec){ .type = REC_RELEASE,
				      .kind = REL_DUPLICATE,
				      .outcome = (uint8_t)res->outcome,
				      .seq = l->seq,
				      .t = l->t2 });
	start(l);
}

static void own_release_cb(struct gate *g, int status, const struct gate_release_result *res,
			   void *data)
{
	struct lane *l = data;
	struct worker *w = l->w;

	if (status) {
		fail_worker(w, "release", status);
		lane_done(l);
		return;
	}
	write_rec(w, (struct rec){ .type = REC_RELEASE,
				   .campaign = (uint8_t)l->campaign,
				   .agent = (int8_t)l->agent,
				   .kind = REL_OWN,
				   .outcome = (uint8_t)res->outcome,
				   .seq = l->seq,
				   .t = l->t2 });
	if (rnd(w, 10) == 0) {
		l->t2 = mono_ns();
		w->ops++;
		if (gate_release(w->g, orgs[w->org].id, l->call, dup_release_cb, l) == 0)
			return;
		fail_worker(w, "duplicate release", -EIO);
	}
	start(l);
}

static void hold_cb(uv_timer_t *t)
{
	struct lane *l = t->data;

	l->t2 = mono_ns(); /* before the release is sent: the script runs after */
	l->w->ops++;
	if (gate_release(l->w->g, orgs[l->w->org].id, l->call, own_release_cb, l)) {
		fail_worker(l->w, "release send", -EIO);
		lane_done(l);
	}
}

static void admit_cb(struct gate *g, int status, const struct gate_admit_result *res, void *data)
{
	struct lane *l = data;
	struct worker *w = l->w;
	int64_t t1 = mono_ns();

	if (status) {
		fail_worker(w, "admit", status);
		lane_done(l);
		return;
	}
	if (res->outcome != GATE_ADMITTED) {
		if (res->outcome == GATE_HELD)
			fail_worker(w, "admit held a fresh call id", -EEXIST);
		start(l);
		return;
	}
	l->campaign = campaign_index(w->org, res->campaign);
	if (res->campaign)
		l->agent = orgs[w->org].agent[l->campaign];
	write_rec(w, (struct rec){ .type = REC_ADMIT,
				   .campaign = (uint8_t)l->campaign,
				   .agent = (int8_t)l->agent,
				   .fcfs = res->decisions[res->n_decisions - 1].fcfs,
				   .seq = l->seq,
				   .t = t1 });
	uv_timer_start(&l->hold, hold_cb, rnd(w, 3), 0);
}

static void admit(struct lane *l)
{
	struct worker *w = l->w;
	const struct org_conf *o = &orgs[w->org];
	const char *c[3];
	uint32_t n = 0, nb = w->org == 0 ? 5 : 2;
	struct gate_admit_req req = { .org = o->id, .call = l->call };

	l->agent = -1;
	if (rnd(w, 10) == 0) { /* a direct dial, on an agent of the org or none */
		l->agent = (int)rnd(w, 3) - 1;
		if (l->agent >= 0 && !o->agents[l->agent])
			l->agent = -1;
		req.direct = true;
		req.agent = l->agent >= 0 ? o->agents[l->agent] : NULL;
	} else {
		for (uint32_t want = 1 + rnd(w, 3); n < want; n++)
			c[n] = o->campaigns[rnd(w, nb)];
		req.campaigns = c;
		req.n_campaigns = n;
	}
	w->ops++;
	maybe_install(w);
	if (gate_admit(w->g, &req, admit_cb, l)) {
		fail_worker(w, "admit send", -EIO);
		lane_done(l);
	}
}

static void early_cb(struct gate *g, int status, const struct gate_release_result *res, void *data)
{
	struct lane *l = data;

	if (status) {
		fail_worker(l->w, "early release", status);
		lane_done(l);
		return;
	}
	write_rec(l->w, (struct rec){ .type = REC_RELEASE,
				      .kind = REL_EARLY,
				      .outcome = (uint8_t)res->outcome,
				      .seq = l->seq,
				      .t = l->t2 });
	admit(l);
}

static void unknown_cb(struct gate *g, int status, const struct gate_release_result *res,
		       void *data)
{
	struct lane *l = data;

	if (status) {
		fail_worker(l->w, "unknown release", status);
		lane_done(l);
		return;
	}
	write_rec(l->w, (struct rec){ .type = REC_RELEASE,
				      .kind = REL_UNKNOWN,
				      .outcome = (uint8_t)res->outcome,
				      .t = l->t2 });
	admit(l);
}

/* A new call: sometimes its release first (out of order), or an unknown id's release. */
static void start(struct lane *l)
{
	struct worker *w = l->w;
	const char *org = orgs[w->org].id;
	uint32_t dice = rnd(w, 40);
	int rc = 0;

	if (w->ops >= OPS) {
		lane_done(l);
		return;
	}
	l->seq = w->next_seq++;
	snprintf(l->call, sizeof(l->call), "w%d-%llu", w->id, (unsigned long long)l->seq);
	l->t2 = mono_ns();
	if (dice == 0) {
		w->ops++;
		rc = gate_release(w->g, org, l->call, early_cb, l);
	} else if (dice == 1) {
		char unknown[32];
		snprintf(unknown, sizeof(unknown), "u%d-%llu", w->id, (unsigned long long)l->seq);
		w->ops++;
		rc = gate_release(w->g, org, unknown, unknown_cb, l);
	} else {
		admit(l);
	}
	if (rc) {
		fail_worker(w, "release send", rc);
		lane_done(l);
	}
}

static void worker_event_cb(struct redis_conn *conn, const struct redis_conn_event *ev, void *data)
{
	struct worker *w = data;

	if (ev->type != REDIS_CONN_UP || w->next_seq)
		return;
	w->next_seq = 1;
	for (int i = 0; i < LANES; i++)
		start(&w->lanes[i]);
}

static int worker_main(int id)
{
	struct worker w = { .id = id, .org = id == WORKERS - 1 ? 1 : 0 };
	char path[128];
	struct redis_conn_options o = {
		.url = svc.redis_url,
		.name = "stress",
		.connect_timeout_ms = 10000,
		.command_timeout_ms = 60000,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 200,
		.event_cb = worker_event_cb,
		.data = &w,
	};

	w.rng = 0x9e3779b97f4a7c15ULL * (uint64_t)(id + 1);
	snprintf(path, sizeof(path), "%s/ledger.%d", dir, id);
	w.ledger = fopen(path, "wb");
	if (!w.ledger || uv_loop_init(&w.loop) || redis_scripts_new(&w.reg) ||
	    gate_scripts_register(w.reg))
		return 10;
	o.scripts = w.reg;
	if (redis_conn_new(&w.loop, &o, &w.conn) || gate_new(w.conn, w.reg, GENV_GEN, &w.g) ||
	    redis_conn_start(w.conn))
		return 11;
	for (int i = 0; i < LANES; i++) {
		w.lanes[i].w = &w;
		uv_timer_init(&w.loop, &w.lanes[i].hold);
		w.lanes[i].hold.data = &w.lanes[i];
	}
	uv_run(&w.loop, UV_RUN_DEFAULT); /* ends when every lane is done and the conn closed */
	for (int i = 0; i < LANES; i++)
		uv_close((uv_handle_t *)&w.lanes[i].hold, NULL);
	uv_run(&w.loop, UV_RUN_DEFAULT);
	uv_loop_close(&w.loop);
	redis_scripts_free(w.reg);
	if (fclose(w.ledger))
		w.errors++;
	return w.errors ? 12 : 0;
}

/* ---- the observer ---- */

struct event {
	int64_t t;
	int delta; /* +1 admitted (t1), -1 released (t2) */
	uint8_t org, campaign;
	int8_t agent;
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
				cap = cap ? 2 * cap : 65536;
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

/* Every admitted call freed exactly once by its own release; every other release freed nothing.
 * Returns the events of the slot intervals [t1, t2]; counts admissions per org. */
static struct event *intervals(const struct rec *r, size_t n, size_t *n_ev, uint64_t admitted[2])
{
	struct event *ev = calloc(2 * n + 1, sizeof(*ev));
	/* per worker and seq: index of the admission record, or SIZE_MAX */
	size_t *adm[WORKERS];

	assert_non_null(ev);
	for (int w = 0; w < WORKERS; w++) {
		adm[w] = malloc((OPS + 1) * sizeof(size_t));
		assert_non_null(adm[w]);
		for (long i = 0; i <= OPS; i++)
			adm[w][i] = SIZE_MAX;
	}
	*n_ev = 0;
	for (size_t i = 0; i < n; i++) {
		if (r[i].type != REC_ADMIT)
			continue;
		assert_true(r[i].seq <= OPS);
		assert_int_equal(adm[r[i].worker][r[i].seq], SIZE_MAX); /* admitted once */
		adm[r[i].worker][r[i].seq] = i;
		admitted[r[i].org]++;
	}
	for (size_t i = 0; i < n; i++) {
		const struct rec *x = &r[i];
		if (x->type != REC_RELEASE)
			continue;
		if (x->kind != REL_OWN) {
			assert_int_equal(x->outcome, GATE_NOT_HELD);
			continue;
		}
		size_t a = adm[x->worker][x->seq];
		assert_int_not_equal(a, SIZE_MAX);	  /* only admitted calls are released */
		assert_int_equal(x->outcome, GATE_FREED); /* and freed */
		assert_true(x->t >= r[a].t);		  /* after their admission */
		adm[x->worker][x->seq] = SIZE_MAX - 1;	  /* freed once */
		ev[(*n_ev)++] = (struct event){ r[a].t, +1, x->org, x->campaign, x->agent };
		ev[(*n_ev)++] = (struct event){ x->t, -1, x->org, x->campaign, x->agent };
	}
	for (int w = 0; w < WORKERS; w++) {
		for (long i = 0; i <= OPS; i++) /* every admitted call was released */
			assert_true(adm[w][i] == SIZE_MAX || adm[w][i] == SIZE_MAX - 1);
		free(adm[w]);
	}
	return ev;
}

/* No instant above any level: system, organisation, agent (where it gates), campaign. */
static void replay(struct event *ev, size_t n)
{
	int sys = 0, max_org[2] = { 0 }, org[2] = { 0 }, camp[2][N_CAMP] = { { 0 } };
	int agent[2][4] = { { 0 } }, max_sys = 0;

	qsort(ev, n, sizeof(*ev), cmp_event);
	for (size_t i = 0; i < n; i++) {
		const struct event *e = &ev[i];
		const struct org_conf *o = &orgs[e->org];
		sys += e->delta;
		org[e->org] += e->delta;
		camp[e->org][e->campaign] += e->delta;
		if (e->agent >= 0)
			agent[e->org][e->agent] += e->delta;
		assert_true(sys >= 0 && sys <= SYS_LIMIT);
		assert_true(org[e->org] <= (int)o->org_limit);
		if (o->ceiling[e->campaign])
			assert_true(camp[e->org][e->campaign] <= (int)o->ceiling[e->campaign]);
		if (e->agent >= 0 && o->per_agent && o->per_agent < o->org_limit)
			assert_true(agent[e->org][e->agent] <= (int)o->per_agent);
		max_sys = sys > max_sys ? sys : max_sys;
		max_org[e->org] = org[e->org] > max_org[e->org] ? org[e->org] : max_org[e->org];
	}
	assert_int_equal(sys, 0);
	/* The load made the limits bind (otherwise the test proves little). */
	assert_true(max_org[0] >= (int)orgs[0].org_limit - 2);
	assert_true(max_sys >= SYS_LIMIT - 2);
	print_message("replayed %zu interval events: max system %d/%d, o1 %d/%u, o2 %d/%u\n", n,
		      max_sys, SYS_LIMIT, max_org[0], orgs[0].org_limit, max_org[1],
		      orgs[1].org_limit);
}

/* The gate's own view afterwards: every count at zero, aggregates consistent with the floors,
 * the decision counters equal to the ledger's admissions. */
static void check_gate(const uint64_t admitted[2])
{
	struct gate_env env;
	struct view_copy v;
	struct gate_stats s;

	genv_open(&env, svc.redis_url, "stress-check", true);
	for (int i = 0; i < 2; i++) {
		uint64_t floors = 0;
		assert_int_equal(genv_read(&env, orgs[i].id, &v), 0);
		assert_int_equal(v.v.org_running, 0);
		assert_int_equal(v.v.system_running, 0);
		assert_int_equal(v.v.slots, 0);
		for (uint32_t c = 0; c < v.n_campaigns; c++) {
			assert_int_equal(v.campaigns[c].running, 0);
			if (strcmp(v.campaigns[c].id, "*") != 0)
				floors += v.campaigns[c].floor;
		}
		for (uint32_t a = 0; a < v.n_agents; a++)
			assert_int_equal(v.agents[a].running, 0);
		assert_int_equal(v.v.shortfall, floors); /* nobody runs: S is every batch floor */
		assert_int_equal(genv_stats(&env, orgs[i].id, &s), 0);
		assert_int_equal(s.total.admitted, admitted[i]);
	}
	assert_int_equal(view_agent_shortfall(&v, "a9"), 0);
	genv_close(&env);
}

static void setup_orgs(void)
{
	struct gate_env env;
	const char *ids[] = { "o1", "o2", NULL };

	genv_open(&env, svc.redis_url, "stress-setup", true);
	genv_fresh(&env, SYS_LIMIT, ids);
	assert_int_equal(genv_limits(&env, "o1", 1, orgs[0].org_limit, orgs[0].per_agent, true,
				     "A:3:a1 B::a1 C::a2 D:2:a3 E::a2", NULL),
			 0);
	assert_int_equal(
		genv_limits(&env, "o2", 1, orgs[1].org_limit, 0, true, "X::a9 Y::a9", NULL), 0);
	genv_close(&env);
}

static void hammer(void **state)
{
	pid_t pids[WORKERS];
	uint64_t admitted[2] = { 0 };
	size_t n, n_ev;
	long long t0 = fixture_now_ms();

	setup_orgs();
	fflush(NULL);
	for (int i = 0; i < WORKERS; i++) {
		pids[i] = fork();
		assert_true(pids[i] >= 0);
		if (pids[i] == 0) {
			log_set_level(LOG_ERROR);
			exit(worker_main(i));
		}
	}
	for (int i = 0; i < WORKERS; i++)
		assert_int_equal(fixture_wait(pids[i]), 0);
	struct rec *r = read_ledgers(&n);
	print_message("%d processes, %ld gate operations each, %zu ledger lines, %lld ms\n",
		      WORKERS, OPS, n, fixture_now_ms() - t0);
	struct event *ev = intervals(r, n, &n_ev, admitted);
	replay(ev, n_ev);
	check_gate(admitted);
	free(ev);
	free(r);
}

static int setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/dsp-gate-stress-XXXXXX");
	assert_non_null(mkdtemp(dir));
	fixture_start(&svc, false, true, false, false);
	return 0;
}

static int teardown(void **state)
{
	embedded_stop(&svc);
	rmdir(dir);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(hammer),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
