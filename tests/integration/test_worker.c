/* `dispatcher run` end to end (issue 9): a private PostgreSQL and Redis, the provider stub in a
 * child process (hold mode: calls stay live until the test ends them), and one worker process
 * started from the built binary. An organisation with 4 lines and two campaigns of 50 contacts:
 * the worker claims, admits through the gate and dials — exactly 4 calls placed (the org's
 * lines), no duplicate, at most 4 live, both campaigns dialled (DRR turns), one call row and one
 * dial_attempts row per dial — and on SIGTERM it hands every waiting contact back (nothing left
 * claimed, nothing charged) and exits 0. Calls are not ended here: that is the events module's
 * test (call_end). */
#include "error.h"
#include "fixture.h"
#include "stub.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#define WAIT_MS 120000

static struct embedded svc;
static PGconn *db;
static pid_t stub_pid, worker_pid;
static int sport;

static void stub_child(int fd)
{
	struct stub_config c;
	struct stub *s;

	stub_config_defaults(&c);
	c.hold = true;
	curl_global_init(CURL_GLOBAL_DEFAULT);
	if (stub_new(uv_default_loop(), &c, &s))
		_exit(3);
	int port = stub_port(s);
	if (write(fd, &port, sizeof(port)) != sizeof(port))
		_exit(4);
	close(fd);
	uv_run(uv_default_loop(), UV_RUN_DEFAULT);
	_exit(0);
}

static void stub_start(void)
{
	int fds[2];

	assert_int_equal(pipe(fds), 0);
	fflush(NULL);
	stub_pid = fork();
	assert_true(stub_pid >= 0);
	if (stub_pid == 0) {
		close(fds[0]);
		stub_child(fds[1]);
	}
	close(fds[1]);
	assert_int_equal(read(fds[0], &sport, sizeof(sport)), sizeof(sport));
	close(fds[0]);
}

static size_t collect(char *p, size_t sz, size_t n, void *data)
{
	char **buf = data;
	size_t old = *buf ? strlen(*buf) : 0;
	char *b = realloc(*buf, old + sz * n + 1);

	assert_non_null(b);
	memcpy(b + old, p, sz * n);
	b[old + sz * n] = '\0';
	*buf = b;
	return sz * n;
}

/* GET /stats, the number at a dotted path. */
static double stub_stat(const char *path)
{
	char url[128], *body = NULL;
	CURL *c = curl_easy_init();

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/stats", sport);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
	curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
	assert_int_equal(curl_easy_perform(c), CURLE_OK);
	curl_easy_cleanup(c);
	cJSON *j = cJSON_Parse(body), *n = j;
	char key[128];
	snprintf(key, sizeof(key), "%s", path);
	for (char *save, *k = strtok_r(key, ".", &save); k && n; k = strtok_r(NULL, ".", &save))
		n = cJSON_GetObjectItemCaseSensitive(n, k);
	double v = cJSON_IsNumber(n) ? n->valuedouble : -1;
	cJSON_Delete(j);
	free(body);
	return v;
}

static long long sql_int(const char *q)
{
	PGresult *r = fixture_sql(db, q);
	long long v = atoll(PQgetvalue(r, 0, 0));

	PQclear(r);
	return v;
}

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

static void seed(void)
{
	PQclear(fixture_sql(
		db, "INSERT INTO organisations (id, name, org_limit) VALUES ('o1', 'o1', 4)"));
	PQclear(fixture_sql(db, "INSERT INTO agents (id, org_id) VALUES ('a1', 'o1')"));
	PQclear(fixture_sql(db, "INSERT INTO campaigns (id, org_id, agent_id) VALUES"
				" ('c1', 'o1', 'a1'), ('c2', 'o1', 'a1')"));
	PQclear(fixture_sql(db, "INSERT INTO batches (id, org_id, campaign_id) VALUES"
				" ('b1', 'o1', 'c1'), ('b2', 'o1', 'c2')"));
	PQclear(fixture_sql(
		db,
		"INSERT INTO contacts (org_id, campaign_id, batch_id, phone)"
		" SELECT 'o1', 'c' || k, 'b' || k, '+1415555' || lpad((k * 100 + i)::text, 4, '0')"
		" FROM generate_series(1, 2) k, generate_series(1, 50) i"));
}

static void dials_and_drain(void **state)
{
	char env[256];
	int port = free_port();

	(void)state;
	seed();
	stub_start();
	snprintf(env, sizeof(env), "http://127.0.0.1:%d", sport);
	setenv("PROVIDER_URL", env, 1);
	setenv("PROVIDER_WEBHOOK_SECRET", "stub-secret", 1);
	snprintf(env, sizeof(env), "127.0.0.1:%d", port);
	setenv("DISPATCHER_LISTEN", env, 1);
	setenv("DISPATCHER_LOG_LEVEL", "warn", 1);
	setenv("DISPATCHER_WORKER_ID", "w1", 1);
	setenv("DISPATCHER_RECONCILE_SECONDS", "1", 1);
	char *args[] = { "run", NULL };
	pid_t w = worker_pid = fixture_spawn_dispatcher(args, NULL);

	/* Every line busy: 4 calls placed (hold mode keeps them live). */
	long long deadline = fixture_now_ms() + WAIT_MS;
	while (stub_stat("calls_placed") < 4 && fixture_now_ms() < deadline)
		fixture_sleep_ms(100);
	assert_int_equal((int)stub_stat("calls_placed"), 4);
	/* Quiet: nothing more may be placed while the lines are held. */
	fixture_sleep_ms(1500);
	assert_int_equal((int)stub_stat("calls_placed"), 4);
	assert_int_equal((int)stub_stat("duplicates"), 0);
	assert_true(stub_stat("orgs.o1.max_live") <= 4);
	assert_int_equal((int)stub_stat("orgs.o1.live"), 4);
	assert_true(stub_stat("campaigns.c1.placed") >= 1); /* both campaigns get turns (C8) */
	assert_true(stub_stat("campaigns.c2.placed") >= 1);
	assert_int_equal(sql_int("SELECT count(*) FROM calls WHERE state = 'dialing'"), 4);
	assert_int_equal(sql_int("SELECT count(*) FROM contacts WHERE state = 'dialing'"), 4);
	deadline = fixture_now_ms() + WAIT_MS;
	while (sql_int("SELECT count(*) FROM dial_attempts") < 4 && fixture_now_ms() < deadline)
		fixture_sleep_ms(100);
	assert_int_equal(sql_int("SELECT count(*) FROM dial_attempts WHERE class = 'ok'"), 4);
	assert_true(sql_int("SELECT count(*) FROM contacts WHERE state = 'claimed'") > 0);

	/* SIGTERM: drain, hand back, exit 0. */
	kill(w, SIGTERM);
	assert_int_equal(fixture_wait(w), 0);
	worker_pid = 0;
	assert_int_equal(sql_int("SELECT count(*) FROM contacts WHERE state = 'claimed'"), 0);
	assert_int_equal(sql_int("SELECT count(*) FROM contacts WHERE state = 'pending'"), 96);
	assert_int_equal(sql_int("SELECT coalesce(sum(attempts + tries), 0) FROM contacts"), 0);
	assert_int_equal((int)stub_stat("calls_placed"), 4);
	kill(stub_pid, SIGKILL);
	waitpid(stub_pid, NULL, 0);
	stub_pid = 0;
}

static int setup(void **state)
{
	(void)state;
	fixture_start(&svc, true, true, false, true);
	db = fixture_pg(&svc);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (worker_pid > 0) { /* a failed assertion left them running */
		kill(worker_pid, SIGKILL);
		waitpid(worker_pid, NULL, 0);
	}
	if (stub_pid > 0)
		kill(stub_pid, SIGKILL);
	PQfinish(db);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(dials_and_drain),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
