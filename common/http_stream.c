/* HTTP server, streamed request bodies (struct http_route.stream): the handler runs at the end
 * of the headers, a consumer takes the body in the pieces llhttp delivers, with back-pressure
 * (the socket is not read while it does not take them); an answer given before the end drops
 * the rest of the body; a body that fails is told to the consumer. The contract is in
 * http_server.h ("Streamed bodies"); the connection side (reads, pauses) in http_server.c. */
#include "http_server_int.h"

#include <errno.h>
#include <strings.h>

/* After user code ran in a parser callback of req: stops the parser when req has left it
 * (answered and the connection closing, or closed), pauses it while the consumer does not take
 * the body (conn_parse then keeps the unparsed input). */
static int after_user(llhttp_t *p, struct http_conn *c, struct http_request *req)
{
	if (c->closing || c->cur != req)
		return parser_fail(p, 0, NULL, NULL);
	if (stream_blocked(c)) {
		body_timer_hold(c, req);
		return HPE_PAUSED;
	}
	return 0;
}

/* Detaches the request being parsed: its body will not come, the connection closes after its
 * answer. Returns it. */
static struct http_request *detach(struct http_conn *c)
{
	struct http_request *req = c->cur;

	c->cur = NULL;
	req->body_gone = true;
	req->complete = true;
	req->timer_held = false;
	req->close_after = true;
	c->close_after = true;
	return req;
}

/* Tells the consumer the body failed (err < 0); it must not answer from the callback. */
static void tell(struct http_request *req, int err)
{
	http_body_cb cb = req->body_cb;

	req->body_cb = NULL;
	req->finishing = true;
	cb(req, "", 0, err, req->body_data);
	req->finishing = false;
}

int stream_start(llhttp_t *p, struct http_request *req, bool has_body)
{
	struct http_conn *c = req->conn;
	const char *e = http_request_header(req, "Expect");

	req->stream = true;
	req->expect = has_body && e && strcasecmp(e, "100-continue") == 0;
	req->handed = true;
	c->srv->stats.requests++;
	body_timer_start(c, req);
	req->route->r.handler(req, req->route->r.data);
	return after_user(p, c, req);
}

int stream_body(llhttp_t *p, struct http_request *req, const char *at, size_t n, bool chunk_end)
{
	struct http_conn *c = req->conn;
	int err = 0;

	if (n && !req->done && req->body_cb) { /* answered: the rest is dropped */
		req->body_cb(req, at, n, 0, req->body_data);
		if ((err = after_user(p, c, req)) == HPE_USER)
			return err;
	}
	if (chunk_end) {
		c->crlf_left = 2;
		/* When pausing, the CRLF is checked where parsing goes on (conn_parse), at at + n. */
		if (!err && chunk_crlf_check(c, at + n, c->in_end))
			return parser_fail(p, 400, "bad_request",
					   "A chunk's data is not followed by CRLF.");
	}
	return err;
}

void stream_message_complete(struct http_request *req)
{
	if (req->done)
		conn_flush(req->conn); /* answered early: its answer is written, it is freed */
	else if (req->body_cb)
		req->body_cb(req, "", 0, 0, req->body_data);
}

void stream_answered(struct http_conn *c, struct http_request *req)
{
	req->body_cb = NULL;
	req->body_paused = false;
	if (req->close_after) {
		detach(c);
		conn_stop_reading(c);
		conn_arm(c, 0);
		return;
	}
	/* The rest of the body is read and dropped for at most linger_ms (conn_flush resumes). */
	req->timer_held = false;
	conn_arm(c, c->srv->cfg.linger_ms);
}

static int status_errno(int status)
{
	switch (status) {
	case 413:
		return -EMSGSIZE;
	case 408:
		return -ETIMEDOUT;
	case 500:
		return -ENOMEM;
	default:
		return -EPROTO;
	}
}

void stream_fail(struct http_conn *c, int status, const char *code, const char *msg)
{
	struct http_request *req = detach(c);

	conn_stop_reading(c);
	conn_arm(c, 0);
	if (!req->body_cb || req->done) {
		/* Answered already (its body was being dropped), or its handler answers. */
		conn_flush(c);
		return;
	}
	tell(req, status_errno(status));
	request_error(req, status, code, msg);
}

void stream_lost(struct http_conn *c, int err)
{
	struct http_request *req = detach(c);

	if (!req->body_cb || req->done)
		return; /* its handler answers (the answer is dropped or the last), or answered */
	tell(req, err);
	list_del(&req->node);
	c->queued--;
	request_free(req);
}

/* Reads on when the consumer takes the body again. */
static void resume(struct http_conn *c, struct http_request *req)
{
	if (c->cur != req || stream_blocked(c))
		return;
	body_timer_release(c, req);
	conn_maybe_resume(c);
}

int http_request_body_read(struct http_request *req, http_body_cb cb, void *data)
{
	struct http_conn *c = req->conn;

	if (!req->stream || !cb || req->body_cb || req->done)
		return -EINVAL;
	if (req->body_gone || c->closing)
		return -ECONNRESET;
	req->body_cb = cb;
	req->body_data = data;
	if (req->expect && !req->continued) {
		if (conn_head(c) == req) {
			req->continued = true;
			conn_continue(c);
		} else {
			req->want_continue = true; /* when the answers before it are written */
		}
	}
	resume(c, req);
	return 0;
}

void http_request_body_pause(struct http_request *req)
{
	struct http_conn *c = req->conn;

	if (c->cur != req || !req->body_cb || req->body_paused || req->done)
		return;
	req->body_paused = true;
	if (c->in_parse)
		return; /* the parser callback pauses when the consumer returns (after_user) */
	body_timer_hold(c, req);
	conn_read_stop(c);
}

void http_request_body_resume(struct http_request *req)
{
	if (!req->body_paused)
		return;
	req->body_paused = false;
	resume(req->conn, req);
}

/* http_request_body_collect()'s consumer: the pieces go into req->body, the end to collect_cb. */
static void collect_piece(struct http_request *req, const char *buf, size_t len, int status,
			  void *data)
{
	struct http_conn *c = req->conn;
	http_collect_cb cb = req->collect_cb;

	(void)data;
	if (len) {
		if (http_buf_append(&req->body, buf, len) == 0) {
			if (req->body.len > c->srv->stats.input_held_max)
				c->srv->stats.input_held_max = req->body.len;
			return;
		}
		/* Out of memory: the collector is told, the server answers 500 and closes. */
		req->collect_cb = NULL;
		req->body_cb = NULL;
		req->finishing = true;
		cb(req, -ENOMEM, req->collect_data);
		req->finishing = false;
		req->close_after = true;
		request_error(req, 500, "internal", "The server ran out of memory.");
		return;
	}
	req->collect_cb = NULL;
	cb(req, status, req->collect_data);
}

int http_request_body_collect(struct http_request *req, http_collect_cb cb, void *data)
{
	int rc;

	if (!cb || req->collect_cb)
		return -EINVAL;
	req->collect_cb = cb;
	req->collect_data = data;
	if ((rc = http_request_body_read(req, collect_piece, NULL)))
		req->collect_cb = NULL;
	return rc;
}
