/* conn_redis_bench: the Redis layer's throughput (issue 7).
 *
 * Starts a private Redis (common/embedded.h), connects through common/redis_conn.c and measures,
 * in the same run and on the same connection: INCR and EVALSHA of a trivial script
 * (bench/conn/lua/bench_incr.lua, `return redis.call('INCR', KEYS[1])`), each one at a time (the
 * next sent when the previous is answered) and pipelined (a fixed number in flight). Each case
 * runs --rounds times, interleaved with the others; the table gives the median ops/s with the
 * range, and the median of Redis' own µs per call (INFO commandstats after CONFIG RESETSTAT). Prints markdown: the command line and the machine first, then one row per case.
 *
 *   conn_redis_bench [--quick] [--tcp] [--rounds N] [--depth N]
 */
#include "embedded.h"
#include "log.h"
#include "redis_conn.h"
#include "redis_script.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern const struct embedded_file bench_redis_lua[];
extern const size_t bench_redis_lua_count;

#define MAX_ROUNDS 15

struct options {
	bool quick, tcp;
	int rounds;
	int depth;
};

struct bench_case {
	const char *name;    /* row label */
	const char *cmdstat; /* INFO commandstats section: cmdstat_<name> */
	bool script;
	int depth; /* 1: one at a time */
	long ops;
	double ops_s[MAX_ROUNDS];
	double usec[MAX_ROUNDS];
};

/* One case's run: sends until ops are sent, depth at a time. */
struct runner {
	struct redis_conn *conn;
	const struct redis_script *script;
	const struct bench_case *bc;
	long sent, done, errors;
};

/* A blocking-style wait for one answer (set-up and statistics only). */
struct answer {
	bool done;
	int status;
	char text[8192];
};

static void send_one(struct runner *r);

static void runner_cb(struct redis_conn *conn, int status, redisReply *reply, void *data)
{
	struct runner *r = data;

	r->done++;
	if (status != 0 || reply->type != REDIS_REPLY_INTEGER)
		r->errors++;
	if (r->sent < r->bc->ops)
		send_one(r);
}

static void send_one(struct runner *r)
{
	const char *incr[] = { "INCR", "bench:incr" };
	const char *key[] = { "bench:eval" };
	int rc = r->script ? redis_conn_evalsha(r->conn, r->script, runner_cb, r, 1, key, NULL)
			   : redis_conn_command_argv(r->conn, runner_cb, r, 2, incr, NULL);

	if (rc < 0) {
		fprintf(stderr, "send failed: %s\n", strerror(-rc));
		exit(1);
	}
	r->sent++;
}

static void answer_cb(struct redis_conn *conn, int status, redisReply *reply, void *data)
{
	struct answer *a = data;

	a->done = true;
	a->status = status;
	snprintf(a->text, sizeof(a->text), "%s", reply && reply->str ? reply->str : "");
}

/* Runs one command (NULL-terminated) and returns its answer's text. */
static const char *run(uv_loop_t *loop, struct redis_conn *c, struct answer *a, ...)
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
		uv_run(loop, UV_RUN_ONCE);
	if (a->status != 0)
		exit(1);
	return a->text;
}

/* usec_per_call of cmdstat_<name> in an INFO commandstats answer, or -1. */
static double usec_per_call(const char *info, const char *name)
{
	char key[64];

	snprintf(key, sizeof(key), "cmdstat_%s:", name);
	const char *p = strstr(info, key);
	p = p ? strstr(p, "usec_per_call=") : NULL;
	return p ? strtod(p + strlen("usec_per_call="), NULL) : -1;
}

/* One round of one case: statistics reset, then ops commands, depth in flight. */
static void measure(uv_loop_t *loop, struct redis_conn *c, const struct redis_script *s,
		    struct bench_case *bc, int round)
{
	struct answer a;
	struct runner r = { .conn = c, .script = bc->script ? s : NULL, .bc = bc };

	run(loop, c, &a, "CONFIG", "RESETSTAT", NULL);
	uint64_t t0 = uv_hrtime();
	for (int i = 0; i < bc->depth && r.sent < bc->ops; i++)
		send_one(&r);
	while (r.done < bc->ops)
		uv_run(loop, UV_RUN_ONCE);
	uint64_t t1 = uv_hrtime();
	if (r.errors) {
		fprintf(stderr, "%s: %ld errors\n", bc->name, r.errors);
		exit(1);
	}
	if (round >= 0) {
		bc->ops_s[round] = (double)bc->ops / ((double)(t1 - t0) / 1e9);
		bc->usec[round] =
			usec_per_call(run(loop, c, &a, "INFO", "commandstats", NULL), bc->cmdstat);
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

/* 1234567 -> "1,234,567" */
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
	double lo, hi, m = median(bc->ops_s, rounds, &lo, &hi);
	char a[32], b[32], c[32];
	char mode[32];

	if (bc->depth == 1)
		snprintf(mode, sizeof(mode), "one at a time");
	else
		snprintf(mode, sizeof(mode), "pipelined, %d in flight", bc->depth);
	printf("| %s | %s | %s | %s – %s | %.2f |\n", bc->name, mode, thousands(m, a, sizeof(a)),
	       thousands(lo, b, sizeof(b)), thousands(hi, c, sizeof(c)),
	       median(bc->usec, rounds, NULL, NULL));
}

static void print_machine(const struct redis_conn *c, const struct options *o, long ops1, long opsn)
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
	printf("machine: %ld CPUs online (%s); Redis %s on %s, one connection, the client and "
	       "the server on the same machine\n\n",
	       sysconf(_SC_NPROCESSORS_ONLN), model, redis_conn_server_version(c),
	       o->tcp ? "loopback TCP" : "a unix socket");
	printf("%d round(s) of %ld commands one at a time and %ld pipelined per case, the cases "
	       "interleaved; the median ops/s and its range, and the median of Redis' own "
	       "usec_per_call (INFO commandstats)\n\n",
	       o->rounds, ops1, opsn);
}

static int parse(int argc, char **argv, struct options *o)
{
	*o = (struct options){ .rounds = 3, .depth = 64 };
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--quick") == 0)
			o->quick = true;
		else if (strcmp(argv[i], "--tcp") == 0)
			o->tcp = true;
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

static bool up;

static void print_command(int argc, char **argv)
{
	printf("## conn_redis_bench\n\ncommand:");
	for (int i = 0; i < argc; i++)
		printf(" %s", argv[i]);
	printf("\n\n");
	fflush(stdout);
}

static void event_cb(struct redis_conn *conn, const struct redis_conn_event *ev, void *data)
{
	up = ev->type == REDIS_CONN_UP;
}

/* Connects to the embedded server with the benchmark's script registered; exits on failure. */
static struct redis_conn *connect_bench(uv_loop_t *loop, const struct embedded *e, bool tcp,
					struct redis_scripts *reg)
{
	char url[300];
	struct redis_conn *c;

	if (tcp)
		snprintf(url, sizeof(url), "redis://127.0.0.1:%d", e->redis_port);
	else
		snprintf(url, sizeof(url), "%s", e->redis_url);
	struct redis_conn_options o = {
		.url = url,
		.name = "bench",
		.connect_timeout_ms = 10000,
		.command_timeout_ms = 60000,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 1000,
		.scripts = reg,
		.event_cb = event_cb,
	};
	if (redis_conn_new(loop, &o, &c) < 0 || redis_conn_start(c) < 0)
		exit(1);
	uint64_t deadline = uv_hrtime() + 30000000000ull;
	while (!up && uv_hrtime() < deadline)
		uv_run(loop, UV_RUN_ONCE);
	if (!up) {
		fprintf(stderr, "could not connect to %s\n", url);
		exit(1);
	}
	return c;
}

static void run_cases(uv_loop_t *loop, struct redis_conn *c, const struct redis_script *s,
		      struct bench_case *cases, int n, int rounds)
{
	for (int i = 0; i < n; i++) { /* warm-up, untimed */
		long ops = cases[i].ops;
		cases[i].ops = ops / 10;
		measure(loop, c, s, &cases[i], -1);
		cases[i].ops = ops;
	}
	for (int r = 0; r < rounds; r++) {
		for (int i = 0; i < n; i++)
			measure(loop, c, s, &cases[i], r);
	}
}

int main(int argc, char **argv)
{
	struct options o;
	struct embedded e;
	struct embedded_options eo = { .redis = true };
	struct redis_scripts *reg;
	const struct redis_script *s;
	uv_loop_t loop;

	if (parse(argc, argv, &o) < 0) {
		fprintf(stderr, "usage: %s [--quick] [--tcp] [--rounds 1..%d] [--depth N]\n",
			argv[0], MAX_ROUNDS);
		return 2;
	}
	log_set_level(LOG_WARN);
	print_command(argc, argv);
	eo.tcp = o.tcp;
	if (embedded_start(&e, &eo) < 0 || redis_scripts_new(&reg) < 0 ||
	    redis_scripts_add(reg, &bench_redis_lua[0], 0, &s) < 0)
		return 1;
	uv_loop_init(&loop);
	struct redis_conn *c = connect_bench(&loop, &e, o.tcp, reg);
	long ops1 = o.quick ? 5000 : 50000, opsn = o.quick ? 50000 : 500000;
	struct bench_case cases[] = {
		{ "INCR", "incr", false, 1, ops1, { 0 }, { 0 } },
		{ "INCR", "incr", false, o.depth, opsn, { 0 }, { 0 } },
		{ "EVALSHA bench_incr.lua", "evalsha", true, 1, ops1, { 0 }, { 0 } },
		{ "EVALSHA bench_incr.lua", "evalsha", true, o.depth, opsn, { 0 }, { 0 } },
	};
	int n = (int)(sizeof(cases) / sizeof(cases[0]));
	print_machine(c, &o, ops1, opsn);
	run_cases(&loop, c, s, cases, n, o.rounds);
	printf("| command | mode | ops/s (median) | range | Redis µs/call |\n");
	printf("|---|---|---|---|---|\n");
	for (int i = 0; i < n; i++)
		print_row(&cases[i], o.rounds);
	redis_conn_close(c, NULL, NULL);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
	redis_scripts_free(reg);
	embedded_stop(&e);
	return 0;
}
