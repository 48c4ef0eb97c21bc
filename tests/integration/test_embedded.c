/* The embedded services: start, answer, restart each server, and tear down even when the
 * caller is killed. */
#include "embedded.h"
#include "fixture.h"

#include <hiredis/hiredis.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

static bool pg_answers(const struct embedded *e)
{
	return PQping(e->database_url) == PQPING_OK;
}

static bool redis_answers(const struct embedded *e)
{
	char path[256];
	struct timeval tv = { 1, 0 };

	snprintf(path, sizeof(path), "%s", e->redis_url + strlen("unix://"));
	redisContext *c = redisConnectUnixWithTimeout(path, tv);
	bool ok = false;
	if (c && !c->err) {
		redisReply *r = redisCommand(c, "CONFIG GET maxmemory-policy");
		ok = r && r->type == REDIS_REPLY_ARRAY && r->elements == 2 &&
		     strcmp(r->element[1]->str, "noeviction") == 0;
		freeReplyObject(r);
	}
	redisFree(c);
	return ok;
}

static bool exists(const char *path)
{
	struct stat st;
	return stat(path, &st) == 0;
}

static void start_restart_stop(void **state)
{
	struct embedded e;

	fixture_start(&e, true, true, true, false);
	assert_true(pg_answers(&e));
	assert_true(redis_answers(&e));
	assert_true(e.pg_port > 0 && e.redis_port > 0);

	/* PostgreSQL as root runs as an unprivileged user. */
	if (geteuid() == 0)
		assert_true(e.pg_uid != 0);

	assert_int_equal(embedded_pg_stop(&e), 0);
	assert_false(pg_answers(&e));
	assert_true(redis_answers(&e)); /* the other server is untouched */
	assert_int_equal(embedded_pg_start(&e), 0);
	assert_true(pg_answers(&e));

	assert_int_equal(embedded_redis_stop(&e), 0);
	assert_false(redis_answers(&e));
	assert_int_equal(embedded_redis_start(&e), 0);
	assert_true(redis_answers(&e));

	char dir[sizeof(e.dir)];
	snprintf(dir, sizeof(dir), "%s", e.dir);
	pid_t pg = e.pg_pid, redis = e.redis_pid;
	embedded_stop(&e);
	assert_false(exists(dir));
	assert_int_equal(kill(pg, 0), -1);
	assert_int_equal(kill(redis, 0), -1);
	embedded_stop(&e); /* twice is harmless */
}

/* A child starts the services, reports them, and is killed with SIGKILL: the guardian must stop
 * both servers and remove the directory. */
static void killed_caller_leaves_nothing(void **state)
{
	int fds[2];
	struct {
		char dir[128];
		pid_t pg, redis;
	} report;

	assert_int_equal(pipe(fds), 0);
	fflush(NULL);
	pid_t child = fork();
	assert_true(child >= 0);
	if (child == 0) {
		struct embedded e;
		struct embedded_options o = { .postgres = true, .redis = true };
		close(fds[0]);
		if (embedded_start(&e, &o) != 0)
			_exit(1);
		memset(&report, 0, sizeof(report));
		snprintf(report.dir, sizeof(report.dir), "%s", e.dir);
		report.pg = e.pg_pid;
		report.redis = e.redis_pid;
		if (write(fds[1], &report, sizeof(report)) != (ssize_t)sizeof(report))
			_exit(2);
		raise(SIGKILL);
		_exit(3);
	}
	close(fds[1]);
	assert_int_equal(read(fds[0], &report, sizeof(report)), (ssize_t)sizeof(report));
	close(fds[0]);
	assert_int_equal(fixture_wait(child), 128 + SIGKILL);

	long long deadline = fixture_now_ms() + 60000;
	while (exists(report.dir) || kill(report.pg, 0) == 0 || kill(report.redis, 0) == 0) {
		if (fixture_now_ms() > deadline)
			fail_msg("left behind: dir %s exists=%d pg alive=%d redis alive=%d",
				 report.dir, exists(report.dir), kill(report.pg, 0) == 0,
				 kill(report.redis, 0) == 0);
		fixture_sleep_ms(20);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(start_restart_stop),
		cmocka_unit_test(killed_caller_leaves_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
