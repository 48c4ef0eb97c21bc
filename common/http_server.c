/* HTTP server, connection side: listener, accept, reads, the parse loop with pipelining
 * back-pressure, the in-order response queue, writes, timers, linger and close. The request
 * side (parser callbacks, routing, responses) is in http_request.c. */
#include "http_server_int.h"

#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

struct wreq {
	uv_write_t w;
	struct http_conn *conn;
	char *data; /* owned, or NULL for a static buffer */
};

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);
static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void conn_close(struct http_conn *c);

void http_server_config_defaults(struct http_server_config *c)
{
	memset(c, 0, sizeof(*c));
	c->host = "127.0.0.1";
	c->backlog = 511;
	c->max_header_bytes = 8192;
	c->max_headers = 100;
	c->max_connections = 1024;
	c->max_pipelined = 16;
	c->header_timeout_ms = 10000;
	c->body_timeout_ms = 30000;
	c->body_min_rate = 16384;
	c->idle_timeout_ms = 60000;
	c->linger_ms = 2000;
	c->max_write_queued = 1 << 20;
	c->write_timeout_ms = 30000;
}

/* ---- lifetime ---- */

/* Calls the drain callback once the drain is done, then, when closing, the close callback,
 * and frees the server. A callback that calls http_server_close() lands here again: the outer
 * call finishes the job. */
static void server_maybe_done(struct http_server *s)
{
	if (!s->draining || !s->listening_closed || !list_empty(&s->conns) || s->notifying)
		return;
	s->notifying = true;
	if (s->drain_cb) {
		http_server_drain_cb cb = s->drain_cb;
		s->drain_cb = NULL;
		cb(s, s->drain_data);
	}
	s->notifying = false;
	if (!s->closing)
		return;
	if (s->close_cb)
		s->close_cb(s, s->close_data);
	routes_free(s);
	free(s);
}

/* Frees every request that no handler still holds; returns true when none is left. */
static bool purge_requests(struct http_conn *c)
{
	struct list_node *n, *tmp;

	c->cur = NULL;
	list_for_each_safe (n, tmp, &c->reqs) {
		struct http_request *req = list_entry(n, struct http_request, node);
		if (req->handed && !req->done)
			continue;
		list_del(&req->node);
		c->queued--;
		request_free(req);
	}
	return list_empty(&c->reqs);
}

static void conn_release(struct http_conn *c)
{
	struct http_server *s = c->srv;

	if (c->handles > 0 || !purge_requests(c))
		return;
	list_del(&c->node);
	s->stats.open--;
	free(c->pending);
	free(c);
	server_maybe_done(s);
}

static void on_handle_closed(uv_handle_t *h)
{
	struct http_conn *c = h->data;

	c->handles--;
	conn_release(c);
}

static void conn_close(struct http_conn *c)
{
	if (c->closing)
		return;
	c->closing = true;
	if (c->cur && c->cur->handed)
		stream_lost(c, -ECONNRESET);
	uv_read_stop((uv_stream_t *)&c->tcp);
	uv_timer_stop(&c->timer);
	uv_close((uv_handle_t *)&c->tcp, on_handle_closed);
	uv_close((uv_handle_t *)&c->timer, on_handle_closed);
	uv_close((uv_handle_t *)&c->wtimer, on_handle_closed);
}

/* ---- timers ---- */

static void on_timer(uv_timer_t *t)
{
	struct http_conn *c = t->data;

	if (c->lingering || c->shutting) {
		conn_close(c);
	} else if (c->cur) {
		conn_fail(c, 408, "request_timeout", "The request was not received in time.");
	} else if (list_empty(&c->reqs)) {
		conn_close(c); /* idle keep-alive connection */
	}
}

void conn_arm(struct http_conn *c, uint64_t ms)
{
	if (c->closing)
		return;
	if (ms == 0)
		uv_timer_stop(&c->timer);
	else
		uv_timer_start(&c->timer, on_timer, ms, 0);
}

/* ---- writes ---- */

static void on_shutdown(uv_shutdown_t *r, int status)
{
	struct http_conn *c = r->data;

	if (c->closing)
		return;
	if (status < 0) {
		conn_close(c);
		return;
	}
	/* Drop what the client still sends for a moment, so our answer is not lost to a reset. */
	c->lingering = true;
	if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0)
		conn_arm(c, c->srv->cfg.linger_ms);
	else
		conn_close(c);
}

static void conn_shutdown(struct http_conn *c)
{
	if (c->shutting || c->closing)
		return;
	c->shutting = true;
	uv_read_stop((uv_stream_t *)&c->tcp);
	c->shutdown.data = c;
	if (uv_shutdown(&c->shutdown, (uv_stream_t *)&c->tcp, on_shutdown))
		conn_close(c);
}

static void on_write(uv_write_t *w, int status)
{
	struct wreq *wr = w->data;
	struct http_conn *c = wr->conn;

	free(wr->data);
	free(wr);
	c->writes--;
	if (!c->writes && !c->closing && uv_is_active((uv_handle_t *)&c->wtimer))
		uv_timer_stop(&c->wtimer);
	if (status < 0)
		conn_close(c);
	else if (c->close_after && list_empty(&c->reqs) && !c->cur && !c->writes)
		conn_shutdown(c);
	else
		conn_maybe_resume(c);
}

bool conn_output_full(struct http_conn *c)
{
	return uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) >
	       c->srv->cfg.max_write_queued;
}

/* Closes a connection whose writes sent nothing for a whole write_timeout_ms. */
static void on_wtimer(uv_timer_t *t)
{
	struct http_conn *c = t->data;
	size_t unsent = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
	uint64_t sent = c->wbytes - unsent;

	if (unsent == 0 || sent != c->wmark) {
		c->wmark = sent;
		return;
	}
	log_debug(LOG_HTTP, "closing %s: %zu bytes unsent for %llu ms", c->peer, unsent,
		  (unsigned long long)c->srv->cfg.write_timeout_ms);
	c->srv->stats.write_timeouts++;
	conn_close(c);
}

/* Accounts for a write just queued: the high-water mark and the progress timer. */
static void write_queued(struct http_conn *c, size_t len)
{
	struct http_server *s = c->srv;
	size_t unsent = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);

	c->wbytes += len;
	if (unsent > s->stats.write_queued_max)
		s->stats.write_queued_max = unsent;
	/* Most writes complete at once (nothing left queued): no timer for those. */
	if (unsent && s->cfg.write_timeout_ms && !uv_is_active((uv_handle_t *)&c->wtimer)) {
		c->wmark = c->wbytes - unsent;
		uv_timer_start(&c->wtimer, on_wtimer, s->cfg.write_timeout_ms,
			       s->cfg.write_timeout_ms);
	}
}

/* Writes len bytes of data; takes data (freed after the write) unless owned is false. */
static void conn_write(struct http_conn *c, char *data, size_t len, bool owned)
{
	struct wreq *wr = malloc(sizeof(*wr));
	uv_buf_t b = uv_buf_init(data, (unsigned)len);

	if (!wr) {
		if (owned)
			free(data);
		conn_close(c);
		return;
	}
	wr->conn = c;
	wr->data = owned ? data : NULL;
	wr->w.data = wr;
	c->writes++;
	if (uv_write(&wr->w, (uv_stream_t *)&c->tcp, &b, 1, on_write)) {
		c->writes--;
		free(wr->data);
		free(wr);
		conn_close(c);
		return;
	}
	write_queued(c, len);
}

void conn_continue(struct http_conn *c)
{
	static char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";

	conn_write(c, cont, sizeof(cont) - 1, false);
}

void conn_enqueue(struct http_conn *c, struct http_request *req)
{
	list_add_tail(&c->reqs, &req->node);
	c->queued++;
}

/* ---- parsing ---- */

void conn_stop_reading(struct http_conn *c)
{
	uv_read_stop((uv_stream_t *)&c->tcp);
	free(c->pending);
	c->pending = NULL;
	c->pending_len = 0;
	c->paused = false;
}

/* Stops reading outside a parse (a stream consumer paused): nothing is held unparsed. */
void conn_read_stop(struct http_conn *c)
{
	if (c->paused || c->closing)
		return;
	uv_read_stop((uv_stream_t *)&c->tcp);
	c->paused = true;
}

static void conn_pause(struct http_conn *c, const char *data, size_t len)
{
	struct http_server *s = c->srv;
	size_t held = len + (c->cur ? c->cur->body.len : 0);

	uv_read_stop((uv_stream_t *)&c->tcp);
	c->paused = true;
	if (conn_output_full(c))
		s->stats.write_pauses++;
	if (!(c->pending = malloc(len ? len : 1))) {
		conn_close(c);
		return;
	}
	memcpy(c->pending, data, len);
	c->pending_len = len;
	if (held > s->stats.input_held_max)
		s->stats.input_held_max = held;
}

/* Whether parsing may go on: the output is not above max_write_queued, a stream request's
 * consumer takes its body, and (between requests) fewer than max_pipelined wait. */
static bool conn_can_read(struct http_conn *c)
{
	return !conn_output_full(c) && !stream_blocked(c) &&
	       (c->cur || c->queued < c->srv->cfg.max_pipelined);
}

/* Feeds input to llhttp. Requests are handed to their handlers from the callbacks. llhttp runs
 * at least once, even without input: a parser paused by a stream consumer may owe the end of a
 * message that needs no more bytes (on_message_complete). */
static void conn_parse(struct http_conn *c, const char *data, size_t len)
{
	bool once = true;

	if (!data)
		data = "";
	c->in_parse = true;
	while ((len > 0 || once) && !c->closing && !c->close_after) {
		once = false;
		if (chunk_crlf_check(c, data, data + len)) {
			conn_fail(c, 400, "bad_request", "A chunk's data is not followed by CRLF.");
			break;
		}
		c->in_end = data + len;
		llhttp_errno_t e = llhttp_execute(&c->parser, data, len);
		if (e == HPE_OK)
			break;
		if (e == HPE_PAUSED) {
			const char *pos = llhttp_get_error_pos(&c->parser);
			len -= (size_t)(pos - data);
			data = pos;
			llhttp_resume(&c->parser);
			if (!conn_can_read(c)) {
				conn_pause(c, data, len);
				break;
			}
			continue;
		}
		if (c->failed && c->fail_status == 0) {
			c->close_after = true; /* no more requests: draining or Connection: close */
			conn_stop_reading(c);
		} else if (c->failed) {
			conn_fail(c, c->fail_status, c->fail_code, c->fail_msg);
		} else if (e == HPE_PAUSED_UPGRADE) {
			c->close_after = true; /* protocol upgrades are not supported: stop here */
			conn_stop_reading(c);
		} else {
			log_debug(LOG_HTTP, "bad request from %s: %s", c->peer,
				  llhttp_errno_name(e));
			conn_fail(c, 400, "bad_request", "The request is not valid HTTP/1.1.");
		}
		break;
	}
	c->in_parse = false;
	if (c->close_after && list_empty(&c->reqs) && !c->cur && !c->writes)
		conn_shutdown(c);
}

/* Parses input kept while paused, then reads again. */
static void conn_resume(struct http_conn *c)
{
	char *p = c->pending;
	size_t n = c->pending_len;

	c->pending = NULL;
	c->pending_len = 0;
	c->paused = false;
	conn_parse(c, p, n);
	free(p);
	if (!c->paused && !c->close_after && !c->closing && !c->shutting)
		uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read);
}

/* Resumes a paused connection once it has room (conn_can_read). */
void conn_maybe_resume(struct http_conn *c)
{
	if (c->paused && !c->in_parse && !c->closing && !c->shutting && conn_can_read(c))
		conn_resume(c);
}

void conn_fail(struct http_conn *c, int status, const char *code, const char *msg)
{
	struct http_request *req = c->cur;

	if (c->closing)
		return;
	if (req && req->handed) {
		stream_fail(c, status, code, msg);
		return;
	}
	if (!req) {
		if (!(req = request_new(c))) {
			conn_close(c);
			return;
		}
		conn_enqueue(c, req);
	}
	c->cur = NULL;
	req->complete = true;
	req->close_after = true;
	c->close_after = true;
	conn_stop_reading(c);
	conn_arm(c, 0);
	if (status == 503 && http_response_header(req, "Retry-After", "1")) {
		conn_close(c);
		return;
	}
	request_error(req, status, code, msg);
}

/* ---- the response queue ---- */

void conn_flush(struct http_conn *c)
{
	struct http_request *req;

	if (c->closing) {
		conn_release(c);
		return;
	}
	while ((req = conn_head(c)) && req->done) {
		bool last = false;
		if (!req->sent) {
			size_t len = req->out.len;
			last = req->close_after || !len || c->closing;
			req->sent = true;
			c->srv->stats.responses++;
			if (len)
				conn_write(c, http_buf_take(&req->out), len, true);
			if (last)
				c->close_after = true;
		}
		if (req == c->cur)
			break; /* answered before its body ended: freed when the body has been dropped */
		list_del(&req->node);
		c->queued--;
		request_free(req);
		if (last)
			break;
	}
	conn_maybe_resume(c);
	req = conn_head(c);
	if (req && !req->done && req->want_continue && !req->complete) {
		req->want_continue = false; /* its turn: the answers before it are written */
		req->continued = true;
		conn_continue(c);
	}
	if (c->closing || req || c->cur)
		return;
	if (c->close_after || c->srv->draining) {
		c->close_after = true;
		if (!c->writes)
			conn_shutdown(c);
		return;
	}
	if (!c->shutting)
		conn_arm(c, c->srv->cfg.idle_timeout_ms);
}

/* ---- reading ---- */

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
	struct http_conn *c = h->data;

	(void)suggested;
	*buf = uv_buf_init(c->srv->readbuf, sizeof(c->srv->readbuf));
}

/* The client closed its side: answer what was complete, drop a partial request. */
static void conn_eof(struct http_conn *c)
{
	conn_stop_reading(c);
	c->close_after = true;
	if (c->cur && c->cur->handed) {
		stream_lost(c, -ECONNRESET);
	} else if (c->cur) {
		list_del(&c->cur->node);
		c->queued--;
		request_free(c->cur);
		c->cur = NULL;
	}
	conn_arm(c, 0);
	conn_flush(c);
}

static void on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
	struct http_conn *c = s->data;

	if (nread == 0 || c->closing)
		return;
	if (nread < 0) {
		if (c->lingering || nread != UV_EOF)
			conn_close(c);
		else
			conn_eof(c);
		return;
	}
	if (c->lingering)
		return;
	conn_parse(c, buf->base, (size_t)nread);
}

static void start_reading(uv_stream_t *s)
{
	struct http_conn *c = s->data;

	if (uv_read_start(s, on_alloc, on_read))
		conn_close(c);
}

/* ---- the listener ---- */

static void peer_name(struct http_conn *c)
{
	struct sockaddr_storage ss;
	int len = sizeof(ss);
	char ip[INET6_ADDRSTRLEN] = "?";
	int port = 0;

	if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0) {
		if (ss.ss_family == AF_INET6) {
			uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof(ip));
			port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
		} else {
			uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof(ip));
			port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		}
	}
	snprintf(c->peer, sizeof(c->peer), "%s:%d", ip, port);
}

static struct http_conn *conn_new(struct http_server *s)
{
	struct http_conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->srv = s;
	uv_tcp_init(s->loop, &c->tcp);
	uv_timer_init(s->loop, &c->timer);
	uv_timer_init(s->loop, &c->wtimer);
	c->tcp.data = c;
	c->timer.data = c;
	c->wtimer.data = c;
	c->handles = 3;
	list_init(&c->reqs);
	list_add_tail(&s->conns, &c->node);
	s->stats.open++;
	llhttp_init(&c->parser, HTTP_REQUEST, &s->settings);
	c->parser.data = c;
	return c;
}

static void on_connection(uv_stream_t *l, int status)
{
	struct http_server *s = l->data;
	struct http_conn *c;

	if (status < 0 || s->draining || !(c = conn_new(s)))
		return;
	if (uv_accept(l, (uv_stream_t *)&c->tcp)) {
		conn_close(c);
		return;
	}
	s->stats.accepted++;
	uv_tcp_nodelay(&c->tcp, 1);
	peer_name(c);
	if (s->stats.open > s->cfg.max_connections) {
		s->stats.refused++;
		conn_fail(c, 503, "too_many_connections",
			  "The server has as many connections open as it accepts.");
		return;
	}
	start_reading((uv_stream_t *)&c->tcp);
	uint64_t first = s->cfg.header_timeout_ms < s->cfg.idle_timeout_ms
				 ? s->cfg.header_timeout_ms
				 : s->cfg.idle_timeout_ms;
	conn_arm(c, first);
}

static void on_listener_closed(uv_handle_t *h)
{
	struct http_server *s = h->data;

	s->listening_closed = true;
	server_maybe_done(s);
}

static void on_listener_failed(uv_handle_t *h)
{
	struct http_server *s = h->data;

	routes_free(s);
	free(s);
}

static int bind_listen(struct http_server *s)
{
	struct sockaddr_storage addr;
	int err;

	if (uv_ip4_addr(s->cfg.host, s->cfg.port, (struct sockaddr_in *)&addr) &&
	    uv_ip6_addr(s->cfg.host, s->cfg.port, (struct sockaddr_in6 *)&addr))
		return -EINVAL;
	if (s->cfg.reuseport) {
		/* libuv 1.44 has no flag for it: our own socket, handed over with uv_tcp_open(). */
		int one = 1, fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
		socklen_t len = addr.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
							   : sizeof(struct sockaddr_in);
		if (fd < 0)
			return -errno;
		if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
		    setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) ||
		    bind(fd, (struct sockaddr *)&addr, len)) {
			err = -errno;
			close(fd);
			return err;
		}
		if ((err = uv_tcp_open(&s->listener, fd))) {
			close(fd);
			return err;
		}
	} else if ((err = uv_tcp_bind(&s->listener, (struct sockaddr *)&addr, 0))) {
		return err;
	}
	return uv_listen((uv_stream_t *)&s->listener, s->cfg.backlog, on_connection);
}

int http_server_new(uv_loop_t *loop, const struct http_server_config *cfg,
		    const struct http_route *routes, size_t nroutes, struct http_server **out)
{
	struct http_server *s;
	int err;

	if (!loop || !out || (nroutes && !routes))
		return -EINVAL;
	if (!(s = calloc(1, sizeof(*s))))
		return -ENOMEM;
	s->loop = loop;
	list_init(&s->conns);
	if (cfg)
		s->cfg = *cfg;
	else
		http_server_config_defaults(&s->cfg);
	if (!s->cfg.host || !s->cfg.max_pipelined || !s->cfg.max_header_bytes) {
		free(s);
		return -EINVAL;
	}
	if ((err = routes_compile(s, routes, nroutes))) {
		routes_free(s);
		free(s);
		return err;
	}
	http_parser_settings(&s->settings);
	uv_tcp_init(loop, &s->listener);
	s->listener.data = s;
	if ((err = bind_listen(s))) {
		log_warn(LOG_HTTP, "cannot listen on %s:%d: %s", s->cfg.host, s->cfg.port,
			 uv_strerror(err));
		uv_close((uv_handle_t *)&s->listener, on_listener_failed);
		return err;
	}
	*out = s;
	return 0;
}

int http_server_port(const struct http_server *s)
{
	struct sockaddr_storage ss;
	int len = sizeof(ss);

	if (uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &len))
		return -1;
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

void http_server_stats(const struct http_server *s, struct http_server_stats *out)
{
	*out = s->stats;
}

/* The drain of one connection: a half-received request is dropped, nothing more is read, and
 * the connection closes now unless a handler still holds one of its requests (then the last
 * answer closes it, see conn_flush) or its answers are still being written (on_write). */
static void conn_drain(struct http_conn *c)
{
	struct http_server *s = c->srv;
	bool stream = c->cur && c->cur->handed;

	if (c->closing || c->shutting)
		return; /* already on its way out (a linger is bounded by linger_ms) */
	if (stream) {
		stream_lost(c, -ECANCELED);
		s->stats.drain_dropped++;
	} else if (c->cur) {
		list_del(&c->cur->node);
		c->queued--;
		request_free(c->cur);
		c->cur = NULL;
		s->stats.drain_dropped++;
	} else if (list_empty(&c->reqs) && !c->writes) {
		s->stats.drain_idle++;
	}
	conn_stop_reading(c);
	conn_arm(c, 0);
	c->close_after = true;
	if (stream && !list_empty(&c->reqs))
		conn_flush(c); /* an answer given before the body ended is written, then closes */
	if (c->closing || c->shutting || !list_empty(&c->reqs) || c->writes)
		return;
	conn_close(c);
}

int http_server_drain(struct http_server *s, http_server_drain_cb cb, void *data)
{
	struct list_node *n, *tmp;

	if (s->draining)
		return -EALREADY;
	s->draining = true;
	s->drain_cb = cb;
	s->drain_data = data;
	uv_close((uv_handle_t *)&s->listener, on_listener_closed);
	list_for_each_safe (n, tmp, &s->conns)
		conn_drain(list_entry(n, struct http_conn, node));
	return 0;
}

void http_server_close(struct http_server *s, http_server_close_cb cb, void *data)
{
	if (s->closing)
		return;
	s->closing = true;
	s->close_cb = cb;
	s->close_data = data;
	if (!s->draining)
		http_server_drain(s, NULL, NULL);
	else
		server_maybe_done(s); /* already drained: done now */
}
