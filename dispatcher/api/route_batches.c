/* Batches (SPEC R6, issue 10 item 4): create (JSON), upload (CSV), list, read, stop, pause,
 * resume.
 *
 * Read (GET /v2/batches, GET /v2/batches/{batch_id}) and control (stop / pause / resume) are
 * here; every statement names the key's organisation, so another organisation's batch is 404.
 *
 * Control takes no body, or an empty JSON object (batch_body_control(): what a JSON client sends
 * with a POST), checked before anything else. Control is one statement per request: the batch row locked, its status moved, and its
 * undialled contacts moved in the same transaction through contacts_batch_state_idx — pause:
 * pending -> held; resume: held -> pending; stop: pending and held -> cancelled. Contacts a
 * worker has claimed are the worker's: migration 0015 NOTIFYs every worker at commit and each
 * hands its claimed contacts of the batch back at once (held when paused, cancelled when
 * stopped: dispatcher/worker/select.h, select_dispatch_notify()); the call-row write refuses
 * any contact of a batch that is not active, so nothing of it is dialled after the commit but a
 * write already running. Calls in flight finish; their contact then goes to done / failed, or,
 * where it would be retried, to held (paused) or cancelled (stopped) — call_end.c. A resume
 * NOTIFYs too (migration 0016): the workers re-propose their waiting admissions of the
 * organisation once they have claimed the batch's contacts.
 *
 * Transitions: stop from active or paused (final); pause from active; resume from paused. The
 * same request again is a 200 that changes nothing (a retried request after a lost answer);
 * anything else — pause, resume or stop of a stopped or completed batch — is 409. A batch is
 * "completed" when it is active and none of its contacts can be dialled again (none pending,
 * claimed, dialing, live or held); the status is derived on read, never written.
 */
#include "api_int.h"

#include "batch_body.h"
#include "ident.h"
#include "query.h"
#include "pg_pool.h"

#include <libpq-fe.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIST_LIMIT_DEFAULT 50
#define LIST_LIMIT_MAX	   100
/* stop / pause / resume take no body, but an empty JSON object ("{}", what many clients send
 * with a JSON POST) is accepted: up to this many bytes are read, past it the server's 413. */
#define CONTROL_BODY_MAX 4096

/* The derived status of batch b (see the top). */
#define SQL_STATUS                                                                                 \
	"CASE WHEN b.status = 'active' AND NOT EXISTS (SELECT 1 FROM contacts k"                   \
	" WHERE k.batch_id = b.id AND k.state IN ('pending', 'claimed', 'dialing', 'live', "       \
	"'held'))"                                                                                 \
	" THEN 'completed' ELSE b.status::text END"
#define SQL_TS(col) "to_char(" col " AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"

/* Columns 0..7: id, campaign_id, name, status, source, total_contacts, created_at, updated_at;
 * 8: created_at in µs since the epoch (the cursor). $1 org, $2 campaign_id or NULL, $3 status or
 * NULL, $4 cursor µs or NULL, $5 cursor id, $6 rows.
 *
 * One keyset walk of batches_org_list_idx, newest first, stopped by the LIMIT. A status filter
 * is first the stored status (exact for paused and stopped; active for active and completed),
 * so no contact is probed for a batch of another stored status; the derived test (one probe of
 * contacts_batch_state_idx) runs only on stored-active batches when active or completed is
 * asked. Bound (README "GET /v2/batches"): a page walks the organisation's batches older than
 * the cursor until limit + 1 match. */
static const char SQL_LIST[] =
	"SELECT b.id, b.campaign_id, b.name, " SQL_STATUS
	", b.source, b.total_contacts, " SQL_TS("b.created_at") ", " SQL_TS(
		"b.updated_at") ","
				" (extract(epoch FROM b.created_at) * 1000000)::bigint"
				" FROM batches b WHERE b.org_id = $1"
				" AND ($2::text IS NULL OR b.campaign_id = $2)"
				" AND ($3::text IS NULL OR b.status = (CASE $3 WHEN "
				"'completed' THEN 'active' ELSE $3 END)::batch_status)"
				" AND ($4::bigint IS NULL OR (b.created_at, b.id) <"
				" ('epoch'::timestamptz + $4::bigint * interval '1 "
				"microsecond', $5::text))"
				" AND ($3::text IS NULL OR $3 IN ('paused', 'stopped') OR "
				"(" SQL_STATUS ") = $3)"
				" ORDER BY b.created_at DESC, b.id DESC LIMIT $6";

/* Columns 0..7 as SQL_LIST's; 8..15 contacts pending, claimed, dialing, live, done, failed,
 * cancelled, held; 16 the sum of attempts (calls that reached an outcome, D5). One pass over
 * the batch's contacts through contacts_batch_state_idx. $1 org, $2 batch. */
static const char SQL_GET[] =
	"SELECT b.id, b.campaign_id, b.name, CASE WHEN b.status = 'active' AND k.pending + "
	"k.claimed"
	" + k.dialing + k.live + k.held = 0 THEN 'completed' ELSE b.status::text END, b.source,"
	" b.total_contacts, " SQL_TS("b.created_at") ", " SQL_TS(
		"b.updated_at") ","
				" k.pending, k.claimed, k.dialing, k.live, k.done, k.failed, "
				"k.cancelled, k.held, k.attempts"
				" FROM batches b CROSS JOIN LATERAL (SELECT"
				" count(*) FILTER (WHERE c.state = 'pending') AS pending,"
				" count(*) FILTER (WHERE c.state = 'claimed') AS claimed,"
				" count(*) FILTER (WHERE c.state = 'dialing') AS dialing,"
				" count(*) FILTER (WHERE c.state = 'live') AS live,"
				" count(*) FILTER (WHERE c.state = 'done') AS done,"
				" count(*) FILTER (WHERE c.state = 'failed') AS failed,"
				" count(*) FILTER (WHERE c.state = 'cancelled') AS cancelled,"
				" count(*) FILTER (WHERE c.state = 'held') AS held,"
				" coalesce(sum(c.attempts), 0) AS attempts"
				" FROM contacts c WHERE c.batch_id = b.id) k"
				" WHERE b.org_id = $1 AND b.id = $2";

/* A transition: the batch row locked; when its status is one of FROM (and it is not completed)
 * it becomes TO and its contacts in states OLD become NEW. Columns: 0 the status before, 1
 * completed (derived), 2 batches changed (0/1), 3 contacts moved. $1 org, $2 batch. */
#define SQL_TRANSITION(FROM, TO, OLD, NEW)                                                         \
	"WITH b AS (SELECT b.id, b.status::text AS status, (b.status = 'active' AND NOT EXISTS"    \
	" (SELECT 1 FROM contacts k WHERE k.batch_id = b.id"                                       \
	" AND k.state IN ('pending', 'claimed', 'dialing', 'live', 'held'))) AS done"              \
	" FROM batches b WHERE b.org_id = $1 AND b.id = $2 FOR UPDATE OF b),"                      \
	" u AS (UPDATE batches x SET status = '" TO "', updated_at = now() FROM b"                 \
	" WHERE x.id = b.id AND b.status IN (" FROM ") AND NOT b.done RETURNING x.id),"            \
	" m AS (UPDATE contacts c SET state = '" NEW "', updated_at = now() FROM u"                \
	" WHERE c.batch_id = u.id AND c.state IN (" OLD ") RETURNING 1)"                           \
	" SELECT b.status, b.done, (SELECT count(*) FROM u), (SELECT count(*) FROM m) FROM b"

enum ctl { CTL_STOP, CTL_PAUSE, CTL_RESUME };

static const struct {
	const char *verb, *sql, *target; /* target: the status the request asks for */
} ctls[] = {
	[CTL_STOP] = { "stop",
		       SQL_TRANSITION("'active', 'paused'", "stopped", "'pending', 'held'",
				      "cancelled"),
		       "stopped" },
	[CTL_PAUSE] = { "pause", SQL_TRANSITION("'active'", "paused", "'pending'", "held"),
			"paused" },
	[CTL_RESUME] = { "resume", SQL_TRANSITION("'paused'", "active", "'held'", "pending"),
			 "active" },
};

/* ---- one batch ---- */

struct one {
	struct api_call *c;
	char id[API_ID_SIZE];
};

static void add_num(cJSON *o, const char *k, const PGresult *r, int row, int col)
{
	cJSON_AddNumberToObject(o, k, (double)strtoll(PQgetvalue(r, row, col), NULL, 10));
}

/* Columns 0..7 of a row of SQL_LIST or SQL_GET as the batch's object (NULL: out of memory). */
static cJSON *batch_json(const PGresult *r, int row)
{
	cJSON *b = cJSON_CreateObject();

	if (!b)
		return NULL;
	cJSON_AddStringToObject(b, "id", PQgetvalue(r, row, 0));
	cJSON_AddStringToObject(b, "campaign_id", PQgetvalue(r, row, 1));
	cJSON_AddStringToObject(b, "name", PQgetvalue(r, row, 2));
	cJSON_AddStringToObject(b, "status", PQgetvalue(r, row, 3));
	cJSON_AddStringToObject(b, "source", PQgetvalue(r, row, 4));
	add_num(b, "total_contacts", r, row, 5);
	cJSON_AddStringToObject(b, "created_at", PQgetvalue(r, row, 6));
	if (!cJSON_AddStringToObject(b, "updated_at", PQgetvalue(r, row, 7))) {
		cJSON_Delete(b);
		return NULL;
	}
	return b;
}

static void get_done(int status, const struct pg_results *r, void *data)
{
	struct one *q = data;
	struct api_call *c = q->c;

	if (status) {
		free(q);
		api_db_error(c, status, "reading the batch");
		return;
	}
	const PGresult *res = r->res[0];
	if (PQntuples(res) != 1) {
		api_not_found(c, "batch", q->id);
		free(q);
		return;
	}
	free(q);
	cJSON *b = batch_json(res, 0), *p = b ? cJSON_AddObjectToObject(b, "progress") : NULL;
	cJSON *calls = b ? cJSON_AddObjectToObject(b, "calls") : NULL;
	if (!p || !calls) {
		cJSON_Delete(b);
		api_json(c, 200, NULL);
		return;
	}
	static const char *const st[] = { "pending", "claimed", "dialing",   "live",
					  "done",    "failed",	"cancelled", "held" };
	long long n[8], total = 0;
	for (int i = 0; i < 8; i++)
		total += n[i] = strtoll(PQgetvalue(res, 0, 8 + i), NULL, 10);
	long long attempts = strtoll(PQgetvalue(res, 0, 16), NULL, 10);
	cJSON_AddNumberToObject(p, "total", (double)total);
	for (int i = 0; i < 8; i++) {
		cJSON_AddNumberToObject(p, st[i], (double)n[i]);
		if (i == 3) /* claimed + dialing + live, after their three */
			cJSON_AddNumberToObject(p, "in_flight", (double)(n[1] + n[2] + n[3]));
	}
	cJSON_AddNumberToObject(calls, "completed", (double)attempts);
	if (!cJSON_AddNumberToObject(calls, "placed", (double)(attempts + n[2] + n[3]))) {
		cJSON_Delete(b);
		b = NULL;
	}
	api_json(c, 200, b);
}

/* Answers the batch (status 200) and frees c. */
static void answer_batch(struct api_call *c, const char *id)
{
	struct one *q = calloc(1, sizeof(*q));
	const char *v[2] = { c->key.org.id, id };
	struct pg_query pq = { .sql = SQL_GET, .nparams = 2, .values = v };
	int rc;

	if (!q) {
		api_error(c, 503, "unavailable", "Out of memory; retry shortly.");
		return;
	}
	q->c = c;
	snprintf(q->id, sizeof(q->id), "%s", id);
	if ((rc = pg_pool_exec(api_pool(c->api), PG_LANE_NORMAL, &pq, get_done, q))) {
		free(q);
		api_db_error(c, rc, "reading the batch");
	}
}

static void get_batch(struct api_call *c)
{
	const char *id = http_request_param(c->req, "batch_id");

	if (!ident_ok(id)) { /* no batch has such an id */
		api_not_found(c, "batch", id ? id : "");
		return;
	}
	answer_batch(c, id);
}

/* ---- stop / pause / resume ---- */

struct ctl_req {
	struct api_call *c;
	enum ctl k;
	char id[API_ID_SIZE];
};

static void ctl_done(int status, const struct pg_results *r, void *data)
{
	struct ctl_req *q = data;
	struct api_call *c = q->c;
	char msg[256], id[API_ID_SIZE];
	enum ctl k = q->k;

	snprintf(id, sizeof(id), "%s", q->id);
	free(q);
	if (status) {
		api_db_error(c, status, "changing the batch's status");
		return;
	}
	const PGresult *res = r->res[0];
	if (PQntuples(res) != 1) {
		api_not_found(c, "batch", id);
		return;
	}
	const char *was = PQgetvalue(res, 0, 0);
	bool completed = strcmp(PQgetvalue(res, 0, 1), "t") == 0 || strcmp(was, "completed") == 0;
	bool changed = strcmp(PQgetvalue(res, 0, 2), "0") != 0;
	if (changed || (!completed && strcmp(was, ctls[k].target) == 0)) {
		answer_batch(c, id); /* changed, or already so: the same request again */
		return;
	}
	if (completed)
		snprintf(msg, sizeof(msg),
			 "Batch %s is completed: every contact has been dialled or cancelled, so "
			 "there is nothing to %s.",
			 id, ctls[k].verb);
	else if (strcmp(was, "stopped") == 0)
		snprintf(msg, sizeof(msg), "Batch %s is stopped; a stopped batch cannot be %s.", id,
			 k == CTL_PAUSE ? "paused" : "resumed");
	else /* resume of an active batch is handled above; nothing else is left */
		snprintf(msg, sizeof(msg), "Batch %s is %s; it cannot be %s now.", id, was,
			 ctls[k].verb);
	api_error(c, 409, "conflict", msg);
}

static void control(struct api_call *c, enum ctl k)
{
	const char *id = http_request_param(c->req, "batch_id");
	struct ctl_req *q;
	int rc;

	size_t len;
	const char *body = http_request_body(c->req, &len);
	char msg[256];

	if (!ident_ok(id)) {
		api_not_found(c, "batch", id ? id : "");
		return;
	}
	if ((rc = batch_body_control(body, len, msg, sizeof(msg)))) { /* none, or {} */
		api_error(c, rc, rc == 400 ? "bad_request" : "invalid_request", msg);
		return;
	}
	if (!(q = calloc(1, sizeof(*q)))) {
		api_error(c, 503, "unavailable", "Out of memory; retry shortly.");
		return;
	}
	q->c = c;
	q->k = k;
	snprintf(q->id, sizeof(q->id), "%s", id);
	const char *v[2] = { c->key.org.id, id };
	struct pg_query pq = { .sql = ctls[k].sql, .nparams = 2, .values = v };
	if ((rc = pg_pool_exec(api_pool(c->api), PG_LANE_NORMAL, &pq, ctl_done, q))) {
		free(q);
		api_db_error(c, rc, "changing the batch's status");
	}
}

static void stop_batch(struct api_call *c)
{
	control(c, CTL_STOP);
}

static void pause_batch(struct api_call *c)
{
	control(c, CTL_PAUSE);
}

static void resume_batch(struct api_call *c)
{
	control(c, CTL_RESUME);
}

/* ---- the list ---- */

enum { LQ_LIMIT, LQ_CURSOR, LQ_CAMPAIGN, LQ_STATUS, LQ_N };

struct list_q {
	struct query_param p[LQ_N];
	char cursor_us[QUERY_US_SIZE], cursor_id[IDENT_MAX + 1];
	unsigned rows;
};

/* Parses the query into *l (query.h); on a bad one writes the 400 message into msg and returns
 * -EINVAL. */
static int parse_list_query(const char *q, struct list_q *l, char *msg, size_t cap)
{
	static const char *const statuses[] = { "active", "paused", "stopped", "completed" };
	const struct query_param *st = &l->p[LQ_STATUS];
	size_t i = 0;

	*l = (struct list_q){ .p = { [LQ_LIMIT] = { .name = "limit" },
				     [LQ_CURSOR] = { .name = "cursor" },
				     [LQ_CAMPAIGN] = { .name = "campaign_id" },
				     [LQ_STATUS] = { .name = "status" } } };
	if (query_parse(q, l->p, LQ_N, msg, cap) ||
	    query_limit(&l->p[LQ_LIMIT], LIST_LIMIT_DEFAULT, LIST_LIMIT_MAX, &l->rows, msg, cap) ||
	    query_cursor(&l->p[LQ_CURSOR], ident_ok, l->cursor_us, l->cursor_id, msg, cap))
		return -EINVAL;
	if (l->p[LQ_CAMPAIGN].set && !ident_ok(l->p[LQ_CAMPAIGN].value)) {
		snprintf(msg, cap, "Query parameter 'campaign_id' is not a campaign id.");
		return -EINVAL;
	}
	while (st->set && i < 4 && strcmp(st->value, statuses[i]))
		i++;
	if (i == 4) {
		snprintf(msg, cap,
			 "Query parameter 'status' must be one of active, paused, stopped, "
			 "completed.");
		return -EINVAL;
	}
	return 0;
}

struct list_req {
	struct api_call *c;
	unsigned rows;
};

static void list_done(int status, const struct pg_results *r, void *data)
{
	struct list_req *q = data;
	struct api_call *c = q->c;
	unsigned rows = q->rows;

	free(q);
	if (status) {
		api_db_error(c, status, "listing the batches");
		return;
	}
	const PGresult *res = r->res[0];
	int n = PQntuples(res);
	bool more = n > (int)rows;
	cJSON *b = cJSON_CreateObject(), *arr = b ? cJSON_AddArrayToObject(b, "data") : NULL;
	if (!arr) {
		cJSON_Delete(b);
		api_json(c, 200, NULL);
		return;
	}
	if (more)
		n = (int)rows;
	for (int i = 0; i < n; i++) {
		cJSON *it = batch_json(res, i);
		if (!it || !cJSON_AddItemToArray(arr, it)) {
			cJSON_Delete(it);
			cJSON_Delete(b);
			api_json(c, 200, NULL);
			return;
		}
	}
	cJSON_AddBoolToObject(b, "has_more", more);
	if (more) {
		char cur[QUERY_CURSOR_MAX];
		query_cursor_format(cur, PQgetvalue(res, n - 1, 8), PQgetvalue(res, n - 1, 0));
		cJSON_AddStringToObject(b, "next_cursor", cur);
	} else {
		cJSON_AddNullToObject(b, "next_cursor");
	}
	api_json(c, 200, b);
}

static void list_batches(struct api_call *c)
{
	struct list_q l;
	char msg[256], rows[12];
	struct list_req *q;
	int rc;

	if (parse_list_query(http_request_query(c->req), &l, msg, sizeof(msg))) {
		api_error(c, 400, "invalid_parameter", msg);
		return;
	}
	if (!(q = calloc(1, sizeof(*q)))) {
		api_error(c, 503, "unavailable", "Out of memory; retry shortly.");
		return;
	}
	q->c = c;
	q->rows = l.rows;
	snprintf(rows, sizeof(rows), "%u", l.rows + 1); /* one more: is there a next page? */
	const char *v[6] = { c->key.org.id,
			     l.p[LQ_CAMPAIGN].set ? l.p[LQ_CAMPAIGN].value : NULL,
			     l.p[LQ_STATUS].set ? l.p[LQ_STATUS].value : NULL,
			     l.p[LQ_CURSOR].set ? l.cursor_us : NULL,
			     l.p[LQ_CURSOR].set ? l.cursor_id : "",
			     rows };
	struct pg_query pq = { .sql = SQL_LIST, .nparams = 6, .values = v };
	if ((rc = pg_pool_exec(api_pool(c->api), PG_LANE_NORMAL, &pq, list_done, q))) {
		free(q);
		api_db_error(c, rc, "listing the batches");
	}
}

const struct api_route_def api_routes_batches[] = {
	{ .method = "POST",
	  .pattern = "/v2/batches",
	  .max_body = API_BATCH_JSON_BODY_MAX,
	  .bucket = RATELIMIT_CALLS_CREATE,
	  .handler = api_batch_create, /* route_batch_create.c */
	  .summary = "Creates a batch from a JSON body of contacts." },
	{ .method = "POST",
	  .pattern = "/v2/batches/upload",
	  .max_body = API_BATCH_CSV_BODY_MAX,
	  .stream = true,
	  .bucket = RATELIMIT_CALLS_CREATE,
	  .handler = api_batch_upload, /* route_batch_create.c */
	  .summary = "Creates a batch from a CSV file." },
	{ .method = "GET",
	  .pattern = "/v2/batches",
	  .bucket = RATELIMIT_DEFAULT,
	  .handler = list_batches,
	  .summary = "Lists the organisation's batches." },
	{ .method = "GET",
	  .pattern = "/v2/batches/{batch_id}",
	  .bucket = RATELIMIT_DEFAULT,
	  .handler = get_batch,
	  .summary = "One batch and its progress." },
	{ .method = "POST",
	  .pattern = "/v2/batches/{batch_id}/stop",
	  .max_body = CONTROL_BODY_MAX,
	  .bucket = RATELIMIT_DEFAULT,
	  .handler = stop_batch,
	  .summary = "Stops a batch: nothing more is dialled; calls in flight finish." },
	{ .method = "POST",
	  .pattern = "/v2/batches/{batch_id}/pause",
	  .max_body = CONTROL_BODY_MAX,
	  .bucket = RATELIMIT_DEFAULT,
	  .handler = pause_batch,
	  .summary = "Pauses a batch." },
	{ .method = "POST",
	  .pattern = "/v2/batches/{batch_id}/resume",
	  .max_body = CONTROL_BODY_MAX,
	  .bucket = RATELIMIT_DEFAULT,
	  .handler = resume_batch,
	  .summary = "Resumes a paused batch." },
};
const size_t api_routes_batches_n = sizeof(api_routes_batches) / sizeof(api_routes_batches[0]);
