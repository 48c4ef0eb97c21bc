/* gate_bench: the Redis slot gate's admission cost (issue 8).
 *
 * Starts a private Redis (common/embedded.h), connects through common/redis_conn.c with the
 * gate's scripts, and for organisations of 10, 1,000 and 10,000 campaigns measures, in the same
 * run and on the same connection:
 *   - admissions (gate_admit, one candidate each, every one admitted through the full fair-share
 *     path: floors valid, the campaign at or above its floor, a gating per_agent, so the R7
 *     agent check runs), one at a time and pipelined;
 *   - admissions whose first three candidates are refused (campaign ceilings full): one script,
 *     four decisions (the simulator's 3.48 decisions per call started);
 *   - releases of the admitted calls;
 *   - INCR on the same server, one at a time and pipelined.
 * Each case runs --rounds times, interleaved; the table gives the median per second with the
 * range, and the median of Redis' own usec_per_call for EVALSHA (INFO commandstats after CONFIG
 * RESETSTAT). Installing limits and floors (O(campaigns), once per refresh) is timed once.
 *
 *   gate_bench [--quick] [--rounds N] [--depth N]
 */
#include "embedded.h"
#include "gate.h"
#include "log.h"
#include "redis_conn.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_ROUNDS    15
#define MAX_CAMPAIGNS 10000
#define ORG_LIMIT     1000000
#define PER_AGENT     500000 /* gating: below ORG_LIMIT */

struct options {
	bool quick;
	int rounds;
	int depth;
};

enum kind { K_INCR, K_NOOP, K_ADMIT, K_ADMIT4, K_RELEASE };

struct bench_case {
	enum kind kind;
	int campaigns; /* organisation size (its org id is "b<campaigns>") */
	int depth;     /* 1: one at a time */
	long ops;
	double ops_s[MAX_ROUNDS];
	double usec[MAX_ROUNDS];
};

struct runner {
	struct redis_conn *conn;
	struct gate *g;
	struct bench_case *bc;
	const char *org;
	long sent, done, errors;
	int batch; /* call ids of this batch: "k<batch>-<i>" */
};

extern const struct embedded_file bench_gate_lua[];
extern const size_t bench_gate_lua_count;

static char campaign_ids[MAX_CAMPAIGNS][16];
static const struct redis_script *noop;
static uv_loop_t loop;
static int batches;

static void send_one(struct runner *r);

static void next(struct runner *r, bool ok)
{
	r->done++;
	if (!ok)
		r->errors++;
	if (r->sent < r->bc->ops)
		send_one(r);
}

static void admit_cb(struct gate *g, int status, const struct gate_admit_result *res, void *data)
{
	next(data, status == 0 && res->outcome == GATE_ADMITTED);
}

static void release_cb(struct gate *g, int status, const struct gate_release_result *res,
		       void *data)
{
	next(data, status == 0 && res->outcome == GATE_FREED);
}

static void incr_cb(struct redis_conn *conn, int status, redisReply *reply, void *data)
{
	next(data, status == 0 && reply->type == REDIS_REPLY_INTEGER);
}

static void send_one(struct runner *r)
{
	static const char *incr[] = { "INCR", "bench:incr" };
	char call[32];
	long i = r->sent++;
	int n = r->bc->campaigns, rc;

	snprintf(call, sizeof(call), "k%d-%ld", r->batch, i);
	if (r->bc->kind == K_INCR) {
		rc = redis_conn_command_argv(r->conn, incr_cb, r, 2, incr, NULL);
	} else if (r->bc->kind == K_NOOP) {
		const char *argv[] = { "dsp:v1:{o:b10}:gen",
				       "dsp:v1:{o:b10}:state",
				       "dsp:v1:{o:b10}:slots",
				       "dsp:v1:{o:b10}:wait",
				       GATE_SYS_STATE_KEY,
				       "bench",
				       call,
				       "",
				       "",
				       "c1" };
		rc = redis_conn_evalsha(r->conn, noop, incr_cb, r, 10, argv, NULL);
	} else if (r->bc->kind == K_RELEASE) {
		rc = gate_release(r->g, r->org, call, release_cb, r);
	} else {
		const char *c[4] = { "F1", "F2", "F3", campaign_ids[i % n] };
		bool four = r->bc->kind == K_ADMIT4;
		rc = gate_admit(r->g,
				&(struct gate_admit_req){ .org = r->org,
							  .call = call,
							  .campaigns = four ? c : &c[3],
							  .n_campaigns = four ? 4 : 1 },
				admit_cb, r);
	}
	if (rc < 0) {
		fprintf(stderr, "send failed: %s\n", strerror(-rc));
		exit(1);
	}
}

struct answer {
	bool done;
	int status;
	char text[8192];
};

static void answer_cb(struct redis_conn *conn, int status, redisReply *reply, void *data)
{
	struct answer *a = data;

	a->done = true;
	a->status = status;
	snprintf(a->text, sizeof(a->text), "%s", reply && reply->str ? reply->str : "");
}

static const char *run(struct redis_conn *c, struct answer *a, ...)
{
	const char *argv[8];
	int argc = 0;
	va_list ap;

	va_start(ap, a);
	for (const char *s = va_arg(ap, const char *); s && argc < 8; s = va_arg(ap, const char *))
		argv[argc++] = s;
	va_end(ap);
	a->done = false;
	if (redis_conn_command_argv(c, answer_cb, a, argc, argv, NULL) < 0)
		exit(1);
	while (!a->done)
		uv_run(&loop, UV_RUN_ONCE);
	if (a->status != 0)
		exit(1);
	return a->text;
}

static double usec_per_call(const char *info, const char *name)
{
	char key[64];

	snprintf(key, sizeof(key), "cmdstat_%s:", name);
	const char *p = strstr(info, key);
	p = p ? strstr(p, "usec_per_call=") : NULL;
	return p ? strtod(p + strlen("usec_per_call="), NULL) : -1;
}

/* ops operations of one kind, depth in flight; returns the seconds taken. */
static double drive(struct redis_conn *c, struct gate *g, struct bench_case *bc, int batch)
{
	char org[16];
	struct runner r = { .conn = c, .g = g, .bc = bc, .org = org, .batch = batch };

	snprintf(org, sizeof(org), "b%d", bc->campaigns);
	uint64_t t0 = uv_hrtime();
	for (int i = 0; i < bc->depth && r.sent < bc->ops; i++)
		send_one(&r);
	while (r.done < bc->ops)
		uv_run(&loop, UV_RUN_ONCE);
	if (r.errors) {
		fprintf(stderr, "case %d/%d: %ld errors\n", bc->kind, bc->campaigns, r.errors);
		exit(1);
	}
	return (double)(uv_hrtime() - t0) / 1e9;
}

/* One round of an admission case and of its releases (rel): statistics reset before each. */
static void measure(struct redis_conn *c, struct gate *g, struct bench_case *bc,
		    struct bench_case *rel, int round)
{
	struct answer a;
	int batch = batches++;
	double s;

	run(c, &a, "CONFIG", "RESETSTAT", NULL);
	s = drive(c, g, bc, batch);
	if (round >= 0) {
		bc->ops_s[round] = (double)bc->ops / s;
		bc->usec[round] = usec_per_call(run(c, &a, "INFO", "commandstats", NULL),
						bc->kind == K_INCR ? "incr" : "evalsha");
	}
	if (!rel)
		return;
	rel->ops = bc->ops;
	rel->depth = bc->depth;
	rel->campaigns = bc->campaigns;
	run(c, &a, "CONFIG", "RESETSTAT", NULL);
	s = drive(c, g, rel, batch);
	if (round >= 0) {
		rel->ops_s[round] = (double)rel->ops / s;
		rel->usec[round] =
			usec_per_call(run(c, &a, "INFO", "commandstats", NULL), "evalsha");
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

static double median(const double *v, int n, double *lo, double *hi)
{
	double s[MAX_ROUNDS];

	memcpy(s, v, (size_t)n * sizeof(*s));
	qsort(s, (size_t)n, sizeof(*s), cmp_double);
	if (lo)
		*lo = s[0];
	if (hi)
		*hi = s[n - 1];
	return s[n / 2];
}

static const char *thousands(double v, char *buf, size_t len)
{
	char raw[32];
	int n = snprintf(raw, sizeof(raw), "%.0f", v), j = 0;

	for (int i = 0; i < n && (size_t)j + 2 < len; i++) {
		if (i > 0 && (n - i) % 3 == 0)
			buf[j++] = ',';
		buf[j++] = raw[i];
	}
	buf[j] = '\0';
	return buf;
}

static void print_row(const struct bench_case *bc, int rounds)
{
	static const char *names[] = { "INCR", "no-op script, the admission's 10 arguments",
				       "admit, 1 candidate", "admit, 4 candidates (3 refused)",
				       "release" };
	double lo, hi, m = median(bc->ops_s, rounds, &lo, &hi), us;
	char a[32], b[32], c[32], n[32], mode[32];

	us = median(bc->usec, rounds, NULL, NULL);
	if (bc->depth == 1)
		snprintf(mode, sizeof(mode), "one at a time");
	else
		snprintf(mode, sizeof(mode), "%d in flight", bc->depth);
	snprintf(n, sizeof(n), "%s",
		 bc->kind <= K_NOOP ? "—" : thousands(bc->campaigns, c, sizeof(c)));
	printf("| %s | %s | %s | %s | %s – %s | %.2f |", names[bc->kind], n, mode,
	       thousands(m, a, sizeof(a)), thousands(lo, b, sizeof(b)), thousands(hi, c, sizeof(c)),
	       us);
	if (bc->kind == K_ADMIT4)
		printf(" %.2f per decision |\n", us / 4);
	else
		printf(" |\n");
}

static bool up;

static void event_cb(struct redis_conn *conn, const struct redis_conn_event *ev, void *data)
{
	up = ev->type == REDIS_CONN_UP;
}

static struct redis_conn *connect_bench(const struct embedded *e, struct redis_scripts *reg)
{
	struct redis_conn *c;
	struct redis_conn_options o = {
		.url = e->redis_url,
		.name = "gate-bench",
		.connect_timeout_ms = 10000,
		.command_timeout_ms = 60000,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 1000,
		.scripts = reg,
		.event_cb = event_cb,
	};

	if (redis_conn_new(&loop, &o, &c) < 0 || redis_conn_start(c) < 0)
		exit(1);
	uint64_t deadline = uv_hrtime() + 30000000000ull;
	while (!up && uv_hrtime() < deadline)
		uv_run(&loop, UV_RUN_ONCE);
	if (!up) {
		fprintf(stderr, "could not connect to %s\n", e->redis_url);
		exit(1);
	}
	return c;
}

static int status_of;
static bool answered;

static void done_cb(struct gate *g, int status, void *data)
{
	status_of = status;
	answered = true;
}

static void install_cb(struct gate *g, int status, const struct gate_install_result *r, void *d)
{
	status_of = status ? status : r->applied ? 0 : -ESTALE;
	answered = true;
}

static void fill_cb(struct gate *g, int status, const struct gate_admit_result *r, void *d)
{
	status_of = status ? status : r->outcome == GATE_ADMITTED ? 0 : -EAGAIN;
	answered = true;
}

static void wait_answer(const char *what)
{
	while (!answered)
		uv_run(&loop, UV_RUN_ONCE);
	answered = false;
	if (status_of) {
		fprintf(stderr, "%s: %s\n", what, strerror(-status_of));
		exit(1);
	}
}

/* Builds org "b<n>": n campaigns on n/10 + 1 agents (floor 1 each), and F1..F3 with ceiling 1,
 * each holding one call; prints how long the installs took. */
static void setup_org(struct gate *g, int n)
{
	static struct gate_campaign_limits cl[MAX_CAMPAIGNS + 3];
	static struct gate_floor fl[MAX_CAMPAIGNS];
	static char agents[MAX_CAMPAIGNS][16];
	char org[16], call[16];
	uint64_t t0, t1, t2, t3;

	snprintf(org, sizeof(org), "b%d", n);
	if (gate_org_rebuild(g, org, NULL, 0, done_cb, NULL))
		exit(1);
	wait_answer("rebuild");
	for (int i = 0; i < n; i++) {
		snprintf(agents[i], sizeof(agents[i]), "a%d", i / 10);
		cl[i] = (struct gate_campaign_limits){ campaign_ids[i], 0, agents[i] };
		fl[i] = (struct gate_floor){ campaign_ids[i], 1 };
	}
	for (int i = 0; i < 3; i++) {
		static const char *f[] = { "F1", "F2", "F3" };
		cl[n + i] = (struct gate_campaign_limits){ f[i], 1, "af" };
	}
	struct gate_limits l = { 1, ORG_LIMIT, PER_AGENT, true, cl, (uint32_t)n + 3 };
	t0 = uv_hrtime();
	if (gate_install_limits(g, org, &l, install_cb, NULL))
		exit(1);
	wait_answer("limits");
	t1 = uv_hrtime();
	if (gate_install_floors(g, org, 1, 3600000, fl, (uint32_t)n, install_cb, NULL))
		exit(1);
	wait_answer("floors");
	t2 = uv_hrtime();
	/* A refresh that changes 10 floors, as a delta against version 1. */
	for (int i = 0; i < 10 && i < n; i++)
		fl[i].floor = 2;
	if (gate_install_floors_delta(g, org, 1, 2, 3600000, fl, n < 10 ? (uint32_t)n : 10,
				      install_cb, NULL))
		exit(1);
	wait_answer("floors delta");
	t3 = uv_hrtime();
	for (int i = 0; i < 3; i++) {
		snprintf(call, sizeof(call), "full%d", i);
		const char *f[] = { cl[n + i].campaign };
		if (gate_admit(
			    g,
			    &(struct gate_admit_req){ org, call, f, 1, false, NULL, false, NULL },
			    fill_cb, NULL))
			exit(1);
		wait_answer("fill");
	}
	printf("- %d campaigns: limits install %.1f ms, floors install %.1f ms, a delta of 10 "
	       "floors %.2f ms (one round trip each, client included)\n",
	       n, (double)(t1 - t0) / 1e6, (double)(t2 - t1) / 1e6, (double)(t3 - t2) / 1e6);
}

static int parse(int argc, char **argv, struct options *o)
{
	*o = (struct options){ .rounds = 3, .depth = 64 };
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--quick") == 0)
			o->quick = true;
		else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc)
			o->rounds = atoi(argv[++i]);
		else if (strcmp(argv[i], "--depth") == 0 && i + 1 < argc)
			o->depth = atoi(argv[++i]);
		else
			return -EINVAL;
	}
	if (o->quick && o->rounds == 3)
		o->rounds = 1;
	return o->rounds >= 1 && o->rounds <= MAX_ROUNDS && o->depth >= 1 ? 0 : -EINVAL;
}

static void print_header(int argc, char **argv, struct redis_conn *c, const struct options *o,
			 long ops1, long opsn)
{
	char model[128] = "unknown CPU", line[256];
	FILE *f = fopen("/proc/cpuinfo", "r");

	while (f && fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':');
		if (strncmp(line, "model name", 10) == 0 && colon) {
			snprintf(model, sizeof(model), "%.*s", (int)strcspn(colon + 2, "\n"),
				 colon + 2);
			break;
		}
	}
	if (f)
		fclose(f);
	printf("\nmachine: %ld CPUs online (%s); Redis %s on a unix socket, one connection, the "
	       "client and the server on the same machine\n\n",
	       sysconf(_SC_NPROCESSORS_ONLN), model, redis_conn_server_version(c));
	printf("%d round(s) of %ld operations one at a time and %ld pipelined per case, the cases "
	       "interleaved; median per second and its range; Redis µs per script (median "
	       "usec_per_call of EVALSHA, or INCR, in INFO commandstats)\n\n",
	       o->rounds, ops1, opsn);
	printf("| operation | campaigns | mode | per second | range | Redis µs |\n");
	printf("|---|---|---|---|---|---|\n");
	(void)argc;
	(void)argv;
}

int main(int argc, char **argv)
{
	static const int sizes[] = { 10, 1000, 10000 };
	struct bench_case cases[32], rel[32];
	struct options o;
	struct embedded e;
	struct redis_scripts *reg;
	struct gate *g;
	int n = 0;

	if (parse(argc, argv, &o) < 0) {
		fprintf(stderr, "usage: %s [--quick] [--rounds 1..%d] [--depth N]\n", argv[0],
			MAX_ROUNDS);
		return 2;
	}
	log_set_level(LOG_WARN);
	printf("## gate_bench\n\ncommand:");
	for (int i = 0; i < argc; i++)
		printf(" %s", argv[i]);
	printf("\n\n");
	for (int i = 0; i < MAX_CAMPAIGNS; i++)
		snprintf(campaign_ids[i], sizeof(campaign_ids[i]), "c%d", i);
	if (embedded_start(&e, &(struct embedded_options){ .redis = true }) < 0 ||
	    redis_scripts_new(&reg) < 0 || gate_scripts_register(reg) < 0 ||
	    redis_scripts_add(reg, &bench_gate_lua[0], 0, &noop) < 0)
		return 1;
	uv_loop_init(&loop);
	struct redis_conn *c = connect_bench(&e, reg);
	if (gate_new(c, reg, "bench", &g) < 0 || gate_system_init(g, 1, ORG_LIMIT, done_cb, NULL))
		return 1;
	wait_answer("system init");
	for (int i = 0; i < 3; i++)
		setup_org(g, sizes[i]);

	long ops1 = o.quick ? 2000 : 20000, opsn = o.quick ? 20000 : 100000;
	cases[n++] = (struct bench_case){ K_INCR, 0, 1, ops1, { 0 }, { 0 } };
	cases[n++] = (struct bench_case){ K_INCR, 0, o.depth, opsn, { 0 }, { 0 } };
	cases[n++] = (struct bench_case){ K_NOOP, 0, 1, ops1, { 0 }, { 0 } };
	cases[n++] = (struct bench_case){ K_NOOP, 0, o.depth, opsn, { 0 }, { 0 } };
	for (int i = 0; i < 3; i++) {
		cases[n++] = (struct bench_case){ K_ADMIT, sizes[i], 1, ops1, { 0 }, { 0 } };
		cases[n++] = (struct bench_case){ K_ADMIT, sizes[i], o.depth, opsn, { 0 }, { 0 } };
		cases[n++] = (struct bench_case){ K_ADMIT4, sizes[i], o.depth, opsn, { 0 }, { 0 } };
	}
	for (int i = 0; i < n; i++)
		rel[i] = (struct bench_case){ .kind = K_RELEASE };
	for (int i = 0; i < n; i++) { /* warm-up, untimed */
		long ops = cases[i].ops;
		cases[i].ops = ops / 10;
		measure(c, g, &cases[i], cases[i].kind <= K_NOOP ? NULL : &rel[i], -1);
		cases[i].ops = ops;
	}
	for (int r = 0; r < o.rounds; r++)
		for (int i = 0; i < n; i++)
			measure(c, g, &cases[i], cases[i].kind <= K_NOOP ? NULL : &rel[i], r);
	print_header(argc, argv, c, &o, ops1, opsn);
	for (int i = 0; i < n; i++) {
		print_row(&cases[i], o.rounds);
		if (cases[i].kind == K_ADMIT)
			print_row(&rel[i], o.rounds);
	}
	gate_free(g);
	redis_conn_close(c, NULL, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	redis_scripts_free(reg);
	embedded_stop(&e);
	return 0;
}
