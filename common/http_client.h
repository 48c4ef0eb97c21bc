/* HTTP client on libcurl's multi interface, driven by a libuv loop: one uv_poll_t per socket
 * curl opens (CURLMOPT_SOCKETFUNCTION), one uv_timer_t for curl's timeouts
 * (CURLMOPT_TIMERFUNCTION); poll errors reach curl as CURL_CSELECT_ERR. Nothing blocks.
 * Connections are kept in the multi handle's cache and reused across requests to the same
 * host; "Expect: 100-continue" is disabled (one round trip per POST).
 *
 * Async contract: if http_client_send() returns an error the callback is never called;
 * otherwise it is called exactly once, on the loop thread: with the answer, with a transport
 * error class, or with HTTP_CLIENT_CANCELLED (http_client_cancel() or http_client_close()).
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
	long new_connections; /* connections opened for this request (0: one was reused) */
	uint64_t total_ms;    /* time from send to completion */
	const char *error;    /* curl's description when cls is not HTTP_CLIENT_OK, else "" */
};

typedef void (*http_client_done_cb)(const struct http_client_response *resp, void *data);
typedef void (*http_client_close_cb)(struct http_client *c, void *data);

/* Fills *c with the defaults in brackets above. */
void http_client_config_defaults(struct http_client_config *c);

/* Creates a client on loop (cfg may be NULL for the defaults). Returns 0, -ENOMEM or -EINVAL.
 * *out is owned by the caller until http_client_close(). curl_global_init() must have been
 * called by the program. */
int http_client_new(uv_loop_t *loop, const struct http_client_config *cfg,
		    struct http_client **out);

/* Starts a request. Everything in req is copied. cb (required) gets the outcome; data is
 * passed through, borrowed. If call is not NULL, *call identifies the request for
 * http_client_cancel() until the callback runs. Returns 0, -EINVAL, -ENOMEM, or -ECANCELED when
 * the client is closing. */
int http_client_send(struct http_client *c, const struct http_client_request *req,
		     http_client_done_cb cb, void *data, struct http_client_call **call);

/* Cancels a request whose callback has not run yet: the callback runs, with
 * HTTP_CLIENT_CANCELLED, before this returns. */
void http_client_cancel(struct http_client_call *call);

/* Returns the value of the first response header named name (case-insensitive), or NULL. */
const char *http_client_response_header(const struct http_client_response *r, const char *name);

/* Returns the number of requests whose callback has not run yet. */
unsigned http_client_pending(const struct http_client *c);

/* Returns a static name for a class ("read_timeout"). */
const char *http_client_class_name(enum http_client_class cls);

/* Cancels every pending request (each callback runs once with HTTP_CLIENT_CANCELLED, before
 * this returns), closes the cached connections and the uv handles, then calls cb (optional)
 * from the loop and frees the client. May be called from a completion callback. */
void http_client_close(struct http_client *c, http_client_close_cb cb, void *data);

#endif
