/* conn_http_bench: requests per second of the HTTP client (common/http_client.c) against the
 * provider stub's POST /calls (SPEC D0 body, a unique Idempotency-Key per request), at several
 * concurrencies, with connection reuse (keep-alive) on and forced off (CURLOPT_FORBID_REUSE),
 * and with kept easy handles on and off (http_client_config.idle_handles). Prints markdown
 * rows; the figures are in bench/RESULTS.md.
 *
 * The stub is this repository's code (stub_dep), started per run in a forked child process
 * with its own loop, so that client and stub each have a core; --same-loop runs it on the
 * client's loop and thread instead. Each run gets a fresh stub (hold mode, events dropped: the
 * figure is the dial path alone, as in bench/wrk/run.sh).
 *
 *   conn_http_bench [--quick] [--seconds S] [--rounds N] [--same-loop]
 */
#include "http_client.h"
#include "stub.h"

#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ROUNDS 20

struct opts {
	double seconds; /* measured time per run */
	int rounds;	/* runs of every cell, interleaved */
	bool same_loop; /* the stub on the client's loop instead of a child process */
};

struct cell {
	int conc;		 /* requests kept in flight */
	bool keep_alive;	 /* false: CURLOPT_FORBID_REUSE, a new connection per request */
	bool keep_handles;	 /* false: idle_handles 0, a new easy handle per request */
	double rate[MAX_ROUNDS]; /* requests/s of each round */
	double cpu[MAX_ROUNDS];	 /* this process's CPU µs (user + sys) per request, each round */
	uint64_t requests, failed, connections, accepted, handles; /* the last round's */
};

/* One measured run: conc chains of requests, each answer sending the next until the deadline. */
struct run {
	uv_loop_t loop;
	struct http_client *client;
	struct stub *stub; /* --same-loop only */
	char url[64], cb_url[64];
	int id;				   /* distinguishes the keys of the runs */
	uint64_t deadline, started, ended; /* uv_hrtime() ns */
	uint64_t sent, ok, failed;
	unsigned inflight;
	cJSON *stats;		/* the stub's GET /stats, at the end */
	long stats_connections; /* connections the GET /stats itself opened */
};

/* ---- the stub in a child process ---- */

static void on_child_signal(uv_signal_t *sig, int signum)
{
	(void)signum;
	stub_close(sig->data, NULL, NULL);
	uv_close((uv_handle_t *)sig, NULL);
}

static void stub_config_bench(struct stub_config *cfg)
{
	stub_config_defaults(cfg);
	cfg->hold = true;    /* calls stay live: no timelines beyond ringing */
	cfg->drop_pct = 100; /* no event posts */
}

/* The child: a stub on its own loop until SIGTERM; writes its port to fd. Never returns. */
static void stub_child(int fd)
{
	uv_loop_t loop;
	uv_signal_t sig;
	struct stub_config cfg;
	struct stub *s;
	int port = -1;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	uv_loop_init(&loop);
	stub_config_bench(&cfg);
	if (stub_new(&loop, &cfg, &s) == 0)
		port = stub_port(s);
	if (write(fd, &port, sizeof(port)) != sizeof(port) || port < 0)
		_exit(1);
	close(fd);
	uv_signal_init(&loop, &sig);
	sig.data = s;
	uv_signal_start(&sig, on_child_signal, SIGTERM);
	uv_run(&loop, UV_RUN_DEFAULT);
	_exit(0);
}

/* Forks a stub child; returns its pid and *port, or -1. */
static pid_t stub_spawn(int *port)
{
	int fds[2];
	pid_t pid;
	struct pollfd p;

	if (pipe(fds))
		return -1;
	fflush(stdout);
	if ((pid = fork()) == 0) {
		close(fds[0]);
		stub_child(fds[1]);
	}
	close(fds[1]);
	p = (struct pollfd){ .fd = fds[0], .events = POLLIN };
	if (pid < 0 || poll(&p, 1, 10000) != 1 ||
	    read(fds[0], port, sizeof(*port)) != sizeof(*port) || *port < 0) {
		if (pid > 0) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
		}
		pid = -1;
	}
	close(fds[0]);
	return pid;
}

/* ---- the client side ---- */

static void send_one(struct run *r);

static void on_answer(const struct http_client_response *resp, void *data)
{
	struct run *r = data;

	r->inflight--;
	if (resp->cls == HTTP_CLIENT_OK && resp->status == 201)
		r->ok++;
	else
		r->failed++;
	r->ended = uv_hrtime();
	if (r->ended < r->deadline)
		send_one(r); /* from the callback: the same-turn path a dispatcher takes */
}

static void send_one(struct run *r)
{
	char key[64], hk[96], body[512];
	const char *headers[] = { "Content-Type: application/json", hk };
	uint64_t n = r->sent++;
	int len;

	snprintf(key, sizeof(key), "bench-%d-%llu", r->id, (unsigned long long)n);
	snprintf(hk, sizeof(hk), "Idempotency-Key: %s", key);
	len = snprintf(
		body, sizeof(body),
		"{\"to\":\"+15551230000\",\"from\":null,\"org_id\":\"org-%llu\","
		"\"campaign_id\":\"camp-%llu\",\"agent_id\":\"agent-1\",\"contact_id\":\"%s\","
		"\"attempt\":1,\"callback_url\":\"%s\"}",
		(unsigned long long)(n % 10), (unsigned long long)(n % 50), key, r->cb_url);
	struct http_client_request req = { .method = "POST",
					   .url = r->url,
					   .headers = headers,
					   .nheaders = 2,
					   .body = body,
					   .body_len = (size_t)len };
	if (http_client_send(r->client, &req, on_answer, r, NULL) == 0)
		r->inflight++;
	else
		r->failed++;
}

static void on_stats(const struct http_client_response *resp, void *data)
{
	struct run *r = data;

	r->inflight--;
	r->stats_connections = resp->new_connections;
	if (resp->cls == HTTP_CLIENT_OK && resp->status == 200)
		r->stats = cJSON_Parse(resp->body);
}

static double stat_of(const struct run *r, const char *name)
{
	const cJSON *j = cJSON_GetObjectItemCaseSensitive(r->stats, name);

	return cJSON_IsNumber(j) ? j->valuedouble : -1;
}

/* This process's CPU time so far (user + sys), in µs. */
static double cpu_us(void)
{
	struct rusage u;

	getrusage(RUSAGE_SELF, &u);
	return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1e6 +
	       (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

static void run_until_idle(struct run *r)
{
	while (r->inflight)
		uv_run(&r->loop, UV_RUN_ONCE);
}

static void on_client_closed(struct http_client *c, void *data)
{
	(void)c;
	*(bool *)data = true;
}

/* Measures one cell once against the stub on port (or, port 0, one on the run's loop). */
static int run_cell(struct cell *cl, int round, int id, const struct opts *o, int port)
{
	struct run r = { .id = id };
	struct http_client_config cc;
	struct http_client_stats st;
	bool closed = false;

	uv_loop_init(&r.loop);
	if (!port) {
		struct stub_config sc;
		stub_config_bench(&sc);
		if (stub_new(&r.loop, &sc, &r.stub))
			return -1;
		port = stub_port(r.stub);
	}
	snprintf(r.url, sizeof(r.url), "http://127.0.0.1:%d/calls", port);
	snprintf(r.cb_url, sizeof(r.cb_url), "http://127.0.0.1:9/events");
	http_client_config_defaults(&cc);
	cc.no_proxy = true;
	cc.forbid_reuse = !cl->keep_alive;
	cc.idle_handles = cl->keep_handles ? cc.idle_handles : 0;
	if (http_client_new(&r.loop, &cc, &r.client))
		return -1;
	double cpu0 = cpu_us();
	r.started = uv_hrtime();
	r.deadline = r.started + (uint64_t)(o->seconds * 1e9);
	for (int i = 0; i < cl->conc; i++)
		send_one(&r);
	run_until_idle(&r);
	cl->rate[round] = (double)r.ok / ((double)(r.ended - r.started) / 1e9);
	cl->cpu[round] = (cpu_us() - cpu0) / (double)(r.ok ? r.ok : 1);
	http_client_get_stats(r.client, &st);
	cl->requests = r.ok;
	cl->failed = r.failed;
	cl->connections = st.connections_opened;
	cl->handles = st.handles_created;
	/* The stub's count of accepted connections (one more request, after the measurement). */
	snprintf(r.url, sizeof(r.url), "http://127.0.0.1:%d/stats", port);
	struct http_client_request req = { .url = r.url };
	if (http_client_send(r.client, &req, on_stats, &r, NULL) == 0)
		r.inflight++;
	run_until_idle(&r);
	cl->accepted =
		(uint64_t)(stat_of(&r, "connections_accepted") - (double)r.stats_connections);
	if (cl->keep_alive && stat_of(&r, "calls_placed") != (double)r.ok)
		fprintf(stderr,
			"conn_http_bench: the stub placed %.0f calls, the client counted %llu\n",
			stat_of(&r, "calls_placed"), (unsigned long long)r.ok);
	cJSON_Delete(r.stats);
	http_client_close(r.client, on_client_closed, &closed);
	if (r.stub)
		stub_close(r.stub, NULL, NULL);
	uv_run(&r.loop, UV_RUN_DEFAULT);
	return uv_loop_close(&r.loop) || !closed ? -1 : 0;
}

/* ---- output ---- */

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static void print_header(int argc, char **argv, const struct opts *o)
{
	printf("# conn_http_bench: the HTTP client against the provider stub's POST "
	       "/calls\n\ncommand:");
	for (int i = 0; i < argc; i++)
		printf(" %s", argv[i]);
	printf("\nmachine: %ld CPUs online, libcurl %s, libuv %s, build: %s\n",
	       sysconf(_SC_NPROCESSORS_ONLN), curl_version_info(CURLVERSION_NOW)->version,
	       uv_version_string(),
#if defined(__SANITIZE_ADDRESS__)
	       "sanitizers (figures not meaningful)"
#elif defined(__OPTIMIZE__)
	       "optimized"
#else
	       "not optimized (figures not meaningful)"
#endif
	);
	printf("stub: %s\n",
	       o->same_loop
		       ? "in-process, on the client's loop and thread (one core for both)"
		       : "forked child process with its own loop (client and stub: a core each)");
	printf("each run: %.1f s; %d round(s), cells interleaved; a fresh stub per run (hold mode, "
	       "events dropped); a unique Idempotency-Key per request; each answer sends the next "
	       "request from its callback\n\n",
	       o->seconds, o->rounds);
	printf("| concurrency | keep-alive | easy handles | requests/s (median) | min – max | "
	       "%s CPU µs/request (median) | requests (last run) | connections opened | "
	       "stub accepted | easy handles made |\n",
	       o->same_loop ? "process (client + stub)" : "client");
	printf("|---|---|---|---|---|---|---|---|---|---|\n");
}

static void print_row(struct cell *cl, int rounds)
{
	double r[MAX_ROUNDS], u[MAX_ROUNDS];

	memcpy(r, cl->rate, sizeof(r));
	memcpy(u, cl->cpu, sizeof(u));
	qsort(r, (size_t)rounds, sizeof(double), cmp_double);
	qsort(u, (size_t)rounds, sizeof(double), cmp_double);
	printf("| %d | %s | %s | %.0f | %.0f – %.0f | %.1f | %llu%s | %llu | %llu | %llu |\n",
	       cl->conc, cl->keep_alive ? "on" : "off (FORBID_REUSE)",
	       cl->keep_handles ? "kept (idle_handles 16)" : "one per request", r[rounds / 2], r[0],
	       r[rounds - 1], u[rounds / 2], (unsigned long long)cl->requests,
	       cl->failed ? " (failures!)" : "", (unsigned long long)cl->connections,
	       (unsigned long long)cl->accepted, (unsigned long long)cl->handles);
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
	*o = (struct opts){ .seconds = 2.0, .rounds = 3 };
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--quick") == 0) {
			o->seconds = 0.3;
			o->rounds = 1;
		} else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc) {
			o->seconds = atof(argv[++i]);
		} else if (strcmp(argv[i], "--rounds") == 0 && i + 1 < argc) {
			o->rounds = atoi(argv[++i]);
		} else if (strcmp(argv[i], "--same-loop") == 0) {
			o->same_loop = true;
		} else {
			fprintf(stderr,
				"usage: %s [--quick] [--seconds S] [--rounds N 1..%d] "
				"[--same-loop]\n",
				argv[0], MAX_ROUNDS);
			return -1;
		}
	}
	if (o->seconds <= 0 || o->rounds < 1 || o->rounds > MAX_ROUNDS) {
		fprintf(stderr, "conn_http_bench: --seconds must be > 0, --rounds 1..%d\n",
			MAX_ROUNDS);
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct opts o;
	static const int concs[] = { 1, 16 };
	struct cell cells[8];
	int n = 0, id = 0;

	if (parse_opts(argc, argv, &o))
		return 2;
	signal(SIGPIPE, SIG_IGN);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	for (size_t c = 0; c < sizeof(concs) / sizeof(concs[0]); c++)
		for (int ka = 1; ka >= 0; ka--)
			for (int kh = 1; kh >= 0; kh--)
				cells[n++] = (struct cell){ .conc = concs[c],
							    .keep_alive = ka,
							    .keep_handles = kh };
	print_header(argc, argv, &o);
	for (int round = 0; round < o.rounds; round++) {
		for (int i = 0; i < n; i++) {
			int port = 0;
			pid_t pid = o.same_loop ? 0 : stub_spawn(&port);
			if (pid < 0 || run_cell(&cells[i], round, ++id, &o, port)) {
				fprintf(stderr, "conn_http_bench: run %d failed\n", id);
				return 1;
			}
			if (pid > 0) {
				kill(pid, SIGTERM);
				waitpid(pid, NULL, 0);
			}
		}
	}
	for (int i = 0; i < n; i++)
		print_row(&cells[i], o.rounds);
	curl_global_cleanup();
	return 0;
}
