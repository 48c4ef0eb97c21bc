/* Host names resolved on libuv's thread pool (resolve.h). */
#include "resolve.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

struct resolve {
	uv_getaddrinfo_t req;
	resolve_cb cb; /* NULL once cancelled */
	void *data;
};

bool resolve_is_name(const char *host)
{
	unsigned char buf[sizeof(struct in6_addr)];

	if (!host || !host[0] || host[0] == '/' || host[0] == '@')
		return false;
	return inet_pton(AF_INET, host, buf) != 1 && inet_pton(AF_INET6, host, buf) != 1;
}

static void collect(const struct addrinfo *ai, struct resolved *out)
{
	out->n = 0;
	for (; ai && out->n < RESOLVE_MAX; ai = ai->ai_next) {
		char text[INET6_ADDRSTRLEN];
		const void *src;

		if (ai->ai_family == AF_INET)
			src = &((const struct sockaddr_in *)(const void *)ai->ai_addr)->sin_addr;
		else if (ai->ai_family == AF_INET6)
			src = &((const struct sockaddr_in6 *)(const void *)ai->ai_addr)->sin6_addr;
		else
			continue;
		if (!inet_ntop(ai->ai_family, src, text, sizeof(text)))
			continue;
		bool seen = false;
		for (int i = 0; i < out->n && !seen; i++)
			seen = strcmp(out->addr[i], text) == 0;
		if (!seen)
			memcpy(out->addr[out->n++], text, sizeof(text));
	}
}

static void done_cb(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
	struct resolve *r = req->data;
	struct resolved addrs;

	if (status == 0) {
		collect(res, &addrs);
		if (addrs.n == 0)
			status = UV_EAI_NODATA;
	}
	uv_freeaddrinfo(res);
	if (r->cb)
		r->cb(status, status == 0 ? &addrs : NULL, r->data);
	free(r);
}

int resolve_start(uv_loop_t *loop, const char *host, resolve_cb cb, void *data,
		  struct resolve **out)
{
	const struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct resolve *r = calloc(1, sizeof(*r));

	if (!r)
		return -ENOMEM;
	r->cb = cb;
	r->data = data;
	r->req.data = r;
	int rc = uv_getaddrinfo(loop, &r->req, done_cb, host, NULL, &hints);
	if (rc < 0) {
		free(r);
		return rc;
	}
	*out = r;
	return 0;
}

void resolve_cancel(struct resolve *r)
{
	r->cb = NULL;
	uv_cancel((uv_req_t *)&r->req); /* done_cb runs with UV_ECANCELED, or when it is done */
}

void resolve_cursor_init(struct resolve_cursor *c, uv_loop_t *loop, const char *host,
			 resolve_cursor_cb cb, void *data)
{
	*c = (struct resolve_cursor){ .loop = loop, .host = host, .cb = cb, .data = data };
}

static void cursor_cb(int status, const struct resolved *r, void *data)
{
	struct resolve_cursor *c = data;

	c->lookup = NULL;
	if (status == 0) {
		c->addrs = *r;
		c->next = 0;
	}
	if (!c->waiting)
		return;
	c->waiting = false;
	if (status < 0)
		c->cb(status, NULL, c->data);
	else
		c->cb(0, c->addrs.addr[c->next++], c->data);
}

void resolve_cursor_next(struct resolve_cursor *c)
{
	if (!resolve_is_name(c->host)) {
		c->cb(0, c->host, c->data);
		return;
	}
	if (c->next < c->addrs.n) {
		c->cb(0, c->addrs.addr[c->next++], c->data);
		return;
	}
	c->waiting = true;
	if (c->lookup)
		return; /* an earlier attempt's lookup still runs: wait for it */
	c->lookups++;
	int rc = resolve_start(c->loop, c->host, cursor_cb, c, &c->lookup);
	if (rc < 0) {
		c->waiting = false;
		c->lookup = NULL;
		c->cb(rc, NULL, c->data);
	}
}

void resolve_cursor_abandon(struct resolve_cursor *c)
{
	c->waiting = false;
}

void resolve_cursor_forget(struct resolve_cursor *c)
{
	c->next = c->addrs.n;
}

void resolve_cursor_close(struct resolve_cursor *c)
{
	c->waiting = false;
	if (c->lookup)
		resolve_cancel(c->lookup);
	c->lookup = NULL;
}
