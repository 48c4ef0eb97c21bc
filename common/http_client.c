#include "http_client.h"

#include "http_buf.h"
#include "list.h"
#include "log.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MAX_RESPONSE_HEADERS 64

struct sock {
	uv_poll_t poll;
	curl_socket_t fd;
	struct http_client *client;
	struct list_node node; /* in client->socks */
};

struct http_client_call {
	struct http_client *client;
	struct list_node node; /* in client->calls, then client->done once curl has finished */
	CURL *easy;
	struct curl_slist *headers;
	char *body; /* owned copy of the request body */
	http_client_done_cb cb;
	void *data;
	struct http_buf resp_body;
	struct http_buf resp_headers; /* raw header lines of the last response */
	uint64_t started;
	bool finished;	 /* out of the multi handle, on client->done */
	CURLcode result; /* curl's result, once finished */
	uint64_t seq;	 /* order of finishing (client->done_seq) */
	char errbuf[CURL_ERROR_SIZE];
};

struct http_client {
	uv_loop_t *loop;
	CURLM *multi;
	uv_timer_t timer; /* curl's timeouts */
	uv_idle_t defer;  /* runs the callbacks of requests that ended inside http_client_send() */
	struct http_client_config cfg;
	struct list_node calls; /* requests in the multi handle (struct http_client_call) */
	struct list_node done;	/* finished, callback not run yet, in order of finishing */
	struct list_node socks; /* polled sockets (struct sock) */
	uint64_t done_seq;	/* the last call->seq given */
	CURL **idle;		/* reset easy handles kept for reuse (cfg.idle_handles of them) */
	unsigned nidle;
	unsigned pending;
	struct http_client_stats stats;
	int handles; /* open uv handles: the timer, the idle and every poll */
	int busy;    /* depth of curl calls in progress */
	bool closing, finalized;
	http_client_close_cb close_cb;
	void *close_data;
};

static void finalize(struct http_client *c);
static void on_defer(uv_idle_t *h);

void http_client_config_defaults(struct http_client_config *c)
{
	c->max_host_connections = 0;
	c->max_cached_connections = 64;
	c->timeout_ms = 10000;
	c->connect_timeout_ms = 2000;
	c->no_proxy = false;
	c->forbid_reuse = false;
	c->idle_handles = 16;
}

const char *http_client_class_name(enum http_client_class cls)
{
	static const char *const names[] = { "ok",    "connect_timeout", "read_timeout",
					     "reset", "connect_failed",	 "cancelled",
					     "error" };

	return (unsigned)cls < sizeof(names) / sizeof(names[0]) ? names[cls] : "?";
}

/* ---- handles ---- */

static void handle_closed(struct http_client *c)
{
	if (--c->handles > 0)
		return;
	if (c->close_cb)
		c->close_cb(c, c->close_data);
	free(c->idle);
	free(c);
}

static void on_sock_closed(uv_handle_t *h)
{
	struct sock *k = h->data;
	struct http_client *c = k->client;

	free(k);
	handle_closed(c);
}

static void on_own_handle_closed(uv_handle_t *h)
{
	handle_closed(h->data);
}

/* ---- easy handles ---- */

/* Returns a kept easy handle (already reset) or a new one; NULL when out of memory. */
static CURL *easy_get(struct http_client *c)
{
	CURL *e;

	if (c->nidle) {
		c->stats.handles_reused++;
		return c->idle[--c->nidle];
	}
	if ((e = curl_easy_init()))
		c->stats.handles_created++;
	return e;
}

/* Keeps e for a later request, reset (it points at nothing of the call that used it), or
 * frees it when the client keeps no more. e must not be in the multi handle. */
static void easy_put(struct http_client *c, CURL *e)
{
	if (!e)
		return;
	if (c->closing || c->nidle >= c->cfg.idle_handles) {
		curl_easy_cleanup(e);
		return;
	}
	curl_easy_reset(e);
	c->idle[c->nidle++] = e;
}

static void sock_close(struct sock *k)
{
	list_del(&k->node);
	uv_poll_stop(&k->poll);
	uv_close((uv_handle_t *)&k->poll, on_sock_closed);
}

/* ---- completion ---- */

static enum http_client_class classify(CURL *e, CURLcode rc)
{
	curl_off_t connect_us = 0;
	long sent = 0;

	switch (rc) {
	case CURLE_OK:
		return HTTP_CLIENT_OK;
	case CURLE_OPERATION_TIMEDOUT:
		/* Connected (a reused connection reports no connect time) or the request went
		 * out: the answer is what timed out. */
		curl_easy_getinfo(e, CURLINFO_CONNECT_TIME_T, &connect_us);
		curl_easy_getinfo(e, CURLINFO_REQUEST_SIZE, &sent);
		return connect_us > 0 || sent > 0 ? HTTP_CLIENT_READ_TIMEOUT
						  : HTTP_CLIENT_CONNECT_TIMEOUT;
	case CURLE_COULDNT_CONNECT:
	case CURLE_COULDNT_RESOLVE_HOST:
	case CURLE_COULDNT_RESOLVE_PROXY:
		return HTTP_CLIENT_CONNECT_FAILED;
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
		return HTTP_CLIENT_RESET;
	default:
		return HTTP_CLIENT_ERROR;
	}
}

/* Splits the raw header lines into names and values, in place. */
static unsigned split_headers(struct http_buf *raw, const char **names, const char **values)
{
	unsigned n = 0;
	char *p = raw->data;

	while (p && *p && n < MAX_RESPONSE_HEADERS) {
		char *eol = strstr(p, "\r\n");
		char *colon = strchr(p, ':');
		if (!eol)
			break;
		*eol = '\0';
		if (colon && colon < eol) {
			*colon = '\0';
			char *v = colon + 1;
			while (*v == ' ' || *v == '\t')
				v++;
			for (char *t = eol - 1; t >= v && (*t == ' ' || *t == '\t'); t--)
				*t = '\0';
			names[n] = p;
			values[n++] = v;
		}
		p = eol + 2;
	}
	return n;
}

static void call_free(struct http_client_call *call)
{
	easy_put(call->client, call->easy);
	curl_slist_free_all(call->headers);
	free(call->body);
	http_buf_free(&call->resp_body);
	http_buf_free(&call->resp_headers);
	free(call);
}

/* Unlinks the call (already out of the multi handle), runs its callback once, frees it. */
static void call_finish(struct http_client_call *call, enum http_client_class cls)
{
	struct http_client *c = call->client;
	const char *names[MAX_RESPONSE_HEADERS], *values[MAX_RESPONSE_HEADERS];
	struct http_client_response r = { .cls = cls, .error = "" };
	long status = 0;

	list_del(&call->node);
	c->pending--;
	if (cls == HTTP_CLIENT_OK) {
		curl_easy_getinfo(call->easy, CURLINFO_RESPONSE_CODE, &status);
		r.status = (int)status;
		r.nheaders = split_headers(&call->resp_headers, names, values);
	} else {
		r.error = cls == HTTP_CLIENT_CANCELLED ? "cancelled" : call->errbuf;
	}
	curl_easy_getinfo(call->easy, CURLINFO_NUM_CONNECTS, &r.new_connections);
	c->stats.completed++;
	c->stats.connections_opened += (uint64_t)r.new_connections;
	if (cls == HTTP_CLIENT_OK && r.new_connections == 0)
		c->stats.reused++;
	r.header_names = names;
	r.header_values = values;
	r.body = call->resp_body.data ? call->resp_body.data : "";
	r.body_len = call->resp_body.len;
	r.total_ms = uv_now(c->loop) - call->started;
	easy_put(c, call->easy); /* before the callback: a request it sends can take the handle */
	call->easy = NULL;
	call->cb(&r, call->data);
	call_free(call);
}

/* Moves every transfer curl has finished out of the multi handle onto c->done, in order.
 * Runs no callback. Returns true when c->done is not empty. */
static bool collect(struct http_client *c)
{
	CURLMsg *m;
	int left;

	while (!c->finalized && (m = curl_multi_info_read(c->multi, &left))) {
		struct http_client_call *call = NULL;
		if (m->msg != CURLMSG_DONE)
			continue;
		CURL *e = m->easy_handle;
		curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&call);
		call->result = m->data.result;
		curl_multi_remove_handle(c->multi, e);
		call->finished = true;
		call->seq = ++c->done_seq;
		list_del(&call->node);
		list_add_tail(&c->done, &call->node);
	}
	return !list_empty(&c->done);
}

/* Runs the callbacks of the calls on c->done when this starts, oldest first. Calls that
 * finish meanwhile (a callback sends a request that fails at once) wait for the next entry, so
 * a callback that re-sends on failure cannot hold the loop. */
static void deliver(struct http_client *c)
{
	uint64_t upto = c->done_seq;
	struct list_node *n;

	while ((n = list_first(&c->done))) {
		struct http_client_call *call = list_entry(n, struct http_client_call, node);
		if (call->seq > upto)
			break;
		call_finish(call, classify(call->easy, call->result));
	}
}

/* Runs after every entry from libuv: delivers what curl finished, keeps the idle handle
 * running while callbacks wait, finishes a close requested from a callback. */
static void after_action(struct http_client *c)
{
	collect(c);
	deliver(c);
	if (c->finalized)
		return;
	if (list_empty(&c->done))
		uv_idle_stop(&c->defer);
	else
		uv_idle_start(&c->defer, on_defer);
	if (c->closing && c->busy == 0)
		finalize(c);
}

static void on_defer(uv_idle_t *h)
{
	after_action(h->data);
}

/* ---- libuv → curl ---- */

static void on_poll(uv_poll_t *h, int status, int events)
{
	struct sock *k = h->data;
	struct http_client *c = k->client;
	int flags = 0, running;

	if (status < 0)
		flags = CURL_CSELECT_ERR;
	if (events & UV_READABLE)
		flags |= CURL_CSELECT_IN;
	if (events & UV_WRITABLE)
		flags |= CURL_CSELECT_OUT;
	c->busy++;
	curl_multi_socket_action(c->multi, k->fd, flags, &running);
	c->busy--;
	after_action(c);
}

static void on_timeout(uv_timer_t *t)
{
	struct http_client *c = t->data;
	int running;

	if (c->finalized)
		return;
	c->busy++;
	curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	c->busy--;
	after_action(c);
}

/* ---- curl → libuv ---- */

static int on_curl_socket(CURL *e, curl_socket_t s, int what, void *userp, void *socketp)
{
	struct http_client *c = userp;
	struct sock *k = socketp;

	(void)e;
	if (what == CURL_POLL_REMOVE) {
		if (k) {
			curl_multi_assign(c->multi, s, NULL);
			sock_close(k);
		}
		return 0;
	}
	if (!k) {
		if (!(k = calloc(1, sizeof(*k))))
			return -1;
		if (uv_poll_init_socket(c->loop, &k->poll, s)) {
			free(k);
			return -1;
		}
		k->fd = s;
		k->client = c;
		k->poll.data = k;
		list_add_tail(&c->socks, &k->node);
		c->handles++;
		curl_multi_assign(c->multi, s, k);
	}
	int ev = (what & CURL_POLL_IN ? UV_READABLE : 0) | (what & CURL_POLL_OUT ? UV_WRITABLE : 0);
	uv_poll_start(&k->poll, ev, on_poll);
	return 0;
}

static int on_curl_timer(CURLM *m, long timeout_ms, void *userp)
{
	struct http_client *c = userp;

	(void)m;
	if (timeout_ms < 0)
		uv_timer_stop(&c->timer);
	else
		uv_timer_start(&c->timer, on_timeout, (uint64_t)timeout_ms, 0);
	return 0;
}

/* ---- requests ---- */

static size_t on_body(char *p, size_t size, size_t n, void *data)
{
	struct http_client_call *call = data;

	return http_buf_append(&call->resp_body, p, size * n) ? 0 : size * n;
}

static size_t on_header(char *p, size_t size, size_t n, void *data)
{
	struct http_client_call *call = data;
	size_t len = size * n;

	if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) {
		http_buf_free(&call->resp_headers); /* a new response (after 100 Continue) */
		return len;
	}
	return http_buf_append(&call->resp_headers, p, len) ? 0 : len;
}

static int call_headers(struct http_client_call *call, const struct http_client_request *req)
{
	struct curl_slist *l;

	for (size_t i = 0; i < req->nheaders; i++) {
		if (!(l = curl_slist_append(call->headers, req->headers[i])))
			return -ENOMEM;
		call->headers = l;
	}
	if (!(l = curl_slist_append(call->headers, "Expect:")))
		return -ENOMEM;
	call->headers = l;
	return 0;
}

static int call_setup(struct http_client *c, struct http_client_call *call,
		      const struct http_client_request *req)
{
	CURL *e = call->easy;
	uint64_t t = req->timeout_ms ? req->timeout_ms : c->cfg.timeout_ms;
	uint64_t ct = req->connect_timeout_ms ? req->connect_timeout_ms : c->cfg.connect_timeout_ms;

	if (call_headers(call, req))
		return -ENOMEM;
	if (req->body_len) {
		if (!(call->body = malloc(req->body_len)))
			return -ENOMEM;
		memcpy(call->body, req->body, req->body_len);
	}
	curl_easy_setopt(e, CURLOPT_PRIVATE, call);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
	if (c->cfg.no_proxy)
		curl_easy_setopt(e, CURLOPT_PROXY, ""); /* "": no proxy, whatever the environment */
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)t);
	curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)ct);
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, call->headers);
	curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(e, CURLOPT_WRITEDATA, call);
	curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(e, CURLOPT_HEADERDATA, call);
	curl_easy_setopt(e, CURLOPT_ERRORBUFFER, call->errbuf);
	if (c->cfg.forbid_reuse)
		curl_easy_setopt(e, CURLOPT_FORBID_REUSE, 1L);
	if (req->body || (req->method && strcmp(req->method, "POST") == 0)) {
		curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)req->body_len);
		curl_easy_setopt(e, CURLOPT_POSTFIELDS, call->body ? call->body : "");
	}
	if (req->method && strcmp(req->method, "GET") != 0 && strcmp(req->method, "POST") != 0)
		curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, req->method);
	if (curl_easy_setopt(e, CURLOPT_URL, req->url) != CURLE_OK)
		return -EINVAL;
	return 0;
}

/* Drives curl now, so that a request just added is connected or written before
 * http_client_send() returns. Not from inside curl (busy): curl's 0-ms timer drives it then.
 * What ended here waits on c->done for a later loop entry (the idle handle, or this client's
 * next timer or socket event), never for the send itself. */
static void kick(struct http_client *c)
{
	int running;

	if (c->busy)
		return;
	c->busy++;
	curl_multi_socket_action(c->multi, CURL_SOCKET_TIMEOUT, 0, &running);
	c->busy--;
	if (collect(c))
		uv_idle_start(&c->defer, on_defer);
}

int http_client_send(struct http_client *c, const struct http_client_request *req,
		     http_client_done_cb cb, void *data, struct http_client_call **out)
{
	struct http_client_call *call;
	int err;

	if (!c || !req || !req->url || !cb)
		return -EINVAL;
	if (c->closing)
		return -ECANCELED;
	if (!(call = calloc(1, sizeof(*call))))
		return -ENOMEM;
	call->client = c;
	call->cb = cb;
	call->data = data;
	call->started = uv_now(c->loop);
	list_init(&call->node);
	if (!(call->easy = easy_get(c)))
		err = -ENOMEM;
	else
		err = call_setup(c, call, req);
	if (!err && curl_multi_add_handle(c->multi, call->easy) != CURLM_OK)
		err = -ENOMEM;
	if (err) {
		call_free(call);
		return err;
	}
	list_add_tail(&c->calls, &call->node);
	c->pending++;
	c->stats.requests++;
	if (out)
		*out = call;
	uint64_t before = c->done_seq;
	kick(c);
	c->stats.deferred += c->done_seq - before;
	return 0;
}

void http_client_cancel(struct http_client_call *call)
{
	struct http_client *c = call->client;

	if (!call->finished) {
		c->busy++;
		curl_multi_remove_handle(c->multi, call->easy);
		c->busy--;
	}
	call_finish(call, HTTP_CLIENT_CANCELLED);
}

const char *http_client_response_header(const struct http_client_response *r, const char *name)
{
	for (unsigned i = 0; i < r->nheaders; i++)
		if (strcasecmp(r->header_names[i], name) == 0)
			return r->header_values[i];
	return NULL;
}

unsigned http_client_pending(const struct http_client *c)
{
	return c->pending;
}

void http_client_get_stats(const struct http_client *c, struct http_client_stats *out)
{
	*out = c->stats;
}

/* ---- lifetime ---- */

int http_client_new(uv_loop_t *loop, const struct http_client_config *cfg, struct http_client **out)
{
	struct http_client *c;

	if (!loop || !out)
		return -EINVAL;
	if (!(c = calloc(1, sizeof(*c))))
		return -ENOMEM;
	if (cfg)
		c->cfg = *cfg;
	else
		http_client_config_defaults(&c->cfg);
	if (c->cfg.idle_handles > HTTP_CLIENT_MAX_IDLE_HANDLES) {
		free(c);
		return -EINVAL;
	}
	if ((c->cfg.idle_handles && !(c->idle = calloc(c->cfg.idle_handles, sizeof(CURL *)))) ||
	    !(c->multi = curl_multi_init())) {
		free(c->idle);
		free(c);
		return -ENOMEM;
	}
	c->loop = loop;
	list_init(&c->calls);
	list_init(&c->done);
	list_init(&c->socks);
	uv_timer_init(loop, &c->timer);
	c->timer.data = c;
	uv_idle_init(loop, &c->defer);
	c->defer.data = c;
	c->handles = 2;
	curl_multi_setopt(c->multi, CURLMOPT_SOCKETFUNCTION, on_curl_socket);
	curl_multi_setopt(c->multi, CURLMOPT_SOCKETDATA, c);
	curl_multi_setopt(c->multi, CURLMOPT_TIMERFUNCTION, on_curl_timer);
	curl_multi_setopt(c->multi, CURLMOPT_TIMERDATA, c);
	curl_multi_setopt(c->multi, CURLMOPT_MAX_HOST_CONNECTIONS, c->cfg.max_host_connections);
	curl_multi_setopt(c->multi, CURLMOPT_MAXCONNECTS, c->cfg.max_cached_connections);
	*out = c;
	return 0;
}

static void finalize(struct http_client *c)
{
	c->finalized = true;
	c->busy++;
	curl_multi_cleanup(c->multi); /* closes cached connections: their polls go */
	c->busy--;
	c->multi = NULL;
	while (!list_empty(&c->socks))
		sock_close(list_entry(c->socks.next, struct sock, node));
	while (c->nidle)
		curl_easy_cleanup(c->idle[--c->nidle]);
	uv_timer_stop(&c->timer);
	uv_close((uv_handle_t *)&c->timer, on_own_handle_closed);
	uv_idle_stop(&c->defer);
	uv_close((uv_handle_t *)&c->defer, on_own_handle_closed);
}

void http_client_close(struct http_client *c, http_client_close_cb cb, void *data)
{
	if (c->closing)
		return;
	c->closing = true;
	c->close_cb = cb;
	c->close_data = data;
	while (!list_empty(&c->done))
		http_client_cancel(list_entry(c->done.next, struct http_client_call, node));
	while (!list_empty(&c->calls))
		http_client_cancel(list_entry(c->calls.next, struct http_client_call, node));
	if (c->busy == 0)
		finalize(c);
}
