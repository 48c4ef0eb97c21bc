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
 * cleanup. The adapter's handle is released by hiredis' cleanup hook (when the context is freed)
 * through uv_close, never synchronously. Returns 0, -EEXIST if ac already has an adapter,
 * -ENOMEM, or a libuv error. */
int redis_uv_attach(redisAsyncContext *ac, uv_loop_t *loop);

#endif
