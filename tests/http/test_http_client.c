/* HTTP client (libcurl multi on libuv) against the provider stub on the same loop: answers,
 * headers in and out, connection reuse, the error classes (connect failed, connect timeout,
 * read timeout, reset), cancellation and shutdown (every callback exactly once). */
#include "harness.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
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

/* ---- same loop turn: a loopback server the test drives by hand, without the loop ---- */

#define RAW_WAIT_MS 10000 /* generous: only a failure ever waits this long */

struct raw_server {
	int lfd, fd, port;
	char head[2048]; /* the last request head read */
	struct harness *h;
	struct reply second, third;
	bool third_seen_in_cb; /* request 3's bytes arrived before request 2's callback returned */
};

static void raw_server_start(struct raw_server *rs, struct harness *h)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);

	memset(rs, 0, sizeof(*rs));
	rs->h = h;
	rs->fd = -1;
	rs->lfd = socket(AF_INET, SOCK_STREAM, 0);
	assert_true(rs->lfd >= 0);
	assert_int_equal(bind(rs->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(rs->lfd, 4), 0);
	assert_int_equal(getsockname(rs->lfd, (struct sockaddr *)&a, &len), 0);
	rs->port = ntohs(a.sin_port);
}

/* Waits up to ms for fd to be readable, running the loop between looks when run_loop is set
 * (else the loop does not run at all). Returns true when readable. */
static bool raw_readable(struct raw_server *rs, int fd, int ms, bool run_loop)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	for (int waited = 0; waited < ms; waited += 10) {
		if (run_loop)
			uv_run(&rs->h->loop, UV_RUN_NOWAIT);
		if (poll(&p, 1, run_loop ? 10 : ms) == 1)
			return true;
		if (!run_loop)
			break;
	}
	return false;
}

/* Accepts the client's connection (running the loop while it connects). */
static void raw_accept(struct raw_server *rs)
{
	assert_true(raw_readable(rs, rs->lfd, RAW_WAIT_MS, true));
	rs->fd = accept(rs->lfd, NULL, NULL);
	assert_true(rs->fd >= 0);
}

/* Reads one request head into rs->head; returns false when none came within RAW_WAIT_MS. */
static bool raw_read_request(struct raw_server *rs, bool run_loop)
{
	size_t n = 0;

	memset(rs->head, 0, sizeof(rs->head));
	while (!strstr(rs->head, "\r\n\r\n")) {
		if (!raw_readable(rs, rs->fd, RAW_WAIT_MS, run_loop))
			return false;
		ssize_t k = recv(rs->fd, rs->head + n, sizeof(rs->head) - 1 - n, 0);
		if (k <= 0)
			return false;
		n += (size_t)k;
	}
	return true;
}

static void raw_answer(struct raw_server *rs)
{
	static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";

	assert_int_equal(send(rs->fd, ok, sizeof(ok) - 1, MSG_NOSIGNAL), (ssize_t)sizeof(ok) - 1);
}

static void raw_server_stop(struct raw_server *rs)
{
	if (rs->fd >= 0)
		close(rs->fd);
	close(rs->lfd);
}

/* Request 2's callback sends request 3 and, before returning (so the loop cannot have run),
 * looks for its bytes on the server side. */
static void on_second(const struct http_client_response *resp, void *data)
{
	struct raw_server *rs = data;
	char url[128];
	struct http_client_request req = { .url = url };

	rs->second.status = resp->status;
	rs->second.done = true;
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/third", rs->port);
	assert_int_equal(http_client_send(rs->h->client, &req, on_done, &rs->third, NULL), 0);
	assert_false(rs->third.done);
	rs->third_seen_in_cb = raw_read_request(rs, false) && strstr(rs->head, "GET /third ");
}

static void send_writes_in_the_same_turn(void **state)
{
	struct harness *h = *state;
	struct raw_server rs;
	struct reply first;
	char url[128];
	struct http_client_request req = { .url = url };

	raw_server_start(&rs, h);
	/* Request 1 opens the connection; the loop runs while it connects and writes. */
	get(h, rs.port, "/first", 0, 0, &first, NULL);
	raw_accept(&rs);
	assert_true(raw_read_request(&rs, true));
	assert_non_null(strstr(rs.head, "GET /first "));
	raw_answer(&rs);
	harness_wait(h, &first.done);
	assert_int_equal(first.status, 200);

	/* Request 2 goes out on the idle connection before http_client_send() returns: the loop
	 * does not run between the send and the server's read. Its callback does not run inside
	 * the send. */
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/second", rs.port);
	assert_int_equal(http_client_send(h->client, &req, on_second, &rs, NULL), 0);
	assert_false(rs.second.done);
	assert_true(raw_read_request(&rs, false));
	assert_non_null(strstr(rs.head, "GET /second "));
	raw_answer(&rs);
	harness_wait(h, &rs.second.done);
	assert_int_equal(rs.second.status, 200);

	/* Request 3, sent from request 2's callback, went out before that callback returned. */
	assert_true(rs.third_seen_in_cb);
	raw_answer(&rs);
	harness_wait(h, &rs.third.done);
	assert_int_equal(rs.third.status, 200);
	raw_server_stop(&rs);
}

/* ---- keep-alive, kept easy handles, counters ---- */

static void on_own_client_closed(struct http_client *c, void *data)
{
	*(bool *)data = true;
}

/* Swaps the harness's client for one made with cc (the harness helpers then use it); returns
 * the harness's own, to be put back with client_restore(). */
static struct http_client *client_swap(struct harness *h, const struct http_client_config *cc)
{
	struct http_client *own = h->client;

	assert_int_equal(http_client_new(&h->loop, cc, &h->client), 0);
	return own;
}

static void client_restore(struct harness *h, struct http_client *own)
{
	bool closed = false;

	http_client_close(h->client, on_own_client_closed, &closed);
	harness_wait(h, &closed);
	h->client = own;
}

static void thousand_sequential_requests_open_one_connection(void **state)
{
	struct harness *h = *state;
	struct http_client_stats st;
	struct reply r;
	char key[32];

	for (int i = 0; i < 1000; i++) {
		snprintf(key, sizeof(key), "seq%d", i);
		harness_dial(h, key, "o1", "c1", key, 1, &r);
		assert_int_equal(r.cls, HTTP_CLIENT_OK);
		assert_int_equal(r.status, 201);
		assert_int_equal(r.new_connections, i == 0 ? 1 : 0);
	}
	http_client_get_stats(h->client, &st);
	assert_int_equal(st.requests, 1000);
	assert_int_equal(st.completed, 1000);
	assert_int_equal(st.connections_opened, 1);
	assert_int_equal(st.reused, 999);
	assert_int_equal(st.deferred, 0);
	assert_int_equal(st.handles_created, 1); /* each request took the last one's easy handle */
	/* The stub agrees: one connection accepted, every dial placed. */
	assert_int_equal(harness_stat(h, "connections_accepted"), 1);
	assert_int_equal(harness_stat(h, "calls_placed"), 1000);
}

static void forbid_reuse_opens_a_connection_per_request(void **state)
{
	struct harness *h = *state;
	struct http_client_config cc;
	struct http_client_stats st;
	struct reply r;

	http_client_config_defaults(&cc);
	cc.no_proxy = true;
	cc.forbid_reuse = true;
	struct http_client *own = client_swap(h, &cc);
	for (int i = 0; i < 5; i++) {
		harness_request(h, "GET", "/healthz", NULL, NULL, 0, 0, &r);
		assert_int_equal(r.status, 200);
		assert_int_equal(r.new_connections, 1);
	}
	http_client_get_stats(h->client, &st);
	assert_int_equal(st.connections_opened, 5);
	assert_int_equal(st.reused, 0);
	assert_int_equal(harness_stat(h, "connections_accepted"), 5);
	client_restore(h, own);
}

/* Posts to the harness's receiver (its POST /events records the body and X-Signature). */
static void post_event(struct harness *h, const char *body, const char *sig, struct reply *r)
{
	char url[128], hs[128];
	const char *headers[] = { hs };
	struct http_client_request req = { .method = "POST",
					   .url = url,
					   .headers = headers,
					   .nheaders = sig ? 1 : 0,
					   .body = body,
					   .body_len = strlen(body) };

	snprintf(url, sizeof(url), "http://127.0.0.1:%d/events", h->recv_port);
	snprintf(hs, sizeof(hs), "X-Signature: %s", sig ? sig : "");
	memset(r, 0, sizeof(*r));
	assert_int_equal(http_client_send(h->client, &req, on_done, r, NULL), 0);
	harness_wait(h, &r->done);
	assert_int_equal(r->status, 200);
}

static void kept_handle_forgets_the_last_request(void **state)
{
	struct harness *h = *state;
	struct http_client_config cc;
	struct http_client_stats st;
	struct reply r;

	http_client_config_defaults(&cc);
	cc.no_proxy = true;
	cc.idle_handles = 1; /* every request takes the same easy handle */
	struct http_client *own = client_swap(h, &cc);
	/* A method, a body and a header do not stick to the handle. */
	harness_request(h, "DELETE", "/healthz", NULL, NULL, 0, 0, &r);
	assert_int_equal(r.status, 405);
	harness_request(h, "GET", "/healthz", NULL, NULL, 0, 0, &r);
	assert_int_equal(r.status, 200);
	assert_int_equal(harness_control(h, "/control/hold", "{\"hold\":true}"), 200);
	harness_request(h, "GET", "/healthz", NULL, NULL, 0, 0, &r);
	assert_int_equal(r.status, 200); /* a leftover body would have made it a POST: 405 */
	post_event(h, "{\"n\":1}", "t=1,v1=ab", &r);
	post_event(h, "{\"n\":2}", NULL, &r);
	assert_int_equal(h->nevents, 2);
	assert_string_equal(h->events[0].signature, "t=1,v1=ab");
	assert_string_equal(h->events[1].signature, "");
	assert_string_equal(h->events[1].body, "{\"n\":2}");
	http_client_get_stats(h->client, &st);
	assert_int_equal(st.handles_created, 1);
	assert_int_equal(st.handles_reused, 5);
	client_restore(h, own);

	/* Without kept handles, one per request. */
	cc.idle_handles = 0;
	own = client_swap(h, &cc);
	for (int i = 0; i < 3; i++)
		harness_request(h, "GET", "/healthz", NULL, NULL, 0, 0, &r);
	http_client_get_stats(h->client, &st);
	assert_int_equal(st.handles_created, 3);
	assert_int_equal(st.handles_reused, 0);
	assert_int_equal(st.connections_opened, 1); /* the connection is kept all the same */
	client_restore(h, own);
	cc.idle_handles = HTTP_CLIENT_MAX_IDLE_HANDLES + 1;
	assert_int_equal(http_client_new(&h->loop, &cc, &own), -EINVAL);
}

/* A request that ends while http_client_send() drives curl (a scheme curl may not use fails at
 * once) gets its callback from a later loop entry; cancelling it first still calls back once. */
static void end_inside_send_is_called_back_later(void **state)
{
	struct harness *h = *state;
	struct http_client_request req = { .url = "ftp://127.0.0.1:1/" };
	struct http_client_stats st;
	struct http_client_call *call, *slow;
	struct reply r = { 0 }, c = { 0 }, s = { 0 };
	struct raw_server rs;

	assert_int_equal(http_client_send(h->client, &req, on_done, &r, NULL), 0);
	assert_false(r.done);
	http_client_get_stats(h->client, &st);
	assert_int_equal(st.deferred, 1);
	assert_int_equal(http_client_pending(h->client), 1);
	harness_wait(h, &r.done);
	assert_int_equal(r.cls, HTTP_CLIENT_ERROR);
	assert_int_equal(http_client_pending(h->client), 0);

	/* Again while another request waits for a server that never answers: the failure is
	 * delivered later all the same, and the other request is left alone. (With curl 7.88 the
	 * 0-ms timer curl arms when a request is added is what delivers it; the client's idle
	 * handle would, were that timer cancelled.) */
	raw_server_start(&rs, h);
	get(h, rs.port, "/never", 2 * HARNESS_DEADLINE_MS, 0, &s, &slow);
	raw_accept(&rs);
	assert_true(raw_read_request(&rs, true)); /* written: its socket has nothing more to do */
	memset(&r, 0, sizeof(r));
	assert_int_equal(http_client_send(h->client, &req, on_done, &r, NULL), 0);
	assert_false(r.done);
	harness_wait(h, &r.done);
	assert_int_equal(r.cls, HTTP_CLIENT_ERROR);
	assert_false(s.done);
	http_client_cancel(slow);
	assert_true(s.done);
	raw_server_stop(&rs);

	assert_int_equal(http_client_send(h->client, &req, on_done, &c, &call), 0);
	assert_false(c.done);
	http_client_cancel(call);
	assert_true(c.done);
	assert_int_equal(c.cls, HTTP_CLIENT_CANCELLED);
	for (int i = 0; i < 3; i++)
		uv_run(&h->loop, UV_RUN_NOWAIT); /* on_done fails on a second callback */
	assert_int_equal(http_client_pending(h->client), 0);

	/* Closing with one waiting: cancelled, once, before http_client_close() returns. */
	memset(&c, 0, sizeof(c));
	assert_int_equal(http_client_send(h->client, &req, on_done, &c, NULL), 0);
	http_client_close(h->client, NULL, NULL);
	assert_true(c.done);
	assert_int_equal(c.cls, HTTP_CLIENT_CANCELLED);
	assert_int_equal(http_client_new(&h->loop, NULL, &h->client), 0);
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
		cmocka_unit_test_setup_teardown(send_writes_in_the_same_turn, setup, teardown),
		cmocka_unit_test_setup_teardown(thousand_sequential_requests_open_one_connection,
						setup, teardown),
		cmocka_unit_test_setup_teardown(forbid_reuse_opens_a_connection_per_request, setup,
						teardown),
		cmocka_unit_test_setup_teardown(kept_handle_forgets_the_last_request, setup,
						teardown),
		cmocka_unit_test_setup_teardown(end_inside_send_is_called_back_later, setup,
						teardown),
	};
	curl_global_init(CURL_GLOBAL_DEFAULT);
	int rc = cmocka_run_group_tests(tests, NULL, NULL);
	curl_global_cleanup();
	return rc;
}
