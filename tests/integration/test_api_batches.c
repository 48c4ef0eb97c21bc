/* Batches, read and control (issue 10 item 4; SPEC R6): GET /v2/batches, GET
 * /v2/batches/{batch_id}, POST /v2/batches/{batch_id}/stop|pause|resume, against `dispatcher
 * run` on a private PostgreSQL and Redis with the provider stub holding calls (hold mode).
 * Batches and contacts are seeded in SQL.
 *
 *  - control_mid_run: o1 (2 lines) dials b1 (c1, 20 contacts) and b3 (c3, 200). With both lines
 *    held and contacts of b1 claimed (waiting for a line), pause b1: its claimed contacts come
 *    back (held) well before the slot wait (20 s here) or the lease (900 s) could bring them;
 *    its pending ones are held; the counts add up. The held calls end: b1's in-flight calls
 *    finish (done), two rounds of freed lines go to b3 only (observed through the stub). Stop
 *    b3 mid-run: its claimed contacts come back cancelled at once, nothing is dialled after.
 *    Before that, resume b1 while b3 holds both lines and the worker's two admissions wait
 *    under c3: once c1's floor is installed (capacity endpoint) one call ends and b1 gets that
 *    line, dialled within SPEC P3's 1 s of the call's end (migration 0016's notification
 *    re-proposes the waiters; without it, b1 waited for the slot wait). Same worker throughout:
 *    pause and resume b1 again, it is dialled again; stop it: every undialled contact
 *    cancelled, nothing dialled after. Transitions: repeats are 200 (idempotent), pause /
 *    resume of a stopped batch 409, everything on a completed batch (b4) 409. Another
 *    organisation's batch is 404 on every route, both ways; 401 without a key.
 *  - control_bodies: stop / pause / resume take no body or {} (with any content type), a
 *    member is 422 naming it, anything else 400, over 4 KiB 413; b9 (o5's, paused) takes them.
 *  - resume_notify_lost: o4 (2 lines) dials b7 (c7) on both lines, held, b8 (c8) paused. Every
 *    connection of the worker is dropped and kept out while b8 is resumed, so migration 0016's
 *    notification is lost; once the worker is back, has claimed b8 and c8's floor is installed,
 *    one held call ends: b8 must get that line within SPEC P3's 1 s (the worker re-proposes its
 *    waiting admissions when its listening connection comes up; without that, the slot wait).
 *  - list_pages: o3's 205 batches (pairs created in the same microsecond) walked with limit 100
 *    (the max: 100 + 100 + 5, newest first, each once, ties broken by id), 99 (below), 101
 *    (above: 400), 0, non-numbers, unknown and repeated parameters, bad cursors (400);
 *    campaign_id and status filters (completed is derived); another organisation's batches
 *    are never listed.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api_test.h"
#include "worker_proc.h"

#define WAIT_MS 60000
/* Resume to b1's first call: a few demand scans (500 ms) and refresher periods (1 s) on a
 * loaded machine; the slot wait (20 s) is what a stall would take. */
#define RESUME_MS 30000

static struct embedded svc;
static struct api_worker w1;
static struct wproc_stub stub;
/* SPEC P3: a campaign reaches its floor within the longest running call + 1 s. The running
 * calls here last until the test ends them: once one ends, a resumed b1 below its floor must be
 * dialled within P3_MS. Had the freed line gone elsewhere, b1 would wait for the next call to end
 * (never here: hold mode) or for its waiters to give up (the slot wait, 20 s). Measured 14–424
 * ms (plain and ASan, up to four tests at once on 2 cores). */
#define P3_MS 1000
static PGconn *db;
static char k1[APIKEY_LEN + 1], k2[APIKEY_LEN + 1], k3[APIKEY_LEN + 1], k4[APIKEY_LEN + 1],
	k5[APIKEY_LEN + 1];

static long long sql_int(const char *fmt, ...)
{
	char q[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(q, sizeof(q), fmt, ap);
	va_end(ap);
	return wproc_sql_int(db, q);
}

/* Waits until the query's value is v; returns the ms it took. */
static long long wait_sql(long long v, const char *q)
{
	long long t0 = fixture_now_ms();

	while (sql_int("%s", q) != v) {
		if (fixture_now_ms() - t0 > WAIT_MS)
			fail_msg("%s: %lld, waited for %lld", q, sql_int("%s", q), v);
		fixture_sleep_ms(20);
	}
	return fixture_now_ms() - t0;
}

static void wait_placed(int n)
{
	long long t0 = fixture_now_ms();

	while (wproc_stat(&stub, "calls_placed") < n) {
		if (fixture_now_ms() - t0 > WAIT_MS) {
			char *st = wproc_stub_http(&stub, "/stats", NULL), cmd[512];
			PGresult *r =
				api_sql(db, "SELECT string_agg(batch_id || ':' || state || '=' ||"
					    " n, ' ') FROM (SELECT batch_id, state, count(*) n"
					    " FROM contacts GROUP BY 1, 2) x");
			print_message("contacts: %s\n", PQgetvalue(r, 0, 0));
			PQclear(r);
			snprintf(cmd, sizeof(cmd),
				 "redis-cli -s %s HGETALL 'dsp:v1:{o:o1}:state' | paste -sd' '; "
				 "redis-cli -s %s HGETALL 'dsp:v1:{o:o1}:bwait' | paste -sd' '",
				 strstr(svc.redis_url, "unix://") + 7,
				 strstr(svc.redis_url, "unix://") + 7);
			if (system(cmd) != 0)
				print_message("no redis-cli\n");
			fail_msg("%d calls never placed: ended %lld, contacts claimed %lld, stub "
				 "%.600s",
				 n, sql_int("SELECT count(*) FROM calls WHERE state = 'ended'"),
				 sql_int("SELECT count(*) FROM contacts WHERE state = 'claimed'"),
				 st);
		}
		fixture_sleep_ms(20);
	}
}

/* One request; *j gets the parsed body when j is not NULL. Returns the status. */
static int call(const char *method, const char *path, const char *key, cJSON **j)
{
	struct raw_response r;
	int st = api_request(w1.port, method, path, key, NULL, NULL, &r);

	if (j)
		*j = api_body(&r);
	raw_response_free(&r);
	return st;
}

static int ctl(const char *batch, const char *verb, const char *key, char *status_out)
{
	char path[128];
	cJSON *j;

	snprintf(path, sizeof(path), "/v2/batches/%s/%s", batch, verb);
	int st = call("POST", path, key, &j);
	if (status_out)
		snprintf(status_out, 32, "%s",
			 st == 200 ? api_str(j, "status") : api_str(j, "error"));
	cJSON_Delete(j);
	return st;
}

static long long calls_of(const char *batch)
{
	return sql_int("SELECT count(*) FROM calls l JOIN contacts c ON c.id = l.contact_id"
		       " WHERE c.batch_id = '%s'",
		       batch);
}

/* Waits until the capacity endpoint reports campaign's guaranteed floor as floor; returns the
 * ms it took. */
static long long wait_floor_as(const char *key, const char *campaign, int floor)
{
	char path[128];
	long long t0 = fixture_now_ms();
	int got = -1;

	snprintf(path, sizeof(path), "/api/v1/campaigns/%s/capacity", campaign);
	for (;;) {
		cJSON *j;
		assert_int_equal(call("GET", path, key, &j), 200);
		got = (int)api_num(j, "fair_share.guaranteed_floor");
		cJSON_Delete(j);
		if (got == floor)
			return fixture_now_ms() - t0;
		if (fixture_now_ms() - t0 > WAIT_MS)
			fail_msg("%s: guaranteed floor %d, waited for %d", campaign, got, floor);
		fixture_sleep_ms(20);
	}
}

static long long wait_floor(const char *campaign, int floor)
{
	return wait_floor_as(k1, campaign, floor);
}

/* One held call of org ends at the stub: batch want, below its floor, must be dialled on that
 * line within P3_MS, and batch other not at all meanwhile. */
static void line_goes_to(const char *what, const char *org, const char *want, const char *other)
{
	PGresult *q = api_sql(db,
			      "SELECT id FROM calls WHERE org_id = '%s' AND state <> 'ended'"
			      " ORDER BY id LIMIT 1",
			      org);
	char end1[128];
	assert_int_equal(PQntuples(q), 1);
	snprintf(end1, sizeof(end1), "{\"idempotency_key\":\"%s\"}", PQgetvalue(q, 0, 0));
	PQclear(q);
	long long want_before = calls_of(want), other_before = calls_of(other);
	long long t1 = fixture_now_ms();
	free(wproc_stub_http(&stub, "/control/end", end1));
	while (calls_of(want) == want_before) {
		if (fixture_now_ms() - t1 > P3_MS)
			fail_msg("%s: %s not dialled within %d ms of a freed line (%s dialled %lld"
				 " meanwhile)",
				 what, want, P3_MS, other, calls_of(other) - other_before);
		fixture_sleep_ms(10);
	}
	assert_int_equal(calls_of(other), other_before); /* the one freed line went to want */
	print_message("%s: %s dialled %lld ms after a line freed\n", what, want,
		      fixture_now_ms() - t1);
}

static long long in_state(const char *batch, const char *state)
{
	return sql_int("SELECT count(*) FROM contacts WHERE batch_id = '%s' AND state = '%s'",
		       batch, state);
}

/* GET the batch: the progress counts add up to its contacts; returns the body. */
static cJSON *get_batch(const char *batch, int contacts)
{
	char path[128];
	cJSON *j;

	snprintf(path, sizeof(path), "/v2/batches/%s", batch);
	assert_int_equal(call("GET", path, k1, &j), 200);
	assert_string_equal(api_str(j, "id"), batch);
	static const char *const st[] = { "pending", "claimed", "dialing",   "live",
					  "done",    "failed",	"cancelled", "held" };
	double sum = 0;
	for (int i = 0; i < 8; i++) {
		char p[64];
		snprintf(p, sizeof(p), "progress.%s", st[i]);
		sum += api_num(j, p);
	}
	assert_int_equal((int)sum, contacts);
	assert_int_equal((int)api_num(j, "progress.total"), contacts);
	assert_int_equal((int)api_num(j, "progress.in_flight"),
			 (int)(api_num(j, "progress.claimed") + api_num(j, "progress.dialing") +
			       api_num(j, "progress.live")));
	return j;
}

/* Ends every held call of o1 at the stub and waits for the freed lines' next n calls. */
static void next_round(int n)
{
	int placed = (int)wproc_stat(&stub, "calls_placed");

	free(wproc_stub_http(&stub, "/control/end", "{\"org_id\":\"o1\"}"));
	wait_placed(placed + n);
}

static void control_mid_run(void **state)
{
	(void)state;
	cJSON *j;
	char st[32];

	/* Both lines busy, b1 contacts claimed and waiting. */
	wait_placed(2);
	wait_sql(1, "SELECT (count(*) > 0)::int FROM contacts WHERE batch_id = 'b1'"
		    " AND state = 'claimed'");
	long long b1_calls = calls_of("b1");

	/* Pause: claimed contacts back (held) at once, pending held. */
	assert_int_equal(ctl("b1", "pause", k1, st), 200);
	assert_string_equal(st, "paused");
	long long ms = wait_sql(0, "SELECT count(*) FROM contacts WHERE batch_id = 'b1'"
				   " AND state IN ('claimed', 'pending')");
	print_message("pause: b1's claimed contacts handed back in %lld ms\n", ms);
	assert_true(ms < 10000); /* the slot wait is 20 s, the lease 900 s */
	b1_calls = calls_of("b1");
	assert_int_equal(in_state("b1", "held") + in_state("b1", "dialing") +
				 in_state("b1", "live") + in_state("b1", "done"),
			 20);
	j = get_batch("b1", 20);
	assert_string_equal(api_str(j, "status"), "paused");
	assert_int_equal((int)api_num(j, "progress.held"), (int)in_state("b1", "held"));
	cJSON_Delete(j);

	/* The calls in flight finish; the freed lines go to b3 only, round after round. */
	long long inflight = in_state("b1", "dialing") + in_state("b1", "live");
	long long done0 = in_state("b1", "done");
	next_round(2);
	next_round(2);
	wait_sql(done0 + inflight, "SELECT count(*) FROM contacts WHERE batch_id = 'b1'"
				   " AND state = 'done'");
	assert_int_equal(calls_of("b1"), b1_calls);
	assert_int_equal(in_state("b1", "claimed"), 0);
	j = get_batch("b1", 20);
	assert_int_equal((int)api_num(j, "calls.completed"), (int)in_state("b1", "done"));
	assert_int_equal((int)api_num(j, "calls.placed"), (int)b1_calls);
	cJSON_Delete(j);

	/* Resume b1 while b3 holds both lines and the worker's two admissions wait under c3 (they
	 * were refused while b1 was paused). The resume is in force once the refresher has installed
	 * c1's floor (1 of o1's 2 lines: the capacity endpoint's guaranteed_floor) and the worker has
	 * claimed b1's contacts (migration 0016's notification then re-proposes the waiters, so they
	 * wait under c1 too). A line freed before that install is decided under the old floors (c1 0,
	 * c3 2) and goes to b3 (C5, C6): the earlier form of this check freed its one line as soon as
	 * b1's contacts were claimed, often before the floor (installed up to 538 ms after the claim
	 * here), and then waited for a second line that hold mode never frees. Now one held call
	 * ends after the install: b1, below its floor, must get that very line (P3_MS). */
	wait_floor("c1", 0); /* paused: the floor the resume must change */
	assert_int_equal(ctl("b1", "resume", k1, st), 200);
	assert_string_equal(st, "active");
	wait_sql(1, "SELECT (count(*) > 0)::int FROM contacts WHERE batch_id = 'b1'"
		    " AND state = 'claimed'");
	ms = wait_floor("c1", 1);
	print_message("resume under load: c1's floor installed %lld ms after b1 was claimed\n", ms);
	assert_int_equal(calls_of("b1"), b1_calls);
	line_goes_to("resume under load", "o1", "b1", "b3");
	/* Pause it again for what follows: its claimed contacts back, its calls finish. */
	assert_int_equal(ctl("b1", "pause", k1, st), 200);
	next_round(1);
	wait_sql(0, "SELECT count(*) FROM contacts WHERE batch_id = 'b1'"
		    " AND state IN ('claimed', 'pending')");
	b1_calls = calls_of("b1");

	/* Stop b3 mid-run: its claimed contacts come back cancelled at once, its undialled ones
	 * are cancelled, its calls in flight finish, nothing more is dialled. */
	wait_sql(1, "SELECT (count(*) > 0)::int FROM contacts WHERE batch_id = 'b3'"
		    " AND state = 'claimed'");
	assert_int_equal(ctl("b3", "stop", k1, st), 200);
	assert_string_equal(st, "stopped");
	ms = wait_sql(0, "SELECT count(*) FROM contacts WHERE batch_id = 'b3'"
			 " AND state IN ('claimed', 'pending', 'held')");
	print_message("stop: b3's claimed contacts handed back in %lld ms\n", ms);
	assert_true(ms < 10000);
	long long b3_calls = calls_of("b3"), placed = (long long)wproc_stat(&stub, "calls_placed");
	free(wproc_stub_http(&stub, "/control/end", "{\"org_id\":\"o1\"}"));
	wait_sql(0, "SELECT count(*) FROM calls WHERE state <> 'ended'");
	fixture_sleep_ms(1500); /* quiet: three demand scans with both lines free */
	assert_int_equal(calls_of("b3"), b3_calls);
	assert_int_equal(calls_of("b1"), b1_calls);
	assert_int_equal((long long)wproc_stat(&stub, "calls_placed"), placed);
	j = get_batch("b3", 200);
	assert_string_equal(api_str(j, "status"), "stopped");
	assert_int_equal((int)api_num(j, "progress.done"), (int)b3_calls);
	assert_int_equal((int)api_num(j, "progress.cancelled"), 200 - (int)b3_calls);
	cJSON_Delete(j);

	/* The same worker: pause again: nothing changes (200); resume: b1 is dialled again
	 * within a few dispatch cycles, not after its waiting admissions (registered under c3
	 * while b1 was paused) give up — the slot wait, 20 s here. */
	assert_int_equal(ctl("b1", "pause", k1, st), 200);
	assert_string_equal(st, "paused");
	assert_int_equal(ctl("b1", "resume", k1, st), 200);
	assert_string_equal(st, "active");
	assert_int_equal(in_state("b1", "held"), 0);
	long long t0 = fixture_now_ms();
	while (calls_of("b1") == b1_calls) {
		if (fixture_now_ms() - t0 > RESUME_MS)
			fail_msg("resume: b1 not dialled within %d ms", RESUME_MS);
		fixture_sleep_ms(20);
	}
	print_message("resume: b1 dialled again after %lld ms\n", fixture_now_ms() - t0);
	assert_int_equal(ctl("b1", "resume", k1, st), 200); /* already active */
	assert_string_equal(st, "active");

	/* Stop b1: every undialled contact cancelled, its calls finish, nothing dialled after. */
	wait_sql(1, "SELECT (count(*) > 0)::int FROM contacts WHERE batch_id = 'b1'"
		    " AND state = 'claimed'");
	assert_int_equal(ctl("b1", "stop", k1, st), 200);
	assert_string_equal(st, "stopped");
	ms = wait_sql(0, "SELECT count(*) FROM contacts WHERE batch_id = 'b1'"
			 " AND state IN ('claimed', 'pending', 'held')");
	print_message("stop: b1's claimed contacts handed back in %lld ms\n", ms);
	b1_calls = calls_of("b1");
	placed = (long long)wproc_stat(&stub, "calls_placed");
	free(wproc_stub_http(&stub, "/control/end", "{\"org_id\":\"o1\"}"));
	wait_sql(0, "SELECT count(*) FROM calls WHERE state <> 'ended'");
	fixture_sleep_ms(1500);
	assert_int_equal(calls_of("b1"), b1_calls);
	assert_int_equal((long long)wproc_stat(&stub, "calls_placed"), placed);
	j = get_batch("b1", 20);
	assert_string_equal(api_str(j, "status"), "stopped");
	assert_true(api_num(j, "progress.cancelled") >= 1);
	assert_int_equal((int)api_num(j, "progress.cancelled") + (int)api_num(j, "progress.done"),
			 20);
	assert_int_equal((int)api_num(j, "progress.done"), (int)b1_calls);
	cJSON_Delete(j);

	/* Transitions. */
	assert_int_equal(ctl("b1", "stop", k1, st), 200); /* stop is final; again: no change */
	assert_string_equal(st, "stopped");
	assert_int_equal(ctl("b1", "pause", k1, st), 409);
	assert_string_equal(st, "conflict");
	assert_int_equal(ctl("b1", "resume", k1, st), 409);
	j = get_batch("b4", 3);
	assert_string_equal(api_str(j, "status"), "completed");
	cJSON_Delete(j);
	assert_int_equal(ctl("b4", "pause", k1, st), 409);
	assert_int_equal(ctl("b4", "resume", k1, st), 409);
	assert_int_equal(ctl("b4", "stop", k1, st), 409);
	struct raw_response r;
	assert_int_equal(api_request(w1.port, "POST", "/v2/batches/b4/pause", k1, NULL, NULL, &r),
			 409);
	assert_non_null(strstr(r.body, "b4 is completed"));
	raw_response_free(&r);

	/* Another organisation's batch: 404 on every route, both ways; ids that cannot exist. */
	const char *verbs[] = { "stop", "pause", "resume" };
	for (int i = 0; i < 3; i++) {
		assert_int_equal(ctl("b3", verbs[i], k2, st), 404);
		assert_string_equal(st, "not_found");
		assert_int_equal(ctl("b2", verbs[i], k1, NULL), 404);
		assert_int_equal(ctl("nope", verbs[i], k1, NULL), 404);
		assert_int_equal(ctl("b%2a", verbs[i], k1, NULL), 404);
	}
	assert_int_equal(call("GET", "/v2/batches/b3", k2, NULL), 404);
	assert_int_equal(call("GET", "/v2/batches/b2", k1, NULL), 404);
	assert_int_equal(call("GET", "/v2/batches/b2", k2, NULL), 200);
	assert_int_equal(call("GET", "/v2/batches/b%2a", k1, NULL), 404);
	assert_int_equal(ctl("b2", "stop", k2, st), 200); /* o2's own: fine */
	assert_int_equal((int)sql_int("SELECT count(*) FROM batches WHERE id = 'b1'"
				      " AND status = 'stopped'"),
			 1); /* o2's key changed nothing of o1's */
	/* Unauthenticated: 401 before anything. */
	assert_int_equal(call("GET", "/v2/batches/b1", NULL, NULL), 401);
	assert_int_equal(ctl("b1", "pause", NULL, NULL), 401);
}

/* The ids of one page, appended to seen (ids[]); returns the next cursor (static) or NULL. */
static const char *page(const char *query, int expect, char ids[][16], int *n_ids)
{
	static char next[160];
	char path[256];
	cJSON *j;

	snprintf(path, sizeof(path), "/v2/batches%s", query);
	assert_int_equal(call("GET", path, k3, &j), 200);
	const cJSON *d = cJSON_GetObjectItemCaseSensitive(j, "data"), *it;
	assert_int_equal(cJSON_GetArraySize(d), expect);
	cJSON_ArrayForEach(it, d)
	{
		snprintf(ids[(*n_ids)++], 16, "%s", api_str(it, "id"));
	}
	const cJSON *more = cJSON_GetObjectItemCaseSensitive(j, "has_more");
	const cJSON *cur = cJSON_GetObjectItemCaseSensitive(j, "next_cursor");
	const char *ret = NULL;
	if (cJSON_IsTrue(more)) {
		assert_true(cJSON_IsString(cur));
		snprintf(next, sizeof(next), "%s", cur->valuestring);
		ret = next;
	} else {
		assert_true(cJSON_IsFalse(more) && cJSON_IsNull(cur));
	}
	cJSON_Delete(j);
	return ret;
}

static void list_pages(void **state)
{
	(void)state;
	static char ids[400][16];
	int n = 0;
	char q[256];

	/* At the max: 100 + 100 + 5, newest first, every batch once. */
	const char *cur = page("?limit=100", 100, ids, &n);
	snprintf(q, sizeof(q), "?limit=100&cursor=%s", cur);
	cur = page(q, 100, ids, &n);
	snprintf(q, sizeof(q), "?cursor=%s&limit=100", cur);
	assert_null(page(q, 5, ids, &n));
	assert_int_equal(n, 205);
	for (int i = 0; i < 205; i++) { /* l205 is the newest; l204 ties with it, id breaks it */
		char want[16];
		snprintf(want, sizeof(want), "l%03d", 205 - i);
		assert_string_equal(ids[i], want);
	}
	/* Below the max, and the default (50). */
	n = 0;
	cur = page("?limit=99", 99, ids, &n);
	snprintf(q, sizeof(q), "?limit=99&cursor=%s", cur);
	page(q, 99, ids, &n);
	assert_string_equal(ids[99], "l106");
	n = 0;
	page("", 50, ids, &n);
	page("?limit=1", 1, ids, &n);
	/* Filters: campaign, status (completed derived: active without an undialled contact). */
	n = 0;
	page("?campaign_id=c6&limit=100", 41, ids, &n);
	n = 0;
	page("?campaign_id=c%36&limit=100", 41, ids, &n); /* values are percent-decoded */
	n = 0;
	page("?status=pa%75sed&limit=100", 20, ids, &n);
	n = 0;
	page("?status=paused&limit=100", 20, ids, &n);
	n = 0;
	page("?status=active", 0, ids, &n);
	n = 0;
	page("?status=completed&campaign_id=c6&limit=100", 21, ids, &n);
	n = 0;
	page("?campaign_id=c1", 0, ids, &n); /* another organisation's campaign: nothing */
	/* Bad queries: 400 naming the parameter. */
	static const struct {
		const char *q, *word;
	} bad[] = {
		{ "?limit=101", "limit" },	 { "?limit=0", "limit" },
		{ "?limit=-1", "limit" },	 { "?limit=1x", "limit" },
		{ "?limit=", "limit" },		 { "?limit=1000000000000", "limit" },
		{ "?limit=5&limit=5", "twice" }, { "?page=2", "page" },
		{ "?status=running", "status" }, { "?campaign_id=c%201", "campaign_id" },
		{ "?cursor=abc", "cursor" },	 { "?cursor=123.", "cursor" },
		{ "?cursor=.l001", "cursor" },	 { "?cursor=12x.l001", "cursor" },
		{ "?cursor=1.l%2a", "cursor" },	 { "?limit=%zz", "limit" },
		{ "?status=", "status" },	 { "?campaign_id=a%00b", "campaign_id" },
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct raw_response r;
		char path[128];
		snprintf(path, sizeof(path), "/v2/batches%s", bad[i].q);
		int st = api_request(w1.port, "GET", path, k3, NULL, NULL, &r);
		if (st != 400 || !strstr(r.body, bad[i].word))
			fail_msg("%s: %d %s", bad[i].q, st, r.body);
		assert_non_null(strstr(r.body, "invalid_parameter"));
		raw_response_free(&r);
	}
	/* o1 sees its own three, never o3's. */
	cJSON *j;
	assert_int_equal(call("GET", "/v2/batches?limit=100", k1, &j), 200);
	assert_int_equal(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(j, "data")), 3);
	cJSON_Delete(j);
}

/* The worker's connections to PostgreSQL (all but the test's own). */
#define WORKER_BACKENDS                                                                            \
	"FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"     \
	" AND backend_type = 'client backend'"

static void resume_notify_lost(void **state)
{
	(void)state;
	char st[32];

	/* o4 (2 lines): b7 (c7) dials on both, held; its next admissions wait under c7 only; b8
	 * (c8) is paused from the start. */
	PQclear(api_sql(db, "INSERT INTO batches (id, org_id, campaign_id, status) VALUES"
			    " ('b7', 'o4', 'c7', 'active'), ('b8', 'o4', 'c8', 'paused')"));
	PQclear(api_sql(db, "INSERT INTO contacts (org_id, campaign_id, batch_id, phone, state)"
			    " SELECT 'o4', c, b, '+1415666' || lpad(i::text, 4, '0'),"
			    " s::contact_state FROM (VALUES ('c7', 'b7', 200, 'pending'),"
			    " ('c8', 'b8', 20, 'held')) v(c, b, n, s), generate_series(1, v.n) i"));
	wait_sql(2, "SELECT count(*) FROM calls WHERE org_id = 'o4' AND state <> 'ended'");
	wait_sql(1, "SELECT (count(*) > 0)::int FROM contacts WHERE batch_id = 'b7'"
		    " AND state = 'claimed'");
	wait_floor_as(k4, "c8", 0);

	/* Every connection of the worker dropped and kept out (the database refuses new ones)
	 * while b8 is resumed by the two updates of the API's resume (its route cannot run: the
	 * worker has no connection): migration 0016's "+o4 c8" reaches nobody. */
	char info[600];
	snprintf(info, sizeof(info), "%s dbname=postgres", svc.database_url);
	PGconn *pdb = PQconnectdb(info); /* the database cannot be altered from itself */
	assert_int_equal(PQstatus(pdb), CONNECTION_OK);
	PQclear(api_sql(pdb, "ALTER DATABASE dispatcher ALLOW_CONNECTIONS false"));
	PQclear(api_sql(db, "SELECT pg_terminate_backend(pid) " WORKER_BACKENDS));
	wait_sql(0, "SELECT count(*) " WORKER_BACKENDS);
	PQclear(api_sql(db, "UPDATE batches SET status = 'active', updated_at = now()"
			    " WHERE id = 'b8'"));
	PQclear(api_sql(db, "UPDATE contacts SET state = 'pending', updated_at = now()"
			    " WHERE batch_id = 'b8' AND state = 'held'"));
	PQclear(api_sql(pdb, "ALTER DATABASE dispatcher ALLOW_CONNECTIONS true"));
	PQfinish(pdb);

	/* The worker reconnects, claims b8 (a demand scan) and the refresher installs c8's floor
	 * (1 of 2 lines); no line is free. One held call ends: b8, below its floor, must get that
	 * line within SPEC P3's 1 s. Without the re-proposal on the listening connection's return
	 * the waiting admissions stay under c7, the freed line is kept for c8's shortfall, and b8
	 * waits for them to give up: the slot wait (20 s). */
	wait_sql(1, "SELECT (count(*) > 0)::int FROM contacts WHERE batch_id = 'b8'"
		    " AND state = 'claimed'");
	long long ms = wait_floor_as(k4, "c8", 1);
	print_message("notification lost: c8's floor installed %lld ms after b8 was claimed\n", ms);
	assert_int_equal(calls_of("b8"), 0);
	line_goes_to("notification lost", "o4", "b8", "b7");
	assert_int_equal(ctl("b7", "stop", k4, st), 200);
	assert_int_equal(ctl("b8", "stop", k4, st), 200);
	free(wproc_stub_http(&stub, "/control/end", "{\"org_id\":\"o4\"}"));
}

/* stop / pause / resume take no body, but a JSON client's {} (requests.post(url, json={}),
 * curl -H 'Content-Type: application/json' -d '{}') is accepted: it was a 413 and closed the
 * connection (issue 10 review), so such a client could never stop its batch. b9 (o5's, paused,
 * two held contacts: nothing of it is dialled) takes each. */
static void control_bodies(void **state)
{
	struct raw_response r;
	char big[5000];
	(void)state;

	static const char *const ok[][2] = { { "application/json", "{}" },
					     { "application/json; charset=utf-8", " { }\r\n" },
					     { "application/x-www-form-urlencoded", "" } };
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		int st = api_request(w1.port, "POST", "/v2/batches/b9/pause", k5, ok[i][0],
				     ok[i][1], &r);
		if (st != 200)
			fail_msg("pause with %s \"%s\": %d %s", ok[i][0], ok[i][1], st, r.body);
		assert_non_null(strstr(r.body, "\"status\":\"paused\""));
		raw_response_free(&r);
	}
	/* A member: 422 naming it (no member is defined; one ignored would hide a mistake). */
	assert_int_equal(api_request(w1.port, "POST", "/v2/batches/b9/resume", k5, NULL,
				     "{\"force\":true}", &r),
			 422);
	assert_non_null(strstr(r.body, "field force is not a field of this route"));
	raw_response_free(&r);
	assert_int_equal(sql_int("SELECT count(*) FROM batches WHERE id = 'b9' AND status = "
				 "'paused'"),
			 1);
	/* Not JSON, or JSON but not an object: 400 saying the route takes no body. */
	assert_int_equal(api_request(w1.port, "POST", "/v2/batches/b9/resume", k5,
				     "application/x-www-form-urlencoded", "force=1", &r),
			 400);
	assert_non_null(strstr(r.body, "This route takes no body: send none, or the empty JSON "
				       "object {}"));
	raw_response_free(&r);
	assert_int_equal(api_request(w1.port, "POST", "/v2/batches/b9/stop", k5, NULL, "[]", &r),
			 400);
	raw_response_free(&r);
	/* Over 4 KiB: the server's 413 naming the limit. */
	memset(big, ' ', sizeof(big) - 3);
	memcpy(big + sizeof(big) - 3, "{}", 3);
	assert_int_equal(api_request(w1.port, "POST", "/v2/batches/b9/stop", k5, NULL, big, &r),
			 413);
	assert_non_null(strstr(r.body, "at most 4096 bytes"));
	raw_response_free(&r);
	/* Another organisation's batch is still 404, whatever the body. */
	assert_int_equal(api_request(w1.port, "POST", "/v2/batches/b9/stop", k1, NULL, "{}", &r),
			 404);
	raw_response_free(&r);
	assert_int_equal(api_request(w1.port, "POST", "/v2/batches/b9/stop", k5, NULL, "{}", &r),
			 200);
	assert_non_null(strstr(r.body, "\"status\":\"stopped\""));
	raw_response_free(&r);
	assert_int_equal(in_state("b9", "cancelled"), 2);
}

static int setup(void **state)
{
	(void)state;
	fixture_start(&svc, true, true, false, true);
	db = fixture_pg(&svc);
	api_make_org(db, "o1", 2, "c1", "c3", NULL);
	api_make_org(db, "o2", 1, "c2", NULL);
	api_make_org(db, "o3", 1, "c5", "c6", NULL);
	api_make_key(db, "o1", "k1", k1, NULL);
	api_make_key(db, "o2", "k2", k2, NULL);
	api_make_key(db, "o3", "k3", k3, NULL);
	api_make_org(db, "o4", 2, "c7", "c8", NULL); /* resume_notify_lost's, no batch until then */
	api_make_key(db, "o4", "k4", k4, NULL);
	api_make_org(db, "o5", 1, "c9", NULL); /* control_bodies': b9 paused, never dialled */
	api_make_key(db, "o5", "k5", k5, NULL);
	PQclear(api_sql(db, "INSERT INTO batches (id, org_id, campaign_id, status) VALUES"
			    " ('b9', 'o5', 'c9', 'paused')"));
	PQclear(api_sql(db, "INSERT INTO contacts (org_id, campaign_id, batch_id, phone, state)"
			    " VALUES ('o5', 'c9', 'b9', '+14155550901', 'held'),"
			    " ('o5', 'c9', 'b9', '+14155550902', 'held')"));
	PQclear(api_sql(db, "INSERT INTO batches (id, org_id, campaign_id, status) VALUES"
			    " ('b1', 'o1', 'c1', 'active'), ('b3', 'o1', 'c3', 'active'),"
			    " ('b4', 'o1', 'c1', 'active'), ('b2', 'o2', 'c2', 'paused')"));
	PQclear(api_sql(db, "INSERT INTO contacts (org_id, campaign_id, batch_id, phone, state)"
			    " SELECT o, c, b, '+1415555' || lpad(i::text, 4, '0'), s::contact_state"
			    " FROM (VALUES ('o1', 'c1', 'b1', 20, 'pending'),"
			    " ('o1', 'c3', 'b3', 200, 'pending'), ('o1', 'c1', 'b4', 3, 'done'),"
			    " ('o2', 'c2', 'b2', 3, 'held')) v(o, c, b, n, s),"
			    " generate_series(1, v.n) i"));
	/* o3: 205 batches without contacts, created in pairs (equal created_at); every tenth
	 * paused, every fifth on c6. */
	PQclear(api_sql(db, "INSERT INTO batches (id, org_id, campaign_id, status, created_at)"
			    " SELECT 'l' || lpad(i::text, 3, '0'), 'o3',"
			    " CASE WHEN i %% 5 = 0 THEN 'c6' ELSE 'c5' END,"
			    " CASE WHEN i %% 10 = 0 THEN 'paused' ELSE 'active' END::batch_status,"
			    " '2024-01-01 00:00:00.000001+00'::timestamptz + (i / 2) * interval"
			    " '1 second' FROM generate_series(1, 205) i"));

	struct stub_config sc;
	char env[64];
	stub_config_defaults(&sc);
	sc.hold = true;
	sc.secret = "secret"; /* api_worker_start's PROVIDER_WEBHOOK_SECRET */
	for (int i = 0; i < STUB_OUTCOMES; i++)
		sc.weights[i] = i == STUB_COMPLETED ? 100 : 0;
	wproc_stub_start(&stub, &sc);
	snprintf(env, sizeof(env), "http://127.0.0.1:%d", stub.port);
	setenv("PROVIDER_URL", env, 1);
	setenv("BATCH_DISPATCH_SLOT_WAIT_SECONDS", "20", 1); /* far above what brings them back */
	setenv("DISPATCHER_LEASE_SECONDS", "900", 1);
	api_worker_start(&w1, "w1");
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (getenv("TEST_KEEP_LOG") && w1.log[0]) { /* debugging: the worker's log */
		char cmd[256];
		snprintf(cmd, sizeof(cmd), "cp %s %s", w1.log, getenv("TEST_KEEP_LOG"));
		if (system(cmd) != 0)
			print_message("could not keep the log\n");
	}
	api_worker_kill(&w1);
	wproc_stub_stop(&stub);
	PQfinish(db);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(control_mid_run),
		cmocka_unit_test(list_pages),
		cmocka_unit_test(control_bodies),
		cmocka_unit_test(resume_notify_lost),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
