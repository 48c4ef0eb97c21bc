#include "redis_uv.h"

#include "log.h"

#include <errno.h>
#include <stdlib.h>

struct adapter {
	uv_poll_t poll;	       /* watches the context's fd; closed by cleanup */
	redisAsyncContext *ac; /* NULL once hiredis has cleaned up */
	int events;	       /* UV_READABLE / UV_WRITABLE currently wanted */
	const char *label;     /* the owner's connection label, borrowed */
};

static void poll_cb(uv_poll_t *handle, int status, int events)
{
	struct adapter *a = handle->data;

	if (status < 0) {
		/* The socket has an error (refused, reset): let hiredis read it and fail. */
		events = UV_READABLE | UV_WRITABLE;
	}
	if (a->ac && (events & UV_READABLE))
		redisAsyncHandleRead(a->ac);
	if (a->ac && (events & UV_WRITABLE))
		redisAsyncHandleWrite(a->ac);
	if (status < 0 && a->ac) {
		/* hiredis did not see the error: stop polling rather than spin; the owner's command
		 * or connect deadline will drop the connection. */
		LOG_CONN(LOG_WARN, LOG_REDIS, a->label, "poll error %s not seen by hiredis",
			 uv_strerror(status));
		uv_poll_stop(&a->poll);
		a->events = 0;
	}
}

static void update(struct adapter *a, int events)
{
	if (events == a->events || !a->ac)
		return;
	a->events = events;
	if (events)
		uv_poll_start(&a->poll, events, poll_cb);
	else
		uv_poll_stop(&a->poll);
}

static void add_read(void *privdata)
{
	struct adapter *a = privdata;
	update(a, a->events | UV_READABLE);
}

static void del_read(void *privdata)
{
	struct adapter *a = privdata;
	update(a, a->events & ~UV_READABLE);
}

static void add_write(void *privdata)
{
	struct adapter *a = privdata;
	update(a, a->events | UV_WRITABLE);
}

static void del_write(void *privdata)
{
	struct adapter *a = privdata;
	update(a, a->events & ~UV_WRITABLE);
}

static void close_cb(uv_handle_t *handle)
{
	free(handle->data);
}

static void cleanup(void *privdata)
{
	struct adapter *a = privdata;

	/* hiredis closes the fd right after this returns: uv_close stops the poll (epoll DEL)
	 * synchronously, so the fd is no longer watched when it closes. */
	a->ac->ev.data = NULL;
	a->ac = NULL;
	uv_close((uv_handle_t *)&a->poll, close_cb);
}

int redis_uv_attach(redisAsyncContext *ac, uv_loop_t *loop, const char *label)
{
	if (ac->ev.data)
		return -EEXIST;
	struct adapter *a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	int rc = uv_poll_init(loop, &a->poll, ac->c.fd);
	if (rc < 0) {
		free(a);
		return rc;
	}
	a->ac = ac;
	a->label = label;
	a->poll.data = a;
	ac->ev.addRead = add_read;
	ac->ev.delRead = del_read;
	ac->ev.addWrite = add_write;
	ac->ev.delWrite = del_write;
	ac->ev.cleanup = cleanup;
	ac->ev.data = a;
	return 0;
}

int redis_uv_connect(uv_loop_t *loop, const char *host, int port, const char *path,
		     const char *label, redisAsyncContext **out)
{
	redisAsyncContext *ac =
		path[0] ? redisAsyncConnectUnix(path) : redisAsyncConnect(host, port);

	if (!ac)
		return -ENOMEM;
	if (ac->err) {
		LOG_CONN(LOG_DEBUG, LOG_REDIS, label, "connect: %s", ac->errstr);
		redisAsyncFree(ac);
		return -ECONNREFUSED;
	}
	if (redis_uv_attach(ac, loop, label) < 0) {
		redisAsyncFree(ac);
		return -ENOMEM;
	}
	*out = ac;
	return 0;
}
