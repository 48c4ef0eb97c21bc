/* `dispatcher demo` (demo.h, README.md): start everything, show the live table, summarise from
 * the stub's ground truth, stop everything. */
#include "demo_int.h"

#include "capacity.h"
#include "embedded.h"
#include "gate.h"
#include "gate_capacity.h"
#include "http_client.h"
#include "log.h"
#include "redis_conn.h"
#include "redis_script.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <dirent.h>
#include <unistd.h>
#include <uv.h>

#define TICK_MS	    100 /* stub polls */
#define REFRESH_MS  1000
#define SAMPLES_MAX 100000

/* One GET /stats of the stub, the parts the demo uses. */
struct stub_snap {
	bool have;
	double now, first_dial, placed, duplicates;
	double org_live, org_max, org_live_ms;
	double live[DEMO_CAMPAIGNS], max[DEMO_CAMPAIGNS], dialled[DEMO_CAMPAIGNS];
	double live_ms[DEMO_CAMPAIGNS];
};

/* --bench: the counters at one end of the window. */
enum { CPU_WORKERS, CPU_REDIS, CPU_PG, CPU_STUB, CPU_N };
struct bench_snap {
	bool stub_have, redis_have;
	struct stub_snap stub;	    /* the first GET /stats sent after the snapshot */
	double xact, rows;	    /* pg_stat_database: committed, rows written */
	double stmts, stmt_rows;    /* pg_stat_statements since the window's start */
	double redis_cmds, evalsha; /* INFO stats, commandstats */
	double cpu[CPU_N];	    /* user + system CPU-seconds so far */
};

enum { B_WARM, B_WINDOW, B_COLLECT, B_DONE };

/* --bench: the workers' exit lines ("script calls: ...", worker.c), summed over the workers
 * whose log holds one; over the whole run, not the window. */
#define TALLY_OTHERS 32
struct script_tally {
	unsigned workers;				 /* logs with the line */
	double tries, admitted, refused, wakes, retries; /* admissions; NOSCRIPT re-sends */
	double admit, release, take, all; /* gate_admit, gate_release, lane_take, every script */
	char other[TALLY_OTHERS][48];	  /* the other scripts called, by name */
	double other_n[TALLY_OTHERS];
	size_t n_other;
};

/* One campaign's capacity answer, as last read from the gate. */
struct row {
	bool have;
	struct capacity_answer a;
	char why[160];
};

struct demo {
	struct demo_options o;
	struct embedded e;
	struct demo_procs procs;
	PGconn *pg;
	uv_loop_t loop;
	uv_timer_t tick;
	struct http_client *http;
	struct redis_scripts *reg;
	struct redis_conn *redis;
	struct gate *gate;
	char stats_url[64];
	bool stats_inflight, read_inflight, loop_open, tty;
	uint64_t start, last_refresh, join_at, end_at;
	bool joined, ending, stopped, embedded_up;
	int failed; /* a worker exited: its number */
	struct stub_snap now, end, at_join;
	uint32_t pending[DEMO_CAMPAIGNS], busy[DEMO_CAMPAIGNS];
	struct row rows[DEMO_CAMPAIGNS];
	uint32_t late_floor;
	char gate_mode[64]; /* "redis mode, epoch 2" */
	bool view_ok;	    /* the last gate_read() answered */
	struct demo_sample *samples;
	size_t n_samples;
	unsigned drawn; /* lines of the last table, to redraw in place */
	/* --bench: warm-up, then the window between the snapshots b0 and b1 */
	int b_phase;
	uint64_t b_first, b_t0, b_t1, b_due_at; /* uv_now: first call seen, window, last probe */
	struct bench_snap b0, b1;
	struct bench_snap *b_want, *b_armed; /* the next GET /stats sent, then its reply */
	bool b_dry;			     /* a campaign had no due contact: window cut short */
	bool b_ho_done, b_ho_have;	     /* GET /handoff answered, with the org's figures */
	double ho_n, ho_p50, ho_p90, ho_p99, ho_max, ho_dropped;
	long rss_kib[DEMO_WORKERS_MAX];
	struct script_tally tally;
};

static void bench_snap_rest(struct demo *d, struct bench_snap *b);

/* ---- the stub's ground truth ---- */

static double num(const cJSON *j, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, k);

	return cJSON_IsNumber(v) ? v->valuedouble : 0;
}

static bool snap_parse(const char *body, struct stub_snap *s)
{
	cJSON *j = cJSON_Parse(body);

	if (!j)
		return false;
	memset(s, 0, sizeof(*s));
	s->have = true;
	s->now = num(j, "now_ms");
	s->first_dial = num(j, "first_dial_ms");
	s->placed = num(j, "calls_placed");
	s->duplicates = num(j, "duplicates");
	const cJSON *org =
		cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItem(j, "orgs"), DEMO_ORG);
	s->org_live = num(org, "live");
	s->org_max = num(org, "max_live");
	s->org_live_ms = num(org, "live_ms");
	const cJSON *cs = cJSON_GetObjectItem(j, "campaigns");
	for (size_t i = 0; i < DEMO_CAMPAIGNS; i++) {
		const cJSON *c = cJSON_GetObjectItemCaseSensitive(cs, demo_campaigns[i].id);
		s->live[i] = num(c, "live");
		s->max[i] = num(c, "max_live");
		s->dialled[i] = num(c, "placed");
		s->live_ms[i] = num(c, "live_ms");
	}
	cJSON_Delete(j);
	return true;
}

static void on_stats(const struct http_client_response *r, void *data)
{
	struct demo *d = data;
	struct stub_snap s;

	d->stats_inflight = false;
	if (r->cls != HTTP_CLIENT_OK || r->status != 200 || !snap_parse(r->body, &s))
		return;
	d->now = s;
	if (d->b_armed) { /* the window's end: the other counters at the same moment */
		struct bench_snap *b = d->b_armed;

		d->b_armed = NULL;
		b->stub = s;
		b->stub_have = true;
		bench_snap_rest(d, b);
	}
	if (d->joined && !d->at_join.have)
		d->at_join = s; /* the first reading after the late campaign's commit */
	if (d->at_join.have && d->n_samples < SAMPLES_MAX) {
		for (size_t i = 0; i < DEMO_CAMPAIGNS; i++)
			if (demo_campaigns[i].late)
				d->samples[d->n_samples++] = (struct demo_sample){
					.t_ms = (uint64_t)s.now,
					.live = (uint32_t)s.live[i],
					.floor = d->late_floor,
				};
	}
	if (d->ending) {
		d->end = s;
		d->stopped = true;
		uv_stop(&d->loop);
	}
}

static void stats_send(struct demo *d)
{
	struct http_client_request req = { .method = "GET",
					   .url = d->stats_url,
					   .timeout_ms = 5000 };

	if (!d->stats_inflight && http_client_send(d->http, &req, on_stats, d, NULL) == 0) {
		d->stats_inflight = true;
		if (d->b_want) { /* this request was sent after the snapshot: its reply belongs */
			d->b_armed = d->b_want;
			d->b_want = NULL;
		}
	}
}

/* ---- the gate's capacity view ---- */

static void on_generation(struct redis_conn *c, int status, redisReply *r, void *data)
{
	struct demo *d = data;

	(void)c;
	if (!status && r && r->type == REDIS_REPLY_STRING)
		gate_set_generation(d->gate, r->str);
}

static void on_view(struct gate *g, int status, const struct gate_view *v, void *data)
{
	struct demo *d = data;
	struct gate_capacity gc;

	(void)g;
	d->read_inflight = false;
	d->view_ok = status == 0;
	if (status == GATE_ELOST) /* the workers built the gate after this connection came up */
		redis_conn_command(d->redis, on_generation, d, "GET %s", GATE_SYS_GEN_KEY);
	if (status || !v || gate_capacity_open(&gc, v, NULL, 0, NULL))
		return;
	for (size_t i = 0; i < DEMO_CAMPAIGNS; i++) {
		struct row *row = &d->rows[i];

		row->have = gate_capacity_answer(&gc, demo_campaigns[i].id, &row->a, row->why,
						 sizeof(row->why)) == 0;
		if (demo_campaigns[i].late)
			d->late_floor = row->have ? row->a.guaranteed_floor : 0;
	}
	gate_capacity_close(&gc);
}

static void on_redis_event(struct redis_conn *c, const struct redis_conn_event *ev, void *data)
{
	struct demo *d = data;

	(void)c;
	if (ev->type == REDIS_CONN_UP && ev->generation)
		gate_set_generation(d->gate, ev->generation);
}

/* ---- --bench: Redis commands, worker RSS ---- */

static double info_field(const char *text, const char *key)
{
	const char *p = strstr(text, key);

	return p ? strtod(p + strlen(key), NULL) : 0;
}

static void on_info(struct redis_conn *c, int status, redisReply *r, void *data)
{
	struct bench_snap *b = data;

	(void)c;
	if (status || !r || r->type != REDIS_REPLY_STRING)
		return;
	/* every command, those the scripts call included; EVALSHA: the gate's round trips */
	b->redis_cmds = info_field(r->str, "total_commands_processed:");
	b->evalsha = info_field(r->str, "cmdstat_evalsha:calls=");
	b->redis_have = true;
}

/* User + system CPU-seconds of pid (with children: also those of its children it has reaped),
 * from /proc/<pid>/stat; *ppid its parent. Returns -1 when pid is gone. */
static double proc_cpu_s(pid_t pid, bool children, pid_t *ppid)
{
	char path[64], buf[1024];
	unsigned long long t[4];
	int ppid_i;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (!(f = fopen(path, "r")))
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *p = strrchr(buf, ')'); /* the command name may hold spaces */
	/* after ")": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
	 * utime stime cutime cstime */
	if (!p || sscanf(p + 1, " %*c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %llu %llu",
			 &ppid_i, &t[0], &t[1], &t[2], &t[3]) != 5)
		return -1;
	if (ppid)
		*ppid = ppid_i;
	return (double)(t[0] + t[1] + (children ? t[2] + t[3] : 0)) / (double)sysconf(_SC_CLK_TCK);
}

/* The CPU-seconds of the workers, Redis, PostgreSQL (the postmaster with what it reaped and its
 * live children) and the stub. */
static void cpu_read(const struct demo *d, double cpu[CPU_N])
{
	double v;
	pid_t ppid;
	DIR *dir;
	struct dirent *de;

	memset(cpu, 0, sizeof(double) * CPU_N);
	for (unsigned i = 0; i < d->procs.n_workers; i++)
		if ((v = proc_cpu_s(d->procs.workers[i], false, NULL)) > 0)
			cpu[CPU_WORKERS] += v;
	if (d->e.redis_pid && (v = proc_cpu_s(d->e.redis_pid, false, NULL)) > 0)
		cpu[CPU_REDIS] = v;
	if (d->procs.stub && (v = proc_cpu_s(d->procs.stub, false, NULL)) > 0)
		cpu[CPU_STUB] = v;
	if (!d->e.pg_pid || (v = proc_cpu_s(d->e.pg_pid, true, NULL)) < 0)
		return;
	cpu[CPU_PG] = v;
	if (!(dir = opendir("/proc")))
		return;
	while ((de = readdir(dir))) {
		char *end;
		long pid = strtol(de->d_name, &end, 10);
		if (*end || pid <= 0)
			continue;
		if ((v = proc_cpu_s((pid_t)pid, false, &ppid)) > 0 && ppid == d->e.pg_pid)
			cpu[CPU_PG] += v;
	}
	closedir(dir);
}

/* VmHWM of pid in KiB, or -1. */
static long rss_hwm_kib(pid_t pid)
{
	char path[64], line[128];
	long kib = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	if (!(f = fopen(path, "r")))
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strncmp(line, "VmHWM:", 6) == 0)
			kib = strtol(line + 6, NULL, 10);
	fclose(f);
	return kib;
}

/* ---- the table ---- */

static void fmt_elapsed(char *buf, size_t len, uint64_t ms)
{
	snprintf(buf, len, "%llu:%02llu", (unsigned long long)(ms / 60000),
		 (unsigned long long)(ms / 1000 % 60));
}

static void render(struct demo *d, uint64_t elapsed)
{
	char t[32], total[32], lim[16], flo[16], run[16];

	fmt_elapsed(t, sizeof(t), elapsed);
	fmt_elapsed(total, sizeof(total), d->end_at - d->start);
	if (d->o.bench)
		return;
	if (!d->tty) {
		printf("t=%s live=%.0f/%u gate=%s%s", t, d->now.org_live, d->o.lines, d->gate_mode,
		       d->view_ok ? "" : " (no Redis view)");
		for (size_t i = 0; i < DEMO_CAMPAIGNS; i++) {
			const struct row *r = &d->rows[i];
			if (r->have)
				printf(" | %s running=%u floor=%u limit=%u dialled=%.0f pending=%u "
				       "(%s)",
				       demo_campaigns[i].id, r->a.running_now,
				       r->a.guaranteed_floor, r->a.effective_limit,
				       d->now.dialled[i], d->pending[i], r->why);
			else
				printf(" | %s dialled=%.0f pending=%u", demo_campaigns[i].id,
				       d->now.dialled[i], d->pending[i]);
		}
		printf("\n");
		fflush(stdout);
		return;
	}
	if (d->drawn)
		printf("\033[%uA", d->drawn);
	printf("\033[Kdispatcher demo  %s / %s   %u workers   %s: %.0f of %u lines live   gate: "
	       "%s%s\n",
	       t, total, d->o.workers, DEMO_ORG, d->now.org_live, d->o.lines, d->gate_mode,
	       d->view_ok ? "" : " (no Redis capacity view yet)");
	printf("\033[K%-11s %-14s %7s %5s %5s %7s %7s  %s\n", "campaign", "", "running", "floor",
	       "limit", "dialled", "pending", "binding limit");
	for (size_t i = 0; i < DEMO_CAMPAIGNS; i++) {
		const struct row *r = &d->rows[i];
		const struct demo_campaign *c = &demo_campaigns[i];
		char note[24];

		snprintf(note, sizeof(note), c->ceiling ? "%s %u" : "%s", c->what, c->ceiling);
		snprintf(run, sizeof(run), r->have ? "%u" : "-", r->a.running_now);
		snprintf(flo, sizeof(flo), r->have ? "%u" : "-", r->a.guaranteed_floor);
		snprintf(lim, sizeof(lim), r->have ? "%u" : "-", r->a.effective_limit);
		printf("\033[K%-11s %-14s %7s %5s %5s %7.0f %7u  %s\n", c->id, note, run, flo, lim,
		       d->now.dialled[i], d->pending[i],
		       r->have ? r->why : (c->late && !d->joined ? "(not yet created)" : ""));
	}
	d->drawn = 2 + DEMO_CAMPAIGNS;
	fflush(stdout);
}

/* ---- --bench: the window ---- */

static void on_handoff_armed(const struct http_client_response *r, void *data)
{
	(void)data;
	if (r->cls != HTTP_CLIENT_OK || r->status != 200)
		log_warn(LOG_MAIN, "demo: the stub did not arm its hand-off measurement");
}

static void on_handoff(const struct http_client_response *r, void *data)
{
	struct demo *d = data;
	cJSON *j;

	d->b_ho_done = true;
	if (r->cls != HTTP_CLIENT_OK || r->status != 200 || !(j = cJSON_Parse(r->body)))
		return;
	const cJSON *o = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItem(j, "orgs"), DEMO_ORG);
	if (o) {
		d->b_ho_have = true;
		d->ho_n = num(o, "samples");
		d->ho_p50 = num(o, "p50_us");
		d->ho_p90 = num(o, "p90_us");
		d->ho_p99 = num(o, "p99_us");
		d->ho_max = num(o, "max_us");
		d->ho_dropped = num(o, "dropped");
	}
	cJSON_Delete(j);
}

/* The stub's hand-off endpoints: POST /control/handoff (arm with the org's lines) or GET
 * /handoff. */
static void handoff_send(struct demo *d, bool arm)
{
	char url[80], body[96];
	const char *headers[] = { "Content-Type: application/json" };
	struct http_client_request req = { .method = arm ? "POST" : "GET",
					   .url = url,
					   .timeout_ms = 5000 };

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/%s", d->procs.stub_port,
		 arm ? "control/handoff" : "handoff");
	if (arm) {
		snprintf(body, sizeof(body), "{\"org_id\":\"%s\",\"lines\":%u}", DEMO_ORG,
			 d->o.lines);
		req.headers = headers;
		req.nheaders = 1;
		req.body = body;
		req.body_len = strlen(body);
	}
	if (http_client_send(d->http, &req, arm ? on_handoff_armed : on_handoff, d, NULL) && !arm)
		d->b_ho_done = true;
}

/* One end of the window: the next GET /stats sent, then, when it answers, the other counters
 * at once (bench_snap_rest), so that one interval holds for all of them. */
static void bench_snap_take(struct demo *d, struct bench_snap *b)
{
	d->b_want = b;
	d->b_armed = NULL;
}

/* PostgreSQL and CPU now, Redis by its next reply. At the start, pg_stat_statements is emptied
 * after the counters. */
static void bench_snap_rest(struct demo *d, struct bench_snap *b)
{
	demo_db_counters(d->pg, &b->xact, &b->rows);
	if (b == &d->b0)
		demo_stmt_reset(d->pg);
	else
		demo_stmt_totals(d->pg, &b->stmts, &b->stmt_rows);
	cpu_read(d, b->cpu);
	redis_conn_command(d->redis, on_info, b, "INFO stats commandstats");
}

static void bench_tick(struct demo *d, uint64_t now)
{
	switch (d->b_phase) {
	case B_WARM:
		if (!d->b_first && d->now.placed > 0)
			d->b_first = now;
		/* --warmup-s from the first call, and until all the lines were busy once (the
		 * ramp), but at most twice the longest call longer */
		uint64_t warm = (uint64_t)d->o.warmup_s * 1000, ramp = 2ULL * d->o.hold_max_ms;
		if (d->b_first && now - d->b_first >= warm &&
		    (d->now.org_max >= d->o.lines || now - d->b_first >= warm + ramp)) {
			handoff_send(d, true);
			bench_snap_take(d, &d->b0);
			d->b_t0 = d->b_due_at = now;
			d->b_phase = B_WINDOW;
		}
		return;
	case B_WINDOW: {
		bool end = now - d->b_t0 >= (uint64_t)d->o.window_s * 1000 || now >= d->end_at;

		if (!end && now - d->b_due_at >= 500) {
			bool a = true, b = true;

			d->b_due_at = now;
			/* backlogged: both uncapped campaigns still have a contact due (the
			 * capped one's tail is not "backlogged"; retries wait an hour) */
			if (demo_due(d->pg, demo_campaigns[0].id, &a) == 0 &&
			    demo_due(d->pg, demo_campaigns[1].id, &b) == 0 && (!a || !b))
				end = d->b_dry = true;
		}
		if (!end)
			return;
		bench_snap_take(d, &d->b1);
		handoff_send(d, false);
		for (unsigned i = 0; i < d->procs.n_workers; i++)
			d->rss_kib[i] = rss_hwm_kib(d->procs.workers[i]);
		d->b_t1 = now;
		d->b_phase = B_COLLECT;
		return;
	}
	case B_COLLECT:
		if ((d->b1.stub_have && d->b1.redis_have && d->b_ho_done) || now - d->b_t1 > 5000) {
			demo_stmt_top(d->pg, stdout);
			d->b_phase = B_DONE;
			d->ending = true;
		}
		return;
	default:
		return;
	}
}

/* ---- the loop ---- */

static void on_tick(uv_timer_t *t)
{
	struct demo *d = t->data;
	uint64_t now = uv_now(&d->loop), elapsed = now - d->start;
	int w;

	if (demo_interrupted()) {
		uv_stop(&d->loop);
		return;
	}
	if ((w = demo_workers_poll(&d->procs))) {
		d->failed = w;
		uv_stop(&d->loop);
		return;
	}
	if (!d->o.bench && !d->joined && elapsed >= d->join_at) {
		if (demo_late_join(d->pg, &d->o)) {
			d->failed = -1;
			uv_stop(&d->loop);
			return;
		}
		d->joined = true;
	}
	if (now >= d->end_at && (!d->o.bench || d->b_phase == B_WARM))
		d->ending = true; /* --bench: the window ends itself, collected */
	if (d->o.bench)
		bench_tick(d, now);
	stats_send(d);
	if (!d->o.bench && now - d->last_refresh >= REFRESH_MS) { /* --bench: no probes */
		d->last_refresh = now;
		if (!d->read_inflight && gate_read(d->gate, DEMO_ORG, on_view, d) == 0)
			d->read_inflight = true;
		demo_backlog(d->pg, d->pending, d->busy);
		demo_gate_mode(d->pg, d->gate_mode, sizeof(d->gate_mode));
		render(d, elapsed);
	}
}

static int loop_open(struct demo *d)
{
	struct http_client_config hc;
	struct redis_conn_options ro = {
		.url = d->e.redis_url,
		.name = "demo",
		.connect_timeout_ms = 5000,
		.command_timeout_ms = 5000,
		.reconnect_min_ms = 100,
		.reconnect_max_ms = 1000,
		.generation_key = GATE_SYS_GEN_KEY,
		.event_cb = on_redis_event,
		.data = d,
	};

	if (uv_loop_init(&d->loop))
		return -ENOMEM;
	d->loop_open = true;
	http_client_config_defaults(&hc);
	hc.no_proxy = true;
	snprintf(d->stats_url, sizeof(d->stats_url), "http://127.0.0.1:%d/stats",
		 d->procs.stub_port);
	if (http_client_new(&d->loop, &hc, &d->http) || redis_scripts_new(&d->reg) ||
	    gate_scripts_register(d->reg))
		return -ENOMEM;
	ro.scripts = d->reg;
	if (redis_conn_new(&d->loop, &ro, &d->redis) ||
	    gate_new(d->redis, d->reg, NULL, &d->gate) || redis_conn_start(d->redis))
		return -ENOMEM;
	uv_timer_init(&d->loop, &d->tick);
	d->tick.data = d;
	return 0;
}

static void walk_close(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

static void loop_close(struct demo *d)
{
	if (!d->loop_open)
		return;
	gate_free(d->gate);
	if (d->redis)
		redis_conn_close(d->redis, NULL, NULL);
	if (d->http)
		http_client_close(d->http, NULL, NULL);
	uv_run(&d->loop, UV_RUN_NOWAIT);
	uv_walk(&d->loop, walk_close, NULL);
	uv_run(&d->loop, UV_RUN_DEFAULT);
	uv_loop_close(&d->loop);
	redis_scripts_free(d->reg);
	d->loop_open = false;
}

static void on_give_up(uv_timer_t *t)
{
	struct demo *d = t->data;

	uv_stop(&d->loop);
}

/* One more GET /stats, waited for (the ground truth once the workers are gone): into d->now. */
static void stats_final(struct demo *d)
{
	struct stub_snap end = d->end;

	d->ending = true;
	d->stopped = false;
	stats_send(d);
	uv_timer_start(&d->tick, on_give_up, 5000, 0);
	while (!d->stopped && d->stats_inflight && !demo_interrupted())
		uv_run(&d->loop, UV_RUN_ONCE);
	uv_timer_stop(&d->tick);
	d->end = end; /* the figures' window ends with the table */
}

/* ---- --bench: the workers' script calls, from their logs ---- */

static void tally_other(struct script_tally *t, const char *name, size_t len, double n)
{
	size_t i = 0;

	while (i < t->n_other && (strlen(t->other[i]) != len || memcmp(t->other[i], name, len)))
		i++;
	if (i == t->n_other) {
		if (i == TALLY_OTHERS || len >= sizeof(t->other[0]))
			return;
		snprintf(t->other[i], sizeof(t->other[0]), "%.*s", (int)len, name);
		t->n_other++;
	}
	t->other_n[i] += n;
}

/* One "key=value" of an exit line into t. */
static void tally_token(struct script_tally *t, const char *k, size_t klen, double v)
{
	static const struct {
		const char *key;
		size_t off;
	} fields[] = {
		{ "admission_tries", offsetof(struct script_tally, tries) },
		{ "admitted", offsetof(struct script_tally, admitted) },
		{ "refused", offsetof(struct script_tally, refused) },
		{ "wakes", offsetof(struct script_tally, wakes) },
		{ "script_retries", offsetof(struct script_tally, retries) },
		{ "script.gate_admit.lua", offsetof(struct script_tally, admit) },
		{ "script.gate_release.lua", offsetof(struct script_tally, release) },
		{ "script.lane_take.lua", offsetof(struct script_tally, take) },
	};

	if (klen > 7 && memcmp(k, "script.", 7) == 0)
		t->all += v;
	for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
		if (strlen(fields[i].key) == klen && memcmp(fields[i].key, k, klen) == 0) {
			*(double *)((char *)t + fields[i].off) += v;
			return;
		}
	}
	if (klen > 7 && memcmp(k, "script.", 7) == 0 && v > 0)
		tally_other(t, k + 7, klen - 7, v);
}

/* Adds the last exit line of the worker log at path to t. */
static void tally_log(struct script_tally *t, const char *path)
{
	static const char tag[] = "\"msg\":\"script calls: ";
	FILE *f = fopen(path, "r");
	char *line = NULL, *last = NULL;
	size_t cap = 0;

	if (!f)
		return;
	while (getline(&line, &cap, f) > 0) {
		if (strstr(line, tag)) {
			free(last);
			last = strdup(line);
		}
	}
	free(line);
	fclose(f);
	if (!last)
		return;
	t->workers++;
	const char *p = strstr(last, tag) + sizeof(tag) - 1;
	const char *end = strchr(p, '"');
	while (end && p < end) {
		size_t n = strcspn(p, " \"");
		const char *eq = memchr(p, '=', n);
		if (eq)
			tally_token(t, p, (size_t)(eq - p), strtod(eq + 1, NULL));
		p += n + (p[n] == ' ');
	}
	free(last);
}

/* Reads every worker's exit line (after they exited). */
static void tally_workers(struct demo *d)
{
	char path[PATH_MAX];

	memset(&d->tally, 0, sizeof(d->tally));
	for (unsigned i = 0; i < d->procs.n_workers; i++) {
		snprintf(path, sizeof(path), "%s/worker-%u.log", d->e.dir, i + 1);
		tally_log(&d->tally, path);
	}
}

/* The bench line's script fields: per admitted call ("cycle" here), over the whole run. */
static void tally_print(const struct demo *d)
{
	const struct script_tally *t = &d->tally;
	double a = t->workers && t->admitted > 0 ? t->admitted : 0;
	double other = t->all - t->admit - t->release - t->take;

	printf(" scripts_workers=%u run_admitted=%.0f run_admission_tries=%.0f run_refused=%.0f "
	       "run_wakes=%.0f run_admit_scripts=%.0f run_scripts=%.0f script_retries=%.0f "
	       "admit_scripts_per_admission=%.3f release_scripts_per_cycle=%.3f "
	       "lane_takes_per_cycle=%.3f other_scripts_per_cycle=%.3f other_scripts=",
	       t->workers, t->admitted, t->tries, t->refused, t->wakes, t->admit, t->all,
	       t->retries, a ? t->admit / a : -1, a ? t->release / a : -1, a ? t->take / a : -1,
	       a ? other / a : -1);
	for (size_t i = 0; i < t->n_other; i++)
		printf("%s%s:%.0f", i ? "," : "", t->other[i], t->other_n[i]);
	if (!t->n_other)
		printf("-");
}

/* ---- summary ---- */

/* --bench: the "bench:" line (bench/worker/run.sh reads it; README.md says what each means). */
static void bench_line(const struct demo *d, const struct stub_snap *fin)
{
	const struct bench_snap *b0 = &d->b0, *b1 = &d->b1;
	const struct stub_snap *s0 = &b0->stub, *s1 = &b1->stub;

	if (!b0->stub_have || !b1->stub_have) {
		printf("bench: no window measured (the first call came too late or the stub did "
		       "not "
		       "answer)\n");
		return;
	}
	double span = s1->now - s0->now;
	double placed = s1->placed - s0->placed;
	double done = (s1->placed - s1->org_live) - (s0->placed - s0->org_live);
	double util = span > 0 ? (s1->org_live_ms - s0->org_live_ms) / (d->o.lines * span) : 0;
	double per = done > 0 ? 1 / done : 0, k = done > 0 ? 1000 / done : 0;
	double ev = b1->redis_have && b0->redis_have ? b1->evalsha - b0->evalsha : -1;
	double rc = b1->redis_have && b0->redis_have ? b1->redis_cmds - b0->redis_cmds : -1;

	printf("bench: workers=%u lines=%u hold_ms=%u-%u contacts=%u window_s=%.3f "
	       "backlogged=%s placed=%.0f completed=%.0f util=%.4f cycles_per_s=%.1f "
	       "handoff_n=%.0f handoff_p50_us=%.0f handoff_p90_us=%.0f handoff_p99_us=%.0f "
	       "handoff_max_us=%.0f "
	       "cpu_worker_per_kcycle=%.3f cpu_redis_per_kcycle=%.3f cpu_pg_per_kcycle=%.3f "
	       "cpu_stub_per_kcycle=%.3f "
	       "evalsha_per_admission=%.3f evalsha_per_cycle=%.3f redis_cmds_per_cycle=%.2f "
	       "pg_stmts_per_cycle=%.2f pg_rows_per_cycle=%.2f pg_xact_per_cycle=%.2f "
	       "duplicates=%.0f max_live=%.0f rss_kib=",
	       d->o.workers, d->o.lines, d->o.hold_min_ms, d->o.hold_max_ms,
	       demo_contacts_per_campaign(&d->o), span / 1000, d->b_dry ? "no" : "yes", placed,
	       done, util, span > 0 ? done / (span / 1000) : 0, d->b_ho_have ? d->ho_n : -1,
	       d->ho_p50, d->ho_p90, d->ho_p99, d->ho_max,
	       (b1->cpu[CPU_WORKERS] - b0->cpu[CPU_WORKERS]) * k,
	       (b1->cpu[CPU_REDIS] - b0->cpu[CPU_REDIS]) * k,
	       (b1->cpu[CPU_PG] - b0->cpu[CPU_PG]) * k, (b1->cpu[CPU_STUB] - b0->cpu[CPU_STUB]) * k,
	       placed > 0 && ev >= 0 ? ev / placed : -1, ev >= 0 ? ev * per : -1,
	       rc >= 0 ? rc * per : -1, b1->stmts * per, (b1->rows - b0->rows) * per,
	       (b1->xact - b0->xact) * per, fin->duplicates, fin->org_max);
	for (unsigned i = 0; i < d->procs.n_workers; i++)
		printf("%s%ld", i ? "," : "", d->rss_kib[i]);
	tally_print(d);
	printf("\n");
	if (d->b_ho_have && d->ho_dropped > 0)
		printf("  (hand-off: %.0f freed lines not followed by their dial while saturated "
		       "were "
		       "left out)\n",
		       d->ho_dropped);
}

static int summary(struct demo *d, const struct stub_snap *fin)
{
	const struct stub_snap *e = &d->end;
	uint32_t ceilings[DEMO_CAMPAIGNS];
	double shares[DEMO_CAMPAIGNS], x[DEMO_CAMPAIGNS];
	int bad = 0;

	for (size_t i = 0; i < DEMO_CAMPAIGNS; i++)
		ceilings[i] = demo_campaigns[i].ceiling;
	demo_fair_shares(d->o.lines, ceilings, DEMO_CAMPAIGNS, shares);

	double span = e->now - e->first_dial;
	double util = e->first_dial > 0 && span > 0 ? e->org_live_ms / (d->o.lines * span) : 0;
	bool window = d->o.bench && d->b0.stub_have && d->b1.stub_have;
	if (window) { /* --bench: the window only */
		span = d->b1.stub.now - d->b0.stub.now;
		util = span > 0 ? (d->b1.stub.org_live_ms - d->b0.stub.org_live_ms) /
					  (d->o.lines * span)
				: 0;
	}
	double jspan = d->at_join.have ? e->now - d->at_join.now : 0, jain = 0;
	if (jspan > 0) {
		for (size_t i = 0; i < DEMO_CAMPAIGNS; i++)
			x[i] = (e->live_ms[i] - d->at_join.live_ms[i]) / (shares[i] * jspan);
		jain = demo_jain(x, DEMO_CAMPAIGNS);
	}
	bool backlogged = true;
	for (size_t i = 0; i < DEMO_CAMPAIGNS; i++)
		backlogged = backlogged && d->pending[i] > 0;

	printf("\nSummary (the provider stub's ground truth)\n");
	printf("  dialled:                 %.0f calls\n", fin->placed);
	printf("  duplicates:              %.0f%s\n", fin->duplicates,
	       fin->duplicates > 0 ? "   FAILED: a contact was dialled twice" : "");
	bad |= fin->duplicates > 0;
	printf("  maximum live, org:       %.0f of %u lines%s\n", fin->org_max, d->o.lines,
	       fin->org_max > d->o.lines ? "   FAILED: above the organisation's limit" : "");
	bad |= fin->org_max > d->o.lines;
	for (size_t i = 0; i < DEMO_CAMPAIGNS; i++) {
		bool over = ceilings[i] && fin->max[i] > ceilings[i];
		printf("  maximum live, %-10s %.0f", demo_campaigns[i].id, fin->max[i]);
		if (ceilings[i])
			printf(" (ceiling %u)%s", ceilings[i],
			       over ? "   FAILED: above its ceiling" : "");
		printf("\n");
		bad |= over;
	}
	printf("  line utilisation:        %.1f %% (live line-time / (%u lines x %.1f s) %s; "
	       "target >= 97 %%)%s\n",
	       util * 100, d->o.lines, span / 1000,
	       window ? "in the bench window" : "from the first call",
	       util >= 0.97 ? "" : "   below target");
	if (jspan > 0) {
		printf("  Jain's fairness index:   %.4f over %u campaigns for the last %.1f s "
		       "(live "
		       "line-time / max-min fair share:",
		       jain, DEMO_CAMPAIGNS, jspan / 1000);
		for (size_t i = 0; i < DEMO_CAMPAIGNS; i++)
			printf(" %.3f", x[i]);
		printf("; target >= 0.98)%s\n", jain >= 0.98 ? "" : "   below target");
	} else {
		printf("  Jain's fairness index:   not measured (the late campaign never "
		       "joined)\n");
	}
	if (!backlogged && !d->o.bench)
		printf("  note: a campaign ran out of pending contacts before the end: the "
		       "figures above are not all 'while backlogged'\n");
	uint64_t ttf;
	double target = DEMO_CALL_MAX_MS + 1000;
	if (d->at_join.have &&
	    demo_time_to_floor(d->samples, d->n_samples, (uint64_t)d->at_join.now, &ttf) == 0)
		printf("  late campaign at floor:  %.1f s after it joined (target <= longest call "
		       "+ "
		       "1 s = %.1f s)%s\n",
		       ttf / 1000.0, target / 1000, ttf <= target ? "" : "   below target");
	else
		printf("  late campaign at floor:  never reached%s\n",
		       d->at_join.have ? "   below target" : "");
	if (d->o.bench)
		bench_line(d, fin);
	printf("%s\n", bad ? "Result: FAILED (an invariant was broken)" : "Result: ok");
	return bad ? 1 : 0;
}

/* ---- the command ---- */

static int self_paths(char *self, size_t len, char *stub, size_t slen)
{
	ssize_t n = readlink("/proc/self/exe", self, len - 1);
	char dir[PATH_MAX];

	if (n <= 0)
		return -errno;
	self[n] = '\0';
	snprintf(dir, sizeof(dir), "%s", self);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	/* the build tree: <build>/dispatcher/dispatcher and <build>/bench/provider-stub/ */
	snprintf(stub, slen, "%s/../bench/provider-stub/provider-stub", dir);
	if (access(stub, X_OK) == 0)
		return 0;
	snprintf(stub, slen, "%s/provider-stub", dir);
	return access(stub, X_OK) == 0 ? 0 : -ENOENT;
}

static void print_log_tail(const char *path)
{
	char cmd[PATH_MAX + 32];

	fprintf(stderr, "--- %s (last lines)\n", path);
	fflush(stderr);
	snprintf(cmd, sizeof(cmd), "tail -n 8 '%s' >&2", path);
	if (system(cmd) != 0)
		fprintf(stderr, "(no log)\n");
}

static void print_logs(struct demo *d)
{
	char path[PATH_MAX];

	for (unsigned i = 0; i < d->procs.n_workers; i++) {
		snprintf(path, sizeof(path), "%s/worker-%u.log", d->e.dir, i + 1);
		print_log_tail(path);
	}
	snprintf(path, sizeof(path), "%s/stub.log", d->e.dir);
	print_log_tail(path);
}

static int prepare_all(struct demo *d, const char *self, const char *stub)
{
	struct embedded_options eo = { .postgres = true,
				       .redis = true,
				       .pg_stat_statements = d->o.bench };
	unsigned char raw[16];
	char secret[40];

	if (getrandom(raw, sizeof(raw), 0) != sizeof(raw))
		return -EIO;
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(secret + 2 * i, 3, "%02x", raw[i]);
	printf("starting PostgreSQL and Redis (private, in /tmp)...\n");
	fflush(stdout);
	if (embedded_start(&d->e, &eo))
		return -EIO;
	d->embedded_up = true;
	d->procs.dir = d->e.dir;
	if (demo_interrupted())
		return -EINTR;
	if (!(d->pg = PQconnectdb(d->e.database_url)) || PQstatus(d->pg) != CONNECTION_OK) {
		log_error(LOG_MAIN, "demo: cannot connect to the private PostgreSQL");
		return -EIO;
	}
	printf("migrating, creating the organisation (%u lines) and %u contacts per campaign...\n",
	       d->o.lines, demo_contacts_per_campaign(&d->o));
	fflush(stdout);
	if (demo_setup(d->pg, &d->o))
		return -EIO;
	if (demo_interrupted())
		return -EINTR;
	int e = demo_stub_start(&d->procs, stub, &d->o, secret);
	if (e) {
		log_error(LOG_MAIN, "demo: the provider stub did not start: %s", strerror(-e));
		return e;
	}
	int port = demo_free_port();
	if (port < 0)
		return port;
	struct demo_worker_env we = { .database_url = d->e.database_url,
				      .redis_url = d->e.redis_url,
				      .secret = secret,
				      .port = port,
				      .log_level = d->o.bench ? "info" : NULL };
	printf("starting the provider stub (port %d) and %u workers (port %d)...\n\n",
	       d->procs.stub_port, d->o.workers, port);
	fflush(stdout);
	if ((e = demo_workers_start(&d->procs, self, d->o.workers, &we)))
		return e;
	printf("operators: http://127.0.0.1:%d/status (live page) and /metrics, worker demo-w1; "
	       "each worker has its own operator port\n\n",
	       d->procs.operator_ports[0]);
	fflush(stdout);
	return demo_interrupted() ? -EINTR : 0;
}

int demo_main(int argc, char **argv)
{
	static struct demo d;
	char self[PATH_MAX], stub[PATH_MAX + 64];
	int rc = 1, e;

	switch (demo_options_parse(argc, argv, &d.o, stderr)) {
	case 0:
		break;
	case 1:
		demo_usage(stdout);
		return 0;
	default:
		return 2;
	}
	if (self_paths(self, sizeof(self), stub, sizeof(stub))) {
		fprintf(stderr, "dispatcher demo: the provider stub is not built next to this "
				"binary (build with -Dbench=true: bench/provider-stub)\n");
		return 1;
	}
	log_set_level(LOG_WARN); /* the table is the output; warnings and errors still show */
	demo_signals_install();
	d.tty = isatty(STDOUT_FILENO);
	d.samples = calloc(SAMPLES_MAX, sizeof(*d.samples));
	if (!d.samples)
		return 1;
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if ((e = prepare_all(&d, self, stub)) || (e = loop_open(&d)))
		goto done;
	d.start = d.last_refresh = uv_now(&d.loop);
	d.join_at = demo_late_join_ms(&d.o);
	d.end_at = d.start + (uint64_t)(d.o.minutes * 60000);
	uv_timer_start(&d.tick, on_tick, TICK_MS, TICK_MS);
	uv_run(&d.loop, UV_RUN_DEFAULT);
	uv_timer_stop(&d.tick);
	if (demo_interrupted()) {
		e = -EINTR;
		goto done;
	}
	if (d.failed) {
		fprintf(stderr, "\ndispatcher demo: %s\n",
			d.failed > 0 ? "a worker exited early"
				     : "the late campaign was not written");
		print_logs(&d);
		goto done;
	}
	printf("\nstopping the workers (SIGTERM: they drain)...\n");
	fflush(stdout);
	int killed = demo_workers_stop(&d.procs, 15000);
	if (killed)
		printf("%d worker(s) did not exit within 15 s of SIGTERM and were killed\n",
		       killed);
	stats_final(&d);
	if (d.o.bench)
		tally_workers(&d);
	rc = summary(&d, d.now.have ? &d.now : &d.end);
	if (!d.end.have || d.end.placed == 0) {
		fprintf(stderr, "dispatcher demo: no call was placed\n");
		print_logs(&d);
		rc = 1;
	}
done:
	if (e == -EINTR) {
		printf("\ninterrupted: stopping everything\n");
		rc = 130;
	} else if (e) {
		fprintf(stderr, "dispatcher demo: could not start: %s\n", strerror(-e));
		if (d.procs.dir)
			print_logs(&d);
	}
	demo_procs_stop(&d.procs);
	loop_close(&d);
	if (d.pg)
		PQfinish(d.pg);
	if (d.embedded_up)
		embedded_stop(&d.e);
	curl_global_cleanup();
	free(d.samples);
	return rc;
}
