#include "fixture.h"

#include "migrate.h"

#include <errno.h>
#include <setjmp.h>
#include <signal.h>
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

long long fixture_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void fixture_sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

void fixture_start(struct embedded *e, bool pg, bool redis, bool tcp, bool migrate)
{
	struct embedded_options o = { .postgres = pg, .redis = redis, .tcp = tcp };

	/* As the dispatcher's own main does: a test that stops a server must see EPIPE from a
	 * write to its socket (hiredis writes with write(2)), not die of SIGPIPE without a word,
	 * it or the worker processes it forks. */
	signal(SIGPIPE, SIG_IGN);
	assert_int_equal(embedded_start(e, &o), 0);
	if (pg)
		setenv("DATABASE_URL", e->database_url, 1);
	if (redis)
		setenv("REDIS_URL", e->redis_url, 1);
	if (pg && migrate) {
		PGconn *c = fixture_pg(e);
		struct migrate_report r;
		assert_int_equal(migrate_apply(c, &r), 0);
		assert_int_equal(r.ran, r.known);
		PQfinish(c);
	}
}

PGconn *fixture_pg(const struct embedded *e)
{
	PGconn *c = PQconnectdb(e->database_url);

	if (PQstatus(c) != CONNECTION_OK)
		fail_msg("cannot connect to the embedded database: %s", PQerrorMessage(c));
	return c;
}

PGresult *fixture_sql(PGconn *c, const char *sql)
{
	PGresult *res = PQexec(c, sql);
	ExecStatusType st = PQresultStatus(res);

	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
		fail_msg("SQL failed: %s\n%s", sql, PQerrorMessage(c));
	return res;
}

static void tick_cb(uv_timer_t *t)
{
	(void)t;
}

void fixture_run_until(uv_loop_t *loop, bool (*cond)(void *arg), void *arg, long timeout_ms)
{
	uv_timer_t tick;
	long long deadline = fixture_now_ms() + timeout_ms;

	/* A ticker keeps uv_run(ONCE) from blocking for ever and re-checks cond every 5 ms. */
	uv_timer_init(loop, &tick);
	uv_timer_start(&tick, tick_cb, 5, 5);
	while (!cond(arg)) {
		if (fixture_now_ms() > deadline) {
			uv_close((uv_handle_t *)&tick, NULL);
			uv_run(loop, UV_RUN_NOWAIT);
			fail_msg("condition not reached within %ld ms", timeout_ms);
		}
		uv_run(loop, UV_RUN_ONCE);
	}
	uv_close((uv_handle_t *)&tick, NULL);
	uv_run(loop, UV_RUN_NOWAIT);
}

struct count_wait {
	const int *counter;
	int target;
};

static bool count_reached(void *arg)
{
	const struct count_wait *w = arg;
	return *w->counter >= w->target;
}

void fixture_run_until_count(uv_loop_t *loop, const int *counter, int target, long timeout_ms)
{
	struct count_wait w = { counter, target };
	fixture_run_until(loop, count_reached, &w, timeout_ms);
}

static void close_walk_cb(uv_handle_t *h, void *arg)
{
	(void)arg;
	if (!uv_is_closing(h))
		uv_close(h, NULL);
}

void fixture_loop_close(uv_loop_t *loop)
{
	uv_run(loop, UV_RUN_NOWAIT);
	uv_walk(loop, close_walk_cb, NULL);
	uv_run(loop, UV_RUN_DEFAULT);
	assert_int_equal(uv_loop_close(loop), 0);
}

pid_t fixture_spawn_dispatcher(char *const args[], int *out_fd)
{
	const char *bin = getenv("DSP_DISPATCHER");
	char *argv[16];
	int fds[2] = { -1, -1 };
	size_t n = 0;

	assert_non_null(bin);
	argv[n++] = (char *)bin;
	for (size_t i = 0; args[i] && n < 15; i++)
		argv[n++] = args[i];
	argv[n] = NULL;
	if (out_fd)
		assert_int_equal(pipe(fds), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (out_fd) {
			dup2(fds[1], STDOUT_FILENO);
			close(fds[0]);
			close(fds[1]);
		}
		execv(bin, argv);
		_exit(127);
	}
	if (out_fd) {
		close(fds[1]);
		*out_fd = fds[0];
	}
	return pid;
}

int fixture_wait(pid_t pid)
{
	int status;

	while (waitpid(pid, &status, 0) < 0)
		assert_int_equal(errno, EINTR);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

char *fixture_read_all(int fd)
{
	size_t cap = 4096, len = 0;
	char *buf = malloc(cap);

	assert_non_null(buf);
	for (;;) {
		if (len + 1 >= cap) {
			cap *= 2;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
		ssize_t n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	close(fd);
	return buf;
}
