/* GET /v2/user/me (SPEC R5, issue 10 item 3): every field of the source document's example.
 *
 * From the key lookup (api.c, cached): the organisation, the key (developer), plan, tier, the
 * limits and the rate limits. From one PostgreSQL read: the wallet (migration 0013) and the
 * organisation's live calls as the call rows count them. From the gate (one Redis round trip):
 * concurrency.current, the organisation's live count as the gate holds it, in redis mode only:
 * in postgres mode (system_settings.gate_mode, read with the wallet; C11) the call rows are the
 * count and Redis, even when it answers, holds a stale one, so the call rows' count is
 * reported, as it is when the gate cannot answer. The rows counted are those holding a slot:
 * 'dialing', 'live' and 'unknown' (LIVE_STATES of dispatcher/gate/gate_pg_int.h, the set
 * postgres mode's admissions count).
 *
 * concurrency.max = min(org_limit, per_agent_limit) (the source document's effective_max);
 * agent_max = per_agent_limit, or org_limit when unset (it can then never refuse);
 * global_max = the system limit; enforced = concurrency_management_enabled.
 *
 * developer: the schema has no developer entity — a key is its developer. developer.id and
 * developer.key_id are both the key's id, developer.name the key's name (README "The API").
 */
#include "api_int.h"

#include "gate.h"
#include "pg_pool.h"

#include <libpq-fe.h>

#include <stdlib.h>
#include <string.h>

const char api_sql_me[] =
	"SELECT o.wallet_currency, o.wallet_balance, o.wallet_allocated_total, "
	"o.wallet_lifetime_allocated, o.wallet_total_spent, "
	"(SELECT count(*) FROM calls c WHERE c.org_id = o.id"
	" AND c.state IN ('dialing', 'live', 'unknown')), " /* LIVE_STATES (gate_pg_int.h) */
	"(SELECT gate_mode FROM system_settings) "
	"FROM organisations o WHERE o.id = $1";

struct me {
	struct api_call *c;
	char currency[8];
	double wallet[4];
	uint32_t rows_live;
};

static void answer(struct me *m, uint32_t current)
{
	const struct api_key_info *k = &m->c->key;
	const struct api_org *o = &k->org;
	uint32_t agent_max = o->per_agent_limit ? o->per_agent_limit : o->org_limit;
	cJSON *b = cJSON_CreateObject();
	cJSON *dev, *conc, *wal, *rl;

	cJSON_AddStringToObject(b, "organization_id", o->id);
	dev = cJSON_AddObjectToObject(b, "developer");
	cJSON_AddStringToObject(dev, "id", k->id);
	cJSON_AddStringToObject(dev, "name", k->name);
	cJSON_AddStringToObject(dev, "key_id", k->id);
	cJSON_AddStringToObject(dev, "key_preview", k->preview);
	cJSON_AddStringToObject(b, "plan", o->plan);
	cJSON_AddStringToObject(b, "rate_limit_tier", o->rate_limit_tier);
	conc = cJSON_AddObjectToObject(b, "concurrency");
	cJSON_AddNumberToObject(conc, "max", agent_max < o->org_limit ? agent_max : o->org_limit);
	cJSON_AddNumberToObject(conc, "current", current);
	cJSON_AddNumberToObject(conc, "agent_max", agent_max);
	cJSON_AddNumberToObject(conc, "global_max", o->global_limit);
	cJSON_AddBoolToObject(conc, "enforced", o->enforced);
	wal = cJSON_AddObjectToObject(b, "wallet");
	cJSON_AddStringToObject(wal, "currency", m->currency);
	cJSON_AddNumberToObject(wal, "balance", m->wallet[0]);
	cJSON_AddNumberToObject(wal, "allocated_total", m->wallet[1]);
	cJSON_AddNumberToObject(wal, "lifetime_allocated", m->wallet[2]);
	cJSON_AddNumberToObject(wal, "total_spent", m->wallet[3]);
	rl = cJSON_AddObjectToObject(b, "rate_limits");
	cJSON_AddNumberToObject(rl, "default_per_minute", o->rate.per_minute[RATELIMIT_DEFAULT]);
	cJSON_AddNumberToObject(rl, "calls_per_minute", o->rate.per_minute[RATELIMIT_CALLS_CREATE]);
	cJSON_AddNumberToObject(rl, "executions_per_minute",
				o->rate.per_minute[RATELIMIT_EXECUTIONS_LIST]);
	/* A failed add leaves a NULL somewhere: answer 500 rather than a partial body. */
	if (!dev || !conc || !wal || !rl || !cJSON_GetObjectItem(rl, "executions_per_minute")) {
		cJSON_Delete(b);
		b = NULL;
	}
	api_json(m->c, 200, b);
	free(m);
}

static void gate_done(struct gate *g, int status, const struct gate_view *v, void *data)
{
	struct me *m = data;

	(void)g;
	answer(m, status == 0 && v->limits_version ? v->org_running : m->rows_live);
}

static void me_done(int status, const struct pg_results *r, void *data)
{
	struct me *m = data;

	if (status || PQntuples(r->res[0]) != 1) {
		struct api_call *c = m->c;

		free(m);
		if (status)
			api_db_error(c, status, "reading the organisation");
		else
			api_not_found(c, "organisation", c->key.org.id);
		return;
	}
	const PGresult *res = r->res[0];
	snprintf(m->currency, sizeof(m->currency), "%s", PQgetvalue(res, 0, 0));
	for (int i = 0; i < 4; i++)
		m->wallet[i] = strtod(PQgetvalue(res, 0, 1 + i), NULL);
	m->rows_live = (uint32_t)strtoul(PQgetvalue(res, 0, 5), NULL, 10);
	struct gate *g = api_gate(m->c->api);
	if (strcmp(PQgetvalue(res, 0, 6), "redis") != 0 || !g ||
	    gate_read(g, m->c->key.org.id, gate_done, m))
		answer(m, m->rows_live);
}

static void me(struct api_call *c)
{
	struct me *m = calloc(1, sizeof(*m));
	const char *v[1] = { c->key.org.id };
	struct pg_query q = { .stmt = api_stmt_me(c->api), .nparams = 1, .values = v };
	int rc;

	if (!m) {
		api_error(c, 503, "unavailable", "Out of memory; retry shortly.");
		return;
	}
	m->c = c;
	if ((rc = pg_pool_exec(api_pool(c->api), PG_LANE_NORMAL, &q, me_done, m))) {
		free(m);
		api_db_error(c, rc, "reading the organisation");
	}
}

const struct api_route_def api_routes_me[] = {
	{ .method = "GET",
	  .pattern = "/v2/user/me",
	  .bucket = RATELIMIT_DEFAULT,
	  .handler = me,
	  .summary = "The key's organisation, its limits, live concurrency and rate limits." },
};
const size_t api_routes_me_n = sizeof(api_routes_me) / sizeof(api_routes_me[0]);
