/* HTTP server, request side: llhttp callbacks, routing, request accessors, response
 * serialization. The connection side is in http_server.c. */
#include "http_server_int.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define NO_VALUE ((size_t)-1)

static struct http_conn *conn_of(llhttp_t *p)
{
	return p->data;
}

/* Stops the parser with an error the connection answers (see conn_parse). */
static int fail(llhttp_t *p, int status, const char *code, const char *msg)
{
	struct http_conn *c = conn_of(p);

	c->failed = true;
	c->fail_status = status;
	c->fail_code = code;
	c->fail_msg = msg;
	return HPE_USER;
}

int parser_fail(llhttp_t *p, int status, const char *code, const char *msg)
{
	return fail(p, status, code, msg);
}

static int nomem(llhttp_t *p)
{
	return fail(p, 500, "internal", "The server ran out of memory.");
}

/* 413, naming the route's limit (the message lives in the connection until it is answered). */
static int body_too_large(llhttp_t *p)
{
	struct http_conn *c = conn_of(p);
	size_t max = c->cur && c->cur->route ? c->cur->route->r.max_body : 0;

	snprintf(c->fail_buf, sizeof(c->fail_buf),
		 "The request body is larger than this route accepts: at most %zu bytes.", max);
	return fail(p, 413, "body_too_large", c->fail_buf);
}

struct http_request *request_new(struct http_conn *c)
{
	struct http_request *req = calloc(1, sizeof(*req));

	if (!req)
		return NULL;
	req->conn = c;
	req->method = "";
	req->path = "";
	req->query = "";
	req->keep_alive = true;
	return req;
}

void request_free(struct http_request *req)
{
	http_buf_free(&req->arena);
	http_buf_free(&req->body);
	http_buf_free(&req->extra);
	http_buf_free(&req->out);
	free(req->hdrs);
	free(req->segbuf);
	free(req);
}

/* ---- parser callbacks ---- */

static int on_message_begin(llhttp_t *p)
{
	struct http_conn *c = conn_of(p);
	struct http_request *req;

	if (c->close_after || c->srv->draining || c->closing)
		return fail(p, 0, NULL, NULL); /* no more requests on this connection */
	if (!(req = request_new(c)))
		return nomem(p);
	conn_enqueue(c, req);
	c->cur = req;
	conn_arm(c, c->srv->cfg.header_timeout_ms);
	return 0;
}

static int on_url(llhttp_t *p, const char *at, size_t n)
{
	struct http_request *req = conn_of(p)->cur;

	req->url_len += n;
	if (req->url_len > conn_of(p)->srv->cfg.max_header_bytes)
		return fail(p, 414, "uri_too_long",
			    "The request line is longer than the server accepts.");
	return http_buf_append(&req->arena, at, n) ? nomem(p) : 0;
}

static int on_url_complete(llhttp_t *p)
{
	return http_buf_append(&conn_of(p)->cur->arena, "", 1) ? nomem(p) : 0;
}

static int header_bytes(llhttp_t *p, size_t n)
{
	struct http_conn *c = conn_of(p);

	c->cur->hdr_bytes += n;
	if (c->cur->hdr_bytes > c->srv->cfg.max_header_bytes)
		return fail(p, 431, "headers_too_large",
			    "The request headers are larger than the server accepts.");
	return 0;
}

/* llhttp reports a chunked body's trailers through the header callbacks, after
 * on_headers_complete. They are counted against max_header_bytes and otherwise dropped: storing
 * them would grow the arena that path, query and the headers point into. */
static int trailer(llhttp_t *p, size_t n)
{
	return header_bytes(p, n) ? HPE_USER : 0;
}

static int on_header_field(llhttp_t *p, const char *at, size_t n)
{
	struct http_conn *c = conn_of(p);
	struct http_request *req = c->cur;

	if (req->headers_done)
		return trailer(p, n);
	if (!req->in_value && (req->nhdrs == 0 || req->hdrs[req->nhdrs - 1].value != NO_VALUE)) {
		if (req->nhdrs >= c->srv->cfg.max_headers)
			return fail(p, 431, "headers_too_large",
				    "The request has too many headers.");
		if (req->nhdrs == req->hdr_cap) {
			unsigned cap = req->hdr_cap ? req->hdr_cap * 2 : 16;
			struct hdr *h = realloc(req->hdrs, cap * sizeof(*h));
			if (!h)
				return nomem(p);
			req->hdrs = h;
			req->hdr_cap = cap;
		}
		req->hdrs[req->nhdrs].name = req->arena.len;
		req->hdrs[req->nhdrs].value = NO_VALUE;
		req->nhdrs++;
	}
	req->in_value = false;
	if (header_bytes(p, n))
		return HPE_USER;
	/* llhttp 8.1 takes "Host : x" as a header named "Host "; RFC 9112 §5.1 says 400. */
	if (memchr(at, ' ', n))
		return fail(p, 400, "bad_request",
			    "A header name is followed by whitespace before its colon.");
	return http_buf_append(&req->arena, at, n) ? nomem(p) : 0;
}

static int on_header_field_complete(llhttp_t *p)
{
	struct http_request *req = conn_of(p)->cur;

	if (req->headers_done)
		return 0;
	return http_buf_append(&req->arena, "", 1) ? nomem(p) : 0;
}

static int on_header_value(llhttp_t *p, const char *at, size_t n)
{
	struct http_request *req = conn_of(p)->cur;

	if (req->headers_done)
		return trailer(p, n);
	if (!req->in_value) {
		req->hdrs[req->nhdrs - 1].value = req->arena.len;
		req->in_value = true;
	}
	if (header_bytes(p, n))
		return HPE_USER;
	return http_buf_append(&req->arena, at, n) ? nomem(p) : 0;
}

static int on_header_value_complete(llhttp_t *p)
{
	struct http_request *req = conn_of(p)->cur;

	if (req->headers_done)
		return 0;
	if (!req->in_value)
		req->hdrs[req->nhdrs - 1].value = req->arena.len;
	req->in_value = false;
	return http_buf_append(&req->arena, "", 1) ? nomem(p) : 0;
}

/* ---- routing ---- */

static int split_path(struct http_request *req)
{
	char *s;

	if (!(req->segbuf = strdup(req->path)))
		return -ENOMEM;
	s = req->segbuf;
	if (*s != '/')
		return -EINVAL;
	s++;
	req->nseg = 0;
	while (*s) {
		char *slash = strchr(s, '/');
		if (req->nseg == HTTP_MAX_SEGMENTS)
			return -EINVAL;
		req->seg[req->nseg++] = s;
		if (!slash)
			break;
		*slash = '\0';
		s = slash + 1;
		if (!*s) { /* a trailing slash makes an empty last segment */
			if (req->nseg == HTTP_MAX_SEGMENTS)
				return -EINVAL;
			req->seg[req->nseg++] = s;
		}
	}
	return 0;
}

static bool path_matches(const struct route *r, const struct http_request *req)
{
	if (r->nseg != req->nseg)
		return false;
	for (unsigned i = 0; i < r->nseg; i++) {
		if (r->segs[i][0] == '{') {
			if (!req->seg[i][0])
				return false;
		} else if (strcmp(r->segs[i], req->seg[i]) != 0) {
			return false;
		}
	}
	return true;
}

/* Finds the route; sets req->err_status to 404/405 when there is none. */
static int route(struct http_server *s, struct http_request *req)
{
	struct http_buf allow = { 0 };
	const struct route *get = NULL; /* the GET route of the path: it serves HEAD too */
	bool head = false;		/* the path has a HEAD route of its own */
	int err = split_path(req);

	if (err == -ENOMEM)
		return err;
	for (size_t i = 0; !err && i < s->nroutes; i++) {
		const char *m = s->routes[i].r.method;
		if (!path_matches(&s->routes[i], req))
			continue;
		if (strcmp(m, req->method) == 0) {
			req->route = &s->routes[i];
			http_buf_free(&allow);
			return 0;
		}
		if (!get && strcmp(m, "GET") == 0)
			get = &s->routes[i];
		head = head || strcmp(m, "HEAD") == 0;
		if ((allow.len && http_buf_puts(&allow, ", ")) || http_buf_puts(&allow, m))
			err = -ENOMEM;
	}
	if (!err && get && strcmp(req->method, "HEAD") == 0) {
		req->route = get; /* answered as the GET, without the body (serialize) */
		http_buf_free(&allow);
		return 0;
	}
	if (!err && get && !head && http_buf_puts(&allow, ", HEAD"))
		err = -ENOMEM;
	if (allow.len) {
		req->err_status = 405;
		req->err_code = "method_not_allowed";
		req->err_msg = "This path does not accept that method.";
		if (http_response_header(req, "Allow", allow.data))
			err = -ENOMEM;
	} else {
		req->err_status = 404;
		req->err_code = "not_found";
		req->err_msg = "No route matches this path.";
	}
	http_buf_free(&allow);
	return err == -ENOMEM ? err : 0;
}

static void finish_headers(struct http_request *req)
{
	for (unsigned i = 0; i < req->nhdrs; i++)
		if (req->hdrs[i].value == NO_VALUE)
			req->hdrs[i].value = req->hdrs[i].name; /* cannot happen with llhttp */
	req->path = req->arena.data ? req->arena.data : "";
	char *q = strchr(req->path, '?');
	if (q) {
		*q = '\0';
		req->query = q + 1;
	}
	req->headers_done = true;
}

/* Sends "100 Continue" when the client waits for it: now when nothing is queued before it,
 * else when the answers before it are written (conn_flush). */
static void maybe_continue(struct http_conn *c, struct http_request *req)
{
	const char *e = http_request_header(req, "Expect");

	if (!e || strcasecmp(e, "100-continue") != 0)
		return;
	if (conn_head(c) == req)
		conn_continue(c);
	else
		req->want_continue = true;
}

/* A Host value is a uri-host with an optional port (RFC 9110 §7.2, RFC 3986 §3.2.2): a
 * reg-name or IPv4 address (unreserved, sub-delims, %XX), or an IP literal in brackets. */
static bool host_valid(const char *h)
{
	const char *s = h;

	if (*s == '[') {
		s += 1 + strspn(s + 1, "0123456789abcdefABCDEF:.vV%-_~");
		if (*s++ != ']' || s == h + 2)
			return false;
	} else {
		while (*s && *s != ':') {
			if (*s == '%') {
				if (!isxdigit((unsigned char)s[1]) ||
				    !isxdigit((unsigned char)s[2]))
					return false;
				s += 3;
			} else if (isalnum((unsigned char)*s) || strchr("-._~!$&'()*+,;=", *s)) {
				s++;
			} else {
				return false;
			}
		}
		if (s == h)
			return false; /* empty: an "http" URI has a host */
	}
	if (*s == ':')
		s++;
	return strspn(s, "0123456789") == strlen(s);
}

/* RFC 9112 §2.3, §3.2, §9.9 and RFC 9110 §7.2, as nginx and h2o apply them: a version,
 * HTTP/1.x, one valid Host (required in 1.1). Returns 0 or fail()'s HPE_USER. */
static int check_request(llhttp_t *p, struct http_request *req)
{
	const char *host = NULL;
	unsigned nhost = 0;

	if (p->http_major == 0) /* llhttp 8.1 takes "GET /" as HTTP/0.9 */
		return fail(p, 400, "bad_request", "The request line has no HTTP version.");
	if (p->http_major != 1)
		return fail(p, 505, "http_version_not_supported",
			    "The server speaks HTTP/1.0 and HTTP/1.1 only.");
	if (p->method == HTTP_CONNECT)
		return fail(p, 501, "not_implemented", "The server does not tunnel (CONNECT).");
	for (unsigned i = 0; i < req->nhdrs; i++)
		if (strcasecmp(req->arena.data + req->hdrs[i].name, "Host") == 0) {
			host = req->arena.data + req->hdrs[i].value;
			nhost++;
		}
	if (nhost > 1)
		return fail(p, 400, "bad_request", "The request has more than one Host header.");
	if (!host && p->http_minor == 1)
		return fail(p, 400, "bad_request", "An HTTP/1.1 request needs a Host header.");
	if (host && !host_valid(host))
		return fail(p, 400, "bad_request", "The Host header is not a valid host[:port].");
	return 0;
}

/* ---- the body timer ----
 * body_timeout_ms is an idle timeout, as nginx's client_body_timeout ("the period between two
 * successive read operations"): it starts again whenever body bytes arrive. body_min_rate
 * bounds the whole, as Apache's mod_reqtimeout MinRate: the time the body is read (paused time
 * not counted) may not exceed body_timeout_ms + received / body_min_rate, so a client that
 * trickles a byte now and then is cut although no gap reaches the idle timeout. */
static void body_timer_arm(struct http_conn *c, struct http_request *req)
{
	const struct http_server_config *cfg = &c->srv->cfg;
	uint64_t ms = cfg->body_timeout_ms;

	if (ms && cfg->body_min_rate) {
		uint64_t used = req->body_used + (uv_now(c->srv->loop) - req->body_since);
		uint64_t allowed = ms + (uint64_t)req->received * 1000 / cfg->body_min_rate;
		uint64_t left = allowed > used ? allowed - used : 1;

		if (left < ms)
			ms = left;
	}
	conn_arm(c, ms); /* 0: no timer */
}

/* The body starts being read: the end of a buffered request's headers, or a stream's. */
void body_timer_start(struct http_conn *c, struct http_request *req)
{
	req->body_used = 0;
	req->body_since = uv_now(c->srv->loop);
	body_timer_arm(c, req);
}

/* The consumer does not take the body: its time stops, body_timer_release() goes on. */
void body_timer_hold(struct http_conn *c, struct http_request *req)
{
	if (req->timer_held || c->closing)
		return;
	req->timer_held = true;
	req->body_used += uv_now(c->srv->loop) - req->body_since;
	uv_timer_stop(&c->timer);
}

/* The consumer takes the body again: the idle timeout starts over (the client was held back by
 * the server, not idle), the reading time goes on from where it stopped. */
void body_timer_release(struct http_conn *c, struct http_request *req)
{
	if (!req->timer_held)
		return;
	req->timer_held = false;
	req->body_since = uv_now(c->srv->loop);
	body_timer_arm(c, req);
}

static int on_headers_complete(llhttp_t *p)
{
	struct http_conn *c = conn_of(p);
	struct http_request *req = c->cur;
	bool has_body = (p->flags & F_CHUNKED) || p->content_length > 0;

	finish_headers(req);
	if (check_request(p, req))
		return HPE_USER;
	/* Upgrade is ignored (RFC 9110 §7.8): the request is answered like any other and the
	 * connection stays HTTP/1.1, so a request pipelined behind it is read and answered. */
	p->upgrade = 0;
	req->method = llhttp_method_name((llhttp_method_t)p->method);
	req->keep_alive = llhttp_should_keep_alive(p);
	req->http10 = p->http_major == 1 && p->http_minor == 0;
	if (route(c->srv, req))
		return nomem(p);
	if (req->err_status && has_body)
		return fail(p, req->err_status, req->err_code, req->err_msg);
	if (req->route && p->content_length > req->route->r.max_body && !(p->flags & F_CHUNKED))
		return body_too_large(p);
	if (req->route && req->route->r.stream && !req->err_status)
		return stream_start(p, req, has_body); /* 100 Continue when its body is read */
	if (req->route && has_body)
		maybe_continue(c, req);
	body_timer_start(c, req);
	return 0;
}

/* Checks the bytes in [p, end) that follow a chunk's data: llhttp 8.1 skips two bytes there
 * without looking at them ("abcXX0\r\n" passes as "abc"). Returns 0, or -1 (the connection
 * answers 400) when they are not CRLF. The bytes not yet received are checked at the start of
 * the next input (conn_parse). */
int chunk_crlf_check(struct http_conn *c, const char *p, const char *end)
{
	for (; c->crlf_left && p < end; p++, c->crlf_left--)
		if (*p != (c->crlf_left == 2 ? '\r' : '\n'))
			return -1;
	return 0;
}

static int bad_chunk(llhttp_t *p)
{
	return fail(p, 400, "bad_request", "A chunk's data is not followed by CRLF.");
}

static int on_body(llhttp_t *p, const char *at, size_t n)
{
	struct http_conn *c = conn_of(p);
	struct http_request *req = c->cur;
	bool chunk_end = (p->flags & F_CHUNKED) && p->content_length == 0;

	if (!req->route || req->received + req->ext_bytes + n > req->route->r.max_body)
		return body_too_large(p);
	req->received += n;
	if (n && !req->done && !req->timer_held)
		body_timer_arm(c, req); /* bytes came: the idle timeout starts over */
	if (req->stream)
		return stream_body(p, req, at, n, chunk_end);
	if (n && http_buf_append(&req->body, at, n))
		return nomem(p);
	if (req->body.len > c->srv->stats.input_held_max)
		c->srv->stats.input_held_max = req->body.len;
	if (chunk_end) { /* the chunk's data ends here */
		c->crlf_left = 2;
		if (chunk_crlf_check(c, at + n, c->in_end))
			return bad_chunk(p);
	}
	return 0;
}

/* Chunk extensions (";name=value" after a chunk size) are dropped, but their bytes count
 * against the route's max_body with the data: llhttp would otherwise read them unbounded. */
static int on_chunk_ext(llhttp_t *p, const char *at, size_t n)
{
	struct http_request *req = conn_of(p)->cur;

	(void)at;
	req->ext_bytes += n;
	if (!req->route || req->received + req->ext_bytes > req->route->r.max_body)
		return body_too_large(p);
	return 0;
}

static int on_message_complete(llhttp_t *p)
{
	struct http_conn *c = conn_of(p);
	struct http_request *req = c->cur;

	req->complete = true;
	c->cur = NULL;
	conn_arm(c, 0);
	if (!req->keep_alive) {
		req->close_after = true;
		c->close_after = true;
	}
	if (req->stream) {
		stream_message_complete(req);
	} else if (req->err_status) {
		request_error(req, req->err_status, req->err_code, req->err_msg);
	} else {
		req->handed = true;
		c->srv->stats.requests++;
		req->route->r.handler(req, req->route->r.data);
	}
	/* req may be gone now. Read ahead no further than max_pipelined, and not while the output
	 * waiting to be sent is above max_write_queued. */
	if ((c->queued >= c->srv->cfg.max_pipelined || conn_output_full(c)) && !c->close_after)
		return HPE_PAUSED;
	return 0;
}

void http_parser_settings(llhttp_settings_t *s)
{
	llhttp_settings_init(s);
	s->on_message_begin = on_message_begin;
	s->on_url = on_url;
	s->on_url_complete = on_url_complete;
	s->on_header_field = on_header_field;
	s->on_header_field_complete = on_header_field_complete;
	s->on_header_value = on_header_value;
	s->on_header_value_complete = on_header_value_complete;
	s->on_headers_complete = on_headers_complete;
	s->on_body = on_body;
	s->on_chunk_extension_name = on_chunk_ext;
	s->on_chunk_extension_value = on_chunk_ext;
	s->on_message_complete = on_message_complete;
}

/* ---- routes ---- */

int routes_compile(struct http_server *s, const struct http_route *routes, size_t n)
{
	if (!(s->routes = calloc(n ? n : 1, sizeof(*s->routes))))
		return -ENOMEM;
	s->nroutes = n;
	for (size_t i = 0; i < n; i++) {
		struct route *r = &s->routes[i];
		const char *p = routes[i].pattern;
		r->r = routes[i];
		if (!p || p[0] != '/' || !routes[i].handler || !routes[i].method)
			return -EINVAL;
		for (p++; *p;) {
			size_t len = strcspn(p, "/");
			if (r->nseg == HTTP_MAX_SEGMENTS || !(r->segs[r->nseg] = strndup(p, len)))
				return r->nseg == HTTP_MAX_SEGMENTS ? -EINVAL : -ENOMEM;
			r->nseg++;
			p += len;
			if (*p == '/')
				p++;
		}
	}
	return 0;
}

void routes_free(struct http_server *s)
{
	for (size_t i = 0; s->routes && i < s->nroutes; i++)
		for (unsigned j = 0; j < s->routes[i].nseg; j++)
			free(s->routes[i].segs[j]);
	free(s->routes);
	s->routes = NULL;
}

/* ---- accessors ---- */

const char *http_request_method(const struct http_request *req)
{
	return req->method;
}

const char *http_request_path(const struct http_request *req)
{
	return req->path;
}

const char *http_request_query(const struct http_request *req)
{
	return req->query;
}

const char *http_request_header(const struct http_request *req, const char *name)
{
	if (!req->headers_done)
		return NULL;
	for (unsigned i = 0; i < req->nhdrs; i++)
		if (strcasecmp(req->arena.data + req->hdrs[i].name, name) == 0)
			return req->arena.data + req->hdrs[i].value;
	return NULL;
}

unsigned http_request_header_count(const struct http_request *req)
{
	return req->headers_done ? req->nhdrs : 0;
}

void http_request_header_at(const struct http_request *req, unsigned i, const char **name,
			    const char **value)
{
	*name = req->arena.data + req->hdrs[i].name;
	*value = req->arena.data + req->hdrs[i].value;
}

const char *http_request_route(const struct http_request *req)
{
	return req->route ? req->route->r.pattern : NULL;
}

const char *http_request_param(const struct http_request *req, const char *name)
{
	size_t n = strlen(name);

	if (!req->route)
		return NULL;
	for (unsigned i = 0; i < req->route->nseg; i++) {
		const char *s = req->route->segs[i];
		if (s[0] == '{' && strncmp(s + 1, name, n) == 0 && s[n + 1] == '}' && !s[n + 2])
			return req->seg[i];
	}
	return NULL;
}

const char *http_request_body(const struct http_request *req, size_t *len)
{
	*len = req->body.len;
	return req->body.data ? req->body.data : "";
}

bool http_request_aborted(const struct http_request *req)
{
	return req->conn->closing;
}

const char *http_request_peer(const struct http_request *req)
{
	return req->conn->peer;
}

/* ---- responses ---- */

int http_response_header(struct http_request *req, const char *name, const char *value)
{
	if (strpbrk(name, "\r\n:") || strpbrk(value, "\r\n"))
		return -EINVAL;
	return http_buf_printf(&req->extra, "%s: %s\r\n", name, value);
}

void http_response_headers_reset(struct http_request *req)
{
	req->extra.len = 0;
}

/* HEAD answers and 304 carry no body, but the Content-Length of the one they stand for; a
 * 204 carries neither (RFC 9110 §6.4.1, §8.6). */
/* The Date header every answer carries (RFC 9110 §6.6.1), formatted once a second. */
static const char *date_header(struct http_server *srv)
{
	time_t now = time(NULL);
	struct tm tm;

	if (now != srv->date_sec || !srv->date[0]) {
		gmtime_r(&now, &tm);
		strftime(srv->date, sizeof(srv->date), "Date: %a, %d %b %Y %H:%M:%S GMT\r\n", &tm);
		srv->date_sec = now;
	}
	return srv->date;
}

static int serialize(struct http_request *req, int status, const char *ctype, const void *body,
		     size_t len)
{
	struct http_buf *o = &req->out;
	bool nobody = status == 204 || status == 304 || strcmp(req->method, "HEAD") == 0;
	int err = http_buf_printf(o, "HTTP/1.1 %d %s\r\n", status, http_reason(status));

	if (!err)
		err = http_buf_puts(o, date_header(req->conn->srv));
	if (!err && ctype)
		err = http_buf_printf(o, "Content-Type: %s\r\n", ctype);
	if (!err && status != 204)
		err = http_buf_printf(o, "Content-Length: %zu\r\n", len);
	if (!err && req->close_after)
		err = http_buf_puts(o, "Connection: close\r\n");
	else if (!err && req->http10)
		err = http_buf_puts(o, "Connection: keep-alive\r\n");
	if (!err && req->extra.len)
		err = http_buf_append(o, req->extra.data, req->extra.len);
	if (!err)
		err = http_buf_append(o, "\r\n", 2);
	if (!err && len && !nobody)
		err = http_buf_append(o, body, len);
	return err;
}

int http_respond(struct http_request *req, int status, const char *content_type, const void *body,
		 size_t len)
{
	struct http_conn *c = req->conn;
	bool early = req->stream && c->cur == req; /* before the end of its body */
	int err = 0;

	if (req->finishing)
		return -EINVAL; /* the server answers it (http_request_body_read) */
	if (status < 200 || status > 599) {
		err = -EINVAL;
		status = 500;
		content_type = NULL;
		len = 0;
	}
	/* A closing server ends the connection after its last request. */
	if (c->srv->draining && req == conn_tail(c) && !c->cur)
		req->close_after = true;
	/* The rest of the body is dropped (http_stream.c), unless the client may not send it
	 * (100 Continue not sent), does not keep the connection, or the server is draining. */
	if (early && ((req->expect && !req->continued) || !req->keep_alive || c->srv->draining ||
		      !c->srv->cfg.linger_ms))
		req->close_after = true;
	if (req->close_after)
		c->close_after = true;
	if (c->srv->cfg.decorate && !c->closing)
		c->srv->cfg.decorate(req, status, c->srv->cfg.decorate_data);
	if (serialize(req, status, content_type, body, len)) {
		http_buf_free(&req->out);
		err = -ENOMEM;
		req->close_after = true;
		c->close_after = true;
	}
	req->done = true;
	if (early)
		stream_answered(c, req);
	conn_flush(c);
	return err;
}

int http_respond_error(struct http_request *req, int status, const char *code, const char *message)
{
	cJSON *obj = cJSON_CreateObject();
	char *body = NULL;

	if (obj && cJSON_AddStringToObject(obj, "error", code) &&
	    cJSON_AddStringToObject(obj, "message", message))
		body = cJSON_PrintUnformatted(obj);
	cJSON_Delete(obj);
	if (!body)
		return http_respond(req, status, NULL, NULL, 0);
	int err = http_respond(req, status, "application/json", body, strlen(body));
	cJSON_free(body);
	return err;
}

int request_error(struct http_request *req, int status, const char *code, const char *msg)
{
	req->conn->srv->stats.errors++;
	if (status == 408)
		req->conn->srv->stats.timeouts++;
	return http_respond_error(req, status, code, msg);
}
