/* The gate client: requests in flight, arguments of each script, and the operations that send
 * them. Replies are parsed in gate_reply.c. See gate.h and README.md. */
#include "gate_int.h"

#include "error.h"
#include "ident.h"
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ARG_SLOT 96 /* bytes for one formatted argument: the longest key is 81 */

/* Embedded by dispatcher/meson.build from this folder's .lua files. */
extern const struct embedded_file gate_lua[];
extern const size_t gate_lua_count;

/* The scripts, and whether each is guarded by a generation key (README.md "Scripts"). The last
 * one, the test clock, is registered only by gate_test_scripts_register(): a product registry
 * cannot pin a clock (a pinned clock_ms would freeze floor expiry and the rolling minute). */
static const struct {
	const char *name;
	bool guarded;
} scripts[] = {
	{ "gate_admit.lua", true },	  { "gate_release.lua", true },
	{ "gate_install.lua", true },	  { "gate_wait.lua", true },
	{ "gate_read.lua", true },	  { "gate_stats.lua", false },
	{ "gate_system.lua", true },	  { "gate_system_init.lua", false },
	{ "gate_org_rebuild.lua", true }, { "gate_handoff.lua", true },
	{ "gate_test_clock.lua", false },
};

/* An EVALSHA's argv: borrowed strings, and formatted ones in fixed slots of buf. */
struct args {
	const char **v;
	size_t *len;
	char *buf;
	int n, cap;
};

static int args_init(struct args *a, size_t cap)
{
	if (cap > 1u << 24)
		return -EINVAL;
	a->n = 0;
	a->cap = (int)cap;
	a->v = malloc(cap * sizeof(*a->v));
	a->len = malloc(cap * sizeof(*a->len));
	a->buf = malloc(cap * ARG_SLOT);
	if (!a->v || !a->len || !a->buf) {
		free(a->v);
		free(a->len);
		free(a->buf);
		return -ENOMEM;
	}
	return 0;
}

static void args_free(struct args *a)
{
	free(a->v);
	free(a->len);
	free(a->buf);
}

/* A borrowed string (NULL is ""). */
static void args_str(struct args *a, const char *s)
{
	a->v[a->n] = s ? s : "";
	a->len[a->n] = strlen(a->v[a->n]);
	a->n++;
}

static void args_fmt(struct args *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void args_fmt(struct args *a, const char *fmt, ...)
{
	char *slot = a->buf + (size_t)a->n * ARG_SLOT;
	va_list ap;
	int len;

	va_start(ap, fmt);
	len = vsnprintf(slot, ARG_SLOT, fmt, ap);
	va_end(ap);
	a->v[a->n] = slot;
	a->len[a->n] = len > 0 && len < ARG_SLOT ? (size_t)len : strlen(slot);
	a->n++;
}

static void args_key(struct args *a, const char *org, const char *what)
{
	args_fmt(a, "dsp:v1:{o:%s}:%s", org, what);
}

/* The hand-off's keys, in the order of gate_release.lua and gate_handoff.lua. */
static void handoff_keys(struct args *a, const char *org)
{
	static const char *const what[] = { "wait", "bwait", "wq", "wc", "wdl", "workers" };

	for (size_t i = 0; i < sizeof(what) / sizeof(what[0]); i++)
		args_key(a, org, what[i]);
}

int gate_org_key(const char *org, const char *what, char *buf, size_t size)
{
	int n;

	if (!ident_ok(org) || !what || !buf)
		return -EINVAL;
	n = snprintf(buf, size, "dsp:v1:{o:%s}:%s", org, what);
	return n < 0 || (size_t)n >= size ? -ENOSPC : n;
}

#define N_SCRIPTS  (sizeof(scripts) / sizeof(scripts[0]))
#define TEST_CLOCK (N_SCRIPTS - 1)

static int scripts_register(struct redis_scripts *reg, bool tests)
{
	for (size_t i = 0; i < N_SCRIPTS; i++) {
		const struct embedded_file *f = NULL;
		int rc;

		if (i == TEST_CLOCK && !tests)
			continue;
		for (size_t j = 0; j < gate_lua_count; j++)
			if (strcmp(gate_lua[j].name, scripts[i].name) == 0)
				f = &gate_lua[j];
		if (!f)
			return -ENOENT;
		rc = redis_scripts_add(reg, f, scripts[i].guarded ? REDIS_SCRIPT_GUARDED : 0, NULL);
		if (rc)
			return rc;
	}
	return 0;
}

int gate_scripts_register(struct redis_scripts *reg)
{
	return scripts_register(reg, false);
}

int gate_test_scripts_register(struct redis_scripts *reg)
{
	return scripts_register(reg, true);
}

int gate_set_generation(struct gate *g, const char *generation)
{
	size_t n = generation ? strlen(generation) : 0;

	if (!g || (generation && (n == 0 || n > GATE_GEN_MAX)))
		return -EINVAL;
	memcpy(g->gen, generation ? generation : "", n + 1);
	return 0;
}

int gate_new(struct redis_conn *conn, const struct redis_scripts *reg, const char *generation,
	     struct gate **out)
{
	const struct redis_script **slot[] = {
		NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
	};
	struct gate *g;

	if (!conn || !reg || !out)
		return -EINVAL;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	slot[0] = &g->admit;
	slot[1] = &g->release;
	slot[2] = &g->install;
	slot[3] = &g->wait;
	slot[4] = &g->read;
	slot[5] = &g->stats;
	slot[6] = &g->system;
	slot[7] = &g->system_init;
	slot[8] = &g->rebuild;
	slot[9] = &g->handoff;
	slot[10] = &g->test_clock;
	for (size_t i = 0; i < N_SCRIPTS; i++) {
		*slot[i] = redis_scripts_find(reg, scripts[i].name);
		if (!*slot[i] && i != TEST_CLOCK) {
			free(g);
			return -EINVAL;
		}
	}
	g->conn = conn;
	g->wake_deadline_ms = GATE_WAKE_DEADLINE_MS;
	list_init(&g->pending);
	if (gate_set_generation(g, generation)) {
		free(g);
		return -EINVAL;
	}
	*out = g;
	return 0;
}

/* Answers req -ECANCELED now; its reply, when it comes, only frees it. */
static void orphan(struct gate_req *req)
{
	list_del(&req->node);
	gate_reply_dispatch(req, -ECANCELED, NULL);
	req->g = NULL;
}

void gate_free(struct gate *g)
{
	struct list_node *pos, *tmp;

	if (!g)
		return;
	g->closing = true;
	list_for_each_safe (pos, tmp, &g->pending)
		orphan(list_entry(pos, struct gate_req, node));
	free(g);
}

static void reply_cb(struct redis_conn *conn, int status, redisReply *reply, void *data)
{
	struct gate_req *req = data;

	if (!req->g) { /* the gate was freed; its callback was already called */
		free(req);
		return;
	}
	list_del(&req->node);
	gate_reply_dispatch(req, status, reply);
	free(req);
}

/* A request and room for cap arguments. Returns 0, -ESHUTDOWN (in gate_free()) or -ENOMEM. */
static int prepare(struct gate *g, enum gate_op op, const char *what, const char *org,
		   const char *call, void *data, struct args *a, size_t cap, struct gate_req **out)
{
	struct gate_req *req;

	if (g->closing)
		return -ESHUTDOWN;
	req = calloc(1, sizeof(*req));
	if (!req || args_init(a, cap)) {
		free(req);
		return -ENOMEM;
	}
	list_init(&req->node);
	req->g = g;
	req->op = op;
	req->what = what;
	req->data = data;
	if (org)
		snprintf(req->org, sizeof(req->org), "%s", org);
	if (call)
		snprintf(req->call, sizeof(req->call), "%s", call);
	*out = req;
	return 0;
}

/* Sends script with a's arguments for req; on error req is freed (no callback). */
static int send_script(struct gate *g, const struct redis_script *script, struct gate_req *req,
		       struct args *a)
{
	int rc = redis_conn_evalsha(g->conn, script, reply_cb, req, a->n, a->v, a->len);

	if (rc)
		free(req);
	else
		list_add_tail(&g->pending, &req->node);
	args_free(a);
	return rc;
}

static bool admit_req_ok(const struct gate_admit_req *r)
{
	if (!r || !ident_ok(r->org) || !ident_ok(r->call) || (r->agent && !ident_ok(r->agent)))
		return false;
	if (r->worker && !ident_ok(r->worker))
		return false;
	if (r->direct)
		return r->n_campaigns == 0;
	if ((r->wait && !r->worker) || r->agent || r->n_campaigns < 1 ||
	    r->n_campaigns > GATE_CANDIDATES_MAX || !r->campaigns)
		return false;
	for (uint32_t i = 0; i < r->n_campaigns; i++)
		if (!ident_ok(r->campaigns[i]))
			return false;
	return true;
}

int gate_admit(struct gate *g, const struct gate_admit_req *r, gate_admit_cb cb, void *data)
{
	struct gate_req *req;
	struct args a;
	int rc;

	if (!g || !cb || !admit_req_ok(r))
		return -EINVAL;
	rc = prepare(g, GATE_OP_ADMIT, "admit", r->org, r->call, data, &a, 15 + GATE_CANDIDATES_MAX,
		     &req);
	if (rc)
		return rc;
	req->cb.admit = cb;
	req->direct = r->direct;
	req->n_candidates = r->direct ? 1 : r->n_campaigns;
	args_key(&a, r->org, "gen");
	args_key(&a, r->org, "state");
	args_key(&a, r->org, "slots");
	args_key(&a, r->org, "wait");
	args_str(&a, GATE_SYS_STATE_KEY);
	args_key(&a, r->org, "bwait");
	args_key(&a, r->org, "wq");
	args_key(&a, r->org, "wc");
	args_key(&a, r->org, "wdl");
	args_str(&a, GATE_SYS_GEN_KEY);
	args_str(&a, g->gen);
	args_str(&a, r->call);
	args_str(&a, r->wait ? "w" : "");
	args_str(&a, r->direct ? r->agent : "");
	args_str(&a, r->worker);
	if (r->direct)
		args_str(&a, "*");
	for (uint32_t i = 0; !r->direct && i < r->n_campaigns; i++)
		args_str(&a, r->campaigns[i]);
	return send_script(g, g->admit, req, &a);
}

int gate_release(struct gate *g, const char *org, const char *call, gate_release_cb cb, void *data)
{
	struct gate_req *req;
	struct args a;
	int rc;

	if (!g || !cb || !ident_ok(org) || !ident_ok(call))
		return -EINVAL;
	rc = prepare(g, GATE_OP_RELEASE, "release", org, call, data, &a, 14, &req);
	if (rc)
		return rc;
	req->cb.release = cb;
	args_key(&a, org, "gen");
	args_key(&a, org, "state");
	args_key(&a, org, "slots");
	args_str(&a, GATE_SYS_STATE_KEY);
	handoff_keys(&a, org);
	args_str(&a, GATE_SYS_GEN_KEY);
	args_str(&a, g->gen);
	args_str(&a, call);
	args_fmt(&a, "%llu", (unsigned long long)g->wake_deadline_ms);
	return send_script(g, g->release, req, &a);
}

int gate_set_wake_deadline(struct gate *g, uint64_t deadline_ms)
{
	if (!g || deadline_ms == 0 || deadline_ms > 60000)
		return -EINVAL;
	g->wake_deadline_ms = deadline_ms;
	return 0;
}

static int handoff_op(struct gate *g, const char *op, const char *org, const char *worker,
		      uint64_t ttl_ms, uint32_t max, gate_handoff_cb cb, void *data)
{
	struct gate_req *req;
	struct args a;
	int rc;

	if (!g || !cb || !ident_ok(org) || (worker && !ident_ok(worker)) || ttl_ms > (1ULL << 40))
		return -EINVAL;
	rc = prepare(g, GATE_OP_HANDOFF, op, org, NULL, data, &a, 15, &req);
	if (rc)
		return rc;
	req->cb.handoff = cb;
	args_key(&a, org, "gen");
	args_key(&a, org, "state");
	args_str(&a, GATE_SYS_STATE_KEY);
	handoff_keys(&a, org);
	args_str(&a, g->gen);
	args_str(&a, op);
	args_str(&a, worker);
	args_fmt(&a, "%llu", (unsigned long long)ttl_ms);
	args_fmt(&a, "%llu", (unsigned long long)g->wake_deadline_ms);
	args_fmt(&a, "%u", max);
	return send_script(g, g->handoff, req, &a);
}

int gate_handoff_beat(struct gate *g, const char *org, const char *worker, uint64_t ttl_ms,
		      gate_handoff_cb cb, void *data)
{
	if (!worker || ttl_ms == 0)
		return -EINVAL;
	return handoff_op(g, "beat", org, worker, ttl_ms, 0, cb, data);
}

int gate_handoff_wake(struct gate *g, const char *org, uint32_t max, gate_handoff_cb cb, void *data)
{
	if (max < 1 || max > 16)
		return -EINVAL;
	return handoff_op(g, "wake", org, NULL, 0, max, cb, data);
}

int gate_handoff_unwait(struct gate *g, const char *org, const char *call, gate_handoff_cb cb,
			void *data)
{
	if (!call)
		return -EINVAL;
	return handoff_op(g, "unwait", org, call, 0, 0, cb, data);
}

int gate_handoff_leave(struct gate *g, const char *org, const char *worker, gate_handoff_cb cb,
		       void *data)
{
	if (!worker)
		return -EINVAL;
	return handoff_op(g, "leave", org, worker, 0, 0, cb, data);
}

static bool limits_ok(const struct gate_limits *l)
{
	if (!l || l->version < 1 || l->version > GATE_VERSION_MAX || l->org_limit < 1 ||
	    l->org_limit > FAIRSHARE_COUNT_MAX || l->per_agent > FAIRSHARE_COUNT_MAX ||
	    (l->n_campaigns && !l->campaigns) || l->n_campaigns > FAIRSHARE_CAMPAIGNS_MAX)
		return false;
	for (uint32_t i = 0; i < l->n_campaigns; i++) {
		const struct gate_campaign_limits *c = &l->campaigns[i];
		if (!ident_ok(c->campaign) || (c->agent && !ident_ok(c->agent)) ||
		    c->ceiling > FAIRSHARE_COUNT_MAX)
			return false;
	}
	return true;
}

int gate_install_limits(struct gate *g, const char *org, const struct gate_limits *l,
			gate_install_cb cb, void *data)
{
	struct gate_req *req;
	struct args a;
	int rc;

	if (!g || !cb || !ident_ok(org) || !limits_ok(l))
		return -EINVAL;
	rc = prepare(g, GATE_OP_INSTALL, "install limits", org, NULL, data, &a,
		     9 + 3 * (size_t)l->n_campaigns, &req);
	if (rc)
		return rc;
	req->cb.install = cb;
	args_key(&a, org, "gen");
	args_key(&a, org, "state");
	args_key(&a, org, "wc");
	args_str(&a, g->gen);
	args_str(&a, "limits");
	args_fmt(&a, "%llu", (unsigned long long)l->version);
	args_fmt(&a, "%u", l->org_limit);
	args_fmt(&a, "%u", l->per_agent);
	args_str(&a, l->enforced ? "1" : "0");
	for (uint32_t i = 0; i < l->n_campaigns; i++) {
		args_str(&a, l->campaigns[i].campaign);
		if (l->campaigns[i].ceiling)
			args_fmt(&a, "%u", l->campaigns[i].ceiling);
		else
			args_str(&a, "");
		args_str(&a, l->campaigns[i].agent);
	}
	return send_script(g, g->install, req, &a);
}

int gate_floors_version(uint64_t lease_version, uint64_t seq, uint64_t *out)
{
	if (!out || lease_version < 1 || lease_version >= (1ULL << 27) || seq >= (1ULL << 26))
		return -ERANGE;
	*out = (lease_version << 26) | seq;
	return 0;
}

/* The floors install of gate_install.lua, full (op "floors") or as a delta on top of
 * base_version (op "delta"): one builder for both. */
static int install_floors(struct gate *g, const char *org, bool delta, uint64_t base_version,
			  uint64_t version, uint64_t ttl_ms, const struct gate_floor *floors,
			  uint32_t n, gate_install_cb cb, void *data)
{
	struct gate_req *req;
	struct args a;
	int rc;

	if (!g || !cb || !ident_ok(org) || base_version > GATE_VERSION_MAX || version < 1 ||
	    version > GATE_VERSION_MAX || (delta && version <= base_version) ||
	    ttl_ms > (1ULL << 40) || (n && !floors) || n > FAIRSHARE_CAMPAIGNS_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		if ((floors[i].campaign && !ident_ok(floors[i].campaign)) ||
		    floors[i].floor > FAIRSHARE_COUNT_MAX)
			return -EINVAL;
	rc = prepare(g, GATE_OP_INSTALL, delta ? "install floors delta" : "install floors", org,
		     NULL, data, &a, (delta ? 8 : 7) + 2 * (size_t)n, &req);
	if (rc)
		return rc;
	req->cb.install = cb;
	args_key(&a, org, "gen");
	args_key(&a, org, "state");
	args_key(&a, org, "wc");
	args_str(&a, g->gen);
	args_str(&a, delta ? "delta" : "floors");
	args_fmt(&a, "%llu", (unsigned long long)version);
	if (delta)
		args_fmt(&a, "%llu", (unsigned long long)base_version);
	args_fmt(&a, "%llu", (unsigned long long)ttl_ms);
	for (uint32_t i = 0; i < n; i++) {
		args_str(&a, floors[i].campaign ? floors[i].campaign : "*");
		args_fmt(&a, "%u", floors[i].floor);
	}
	return send_script(g, g->install, req, &a);
}

int gate_install_floors(struct gate *g, const char *org, uint64_t version, uint64_t ttl_ms,
			const struct gate_floor *floors, uint32_t n, gate_install_cb cb, void *data)
{
	return install_floors(g, org, false, 0, version, ttl_ms, floors, n, cb, data);
}

int gate_install_floors_delta(struct gate *g, const char *org, uint64_t base_version,
			      uint64_t version, uint64_t ttl_ms, const struct gate_floor *changed,
			      uint32_t n, gate_install_cb cb, void *data)
{
	return install_floors(g, org, true, base_version, version, ttl_ms, changed, n, cb, data);
}

int gate_install_system_limit(struct gate *g, uint64_t version, uint32_t limit, gate_install_cb cb,
			      void *data)
{
	struct gate_req *req;
	struct args a;
	int rc;

	if (!g || !cb || version < 1 || version > GATE_VERSION_MAX || limit < 1 ||
	    limit > FAIRSHARE_COUNT_MAX)
		return -EINVAL;
	rc = prepare(g, GATE_OP_INSTALL, "install system limit", NULL, NULL, data, &a, 5, &req);
	if (rc)
		return rc;
	req->cb.install = cb;
	args_str(&a, GATE_SYS_GEN_KEY);
	args_str(&a, GATE_SYS_STATE_KEY);
	args_str(&a, g->gen);
	args_fmt(&a, "%llu", (unsigned long long)version);
	args_fmt(&a, "%u", limit);
	return send_script(g, g->system, req, &a);
}

static int wait_op(struct gate *g, const char *op, const char *org, const char *call,
		   const char *agent, gate_wait_cb cb, void *data)
{
	struct gate_req *req;
	struct args a;
	int rc;

	if (!g || !cb || !ident_ok(org) || !ident_ok(call) || (agent && !ident_ok(agent)))
		return -EINVAL;
	rc = prepare(g, GATE_OP_WAIT, op, org, call, data, &a, 8, &req);
	if (rc)
		return rc;
	req->cb.wait = cb;
	args_key(&a, org, "gen");
	args_key(&a, org, "state");
	args_key(&a, org, "wait");
	args_key(&a, org, "wq");
	args_str(&a, g->gen);
	args_str(&a, op);
	args_str(&a, call);
	args_str(&a, agent);
	return send_script(g, g->wait, req, &a);
}

int gate_direct_wait(struct gate *g, const char *org, const char *call, const char *agent,
		     gate_wait_cb cb, void *data)
{
	return wait_op(g, "wait", org, call, agent, cb, data);
}

int gate_direct_unwait(struct gate *g, const char *org, const char *call, gate_wait_cb cb,
		       void *data)
{
	return wait_op(g, "unwait", org, call, NULL, cb, data);
}

int gate_read(struct gate *g, const char *org, gate_read_cb cb, void *data)
{
	struct gate_req *req;
	struct args a;
	int rc;

	if (!g || !cb || !ident_ok(org))
		return -EINVAL;
	rc = prepare(g, GATE_OP_READ, "read", org, NULL, data, &a, 6, &req);
	if (rc)
		return rc;
	req->cb.read = cb;
	args_key(&a, org, "gen");
	args_key(&a, org, "state");
	args_str(&a, GATE_SYS_STATE_KEY);
	args_key(&a, org, "slots");
	args_key(&a, org, "wait");
	args_str(&a, g->gen);
	return send_script(g, g->read, req, &a);
}

int gate_read_stats(struct gate *g, const char *org, gate_stats_cb cb, void *data)
{
	struct gate_req *req;
	struct args a;
	int rc;

	if (!g || !cb || !ident_ok(org))
		return -EINVAL;
	rc = prepare(g, GATE_OP_STATS, "read stats", org, NULL, data, &a, 1, &req);
	if (rc)
		return rc;
	req->cb.stats = cb;
	args_key(&a, org, "state");
	return send_script(g, g->stats, req, &a);
}

int gate_system_init(struct gate *g, uint64_t version, uint32_t limit, gate_done_cb cb, void *data)
{
	struct gate_req *req;
	struct args a;
	int rc;

	if (!g || !cb || !g->gen[0] || version < 1 || version > GATE_VERSION_MAX || limit < 1 ||
	    limit > FAIRSHARE_COUNT_MAX)
		return -EINVAL;
	rc = prepare(g, GATE_OP_DONE, "system init", NULL, NULL, data, &a, 5, &req);
	if (rc)
		return rc;
	req->cb.done = cb;
	args_str(&a, GATE_SYS_GEN_KEY);
	args_str(&a, GATE_SYS_STATE_KEY);
	args_str(&a, g->gen);
	args_fmt(&a, "%llu", (unsigned long long)version);
	args_fmt(&a, "%u", limit);
	return send_script(g, g->system_init, req, &a);
}

static bool records_ok(const struct gate_slot_record *r, uint32_t n)
{
	if ((n && !r) || n > FAIRSHARE_COUNT_MAX)
		return false;
	for (uint32_t i = 0; i < n; i++)
		if (!ident_ok(r[i].call) || (r[i].campaign && !ident_ok(r[i].campaign)) ||
		    (r[i].agent && !ident_ok(r[i].agent)))
			return false;
	return true;
}

int gate_org_rebuild(struct gate *g, const char *org, const struct gate_slot_record *records,
		     uint32_t n, gate_done_cb cb, void *data)
{
	struct gate_req *req;
	struct args a;
	int rc;

	if (!g || !cb || !ident_ok(org) || !records_ok(records, n))
		return -EINVAL;
	rc = prepare(g, GATE_OP_DONE, "org rebuild", org, NULL, data, &a, 8 + 4 * (size_t)n, &req);
	if (rc)
		return rc;
	req->cb.done = cb;
	args_str(&a, GATE_SYS_GEN_KEY);
	args_key(&a, org, "gen");
	args_key(&a, org, "state");
	args_key(&a, org, "slots");
	args_key(&a, org, "wait");
	args_str(&a, GATE_SYS_STATE_KEY);
	args_key(&a, org, "wc");
	args_str(&a, g->gen);
	for (uint32_t i = 0; i < n; i++) {
		args_str(&a, records[i].call);
		args_str(&a, records[i].campaign ? records[i].campaign : "*");
		args_str(&a, records[i].agent);
		args_fmt(&a, "%llu", (unsigned long long)records[i].taken_ms);
	}
	return send_script(g, g->rebuild, req, &a);
}

int gate_test_pin_clock(struct gate *g, const char *org, int64_t now_ms, gate_done_cb cb,
			void *data)
{
	struct gate_req *req;
	struct args a;
	int rc;

	if (!g || !cb || !ident_ok(org))
		return -EINVAL;
	if (!g->test_clock)
		return -ENOTSUP; /* a product registry (gate_scripts_register()) */
	rc = prepare(g, GATE_OP_DONE, "pin clock", org, NULL, data, &a, 2, &req);
	if (rc)
		return rc;
	req->cb.done = cb;
	args_key(&a, org, "state");
	args_fmt(&a, "%lld", now_ms < 0 ? -1LL : (long long)now_ms);
	return send_script(g, g->test_clock, req, &a);
}

const char *gate_reason_name(enum gate_reason reason)
{
	if (reason == GATE_REASON_UNKNOWN)
		return "unknown_campaign";
	return fairshare_reason_name((enum fairshare_reason)reason);
}
