/* The `sequences` steps of tests/vectors/fairshare.json (tests/vectors/README.md) on a seq_run:
 * the one interpreter the unit test (the model) and the integration test (model and script)
 * share. The file's schema is checked by tests/unit/test_fairshare_vectors.c. */
#include "seq_driver.h"

#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

struct vcase {
	struct seq_run *r;
	const char *name;
	int step;
	uint64_t ttl_default;
};

static uint32_t u32_or(const cJSON *obj, const char *key, uint32_t def)
{
	const cJSON *v = obj ? cJSON_GetObjectItem(obj, key) : NULL;

	if (!v)
		return def;
	return cJSON_IsNull(v) ? FAIRSHARE_UNLIMITED : (uint32_t)v->valuedouble;
}

static bool bool_or(const cJSON *obj, const char *key, bool def)
{
	const cJSON *v = obj ? cJSON_GetObjectItem(obj, key) : NULL;

	return v ? cJSON_IsTrue(v) : def;
}

static const char *str_or(const cJSON *obj, const char *key, const char *def)
{
	const cJSON *v = obj ? cJSON_GetObjectItem(obj, key) : NULL;

	return cJSON_IsString(v) ? v->valuestring : def;
}

static void vfail(const struct vcase *q, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void vfail(const struct vcase *q, const char *fmt, ...)
{
	char buf[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fail_msg("%s, step %d: %s", q->name, q->step, buf);
}

static void want_num(const struct vcase *q, const cJSON *obj, const char *key, uint64_t got)
{
	const cJSON *v = obj ? cJSON_GetObjectItem(obj, key) : NULL;
	uint64_t want;

	if (!v)
		return;
	want = cJSON_IsNull(v) ? FAIRSHARE_UNLIMITED : (uint64_t)llround(v->valuedouble);
	if (want != got)
		vfail(q, "%s: want %llu, got %llu", key, (unsigned long long)want,
		      (unsigned long long)got);
}

static const char *reason_name(int reason)
{
	return reason > FAIRSHARE_REASON_AGENT_FLOORS ? "unknown_campaign"
						      : fairshare_reason_name(reason);
}

static void want_str(const struct vcase *q, const cJSON *obj, const char *key, const char *got)
{
	const char *want = str_or(obj, key, NULL);

	if (want && strcmp(want, got) != 0)
		vfail(q, "%s: want \"%s\", got \"%s\"", key, want, got);
}

static void want_ok(const struct vcase *q, const cJSON *step, bool ok, const char *bad)
{
	const char *want = str_or(step, "expect", "ok");

	if ((strcmp(want, "ok") == 0) != ok)
		vfail(q, "%s: want %s, got %s", str_or(step, "op", "?"), want, ok ? "ok" : bad);
}

static void do_install(struct vcase *q, const cJSON *step)
{
	uint32_t floors[SEQ_MAX_C] = { 0 };
	const cJSON *f;
	int rc;

	cJSON_ArrayForEach(f, cJSON_GetObjectItem(step, "floors"))
	{
		floors[seq_campaign(q->r, f->string)] = (uint32_t)f->valuedouble;
	}
	rc = seq_install_floors(q->r, u32_or(step, "version", 0), floors,
				u32_or(step, "ttl_ms", (uint32_t)q->ttl_default));
	want_ok(q, step, rc == 0, "stale");
}

static void do_admit(struct vcase *q, const cJSON *step)
{
	uint32_t c = seq_campaign(q->r, str_or(step, "campaign", NULL));
	const cJSON *e = cJSON_GetObjectItem(step, "expect"), *v;
	struct seq_decisions d;

	if (c == q->r->org.direct)
		seq_admit(q->r, NULL, 0, seq_agent(q->r, str_or(step, "agent", NULL)), false, &d);
	else
		seq_admit(q->r, &c, 1, FAIRSHARE_NO_AGENT, false, &d);
	assert_int_equal(d.n, 1);
	v = cJSON_GetObjectItem(e, "admitted");
	if (v && cJSON_IsTrue(v) != d.admitted)
		vfail(q, "admit %s: admitted want %d, got %d (%s/%s)", q->r->org.ids[c],
		      cJSON_IsTrue(v), d.admitted, fairshare_level_name(d.d[0].level),
		      reason_name(d.d[0].reason));
	want_str(q, e, "level", fairshare_level_name(d.d[0].level));
	want_str(q, e, "reason", reason_name(d.d[0].reason));
	v = cJSON_GetObjectItem(e, "fcfs");
	if (v && cJSON_IsTrue(v) != d.d[0].fcfs)
		vfail(q, "admit %s: fcfs want %d", q->r->org.ids[c], cJSON_IsTrue(v));
}

/* A release names a campaign (and a direct dial's agent): the driver gives back the latest call
 * it holds there, or an unknown id when it holds none (which frees nothing: "range"). */
static void do_release(struct vcase *q, const cJSON *step)
{
	struct seq_run *r = q->r;
	uint32_t c = seq_campaign(r, str_or(step, "campaign", NULL));
	uint32_t a =
		c == r->org.direct ? seq_agent(r, str_or(step, "agent", NULL)) : r->org.agent_of[c];
	char call[SEQ_CALL_LEN];

	for (uint32_t i = r->n_held; i-- > 0;)
		if (r->held[i].campaign == c && r->held[i].agent == a) {
			want_ok(q, step, seq_release_held(r, i), "range");
			return;
		}
	snprintf(call, sizeof(call), "unknown%u", r->next_call++);
	want_ok(q, step, seq_release(r, call), "range");
}

static void do_check(struct vcase *q, const cJSON *step)
{
	const cJSON *e = cJSON_GetObjectItem(step, "expect"), *v;
	const cJSON *stats = cJSON_GetObjectItem(e, "stats");
	struct seq_state s;
	char key[64];

	seq_compare(q->r, &s);
	want_num(q, e, "org_running", s.org_running);
	want_num(q, e, "system_running", s.system_running);
	want_num(q, e, "shortfall_total", s.shortfall);
	want_num(q, e, "direct_waiting", s.direct_waiting);
	want_num(q, e, "direct_reserve", s.direct_reserve);
	cJSON_ArrayForEach(v, cJSON_GetObjectItem(e, "running"))
	{
		want_num(q, cJSON_GetObjectItem(e, "running"), v->string,
			 s.running[seq_campaign(q->r, v->string)]);
	}
	cJSON_ArrayForEach(v, cJSON_GetObjectItem(e, "agents"))
	{
		want_num(q, cJSON_GetObjectItem(e, "agents"), v->string,
			 s.agent_running[seq_agent(q->r, v->string)]);
	}
	want_num(q, stats, "admitted", s.admitted);
	want_num(q, stats, "fcfs", s.fcfs);
	for (int l = FAIRSHARE_LEVEL_SYSTEM; l < FAIRSHARE_LEVEL_COUNT; l++) {
		snprintf(key, sizeof(key), "refused_%s", fairshare_level_name(l));
		want_num(q, stats, key, s.refused[l]);
	}
}

static void run_steps(struct vcase *q, const cJSON *steps);

static void run_step(struct vcase *q, const cJSON *step)
{
	struct seq_run *r = q->r;
	const char *op = str_or(step, "op", "");
	const cJSON *now = cJSON_GetObjectItem(step, "now_ms");

	if (now)
		seq_set_clock(r, (uint64_t)now->valuedouble);
	if (strcmp(op, "install") == 0) {
		do_install(q, step);
	} else if (strcmp(op, "admit") == 0) {
		do_admit(q, step);
	} else if (strcmp(op, "release") == 0) {
		do_release(q, step);
	} else if (strcmp(op, "direct_wait") == 0 || strcmp(op, "direct_unwait") == 0) {
		want_ok(q, step, seq_wait(r, strcmp(op, "direct_wait") == 0), "range");
	} else if (strcmp(op, "set_limits") == 0) {
		r->org.org_limit = u32_or(step, "org_limit", 20);
		r->org.per_agent = u32_or(step, "per_agent", FAIRSHARE_UNLIMITED);
		r->org.enforced = bool_or(step, "enforced", true);
		seq_install_limits(r);
	} else if (strcmp(op, "set_ceiling") == 0) {
		r->org.ceiling[seq_campaign(r, str_or(step, "campaign", NULL))] =
			u32_or(step, "ceiling", FAIRSHARE_UNLIMITED);
		seq_install_limits(r);
	} else if (strcmp(op, "check") == 0) {
		do_check(q, step);
	} else if (strcmp(op, "repeat") == 0) {
		for (uint32_t i = 0; i < u32_or(step, "times", 1); i++)
			run_steps(q, cJSON_GetObjectItem(step, "steps"));
	} else {
		vfail(q, "unknown op %s", op);
	}
	if (r->nb > 1 && strcmp(op, "check") && strcmp(op, "repeat"))
		seq_compare(r, &(struct seq_state){ 0 });
}

static void run_steps(struct vcase *q, const cJSON *steps)
{
	const cJSON *step;

	cJSON_ArrayForEach(step, steps)
	{
		uint32_t times = strcmp(str_or(step, "op", ""), "repeat") == 0
					 ? 1
					 : u32_or(step, "times", 1);

		q->step++;
		for (uint32_t t = 0; t < times; t++)
			run_step(q, step);
	}
}

void seq_run_case(struct seq_run *r, const cJSON *c, struct seq_backend **b, uint32_t nb)
{
	const cJSON *org = cJSON_GetObjectItem(c, "org"), *sys = cJSON_GetObjectItem(c, "system");
	const cJSON *j;
	struct seq_org o = { .direct = FAIRSHARE_NO_CAMPAIGN };
	struct vcase q = { .r = r, .name = str_or(c, "name", "?"), .ttl_default = 10000 };

	cJSON_ArrayForEach(j, cJSON_GetObjectItem(c, "campaigns"))
	{
		assert_true(o.n < SEQ_MAX_C);
		o.ids[o.n] = str_or(j, "id", "");
		o.ceiling[o.n] = u32_or(j, "ceiling", FAIRSHARE_UNLIMITED);
		o.agent_of[o.n] = seq_org_agent(&o, str_or(j, "agent", NULL));
		if (bool_or(j, "direct", false))
			o.direct = o.n;
		o.n++;
	}
	o.org_limit = u32_or(org, "org_limit", 20);
	o.per_agent = u32_or(org, "per_agent", FAIRSHARE_UNLIMITED);
	o.enforced = bool_or(org, "enforced", true);
	o.system_limit = u32_or(sys, "limit", 1000);
	o.system_running = u32_or(sys, "running", 0);
	snprintf(r->label, sizeof(r->label), "vector %s", q.name);
	seq_start(r, &o, b, nb);
	run_steps(&q, cJSON_GetObjectItem(c, "steps"));
}
