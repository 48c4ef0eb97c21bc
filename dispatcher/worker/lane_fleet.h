/* Fleet-wide lanes (SPEC D3; issue 9 item 5): the part of a lane (provider, organisation) that
 * every worker shares, in one Redis hash under the organisation's hash tag,
 * dsp:v1:{o:<org>}:lane:<provider> (dispatcher/gate/README.md, key layout).
 *
 *   take   lane_take.lua, before every send (re-sends too): on Redis's clock, refuses while the
 *          lane is stopped, parked or its circuit open (with the wait), else takes up to n
 *          tokens of the lane's token bucket (core/token_bucket.c's arithmetic). A stop or an
 *          open circuit whose time has run out lets exactly one take through as the fleet's
 *          probe; the probe's answer clears it (lane_fleet_clear) or writes it again.
 *   mark   lane_mark.lua, on the rare transitions each worker's core/lane.c decides (park on a
 *          throttled answer, circuit opened, stop on 401/403): until = max(stored, now + ms).
 *
 * The decisions stay in core/lane.c: this module only moves its park / open / stop times into
 * Redis and takes the tokens there. The scripts are not generation-guarded: a lost lane hash
 * (FLUSHALL, a restart) is a full bucket and a lane not parked, which the provider's next 429 or
 * 401 puts right; no slot or limit depends on it.
 *
 * Async contract: if lane_fleet_take(), lane_fleet_mark() or lane_fleet_clear() returns an error
 * the callback is never called; otherwise it is called exactly once, from the connection's
 * callback (a reply, a transport error, or -ECANCELED when the connection is closed). The
 * result is borrowed for the callback only.
 */
#ifndef DSP_WORKER_LANE_FLEET_H
#define DSP_WORKER_LANE_FLEET_H

#include "redis_conn.h"

#include <stdint.h>

#define LANE_FLEET_TAKE_MAX 1000 /* tokens one take may ask for */

struct lane_fleet;

enum lane_fleet_what {
	LANE_FLEET_GO = 0,     /* every token asked for was taken */
	LANE_FLEET_BUCKET,     /* fewer (maybe none): the next token in wait_ms */
	LANE_FLEET_STOPPED,    /* 401/403 somewhere in the fleet: nothing until wait_ms */
	LANE_FLEET_PARKED,     /* throttled somewhere in the fleet */
	LANE_FLEET_OPEN,       /* the circuit is open (or its probe is out) */
	LANE_FLEET_PROBE_STOP, /* one token, as the probe of a stop that has run out */
	LANE_FLEET_PROBE_OPEN, /* one token, as the probe of an open circuit that has run out */
};

/* The gates lane_fleet_mark() writes (fields of the lane hash). */
enum lane_fleet_gate {
	LANE_FLEET_GATE_STOP = 0, /* stopped_until_ms */
	LANE_FLEET_GATE_PARK,	  /* parked_until_ms */
	LANE_FLEET_GATE_OPEN,	  /* open_until_ms */
};

struct lane_take {
	int status;	  /* 0, or a negative code (Redis unreachable, error reply) */
	uint32_t granted; /* tokens taken */
	uint64_t wait_ms; /* BUCKET: until the next token; STOPPED/PARKED/OPEN: until it ends */
	enum lane_fleet_what what;
	int64_t now_ms;		/* Redis's clock when it decided */
	int64_t probe_until_ms; /* PROBE_*: what lane_fleet_clear() expects */
};

typedef void (*lane_fleet_take_cb)(const struct lane_take *t, void *data);
/* status: 0 with remaining_ms (ms until the gate's time after the write), or a negative code. */
typedef void (*lane_fleet_mark_cb)(int status, uint64_t remaining_ms, void *data);

/* Adds lane_take.lua and lane_mark.lua to reg (before its connections start). Returns as
 * redis_scripts_add(), or -ENOENT when a script is missing from the build. */
int lane_fleet_scripts_register(struct redis_scripts *reg);

/* Creates the client on conn (borrowed; its registry, reg, must hold the scripts above).
 * provider names the lanes' provider part (copied; [A-Za-z0-9_-]{1,32}). probe_ms: how long a
 * probe's answer is awaited before another may go. *out is owned by the caller
 * (lane_fleet_free()). Returns 0, -EINVAL, -ENOENT (scripts not registered) or -ENOMEM. */
int lane_fleet_new(struct redis_conn *conn, const struct redis_scripts *reg, const char *provider,
		   uint64_t probe_ms, struct lane_fleet **out);

/* Frees f (NULL is ignored). Calls in flight still complete (they do not use f). */
void lane_fleet_free(struct lane_fleet *f);

/* Writes org's lane key into buf. Returns its length, -EINVAL (bad org) or -ENOSPC. */
int lane_fleet_key(const struct lane_fleet *f, const char *org, char *buf, size_t size);

/* Takes up to n (1..LANE_FLEET_TAKE_MAX) tokens of org's lane, paced at rate_per_s (0: unpaced)
 * with depth burst. Returns 0 (cb called), -EINVAL, -ENOTCONN (Redis down: pace locally),
 * -ESHUTDOWN or -ENOMEM. */
int lane_fleet_take(struct lane_fleet *f, const char *org, uint32_t rate_per_s, uint32_t burst,
		    uint32_t n, lane_fleet_take_cb cb, void *data);

/* gate = max(gate, Redis now + ms) on org's lane. cb may be NULL. Returns as lane_fleet_take(). */
int lane_fleet_mark(struct lane_fleet *f, const char *org, enum lane_fleet_gate gate, uint64_t ms,
		    lane_fleet_mark_cb cb, void *data);

/* Deletes gate on org's lane when it still holds expect (a probe's probe_until_ms). cb may be
 * NULL. Returns as lane_fleet_take(). */
int lane_fleet_clear(struct lane_fleet *f, const char *org, enum lane_fleet_gate gate,
		     int64_t expect, lane_fleet_mark_cb cb, void *data);

#endif
