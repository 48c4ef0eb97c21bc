/* Property tests of the fair-share allocator against the independent oracle (fixed seeds):
 *   - random_states_match_oracle: 200,000 random small states, every output compared;
 *   - random_sequences_keep_aggregates: random event sequences (acquire, release, duplicate
 *     release, demand change, pause, limit change, refresh, stale install, time, direct wait);
 *     after every event the gate's aggregates equal a recount under the same installed floors,
 *     every decision equals the oracle's, and no admission takes a level past its limit;
 *   - pump_is_work_conserving: after filling, every free line is accounted for, from C5's
 *     definitions alone, by a full level or by a named claimant's floor or the direct reserve
 *     (direct dials name agents, gating ones included);
 *   - floors_reached_as_calls_end: from any running mix, once the calls running at install time
 *     end, every backlogged campaign holds at least its floor;
 *   - rounding_rotates: remainders rotate and nobody is held at floor 0 (random n > org_limit).
 */
#include "fairshare.h"
#include "fairshare_gate.h"
#include "fairshare_oracle.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <cmocka.h>

#define NC	  ORACLE_MAX_CAMPAIGNS
#define NA	  ORACLE_MAX_AGENTS
#define MAX_CALLS 256

#define N_STATES    200000
#define N_SEQUENCES 4000
#define SEQ_EVENTS  400

struct rng {
	uint64_t s;
};

static uint64_t rnd(struct rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

static uint32_t below(struct rng *r, uint32_t n)
{
	return n ? (uint32_t)(rnd(r) % n) : 0;
}

static bool chance(struct rng *r, unsigned pct)
{
	return below(r, 100) < pct;
}

struct scenario {
	struct fairshare_org org;
	uint32_t agent_running[NA];
	struct fairshare_campaign c[NC];
	char ids[NC][8];
	uint32_t n;
};

static void dump(const struct scenario *s)
{
	const struct fairshare_org *o = &s->org;

	print_message("org: system %u/%u org_limit %u per_agent %d enforced %d elapsed %llu\n",
		      o->system_running, o->system_limit, o->org_limit, (int)o->per_agent,
		      o->enforced, (unsigned long long)o->elapsed_ms);
	for (uint32_t a = 0; a < o->n_agents; a++)
		print_message("  agent %u running %u\n", a, s->agent_running[a]);
	for (uint32_t i = 0; i < s->n; i++) {
		const struct fairshare_campaign *c = &s->c[i];

		print_message("  [%u] %s run %u wait %u due %u ceil %d agent %d state %d direct %d "
			      "carry(%lld, %lld/%lld, %u)\n",
			      i, c->id, c->running, c->waiting, c->due, (int)c->ceiling,
			      (int)c->agent, c->state, c->direct, (long long)c->carry.deficit,
			      (long long)c->carry.fluid_num, (long long)c->carry.fluid_den,
			      c->carry.floor);
	}
}

#define CHECK(s, cond)                                                                             \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			dump(s);                                                                   \
			fail_msg("%s", #cond);                                                     \
		}                                                                                  \
	} while (0)

static void random_campaign(struct rng *r, struct scenario *s, uint32_t i)
{
	struct fairshare_campaign *c = &s->c[i];

	*c = (struct fairshare_campaign){ .id = s->ids[i] };
	c->running = chance(r, 30) ? 0 : below(r, 7);
	c->waiting = chance(r, 30) ? below(r, 3) : 0;
	c->due = chance(r, 70) ? below(r, 25) : 0;
	c->ceiling = chance(r, 60) ? FAIRSHARE_UNLIMITED : below(r, 10);
	c->agent = chance(r, 10) ? FAIRSHARE_NO_AGENT : below(r, s->org.n_agents);
	c->state = chance(r, 80) ? FAIRSHARE_RUNNING
				 : (chance(r, 50) ? FAIRSHARE_PAUSED : FAIRSHARE_STOPPED);
	if (chance(r, 60)) {
		c->carry.deficit = (int64_t)below(r, 2000001) - 1000000;
		c->carry.fluid_den = 1 + below(r, 16); /* halves, odd denominators: R5 rounding */
		c->carry.fluid_num = below(r, 7 * (uint32_t)c->carry.fluid_den + 1);
		c->carry.floor = below(r, 8);
		c->carry.idle_ms = chance(r, 70) ? 0 : below(r, 2 * FAIRSHARE_DEFICIT_GRACE_MS);
	}
}

/* Ids are a shuffled set, so their order differs from the input order. */
static void random_ids(struct rng *r, struct scenario *s)
{
	uint32_t perm[NC];

	for (uint32_t i = 0; i < s->n; i++)
		perm[i] = i;
	for (uint32_t i = s->n; i > 1; i--) {
		uint32_t j = below(r, i), t = perm[i - 1];

		perm[i - 1] = perm[j];
		perm[j] = t;
	}
	for (uint32_t i = 0; i < s->n; i++)
		snprintf(s->ids[i], sizeof(s->ids[i]), "k%02u", perm[i]);
}

static void random_scenario(struct rng *r, struct scenario *s)
{
	uint32_t running = 0;

	memset(s, 0, sizeof(*s));
	s->n = 1 + below(r, 6);
	s->org.org_limit = 1 + below(r, 12);
	s->org.per_agent = chance(r, 50) ? FAIRSHARE_UNLIMITED : 1 + below(r, s->org.org_limit + 3);
	s->org.n_agents = 1 + below(r, 3);
	s->org.agent_running = s->agent_running;
	s->org.enforced = chance(r, 88);
	s->org.elapsed_ms = chance(r, 20) ? 0 : below(r, 3000);
	random_ids(r, s);
	for (uint32_t i = 0; i < s->n; i++)
		random_campaign(r, s, i);
	if (chance(r, 35) && s->n < NC) {
		struct fairshare_campaign *d = &s->c[s->n];

		*d = (struct fairshare_campaign){ .id = "direct",
						  .running = below(r, 3),
						  .waiting = below(r, 3),
						  .ceiling = FAIRSHARE_UNLIMITED,
						  .agent = FAIRSHARE_NO_AGENT,
						  .direct = true };
		s->n++;
	}
	for (uint32_t i = 0; i < s->n; i++) {
		running += s->c[i].running;
		if (!s->c[i].direct && s->c[i].agent != FAIRSHARE_NO_AGENT)
			s->agent_running[s->c[i].agent] += s->c[i].running;
	}
	for (uint32_t a = 0; a < s->org.n_agents; a++)
		s->agent_running[a] += chance(r, 70) ? 0 : below(r, 3);
	s->org.system_running = running + below(r, 5);
	s->org.system_limit = chance(r, 20) ? s->org.system_running + below(r, 4) : 200;
}

static void compare(const struct scenario *s, const struct fairshare_result *out,
		    const struct fairshare_summary *sum, const struct oracle_result *o,
		    const struct oracle_summary *os)
{
	double fluid[NC];

	for (uint32_t i = 0; i < s->n; i++) {
		double want = (double)o[i].fluid_units / (double)o[i].units_per_line;

		fluid[i] = out[i].fluid;
		CHECK(s, out[i].active == o[i].active);
		CHECK(s, out[i].need == o[i].need);
		CHECK(s, fabs(out[i].fluid - want) < 1e-9);
		CHECK(s, out[i].floor == o[i].floor);
		CHECK(s, out[i].carry.deficit == o[i].deficit);
		CHECK(s, out[i].shortfall == o[i].shortfall);
		CHECK(s, out[i].effective_limit == o[i].effective_limit);
		CHECK(s, out[i].available_now == o[i].available_now);
		CHECK(s, out[i].reserved_for_other_campaigns == o[i].reserved);
		CHECK(s, out[i].limited_by == o[i].limited_by);
		CHECK(s, out[i].limited_by_value == o[i].limited_by_value);
	}
	CHECK(s, sum->active_campaigns == os->active);
	CHECK(s, sum->floors_total == os->floors_total);
	CHECK(s, sum->direct_reserve == os->direct_reserve);
	CHECK(s, sum->shortfall_total == os->shortfall_total);
	CHECK(s, oracle_check_maxmin(&s->org, s->c, s->n, fluid) == NULL);
}

static void *work_new(size_t *size)
{
	*size = fairshare_work_size(NC, NA);
	return test_malloc(*size);
}

static void random_states_match_oracle(void **state)
{
	struct rng r = { 20240501 };
	size_t size;
	void *work = work_new(&size);
	unsigned saturated = 0, grouped = 0;

	for (int t = 0; t < N_STATES; t++) {
		struct scenario s;
		struct fairshare_result out[NC];
		struct fairshare_summary sum;
		struct oracle_result o[NC];
		struct oracle_summary os;

		random_scenario(&r, &s);
		assert_int_equal(fairshare_recompute(&s.org, s.c, s.n, out, &sum, work, size), 0);
		CHECK(&s, oracle_recompute(&s.org, s.c, s.n, o, &os) == 0);
		compare(&s, out, &sum, o, &os);
		saturated += sum.floors_total == s.org.org_limit;
		grouped += s.org.per_agent < s.org.org_limit;
	}
	/* The generator reaches the interesting regions. */
	assert_true(saturated > N_STATES / 5);
	assert_true(grouped > N_STATES / 5);
	test_free(work);
}

/* ---- sequences ---- */

struct call {
	uint32_t campaign;
	uint32_t agent;
};

struct seq {
	struct scenario sc;
	struct fairshare_gate g;
	struct fairshare_gate_campaign gc[NC];
	struct fairshare_gate_agent ga[NA];
	struct fairshare_system sys;
	uint32_t other_orgs; /* system calls of other organisations */
	struct call calls[MAX_CALLS];
	uint32_t n_calls;
	uint32_t floors[NC];
	uint64_t version;
	uint64_t expire; /* installed floors count until then */
	uint64_t now;
	uint64_t last_refresh;
	uint32_t k;
	uint32_t direct;
	bool fixed_direct_agent; /* direct dials all name direct_agent (pump tests) */
	uint32_t direct_agent;	 /* FAIRSHARE_NO_AGENT unless a test sets one */
	void *work;
	size_t work_size;
};

static uint32_t count_running(const struct seq *q, uint32_t c)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < q->n_calls; i++)
		n += q->calls[i].campaign == c;
	return n;
}

static uint32_t count_agent(const struct seq *q, uint32_t a)
{
	uint32_t n = 0;

	for (uint32_t i = 0; i < q->n_calls; i++)
		n += q->calls[i].agent == a;
	return n;
}

/* Brings the scenario's running counts in line with the model's calls (for recompute). */
static void sync_counts(struct seq *q)
{
	for (uint32_t i = 0; i < q->sc.n; i++)
		q->sc.c[i].running = count_running(q, i);
	for (uint32_t a = 0; a < q->sc.org.n_agents; a++)
		q->sc.agent_running[a] = count_agent(q, a);
	q->sc.org.system_running = q->other_orgs + q->n_calls;
	q->sc.c[q->direct].waiting = q->k;
}

static void oracle_state(const struct seq *q, struct oracle_gate *o)
{
	*o = (struct oracle_gate){
		.system_limit = q->sys.limit,
		.system_running = q->other_orgs + q->n_calls,
		.org_limit = q->sc.org.org_limit,
		.per_agent = q->sc.org.per_agent,
		.enforced = q->sc.org.enforced,
		.floors_valid = q->version > 0 && q->now < q->expire,
		.k = q->k,
		.n = q->sc.n,
		.direct = q->direct,
		.n_agents = q->sc.org.n_agents,
	};
	for (uint32_t i = 0; i < q->sc.n; i++) {
		o->running[i] = count_running(q, i);
		o->floor[i] = q->version ? q->floors[i] : 0;
		o->ceiling[i] = q->sc.c[i].ceiling;
		o->agent[i] = q->sc.c[i].direct ? FAIRSHARE_NO_AGENT : q->sc.c[i].agent;
	}
	for (uint32_t a = 0; a < q->sc.org.n_agents; a++)
		o->agent_running[a] = count_agent(q, a);
}

static void check_aggregates(const struct seq *q)
{
	uint64_t shortfall = 0, agent_short[NA] = { 0 };

	CHECK(&q->sc, q->g.org_running == q->n_calls);
	CHECK(&q->sc, q->sys.running == q->other_orgs + q->n_calls);
	CHECK(&q->sc, q->g.direct_waiting == q->k);
	for (uint32_t i = 0; i < q->sc.n; i++) {
		uint32_t run = count_running(q, i), f = q->version ? q->floors[i] : 0;

		CHECK(&q->sc, q->gc[i].running == run);
		CHECK(&q->sc, q->gc[i].floor == f);
		if (i == q->direct || f <= run)
			continue;
		shortfall += f - run;
		if (q->gc[i].agent != FAIRSHARE_NO_AGENT)
			agent_short[q->gc[i].agent] += f - run;
	}
	CHECK(&q->sc, q->g.shortfall == shortfall);
	for (uint32_t a = 0; a < q->sc.org.n_agents; a++) {
		CHECK(&q->sc, q->ga[a].running == count_agent(q, a));
		CHECK(&q->sc, q->ga[a].shortfall == agent_short[a]);
	}
}

static void seq_init(struct seq *q, struct rng *r, void *work, size_t size)
{
	struct fairshare_gate_limits lim;

	memset(q, 0, sizeof(*q));
	do {
		random_scenario(r, &q->sc);
	} while (q->sc.n >= NC || q->sc.c[q->sc.n - 1].direct);
	/* Every sequence has a direct pseudo-campaign (last), no calls yet, fresh carries. */
	q->direct = q->sc.n++;
	q->sc.c[q->direct] = (struct fairshare_campaign){ .id = "direct",
							  .ceiling = FAIRSHARE_UNLIMITED,
							  .agent = FAIRSHARE_NO_AGENT,
							  .direct = true };
	for (uint32_t i = 0; i < q->sc.n; i++) {
		q->sc.c[i].carry = (struct fairshare_carry){ 0 };
		q->gc[i] = (struct fairshare_gate_campaign){ .ceiling = q->sc.c[i].ceiling,
							     .agent = q->sc.c[i].direct
									      ? FAIRSHARE_NO_AGENT
									      : q->sc.c[i].agent };
	}
	q->other_orgs = below(r, 4);
	q->sys = (struct fairshare_system){ .limit = chance(r, 25) ? q->other_orgs + 6 : 1000,
					    .running = q->other_orgs };
	lim = (struct fairshare_gate_limits){ q->sc.org.org_limit, q->sc.org.per_agent,
					      q->sc.org.enforced };
	assert_int_equal(fairshare_gate_init(&q->g, &lim, q->gc, q->sc.n, q->direct, q->ga,
					     q->sc.org.n_agents),
			 0);
	q->work = work;
	q->work_size = size;
	q->now = 1000;
	q->direct_agent = FAIRSHARE_NO_AGENT;
	sync_counts(q);
}

static void refresh(struct seq *q)
{
	struct fairshare_result out[NC];
	struct fairshare_summary sum;
	struct oracle_result o[NC];
	struct oracle_summary os;

	sync_counts(q);
	q->sc.org.elapsed_ms = q->version ? q->now - q->last_refresh : 0;
	q->sc.org.system_limit = q->sys.limit;
	assert_int_equal(
		fairshare_recompute(&q->sc.org, q->sc.c, q->sc.n, out, &sum, q->work, q->work_size),
		0);
	CHECK(&q->sc, oracle_recompute(&q->sc.org, q->sc.c, q->sc.n, o, &os) == 0);
	compare(&q->sc, out, &sum, o, &os);
	for (uint32_t i = 0; i < q->sc.n; i++) {
		q->floors[i] = out[i].floor;
		q->sc.c[i].carry = out[i].carry;
	}
	assert_int_equal(
		fairshare_gate_install(&q->g, q->version + 1, q->floors, q->sc.n, q->now, 10000),
		0);
	q->version++;
	q->expire = q->now + 10000;
	q->last_refresh = q->now;
}

static void check_limits_after_admission(const struct seq *q, const struct call *c)
{
	uint32_t cap = q->sc.org.per_agent;

	CHECK(&q->sc, q->sys.running <= q->sys.limit);
	if (!q->sc.org.enforced)
		return;
	CHECK(&q->sc, q->n_calls <= q->sc.org.org_limit);
	if (cap != FAIRSHARE_UNLIMITED && cap < q->sc.org.org_limit &&
	    c->agent != FAIRSHARE_NO_AGENT)
		CHECK(&q->sc, count_agent(q, c->agent) <= cap);
	if (c->campaign != q->direct && q->sc.c[c->campaign].ceiling != FAIRSHARE_UNLIMITED)
		CHECK(&q->sc, count_running(q, c->campaign) <= q->sc.c[c->campaign].ceiling);
}

/* One admission attempt, decided by the gate and by the oracle; true when admitted. */
static bool attempt(struct seq *q, uint32_t campaign, uint32_t agent)
{
	struct fairshare_slot slot = { campaign, agent };
	struct fairshare_decision want, got;
	struct oracle_gate o;

	oracle_state(q, &o);
	want = oracle_admit(&o, campaign, agent);
	assert_int_equal(fairshare_gate_try(&q->g, &q->sys, &slot, q->now, &got), 0);
	CHECK(&q->sc, got.admitted == want.admitted);
	CHECK(&q->sc, got.level == want.level);
	CHECK(&q->sc, got.reason == want.reason);
	CHECK(&q->sc, got.fcfs == want.fcfs);
	if (!got.admitted)
		return false;
	assert_true(q->n_calls < MAX_CALLS);
	q->calls[q->n_calls++] = (struct call){ campaign, agent };
	check_limits_after_admission(q, &q->calls[q->n_calls - 1]);
	if (campaign == q->direct && q->k > 0) {
		assert_int_equal(fairshare_gate_direct_unwait(&q->g), 0);
		q->k--;
	}
	return true;
}

static uint32_t slot_agent(struct seq *q, struct rng *r, uint32_t c)
{
	if (c == q->direct && q->fixed_direct_agent)
		return q->direct_agent;
	if (c != q->direct)
		return q->gc[c].agent;
	return chance(r, 30) ? FAIRSHARE_NO_AGENT : below(r, q->sc.org.n_agents);
}

static void release_one(struct seq *q, struct rng *r)
{
	uint32_t i;
	struct fairshare_slot slot;

	if (q->n_calls == 0)
		return;
	i = below(r, q->n_calls);
	slot = (struct fairshare_slot){ q->calls[i].campaign, q->calls[i].agent };
	assert_int_equal(fairshare_gate_release(&q->g, &q->sys, &slot), 0);
	q->calls[i] = q->calls[--q->n_calls];
}

/* A duplicated terminal event for a campaign with nothing running must change nothing. */
static void release_idle(struct seq *q, struct rng *r)
{
	uint32_t c = below(r, q->sc.n);
	struct fairshare_slot slot = { c, q->gc[c].agent };

	if (count_running(q, c) == 0)
		assert_int_equal(fairshare_gate_release(&q->g, &q->sys, &slot), -ERANGE);
}

static void change_limits(struct seq *q, struct rng *r)
{
	struct fairshare_gate_limits lim;
	uint32_t c = below(r, q->sc.n);

	switch (below(r, 4)) {
	case 0:
		q->sc.org.org_limit = 1 + below(r, 12);
		break;
	case 1:
		q->sc.org.per_agent = chance(r, 40) ? FAIRSHARE_UNLIMITED : 1 + below(r, 12);
		break;
	case 2:
		q->sc.org.enforced = !q->sc.org.enforced;
		break;
	default:
		if (c == q->direct)
			return;
		q->sc.c[c].ceiling = chance(r, 40) ? FAIRSHARE_UNLIMITED : below(r, 10);
		assert_int_equal(fairshare_gate_set_ceiling(&q->g, c, q->sc.c[c].ceiling), 0);
		return;
	}
	lim = (struct fairshare_gate_limits){ q->sc.org.org_limit, q->sc.org.per_agent,
					      q->sc.org.enforced };
	assert_int_equal(fairshare_gate_set_limits(&q->g, &lim), 0);
}

static void change_demand(struct seq *q, struct rng *r)
{
	uint32_t c = below(r, q->sc.n);

	if (c == q->direct)
		return;
	if (chance(r, 30)) {
		enum fairshare_state st = q->sc.c[c].state;

		q->sc.c[c].state = st == FAIRSHARE_RUNNING ? FAIRSHARE_PAUSED : FAIRSHARE_RUNNING;
		return;
	}
	q->sc.c[c].waiting = chance(r, 50) ? 0 : below(r, 4);
	q->sc.c[c].due = chance(r, 30) ? 0 : below(r, 30);
}

static void direct_wait(struct seq *q, struct rng *r)
{
	if (q->k > 0 && chance(r, 40)) {
		assert_int_equal(fairshare_gate_direct_unwait(&q->g), 0);
		q->k--;
	} else {
		assert_int_equal(fairshare_gate_direct_wait(&q->g), 0);
		q->k++;
	}
}

static void stale_install(struct seq *q)
{
	uint32_t junk[NC] = { 0 };

	assert_int_equal(fairshare_gate_install(&q->g, q->version, junk, q->sc.n, q->now, 10000),
			 -ESTALE);
}

static void one_event(struct seq *q, struct rng *r)
{
	uint32_t p = below(r, 100), c = below(r, q->sc.n);

	if (p < 38)
		attempt(q, c, slot_agent(q, r, c));
	else if (p < 62)
		release_one(q, r);
	else if (p < 66)
		release_idle(q, r);
	else if (p < 74)
		change_demand(q, r);
	else if (p < 78)
		change_limits(q, r);
	else if (p < 88)
		refresh(q);
	else if (p < 90)
		stale_install(q);
	else if (p < 95)
		q->now += chance(r, 15) ? 10000 + below(r, 5000) : below(r, 2000);
	else
		direct_wait(q, r);
}

static void random_sequences_keep_aggregates(void **state)
{
	struct rng r = { 777 };
	size_t size;
	void *work = work_new(&size);
	static struct seq q;
	uint64_t fcfs = 0, admitted = 0, refused_fair = 0;

	for (int s = 0; s < N_SEQUENCES; s++) {
		seq_init(&q, &r, work, size);
		for (int e = 0; e < SEQ_EVENTS; e++) {
			one_event(&q, &r);
			check_aggregates(&q);
		}
		fcfs += q.g.stats.fcfs;
		admitted += q.g.stats.admitted;
		refused_fair += q.g.stats.refused[FAIRSHARE_LEVEL_FAIR_SHARE];
	}
	assert_true(fcfs > 100 && admitted > 10000 && refused_fair > 1000);
	test_free(work);
}

/* Admits in random order while anyone can be admitted; left[] is each campaign's backlog. */
static void pump(struct seq *q, struct rng *r, uint32_t *left)
{
	bool any = true;

	while (any) {
		uint32_t order[NC];

		any = false;
		for (uint32_t i = 0; i < q->sc.n; i++)
			order[i] = i;
		for (uint32_t i = q->sc.n; i > 1; i--) {
			uint32_t j = below(r, i), t = order[i - 1];

			order[i - 1] = order[j];
			order[j] = t;
		}
		for (uint32_t t = 0; t < q->sc.n; t++) {
			uint32_t c = order[t];

			if (left[c] == 0 || q->sc.c[c].state != FAIRSHARE_RUNNING)
				continue;
			if (attempt(q, c, slot_agent(q, r, c))) {
				left[c]--;
				any = true;
			}
		}
	}
}

static void backlog_state(struct seq *q, struct rng *r, uint32_t *left)
{
	for (uint32_t i = 0; i < q->sc.n; i++) {
		left[i] = 0;
		if (i == q->direct) {
			q->k = below(r, 3);
			left[i] = q->k;
			for (uint32_t j = 0; j < q->k; j++)
				assert_int_equal(fairshare_gate_direct_wait(&q->g), 0);
		} else if (q->sc.c[i].state == FAIRSHARE_RUNNING && chance(r, 85)) {
			q->sc.c[i].due = 100;
			left[i] = 100;
		} else {
			q->sc.c[i].waiting = q->sc.c[i].due = 0;
		}
	}
}

/* Work conservation stated from C5's definitions alone, without asking the gate or the oracle
 * why anything was refused. After a pump (nobody more admitted), for every campaign c still
 * holding backlog: either one of c's own levels is full (system, organisation, its agent when
 * it gates, its ceiling), or every free org line is accounted for by a named claim that is not
 * c's: a batch campaign d short of its floor (shortfall(d) lines) that could still dial or is
 * held by a full level of its own, or, for a batch c, the waiting direct dials' reserve. A
 * claimant that could dial and is short of its floor must itself be held by the direct reserve,
 * else the pump left a line idle that the rule gives it. Direct dials name an agent. */
static bool own_level_full(const struct seq *q, uint32_t c, uint32_t agent)
{
	uint32_t cap = q->sc.org.per_agent;
	bool gates = cap != FAIRSHARE_UNLIMITED && cap < q->sc.org.org_limit;

	if (q->sys.running >= q->sys.limit || q->n_calls >= q->sc.org.org_limit)
		return true;
	if (gates && agent != FAIRSHARE_NO_AGENT && count_agent(q, agent) >= cap)
		return true;
	return c != q->direct && q->sc.c[c].ceiling != FAIRSHARE_UNLIMITED &&
	       count_running(q, c) >= q->sc.c[c].ceiling;
}

static uint32_t direct_claim(const struct seq *q)
{
	uint32_t fd = q->floors[q->direct] > 1 ? q->floors[q->direct] : 1;

	return q->k < fd ? q->k : fd;
}

/* Free org lines claimed by others than c; fails when a claimant could dial but was left idle
 * although no direct reserve holds the free lines. */
static uint64_t claims_of_others(const struct seq *q, uint32_t c, const uint32_t *left,
				 uint64_t free)
{
	uint64_t claims = c == q->direct ? 0 : direct_claim(q);

	for (uint32_t d = 0; d < q->sc.n; d++) {
		uint32_t run = count_running(q, d);

		if (d == c || d == q->direct || q->floors[d] <= run)
			continue;
		claims += q->floors[d] - run;
		if (left[d] > 0 && !own_level_full(q, d, q->gc[d].agent))
			CHECK(&q->sc, free <= direct_claim(q));
	}
	return claims;
}

static void check_work_conserving(struct seq *q, const uint32_t *left)
{
	uint64_t free = q->sc.org.org_limit - q->n_calls;

	for (uint32_t c = 0; c < q->sc.n; c++) {
		uint32_t agent = c == q->direct ? q->direct_agent : q->gc[c].agent;

		if (left[c] == 0 || q->sc.c[c].state != FAIRSHARE_RUNNING ||
		    own_level_full(q, c, agent))
			continue;
		/* A direct dial below max(1, floor(direct)) has first claim: never left waiting. */
		if (c == q->direct)
			CHECK(&q->sc, count_running(q, c) >= (q->floors[c] > 1 ? q->floors[c] : 1));
		CHECK(&q->sc, free <= claims_of_others(q, c, left, free));
	}
}

static void pump_is_work_conserving(void **state)
{
	struct rng r = { 4242 };
	size_t size;
	void *work = work_new(&size);
	static struct seq q;
	uint32_t left[NC];

	for (int s = 0; s < 20000; s++) {
		seq_init(&q, &r, work, size);
		q.fixed_direct_agent = true;
		q.direct_agent = chance(&r, 30) ? FAIRSHARE_NO_AGENT : below(&r, q.sc.org.n_agents);
		q.sc.org.enforced = true;
		assert_int_equal(
			fairshare_gate_set_limits(
				&q.g, &(struct fairshare_gate_limits){ q.sc.org.org_limit,
								       q.sc.org.per_agent, true }),
			0);
		backlog_state(&q, &r, left);
		refresh(&q);
		pump(&q, &r, left);
		check_work_conserving(&q, left);
		check_aggregates(&q);
	}
	test_free(work);
}

/* Ends the calls that were running at install time one by one, admitting after each; then the
 * direct calls started meanwhile. Every backlogged batch campaign ends at or above its floor. */
/* Ends one call holding `slot` (calls with the same slot are interchangeable), then refills. */
static void end_call(struct seq *q, struct rng *r, uint32_t *left, struct fairshare_slot slot)
{
	uint32_t j = 0;

	while (q->calls[j].campaign != slot.campaign || q->calls[j].agent != slot.agent)
		j++;
	assert_int_equal(fairshare_gate_release(&q->g, &q->sys, &slot), 0);
	q->calls[j] = q->calls[--q->n_calls];
	pump(q, r, left);
}

/* Ends the direct dials started meanwhile (one-off calls), refilling after each. */
static void end_direct_calls(struct seq *q, struct rng *r, uint32_t *left)
{
	for (uint32_t i = 0; i < q->n_calls;) {
		if (q->calls[i].campaign != q->direct) {
			i++;
			continue;
		}
		end_call(q, r, left, (struct fairshare_slot){ q->direct, q->calls[i].agent });
	}
}

static void floors_reached_as_calls_end(void **state)
{
	struct rng r = { 99 };
	size_t size;
	void *work = work_new(&size);
	static struct seq q;
	static struct call original[MAX_CALLS];
	uint32_t left[NC], start;

	for (int s = 0; s < 20000; s++) {
		seq_init(&q, &r, work, size);
		q.fixed_direct_agent = true;
		q.sc.org.enforced = true;
		q.sys.limit = 1000;
		fairshare_gate_set_limits(&q.g, &(struct fairshare_gate_limits){ q.sc.org.org_limit,
										 q.sc.org.per_agent,
										 true });
		backlog_state(&q, &r, left);
		/* An arbitrary running mix first (floors expired: first come first served). */
		pump(&q, &r, left);
		refresh(&q);
		start = q.n_calls;
		memcpy(original, q.calls, start * sizeof(original[0]));
		for (uint32_t i = 0; i < start; i++)
			end_call(
				&q, &r, left,
				(struct fairshare_slot){ original[i].campaign, original[i].agent });
		end_direct_calls(&q, &r, left);
		for (uint32_t c = 0; c < q.sc.n; c++)
			if (c != q.direct && left[c] > 0 && q.sc.c[c].state == FAIRSHARE_RUNNING)
				CHECK(&q.sc, count_running(&q, c) >= q.floors[c]);
	}
	test_free(work);
}

/* n backlogged campaigns on L < n lines, random refresh intervals: over many refreshes every
 * campaign's time-averaged floor tracks its fluid share, deficits stay bounded and nobody is
 * held at 0 for longer than about 1/fluid refreshes. */
static void rounding_rotates(void **state)
{
	struct rng r = { 31337 };
	enum { N = 40, STEPS = 3000 };
	struct fairshare_campaign c[N];
	struct fairshare_result out[N];
	char ids[N][8];
	size_t size = fairshare_work_size(N, 1);
	void *work = test_malloc(size);

	for (int trial = 0; trial < 30; trial++) {
		uint32_t n = 2 + below(&r, N - 1), L = 1 + below(&r, n);
		struct fairshare_org org = { .system_limit = 1000,
					     .org_limit = L,
					     .enforced = true,
					     .per_agent = FAIRSHARE_UNLIMITED };
		double line_ms[N] = { 0 }, total_ms = 0;
		uint32_t zero_run[N] = { 0 }, worst_run = 0;

		for (uint32_t i = 0; i < n; i++) {
			snprintf(ids[i], sizeof(ids[i]), "c%02u", i);
			c[i] = (struct fairshare_campaign){ .id = ids[i],
							    .due = 1000,
							    .ceiling = FAIRSHARE_UNLIMITED,
							    .agent = FAIRSHARE_NO_AGENT };
		}
		for (int step = 0; step < STEPS; step++) {
			assert_int_equal(fairshare_recompute(&org, c, n, out, NULL, work, size), 0);
			org.elapsed_ms = 500 + below(&r, 1001);
			total_ms += org.elapsed_ms;
			for (uint32_t i = 0; i < n; i++) {
				c[i].carry = out[i].carry;
				line_ms[i] += out[i].floor * (double)org.elapsed_ms;
				zero_run[i] = out[i].floor ? 0 : zero_run[i] + 1;
				worst_run = zero_run[i] > worst_run ? zero_run[i] : worst_run;
				/* |deficit| stays within about two refresh intervals of a line. */
				assert_true(llabs(out[i].carry.deficit) <= 3 * 1500 * 1000);
			}
		}
		for (uint32_t i = 0; i < n; i++)
			assert_true(fabs(line_ms[i] / total_ms - (double)L / n) < 0.01);
		/* fluid = L/n: a campaign at 0 gains L/n per refresh, so it waits ~n/L refreshes.
		 */
		assert_true(worst_run <= 3 * n / L + 3);
	}
	test_free(work);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(random_states_match_oracle),
		cmocka_unit_test(random_sequences_keep_aggregates),
		cmocka_unit_test(pump_is_work_conserving),
		cmocka_unit_test(floors_reached_as_calls_end),
		cmocka_unit_test(rounding_rotates),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
