#include "redis_sub.h"

#include "backoff.h"
#include "list.h"
#include "log.h"
#include "redis_uv.h"
#include "resolve.h"

#include <errno.h>
#include <hiredis/async.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum sub_state {
	SS_NEW,	       /* created, not started */
	SS_DOWN,       /* waiting for the reconnect timer */
	SS_CONNECTING, /* connect + subscriptions under way, connect deadline armed */
	SS_UP,	       /* every subscription confirmed */
	SS_CLOSED,     /* owner closed it; waiting for handles to close */
};

struct subscription {
	struct list_node node; /* in redis_sub.subs */
	struct redis_sub *sub;
	char *name; /* channel or pattern, owned */
	size_t len;
	bool pattern;
	bool confirmed; /* on the current connection */
	bool internal;	/* the private ping channel: its messages are not counted */
	redis_message_cb cb;
	void *data; /* borrowed */
};

struct redis_sub {
	uv_loop_t *loop;
	struct redis_sub_options opts; /* strings point at the owned copies below */
	char *url, *name;
	char label[80];
	struct redis_url addr;	      /* the parsed URL */
	struct resolve_cursor target; /* the address of each attempt (addr.host looked up) */
	redisAsyncContext *ac;	      /* NULL when down; owned by hiredis */
	enum sub_state state;
	uv_timer_t retry_timer;	   /* reconnect delay, then connect deadline */
	uv_timer_t liveness_timer; /* next ping, or the deadline of the ping out */
	struct backoff backoff;
	uint64_t rng;
	struct list_node subs; /* struct subscription, the ping channel's first */
	unsigned unconfirmed;  /* subscriptions not yet confirmed while connecting */
	char ping_channel[96];
	uint64_t ping_seq;	       /* number of the last ping sent */
	uint64_t ping_sent_ns;	       /* uv_hrtime() when it was sent */
	uint64_t ping_pub_disconnects; /* the publisher's disconnects then */
	bool ping_out;		       /* it has not come back yet */
	int open_handles;
	void (*closed_cb)(void *data);
	void *closed_data;
	struct redis_sub_stats stats;
};

static void start_connect(struct redis_sub *sub);
static void liveness_cb(uv_timer_t *t);

#define SERVER(sub) ((sub)->addr.path[0] ? (sub)->addr.path : (sub)->addr.host)

static void reconnect_cb(uv_timer_t *t)
{
	start_connect(t->data);
}

static void schedule_reconnect(struct redis_sub *sub)
{
	uint64_t delay = backoff_next(&sub->backoff, backoff_random(&sub->rng));

	sub->state = SS_DOWN;
	uv_timer_start(&sub->retry_timer, reconnect_cb, delay, 0);
	LOG_CONN(LOG_DEBUG, LOG_REDIS, sub->label, "reconnecting in %llu ms",
		 (unsigned long long)delay);
}

/* The connection is gone (hiredis freed it, or is freeing it now): report and reconnect. */
static void lost(struct redis_sub *sub, const char *why)
{
	bool was_up = sub->state == SS_UP;
	struct list_node *n, *tmp;

	sub->ac = NULL;
	if (sub->state == SS_CLOSED)
		return;
	uv_timer_stop(&sub->liveness_timer);
	sub->ping_out = false;
	list_for_each_safe (n, tmp, &sub->subs) {
		list_entry(n, struct subscription, node)->confirmed = false;
	}
	if (was_up) {
		sub->stats.disconnects++;
		LOG_CONN(LOG_WARN, LOG_REDIS, sub->label, "connection to %s lost: %s", SERVER(sub),
			 why);
	} else {
		unsigned a = sub->backoff.attempt;
		sub->stats.failed_connects++;
		LOG_AT((a & (a - 1)) == 0 ? LOG_WARN : LOG_DEBUG, LOG_REDIS,
		       (&(const struct log_ids){ .conn = sub->label }),
		       "connect to %s failed (attempt %u): %s", SERVER(sub), a + 1, why);
	}
	resolve_cursor_abandon(&sub->target);
	if (was_up)
		resolve_cursor_forget(&sub->target);
	schedule_reconnect(sub);
	if (was_up && sub->opts.state_cb)
		sub->opts.state_cb(sub, false, sub->opts.data);
}

/* Drops the current context on our own initiative (deadline, liveness, refused AUTH). */
static void drop(struct redis_sub *sub, const char *why)
{
	redisAsyncContext *ac = sub->ac;

	lost(sub, why);
	if (ac)
		redisAsyncFree(ac); /* deferred when inside a hiredis callback */
}

static void up(struct redis_sub *sub)
{
	sub->state = SS_UP;
	sub->stats.connects++;
	uv_timer_stop(&sub->retry_timer);
	backoff_reset(&sub->backoff);
	LOG_CONN(LOG_INFO, LOG_REDIS, sub->label, "subscribed on %s", SERVER(sub));
	if (sub->opts.publisher)
		uv_timer_start(&sub->liveness_timer, liveness_cb, sub->opts.liveness_interval_ms,
			       0);
	if (sub->opts.state_cb)
		sub->opts.state_cb(sub, true, sub->opts.data);
}

static bool names(const redisReply *e, const struct subscription *s)
{
	return e->type == REDIS_REPLY_STRING && e->len == s->len &&
	       memcmp(e->str, s->name, s->len) == 0;
}

static bool is_string(const redisReply *e)
{
	return e->type == REDIS_REPLY_STRING;
}

/* A confirmation of s on the current connection. */
static void confirmed(struct redis_sub *sub, struct subscription *s)
{
	if (s->confirmed)
		return;
	s->confirmed = true;
	if (sub->state == SS_CONNECTING && sub->unconfirmed > 0 && --sub->unconfirmed == 0)
		up(sub);
}

/* hiredis calls this for each reply about s: its confirmation, its messages, and NULL when the
 * context is freed. hiredis 0.14.1 may also hand it a reply that is not about s (it reuses the
 * previous callback for an array it cannot route), hence every check. */
static void subscription_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct subscription *s = privdata;
	struct redis_sub *sub = s->sub;
	const redisReply *reply = r;

	if (!reply || sub->ac != ac || reply->type != REDIS_REPLY_ARRAY || reply->elements < 3 ||
	    !is_string(reply->element[0]) || !names(reply->element[1], s))
		return;
	const char *kind = reply->element[0]->str;
	redisReply *const *e = reply->element;
	const redisReply *ch = NULL, *payload = NULL;
	if (strcmp(kind, s->pattern ? "psubscribe" : "subscribe") == 0) {
		confirmed(sub, s);
	} else if (!s->pattern && strcmp(kind, "message") == 0 && is_string(e[2])) {
		ch = e[1];
		payload = e[2];
	} else if (s->pattern && strcmp(kind, "pmessage") == 0 && reply->elements == 4 &&
		   is_string(e[2]) && is_string(e[3])) {
		ch = e[2];
		payload = e[3];
	}
	if (!payload)
		return;
	sub->stats.messages += !s->internal;
	s->cb(sub, ch->str, ch->len, payload->str, payload->len, s->data);
}

static int send_subscribe(struct redis_sub *sub, struct subscription *s)
{
	const char *argv[] = { s->pattern ? "PSUBSCRIBE" : "SUBSCRIBE", s->name };
	size_t lens[] = { strlen(argv[0]), s->len };

	if (redisAsyncCommandArgv(sub->ac, subscription_cb, s, 2, argv, lens) != REDIS_OK)
		return -ENOMEM;
	return 0;
}

/* A liveness ping came back: in time, or too late (then the connection counts as dead, whatever
 * the timer says: on a loaded machine the reply may be read before the deadline fires). */
static void ping_message_cb(struct redis_sub *sub, const char *channel, size_t channel_len,
			    const char *payload, size_t len, void *data)
{
	char buf[24];
	uint64_t ns = sub->opts.liveness_timeout_ms * 1000000u;

	snprintf(buf, sizeof(buf), "%.*s", (int)(len < 23 ? len : 23), payload);
	if (!sub->ping_out || strtoull(buf, NULL, 10) != sub->ping_seq)
		return; /* a ping of an earlier connection */
	sub->ping_out = false;
	if (uv_hrtime() - sub->ping_sent_ns > ns) {
		sub->stats.liveness_failures++;
		drop(sub, "liveness ping came back too late");
		return;
	}
	sub->stats.pings_answered++;
	uv_timer_start(&sub->liveness_timer, liveness_cb, sub->opts.liveness_interval_ms, 0);
}

static uint64_t publisher_disconnects(const struct redis_sub *sub)
{
	struct redis_conn_stats st;

	redis_conn_get_stats(sub->opts.publisher, &st);
	return st.disconnects;
}

static void send_ping(struct redis_sub *sub)
{
	char seq[24];
	const char *argv[] = { "PUBLISH", sub->ping_channel, seq };

	snprintf(seq, sizeof(seq), "%" PRIu64, sub->ping_seq + 1);
	if (redis_conn_command_argv(sub->opts.publisher, NULL, NULL, 3, argv, NULL) < 0) {
		sub->stats.pings_skipped++;
		uv_timer_start(&sub->liveness_timer, liveness_cb, sub->opts.liveness_interval_ms,
			       0);
		return;
	}
	sub->ping_seq++;
	sub->ping_sent_ns = uv_hrtime();
	sub->ping_pub_disconnects = publisher_disconnects(sub);
	sub->ping_out = true;
	sub->stats.pings_sent++;
	uv_timer_start(&sub->liveness_timer, liveness_cb, sub->opts.liveness_timeout_ms, 0);
}

static void liveness_cb(uv_timer_t *t)
{
	struct redis_sub *sub = t->data;
	char why[96];

	if (sub->state != SS_UP)
		return;
	if (!sub->ping_out) {
		send_ping(sub);
		return;
	}
	sub->ping_out = false;
	if (publisher_disconnects(sub) != sub->ping_pub_disconnects) {
		/* The publisher's connection was lost with the ping: it may never have been
		 * published. No verdict; the next one goes out after the interval. */
		sub->stats.pings_skipped++;
		uv_timer_start(&sub->liveness_timer, liveness_cb, sub->opts.liveness_interval_ms,
			       0);
		return;
	}
	sub->stats.liveness_failures++;
	snprintf(why, sizeof(why), "liveness ping not back within %llu ms",
		 (unsigned long long)sub->opts.liveness_timeout_ms);
	drop(sub, why);
}

static void connect_cb(const redisAsyncContext *ac, int status)
{
	struct redis_sub *sub = ac->data;

	if (status != REDIS_OK && sub->ac == ac)
		lost(sub, ac->errstr[0] ? ac->errstr : "connect failed"); /* hiredis frees ac */
}

static void disconnect_cb(const redisAsyncContext *ac, int status)
{
	struct redis_sub *sub = ac->data;

	if (sub->ac == ac)
		lost(sub, ac->errstr[0] ? ac->errstr : "disconnected");
}

static void connect_deadline_cb(uv_timer_t *t)
{
	struct redis_sub *sub = t->data;

	if (sub->state == SS_CONNECTING)
		drop(sub, sub->ac ? "connect timed out (subscriptions not confirmed)"
				  : "connect timed out (host lookup)");
}

/* Whether r is an error reply on the connection still being made (privdata is the sub; r is
 * NULL when the context goes). */
static bool hello_error(redisAsyncContext *ac, const redisReply *r, const struct redis_sub *sub)
{
	return r && sub->ac == ac && sub->state == SS_CONNECTING && r->type == REDIS_REPLY_ERROR;
}

static void auth_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redis_sub *sub = privdata;
	const redisReply *reply = r;
	char why[256];

	if (!hello_error(ac, reply, sub))
		return;
	snprintf(why, sizeof(why), "AUTH refused: %s", reply->str);
	LOG_CONN(LOG_ERROR, LOG_REDIS, sub->label, "%s", why);
	drop(sub, why);
}

static void setname_cb(redisAsyncContext *ac, void *r, void *privdata)
{
	struct redis_sub *sub = privdata;
	const redisReply *reply = r;

	if (hello_error(ac, reply, sub))
		LOG_CONN(LOG_WARN, LOG_REDIS, sub->label, "CLIENT SETNAME refused: %s", reply->str);
}

/* AUTH, CLIENT SETNAME and every subscription, pipelined. Returns 0 or -ENOMEM. */
static int send_hello(struct redis_sub *sub)
{
	const char *auth_user[] = { "AUTH", sub->addr.user, sub->addr.password };
	const char *auth[] = { "AUTH", sub->addr.password };
	const char *setname[] = { "CLIENT", "SETNAME", sub->name };
	struct list_node *n, *tmp;
	int rc = 0;

	bool user = sub->addr.user[0] != '\0';

	if (sub->addr.auth && redisAsyncCommandArgv(sub->ac, auth_cb, sub, user ? 3 : 2,
						    user ? auth_user : auth, NULL))
		return -ENOMEM;
	if (redisAsyncCommandArgv(sub->ac, setname_cb, sub, 3, setname, NULL))
		return -ENOMEM;
	sub->unconfirmed = 0;
	list_for_each_safe (n, tmp, &sub->subs) {
		if (rc == 0)
			rc = send_subscribe(sub, list_entry(n, struct subscription, node));
		sub->unconfirmed++;
	}
	return rc;
}

/* The attempt's address is known (a literal, "" with a socket path) or its lookup failed. */
static void target_cb(int status, const char *host, void *data)
{
	struct redis_sub *sub = data;
	redisAsyncContext *ac;
	char why[384];

	if (status < 0) {
		snprintf(why, sizeof(why), "cannot resolve %s: %s", sub->addr.host,
			 uv_strerror(status));
		lost(sub, why);
		return;
	}
	if (redis_uv_connect(sub->loop, host, sub->addr.port, sub->addr.path, sub->label, &ac) <
	    0) {
		sub->stats.failed_connects++;
		schedule_reconnect(sub);
		return;
	}
	ac->data = sub;
	redisAsyncSetConnectCallback(ac, connect_cb);
	redisAsyncSetDisconnectCallback(ac, disconnect_cb);
	sub->ac = ac;
	if (send_hello(sub) < 0)
		drop(sub, "could not queue the subscriptions");
}

/* One attempt; the connect deadline covers the host lookup (off the loop, resolve.h). */
static void start_connect(struct redis_sub *sub)
{
	if (sub->state == SS_CLOSED)
		return;
	sub->state = SS_CONNECTING;
	uv_timer_start(&sub->retry_timer, connect_deadline_cb, sub->opts.connect_timeout_ms, 0);
	resolve_cursor_next(&sub->target);
}

static int add(struct redis_sub *sub, const char *name, bool pattern, bool internal,
	       redis_message_cb cb, void *data)
{
	struct list_node *n, *tmp;

	if (sub->state == SS_CLOSED)
		return -ESHUTDOWN;
	if (!name || !name[0] || !cb)
		return -EINVAL;
	list_for_each_safe (n, tmp, &sub->subs) {
		struct subscription *s = list_entry(n, struct subscription, node);
		if (s->pattern == pattern && strcmp(s->name, name) == 0)
			return -EEXIST;
	}
	struct subscription *s = calloc(1, sizeof(*s));
	if (!s || !(s->name = strdup(name))) {
		free(s);
		return -ENOMEM;
	}
	s->sub = sub;
	s->len = strlen(name);
	s->pattern = pattern;
	s->internal = internal;
	s->cb = cb;
	s->data = data;
	list_add_tail(&sub->subs, &s->node);
	if (sub->ac && send_subscribe(sub, s) < 0)
		drop(sub, "could not send a subscription"); /* re-made with it */
	else if (sub->state == SS_CONNECTING)
		sub->unconfirmed++;
	return 0;
}

int redis_sub_subscribe(struct redis_sub *sub, const char *channel, redis_message_cb cb, void *data)
{
	return add(sub, channel, false, false, cb, data);
}

int redis_sub_psubscribe(struct redis_sub *sub, const char *pattern, redis_message_cb cb,
			 void *data)
{
	return add(sub, pattern, true, false, cb, data);
}

static void sub_free(struct redis_sub *sub)
{
	struct list_node *n, *tmp;

	list_for_each_safe (n, tmp, &sub->subs) {
		struct subscription *s = list_entry(n, struct subscription, node);
		free(s->name);
		free(s);
	}
	free(sub->url);
	free(sub->name);
	free(sub);
}

/* Copies the options, applies the defaults, names the ping channel. Returns 0 or a code. */
static int setup(struct redis_sub *sub, const struct redis_sub_options *opts)
{
	uint64_t rnd = 0;

	sub->opts = *opts;
	sub->url = strdup(opts->url);
	sub->name = strdup(opts->name ? opts->name : "sub");
	if (!sub->url || !sub->name)
		return -ENOMEM;
	sub->opts.url = sub->url;
	sub->opts.name = sub->name;
	if (!sub->opts.liveness_interval_ms)
		sub->opts.liveness_interval_ms = 1000;
	if (!sub->opts.liveness_timeout_ms)
		sub->opts.liveness_timeout_ms = 3000;
	if (sub->name[0] == '\0' || strlen(sub->name) > 64)
		return -EINVAL;
	for (const char *p = sub->name; *p; p++) {
		if (*p <= ' ' || *p > '~')
			return -EINVAL;
	}
	snprintf(sub->label, sizeof(sub->label), "redis[%s]", sub->name);
	if (uv_random(NULL, NULL, &rnd, sizeof(rnd), 0, NULL) < 0)
		rnd = backoff_seed(uv_hrtime(), sub);
	snprintf(sub->ping_channel, sizeof(sub->ping_channel), "redis_sub:%s:ping:%016" PRIx64,
		 sub->name, rnd);
	return redis_url_parse(opts->url, &sub->addr);
}

int redis_sub_new(uv_loop_t *loop, const struct redis_sub_options *opts, struct redis_sub **out)
{
	struct redis_sub *sub;

	if (!opts->url || opts->connect_timeout_ms == 0)
		return -EINVAL;
	sub = calloc(1, sizeof(*sub));
	if (!sub)
		return -ENOMEM;
	list_init(&sub->subs);
	int rc = setup(sub, opts);
	if (rc == 0)
		rc = add(sub, sub->ping_channel, false, true, ping_message_cb, NULL);
	if (rc < 0) {
		sub_free(sub);
		return rc;
	}
	sub->loop = loop;
	resolve_cursor_init(&sub->target, loop, sub->addr.path[0] ? "" : sub->addr.host, target_cb,
			    sub);
	sub->rng = backoff_seed(uv_hrtime(), sub);
	backoff_init(&sub->backoff, opts->reconnect_min_ms, opts->reconnect_max_ms);
	uv_timer_init(loop, &sub->retry_timer);
	uv_timer_init(loop, &sub->liveness_timer);
	sub->retry_timer.data = sub->liveness_timer.data = sub;
	sub->open_handles = 2;
	*out = sub;
	return 0;
}

int redis_sub_start(struct redis_sub *sub)
{
	if (sub->state != SS_NEW)
		return -EBUSY;
	sub->state = SS_DOWN;
	start_connect(sub);
	return 0;
}

bool redis_sub_is_up(const struct redis_sub *sub)
{
	return sub->state == SS_UP;
}

const char *redis_sub_label(const struct redis_sub *sub)
{
	return sub->label;
}

const char *redis_sub_ping_channel(const struct redis_sub *sub)
{
	return sub->ping_channel;
}

void redis_sub_get_stats(const struct redis_sub *sub, struct redis_sub_stats *out)
{
	*out = sub->stats;
	out->lookups = sub->target.lookups;
}

static void handle_closed_cb(uv_handle_t *h)
{
	struct redis_sub *sub = h->data;

	if (--sub->open_handles > 0)
		return;
	if (sub->closed_cb)
		sub->closed_cb(sub->closed_data);
	sub_free(sub);
}

void redis_sub_close(struct redis_sub *sub, void (*closed_cb)(void *data), void *data)
{
	redisAsyncContext *ac = sub->ac;

	sub->state = SS_CLOSED;
	sub->ac = NULL;
	sub->closed_cb = closed_cb;
	sub->closed_data = data;
	resolve_cursor_close(&sub->target);
	if (ac)
		redisAsyncFree(ac); /* deferred when inside one of its callbacks */
	uv_close((uv_handle_t *)&sub->retry_timer, handle_closed_cb);
	uv_close((uv_handle_t *)&sub->liveness_timer, handle_closed_cb);
}
