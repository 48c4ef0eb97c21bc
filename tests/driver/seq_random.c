/* Random sequences on a seq_run (seq_random() in seq_driver.h): the event mix of issue 8 item 8
 * over one fixed org, with a fixed seed, compared after every event. Floors are installed in
 * full (new and old versions) and by delta (on the installed version, and on a stale one). */
#include "seq_driver.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

enum { A, B, C, D, E, DIRECT, N_CAMPAIGNS };

struct rnd {
	uint64_t s;
	bool paused[N_CAMPAIGNS];
	uint64_t floors_version;
};

static uint64_t next(struct rnd *x)
{
	uint64_t z = (x->s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static uint32_t below(struct rnd *x, uint32_t n)
{
	return (uint32_t)(next(x) % n);
}

/* New floors for a demand change: random shares of org_limit among the running campaigns
 * (paused ones get 0), the direct campaign included. */
static void new_floors(struct rnd *x, const struct seq_run *r, uint32_t *floors)
{
	uint32_t left = r->org.org_limit;

	memset(floors, 0, sizeof(uint32_t) * SEQ_MAX_C);
	for (uint32_t i = 0; i < N_CAMPAIGNS && left; i++) {
		if (x->paused[i])
			continue;
		floors[i] = below(x, left / 2 + 2);
		floors[i] = floors[i] > left ? left : floors[i];
		left -= floors[i];
	}
}

static void acquire(struct rnd *x, struct seq_run *r)
{
	uint32_t cands[DIRECT], n = 0;
	struct seq_decisions d;

	for (uint32_t i = 0; i < DIRECT; i++)
		if (!x->paused[i])
			cands[n++] = i;
	if (n == 0)
		return;
	for (uint32_t i = n; i > 1; i--) { /* a random order, then a random prefix */
		uint32_t j = below(x, i), t = cands[i - 1];
		cands[i - 1] = cands[j];
		cands[j] = t;
	}
	seq_admit(r, cands, 1 + below(x, n), FAIRSHARE_NO_AGENT, false, &d);
}

static void acquire_direct(struct rnd *x, struct seq_run *r)
{
	static const char *const agents[] = { "x", "y", "z", NULL };
	struct seq_decisions d;

	seq_admit(r, NULL, 0, seq_agent(r, agents[below(x, 4)]), below(x, 2) == 0, &d);
}

static void change_limits(struct rnd *x, struct seq_run *r)
{
	uint32_t what = below(x, 3);

	if (what == 0) {
		r->org.org_limit = 4 + below(x, 15);
	} else if (what == 1) {
		r->org.per_agent = below(x, 3) == 0 ? FAIRSHARE_UNLIMITED : 2 + below(x, 8);
		r->org.enforced = below(x, 8) != 0;
	} else {
		r->org.ceiling[C] = below(x, 4) == 0 ? FAIRSHARE_UNLIMITED : 1 + below(x, 5);
	}
	seq_install_limits(r);
}

static void install(struct rnd *x, struct seq_run *r, bool old)
{
	uint32_t floors[SEQ_MAX_C];
	uint64_t v;
	int rc;

	if (old && r->floors_version == 0)
		return;
	/* old: not newer than the installed version (x's may be ahead: refused deltas). */
	v = old ? 1 + below(x, (uint32_t)r->floors_version) : ++x->floors_version;
	new_floors(x, r, floors);
	rc = seq_install_floors(r, v, floors, 1000 + below(x, 9000));
	if ((rc == 0) == old)
		fail_msg("%s, event %ld: install v%llu answered %d", r->label, r->event,
			 (unsigned long long)v, rc);
}

/* A delta install, as the refresher sends between full installs: one to three campaigns get a
 * new floor within what the org's limit leaves (a paused one 0), the others keep theirs. On
 * the installed version (matching base: applied) or on an older one (a stale base: nothing
 * changes, the refresher would install in full). */
static void install_delta(struct rnd *x, struct seq_run *r, bool stale)
{
	uint32_t floors[SEQ_MAX_C], sum = 0, slack;
	bool changed[SEQ_MAX_C] = { false };
	uint64_t base = r->floors_version;
	int rc;

	if (base == 0 || (stale && base == 1))
		return;
	if (stale)
		base = 1 + below(x, (uint32_t)(base - 1));
	memcpy(floors, r->floors, sizeof(floors));
	for (uint32_t i = 0; i < N_CAMPAIGNS; i++)
		sum += floors[i];
	for (uint32_t k = 1 + below(x, 3); k > 0; k--) {
		uint32_t c = below(x, N_CAMPAIGNS);
		slack = r->org.org_limit > sum ? r->org.org_limit - sum : 0;
		sum -= floors[c];
		floors[c] = x->paused[c] ? 0 : below(x, floors[c] + slack + 1);
		sum += floors[c];
		changed[c] = true;
	}
	rc = seq_install_floors_delta(r, base, ++x->floors_version, floors, changed,
				      1000 + below(x, 9000));
	if ((rc == 0) == stale)
		fail_msg("%s, event %ld: delta v%llu on v%llu answered %d", r->label, r->event,
			 (unsigned long long)x->floors_version, (unsigned long long)base, rc);
}

static void one_event(struct rnd *x, struct seq_run *r)
{
	uint32_t e = below(x, 100);
	char call[SEQ_CALL_LEN];

	if (e < 30) {
		acquire(x, r);
	} else if (e < 38) {
		acquire_direct(x, r);
	} else if (e < 58) {
		if (r->n_held)
			seq_release_held(r, below(x, r->n_held));
	} else if (e < 62) {
		if (r->released[0]) /* a duplicate: must free nothing */
			assert_false(seq_release(r, r->released));
	} else if (e < 64) {
		snprintf(call, sizeof(call), "unknown%u", r->next_call++);
		assert_false(seq_release(r, call));
	} else if (e < 68) {
		install(x, r, false); /* a demand change: new floors */
	} else if (e < 72) {
		install_delta(x, r, false);
	} else if (e < 74) {
		install(x, r, true);
	} else if (e < 75) {
		install_delta(x, r, true);
	} else if (e < 80) {
		seq_wait(r, true);
	} else if (e < 84) {
		seq_wait(r, false);
	} else if (e < 87) {
		uint32_t c = below(x, DIRECT);
		x->paused[c] = !x->paused[c]; /* no candidates now, floor 0 at the next install */
	} else if (e < 92) {
		change_limits(x, r);
	} else if (e < 95) {
		seq_set_clock(r, (r->floors_expire > r->now ? r->floors_expire : r->now) +
					 below(x, 3)); /* expiry */
	} else {
		seq_set_clock(r, r->now + below(x, 800));
	}
}

void seq_random(struct seq_run *r, uint64_t seed, long events, struct seq_backend **b, uint32_t nb)
{
	static const char *const ids[N_CAMPAIGNS] = { "A", "B", "C", "D", "E", "direct" };
	struct seq_org o = {
		.system_limit = 40,
		.system_running = 25,
		.org_limit = 12,
		.per_agent = 7,
		.enforced = true,
		.n = N_CAMPAIGNS,
		.direct = DIRECT,
	};
	struct rnd x = { .s = seed };
	struct seq_state s;

	for (uint32_t i = 0; i < N_CAMPAIGNS; i++) {
		o.ids[i] = ids[i];
		o.ceiling[i] = i == C ? 3 : FAIRSHARE_UNLIMITED;
	}
	o.agent_of[A] = o.agent_of[B] = seq_org_agent(&o, "x");
	o.agent_of[C] = o.agent_of[D] = seq_org_agent(&o, "y");
	o.agent_of[E] = o.agent_of[DIRECT] = FAIRSHARE_NO_AGENT;
	snprintf(r->label, sizeof(r->label), "random seed %llu", (unsigned long long)seed);
	seq_start(r, &o, b, nb);
	while (r->event < events) {
		one_event(&x, r);
		seq_compare(r, &s);
	}
}
