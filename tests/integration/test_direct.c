/* Direct dials (issue 10 item 5, SPEC C10): a whole worker in this process (worker_new() on a
 * loop of the test, its connections to a private PostgreSQL and Redis) and the provider stub in
 * a child process, hold mode (calls stay live until the test ends them). Organisations: "of"
 * (2 lines, nothing running), "o1" (2 lines, a campaign of 60 contacts: both lines busy with
 * held batch calls, the rest of its claimed contacts waiting in the gate), "o2" (an agent only).
 *   free_line_placed        a free line: placed, call row with campaign_id NULL, stub has it;
 *   other_org_not_found     an agent of another organisation: NOT_FOUND;
 *   full_org_times_out      all lines busy: BUSY after about 5 s, k back to 0, the 429 body;
 *   cancel_withdraws        a client gone mid-wait: the waiter is withdrawn (k 1 -> 0), no
 *                           callback;
 *   cancel_in_flight_admitted  cancelled while its admission is in flight, then admitted:
 *                           never dialled, its row ended (canceled), its slot released;
 *   freed_line_goes_direct  all lines busy, batch contacts waiting: the line freed by ending a
 *                           call goes to the direct dial (C10 first claim), not to a batch
 *                           waiter;
 *   postgres_cancel_in_flight_withdraws  postgres mode, cancelled while its admission is in
 *                           flight and the withdrawal came before the refusal's commit: the
 *                           waiter row goes at once, not at its 10 s expiry. */
#include "direct.h"
#include "error.h"
#include "fixture.h"
#include "gate.h"
#include "worker.h"

#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/wait.h>
#include <cmocka.h>

#include <hiredis/hiredis.h>

#include "worker_proc.h"

#define WAIT_MS 120000

static struct embedded svc;
static PGconn *db;
static struct wproc_stub stub;
static uv_loop_t loop;
static struct worker *wk;

struct dres {
	int done;
	struct direct_dial_result r;
	char call[40], from[20], message[128];
};

static void dial_cb(struct direct *d, const struct direct_dial_result *r, void *data)
{
	struct dres *x = data;

	(void)d;
	x->done++;
	x->r = *r;
	snprintf(x->call, sizeof(x->call), "%s", r->call ? r->call : "");
	snprintf(x->from, sizeof(x->from), "%s", r->from ? r->from : "");
	snprintf(x->message, sizeof(x->message), "%s", r->message ? r->message : "");
	x->r.call = x->r.from = x->r.message = x->r.state = NULL;
}

static struct direct_dial *submit(const char *org, const char *agent, const char *to,
				  struct dres *x)
{
	struct direct_dial_req req = { .org = org, .agent = agent, .to_number = to };
	struct direct_dial *dd = NULL;

	memset(x, 0, sizeof(*x));
	assert_int_equal(direct_dial_submit(worker_direct(wk), &req, dial_cb, x, &dd), 0);
	assert_non_null(dd);
	return dd;
}

/* --- conditions checked while the worker's loop runs --- */

struct stub_cond {
	const char *path;
	double at_least;
	long long next;
};

static bool stub_reached(void *arg)
{
	struct stub_cond *c = arg;

	if (fixture_now_ms() < c->next)
		return false;
	c->next = fixture_now_ms() + 100; /* a blocking GET: not on every loop turn */
	return wproc_stat(&stub, c->path) >= c->at_least;
}

static void run_until_stub(const char *path, double at_least)
{
	struct stub_cond c = { path, at_least, 0 };
	fixture_run_until(&loop, stub_reached, &c, WAIT_MS);
}

/* The gate's waiting direct dials (k) of an org, read with gate_read() on the worker's gate. */
struct kread {
	int done, status;
	uint32_t k;
	uint32_t running, limit;
};

static void k_cb(struct gate *g, int status, const struct gate_view *v, void *data)
{
	struct kread *k = data;

	(void)g;
	k->status = status;
	if (!status) {
		k->k = v->direct_waiting;
		k->running = v->org_running;
		k->limit = v->org_limit;
	}
	k->done++;
}

static struct kread read_k(const char *org)
{
	struct kread k = { 0 };

	assert_int_equal(gate_read(worker_gate(wk), org, k_cb, &k), 0);
	fixture_run_until_count(&loop, &k.done, 1, WAIT_MS);
	assert_int_equal(k.status, 0);
	return k;
}

struct k_cond {
	const char *org;
	uint32_t k;
	long long next;
};

static bool k_reached(void *arg)
{
	struct k_cond *c = arg;

	if (fixture_now_ms() < c->next)
		return false;
	c->next = fixture_now_ms() + 20;
	return read_k(c->org).k == c->k;
}

static void run_until_k(const char *org, uint32_t k)
{
	struct k_cond c = { org, k, 0 };
	fixture_run_until(&loop, k_reached, &c, WAIT_MS);
}

static long long sql_int(const char *q)
{
	return wproc_sql_int(db, q);
}

/* --- the tests --- */

static void free_line_placed(void **state)
{
	struct dres x;
	char q[256];

	(void)state;
	submit("of", "af", "+14155550199", &x);
	fixture_run_until_count(&loop, &x.done, 1, WAIT_MS);
	assert_int_equal(x.r.outcome, DIRECT_PLACED);
	assert_int_equal(direct_http_status(x.r.outcome), 201);
	assert_true(x.r.waited_ms < DIRECT_WAIT_MS); /* it did not wait for a line */
	assert_string_equal(x.from, "+14155550100"); /* the agent's from_number */
	snprintf(q, sizeof(q),
		 "SELECT count(*) FROM calls WHERE id = '%s' AND org_id = 'of' AND campaign_id IS"
		 " NULL AND contact_id IS NULL AND agent_id = 'af' AND to_number = '+14155550199'"
		 " AND from_number = '+14155550100'",
		 x.call);
	assert_int_equal(sql_int(q), 1);
	run_until_stub("orgs.of.live", 1); /* the provider has it (hold mode: live) */
	assert_int_equal((int)wproc_stat(&stub, "orgs.of.placed"), 1);
	assert_int_equal(read_k("of").k, 0);
	struct direct_stats st;
	direct_get_stats(worker_direct(wk), &st);
	assert_true(st.placed >= 1);
	assert_int_equal(st.waiting, 0);
}

static void other_org_not_found(void **state)
{
	struct dres x;

	(void)state;
	submit("o1", "a2", "+14155550199", &x); /* a2 is o2's */
	fixture_run_until_count(&loop, &x.done, 1, WAIT_MS);
	assert_int_equal(x.r.outcome, DIRECT_NOT_FOUND);
	assert_int_equal(direct_http_status(x.r.outcome), 404);
	submit("o1", "nobody", "+14155550199", &x);
	fixture_run_until_count(&loop, &x.done, 1, WAIT_MS);
	assert_int_equal(x.r.outcome, DIRECT_NOT_FOUND);
	/* malformed input is the route's to refuse: no callback */
	struct direct_dial_req bad = { .org = "o1", .agent = "a1", .to_number = "4155550199" };
	assert_int_equal(direct_dial_submit(worker_direct(wk), &bad, dial_cb, &x, NULL), -EINVAL);
	assert_int_equal(sql_int("SELECT count(*) FROM calls WHERE org_id = 'o1' AND campaign_id"
				 " IS NULL"),
			 0);
}

static void full_org_times_out(void **state)
{
	struct dres x;
	char body[DIRECT_BUSY_BODY_MAX];

	(void)state;
	assert_int_equal(read_k("o1").running, 2); /* both lines busy */
	submit("o1", "a1", "+14155550198", &x);
	fixture_run_until_count(&loop, &x.done, 1, WAIT_MS);
	print_message("full org: answered after %llu ms, %u admissions\n",
		      (unsigned long long)x.r.waited_ms, x.r.tries);
	assert_int_equal(x.r.outcome, DIRECT_BUSY);
	assert_int_equal(direct_http_status(x.r.outcome), 429);
	assert_true(x.r.waited_ms >= 4500 && x.r.waited_ms < 8000);
	assert_int_equal(x.r.running, 2);
	assert_int_equal(x.r.limit, 2);
	int n = direct_busy_body(x.r.running, x.r.limit, body, sizeof(body));
	assert_string_equal(body, "{\"error\":1300,\"message\":\"Account concurrency limit reached "
				  "(2 of 2 lines in use).\"}");
	assert_int_equal(n, (int)strlen(body));
	/* no leaked waiter: k is back to 0 */
	assert_int_equal(read_k("o1").k, 0);
	assert_int_equal(sql_int("SELECT count(*) FROM calls WHERE org_id = 'o1' AND campaign_id"
				 " IS NULL"),
			 0);
	struct direct_stats st;
	direct_get_stats(worker_direct(wk), &st);
	assert_int_equal(st.timed_out, 1);
	assert_int_equal(st.waiting, 0);
}

static void cancel_withdraws(void **state)
{
	struct dres x;

	(void)state;
	struct direct_dial *dd = submit("o1", "a1", "+14155550197", &x);
	run_until_k("o1", 1); /* registered as a waiting direct dial */
	direct_dial_cancel(dd);
	run_until_k("o1", 0); /* withdrawn at once, not at the expiry */
	struct direct_stats st;
	direct_get_stats(worker_direct(wk), &st);
	assert_int_equal(st.cancelled, 1);
	assert_int_equal(st.waiting, 0); /* gone: nothing can answer it any more */
	assert_int_equal(x.done, 0);
}

static bool admissions_reached(void *arg)
{
	struct direct_stats st;

	direct_get_stats(worker_direct(wk), &st);
	return st.admissions >= *(const uint64_t *)arg;
}

static bool released_reached(void *arg)
{
	struct direct_stats st;

	direct_get_stats(worker_direct(wk), &st);
	return st.released >= *(const uint64_t *)arg;
}

/* Cancelled while its admission is in flight (the client went away), then admitted: never
 * dialled; its row ended (canceled) and its slot released. */
static void cancel_in_flight_admitted(void **state)
{
	struct dres x;
	struct direct_stats st;

	(void)state;
	assert_int_equal(read_k("of").running, 1); /* free_line_placed's call: one line free */
	direct_get_stats(worker_direct(wk), &st);
	uint64_t want = st.admissions + 1, released = st.released + 1;
	struct direct_dial *dd = submit("of", "af", "+14155550196", &x);
	fixture_run_until(&loop, admissions_reached, &want, WAIT_MS); /* sent, not answered */
	direct_dial_cancel(dd);
	fixture_run_until(&loop, released_reached, &released, WAIT_MS);
	assert_int_equal(x.done, 0);
	assert_int_equal(sql_int("SELECT count(*) FROM calls WHERE org_id = 'of' AND to_number ="
				 " '+14155550196' AND state = 'ended' AND outcome = 'canceled'"),
			 1);
	struct kread k = read_k("of");
	for (long long end = fixture_now_ms() + WAIT_MS; k.running != 1;) { /* Redis release */
		assert_true(fixture_now_ms() < end);
		k = read_k("of"); /* runs the loop until read */
	}
	assert_int_equal(k.k, 0);
	assert_int_equal((int)wproc_stat(&stub, "orgs.of.placed"), 1); /* never dialled */
	direct_get_stats(worker_direct(wk), &st);
	assert_int_equal(st.waiting, 0);
}

static void freed_line_goes_direct(void **state)
{
	struct dres x;
	char q[256], body[128];

	(void)state;
	/* batch contacts of o1 wait in the gate (C9) for the same lines */
	redisContext *rc = redisConnectUnix(svc.redis_url + strlen("unix://"));
	assert_true(rc && !rc->err);
	redisReply *rep = redisCommand(rc, "HLEN dsp:v1:{o:o1}:bwait");
	assert_true(rep && rep->type == REDIS_REPLY_INTEGER && rep->integer >= 1);
	freeReplyObject(rep);
	redisFree(rc);
	double c1_placed = wproc_stat(&stub, "campaigns.c1.placed");
	double placed = wproc_stat(&stub, "orgs.o1.placed");

	submit("o1", "a1", "+14155550196", &x);
	run_until_k("o1", 1);
	/* one line frees: a batch call ends at the provider */
	PGresult *r = fixture_sql(db, "SELECT id FROM calls WHERE org_id = 'o1' AND state IN"
				      " ('dialing', 'live') AND campaign_id = 'c1' LIMIT 1");
	assert_int_equal(PQntuples(r), 1);
	snprintf(body, sizeof(body), "{\"idempotency_key\":\"%s\"}", PQgetvalue(r, 0, 0));
	PQclear(r);
	free(wproc_stub_http(&stub, "/control/end", body));
	fixture_run_until_count(&loop, &x.done, 1, WAIT_MS);
	print_message("freed line: direct dial placed after %llu ms, %u admissions\n",
		      (unsigned long long)x.r.waited_ms, x.r.tries);
	assert_int_equal(x.r.outcome, DIRECT_PLACED);
	run_until_stub("orgs.o1.placed", placed + 1);
	/* the line went to the direct dial, not to a waiting batch contact */
	assert_int_equal((int)wproc_stat(&stub, "orgs.o1.placed"), (int)placed + 1);
	assert_int_equal((int)wproc_stat(&stub, "campaigns.c1.placed"), (int)c1_placed);
	assert_int_equal((int)wproc_stat(&stub, "orgs.o1.live"), 2);
	snprintf(q, sizeof(q),
		 "SELECT count(*) FROM calls WHERE id = '%s' AND campaign_id IS NULL AND state IN"
		 " ('dialing', 'live')",
		 x.call);
	assert_int_equal(sql_int(q), 1);
	assert_int_equal(read_k("o1").k, 0);
}

/* --- postgres mode --- */

struct sql_cond {
	const char *q;
	long long at_least;
	long long next, until;
};

/* A query's integer reaches at_least (checked every 10 ms, on the test's own connection), or
 * the time is until. */
static bool sql_reached(void *arg)
{
	struct sql_cond *c = arg;

	if (fixture_now_ms() < c->next)
		return false;
	c->next = fixture_now_ms() + 10;
	return sql_int(c->q) >= c->at_least || (c->until && fixture_now_ms() >= c->until);
}

/* Runs the worker's loop until the query's integer reaches at_least or within_ms passed (0:
 * WAIT_MS, then the test fails); returns the last value. */
static long long run_until_sql_within(const char *q, long long at_least, long long within_ms)
{
	struct sql_cond c = { q, at_least, 0, within_ms ? fixture_now_ms() + within_ms : 0 };
	fixture_run_until(&loop, sql_reached, &c, WAIT_MS);
	return sql_int(q);
}

static bool mode_reached(void *arg)
{
	struct gate_mode_state ms;

	gate_mode_get(worker_gate_mode(wk), &ms);
	return ms.mode == *(const enum gate_mode *)arg && ms.usable && !ms.switching;
}

static void run_until_mode(enum gate_mode m)
{
	fixture_run_until(&loop, mode_reached, &m, WAIT_MS);
}

/* The waiter rows inserted so far (the statistics collector's count: it may lag by a second). */
#define WAITERS_INSERTED                                                                           \
	"SELECT coalesce(sum(n_tup_ins), 0) FROM pg_stat_user_tables"                              \
	" WHERE relname = 'gate_direct_waiters'"

/* Postgres mode (the reconciler kept from switching back by the test holding its lease), a
 * direct dial on the full org o1 cancelled while its admission is in flight, the cancel's
 * withdrawal (DELETE) ordered before the admission's commit: the admission is held on o1's row
 * and the DELETE on the waiters table by a transaction of the test, released once the DELETE is
 * seen waiting in pg_stat_activity (the DELETE is one statement, the admission has its reads,
 * its writes and its commit still to go: the DELETE finds no row). The refusal then registers
 * the waiter; the withdrawal is owed again and the row goes at once, not at its 10 s expiry
 * (it stayed for 10 s before direct.c's refused() set pg_waiting again). */
static void postgres_cancel_in_flight_withdraws(void **state)
{
	struct dres x;
	struct direct_stats st;

	(void)state;
	PQclear(fixture_sql(db, "UPDATE leases SET owner = 'test_direct', version = version + 1,"
				" lease_until = clock_timestamp() + interval '1 hour'"
				" WHERE name = 'reconciler'"));
	PQclear(fixture_sql(db, "WITH u AS (UPDATE system_settings SET gate_mode = 'postgres',"
				" gate_epoch = gate_epoch + 1 RETURNING gate_mode, gate_epoch)"
				" SELECT pg_notify('dsp_gate_mode', gate_mode || ' ' || gate_epoch)"
				" FROM u"));
	run_until_mode(GATE_MODE_POSTGRES);
	assert_int_equal(sql_int("SELECT count(*) FROM calls WHERE org_id = 'o1' AND state IN"
				 " ('dialing', 'live')"),
			 2); /* o1 is full: a refusal */
	assert_int_equal(sql_int("SELECT count(*) FROM gate_direct_waiters WHERE org_id = 'o1'"),
			 0);
	/* An attempt whose admission did not register (it timed out on the held row: a loaded
	 * machine) shows nothing, either way: it is made again, three times at most. */
	bool registered = false;
	for (int attempt = 0; attempt < 3 && !registered; attempt++) {
		long long inserted = sql_int(WAITERS_INSERTED);
		PGconn *hold = fixture_pg(&svc);

		PQclear(fixture_sql(hold, "BEGIN"));
		PQclear(fixture_sql(hold,
				    "SELECT 1 FROM organisations WHERE id = 'o1' FOR UPDATE"));
		PQclear(fixture_sql(hold, "LOCK TABLE gate_direct_waiters IN SHARE MODE"));
		direct_get_stats(worker_direct(wk), &st);
		uint64_t want = st.admissions + 1;
		struct direct_dial *dd = submit("o1", "a1", "+14155550195", &x);
		fixture_run_until(&loop, admissions_reached, &want, WAIT_MS); /* sent, unanswered */
		direct_dial_cancel(dd);
		bool held = run_until_sql_within(
				    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type ="
				    " 'Lock' AND query LIKE 'DELETE FROM gate_direct_waiters WHERE"
				    " call_id%'",
				    1, 10000) >= 1;
		/* Released at once: the admission (held on o1's row since its BEGIN) has 2 s
		 * (GATE_PG_WRITE_DEADLINE_MS) before it would time out instead of registering. */
		PQclear(fixture_sql(hold, "COMMIT"));
		PQfinish(hold);
		/* The refusal's waiter row was written (after the withdrawal had found none)... */
		registered = held &&
			     run_until_sql_within(WAITERS_INSERTED, inserted + 1, 10000) > inserted;
		if (!registered)
			print_message("attempt %d inconclusive (withdrawal %s, no waiter row"
				      " written): again\n",
				      attempt + 1, held ? "seen waiting" : "not seen");
	}
	assert_true(registered);
	long long seen = fixture_now_ms();
	/* ...and is withdrawn at once: well before its 10 s expiry. */
	long long gone = run_until_sql_within("SELECT (count(*) = 0)::int FROM gate_direct_waiters"
					      " WHERE org_id = 'o1'",
					      1, 5000);
	print_message("postgres mode: the cancelled dial's waiter row %s %lld ms after its insert"
		      " was counted\n",
		      gone ? "gone" : "still there", fixture_now_ms() - seen);
	assert_int_equal(gone, 1);
	assert_int_equal(x.done, 0);
	direct_get_stats(worker_direct(wk), &st);
	assert_int_equal(st.waiting, 0);

	/* Back to redis mode: the reconciler's lease is free again, its next run switches. */
	PQclear(fixture_sql(db, "UPDATE leases SET owner = NULL, lease_until = '-infinity'"
				" WHERE name = 'reconciler'"));
	run_until_mode(GATE_MODE_REDIS);
}

/* --- fixture --- */

static bool o1_full(void *arg)
{
	return stub_reached(arg);
}

static int setup(void **state)
{
	char provider[64], listen[64], pub[64];
	struct stub_config sc;
	int port = wproc_free_port();

	(void)state;
	fixture_start(&svc, true, true, false, true);
	db = fixture_pg(&svc);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	PQclear(fixture_sql(db, "INSERT INTO organisations (id, name, org_limit) VALUES"
				" ('of', 'of', 2), ('o1', 'o1', 2), ('o2', 'o2', 2)"));
	PQclear(fixture_sql(db, "INSERT INTO agents (id, org_id, from_number) VALUES"
				" ('af', 'of', '+14155550100'), ('a1', 'o1', NULL),"
				" ('a2', 'o2', NULL)"));
	PQclear(fixture_sql(db, "INSERT INTO campaigns (id, org_id, agent_id) VALUES"
				" ('c1', 'o1', 'a1')"));
	PQclear(fixture_sql(db, "INSERT INTO batches (id, org_id, campaign_id) VALUES"
				" ('b1', 'o1', 'c1')"));
	PQclear(fixture_sql(db, "INSERT INTO contacts (org_id, campaign_id, batch_id, phone)"
				" SELECT 'o1', 'c1', 'b1', '+1415556' || lpad(i::text, 4, '0')"
				" FROM generate_series(1, 60) i"));
	stub_config_defaults(&sc);
	sc.hold = true;
	wproc_stub_start(&stub, &sc);
	snprintf(provider, sizeof(provider), "http://127.0.0.1:%d", stub.port);
	snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
	snprintf(pub, sizeof(pub), "http://127.0.0.1:%d", port);
	struct worker_options o = { .database_url = svc.database_url,
				    .redis_url = svc.redis_url,
				    .listen = listen,
				    .worker_id = "w1",
				    .provider_url = provider,
				    .public_url = pub,
				    .webhook_secret = "stub-secret",
				    .slot_wait_ms = 15000,
				    .lease_ms = 60000,
				    .drain_ms = 60000,
				    .provider_timeout_ms = 10000,
				    .lane_probe_ms = 300000,
				    .claim_page = 50,
				    .refresh_period_ms = 1000,
				    .floors_ttl_ms = 10000,
				    .reconcile_ms = 1000,
				    .pg_connect_timeout_ms = 5000,
				    .pg_query_timeout_ms = 10000,
				    .redis_connect_timeout_ms = 2000,
				    .redis_command_timeout_ms = 1000,
				    .reconnect_min_ms = 100,
				    .reconnect_max_ms = 1000 };
	assert_int_equal(uv_loop_init(&loop), 0);
	assert_int_equal(worker_new(&loop, &o, &wk), 0);
	assert_int_equal(worker_start(wk), 0);
	/* o1's two lines busy with held batch calls */
	struct stub_cond c = { "orgs.o1.live", 2, 0 };
	fixture_run_until(&loop, o1_full, &c, WAIT_MS);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	if (wk) {
		worker_drain(wk);
		uv_run(&loop, UV_RUN_DEFAULT);
		assert_int_equal(worker_exit_code(wk), 0);
		worker_free(wk);
		wk = NULL;
		fixture_loop_close(&loop);
	}
	wproc_stub_stop(&stub);
	PQfinish(db);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(free_line_placed),
		cmocka_unit_test(other_org_not_found),
		cmocka_unit_test(full_org_times_out),
		cmocka_unit_test(cancel_withdraws),
		cmocka_unit_test(cancel_in_flight_admitted),
		cmocka_unit_test(freed_line_goes_direct),
		cmocka_unit_test(postgres_cancel_in_flight_withdraws),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
