#include "migrate.h"

#include "embedded_file.h"
#include "error.h"
#include "log.h"
#include "pg_conn.h"

#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern const struct embedded_file embedded_migrations[];
extern const size_t embedded_migrations_count;

#define MAX_MIGRATIONS 1000

struct applied {
	int version;
	char checksum[65];
};

static const char create_table_sql[] = "CREATE TABLE IF NOT EXISTS schema_migrations ("
				       " version integer PRIMARY KEY,"
				       " name text NOT NULL,"
				       " checksum text NOT NULL,"
				       " applied_at timestamptz NOT NULL DEFAULT now())";

static void sha256_hex(const char *text, size_t len, char out[65])
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	EVP_Digest(text, len, md, &mdlen, EVP_sha256(), NULL);
	for (unsigned i = 0; i < mdlen && i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
	out[64] = '\0';
}

/* Returns the version encoded in "NNNN_name.sql", or -1. */
static int file_version(const char *name)
{
	int v = 0;
	size_t i = 0;

	for (; i < 4; i++) {
		if (name[i] < '0' || name[i] > '9')
			return -1;
		v = v * 10 + (name[i] - '0');
	}
	if (name[i] != '_' || strlen(name) < 10 || strcmp(name + strlen(name) - 4, ".sql") != 0)
		return -1;
	return v;
}

static int check_ok(PGconn *conn, PGresult *res, ExecStatusType want, const char *what)
{
	if (PQresultStatus(res) == want)
		return 0;
	log_error(LOG_PG, "%s failed: %s", what, PQerrorMessage(conn));
	return DSP_EPG;
}

static int exec_simple(PGconn *conn, const char *sql, const char *what)
{
	PGresult *res = PQexec(conn, sql);
	int rc = check_ok(conn, res, PGRES_COMMAND_OK, what);
	PQclear(res);
	return rc;
}

/* Reads schema_migrations into list (at most max rows). Returns the count or a negative code. */
static int read_applied(PGconn *conn, struct applied *list, int max)
{
	PGresult *res = PQexec(conn, "SELECT version, checksum FROM schema_migrations ORDER BY 1");
	int rc = check_ok(conn, res, PGRES_TUPLES_OK, "reading schema_migrations");
	int n = 0;

	if (rc == 0) {
		for (int i = 0; i < PQntuples(res) && n < max; i++, n++) {
			list[n].version = atoi(PQgetvalue(res, i, 0));
			snprintf(list[n].checksum, sizeof(list[n].checksum), "%s",
				 PQgetvalue(res, i, 1));
		}
	}
	PQclear(res);
	return rc < 0 ? rc : n;
}

static const struct applied *find_applied(const struct applied *list, int n, int version)
{
	for (int i = 0; i < n; i++) {
		if (list[i].version == version)
			return &list[i];
	}
	return NULL;
}

static int apply_one(PGconn *conn, const struct embedded_file *f, int version, const char *sum)
{
	char vbuf[16];
	const char *params[3] = { vbuf, f->name, sum };
	int rc;

	snprintf(vbuf, sizeof(vbuf), "%d", version);
	rc = exec_simple(conn, "BEGIN", "BEGIN");
	if (rc < 0)
		return rc;
	PGresult *res = PQexec(conn, f->text);
	ExecStatusType st = PQresultStatus(res);
	if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
		log_error(LOG_PG, "migration %s failed: %s", f->name, PQerrorMessage(conn));
		PQclear(res);
		exec_simple(conn, "ROLLBACK", "ROLLBACK");
		return DSP_EMIGRATION;
	}
	PQclear(res);
	res = PQexecParams(
		conn, "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
		3, NULL, params, NULL, NULL, 0);
	rc = check_ok(conn, res, PGRES_COMMAND_OK, "recording a migration");
	PQclear(res);
	if (rc < 0) {
		exec_simple(conn, "ROLLBACK", "ROLLBACK");
		return rc;
	}
	rc = exec_simple(conn, "COMMIT", "COMMIT");
	if (rc == 0)
		log_info(LOG_PG, "applied migration %s", f->name);
	return rc;
}

/* Walks the compiled-in files against the applied list; applies the pending ones when apply is
 * true. The caller holds the advisory lock (apply) or needs none (status). */
static int walk(PGconn *conn, bool apply, struct migrate_report *r)
{
	static struct applied list[MAX_MIGRATIONS];
	int last = -1;
	int n = read_applied(conn, list, MAX_MIGRATIONS);

	if (n < 0)
		return n;
	memset(r, 0, sizeof(*r));
	r->known = (int)embedded_migrations_count;
	for (size_t i = 0; i < embedded_migrations_count; i++) {
		const struct embedded_file *f = &embedded_migrations[i];
		int version = file_version(f->name);
		char sum[65];

		if (version <= last) {
			log_error(LOG_PG, "migration file name %s is not NNNN_name.sql in order",
				  f->name);
			return DSP_EMIGRATION;
		}
		last = version;
		sha256_hex(f->text, f->len, sum);
		const struct applied *a = find_applied(list, n, version);
		if (a) {
			if (strcmp(a->checksum, sum) != 0) {
				log_error(LOG_PG,
					  "migration %s was changed after it was applied (checksum "
					  "%.12s "
					  "in the database, %.12s in this build): add a new "
					  "migration "
					  "instead of editing an applied one",
					  f->name, a->checksum, sum);
				return DSP_EMIGRATION;
			}
			r->applied++;
			continue;
		}
		if (!apply)
			continue;
		int rc = apply_one(conn, f, version, sum);
		if (rc < 0)
			return rc;
		r->ran++;
	}
	for (int i = 0; i < n; i++) {
		if (list[i].version > last)
			r->foreign++;
	}
	return 0;
}

int migrate_apply(PGconn *conn, struct migrate_report *report)
{
	struct migrate_report local;
	char lock_sql[96];
	char unlock_sql[96];
	int rc;

	snprintf(lock_sql, sizeof(lock_sql), "SELECT pg_advisory_lock(%lld)", MIGRATE_LOCK_KEY);
	snprintf(unlock_sql, sizeof(unlock_sql), "SELECT pg_advisory_unlock(%lld)",
		 MIGRATE_LOCK_KEY);
	PGresult *res = PQexec(conn, lock_sql);
	rc = check_ok(conn, res, PGRES_TUPLES_OK, "taking the migration lock");
	PQclear(res);
	if (rc < 0)
		return rc;
	rc = exec_simple(conn, create_table_sql, "creating schema_migrations");
	if (rc == 0)
		rc = walk(conn, true, report ? report : &local);
	res = PQexec(conn, unlock_sql);
	PQclear(res);
	return rc;
}

int migrate_status(PGconn *conn, struct migrate_report *report)
{
	PGresult *res = PQexec(conn, "SELECT to_regclass('schema_migrations') IS NOT NULL");
	int rc = check_ok(conn, res, PGRES_TUPLES_OK, "looking for schema_migrations");
	bool exists = rc == 0 && strcmp(PQgetvalue(res, 0, 0), "t") == 0;

	PQclear(res);
	if (rc < 0)
		return rc;
	if (!exists) {
		memset(report, 0, sizeof(*report));
		report->known = (int)embedded_migrations_count;
		return 0;
	}
	return walk(conn, false, report);
}

int migrate_main(const struct settings *s, bool status_only)
{
	struct migrate_report r;
	int rc;

	if (!s->database_url) {
		fprintf(stderr, "dispatcher: migrate: DATABASE_URL is not set; set it to the "
				"PostgreSQL connection string (for example "
				"postgresql://user@host/dbname)\n");
		return 2;
	}
	PGconn *conn;
	char why[256];
	if (pg_connect_blocking(s->database_url, (uint64_t)s->pg_connect_timeout_ms, &conn, why,
				sizeof(why)) < 0) {
		fprintf(stderr,
			"dispatcher: migrate: cannot connect to DATABASE_URL: %s "
			"(DISPATCHER_PG_CONNECT_TIMEOUT_MS=%lld)\n",
			why, s->pg_connect_timeout_ms);
		return 1;
	}
	pg_route_notices(conn);
	PGresult *res = PQexec(conn, "SET application_name = 'dispatcher migrate'");
	PQclear(res);
	rc = status_only ? migrate_status(conn, &r) : migrate_apply(conn, &r);
	PQfinish(conn);
	if (rc < 0) {
		fprintf(stderr, "dispatcher: migrate: %s (see the log line above)\n",
			dsp_strerror(rc));
		return 1;
	}
	if (status_only) {
		printf("migrate: %d of %d migrations applied, %d pending%s\n", r.applied, r.known,
		       r.known - r.applied, r.foreign ? " (the database has newer ones)" : "");
		return r.applied == r.known ? 0 : 3;
	}
	if (r.ran == 0)
		printf("migrate: schema is current (%d migrations), nothing to do\n", r.known);
	else
		printf("migrate: applied %d of %d migrations\n", r.ran, r.known);
	if (r.foreign)
		log_warn(LOG_PG, "the database has %d migrations newer than this build", r.foreign);
	return 0;
}
