/* The script backend of the sequence driver: see seq_script.h. */
#include "seq_script.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

static struct seq_script *script_of(struct seq_backend *b)
{
	return (struct seq_script *)b;
}

/* The gate's name of campaign i ("*" for the direct pseudo-campaign). */
static const char *gate_id(const struct seq_org *org, uint32_t i)
{
	return i == org->direct ? "*" : org->ids[i];
}

static uint32_t or_zero(uint32_t limit)
{
	return limit == FAIRSHARE_UNLIMITED ? 0 : limit;
}

static void append(char *buf, size_t size, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void append(char *buf, size_t size, const char *fmt, ...)
{
	size_t len = strlen(buf);
	va_list ap;

	va_start(ap, fmt);
	assert_true((size_t)vsnprintf(buf + len, size - len, fmt, ap) < size - len);
	va_end(ap);
}

static void script_install_limits(struct seq_backend *b, const struct seq_org *org,
				  uint64_t version)
{
	struct seq_script *s = script_of(b);
	char spec[2048] = "";

	for (uint32_t i = 0; i < org->n; i++) {
		uint32_t a = org->agent_of[i];
		if (i == org->direct)
			continue;
		append(spec, sizeof(spec), "%s%s:%u:%s", spec[0] ? " " : "", org->ids[i],
		       or_zero(org->ceiling[i]), a == FAIRSHARE_NO_AGENT ? "" : org->agent[a]);
	}
	assert_int_equal(genv_limits(s->env, s->org, version, org->org_limit,
				     or_zero(org->per_agent), org->enforced, spec, NULL),
			 0);
}

static void script_setup(struct seq_backend *b, const struct seq_org *org)
{
	struct seq_script *s = script_of(b);
	const char *orgs[] = { s->org, "fill", NULL };

	genv_fresh(s->env, org->system_limit, orgs);
	assert_int_equal(genv_pin_clock(s->env, s->org, 0), 0);
	script_install_limits(b, org, 1);
	assert_int_equal(genv_limits(s->env, "fill", 1, 1, 0, false, "", NULL), 0);
	for (uint32_t i = 0; i < org->system_running; i++) {
		char call[24];
		snprintf(call, sizeof(call), "fill%u", i);
		assert_int_equal(genv_admit_direct(s->env, "fill", call, NULL, false).r.outcome,
				 GATE_ADMITTED);
	}
}

/* The model's waiting direct dials never expire; the script's without a worker do, 10 s after
 * their last registration (dispatcher/gate/gate_wc.lua.inc WAIT_TTL_MS). The driver's callers
 * are alive while the clock jumps: each registration is renewed at the new time (a "wait" again:
 * k unchanged). */
static void script_set_clock(struct seq_backend *b, uint64_t now_ms)
{
	struct seq_script *s = script_of(b);
	static char calls[SEQ_MAX_CALLS][65];
	struct gate_wait_result w;
	char key[128];
	int n;

	assert_int_equal(genv_pin_clock(s->env, s->org, (int64_t)now_ms), 0);
	assert_true(gate_org_key(s->org, "wait", key, sizeof(key)) > 0);
	n = genv_hkeys(s->env, key, calls, SEQ_MAX_CALLS);
	for (int i = 0; i < n; i++) {
		assert_int_equal(genv_wait(s->env, s->org, calls[i], true, &w), 0);
		assert_false(w.changed);
	}
}

static int script_install_floors(struct seq_backend *b, const struct seq_org *org, uint64_t version,
				 const uint32_t *floors, uint64_t ttl_ms)
{
	struct seq_script *s = script_of(b);
	struct gate_install_result res;
	char spec[2048] = "";

	for (uint32_t i = 0; i < org->n; i++)
		append(spec, sizeof(spec), "%s%s:%u", spec[0] ? " " : "", gate_id(org, i),
		       floors[i]);
	assert_int_equal(genv_floors(s->env, s->org, version, ttl_ms, spec, &res), 0);
	return res.applied ? 0 : -ESTALE;
}

static int script_install_floors_delta(struct seq_backend *b, const struct seq_org *org,
				       uint64_t base_version, uint64_t version,
				       const uint32_t *floors, const bool *changed, uint64_t ttl_ms)
{
	struct seq_script *s = script_of(b);
	struct gate_install_result res;
	char spec[2048] = "";

	for (uint32_t i = 0; i < org->n; i++)
		if (changed[i])
			append(spec, sizeof(spec), "%s%s:%u", spec[0] ? " " : "", gate_id(org, i),
			       floors[i]);
	assert_int_equal(
		genv_floors_delta(s->env, s->org, base_version, version, ttl_ms, spec, &res), 0);
	return res.applied ? 0 : -ESTALE;
}

static void script_admit(struct seq_backend *b, const struct seq_org *org, const char *call,
			 const uint32_t *cands, uint32_t n, uint32_t agent, bool wait,
			 struct seq_decisions *out)
{
	struct seq_script *s = script_of(b);
	struct admit_out o;
	char list[1024] = "";

	for (uint32_t i = 0; i < n; i++)
		append(list, sizeof(list), "%s%s", i ? " " : "", gate_id(org, cands[i]));
	o = n ? genv_admit(s->env, s->org, call, list)
	      : genv_admit_direct(s->env, s->org, call,
				  agent == FAIRSHARE_NO_AGENT ? NULL : org->agent[agent], wait);
	assert_int_equal(o.status, 0);
	assert_int_not_equal(o.r.outcome, GATE_HELD);
	memset(out, 0, sizeof(*out));
	out->admitted = o.r.outcome == GATE_ADMITTED;
	out->n = o.r.n_decisions;
	for (uint32_t i = 0; i < o.r.n_decisions && i < SEQ_MAX_C; i++) {
		out->d[i].level = o.r.decisions[i].level;
		out->d[i].reason = (int)o.r.decisions[i].reason;
		out->d[i].fcfs = o.r.decisions[i].fcfs;
	}
}

static bool script_release(struct seq_backend *b, const struct seq_org *org, const char *call)
{
	struct seq_script *s = script_of(b);
	struct release_out r = genv_release(s->env, s->org, call);

	(void)org;
	assert_int_equal(r.status, 0);
	if (r.r.outcome == GATE_RANGE)
		fail_msg("release %s: the script found a count already at 0", call);
	return r.r.outcome == GATE_FREED;
}

static bool script_direct_wait(struct seq_backend *b, const char *call, bool wait)
{
	struct seq_script *s = script_of(b);
	struct gate_wait_result w;

	assert_int_equal(genv_wait(s->env, s->org, call, wait, &w), 0);
	return w.changed;
}

static void script_read_state(struct seq_backend *b, const struct seq_org *org,
			      struct seq_state *out)
{
	struct seq_script *s = script_of(b);
	static struct view_copy v;
	struct gate_stats st;

	assert_int_equal(genv_read(s->env, s->org, &v), 0);
	assert_int_equal(genv_stats(s->env, s->org, &st), 0);
	memset(out, 0, sizeof(*out));
	out->org_running = v.v.org_running;
	out->system_running = v.v.system_running;
	out->direct_waiting = v.v.direct_waiting;
	out->direct_reserve = v.v.direct_reserve;
	out->shortfall = v.v.shortfall;
	for (uint32_t i = 0; i < org->n; i++) {
		out->running[i] = view_running(&v, gate_id(org, i));
		out->floor[i] = view_floor(&v, gate_id(org, i));
	}
	for (uint32_t a = 0; a < org->n_agents; a++) {
		out->agent_running[a] = view_agent_running(&v, org->agent[a]);
		out->agent_shortfall[a] = view_agent_shortfall(&v, org->agent[a]);
	}
	out->admitted = st.total.admitted;
	out->fcfs = st.total.fcfs;
	memcpy(out->refused, st.total.refused, sizeof(out->refused));
}

struct seq_backend *seq_script_backend(struct seq_script *s, struct gate_env *env, const char *org)
{
	s->env = env;
	s->org = org;
	s->b = (struct seq_backend){
		.name = "script",
		.setup = script_setup,
		.set_clock = script_set_clock,
		.install_floors = script_install_floors,
		.install_floors_delta = script_install_floors_delta,
		.install_limits = script_install_limits,
		.admit = script_admit,
		.release = script_release,
		.direct_wait = script_direct_wait,
		.read_state = script_read_state,
	};
	return &s->b;
}
