/* Database migrations: the files in migrations/, compiled into the binary, applied in order.
 *
 * Each pending file runs in its own transaction and is recorded in schema_migrations with its
 * SHA-256; the whole run holds a PostgreSQL advisory lock, so workers that start together apply
 * each file exactly once (the others wait, then find nothing to do). An applied file whose text
 * has changed since is refused, never re-applied.
 */
#ifndef DSP_MIGRATE_H
#define DSP_MIGRATE_H

#include "settings.h"

#include <libpq-fe.h>
#include <stdbool.h>

/* The advisory lock key held while migrating (pg_locks: classid 0, objid 7564135). */
#define MIGRATE_LOCK_KEY 7564135LL

struct migrate_report {
	int known;   /* migrations compiled into this build */
	int applied; /* of those, applied in the database (before this run) */
	int ran;     /* applied by this run */
	int foreign; /* versions in the database that this build does not know (a newer build) */
};

/* Applies every pending migration over conn (a blocking connection, borrowed). Takes and
 * releases the advisory lock. Returns 0, DSP_EMIGRATION (a file failed, or an applied file was
 * changed: logged with the file's name) or DSP_EPG. Fills *report when not NULL. */
int migrate_apply(PGconn *conn, struct migrate_report *report);

/* Reads, without changing anything, how many migrations are applied and pending. Returns 0 or
 * DSP_EPG / DSP_EMIGRATION. */
int migrate_status(PGconn *conn, struct migrate_report *report);

/* `dispatcher migrate [--status]`: connects to DATABASE_URL, applies (or lists) migrations and
 * prints a one-line summary on stdout. Returns the process exit code: 0 done, 1 failed,
 * 2 DATABASE_URL not set, 3 (--status only) migrations pending. */
int migrate_main(const struct settings *s, bool status_only);

#endif
