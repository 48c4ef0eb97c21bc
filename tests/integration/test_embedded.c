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

static bool file_has(const char *path, const char *needle)
{
	static char buf[1 << 16];
	FILE *f = fopen(path, "r");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;

	if (f)
		fclose(f);
	buf[n] = '\0';
	return strstr(buf, needle) != NULL;
}

/* TCP needs the generated password; a stopped (SIGSTOP) server still shuts down cleanly; as
 * root neither server runs as root. */
static void tcp_auth_stopped_server_and_users(void **state)
{
	struct embedded e;
	char url[600], log[256];
	struct stat st;

	fixture_start(&e, true, true, true, false);
	assert_true(e.database_url_tcp[0] != '\0');
	assert_int_equal(PQping(e.database_url_tcp), PQPING_OK);
	PGconn *c = PQconnectdb(e.database_url_tcp);
	assert_int_equal(PQstatus(c), CONNECTION_OK);
	PQfinish(c);
	snprintf(url, sizeof(url),
		 "host=127.0.0.1 port=%d user=dispatcher dbname=dispatcher "
		 "password=wrong",
		 e.pg_port);
	c = PQconnectdb(url);
	assert_int_equal(PQstatus(c), CONNECTION_BAD); /* no trust over TCP */
	PQfinish(c);

	if (geteuid() == 0) {
		char proc[64];
		snprintf(proc, sizeof(proc), "/proc/%d", (int)e.redis_pid);
		assert_int_equal(stat(proc, &st), 0);
		assert_true(st.st_uid != 0);
		snprintf(proc, sizeof(proc), "/proc/%d", (int)e.pg_pid);
		assert_int_equal(stat(proc, &st), 0);
		assert_true(st.st_uid != 0);
	}

	/* A test that stopped the server and failed before SIGCONT: the stop still is a clean
	 * fast shutdown (the log says so), not a kill after a timeout. */
	assert_int_equal(embedded_pg_signal(&e, SIGSTOP), 0);
	assert_int_equal(embedded_pg_stop(&e), 0);
	snprintf(log, sizeof(log), "%s/postgres.log", e.dir);
	assert_true(file_has(log, "database system is shut down"));
	embedded_stop(&e);
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
		cmocka_unit_test(tcp_auth_stopped_server_and_users),
		cmocka_unit_test(killed_caller_leaves_nothing),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
