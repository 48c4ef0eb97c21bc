/* strptime() is XSI, POLLRDHUP Linux's. */
#define _GNU_SOURCE
/* HTTP server against real clients: libcurl (keep-alive, Expect: 100-continue, 413) and raw
 * sockets (malformed, oversized request line and headers, body limits, slow clients, pipelining,
 * 404/405 bodies, idle close, connection limit, graceful close). The server runs its loop in a
 * second thread; the test thread is the client. Waits are on observable events (a response, a
 * close) with generous socket timeouts, never on elapsed time. */
#include "http_server.h"

#include "rawsock.h"

#include <curl/curl.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#define WAIT_MS 20000 /* socket receive timeout: only reached when something is broken */

struct fixture {
	uv_loop_t loop;
	uv_async_t stop;    /* closes the server */
	uv_async_t release; /* answers the held request */
	uv_async_t drain;   /* starts http_server_drain() */
	struct http_server *srv;
	struct http_request *held;
	int port;
	bool closed; /* the close callback ran */
	pthread_t thread;
	atomic_int slow_handed;		      /* /slow/{ms} requests handed to the handler */
	atomic_bool drained;		      /* the drain callback ran (at drained_ms) */
	uint64_t drained_ms;		      /* CLOCK_MONOTONIC; written before drained */
	struct http_server_stats drain_stats; /* the stats then */
	int drain_rc[2];		      /* two http_server_drain() calls */
};

/* CLOCK_MONOTONIC in milliseconds. */
static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

struct delayed {
	uv_timer_t t;
	struct http_request *req;
	char body[64];
};

static void on_delayed_closed(uv_handle_t *h)
{
	free(h->data);
}

static void on_delay(uv_timer_t *t)
{
	struct delayed *d = t->data;

	http_respond(d->req, 200, "text/plain", d->body, strlen(d->body));
	uv_close((uv_handle_t *)t, on_delayed_closed);
}

static void h_hello(struct http_request *req, void *data)
{
	http_respond(req, 200, "text/plain", "hello", 5);
}

static void h_echo(struct http_request *req, void *data)
{
	size_t len;
	const char *b = http_request_body(req, &len);

	http_respond(req, 200, "application/octet-stream", b, len);
}

static void h_item(struct http_request *req, void *data)
{
	char out[256];

	snprintf(out, sizeof(out), "{\"id\":\"%s\",\"q\":\"%s\"}", http_request_param(req, "id"),
		 http_request_query(req));
	http_response_header(req, "X-Item", "yes");
	http_respond(req, 200, "application/json", out, strlen(out));
}

/* Answers after {ms} milliseconds, with "slow<ms>". */
static void h_slow(struct http_request *req, void *data)
{
	struct fixture *f = data;
	struct delayed *d = calloc(1, sizeof(*d));
	unsigned ms = (unsigned)strtoul(http_request_param(req, "ms"), NULL, 10);

	atomic_fetch_add(&f->slow_handed, 1);
	d->req = req;
	snprintf(d->body, sizeof(d->body), "slow%u", ms);
	uv_timer_init(&f->loop, &d->t);
	d->t.data = d;
	uv_timer_start(&d->t, on_delay, ms, 0);
}

/* Echoes what the request parsed: path, query, and whether a header X-Trailer was stored. */
static void h_path(struct http_request *req, void *data)
{
	char out[256];

	snprintf(out, sizeof(out), "%s|%s|%d", http_request_path(req), http_request_query(req),
		 http_request_header(req, "X-Trailer") != NULL);
	http_respond(req, 200, "text/plain", out, strlen(out));
}

/* Answers with the status in the path and a body of "body". */
static void h_status(struct http_request *req, void *data)
{
	int code = atoi(http_request_param(req, "code"));

	http_respond(req, code, "text/plain", "body", 4);
}

#define BLOB (64 * 1024)

static void h_blob(struct http_request *req, void *data)
{
	static char blob[BLOB];

	memset(blob, 'b', sizeof(blob));
	http_respond(req, 200, "application/octet-stream", blob, sizeof(blob));
}

/* The server's counters, read on the loop's thread. */
static void h_stats(struct http_request *req, void *data)
{
	struct fixture *f = data;
	struct http_server_stats st;
	char out[256];

	http_server_stats(f->srv, &st);
	snprintf(out, sizeof(out), "%llu %llu %llu %u", (unsigned long long)st.write_pauses,
		 (unsigned long long)st.write_timeouts, (unsigned long long)st.write_queued_max,
		 st.open);
	http_respond(req, 200, "text/plain", out, strlen(out));
}

static void h_hold(struct http_request *req, void *data)
{
	struct fixture *f = data;

	f->held = req;
}

static void h_held(struct http_request *req, void *data)
{
	struct fixture *f = data;

	const char *v = !f->held ? "0" : http_request_aborted(f->held) ? "1a" : "1";

	http_respond(req, 200, "text/plain", v, strlen(v));
}

static void decorate(struct http_request *req, int status, void *data)
{
	http_response_header(req, "X-Decorated", status >= 400 ? "error" : "ok");
}

static void on_closed(struct http_server *s, void *data)
{
	struct fixture *f = data;

	f->closed = true;
}

static void on_async_closed(uv_handle_t *h)
{
}

static void on_stop(uv_async_t *a)
{
	struct fixture *f = a->data;

	http_server_close(f->srv, on_closed, f);
	uv_close((uv_handle_t *)&f->stop, on_async_closed);
	uv_close((uv_handle_t *)&f->drain, on_async_closed);
}

static void on_drained(struct http_server *s, void *data)
{
	struct fixture *f = data;

	http_server_stats(s, &f->drain_stats);
	f->drained_ms = mono_ms();
	atomic_store(&f->drained, true);
}

static void on_drain(uv_async_t *a)
{
	struct fixture *f = a->data;

	f->drain_rc[0] = http_server_drain(f->srv, on_drained, f);
	f->drain_rc[1] = http_server_drain(f->srv, on_drained, f); /* -EALREADY */
}

static void on_release(uv_async_t *a)
{
	struct fixture *f = a->data;

	if (f->held) {
		http_respond(f->held, 200, "text/plain", "released", 8);
		f->held = NULL;
	}
	uv_close((uv_handle_t *)&f->release, on_async_closed);
}

static void *loop_main(void *arg)
{
	struct fixture *f = arg;

	uv_run(&f->loop, UV_RUN_DEFAULT);
	return NULL;
}

static struct fixture *start(void (*tune)(struct http_server_config *))
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct http_server_config cfg;
	const struct http_route routes[] = {
		{ "GET", "/hello", 0, h_hello, f, false },
		{ "POST", "/echo", 1024, h_echo, f, false },
		{ "POST", "/big", 1 << 20, h_echo, f, false },
		{ "GET", "/items/{id}", 0, h_item, f, false },
		{ "DELETE", "/items/{id}", 0, h_item, f, false },
		{ "GET", "/slow/{ms}", 0, h_slow, f, false },
		{ "POST", "/hold", 64, h_hold, f, false },
		{ "GET", "/held", 0, h_held, f, false },
		{ "POST", "/path", 1024, h_path, f, false },
		{ "HEAD", "/hello", 0, h_hello, f, false },
		{ "GET", "/status/{code}", 0, h_status, f, false },
		{ "GET", "/blob", 0, h_blob, f, false },
		{ "GET", "/stats", 0, h_stats, f, false },
	};

	http_server_config_defaults(&cfg);
	cfg.max_pipelined = 4;
	cfg.header_timeout_ms = 1000;
	cfg.body_timeout_ms = 1000;
	cfg.linger_ms = 200;
	cfg.decorate = decorate;
	if (tune)
		tune(&cfg);
	assert_int_equal(uv_loop_init(&f->loop), 0);
	assert_int_equal(http_server_new(&f->loop, &cfg, routes, sizeof(routes) / sizeof(routes[0]),
					 &f->srv),
			 0);
	f->port = http_server_port(f->srv);
	assert_true(f->port > 0);
	uv_async_init(&f->loop, &f->stop, on_stop);
	uv_async_init(&f->loop, &f->release, on_release);
	uv_async_init(&f->loop, &f->drain, on_drain);
	f->stop.data = f;
	f->release.data = f;
	f->drain.data = f;
	pthread_create(&f->thread, NULL, loop_main, f);
	return f;
}

static void stop(struct fixture *f)
{
	uv_async_send(&f->release);
	uv_async_send(&f->stop);
	pthread_join(f->thread, NULL);
	assert_true(f->closed);
	assert_int_equal(uv_loop_close(&f->loop), 0); /* every handle was closed */
	free(f);
}

static int setup(void **state)
{
	*state = start(NULL);
	return 0;
}

static int teardown(void **state)
{
	stop(*state);
	return 0;
}

/* Sends req on a new connection, reads one response; with closes, also waits for the server
 * to close the connection and records whether it did. */
static void exchange_ex(int port, const char *req, struct raw_response *r, bool closes)
{
	int fd = raw_connect(port, WAIT_MS);

	assert_true(fd >= 0);
	assert_int_equal(raw_send(fd, req, strlen(req)), 0);
	assert_int_equal(raw_read_response(fd, r), 0);
	if (closes)
		r->closed = raw_wait_closed(fd);
	close(fd);
}

static void exchange(int port, const char *req, struct raw_response *r)
{
	exchange_ex(port, req, r, false);
}

static void exchange_closed(int port, const char *req, struct raw_response *r)
{
	exchange_ex(port, req, r, true);
}

static void assert_json_error(const struct raw_response *r, int status, const char *code)
{
	char want[128], ct[64];

	assert_int_equal(r->status, status);
	snprintf(want, sizeof(want), "{\"error\":\"%s\",\"message\":\"", code);
	assert_non_null(strstr(r->body, want));
	assert_non_null(raw_header(r, "Content-Type", ct, sizeof(ct)));
	assert_string_equal(ct, "application/json");
	assert_non_null(raw_header(r, "X-Decorated", ct, sizeof(ct)));
	assert_string_equal(ct, "error");
}

/* ---- curl ---- */

static size_t sink(char *p, size_t size, size_t n, void *data)
{
	struct raw_response *r = data;
	size_t len = size * n;

	r->body = realloc(r->body, r->body_len + len + 1);
	memcpy(r->body + r->body_len, p, len);
	r->body_len += len;
	r->body[r->body_len] = '\0';
	return len;
}

static long curl_do(CURL *c, const char *url, const char *post, size_t post_len,
		    struct raw_response *r)
{
	long code = 0;

	memset(r, 0, sizeof(*r));
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, sink);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, r);
	curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)WAIT_MS);
	if (post) {
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, post);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)post_len);
	} else {
		curl_easy_setopt(c, CURLOPT_HTTPGET, 1L);
	}
	assert_int_equal(curl_easy_perform(c), CURLE_OK);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	return code;
}

static void curl_keep_alive_and_bodies(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	char url[128];
	long conns = -1;
	CURL *c = curl_easy_init();
	char *big = malloc(200000);

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/hello", f->port);
	assert_int_equal(curl_do(c, url, NULL, 0, &r), 200);
	assert_string_equal(r.body, "hello");
	raw_response_free(&r);
	/* Same handle, second request: the connection is reused. */
	assert_int_equal(curl_do(c, url, NULL, 0, &r), 200);
	curl_easy_getinfo(c, CURLINFO_NUM_CONNECTS, &conns);
	assert_int_equal(conns, 0);
	raw_response_free(&r);
	/* A body under the route's limit is echoed. */
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/echo", f->port);
	memset(big, 'x', 200000);
	assert_int_equal(curl_do(c, url, big, 1000, &r), 200);
	assert_int_equal(r.body_len, 1000);
	raw_response_free(&r);
	/* Over it (curl sends Expect: 100-continue here): 413 before the body is sent. */
	assert_int_equal(curl_do(c, url, big, 5000, &r), 413);
	assert_non_null(strstr(r.body, "\"error\":\"body_too_large\""));
	raw_response_free(&r);
	/* A large body on a route that takes it, through 100-continue. */
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/big", f->port);
	assert_int_equal(curl_do(c, url, big, 200000, &r), 200);
	assert_int_equal(r.body_len, 200000);
	raw_response_free(&r);
	free(big);
	curl_easy_cleanup(c);
}

static void curl_params_query_and_404_405(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	char url[128];
	CURL *c = curl_easy_init();

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/items/abc?x=1", f->port);
	assert_int_equal(curl_do(c, url, NULL, 0, &r), 200);
	assert_string_equal(r.body, "{\"id\":\"abc\",\"q\":\"x=1\"}");
	raw_response_free(&r);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/nowhere", f->port);
	assert_int_equal(curl_do(c, url, NULL, 0, &r), 404);
	assert_non_null(strstr(r.body, "{\"error\":\"not_found\",\"message\":\""));
	raw_response_free(&r);
	/* A parameter segment must not be empty. */
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/items/", f->port);
	assert_int_equal(curl_do(c, url, NULL, 0, &r), 404);
	raw_response_free(&r);
	curl_easy_cleanup(c);
}

/* ---- raw sockets ---- */

static void raw_405_lists_allowed_methods(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	char allow[64];

	exchange(f->port, "PUT /items/7 HTTP/1.1\r\nHost: t\r\n\r\n", &r);
	assert_json_error(&r, 405, "method_not_allowed");
	assert_non_null(raw_header(&r, "Allow", allow, sizeof(allow)));
	assert_string_equal(allow, "GET, DELETE, HEAD");
	raw_response_free(&r);
}

static void raw_malformed_is_400_and_closes(void **state)
{
	struct fixture *f = *state;
	const char *bad[] = {
		"GARBAGE\r\n\r\n",
		"GET /hello HTTP/1.1\r\nHost t\r\n\r\n",
		"GET /hello HTTP/9.9\r\n\r\n",
		"POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nContent-Length: "
		"6\r\n\r\nhello",
		"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct raw_response r;
		exchange_closed(f->port, bad[i], &r);
		assert_json_error(&r, 400, "bad_request");
		assert_true(r.closed);
		raw_response_free(&r);
	}
}

static void raw_oversized_line_and_headers(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	char *req = malloc(40000);
	char *p;

	/* Request line: 8 KiB of path is refused with 414. */
	p = req + sprintf(req, "GET /");
	memset(p, 'a', 9000);
	strcpy(p + 9000, " HTTP/1.1\r\nHost: t\r\n\r\n");
	exchange_closed(f->port, req, &r);
	assert_json_error(&r, 414, "uri_too_long");
	assert_true(r.closed);
	raw_response_free(&r);
	/* Just under the limit is fine (404: no such route). */
	p = req + sprintf(req, "GET /");
	memset(p, 'a', 8000);
	strcpy(p + 8000, " HTTP/1.1\r\nHost: t\r\n\r\n");
	exchange(f->port, req, &r);
	assert_int_equal(r.status, 404);
	raw_response_free(&r);
	/* One 9000-byte header: 431. */
	p = req + sprintf(req, "GET /hello HTTP/1.1\r\nHost: t\r\nX-Big: ");
	memset(p, 'b', 9000);
	strcpy(p + 9000, "\r\n\r\n");
	exchange_closed(f->port, req, &r);
	assert_json_error(&r, 431, "headers_too_large");
	assert_true(r.closed);
	raw_response_free(&r);
	/* Many small headers adding up past 8 KiB: 431 too. */
	p = req + sprintf(req, "GET /hello HTTP/1.1\r\nHost: t\r\n");
	for (int i = 0; i < 90; i++)
		p += sprintf(p, "X-H%02d: %0100d\r\n", i, 0);
	strcpy(p, "\r\n");
	exchange(f->port, req, &r);
	assert_json_error(&r, 431, "headers_too_large");
	raw_response_free(&r);
	free(req);
}

static void raw_body_over_route_limit(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	char req[4096];

	/* Declared length over the limit: refused before the body is read. */
	exchange_closed(f->port, "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 5000\r\n\r\n",
			&r);
	assert_json_error(&r, 413, "body_too_large");
	assert_true(r.closed);
	raw_response_free(&r);
	/* Chunked past the limit: refused when the chunk arrives. */
	int n = sprintf(req, "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
			     "800\r\n");
	memset(req + n, 'c', 0x800);
	strcpy(req + n + 0x800, "\r\n0\r\n\r\n");
	exchange(f->port, req, &r);
	assert_json_error(&r, 413, "body_too_large");
	raw_response_free(&r);
	/* Chunked within the limit is reassembled. */
	exchange(f->port,
		 "POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
		 "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n",
		 &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, "abcde");
	raw_response_free(&r);
	/* A body on a route with no route is refused and the connection closed. */
	exchange_closed(f->port,
			"POST /nowhere HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n\r\nabc", &r);
	assert_json_error(&r, 404, "not_found");
	assert_true(r.closed);
	raw_response_free(&r);
}

static void raw_keep_alive_and_http10(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	char v[32];
	int fd = raw_connect(f->port, WAIT_MS);

	for (int i = 0; i < 3; i++) {
		raw_send_str(fd, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
		assert_int_equal(raw_read_response(fd, &r), 0);
		assert_int_equal(r.status, 200);
		assert_null(raw_header(&r, "Connection", v, sizeof(v)));
		raw_response_free(&r);
	}
	/* Connection: close is honoured: answered, then closed. */
	const char *last = "GET /hello HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n";
	raw_send_str(fd, last);
	assert_int_equal(raw_read_response(fd, &r), 0);
	assert_string_equal(raw_header(&r, "Connection", v, sizeof(v)), "close");
	raw_response_free(&r);
	assert_true(raw_wait_closed(fd));
	close(fd);
	/* HTTP/1.0 without keep-alive: one answer, then close. */
	exchange_closed(f->port, "GET /hello HTTP/1.0\r\n\r\n", &r);
	assert_int_equal(r.status, 200);
	assert_true(r.closed);
	raw_response_free(&r);
	/* HTTP/1.0 asking for keep-alive: it is echoed, and the connection stays open. */
	fd = raw_connect(f->port, WAIT_MS);
	for (int i = 0; i < 2; i++) {
		raw_send_str(fd, "GET /hello HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
		assert_int_equal(raw_read_response(fd, &r), 0);
		assert_int_equal(r.status, 200);
		assert_string_equal(r.body, "hello");
		assert_non_null(raw_header(&r, "Connection", v, sizeof(v)));
		assert_string_equal(v, "keep-alive");
		raw_response_free(&r);
	}
	close(fd);
}

/* A chunked body's trailers are dropped: the handler sees the path and query it was sent,
 * and no trailer among the headers. */
static void raw_chunked_trailers_dropped(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	char pad[3001], req[4096];

	memset(pad, 'a', 3000);
	pad[3000] = '\0';
	snprintf(req, sizeof(req),
		 "POST /path?x=1 HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
		 "5\r\nhello\r\n0\r\nX-Trailer: %s\r\n\r\n",
		 pad);
	exchange(f->port, req, &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, "/path|x=1|0");
	raw_response_free(&r);
}

/* HEAD, 204 and 304 answers carry no body (HEAD and 304 keep the Content-Length): the answer
 * pipelined behind them is read intact. */
static void raw_no_body_for_head_204_304(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	char v[32];
	int fd = raw_connect(f->port, WAIT_MS);

	raw_send_str(fd, "HEAD /hello HTTP/1.1\r\nHost: t\r\n\r\n"
			 "GET /status/204 HTTP/1.1\r\nHost: t\r\n\r\n"
			 "GET /status/304 HTTP/1.1\r\nHost: t\r\n\r\n"
			 "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
	assert_int_equal(raw_read_head(fd, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(raw_header(&r, "Content-Length", v, sizeof(v)), "5");
	/* Every answer carries a Date in IMF-fixdate form: "Tue, 01 Dec 2026 09:37:03 GMT". */
	char date[64];
	struct tm tm = { 0 };
	assert_non_null(raw_header(&r, "Date", date, sizeof(date)));
	char *end = strptime(date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
	assert_true(end && *end == '\0' && tm.tm_year >= 124);
	raw_response_free(&r);
	assert_int_equal(raw_read_head(fd, &r), 0);
	assert_int_equal(r.status, 204);
	assert_null(raw_header(&r, "Content-Length", v, sizeof(v)));
	raw_response_free(&r);
	assert_int_equal(raw_read_head(fd, &r), 0);
	assert_int_equal(r.status, 304);
	assert_string_equal(raw_header(&r, "Content-Length", v, sizeof(v)), "4");
	raw_response_free(&r);
	assert_int_equal(raw_read_response(fd, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, "hello");
	raw_response_free(&r);
	close(fd);
}

/* Expect: 100-continue on a request queued behind an unanswered one: the 100 comes once the
 * earlier answer is written (the client sends its body only then). */
static void raw_continue_behind_earlier_request(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	int fd = raw_connect(f->port, WAIT_MS);

	raw_send_str(fd, "GET /slow/100 HTTP/1.1\r\nHost: t\r\n\r\n"
			 "POST /echo HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
			 "Content-Length: 5\r\n\r\n");
	assert_int_equal(raw_read_response(fd, &r), 0);
	assert_string_equal(r.body, "slow100");
	raw_response_free(&r);
	assert_int_equal(raw_read_head(fd, &r), 0);
	assert_int_equal(r.status, 100);
	raw_response_free(&r);
	raw_send_str(fd, "hello");
	assert_int_equal(raw_read_response(fd, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, "hello");
	raw_response_free(&r);
	close(fd);
}

static void raw_pipelined_in_order(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	const char *req = "GET /slow/300 HTTP/1.1\r\nHost: t\r\n\r\n"
			  "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n"
			  "GET /slow/10 HTTP/1.1\r\nHost: t\r\n\r\n"
			  "GET /items/42 HTTP/1.1\r\nHost: t\r\n\r\n";
	const char *want[] = { "slow300", "hello", "slow10", "{\"id\":\"42\",\"q\":\"\"}" };
	int fd = raw_connect(f->port, WAIT_MS);

	raw_send_str(fd, req);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(raw_read_response(fd, &r), 0);
		assert_int_equal(r.status, 200);
		assert_string_equal(r.body, want[i]);
		raw_response_free(&r);
	}
	close(fd);
}

static void raw_pipelined_past_read_ahead(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	char *req = malloc(200 * 64);
	char *p = req;
	char want[64];
	int fd = raw_connect(f->port, WAIT_MS);

	/* 200 requests in one write with a read-ahead of 4: reading pauses and resumes. */
	for (int i = 0; i < 200; i++)
		p += sprintf(p, "GET /items/%d HTTP/1.1\r\nHost: t\r\n\r\n", i);
	raw_send(fd, req, (size_t)(p - req));
	for (int i = 0; i < 200; i++) {
		assert_int_equal(raw_read_response(fd, &r), 0);
		snprintf(want, sizeof(want), "{\"id\":\"%d\",\"q\":\"\"}", i);
		assert_string_equal(r.body, want);
		raw_response_free(&r);
	}
	close(fd);
	free(req);
}

static void raw_slow_client_408_others_served(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	int slow = raw_connect(f->port, WAIT_MS);
	int slow_body = raw_connect(f->port, WAIT_MS);

	/* Headers never finish; a body never finishes. */
	raw_send_str(slow, "GET /hello HTTP/1.1\r\nHost: t\r\n");
	const char *partial = "POST /echo HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\nabc";
	raw_send_str(slow_body, partial);
	/* Meanwhile another client is served. */
	exchange(f->port, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n", &r);
	assert_int_equal(r.status, 200);
	raw_response_free(&r);
	/* Both slow clients get 408 and are closed. */
	assert_int_equal(raw_read_response(slow, &r), 0);
	assert_json_error(&r, 408, "request_timeout");
	raw_response_free(&r);
	assert_true(raw_wait_closed(slow));
	assert_int_equal(raw_read_response(slow_body, &r), 0);
	assert_json_error(&r, 408, "request_timeout");
	raw_response_free(&r);
	assert_true(raw_wait_closed(slow_body));
	close(slow);
	close(slow_body);
}

static void raw_client_gone_while_handler_runs(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	int fd = raw_connect(f->port, WAIT_MS);

	/* The handler answers 300 ms later, after the client left: dropped, nothing leaks. */
	raw_send_str(fd, "GET /slow/300 HTTP/1.1\r\nHost: t\r\n\r\n");
	raw_close_reset(fd);
	exchange(f->port, "GET /slow/400 HTTP/1.1\r\nHost: t\r\n\r\n", &r);
	assert_string_equal(r.body, "slow400");
	raw_response_free(&r);
}

/* GET /held until its body is want. */
static void wait_held(int port, const char *want)
{
	struct raw_response r;

	for (;;) {
		exchange(port, "GET /held HTTP/1.1\r\nHost: t\r\n\r\n", &r);
		bool ok = strcmp(r.body, want) == 0;
		raw_response_free(&r);
		if (ok)
			return;
		usleep(10000);
	}
}

/* The client resets its connection while the handler holds the request: the server tears the
 * connection down, the handler answers afterwards, and the answer is dropped. */
static void raw_client_reset_then_handler_answers(void **state)
{
	struct fixture *f = start(NULL);
	struct raw_response r;
	int fd = raw_connect(f->port, WAIT_MS);

	raw_send_str(fd, "POST /hold HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi");
	wait_held(f->port, "1");
	raw_close_reset(fd);
	wait_held(f->port, "1a"); /* the server saw the reset: http_request_aborted() */
	uv_async_send(&f->release);
	wait_held(f->port, "0");
	exchange(f->port, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n", &r);
	assert_string_equal(r.body, "hello");
	raw_response_free(&r);
	uv_async_send(&f->stop);
	pthread_join(f->thread, NULL);
	assert_true(f->closed);
	assert_int_equal(uv_loop_close(&f->loop), 0);
	free(f);
}

/* No timer may fire during this test: the limit alone is under test. */
static void tune_limit(struct http_server_config *c)
{
	c->max_connections = 3;
	c->header_timeout_ms = 600000;
	c->idle_timeout_ms = 600000;
}

static void connection_limit(void **state)
{
	struct fixture *f = start(tune_limit);
	struct raw_response r;
	int fds[3];

	/* Prove three connections are accepted and open: each answers. */
	for (int i = 0; i < 3; i++) {
		fds[i] = raw_connect(f->port, WAIT_MS);
		raw_send_str(fds[i], "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
		assert_int_equal(raw_read_response(fds[i], &r), 0);
		raw_response_free(&r);
	}
	/* A fourth is one too many. */
	int d = raw_connect(f->port, WAIT_MS);
	assert_int_equal(raw_read_response(d, &r), 0);
	assert_json_error(&r, 503, "too_many_connections");
	raw_response_free(&r);
	assert_true(raw_wait_closed(d));
	close(d);
	/* One closes: a new one is served. */
	close(fds[0]);
	for (;;) {
		int e = raw_connect(f->port, WAIT_MS);
		raw_send_str(e, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
		assert_int_equal(raw_read_response(e, &r), 0);
		int status = r.status;
		raw_response_free(&r);
		close(e);
		if (status == 200)
			break;
		usleep(10000); /* the server has not seen the close yet */
	}
	close(fds[1]);
	close(fds[2]);
	stop(f);
}

/* No timer may fire during this test either. */
static void tune_table(struct http_server_config *c)
{
	c->max_connections = 4;
	c->header_timeout_ms = 600000;
	c->idle_timeout_ms = 600000;
}

/* A full table answers: four idle connections (nothing sent) fill it, the fifth is answered 503
 * with a JSON body, Retry-After and Connection: close, then closed — before it sends anything,
 * never a silent close or a hang. The four are still served afterwards. */
static void full_table_answers_503(void **state)
{
	struct fixture *f = start(tune_table);
	struct raw_response r;
	char v[32];
	int fds[4];

	(void)state;
	for (int i = 0; i < 4; i++)
		assert_true((fds[i] = raw_connect(f->port, WAIT_MS)) >= 0);
	/* Accepted in order (one listen queue): the fifth is the one too many. */
	int d = raw_connect(f->port, WAIT_MS);
	assert_true(d >= 0);
	assert_int_equal(raw_read_response(d, &r), 0);
	assert_json_error(&r, 503, "too_many_connections");
	assert_non_null(raw_header(&r, "Retry-After", v, sizeof(v)));
	assert_string_equal(v, "1");
	assert_non_null(raw_header(&r, "Connection", v, sizeof(v)));
	assert_string_equal(v, "close");
	raw_response_free(&r);
	assert_true(raw_wait_closed(d));
	close(d);
	for (int i = 0; i < 4; i++) {
		raw_send_str(fds[i], "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
		assert_int_equal(raw_read_response(fds[i], &r), 0);
		assert_int_equal(r.status, 200);
		raw_response_free(&r);
		close(fds[i]);
	}
	stop(f);
}

/* Timers far beyond the test: only the drain may close anything. */
static void tune_drain(struct http_server_config *c)
{
	c->header_timeout_ms = 30000;
	c->body_timeout_ms = 30000;
	c->idle_timeout_ms = 60000;
}

/* The drain (R8): a half-sent request and an idle keep-alive connection are closed at once (not
 * after the 30 s header timeout), the listener is gone, a request in a handler (answering on a
 * 3 s timer) is answered with Connection: close, and the drain completes as soon as that last
 * connection is closed. */
static void drain_closes_idle_and_half_sent_at_once(void **state)
{
	struct fixture *f = start(tune_drain);
	struct raw_response r;
	char v[32];
	int idle = raw_connect(f->port, WAIT_MS);
	int half = raw_connect(f->port, WAIT_MS);
	int busy = raw_connect(f->port, WAIT_MS);

	(void)state;
	raw_send_str(idle, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
	assert_int_equal(raw_read_response(idle, &r), 0);
	raw_response_free(&r);
	/* One write: a complete request, then headers that never finish. The answer to the first
	 * proves the server read the write, so the second is half-received. */
	raw_send_str(half, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n"
			   "GET /hello HTTP/1.1\r\nHost: t\r\nX-Half: ");
	assert_int_equal(raw_read_response(half, &r), 0);
	raw_response_free(&r);
	raw_send_str(busy, "GET /slow/3000 HTTP/1.1\r\nHost: t\r\n\r\n");
	while (atomic_load(&f->slow_handed) < 1)
		usleep(1000);

	uint64_t t0 = mono_ms();
	uv_async_send(&f->drain);
	assert_true(raw_wait_closed(half));
	assert_true(raw_wait_closed(idle));
	uint64_t t1 = mono_ms();
	assert_true(t1 - t0 < 1000);			     /* the header timeout would be 30 s */
	assert_int_equal(raw_connect(f->port, WAIT_MS), -1); /* no longer accepting */
	assert_false(atomic_load(&f->drained));		     /* the handler still holds one */
	/* The request in flight is answered, last on its connection. */
	assert_int_equal(raw_read_response(busy, &r), 0);
	uint64_t t2 = mono_ms();
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, "slow3000");
	assert_string_equal(raw_header(&r, "Connection", v, sizeof(v)), "close");
	raw_response_free(&r);
	assert_true(raw_wait_closed(busy));
	close(busy);
	while (!atomic_load(&f->drained) && mono_ms() - t2 < WAIT_MS)
		usleep(1000);
	assert_true(atomic_load(&f->drained));
	/* As soon as the answered connection closed (our close, or the 200 ms linger): not after
	 * any 30 s timer. It may even come before this thread saw the answer. */
	assert_true((int64_t)(f->drained_ms - t2) < 1000);
	assert_int_equal(f->drain_rc[0], 0);
	assert_int_equal(f->drain_rc[1], -EALREADY);
	assert_int_equal(f->drain_stats.drain_dropped, 1);
	assert_int_equal(f->drain_stats.drain_idle, 1);
	assert_int_equal(f->drain_stats.open, 0);
	assert_int_equal(f->drain_stats.timeouts, 0);
	close(half);
	close(idle);
	stop(f); /* http_server_close() after the drain: done at once */
}

static void tune_idle(struct http_server_config *c)
{
	c->idle_timeout_ms = 200;
}

/* Idle keep-alive connections are closed by the server. */
static void idle_close(void **state)
{
	struct fixture *f = start(tune_idle);
	struct raw_response r;
	int fds[3];

	for (int i = 0; i < 3; i++) {
		fds[i] = raw_connect(f->port, WAIT_MS);
		raw_send_str(fds[i], "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
		if (raw_read_response(fds[i], &r) == 0) /* the idle timer may win: either is fine */
			raw_response_free(&r);
	}
	for (int i = 0; i < 3; i++) {
		assert_true(raw_wait_closed(fds[i]));
		close(fds[i]);
	}
	stop(f);
}

/* ---- strictness (issue 10 item 9) ---- */

/* Each request is answered with status and the connection closed (when closes) or kept. */
static void expect_status(int port, const char *req, int status, bool closes)
{
	struct raw_response r;

	exchange_closed(port, req, &r);
	assert_int_equal(r.status, status);
	assert_true(r.closed == closes);
	raw_response_free(&r);
}

static void raw_host_rules(void **state)
{
	struct fixture *f = *state;

	expect_status(f->port, "GET /hello HTTP/1.1\r\n\r\n", 400, true);
	expect_status(f->port, "GET /hello HTTP/1.1\r\nHost: a\r\nHost: a\r\n\r\n", 400, true);
	expect_status(f->port, "GET /hello HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n", 400, true);
	expect_status(f->port, "GET /hello HTTP/1.0\r\nHost: a\r\nHost: b\r\n\r\n", 400, true);
	expect_status(f->port, "GET /hello HTTP/1.1\r\nHost : t\r\n\r\n", 400, true);
	expect_status(f->port, "GET /hello HTTP/1.1\r\nHost: a/b\r\n\r\n", 400, true);
	expect_status(f->port, "GET /hello HTTP/1.1\r\nHost:\r\n\r\n", 400, true);
	expect_status(f->port, "GET /hello HTTP/1.1\r\nHost: a:x\r\n\r\n", 400, true);
	/* Valid forms. */
	expect_status(f->port, "GET /hello HTTP/1.1\r\nHost: api.example.com:8080\r\n\r\n", 200,
		      false);
	expect_status(f->port, "GET /hello HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", 200, false);
	expect_status(f->port, "GET /hello HTTP/1.0\r\n\r\n", 200, true); /* 1.0: optional */
}

static void raw_version_required(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;

	exchange_closed(f->port, "GET /hello\r\n\r\n", &r); /* HTTP/0.9 to llhttp */
	assert_json_error(&r, 400, "bad_request");
	assert_non_null(strstr(r.body, "no HTTP version"));
	assert_true(r.closed);
	raw_response_free(&r);
	exchange_closed(f->port, "GET /hello HTTP/2.0\r\nHost: t\r\n\r\n", &r);
	assert_json_error(&r, 505, "http_version_not_supported");
	assert_true(r.closed);
	raw_response_free(&r);
}

static const char chunked_head[] =
	"POST /echo HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";

static void raw_chunk_data_then_crlf(void **state)
{
	struct fixture *f = *state;
	const char *bad[] = { "3\r\nabcXX0\r\n\r\n", "3\r\nabc\rX0\r\n\r\n",
			      "3\r\nabcX\n0\r\n\r\n" };
	struct raw_response r;
	char req[256];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		snprintf(req, sizeof(req), "%s%s", chunked_head, bad[i]);
		exchange_closed(f->port, req, &r);
		assert_json_error(&r, 400, "bad_request");
		assert_true(r.closed);
		raw_response_free(&r);
	}
	/* The CRLF in another read than the data: checked there. Each piece is sent once the
	 * server has read the previous one (it answers nothing until the body is complete, so
	 * a 2 ms pause only makes separate reads likely; the test holds either way). */
	const char *pieces[][3] = { { "3\r\nabc", "\r", "\n0\r\n\r\n" },
				    { "3\r\nabc", "\r", "X0\r\n\r\n" },
				    { "3\r\nabc", "X", "\n0\r\n\r\n" } };
	for (size_t i = 0; i < 3; i++) {
		int fd = raw_connect(f->port, WAIT_MS);
		raw_send_str(fd, chunked_head);
		for (int k = 0; k < 3; k++) {
			usleep(2000);
			raw_send_str(fd, pieces[i][k]);
		}
		assert_int_equal(raw_read_response(fd, &r), 0);
		if (i == 0) {
			assert_int_equal(r.status, 200);
			assert_string_equal(r.body, "abc");
		} else {
			assert_json_error(&r, 400, "bad_request");
		}
		raw_response_free(&r);
		close(fd);
	}
}

/* /echo accepts 1024 bytes: chunk extensions count with the data. */
static void raw_chunk_extensions_count(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	static char req[8192];

	for (int ext = 1020; ext <= 1022; ext++) { /* 3 data bytes: below, at, above */
		int n = sprintf(req, "%s3;", chunked_head);
		memset(req + n, 'e', (size_t)ext);
		strcpy(req + n + ext, "\r\nabc\r\n0\r\n\r\n");
		exchange(f->port, req, &r);
		assert_int_equal(r.status, ext + 3 <= 1024 ? 200 : 413);
		raw_response_free(&r);
	}
	/* Many small extensions on the last chunk (llhttp 8.1 takes one "name=value" only as
	 * the last: ";n=v;m" is a 400 to it). */
	char *p = req + sprintf(req, "%s0", chunked_head);
	for (int i = 0; i < 1100; i++)
		p += sprintf(p, ";n");
	strcpy(p, "\r\n\r\n");
	exchange(f->port, req, &r);
	assert_int_equal(r.status, 413);
	raw_response_free(&r);
}

static void raw_head_on_get_routes(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	char get_len[32], head_len[32], v[32];
	int fd = raw_connect(f->port, WAIT_MS);

	raw_send_str(fd, "GET /items/7?x=1 HTTP/1.1\r\nHost: t\r\n\r\n"
			 "HEAD /items/7?x=1 HTTP/1.1\r\nHost: t\r\n\r\n"
			 "HEAD /blob HTTP/1.1\r\nHost: t\r\n\r\n"
			 "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
	assert_int_equal(raw_read_response(fd, &r), 0);
	assert_int_equal(r.status, 200);
	raw_header(&r, "Content-Length", get_len, sizeof(get_len));
	raw_response_free(&r);
	assert_int_equal(raw_read_head(fd, &r), 0);
	assert_int_equal(r.status, 200);
	raw_header(&r, "Content-Length", head_len, sizeof(head_len));
	assert_string_equal(head_len, get_len);
	assert_string_equal(raw_header(&r, "X-Item", v, sizeof(v)), "yes");
	raw_response_free(&r);
	assert_int_equal(raw_read_head(fd, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(raw_header(&r, "Content-Length", v, sizeof(v)), "65536");
	raw_response_free(&r);
	/* No body was sent for either HEAD: the next answer follows at once. */
	assert_int_equal(raw_read_response(fd, &r), 0);
	assert_string_equal(r.body, "hello");
	raw_response_free(&r);
	close(fd);
}

static void raw_upgrade_keeps_pipelined(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	char v[32];
	int fd = raw_connect(f->port, WAIT_MS);

	raw_send_str(fd, "GET /hello HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\n"
			 "Upgrade: websocket\r\n\r\n"
			 "POST /echo HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n"
			 "Content-Length: 2\r\n\r\nhi"
			 "GET /items/9 HTTP/1.1\r\nHost: t\r\n\r\n");
	assert_int_equal(raw_read_response(fd, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, "hello");
	assert_null(raw_header(&r, "Upgrade", v, sizeof(v)));
	raw_response_free(&r);
	assert_int_equal(raw_read_response(fd, &r), 0);
	assert_string_equal(r.body, "hi");
	raw_response_free(&r);
	assert_int_equal(raw_read_response(fd, &r), 0);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "\"id\":\"9\""));
	raw_response_free(&r);
	close(fd);
	/* CONNECT: the bytes after it would be a tunnel, not requests: refused, closed. */
	expect_status(f->port,
		      "CONNECT t:443 HTTP/1.1\r\nHost: t:443\r\n\r\nGET /hello HTTP/1.1\r\n"
		      "Host: t\r\n\r\n",
		      501, true);
}

static void tune_backpressure(struct http_server_config *c)
{
	c->max_write_queued = 256 * 1024;
	c->write_timeout_ms = 500;
	c->header_timeout_ms = 600000;
	c->idle_timeout_ms = 600000;
}

/* The server's counters: write_pauses, write_timeouts, write_queued_max. */
static void server_stats(int port, unsigned long long st[3])
{
	struct raw_response r;

	exchange(port, "GET /stats HTTP/1.1\r\nHost: t\r\n\r\n", &r);
	assert_int_equal(sscanf(r.body, "%llu %llu %llu", &st[0], &st[1], &st[2]), 3);
	raw_response_free(&r);
}

/* A client pipelines 5,000 GETs of a 64 KiB route (320 MiB of answers) and never reads: the
 * server stops reading once its unsent output passes max_write_queued, keeps it bounded, and
 * closes the connection when its writes make no progress. */
static void raw_pipelining_client_never_reads(void **state)
{
	struct fixture *f = start(tune_backpressure);
	const char get[] = "GET /blob HTTP/1.1\r\nHost: t\r\n\r\n";
	int fd = raw_connect(f->port, WAIT_MS), rcv = 4096;
	unsigned long long st[3];

	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
	for (int i = 0; i < 5000; i++)
		if (send(fd, get, sizeof(get) - 1, MSG_DONTWAIT | MSG_NOSIGNAL) !=
		    (ssize_t)sizeof(get) - 1)
			break; /* the server stopped reading and the buffers are full */
	for (int i = 0;; i++) {
		server_stats(f->port, st);
		if (st[1] >= 1)
			break; /* closed for lack of progress */
		assert_true(i < 3000);
		usleep(10000);
	}
	assert_true(st[0] >= 1); /* it stopped reading for its output */
	/* At most the limit plus the answers of max_pipelined requests (4 here). */
	assert_true(st[2] <= 256 * 1024 + 4 * (BLOB + 512));
	raw_close_reset(fd);
	stop(f);
}

#define WT_MS	    400 /* write_timeout_ms of the next test */
#define WT_SLACK_MS 300 /* for a loaded machine: the loop thread may run late */

static void tune_write_timeout(struct http_server_config *c)
{
	tune_backpressure(c);
	c->max_write_queued = 64 * 1024;
	c->write_timeout_ms = WT_MS;
}

/* The write timeout closes a client that pipelines requests with large answers and never reads
 * within the window common/README.md gives: between write_timeout_ms and twice that after the
 * last progress of its writes. The first send bounds the timer's start from below. The last
 * send bounds the last progress from above: the client's small receive buffer is full after
 * the first answer, the server's send buffer then fills, and the server stops reading (output
 * above max_write_queued) before our requests fill the socket buffers and send() refuses more.
 * The close is seen as a reset (our requests are left unread), polled for with a deadline. */
static void raw_write_timeout_window(void **state)
{
	struct fixture *f = start(tune_write_timeout);
	const char get[] = "GET /blob HTTP/1.1\r\nHost: t\r\n\r\n";
	int fd = raw_connect(f->port, WAIT_MS), rcv = 4096;
	unsigned long long st[3];
	uint64_t t0, last, closed = 0, end;

	char *gets = malloc(1000 * (sizeof(get) - 1));

	for (int i = 0; i < 1000; i++)
		memcpy(gets + i * (sizeof(get) - 1), get, sizeof(get) - 1);
	assert_true(fd >= 0);
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof(rcv));
	t0 = last = mono_ms();
	while (send(fd, gets, 1000 * (sizeof(get) - 1), MSG_DONTWAIT | MSG_NOSIGNAL) > 0)
		last = mono_ms();
	free(gets);
	end = mono_ms() + WAIT_MS;
	while (!closed) {
		struct pollfd p = { .fd = fd, .events = POLLRDHUP };
		int n = poll(&p, 1, 10);
		uint64_t now = mono_ms();
		if (n > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)))
			closed = now;
		assert_true(now < end);
	}
	print_message("write timeout %d ms: closed %llu ms after the first send, %llu ms after "
		      "the last send\n",
		      WT_MS, (unsigned long long)(closed - t0),
		      (unsigned long long)(closed - last));
	assert_true(closed - t0 >= WT_MS);
	assert_true(closed - last <= 2 * WT_MS + WT_SLACK_MS);
	server_stats(f->port, st);
	assert_int_equal(st[1], 1); /* write_timeouts */
	close(fd);
	stop(f);
}

static void graceful_close_finishes_in_flight(void **state)
{
	struct fixture *f = start(NULL);
	struct raw_response r;
	char v[32];
	int idle = raw_connect(f->port, WAIT_MS);
	int busy = raw_connect(f->port, WAIT_MS);

	raw_send_str(idle, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
	assert_int_equal(raw_read_response(idle, &r), 0);
	raw_response_free(&r);
	raw_send_str(busy, "POST /hold HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\nhi");
	/* Wait until the handler holds it. */
	for (;;) {
		exchange(f->port, "GET /held HTTP/1.1\r\nHost: t\r\n\r\n", &r);
		bool held = strcmp(r.body, "1") == 0;
		raw_response_free(&r);
		if (held)
			break;
		usleep(10000);
	}
	uv_async_send(&f->stop);
	/* The idle connection is closed, the listener is gone... */
	assert_true(raw_wait_closed(idle));
	close(idle);
	/* ...and the held request is still answered, with Connection: close. */
	uv_async_send(&f->release);
	assert_int_equal(raw_read_response(busy, &r), 0);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body, "released");
	assert_string_equal(raw_header(&r, "Connection", v, sizeof(v)), "close");
	raw_response_free(&r);
	assert_true(raw_wait_closed(busy));
	close(busy);
	pthread_join(f->thread, NULL);
	assert_true(f->closed);
	assert_int_equal(raw_connect(f->port, WAIT_MS), -1);
	assert_int_equal(uv_loop_close(&f->loop), 0);
	free(f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(curl_keep_alive_and_bodies, setup, teardown),
		cmocka_unit_test_setup_teardown(curl_params_query_and_404_405, setup, teardown),
		cmocka_unit_test_setup_teardown(raw_405_lists_allowed_methods, setup, teardown),
		cmocka_unit_test_setup_teardown(raw_malformed_is_400_and_closes, setup, teardown),
		cmocka_unit_test_setup_teardown(raw_oversized_line_and_headers, setup, teardown),
		cmocka_unit_test_setup_teardown(raw_body_over_route_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(raw_keep_alive_and_http10, setup, teardown),
		cmocka_unit_test_setup_teardown(raw_pipelined_in_order, setup, teardown),
		cmocka_unit_test_setup_teardown(raw_pipelined_past_read_ahead, setup, teardown),
		cmocka_unit_test_setup_teardown(raw_slow_client_408_others_served, setup, teardown),
		cmocka_unit_test_setup_teardown(raw_client_gone_while_handler_runs, setup,
						teardown),
		cmocka_unit_test_setup_teardown(raw_chunked_trailers_dropped, setup, teardown),
		cmocka_unit_test_setup_teardown(raw_no_body_for_head_204_304, setup, teardown),
		cmocka_unit_test_setup_teardown(raw_continue_behind_earlier_request, setup,
						teardown),
		cmocka_unit_test_setup_teardown(raw_host_rules, setup, teardown),
		cmocka_unit_test_setup_teardown(raw_version_required, setup, teardown),
		cmocka_unit_test_setup_teardown(raw_chunk_data_then_crlf, setup, teardown),
		cmocka_unit_test_setup_teardown(raw_chunk_extensions_count, setup, teardown),
		cmocka_unit_test_setup_teardown(raw_head_on_get_routes, setup, teardown),
		cmocka_unit_test_setup_teardown(raw_upgrade_keeps_pipelined, setup, teardown),
		cmocka_unit_test(raw_client_reset_then_handler_answers),
		cmocka_unit_test(connection_limit),
		cmocka_unit_test(full_table_answers_503),
		cmocka_unit_test(drain_closes_idle_and_half_sent_at_once),
		cmocka_unit_test(idle_close),
		cmocka_unit_test(raw_pipelining_client_never_reads),
		cmocka_unit_test(raw_write_timeout_window),
		cmocka_unit_test(graceful_close_finishes_in_flight),
	};
	curl_global_init(CURL_GLOBAL_DEFAULT);
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	curl_global_cleanup();
	return rc;
}
