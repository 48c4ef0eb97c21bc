/* A Redis subscriber connection on a libuv loop that re-makes itself.
 *
 * Its own hiredis async context (through redis_uv.c), kept apart from the command connections:
 * a RESP2 connection that has subscribed can run nothing but (P)SUBSCRIBE/(P)UNSUBSCRIBE/PING.
 * Created with redis_sub_new(), it connects when redis_sub_start() is called; subscriptions may
 * be added before or after. Every connect sends AUTH (when the URL has a password), CLIENT
 * SETNAME, and SUBSCRIBE / PSUBSCRIBE for every subscription, and reports up only once Redis has
 * confirmed them all. A lost connection is re-made after a capped, jittered backoff and
 * re-subscribed; the owner is told at each up (state_cb), and should then re-check whatever a
 * message might have told it meanwhile: messages published while the connection was down or
 * not yet subscribed are lost (Redis Pub/Sub keeps nothing).
 *
 * Liveness. hiredis 0.14.1 loses PING replies on a subscribed connection, so the connection
 * checks itself end to end instead: every liveness_interval_ms it publishes a numbered ping to a
 * private channel it is subscribed to, through the command connection given as publisher; a
 * ping that has not come back within liveness_timeout_ms (a stalled server, a half-open TCP
 * connection, a subscriber left on a server the publisher no longer talks to) marks the
 * connection dead: it is dropped and re-made. While the publisher is down no ping is sent (and
 * none is expected), and a ping whose publisher lost its connection meanwhile gives no verdict.
 *
 * Callbacks: message callbacks are called once per message received, from the loop; state_cb on
 * each up and on each down after an up. None is called after redis_sub_close(). Callbacks may
 * add subscriptions and may close the subscriber. Every log line names the connection
 * ("conn":"redis[<name>]").
 */
#ifndef DSP_REDIS_SUB_H
#define DSP_REDIS_SUB_H

#include "redis_conn.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct redis_sub;

/* A message of a subscription: channel is the channel it was published to (for a pattern
 * subscription, the channel that matched). Both buffers are borrowed: valid only during the
 * callback; they are binary-safe (lengths given) and also NUL-terminated. */
typedef void (*redis_message_cb)(struct redis_sub *sub, const char *channel, size_t channel_len,
				 const char *payload, size_t payload_len, void *data);

/* up: every subscription is confirmed on a new connection (the first one included: re-check
 * what may have been missed); down: an up connection was lost. */
typedef void (*redis_sub_state_cb)(struct redis_sub *sub, bool up, void *data);

struct redis_sub_options {
	const char *url;	       /* as redis_conn_options.url (copied) */
	const char *name;	       /* label "redis[<name>]" and client name; NULL: "sub" */
	uint64_t connect_timeout_ms;   /* deadline of one connect + subscriptions */
	uint64_t reconnect_min_ms;     /* first reconnect delay */
	uint64_t reconnect_max_ms;     /* cap on the reconnect delay */
	uint64_t liveness_interval_ms; /* a ping every so often; 0: 1000 */
	uint64_t liveness_timeout_ms;  /* a ping not back by then: dead; 0: 3000 */
	struct redis_conn *publisher;  /* publishes the pings; borrowed: must stay open until
					* redis_sub_close() has been called. NULL: no liveness
					* check (a dead peer is then seen only by TCP). */
	redis_sub_state_cb state_cb;   /* may be NULL */
	void *data;		       /* passed to state_cb, borrowed */
};

struct redis_sub_stats {
	uint64_t connects;	    /* ups (all subscriptions confirmed) */
	uint64_t disconnects;	    /* up -> down transitions */
	uint64_t failed_connects;   /* attempts that failed before up */
	uint64_t messages;	    /* messages handed to subscriptions (pings not counted) */
	uint64_t pings_sent;	    /* liveness pings published */
	uint64_t pings_answered;    /* pings back in time */
	uint64_t pings_skipped;	    /* intervals without a verdict: the publisher was down, or
				     * its connection was lost with the ping */
	uint64_t liveness_failures; /* connections dropped because a ping was late or lost */
	uint64_t lookups;	    /* host-name lookups started (on libuv's thread pool) */
};

/* Creates a subscriber; it connects when redis_sub_start() is called. *out is owned by the
 * caller until redis_sub_close(). Returns 0, -EINVAL (bad URL, name or options) or -ENOMEM. */
int redis_sub_new(uv_loop_t *loop, const struct redis_sub_options *opts, struct redis_sub **out);

/* Subscribes to channel (copied, NUL-terminated), now when connected and on every reconnect;
 * cb(data) gets each message. A subscription added while up is active once Redis confirms it
 * (a message published before may be missed). Subscriptions last until close. Returns 0,
 * -EINVAL (empty name, NULL cb), -EEXIST (already subscribed to that channel), -ESHUTDOWN after
 * close, -ENOMEM. */
int redis_sub_subscribe(struct redis_sub *sub, const char *channel, redis_message_cb cb,
			void *data);

/* As redis_sub_subscribe() for a glob-style pattern (PSUBSCRIBE). */
int redis_sub_psubscribe(struct redis_sub *sub, const char *pattern, redis_message_cb cb,
			 void *data);

/* Starts connecting. Returns 0, or -EBUSY if already started or closed. */
int redis_sub_start(struct redis_sub *sub);

/* Whether every subscription is confirmed on a live connection now. */
bool redis_sub_is_up(const struct redis_sub *sub);

/* The label of log lines, "redis[<name>]"; the private liveness channel. Borrowed, live as long
 * as sub. */
const char *redis_sub_label(const struct redis_sub *sub);
const char *redis_sub_ping_channel(const struct redis_sub *sub);

/* Counters since creation. */
void redis_sub_get_stats(const struct redis_sub *sub, struct redis_sub_stats *out);

/* Stops reconnecting and pinging, closes the connection, and frees sub once its libuv handles
 * are closed (then calls closed_cb, which may be NULL). No callback of sub is called after this
 * call; sub must not be used. Safe from any callback of sub. */
void redis_sub_close(struct redis_sub *sub, void (*closed_cb)(void *data), void *data);

#endif
