/* Internals shared by http_server.c (listener, connections, I/O, timers) and http_request.c
 * (parsing, routing, requests and responses). Not for use outside those two files. */
#ifndef DSP_HTTP_SERVER_INT_H
#define DSP_HTTP_SERVER_INT_H

#include "http_buf.h"
#include "http_server.h"
#include "list.h"

#include <llhttp.h>

#define HTTP_MAX_SEGMENTS 16
#define HTTP_READ_BUF	  65536

struct route {
	struct http_route r;
	unsigned nseg;
	char *segs[HTTP_MAX_SEGMENTS]; /* owned copies; "{name}" kept with its braces */
};

struct hdr {
	size_t name, value; /* offsets into req->arena */
};

struct http_request {
	struct http_conn *conn; /* owning connection (freed after its last request) */
	struct list_node node;	/* in conn->reqs, response order */
	struct http_buf arena;	/* url NUL, then name NUL value NUL ... */
	struct hdr *hdrs;	/* owned, nhdrs entries */
	unsigned nhdrs, hdr_cap;
	bool in_value; /* the parser's last header callback was a value */
	size_t url_len, hdr_bytes;
	size_t ext_bytes;   /* chunk extensions (names and values), counted with the body */
	const char *method; /* static (llhttp) or "" */
	char *path;	    /* into arena; "" until the headers are parsed */
	const char *query;
	char *segbuf; /* owned copy of path split at '/' */
	const char *seg[HTTP_MAX_SEGMENTS];
	unsigned nseg;
	const struct route *route;
	struct http_buf body;
	bool headers_done, complete, handed; /* parsed headers, whole message, given to handler */
	bool keep_alive;
	bool http10;	    /* an HTTP/1.0 request (keep-alive is then echoed) */
	bool want_continue; /* Expect: 100-continue, not sent yet (a request queued before) */
	bool done;	    /* response serialized into out */
	bool close_after;   /* close the connection after this response */
	bool sent;	    /* the answer was handed to the socket (early: before the body's end) */
	/* A stream route's request (see http_stream.c): handed to its handler at the end of its
	 * headers; the body goes to body_cb, never into body. */
	bool stream;
	bool expect;	      /* the client sent Expect: 100-continue */
	bool continued;	      /* 100 Continue was sent */
	bool body_paused;     /* the consumer paused (http_request_body_pause) */
	bool body_gone;	      /* detached from the parser before its end: the body will not come */
	bool finishing;	      /* body_cb is being told the body failed: no http_respond() now */
	bool timer_held;      /* the body timer held while the body is not read (body_used kept) */
	uint64_t body_since;  /* loop time the body was last (re)started being read */
	uint64_t body_used;   /* ms the body was read before body_since (paused time not) */
	size_t received;      /* body bytes parsed so far (stream or not) */
	http_body_cb body_cb; /* the consumer, NULL until http_request_body_read() */
	void *body_data;      /* borrowed */
	http_collect_cb collect_cb; /* http_request_body_collect(): the body goes into body */
	void *collect_data;	    /* borrowed */
	int err_status;		    /* a server error to answer at message end (404/405) */
	const char *err_code, *err_msg;
	struct http_buf extra; /* response headers added by the handler / decorate */
	struct http_buf out;   /* the serialized response */
};

struct http_conn {
	uv_tcp_t tcp;
	uv_timer_t timer;  /* header, body, idle and linger deadlines */
	uv_timer_t wtimer; /* write progress, while writes are in flight */
	uv_shutdown_t shutdown;
	struct http_server *srv;
	struct list_node node; /* in srv->conns */
	llhttp_t parser;
	struct list_node reqs;	  /* every request not yet written, in order */
	unsigned queued;	  /* requests in the list */
	struct http_request *cur; /* the request being parsed (also the tail) */
	char *pending;		  /* unparsed input kept while paused (owned) */
	size_t pending_len;
	int handles;	  /* uv handles not yet closed (tcp, timer, wtimer) */
	unsigned writes;  /* writes in flight */
	uint64_t wbytes;  /* bytes handed to uv_write so far */
	uint64_t wmark;	  /* bytes sent at the last write-progress check */
	bool paused;	  /* parser paused: too many requests read ahead, or output too large */
	bool in_parse;	  /* inside conn_parse() */
	bool close_after; /* no more requests: close once everything is written */
	bool shutting, lingering, closing;
	bool failed;	 /* a parser callback stopped the parser (fail_*) */
	int fail_status; /* 0: stop quietly, else answer with it */
	const char *fail_code, *fail_msg;
	char fail_buf[96];  /* a fail_msg formatted for this connection (the 413's limit) */
	const char *in_end; /* end of the input llhttp_execute() is parsing now */
	unsigned crlf_left; /* bytes of the CRLF after a chunk's data still to check (2, 1, 0) */
	char peer[64];
};

struct http_server {
	uv_loop_t *loop;
	uv_tcp_t listener;
	struct http_server_config cfg;
	struct route *routes;
	size_t nroutes;
	struct list_node conns; /* open connections (struct http_conn) */
	struct http_server_stats stats;
	llhttp_settings_t settings;
	bool listening_closed;
	bool draining;	/* http_server_drain() or _close(): no more connections or requests */
	bool closing;	/* http_server_close(): freed once drained */
	bool notifying; /* inside server_maybe_done()'s callbacks */
	http_server_drain_cb drain_cb;
	void *drain_data;
	http_server_close_cb close_cb;
	void *close_data;
	char readbuf[HTTP_READ_BUF]; /* shared: input is consumed within the read callback */
	time_t date_sec;	     /* second the cached Date header was made for */
	char date[40];		     /* "Date: <IMF-fixdate>\r\n", remade once a second */
};

/* The oldest request not yet written (the next to answer), or NULL. */
static inline struct http_request *conn_head(const struct http_conn *c)
{
	return list_empty(&c->reqs) ? NULL : list_entry(c->reqs.next, struct http_request, node);
}

/* The newest request (the one being parsed, if any), or NULL. */
static inline struct http_request *conn_tail(const struct http_conn *c)
{
	return list_empty(&c->reqs) ? NULL : list_entry(c->reqs.prev, struct http_request, node);
}

/* http_request.c */
void http_parser_settings(llhttp_settings_t *s);
void body_timer_start(struct http_conn *c, struct http_request *req);
void body_timer_hold(struct http_conn *c, struct http_request *req);
void body_timer_release(struct http_conn *c, struct http_request *req);
struct http_request *request_new(struct http_conn *c);
void request_free(struct http_request *req);
int request_error(struct http_request *req, int status, const char *code, const char *msg);
int routes_compile(struct http_server *s, const struct http_route *routes, size_t n);
void routes_free(struct http_server *s);

/* True while the stream request being parsed waits for its consumer (none registered yet, or
 * paused): the connection is not read. An answered request (its body being dropped) is not. */
static inline bool stream_blocked(const struct http_conn *c)
{
	const struct http_request *r = c->cur;

	return r && r->stream && !r->done && (!r->body_cb || r->body_paused);
}

/* http_stream.c */
int stream_start(llhttp_t *p, struct http_request *req, bool has_body);
int stream_body(llhttp_t *p, struct http_request *req, const char *at, size_t n, bool chunk_end);
void stream_message_complete(struct http_request *req);
void stream_answered(struct http_conn *c, struct http_request *req);
void stream_fail(struct http_conn *c, int status, const char *code, const char *msg);
void stream_lost(struct http_conn *c, int err);

/* http_server.c */
void conn_maybe_resume(struct http_conn *c);
void conn_stop_reading(struct http_conn *c);
void conn_read_stop(struct http_conn *c);
void conn_flush(struct http_conn *c);
void conn_fail(struct http_conn *c, int status, const char *code, const char *msg);
void conn_arm(struct http_conn *c, uint64_t ms);
void conn_enqueue(struct http_conn *c, struct http_request *req);
void conn_continue(struct http_conn *c);
int chunk_crlf_check(struct http_conn *c, const char *p, const char *end);
int parser_fail(llhttp_t *p, int status, const char *code, const char *msg);
bool conn_output_full(struct http_conn *c);

#endif
