/* Helpers of the tests that run `dispatcher run` as processes (issue 9): the provider stub in a
 * child process, its ground truth (GET /stats) and control routes, admin SQL reads, a free
 * port. Include after cmocka.h and fixture.h. */
#ifndef DSP_TEST_WORKER_PROC_H
#define DSP_TEST_WORKER_PROC_H

#include "stub.h"

#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct wproc_stub {
	pid_t pid;
	int port;
};

/* Starts the stub with c (copied by the fork) in a child process. */
static inline void wproc_stub_start(struct wproc_stub *st, const struct stub_config *c)
{
	int fds[2];

	assert_int_equal(pipe(fds), 0);
	fflush(NULL);
	st->pid = fork();
	assert_true(st->pid >= 0);
	if (st->pid == 0) {
		struct stub *s;
		close(fds[0]);
		curl_global_init(CURL_GLOBAL_DEFAULT);
		if (stub_new(uv_default_loop(), c, &s))
			_exit(3);
		int port = stub_port(s);
		if (write(fds[1], &port, sizeof(port)) != sizeof(port))
			_exit(4);
		close(fds[1]);
		uv_run(uv_default_loop(), UV_RUN_DEFAULT);
		_exit(0);
	}
	close(fds[1]);
	assert_int_equal(read(fds[0], &st->port, sizeof(st->port)), sizeof(st->port));
	close(fds[0]);
}

static inline size_t wproc_collect(char *p, size_t sz, size_t n, void *data)
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

/* GET (body NULL) or POST a JSON body to the stub; returns the answer's body (malloc'ed). */
static inline char *wproc_stub_http(const struct wproc_stub *st, const char *path, const char *body)
{
	char url[128], *out = NULL;
	CURL *c = curl_easy_init();
	struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");

	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", st->port, path);
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, wproc_collect);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &out);
	curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 30000L);
	if (body) {
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	}
	assert_int_equal(curl_easy_perform(c), CURLE_OK);
	curl_easy_cleanup(c);
	curl_slist_free_all(h);
	return out ? out : strdup("");
}

/* The number at a dotted path of GET /stats (-1 when absent). */
static inline double wproc_stat(const struct wproc_stub *st, const char *path)
{
	char *body = wproc_stub_http(st, "/stats", NULL), key[128];
	cJSON *j = cJSON_Parse(body), *n = j;

	snprintf(key, sizeof(key), "%s", path);
	for (char *save, *k = strtok_r(key, ".", &save); k && n; k = strtok_r(NULL, ".", &save))
		n = cJSON_GetObjectItemCaseSensitive(n, k);
	double v = cJSON_IsNumber(n) ? n->valuedouble : -1;
	cJSON_Delete(j);
	free(body);
	return v;
}

static inline void wproc_stub_stop(struct wproc_stub *st)
{
	if (st->pid > 0) {
		kill(st->pid, SIGKILL);
		waitpid(st->pid, NULL, 0);
	}
	st->pid = 0;
}

static inline long long wproc_sql_int(PGconn *db, const char *q)
{
	PGresult *r = fixture_sql(db, q);
	long long v = atoll(PQgetvalue(r, 0, 0));

	PQclear(r);
	return v;
}

/* The small organisation of the worker tests: o1 with 4 lines and one agent, campaigns c1 and c2
 * with one batch each, 50 pending contacts per campaign. */
static inline void wproc_seed_small(PGconn *db)
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

/* Organisation o1 of org_limit lines and agent a1, campaigns c001..cN each with batch bNNN,
 * and per contacts in each (`where`, on k the campaign and i the contact, keeps a subset; NULL:
 * all). */
static inline void wproc_seed_campaigns(PGconn *db, int org_limit, int campaigns, int per,
					const char *where)
{
	char q[1280];

	snprintf(
		q, sizeof(q),
		"INSERT INTO organisations (id, name, org_limit) VALUES ('o1', 'o1', %d);"
		" INSERT INTO agents (id, org_id) VALUES ('a1', 'o1');"
		" INSERT INTO campaigns (id, org_id, agent_id) SELECT 'c' || lpad(k::text, 3, '0'),"
		" 'o1', 'a1' FROM generate_series(1, %d) k;"
		" INSERT INTO batches (id, org_id, campaign_id) SELECT 'b' || lpad(k::text, 3,"
		" '0'), 'o1', 'c' || lpad(k::text, 3, '0') FROM generate_series(1, %d) k;"
		" INSERT INTO contacts (org_id, campaign_id, batch_id, phone) SELECT 'o1',"
		" 'c' || lpad(k::text, 3, '0'), 'b' || lpad(k::text, 3, '0'),"
		" '+1415' || lpad((k * 100 + i)::text, 7, '0')"
		" FROM generate_series(1, %d) k, generate_series(1, %d) i%s%s",
		org_limit, campaigns, campaigns, campaigns, per, where ? " WHERE " : "",
		where ? where : "");
	PQclear(fixture_sql(db, q));
}

/* The end of a run that dials every contact once: `contacts` calls, all ended, none twice, o1
 * never over max_live; then the worker (*pid) drains on SIGTERM with exit 0, leaving every
 * contact done with no try owed, and the stub is stopped. */
static inline void wproc_assert_all_dialled(PGconn *db, struct wproc_stub *stub, pid_t *pid,
					    int contacts, int max_live)
{
	assert_int_equal(wproc_sql_int(db, "SELECT count(*) FROM calls"), contacts);
	assert_int_equal(wproc_sql_int(db, "SELECT count(*) FROM calls WHERE state <> 'ended'"), 0);
	assert_int_equal((int)wproc_stat(stub, "duplicates"), 0);
	assert_int_equal((int)wproc_stat(stub, "calls_placed"), contacts);
	assert_true(wproc_stat(stub, "orgs.o1.max_live") <= max_live);
	kill(*pid, SIGTERM);
	assert_int_equal(fixture_wait(*pid), 0);
	*pid = 0;
	assert_int_equal(wproc_sql_int(db, "SELECT count(*) FROM contacts WHERE state <> 'done'"),
			 0);
	assert_int_equal(wproc_sql_int(db, "SELECT coalesce(sum(tries), 0) FROM contacts"), 0);
	wproc_stub_stop(stub);
}

static inline int wproc_free_port(void)
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

#endif
