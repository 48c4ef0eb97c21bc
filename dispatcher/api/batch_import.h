/* The batch importer behind POST /v2/batches (JSON) and POST /v2/batches/upload (CSV): SPEC R6,
 * issue 10 item 4. The routes parse the request and hand the contacts here; this module
 * validates them, streams them into PostgreSQL with COPY, checks the organisation's pending
 * ceiling and answers one result. Rules and figures: dispatcher/api/README.md, "Batch import".
 *
 * All or nothing, in one transaction on a connection of the pool: INSERT the batch row (its id
 * drawn here), COPY the contacts as they are validated (constant memory whatever the count),
 * UPDATE its total, count the organisation's backlog under a statement timeout, COMMIT. Any
 * bad contact, a bad file, the ceiling, a database error or an abort: ROLLBACK, nothing
 * written. Validation goes on to the end of the input after the first bad contact, to count
 * them; the message names at most BATCH_IMPORT_MAX_NAMED of them.
 *
 *     batch_import_new(loop, pool, &opts, &imp);           (starts the transaction)
 *     CSV:  rc = batch_import_feed(imp, chunk, len);       (any chunk sizes)
 *     JSON: rc = batch_import_add(imp, phone, n, vars, m); (one contact at a time)
 *           rc == BATCH_IMPORT_PAUSE: feed nothing more until resume_cb
 *     batch_import_finish(imp);                            (end of the body)
 *     -> done_cb(result) once; or batch_import_abort(imp, ...) when the client went away.
 *
 * Async contract: when batch_import_new() returns 0, exactly one of these happens: done_cb is
 * called once (never from inside a call of this API, always after batch_import_finish()), or
 * the caller calls batch_import_abort(), after which no callback of the import is called
 * (its closed_cb excepted). resume_cb is called zero or more times, only after a feed or add
 * returned BATCH_IMPORT_PAUSE, never from inside a call of this API. The pool closing
 * completes the import with BATCH_IMPORT_UNAVAILABLE at finish.
 *
 * One import holds one connection of the pool (an interactive transaction) from
 * batch_import_new() until its result: a route caps how many run at once.
 */
#ifndef DSP_API_BATCH_IMPORT_H
#define DSP_API_BATCH_IMPORT_H

#include "pg_pool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include <cjson/cJSON.h>

#define BATCH_IMPORT_MAX_NAMED	     20	    /* offending rows named in a message, at most */
#define BATCH_IMPORT_DEFAULT_CEILING 250000 /* organisations.pending_ceiling's default */
#define BATCH_IMPORT_PAUSE	     1	    /* feed/add: wait for resume_cb */
#define BATCH_IMPORT_ID_LEN	     26	    /* "batch_" + 20 hex digits */
#define BATCH_IMPORT_MAX_VARIABLES   65536  /* a JSON contact's variables text, bytes */
#define BATCH_IMPORT_MAX_NAME	     200    /* a batch's name, bytes */

enum batch_import_source {
	BATCH_IMPORT_JSON = 0, /* POST /v2/batches: batch_import_add() */
	BATCH_IMPORT_CSV = 1,  /* POST /v2/batches/upload: batch_import_feed() */
};

enum batch_import_status {
	BATCH_IMPORT_OK = 0,	  /* 201: committed */
	BATCH_IMPORT_INVALID,	  /* 422: bad contacts or a bad file (rows named) */
	BATCH_IMPORT_NOT_FOUND,	  /* 404: no such campaign in this organisation */
	BATCH_IMPORT_CONFLICT,	  /* 409: the campaign is stopped or completed */
	BATCH_IMPORT_CEILING,	  /* 422: the pending ceiling would be passed */
	BATCH_IMPORT_UNAVAILABLE, /* 503: the database unreachable, timed out or closed */
	BATCH_IMPORT_ERROR,	  /* 500: PostgreSQL refused a statement (logged) */
};

/* A bad contact, as named in the result (at most BATCH_IMPORT_MAX_NAMED of them). */
struct batch_import_row_error {
	uint64_t row;	  /* CSV: the file's row (header = 1); JSON: the contact's index, 0-based */
	char reason[120]; /* "phone: the number must start with + and its country code" */
};

/* What the import came to. Everything is borrowed for the done_cb call only. */
struct batch_import_result {
	enum batch_import_status status;
	int http_status;	 /* 201, 404, 409, 422, 500 or 503: what the route answers */
	const char *error;	 /* NULL on success; else a stable code: "invalid_contacts",
			      * "invalid_csv", "not_found", "campaign_not_accepting",
			      * "pending_ceiling_exceeded", "unavailable", "internal_error" */
	const char *message;	 /* English, for the body's "message"; "" on success */
	const char *batch_id;	 /* the committed batch (BATCH_IMPORT_OK), else NULL */
	const char *campaign_id; /* as given */
	const char *name;	 /* as given */
	enum batch_import_source source;
	uint64_t total_rows; /* contacts read (good and bad; CSV: header and blank lines not) */
	uint64_t bad_rows;   /* contacts refused */
	const struct batch_import_row_error *rows; /* the first n_rows bad contacts, in order */
	unsigned n_rows;
	uint64_t ceiling;	 /* the pending ceiling applied */
	bool ceiling_checked;	 /* false when the count timed out (failed open) or never ran */
	uint64_t pending_before; /* the organisation's backlog without this batch, when checked */
};

typedef void (*batch_import_done_cb)(const struct batch_import_result *res, void *data);
typedef void (*batch_import_resume_cb)(void *data);

struct batch_import_options {
	const char *org_id;	 /* the key's organisation (copied) */
	const char *campaign_id; /* from the request (copied) */
	const char *name;	 /* the batch's name (copied; NULL: ""), <= MAX_NAME bytes */
	enum batch_import_source source;
	uint64_t pending_ceiling;     /* organisations.pending_ceiling (0 allowed: refuses all) */
	uint64_t count_timeout_ms;    /* statement timeout of the backlog count (0: 2000) */
	uint64_t timeout_ms;	      /* the whole transaction, upload included (0: 600000) */
	uint32_t max_record_bytes;    /* CSV: a row as written (0: 65536) */
	uint32_t max_fields;	      /* CSV: columns (0: 256) */
	batch_import_done_cb done_cb; /* required */
	batch_import_resume_cb resume_cb; /* required */
	void *data;			  /* passed to both, borrowed */
};

struct batch_import;

/* Starts an import: checks opts, draws the batch id and begins the transaction on pool (both
 * borrowed; they must outlive the import). *out is the caller's until done_cb returns or
 * batch_import_abort() is called. Returns 0, -EINVAL (a required option missing, a name too
 * long or not UTF-8, an id empty), -ENOMEM, or pg_pool_begin()'s error (-ENOTCONN...). */
int batch_import_new(uv_loop_t *loop, struct pg_pool *pool, const struct batch_import_options *opts,
		     struct batch_import **out);

/* CSV: parses len bytes of the file (borrowed for the call; any chunk boundaries; consumed
 * whole). Returns 0 (go on), BATCH_IMPORT_PAUSE (taken, but feed nothing more until
 * resume_cb), or -EINVAL (a JSON import, after finish, NULL data with len > 0). */
int batch_import_feed(struct batch_import *imp, const void *data, size_t len);

/* JSON: one contact: its phone as written (phone_len bytes, borrowed) and its variables as the
 * text of a JSON object (borrowed; NULL: none). Both are validated here, like a CSV row.
 * Returns as batch_import_feed() (-EINVAL for a CSV import). */
int batch_import_add(struct batch_import *imp, const char *phone, size_t phone_len,
		     const char *variables, size_t variables_len);

/* Whether the outcome no longer depends on the rest of the input (a malformed file, an unknown
 * campaign, a database failure): a route may stop reading the body and finish at once. */
bool batch_import_settled(const struct batch_import *imp);

/* Ends the input: the file's last row, the checks, COMMIT or ROLLBACK; done_cb follows (never
 * from inside this call). Returns 0 or -EINVAL when called twice. */
int batch_import_finish(struct batch_import *imp);

/* The client went away: rolls back (nothing is written), calls no callback of the import
 * again, and frees it; closed_cb (may be NULL) is called once that is over. imp must not be
 * used after this call. Not allowed once done_cb has been called. */
void batch_import_abort(struct batch_import *imp, void (*closed_cb)(void *data), void *data);

/* The body a route answers: {"id","campaign_id","name","source","status":"active",
 * "total_contacts","pending_ceiling":{"limit","checked","pending_before"}} on success;
 * {"error": code, "message", "rows":[...], "invalid_rows"} otherwise. Returns a tree (free with
 * cJSON_Delete) or NULL when out of memory. */
cJSON *batch_import_result_json(const struct batch_import_result *res);

#endif
