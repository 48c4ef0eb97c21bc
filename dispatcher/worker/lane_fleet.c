/* Fleet-wide lanes: the client of lane_take.lua and lane_mark.lua (lane_fleet.h). */
#include "lane_fleet.h"

#include "ident.h"
#include "log.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAKE_SCRIPT  "lane_take.lua"
#define MARK_SCRIPT  "lane_mark.lua"
#define PROVIDER_MAX 32

extern const struct embedded_file lane_lua[];
extern const size_t lane_lua_count;

struct lane_fleet {
	struct redis_conn *conn;
	const struct redis_script *take, *mark;
	char provider[PROVIDER_MAX + 1];
	char probe_ms[24];
};

/* One call in flight: only the caller's callback, so f may be freed meanwhile. */
struct req {
	lane_fleet_take_cb take_cb;
	lane_fleet_mark_cb mark_cb;
	void *data;
};

static const char *const gate_field[] = { "stopped_until_ms", "parked_until_ms", "open_until_ms" };

int lane_fleet_scripts_register(struct redis_scripts *reg)
{
	int n = 0, rc;

	for (size_t i = 0; i < lane_lua_count; i++) {
		if ((rc = redis_scripts_add(reg, &lane_lua[i], 0, NULL)))
			return rc;
		n++;
	}
	return n == 2 ? 0 : -ENOENT;
}

int lane_fleet_new(struct redis_conn *conn, const struct redis_scripts *reg, const char *provider,
		   uint64_t probe_ms, struct lane_fleet **out)
{
	struct lane_fleet *f;

	if (!conn || !reg || !out || !ident_ok_max(provider, PROVIDER_MAX) || !probe_ms)
		return -EINVAL;
	if (!(f = calloc(1, sizeof(*f))))
		return -ENOMEM;
	f->conn = conn;
	f->take = redis_scripts_find(reg, TAKE_SCRIPT);
	f->mark = redis_scripts_find(reg, MARK_SCRIPT);
	if (!f->take || !f->mark) {
		free(f);
		return -ENOENT;
	}
	snprintf(f->provider, sizeof(f->provider), "%s", provider);
	snprintf(f->probe_ms, sizeof(f->probe_ms), "%" PRIu64, probe_ms);
	*out = f;
	return 0;
}

void lane_fleet_free(struct lane_fleet *f)
{
	free(f);
}

int lane_fleet_key(const struct lane_fleet *f, const char *org, char *buf, size_t size)
{
	int n;

	if (!ident_ok(org))
		return -EINVAL;
	n = snprintf(buf, size, "dsp:v1:{o:%s}:lane:%s", org, f->provider);
	return n < 0 || (size_t)n >= size ? -ENOSPC : n;
}

static enum lane_fleet_what what_of(const redisReply *r)
{
	static const char *const names[] = { "go",   "bucket",	   "stopped",	"parked",
					     "open", "probe_stop", "probe_open" };

	if (r->type != REDIS_REPLY_STATUS && r->type != REDIS_REPLY_STRING)
		return (enum lane_fleet_what) - 1;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(r->str, names[i]) == 0)
			return (enum lane_fleet_what)i;
	return (enum lane_fleet_what) - 1;
}

/* Parses {granted, wait_ms, what, now_ms, probe_until_ms}. Returns 0 or -EPROTO. */
static int parse_take(const redisReply *r, struct lane_take *t)
{
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 5)
		return -EPROTO;
	for (size_t i = 0; i < 5; i++)
		if ((i == 2) != (r->element[i]->type != REDIS_REPLY_INTEGER))
			return -EPROTO;
	if (r->element[0]->integer < 0 || r->element[0]->integer > LANE_FLEET_TAKE_MAX ||
	    r->element[1]->integer < 0 || (int)what_of(r->element[2]) < 0)
		return -EPROTO;
	t->granted = (uint32_t)r->element[0]->integer;
	t->wait_ms = (uint64_t)r->element[1]->integer;
	t->what = what_of(r->element[2]);
	t->now_ms = r->element[3]->integer;
	t->probe_until_ms = r->element[4]->integer;
	return 0;
}

static void take_reply(struct redis_conn *conn, int status, redisReply *reply, void *data)
{
	struct req *q = data;
	struct lane_take t = { .status = status };

	if (!status && reply->type == REDIS_REPLY_ERROR) {
		log_warn(LOG_REDIS, "%s: %s: %s", redis_conn_label(conn), TAKE_SCRIPT, reply->str);
		t.status = -EPROTO;
	} else if (!status && (t.status = parse_take(reply, &t))) {
		log_warn(LOG_REDIS, "%s: %s: unexpected reply", redis_conn_label(conn),
			 TAKE_SCRIPT);
	}
	q->take_cb(&t, q->data);
	free(q);
}

int lane_fleet_take(struct lane_fleet *f, const char *org, uint32_t rate_per_s, uint32_t burst,
		    uint32_t n, lane_fleet_take_cb cb, void *data)
{
	char key[160], rate[16], depth[16], want[16];
	const char *argv[5] = { key, rate, depth, want, f->probe_ms };
	struct req *q;
	int rc;

	if (!cb || n < 1 || n > LANE_FLEET_TAKE_MAX || lane_fleet_key(f, org, key, sizeof(key)) < 0)
		return -EINVAL;
	if (!redis_conn_is_up(f->conn))
		return -ENOTCONN;
	snprintf(rate, sizeof(rate), "%" PRIu32, rate_per_s);
	snprintf(depth, sizeof(depth), "%" PRIu32, burst);
	snprintf(want, sizeof(want), "%" PRIu32, n);
	if (!(q = calloc(1, sizeof(*q))))
		return -ENOMEM;
	q->take_cb = cb;
	q->data = data;
	if ((rc = redis_conn_evalsha(f->conn, f->take, take_reply, q, 5, argv, NULL)))
		free(q);
	return rc;
}

static void mark_reply(struct redis_conn *conn, int status, redisReply *reply, void *data)
{
	struct req *q = data;
	uint64_t left = 0;

	if (!status && reply->type == REDIS_REPLY_INTEGER && reply->integer >= 0) {
		left = (uint64_t)reply->integer;
	} else if (!status) {
		log_warn(LOG_REDIS, "%s: %s: %s", redis_conn_label(conn), MARK_SCRIPT,
			 reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
		status = -EPROTO;
	} else {
		log_warn(LOG_REDIS, "%s: %s not written: %s", redis_conn_label(conn), MARK_SCRIPT,
			 strerror(-status));
	}
	if (q->mark_cb)
		q->mark_cb(status, left, q->data);
	free(q);
}

static int mark(struct lane_fleet *f, const char *org, enum lane_fleet_gate gate, const char *op,
		int64_t ms, lane_fleet_mark_cb cb, void *data)
{
	char key[160], num[24];
	const char *argv[4] = { key, NULL, op, num };
	struct req *q;
	int rc;

	if ((unsigned)gate > LANE_FLEET_GATE_OPEN || ms < 0 ||
	    lane_fleet_key(f, org, key, sizeof(key)) < 0)
		return -EINVAL;
	if (!redis_conn_is_up(f->conn))
		return -ENOTCONN;
	argv[1] = gate_field[gate];
	snprintf(num, sizeof(num), "%" PRId64, ms);
	if (!(q = calloc(1, sizeof(*q))))
		return -ENOMEM;
	q->mark_cb = cb;
	q->data = data;
	if ((rc = redis_conn_evalsha(f->conn, f->mark, mark_reply, q, 4, argv, NULL)))
		free(q);
	return rc;
}

int lane_fleet_mark(struct lane_fleet *f, const char *org, enum lane_fleet_gate gate, uint64_t ms,
		    lane_fleet_mark_cb cb, void *data)
{
	return mark(f, org, gate, "max", ms > INT64_MAX / 2 ? INT64_MAX / 2 : (int64_t)ms, cb,
		    data);
}

int lane_fleet_clear(struct lane_fleet *f, const char *org, enum lane_fleet_gate gate,
		     int64_t expect, lane_fleet_mark_cb cb, void *data)
{
	return mark(f, org, gate, "clear", expect, cb, data);
}
