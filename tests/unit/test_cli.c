/* The dispatcher's command line: help, version, refusal of bad settings (naming the setting and
 * its bound), and the README's configuration table being the one the binary prints. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

struct run {
	int code;
	char out[16384];
	char err[4096];
};

static void drain(int fd, char *buf, size_t cap)
{
	size_t len = 0;
	ssize_t n;

	while (len + 1 < cap && ((n = read(fd, buf + len, cap - 1 - len)) > 0 || errno == EINTR))
		len += n > 0 ? (size_t)n : 0;
	buf[len] = '\0';
	close(fd);
}

/* Runs the dispatcher with args and env (NAME=value strings, NULL-terminated). */
static void run(struct run *r, char *const args[], char *const env[])
{
	const char *bin = getenv("DSP_DISPATCHER");
	int out[2], err[2];
	char *argv[8] = { (char *)bin };
	/* args is NULL-terminated, at most 6 */

	assert_non_null(bin);
	for (int i = 0; args[i] && i < 6; i++)
		argv[i + 1] = args[i];
	assert_int_equal(pipe(out), 0);
	assert_int_equal(pipe(err), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(60); /* survives execve: a command that hangs dies (exit 128) */
		dup2(out[1], STDOUT_FILENO);
		dup2(err[1], STDERR_FILENO);
		close(out[0]);
		close(err[0]);
		execve(bin, argv, env);
		_exit(127);
	}
	close(out[1]);
	close(err[1]);
	drain(out[0], r->out, sizeof(r->out)); /* outputs are small: no deadlock on err */
	drain(err[0], r->err, sizeof(r->err));
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	r->code = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

static void help_and_version(void **state)
{
	static struct run r;
	char *noenv[] = { NULL };
	char *help[] = { "--help", NULL };
	char *version[] = { "--version", NULL };
	char *none[] = { NULL };
	char *bogus[] = { "frobnicate", NULL };

	run(&r, help, noenv);
	assert_int_equal(r.code, 0);
	assert_non_null(strstr(r.out, "migrate"));
	assert_non_null(strstr(r.out, "BATCH_DISPATCH_SLOT_WAIT_SECONDS"));
	run(&r, version, noenv);
	assert_int_equal(r.code, 0);
	assert_non_null(strstr(r.out, "dispatcher "));
	run(&r, none, noenv);
	assert_int_equal(r.code, 2);
	run(&r, bogus, noenv);
	assert_int_equal(r.code, 2);
	assert_non_null(strstr(r.err, "frobnicate"));
}

/* Every command refuses what it does not know, before reading any setting (exit 2). */
static void unknown_arguments_are_refused(void **state)
{
	static struct run r;
	char *noenv[] = { NULL };
	char *const cases[][4] = {
		{ "config", "--bogus", NULL },
		{ "config", "--markdown", "--markdown", NULL },
		{ "config", "extra", NULL },
		{ "migrate", "--status", "now", NULL },
		{ "migrate", "--markdown", NULL },
		{ "migrate", "-x", NULL },
		{ "--help", "migrate", NULL },
		{ "--version", "--help", NULL },
		{ "-h", "x", NULL },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		run(&r, cases[i], noenv);
		if (r.code != 2)
			fail_msg("%s %s: exit %d, want 2", cases[i][0], cases[i][1], r.code);
	}
	char *ok[] = { "config", "--markdown", NULL };
	run(&r, ok, noenv);
	assert_int_equal(r.code, 0);
}

/* The operator listener (/metrics, /healthz) off loopback needs DISPATCHER_ADMIN_TOKEN: refused
 * at start without it (exit 2, naming both settings); loopback and off need none. */
static void operator_listener_off_loopback_needs_token(void **state)
{
	static struct run r;
	char *cfg[] = { "config", NULL };
	static const struct {
		const char *listen, *token;
		int code;
	} cases[] = {
		{ "DISPATCHER_OPERATOR_LISTEN=127.0.0.1:9464", NULL, 0 },
		{ "DISPATCHER_OPERATOR_LISTEN=127.10.0.1:9464", NULL, 0 },
		{ "DISPATCHER_OPERATOR_LISTEN=[::1]:9464", NULL, 0 },
		{ "DISPATCHER_OPERATOR_LISTEN=[::ffff:127.0.0.1]:9464", NULL, 0 },
		{ "DISPATCHER_OPERATOR_LISTEN=off", NULL, 0 },
		{ "DISPATCHER_OPERATOR_LISTEN=0.0.0.0:9464", NULL, 2 },
		{ "DISPATCHER_OPERATOR_LISTEN=10.1.2.3:9464", NULL, 2 },
		{ "DISPATCHER_OPERATOR_LISTEN=[::]:9464", NULL, 2 },
		{ "DISPATCHER_OPERATOR_LISTEN=[::ffff:10.0.0.1]:9464", NULL, 2 },
		{ "DISPATCHER_OPERATOR_LISTEN=128.0.0.1:9464", NULL, 2 },
		{ "DISPATCHER_OPERATOR_LISTEN=0.0.0.0:9464", "DISPATCHER_ADMIN_TOKEN=s3cret", 0 },
		{ "DISPATCHER_OPERATOR_LISTEN=[::]:9464", "DISPATCHER_ADMIN_TOKEN=s3cret", 0 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *env[] = { (char *)cases[i].listen, (char *)cases[i].token, NULL };
		run(&r, cfg, env);
		if (r.code != cases[i].code)
			fail_msg("%s %s: exit %d, want %d (%s)", cases[i].listen,
				 cases[i].token ? cases[i].token : "", r.code, cases[i].code,
				 r.err);
		if (cases[i].code) {
			assert_non_null(strstr(r.err, "DISPATCHER_OPERATOR_LISTEN"));
			assert_non_null(strstr(r.err, "DISPATCHER_ADMIN_TOKEN"));
			assert_non_null(strstr(r.err, "loopback"));
		}
	}
}

/* Text settings must parse as what they name; each refusal names the setting (exit 2). */
static void text_settings_are_checked(void **state)
{
	static struct run r;
	char *cfg[] = { "config", NULL };
	static const struct {
		const char *env;
		int code;
	} cases[] = {
		{ "DISPATCHER_LISTEN=127.0.0.1:8080", 0 },
		{ "DISPATCHER_LISTEN=0.0.0.0:1", 0 },
		{ "DISPATCHER_LISTEN=[::1]:65535", 0 },
		{ "DISPATCHER_LISTEN=garbage", 2 },
		{ "DISPATCHER_LISTEN=127.0.0.1", 2 },
		{ "DISPATCHER_LISTEN=127.0.0.1:0", 2 },
		{ "DISPATCHER_LISTEN=127.0.0.1:65536", 2 },
		{ "DISPATCHER_LISTEN=127.0.0.1:80x", 2 },
		{ "DISPATCHER_LISTEN=::1:8080", 2 },
		{ "DISPATCHER_LISTEN=[::1]8080", 2 },
		{ "DISPATCHER_LISTEN=localhost:8080", 2 },
		{ "DISPATCHER_LISTEN=:8080", 2 },
		{ "REDIS_URL=redis://127.0.0.1:6379/2", 0 },
		{ "REDIS_URL=redis://app:pw@cache", 0 },
		{ "REDIS_URL=unix:///run/redis.sock?db=1", 0 },
		{ "REDIS_URL=garbage", 2 },
		{ "REDIS_URL=redis://h:99999", 2 },
		{ "REDIS_URL=redis://h/db", 2 },
		{ "DATABASE_URL=postgresql://u@h:5432/db", 0 },
		{ "DATABASE_URL=host=/tmp dbname=x", 0 },
		{ "DATABASE_URL=garbage", 2 },
		{ "DATABASE_URL=postgresql://h/db?nonsense=1", 2 },
		{ "PROVIDER_URL=http://127.0.0.1:9000/calls", 0 },
		{ "PROVIDER_URL=https://provider.example/v1/calls", 0 },
		{ "PROVIDER_URL=ftp://x/y", 2 },
		{ "PROVIDER_URL=provider", 2 },
		{ "DISPATCHER_PUBLIC_URL=https://dispatch.example/", 0 },
		{ "DISPATCHER_PUBLIC_URL=dispatch.example", 2 },
		{ "DISPATCHER_WORKER_ID=w 1", 2 },
		/* The worker's parts take [A-Za-z0-9_-]{1,64} only: anything else is refused
		 * here, by name, not with "worker: cannot build: Invalid argument" (exit 1). */
		{ "DISPATCHER_WORKER_ID=w-1_A", 0 },
		{ "DISPATCHER_WORKER_ID=bench.w1", 2 },
		{ "DISPATCHER_WORKER_ID=w:1", 2 },
		{ "DISPATCHER_WORKER_ID="
		  "w1234567890123456789012345678901234567890123456789012345678901234",
		  2 },
		/* The reconciler's period is at most 10 s (SPEC C11); 11 used to pass the table
		 * and fail the worker's build. */
		{ "DISPATCHER_RECONCILE_SECONDS=10", 0 },
		{ "DISPATCHER_RECONCILE_SECONDS=11", 2 },
		/* An empty variable is refused, not taken as unset. */
		{ "DISPATCHER_LISTEN=", 2 },
		{ "DATABASE_URL=", 2 },
		{ "BATCH_DISPATCH_SLOT_WAIT_SECONDS=", 2 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		char *env[] = { (char *)cases[i].env, NULL };
		run(&r, cfg, env);
		if (r.code != cases[i].code)
			fail_msg("%s: exit %d, want %d (%s)", cases[i].env, r.code, cases[i].code,
				 r.err);
		if (cases[i].code) {
			char name[64];
			snprintf(name, sizeof(name), "%.*s", (int)strcspn(cases[i].env, "="),
				 cases[i].env);
			assert_non_null(strstr(r.err, name));
		}
	}
	/* A garbage DATABASE_URL is a configuration error for migrate too: exit 2, not 1. */
	char *migrate[] = { "migrate", NULL };
	char *garbage[] = { "DATABASE_URL=garbage", NULL };
	run(&r, migrate, garbage);
	assert_int_equal(r.code, 2);
	assert_non_null(strstr(r.err, "DATABASE_URL"));
}

/* A bad value is echoed with its control characters escaped: one line, no terminal escapes. */
static void bad_value_is_escaped(void **state)
{
	static struct run r;
	char *cfg[] = { "config", NULL };
	char *env[] = { "DISPATCHER_LISTEN=a\033[31mb\nc", NULL };
	char *env2[] = { "BATCH_DISPATCH_SLOT_WAIT_SECONDS=1\r\n2", NULL };

	run(&r, cfg, env);
	assert_int_equal(r.code, 2);
	assert_null(strchr(r.err, '\033'));
	assert_int_equal(strchr(r.err, '\n') - r.err, (long)strlen(r.err) - 1);
	assert_non_null(strstr(r.err, "a\\x1b[31mb\\nc"));
	run(&r, cfg, env2);
	assert_int_equal(r.code, 2);
	assert_null(strchr(r.err, '\r'));
	assert_non_null(strstr(r.err, "1\\r\\n2"));
}

/* A loopback listener the kernel accepts on and nobody ever answers: returns its descriptor and
 * writes DATABASE_URL=... for it into url. */
static int black_hole(char *url, size_t size)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_true(fd >= 0);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 8), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	snprintf(url, size, "DATABASE_URL=postgresql://u@127.0.0.1:%d/db", ntohs(a.sin_port));
	return fd;
}

static double seconds_since(const struct timespec *t0)
{
	struct timespec t1;

	clock_gettime(CLOCK_MONOTONIC, &t1);
	return (double)(t1.tv_sec - t0->tv_sec) + (double)(t1.tv_nsec - t0->tv_nsec) / 1e9;
}

/* `dispatcher migrate` against a server that accepts TCP and never answers gives up within
 * DISPATCHER_PG_CONNECT_TIMEOUT_MS (it used to hang for ever; the child's alarm would kill it). */
static void migrate_honours_the_connect_deadline(void **state)
{
	static struct run r;
	char url[128], *migrate[] = { "migrate", NULL };
	int fd = black_hole(url, sizeof(url));
	char *env[] = { url, "DISPATCHER_PG_CONNECT_TIMEOUT_MS=300", NULL };
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	run(&r, migrate, env);
	double took = seconds_since(&t0);
	close(fd);
	if (r.code != 1)
		fail_msg("exit %d, want 1 (%s)", r.code, r.err);
	assert_non_null(strstr(r.err, "300 ms"));
	/* 300 ms asked; a loaded machine gets slack, a hang would be killed at 60 s. */
	assert_true(took < 30);
}

/* `dispatcher run`'s start-up schema check has the same deadline (it used to call PQconnectdb
 * and hang for ever). Redis is never reached: the database is checked first. */
static void run_honours_the_connect_deadline(void **state)
{
	static struct run r;
	char url[128], *cmd[] = { "run", NULL };
	int fd = black_hole(url, sizeof(url));
	char *env[] = { url,
			"DISPATCHER_PG_CONNECT_TIMEOUT_MS=300",
			"PROVIDER_URL=http://127.0.0.1:9/",
			"PROVIDER_WEBHOOK_SECRET=0123456789abcdef0123456789abcdef",
			"REDIS_URL=redis://127.0.0.1:9/0",
			"DISPATCHER_LISTEN=127.0.0.1:9", /* never bound: the check fails first */
			NULL };
	struct timespec t0;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	run(&r, cmd, env);
	double took = seconds_since(&t0);
	close(fd);
	if (r.code == 0 || r.code == 128)
		fail_msg("exit %d after %.1f s, want a refusal (%s)", r.code, took, r.err);
	if (!strstr(r.err, "300 ms"))
		fail_msg("no deadline named: %s", r.err);
	assert_true(took < 30);
}

/* BATCH_DISPATCH_SLOT_WAIT_SECONDS is 1..300: at, below and above both bounds. */
static void bad_setting_is_refused_with_its_bound(void **state)
{
	static struct run r;
	char *cfg[] = { "config", NULL };
	static const struct {
		const char *env;
		int code;
	} cases[] = {
		{ "BATCH_DISPATCH_SLOT_WAIT_SECONDS=0", 2 },
		{ "BATCH_DISPATCH_SLOT_WAIT_SECONDS=1", 0 },
		{ "BATCH_DISPATCH_SLOT_WAIT_SECONDS=15", 0 },
		{ "BATCH_DISPATCH_SLOT_WAIT_SECONDS=300", 0 },
		{ "BATCH_DISPATCH_SLOT_WAIT_SECONDS=301", 2 },
		{ "BATCH_DISPATCH_SLOT_WAIT_SECONDS=fifteen", 2 },
		{ "DISPATCHER_LOG_LEVEL=loud", 2 },
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		/* A long lease, so the slot wait's own bounds are what is tested. */
		char *env[] = { (char *)cases[i].env, "DISPATCHER_LEASE_SECONDS=3600", NULL };
		run(&r, cfg, env);
		if (r.code != cases[i].code)
			fail_msg("%s: exit %d, want %d (%s)", cases[i].env, r.code, cases[i].code,
				 r.err);
		if (cases[i].code) {
			char name[64];
			snprintf(name, sizeof(name), "%.*s", (int)strcspn(cases[i].env, "="),
				 cases[i].env);
			assert_non_null(strstr(r.err, name));
		}
	}
	/* A cross-setting bound: the reconnect cap may not be below the first delay. */
	char *env[] = { "DISPATCHER_RECONNECT_MIN_MS=3000", "DISPATCHER_RECONNECT_MAX_MS=2000",
			NULL };
	run(&r, cfg, env);
	assert_int_equal(r.code, 2);
	assert_non_null(strstr(r.err, "DISPATCHER_RECONNECT_MAX_MS"));
	/* The lease must cover 2 slot waits, the call-row write and one request (issue 9 review
	 * M1): 2 x 15 s + 10 s + 3 s = 43 s; at, above, below. The old bound (15 s + 10 s) let
	 * 26..42 s through, the dialer then assuming time its lease did not have. */
	char *lease_at[] = { "DISPATCHER_LEASE_SECONDS=43", NULL };
	run(&r, cfg, lease_at);
	assert_int_equal(r.code, 0);
	char *lease_above[] = { "DISPATCHER_LEASE_SECONDS=44", NULL };
	run(&r, cfg, lease_above);
	assert_int_equal(r.code, 0);
	char *lease_short[] = { "DISPATCHER_LEASE_SECONDS=42", NULL };
	run(&r, cfg, lease_short);
	assert_int_equal(r.code, 2);
	assert_non_null(strstr(r.err, "DISPATCHER_LEASE_SECONDS"));
	assert_non_null(strstr(r.err, "at least 43 s"));
	assert_non_null(strstr(r.err, "DISPATCHER_PROVIDER_TIMEOUT_MS"));
	assert_non_null(strstr(r.err, "BATCH_DISPATCH_SLOT_WAIT_SECONDS"));
	/* The review's case: lease 30, slot wait 15, timeout 10 s. */
	char *lease_review[] = { "DISPATCHER_LEASE_SECONDS=30", NULL };
	run(&r, cfg, lease_review);
	assert_int_equal(r.code, 2);
	/* The bound follows the slot wait and the timeout: 2 x 1 s + 4 s + 3 s = 9 s. */
	char *lease_small_at[] = { "DISPATCHER_LEASE_SECONDS=9",
				   "BATCH_DISPATCH_SLOT_WAIT_SECONDS=1",
				   "DISPATCHER_PROVIDER_TIMEOUT_MS=4000", NULL };
	run(&r, cfg, lease_small_at);
	assert_int_equal(r.code, 0);
	char *lease_small_short[] = { "DISPATCHER_LEASE_SECONDS=8",
				      "BATCH_DISPATCH_SLOT_WAIT_SECONDS=1",
				      "DISPATCHER_PROVIDER_TIMEOUT_MS=4000", NULL };
	run(&r, cfg, lease_small_short);
	assert_int_equal(r.code, 2);
	char *ttl_short[] = { "DISPATCHER_FLOOR_TTL_SECONDS=2", "DISPATCHER_REFRESH_PERIOD_MS=2000",
			      NULL };
	run(&r, cfg, ttl_short);
	assert_int_equal(r.code, 2);
	assert_non_null(strstr(r.err, "DISPATCHER_FLOOR_TTL_SECONDS"));
}

/* The README's table is exactly `dispatcher config --markdown`. */
static void readme_table_is_current(void **state)
{
	static struct run r;
	static char readme[65536];
	char *md[] = { "config", "--markdown", NULL };
	char *noenv[] = { NULL };
	char path[512];

	run(&r, md, noenv);
	assert_int_equal(r.code, 0);
	snprintf(path, sizeof(path), "%s/README.md", getenv("DSP_SOURCE_ROOT"));
	FILE *f = fopen(path, "r");
	assert_non_null(f);
	size_t n = fread(readme, 1, sizeof(readme) - 1, f);
	readme[n] = '\0';
	fclose(f);
	const char *begin = strstr(readme, "<!-- config-table:begin -->\n");
	const char *end = strstr(readme, "<!-- config-table:end -->");
	assert_non_null(begin);
	assert_non_null(end);
	begin += strlen("<!-- config-table:begin -->\n");
	if ((size_t)(end - begin) != strlen(r.out) || strncmp(begin, r.out, strlen(r.out)) != 0)
		fail_msg("README.md's configuration table is stale; replace it with the output of "
			 "`dispatcher config --markdown`:\n%s",
			 r.out);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(help_and_version),
		cmocka_unit_test(unknown_arguments_are_refused),
		cmocka_unit_test(text_settings_are_checked),
		cmocka_unit_test(operator_listener_off_loopback_needs_token),
		cmocka_unit_test(bad_value_is_escaped),
		cmocka_unit_test(migrate_honours_the_connect_deadline),
		cmocka_unit_test(run_honours_the_connect_deadline),
		cmocka_unit_test(bad_setting_is_refused_with_its_bound),
		cmocka_unit_test(readme_table_is_current),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
