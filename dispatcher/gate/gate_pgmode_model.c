/* The postgres-mode decision: what the reads under the locks found becomes one organisation's
 * struct fairshare_gate (dispatcher/core/fairshare_gate.h), and every admission of the
 * transaction is decided by fairshare_gate_admit() on it, in order, each admitted one taking
 * its slots in the model before the next is decided. The same decision order as the Redis
 * script (dispatcher/gate/README.md, "Admission"): candidates in the caller's order, the first
 * admitted wins, a refusal that holds for every campaign ends the walk, an unknown campaign is
 * refused right after the system check. */
#include "gate_pgmode_int.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- reads --- */

static uint32_t count_of(const PGresult *res, int row, int col)
{
	unsigned long long v;

	if (PQgetisnull(res, row, col))
		return 0;
	v = strtoull(PQgetvalue(res, row, col), NULL, 10);
	return v > FAIRSHARE_COUNT_MAX ? FAIRSHARE_COUNT_MAX : (uint32_t)v;
}

static uint64_t u64_of(const PGresult *res, int row, int col)
{
	return PQgetisnull(res, row, col) ? 0 : strtoull(PQgetvalue(res, row, col), NULL, 10);
}

/* Bytes to copy columns cols of every row (NUL-terminated, NULLs skipped). */
static size_t bytes_of(const PGresult *res, const int *cols, int ncols)
{
	size_t b = 1;

	for (int i = 0; i < PQntuples(res); i++)
		for (int c = 0; c < ncols; c++)
			b += (size_t)PQgetlength(res, i, cols[c]) + 1;
	return b;
}

static const char *copy_col(char **at, const PGresult *res, int row, int col)
{
	char *s = *at;
	int len = PQgetlength(res, row, col);

	if (PQgetisnull(res, row, col))
		return NULL;
	memcpy(s, PQgetvalue(res, row, col), (size_t)len);
	s[len] = '\0';
	*at = s + len + 1;
	return s;
}

static int parse_counts(struct pgmode_reads *rd, const PGresult *res)
{
	static const int cols[] = { 0, 1 };
	int rows = PQntuples(res);
	char *at;

	rd->counts = calloc(rows ? (size_t)rows : 1, sizeof(*rd->counts));
	rd->counts_str = malloc(bytes_of(res, cols, 2));
	if (!rd->counts || !rd->counts_str)
		return -ENOMEM;
	at = rd->counts_str;
	for (int i = 0; i < rows; i++) {
		rd->counts[i].campaign = copy_col(&at, res, i, 0);
		rd->counts[i].agent = copy_col(&at, res, i, 1);
		rd->counts[i].n = count_of(res, i, 2);
	}
	rd->n_counts = (uint32_t)rows;
	return 0;
}

static int parse_campaigns(struct pgmode_reads *rd, const PGresult *res)
{
	static const int cols[] = { 0, 2 };
	int rows = PQntuples(res);
	char *at;

	rd->camps = calloc(rows ? (size_t)rows : 1, sizeof(*rd->camps));
	rd->camps_str = malloc(bytes_of(res, cols, 2));
	if (!rd->camps || !rd->camps_str)
		return -ENOMEM;
	at = rd->camps_str;
	for (int i = 0; i < rows; i++) {
		struct pgmode_campaign *c = &rd->camps[i];
		c->id = copy_col(&at, res, i, 0);
		c->ceiling = PQgetisnull(res, i, 1) ? FAIRSHARE_UNLIMITED : count_of(res, i, 1);
		c->agent = copy_col(&at, res, i, 2);
		c->floor = count_of(res, i, 3);
	}
	rd->n_camps = (uint32_t)rows;
	return 0;
}

static int parse_registered(struct pgmode_reads *rd, const PGresult *res)
{
	int rows = PQntuples(res);

	rd->registered = calloc(rows ? (size_t)rows : 1, sizeof(*rd->registered));
	if (!rd->registered)
		return -ENOMEM;
	for (int i = 0; i < rows; i++)
		snprintf(rd->registered[i], sizeof(rd->registered[i]), "%s", PQgetvalue(res, i, 0));
	rd->n_registered = (uint32_t)rows;
	return 0;
}

int pgmode_read_parse(struct pgmode_reads *rd, enum stmt_id id, const PGresult *res)
{
	switch (id) {
	case ST_SYSTEM_LOCK:
		if (PQntuples(res) != 1)
			return -EPROTO;
		rd->mode.mode = strcmp(PQgetvalue(res, 0, 0), "postgres") == 0 ? GATE_MODE_POSTGRES
									       : GATE_MODE_REDIS;
		rd->mode.epoch = u64_of(res, 0, 1);
		rd->system_limit = count_of(res, 0, 2);
		return 0;
	case ST_ORG_LOCK:
		rd->org_found = PQntuples(res) == 1;
		if (rd->org_found) {
			rd->org_limit = count_of(res, 0, 0);
			rd->per_agent = count_of(res, 0, 1);
			rd->enforced = PQgetvalue(res, 0, 2)[0] == 't';
		}
		return 0;
	case ST_SCALARS:
		if (PQntuples(res) != 1 || PQnfields(res) != 5)
			return -EPROTO;
		rd->system_running = count_of(res, 0, 0);
		rd->floors_version = u64_of(res, 0, 1);
		rd->floors_left_ms = u64_of(res, 0, 2);
		rd->direct_floor = count_of(res, 0, 3);
		rd->waiting = count_of(res, 0, 4);
		return 0;
	case ST_ORG_COUNTS:
		return PQnfields(res) == 3 ? parse_counts(rd, res) : -EPROTO;
	case ST_CAMPAIGNS:
		return PQnfields(res) == 4 ? parse_campaigns(rd, res) : -EPROTO;
	case ST_WAITERS_OF:
		return parse_registered(rd, res);
	default:
		return 0; /* the budget and the lock answer nothing we need */
	}
}

void pgmode_reads_free(struct pgmode_reads *rd)
{
	free(rd->counts);
	free(rd->counts_str);
	free(rd->camps);
	free(rd->camps_str);
	free(rd->registered);
	*rd = (struct pgmode_reads){ 0 };
}

int pgmode_lits(struct admit_op *op)
{
	pgarr_init(&op->cand_lit);
	pgarr_init(&op->direct_lit);
	for (uint32_t i = 0; i < op->n; i++) {
		const struct req_copy *r = &op->reqs[i];
		if (r->direct) {
			pgarr_text(&op->direct_lit, r->call);
			op->n_direct++;
			continue;
		}
		for (uint32_t j = 0; j < r->n; j++)
			pgarr_text(&op->cand_lit, op->cands[r->first + j].campaign);
	}
	if (!pgarr_end(&op->cand_lit) || !pgarr_end(&op->direct_lit))
		return -ENOMEM;
	return 0;
}

/* --- the model --- */

struct model {
	struct fairshare_gate gate;
	struct fairshare_system sys;
	struct fairshare_gate_campaign *camps; /* rd->camps in order, then the direct one */
	uint32_t direct;
	const char **agent_ids; /* sorted, unique */
	struct fairshare_gate_agent *agents;
	uint32_t n_agents;
	uint32_t *floors;
};

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static uint32_t agent_index(const struct model *m, const char *id)
{
	const char **hit;

	if (!id || !m->n_agents)
		return FAIRSHARE_NO_AGENT;
	hit = bsearch(&id, m->agent_ids, m->n_agents, sizeof(*m->agent_ids), cmp_str);
	return hit ? (uint32_t)(hit - m->agent_ids) : FAIRSHARE_NO_AGENT;
}

static int campaign_index(const struct pgmode_reads *rd, const char *id)
{
	uint32_t lo = 0, hi = rd->n_camps;

	while (lo < hi) { /* rd->camps is sorted by id, bytewise (ORDER BY ... COLLATE "C") */
		uint32_t mid = lo + (hi - lo) / 2;
		int c = strcmp(rd->camps[mid].id, id);
		if (c == 0)
			return (int)mid;
		if (c < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return -1;
}

/* Every agent id the decision can meet: campaigns', live calls', direct dials'. */
static int collect_agents(struct model *m, const struct admit_op *op)
{
	const struct pgmode_reads *rd = &op->rd;
	uint32_t n = 0;

	m->agent_ids = calloc(rd->n_camps + rd->n_counts + op->n_cands + 1, sizeof(char *));
	if (!m->agent_ids)
		return -ENOMEM;
	for (uint32_t i = 0; i < rd->n_camps; i++)
		if (rd->camps[i].agent)
			m->agent_ids[n++] = rd->camps[i].agent;
	for (uint32_t i = 0; i < rd->n_counts; i++)
		if (rd->counts[i].agent)
			m->agent_ids[n++] = rd->counts[i].agent;
	for (uint32_t i = 0; i < op->n; i++)
		if (op->reqs[i].direct && op->cands[op->reqs[i].first].agent)
			m->agent_ids[n++] = op->cands[op->reqs[i].first].agent;
	qsort(m->agent_ids, n, sizeof(*m->agent_ids), cmp_str);
	m->n_agents = 0;
	for (uint32_t i = 0; i < n; i++)
		if (m->n_agents == 0 || strcmp(m->agent_ids[m->n_agents - 1], m->agent_ids[i]))
			m->agent_ids[m->n_agents++] = m->agent_ids[i];
	return 0;
}

static void model_free(struct model *m)
{
	free(m->camps);
	free(m->agent_ids);
	free(m->agents);
	free(m->floors);
}

/* Limits, running counts from the call rows, the installed floors, k. */
static int model_build(struct model *m, struct admit_op *op)
{
	struct pgmode_reads *rd = &op->rd;
	uint32_t nc = rd->n_camps + 1;
	struct fairshare_gate_limits limits = {
		.org_limit = rd->org_limit ? rd->org_limit : 1,
		.per_agent = rd->per_agent ? rd->per_agent : FAIRSHARE_UNLIMITED,
		.enforced = rd->enforced,
	};

	if (collect_agents(m, op))
		return -ENOMEM;
	m->camps = calloc(nc, sizeof(*m->camps));
	m->agents = calloc(m->n_agents + 1, sizeof(*m->agents));
	m->floors = calloc(nc, sizeof(*m->floors));
	if (!m->camps || !m->agents || !m->floors)
		return -ENOMEM;
	m->direct = rd->n_camps;
	for (uint32_t i = 0; i < rd->n_camps; i++) {
		m->camps[i].ceiling = rd->camps[i].ceiling;
		m->camps[i].agent = agent_index(m, rd->camps[i].agent);
		m->floors[i] = rd->camps[i].floor;
	}
	m->camps[m->direct] = (struct fairshare_gate_campaign){ .ceiling = FAIRSHARE_UNLIMITED,
								.agent = FAIRSHARE_NO_AGENT };
	m->floors[m->direct] = rd->direct_floor;
	if (fairshare_gate_init(&m->gate, &limits, m->camps, nc, m->direct, m->agents, m->n_agents))
		return -EPROTO;
	for (uint32_t i = 0; i < rd->n_counts; i++) {
		const struct pgmode_count *c = &rd->counts[i];
		int ci = c->campaign ? campaign_index(rd, c->campaign) : (int)m->direct;
		uint32_t a = agent_index(m, c->agent);

		if (ci >= 0)
			m->camps[ci].running += c->n;
		if (a != FAIRSHARE_NO_AGENT)
			m->agents[a].running += c->n;
		m->gate.org_running += c->n;
	}
	rd->org_running = m->gate.org_running;
	/* Installed after the counts: the install computes the shortfall aggregates from them.
	 * The floors count for floors_left_ms from now (PostgreSQL's clock: now is 0 here). */
	if (rd->floors_version)
		fairshare_gate_install(&m->gate, rd->floors_version, m->floors, nc, 0,
				       rd->floors_left_ms);
	op->floors_valid = fairshare_gate_floors_valid(&m->gate, 0);
	m->gate.direct_waiting = rd->waiting;
	m->sys = (struct fairshare_system){ .limit = rd->system_limit,
					    .running = rd->system_running };
	return 0;
}

static void note(struct gate_pgmode_decision *dec, const struct fairshare_decision *d)
{
	*dec = (struct gate_pgmode_decision){ .level = d->level,
					      .reason = d->reason,
					      .fcfs = d->fcfs };
}

/* Admits d's slot in the model; a count at its maximum refuses at the system level. */
static bool take(struct model *m, const struct fairshare_slot *slot, struct fairshare_decision *d)
{
	if (fairshare_gate_acquire(&m->gate, &m->sys, slot) == 0)
		return true;
	*d = (struct fairshare_decision){ .level = FAIRSHARE_LEVEL_SYSTEM,
					  .reason = FAIRSHARE_REASON_FULL };
	return false;
}

static bool decide_batch(struct model *m, struct admit_op *op, const struct req_copy *r,
			 struct gate_pgmode_result *res)
{
	bool fcfs = op->rd.enforced && !op->floors_valid;

	for (uint32_t j = 0; j < r->n; j++) {
		struct gate_pgmode_decision *dec = &res->decisions[res->n_decisions++];
		int ci = campaign_index(&op->rd, op->cands[r->first + j].campaign);
		struct fairshare_decision d;

		if (ci < 0 && (uint64_t)m->sys.running + 1 > m->sys.limit) {
			*dec = (struct gate_pgmode_decision){ .level = FAIRSHARE_LEVEL_SYSTEM,
							      .reason = FAIRSHARE_REASON_FULL,
							      .fcfs = fcfs };
			return false;
		}
		if (ci < 0) {
			*dec = (struct gate_pgmode_decision){ .level = FAIRSHARE_LEVEL_CAMPAIGN,
							      .fcfs = fcfs,
							      .unknown = true };
			continue;
		}
		struct fairshare_slot slot = { (uint32_t)ci, m->camps[ci].agent };
		fairshare_gate_admit(&m->gate, &m->sys, &slot, 0, &d);
		if (d.admitted && !take(m, &slot, &d))
			d.fcfs = fcfs;
		note(dec, &d);
		if (d.admitted) {
			res->index = (int)j;
			return true;
		}
		if (fairshare_gate_blocks_org(&d))
			return false;
	}
	return false;
}

static bool registered(const struct pgmode_reads *rd, const char *call)
{
	for (uint32_t i = 0; i < rd->n_registered; i++)
		if (strcasecmp(rd->registered[i], call) == 0)
			return true;
	return false;
}

static bool decide_direct(struct model *m, struct admit_op *op, const struct req_copy *r,
			  struct gate_pgmode_result *res)
{
	struct fairshare_slot slot = { m->direct, agent_index(m, op->cands[r->first].agent) };
	struct fairshare_decision d;
	bool was = registered(&op->rd, r->call);

	fairshare_gate_admit(&m->gate, &m->sys, &slot, 0, &d);
	if (d.admitted && !take(m, &slot, &d))
		d.fcfs = op->rd.enforced && !op->floors_valid;
	note(&res->decisions[res->n_decisions++], &d);
	if (d.admitted) {
		res->index = 0;
		if (was && fairshare_gate_direct_unwait(&m->gate) == 0)
			res->waiter = -1;
	} else if (r->wait && !was && fairshare_gate_direct_wait(&m->gate) == 0) {
		res->waiter = 1;
	}
	return d.admitted;
}

int pgmode_decide(struct admit_op *op)
{
	struct model m = { 0 };
	int rc = model_build(&m, op);

	if (!rc) {
		op->wcalls = calloc(op->n, sizeof(*op->wcalls));
		op->wreq = calloc(op->n, sizeof(*op->wreq));
		op->wout = calloc(op->n, sizeof(*op->wout));
		if (!op->wcalls || !op->wreq || !op->wout)
			rc = -ENOMEM;
	}
	for (uint32_t i = 0; !rc && i < op->n; i++) {
		const struct req_copy *r = &op->reqs[i];
		struct gate_pgmode_result *res = &op->results[i];
		bool admitted;

		*res = (struct gate_pgmode_result){ .outcome = GATE_PGMODE_REFUSED,
						    .index = -1,
						    .write = GATE_PG_FAILED };
		admitted = r->direct ? decide_direct(&m, op, r, res) : decide_batch(&m, op, r, res);
		op->g->stats.decisions += res->n_decisions;
		if (!admitted)
			continue;
		struct gate_pg_call *c = &op->wcalls[op->nw];
		*c = (struct gate_pg_call){ .call = r->call,
					    .org = op->org,
					    .dial = op->cands[r->first + (uint32_t)res->index] };
		if (!r->direct)
			c->dial.agent =
				op->rd.camps[campaign_index(&op->rd, c->dial.campaign)].agent;
		op->wreq[op->nw++] = i;
	}
	model_free(&m);
	return rc;
}

int pgmode_wait_params(struct admit_op *op)
{
	for (int k = 0; k < 3; k++)
		pgarr_init(&op->wait_arr[k]);
	for (uint32_t i = 0; i < op->n; i++) {
		const struct req_copy *r = &op->reqs[i];
		const struct gate_pgmode_result *res = &op->results[i];

		if (!r->direct)
			continue;
		if (res->index < 0 && r->wait) {	       /* refused by the rule */
			pgarr_text(&op->wait_arr[0], r->call); /* registers, or refreshes */
			pgarr_text(&op->wait_arr[1], op->cands[r->first].agent);
			op->wait_changes = true;
		} else if (res->waiter < 0) {
			pgarr_text(&op->wait_arr[2], r->call);
			op->wait_changes = true;
		}
	}
	gate_pg_ms(op->wait_ttl, GATE_PGMODE_WAIT_TTL_MS);
	op->wait_values[0] = op->org;
	for (int k = 0; k < 3; k++)
		if (!(op->wait_values[1 + k] = pgarr_end(&op->wait_arr[k])))
			return -ENOMEM;
	op->wait_values[4] = op->wait_ttl;
	return 0;
}
