/* The operator listener (SPEC R8; issue 10 items 7 and 8): a second HTTP server of the worker,
 * on DISPATCHER_OPERATOR_LISTEN (loopback by default), for what an operator sees and an
 * organisation's key never does: /metrics, /healthz, and later /status.
 *
 * Every route given to operator_new() is wrapped: when an admin token is set
 * (DISPATCHER_ADMIN_TOKEN), a request without `Authorization: Bearer <token>` is answered 401
 * {"error":"unauthorized","message":...} with `WWW-Authenticate: Bearer`, before the route's
 * handler is called. The comparison takes the same time whatever the token sent: both sides
 * are hashed (SHA-256) and the digests compared with CRYPTO_memcmp, so neither the content nor
 * the length of the token leaks through timing. Without a token the listener's address is the
 * only protection: the settings refuse a non-loopback address without a token (settings.c).
 */
#ifndef DSP_WORKER_OPERATOR_H
#define DSP_WORKER_OPERATOR_H

#include "http_server.h"

#include <stddef.h>
#include <uv.h>

struct operator;

struct operator_options {
	const char *host;	   /* bind address; borrowed for the call */
	int port;		   /* 0: a free port (operator_port()) */
	const char *admin_token;   /* NULL or "": no token required; copied */
	http_decorate_cb decorate; /* optional, as http_server_config's */
	void *decorate_data;	   /* borrowed */
};

/* Starts the listener on loop with routes[0..n) (copied; their strings and data are borrowed
 * for the listener's life), each behind the token check. *out is owned by the caller until
 * operator_close(). Returns 0, -EINVAL, -ENOMEM or http_server_new()'s error (-EADDRINUSE...). */
int operator_new(uv_loop_t *loop, const struct operator_options *o, const struct http_route *routes,
		 size_t n, struct operator** out);

/* The bound port. */
int operator_port(const struct operator* op);

/* Closes the listener as http_server_close() does (requests in handlers are answered) and frees
 * it; cb (may be NULL) once done. NULL is ignored. */
void operator_close(struct operator* op, void (*cb)(void *data), void *data);

#endif
