/* Helpers for the API's tests (issue 10): a `dispatcher run` on a free port against the
 * fixture's private PostgreSQL and Redis, organisations, agents, campaigns and keys made by SQL,
 * and one HTTP request at a time with a Bearer key (raw sockets, tests/http/rawsock.h).
 *
 * Header-only (static functions) so each test file links it alone: include it after cmocka.h's
 * prerequisites and fixture.h. The test owns `struct api_env`; api_env_stop() kills what is
 * left running. */
#ifndef DSP_TEST_API_H
#define DSP_TEST_API_H

#include "apikey.h"
#include "fixture.h"
#include "rawsock.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <fcntl.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define API_WAIT_MS 60000

struct api_worker {
	pid_t pid;
	int port;
	char log[64];
};

static inline int api_free_port(void)
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

/* Runs one SQL statement; fails the test on error. Returns the result when it has rows (caller
 * PQclear()s), else NULL. */
static inline PGresult *api_sql(PGconn *db, const char *fmt, ...)
{
	char q[4096];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(q, sizeof(q), fmt, ap);
	va_end(ap);
	PGresult *res = PQexec(db, q);
	if (PQresultStatus(res) == PGRES_TUPLES_OK)
		return res;
	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		fail_msg("%s: %s", q, PQerrorMessage(db));
	PQclear(res);
	return NULL;
}

/* Creates a key for org (name `name`) and writes it into key (APIKEY_LEN + 1); returns nothing,
 * fails the test on error. The key id is written into key_id (64 + 1) when not NULL. */
static inline void api_make_key(PGconn *db, const char *org, const char *name,
				char key[APIKEY_LEN + 1], char *key_id)
{
	unsigned char h[APIKEY_HASH_LEN];
	char hex[2 * APIKEY_HASH_LEN + 1], prev[APIKEY_PREVIEW_SIZE];

	assert_int_equal(apikey_generate(key), 0);
	assert_int_equal(apikey_hash(key, APIKEY_LEN, h), 0);
	for (int i = 0; i < APIKEY_HASH_LEN; i++)
		snprintf(hex + 2 * i, 3, "%02x", h[i]);
	apikey_preview(key, prev);
	PGresult *r = api_sql(db,
			      "INSERT INTO api_keys (org_id, name, key_hash, key_preview) VALUES "
			      "('%s', '%s', decode('%s', 'hex'), '%s') RETURNING id",
			      org, name, hex, prev);
	if (key_id)
		snprintf(key_id, 65, "%s", PQgetvalue(r, 0, 0));
	PQclear(r);
}

/* An organisation `org` with org_limit lines, an agent `<org>-agent` and the campaigns named
 * (NULL-terminated list), all active. */
static inline void api_make_org(PGconn *db, const char *org, int org_limit, ...)
{
	va_list ap;
	const char *c;

	PQclear(api_sql(db,
			"INSERT INTO organisations (id, name, org_limit) VALUES ('%s', '%s', %d)",
			org, org, org_limit));
	PQclear(api_sql(
		db,
		"INSERT INTO agents (id, org_id, name, from_number) VALUES ('%s-agent', '%s', "
		"'agent', '+15550000001')",
		org, org));
	va_start(ap, org_limit);
	while ((c = va_arg(ap, const char *)))
		PQclear(api_sql(
			db,
			"INSERT INTO campaigns (id, org_id, agent_id, name) VALUES ('%s', '%s', "
			"'%s-agent', '%s')",
			c, org, org, c));
	va_end(ap);
}

/* Waits until GET /readyz on port answers status (200: ready; 503: not, e.g. PostgreSQL down). */
static inline void api_wait_readyz(int port, int status)
{
	long long deadline = fixture_now_ms() + API_WAIT_MS;

	for (;;) {
		struct raw_response r;
		int fd = raw_connect(port, 2000), st = 0;
		if (fd >= 0) {
			raw_send_str(
				fd, "GET /readyz HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
			if (raw_read_response(fd, &r) == 0) {
				st = r.status;
				raw_response_free(&r);
			}
			close(fd);
		}
		if (st == status)
			return;
		assert_true(fixture_now_ms() < deadline);
		fixture_sleep_ms(50);
	}
}

/* Starts `dispatcher run` on a free port with its log in a temporary file; extra environment
 * is whatever the test set before. Waits until /readyz answers 200. */
static inline void api_worker_start(struct api_worker *w, const char *id)
{
	char *args[] = { "run", NULL };
	char env[64];
	int saved = dup(STDERR_FILENO);

	w->port = api_free_port();
	snprintf(env, sizeof(env), "127.0.0.1:%d", w->port);
	setenv("DISPATCHER_LISTEN", env, 1);
	setenv("DISPATCHER_WORKER_ID", id, 1);
	if (!getenv("PROVIDER_URL"))
		setenv("PROVIDER_URL", "http://127.0.0.1:9", 1); /* nothing to dial */
	setenv("PROVIDER_WEBHOOK_SECRET", "secret", 1);
	setenv("DISPATCHER_LOG_LEVEL", "info", 1);
	snprintf(w->log, sizeof(w->log), "/tmp/dsp-api-%s-XXXXXX", id);
	int lf = mkstemp(w->log);
	assert_true(saved >= 0 && lf >= 0);
	dup2(lf, STDERR_FILENO);
	w->pid = fixture_spawn_dispatcher(args, NULL);
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(lf);
	api_wait_readyz(w->port, 200);
}

static inline void api_worker_stop(struct api_worker *w)
{
	if (w->pid > 0) {
		kill(w->pid, SIGTERM);
		assert_int_equal(fixture_wait(w->pid), 0);
	}
	w->pid = 0;
	if (w->log[0])
		unlink(w->log);
	w->log[0] = 0;
}

/* For teardown after a failed assertion. */
static inline void api_worker_kill(struct api_worker *w)
{
	if (w->pid > 0) {
		kill(w->pid, SIGKILL);
		waitpid(w->pid, NULL, 0);
	}
	w->pid = 0;
	if (w->log[0])
		unlink(w->log);
	w->log[0] = 0;
}

/* One request on a fresh connection: method, path, the key (NULL: no Authorization header; a
 * string starting with "Authorization:" or another header line is sent as is), a body (NULL:
 * none) with its content type. Fills *r (raw_response_free() it). Returns the status. */
static inline int api_request(int port, const char *method, const char *path, const char *key,
			      const char *ctype, const char *body, struct raw_response *r)
{
	size_t blen = body ? strlen(body) : 0;
	size_t cap = 1024 + blen;
	char *req = malloc(cap);
	int n, fd = raw_connect(port, API_WAIT_MS);

	assert_true(fd >= 0 && req);
	n = snprintf(req, cap, "%s %s HTTP/1.1\r\nHost: t\r\nConnection: close\r\n", method, path);
	if (key && strncmp(key, "gat_", 4) == 0)
		n += snprintf(req + n, cap - (size_t)n, "Authorization: Bearer %s\r\n", key);
	else if (key)
		n += snprintf(req + n, cap - (size_t)n, "%s\r\n", key);
	if (body)
		n += snprintf(req + n, cap - (size_t)n,
			      "Content-Type: %s\r\nContent-Length: %zu\r\n",
			      ctype ? ctype : "application/json", blen);
	n += snprintf(req + n, cap - (size_t)n, "\r\n");
	assert_int_equal(raw_send(fd, req, (size_t)n), 0);
	if (body)
		assert_int_equal(raw_send(fd, body, blen), 0);
	free(req);
	assert_int_equal(raw_read_response(fd, r), 0);
	close(fd);
	return r->status;
}

/* The JSON body of r, parsed (fails the test when it is not JSON). cJSON_Delete() it. */
static inline cJSON *api_body(const struct raw_response *r)
{
	cJSON *j = cJSON_Parse(r->body);

	if (!j)
		fail_msg("not JSON: %s", r->body);
	return j;
}

/* The integer value at a dotted path ("concurrency.max"); fails when absent. */
static inline double api_num(const cJSON *j, const char *path)
{
	char buf[128], *save = NULL;
	const cJSON *v = j;

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *t = strtok_r(buf, ".", &save); t; t = strtok_r(NULL, ".", &save))
		v = cJSON_GetObjectItemCaseSensitive(v, t);
	if (!cJSON_IsNumber(v))
		fail_msg("%s is not a number", path);
	return v->valuedouble;
}

static inline const char *api_str(const cJSON *j, const char *path)
{
	char buf[128], *save = NULL;
	const cJSON *v = j;

	snprintf(buf, sizeof(buf), "%s", path);
	for (char *t = strtok_r(buf, ".", &save); t; t = strtok_r(NULL, ".", &save))
		v = cJSON_GetObjectItemCaseSensitive(v, t);
	if (!cJSON_IsString(v))
		fail_msg("%s is not a string", path);
	return v->valuestring;
}

#endif
