/* The hand-off's delivery side: local waiters, wake messages, heartbeat, re-check. See
 * handoff.h and README.md "Hand-off". */
#include "handoff.h"

#include "ident.h"
#include "list.h"
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ID_MAX 64

struct waiter {
	struct list_node node; /* on handoff.waiters */
	char org[ID_MAX + 1];
	char call[ID_MAX + 1];
	handoff_wake_cb cb;
	void *data;
};

/* An org with local waiters: beaten every interval while n > 0. */
struct org {
	struct list_node node; /* on handoff.orgs */
	char id[ID_MAX + 1];
	uint32_t n; /* local waiters in this org */
};

struct handoff {
	uv_timer_t timer;
	struct gate *gate;
	char worker[ID_MAX + 1];
	char channel[ID_MAX + 32];
	uint64_t interval_ms, ttl_ms;
	struct list_node waiters; /* struct waiter */
	struct list_node orgs;	  /* struct org */
	uint32_t inflight;	  /* heartbeats not answered yet */
	bool closing, timer_closed;
	struct handoff_stats stats;
};

static void maybe_free(struct handoff *h)
{
	if (h->closing && h->timer_closed && h->inflight == 0)
		free(h);
}

static struct waiter *find(struct handoff *h, const char *call)
{
	struct list_node *pos, *tmp;

	list_for_each_safe (pos, tmp, &h->waiters) {
		struct waiter *w = list_entry(pos, struct waiter, node);
		if (strcmp(w->call, call) == 0)
			return w;
	}
	return NULL;
}

static struct org *find_org(struct handoff *h, const char *id)
{
	struct list_node *pos, *tmp;

	list_for_each_safe (pos, tmp, &h->orgs) {
		struct org *o = list_entry(pos, struct org, node);
		if (strcmp(o->id, id) == 0)
			return o;
	}
	return NULL;
}

static void beat_cb(struct gate *g, int status, const struct gate_handoff_result *res, void *data)
{
	struct handoff *h = data;

	h->inflight--;
	if (status) {
		h->stats.beat_errors++;
		if (status != -ECANCELED)
			log_warn(LOG_GATE, "handoff %s: heartbeat failed (%d)", h->worker, status);
	} else {
		h->stats.passed += res->passed;
	}
	maybe_free(h);
}

static void beat(struct handoff *h, const struct org *o)
{
	if (gate_handoff_beat(h->gate, o->id, h->worker, h->ttl_ms, beat_cb, h) == 0) {
		h->inflight++;
		h->stats.beats++;
	} else {
		h->stats.beat_errors++; /* the connection is down: the next tick tries again */
	}
}

static void timer_cb(uv_timer_t *t)
{
	struct handoff *h = t->data;
	struct list_node *pos, *tmp;

	list_for_each_safe (pos, tmp, &h->orgs)
		beat(h, list_entry(pos, struct org, node));
}

/* Payload "<org>|<call>|<deadline_ms>" (gate_wake.lua.inc). */
static void message_cb(struct redis_sub *sub, const char *channel, size_t channel_len,
		       const char *payload, size_t len, void *data)
{
	struct handoff *h = data;
	char org[ID_MAX + 1], call[ID_MAX + 1];
	struct waiter *w;

	if (h->closing || sscanf(payload, "%64[^|]|%64[^|]|", org, call) != 2) {
		h->stats.unknown++;
		return;
	}
	w = find(h, call);
	if (!w || strcmp(w->org, org) != 0) {
		h->stats.unknown++;
		return;
	}
	h->stats.wakes++;
	w->cb(h, org, call, HANDOFF_WOKEN, w->data);
}

int handoff_new(const struct handoff_options *o, struct handoff **out)
{
	struct handoff *h;
	int rc;

	if (!o || !o->loop || !o->gate || !o->sub || !ident_ok(o->worker) || !out)
		return -EINVAL;
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->gate = o->gate;
	snprintf(h->worker, sizeof(h->worker), "%s", o->worker);
	snprintf(h->channel, sizeof(h->channel), "dsp:v1:wake:%s", o->worker);
	h->interval_ms = o->heartbeat_ms ? o->heartbeat_ms : 1000;
	h->ttl_ms = o->heartbeat_ttl_ms ? o->heartbeat_ttl_ms : 5 * h->interval_ms;
	list_init(&h->waiters);
	list_init(&h->orgs);
	rc = redis_sub_subscribe(o->sub, h->channel, message_cb, h);
	if (rc) {
		free(h);
		return rc;
	}
	uv_timer_init(o->loop, &h->timer);
	h->timer.data = h;
	uv_timer_start(&h->timer, timer_cb, h->interval_ms, h->interval_ms);
	*out = h;
	return 0;
}

int handoff_add(struct handoff *h, const char *org, const char *call, handoff_wake_cb cb,
		void *data)
{
	struct waiter *w;
	struct org *o;
	bool fresh;

	if (!h || !cb || !ident_ok(org) || !ident_ok(call))
		return -EINVAL;
	if (find(h, call))
		return -EEXIST;
	o = find_org(h, org);
	fresh = !o;
	w = calloc(1, sizeof(*w));
	if (!w || (fresh && !(o = calloc(1, sizeof(*o))))) {
		free(w);
		return -ENOMEM;
	}
	if (fresh) {
		snprintf(o->id, sizeof(o->id), "%s", org);
		list_add_tail(&h->orgs, &o->node);
		beat(h, o); /* before the admission that registers the waiter */
	}
	o->n++;
	snprintf(w->org, sizeof(w->org), "%s", org);
	snprintf(w->call, sizeof(w->call), "%s", call);
	w->cb = cb;
	w->data = data;
	list_add_tail(&h->waiters, &w->node);
	return 0;
}

int handoff_remove(struct handoff *h, const char *call)
{
	struct waiter *w = h && call ? find(h, call) : NULL;
	struct org *o;

	if (!w)
		return -ENOENT;
	o = find_org(h, w->org);
	if (o && --o->n == 0) {
		list_del(&o->node);
		free(o);
	}
	list_del(&w->node);
	free(w);
	return 0;
}

void handoff_resubscribed(struct handoff *h)
{
	struct list_node *pos, *tmp;
	size_t n = 0, i = 0;
	char(*calls)[ID_MAX + 1];

	if (!h || h->closing)
		return;
	list_for_each_safe (pos, tmp, &h->waiters)
		n++;
	calls = n ? calloc(n, sizeof(*calls)) : NULL;
	if (!calls)
		return;
	list_for_each_safe (pos, tmp, &h->waiters)
		memcpy(calls[i++], list_entry(pos, struct waiter, node)->call, ID_MAX + 1);
	for (i = 0; i < n && !h->closing; i++) { /* a callback may remove any waiter */
		struct waiter *w = find(h, calls[i]);
		char org[ID_MAX + 1];

		if (!w)
			continue;
		memcpy(org, w->org, sizeof(org));
		h->stats.rechecks++;
		w->cb(h, org, calls[i], HANDOFF_RECHECK, w->data);
	}
	free(calls);
}

const char *handoff_worker(const struct handoff *h)
{
	return h->worker;
}

const char *handoff_channel(const struct handoff *h)
{
	return h->channel;
}

void handoff_get_stats(const struct handoff *h, struct handoff_stats *out)
{
	*out = h->stats;
}

static void timer_closed_cb(uv_handle_t *handle)
{
	struct handoff *h = handle->data;

	h->timer_closed = true;
	maybe_free(h);
}

void handoff_free(struct handoff *h)
{
	struct list_node *pos, *tmp;

	if (!h)
		return;
	h->closing = true;
	list_for_each_safe (pos, tmp, &h->waiters) {
		list_del(pos);
		free(list_entry(pos, struct waiter, node));
	}
	list_for_each_safe (pos, tmp, &h->orgs) {
		list_del(pos);
		free(list_entry(pos, struct org, node));
	}
	uv_close((uv_handle_t *)&h->timer, timer_closed_cb);
}
