/* The provider events endpoint and the end of a call (dispatcher/worker/events.h, call_end.h;
 * issue 9 item 7) against a real PostgreSQL and Redis, over HTTP: signatures and bodies checked
 * before anything is written; a terminal event ends the call and releases its slots once
 * whatever the duplicates and the order; the contact follows the campaign's retry policy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include <curl/curl.h>

#include "worker_env.h"

#include "log_capture.h"

static struct embedded svc;
static PGconn *admin;

static long long events_rows(const char *call)
{
	return gp_int(admin, "SELECT count(*) FROM provider_events WHERE call_id = '%s'", call);
}

static const char *call_col(char *buf, const char *call, const char *col)
{
	char sql[256];

	snprintf(sql, sizeof(sql), "SELECT coalesce(%s::text, '') FROM calls WHERE id = '%s'", col,
		 call);
	return wenv_text(admin, buf, 128, sql);
}

static const char *contact_col(char *buf, long long k, const char *col)
{
	char sql[256];

	snprintf(sql, sizeof(sql), "SELECT coalesce(%s::text, '') FROM contacts WHERE id = %lld",
		 col, k);
	return wenv_text(admin, buf, 128, sql);
}

/* A signed non-terminal event of a known call: 200, the call row moves forward (provider id,
 * sequence, answered, live), no event row; an older one (reordered) changes nothing. */
static void signed_event_accepted(void **state)
{
	struct wenv w;
	char id[37], body[512], b[128];
	long long k = gp_contact(admin, "ea", 0, 0);

	(void)state;
	wenv_open(&w, &svc, NULL);
	gp_uuid(id, 1001);
	wenv_call(&w, admin, "ea", id, k);
	assert_int_equal(
		wenv_post(&w, wenv_event(body, sizeof(body), id, "pc_1", "answered", 2), NULL),
		200);
	assert_string_equal(call_col(b, id, "state"), "live");
	assert_string_equal(call_col(b, id, "provider_call_id"), "pc_1");
	assert_string_equal(call_col(b, id, "last_sequence"), "2");
	assert_int_equal(gp_int(admin,
				"SELECT count(*) FROM calls WHERE id = '%s' AND answered_at ="
				" '2024-05-01T12:00:00.25Z'",
				id),
			 1);
	assert_int_equal(events_rows(id), 0);
	assert_int_equal(
		wenv_post(&w, wenv_event(body, sizeof(body), id, "pc_1", "ringing", 1), NULL), 200);
	assert_string_equal(call_col(b, id, "last_sequence"), "2");
	assert_string_equal(call_col(b, id, "state"), "live");
	assert_int_equal(wenv_running(&w, "ea"), 1); /* nothing released */
	wenv_close(&w);
}

/* Missing, wrong, stale or tampered signatures: 401 and nothing written. */
static void bad_signature_401(void **state)
{
	struct wenv w;
	char id[37], body[512], sig[SIGNING_HEADER_MAX], b[128];
	long long k = gp_contact(admin, "eb", 0, 0);
	int64_t now = (int64_t)time(NULL);

	(void)state;
	wenv_open(&w, &svc, NULL);
	gp_uuid(id, 2001);
	wenv_call(&w, admin, "eb", id, k);
	wenv_event(body, sizeof(body), id, "pc_2", "completed", 3);
	assert_int_equal(wenv_post(&w, body, ""), 401);
	assert_int_equal(signing_sign("another-secret", now, body, strlen(body), sig, sizeof(sig)),
			 0);
	assert_int_equal(wenv_post(&w, body, sig), 401);
	assert_int_equal(signing_sign(WENV_SECRET, now - 301, body, strlen(body), sig, sizeof(sig)),
			 0);
	assert_int_equal(wenv_post(&w, body, sig), 401);
	assert_int_equal(signing_sign(WENV_SECRET, now, "{}", 2, sig, sizeof(sig)), 0);
	assert_int_equal(wenv_post(&w, body, sig), 401); /* signed another body */
	assert_int_equal(wenv_post(&w, body, "t=abc,v1=00"), 401);
	assert_int_equal(events_rows(id), 0);
	assert_string_equal(call_col(b, id, "state"), "dialing");
	assert_string_equal(call_col(b, id, "provider_call_id"), "");
	assert_int_equal(wenv_running(&w, "eb"), 1);
	struct events_stats st;
	events_get_stats(w.ev, &st);
	assert_int_equal(st.unauthorized, 5);
	assert_int_equal(st.batches, 0);
	/* The same body, signed now: accepted. */
	assert_int_equal(wenv_post(&w, body, NULL), 200);
	assert_int_equal(wenv_running(&w, "eb"), 0);
	wenv_close(&w);
}

/* Signed bodies that are not a valid event: 400 and nothing written. */
static void bad_body_400(void **state)
{
	struct wenv w;
	char id[37], body[512], b[128];
	long long k = gp_contact(admin, "ec", 0, 0);

	(void)state;
	wenv_open(&w, &svc, NULL);
	gp_uuid(id, 3001);
	wenv_call(&w, admin, "ec", id, k);
	const char *bad[] = {
		"not json", "[1,2]", "{\"call_id\":\"pc\",\"status\":\"completed\",\"sequence\":1}",
		NULL, /* filled below: a bad status */
		NULL, /* a bad sequence */
		NULL, /* a bad time */
		NULL, /* a bad idempotency key */
	};
	char b3[512], b4[512], b5[512], b6[512];
	snprintf(b3, sizeof(b3),
		 "{\"call_id\":\"pc\",\"idempotency_key\":\"%s\",\"status\":\"hungup\","
		 "\"sequence\":1}",
		 id);
	snprintf(b4, sizeof(b4),
		 "{\"call_id\":\"pc\",\"idempotency_key\":\"%s\",\"status\":\"completed\","
		 "\"sequence\":1.5}",
		 id);
	snprintf(b5, sizeof(b5),
		 "{\"call_id\":\"pc\",\"idempotency_key\":\"%s\",\"status\":\"completed\","
		 "\"sequence\":1,\"occurred_at\":\"2024-02-30T10:00:00Z\"}",
		 id);
	snprintf(b6, sizeof(b6),
		 "{\"call_id\":\"pc\",\"idempotency_key\":\"x'); DROP TABLE calls;--\","
		 "\"status\":\"completed\",\"sequence\":1}");
	bad[3] = b3;
	bad[4] = b4;
	bad[5] = b5;
	bad[6] = b6;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(wenv_post(&w, bad[i], NULL), 400);
	assert_int_equal(events_rows(id), 0);
	assert_string_equal(call_col(b, id, "state"), "dialing");
	assert_int_equal(wenv_running(&w, "ec"), 1);
	(void)body;
	wenv_close(&w);
}

/* Posts body signed now; returns the status and copies the answer's body into out. */
static int post_answer(struct wenv *w, const char *body, char *out, size_t size)
{
	struct wpost p;

	wenv_post_async(w, body, NULL, &p);
	fixture_run_until_count(&w->ge.loop, &p.done, 1, 60000);
	snprintf(out, size, "%s", p.body);
	return p.status;
}

/* Strict JSON (common/json_strict.h, issue 10 item 9): bytes after the object, a key twice
 * (cJSON alone takes the first: "completed" would end the call), a NUL inside a string (cJSON
 * alone cuts the key at the uuid) and a fractional sequence are each a 400 whose message names
 * the byte or the field; nothing is written. */
static void strict_json_400(void **state)
{
	struct wenv w;
	char id[37], b[128], ans[256];
	char trail[512], dup[512], nul[512], frac[512], want[64];
	long long k = gp_contact(admin, "ej", 0, 0);

	(void)state;
	wenv_open(&w, &svc, NULL);
	gp_uuid(id, 3002);
	wenv_call(&w, admin, "ej", id, k);
	snprintf(trail, sizeof(trail),
		 "{\"call_id\":\"pc\",\"idempotency_key\":\"%s\",\"status\":\"completed\","
		 "\"sequence\":1}xyz",
		 id);
	snprintf(dup, sizeof(dup),
		 "{\"call_id\":\"pc\",\"idempotency_key\":\"%s\",\"status\":\"completed\","
		 "\"status\":\"ringing\",\"sequence\":1}",
		 id);
	snprintf(nul, sizeof(nul),
		 "{\"call_id\":\"pc\",\"idempotency_key\":\"%s\\u0000x\",\"status\":"
		 "\"completed\",\"sequence\":1}",
		 id);
	snprintf(frac, sizeof(frac),
		 "{\"call_id\":\"pc\",\"idempotency_key\":\"%s\",\"status\":\"completed\","
		 "\"sequence\":1.5}",
		 id);
	assert_int_equal(post_answer(&w, trail, ans, sizeof(ans)), 400);
	snprintf(want, sizeof(want), "trailing bytes after the JSON value at byte %zu",
		 strlen(trail) - 3);
	assert_non_null(strstr(ans, want));
	assert_int_equal(post_answer(&w, dup, ans, sizeof(ans)), 400);
	assert_non_null(strstr(ans, "field status appears twice"));
	assert_int_equal(post_answer(&w, nul, ans, sizeof(ans)), 400);
	assert_non_null(strstr(ans, "a NUL (\\\\u0000) inside a string at byte"));
	assert_int_equal(post_answer(&w, frac, ans, sizeof(ans)), 400);
	assert_non_null(strstr(ans, "field sequence must be an integer from 0 to 2147483647"));
	assert_int_equal(events_rows(id), 0);
	assert_string_equal(call_col(b, id, "state"), "dialing");
	assert_string_equal(call_col(b, id, "provider_call_id"), "");
	assert_int_equal(wenv_running(&w, "ej"), 1);
	wenv_close(&w);
}

/* The terminal event three times (two in one turn, one later): one end, one release; the
 * contact done with one attempt; one event row. */
static void duplicate_terminal_releases_once(void **state)
{
	struct wenv w;
	char id[37], other[37], body[512], b[128];
	long long k = gp_contact(admin, "ed", 0, 0);
	struct wpost p1, p2;
	struct call_end_stats cs;

	(void)state;
	wenv_open(&w, &svc, NULL);
	wenv_call(&w, admin, "ed", gp_uuid(id, 4001), k);
	wenv_call(&w, admin, "ed", gp_uuid(other, 4002), gp_contact(admin, "ed", 0, 1));
	assert_int_equal(wenv_running(&w, "ed"), 2);
	wenv_event(body, sizeof(body), id, "pc_4", "completed", 3);
	wenv_post_async(&w, body, NULL, &p1);
	wenv_post_async(&w, body, NULL, &p2);
	fixture_run_until_count(&w.ge.loop, &p1.done, 1, 60000);
	fixture_run_until_count(&w.ge.loop, &p2.done, 1, 60000);
	assert_int_equal(p1.status, 200);
	assert_int_equal(p2.status, 200);
	assert_int_equal(wenv_post(&w, body, NULL), 200);
	call_end_get_stats(w.ce, &cs);
	assert_int_equal(cs.ended, 1);
	assert_int_equal(cs.already, 2);
	assert_int_equal(cs.released, 1);
	assert_int_equal(wenv_running(&w, "ed"), 1); /* the other call keeps its slot */
	assert_string_equal(call_col(b, id, "state"), "ended");
	assert_string_equal(call_col(b, id, "outcome"), "completed");
	assert_string_equal(contact_col(b, k, "state"), "done");
	assert_string_equal(contact_col(b, k, "attempts"), "1");
	assert_int_equal(events_rows(id), 1);
	wenv_close(&w);
}

/* completed (3) before answered (2) and ringing (1): the call ends at once; the late events
 * are answered 200 and neither un-end it nor move its sequence back. */
static void terminal_before_answered(void **state)
{
	struct wenv w;
	char id[37], body[512], b[128];
	long long k = gp_contact(admin, "ee", 0, 0);

	(void)state;
	wenv_open(&w, &svc, NULL);
	wenv_call(&w, admin, "ee", gp_uuid(id, 5001), k);
	assert_int_equal(
		wenv_post(&w, wenv_event(body, sizeof(body), id, "pc_5", "completed", 3), NULL),
		200);
	assert_int_equal(wenv_running(&w, "ee"), 0);
	assert_int_equal(
		wenv_post(&w, wenv_event(body, sizeof(body), id, "pc_5", "answered", 2), NULL),
		200);
	assert_int_equal(
		wenv_post(&w, wenv_event(body, sizeof(body), id, "pc_5", "ringing", 1), NULL), 200);
	assert_string_equal(call_col(b, id, "state"), "ended");
	assert_string_equal(call_col(b, id, "outcome"), "completed");
	assert_string_equal(call_col(b, id, "last_sequence"), "3");
	assert_string_equal(contact_col(b, k, "state"), "done");
	/* A second terminal status (canceled, 4) changes nothing either. */
	assert_int_equal(
		wenv_post(&w, wenv_event(body, sizeof(body), id, "pc_5", "canceled", 4), NULL),
		200);
	assert_string_equal(call_col(b, id, "outcome"), "completed");
	assert_string_equal(contact_col(b, k, "attempts"), "1");
	wenv_close(&w);
}

/* An event before the dial's 201 was processed (no provider id on the row yet) ends the call
 * and records the provider id; an event of an unknown call is kept and answered 202. */
static void early_and_unknown(void **state)
{
	struct wenv w;
	char id[37], ghost[37], body[512], b[128];
	long long k = gp_contact(admin, "ef", 0, 0);

	(void)state;
	wenv_open(&w, &svc, NULL);
	wenv_call(&w, admin, "ef", gp_uuid(id, 6001), k);
	assert_string_equal(call_col(b, id, "provider_call_id"), "");
	assert_int_equal(
		wenv_post(&w, wenv_event(body, sizeof(body), id, "pc_6", "failed", 2), NULL), 200);
	assert_string_equal(call_col(b, id, "provider_call_id"), "pc_6");
	assert_string_equal(call_col(b, id, "outcome"), "failed");
	assert_string_equal(contact_col(b, k, "state"), "failed");
	assert_int_equal(wenv_running(&w, "ef"), 0);

	gp_uuid(ghost, 6999);
	assert_int_equal(
		wenv_post(&w, wenv_event(body, sizeof(body), ghost, "pc_x", "ringing", 1), NULL),
		202);
	assert_int_equal(events_rows(ghost), 1);
	assert_int_equal(gp_int(admin, "SELECT count(*) FROM calls WHERE id = '%s'", ghost), 0);
	wenv_close(&w);
}

/* no-answer with attempts left: pending after the campaign's delay with attempts + 1; busy on
 * the last attempt: failed; no-answer in a paused batch: held. */
static void retry_policy(void **state)
{
	struct wenv w;
	char a[37], c[37], d[37], body[512], b[128];
	long long ka = gp_contact(admin, "eg", 0, 0), kc = gp_contact(admin, "eg", 0, 1);
	long long kd = gp_contact(admin, "eh", 0, 0);

	(void)state;
	gp_sql(admin, "UPDATE campaigns SET retry_max_attempts = 3, retry_delay_seconds = 600"
		      " WHERE id IN ('eg_c0', 'eh_c0')");
	gp_sql(admin, "UPDATE contacts SET attempts = 2 WHERE id = %lld", kc);
	gp_sql(admin, "UPDATE batches SET status = 'paused' WHERE id = 'eh_b0'");
	wenv_open(&w, &svc, NULL);
	wenv_call(&w, admin, "eg", gp_uuid(a, 7001), ka);
	wenv_call(&w, admin, "eg", gp_uuid(c, 7002), kc);
	wenv_call(&w, admin, "eh", gp_uuid(d, 7003), kd);
	assert_int_equal(
		wenv_post(&w, wenv_event(body, sizeof(body), a, "pc_71", "no-answer", 2), NULL),
		200);
	assert_string_equal(contact_col(b, ka, "state"), "pending");
	assert_string_equal(contact_col(b, ka, "attempts"), "1");
	assert_string_equal(contact_col(b, ka, "lease_token"), "");
	assert_int_equal(gp_int(admin,
				"SELECT count(*) FROM contacts WHERE id = %lld AND next_attempt_at"
				" BETWEEN now() + interval '590 s' AND now() + interval '610 s'",
				ka),
			 1);
	assert_int_equal(wenv_post(&w, wenv_event(body, sizeof(body), c, "pc_72", "busy", 2), NULL),
			 200);
	assert_string_equal(contact_col(b, kc, "state"), "failed");
	assert_string_equal(contact_col(b, kc, "attempts"), "3");
	assert_string_equal(contact_col(b, kc, "last_outcome"), "busy");
	assert_int_equal(
		wenv_post(&w, wenv_event(body, sizeof(body), d, "pc_73", "no-answer", 2), NULL),
		200);
	assert_string_equal(contact_col(b, kd, "state"), "held");
	assert_string_equal(contact_col(b, kd, "attempts"), "1");
	assert_int_equal(wenv_running(&w, "eg"), 0);
	assert_int_equal(wenv_running(&w, "eh"), 0);
	wenv_close(&w);
}

struct endp {
	int done, status;
	enum call_end_outcome outcome;
	char contact_state[16];
	bool released;
};

static void end_cb(struct call_end *ce, int status, const struct call_end_result *r, void *data)
{
	struct endp *p = data;

	(void)ce;
	p->done++;
	p->status = status;
	if (r) {
		p->outcome = r->outcome;
		p->released = r->released;
		snprintf(p->contact_state, sizeof(p->contact_state), "%s",
			 r->contact_state ? r->contact_state : "");
	}
}

/* The dialer's dispositions: RETRY_AT (throttled), FAIL (400/404/422), PENDING (lane
 * stopped); an unknown call id; a bad request refused before anything is queued. */
static void dispositions(void **state)
{
	struct wenv w;
	char x[37], y[37], z[37], u[37], b[128];
	long long kx = gp_contact(admin, "ei", 0, 0), ky = gp_contact(admin, "ei", 0, 1);
	long long kz = gp_contact(admin, "ei", 0, 2);
	struct endp p[4] = { 0 };

	(void)state;
	wenv_open(&w, &svc, NULL);
	wenv_call(&w, admin, "ei", gp_uuid(x, 8001), kx);
	wenv_call(&w, admin, "ei", gp_uuid(y, 8002), ky);
	wenv_call(&w, admin, "ei", gp_uuid(z, 8003), kz);
	struct call_end_req rq[4] = {
		{ .call = x,
		  .outcome = "refused",
		  .disposition = CALL_END_RETRY_AT,
		  .delay_ms = 120000 },
		{ .call = y,
		  .outcome = "refused",
		  .reason = "422 invalid number \x01\xff",
		  .disposition = CALL_END_FAIL },
		{ .call = z, .outcome = "refused", .disposition = CALL_END_PENDING },
		{ .call = gp_uuid(u, 8999), .outcome = "refused", .disposition = CALL_END_PENDING },
	};
	for (int i = 0; i < 4; i++)
		assert_int_equal(call_end_submit(w.ce, &rq[i], end_cb, &p[i]), 0);
	struct call_end_req badq = { .call = "nope", .outcome = "refused" };
	assert_int_equal(call_end_submit(w.ce, &badq, end_cb, &p[0]), -EINVAL);
	badq = (struct call_end_req){ .call = x, .outcome = "hungup" };
	assert_int_equal(call_end_submit(w.ce, &badq, end_cb, &p[0]), -EINVAL);
	for (int i = 0; i < 4; i++)
		fixture_run_until_count(&w.ge.loop, &p[i].done, 1, 60000);
	struct call_end_stats cs;
	call_end_get_stats(w.ce, &cs);
	assert_int_equal(cs.batches, 1); /* one turn, one batch */
	for (int i = 0; i < 3; i++) {
		assert_int_equal(p[i].status, 0);
		assert_int_equal(p[i].outcome, CALL_END_ENDED);
		assert_true(p[i].released);
	}
	assert_int_equal(p[3].outcome, CALL_END_UNKNOWN);
	assert_string_equal(p[0].contact_state, "pending");
	assert_string_equal(contact_col(b, kx, "tries"), "1");
	assert_string_equal(contact_col(b, kx, "attempts"), "0");
	assert_int_equal(gp_int(admin,
				"SELECT count(*) FROM contacts WHERE id = %lld AND next_attempt_at"
				" BETWEEN now() + interval '110 s' AND now() + interval '130 s'",
				kx),
			 1);
	assert_string_equal(p[1].contact_state, "failed");
	assert_string_equal(contact_col(b, ky, "last_error"), "422 invalid number ??");
	assert_string_equal(contact_col(b, ky, "attempts"), "0");
	assert_string_equal(p[2].contact_state, "pending");
	assert_string_equal(contact_col(b, kz, "attempts"), "0");
	assert_string_equal(contact_col(b, kz, "tries"), "0");
	assert_int_equal(gp_int(admin,
				"SELECT count(*) FROM contacts WHERE id = %lld AND next_attempt_at"
				" <= now()",
				kz),
			 1);
	assert_int_equal(wenv_running(&w, "ei"), 0);
	wenv_close(&w);
}

/* PostgreSQL lost while it records an event (its statement waits on the call row the test
 * holds; its backend is terminated): answered 503, the provider sends it again, nothing is
 * lost — a condition that recovers by design, so a warning, not an error (common/log.h). Old
 * code: "provider events not recorded" at error. */
static void lost_connection_is_a_warning(void **state)
{
	struct wenv w;
	struct wpost p;
	char id[37], body[512], pid[24], out[8192], lvl[16];
	long long k = gp_contact(admin, "ek", 0, 0);
	PGconn *holder = fixture_pg(&svc);
	struct log_capture lc;

	(void)state;
	wenv_open(&w, &svc, NULL);
	gp_uuid(id, 1101);
	wenv_call(&w, admin, "ek", id, k);
	gp_sql(holder, "BEGIN");
	gp_sql(holder, "SELECT 1 FROM calls WHERE id = '%s' FOR UPDATE", id);
	log_capture_begin(&lc, LOG_WARN);
	wenv_post_async(&w, wenv_event(body, sizeof(body), id, "pc_k", "answered", 2), NULL, &p);
	gp_wait_for(&w.ge.loop, admin, "transactionid", 1); /* the event's statement waits */
	snprintf(pid, sizeof(pid), "%lld",
		 gp_int(admin, "SELECT pid FROM pg_locks WHERE NOT granted AND"
			       " locktype = 'transactionid'"));
	terminate_backend(admin, pid);
	fixture_run_until_count(&w.ge.loop, &p.done, 1, 60000);
	log_capture_end(&lc, out, sizeof(out));
	assert_int_equal(p.status, 503);
	assert_non_null(log_capture_level(out, "provider events not recorded", lvl, sizeof(lvl)));
	assert_string_equal(lvl, "warn");
	gp_sql(holder, "ROLLBACK");
	PQfinish(holder);
	/* The provider's retry is recorded. */
	assert_int_equal(
		wenv_post(&w, wenv_event(body, sizeof(body), id, "pc_k", "answered", 2), NULL),
		200);
	wenv_close(&w);
}

static int setup(void **state)
{
	static const char *const agents[] = { "a0" };
	static const char *const orgs[] = { "ea", "eb", "ec", "ed", "ee", "ef",
					    "eg", "eh", "ei", "ej", "ek", NULL };

	(void)state;
	fixture_start(&svc, true, true, false, true);
	admin = fixture_pg(&svc);
	for (int i = 0; orgs[i]; i++)
		gp_seed_org(admin, orgs[i], 20, 0, 1, agents, NULL, 4);
	/* The Redis state: every org built, with its limits. */
	struct gate_env ge;
	genv_open(&ge, svc.redis_url, "seed", true);
	genv_fresh(&ge, 1000, orgs);
	for (int i = 0; orgs[i]; i++) {
		char camps[64];
		snprintf(camps, sizeof(camps), "%s_c0::%s_a0", orgs[i], orgs[i]);
		assert_int_equal(genv_limits(&ge, orgs[i], 1, 20, 0, true, camps, NULL), 0);
	}
	genv_close(&ge);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	PQfinish(admin);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(signed_event_accepted),
		cmocka_unit_test(bad_signature_401),
		cmocka_unit_test(bad_body_400),
		cmocka_unit_test(strict_json_400),
		cmocka_unit_test(duplicate_terminal_releases_once),
		cmocka_unit_test(terminal_before_answered),
		cmocka_unit_test(early_and_unknown),
		cmocka_unit_test(retry_policy),
		cmocka_unit_test(dispositions),
		cmocka_unit_test(lost_connection_is_a_warning),
	};
	int rc;

	curl_global_init(CURL_GLOBAL_DEFAULT);
	rc = cmocka_run_group_tests(tests, setup, teardown);
	curl_global_cleanup();
	return rc;
}
