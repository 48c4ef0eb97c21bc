/* HTTP/1.1 server on libuv + llhttp.
 *
 * One server listens on one address of a uv_loop_t and dispatches requests through a route
 * table. Connections are kept alive; pipelined requests are parsed ahead (up to max_pipelined
 * per connection, then reading pauses) and answered strictly in request order, even when their
 * handlers answer out of order.
 *
 * Routing: a route is (method, pattern, max_body, handler). A pattern is a path of literal
 * segments and `{name}` segments that match one non-empty segment ("/v2/batches/{id}/stop").
 * Paths are matched as sent, without percent-decoding; the query string is split off and
 * available as is. No route for the path: 404; the path matches but not the method: 405 with
 * an Allow header.
 *
 * Limits, and the answer when one is crossed (the connection is closed after the answer
 * whenever the rest of the stream can no longer be trusted):
 *   request line longer than max_header_bytes        414 uri_too_long            (closes)
 *   headers (names + values) over max_header_bytes,
 *   or more than max_headers of them                 431 headers_too_large       (closes)
 *   body larger than the route's max_body            413 body_too_large          (closes)
 *     (its message names the limit: "... at most <max_body> bytes.")
 *   headers not complete header_timeout_ms after
 *   the request's first byte, no body bytes for
 *   body_timeout_ms, or the body slower than
 *   body_min_rate (see "Body timeout")               408 request_timeout         (closes)
 *   malformed request                                400 bad_request             (closes)
 *   max_connections connections already open         503 too_many_connections    (closes)
 *     (answered at once on the accepted connection, before it sends anything, with
 *     Retry-After: 1 and Connection: close; size max_connections under the file-descriptor
 *     limit, with room for the answers being written, see common/fdlimit.h)
 *   no request for idle_timeout_ms on a kept-alive connection: closed silently.
 * Timers are per connection; a slow client holds nothing but its own connection.
 *
 * Write back-pressure: a connection whose unsent output (bytes queued for writing, as libuv
 * counts them) is above max_write_queued stops reading and parsing until its writes drain, so
 * a client that pipelines requests and never reads holds at most max_write_queued plus the
 * answers of max_pipelined requests. A connection whose writes make no progress is closed
 * (stats.write_timeouts) at the first check, every write_timeout_ms, that finds none since the
 * previous one: between write_timeout_ms and twice that after its last progress.
 *
 * Strictness (RFC 9112/9110, as nginx and h2o; the table is in common/README.md): no version,
 * HTTP/1.1 without Host, two Host, a bad Host, space before a header's colon, bytes after a
 * chunk that are not CRLF: 400; HTTP/2.0: 505; CONNECT: 501; chunk extensions count against
 * max_body; Upgrade is ignored; HEAD is served by the GET route of a path without its own.
 *
 * Streamed bodies (a route with stream set; the API's CSV upload): the handler is called as soon
 * as the headers are complete, before any of the body is read (http_request_body() is "" with
 * length 0 for such a request, always), and the body is never buffered: the socket is read only
 * while the handler's consumer takes it, so the server holds at most one read (64 KiB) of it.
 * The handler then either
 *   - answers without reading the body (401, 429...): the server reads and drops the rest of the
 *     body, as nginx does (ngx_http_discard_request_body), and a request pipelined behind it is
 *     read and answered; the drop is bounded by the route's max_body and by linger_ms from the
 *     answer, and when either is crossed the connection closes (the answer already written).
 *     The answer carries Connection: close and the connection closes after it (lingering, as
 *     after any closing answer) instead when the client asked for 100-continue (it was not
 *     sent, so the client may or may not send the body), when the request does not keep the
 *     connection, when linger_ms is 0, or while the server drains;
 *   - or calls http_request_body_read() (now, or later from any callback: until then the body
 *     waits in the socket), and answers with http_respond() when it is done, typically from
 *     the callback's last call or later. 100 Continue is sent when the body is first read.
 * The body timeout (below) runs only while the body is being read for a consumer: it is held
 * before http_request_body_read() and while the consumer has paused, so a slow consumer (a full
 * COPY) never causes a 408. max_body
 * applies to the total with chunk extensions: a Content-Length above it is 413 before the
 * handler is called (the handler never sees it); a chunked body that crosses it while streaming
 * is answered 413 by the server (see http_request_body_read()).
 *
 * Body timeout: body_timeout_ms is an idle timeout, as nginx's client_body_timeout ("the period
 * between two successive read operations"): it runs from the end of the headers and starts
 * over whenever body bytes arrive, so a large body on a slow link (64 MiB at 10 Mbit/s, about
 * a minute) is taken. A trickle that keeps every gap under it is bounded by body_min_rate, as
 * Apache's mod_reqtimeout MinRate: the body's reading time may not exceed body_timeout_ms +
 * bytes received / body_min_rate (16 KiB/s: a byte every 29 s is cut about 30 s after the
 * headers). Paused time counts for neither (the idle timeout starts over on resume).
 *
 * Every error the server produces has a JSON body {"error":"<code>","message":"<sentence>"};
 * handlers should use http_respond_error() for theirs. The decorate hook sees every response
 * (the handlers' and the server's own) just before it is written and may add headers, which is
 * where an API layer puts request ids or rate-limit headers.
 *
 * Threading: everything runs on the loop's thread.
 *
 * Drain (R8), http_server_drain(): stop accepting; close at once the idle connections and the
 * ones whose request is not completely received (the partial request is dropped: the client
 * sees the connection close, not a timeout 30 s later); let the requests already handed to
 * handlers finish — their answers are written, the last one of each connection with
 * Connection: close, then that connection closes; refuse new requests on open connections
 * (they are not read). The drain is done when no connection is left. http_server_close() is a
 * drain followed by freeing the server.
 */
#ifndef DSP_HTTP_SERVER_H
#define DSP_HTTP_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

struct http_server;
struct http_request;

/* Called once per request, on the loop thread, when the request (headers and body) is complete
 * (for a stream route: when its headers are, see "Streamed bodies").
 * The handler must call http_respond() (or http_respond_error()) exactly once, now or later
 * from any callback on the same loop; until then the request and everything read from it stay
 * valid, even if the client goes away (the response is then discarded). */
typedef void (*http_handler_cb)(struct http_request *req, void *data);

/* Receives the body of a stream route's request, see http_request_body_read(). buf holds len
 * bytes (borrowed for the call) with status 0; the end of the body is one call with len 0 and
 * status 0; a body that cannot be completed is one call with len 0 and a negative status. */
typedef void (*http_body_cb)(struct http_request *req, const char *buf, size_t len, int status,
			     void *data);

/* Called once when a body collected with http_request_body_collect() ends: status 0 (the body
 * is in http_request_body(); the handler answers, from this call or later) or a negative status
 * as http_body_cb's last call has it (the server answered or nothing is answered: req is
 * invalid once cb returns). */
typedef void (*http_collect_cb)(struct http_request *req, int status, void *data);

/* Called for every response just before it is serialized. It may call http_response_header()
 * on req. status is the response's status. The request may be partial (a server error found
 * while parsing): its method and path are then "" . */
typedef void (*http_decorate_cb)(struct http_request *req, int status, void *data);

/* Called once when a closing server has finished; the server is freed right after it returns. */
typedef void (*http_server_close_cb)(struct http_server *s, void *data);

/* Called once when a draining server has no connection left; the server stays valid until
 * http_server_close(), which the callback may call. */
typedef void (*http_server_drain_cb)(struct http_server *s, void *data);

struct http_route {
	const char *method;	 /* "GET", "POST", ...; borrowed for the server's life */
	const char *pattern;	 /* "/calls/{id}"; borrowed for the server's life */
	size_t max_body;	 /* largest accepted body in bytes (0: no body allowed) */
	http_handler_cb handler; /* never NULL */
	void *data;		 /* passed to handler; borrowed */
	bool stream; /* the handler is called at the end of the headers and reads the body with
		      * http_request_body_read() (see "Streamed bodies" above) [false] */
};

struct http_server_config {
	const char *host;	    /* address to bind ["127.0.0.1"]; borrowed for the call */
	int port;		    /* 0 = a free port, see http_server_port() [0] */
	int backlog;		    /* listen backlog [511] */
	size_t max_header_bytes;    /* request line, and separately all headers [8192] */
	unsigned max_headers;	    /* [100] */
	unsigned max_connections;   /* [1024] */
	unsigned max_pipelined;	    /* requests read ahead of their answers, per connection [16] */
	uint64_t header_timeout_ms; /* first byte of a request to the end of its headers [10000] */
	uint64_t body_timeout_ms;   /* the body's idle timeout: from the end of the headers, and
				     * from each read of body bytes, to the next [30000] */
	uint64_t body_min_rate;	    /* bytes/s: a body's reading time may not exceed
				     * body_timeout_ms + bytes received / this, 0 = no bound
				     * [16384] (see "Body timeout") */
	uint64_t idle_timeout_ms;   /* a kept-alive connection with nothing to do [60000] */
	uint64_t linger_ms;	    /* reading (and dropping) input after a closing answer [2000] */
	size_t max_write_queued;    /* unsent output above which reading pauses [1048576] */
	uint64_t write_timeout_ms;  /* writes without progress this long close it, 0 = never
				     * [30000] */
	bool reuseport;		    /* SO_REUSEPORT: several processes share the port (the
				     * fleet's one public URL) [false] */
	http_decorate_cb decorate;  /* optional */
	void *decorate_data;	    /* borrowed */
};

/* Counters, for tests and metrics. */
struct http_server_stats {
	uint64_t accepted;	   /* connections accepted */
	uint64_t refused;	   /* connections answered 503 because max_connections were open */
	uint64_t requests;	   /* requests handed to handlers */
	uint64_t responses;	   /* responses written (handlers' and the server's) */
	uint64_t errors;	   /* responses the server produced itself (4xx/5xx) */
	uint64_t timeouts;	   /* 408s */
	uint64_t write_pauses;	   /* times a connection stopped reading for unsent output */
	uint64_t write_timeouts;   /* connections closed because their writes made no progress */
	uint64_t write_queued_max; /* the most unsent output any connection has had, in bytes */
	uint64_t input_held_max;   /* the most request input one connection has held at once: a
				    * buffered body plus input kept unparsed while paused, in bytes
				    * (a stream route's body is not buffered) */
	uint64_t drain_dropped;	   /* half-received requests a drain dropped (connection closed) */
	uint64_t drain_idle;	   /* idle connections a drain closed */
	unsigned open;		   /* connections open now */
};

/* Fills *c with the defaults in brackets above. */
void http_server_config_defaults(struct http_server_config *c);

/* Creates a server on loop, binds and listens. routes (nroutes entries) is copied; the strings
 * and data it points to are borrowed for the server's life. On success *out owns the server
 * until http_server_close(). Returns 0, -EINVAL (bad config or route), -ENOMEM, or the negative
 * libuv error of bind/listen (-EADDRINUSE, ...). On failure nothing is left to close, but the
 * loop must run once more to release a listener that was already initialised. */
int http_server_new(uv_loop_t *loop, const struct http_server_config *cfg,
		    const struct http_route *routes, size_t nroutes, struct http_server **out);

/* Returns the bound port (useful with port 0). */
int http_server_port(const struct http_server *s);

/* Copies the counters into *out. */
void http_server_stats(const struct http_server *s, struct http_server_stats *out);

/* Starts the drain (see above). cb (optional) is called exactly once, from the loop, when no
 * connection is left (never from within this call); the server stays valid (port, stats) until
 * http_server_close(). Returns 0, or -EALREADY when the server is already draining or closing
 * (cb is then never called). */
int http_server_drain(struct http_server *s, http_server_drain_cb cb, void *data);

/* Drains the server (as http_server_drain(), unless a drain is under way) and frees it once
 * drained. cb (optional) is called exactly once, when done, right before the server is freed:
 * from the loop, or from within this call when the server had already drained. A pending
 * drain callback is called first. Calling it twice is a no-op. */
void http_server_close(struct http_server *s, http_server_close_cb cb, void *data);

/* ---- the request (borrowed by the handler until it responds) ---- */

/* Returns the method ("GET"), the path without the query ("/calls/c1"), and the query without
 * the '?' ("" when none). Never NULL. */
const char *http_request_method(const struct http_request *req);
const char *http_request_path(const struct http_request *req);
const char *http_request_query(const struct http_request *req);

/* Returns the pattern of the route that matched ("/v2/batches/{id}"; a HEAD served by its GET
 * route gives the GET's), or NULL when none did (404, 405, a request answered before routing).
 * Borrowed for the server's life. For metric labels: bounded by the route table, where the raw
 * path is not. */
const char *http_request_route(const struct http_request *req);

/* Returns the value of the first header named name (case-insensitive), or NULL. */
const char *http_request_header(const struct http_request *req, const char *name);

/* Returns the number of headers and the i-th one (name and value). */
unsigned http_request_header_count(const struct http_request *req);
void http_request_header_at(const struct http_request *req, unsigned i, const char **name,
			    const char **value);

/* Returns the value of path parameter name ("{id}" in the pattern), or NULL. */
const char *http_request_param(const struct http_request *req, const char *name);

/* Returns the body (NUL-terminated for convenience; may contain NULs) and sets *len. An empty
 * body is "" with *len 0, and so is a stream route's (read with http_request_body_read()),
 * unless its handler collected it (http_request_body_collect()). */
const char *http_request_body(const struct http_request *req, size_t *len);

/* Starts reading the body of a stream route's request (see "Streamed bodies" above). cb is
 * called with each piece of the body as llhttp delivers it (de-chunked for Transfer-Encoding:
 * chunked), len > 0 and status 0, in order; then exactly once with len 0 (buf "") and:
 *   0            the body is complete: the handler answers (from this call or later).
 *   -EMSGSIZE    a chunked body crossed the route's max_body: the server answers 413.
 *   -ETIMEDOUT   the body timeout passed (see "Body timeout"): the server answers 408.
 *   -EPROTO      the body is malformed (a chunk's size or CRLF): the server answers 400.
 *   -ENOMEM      the server ran out of memory: it answers 500.
 *   -ECONNRESET  the client went away, or the connection was closed (a write that failed or
 *                timed out): nothing is answered.
 *   -ECANCELED   the server is draining (http_server_drain()): nothing is answered.
 * After a negative status the server has finished the request: the handler must not call
 * http_respond() for it (it would be refused, -EINVAL), and req is invalid once cb returns; in
 * every case but -ECONNRESET/-ECANCELED the connection closes after the server's answer. cb is
 * not called again once the handler has answered: an answer before the end stops the consumer
 * and the rest of the body is dropped as for an answer without reading. cb may be called
 * before this function returns (input already received is parsed at once; a request without a
 * body gets its end at once), and from within http_request_body_resume(). data is borrowed
 * until the last call. Returns 0; -EINVAL when req is not a stream route's, cb is NULL, a
 * consumer is already set or req was answered; -ECONNRESET when the body can no longer be
 * read (the client has gone, the connection is closing, or a drain dropped it): cb is then
 * never called and the handler still answers (the answer is dropped, or is the connection's
 * last). */
int http_request_body_read(struct http_request *req, http_body_cb cb, void *data);

/* Buffers a stream route's body into the request, as for a buffered route, then calls cb once:
 * the handler of a stream route decides at the end of the headers (an API checks a key and a
 * rate limit there, answering 401/429 without reading the body) and, when it wants the whole
 * body, collects it. Everything http_request_body_read() says holds: max_body and
 * body_timeout_ms apply, 100 Continue is sent now, a failed body is answered by the server
 * (413, 408, 400, 500) and cb gets the negative status. With status 0 http_request_body()
 * returns the body (NUL-terminated); the handler answers. The body counts in
 * stats.input_held_max. cb may be called before this returns (a body already received, or
 * none). Returns as http_request_body_read(): 0, -EINVAL or -ECONNRESET (cb never called). */
int http_request_body_collect(struct http_request *req, http_collect_cb cb, void *data);

/* Stops taking the body: the socket is no longer read (TCP flow control holds the client back)
 * and body_timeout_ms is held, until http_request_body_resume(). cb is not called while paused,
 * except for a negative status (a drain, a write that failed). Called from within cb, it takes
 * effect when cb returns. A no-op before http_request_body_read(), after the end of the body,
 * or when already paused. */
void http_request_body_pause(struct http_request *req);

/* Takes the body again after http_request_body_pause(): the input held is parsed at once (cb may
 * be called before this returns) and the socket read again. A no-op when not paused. */
void http_request_body_resume(struct http_request *req);

/* Returns true once the client has gone: the response will be discarded. */
bool http_request_aborted(const struct http_request *req);

/* Returns the peer address as "ip:port" (a static-sized string owned by the request). */
const char *http_request_peer(const struct http_request *req);

/* ---- the response ---- */

/* Adds a response header (copied). Call before http_respond(), or from the decorate hook.
 * name and value must not contain CR or LF. Returns 0, -EINVAL or -ENOMEM. */
int http_response_header(struct http_request *req, const char *name, const char *value);

/* Forgets the headers added so far (an answer replaced by another before it was sent). */
void http_response_headers_reset(struct http_request *req);

/* Completes the request: status, Content-Type (NULL for none) and body (copied; may be NULL
 * with len 0). Content-Length and Connection are added by the server; an HTTP/1.0 request
 * that asked for keep-alive gets "Connection: keep-alive". The body is not sent for HEAD
 * requests and 304 answers (Content-Length still says its length), nor for 204 (without
 * Content-Length). The request is invalid after this call: calling http_respond() twice for
 * one request is undefined. Returns 0; -EINVAL for a status outside 200..599 (the request is
 * then answered 500); -ENOMEM (the connection is closed). Either way the request is
 * finished. */
int http_respond(struct http_request *req, int status, const char *content_type, const void *body,
		 size_t len);

/* http_respond() with a JSON body {"error":code,"message":message} (both escaped). */
int http_respond_error(struct http_request *req, int status, const char *code, const char *message);

#endif
