/* The schema: defaults the SPEC fixes, constraints at and around their bounds, and the plan of
 * "the next dialable contacts of campaign X" on a realistic table. */
#include "fixture.h"
#include "queue_sql.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static struct embedded svc;
static PGconn *db;

static char *value(const char *sql)
{
	static char buf[256];
	PGresult *res = fixture_sql(db, sql);
	snprintf(buf, sizeof(buf), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	return buf;
}

/* Runs sql in a transaction that is rolled back; returns whether it succeeded. */
static bool accepted(const char *sql)
{
	PQclear(fixture_sql(db, "BEGIN"));
	PGresult *res = PQexec(db, sql);
	bool ok = PQresultStatus(res) == PGRES_COMMAND_OK || PQresultStatus(res) == PGRES_TUPLES_OK;
	PQclear(res);
	PQclear(fixture_sql(db, "ROLLBACK"));
	return ok;
}

static void spec_defaults(void **state)
{
	PQclear(fixture_sql(db, "INSERT INTO organisations (id, name) VALUES ('org_d', 'D')"));
	assert_string_equal(value("SELECT org_limit FROM organisations WHERE id = 'org_d'"), "20");
	assert_string_equal(value("SELECT concurrency_management_enabled FROM organisations WHERE "
				  "id = 'org_d'"),
			    "t");
	assert_string_equal(value("SELECT per_agent_limit IS NULL FROM organisations WHERE id = "
				  "'org_d'"),
			    "t");
	assert_string_equal(value("SELECT format('%s/%s/%s', rate_default_per_minute, "
				  "rate_calls_per_minute, rate_executions_per_minute) FROM "
				  "organisations WHERE id = 'org_d'"),
			    "1000/600/600");
	assert_string_equal(value("SELECT pending_ceiling FROM organisations WHERE id = 'org_d'"),
			    "250000");
	assert_string_equal(value("SELECT format('%s/%s/%s', global_limit, gate_mode, gate_epoch)"
				  " FROM system_settings"),
			    "1000/redis/1");
	assert_string_equal(value("SELECT string_agg(name, ',' ORDER BY name) FROM leases"),
			    "reconciler,refresher,retention");
	/* Generated ids carry their type's prefix. */
	PQclear(fixture_sql(db, "INSERT INTO organisations (name) VALUES ('gen')"));
	assert_string_equal(value("SELECT bool_and(id LIKE 'org\\_%') FROM organisations"), "t");
}

static void limits_at_below_above(void **state)
{
	static const struct {
		const char *sql;
		bool ok;
	} cases[] = {
		{ "INSERT INTO organisations (id, name, org_limit) VALUES ('o1', 'x', 0)", false },
		{ "INSERT INTO organisations (id, name, org_limit) VALUES ('o1', 'x', 1)", true },
		{ "INSERT INTO organisations (id, name, org_limit) VALUES ('o1', 'x', 100000)",
		  true },
		{ "INSERT INTO organisations (id, name, org_limit) VALUES ('o1', 'x', 100001)",
		  false },
		{ "INSERT INTO organisations (id, name, per_agent_limit) VALUES ('o1', 'x', 0)",
		  false },
		{ "INSERT INTO organisations (id, name, per_agent_limit) VALUES ('o1', 'x', 1)",
		  true },
		{ "INSERT INTO organisations (id, name, pending_ceiling) VALUES ('o1', 'x', -1)",
		  false },
		{ "INSERT INTO organisations (id, name, pending_ceiling) VALUES ('o1', 'x', 0)",
		  true },
		{ "INSERT INTO organisations (id, name) VALUES ('bad id!', 'x')", false },
		{ "INSERT INTO organisations (id, name) VALUES ('', 'x')", false },
		{ "UPDATE system_settings SET global_limit = 0", false },
		{ "UPDATE system_settings SET global_limit = 1", true },
		{ "UPDATE system_settings SET gate_mode = 'memory'", false },
		{ "INSERT INTO system_settings (id) VALUES (false)", false },
		{ "UPDATE campaigns SET max_concurrent_calls = 0", true }, /* no rows: vacuous */
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		if (accepted(cases[i].sql) != cases[i].ok)
			fail_msg("expected %s: %s", cases[i].ok ? "accepted" : "refused",
				 cases[i].sql);
	}
}

static void contact_constraints(void **state)
{
#define CONTACT_INSERT                                                                             \
	"INSERT INTO contacts (org_id, campaign_id, batch_id, phone, state, lease_token, "         \
	"lease_until) VALUES ('org_s', 'cmp_1', 'batch_1', '%s', '%s', %s, %s)"
	static const struct {
		const char *phone, *state, *token, *until;
		bool ok;
	} cases[] = {
		{ "+14155550100", "pending", "NULL", "NULL", true },
		{ "14155550100", "pending", "NULL", "NULL", false },	 /* no + */
		{ "+04155550100", "pending", "NULL", "NULL", false },	 /* leading 0 */
		{ "+123456", "pending", "NULL", "NULL", false },	 /* 6 digits: too short */
		{ "+1234567", "pending", "NULL", "NULL", true },	 /* 7 digits */
		{ "+123456789012345", "pending", "NULL", "NULL", true }, /* 15 digits: E.164 max */
		{ "+1234567890123456", "pending", "NULL", "NULL", false }, /* 16 */
		{ "+14155550100", "claimed", "NULL", "NULL", false },	   /* claim without lease */
		{ "+14155550100", "claimed", "7", "now()", true },
		{ "+14155550100", "sleeping", "NULL", "NULL", false },
	};
	char sql[512];

	PQclear(fixture_sql(db, "INSERT INTO organisations (id, name) VALUES ('org_s', 'S');"
				"INSERT INTO agents (id, org_id) VALUES ('agent_s', 'org_s');"
				"INSERT INTO campaigns (id, org_id, agent_id) VALUES "
				"('cmp_1', 'org_s', 'agent_s'), ('cmp_2', 'org_s', 'agent_s');"
				"INSERT INTO batches (id, org_id, campaign_id) VALUES "
				"('batch_1', 'org_s', 'cmp_1')"));
	/* A contact's campaign must be its batch's campaign. */
	assert_false(accepted("INSERT INTO contacts (org_id, campaign_id, batch_id, phone) VALUES "
			      "('org_s', 'cmp_2', 'batch_1', '+14155550100')"));
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		snprintf(sql, sizeof(sql), CONTACT_INSERT, cases[i].phone, cases[i].state,
			 cases[i].token, cases[i].until);
		if (accepted(sql) != cases[i].ok)
			fail_msg("expected %s: %s", cases[i].ok ? "accepted" : "refused", sql);
	}
}

/* Loads 120,000 contacts over 6 campaigns (two thirds pending, the rest done or failed, due
 * times spread over a day) and asserts the claim and due-count plans. */
/* At most one live call per contact; deleting an organisation removes its whole tree and keeps
 * no dangling call references. */
static void live_call_backstop_and_deletes(void **state)
{
	PQclear(fixture_sql(
		db,
		"INSERT INTO organisations (id, name) VALUES ('org_x', 'X');"
		"INSERT INTO agents (id, org_id) VALUES ('agent_x', 'org_x');"
		"INSERT INTO campaigns (id, org_id, agent_id) VALUES ('cmp_x', 'org_x', 'agent_x');"
		"INSERT INTO batches (id, org_id, campaign_id) VALUES ('batch_x', 'org_x', "
		"'cmp_x');"
		"INSERT INTO contacts (org_id, campaign_id, batch_id, phone) VALUES "
		"('org_x', 'cmp_x', 'batch_x', '+14155550199');"
		"INSERT INTO calls (id, org_id, campaign_id, agent_id, contact_id, to_number, "
		"gate_mode, gate_epoch) SELECT gen_random_uuid(), 'org_x', 'cmp_x', 'agent_x', id, "
		"phone, 'redis', 1 FROM contacts WHERE org_id = 'org_x'"));
	/* A second live call for the same contact is refused... */
	assert_false(
		accepted("INSERT INTO calls (id, org_id, campaign_id, agent_id, contact_id, "
			 "to_number, gate_mode, gate_epoch) SELECT gen_random_uuid(), 'org_x', "
			 "'cmp_x', 'agent_x', id, phone, 'redis', 1 FROM contacts WHERE org_id = "
			 "'org_x'"));
	/* ...once the first has ended, the next attempt may be written. */
	assert_true(
		accepted("UPDATE calls SET state = 'ended', ended_at = now() WHERE org_id = "
			 "'org_x'; INSERT INTO calls (id, org_id, campaign_id, agent_id, "
			 "contact_id, attempt, to_number, gate_mode, gate_epoch) SELECT "
			 "gen_random_uuid(), 'org_x', 'cmp_x', 'agent_x', id, 2, phone, 'redis', 1 "
			 "FROM contacts WHERE org_id = 'org_x'"));
	PQclear(fixture_sql(db, "DELETE FROM organisations WHERE id = 'org_x'"));
	assert_string_equal(value("SELECT count(*) FROM contacts WHERE org_id = 'org_x'"), "0");
	assert_string_equal(value("SELECT count(*) FROM calls WHERE org_id = 'org_x' AND "
				  "contact_id IS NULL"),
			    "1");
}

static void next_dialable_is_an_index_range_scan(void **state)
{
	PQclear(fixture_sql(db,
			    "INSERT INTO organisations (id, name) VALUES ('org_p', 'P');"
			    "INSERT INTO agents (id, org_id) VALUES ('agent_p', 'org_p');"
			    "INSERT INTO campaigns (id, org_id, agent_id) SELECT 'cmp_p' || g, "
			    "'org_p', 'agent_p' FROM generate_series(1, 6) g;"
			    "INSERT INTO batches (id, org_id, campaign_id) SELECT 'batch_p' || g, "
			    "'org_p', 'cmp_p' || g FROM generate_series(1, 6) g;"));
	PQclear(fixture_sql(
		db, "INSERT INTO contacts (org_id, campaign_id, batch_id, phone, state, "
		    "next_attempt_at)"
		    " SELECT 'org_p', 'cmp_p' || (g % 6 + 1), 'batch_p' || (g % 6 + 1),"
		    " '+1415' || lpad(g::text, 7, '0'),"
		    " (CASE WHEN g % 3 = 0 THEN 'done' WHEN g % 7 = 0 THEN 'failed' ELSE 'pending'"
		    " END)::contact_state, now() - interval '12 hours' + (g % 1440) * interval '1 "
		    "minute'"
		    " FROM generate_series(1, 120000) g"));
	PQclear(fixture_sql(db, "ANALYZE contacts"));
	assert_string_equal(value("SELECT count(*) >= 100000 FROM contacts WHERE org_id = 'org_p'"),
			    "t");
	assert_string_equal(
		value("SELECT count(DISTINCT campaign_id) FROM contacts WHERE org_id = 'org_p'"),
		"6");

	char sql[1024];
	snprintf(sql, sizeof(sql), "PREPARE next_dialable(text, int) AS %s", SQL_NEXT_DIALABLE);
	PQclear(fixture_sql(db, sql));
	snprintf(sql, sizeof(sql), "PREPARE count_due(text) AS %s", SQL_COUNT_DUE);
	PQclear(fixture_sql(db, sql));

	/* Custom and generic plans alike: a prepared statement switches to the generic plan after
	 * five executions. */
	const char *modes[] = { "force_custom_plan", "force_generic_plan" };
	const char *explains[] = { "EXPLAIN EXECUTE next_dialable('cmp_p3', 50)",
				   "EXPLAIN EXECUTE count_due('cmp_p3')" };
	for (int m = 0; m < 2; m++) {
		snprintf(sql, sizeof(sql), "SET plan_cache_mode = %s", modes[m]);
		PQclear(fixture_sql(db, sql));
		for (int q = 0; q < 2; q++) {
			PGresult *res = fixture_sql(db, explains[q]);
			char plan[4096] = "";
			for (int i = 0; i < PQntuples(res); i++) {
				strncat(plan, PQgetvalue(res, i, 0),
					sizeof(plan) - strlen(plan) - 2);
				strcat(plan, "\n");
			}
			PQclear(res);
			if (!strstr(plan, "contacts_dialable_idx") || strstr(plan, "Seq Scan"))
				fail_msg("%s (%s) does not use contacts_dialable_idx:\n%s",
					 explains[q], modes[m], plan);
		}
	}
	/* And the statement returns what it should: due pending rows of that campaign, in order. */
	PQclear(fixture_sql(db, "RESET plan_cache_mode"));
	PGresult *res = fixture_sql(db, "SELECT count(*) FROM (SELECT c.id FROM contacts c JOIN "
					"(SELECT id FROM contacts WHERE campaign_id = 'cmp_p3' AND "
					"state = 'pending' AND next_attempt_at <= now() ORDER BY "
					"next_attempt_at, id LIMIT 50) p USING (id)) x");
	assert_string_equal(PQgetvalue(res, 0, 0), "50");
	PQclear(res);
}

/* Migration 0011: the limits versions follow every input of the resolved limits, once per
 * statement, never twice for a writer who bumps by hand, never backwards; nothing else bumps
 * them; 0004's kicks are unchanged (one NOTIFY per org per statement); an organisation still
 * deletes with its agents and campaigns; contacts carry no limits trigger. */
static long long org_v(const char *org)
{
	char sql[128];
	snprintf(sql, sizeof(sql), "SELECT limits_version FROM organisations WHERE id = '%s'", org);
	return atoll(value(sql));
}

static int notifies(void)
{
	PGnotify *n;
	int count = 0;

	PQconsumeInput(db);
	while ((n = PQnotifies(db)) != NULL) {
		count += strcmp(n->relname, "dsp_refresh") == 0;
		PQfreemem(n);
	}
	return count;
}

/* Runs sql; checks the versions of org_v and org_w moved by dv and dw, and the NOTIFYs. */
static void bumps(const char *sql, int dv, int dw, int nn)
{
	long long v = org_v("org_v"), w = org_v("org_w");
	notifies();
	PQclear(fixture_sql(db, sql));
	int n = notifies();
	if (n != nn)
		fail_msg("%s: %d NOTIFYs (want %d)", sql, n, nn);
	if (org_v("org_v") != v + dv || org_v("org_w") != w + dw)
		fail_msg("%s: org_v %+lld (want %+d), org_w %+lld (want %+d)", sql,
			 org_v("org_v") - v, dv, org_v("org_w") - w, dw);
}

static void limits_versions_follow_limits(void **state)
{
	(void)state;
	PQclear(fixture_sql(db, "LISTEN dsp_refresh"));
	PQclear(fixture_sql(db, "INSERT INTO organisations (id, name) VALUES ('org_v', 'V'),"
				" ('org_w', 'W')"));
	bumps("INSERT INTO agents (id, org_id) VALUES ('ag_v1', 'org_v'), ('ag_v2', 'org_v'),"
	      " ('ag_w1', 'org_w')",
	      1, 1, 2);
	bumps("INSERT INTO campaigns (id, org_id, agent_id) VALUES ('cm_v1', 'org_v', 'ag_v1'),"
	      " ('cm_v2', 'org_v', 'ag_v1'), ('cm_v3', 'org_v', 'ag_v2'), ('cm_w1', 'org_w', "
	      "'ag_w1')",
	      1, 1, 2);
	bumps("UPDATE campaigns SET name = 'renamed', updated_at = now()", 0, 0, 0);
	bumps("UPDATE campaigns SET max_concurrent_calls = 5 WHERE org_id = 'org_v'", 1, 0, 1);
	bumps("UPDATE campaigns SET status = 'paused' WHERE id = 'cm_w1'", 0, 1, 1);
	bumps("UPDATE campaigns SET agent_id = 'ag_v2' WHERE id = 'cm_v1'", 1, 0, 1);
	bumps("UPDATE organisations SET name = 'renamed', updated_at = now()", 0, 0, 0);
	bumps("UPDATE organisations SET org_limit = 30 WHERE id = 'org_v'", 1, 0, 1);
	bumps("UPDATE organisations SET org_limit = 31, limits_version = limits_version + 1"
	      " WHERE id = 'org_v'",
	      1, 0, 1);
	bumps("UPDATE organisations SET per_agent_limit = 5 WHERE id = 'org_w'", 0, 1, 1);
	bumps("UPDATE organisations SET concurrency_management_enabled = false"
	      " WHERE id IN ('org_v', 'org_w')",
	      1, 1, 2);
	bumps("UPDATE organisations SET org_limit = 32, limits_version = limits_version - 3"
	      " WHERE id = 'org_v'",
	      1, 0, 1); /* never backwards */
	/* a transaction bumping by hand in its own statement: one more, harmless */
	bumps("BEGIN; UPDATE campaigns SET max_concurrent_calls = 6 WHERE id = 'cm_v2';"
	      " UPDATE organisations SET limits_version = limits_version + 1 WHERE id = 'org_v';"
	      " COMMIT",
	      2, 0, 1);
	bumps("DELETE FROM campaigns WHERE id IN ('cm_v3', 'cm_w1')", 1, 1, 2);
	bumps("DELETE FROM agents WHERE id = 'ag_w1'", 0, 1, 1);

	long long s = atoll(value("SELECT limits_version FROM system_settings"));
	PQclear(fixture_sql(db, "UPDATE system_settings SET updated_at = now()"));
	assert_int_equal(atoll(value("SELECT limits_version FROM system_settings")), s);
	PQclear(fixture_sql(db, "UPDATE system_settings SET global_limit = 900"));
	assert_int_equal(atoll(value("SELECT limits_version FROM system_settings")), s + 1);
	PQclear(fixture_sql(db, "UPDATE system_settings SET global_limit = 1000,"
				" limits_version = limits_version + 1"));
	assert_int_equal(atoll(value("SELECT limits_version FROM system_settings")), s + 2);
	assert_int_equal(notifies(), 2);

	/* contacts: no limits trigger (bulk inserts pay nothing new) */
	assert_string_equal(value("SELECT count(*) FROM pg_trigger t JOIN pg_proc p ON p.oid ="
				  " t.tgfoid WHERE t.tgrelid = 'contacts'::regclass AND p.proname"
				  " LIKE 'dsp_limits_version%'"),
			    "0");
	/* an organisation deletes with its agents and campaigns */
	PQclear(fixture_sql(db, "DELETE FROM organisations WHERE id IN ('org_v', 'org_w')"));
	assert_string_equal(value("SELECT count(*) FROM campaigns WHERE org_id IN ('org_v',"
				  " 'org_w')"),
			    "0");
	PQclear(fixture_sql(db, "UNLISTEN dsp_refresh"));
}

static int setup(void **state)
{
	fixture_start(&svc, true, false, false, true);
	db = fixture_pg(&svc);
	return 0;
}

static int teardown(void **state)
{
	PQfinish(db);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(spec_defaults),
		cmocka_unit_test(limits_at_below_above),
		cmocka_unit_test(contact_constraints),
		cmocka_unit_test(live_call_backstop_and_deletes),
		cmocka_unit_test(next_dialable_is_an_index_range_scan),
		cmocka_unit_test(limits_versions_follow_limits),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
