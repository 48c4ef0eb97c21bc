/* hiredis async on libuv: our own adapter on the redisAsyncContext event hooks.
 *
 * Debian's hiredis 0.14.1 ships adapters/libuv.h, but it returns early when libuv reports a poll
 * error, so a refused connect or a reset never reaches hiredis and its callbacks hang
 * (PLATFORM.md). This adapter hands an error status to hiredis as "readable", which makes
 * hiredis look at the socket, see the error, and disconnect with its callbacks called.
 */
#ifndef DSP_REDIS_UV_H
#define DSP_REDIS_UV_H

#include <hiredis/async.h>
#include <uv.h>

/* Attaches ac (borrowed; hiredis owns it) to loop: installs addRead/delRead/addWrite/delWrite/
 * cleanup. label (borrowed, must outlive the context) names the connection in the adapter's log
 * lines ("redis[gate]"). The adapter's handle is released by hiredis' cleanup hook (when the
 * context is freed) through uv_close, never synchronously. Returns 0, -EEXIST if ac already has
 * an adapter, -ENOMEM, or a libuv error. */
int redis_uv_attach(redisAsyncContext *ac, uv_loop_t *loop, const char *label);

/* Starts a non-blocking connect to the unix socket path when path is not empty, else to
 * host:port, and attaches the new context to loop (label as above). On success *out is owned by
 * hiredis (freed by redisAsyncFree() or by hiredis when the connection fails) and the caller sets
 * its callbacks. Returns 0, -ECONNREFUSED when the connect failed at once (logged at debug), or
 * -ENOMEM. */
int redis_uv_connect(uv_loop_t *loop, const char *host, int port, const char *path,
		     const char *label, redisAsyncContext **out);

#endif
