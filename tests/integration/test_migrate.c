/* `dispatcher migrate`: two migrators that certainly overlap apply each file exactly once;
 * re-running is a no-op; a changed applied file is refused. */
#include "embedded_file.h"
#include "fixture.h"
#include "migrate.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

static struct embedded svc;

extern const struct embedded_file embedded_migrations[];
extern const size_t embedded_migrations_count;

static int count(PGconn *c, const char *sql)
{
	PGresult *res = fixture_sql(c, sql);
	int n = atoi(PQgetvalue(res, 0, 0));
	PQclear(res);
	return n;
}

static int run_migrate(char *arg, char **out)
{
	int fd;
	char *args[] = { "migrate", arg, NULL };
	pid_t pid = fixture_spawn_dispatcher(args, &fd);
	*out = fixture_read_all(fd);
	return fixture_wait(pid);
}

static void concurrent_migrators_apply_once(void **state)
{
	PGconn *holder = fixture_pg(&svc);
	PGconn *watch = fixture_pg(&svc);
	char sql[256];
	int fd[2];
	pid_t pid[2];
	char *args[] = { "migrate", NULL };

	/* The test holds the migration lock, so both migrators must wait on it. */
	snprintf(sql, sizeof(sql), "SELECT pg_advisory_lock(%lld)", MIGRATE_LOCK_KEY);
	PQclear(fixture_sql(holder, sql));
	for (int i = 0; i < 2; i++)
		pid[i] = fixture_spawn_dispatcher(args, &fd[i]);

	long long deadline = fixture_now_ms() + 60000;
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
		 " AND ((classid::bigint << 32) | objid::bigint) = %lld",
		 MIGRATE_LOCK_KEY);
	while (count(watch, sql) < 2) {
		if (fixture_now_ms() > deadline)
			fail_msg("the two migrators were never both seen waiting on the lock");
		fixture_sleep_ms(20);
	}
	assert_int_equal(count(watch, "SELECT count(*) FROM pg_tables WHERE tablename = "
				      "'organisations'"),
			 0);

	snprintf(sql, sizeof(sql), "SELECT pg_advisory_unlock(%lld)", MIGRATE_LOCK_KEY);
	PQclear(fixture_sql(holder, sql));
	char *out[2];
	for (int i = 0; i < 2; i++) {
		out[i] = fixture_read_all(fd[i]);
		assert_int_equal(fixture_wait(pid[i]), 0);
	}
	/* One applied everything, the other found nothing to do. */
	int applied = (strstr(out[0], "applied") != NULL) + (strstr(out[1], "applied") != NULL);
	int noop = (strstr(out[0], "nothing to do") != NULL) +
		   (strstr(out[1], "nothing to do") != NULL);
	assert_int_equal(applied, 1);
	assert_int_equal(noop, 1);
	free(out[0]);
	free(out[1]);

	assert_true(count(watch, "SELECT count(*) FROM schema_migrations") >= 1);
	assert_int_equal(count(watch, "SELECT count(*) - count(DISTINCT version) FROM "
				      "schema_migrations"),
			 0);
	assert_int_equal(count(watch, "SELECT count(*) FROM system_settings"), 1);
	assert_int_equal(count(watch, "SELECT count(*) FROM leases"), 3); /* + retention (0006) */
	PQfinish(holder);
	PQfinish(watch);
}

static void rerun_is_noop_and_status_is_current(void **state)
{
	char *out;
	PGconn *c = fixture_pg(&svc);
	int before = count(c, "SELECT count(*) FROM schema_migrations");

	assert_int_equal(run_migrate(NULL, &out), 0);
	assert_non_null(strstr(out, "nothing to do"));
	free(out);
	assert_int_equal(run_migrate("--status", &out), 0);
	assert_non_null(strstr(out, "0 pending"));
	free(out);
	assert_int_equal(count(c, "SELECT count(*) FROM schema_migrations"), before);
	PQfinish(c);
}

static void changed_applied_file_is_refused(void **state)
{
	char *out;
	PGconn *c = fixture_pg(&svc);

	PQclear(fixture_sql(
		c, "UPDATE schema_migrations SET checksum = 'tampered' WHERE version = 1"));
	assert_int_equal(run_migrate(NULL, &out), 1);
	free(out);
	assert_int_equal(run_migrate("--status", &out), 1);
	free(out);
	PQclear(fixture_sql(c, "DELETE FROM schema_migrations WHERE version = 1"));
	/* A pending migration is reported by --status with exit 3 (and not applied by it). */
	assert_int_equal(run_migrate("--status", &out), 3);
	assert_non_null(strstr(out, "1 pending"));
	free(out);
	PQfinish(c);
}

static void bad_invocations(void **state)
{
	char *out;

	assert_int_equal(run_migrate("--bogus", &out), 2);
	free(out);
	unsetenv("DATABASE_URL");
	assert_int_equal(run_migrate(NULL, &out), 2);
	free(out);
	setenv("DATABASE_URL", "host=/nonexistent port=1 dbname=x", 1);
	assert_int_equal(run_migrate(NULL, &out), 1);
	free(out);
	setenv("DATABASE_URL", svc.database_url, 1);
}

/* Runs the embedded migrations whose name sorts before (before true) or from `from` on c. */
static void run_files(PGconn *c, const char *from, bool before)
{
	for (size_t i = 0; i < embedded_migrations_count; i++)
		if ((strcmp(embedded_migrations[i].name, from) < 0) == before)
			PQclear(fixture_sql(c, embedded_migrations[i].text));
}

/* 0004 moves the refresher's carries from one fair_share_floors row per campaign to one
 * fair_share_carries row per organisation: every stored carry survives exactly (extreme
 * values included), rows kept only for their carry leave fair_share_floors, the others stay. */
static void carries_migrate_exactly(void **state)
{
	PGconn *a = fixture_pg(&svc);
	PQclear(fixture_sql(a, "DROP DATABASE IF EXISTS mig4"));
	PQclear(fixture_sql(a, "CREATE DATABASE mig4"));
	char url[600];
	snprintf(url, sizeof(url), "%s", svc.database_url);
	char *db = strstr(url, "dbname=");
	assert_non_null(db);
	snprintf(db, sizeof(url) - (size_t)(db - url), "dbname=mig4");
	PGconn *c = PQconnectdb(url);
	assert_int_equal(PQstatus(c), CONNECTION_OK);
	run_files(c, "0004", true);
	PQclear(fixture_sql(
		c, "INSERT INTO organisations (id, name) VALUES ('o1', 'o1'), ('o2', 'o2');"
		   "INSERT INTO fair_share_installs (org_id, version, expires_at)"
		   " VALUES ('o1', 77, now());"
		   "INSERT INTO fair_share_floors (org_id, campaign_id, floor, version, active,"
		   " deficit_us, fluid_num, fluid_den, idle_ms) VALUES"
		   " ('o1', 'b', 3, 77, true, -9223372036854775807, 9223372036854775806, 10000, 0),"
		   " ('o1', '', 0, 77, false, 123456789012345, 1, 3, 0),"
		   " ('o1', 'a', 0, 77, false, -1, 0, 0, 9223372036854775807),"
		   " ('o2', 'z', 0, 5, true, 42, 7, 9, 0)"));
	run_files(c, "0004", false);
	PGresult *res = fixture_sql(
		c, "SELECT org_id, version, campaign_ids::text, floors::text, deficit_us::text,"
		   " fluid_num::text, fluid_den::text, idle_ms::text FROM fair_share_carries"
		   " ORDER BY org_id");
	assert_int_equal(PQntuples(res), 2);
	const char *want[2][8] = {
		{ "o1", "77", "{\"\",a,b}", "{0,0,3}", "{123456789012345,-1,-9223372036854775807}",
		  "{1,0,9223372036854775806}", "{3,0,10000}", "{0,9223372036854775807,0}" },
		{ "o2", "5", "{z}", "{0}", "{42}", "{7}", "{9}", "{0}" },
	};
	for (int r = 0; r < 2; r++)
		for (int k = 0; k < 8; k++)
			assert_string_equal(PQgetvalue(res, r, k), want[r][k]);
	PQclear(res);
	res = fixture_sql(
		c, "SELECT string_agg(org_id || '/' || campaign_id || '/' || floor ||"
		   " '/' || active, ' ' ORDER BY org_id, campaign_id) FROM fair_share_floors");
	assert_string_equal(PQgetvalue(res, 0, 0), "o1/b/3/true o2/z/0/true");
	PQclear(res);
	assert_int_equal(count(c,
			       "SELECT count(*) FROM information_schema.columns WHERE"
			       " table_name = 'fair_share_floors' AND column_name = 'deficit_us'"),
			 0);
	PQfinish(c);
	PQclear(fixture_sql(a, "DROP DATABASE mig4"));
	PQfinish(a);
}

static int setup(void **state)
{
	fixture_start(&svc, true, false, false, false);
	return 0;
}

static int teardown(void **state)
{
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(concurrent_migrators_apply_once),
		cmocka_unit_test(rerun_is_noop_and_status_is_current),
		cmocka_unit_test(changed_applied_file_is_refused),
		cmocka_unit_test(bad_invocations),
		cmocka_unit_test(carries_migrate_exactly),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
