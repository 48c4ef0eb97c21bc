/* HTTP client (libcurl multi on libuv) against the provider stub on the same loop: answers,
 * headers in and out, connection reuse, the error classes (connect failed, connect timeout,
 * read timeout, reset), cancellation and shutdown (every callback exactly once). */
#include "harness.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

static int setup(void **state)
{
	struct stub_config c;

	stub_config_defaults(&c);
	c.hold = true;
	c.drop_pct = 100; /* these tests look at dials, not events */
	*state = harness_start(&c);
	return 0;
}

static int teardown(void **state)
{
	harness_stop(*state);
	return 0;
}

static void answers_headers_and_reuse(void **state)
{
	struct harness *h = *state;
	struct reply a, b, s;
	const char *hdr[] = { "X-Test: 1" };

	harness_dial(h, "k1", "o1", "c1", "ct1", 1, &a);
	assert_int_equal(a.cls, HTTP_CLIENT_OK);
	assert_int_equal(a.status, 201);
	assert_string_equal(a.body, "{\"call_id\":\"pc_1\"}");
	assert_true(a.new_connections >= 1);
	harness_dial(h, "k1", "o1", "c1", "ct1", 1, &b);
	assert_int_equal(b.status, 200);
	assert_string_equal(b.body, a.body);
	assert_int_equal(b.new_connections, 0); /* the cached connection was reused */
	harness_request(h, "GET", "/stats", NULL, hdr, 1, 0, &s);
	assert_int_equal(s.status, 200);
	assert_non_null(strstr(s.body, "\"replays\":1"));
}

static void many_concurrent_share_connections(void **state)
{
	struct harness *h = *state;
	struct reply *r = calloc(200, sizeof(*r));
	char key[32];
	long conns = 0;

	for (int i = 0; i < 200; i++) {
		snprintf(key, sizeof(key), "m%d", i);
		harness_dial_async(h, key, "o1", "c1", key, 1, &r[i]);
	}
	for (int i = 0; i < 200; i++) {
		harness_wait(h, &r[i].done);
		assert_int_equal(r[i].status, 201);
		conns += r[i].new_connections;
	}
	assert_true(conns >= 1 && conns <= 200);
	assert_int_equal(harness_stat(h, "calls_placed"), 200);
	free(r);
}

/* A port that nobody listens on. */
static int closed_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	bind(fd, (struct sockaddr *)&a, sizeof(a));
	getsockname(fd, (struct sockaddr *)&a, &len);
	close(fd);
	return ntohs(a.sin_port);
}

static void on_done(const struct http_client_response *resp, void *data)
{
	struct reply *r = data;

	assert_false(r->done); /* exactly once */
	r->cls = resp->cls;
	r->status = resp->status;
	r->done = true;
}

/* Starts a GET to 127.0.0.1:port/path; returns http_client_send's result. */
static int start_get(struct harness *h, int port, const char *path, uint64_t timeout_ms,
		     uint64_t connect_ms, http_client_done_cb cb, struct reply *r,
		     struct http_client_call **call)
{
	char url[128];
	struct http_client_request req = { .url = url,
					   .timeout_ms = timeout_ms,
					   .connect_timeout_ms = connect_ms };

	memset(r, 0, sizeof(*r));
	snprintf(url, sizeof(url), "http://127.0.0.1:%d%s", port, path);
	return http_client_send(h->client, &req, cb, r, call);
}

static void get(struct harness *h, int port, const char *path, uint64_t timeout_ms,
		uint64_t connect_ms, struct reply *r, struct http_client_call **call)
{
	assert_int_equal(start_get(h, port, path, timeout_ms, connect_ms, on_done, r, call), 0);
}

static void connect_failed(void **state)
{
	struct harness *h = *state;
	struct reply r;

	/* No callback: refused up front. */
	assert_int_equal(start_get(h, 1, "/", 1000, 0, NULL, &r, NULL), -EINVAL);
	get(h, closed_port(), "/", 5000, 0, &r, NULL);
	harness_wait(h, &r.done);
	assert_int_equal(r.cls, HTTP_CLIENT_CONNECT_FAILED);
	assert_int_equal(r.status, 0);
}

static void connect_timeout(void **state)
{
	struct harness *h = *state;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int lfd = socket(AF_INET, SOCK_STREAM, 0), fill[4];
	struct reply r;

	/* A listener whose accept queue is full drops new SYNs: the connect hangs. */
	bind(lfd, (struct sockaddr *)&a, sizeof(a));
	listen(lfd, 0);
	getsockname(lfd, (struct sockaddr *)&a, &len);
	for (int i = 0; i < 4; i++) {
		fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
		connect(fill[i], (struct sockaddr *)&a, sizeof(a));
	}
	usleep(50000);
	get(h, ntohs(a.sin_port), "/", 5000, 300, &r, NULL);
	harness_wait(h, &r.done);
	assert_int_equal(r.cls, HTTP_CLIENT_CONNECT_TIMEOUT);
	for (int i = 0; i < 4; i++)
		close(fill[i]);
	close(lfd);
}

static void read_timeout(void **state)
{
	struct harness *h = *state;
	struct reply r;

	/* The stub answers o-slow's dials after 5 s; the client gives up after 200 ms. */
	assert_int_equal(
		harness_control(h, "/control/org",
				"{\"org_id\":\"o-slow\",\"slow_pct\":100,\"slow_ms\":5000}"),
		200);
	char body[512], hk[] = "Idempotency-Key: slow1";
	const char *headers[] = { hk };
	snprintf(body, sizeof(body),
		 "{\"to\":\"+15551230000\",\"org_id\":\"o-slow\",\"attempt\":1,"
		 "\"callback_url\":\"http://127.0.0.1:%d/events\"}",
		 h->recv_port);
	harness_request(h, "POST", "/calls", body, headers, 1, 200, &r);
	assert_int_equal(r.cls, HTTP_CLIENT_READ_TIMEOUT);
}

/* A server that reads the request and resets the connection. */
static void on_reset_closed(uv_handle_t *hd)
{
	free(hd);
}

static void on_reset_alloc(uv_handle_t *hd, size_t n, uv_buf_t *b)
{
	static char buf[4096];

	*b = uv_buf_init(buf, sizeof(buf));
}

static void on_reset_read(uv_stream_t *s, ssize_t n, const uv_buf_t *b)
{
	if (n > 0)
		uv_tcp_close_reset((uv_tcp_t *)s, on_reset_closed);
	else if (n < 0)
		uv_close((uv_handle_t *)s, on_reset_closed);
}

static void on_reset_conn(uv_stream_t *l, int status)
{
	uv_tcp_t *c = malloc(sizeof(*c));

	uv_tcp_init(l->loop, c);
	uv_accept(l, (uv_stream_t *)c);
	uv_read_start((uv_stream_t *)c, on_reset_alloc, on_reset_read);
}

static void on_listener_closed(uv_handle_t *hd)
{
	*(bool *)hd->data = true;
}

static void reset(void **state)
{
	struct harness *h = *state;
	uv_tcp_t l;
	struct sockaddr_in a;
	struct sockaddr_storage ss;
	int len = sizeof(ss);
	struct reply r;

	uv_ip4_addr("127.0.0.1", 0, &a);
	uv_tcp_init(&h->loop, &l);
	uv_tcp_bind(&l, (struct sockaddr *)&a, 0);
	uv_listen((uv_stream_t *)&l, 16, on_reset_conn);
	uv_tcp_getsockname(&l, (struct sockaddr *)&ss, &len);
	get(h, ntohs(((struct sockaddr_in *)&ss)->sin_port), "/", 5000, 0, &r, NULL);
	harness_wait(h, &r.done);
	assert_int_equal(r.cls, HTTP_CLIENT_RESET);
	bool closed = false;
	l.data = &closed;
	uv_close((uv_handle_t *)&l, on_listener_closed);
	harness_wait(h, &closed);
}

static void cancel_runs_callback_once(void **state)
{
	struct harness *h = *state;
	struct http_client_call *call;
	struct reply r;

	get(h, h->stub_port, "/healthz", 0, 0, &r, &call);
	assert_int_equal(http_client_pending(h->client), 1);
	http_client_cancel(call);
	assert_true(r.done);
	assert_int_equal(r.cls, HTTP_CLIENT_CANCELLED);
	assert_int_equal(http_client_pending(h->client), 0);
}

static void close_cancels_everything(void **state)
{
	struct harness *h = *state;
	struct reply r[3];

	/* Dials of o-slow take 5 s; close the client while they are out. */
	harness_control(h, "/control/org",
			"{\"org_id\":\"o-slow\",\"slow_pct\":100,\"slow_ms\":5000}");
	for (int i = 0; i < 3; i++) {
		char key[16];
		snprintf(key, sizeof(key), "c%d", i);
		harness_dial_async(h, key, "o-slow", "c1", key, 1, &r[i]);
	}
	http_client_close(h->client, NULL, NULL);
	for (int i = 0; i < 3; i++) {
		assert_true(r[i].done);
		assert_int_equal(r[i].cls, HTTP_CLIENT_CANCELLED);
	}
	/* The harness closes a fresh client. */
	assert_int_equal(http_client_new(&h->loop, NULL, &h->client), 0);
	assert_string_equal(http_client_class_name(HTTP_CLIENT_READ_TIMEOUT), "read_timeout");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(answers_headers_and_reuse, setup, teardown),
		cmocka_unit_test_setup_teardown(many_concurrent_share_connections, setup, teardown),
		cmocka_unit_test_setup_teardown(connect_failed, setup, teardown),
		cmocka_unit_test_setup_teardown(connect_timeout, setup, teardown),
		cmocka_unit_test_setup_teardown(read_timeout, setup, teardown),
		cmocka_unit_test_setup_teardown(reset, setup, teardown),
		cmocka_unit_test_setup_teardown(cancel_runs_callback_once, setup, teardown),
		cmocka_unit_test_setup_teardown(close_cancels_everything, setup, teardown),
	};
	curl_global_init(CURL_GLOBAL_DEFAULT);
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	curl_global_cleanup();
	return rc;
}
