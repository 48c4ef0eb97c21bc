/* HTTP client on libcurl's multi interface, driven by a libuv loop: one uv_poll_t per socket
 * curl opens (CURLMOPT_SOCKETFUNCTION), one uv_timer_t for curl's timeouts
 * (CURLMOPT_TIMERFUNCTION), one uv_idle_t that runs the callbacks of requests that ended
 * inside http_client_send(); poll errors reach curl as CURL_CSELECT_ERR. Nothing blocks.
 * "Expect: 100-continue" is disabled (one round trip per POST).
 *
 * Same loop turn: http_client_send() drives curl (curl_multi_socket_action) before it returns.
 * On an idle cached connection the request is written to the socket (as far as the socket
 * takes it, which for a dial is all of it) before the call returns; for a new connection the
 * non-blocking connect is started, and the request goes out when the socket is writable.
 * Nothing waits for another loop iteration.
 *
 * Connections are kept alive in the multi handle's cache (max_cached_connections) and reused by
 * later requests to the same host:port; http_client_get_stats() counts the connections opened,
 * so a caller (or a test) can prove the reuse. Finished curl easy handles are reset and kept
 * (up to idle_handles) for the next requests instead of being made anew for each one.
 *
 * Async contract: if http_client_send() returns an error the callback is never called;
 * otherwise it is called exactly once, on the loop thread, never from inside
 * http_client_send(): with the answer, with a transport error class, or with
 * HTTP_CLIENT_CANCELLED (http_client_cancel() or http_client_close()). A request that ends
 * while http_client_send() drives curl (a bad URL, an immediate refusal) has its callback run
 * from a later loop entry (the next loop iteration at the latest).
 *
 * Threading: everything runs on the loop's thread.
 */
#ifndef DSP_HTTP_CLIENT_H
#define DSP_HTTP_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

struct http_client;
struct http_client_call;

#define HTTP_CLIENT_MAX_IDLE_HANDLES 4096 /* bound of http_client_config.idle_handles */

enum http_client_class {
	HTTP_CLIENT_OK = 0,	     /* a complete response arrived: see status */
	HTTP_CLIENT_CONNECT_TIMEOUT, /* no connection within the connect timeout */
	HTTP_CLIENT_READ_TIMEOUT,    /* connected, no complete answer within the timeout */
	HTTP_CLIENT_RESET,	     /* the connection was reset or closed before a full answer */
	HTTP_CLIENT_CONNECT_FAILED,  /* refused, unreachable, unresolvable: nothing was sent */
	HTTP_CLIENT_CANCELLED,	     /* http_client_cancel() or http_client_close() */
	HTTP_CLIENT_ERROR,	     /* anything else (bad URL, out of memory, protocol error) */
};

struct http_client_config {
	long max_host_connections;   /* per host:port, 0 = unlimited (curl queues beyond) [0] */
	long max_cached_connections; /* idle connections kept for reuse [64] */
	uint64_t timeout_ms;	     /* whole request, when the request says 0 [10000] */
	uint64_t connect_timeout_ms; /* when the request says 0 [2000] */
	bool no_proxy; /* ignore http_proxy & co. from the environment: connect directly [false] */
	bool forbid_reuse;     /* close each connection after its request (no keep-alive) [false] */
	unsigned idle_handles; /* curl easy handles kept for reuse, 0 = one made per request [16] */
};

/* Counters since http_client_new(). A request's connection counts (connections_opened, reused)
 * are added when its callback runs, so a request still in flight is not in them yet. */
struct http_client_stats {
	uint64_t requests;	     /* accepted by http_client_send() */
	uint64_t completed;	     /* callbacks run, cancelled ones included */
	uint64_t connections_opened; /* connections curl opened (CURLINFO_NUM_CONNECTS, summed) */
	uint64_t reused;	     /* answers (HTTP_CLIENT_OK) on a connection opened before */
	uint64_t handles_created;    /* curl easy handles made */
	uint64_t handles_reused;     /* requests that took a kept easy handle instead */
	uint64_t deferred; /* requests that ended inside http_client_send(): callback run later */
};

struct http_client_request {
	const char *method;	    /* "GET", "POST", ...; NULL = GET, or POST with a body */
	const char *url;	    /* "http://127.0.0.1:8080/calls" */
	const char *const *headers; /* "Name: value" lines (nheaders of them) */
	size_t nheaders;
	const void *body; /* request body or NULL */
	size_t body_len;
	uint64_t timeout_ms;	     /* 0 = the client's default */
	uint64_t connect_timeout_ms; /* 0 = the client's default */
};

/* Everything in it is borrowed for the duration of the callback only. */
struct http_client_response {
	enum http_client_class cls;
	int status;	  /* HTTP status when cls is HTTP_CLIENT_OK, else 0 */
	const char *body; /* NUL-terminated ("" when empty) */
	size_t body_len;
	unsigned nheaders;
	const char *const *header_names;  /* as received */
	const char *const *header_values; /* leading/trailing blanks removed */
	long new_connections; /* connections it opened (0: it reused one, or made none) */
	uint64_t total_ms;    /* time from send to completion */
	const char *error;    /* curl's description when cls is not HTTP_CLIENT_OK, else "" */
};

typedef void (*http_client_done_cb)(const struct http_client_response *resp, void *data);
typedef void (*http_client_close_cb)(struct http_client *c, void *data);

/* Fills *c with the defaults in brackets above. */
void http_client_config_defaults(struct http_client_config *c);

/* Creates a client on loop (cfg may be NULL for the defaults). Returns 0, -ENOMEM, or -EINVAL
 * (also for idle_handles above HTTP_CLIENT_MAX_IDLE_HANDLES).
 * *out is owned by the caller until http_client_close(). curl_global_init() must have been
 * called by the program. */
int http_client_new(uv_loop_t *loop, const struct http_client_config *cfg,
		    struct http_client **out);

/* Starts a request and drives it as far as it goes without waiting: on an idle cached
 * connection the request is written before this returns. Everything in req is copied. cb
 * (required) gets the outcome, never before this returns; data is passed through, borrowed.
 * If call is not NULL, *call identifies the request for http_client_cancel() until the
 * callback runs. May be called from a completion callback. Returns 0, -EINVAL, -ENOMEM, or
 * -ECANCELED when the client is closing. */
int http_client_send(struct http_client *c, const struct http_client_request *req,
		     http_client_done_cb cb, void *data, struct http_client_call **call);

/* Cancels a request whose callback has not run yet (also one that has ended and whose callback
 * waits for the next loop entry): the callback runs, with HTTP_CLIENT_CANCELLED, before this
 * returns. */
void http_client_cancel(struct http_client_call *call);

/* Returns the value of the first response header named name (case-insensitive), or NULL. */
const char *http_client_response_header(const struct http_client_response *r, const char *name);

/* Returns the number of requests whose callback has not run yet. */
unsigned http_client_pending(const struct http_client *c);

/* Copies the client's counters into *out. */
void http_client_get_stats(const struct http_client *c, struct http_client_stats *out);

/* Returns a static name for a class ("read_timeout"). */
const char *http_client_class_name(enum http_client_class cls);

/* Cancels every pending request, also one that has ended but whose callback waits for the
 * next loop entry (each callback runs once with HTTP_CLIENT_CANCELLED, before this returns),
 * closes the cached connections, the kept easy handles and the uv handles, then calls cb
 * (optional) from the loop and frees the client. May be called from a completion callback. */
void http_client_close(struct http_client *c, http_client_close_cb cb, void *data);

#endif
