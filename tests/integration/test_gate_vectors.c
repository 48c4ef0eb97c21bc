/* The `sequences` of tests/vectors/fairshare.json through the Redis gate (its scripts and client),
 * the same expectations the C model (dispatcher/core/fairshare_gate.c) passes in
 * tests/unit/test_fairshare_vectors.c: the script transcribes the model.
 *
 * A step's operations map onto the client: admit → gate_admit (a fresh call id; a direct dial
 * names its agent), release → gate_release of a call the driver holds for that campaign and agent
 * (none held: an unknown id, which frees nothing — the model's "range"), direct_wait/unwait →
 * gate_direct_wait/unwait of driver-made ids, set_limits/set_ceiling → a full limits install
 * with the next version, now_ms → the pinned test clock, check → gate_read and gate_read_stats.
 * The vectors' schema is checked by the unit test's reader; this driver reads what it needs. */
#include "fixture.h"
#include "gate_harness.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#define MAX_C	  16
#define MAX_CALLS 4096
#define ORG	  "v"

static struct embedded svc;
static struct gate_env env;

struct held {
	char call[24];
	char campaign[65]; /* "*" for direct */
	char agent[65];	   /* "" none */
};

struct seq {
	const char *name;
	int step;
	const char *ids[MAX_C]; /* vector ids */
	const char *agents[MAX_C];
	uint32_t ceiling[MAX_C];
	bool direct[MAX_C];
	uint32_t n;
	uint32_t org_limit, per_agent;
	bool enforced;
	uint64_t limits_version, ttl_default;
	unsigned next_call;
	struct held held[MAX_CALLS];
	unsigned n_held;
	char waiting[MAX_CALLS][24];
	unsigned n_waiting;
};

static const char *str_or(const cJSON *j, const char *k, const char *dflt)
{
	const cJSON *v = cJSON_GetObjectItem(j, k);
	return cJSON_IsString(v) ? v->valuestring : dflt;
}

static double num_or(const cJSON *j, const char *k, double dflt)
{
	const cJSON *v = cJSON_GetObjectItem(j, k);
	return cJSON_IsNumber(v) ? v->valuedouble : dflt;
}

static bool bool_or(const cJSON *j, const char *k, bool dflt)
{
	const cJSON *v = cJSON_GetObjectItem(j, k);
	return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static char *slurp(void)
{
	char path[512];
	const char *root = getenv("DSP_SOURCE_ROOT");
	FILE *f;
	long len;
	char *buf;

	snprintf(path, sizeof(path), "%s/tests/vectors/fairshare.json", root ? root : ".");
	f = fopen(path, "rb");
	if (!f)
		fail_msg("cannot open %s (set DSP_SOURCE_ROOT)", path);
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	rewind(f);
	buf = malloc((size_t)len + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
	buf[len] = '\0';
	fclose(f);
	return buf;
}

/* The gate's name of a vector campaign id ("*" for the direct one). */
static const char *gate_id(const struct seq *q, const char *id)
{
	for (uint32_t i = 0; i < q->n; i++)
		if (strcmp(q->ids[i], id) == 0)
			return q->direct[i] ? "*" : id;
	fail_msg("%s: unknown campaign %s", q->name, id);
	return NULL;
}

static void install_limits(struct seq *q)
{
	char spec[2048] = "";

	for (uint32_t i = 0; i < q->n; i++) {
		char one[200];
		if (q->direct[i])
			continue;
		snprintf(one, sizeof(one), "%s%s:%u:%s", spec[0] ? " " : "", q->ids[i],
			 q->ceiling[i], q->agents[i] ? q->agents[i] : "");
		strncat(spec, one, sizeof(spec) - strlen(spec) - 1);
	}
	assert_int_equal(genv_limits(&env, ORG, ++q->limits_version, q->org_limit, q->per_agent,
				     q->enforced, spec, NULL),
			 0);
}

static void setup_case(const cJSON *j, struct seq *q)
{
	const cJSON *org = cJSON_GetObjectItem(j, "org"), *sys = cJSON_GetObjectItem(j, "system");
	const cJSON *c;
	const char *orgs[] = { ORG, "fill", NULL };
	uint32_t fill = (uint32_t)num_or(sys, "running", 0);

	memset(q, 0, sizeof(*q));
	q->name = str_or(j, "name", "?");
	cJSON_ArrayForEach(c, cJSON_GetObjectItem(j, "campaigns"))
	{
		assert_true(q->n < MAX_C);
		q->ids[q->n] = str_or(c, "id", "");
		q->agents[q->n] = str_or(c, "agent", NULL);
		q->ceiling[q->n] = (uint32_t)num_or(c, "ceiling", 0);
		q->direct[q->n] = bool_or(c, "direct", false);
		q->n++;
	}
	q->org_limit = (uint32_t)num_or(org, "org_limit", 20);
	q->per_agent = (uint32_t)num_or(org, "per_agent", 0);
	q->enforced = bool_or(org, "enforced", true);
	q->ttl_default = 10000;
	genv_fresh(&env, (uint32_t)num_or(sys, "limit", 1000), orgs);
	assert_int_equal(genv_pin_clock(&env, ORG, 0), 0);
	install_limits(q);
	/* Other organisations' calls at the system level: direct dials of an unenforced org. */
	assert_int_equal(genv_limits(&env, "fill", 1, 1, 0, false, "", NULL), 0);
	for (uint32_t i = 0; i < fill; i++) {
		char call[24];
		snprintf(call, sizeof(call), "fill%u", i);
		assert_int_equal(genv_admit_direct(&env, "fill", call, NULL, false).r.outcome,
				 GATE_ADMITTED);
	}
}

static void failf(const struct seq *q, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void failf(const struct seq *q, const char *fmt, ...)
{
	char buf[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fail_msg("%s, step %d: %s", q->name, q->step, buf);
}
#define FAIL(q, ...) failf(q, __VA_ARGS__)

static void step_install(struct seq *q, const cJSON *s)
{
	char spec[2048] = "";
	struct gate_install_result res;
	const cJSON *f;
	const char *want = str_or(s, "expect", "ok");

	cJSON_ArrayForEach(f, cJSON_GetObjectItem(s, "floors"))
	{
		char one[100];
		snprintf(one, sizeof(one), "%s%s:%d", spec[0] ? " " : "", gate_id(q, f->string),
			 f->valueint);
		strncat(spec, one, sizeof(spec) - strlen(spec) - 1);
	}
	assert_int_equal(genv_floors(&env, ORG, (uint64_t)num_or(s, "version", 1),
				     (uint64_t)num_or(s, "ttl_ms", (double)q->ttl_default), spec,
				     &res),
			 0);
	if (res.applied != (strcmp(want, "ok") == 0))
		FAIL(q, "install: want %s", want);
}

static void step_admit(struct seq *q, const cJSON *s)
{
	const char *c = gate_id(q, str_or(s, "campaign", "")), *agent = str_or(s, "agent", NULL);
	const cJSON *e = cJSON_GetObjectItem(s, "expect");
	struct admit_out o;
	char call[24];

	snprintf(call, sizeof(call), "c%u", q->next_call++);
	o = strcmp(c, "*") == 0 ? genv_admit_direct(&env, ORG, call, agent, false)
				: genv_admit(&env, ORG, call, c);
	assert_int_equal(o.status, 0);
	assert_int_equal(o.r.n_decisions, 1);
	if (o.r.outcome == GATE_ADMITTED) {
		struct held *h = &q->held[q->n_held++];
		assert_true(q->n_held < MAX_CALLS);
		snprintf(h->call, sizeof(h->call), "%s", call);
		snprintf(h->campaign, sizeof(h->campaign), "%s", c);
		snprintf(h->agent, sizeof(h->agent), "%s",
			 strcmp(c, "*") == 0 ? (agent ? agent : "") : "");
	}
	if (!e)
		return;
	const struct gate_decision *d = &o.r.decisions[0];
	if (cJSON_GetObjectItem(e, "admitted") &&
	    bool_or(e, "admitted", false) != (o.r.outcome == GATE_ADMITTED))
		FAIL(q, "admit %s: admitted want %d", c, bool_or(e, "admitted", false));
	if (str_or(e, "level", NULL) &&
	    strcmp(str_or(e, "level", ""), fairshare_level_name(d->level)))
		FAIL(q, "admit %s: level want %s, got %s", c, str_or(e, "level", ""),
		     fairshare_level_name(d->level));
	if (str_or(e, "reason", NULL) &&
	    strcmp(str_or(e, "reason", ""), gate_reason_name(d->reason)))
		FAIL(q, "admit %s: reason want %s, got %s", c, str_or(e, "reason", ""),
		     gate_reason_name(d->reason));
	if (cJSON_GetObjectItem(e, "fcfs") && bool_or(e, "fcfs", false) != d->fcfs)
		FAIL(q, "admit %s: fcfs want %d", c, bool_or(e, "fcfs", false));
}

static void step_release(struct seq *q, const cJSON *s)
{
	const char *c = gate_id(q, str_or(s, "campaign", "")), *agent = str_or(s, "agent", NULL);
	const char *want = str_or(s, "expect", "ok");
	char call[24];
	struct release_out r;

	snprintf(call, sizeof(call), "unknown%u", q->next_call++);
	for (unsigned i = q->n_held; i-- > 0;) {
		struct held *h = &q->held[i];
		if (strcmp(h->campaign, c) ||
		    (strcmp(c, "*") == 0 && strcmp(h->agent, agent ? agent : "")))
			continue;
		snprintf(call, sizeof(call), "%s", h->call);
		*h = q->held[--q->n_held];
		break;
	}
	r = genv_release(&env, ORG, call);
	assert_int_equal(r.status, 0);
	if ((r.r.outcome == GATE_FREED ? "ok" : "range")[0] != want[0])
		FAIL(q, "release %s: want %s", c, want);
}

static void step_wait(struct seq *q, const cJSON *s, bool wait)
{
	const char *want = str_or(s, "expect", "ok");
	struct gate_wait_result w;
	char call[24];

	if (wait) {
		snprintf(call, sizeof(call), "w%u", q->next_call++);
		snprintf(q->waiting[q->n_waiting++], sizeof(q->waiting[0]), "%s", call);
	} else if (q->n_waiting) {
		snprintf(call, sizeof(call), "%s", q->waiting[--q->n_waiting]);
	} else {
		snprintf(call, sizeof(call), "nobody%u", q->next_call++);
	}
	assert_int_equal(genv_wait(&env, ORG, call, wait, &w), 0);
	if ((w.changed ? "ok" : "range")[0] != want[0])
		FAIL(q, "direct_%swait: want %s", wait ? "" : "un", want);
}

static void step_check(struct seq *q, const cJSON *s)
{
	const cJSON *e = cJSON_GetObjectItem(s, "expect"), *x;
	struct view_copy v;
	struct gate_stats st;

	assert_int_equal(genv_read(&env, ORG, &v), 0);
	assert_int_equal(genv_stats(&env, ORG, &st), 0);
#define CHECK(key, got)                                                                            \
	if (cJSON_GetObjectItem(e, key) && num_or(e, key, -1) != (double)(got))                    \
	FAIL(q, "check %s: want %.0f, got %llu", key, num_or(e, key, -1), (unsigned long long)(got))
	CHECK("org_running", v.v.org_running);
	CHECK("system_running", v.v.system_running);
	CHECK("shortfall_total", v.v.shortfall);
	CHECK("direct_waiting", v.v.direct_waiting);
	CHECK("direct_reserve", v.v.direct_reserve);
	cJSON_ArrayForEach(x, cJSON_GetObjectItem(e, "running"))
	{
		uint32_t got = view_running(&v, gate_id(q, x->string));
		if (got != (uint32_t)x->valueint)
			FAIL(q, "check running %s: want %d, got %u", x->string, x->valueint, got);
	}
	cJSON_ArrayForEach(x, cJSON_GetObjectItem(e, "agents"))
	{
		uint32_t got = view_agent_running(&v, x->string);
		if (got != (uint32_t)x->valueint)
			FAIL(q, "check agent %s: want %d, got %u", x->string, x->valueint, got);
	}
	e = cJSON_GetObjectItem(e, "stats");
	CHECK("admitted", st.total.admitted);
	CHECK("fcfs", st.total.fcfs);
	for (int l = FAIRSHARE_LEVEL_SYSTEM; e && l < FAIRSHARE_LEVEL_COUNT; l++) {
		char key[64];
		snprintf(key, sizeof(key), "refused_%s", fairshare_level_name(l));
		CHECK(key, st.total.refused[l]);
	}
#undef CHECK
}

static void run_steps(struct seq *q, const cJSON *steps);

static void run_step(struct seq *q, const cJSON *s)
{
	const char *op = str_or(s, "op", "");

	if (cJSON_GetObjectItem(s, "now_ms"))
		assert_int_equal(genv_pin_clock(&env, ORG, (int64_t)num_or(s, "now_ms", 0)), 0);
	if (strcmp(op, "install") == 0) {
		step_install(q, s);
	} else if (strcmp(op, "admit") == 0) {
		step_admit(q, s);
	} else if (strcmp(op, "release") == 0) {
		step_release(q, s);
	} else if (strcmp(op, "direct_wait") == 0 || strcmp(op, "direct_unwait") == 0) {
		step_wait(q, s, strcmp(op, "direct_wait") == 0);
	} else if (strcmp(op, "set_limits") == 0) {
		q->org_limit = (uint32_t)num_or(s, "org_limit", q->org_limit);
		q->per_agent = (uint32_t)num_or(s, "per_agent", 0);
		q->enforced = bool_or(s, "enforced", q->enforced);
		install_limits(q);
	} else if (strcmp(op, "set_ceiling") == 0) {
		const char *c = str_or(s, "campaign", "");
		for (uint32_t i = 0; i < q->n; i++)
			if (strcmp(q->ids[i], c) == 0)
				q->ceiling[i] = (uint32_t)num_or(s, "ceiling", 0);
		install_limits(q);
	} else if (strcmp(op, "repeat") == 0) {
		for (int i = 0; i < (int)num_or(s, "times", 1); i++)
			run_steps(q, cJSON_GetObjectItem(s, "steps"));
	} else if (strcmp(op, "check") == 0) {
		step_check(q, s);
	} else {
		FAIL(q, "unknown op %s", op);
	}
}

static void run_steps(struct seq *q, const cJSON *steps)
{
	const cJSON *s;

	cJSON_ArrayForEach(s, steps)
	{
		int times = strcmp(str_or(s, "op", ""), "repeat") ? (int)num_or(s, "times", 1) : 1;
		q->step++;
		for (int i = 0; i < times; i++)
			run_step(q, s);
	}
}

static void sequences(void **state)
{
	char *text = slurp();
	cJSON *root = cJSON_Parse(text), *c;
	static struct seq q;
	int n = 0;

	assert_non_null(root);
	assert_string_equal(str_or(root, "format", ""), "dsp-fairshare-vectors");
	assert_int_equal((int)num_or(root, "version", 0), 2);
	cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "sequences"))
	{
		setup_case(c, &q);
		q.ttl_default = (uint64_t)num_or(cJSON_GetObjectItem(root, "defaults"),
						 "install_ttl_ms", 10000);
		run_steps(&q, cJSON_GetObjectItem(c, "steps"));
		n++;
	}
	print_message("%d sequences passed through the Redis gate\n", n);
	assert_true(n >= 11);
	cJSON_Delete(root);
	free(text);
}

static int setup(void **state)
{
	fixture_start(&svc, false, true, false, false);
	genv_open(&env, svc.redis_url, "vectors", true);
	return 0;
}

static int teardown(void **state)
{
	genv_close(&env);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sequences),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
