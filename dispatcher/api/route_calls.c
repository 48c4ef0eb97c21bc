/* Calls (SPEC C10, issue 10 item 5): the direct dial and the call reads (README "Calls").
 *
 * POST /v2/calls validates the body (strict JSON, E.164), hands the dial to the worker's direct
 * dial through struct api_dialer (api.h: the API never links the worker) and answers once the
 * dial is decided: 201 with the call as GET /v2/calls/{call_id} shows it, the C10 429 after the
 * 5 s wait, 404 for an agent that is not the organisation's, 503 when no dial can be decided.
 *
 * GET /v2/calls lists the organisation's calls newest first, keyset-paginated on
 * (created_at, id) by an opaque cursor; GET /v2/calls/{call_id} reads one. Both read only rows
 * of the key's organisation (the SQL says so), so another organisation's call is a 404.
 *
 * A client that goes away while its dial waits: the HTTP server has no callback for it, so the
 * dial runs to its end (placed if a line frees within the wait, else withdrawn at the 5 s
 * deadline) and its answer is discarded. Nothing polls for it; a request whose client has
 * already gone when its handler runs submits no dial.
 */
#include "api_int.h"
#include "calls_body.h"

#include "e164.h"
#include "ident.h"
#include "log.h"
#include "pg_pool.h"
#include "query.h"

#include <libpq-fe.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CALL_BODY_MAX	    4096
#define CALL_LIST_DEFAULT   50
#define CALL_LIST_MAX	    100
#define CALL_UUID_LEN	    IDENT_UUID_LEN
#define CALL_DIAL_RETRY_S   "1" /* Retry-After of a 503 */
#define CALL_COLUMNS_ISO(x) "to_char(" x " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')"

/* One call's columns: 0 id, 1 state, 2 agent_id, 3 campaign_id, 4 batch_id, 5 contact_id,
 * 6 to_number, 7 from_number, 8 attempt, 9 outcome, 10 outcome_reason, 11 created_at,
 * 12 answered_at, 13 ended_at, 14 created_at in microseconds since the epoch (the cursor). */
#define CALL_SELECT                                                                                                       \
	"SELECT c.id, c.state, c.agent_id, c.campaign_id, ct.batch_id, c.contact_id, "                                    \
	"c.to_number, "                                                                                                   \
	"c.from_number, c.attempt, c.outcome, c.outcome_reason, " CALL_COLUMNS_ISO("c.created_at") ", " CALL_COLUMNS_ISO( \
		"c.answered_at") ", " CALL_COLUMNS_ISO("c.ended_at") ", (extract(epoch FROM "                             \
								     "c.created_at) * "                                   \
								     "1000000)::bigint "                                  \
								     "FROM calls c LEFT JOIN "                            \
								     "contacts ct ON ct.id = "                            \
								     "c.contact_id "

static const char SQL_ONE[] = CALL_SELECT "WHERE c.org_id = $1 AND c.id = $2::uuid";

/* Filters are NULL when absent; the cursor is ($6 microseconds, $7 id). Served by
 * calls_org_created_idx (migration 0014). */
static const char SQL_LIST[] = CALL_SELECT
	"WHERE c.org_id = $1 AND ($2::call_state IS NULL OR c.state = $2::call_state) "
	"AND ($3::text IS NULL OR c.campaign_id = $3) AND ($4::text IS NULL OR ct.batch_id = $4) "
	"AND ($5::text IS NULL OR c.agent_id = $5) "
	"AND ($6::bigint IS NULL OR (c.created_at, c.id) < "
	"('epoch'::timestamptz + $6::bigint * interval '1 microsecond', $7::uuid)) "
	"ORDER BY c.created_at DESC, c.id DESC LIMIT $8";

/* ---- shared checks ---- */

static void add_text(cJSON *o, const char *name, const PGresult *r, int row, int col)
{
	if (PQgetisnull(r, row, col))
		cJSON_AddNullToObject(o, name);
	else
		cJSON_AddStringToObject(o, name, PQgetvalue(r, row, col));
}

/* The call at row of r (columns of CALL_SELECT), as every route shows it. */
static cJSON *call_json(const PGresult *r, int row)
{
	cJSON *o = cJSON_CreateObject();

	if (!o)
		return NULL;
	add_text(o, "id", r, row, 0);
	add_text(o, "state", r, row, 1);
	cJSON_AddBoolToObject(o, "direct", PQgetisnull(r, row, 3));
	add_text(o, "agent_id", r, row, 2);
	add_text(o, "campaign_id", r, row, 3);
	add_text(o, "batch_id", r, row, 4);
	if (PQgetisnull(r, row, 5))
		cJSON_AddNullToObject(o, "contact_id");
	else
		cJSON_AddNumberToObject(o, "contact_id", strtod(PQgetvalue(r, row, 5), NULL));
	add_text(o, "to_number", r, row, 6);
	add_text(o, "from_number", r, row, 7);
	cJSON_AddNumberToObject(o, "attempt", strtod(PQgetvalue(r, row, 8), NULL));
	add_text(o, "outcome", r, row, 9);
	add_text(o, "outcome_reason", r, row, 10);
	add_text(o, "created_at", r, row, 11);
	add_text(o, "answered_at", r, row, 12);
	add_text(o, "ended_at", r, row, 13);
	if (!cJSON_GetObjectItem(o, "ended_at")) { /* an add failed: no partial answer */
		cJSON_Delete(o);
		return NULL;
	}
	return o;
}

/* ---- POST /v2/calls ---- */

_Static_assert(CALLS_BODY_ID_SIZE == API_ID_SIZE, "calls_body.h's ids are the API's");

struct create {
	struct api_call *c;
	char agent[API_ID_SIZE];
	char to[E164_BUF];
	char from[E164_BUF];
	char call[CALL_UUID_LEN + 1];
	char state[16];
	uint64_t waited_ms;
};

/* Checks the body (calls_body.h) and fills k; answers (400/404/422) and returns -1 when it is
 * refused. */
static int create_body(struct api_call *c, struct create *k)
{
	char field[API_ID_SIZE], msg[CALLS_BODY_MSG];
	size_t len;
	const char *text = http_request_body(c->req, &len);
	struct calls_body b;

	switch (calls_body_parse(text, len, &b, field, sizeof(field), msg, sizeof(msg))) {
	case 0:
		snprintf(k->agent, sizeof(k->agent), "%s", b.agent);
		snprintf(k->to, sizeof(k->to), "%s", b.to);
		snprintf(k->from, sizeof(k->from), "%s", b.from);
		return 0;
	case 400:
		api_error(c, 400, "invalid_json", msg);
		return -1;
	case 404: /* no agent can have that id: as an unknown one */
		api_not_found(c, "agent", msg);
		return -1;
	default:
		api_error(c, 422, "invalid_field", msg);
		return -1;
	}
}

static void unavailable(struct api_call *c, const char *message)
{
	http_response_header(c->req, "Retry-After", CALL_DIAL_RETRY_S);
	api_error(c, 503, "unavailable",
		  message ? message : "Direct dials cannot be placed now; retry shortly.");
}

/* The placed call as the database has it now (its state may have moved on from dialing). */
static void placed_read(int status, const struct pg_results *r, void *data)
{
	struct create *k = data;
	cJSON *b = status == 0 && PQntuples(r->res[0]) == 1 ? call_json(r->res[0], 0) : NULL;

	if (!b) { /* placed all the same: answer what the dial said */
		log_warn(LOG_HTTP, "POST /v2/calls: call %s placed, its row unread (%d)", k->call,
			 status);
		if ((b = cJSON_CreateObject())) {
			cJSON_AddStringToObject(b, "id", k->call);
			cJSON_AddStringToObject(b, "state", k->state);
			cJSON_AddBoolToObject(b, "direct", true);
			cJSON_AddStringToObject(b, "agent_id", k->agent);
			cJSON_AddStringToObject(b, "to_number", k->to);
			if (k->from[0])
				cJSON_AddStringToObject(b, "from_number", k->from);
			else
				cJSON_AddNullToObject(b, "from_number");
		}
	}
	if (b)
		cJSON_AddNumberToObject(b, "waited_ms", (double)k->waited_ms);
	api_json(k->c, 201, b);
	free(k);
}

static void busy(struct api_call *c, const struct api_dial_result *r)
{
	cJSON *j = r->busy_body ? cJSON_Parse(r->busy_body) : NULL;
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, "message");

	if (cJSON_IsString(m))
		api_error_1300(c, r->retry_after_s, m->valuestring);
	else
		api_json(c, 429, NULL); /* unreachable: direct_busy_body() always fits */
	cJSON_Delete(j);
}

static void dial_done(const struct api_dial_result *r, void *data)
{
	struct create *k = data;
	struct api_call *c = k->c;

	switch (r->outcome) {
	case API_DIAL_PLACED: {
		const char *v[2] = { c->key.org.id, k->call };
		struct pg_query q = { .sql = SQL_ONE, .nparams = 2, .values = v };

		snprintf(k->call, sizeof(k->call), "%s", r->call ? r->call : "");
		snprintf(k->state, sizeof(k->state), "%s", r->state ? r->state : "dialing");
		snprintf(k->from, sizeof(k->from), "%s", r->from ? r->from : "");
		k->waited_ms = r->waited_ms;
		if (pg_pool_exec(api_pool(c->api), PG_LANE_NORMAL, &q, placed_read, k))
			placed_read(-EIO, &(struct pg_results){ .failed = -1 }, k);
		return;
	}
	case API_DIAL_BUSY:
		busy(c, r);
		break;
	case API_DIAL_NOT_FOUND:
		api_not_found(c, "agent", k->agent);
		break;
	case API_DIAL_UNAVAILABLE:
	default:
		unavailable(c, r->message);
		break;
	}
	free(k);
}

static void create(struct api_call *c)
{
	const struct api_dialer *d = api_dialer(c->api);
	struct create *k;
	void *handle;
	int rc;

	if (!d) {
		unavailable(c, "Direct dials are not placed by this process.");
		return;
	}
	if (!(k = calloc(1, sizeof(*k)))) {
		unavailable(c, "Out of memory; retry shortly.");
		return;
	}
	k->c = c;
	if (create_body(c, k)) {
		free(k);
		return;
	}
	if (http_request_aborted(c->req)) { /* gone before its dial: none is placed */
		free(k);
		api_error(c, 503, "unavailable", "The client has gone.");
		return;
	}
	struct api_dial_req req = { .org = c->key.org.id,
				    .agent = k->agent,
				    .to_number = k->to,
				    .from_number = k->from[0] ? k->from : NULL };
	if ((rc = d->submit(d->ctx, &req, dial_done, k, &handle))) {
		free(k);
		if (rc == -ESHUTDOWN)
			unavailable(c, "This process is shutting down; retry on another.");
		else
			unavailable(c, NULL);
	}
}

/* ---- GET /v2/calls/{call_id} ---- */

struct one {
	struct api_call *c;
	char id[CALL_UUID_LEN + 1];
};

static void one_done(int status, const struct pg_results *r, void *data)
{
	struct one *o = data;
	struct api_call *c = o->c;

	if (status)
		api_db_error(c, status, "reading the call");
	else if (PQntuples(r->res[0]) != 1)
		api_not_found(c, "call", o->id);
	else
		api_json(c, 200, call_json(r->res[0], 0));
	free(o);
}

static void get_one(struct api_call *c)
{
	const char *id = http_request_param(c->req, "call_id");
	struct one *o;
	int rc;

	if (!id || !ident_uuid_ok(id)) { /* no call has that id: as an unknown one */
		api_not_found(c, "call", id ? id : "");
		return;
	}
	if (!(o = calloc(1, sizeof(*o)))) {
		unavailable(c, "Out of memory; retry shortly.");
		return;
	}
	o->c = c;
	snprintf(o->id, sizeof(o->id), "%s", id);
	const char *v[2] = { c->key.org.id, o->id };
	struct pg_query q = { .sql = SQL_ONE, .nparams = 2, .values = v };
	if ((rc = pg_pool_exec(api_pool(c->api), PG_LANE_NORMAL, &q, one_done, o))) {
		free(o);
		api_db_error(c, rc, "reading the call");
	}
}

/* ---- GET /v2/calls ---- */

enum { P_STATE, P_CAMPAIGN, P_BATCH, P_AGENT, P_CURSOR, P_LIMIT, P_N };

struct list {
	struct api_call *c;
	struct query_param p[P_N];
	char cur_us[QUERY_US_SIZE], cur_id[IDENT_MAX + 1], limit1[24];
	unsigned limit;
};

/* Parses and checks the query (query.h); answers 400 invalid_parameter and returns -1 when a
 * parameter is refused. */
static int list_query(struct api_call *c, struct list *l)
{
	static const char *const states[] = { "dialing", "live", "ended", "unknown" };
	static const char *const names[P_N] = { "state",    "campaign_id", "batch_id",
						"agent_id", "cursor",	   "limit" };
	char msg[256];
	size_t i = 0;

	for (int p = 0; p < P_N; p++)
		l->p[p].name = names[p];
	if (query_parse(http_request_query(c->req), l->p, P_N, msg, sizeof(msg)) ||
	    query_limit(&l->p[P_LIMIT], CALL_LIST_DEFAULT, CALL_LIST_MAX, &l->limit, msg,
			sizeof(msg)) ||
	    query_cursor(&l->p[P_CURSOR], ident_uuid_ok, l->cur_us, l->cur_id, msg, sizeof(msg)))
		goto bad;
	while (l->p[P_STATE].set && i < 4 && strcmp(l->p[P_STATE].value, states[i]))
		i++;
	if (i == 4) {
		snprintf(msg, sizeof(msg),
			 "Query parameter 'state' must be one of dialing, live, ended, unknown.");
		goto bad;
	}
	for (int p = P_CAMPAIGN; p <= P_AGENT; p++)
		if (l->p[p].set && !ident_ok(l->p[p].value)) {
			snprintf(msg, sizeof(msg),
				 "Query parameter '%s' is not an id ([A-Za-z0-9_-], 1 to 64 "
				 "characters).",
				 names[p]);
			goto bad;
		}
	snprintf(l->limit1, sizeof(l->limit1), "%u", l->limit + 1);
	return 0;
bad:
	api_error(c, 400, "invalid_parameter", msg);
	return -1;
}

static void list_done(int status, const struct pg_results *r, void *data)
{
	struct list *l = data;
	struct api_call *c = l->c;

	if (status) {
		free(l);
		api_db_error(c, status, "listing the calls");
		return;
	}
	const PGresult *res = r->res[0];
	int n = PQntuples(res), shown = n > (int)l->limit ? (int)l->limit : n;
	cJSON *b = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(b, "calls");

	for (int i = 0; arr && i < shown; i++) {
		cJSON *o = call_json(res, i);
		if (!o || !cJSON_AddItemToArray(arr, o)) {
			cJSON_Delete(o);
			arr = NULL;
		}
	}
	if (n > (int)l->limit) { /* one more row exists: the page ends at the last one shown */
		char cur[QUERY_CURSOR_MAX];
		query_cursor_format(cur, PQgetvalue(res, shown - 1, 14),
				    PQgetvalue(res, shown - 1, 0));
		cJSON_AddStringToObject(b, "next_cursor", cur);
	} else {
		cJSON_AddNullToObject(b, "next_cursor");
	}
	if (!arr || !cJSON_AddNumberToObject(b, "limit", (double)l->limit)) {
		cJSON_Delete(b);
		b = NULL;
	}
	free(l);
	api_json(c, 200, b);
}

static void list(struct api_call *c)
{
	struct list *l = calloc(1, sizeof(*l));
	int rc;

	if (!l) {
		unavailable(c, "Out of memory; retry shortly.");
		return;
	}
	l->c = c;
	if (list_query(c, l)) {
		free(l);
		return;
	}
	const char *v[8] = { c->key.org.id,
			     l->p[P_STATE].set ? l->p[P_STATE].value : NULL,
			     l->p[P_CAMPAIGN].set ? l->p[P_CAMPAIGN].value : NULL,
			     l->p[P_BATCH].set ? l->p[P_BATCH].value : NULL,
			     l->p[P_AGENT].set ? l->p[P_AGENT].value : NULL,
			     l->p[P_CURSOR].set ? l->cur_us : NULL,
			     l->p[P_CURSOR].set ? l->cur_id : NULL,
			     l->limit1 };
	struct pg_query q = { .sql = SQL_LIST, .nparams = 8, .values = v };
	if ((rc = pg_pool_exec(api_pool(c->api), PG_LANE_NORMAL, &q, list_done, l))) {
		free(l);
		api_db_error(c, rc, "listing the calls");
	}
}

const struct api_route_def api_routes_calls[] = {
	{ .method = "POST",
	  .pattern = "/v2/calls",
	  .max_body = CALL_BODY_MAX,
	  .bucket = RATELIMIT_CALLS_CREATE,
	  .handler = create,
	  .summary = "Places a direct dial: waits up to 5 s for a line, else 429." },
	{ .method = "GET",
	  .pattern = "/v2/calls",
	  .bucket = RATELIMIT_EXECUTIONS_LIST,
	  .handler = list,
	  .summary = "Lists the organisation's calls, newest first." },
	{ .method = "GET",
	  .pattern = "/v2/calls/{call_id}",
	  .bucket = RATELIMIT_EXECUTIONS_LIST,
	  .handler = get_one,
	  .summary = "One call." },
};
const size_t api_routes_calls_n = sizeof(api_routes_calls) / sizeof(api_routes_calls[0]);
