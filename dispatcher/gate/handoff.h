/* The hand-off's delivery side (issue 8, SPEC C9/C10): a worker's waiters, the wake-ups the
 * gate's scripts publish to this worker, the worker's heartbeat, and the re-check after its
 * subscriber reconnects. The scripts decide whom to wake (README.md "Hand-off"); this module only
 * delivers: it never decides, never polls the slots.
 *
 * Use: handoff_add() a waiter (org, call id, callback) BEFORE sending its admission with
 * gate_admit_req.wait and .worker = handoff_worker() on the gate's connection (the first
 * waiter of an org sends the org's heartbeat first, on the same pipeline). When the gate wakes
 * it, or when the subscriber has come back (a wake may have been lost), the callback runs and
 * the owner re-tries that call's admission (wait again): admitted consumes the wake; refused
 * puts the waiter back in its place. handoff_remove() when the waiter is admitted or gives up
 * (and then gate_handoff_unwait(), so that a wake in flight passes to the next waiter at once).
 *
 * Heartbeat: every heartbeat_ms, for every org with local waiters, gate_handoff_beat() renews
 * the worker's registrations (ttl heartbeat_ttl_ms) and sweeps the org's expired wakes (passed
 * to the next waiter). A worker that stops beating loses its waiters when a wake meets them.
 *
 * Callbacks come from the loop: a wake from the subscriber's message callback, a re-check from
 * inside handoff_resubscribed(). A callback may call handoff_add() and handoff_remove() (for any
 * waiter), and send gate operations.
 */
#ifndef DSP_HANDOFF_H
#define DSP_HANDOFF_H

#include "gate.h"
#include "redis_sub.h"

#include <stdint.h>
#include <uv.h>

struct handoff;

enum handoff_why {
	HANDOFF_WOKEN,	 /* the gate woke this waiter: a line is promised to it until deadline */
	HANDOFF_RECHECK, /* the subscriber came back: a wake may have been lost */
};

/* org and call are borrowed for the callback only. */
typedef void (*handoff_wake_cb)(struct handoff *h, const char *org, const char *call,
				enum handoff_why why, void *data);

struct handoff_options {
	uv_loop_t *loop;
	struct gate *gate;	   /* borrowed: outlives the handoff */
	struct redis_sub *sub;	   /* borrowed: the handoff subscribes its channel on it; close
				    * it before handoff_free() (subscriptions last until close) */
	const char *worker;	   /* this worker's id (^[A-Za-z0-9_-]{1,64}$), copied */
	uint64_t heartbeat_ms;	   /* beat and sweep interval; 0: 1000 */
	uint64_t heartbeat_ttl_ms; /* registrations live this long after a beat; 0: 5 × interval */
};

struct handoff_stats {
	uint64_t wakes;	      /* wake messages delivered to a local waiter */
	uint64_t unknown;     /* wake messages for no local waiter (removed meanwhile) */
	uint64_t rechecks;    /* waiters re-checked after a resubscription */
	uint64_t beats;	      /* heartbeats sent */
	uint64_t beat_errors; /* heartbeats answered with an error */
	uint64_t passed;      /* expired wakes the sweeps passed on */
};

/* Creates the handoff and subscribes to its channel (dsp:v1:wake:<worker>) on o->sub. *out is
 * owned by the caller until handoff_free(). Returns 0, -EINVAL (bad options), -EEXIST (the
 * channel is already subscribed on sub), -ENOMEM. */
int handoff_new(const struct handoff_options *o, struct handoff **out);

/* Registers a local waiter (org, call copied; data borrowed until handoff_remove()). Call it
 * before the admission that registers the waiter in the gate. Returns 0, -EINVAL (bad ids),
 * -EEXIST (call already a local waiter), -ENOMEM. */
int handoff_add(struct handoff *h, const char *org, const char *call, handoff_wake_cb cb,
		void *data);

/* Forgets a local waiter. Returns 0 or -ENOENT. */
int handoff_remove(struct handoff *h, const char *call);

/* For the owner's redis_sub state_cb on up: every local waiter is re-checked (callback with
 * HANDOFF_RECHECK, from the loop), since a wake published while the subscriber was down is
 * lost. */
void handoff_resubscribed(struct handoff *h);

/* This worker's id, and its channel. Borrowed, live as long as h. */
const char *handoff_worker(const struct handoff *h);
const char *handoff_channel(const struct handoff *h);

void handoff_get_stats(const struct handoff *h, struct handoff_stats *out);

/* Stops the heartbeat and frees h once its timers are closed and its heartbeats answered. No
 * callback is called after this call. The subscriber must be closed before. NULL is
 * ignored. */
void handoff_free(struct handoff *h);

#endif
