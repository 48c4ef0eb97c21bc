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
 * A client that goes away while its dial waits: the HTTP server has no callback for it, so a
 * timer polls http_request_aborted() every CALL_ABORT_POLL_MS while the dial waits and cancels
 * the dial (the dialer's cancel: the waiter is withdrawn, no call is placed, an admission in
 * flight that comes back admitted is released, never dialled). A request whose client has
 * already gone when its handler runs submits no dial. The flag is set only while the server reads
 * the connection: after a Connection: close request it does not, and the dial runs to its end.
 */
#include "api_int.h"

#include "e164.h"
#include "json_strict.h"
#include "log.h"
#include "pg_pool.h"

#include <libpq-fe.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CALL_BODY_MAX	    4096
#define CALL_LIST_DEFAULT   50
#define CALL_LIST_MAX	    100
#define CALL_UUID_LEN	    36
#define CALL_QUERY_VALUE    96 /* the longest query value accepted, decoded */
#define CALL_CURSOR_MAX	    64
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

static bool id_ok(const char *s)
{
	size_t n = 0;

	for (; s[n]; n++)
		if (!((s[n] >= 'a' && s[n] <= 'z') || (s[n] >= 'A' && s[n] <= 'Z') ||
		      (s[n] >= '0' && s[n] <= '9') || s[n] == '_' || s[n] == '-'))
			return false;
	return n >= 1 && n < API_ID_SIZE;
}

/* A uuid in its 8-4-4-4-12 hex form (what calls.id prints). */
static bool uuid_ok(const char *s)
{
	for (size_t i = 0; i < CALL_UUID_LEN; i++) {
		bool dash = i == 8 || i == 13 || i == 18 || i == 23;
		char ch = s[i];

		if (dash ? ch != '-'
			 : !((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') ||
			     (ch >= 'A' && ch <= 'F')))
			return false;
	}
	return s[CALL_UUID_LEN] == '\0';
}

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

struct create {
	struct api_call *c;
	char agent[API_ID_SIZE];
	char to[E164_BUF];
	char from[E164_BUF];
	char call[CALL_UUID_LEN + 1];
	char state[16];
	uint64_t waited_ms;
};

/* Answers 422 "<field> <what>" (what ends the sentence). */
static void field_error(struct api_call *c, const char *field, const char *what)
{
	char msg[256];

	snprintf(msg, sizeof(msg), "%.64s %s", field, what);
	api_error(c, 422, "invalid_field", msg);
}

/* Reads the string field name into out: 0, or answers 422 and returns -1. A field that may be
 * absent (optional) leaves out empty. */
static int string_field(struct api_call *c, const cJSON *body, const char *name, bool optional,
			const cJSON **out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, name);

	*out = NULL;
	if (!v || cJSON_IsNull(v)) {
		if (optional)
			return 0;
		field_error(c, name, "is missing: it is required.");
		return -1;
	}
	if (!cJSON_IsString(v)) {
		field_error(c, name, "must be a string.");
		return -1;
	}
	*out = v;
	return 0;
}

static int number_field(struct api_call *c, const cJSON *v, const char *name, char *out)
{
	enum e164_fault f;
	char why[160];

	if (e164_normalise(v->valuestring, strlen(v->valuestring), out, E164_BUF, &f)) {
		snprintf(why, sizeof(why), "is not a phone number in E.164 form: %s.",
			 e164_fault_str(f));
		field_error(c, name, why);
		return -1;
	}
	return 0;
}

/* Checks the body and fills k; answers (400/404/422) and returns -1 when it is refused. */
static int create_body(struct api_call *c, struct create *k)
{
	static const char *const known[] = { "agent_id", "to_number", "from_number" };
	char err[JSON_STRICT_ERR];
	size_t len;
	const char *text = http_request_body(c->req, &len);
	cJSON *b = json_strict_parse(text, len, err, sizeof(err));
	const cJSON *agent, *to, *from, *f;
	int rc = -1;

	if (!b) {
		api_error(c, 400, "invalid_json", err);
		return -1;
	}
	if (!cJSON_IsObject(b)) {
		api_error(c, 422, "invalid_field",
			  "The body must be a JSON object with agent_id and to_number.");
		goto out;
	}
	cJSON_ArrayForEach(f, b)
	{
		size_t i = 0;

		while (i < sizeof(known) / sizeof(known[0]) && strcmp(f->string, known[i]))
			i++;
		if (i == sizeof(known) / sizeof(known[0])) {
			field_error(c, f->string,
				    "is not a field of a call: send agent_id, to_number and "
				    "optionally from_number.");
			goto out;
		}
	}
	if (string_field(c, b, "agent_id", false, &agent) ||
	    string_field(c, b, "to_number", false, &to) ||
	    string_field(c, b, "from_number", true, &from))
		goto out;
	if (!agent->valuestring[0]) {
		field_error(c, "agent_id", "must not be empty.");
		goto out;
	}
	if (number_field(c, to, "to_number", k->to) ||
	    (from && number_field(c, from, "from_number", k->from)))
		goto out;
	if (!id_ok(agent->valuestring)) { /* no agent can have that id: as an unknown one */
		api_not_found(c, "agent", agent->valuestring);
		goto out;
	}
	snprintf(k->agent, sizeof(k->agent), "%s", agent->valuestring);
	rc = 0;
out:
	cJSON_Delete(b);
	return rc;
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

/* ---- the dial's wait: the handle kept, the client polled ---- */

#define CALL_ABORT_POLL_MS 100

struct dial_wait {
	struct create *k;
	void *handle; /* the dialer's, until dial_done() or the cancel */
	uv_timer_t poll;
	bool submitted;
};

static void dial_wait_closed(uv_handle_t *h)
{
	free(h->data);
}

static void dial_wait_end(struct dial_wait *w)
{
	uv_timer_stop(&w->poll);
	uv_close((uv_handle_t *)&w->poll, dial_wait_closed);
}

/* The client went away while its dial waits: the dial is cancelled (its callback never comes),
 * the call answered into the void (api_error() frees it). */
static void dial_wait_poll(uv_timer_t *t)
{
	struct dial_wait *w = t->data;
	struct create *k = w->k;

	if (!w->submitted || !http_request_aborted(k->c->req))
		return;
	api_dialer(k->c->api)->cancel(w->handle);
	api_error(k->c, 503, "unavailable", "The client has gone.");
	free(k);
	dial_wait_end(w);
}

static void dial_done(const struct api_dial_result *r, void *data)
{
	struct dial_wait *w = data;
	struct create *k = w->k;
	struct api_call *c = k->c;

	dial_wait_end(w);

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
	struct dial_wait *w;
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
	if (!(w = calloc(1, sizeof(*w)))) {
		free(k);
		unavailable(c, "Out of memory; retry shortly.");
		return;
	}
	w->k = k;
	w->poll.data = w;
	uv_timer_init(api_loop(c->api), &w->poll);
	uv_timer_start(&w->poll, dial_wait_poll, CALL_ABORT_POLL_MS, CALL_ABORT_POLL_MS);
	if ((rc = d->submit(d->ctx, &req, dial_done, w, &w->handle)) == 0) {
		w->submitted = true;
	} else {
		dial_wait_end(w);
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

	if (!id || !uuid_ok(id)) { /* no call has that id: as an unknown one */
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
static const char *const params[P_N] = { "state",    "campaign_id", "batch_id",
					 "agent_id", "cursor",	    "limit" };

struct list {
	struct api_call *c;
	char v[P_N][CALL_QUERY_VALUE + 1];
	bool set[P_N];
	char cur_us[24], cur_id[CALL_UUID_LEN + 1], limit1[24];
	long limit;
};

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* Percent-decodes (and '+' as a space) the n bytes at s into out (CALL_QUERY_VALUE + 1).
 * Returns 0, or -EINVAL for a bad escape, a NUL, or a value too long. */
static int decode(const char *s, size_t n, char *out)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		int ch = (unsigned char)s[i];

		if (ch == '%') {
			int hi = i + 2 < n ? hexval(s[i + 1]) : -1;
			int lo = hi >= 0 ? hexval(s[i + 2]) : -1;
			if (lo < 0)
				return -EINVAL;
			ch = hi * 16 + lo;
			i += 2;
		} else if (ch == '+') {
			ch = ' ';
		}
		if (!ch || o == CALL_QUERY_VALUE)
			return -EINVAL;
		out[o++] = (char)ch;
	}
	out[o] = '\0';
	return 0;
}

static void bad_param(struct api_call *c, const char *name, const char *why)
{
	char msg[256];

	snprintf(msg, sizeof(msg), "Query parameter %.40s %s.", name, why);
	api_error(c, 422, "invalid_parameter", msg);
}

/* Splits the query into l->v; answers 422 and returns -1 for an unknown or repeated name or a
 * value that does not decode. */
static int list_query(struct api_call *c, struct list *l)
{
	const char *q = http_request_query(c->req);

	while (*q) {
		const char *amp = strchr(q, '&'), *end = amp ? amp : q + strlen(q);
		const char *eq = memchr(q, '=', (size_t)(end - q));
		size_t nlen = (size_t)((eq ? eq : end) - q);
		int p = 0;

		if (nlen) {
			while (p < P_N && (strlen(params[p]) != nlen || memcmp(q, params[p], nlen)))
				p++;
			if (p == P_N) {
				char name[48];
				snprintf(name, sizeof(name), "%.*s", (int)(nlen < 40 ? nlen : 40),
					 q);
				bad_param(c, name,
					  "is unknown: filter by state, campaign_id, batch_id or "
					  "agent_id, page with cursor and limit");
				return -1;
			}
			if (l->set[p]) {
				bad_param(c, params[p], "appears twice");
				return -1;
			}
			l->set[p] = true;
			if (decode(eq ? eq + 1 : end, eq ? (size_t)(end - eq - 1) : 0, l->v[p])) {
				bad_param(c, params[p], "is not a valid value");
				return -1;
			}
		}
		q = amp ? amp + 1 : end;
	}
	return 0;
}

/* Checks the parameters' values; answers 422 and returns -1 when one is refused. */
static int list_check(struct api_call *c, struct list *l)
{
	static const char *const states[] = { "dialing", "live", "ended", "unknown" };
	char *end;

	if (l->set[P_STATE]) {
		size_t i = 0;
		while (i < 4 && strcmp(l->v[P_STATE], states[i]))
			i++;
		if (i == 4) {
			bad_param(c, "state", "must be one of dialing, live, ended, unknown");
			return -1;
		}
	}
	for (int p = P_CAMPAIGN; p <= P_AGENT; p++)
		if (l->set[p] && !id_ok(l->v[p])) {
			bad_param(c, params[p], "is not an id ([A-Za-z0-9_-], 1 to 64 characters)");
			return -1;
		}
	l->limit = CALL_LIST_DEFAULT;
	if (l->set[P_LIMIT]) {
		errno = 0;
		l->limit = strtol(l->v[P_LIMIT], &end, 10);
		if (errno || end == l->v[P_LIMIT] || *end || l->v[P_LIMIT][0] == '+' ||
		    l->v[P_LIMIT][0] == '-' || l->limit < 1 || l->limit > CALL_LIST_MAX) {
			char why[80];
			snprintf(why, sizeof(why), "must be an integer from 1 to %d",
				 CALL_LIST_MAX);
			bad_param(c, "limit", why);
			return -1;
		}
	}
	if (l->set[P_CURSOR]) { /* <microseconds>_<uuid>, as next_cursor gave it */
		const char *cur = l->v[P_CURSOR], *us = strchr(cur, '_');
		size_t n = us ? (size_t)(us - cur) : 0;
		bool ok = n >= 1 && n <= 18 && uuid_ok(us + 1); /* 18 digits: a bigint */

		for (size_t i = 0; ok && i < n; i++)
			ok = cur[i] >= '0' && cur[i] <= '9';
		if (!ok) {
			bad_param(c, "cursor", "is not a cursor this API gave (next_cursor)");
			return -1;
		}
		snprintf(l->cur_us, sizeof(l->cur_us), "%.*s", (int)n, cur);
		snprintf(l->cur_id, sizeof(l->cur_id), "%s", us + 1);
	}
	snprintf(l->limit1, sizeof(l->limit1), "%ld", l->limit + 1);
	return 0;
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
	int n = PQntuples(res), shown = n > l->limit ? (int)l->limit : n;
	cJSON *b = cJSON_CreateObject(), *arr = cJSON_AddArrayToObject(b, "calls");

	for (int i = 0; arr && i < shown; i++) {
		cJSON *o = call_json(res, i);
		if (!o || !cJSON_AddItemToArray(arr, o)) {
			cJSON_Delete(o);
			arr = NULL;
		}
	}
	if (n > l->limit) { /* one more row exists: the page ends at the last one shown */
		char cur[CALL_CURSOR_MAX];
		snprintf(cur, sizeof(cur), "%s_%s", PQgetvalue(res, shown - 1, 14),
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
	if (list_query(c, l) || list_check(c, l)) {
		free(l);
		return;
	}
	const char *v[8] = { c->key.org.id,
			     l->set[P_STATE] ? l->v[P_STATE] : NULL,
			     l->set[P_CAMPAIGN] ? l->v[P_CAMPAIGN] : NULL,
			     l->set[P_BATCH] ? l->v[P_BATCH] : NULL,
			     l->set[P_AGENT] ? l->v[P_AGENT] : NULL,
			     l->set[P_CURSOR] ? l->cur_us : NULL,
			     l->set[P_CURSOR] ? l->cur_id : NULL,
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
