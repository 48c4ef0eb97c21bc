/* The API rate limiter's Redis side: the client of ratelimit.lua (ratelimit_redis.h). */
#include "ratelimit_redis.h"

#include "ident.h"
#include "list.h"
#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SCRIPT "ratelimit.lua"

/* Embedded by dispatcher/api/meson.build. */
extern const struct embedded_file ratelimit_lua[];
extern const size_t ratelimit_lua_count;

struct ratelimit_redis {
	uv_loop_t *loop;
	struct redis_conn *conn;
	const struct redis_script *script;
	uint64_t deadline_ms;
	uv_timer_t timer;	  /* fires at the first pending check's deadline */
	struct list_node pending; /* checks not answered yet, by deadline */
	struct list_node late;	  /* answered fail-open at their deadline, reply still due */
	struct ratelimit_redis_stats stats;
	bool closing;
};

/* One check. While its EVALSHA is in flight it is freed by the reply callback (the connection
 * calls it exactly once); one that could not be sent is freed by the timer that answers it. */
struct check {
	struct list_node node;	    /* on rl->pending, then rl->late, or on no list */
	struct ratelimit_redis *rl; /* NULL once rl is closed */
	uint64_t deadline;	    /* loop time, ms; 0 for a check that was never sent */
	bool sent;
	bool late;  /* answered fail-open at its deadline; on rl->late */
	int status; /* why an unsent check fails open */
	enum ratelimit_bucket bucket;
	uint32_t limit;
	ratelimit_redis_cb cb;
	void *data;
};

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int ratelimit_redis_scripts_register(struct redis_scripts *reg)
{
	for (size_t i = 0; i < ratelimit_lua_count; i++)
		if (strcmp(ratelimit_lua[i].name, SCRIPT) == 0)
			return redis_scripts_add(reg, &ratelimit_lua[i], 0, NULL);
	return -ENOENT;
}

int ratelimit_redis_new(uv_loop_t *loop, struct redis_conn *conn, const struct redis_scripts *reg,
			const struct ratelimit_redis_options *opts, struct ratelimit_redis **out)
{
	struct ratelimit_redis *rl;

	if (!loop || !conn || !reg || !out)
		return -EINVAL;
	if (!redis_scripts_find(reg, SCRIPT))
		return -ENOENT;
	if (!(rl = calloc(1, sizeof(*rl))))
		return -ENOMEM;
	rl->loop = loop;
	rl->conn = conn;
	rl->script = redis_scripts_find(reg, SCRIPT);
	rl->deadline_ms =
		opts && opts->deadline_ms ? opts->deadline_ms : RATELIMIT_REDIS_DEADLINE_MS;
	list_init(&rl->pending);
	list_init(&rl->late);
	uv_timer_init(loop, &rl->timer);
	rl->timer.data = rl;
	*out = rl;
	return 0;
}

int ratelimit_redis_key(const char *org, enum ratelimit_bucket bucket, char *buf, size_t size)
{
	const char *name = ratelimit_bucket_name(bucket);
	int n;

	if (!ident_ok_max(org, RATELIMIT_REDIS_ORG_MAX) || !name || !buf)
		return -EINVAL;
	n = snprintf(buf, size, "dsp:v1:{o:%s}:rl:%s", org, name);
	return n < 0 || (size_t)n >= size ? -ENOSPC : n;
}

/* Counts r and hands it to q's caller. */
static void answer(struct ratelimit_redis *rl, struct check *q, struct ratelimit_result *r)
{
	r->bucket = q->bucket;
	rl->stats.checks[q->bucket]++;
	if (!r->d.allowed)
		rl->stats.refusals[q->bucket]++;
	if (r->fail_open) {
		rl->stats.fail_opens++;
		if (r->status == -ETIMEDOUT && q->sent)
			rl->stats.fail_open_deadline++;
	}
	q->cb(r, q->data);
}

static void answer_open(struct ratelimit_redis *rl, struct check *q, int status)
{
	struct ratelimit_result r = { .fail_open = true, .status = status, .now_ms = wall_ms() };

	ratelimit_fail_open(q->limit, r.now_ms, &r.d);
	answer(rl, q, &r);
}

static void on_timer(uv_timer_t *t);

/* Sets the timer to the first pending check's deadline. */
static void arm(struct ratelimit_redis *rl)
{
	struct check *q;
	uint64_t now = uv_now(rl->loop);

	if (rl->closing || list_empty(&rl->pending)) {
		uv_timer_stop(&rl->timer);
		return;
	}
	q = list_entry(list_first(&rl->pending), struct check, node);
	uv_timer_start(&rl->timer, on_timer, q->deadline > now ? q->deadline - now : 0, 0);
}

static void on_timer(uv_timer_t *t)
{
	struct ratelimit_redis *rl = t->data;
	uint64_t now = uv_now(rl->loop);

	while (!rl->closing && !list_empty(&rl->pending)) {
		struct check *q = list_entry(list_first(&rl->pending), struct check, node);

		if (q->deadline > now)
			break;
		list_del(&q->node);
		if (q->sent) {
			q->late = true;
			list_add_tail(&rl->late, &q->node); /* its reply frees it */
			answer_open(rl, q, -ETIMEDOUT);
		} else {
			answer_open(rl, q, q->status);
			free(q);
		}
	}
	arm(rl);
}

/* Parses {allowed, estimated, remaining, reset_s, retry_after_s, now_ms}. Returns 0 or
 * -EPROTO. */
static int parse(const redisReply *reply, uint32_t limit, struct ratelimit_result *r)
{
	long long v[6];

	if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 6)
		return -EPROTO;
	for (size_t i = 0; i < 6; i++) {
		if (reply->element[i]->type != REDIS_REPLY_INTEGER ||
		    reply->element[i]->integer < 0)
			return -EPROTO;
		v[i] = reply->element[i]->integer;
	}
	if (v[0] > 1 || v[1] < 1 || v[2] > (long long)limit || v[3] < 1 || v[3] > 60 ||
	    v[4] > 120 || (v[0] == 1) != (v[4] == 0) || (v[0] == 1 && v[1] + v[2] != limit))
		return -EPROTO;
	r->d.allowed = v[0] == 1;
	r->d.limit = limit;
	r->d.estimated = (uint64_t)v[1];
	r->d.remaining = (uint32_t)v[2];
	r->d.reset_s = (uint32_t)v[3];
	r->d.retry_after_s = (uint32_t)v[4];
	r->now_ms = v[5];
	return 0;
}

static void on_reply(struct redis_conn *conn, int status, redisReply *reply, void *data)
{
	struct check *q = data;
	struct ratelimit_redis *rl = q->rl;
	struct ratelimit_result r = { 0 };

	if (!rl) { /* the limiter is closed: answered already */
		free(q);
		return;
	}
	if (q->late) {
		rl->stats.late_replies++;
		list_del(&q->node);
		free(q);
		return;
	}
	list_del(&q->node);
	if (!status && reply->type == REDIS_REPLY_ERROR) {
		log_warn(LOG_REDIS, "%s: %s: %s", redis_conn_label(conn), SCRIPT, reply->str);
		status = -EPROTO;
	} else if (!status && (status = parse(reply, q->limit, &r))) {
		log_warn(LOG_REDIS, "%s: %s: unexpected reply", redis_conn_label(conn), SCRIPT);
	}
	if (status)
		answer_open(rl, q, status);
	else
		answer(rl, q, &r);
	free(q); /* the timer, set for an earlier deadline, re-arms itself */
}

int ratelimit_redis_check(struct ratelimit_redis *rl, const char *org, enum ratelimit_bucket bucket,
			  uint32_t limit, ratelimit_redis_cb cb, void *data)
{
	char key[160], lim[16];
	const char *argv[2] = { key, lim };
	struct check *q;
	int rc;

	if (!rl || rl->closing || !cb || limit == 0 || limit > RATELIMIT_LIMIT_MAX ||
	    ratelimit_redis_key(org, bucket, key, sizeof(key)) < 0)
		return -EINVAL;
	if (!(q = calloc(1, sizeof(*q))))
		return -ENOMEM;
	snprintf(lim, sizeof(lim), "%" PRIu32, limit);
	list_init(&q->node);
	q->rl = rl;
	q->bucket = bucket;
	q->limit = limit;
	q->cb = cb;
	q->data = data;
	rc = redis_conn_is_up(rl->conn)
		     ? redis_conn_evalsha(rl->conn, rl->script, on_reply, q, 2, argv, NULL)
		     : -ENOTCONN;
	if (rc == 0) {
		q->sent = true;
		q->deadline = uv_now(rl->loop) + rl->deadline_ms;
		list_add_tail(&rl->pending, &q->node);
	} else {
		q->status = rc; /* fails open on the next loop turn */
		list_add_head(&rl->pending, &q->node);
	}
	if (list_first(&rl->pending) == &q->node)
		arm(rl);
	return 0;
}

static void on_closed(uv_handle_t *h)
{
	free(h->data);
}

void ratelimit_redis_close(struct ratelimit_redis *rl)
{
	struct list_node *pos, *tmp;

	if (!rl || rl->closing)
		return;
	rl->closing = true;
	uv_timer_stop(&rl->timer);
	list_for_each_safe (pos, tmp, &rl->pending) {
		struct check *q = list_entry(pos, struct check, node);

		list_del(pos);
		answer_open(rl, q, -ECANCELED);
		if (q->sent)
			q->rl = NULL; /* its reply frees it */
		else
			free(q);
	}
	list_for_each_safe (pos, tmp, &rl->late) {
		struct check *q = list_entry(pos, struct check, node);

		list_del(pos);
		q->rl = NULL;
	}
	uv_close((uv_handle_t *)&rl->timer, on_closed);
}

void ratelimit_redis_get_stats(const struct ratelimit_redis *rl, struct ratelimit_redis_stats *out)
{
	*out = rl->stats;
}
