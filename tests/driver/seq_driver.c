/* The sequence driver and its model backend: see seq_driver.h. */
#include "seq_driver.h"

#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

/* ---- the model backend ---- */

static struct seq_model *model_of(struct seq_backend *b)
{
	return (struct seq_model *)b;
}

static void model_setup(struct seq_backend *b, const struct seq_org *org)
{
	struct seq_model *m = model_of(b);
	struct fairshare_gate_limits lim = { org->org_limit, org->per_agent, org->enforced };

	memset(&m->g, 0, sizeof(*m) - offsetof(struct seq_model, g));
	for (uint32_t i = 0; i < org->n; i++) {
		m->gc[i].ceiling = i == org->direct ? FAIRSHARE_UNLIMITED : org->ceiling[i];
		m->gc[i].agent = org->agent_of[i];
	}
	m->sys = (struct fairshare_system){ org->system_limit, org->system_running };
	assert_int_equal(
		fairshare_gate_init(&m->g, &lim, m->gc, org->n, org->direct, m->ga, SEQ_MAX_A), 0);
}

static void model_set_clock(struct seq_backend *b, uint64_t now_ms)
{
	model_of(b)->now = now_ms;
}

static int model_install_floors(struct seq_backend *b, const struct seq_org *org, uint64_t version,
				const uint32_t *floors, uint64_t ttl_ms)
{
	struct seq_model *m = model_of(b);
	int rc = fairshare_gate_install(&m->g, version, floors, org->n, m->now, ttl_ms);

	assert_true(rc == 0 || rc == -ESTALE);
	return rc;
}

static int model_install_floors_delta(struct seq_backend *b, const struct seq_org *org,
				      uint64_t base_version, uint64_t version,
				      const uint32_t *floors, const bool *changed, uint64_t ttl_ms)
{
	(void)changed; /* no delta in the model: the full install the delta stands for */
	if (model_of(b)->g.floors_version != base_version)
		return -ESTALE;
	return model_install_floors(b, org, version, floors, ttl_ms);
}

static void model_install_limits(struct seq_backend *b, const struct seq_org *org, uint64_t version)
{
	struct seq_model *m = model_of(b);
	struct fairshare_gate_limits lim = { org->org_limit, org->per_agent, org->enforced };

	(void)version;
	assert_int_equal(fairshare_gate_set_limits(&m->g, &lim), 0);
	for (uint32_t i = 0; i < org->n; i++)
		if (i != org->direct)
			assert_int_equal(fairshare_gate_set_ceiling(&m->g, i, org->ceiling[i]), 0);
}

static int model_waiter(struct seq_model *m, const char *call)
{
	for (uint32_t i = 0; i < m->n_waiting; i++)
		if (strcmp(m->waiting[i], call) == 0)
			return (int)i;
	return -1;
}

static bool model_direct_wait(struct seq_backend *b, const char *call, bool wait)
{
	struct seq_model *m = model_of(b);
	int i = model_waiter(m, call);

	if (wait == (i >= 0))
		return false;
	if (wait) {
		assert_true(m->n_waiting < SEQ_MAX_CALLS);
		snprintf(m->waiting[m->n_waiting++], SEQ_CALL_LEN, "%s", call);
		assert_int_equal(fairshare_gate_direct_wait(&m->g), 0);
	} else {
		memcpy(m->waiting[i], m->waiting[--m->n_waiting], SEQ_CALL_LEN);
		assert_int_equal(fairshare_gate_direct_unwait(&m->g), 0);
	}
	return true;
}

/* The script's walk (gate_admit.lua): candidates in order, the first admitted takes its slots,
 * a refusal that holds for the whole org ends the walk. */
static void model_admit(struct seq_backend *b, const struct seq_org *org, const char *call,
			const uint32_t *cands, uint32_t n, uint32_t agent, bool wait,
			struct seq_decisions *out)
{
	struct seq_model *m = model_of(b);
	uint32_t direct = org->direct;

	memset(out, 0, sizeof(*out));
	for (uint32_t i = 0; i < (n ? n : 1); i++) {
		struct fairshare_slot s =
			n ? (struct fairshare_slot){ cands[i], m->gc[cands[i]].agent }
			  : (struct fairshare_slot){ direct, agent };
		struct fairshare_decision d;

		assert_int_equal(fairshare_gate_try(&m->g, &m->sys, &s, m->now, &d), 0);
		out->d[out->n].level = d.level;
		out->d[out->n].reason = (int)d.reason;
		out->d[out->n].fcfs = d.fcfs;
		out->n++;
		if (d.admitted) {
			out->admitted = true;
			assert_true(m->n_held < SEQ_MAX_CALLS);
			snprintf(m->held[m->n_held].call, SEQ_CALL_LEN, "%s", call);
			m->held[m->n_held++].slot = s;
			break;
		}
		if (fairshare_gate_blocks_org(&d))
			break;
	}
	if (n == 0 && out->admitted && model_waiter(m, call) >= 0)
		model_direct_wait(b, call, false);
	else if (n == 0 && !out->admitted && wait)
		model_direct_wait(b, call, true);
}

static bool model_release(struct seq_backend *b, const struct seq_org *org, const char *call)
{
	struct seq_model *m = model_of(b);

	(void)org;
	for (uint32_t i = 0; i < m->n_held; i++) {
		if (strcmp(m->held[i].call, call))
			continue;
		assert_int_equal(fairshare_gate_release(&m->g, &m->sys, &m->held[i].slot), 0);
		m->held[i] = m->held[--m->n_held];
		return true;
	}
	return false;
}

static void model_read_state(struct seq_backend *b, const struct seq_org *org,
			     struct seq_state *out)
{
	struct seq_model *m = model_of(b);

	memset(out, 0, sizeof(*out));
	out->org_running = m->g.org_running;
	out->system_running = m->sys.running;
	out->direct_waiting = m->g.direct_waiting;
	out->direct_reserve = fairshare_gate_direct_reserve(&m->g, m->now);
	out->shortfall = m->g.shortfall;
	for (uint32_t i = 0; i < org->n; i++) {
		out->running[i] = m->gc[i].running;
		out->floor[i] = m->gc[i].floor;
	}
	for (uint32_t a = 0; a < org->n_agents; a++) {
		out->agent_running[a] = m->ga[a].running;
		out->agent_shortfall[a] = m->ga[a].shortfall;
	}
	out->admitted = m->g.stats.admitted;
	out->fcfs = m->g.stats.fcfs;
	memcpy(out->refused, m->g.stats.refused, sizeof(out->refused));
}

struct seq_backend *seq_model_backend(struct seq_model *m)
{
	m->b = (struct seq_backend){
		.name = "model",
		.setup = model_setup,
		.set_clock = model_set_clock,
		.install_floors = model_install_floors,
		.install_floors_delta = model_install_floors_delta,
		.install_limits = model_install_limits,
		.admit = model_admit,
		.release = model_release,
		.direct_wait = model_direct_wait,
		.read_state = model_read_state,
	};
	return &m->b;
}

/* ---- the run: every operation on every backend, answers compared ---- */

static void runf(const struct seq_run *r, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void runf(const struct seq_run *r, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fail_msg("%s, event %ld: %s", r->label, r->event, buf);
}

void seq_start(struct seq_run *r, const struct seq_org *org, struct seq_backend **b, uint32_t nb)
{
	char label[sizeof(r->label)];

	assert_true(nb >= 1 && nb <= SEQ_MAX_B && org->n <= SEQ_MAX_C);
	memcpy(label, r->label, sizeof(label));
	memset(r, 0, sizeof(*r));
	memcpy(r->label, label, sizeof(label));
	r->org = *org;
	r->nb = nb;
	for (uint32_t i = 0; i < nb; i++) {
		r->b[i] = b[i];
		b[i]->setup(b[i], &r->org);
	}
	r->limits_version = 1;
}

void seq_set_clock(struct seq_run *r, uint64_t now_ms)
{
	r->now = now_ms;
	for (uint32_t i = 0; i < r->nb; i++)
		r->b[i]->set_clock(r->b[i], now_ms);
}

int seq_install_floors(struct seq_run *r, uint64_t version, const uint32_t *floors, uint64_t ttl_ms)
{
	int rc = 0;

	r->event++;
	for (uint32_t i = 0; i < r->nb; i++) {
		int got = r->b[i]->install_floors(r->b[i], &r->org, version, floors, ttl_ms);
		if (i && got != rc)
			runf(r, "install v%llu: %s %d, %s %d", (unsigned long long)version,
			     r->b[0]->name, rc, r->b[i]->name, got);
		rc = got;
	}
	r->seen_stale += rc == -ESTALE;
	if (rc == 0) {
		r->floors_version = version;
		r->floors_expire = r->now + ttl_ms;
		memcpy(r->floors, floors, sizeof(uint32_t) * r->org.n);
	}
	return rc;
}

int seq_install_floors_delta(struct seq_run *r, uint64_t base_version, uint64_t version,
			     const uint32_t *floors, const bool *changed, uint64_t ttl_ms)
{
	int rc = 0;

	r->event++;
	for (uint32_t i = 0; i < r->org.n; i++)
		if (!changed[i] && floors[i] != r->floors[i])
			runf(r, "delta v%llu: campaign %u not sent but changed",
			     (unsigned long long)version, i);
	for (uint32_t i = 0; i < r->nb; i++) {
		int got = r->b[i]->install_floors_delta(r->b[i], &r->org, base_version, version,
							floors, changed, ttl_ms);
		if (i && got != rc)
			runf(r, "delta v%llu on v%llu: %s %d, %s %d", (unsigned long long)version,
			     (unsigned long long)base_version, r->b[0]->name, rc, r->b[i]->name,
			     got);
		rc = got;
	}
	r->seen_delta += rc == 0;
	r->seen_delta_stale += rc == -ESTALE;
	if (rc == 0) {
		r->floors_version = version;
		r->floors_expire = r->now + ttl_ms;
		memcpy(r->floors, floors, sizeof(uint32_t) * r->org.n);
	}
	return rc;
}

void seq_install_limits(struct seq_run *r)
{
	r->event++;
	r->limits_version++;
	for (uint32_t i = 0; i < r->nb; i++)
		r->b[i]->install_limits(r->b[i], &r->org, r->limits_version);
}

static const char *decisions_str(const struct seq_decisions *d, char *buf, size_t size)
{
	size_t off = (size_t)snprintf(buf, size, "%s:", d->admitted ? "admitted" : "refused");

	for (uint32_t i = 0; i < d->n && off < size; i++)
		off += (size_t)snprintf(buf + off, size - off, " %s/%d%s",
					fairshare_level_name(d->d[i].level), d->d[i].reason,
					d->d[i].fcfs ? "/fcfs" : "");
	return buf;
}

int seq_admit(struct seq_run *r, const uint32_t *cands, uint32_t n, uint32_t agent, bool wait,
	      struct seq_decisions *out)
{
	char call[SEQ_CALL_LEN], b1[256], b2[256];
	struct seq_decisions d;

	r->event++;
	snprintf(call, sizeof(call), "c%u", r->next_call++);
	for (uint32_t i = 0; i < r->nb; i++) {
		r->b[i]->admit(r->b[i], &r->org, call, cands, n, agent, wait, i ? &d : out);
		if (i && (d.admitted != out->admitted || d.n != out->n ||
			  memcmp(d.d, out->d, sizeof(d.d[0]) * d.n)))
			runf(r, "admit %s: %s {%s}, %s {%s}", call, r->b[0]->name,
			     decisions_str(out, b1, sizeof(b1)), r->b[i]->name,
			     decisions_str(&d, b2, sizeof(b2)));
	}
	for (uint32_t i = 0; i < out->n; i++) {
		r->seen[out->d[i].level][out->d[i].reason & 7]++;
		r->seen_fcfs += out->d[i].fcfs;
	}
	if (!out->admitted) {
		if (n == 0 && wait) {
			assert_true(r->n_waiting < SEQ_MAX_CALLS);
			memcpy(r->waiting[r->n_waiting++], call, SEQ_CALL_LEN);
		}
		return -1;
	}
	assert_true(r->n_held < SEQ_MAX_CALLS);
	memcpy(r->held[r->n_held].call, call, SEQ_CALL_LEN);
	r->held[r->n_held].campaign = n ? cands[out->n - 1] : r->org.direct;
	r->held[r->n_held].agent = n ? r->org.agent_of[cands[out->n - 1]] : agent;
	return (int)r->n_held++;
}

bool seq_release(struct seq_run *r, const char *call)
{
	bool freed = false;

	r->event++;
	for (uint32_t i = 0; i < r->nb; i++) {
		bool got = r->b[i]->release(r->b[i], &r->org, call);
		if (i && got != freed)
			runf(r, "release %s: %s %d, %s %d", call, r->b[0]->name, freed,
			     r->b[i]->name, got);
		freed = got;
	}
	snprintf(r->released, sizeof(r->released), "%s", call);
	return freed;
}

bool seq_release_held(struct seq_run *r, uint32_t i)
{
	char call[SEQ_CALL_LEN];

	assert_true(i < r->n_held);
	memcpy(call, r->held[i].call, sizeof(call));
	r->held[i] = r->held[--r->n_held];
	return seq_release(r, call);
}

static bool wait_all(struct seq_run *r, const char *call, bool wait)
{
	bool changed = false;

	r->event++;
	for (uint32_t i = 0; i < r->nb; i++) {
		bool got = r->b[i]->direct_wait(r->b[i], call, wait);
		if (i && got != changed)
			runf(r, "direct_%swait %s: %s %d, %s %d", wait ? "" : "un", call,
			     r->b[0]->name, changed, r->b[i]->name, got);
		changed = got;
	}
	return changed;
}

bool seq_wait(struct seq_run *r, bool wait)
{
	char call[SEQ_CALL_LEN];

	if (wait) {
		assert_true(r->n_waiting < SEQ_MAX_CALLS);
		snprintf(call, sizeof(call), "w%u", r->next_call++);
		memcpy(r->waiting[r->n_waiting++], call, SEQ_CALL_LEN);
	} else if (r->n_waiting) {
		memcpy(call, r->waiting[--r->n_waiting], SEQ_CALL_LEN);
	} else {
		snprintf(call, sizeof(call), "nobody%u", r->next_call++);
	}
	return wait_all(r, call, wait);
}

static void state_print(const struct seq_run *r, const char *name, const struct seq_state *s)
{
	print_message("  %-6s org %u system %u k %u reserve %u S %llu admitted %llu fcfs %llu "
		      "refused",
		      name, s->org_running, s->system_running, s->direct_waiting, s->direct_reserve,
		      (unsigned long long)s->shortfall, (unsigned long long)s->admitted,
		      (unsigned long long)s->fcfs);
	for (int l = FAIRSHARE_LEVEL_SYSTEM; l < FAIRSHARE_LEVEL_COUNT; l++)
		print_message(" %llu", (unsigned long long)s->refused[l]);
	print_message("\n         campaigns");
	for (uint32_t i = 0; i < r->org.n; i++)
		print_message(" %s=%u/%u", r->org.ids[i], s->running[i], s->floor[i]);
	print_message("\n         agents");
	for (uint32_t a = 0; a < r->org.n_agents; a++)
		print_message(" %s=%u/S%llu", r->org.agent[a], s->agent_running[a],
			      (unsigned long long)s->agent_shortfall[a]);
	print_message("\n");
}

void seq_compare(struct seq_run *r, struct seq_state *out)
{
	struct seq_state s;

	for (uint32_t i = 0; i < r->nb; i++) {
		r->b[i]->read_state(r->b[i], &r->org, i ? &s : out);
		if (i == 0 || memcmp(&s, out, sizeof(s)) == 0)
			continue;
		print_message("%s, event %ld: the states differ (clock %llu, floors v%llu until "
			      "%llu)\n",
			      r->label, r->event, (unsigned long long)r->now,
			      (unsigned long long)r->floors_version,
			      (unsigned long long)r->floors_expire);
		state_print(r, r->b[0]->name, out);
		state_print(r, r->b[i]->name, &s);
		runf(r, "%s and %s disagree", r->b[0]->name, r->b[i]->name);
	}
}

uint32_t seq_campaign(const struct seq_run *r, const char *id)
{
	for (uint32_t i = 0; id && i < r->org.n; i++)
		if (strcmp(r->org.ids[i], id) == 0)
			return i;
	runf(r, "unknown campaign %s", id ? id : "(none)");
	return 0;
}

uint32_t seq_org_agent(struct seq_org *org, const char *name)
{
	if (!name)
		return FAIRSHARE_NO_AGENT;
	for (uint32_t a = 0; a < org->n_agents; a++)
		if (strcmp(org->agent[a], name) == 0)
			return a;
	assert_true(org->n_agents < SEQ_MAX_A);
	org->agent[org->n_agents] = name;
	return org->n_agents++;
}

uint32_t seq_agent(struct seq_run *r, const char *name)
{
	return seq_org_agent(&r->org, name);
}

void seq_print_coverage(const struct seq_run *r)
{
	print_message("%s: %ld events; decisions", r->label, r->event);
	for (int l = 0; l < FAIRSHARE_LEVEL_COUNT; l++)
		for (int k = 0; k < 8; k++)
			if (r->seen[l][k])
				print_message(" %s/%s %llu", fairshare_level_name(l),
					      k > FAIRSHARE_REASON_AGENT_FLOORS
						      ? "unknown"
						      : fairshare_reason_name(k),
					      (unsigned long long)r->seen[l][k]);
	print_message("; fcfs %llu; stale installs %llu; deltas %llu, stale deltas %llu\n",
		      (unsigned long long)r->seen_fcfs, (unsigned long long)r->seen_stale,
		      (unsigned long long)r->seen_delta, (unsigned long long)r->seen_delta_stale);
}
