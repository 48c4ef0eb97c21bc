/* `dispatcher run`'s SIGTERM drain and lane stop (issue 9, review defects 2, 11): a private
 * PostgreSQL and Redis per test, the provider stub in a child process, one worker process.
 * - drain_answers_a_late_refusal: an admission in flight when the drain starts and answered
 *   refused afterwards (Redis paused under it) is withdrawn: the drain finishes, exit 0. The
 *   worker talks to Redis through a small proxy of the test's that counts admissions sent.
 * - stopped_lane_claims_nothing: while the org's lane is stopped (401), nothing is claimed. */
#include "error.h"
#include "fixture.h"
#include "gate.h"
#include "redis_script.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <hiredis/hiredis.h>

#include "worker_proc.h"

#define WAIT_MS 120000

static struct embedded svc;
static PGconn *db;
static pid_t worker_pid;
static struct wproc_stub stub;

static double stub_stat(const char *path)
{
	return wproc_stat(&stub, path);
}

static long long sql_int(const char *q)
{
	return wproc_sql_int(db, q);
}

/* The stub (hold mode unless told) and the worker's environment; starts the worker. */
/* A pass-through proxy between the worker and Redis that counts the EVALSHAs of the gate's
 * admission script going to the server: the only way to know, from outside, that an admission
 * was sent (CLIENT LIST does not show a held command's arguments). */
#define PROXY_MAX 16
static struct {
	int listen_fd, port, wake[2];
	char sha[41];
	atomic_int admissions; /* admission EVALSHAs forwarded to the server */
	pthread_t thread;
	bool on;
} px;

/* Counts sha in the bytes of one direction, with the previous chunk's tail (tail, 40 bytes
 * kept per connection) so that a SHA split across two reads is seen once. */
static void px_count(char *tail, const char *buf, size_t n)
{
	char joined[40 + 65536];
	size_t t = strlen(tail);

	memcpy(joined, tail, t);
	memcpy(joined + t, buf, n);
	for (size_t i = 0; i + 40 <= t + n; i++)
		if (i + 40 > t && memcmp(joined + i, px.sha, 40) == 0)
			atomic_fetch_add(&px.admissions, 1);
	size_t keep = t + n < 39 ? t + n : 39;
	memcpy(tail, joined + t + n - keep, keep);
	tail[keep] = '\0';
}

static void *px_run(void *arg)
{
	struct pollfd p[2 + 2 * PROXY_MAX];
	char tails[PROXY_MAX][41] = { { 0 } };
	int n = 0; /* pairs: p[2 + 2i] the worker's side, p[3 + 2i] the server's */
	const char *path = strstr(svc.redis_url, "unix://") + 7;

	(void)arg;
	p[0] = (struct pollfd){ .fd = px.listen_fd, .events = POLLIN };
	p[1] = (struct pollfd){ .fd = px.wake[0], .events = POLLIN };
	for (;;) {
		if (poll(p, (nfds_t)(2 + 2 * n), -1) < 0)
			continue;
		if (p[1].revents)
			break;
		if ((p[0].revents & POLLIN) && n < PROXY_MAX) {
			int c = accept(px.listen_fd, NULL, NULL);
			int sfd = socket(AF_UNIX, SOCK_STREAM, 0);
			struct sockaddr_un sa = { .sun_family = AF_UNIX };
			snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path);
			if (c >= 0 && sfd >= 0 && connect(sfd, (void *)&sa, sizeof(sa)) == 0) {
				p[2 + 2 * n] = (struct pollfd){ .fd = c, .events = POLLIN };
				p[3 + 2 * n] = (struct pollfd){ .fd = sfd, .events = POLLIN };
				tails[n][0] = '\0';
				n++;
			} else {
				close(c);
				close(sfd);
			}
		}
		for (int i = 0; i < 2 * n; i++) {
			struct pollfd *from = &p[2 + i], *to = &p[2 + (i ^ 1)];
			char buf[65536];
			if (!from->revents)
				continue;
			ssize_t got = read(from->fd, buf, sizeof(buf));
			if (got <= 0) { /* either side gone: close the pair */
				int pair = i / 2;
				close(p[2 + 2 * pair].fd);
				close(p[3 + 2 * pair].fd);
				n--;
				p[2 + 2 * pair] = p[2 + 2 * n];
				p[3 + 2 * pair] = p[3 + 2 * n];
				memcpy(tails[pair], tails[n], sizeof(tails[pair]));
				break; /* the set changed: poll again */
			}
			if (i % 2 == 0)
				px_count(tails[i / 2], buf, (size_t)got);
			for (ssize_t off = 0; off < got;) {
				ssize_t w = write(to->fd, buf + off, (size_t)(got - off));
				if (w <= 0)
					break;
				off += w;
			}
		}
	}
	for (int i = 0; i < 2 * n; i++)
		close(p[2 + i].fd);
	return NULL;
}

/* Starts the proxy on a free loopback port; the admission script's SHA comes from the gate's
 * own registry (guard included), as the worker loads it. */
static void px_start(void)
{
	struct redis_scripts *reg;
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);

	assert_int_equal(redis_scripts_new(&reg), 0);
	assert_int_equal(gate_scripts_register(reg), 0);
	const struct redis_script *admit = redis_scripts_find(reg, "gate_admit.lua");
	assert_non_null(admit);
	snprintf(px.sha, sizeof(px.sha), "%s", redis_script_sha(admit));
	redis_scripts_free(reg);
	atomic_store(&px.admissions, 0);
	px.listen_fd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(px.listen_fd >= 0);
	assert_int_equal(bind(px.listen_fd, (void *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(px.listen_fd, 16), 0);
	assert_int_equal(getsockname(px.listen_fd, (void *)&sa, &len), 0);
	px.port = ntohs(sa.sin_port);
	assert_int_equal(pipe(px.wake), 0);
	assert_int_equal(pthread_create(&px.thread, NULL, px_run, NULL), 0);
	px.on = true;
}

static void px_stop(void)
{
	if (!px.on)
		return;
	px.on = false;
	assert_true(write(px.wake[1], "x", 1) == 1);
	pthread_join(px.thread, NULL);
	close(px.listen_fd);
	close(px.wake[0]);
	close(px.wake[1]);
}

/* What start() gives the worker; the late-refusal test widens the two deadlines. */
static const char *log_level, *drain_seconds = "8", *redis_command_ms = "10000";

static pid_t start(bool hold, const char *token)
{
	char env[256];
	int port = wproc_free_port();
	struct stub_config sc;

	wproc_seed_small(db);
	stub_config_defaults(&sc);
	sc.hold = hold;
	sc.token = token;
	wproc_stub_start(&stub, &sc);
	snprintf(env, sizeof(env), "http://127.0.0.1:%d", stub.port);
	setenv("PROVIDER_URL", env, 1);
	setenv("PROVIDER_WEBHOOK_SECRET", "stub-secret", 1);
	snprintf(env, sizeof(env), "127.0.0.1:%d", port);
	setenv("DISPATCHER_LISTEN", env, 1);
	if (!log_level)
		log_level = getenv("TEST_LOG_LEVEL") ? getenv("TEST_LOG_LEVEL") : "warn";
	setenv("DISPATCHER_LOG_LEVEL", log_level, 1);
	setenv("DISPATCHER_WORKER_ID", "w1", 1);
	if (px.on) {
		snprintf(env, sizeof(env), "redis://127.0.0.1:%d", px.port);
		setenv("REDIS_URL", env, 1);
	} else {
		setenv("REDIS_URL", svc.redis_url, 1);
	}
	setenv("BATCH_DISPATCH_SLOT_WAIT_SECONDS", "1", 1);
	setenv("DISPATCHER_LEASE_SECONDS", "15", 1);
	setenv("DISPATCHER_DRAIN_SECONDS", drain_seconds, 1);
	setenv("DISPATCHER_REDIS_COMMAND_TIMEOUT_MS", redis_command_ms, 1);
	char *args[] = { "run", NULL };
	return worker_pid = fixture_spawn_dispatcher(args, NULL);
}

static void wait_placed(int n)
{
	long long deadline = fixture_now_ms() + WAIT_MS;
	while (stub_stat("calls_placed") < n && fixture_now_ms() < deadline)
		fixture_sleep_ms(50);
	assert_true(stub_stat("calls_placed") >= n);
}

static redisContext *redis(void)
{
	const char *path = strstr(svc.redis_url, "unix://");
	assert_non_null(path);
	redisContext *rc = redisConnectUnix(path + 7);
	assert_true(rc && !rc->err);
	return rc;
}

/* The worker's stderr (its JSON log) goes to a file the test reads: the drain's steps are
 * observed there, not guessed from the clock. */
static char log_path[256];

static pid_t start_logged(bool hold)
{
	snprintf(log_path, sizeof(log_path), "%s/worker-drain.log", svc.dir);
	int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	int saved = dup(STDERR_FILENO);
	assert_true(saved >= 0);
	dup2(fd, STDERR_FILENO);
	pid_t w = start(hold, NULL);
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(fd);
	return w;
}

static bool log_has(const char *text)
{
	int fd = open(log_path, O_RDONLY);
	assert_true(fd >= 0);
	char *all = fixture_read_all(fd);
	bool found = strstr(all, text) != NULL;
	free(all);
	return found;
}

/* Sends one command on the test's own Redis connection; returns the reply (freeReplyObject). */
static redisReply *redis_do(redisContext *rc, const char *cmd)
{
	redisReply *rep = redisCommand(rc, cmd);
	assert_non_null(rep);
	assert_int_not_equal(rep->type, REDIS_REPLY_ERROR);
	return rep;
}

/* Whether the worker's gate connection (client name "gate") is held by the pause: a command of
 * it waits, blocked (flag b). CLIENT LIST is a read, which CLIENT PAUSE WRITE lets through. */
static bool gate_client_blocked(redisContext *rc)
{
	redisReply *rep = redis_do(rc, "CLIENT LIST");
	bool blocked = false;

	for (char *line = rep->str; line && *line && !blocked;) {
		char *end = strchr(line, '\n');
		size_t n = end ? (size_t)(end - line) : strlen(line);
		char buf[1024];
		snprintf(buf, sizeof(buf), "%.*s", (int)n, line);
		const char *flags = strstr(buf, " flags=");
		blocked = strstr(buf, " name=gate ") && flags &&
			  memchr(flags + 7, 'b', strcspn(flags + 7, " ")) != NULL;
		line = end ? end + 1 : NULL;
	}
	freeReplyObject(rep);
	return blocked;
}

#define UNTIL(cond, what)                                                                          \
	do {                                                                                       \
		long long until_ = fixture_now_ms() + WAIT_MS;                                     \
		while (!(cond) && fixture_now_ms() < until_)                                       \
			fixture_sleep_ms(20);                                                      \
		if (!(cond))                                                                       \
			fail_msg("not within %d ms: %s", WAIT_MS, what);                           \
	} while (0)

/* Review defect 2: an admission in flight when the drain starts, answered refused afterwards,
 * must not hold the drain. Every step is made certain rather than timed:
 * - hold mode fills the org's 4 lines, so every admission from then on is refused;
 * - CLIENT PAUSE WRITE (until the test's UNPAUSE) holds every gate script: the test waits
 *   until the worker's gate connection is seen blocked (CLIENT LIST), then until the proxy
 *   forwards an admission EVALSHA after that: queued behind the held command, it can only be
 *   answered after UNPAUSE;
 * - SIGTERM, then the log says the drain started, and the select part of it is not done (it
 *   waits for that admission): "contacts handed back" is absent while Redis is paused;
 * - UNPAUSE: the admission is answered refused during the drain; the drain must finish,
 *   exit 0, with nothing left claimed and no try charged. */
static void drain_answers_a_late_refusal(void **state)
{
	(void)state;
	setenv("DISPATCHER_RECONCILE_SECONDS", "1", 1);
	/* The pause lasts as long as the steps take on a loaded machine: no command deadline may
	 * end it first (a timeout would turn the late refusal into something else), and the
	 * drain's limit (a hung drain exits 1 there) leaves room for the steps under load. */
	log_level = "info";
	redis_command_ms = "60000"; /* the bound */
	drain_seconds = "30";
	px_start();
	pid_t w = start_logged(true);
	log_level = NULL;
	redis_command_ms = "10000";
	drain_seconds = "8";
	wait_placed(4);
	UNTIL(sql_int("SELECT count(*) FROM contacts WHERE state = 'claimed'") > 4,
	      "contacts claimed beyond the 4 placed (admissions being refused)");
	redisContext *rc = redis();
	freeReplyObject(redis_do(rc, "CLIENT PAUSE 600000 WRITE"));
	UNTIL(gate_client_blocked(rc), "the worker's gate connection held by the pause");
	int sent = atomic_load(&px.admissions);
	UNTIL(atomic_load(&px.admissions) > sent,
	      "an admission sent after the gate connection was held");
	long long t = fixture_now_ms();
	kill(w, SIGTERM);
	UNTIL(log_has("drain: stop claiming"), "the drain started");
	assert_true(gate_client_blocked(rc));
	assert_false(log_has("drain: contacts handed back"));
	freeReplyObject(redis_do(rc, "CLIENT UNPAUSE"));
	int code = fixture_wait(w);
	worker_pid = 0;
	print_message("drain: exit %d %lld ms after SIGTERM\n", code, fixture_now_ms() - t);
	redisFree(rc);
	assert_int_equal(code, 0);
	assert_true(log_has("drain: contacts handed back"));
	assert_false(log_has("drain did not finish"));
	assert_int_equal(sql_int("SELECT count(*) FROM contacts WHERE state = 'claimed'"), 0);
	assert_int_equal(sql_int("SELECT coalesce(sum(tries), 0) FROM contacts"), 0);
	wproc_stub_stop(&stub);
	px_stop();
}

static void stopped_lane_claims_nothing(void **state)
{
	(void)state;
	setenv("DISPATCHER_RECONCILE_SECONDS", "1", 1);
	setenv("DISPATCHER_LANE_PROBE_SECONDS", "60", 1);
	setenv("PROVIDER_TOKEN", "wrong", 1);
	pid_t w = start(false, "right"); /* every POST answered 401: the lane stops */
	long long deadline = fixture_now_ms() + WAIT_MS;
	while (sql_int("SELECT count(*) FROM dial_attempts") < 1 && fixture_now_ms() < deadline)
		fixture_sleep_ms(50);
	assert_true(sql_int("SELECT count(*) FROM dial_attempts") >= 1);
	fixture_sleep_ms(2500); /* past the slot wait: what was claimed went back */
	long long a = sql_int("SELECT last_value FROM contacts_lease_token_seq");
	fixture_sleep_ms(3000);
	long long b = sql_int("SELECT last_value FROM contacts_lease_token_seq");
	long long claimed = sql_int("SELECT count(*) FROM contacts WHERE state = 'claimed'");
	print_message("lane stopped: %lld leases taken in 3 s, %lld claimed\n", b - a, claimed);
	kill(w, SIGTERM);
	int code = fixture_wait(w);
	worker_pid = 0;
	unsetenv("PROVIDER_TOKEN");
	unsetenv("DISPATCHER_LANE_PROBE_SECONDS");
	assert_int_equal(code, 0);
	assert_int_equal(b, a);
	assert_int_equal(claimed, 0);
	wproc_stub_stop(&stub);
}

static int setup(void **state)
{
	(void)state;
	fixture_start(&svc, true, true, false, true);
	db = fixture_pg(&svc);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (worker_pid > 0) { /* a failed assertion left it running */
		kill(worker_pid, SIGKILL);
		waitpid(worker_pid, NULL, 0);
		worker_pid = 0;
	}
	wproc_stub_stop(&stub);
	px_stop();
	PQfinish(db);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(drain_answers_a_late_refusal, setup, teardown),
		cmocka_unit_test_setup_teardown(stopped_lane_claims_nothing, setup, teardown),
	};
	curl_global_init(CURL_GLOBAL_DEFAULT);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
