/* `dispatcher run`'s HTTP server under its file-descriptor limit and through the SIGTERM drain
 * (issue 9 items 1 and 9), against a private PostgreSQL and Redis. The test lowers its own
 * RLIMIT_NOFILE to 512 (hard), which the worker inherits: the worker raises its soft limit to
 * it, caps DISPATCHER_HTTP_MAX_CONNECTIONS (1024) under it and logs the cap N. N idle
 * connections fill the table and the next one is answered 503 with Retry-After. Then one of the
 * N sends the headers of a POST whose body never comes, and SIGTERM: the idle and the
 * half-received connections are closed at once and the worker exits 0 — where the body timeout
 * (30 s) used to outlast DISPATCHER_DRAIN_SECONDS (20 here: exit 1). No contact is seeded: the
 * dialer has nothing to do.
 *
 * /readyz (issue 10 item 7): ready with PostgreSQL up and the schema current, the gate mode
 * reported in the body; still 200 with Redis stopped (C11: the fleet dials on in postgres
 * mode); 503 "behind" for a worker started on a database missing its last migration.
 *
 * The body timeout settings (DISPATCHER_HTTP_BODY_TIMEOUT_MS, _MIN_RATE) reach the server. */
#include "fixture.h"
#include "rawsock.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#define WAIT_MS	  60000
#define FD_LIMIT  512
#define MAX_CONNS 1024

static struct embedded svc;
static pid_t worker_pid;
static char log_path[] = "/tmp/dsp-worker-http-XXXXXX";
static bool log_made; /* log_path names a file (mkstemp's suffix may itself end in 'X') */

static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	close(fd);
	return ntohs(a.sin_port);
}

/* Starts `dispatcher run` with its stderr (the JSON log) going to log_path. */
static pid_t spawn_worker(void)
{
	char *args[] = { "run", NULL };
	int saved;

	if (worker_pid > 0) { /* a failed assertion of an earlier test left it running */
		kill(worker_pid, SIGKILL);
		waitpid(worker_pid, NULL, 0);
		worker_pid = 0;
	}
	saved = dup(STDERR_FILENO);
	if (log_made) { /* a worker before this one */
		unlink(log_path);
		strcpy(log_path, "/tmp/dsp-worker-http-XXXXXX");
	}
	int lf = mkstemp(log_path);

	assert_true(saved >= 0 && lf >= 0);
	log_made = true;
	dup2(lf, STDERR_FILENO);
	pid_t pid = fixture_spawn_dispatcher(args, NULL);
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(lf);
	return pid;
}

/* Waits until the worker's log holds want; returns a copy of the log (caller frees). */
static char *log_wait(const char *want)
{
	long long deadline = fixture_now_ms() + WAIT_MS;

	for (;;) {
		int fd = open(log_path, O_RDONLY);
		char *text = fixture_read_all(fd);
		close(fd);
		if (strstr(text, want))
			return text;
		free(text);
		assert_true(fixture_now_ms() < deadline);
		fixture_sleep_ms(50);
	}
}

/* The number right after `after` in the log (it must be there). */
static long log_number(const char *text, const char *after)
{
	const char *p = strstr(text, after);

	assert_non_null(p);
	return strtol(p + strlen(after), NULL, 10);
}

/* GET /readyz on a fresh connection: the status, the body in *body (caller frees); 0 when the
 * worker does not answer (not listening yet). */
static int readyz_get(int port, char **body)
{
	struct raw_response r;
	int fd = raw_connect(port, WAIT_MS);
	int status = 0;

	*body = NULL;
	if (fd < 0)
		return 0;
	raw_send_str(fd, "GET /readyz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
	if (raw_read_response(fd, &r) == 0) {
		status = r.status;
		*body = strdup(r.body);
		raw_response_free(&r);
	}
	close(fd);
	return status;
}

/* Polls /readyz until its body holds want; returns the status (the body in *body). */
static int readyz_until(int port, const char *want, char **body)
{
	long long deadline = fixture_now_ms() + WAIT_MS;

	for (;;) {
		int st = readyz_get(port, body);
		if (st && strstr(*body, want))
			return st;
		free(*body);
		assert_true(fixture_now_ms() < deadline);
		fixture_sleep_ms(50);
	}
}

static void readyz_env(int port)
{
	char env[64];

	setenv("PROVIDER_URL", "http://127.0.0.1:9", 1); /* nothing to dial */
	setenv("PROVIDER_WEBHOOK_SECRET", "secret", 1);
	snprintf(env, sizeof(env), "127.0.0.1:%d", port);
	setenv("DISPATCHER_LISTEN", env, 1);
	setenv("DISPATCHER_LOG_LEVEL", "info", 1);
	setenv("DISPATCHER_WORKER_ID", "wh", 1);
	setenv("DISPATCHER_DRAIN_SECONDS", "20", 1);
}

static void stop_worker(void)
{
	kill(worker_pid, SIGTERM);
	assert_int_equal(fixture_wait(worker_pid), 0);
	worker_pid = 0;
}

static void sql(PGconn *db, const char *q)
{
	PGresult *res = PQexec(db, q);

	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
		fail_msg("%s: %s", q, PQerrorMessage(db));
	PQclear(res);
}

/* Ready with every field; Redis stopped: every answer still 200 while the gate goes to
 * postgres mode (reported), then Redis back. */
static void readyz_fields_and_redis_down(void **state)
{
	int port = free_port();
	char *body;

	(void)state;
	readyz_env(port);
	worker_pid = spawn_worker();
	assert_int_equal(readyz_until(port, "\"ready\":true", &body), 200);
	print_message("ready: %s\n", body);
	assert_non_null(strstr(body, "\"postgres\":\"up\""));
	assert_non_null(strstr(body, "\"schema\":\"current\""));
	assert_non_null(strstr(body, "\"gate_mode\":\""));
	assert_non_null(strstr(body, "\"gate_epoch\":"));
	assert_non_null(strstr(body, "\"gate_usable\":"));
	assert_non_null(strstr(body, "\"draining\":false"));
	assert_null(strstr(body, "\"error\""));
	free(body);
	/* A fresh install starts in postgres mode; the reconciler's way back brings redis mode. */
	assert_int_equal(readyz_until(port, "\"gate_mode\":\"redis\"", &body), 200);
	print_message("redis mode: %s\n", body);
	free(body);

	/* Redis gone (in redis mode): the gate mode changes, readiness does not (each answer checked). */
	assert_int_equal(embedded_redis_stop(&svc), 0);
	long long deadline = fixture_now_ms() + WAIT_MS;
	for (;;) {
		int st = readyz_get(port, &body);
		assert_int_equal(st, 200);
		assert_non_null(strstr(body, "\"ready\":true"));
		if (strstr(body, "\"gate_mode\":\"postgres\""))
			break;
		free(body);
		assert_true(fixture_now_ms() < deadline);
		fixture_sleep_ms(50);
	}
	print_message("redis down: %s\n", body);
	free(body);
	assert_int_equal(embedded_redis_start(&svc), 0);
	stop_worker();
}

/* The database loses this build's last migration under a running worker (the start-up check
 * refuses to start one on it): its connections, cut, come back and read the schema again —
 * 503 "behind" with the same fields; the row back and the connections cut again: 200. */
static void readyz_schema_behind(void **state)
{
	static const char cut[] = "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
				  " WHERE pid <> pg_backend_pid() AND datname = current_database()";
	PGconn *db = PQconnectdb(svc.database_url);
	int port = free_port();
	char *body;

	(void)state;
	assert_int_equal(PQstatus(db), CONNECTION_OK);
	readyz_env(port);
	worker_pid = spawn_worker();
	assert_int_equal(readyz_until(port, "\"ready\":true", &body), 200);
	free(body);
	sql(db, "CREATE TABLE sm_saved AS SELECT * FROM schema_migrations"
		" WHERE version = (SELECT max(version) FROM schema_migrations)");
	sql(db, "DELETE FROM schema_migrations WHERE version IN (SELECT version FROM sm_saved)");
	sql(db, cut);
	int st = readyz_until(port, "\"schema\":\"behind\"", &body);
	print_message("behind: %d %s\n", st, body);
	assert_int_equal(st, 503);
	assert_non_null(strstr(body, "\"ready\":false"));
	assert_non_null(strstr(body, "\"postgres\":\"up\""));
	assert_non_null(strstr(body, "\"gate_mode\":"));
	assert_non_null(strstr(body, "\"gate_epoch\":"));
	assert_non_null(strstr(body, "\"draining\":false"));
	assert_non_null(strstr(body, "\"error\":\"not_ready\""));
	free(body);
	sql(db, "INSERT INTO schema_migrations SELECT * FROM sm_saved");
	sql(db, "DROP TABLE sm_saved");
	sql(db, cut);
	/* Ready again once its connections are back (the schema read current can come a turn
	 * before the rest is: a 503 with "schema":"current" then). */
	assert_int_equal(readyz_until(port, "\"ready\":true", &body), 200);
	assert_non_null(strstr(body, "\"schema\":\"current\""));
	free(body);
	PQfinish(db);
	stop_worker();
}

static void cap_503_and_drain(void **state)
{
	struct rlimit rl = { FD_LIMIT, FD_LIMIT };
	struct raw_response r;
	char env[64], v[32];
	int port = free_port();

	(void)state;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0); /* inherited by the worker */
	setenv("PROVIDER_URL", "http://127.0.0.1:9", 1);    /* nothing to dial */
	setenv("PROVIDER_WEBHOOK_SECRET", "secret", 1);
	snprintf(env, sizeof(env), "127.0.0.1:%d", port);
	setenv("DISPATCHER_LISTEN", env, 1);
	setenv("DISPATCHER_LOG_LEVEL", "info", 1);
	setenv("DISPATCHER_WORKER_ID", "wh", 1);
	setenv("DISPATCHER_DRAIN_SECONDS", "20", 1);
	snprintf(env, sizeof(env), "%d", MAX_CONNS);
	setenv("DISPATCHER_HTTP_MAX_CONNECTIONS", env, 1);
	worker_pid = spawn_worker();

	/* The cap under the limit, logged; the worker listens (no probe: it would hold a slot). */
	char *text = log_wait("listening on");
	long cap = log_number(text, "capped to ");
	free(text);
	assert_true(cap >= 1 && cap < FD_LIMIT - 64);
	int *fds = calloc((size_t)cap, sizeof(int));
	for (long i = 0; i < cap; i++)
		assert_true((fds[i] = raw_connect(port, WAIT_MS)) >= 0);
	/* One too many: a 503 answer, not a silent close (the fds are there for it). */
	int d = raw_connect(port, WAIT_MS);
	assert_true(d >= 0);
	assert_int_equal(raw_read_response(d, &r), 0);
	assert_int_equal(r.status, 503);
	assert_non_null(strstr(r.body, "{\"error\":\"too_many_connections\",\"message\":\""));
	assert_non_null(raw_header(&r, "Retry-After", v, sizeof(v)));
	assert_string_equal(raw_header(&r, "Connection", v, sizeof(v)), "close");
	raw_response_free(&r);
	assert_true(raw_wait_closed(d));
	close(d);

	/* One of them sends headers whose body never comes (100-continue: they were parsed). */
	raw_send_str(fds[0], "POST /provider/events HTTP/1.1\r\nHost: t\r\n"
			     "Expect: 100-continue\r\nContent-Length: 100\r\n\r\n");
	assert_int_equal(raw_read_head(fds[0], &r), 0);
	assert_int_equal(r.status, 100);
	raw_response_free(&r);

	/* SIGTERM: every connection closed at once, exit 0 well within the drain time. */
	long long t0 = fixture_now_ms();
	kill(worker_pid, SIGTERM);
	for (long i = 0; i < cap; i++) {
		assert_true(raw_wait_closed(fds[i]));
		close(fds[i]);
	}
	assert_int_equal(fixture_wait(worker_pid), 0);
	worker_pid = 0;
	print_message("cap %ld; SIGTERM -> exit in %lld ms\n", cap, fixture_now_ms() - t0);
	text = log_wait("drain: HTTP done");
	assert_int_equal(log_number(text, "drain: HTTP done ("), cap - 1);
	assert_int_equal(log_number(text, " idle, "), 1); /* half-received */
	free(text);
	free(fds);
}

/* DISPATCHER_HTTP_BODY_TIMEOUT_MS and DISPATCHER_HTTP_BODY_MIN_RATE reach the server of
 * `dispatcher run`: with 1000 ms, a body that never comes is 408 long before the default 30 s;
 * with a minimum rate of 1 byte/s, a body trickled a byte every 250 ms for 2.5 s (two and a half
 * idle timeouts) is taken (the default 16 KiB/s would cut it about 1 s after the headers). */
static void body_settings(void **state)
{
	struct raw_response r;
	int port = free_port();
	char *body;

	(void)state;
	readyz_env(port);
	setenv("DISPATCHER_HTTP_BODY_TIMEOUT_MS", "1000", 1);
	setenv("DISPATCHER_HTTP_BODY_MIN_RATE", "1", 1);
	worker_pid = spawn_worker();
	assert_int_equal(readyz_until(port, "\"ready\":true", &body), 200);
	free(body);

	int fd = raw_connect(port, WAIT_MS);
	assert_true(fd >= 0);
	long long t0 = fixture_now_ms();
	raw_send_str(fd, "POST /provider/events HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n");
	assert_int_equal(raw_read_response(fd, &r), 0);
	assert_int_equal(r.status, 408);
	raw_response_free(&r);
	print_message("no body: 408 after %lld ms\n", fixture_now_ms() - t0);
	assert_true(fixture_now_ms() - t0 < 15000);
	close(fd);

	fd = raw_connect(port, WAIT_MS);
	assert_true(fd >= 0);
	raw_send_str(fd, "POST /provider/events HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n");
	for (int i = 0; i < 10; i++) {
		fixture_sleep_ms(250);
		assert_int_equal(raw_send(fd, "x", 1), 0);
	}
	assert_int_equal(raw_read_response(fd, &r), 0);
	print_message("trickled body: %d\n", r.status);
	assert_int_not_equal(r.status, 408); /* the route's own answer to a body it cannot use */
	raw_response_free(&r);
	close(fd);
	stop_worker();
	unsetenv("DISPATCHER_HTTP_BODY_TIMEOUT_MS");
	unsetenv("DISPATCHER_HTTP_BODY_MIN_RATE");
}

static int setup(void **state)
{
	(void)state;
	fixture_start(&svc, true, true, false, true);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (worker_pid > 0) { /* a failed assertion left it running */
		kill(worker_pid, SIGKILL);
		waitpid(worker_pid, NULL, 0);
	}
	if (log_made)
		unlink(log_path);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(readyz_fields_and_redis_down),
		cmocka_unit_test(readyz_schema_behind),
		cmocka_unit_test(cap_503_and_drain),
		cmocka_unit_test(body_settings),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
