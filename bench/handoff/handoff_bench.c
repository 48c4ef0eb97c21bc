/* handoff_bench: the gate hand-off's latency (issue 8, SPEC C9): a release in one process → the
 * waiter in another process woken (its wake message delivered by handoff.h), and → that waiter
 * admitted (its admission's answer back).
 *
 * Starts a private Redis (common/embedded.h); org limit 1. Per hand-off: the releaser (parent)
 * takes the line with a filler call; the waiter (a forked child with its own loop, Redis
 * connection, gate, subscriber and handoff) is refused and registers (gate_admit wait); the
 * parent reads CLOCK_MONOTONIC and releases the filler (gate_release.lua wakes the waiter and
 * PUBLISHes to its worker's channel); the child reads CLOCK_MONOTONIC in its wake callback,
 * re-tries the admission (admitted), releases, and sends its two times back through a pipe.
 * One hand-off at a time; the table gives p50 / p90 / p99 / max of both intervals.
 *
 *   handoff_bench [--quick] [--n N]
 */
#include "embedded.h"
#include "gate.h"
#include "handoff.h"
#include "log.h"
#include "redis_conn.h"
#include "redis_sub.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ORG "h1"

struct side {
	uv_loop_t loop;
	struct redis_scripts *reg;
	struct redis_conn *conn;
	struct gate *g;
	int answers, status, outcome;
};

struct child {
	struct side s;
	struct redis_sub *sub;
	struct handoff *h;
	char call[32];
	int64_t woken_ns;
	int phase; /* 0 waiting, 1 woken (admission sent), 2 admitted, 3 released */
};

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void run_until(uv_loop_t *loop, const int *flag, int want)
{
	while (*flag < want)
		uv_run(loop, UV_RUN_ONCE);
}

static void done_cb(struct gate *g, int status, void *data)
{
	struct side *s = data;
	s->status = status;
	s->answers++;
}

static void install_cb(struct gate *g, int status, const struct gate_install_result *r, void *data)
{
	done_cb(g, status, data);
}

static void admit_cb(struct gate *g, int status, const struct gate_admit_result *r, void *data)
{
	struct side *s = data;
	s->status = status;
	s->outcome = r ? (int)r->outcome : -1;
	s->answers++;
}

static void release_cb(struct gate *g, int status, const struct gate_release_result *r, void *data)
{
	done_cb(g, status, data);
}

static bool conn_up(struct side *s)
{
	return redis_conn_is_up(s->conn);
}

static int side_open(struct side *s, const char *url, const char *name)
{
	struct redis_conn_options o = {
		.url = url,
		.name = name,
		.connect_timeout_ms = 10000,
		.command_timeout_ms = 60000,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 200,
		.generation_key = GATE_SYS_GEN_KEY,
	};

	memset(s, 0, sizeof(*s));
	uv_loop_init(&s->loop);
	if (redis_scripts_new(&s->reg) || gate_scripts_register(s->reg))
		return -1;
	o.scripts = s->reg;
	if (redis_conn_new(&s->loop, &o, &s->conn) || gate_new(s->conn, s->reg, "hb", &s->g) ||
	    redis_conn_start(s->conn))
		return -1;
	while (!conn_up(s))
		uv_run(&s->loop, UV_RUN_ONCE);
	return 0;
}

static int admit(struct side *s, const char *call, bool wait, const char *worker)
{
	const char *cands[1] = { "A" };
	int want = s->answers + 1;

	if (gate_admit(s->g,
		       &(struct gate_admit_req){ .org = ORG,
						 .call = call,
						 .campaigns = cands,
						 .n_campaigns = 1,
						 .wait = wait,
						 .worker = worker },
		       admit_cb, s))
		return -1;
	run_until(&s->loop, &s->answers, want);
	return s->status ? -1 : s->outcome;
}

static void child_admit_cb(struct gate *g, int status, const struct gate_admit_result *r,
			   void *data)
{
	struct child *c = data;

	if (status || r->outcome != GATE_ADMITTED) {
		fprintf(stderr, "handoff_bench: woken waiter not admitted (%d)\n", status);
		_exit(7);
	}
	c->phase = 2;
}

static void wake_cb(struct handoff *h, const char *org, const char *call, enum handoff_why why,
		    void *data)
{
	struct child *c = data;
	const char *cands[1] = { "A" };

	if (c->phase != 0)
		return;
	c->woken_ns = now_ns();
	c->phase = 1;
	if (gate_admit(c->s.g,
		       &(struct gate_admit_req){ .org = ORG,
						 .call = c->call,
						 .campaigns = cands,
						 .n_campaigns = 1,
						 .wait = true,
						 .worker = handoff_worker(h) },
		       child_admit_cb, c))
		_exit(8);
}

static bool sub_up(struct child *c)
{
	return redis_sub_is_up(c->sub);
}

static void sub_state_cb(struct redis_sub *sub, bool up, void *data)
{
	struct child *c = data;
	if (up && c->h)
		handoff_resubscribed(c->h);
}

/* The waiter's process: for each "go" byte, one hand-off. */
static int child_main(const char *url, int rd, int wr)
{
	static struct child c;
	struct redis_sub_options so = {
		.url = url,
		.name = "waiter-sub",
		.connect_timeout_ms = 10000,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 200,
		.state_cb = sub_state_cb,
		.data = &c,
	};
	char go;

	if (side_open(&c.s, url, "waiter"))
		return 3;
	so.publisher = c.s.conn;
	if (redis_sub_new(&c.s.loop, &so, &c.sub) || redis_sub_start(c.sub))
		return 4;
	if (handoff_new(&(struct handoff_options){ .loop = &c.s.loop,
						   .gate = c.s.g,
						   .sub = c.sub,
						   .worker = "bw1",
						   .heartbeat_ms = 1000,
						   .heartbeat_ttl_ms = 600000 },
			&c.h))
		return 5;
	while (!sub_up(&c))
		uv_run(&c.s.loop, UV_RUN_ONCE);
	for (int i = 0; read(rd, &go, 1) == 1; i++) {
		int64_t t[2];

		snprintf(c.call, sizeof(c.call), "w%d", i);
		c.phase = 0;
		if (handoff_add(c.h, ORG, c.call, wake_cb, &c))
			return 6;
		if (admit(&c.s, c.call, true, "bw1") != GATE_REFUSED)
			return 9;
		if (write(wr, "r", 1) != 1) /* registered */
			return 10;
		run_until(&c.s.loop, &c.phase, 2);
		t[0] = c.woken_ns;
		t[1] = now_ns();
		handoff_remove(c.h, c.call);
		int want = c.s.answers + 1;
		if (gate_release(c.s.g, ORG, c.call, release_cb, &c.s))
			return 11;
		run_until(&c.s.loop, &c.s.answers, want);
		if (write(wr, t, sizeof(t)) != sizeof(t))
			return 12;
	}
	return 0;
}

static int cmp(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
	return x < y ? -1 : x > y;
}

static void print_row(const char *what, int64_t *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp);
	printf("| %s | %d | %.1f | %.1f | %.1f | %.1f |\n", what, n, v[n / 2] / 1000.0,
	       v[(int)(n * 0.9)] / 1000.0, v[(int)(n * 0.99)] / 1000.0, v[n - 1] / 1000.0);
}

int main(int argc, char **argv)
{
	struct embedded e;
	struct side p;
	int n = 3000, to_child[2], to_parent[2], rc = 1;
	pid_t pid;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--quick") == 0)
			n = 300;
		else if (strcmp(argv[i], "--n") == 0 && i + 1 < argc)
			n = atoi(argv[++i]);
		else
			return fprintf(stderr, "usage: %s [--quick] [--n N]\n", argv[0]), 2;
	}
	if (n < 10)
		n = 10;
	log_set_level(LOG_WARN);
	if (embedded_start(&e, &(struct embedded_options){ .redis = true }) < 0)
		return 1;
	if (side_open(&p, e.redis_url, "releaser"))
		goto out;
	int want = p.answers + 1;
	if (gate_system_init(p.g, 1, 1000, done_cb, &p))
		goto out;
	run_until(&p.loop, &p.answers, want);
	want = p.answers + 1;
	if (gate_org_rebuild(p.g, ORG, NULL, 0, done_cb, &p))
		goto out;
	run_until(&p.loop, &p.answers, want);
	want = p.answers + 1;
	if (gate_install_limits(
		    p.g, ORG,
		    &(struct gate_limits){
			    .version = 1,
			    .org_limit = 1,
			    .enforced = true,
			    .campaigns = &(struct gate_campaign_limits){ .campaign = "A" },
			    .n_campaigns = 1 },
		    install_cb, &p))
		goto out;
	run_until(&p.loop, &p.answers, want);
	if (pipe(to_child) || pipe(to_parent))
		goto out;
	fflush(NULL);
	pid = fork();
	if (pid == 0) {
		close(to_child[1]);
		close(to_parent[0]);
		_exit(child_main(e.redis_url, to_child[0], to_parent[1]));
	}
	close(to_child[0]);
	close(to_parent[1]);

	int64_t *wake = calloc((size_t)n, sizeof(int64_t)),
		*adm = calloc((size_t)n, sizeof(int64_t));
	int warm = n / 10, done = 0;
	for (int i = 0; i < n + warm; i++) {
		char call[32], r;
		int64_t t0, t[2];

		snprintf(call, sizeof(call), "f%d", i);
		if (admit(&p, call, false, NULL) != GATE_ADMITTED)
			goto stop;
		if (write(to_child[1], "g", 1) != 1 || read(to_parent[0], &r, 1) != 1)
			goto stop;
		want = p.answers + 1;
		t0 = now_ns();
		if (gate_release(p.g, ORG, call, release_cb, &p))
			goto stop;
		run_until(&p.loop, &p.answers, want);
		if (read(to_parent[0], t, sizeof(t)) != sizeof(t))
			goto stop;
		if (i >= warm) {
			wake[done] = t[0] - t0;
			adm[done] = t[1] - t0;
			done++;
		}
	}
	printf("## handoff_bench\n\ncommand:");
	for (int i = 0; i < argc; i++)
		printf(" %s", argv[i]);
	printf("\n\nhand-offs: %d (after %d untimed), one at a time, Redis %s\n\n", done, warm,
	       redis_conn_server_version(p.conn));
	printf("| interval | n | p50 µs | p90 µs | p99 µs | max µs |\n|---|---|---|---|---|---|\n");
	print_row("release sent → waiter woken (other process)", wake, done);
	print_row("release sent → waiter admitted (other process)", adm, done);
	rc = 0;
stop:
	close(to_child[1]);
	waitpid(pid, NULL, 0);
	free(wake);
	free(adm);
out:
	embedded_stop(&e);
	return rc;
}
