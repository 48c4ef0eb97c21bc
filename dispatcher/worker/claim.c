/* The claim: demand scan, claim, hand-back (claim.h). */
#include "claim.h"

#include "error.h"
#include "gate_pg_int.h" /* struct pgarr: the array literals, one helper for the whole tree */
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* $1 nothing. Active campaigns with at least one due pending contact (an EXISTS probe on
 * contacts_dialable_idx per active campaign). */
#define SQL_DEMAND                                                                                 \
	"SELECT c.org_id, o.org_limit, c.id, c.agent_id, a.from_number"                            \
	" FROM campaigns c JOIN organisations o ON o.id = c.org_id"                                \
	" JOIN agents a ON a.org_id = c.org_id AND a.id = c.agent_id"                              \
	" WHERE c.status = 'active' AND EXISTS (SELECT 1 FROM contacts k"                          \
	"  WHERE k.campaign_id = c.id AND k.state = 'pending' AND k.next_attempt_at <= now())"     \
	" ORDER BY c.org_id, c.created_at, c.id"

/* $1 campaign ids, $2 page sizes (arrays), $3 owner, $4 lease ms. One statement: the locking
 * page per campaign (SQL_NEXT_DIALABLE's form, dispatcher/queue_sql.h) and the lease. The ids
 * go to the UPDATE as an array (`= ANY (ARRAY(...))`: primary-key lookups) — as a joined
 * subquery the planner hashed it against a sequential scan of every contact (99 ms for 40 rows
 * at 60,000 contacts). No state re-check: the page's rows are locked with the page's condition
 * (re-checked on the locked version) until this statement commits. */
#define SQL_CLAIM                                                                                  \
	"UPDATE contacts c SET state = 'claimed', lease_owner = $3,"                               \
	" lease_token = nextval('contacts_lease_token_seq'),"                                      \
	" lease_until = now() + make_interval(secs => $4::double precision / 1000),"               \
	" updated_at = now()"                                                                      \
	" WHERE c.id = ANY (ARRAY(SELECT p.id FROM unnest($1::text[], $2::int[])"                  \
	"  AS w(campaign_id, n)"                                                                   \
	"  JOIN campaigns cp ON cp.id = w.campaign_id AND cp.status = 'active'"                    \
	"  CROSS JOIN LATERAL (SELECT k.id FROM contacts k"                                        \
	"   WHERE k.campaign_id = w.campaign_id AND k.state = 'pending'"                           \
	"   AND k.next_attempt_at <= now() ORDER BY k.next_attempt_at, k.id LIMIT w.n"             \
	"   FOR UPDATE OF k SKIP LOCKED) p))"                                                      \
	" RETURNING c.id, c.campaign_id, c.phone, c.attempts, c.lease_token, c.batch_id"

/* $1 contact ids, $2 lease tokens (arrays). Back undialled, nothing charged; cancelled when the
 * batch or the campaign is stopped now, held when either is paused (as the sweep does). */
#define SQL_HAND_BACK                                                                              \
	"UPDATE contacts c SET state = CASE WHEN b.status = 'stopped' OR cp.status = 'stopped'"    \
	" THEN 'cancelled'::contact_state WHEN b.status = 'paused' OR cp.status = 'paused'"        \
	" THEN 'held'::contact_state ELSE 'pending'::contact_state END,"                           \
	" lease_owner = NULL, lease_token = NULL, lease_until = NULL, updated_at = now()"          \
	" FROM unnest($1::bigint[], $2::bigint[]) AS h(id, tok), batches b, campaigns cp"          \
	" WHERE c.id = h.id AND c.state = 'claimed' AND c.lease_token = h.tok"                     \
	" AND b.id = c.batch_id AND cp.id = c.campaign_id"

struct claim {
	struct pg_pool *pool;
	char owner[65];
	char lease_ms[24];
	const struct pg_stmt *demand, *take, *back;
};

struct req {
	struct claim *c;
	void (*cb)(void);
	void *data;
};

int claim_new(struct pg_pool *pool, const struct claim_options *o, struct claim **out)
{
	struct claim *c;
	int rc;

	if (!pool || !o || !out || !o->owner || !*o->owner || strlen(o->owner) > 64 ||
	    o->lease_ms < 1000)
		return -EINVAL;
	if (!(c = calloc(1, sizeof(*c))))
		return -ENOMEM;
	c->pool = pool;
	snprintf(c->owner, sizeof(c->owner), "%s", o->owner);
	snprintf(c->lease_ms, sizeof(c->lease_ms), "%llu", (unsigned long long)o->lease_ms);
	if ((rc = pg_pool_prepare(pool, SQL_DEMAND, 0, &c->demand)) ||
	    (rc = pg_pool_prepare(pool, SQL_CLAIM, 4, &c->take)) ||
	    (rc = pg_pool_prepare(pool, SQL_HAND_BACK, 2, &c->back))) {
		free(c);
		return rc;
	}
	*out = c;
	return 0;
}

void claim_free(struct claim *c)
{
	free(c);
}

static struct req *req_new(struct claim *c, void (*cb)(void), void *data)
{
	struct req *r = malloc(sizeof(*r));

	if (r)
		*r = (struct req){ .c = c, .cb = cb, .data = data };
	return r;
}

static void demand_done(int status, const struct pg_results *r, void *data)
{
	struct req *q = data;
	claim_demand_cb cb = (claim_demand_cb)q->cb;
	struct claim_demand *rows = NULL;
	uint32_t n = 0;

	if (!status) {
		const PGresult *res = r->res[0];
		n = (uint32_t)PQntuples(res);
		if (n && !(rows = calloc(n, sizeof(*rows)))) {
			status = -ENOMEM;
			n = 0;
		}
		for (uint32_t i = 0; i < n; i++) {
			rows[i].org = PQgetvalue(res, (int)i, 0);
			rows[i].org_limit = (uint32_t)strtoul(PQgetvalue(res, (int)i, 1), NULL, 10);
			rows[i].campaign = PQgetvalue(res, (int)i, 2);
			rows[i].agent = PQgetvalue(res, (int)i, 3);
			rows[i].from_number =
				PQgetisnull(res, (int)i, 4) ? NULL : PQgetvalue(res, (int)i, 4);
		}
	}
	cb(q->c, status, status ? NULL : rows, n, q->data);
	free(rows);
	free(q);
}

int claim_demand(struct claim *c, claim_demand_cb cb, void *data)
{
	struct pg_query q = { .stmt = c->demand };
	struct req *r;
	int rc;

	if (!cb)
		return -EINVAL;
	if (!(r = req_new(c, (void (*)(void))cb, data)))
		return -ENOMEM;
	if ((rc = pg_pool_exec(c->pool, PG_LANE_NORMAL, &q, demand_done, r)))
		free(r);
	return rc;
}

static void take_done(int status, const struct pg_results *r, void *data)
{
	struct req *q = data;
	claim_take_cb cb = (claim_take_cb)q->cb;
	struct claim_contact *rows = NULL;
	uint32_t n = 0;

	if (!status) {
		const PGresult *res = r->res[0];
		n = (uint32_t)PQntuples(res);
		if (n && !(rows = calloc(n, sizeof(*rows)))) {
			/* The claims stand: their leases bring them back. */
			log_error(LOG_PG, "claim: out of memory for %u claimed rows", n);
			status = -ENOMEM;
			n = 0;
		}
		for (uint32_t i = 0; i < n; i++) {
			rows[i].id = strtoll(PQgetvalue(res, (int)i, 0), NULL, 10);
			rows[i].campaign = PQgetvalue(res, (int)i, 1);
			rows[i].phone = PQgetvalue(res, (int)i, 2);
			rows[i].attempts = (int32_t)strtol(PQgetvalue(res, (int)i, 3), NULL, 10);
			rows[i].lease_token = strtoll(PQgetvalue(res, (int)i, 4), NULL, 10);
			rows[i].batch = PQgetvalue(res, (int)i, 5);
		}
	}
	cb(q->c, status, status ? NULL : rows, n, q->data);
	free(rows);
	free(q);
}

int claim_take(struct claim *c, const char *const *campaigns, const uint32_t *counts, uint32_t n,
	       claim_take_cb cb, void *data)
{
	struct pgarr ids, cnt;
	struct req *r;
	int rc = -ENOMEM;

	if (!cb || !campaigns || !counts || n == 0 || n > CLAIM_CAMPAIGNS_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		if (!campaigns[i] || counts[i] == 0 || counts[i] > CLAIM_PAGE_MAX)
			return -EINVAL;
	pgarr_init(&ids);
	pgarr_init(&cnt);
	for (uint32_t i = 0; i < n; i++) {
		pgarr_text(&ids, campaigns[i]);
		pgarr_int(&cnt, counts[i], false);
	}
	const char *v[4] = { pgarr_end(&ids), pgarr_end(&cnt), c->owner, c->lease_ms };
	struct pg_query q = { .stmt = c->take, .nparams = 4, .values = v };
	if (v[0] && v[1] && (r = req_new(c, (void (*)(void))cb, data)) &&
	    (rc = pg_pool_exec(c->pool, PG_LANE_NORMAL, &q, take_done, r)))
		free(r);
	pgarr_free(&ids);
	pgarr_free(&cnt);
	return rc;
}

static void back_done(int status, const struct pg_results *r, void *data)
{
	struct req *q = data;
	claim_count_cb cb = (claim_count_cb)q->cb;
	uint64_t n = 0;

	if (!status)
		n = strtoull(PQcmdTuples((PGresult *)r->res[0]), NULL, 10);
	else
		log_warn(LOG_PG, "claim: hand-back failed (%s): the leases bring the contacts back",
			 dsp_strerror(status));
	if (cb)
		cb(q->c, status, n, q->data);
	free(q);
}

int claim_hand_back(struct claim *c, const struct claim_handback *h, uint32_t n, claim_count_cb cb,
		    void *data)
{
	struct pgarr ids, tok;
	struct req *r;
	int rc = -ENOMEM;

	if (!h || n == 0 || n > CLAIM_HANDBACK_MAX)
		return -EINVAL;
	pgarr_init(&ids);
	pgarr_init(&tok);
	for (uint32_t i = 0; i < n; i++) {
		pgarr_int(&ids, h[i].id, false);
		pgarr_int(&tok, h[i].lease_token, false);
	}
	const char *v[2] = { pgarr_end(&ids), pgarr_end(&tok) };
	struct pg_query q = { .stmt = c->back, .nparams = 2, .values = v };
	if (v[0] && v[1] && (r = req_new(c, (void (*)(void))cb, data)) &&
	    (rc = pg_pool_exec(c->pool, PG_LANE_NORMAL, &q, back_done, r)))
		free(r);
	pgarr_free(&ids);
	pgarr_free(&tok);
	return rc;
}
