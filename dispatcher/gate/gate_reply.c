/* The gate client: the scripts' answers, parsed into results, and the one callback of each
 * request. The reply formats are in each script's header and in README.md. */
#include "gate_int.h"

#include "error.h"
#include "log.h"

#include <stdlib.h>
#include <string.h>

#define LOG_REQ(level, req, ...)                                                                   \
	LOG_AT(level, LOG_GATE,                                                                    \
	       (&(const struct log_ids){ .org = (req)->org[0] ? (req)->org : NULL,                 \
					 .call = (req)->call[0] ? (req)->call : NULL,              \
					 .conn = (req)->g ? redis_conn_label((req)->g->conn)       \
							  : NULL }),                               \
	       __VA_ARGS__)

int gate_reply_malformed(const struct gate_req *req, const char *why)
{
	LOG_REQ(LOG_ERROR, req, "gate %s: malformed script reply (%s)", req->what, why);
	return DSP_EREDIS;
}

static bool prefix(const redisReply *r, const char *p)
{
	size_t n = strlen(p);

	return r->len >= n && memcmp(r->str, p, n) == 0;
}

int gate_reply_error(const struct gate_req *req, const redisReply *r)
{
	if (r->type != REDIS_REPLY_ERROR)
		return 0;
	if (redis_reply_is_stale_generation(r) || prefix(r, "GATE NOSYSTEM")) {
		LOG_REQ(LOG_DEBUG, req, "gate %s: state lost (%.*s)", req->what, (int)r->len,
			r->str);
		return GATE_ELOST;
	}
	if (prefix(r, "GATE NOLIMITS"))
		return -ENOENT;
	if (prefix(r, "GATE SAMEGEN"))
		return -EEXIST;
	if (prefix(r, "GATE OVERFLOW")) {
		LOG_REQ(LOG_ERROR, req, "gate %s: a count is at its maximum", req->what);
		return -EOVERFLOW;
	}
	LOG_REQ(LOG_ERROR, req, "gate %s: %.*s", req->what, (int)r->len, r->str);
	return DSP_EREDIS;
}

/* Element i of an array reply as an integer / a string (NULL when absent or not one). */
static bool int_at(const redisReply *r, size_t i, long long *out)
{
	if (r->type != REDIS_REPLY_ARRAY || i >= r->elements ||
	    r->element[i]->type != REDIS_REPLY_INTEGER)
		return false;
	*out = r->element[i]->integer;
	return true;
}

static const char *str_at(const redisReply *r, size_t i)
{
	if (r->type != REDIS_REPLY_ARRAY || i >= r->elements ||
	    r->element[i]->type != REDIS_REPLY_STRING)
		return NULL;
	return r->element[i]->str;
}

/* Reads n integers from element first on into v; false when one is missing or negative. */
static bool ints(const redisReply *r, size_t first, long long *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!int_at(r, first + i, &v[i]) || v[i] < 0)
			return false;
	return true;
}

/* "" and "*" (the direct pseudo-campaign, no agent) are NULL in results. */
static const char *id_or_null(const char *s)
{
	return s && s[0] && strcmp(s, "*") != 0 ? s : NULL;
}

static int parse_admit(const struct gate_req *req, const redisReply *r,
		       struct gate_admit_result *res)
{
	long long v[6], d[3];
	const char *campaign = str_at(r, 1);

	if (!int_at(r, 0, &v[0]) || !campaign || !ints(r, 2, &v[2], 2) || !int_at(r, 4, &v[4]) ||
	    !ints(r, 5, &v[5], 1) || v[0] < 0 || v[0] > 2)
		return gate_reply_malformed(req, "admit header");
	*res = (struct gate_admit_result){
		.outcome = (enum gate_outcome)v[0],
		.index = -1,
		.campaign = id_or_null(campaign),
		.now_ms = (uint64_t)v[2],
		.direct_waiting = (uint32_t)v[3],
		.waiter = (int)v[4],
	};
	if (res->outcome == GATE_HELD) {
		res->agent = id_or_null(str_at(r, 6));
		if (v[5] != 0 || !str_at(r, 6) || !int_at(r, 7, &d[0]) || d[0] < 0)
			return gate_reply_malformed(req, "held record");
		res->taken_ms = (uint64_t)d[0];
		return 0;
	}
	if (v[5] < 1 || (uint64_t)v[5] > req->n_candidates || r->elements != 6 + 3 * (size_t)v[5])
		return gate_reply_malformed(req, "decision count");
	res->n_decisions = (uint32_t)v[5];
	for (uint32_t i = 0; i < res->n_decisions; i++) {
		if (!ints(r, 6 + 3 * (size_t)i, d, 3) || d[0] >= FAIRSHARE_LEVEL_COUNT ||
		    d[1] > GATE_REASON_UNKNOWN || d[2] > 1)
			return gate_reply_malformed(req, "decision");
		res->decisions[i] = (struct gate_decision){ .level = (enum fairshare_level)d[0],
							    .reason = (enum gate_reason)d[1],
							    .fcfs = d[2] == 1 };
		/* Only the last decision of an admission admits (level none, reason none); every
		 * decision of a refusal names a level. Anything else is not read as an admission. */
		if ((d[0] == FAIRSHARE_LEVEL_NONE) != (d[1] == 0) ||
		    (d[0] == FAIRSHARE_LEVEL_NONE) !=
			    (res->outcome == GATE_ADMITTED && i + 1 == res->n_decisions))
			return gate_reply_malformed(req, "decision against outcome");
	}
	/* An admission names what it admitted: a candidate, or "*" for a direct dial. */
	if (res->outcome == GATE_ADMITTED &&
	    (req->direct ? strcmp(campaign, "*") != 0 : !res->campaign))
		return gate_reply_malformed(req, "admitted campaign");
	if (res->outcome == GATE_ADMITTED)
		res->index = req->direct ? -1 : (int)res->n_decisions - 1;
	return 0;
}

static int parse_release(const struct gate_req *req, const redisReply *r,
			 struct gate_release_result *res)
{
	long long v[10] = { 0 };

	if (!int_at(r, 0, &v[0]) || v[0] < -1 || v[0] > 1 || !str_at(r, 1) || !str_at(r, 2) ||
	    !ints(r, 3, &v[3], 2) ||
	    (r->elements > 5 && (!ints(r, 5, &v[5], 3) || !str_at(r, 8))) ||
	    (r->elements > 9 && !int_at(r, 9, &v[9])))
		return gate_reply_malformed(req, "release");
	*res = (struct gate_release_result){
		.outcome = v[0] == 1   ? GATE_FREED
			   : v[0] == 0 ? GATE_NOT_HELD
				       : GATE_RANGE,
		.campaign = id_or_null(str_at(r, 1)),
		.agent = id_or_null(str_at(r, 2)),
		.taken_ms = (uint64_t)v[3],
		.now_ms = (uint64_t)v[4],
		.woken = (uint32_t)v[5],
		.passed = (uint32_t)v[6],
		.receivers = (uint32_t)v[7],
		.woken_call = r->elements > 5 ? id_or_null(str_at(r, 8)) : NULL,
		.refresh = v[9] == 1,
	};
	if (res->outcome == GATE_RANGE)
		LOG_REQ(LOG_ERROR, req,
			"gate release: a count of this call's levels is already 0; nothing changed "
			"(the reconciler rebuilds the org)");
	return 0;
}

static int parse_install(const struct gate_req *req, const redisReply *r,
			 struct gate_install_result *res)
{
	long long v[5];

	if (r->type == REDIS_REPLY_ARRAY && r->elements == 2 && ints(r, 0, v, 2)) {
		*res = (struct gate_install_result){ .applied = v[0] == 1, .version = v[1] };
		return 0;
	}
	if (!ints(r, 0, v, 5))
		return gate_reply_malformed(req, "install");
	*res = (struct gate_install_result){
		.applied = v[0] == 1,
		.version = (uint64_t)v[1],
		.now_ms = (uint64_t)v[2],
		.expire_ms = (uint64_t)v[3],
		.shortfall = (uint64_t)v[4],
	};
	return 0;
}

static int parse_handoff(const struct gate_req *req, const redisReply *r,
			 struct gate_handoff_result *res)
{
	long long v[6];

	if (!ints(r, 0, v, 6))
		return gate_reply_malformed(req, "handoff");
	*res = (struct gate_handoff_result){
		.woken = (uint32_t)v[0],
		.passed = (uint32_t)v[1],
		.dropped = (uint32_t)v[2],
		.receivers = (uint32_t)v[3],
		.now_ms = (uint64_t)v[4],
		.direct_waiting = (uint32_t)v[5],
	};
	return 0;
}

static int parse_wait(const struct gate_req *req, const redisReply *r, struct gate_wait_result *res)
{
	long long v[2];

	if (!ints(r, 0, v, 2))
		return gate_reply_malformed(req, "wait");
	*res = (struct gate_wait_result){ .changed = v[0] == 1, .direct_waiting = (uint32_t)v[1] };
	return 0;
}

static int parse_stats(const struct gate_req *req, const redisReply *r, struct gate_stats *res)
{
	long long v[15];
	struct gate_counts *c[2] = { &res->total, &res->minute };

	if (!ints(r, 0, v, 15))
		return gate_reply_malformed(req, "stats");
	memset(res, 0, sizeof(*res));
	res->now_s = (uint64_t)v[0];
	for (int i = 0; i < 2; i++) {
		c[i]->admitted = (uint64_t)v[1 + 7 * i];
		c[i]->fcfs = (uint64_t)v[2 + 7 * i];
		for (int l = FAIRSHARE_LEVEL_SYSTEM; l < FAIRSHARE_LEVEL_COUNT; l++)
			c[i]->refused[l] = (uint64_t)v[2 + 7 * i + l];
	}
	return 0;
}

/* The campaigns and agents of a read, into arrays the caller frees. */
static int parse_view_lists(const struct gate_req *req, const redisReply *cs, const redisReply *as,
			    struct gate_view *v)
{
	struct gate_campaign_view *c;
	struct gate_agent_view *a;
	long long n[3], known;

	if (cs->type != REDIS_REPLY_ARRAY || as->type != REDIS_REPLY_ARRAY || cs->elements % 6 ||
	    as->elements % 3)
		return gate_reply_malformed(req, "read lists");
	c = calloc(cs->elements / 6 + 1, sizeof(*c));
	a = calloc(as->elements / 3 + 1, sizeof(*a));
	v->campaigns = c;
	v->agents = a;
	if (!c || !a)
		return -ENOMEM;
	for (size_t i = 0; i < cs->elements; i += 6, c++) {
		if (!str_at(cs, i) || !ints(cs, i + 1, n, 3) || !str_at(cs, i + 4) ||
		    !int_at(cs, i + 5, &known))
			return gate_reply_malformed(req, "read campaign");
		*c = (struct gate_campaign_view){
			.id = id_or_null(str_at(cs, i)),
			.running = (uint32_t)n[0],
			.floor = (uint32_t)n[1],
			.ceiling = (uint32_t)n[2],
			.agent = id_or_null(str_at(cs, i + 4)),
			.known = known == 1,
		};
		v->n_campaigns++;
	}
	for (size_t i = 0; i < as->elements; i += 3, a++) {
		if (!str_at(as, i) || !ints(as, i + 1, n, 2))
			return gate_reply_malformed(req, "read agent");
		*a = (struct gate_agent_view){ .id = str_at(as, i),
					       .running = (uint32_t)n[0],
					       .shortfall = (uint64_t)n[1] };
		v->n_agents++;
	}
	return 0;
}

static int parse_view(const struct gate_req *req, const redisReply *r, struct gate_view *v)
{
	long long n[16], sys_version;

	memset(v, 0, sizeof(*v));
	if (r->type != REDIS_REPLY_ARRAY || r->elements != 19 || !ints(r, 0, n, 16) ||
	    !int_at(r, 18, &sys_version) || sys_version < 0)
		return gate_reply_malformed(req, "read");
	*v = (struct gate_view){
		.now_ms = (uint64_t)n[0],
		.limits_version = (uint64_t)n[1],
		.org_limit = (uint32_t)n[2],
		.per_agent = (uint32_t)n[3],
		.enforced = n[4] == 1,
		.org_running = (uint32_t)n[5],
		.shortfall = (uint64_t)n[6],
		.direct_waiting = (uint32_t)n[7],
		.floors_version = (uint64_t)n[8],
		.floors_expire_ms = (uint64_t)n[9],
		.floors_valid = n[10] == 1,
		.direct_reserve = (uint32_t)n[11],
		.system_limit = (uint32_t)n[12],
		.system_running = (uint32_t)n[13],
		.system_version = (uint64_t)sys_version,
		.slots = (uint32_t)n[14],
		.waiters = (uint32_t)n[15],
	};
	return parse_view_lists(req, r->element[16], r->element[17], v);
}

static void dispatch_read(struct gate_req *req, int status, const redisReply *reply)
{
	struct gate_view v = { 0 };

	if (!status)
		status = parse_view(req, reply, &v);
	req->cb.read(req->g, status, status ? NULL : &v, req->data);
	free((void *)v.campaigns);
	free((void *)v.agents);
}

static void dispatch_done(struct gate_req *req, int status, const redisReply *reply)
{
	if (!status && reply->type != REDIS_REPLY_STATUS && reply->type != REDIS_REPLY_INTEGER &&
	    reply->type != REDIS_REPLY_ARRAY)
		status = gate_reply_malformed(req, "done");
	req->cb.done(req->g, status, req->data);
}

void gate_reply_dispatch(struct gate_req *req, int status, const redisReply *reply)
{
	union {
		struct gate_admit_result admit;
		struct gate_release_result release;
		struct gate_install_result install;
		struct gate_wait_result wait;
		struct gate_stats stats;
		struct gate_handoff_result handoff;
	} u;

	if (!status)
		status = gate_reply_error(req, reply);
	switch (req->op) {
	case GATE_OP_ADMIT:
		status = status ? status : parse_admit(req, reply, &u.admit);
		req->cb.admit(req->g, status, status ? NULL : &u.admit, req->data);
		break;
	case GATE_OP_RELEASE:
		status = status ? status : parse_release(req, reply, &u.release);
		req->cb.release(req->g, status, status ? NULL : &u.release, req->data);
		break;
	case GATE_OP_INSTALL:
		status = status ? status : parse_install(req, reply, &u.install);
		req->cb.install(req->g, status, status ? NULL : &u.install, req->data);
		break;
	case GATE_OP_WAIT:
		status = status ? status : parse_wait(req, reply, &u.wait);
		req->cb.wait(req->g, status, status ? NULL : &u.wait, req->data);
		break;
	case GATE_OP_STATS:
		status = status ? status : parse_stats(req, reply, &u.stats);
		req->cb.stats(req->g, status, status ? NULL : &u.stats, req->data);
		break;
	case GATE_OP_READ:
		dispatch_read(req, status, reply);
		break;
	case GATE_OP_DONE:
		dispatch_done(req, status, reply);
		break;
	case GATE_OP_HANDOFF:
		status = status ? status : parse_handoff(req, reply, &u.handoff);
		req->cb.handoff(req->g, status, status ? NULL : &u.handoff, req->data);
		break;
	}
}
