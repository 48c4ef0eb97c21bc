/* Test harness for the Redis slot gate: see gate_harness.h. */
#include "gate_harness.h"

#include "fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static void event_cb(struct redis_conn *conn, const struct redis_conn_event *ev, void *data)
{
	struct gate_env *e = data;

	if (ev->type == REDIS_CONN_UP) {
		e->ups++;
	} else if (ev->type == REDIS_CONN_REFUSED) {
		e->refusals++;
		e->refusal_status = ev->status;
		snprintf(e->refusal, sizeof(e->refusal), "%s", ev->message ? ev->message : "");
	}
}

static bool is_up(void *arg)
{
	return redis_conn_is_up(arg);
}

void genv_open(struct gate_env *e, const char *url, const char *name, bool wait_up)
{
	struct redis_conn_options o = {
		.url = url,
		.name = name,
		.connect_timeout_ms = 10000,
		.command_timeout_ms = 60000,
		.reconnect_min_ms = 10,
		.reconnect_max_ms = 200,
		.generation_key = GATE_SYS_GEN_KEY,
		.event_cb = event_cb,
		.data = e,
	};

	memset(e, 0, sizeof(*e));
	assert_int_equal(uv_loop_init(&e->loop), 0);
	assert_int_equal(redis_scripts_new(&e->reg), 0);
	assert_int_equal(gate_test_scripts_register(e->reg), 0);
	o.scripts = e->reg;
	assert_int_equal(redis_conn_new(&e->loop, &o, &e->conn), 0);
	assert_int_equal(gate_new(e->conn, e->reg, GENV_GEN, &e->g), 0);
	assert_int_equal(redis_conn_start(e->conn), 0);
	if (wait_up)
		fixture_run_until(&e->loop, is_up, e->conn, GENV_TIMEOUT_MS);
}

void genv_close(struct gate_env *e)
{
	gate_free(e->g);
	redis_conn_close(e->conn, NULL, NULL);
	fixture_loop_close(&e->loop);
	redis_scripts_free(e->reg);
}

struct waiter {
	int done;
	int status;
	long long integer;
	char *out;
	size_t size;
	void *res; /* the operation's copy */
};

static bool is_done(void *arg)
{
	return ((struct waiter *)arg)->done;
}

static void run(struct gate_env *e, struct waiter *w)
{
	fixture_run_until(&e->loop, is_done, w, GENV_TIMEOUT_MS);
}

static void cmd_cb(struct redis_conn *conn, int status, redisReply *r, void *data)
{
	struct waiter *w = data;

	w->done = 1;
	w->status = status;
	if (r && r->type == REDIS_REPLY_INTEGER)
		w->integer = r->integer;
	if (w->out && r && r->str)
		snprintf(w->out, w->size, "%.*s", (int)r->len, r->str);
}

long long genv_cmd(struct gate_env *e, char *out, size_t size, ...)
{
	struct waiter w = { .out = out, .size = size };
	const char *argv[16];
	int argc = 0;
	va_list ap;

	if (out && size)
		out[0] = '\0';
	va_start(ap, size);
	for (const char *a = va_arg(ap, const char *); a && argc < 16; a = va_arg(ap, const char *))
		argv[argc++] = a;
	va_end(ap);
	assert_int_equal(redis_conn_command_argv(e->conn, cmd_cb, &w, argc, argv, NULL), 0);
	run(e, &w);
	assert_int_equal(w.status, 0);
	return w.integer;
}

struct hkeys_wait {
	int done, status, n, max;
	char (*out)[65];
};

static void hkeys_cb(struct redis_conn *conn, int status, redisReply *r, void *data)
{
	struct hkeys_wait *w = data;

	(void)conn;
	w->done = 1;
	w->status = status;
	for (size_t i = 0;
	     !status && r && r->type == REDIS_REPLY_ARRAY && i < r->elements && w->n < w->max; i++)
		snprintf(w->out[w->n++], 65, "%s", r->element[i]->str ? r->element[i]->str : "");
}

static bool hkeys_done(void *arg)
{
	return ((struct hkeys_wait *)arg)->done;
}

int genv_hkeys(struct gate_env *e, const char *key, char (*out)[65], int max)
{
	struct hkeys_wait w = { .max = max, .out = out };
	const char *argv[] = { "HKEYS", key };

	assert_int_equal(redis_conn_command_argv(e->conn, hkeys_cb, &w, 2, argv, NULL), 0);
	fixture_run_until(&e->loop, hkeys_done, &w, GENV_TIMEOUT_MS);
	assert_int_equal(w.status, 0);
	return w.n;
}

static void done_cb(struct gate *g, int status, void *data)
{
	struct waiter *w = data;

	w->done = 1;
	w->status = status;
}

int genv_rebuild(struct gate_env *e, const char *org, const struct gate_slot_record *recs,
		 uint32_t n)
{
	struct waiter w = { 0 };

	assert_int_equal(gate_org_rebuild(e->g, org, recs, n, done_cb, &w), 0);
	run(e, &w);
	return w.status;
}

int genv_system_init(struct gate_env *e, uint64_t version, uint32_t system_limit)
{
	struct waiter w = { 0 };

	assert_int_equal(gate_system_init(e->g, version, system_limit, done_cb, &w), 0);
	run(e, &w);
	return w.status;
}

void genv_fresh(struct gate_env *e, uint32_t system_limit, const char *const *orgs)
{
	genv_cmd(e, NULL, 0, "FLUSHALL", NULL);
	assert_int_equal(genv_system_init(e, 1, system_limit), 0);
	for (size_t i = 0; orgs && orgs[i]; i++)
		assert_int_equal(genv_rebuild(e, orgs[i], NULL, 0), 0);
}

static void admit_cb(struct gate *g, int status, const struct gate_admit_result *r, void *data)
{
	struct waiter *w = data;
	struct admit_out *o = w->res;

	w->done = 1;
	o->status = status;
	if (!r)
		return;
	o->r = *r;
	snprintf(o->campaign, sizeof(o->campaign), "%s", r->campaign ? r->campaign : "");
	snprintf(o->agent, sizeof(o->agent), "%s", r->agent ? r->agent : "");
	o->r.campaign = r->campaign ? o->campaign : NULL;
	o->r.agent = r->agent ? o->agent : NULL;
}

static struct admit_out admit(struct gate_env *e, const struct gate_admit_req *req)
{
	struct admit_out o = { .status = 1 };
	struct waiter w = { .res = &o };

	assert_int_equal(gate_admit(e->g, req, admit_cb, &w), 0);
	run(e, &w);
	return o;
}

struct admit_out genv_admit(struct gate_env *e, const char *org, const char *call,
			    const char *candidates)
{
	char buf[16 * 70], *save = NULL;
	const char *c[GATE_CANDIDATES_MAX];
	uint32_t n = 0;

	snprintf(buf, sizeof(buf), "%s", candidates);
	for (char *t = strtok_r(buf, " ", &save); t && n < GATE_CANDIDATES_MAX;
	     t = strtok_r(NULL, " ", &save))
		c[n++] = t;
	return admit(e, &(struct gate_admit_req){
				.org = org, .call = call, .campaigns = c, .n_campaigns = n });
}

struct admit_out genv_admit_direct(struct gate_env *e, const char *org, const char *call,
				   const char *agent, bool wait)
{
	return admit(
		e,
		&(struct gate_admit_req){
			.org = org, .call = call, .direct = true, .agent = agent, .wait = wait });
}

static void release_cb(struct gate *g, int status, const struct gate_release_result *r, void *data)
{
	struct waiter *w = data;
	struct release_out *o = w->res;

	w->done = 1;
	o->status = status;
	if (!r)
		return;
	o->r = *r;
	snprintf(o->campaign, sizeof(o->campaign), "%s", r->campaign ? r->campaign : "");
	snprintf(o->agent, sizeof(o->agent), "%s", r->agent ? r->agent : "");
	o->r.campaign = r->campaign ? o->campaign : NULL;
	o->r.agent = r->agent ? o->agent : NULL;
	snprintf(o->woken_call, sizeof(o->woken_call), "%s", r->woken_call ? r->woken_call : "");
	o->r.woken_call = NULL; /* use the copy: a returned struct's pointers would dangle */
}

struct release_out genv_release(struct gate_env *e, const char *org, const char *call)
{
	struct release_out o = { .status = 1 };
	struct waiter w = { .res = &o };

	assert_int_equal(gate_release(e->g, org, call, release_cb, &w), 0);
	run(e, &w);
	return o;
}

static void install_cb(struct gate *g, int status, const struct gate_install_result *r, void *data)
{
	struct waiter *w = data;

	w->done = 1;
	w->status = status;
	if (r && w->res)
		*(struct gate_install_result *)w->res = *r;
}

/* Splits "a:b:c d:e:f" into fields[i][0..2] (empty strings for missing parts). */
static uint32_t split(const char *spec, char *buf, size_t size, char *(*fields)[3], uint32_t max)
{
	char *save = NULL;
	uint32_t n = 0;

	snprintf(buf, size, "%s", spec ? spec : "");
	for (char *t = strtok_r(buf, " ", &save); t && n < max; t = strtok_r(NULL, " ", &save)) {
		for (int i = 0; i < 3; i++) {
			char *colon = t ? strchr(t, ':') : NULL;
			fields[n][i] = t ? t : "";
			if (colon)
				*colon = '\0';
			t = colon ? colon + 1 : NULL;
		}
		n++;
	}
	return n;
}

int genv_limits(struct gate_env *e, const char *org, uint64_t version, uint32_t org_limit,
		uint32_t per_agent, bool enforced, const char *campaigns,
		struct gate_install_result *res)
{
	static char buf[8192];
	static char *f[GENV_MAX_CAMPAIGNS][3];
	struct gate_campaign_limits c[GENV_MAX_CAMPAIGNS];
	struct waiter w = { .res = res };
	uint32_t n = split(campaigns, buf, sizeof(buf), f, GENV_MAX_CAMPAIGNS);

	for (uint32_t i = 0; i < n; i++)
		c[i] = (struct gate_campaign_limits){ .campaign = f[i][0],
						      .ceiling = (uint32_t)atoi(f[i][1]),
						      .agent = f[i][2][0] ? f[i][2] : NULL };
	assert_int_equal(gate_install_limits(e->g, org,
					     &(struct gate_limits){ .version = version,
								    .org_limit = org_limit,
								    .per_agent = per_agent,
								    .enforced = enforced,
								    .campaigns = c,
								    .n_campaigns = n },
					     install_cb, &w),
			 0);
	run(e, &w);
	return w.status;
}

int genv_floors(struct gate_env *e, const char *org, uint64_t version, uint64_t ttl_ms,
		const char *floors, struct gate_install_result *res)
{
	static char buf[8192];
	static char *f[GENV_MAX_CAMPAIGNS][3];
	struct gate_floor fl[GENV_MAX_CAMPAIGNS];
	struct waiter w = { .res = res };
	uint32_t n = split(floors, buf, sizeof(buf), f, GENV_MAX_CAMPAIGNS);

	for (uint32_t i = 0; i < n; i++)
		fl[i] = (struct gate_floor){ .campaign = strcmp(f[i][0], "*") ? f[i][0] : NULL,
					     .floor = (uint32_t)atoi(f[i][1]) };
	assert_int_equal(gate_install_floors(e->g, org, version, ttl_ms, fl, n, install_cb, &w), 0);
	run(e, &w);
	return w.status;
}

int genv_floors_delta(struct gate_env *e, const char *org, uint64_t base_version, uint64_t version,
		      uint64_t ttl_ms, const char *floors, struct gate_install_result *res)
{
	static char buf[8192];
	static char *f[GENV_MAX_CAMPAIGNS][3];
	struct gate_floor fl[GENV_MAX_CAMPAIGNS];
	struct waiter w = { .res = res };
	uint32_t n = split(floors, buf, sizeof(buf), f, GENV_MAX_CAMPAIGNS);

	for (uint32_t i = 0; i < n; i++)
		fl[i] = (struct gate_floor){ .campaign = strcmp(f[i][0], "*") ? f[i][0] : NULL,
					     .floor = (uint32_t)atoi(f[i][1]) };
	assert_int_equal(gate_install_floors_delta(e->g, org, base_version, version, ttl_ms, fl, n,
						   install_cb, &w),
			 0);
	run(e, &w);
	return w.status;
}

int genv_system_limit(struct gate_env *e, uint64_t version, uint32_t limit,
		      struct gate_install_result *res)
{
	struct waiter w = { .res = res };

	assert_int_equal(gate_install_system_limit(e->g, version, limit, install_cb, &w), 0);
	run(e, &w);
	return w.status;
}

static void wait_cb(struct gate *g, int status, const struct gate_wait_result *r, void *data)
{
	struct waiter *w = data;

	w->done = 1;
	w->status = status;
	if (r && w->res)
		*(struct gate_wait_result *)w->res = *r;
}

int genv_wait(struct gate_env *e, const char *org, const char *call, bool wait,
	      struct gate_wait_result *res)
{
	struct waiter w = { .res = res };

	if (wait)
		assert_int_equal(gate_direct_wait(e->g, org, call, NULL, wait_cb, &w), 0);
	else
		assert_int_equal(gate_direct_unwait(e->g, org, call, wait_cb, &w), 0);
	run(e, &w);
	return w.status;
}

static void read_cb(struct gate *g, int status, const struct gate_view *v, void *data)
{
	struct waiter *w = data;
	struct view_copy *o = w->res;

	w->done = 1;
	w->status = status;
	if (!v)
		return;
	memset(o, 0, sizeof(*o));
	o->v = *v;
	o->v.campaigns = NULL;
	o->v.agents = NULL;
	for (uint32_t i = 0; i < v->n_campaigns && i < GENV_MAX_CAMPAIGNS; i++) {
		const struct gate_campaign_view *c = &v->campaigns[i];
		snprintf(o->campaigns[i].id, 65, "%s", c->id ? c->id : "*");
		snprintf(o->campaigns[i].agent, 65, "%s", c->agent ? c->agent : "");
		o->campaigns[i].running = c->running;
		o->campaigns[i].floor = c->floor;
		o->campaigns[i].ceiling = c->ceiling;
		o->campaigns[i].known = c->known;
		o->n_campaigns++;
	}
	for (uint32_t i = 0; i < v->n_agents && i < GENV_MAX_CAMPAIGNS; i++) {
		snprintf(o->agents[i].id, 65, "%s", v->agents[i].id);
		o->agents[i].running = v->agents[i].running;
		o->agents[i].shortfall = v->agents[i].shortfall;
		o->n_agents++;
	}
}

int genv_read(struct gate_env *e, const char *org, struct view_copy *out)
{
	struct waiter w = { .res = out };

	assert_int_equal(gate_read(e->g, org, read_cb, &w), 0);
	run(e, &w);
	return w.status;
}

uint32_t view_running(const struct view_copy *v, const char *id)
{
	for (uint32_t i = 0; i < v->n_campaigns; i++)
		if (strcmp(v->campaigns[i].id, id) == 0)
			return v->campaigns[i].running;
	return 0;
}

uint32_t view_floor(const struct view_copy *v, const char *id)
{
	for (uint32_t i = 0; i < v->n_campaigns; i++)
		if (strcmp(v->campaigns[i].id, id) == 0)
			return v->campaigns[i].floor;
	return 0;
}

uint32_t view_agent_running(const struct view_copy *v, const char *id)
{
	for (uint32_t i = 0; i < v->n_agents; i++)
		if (strcmp(v->agents[i].id, id) == 0)
			return v->agents[i].running;
	return 0;
}

uint64_t view_agent_shortfall(const struct view_copy *v, const char *id)
{
	for (uint32_t i = 0; i < v->n_agents; i++)
		if (strcmp(v->agents[i].id, id) == 0)
			return v->agents[i].shortfall;
	return 0;
}

static void stats_cb(struct gate *g, int status, const struct gate_stats *s, void *data)
{
	struct waiter *w = data;

	w->done = 1;
	w->status = status;
	if (s)
		*(struct gate_stats *)w->res = *s;
}

int genv_stats(struct gate_env *e, const char *org, struct gate_stats *out)
{
	struct waiter w = { .res = out };

	assert_int_equal(gate_read_stats(e->g, org, stats_cb, &w), 0);
	run(e, &w);
	return w.status;
}

int genv_pin_clock(struct gate_env *e, const char *org, int64_t now_ms)
{
	struct waiter w = { 0 };

	assert_int_equal(gate_test_pin_clock(e->g, org, now_ms, done_cb, &w), 0);
	run(e, &w);
	return w.status;
}
