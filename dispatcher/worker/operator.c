/* The operator listener: routes behind the admin token (operator.h). */
#include "operator.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct wrapped {
	struct operator* op;
	struct http_route r; /* the route as given */
};

struct operator
{
	struct http_server *http;
	struct wrapped *routes; /* owned, n entries */
	size_t n;
	bool token;			       /* a token is required */
	unsigned char digest[EVP_MAX_MD_SIZE]; /* SHA-256 of the token */
	void (*closed_cb)(void *data);
	void *closed_data;
};

static int sha256(const char *s, size_t len, unsigned char *out)
{
	unsigned int n = 0;

	return EVP_Digest(s, len, out, &n, EVP_sha256(), NULL) == 1 && n == 32 ? 0 : -ENOMEM;
}

/* Whether the request carries "Authorization: Bearer <token>" (scheme case-insensitive). */
static bool authorized(const struct operator* op, const struct http_request *req)
{
	const char *h = http_request_header(req, "Authorization");
	unsigned char got[EVP_MAX_MD_SIZE];

	if (!op->token)
		return true;
	if (!h || strncasecmp(h, "Bearer ", 7) != 0)
		return false;
	h += 7;
	if (sha256(h, strlen(h), got))
		return false;
	return CRYPTO_memcmp(got, op->digest, 32) == 0;
}

static void guarded(struct http_request *req, void *data)
{
	struct wrapped *w = data;

	if (!authorized(w->op, req)) {
		http_response_header(req, "WWW-Authenticate", "Bearer");
		http_respond_error(req, 401, "unauthorized",
				   "This operator route needs Authorization: Bearer <the "
				   "DISPATCHER_ADMIN_TOKEN>.");
		return;
	}
	w->r.handler(req, w->r.data);
}

static void op_free(struct operator* op)
{
	free(op->routes);
	free(op);
}

int operator_new(uv_loop_t *loop, const struct operator_options *o, const struct http_route *routes,
		 size_t n, struct operator** out)
{
	struct http_server_config hc;
	struct http_route *r = NULL;
	struct operator* op;
	int rc = -ENOMEM;

	if (!loop || !o || !o->host || (n && !routes) || !out)
		return -EINVAL;
	if (!(op = calloc(1, sizeof(*op))))
		return -ENOMEM;
	op->n = n;
	if (!(op->routes = calloc(n ? n : 1, sizeof(*op->routes))) ||
	    !(r = calloc(n ? n : 1, sizeof(*r))))
		goto fail;
	if (o->admin_token && o->admin_token[0]) {
		op->token = true;
		if (sha256(o->admin_token, strlen(o->admin_token), op->digest))
			goto fail;
	}
	for (size_t i = 0; i < n; i++) {
		op->routes[i] = (struct wrapped){ .op = op, .r = routes[i] };
		r[i] = routes[i];
		r[i].handler = guarded;
		r[i].data = &op->routes[i];
		if (!routes[i].handler) {
			rc = -EINVAL;
			goto fail;
		}
	}
	http_server_config_defaults(&hc);
	hc.host = o->host;
	hc.port = o->port;
	hc.max_connections = 64; /* scrapers and an operator's browser */
	hc.decorate = o->decorate;
	hc.decorate_data = o->decorate_data;
	if ((rc = http_server_new(loop, &hc, r, n, &op->http)))
		goto fail;
	free(r);
	*out = op;
	return 0;
fail:
	free(r);
	op_free(op);
	return rc;
}

int operator_port(const struct operator* op)
{
	return http_server_port(op->http);
}

static void http_closed(struct http_server *s, void *data)
{
	struct operator* op = data;
	void (*cb)(void *) = op->closed_cb;
	void *cb_data = op->closed_data;

	(void)s;
	op_free(op);
	if (cb)
		cb(cb_data);
}

void operator_close(struct operator* op, void (*cb)(void *data), void *data)
{
	if (!op)
		return;
	op->closed_cb = cb;
	op->closed_data = data;
	http_server_close(op->http, http_closed, op);
}
