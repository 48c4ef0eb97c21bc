/* The demo's database writes (demo_int.h): migrations, then the organisation as an operator
 * would create it, through the named statements of demo_sql.h on one blocking connection. */
#include "demo_int.h"

#include "demo_sql.h"
#include "log.h"
#include "migrate.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct demo_campaign demo_campaigns[DEMO_CAMPAIGNS] = {
	{ "cmp-alpha", "from the start", 0, false },
	{ "cmp-bravo", "from the start", 0, false },
	{ "cmp-late", "joins late", 0, true },
	{ "cmp-capped", "ceiling", DEMO_CEILING, false },
};

static const struct {
	const char *name, *sql;
	int nparams;
} stmts[] = {
	{ "demo_org", DEMO_SQL_ORG, 4 },
	{ "demo_agent", DEMO_SQL_AGENT, 3 },
	{ "demo_campaign", DEMO_SQL_CAMPAIGN, 4 },
	{ "demo_batch", DEMO_SQL_BATCH, 4 },
	{ "demo_contacts", DEMO_SQL_CONTACTS, 5 },
	{ "demo_backlog", DEMO_SQL_BACKLOG, 1 },
	{ "demo_gate_mode", DEMO_SQL_GATE_MODE, 0 },
	{ "demo_db_counters", DEMO_SQL_DB_COUNTERS, 0 },
	{ "demo_due", DEMO_SQL_DUE, 1 },
	{ "demo_limits_bump", DEMO_SQL_LIMITS_BUMP, 1 },
	{ "demo_refresh_kick", DEMO_SQL_REFRESH_KICK, 1 },
};

/* Runs a named statement (or a plain command with name NULL); logs and returns -EIO on error. */
static int run(PGconn *pg, const char *name, const char *sql, int n, const char *const *v,
	       PGresult **keep)
{
	PGresult *r = name ? PQexecPrepared(pg, name, n, v, NULL, NULL, 0) : PQexec(pg, sql);
	ExecStatusType st = PQresultStatus(r);

	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
		log_error(LOG_MAIN, "demo: %s: %s", name ? name : sql, PQresultErrorMessage(r));
		PQclear(r);
		return -EIO;
	}
	if (keep)
		*keep = r;
	else
		PQclear(r);
	return 0;
}

static int prepare(PGconn *pg)
{
	for (size_t i = 0; i < sizeof(stmts) / sizeof(stmts[0]); i++) {
		PGresult *r = PQprepare(pg, stmts[i].name, stmts[i].sql, stmts[i].nparams, NULL);
		bool ok = PQresultStatus(r) == PGRES_COMMAND_OK;
		if (!ok)
			log_error(LOG_MAIN, "demo: prepare %s: %s", stmts[i].name,
				  PQresultErrorMessage(r));
		PQclear(r);
		if (!ok)
			return -EIO;
	}
	return 0;
}

/* The campaign i with its batch and contacts (in the caller's transaction). */
static int write_campaign(PGconn *pg, const struct demo_options *o, size_t i)
{
	const struct demo_campaign *c = &demo_campaigns[i];
	char ceiling[16], batch[80], count[16], first[24];
	uint32_t n = demo_contacts_per_campaign(o);

	snprintf(ceiling, sizeof(ceiling), "%u", c->ceiling);
	snprintf(batch, sizeof(batch), "batch-%s", c->id + 4);
	snprintf(count, sizeof(count), "%u", n);
	/* +1 555 0i0 0000 onwards: distinct numbers per campaign */
	snprintf(first, sizeof(first), "%llu", 15550000000ULL + (unsigned long long)i * 10000000);
	const char *cv[] = { c->id, DEMO_ORG, DEMO_AGENT, c->ceiling ? ceiling : NULL };
	const char *bv[] = { batch, DEMO_ORG, c->id, count };
	const char *kv[] = { DEMO_ORG, c->id, batch, first, count };
	int e;

	if ((e = run(pg, "demo_campaign", NULL, 4, cv, NULL)) ||
	    (e = run(pg, "demo_batch", NULL, 4, bv, NULL)) ||
	    (e = run(pg, "demo_contacts", NULL, 5, kv, NULL)))
		return e;
	return 0;
}

int demo_setup(PGconn *pg, const struct demo_options *o)
{
	char lines[16];
	int e;

	if (migrate_apply(pg, NULL))
		return -EIO;
	/* --bench: statements per cycle (embedded_options.pg_stat_statements preloads it) */
	if (o->bench &&
	    (e = run(pg, NULL, "CREATE EXTENSION IF NOT EXISTS pg_stat_statements", 0, NULL, NULL)))
		return e;
	if ((e = prepare(pg)))
		return e;
	snprintf(lines, sizeof(lines), "%u", o->lines);
	/* the bench must measure the dial cycle, not the rate limits */
	const char *ov[] = { DEMO_ORG, "Demo organisation", lines,
			     o->bench ? "100000000" : "100000" };
	const char *av[] = { DEMO_AGENT, DEMO_ORG, "+15550000001" };
	if ((e = run(pg, NULL, "BEGIN", 0, NULL, NULL)) ||
	    (e = run(pg, "demo_org", NULL, 4, ov, NULL)) ||
	    (e = run(pg, "demo_agent", NULL, 3, av, NULL)))
		return e;
	for (size_t i = 0; i < DEMO_CAMPAIGNS; i++)
		if (!demo_campaigns[i].late && (e = write_campaign(pg, o, i)))
			return e;
	if ((e = run(pg, NULL, "COMMIT", 0, NULL, NULL)) ||
	    (e = run(pg, NULL, "ANALYZE", 0, NULL, NULL)))
		return e;
	/* --bench: this backend's counters (the contacts just inserted) reach pg_stat_database
	 * now, not up to 10 s later in the middle of the window (rows written per cycle) */
	if (o->bench && (e = run(pg, NULL, "SELECT pg_stat_force_next_flush()", 0, NULL, NULL)))
		return e;
	return 0;
}

int demo_late_join(PGconn *pg, const struct demo_options *o)
{
	const char *v[] = { DEMO_ORG };
	int e;

	if ((e = run(pg, NULL, "BEGIN", 0, NULL, NULL)))
		return e;
	if ((e = run(pg, "demo_limits_bump", NULL, 1, v, NULL)) ||
	    (e = run(pg, "demo_refresh_kick", NULL, 1, v, NULL))) {
		PQclear(PQexec(pg, "ROLLBACK"));
		return e;
	}
	for (size_t i = 0; i < DEMO_CAMPAIGNS; i++) {
		if (demo_campaigns[i].late && (e = write_campaign(pg, o, i))) {
			PQclear(PQexec(pg, "ROLLBACK"));
			return e;
		}
	}
	return run(pg, NULL, "COMMIT", 0, NULL, NULL);
}

int demo_backlog(PGconn *pg, uint32_t *pending, uint32_t *busy)
{
	const char *v[] = { DEMO_ORG };
	PGresult *r;
	int e;

	if ((e = run(pg, "demo_backlog", NULL, 1, v, &r)))
		return e;
	for (size_t i = 0; i < DEMO_CAMPAIGNS; i++)
		pending[i] = busy[i] = 0;
	for (int row = 0; row < PQntuples(r); row++) {
		for (size_t i = 0; i < DEMO_CAMPAIGNS; i++) {
			if (strcmp(PQgetvalue(r, row, 0), demo_campaigns[i].id) == 0) {
				pending[i] = (uint32_t)strtoul(PQgetvalue(r, row, 1), NULL, 10);
				busy[i] = (uint32_t)strtoul(PQgetvalue(r, row, 2), NULL, 10);
			}
		}
	}
	PQclear(r);
	return 0;
}

int demo_gate_mode(PGconn *pg, char *mode, size_t len)
{
	PGresult *r;
	int e;

	if ((e = run(pg, "demo_gate_mode", NULL, 0, NULL, &r)))
		return e;
	if (PQntuples(r) == 1)
		snprintf(mode, len, "%s mode, epoch %s", PQgetvalue(r, 0, 0), PQgetvalue(r, 0, 1));
	PQclear(r);
	return 0;
}

int demo_db_counters(PGconn *pg, double *xact, double *rows)
{
	PGresult *r;

	if (run(pg, "demo_db_counters", NULL, 0, NULL, &r))
		return -EIO;
	*xact = PQntuples(r) == 1 ? strtod(PQgetvalue(r, 0, 0), NULL) : 0;
	*rows = PQntuples(r) == 1 ? strtod(PQgetvalue(r, 0, 1), NULL) : 0;
	PQclear(r);
	return 0;
}

int demo_due(PGconn *pg, const char *campaign, bool *due)
{
	const char *v[] = { campaign };
	PGresult *r;

	if (run(pg, "demo_due", NULL, 1, v, &r))
		return -EIO;
	*due = PQntuples(r) == 1 && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
	PQclear(r);
	return 0;
}

int demo_stmt_reset(PGconn *pg)
{
	return run(pg, NULL, DEMO_SQL_STMT_RESET, 0, NULL, NULL);
}

int demo_stmt_totals(PGconn *pg, double *calls, double *rows)
{
	PGresult *r;

	if (run(pg, NULL, DEMO_SQL_STMT_TOTALS, 0, NULL, &r))
		return -EIO;
	*calls = PQntuples(r) == 1 ? strtod(PQgetvalue(r, 0, 0), NULL) : 0;
	*rows = PQntuples(r) == 1 ? strtod(PQgetvalue(r, 0, 1), NULL) : 0;
	PQclear(r);
	return 0;
}

int demo_stmt_top(PGconn *pg, FILE *out)
{
	PGresult *r;

	if (run(pg, NULL, DEMO_SQL_STMT_TOP, 0, NULL, &r))
		return -EIO;
	fprintf(out,
		"\nPostgreSQL statements in the window, by total time (pg_stat_statements; the "
		"demo's own left out):\n%8s %10s %9s %9s  %s\n",
		"calls", "exec_ms", "plan_ms", "rows", "query");
	for (int i = 0; i < PQntuples(r); i++)
		fprintf(out, "%8s %10s %9s %9s  %s\n", PQgetvalue(r, i, 0), PQgetvalue(r, i, 1),
			PQgetvalue(r, i, 2), PQgetvalue(r, i, 3), PQgetvalue(r, i, 4));
	PQclear(r);
	return 0;
}
