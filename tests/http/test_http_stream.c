/* HTTP server, stream routes (http_route.stream, http_request_body_read): the body reaches a
 * consumer piece by piece, Content-Length and chunked, without being buffered (32 MiB through a
 * pausing consumer, the server's input_held_max stays at one read); back-pressure; an answer
 * given before the body is read (the rest dropped, a pipelined request behind it answered, or
 * Connection: close when 100-continue was not sent); 413 while streaming; the client going away
 * and the body timeout told to the consumer; the timeout held while the consumer pauses; the
 * body timeout idle (a trickle taken, a stall 408) and bounded by body_min_rate; a
 * drain. The server runs its loop in a second thread; the test thread is the client (raw
 * sockets). Waits are on observable events with a deadline, never on elapsed time alone. */
#define _GNU_SOURCE /* POLLRDHUP */
#include "http_server.h"

#include "rawsock.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#define WAIT_MS	      20000 /* socket receive timeout: only reached when something is broken */
#define BODY_TO_MS    300   /* the fixture's body_timeout_ms */
#define LINGER_MS     300   /* the fixture's linger_ms */
#define TRICKLE_TO_MS 600   /* body_timeout_ms of the trickle tests; a piece every quarter of it */
#define READ_BUF      65536 /* the server's read buffer (HTTP_READ_BUF) */
#define STREAM_MAX    (64u << 20)
#define SMALL_MAX     1000
#define NO_STATUS     1 /* f->status before the consumer's last call */

struct fixture {
	uv_loop_t loop;
	uv_async_t stop, go, drain;
	struct http_server *srv;
	int port;
	bool closed;
	pthread_t thread;
	struct http_request *held;  /* /late: its body not read yet (loop thread only) */
	struct http_request *gated; /* /gate: paused at its first piece (loop thread only) */
	uv_timer_t resume;	    /* /pausing: resumes the consumer on the next loop turn */
	struct http_request *paused;
	atomic_int status;	    /* the consumer's last status (NO_STATUS before it) */
	atomic_ullong bytes;	    /* body bytes the consumer got */
	atomic_ullong pieces;	    /* calls with data */
	atomic_ullong max_piece;    /* the largest piece */
	atomic_int handed;	    /* stream handlers called */
	atomic_int drain_body_read; /* http_request_body_read() after the drain (on /late) */
	atomic_int bad;		    /* checks that failed on the loop thread */
	uint64_t sum;		    /* checksum of the body (loop thread) */
};

static uint64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* ---- handlers (loop thread: no cmocka assert there, it would jump across threads) ---- */

#define CHECK(f, cond)                                                                             \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);   \
			atomic_fetch_add(&(f)->bad, 1);                                            \
		}                                                                                  \
	} while (0)

static void h_hello(struct http_request *req, void *data)
{
	http_respond(req, 200, "text/plain", "hello", 5);
}

/* Counts the body; at its end answers "<bytes> <sum>". */
static void count_cb(struct http_request *req, const char *buf, size_t len, int status, void *data)
{
	struct fixture *f = data;
	char out[64];

	if (len) {
		CHECK(f, status == 0);
		atomic_fetch_add(&f->bytes, len);
		atomic_fetch_add(&f->pieces, 1);
		if (len > atomic_load(&f->max_piece))
			atomic_store(&f->max_piece, len);
		for (size_t i = 0; i < len; i++)
			f->sum = f->sum * 31 + (unsigned char)buf[i];
		return;
	}
	atomic_store(&f->status, status);
	if (status < 0) {
		/* The server has finished it: answering now is refused. */
		CHECK(f, http_respond(req, 200, NULL, NULL, 0) == -EINVAL);
		return;
	}
	snprintf(out, sizeof(out), "%llu %llu", (unsigned long long)atomic_load(&f->bytes),
		 (unsigned long long)f->sum);
	http_respond(req, 200, "text/plain", out, strlen(out));
}

static void start_counting(struct fixture *f)
{
	atomic_store(&f->status, NO_STATUS);
	atomic_store(&f->bytes, 0);
	atomic_store(&f->pieces, 0);
	atomic_store(&f->max_piece, 0);
	f->sum = 0;
}

static void h_stream(struct http_request *req, void *data)
{
	struct fixture *f = data;
	size_t len = 1;

	atomic_fetch_add(&f->handed, 1);
	start_counting(f);
	CHECK(f, strcmp(http_request_body(req, &len), "") == 0 && len == 0);
	CHECK(f, http_request_body_read(req, count_cb, f) == 0);
}

/* 401 at once unless "Authorization: ok"; then reads like /stream. */
static void h_auth(struct http_request *req, void *data)
{
	const char *a = http_request_header(req, "Authorization");

	if (a && strcmp(a, "ok") == 0) {
		h_stream(req, data);
		return;
	}
	atomic_fetch_add(&((struct fixture *)data)->handed, 1);
	http_respond_error(req, 401, "unauthorized", "No valid key.");
}

/* Held by the test (a slow authentication): the body is read on f->go. */
static void h_late(struct http_request *req, void *data)
{
	struct fixture *f = data;

	atomic_fetch_add(&f->handed, 1);
	start_counting(f);
	f->held = req;
}

/* Pauses after every piece and resumes on the next loop turn: back-pressure all along. */
static void on_resume(uv_timer_t *t)
{
	struct fixture *f = t->data;

	if (f->paused)
		http_request_body_resume(f->paused);
	f->paused = NULL;
}

static void pausing_cb(struct http_request *req, const char *buf, size_t len, int status,
		       void *data)
{
	struct fixture *f = data;

	if (len) {
		http_request_body_pause(req);
		f->paused = req;
		uv_timer_start(&f->resume, on_resume, 0, 0);
	} else {
		f->paused = NULL;
	}
	count_cb(req, buf, len, status, data);
}

static void h_pausing(struct http_request *req, void *data)
{
	struct fixture *f = data;

	atomic_fetch_add(&f->handed, 1);
	start_counting(f);
	CHECK(f, http_request_body_read(req, pausing_cb, f) == 0);
}

/* Pauses at the first piece until f->go (a full COPY). */
static void gate_cb(struct http_request *req, const char *buf, size_t len, int status, void *data)
{
	struct fixture *f = data;

	if (len && !atomic_load(&f->pieces)) {
		http_request_body_pause(req);
		f->gated = req;
	}
	count_cb(req, buf, len, status, data);
}

static void h_gate(struct http_request *req, void *data)
{
	struct fixture *f = data;

	atomic_fetch_add(&f->handed, 1);
	start_counting(f);
	CHECK(f, http_request_body_read(req, gate_cb, f) == 0);
}

/* "<input_held_max> <requests> <open>" */
static void h_stats(struct http_request *req, void *data)
{
	struct fixture *f = data;
	struct http_server_stats st;
	char out[128];

	http_server_stats(f->srv, &st);
	snprintf(out, sizeof(out), "%llu %llu %u", (unsigned long long)st.input_held_max,
		 (unsigned long long)st.requests, st.open);
	http_respond(req, 200, "text/plain", out, strlen(out));
}

/* A buffered route: answers the length of its body. */
static void h_length(struct http_request *req, void *data)
{
	char out[32];
	size_t len;

	http_request_body(req, &len);
	snprintf(out, sizeof(out), "%zu", len);
	http_respond(req, 200, "text/plain", out, strlen(out));
}

/* http_request_body_collect(): 401 at once unless "Authorization: ok", then the whole body is
 * buffered and the answer is "<len> <sum>" of http_request_body(); a failed body's status is
 * kept in f->status. */
static void collected(struct http_request *req, int status, void *data)
{
	struct fixture *f = data;
	const char *b;
	size_t len = 0;
	uint64_t sum = 0;
	char out[64];

	atomic_store(&f->status, status);
	if (status < 0) {
		CHECK(f, http_respond(req, 200, NULL, NULL, 0) == -EINVAL);
		return;
	}
	b = http_request_body(req, &len);
	CHECK(f, b[len] == '\0');
	for (size_t i = 0; i < len; i++)
		sum = sum * 31 + (unsigned char)b[i];
	snprintf(out, sizeof(out), "%zu %llu", len, (unsigned long long)sum);
	http_respond(req, 200, "text/plain", out, strlen(out));
}

static void h_collect(struct http_request *req, void *data)
{
	struct fixture *f = data;
	const char *a = http_request_header(req, "Authorization");

	atomic_fetch_add(&f->handed, 1);
	if (!a || strcmp(a, "ok") != 0) {
		http_respond_error(req, 401, "unauthorized", "No valid key.");
		return;
	}
	atomic_store(&f->status, NO_STATUS);
	CHECK(f, http_request_body_collect(req, collected, f) == 0);
	CHECK(f, http_request_body_collect(req, collected, f) == -EINVAL); /* once */
}

/* ---- the fixture ---- */

static void on_closed(struct http_server *s, void *data)
{
	((struct fixture *)data)->closed = true;
}

static void on_handle_closed(uv_handle_t *h)
{
}

static void on_stop(uv_async_t *a)
{
	struct fixture *f = a->data;

	http_server_close(f->srv, on_closed, f);
	uv_close((uv_handle_t *)&f->stop, on_handle_closed);
	uv_close((uv_handle_t *)&f->go, on_handle_closed);
	uv_close((uv_handle_t *)&f->drain, on_handle_closed);
	uv_close((uv_handle_t *)&f->resume, on_handle_closed);
}

/* Reads a held /late body, or resumes a /gate consumer. */
static void on_go(uv_async_t *a)
{
	struct fixture *f = a->data;
	struct http_request *req = f->held;

	if (f->gated) {
		http_request_body_resume(f->gated);
		f->gated = NULL;
	}
	if (!req)
		return;
	f->held = NULL;
	int rc = http_request_body_read(req, count_cb, f);
	if (rc) {
		atomic_store(&f->drain_body_read, rc);
		http_respond(req, 503, NULL, NULL, 0);
	}
}

static void on_drain(uv_async_t *a)
{
	struct fixture *f = a->data;

	CHECK(f, http_server_drain(f->srv, NULL, NULL) == 0);
}

static void *loop_main(void *arg)
{
	struct fixture *f = arg;

	uv_run(&f->loop, UV_RUN_DEFAULT);
	return NULL;
}

#define KEEP_RATE UINT64_MAX /* start_rate(): the default body_min_rate */

static struct fixture *start_rate(uint64_t body_timeout_ms, uint64_t body_min_rate)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct http_server_config cfg;
	const struct http_route routes[] = {
		{ "GET", "/hello", 0, h_hello, f, false },
		{ "GET", "/stats", 0, h_stats, f, false },
		{ "POST", "/buffered", 4u << 20, h_length, f, false },
		{ "POST", "/stream", STREAM_MAX, h_stream, f, true },
		{ "POST", "/small", SMALL_MAX, h_stream, f, true },
		{ "POST", "/auth", SMALL_MAX, h_auth, f, true },
		{ "POST", "/late", STREAM_MAX, h_late, f, true },
		{ "POST", "/pausing", STREAM_MAX, h_pausing, f, true },
		{ "POST", "/gate", STREAM_MAX, h_gate, f, true },
		{ "POST", "/collect", 4u << 20, h_collect, f, true },
		{ "POST", "/collect_small", SMALL_MAX, h_collect, f, true },
	};

	http_server_config_defaults(&cfg);
	cfg.max_pipelined = 4;
	cfg.header_timeout_ms = 600000;
	cfg.idle_timeout_ms = 600000;
	cfg.body_timeout_ms = body_timeout_ms;
	if (body_min_rate != KEEP_RATE)
		cfg.body_min_rate = body_min_rate;
	cfg.linger_ms = LINGER_MS;
	atomic_store(&f->status, NO_STATUS);
	assert_int_equal(uv_loop_init(&f->loop), 0);
	assert_int_equal(http_server_new(&f->loop, &cfg, routes, sizeof(routes) / sizeof(routes[0]),
					 &f->srv),
			 0);
	f->port = http_server_port(f->srv);
	uv_async_init(&f->loop, &f->stop, on_stop);
	uv_async_init(&f->loop, &f->go, on_go);
	uv_async_init(&f->loop, &f->drain, on_drain);
	uv_timer_init(&f->loop, &f->resume);
	f->stop.data = f->go.data = f->drain.data = f->resume.data = f;
	pthread_create(&f->thread, NULL, loop_main, f);
	return f;
}

static struct fixture *start_with(uint64_t body_timeout_ms)
{
	return start_rate(body_timeout_ms, KEEP_RATE);
}

static struct fixture *start(void)
{
	return start_with(BODY_TO_MS);
}

static int setup(void **state)
{
	*state = start();
	return 0;
}

/* A long body timeout: large bodies through a pausing consumer on a loaded machine. */
static int setup_long(void **state)
{
	*state = start_with(600000);
	return 0;
}

/* The trickle tests: the default body_min_rate, a body timeout the pieces keep well within. */
static int setup_trickle(void **state)
{
	*state = start_with(TRICKLE_TO_MS);
	return 0;
}

/* body_min_rate 100 bytes/s: a byte every TRICKLE_TO_MS / 4 is too slow. */
static int setup_min_rate(void **state)
{
	*state = start_rate(TRICKLE_TO_MS, 100);
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;

	uv_async_send(&f->stop);
	pthread_join(f->thread, NULL);
	assert_true(f->closed);
	assert_int_equal(uv_loop_close(&f->loop), 0); /* every handle was closed */
	assert_int_equal(atomic_load(&f->bad), 0);
	free(f);
	return 0;
}

/* ---- client helpers ---- */

static int conn(struct fixture *f)
{
	int fd = raw_connect(f->port, WAIT_MS);

	assert_true(fd >= 0);
	return fd;
}

static void send_str(int fd, const char *s)
{
	assert_int_equal(raw_send_str(fd, s), 0);
}

/* Reads one response and checks its status. */
static void expect_status(int fd, int status, struct raw_response *r)
{
	assert_int_equal(raw_read_response(fd, r), 0);
	assert_int_equal(r->status, status);
}

/* The body: len bytes of a pattern; its checksum as count_cb computes it. */
static char *pattern(size_t len, uint64_t *sum)
{
	char *b = malloc(len);

	*sum = 0;
	for (size_t i = 0; i < len; i++) {
		b[i] = (char)('a' + (i * 7 + i / 3) % 26);
		*sum = *sum * 31 + (unsigned char)b[i];
	}
	return b;
}

static void expect_count(const struct raw_response *r, size_t len, uint64_t sum)
{
	char want[64];

	snprintf(want, sizeof(want), "%zu %llu", len, (unsigned long long)sum);
	assert_string_equal(r->body, want);
}

/* Forgets the last request's counts (from the test thread, before sending one). */
static void reset(struct fixture *f)
{
	atomic_store(&f->status, NO_STATUS);
	atomic_store(&f->bytes, 0);
	atomic_store(&f->pieces, 0);
}

/* Waits (deadline WAIT_MS) until the consumer's last call has come; returns its status. */
static int wait_status(struct fixture *f)
{
	uint64_t end = mono_ms() + WAIT_MS;

	while (atomic_load(&f->status) == NO_STATUS) {
		assert_true(mono_ms() < end);
		poll(NULL, 0, 5);
	}
	return atomic_load(&f->status);
}

static void server_stats(struct fixture *f, unsigned long long st[3])
{
	struct raw_response r;
	int fd = conn(f);

	send_str(fd, "GET /stats HTTP/1.1\r\nHost: t\r\n\r\n");
	expect_status(fd, 200, &r);
	assert_int_equal(sscanf(r.body, "%llu %llu %llu", &st[0], &st[1], &st[2]), 3);
	raw_response_free(&r);
	close(fd);
}

/* Returns true when nothing has arrived on fd (the server answered nothing yet). */
static bool nothing_to_read(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };

	return poll(&p, 1, 0) == 0;
}

/* Returns true when the server closes fd without sending anything more. */
static bool closed_silently(int fd)
{
	char b[64];
	ssize_t n = recv(fd, b, sizeof(b), 0);

	return n == 0 || (n < 0 && errno == ECONNRESET);
}

/* ---- tests ---- */

/* Content-Length: the consumer gets every byte in order, in pieces no larger than one read;
 * a request pipelined behind it is answered; 100-continue is sent when the body is read. */
static void stream_content_length(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	char head[256];
	uint64_t sum;
	size_t len = 3 * 1000 * 1000 + 17;
	char *body = pattern(len, &sum);
	int fd = conn(f);

	snprintf(head, sizeof(head),
		 "POST /stream HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n\r\n", len);
	send_str(fd, head);
	assert_int_equal(raw_send(fd, body, len), 0);
	send_str(fd, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
	expect_status(fd, 200, &r);
	expect_count(&r, len, sum);
	raw_response_free(&r);
	expect_status(fd, 200, &r);
	assert_string_equal(r.body, "hello");
	raw_response_free(&r);
	assert_int_equal(atomic_load(&f->status), 0);
	assert_true(atomic_load(&f->max_piece) <= READ_BUF);
	assert_true(atomic_load(&f->pieces) >= len / READ_BUF);

	/* Expect: 100-continue: 100 first (the handler reads at once), then the answer. */
	snprintf(head, sizeof(head),
		 "POST /stream HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
		 "Content-Length: 5\r\n\r\n");
	send_str(fd, head);
	expect_status(fd, 100, &r);
	raw_response_free(&r);
	send_str(fd, "abcde");
	expect_status(fd, 200, &r);
	raw_response_free(&r);

	/* No body at all: the end comes at once. */
	send_str(fd, "POST /stream HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n");
	expect_status(fd, 200, &r);
	assert_string_equal(r.body, "0 0");
	raw_response_free(&r);
	free(body);
	close(fd);
}

/* Transfer-Encoding: chunked, with extensions and chunks split across reads: de-chunked. */
static void stream_chunked(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	uint64_t sum;
	char *body = pattern(300000, &sum);
	char size[64];
	size_t off = 0, sizes[] = { 1, 100, 65536, 70000, 3, 150000, 14360 };
	int fd = conn(f);

	send_str(fd, "POST /stream HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		snprintf(size, sizeof(size), "%zx;ext=%zu\r\n", sizes[i], i);
		send_str(fd, size);
		assert_int_equal(raw_send(fd, body + off, sizes[i] / 2), 0);
		assert_int_equal(raw_send(fd, body + off + sizes[i] / 2, sizes[i] - sizes[i] / 2),
				 0);
		send_str(fd, "\r");
		send_str(fd, "\n");
		off += sizes[i];
	}
	assert_int_equal(off, 300000);
	send_str(fd, "0\r\n\r\nGET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
	expect_status(fd, 200, &r);
	expect_count(&r, off, sum);
	raw_response_free(&r);
	expect_status(fd, 200, &r);
	assert_string_equal(r.body, "hello");
	raw_response_free(&r);
	free(body);
	close(fd);
}

/* A chunked body crossing max_body while streaming: the consumer gets -EMSGSIZE, the server
 * answers 413 and closes; a Content-Length above it never reaches the handler. */
static void stream_413(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	char chunk[600];
	int fd = conn(f);

	memset(chunk, 'x', sizeof(chunk));
	send_str(fd, "POST /small HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n");
	send_str(fd, "258\r\n");
	assert_int_equal(raw_send(fd, chunk, 600), 0);
	send_str(fd, "\r\n258\r\n");
	assert_int_equal(raw_send(fd, chunk, 600), 0);
	expect_status(fd, 413, &r);
	assert_non_null(strstr(r.body, "body_too_large"));
	raw_response_free(&r);
	assert_true(raw_wait_closed(fd));
	close(fd);
	assert_int_equal(wait_status(f), -EMSGSIZE);
	assert_true(atomic_load(&f->bytes) <= SMALL_MAX);

	/* Chunk extensions count too. */
	fd = conn(f);
	send_str(fd, "POST /small HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n1;");
	memset(chunk, 'e', sizeof(chunk));
	assert_int_equal(raw_send(fd, chunk, 600), 0);
	assert_int_equal(raw_send(fd, chunk, 600), 0);
	expect_status(fd, 413, &r);
	raw_response_free(&r);
	close(fd);

	int before = atomic_load(&f->handed);
	fd = conn(f);
	send_str(fd, "POST /small HTTP/1.1\r\nHost: t\r\nContent-Length: 1001\r\n\r\n");
	expect_status(fd, 413, &r);
	raw_response_free(&r);
	close(fd);
	assert_int_equal(atomic_load(&f->handed), before);
}

/* http_request_body_collect(): a stream route that answers 401 at the end of the headers
 * (a Content-Length far above what it would buffer, no byte of the body sent) or buffers the
 * whole body (Content-Length, chunked, 100-continue, none) for http_request_body(); a chunked
 * body crossing max_body while collected is the server's 413, the collector told -EMSGSIZE. */
static void stream_collect(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	char head[256], chunk[600], want[64];
	uint64_t sum;
	size_t len = 3 * 1000 * 1000 + 5;
	char *body = pattern(len, &sum);
	unsigned long long st[3];
	int fd = conn(f);

	/* No key: 401 with no body sent, and the connection still serves the next request. */
	send_str(fd, "POST /collect HTTP/1.1\r\nHost: t\r\nContent-Length: 4000000\r\n\r\n");
	expect_status(fd, 401, &r);
	raw_response_free(&r);
	close(fd);

	fd = conn(f);
	snprintf(head, sizeof(head),
		 "POST /collect HTTP/1.1\r\nHost: t\r\nAuthorization: ok\r\n"
		 "Content-Length: %zu\r\n\r\n",
		 len);
	send_str(fd, head);
	assert_int_equal(raw_send(fd, body, len), 0);
	expect_status(fd, 200, &r);
	expect_count(&r, len, sum);
	raw_response_free(&r);
	assert_int_equal(atomic_load(&f->status), 0);
	server_stats(f, st);
	assert_true(st[0] >= len); /* the body was held, and counted */

	/* Chunked, then 100-continue, then no body. */
	send_str(fd, "POST /collect HTTP/1.1\r\nHost: t\r\nAuthorization: ok\r\n"
		     "Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\n\r\n");
	expect_status(fd, 200, &r);
	sum = 0;
	for (const char *p = "helloabc"; *p; p++)
		sum = sum * 31 + (unsigned char)*p;
	snprintf(want, sizeof(want), "8 %llu", (unsigned long long)sum);
	assert_string_equal(r.body, want);
	raw_response_free(&r);
	send_str(fd, "POST /collect HTTP/1.1\r\nHost: t\r\nAuthorization: ok\r\n"
		     "Expect: 100-continue\r\nContent-Length: 1\r\n\r\n");
	expect_status(fd, 100, &r);
	raw_response_free(&r);
	send_str(fd, "x");
	expect_status(fd, 200, &r);
	raw_response_free(&r);
	send_str(fd, "POST /collect HTTP/1.1\r\nHost: t\r\nAuthorization: ok\r\n\r\n");
	expect_status(fd, 200, &r);
	assert_string_equal(r.body, "0 0");
	raw_response_free(&r);
	close(fd);

	/* Over max_body while collecting (chunked): 413 by the server, -EMSGSIZE to the
	 * collector. */
	memset(chunk, 'x', sizeof(chunk));
	fd = conn(f);
	send_str(fd, "POST /collect_small HTTP/1.1\r\nHost: t\r\nAuthorization: ok\r\n"
		     "Transfer-Encoding: chunked\r\n\r\n258\r\n");
	assert_int_equal(raw_send(fd, chunk, 600), 0);
	send_str(fd, "\r\n258\r\n");
	assert_int_equal(raw_send(fd, chunk, 600), 0);
	expect_status(fd, 413, &r);
	raw_response_free(&r);
	assert_true(raw_wait_closed(fd));
	close(fd);
	assert_int_equal(wait_status(f), -EMSGSIZE);
	free(body);
}

/* An answer before the body is read: the rest is dropped and the next request answered. */
static void stream_early_answer_keeps_pipeline(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	char body[900], head[128];
	int fd = conn(f);

	memset(body, 'z', sizeof(body));
	/* Content-Length, the body and a request behind it in one send. */
	snprintf(head, sizeof(head),
		 "POST /auth HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n\r\n", sizeof(body));
	send_str(fd, head);
	assert_int_equal(raw_send(fd, body, sizeof(body)), 0);
	send_str(fd, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
	expect_status(fd, 401, &r);
	assert_null(strstr(r.head, "Connection: close"));
	raw_response_free(&r);
	expect_status(fd, 200, &r);
	assert_string_equal(r.body, "hello");
	raw_response_free(&r);

	/* The answer comes before the body is sent; then the body, then another request. */
	send_str(fd, head);
	expect_status(fd, 401, &r);
	raw_response_free(&r);
	assert_int_equal(raw_send(fd, body, sizeof(body)), 0);
	send_str(fd, "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
	expect_status(fd, 200, &r);
	raw_response_free(&r);

	/* Chunked. */
	send_str(fd, "POST /auth HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
		     "5\r\nhello\r\n3;x=y\r\nabc\r\n0\r\n\r\n"
		     "GET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
	expect_status(fd, 401, &r);
	raw_response_free(&r);
	expect_status(fd, 200, &r);
	assert_string_equal(r.body, "hello");
	raw_response_free(&r);

	/* Authorised: the same route reads the body. */
	send_str(fd, "POST /auth HTTP/1.1\r\nHost: t\r\nAuthorization: ok\r\n"
		     "Content-Length: 3\r\n\r\nabc");
	expect_status(fd, 200, &r);
	assert_int_equal(strncmp(r.body, "3 ", 2), 0);
	raw_response_free(&r);
	close(fd);
}

/* The early answer closes when the rest cannot be dropped safely: 100-continue not sent (the
 * client may not send the body), a body crossing max_body, a body that stops coming. */
static void stream_early_answer_closes(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	char v[32], big[700];
	int fd = conn(f);

	send_str(fd, "POST /auth HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
		     "Content-Length: 10\r\n\r\n");
	expect_status(fd, 401, &r); /* not 100 */
	assert_string_equal(raw_header(&r, "Connection", v, sizeof(v)), "close");
	raw_response_free(&r);
	assert_true(raw_wait_closed(fd));
	close(fd);

	/* Crossing max_body while dropping: closed after the answer, no 413. */
	memset(big, 'q', sizeof(big));
	fd = conn(f);
	send_str(fd, "POST /auth HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n2bc\r\n");
	expect_status(fd, 401, &r);
	raw_response_free(&r);
	assert_int_equal(raw_send(fd, big, 700), 0);
	send_str(fd, "\r\n2bc\r\n");
	assert_int_equal(raw_send(fd, big, 700), 0);
	send_str(fd, "\r\n0\r\n\r\nGET /hello HTTP/1.1\r\nHost: t\r\n\r\n");
	assert_true(closed_silently(fd)); /* no 413, no answer to the GET */
	close(fd);

	/* The rest never comes: closed linger_ms after the answer. */
	fd = conn(f);
	send_str(fd, "POST /auth HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nabc");
	expect_status(fd, 401, &r);
	raw_response_free(&r);
	uint64_t t0 = mono_ms();
	assert_true(raw_wait_closed(fd));
	assert_true(mono_ms() - t0 >= LINGER_MS / 2);
	close(fd);
}

/* The handler reads the body later (an authentication that takes a while): until then nothing
 * of it is read or held, and body_timeout_ms does not run. */
static void stream_read_later(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	unsigned long long st[3];
	uint64_t sum;
	size_t len = 64000;
	char *body = pattern(len, &sum);
	char head[128];
	int fd = conn(f);

	snprintf(head, sizeof(head),
		 "POST /late HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n\r\n", len);
	send_str(fd, head);
	/* Part of the body, which stays in the socket: not read, no 408 after 3 body timeouts. */
	assert_int_equal(raw_send(fd, body, len / 2), 0);
	poll(NULL, 0, 3 * BODY_TO_MS);
	assert_true(nothing_to_read(fd));
	assert_int_equal(atomic_load(&f->bytes), 0);
	server_stats(f, st);
	assert_true(st[0] <= READ_BUF);
	uv_async_send(&f->go);
	assert_int_equal(raw_send(fd, body + len / 2, len - len / 2), 0);
	expect_status(fd, 200, &r);
	expect_count(&r, len, sum);
	raw_response_free(&r);
	free(body);
	close(fd);
}

/* Back-pressure and memory: 32 MiB through a consumer that pauses after every piece (resumed
 * on the next loop turn); the server holds at most one read of it at any time. */
static void stream_32mib_constant_memory(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	unsigned long long st[3];
	size_t len = 32u << 20, piece = 1 << 20;
	uint64_t psum, sum = 0;
	char *chunk = pattern(piece, &psum);
	char head[128];
	int fd = conn(f);

	snprintf(head, sizeof(head),
		 "POST /pausing HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n\r\n", len);
	send_str(fd, head);
	for (size_t off = 0; off < len; off += piece) {
		assert_int_equal(raw_send(fd, chunk, piece), 0);
		for (size_t i = 0; i < piece; i++)
			sum = sum * 31 + (unsigned char)chunk[i];
	}
	expect_status(fd, 200, &r);
	expect_count(&r, len, sum);
	raw_response_free(&r);
	close(fd);
	assert_true(atomic_load(&f->pieces) >= len / READ_BUF);
	server_stats(f, st);
	print_message("32 MiB streamed in %llu pieces; input_held_max %llu bytes\n",
		      (unsigned long long)atomic_load(&f->pieces), st[0]);
	assert_true(st[0] <= READ_BUF);

	/* The same statistic for a buffered route shows its whole body. */
	size_t blen = 2u << 20;
	fd = conn(f);
	snprintf(head, sizeof(head),
		 "POST /buffered HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n\r\n", blen);
	send_str(fd, head);
	assert_int_equal(raw_send(fd, chunk, piece), 0);
	assert_int_equal(raw_send(fd, chunk, piece), 0);
	expect_status(fd, 200, &r);
	assert_int_equal(strtoull(r.body, NULL, 10), blen);
	raw_response_free(&r);
	close(fd);
	server_stats(f, st);
	assert_true(st[0] >= blen);
	free(chunk);
}

/* A consumer paused for three body timeouts: no 408 (the timer is held), the client is held
 * back by TCP, and the body completes when it resumes. */
static void stream_pause_holds_timer(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	size_t len = 2u << 20, sent = 0;
	uint64_t sum;
	char *body = pattern(len, &sum);
	char head[128];
	int fd = conn(f), sndbuf = 64 * 1024;

	/* A fixed send buffer: the socket buffers fill with a fraction of the body. */
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof(sndbuf));
	snprintf(head, sizeof(head),
		 "POST /gate HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n\r\n", len);
	send_str(fd, head);
	/* Send until the socket buffers are full: the server does not read while paused. */
	uint64_t end = mono_ms() + WAIT_MS;
	while (sent < len) {
		ssize_t n = send(fd, body + sent, len - sent, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n > 0) {
			sent += (size_t)n;
			continue;
		}
		assert_true(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
		if (atomic_load(&f->pieces))
			break; /* paused and the buffers are full */
		assert_true(mono_ms() < end);
		poll(NULL, 0, 5);
	}
	assert_true(sent < len);
	unsigned long long got = atomic_load(&f->bytes);
	poll(NULL, 0, 3 * BODY_TO_MS);
	assert_true(nothing_to_read(fd)); /* no 408 */
	assert_int_equal(atomic_load(&f->status), NO_STATUS);
	assert_int_equal(atomic_load(&f->bytes), got); /* nothing more delivered */
	assert_int_equal(atomic_load(&f->pieces), 1);
	uv_async_send(&f->go);
	assert_int_equal(raw_send(fd, body + sent, len - sent), 0);
	expect_status(fd, 200, &r);
	expect_count(&r, len, sum);
	raw_response_free(&r);
	free(body);
	close(fd);
}

/* The client goes away mid-body (FIN, then reset): the consumer gets -ECONNRESET once. */
static void stream_client_abort(void **state)
{
	struct fixture *f = *state;
	char body[5000];

	memset(body, 'a', sizeof(body));
	for (int rst = 0; rst < 2; rst++) {
		int fd = conn(f);
		reset(f);
		send_str(fd, "POST /stream HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n");
		assert_int_equal(raw_send(fd, body, sizeof(body)), 0);
		uint64_t end = mono_ms() + WAIT_MS;
		while (atomic_load(&f->bytes) < sizeof(body)) {
			assert_true(mono_ms() < end);
			poll(NULL, 0, 5);
		}
		if (rst)
			raw_close_reset(fd);
		else
			close(fd);
		assert_int_equal(wait_status(f), -ECONNRESET);
		assert_int_equal(atomic_load(&f->bytes), sizeof(body));
	}
}

/* The body stops coming: 408 after body_timeout_ms, the consumer gets -ETIMEDOUT. */
static void stream_body_timeout(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	int fd = conn(f);

	send_str(fd, "POST /stream HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nabc");
	expect_status(fd, 408, &r);
	assert_non_null(strstr(r.body, "request_timeout"));
	raw_response_free(&r);
	assert_true(raw_wait_closed(fd));
	close(fd);
	assert_int_equal(wait_status(f), -ETIMEDOUT);
	assert_int_equal(atomic_load(&f->bytes), 3);
}

/* Sends len bytes of body in pieces of piece bytes, one every TRICKLE_TO_MS / 4; stops early
 * (returns false) when the server has answered or closed. */
static bool trickle(int fd, const char *body, size_t len, size_t piece)
{
	for (size_t off = 0; off < len; off += piece) {
		struct pollfd p = { .fd = fd, .events = POLLIN };

		if (off && poll(&p, 1, TRICKLE_TO_MS / 4) != 0)
			return false;
		if (raw_send(fd, body + off, off + piece > len ? len - off : piece))
			return false;
	}
	return true;
}

/* body_timeout_ms is an idle timeout: a body that comes in pieces, each well within it, but
 * in all over three times as long, is taken, streamed and buffered. */
static void body_trickle_accepted(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	size_t piece = 4096, len = 12 * piece;
	uint64_t sum;
	char *body = pattern(len, &sum);
	char head[128];
	const char *paths[] = { "/stream", "/buffered" };

	for (int i = 0; i < 2; i++) {
		int fd = conn(f);
		uint64_t t0 = mono_ms();

		reset(f);
		snprintf(head, sizeof(head),
			 "POST %s HTTP/1.1\r\nHost: t\r\nContent-Length: %zu\r\n\r\n", paths[i],
			 len);
		send_str(fd, head);
		assert_true(trickle(fd, body, len, piece));
		expect_status(fd, 200, &r);
		if (i == 0)
			expect_count(&r, len, sum);
		else
			assert_int_equal(strtoull(r.body, NULL, 10), len);
		raw_response_free(&r);
		assert_true(mono_ms() - t0 >= 2 * TRICKLE_TO_MS); /* longer than the timeout */
		close(fd);
	}
	free(body);
}

/* A body that makes progress, then stops: 408 one idle timeout after its last bytes. */
static void body_stall_after_progress(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	size_t piece = 1000;
	uint64_t sum;
	char *body = pattern(4 * piece, &sum);
	int fd = conn(f);

	send_str(fd, "POST /stream HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n");
	assert_true(trickle(fd, body, 4 * piece, piece));
	uint64_t t0 = mono_ms();
	expect_status(fd, 408, &r);
	assert_true(mono_ms() - t0 >= TRICKLE_TO_MS / 2);
	assert_non_null(strstr(r.body, "request_timeout"));
	raw_response_free(&r);
	assert_true(raw_wait_closed(fd));
	close(fd);
	assert_int_equal(wait_status(f), -ETIMEDOUT);
	assert_int_equal(atomic_load(&f->bytes), 4 * piece);
	free(body);
}

/* body_min_rate: a byte every quarter of the idle timeout keeps no gap near it, but at 100
 * bytes/s the body may take TRICKLE_TO_MS + 10 ms a byte: 408 long before its 100 bytes (25
 * s at that pace) are sent. */
static void body_below_min_rate(void **state)
{
	struct fixture *f = *state;
	struct raw_response r;
	char body[100];
	int fd = conn(f);

	memset(body, 'x', sizeof(body));
	send_str(fd, "POST /stream HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\n");
	assert_false(trickle(fd, body, sizeof(body), 1));
	expect_status(fd, 408, &r);
	raw_response_free(&r);
	assert_true(raw_wait_closed(fd));
	close(fd);
	assert_int_equal(wait_status(f), -ETIMEDOUT);
	assert_true(atomic_load(&f->bytes) < sizeof(body));
}

/* A drain: a body being read is cancelled (-ECANCELED) and the connection closed; a handler
 * that has not read its body yet is refused (-ECONNRESET) and still answers. */
static void stream_drain(void **state)
{
	struct fixture *f = start();
	struct raw_response r;
	int a = conn(f), b = conn(f);

	send_str(a, "POST /stream HTTP/1.1\r\nHost: t\r\nContent-Length: 100\r\n\r\nabc");
	uint64_t end = mono_ms() + WAIT_MS;
	while (atomic_load(&f->bytes) < 3) {
		assert_true(mono_ms() < end);
		poll(NULL, 0, 5);
	}
	send_str(b, "POST /late HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n\r\n");
	while (atomic_load(&f->handed) < 2) {
		assert_true(mono_ms() < end);
		poll(NULL, 0, 5);
	}
	uv_async_send(&f->drain);
	assert_true(raw_wait_closed(a));
	close(a);
	assert_int_equal(atomic_load(&f->status), -ECANCELED);
	uv_async_send(&f->go); /* h_late reads now: refused, answers 503 */
	expect_status(b, 503, &r);
	raw_response_free(&r);
	assert_true(raw_wait_closed(b));
	close(b);
	assert_int_equal(atomic_load(&f->drain_body_read), -ECONNRESET);
	teardown((void **)&f);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(stream_content_length, setup, teardown),
		cmocka_unit_test_setup_teardown(stream_chunked, setup, teardown),
		cmocka_unit_test_setup_teardown(stream_413, setup, teardown),
		cmocka_unit_test_setup_teardown(stream_collect, setup_long, teardown),
		cmocka_unit_test_setup_teardown(stream_early_answer_keeps_pipeline, setup,
						teardown),
		cmocka_unit_test_setup_teardown(stream_early_answer_closes, setup, teardown),
		cmocka_unit_test_setup_teardown(stream_read_later, setup, teardown),
		cmocka_unit_test_setup_teardown(stream_32mib_constant_memory, setup_long, teardown),
		cmocka_unit_test_setup_teardown(stream_pause_holds_timer, setup, teardown),
		cmocka_unit_test_setup_teardown(stream_client_abort, setup, teardown),
		cmocka_unit_test_setup_teardown(stream_body_timeout, setup, teardown),
		cmocka_unit_test(stream_drain),
		cmocka_unit_test_setup_teardown(body_trickle_accepted, setup_trickle, teardown),
		cmocka_unit_test_setup_teardown(body_stall_after_progress, setup_trickle, teardown),
		cmocka_unit_test_setup_teardown(body_below_min_rate, setup_min_rate, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
