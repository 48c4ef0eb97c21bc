/* The batch importer (batch_import.h): validation, the COPY stream and the transaction.
 *
 * Input side (the caller's calls): CSV bytes go through common/csv.c, JSON contacts come one
 * by one; each good contact becomes one line of COPY text in out, and out is handed to the
 * COPY as the connection takes it. When out holds more than HIGH_WATER bytes the caller is
 * told to pause; ready_cb (the COPY drained) resumes it below LOW_WATER. After the first bad
 * contact (or a failure of any kind) nothing more is written: the transaction is rolled back
 * at once and the input is only counted.
 *
 * Database side (pg callbacks): BEGIN -> INSERT the batch -> COPY (until the input ends) ->
 * UPDATE its total, SAVEPOINT, the backlog count under a statement timeout -> COMMIT, or
 * ROLLBACK on any failure. The result goes out once the input has ended and the transaction
 * is over, through a zero timer, so done_cb never runs inside a call of the API.
 */
#include "batch_import.h"

#include "csv.h"
#include "e164.h"
#include "error.h"
#include "ident.h"
#include "json_strict.h"
#include "log.h"

#include <errno.h>
#include <math.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/rand.h>

#define HIGH_WATER (256 * 1024) /* bytes of COPY text buffered: pause the caller */
#define LOW_WATER  (64 * 1024)	/* resume below this */
#define PUT_BYTES  (64 * 1024)	/* one pg_copy_put */
#define MSG_BYTES  1024

static const char *const phone_columns[] = { "phone", "phone_number", "to_number" };

static const char sql_insert[] =
	"WITH c AS (SELECT status FROM campaigns WHERE org_id = $1 AND id = $2),"
	" b AS (INSERT INTO batches (id, org_id, campaign_id, name, source)"
	" SELECT $3, $1, $2, $4, $5 FROM c WHERE c.status IN ('active', 'paused') RETURNING id)"
	" SELECT c.status::text, (SELECT count(*) FROM b) FROM c";
static const char sql_copy[] =
	"COPY contacts (org_id, campaign_id, batch_id, phone, variables) FROM STDIN";
static const char sql_total[] = "UPDATE batches SET total_contacts = $2 WHERE id = $1";
static const char sql_timeout[] = "SELECT current_setting('statement_timeout'),"
				  " set_config('statement_timeout', $1, true)";
/* Imports of one organisation take their counts one at a time, so that two of them cannot
 * both fit under the ceiling by not seeing each other's rows. */
static const char sql_lock[] =
	"SELECT pg_advisory_xact_lock(hashtext('dsp_batch_import'), hashtext($1))";
/* The undialled backlog: pending contacts (the partial index contacts_org_pending_idx) and
 * the held ones of paused batches (contacts_batch_state_idx). This batch's rows included. */
static const char sql_count[] =
	"SELECT (SELECT count(*) FROM contacts WHERE org_id = $1 AND state = 'pending')"
	" + (SELECT count(*) FROM batches b JOIN contacts c ON c.batch_id = b.id"
	" WHERE b.org_id = $1 AND b.status = 'paused' AND c.state = 'held')";
static const char sql_restore[] = "SELECT set_config('statement_timeout', $1, true)";

enum phase {
	PH_BEGIN,  /* BEGIN queued */
	PH_INSERT, /* the batch row's INSERT sent */
	PH_COPY,   /* COPY queued or streaming */
	PH_CHECK,  /* total, savepoint, count sent */
	PH_END,	   /* COMMIT or ROLLBACK sent */
	PH_OVER,   /* the transaction is over (or never began) */
};

struct batch_import {
	uv_loop_t *loop;
	struct pg_pool *pool;
	struct batch_import_options opts; /* strings point to the copies below */
	char *org_id, *campaign_id, *name;
	char batch_id[BATCH_IMPORT_ID_LEN + 1];
	char prefix[3 * 80]; /* "org\tcampaign\tbatch\t": every COPY line starts with it */
	size_t prefix_len;

	enum phase phase;
	struct pg_txn *txn;   /* ours between BEGIN and COMMIT/ROLLBACK */
	struct pg_copy *copy; /* while the COPY takes data */
	bool copy_full;	      /* wait for ready_cb before the next put */
	bool copy_ended;      /* pg_copy_end() or pg_copy_abort() called */
	unsigned owed;	      /* pg callbacks still to come */
	bool count_timeout;   /* the backlog count timed out: fail open */
	char saved_timeout[32];

	char *out; /* COPY text not yet handed over */
	size_t out_len, out_off, out_cap;
	bool paused;

	/* CSV */
	struct csv_parser csv;
	void *csv_work;
	bool header_seen;
	uint32_t ncols, phone_col;
	char *keys;	  /* each column's "\"name\":" as JSON in COPY text, phone's empty */
	size_t *key_off;  /* ncols + 1 offsets into keys */
	uint64_t records; /* CSV records (header included) */

	/* counts and outcome */
	uint64_t rows, bad;
	struct batch_import_row_error named[BATCH_IMPORT_MAX_NAMED];
	unsigned n_named;
	bool stopping;			 /* nothing more is written; the transaction rolls back */
	bool settled;			 /* the outcome no longer depends on the input */
	enum batch_import_status status; /* a failure recorded before the end, else OK */
	const char *error;
	char message[MSG_BYTES];
	bool ceiling_checked;
	uint64_t pending_before;

	bool too_many; /* more rows than the ceiling: nothing more is written */
	bool in_api;   /* inside a call of the API: no callback from here */
	bool finished, delivered, aborted, closing;
	uv_timer_t defer; /* delivers the result outside the caller's calls */
	void (*closed_cb)(void *data);
	void *closed_data;
};

static void progress(struct batch_import *imp);

/* --- small helpers --- */

static int http_of(enum batch_import_status st)
{
	static const int code[] = { 201, 422, 404, 409, 422, 503, 500 };
	return code[st];
}

/* Formats n with thousands separators ("4,980") into buf (>= 27 bytes). */
static const char *thousands(uint64_t n, char *buf)
{
	char tmp[24];
	int len = snprintf(tmp, sizeof(tmp), "%" PRIu64, n), o = 0;

	for (int i = 0; i < len; i++) {
		if (i > 0 && (len - i) % 3 == 0)
			buf[o++] = ',';
		buf[o++] = tmp[i];
	}
	buf[o] = '\0';
	return buf;
}

/* Length of the longest prefix of s (len bytes, valid UTF-8) within max bytes that ends on a
 * character boundary. */
static size_t utf8_cut(const char *s, size_t len, size_t max)
{
	if (len <= max)
		return len;
	while (max > 0 && ((unsigned char)s[max] & 0xC0) == 0x80)
		max--;
	return max;
}

/* Whether s (len bytes) is UTF-8: no overlong form, surrogate or code point past U+10FFFF. */
static bool utf8_valid(const char *s, size_t len)
{
	const unsigned char *p = (const unsigned char *)s, *end = p + len;

	while (p < end) {
		unsigned c = *p++, need, lo = 0x80, hi = 0xBF;
		if (c < 0x80)
			continue;
		if (c >= 0xC2 && c <= 0xDF)
			need = 1;
		else if (c >= 0xE0 && c <= 0xEF) {
			need = 2;
			lo = c == 0xE0 ? 0xA0 : 0x80;
			hi = c == 0xED ? 0x9F : 0xBF;
		} else if (c >= 0xF0 && c <= 0xF4) {
			need = 3;
			lo = c == 0xF0 ? 0x90 : 0x80;
			hi = c == 0xF4 ? 0x8F : 0xBF;
		} else
			return false;
		for (unsigned i = 0; i < need; i++, lo = 0x80, hi = 0xBF)
			if (p >= end || *p < lo || *p++ > hi)
				return false;
	}
	return true;
}

/* --- the COPY text buffer --- */

static bool out_reserve(struct batch_import *imp, size_t more)
{
	if (imp->out_off > 0 && imp->out_off == imp->out_len)
		imp->out_off = imp->out_len = 0;
	if (imp->out_len + more <= imp->out_cap)
		return true;
	if (imp->out_off > 0) { /* compact before growing */
		memmove(imp->out, imp->out + imp->out_off, imp->out_len - imp->out_off);
		imp->out_len -= imp->out_off;
		imp->out_off = 0;
		if (imp->out_len + more <= imp->out_cap)
			return true;
	}
	size_t cap = imp->out_cap ? imp->out_cap : 64 * 1024;
	while (cap < imp->out_len + more)
		cap *= 2;
	char *grown = realloc(imp->out, cap);
	if (!grown)
		return false;
	imp->out = grown;
	imp->out_cap = cap;
	return true;
}

static void out_put(struct batch_import *imp, const char *s, size_t n)
{
	memcpy(imp->out + imp->out_len, s, n);
	imp->out_len += n;
}

/* Writes s as the inside of a JSON string, escaped again for COPY's text format (every
 * backslash doubled; no raw control character is left). Needs 12 bytes per input byte at
 * most. Returns the bytes written at dst. */
static size_t json_copy_str(char *dst, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";
	char *o = dst;

	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c == '"' || c == '\\') {
			*o++ = '\\';
			*o++ = '\\';
			if (c == '\\') {
				*o++ = '\\';
				*o++ = '\\';
			} else
				*o++ = '"';
		} else if (c < 0x20) {
			memcpy(o, "\\\\u00", 5);
			o += 5;
			*o++ = hex[c >> 4];
			*o++ = hex[c & 15];
		} else
			*o++ = (char)c;
	}
	return (size_t)(o - dst);
}

/* Copies JSON text s into dst escaped for COPY's text format. Needs 2 bytes per byte. */
static size_t copy_text(char *dst, const char *s, size_t len)
{
	char *o = dst;

	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		if (c == '\\' || c == '\n' || c == '\r' || c == '\t') {
			*o++ = '\\';
			*o++ = c == '\\' ? '\\' : c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
		} else
			*o++ = c;
	}
	return (size_t)(o - dst);
}

/* --- outcome --- */

/* Records a failure decided before the end (the first one wins); settled: the rest of the
 * input cannot change it. */
static void fail(struct batch_import *imp, enum batch_import_status st, const char *code,
		 bool settled, const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static void stop_writing(struct batch_import *imp)
{
	if (imp->stopping)
		return;
	imp->stopping = true;
	imp->out_len = imp->out_off = 0;
	if (imp->copy && !imp->copy_ended) {
		imp->copy_ended = true;
		pg_copy_abort(imp->copy, "batch import refused");
	}
}

static void fail(struct batch_import *imp, enum batch_import_status st, const char *code,
		 bool settled, const char *fmt, ...)
{
	if (imp->status == BATCH_IMPORT_OK) {
		va_list ap;
		imp->status = st;
		imp->error = code;
		va_start(ap, fmt);
		vsnprintf(imp->message, sizeof(imp->message), fmt, ap);
		va_end(ap);
	}
	imp->settled = imp->settled || settled;
	stop_writing(imp);
}

static void note_bad(struct batch_import *imp, uint64_t row, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void note_bad(struct batch_import *imp, uint64_t row, const char *fmt, ...)
{
	imp->bad++;
	if (imp->n_named < BATCH_IMPORT_MAX_NAMED) {
		struct batch_import_row_error *e = &imp->named[imp->n_named++];
		va_list ap;
		e->row = row;
		va_start(ap, fmt);
		vsnprintf(e->reason, sizeof(e->reason), fmt, ap);
		va_end(ap);
	}
	stop_writing(imp);
}

/* "rows 2, 5, 9 and 4,980 more" / "contacts 0, 4" into buf. */
static void named_list(const struct batch_import *imp, char *buf, size_t len)
{
	bool csv = imp->opts.source == BATCH_IMPORT_CSV;
	char n[32];
	size_t o = (size_t)snprintf(buf, len, "%s",
				    csv ? (imp->bad > 1 ? "rows" : "row")
					: (imp->bad > 1 ? "contacts" : "contact"));

	for (unsigned i = 0; i < imp->n_named && o < len; i++)
		o += (size_t)snprintf(buf + o, len - o, "%s %" PRIu64, i ? "," : "",
				      imp->named[i].row);
	if (imp->bad > imp->n_named && o < len)
		snprintf(buf + o, len - o, " and %s more", thousands(imp->bad - imp->n_named, n));
}

/* The message for bad contacts found (no earlier failure). */
static void bad_message(struct batch_import *imp)
{
	bool csv = imp->opts.source == BATCH_IMPORT_CSV;
	const char *what = csv ? "rows" : "contacts";
	char list[400], a[32], b[32];
	const struct batch_import_row_error *first = &imp->named[0];

	named_list(imp, list, sizeof(list));
	imp->status = BATCH_IMPORT_INVALID;
	imp->error = "invalid_contacts";
	snprintf(imp->message, sizeof(imp->message),
		 "%s of %s %s %s invalid: %s. %s%" PRIu64 "%s: %s. Nothing was imported.",
		 thousands(imp->bad, a), thousands(imp->rows, b), what, imp->bad > 1 ? "are" : "is",
		 list, csv ? "Row " : "contacts[", first->row, csv ? "" : "]", first->reason);
}

/* --- CSV --- */

static int csv_header(struct batch_import *imp, const struct csv_record *rec)
{
	size_t need = 0;
	int phone = -1;

	for (uint32_t i = 0; i < rec->n_fields; i++) {
		const struct csv_field *f = &rec->field[i];
		size_t b = 0, e = f->len;
		while (b < e && f->data[b] == ' ')
			b++;
		while (e > b && f->data[e - 1] == ' ')
			e--;
		char shown[80];
		snprintf(shown, sizeof(shown), "%.*s", (int)utf8_cut(f->data, f->len, 60), f->data);
		if (e == b) {
			fail(imp, BATCH_IMPORT_INVALID, "invalid_csv", true,
			     "row 1 (the header), column %u has no name", i + 1);
			return -ECANCELED;
		}
		for (size_t k = 0; k < sizeof(phone_columns) / sizeof(phone_columns[0]); k++) {
			if (strlen(phone_columns[k]) != e - b ||
			    strncasecmp(phone_columns[k], f->data + b, e - b) != 0)
				continue;
			if (phone >= 0) {
				fail(imp, BATCH_IMPORT_INVALID, "invalid_csv", true,
				     "row 1 (the header) has two phone columns (%u and %u): "
				     "keep one of phone, phone_number, to_number",
				     phone + 1, i + 1);
				return -ECANCELED;
			}
			phone = (int)i;
		}
		for (uint32_t j = 0; j < i; j++)
			if (rec->field[j].len == f->len &&
			    memcmp(rec->field[j].data, f->data, f->len) == 0) {
				fail(imp, BATCH_IMPORT_INVALID, "invalid_csv", true,
				     "row 1 (the header): column \"%s\" appears twice (columns %u "
				     "and %u)",
				     shown, j + 1, i + 1);
				return -ECANCELED;
			}
		need += (size_t)f->len * 12 + 8;
	}
	if (phone < 0) {
		fail(imp, BATCH_IMPORT_INVALID, "invalid_csv", true,
		     "row 1 (the header) has no phone column: name one column phone, phone_number "
		     "or to_number");
		return -ECANCELED;
	}
	imp->keys = malloc(need + 1);
	imp->key_off = malloc(sizeof(size_t) * (rec->n_fields + 1));
	if (!imp->keys || !imp->key_off) {
		fail(imp, BATCH_IMPORT_UNAVAILABLE, "unavailable", true, "out of memory");
		return -ENOMEM;
	}
	size_t o = 0;
	for (uint32_t i = 0; i < rec->n_fields; i++) {
		imp->key_off[i] = o;
		if ((int)i == phone)
			continue;
		imp->keys[o++] = '"';
		o += json_copy_str(imp->keys + o, rec->field[i].data, rec->field[i].len);
		imp->keys[o++] = '"';
		imp->keys[o++] = ':';
	}
	imp->key_off[rec->n_fields] = o;
	imp->ncols = rec->n_fields;
	imp->phone_col = (uint32_t)phone;
	imp->header_seen = true;
	return 0;
}

/* Starts one contact's COPY line: the ids, the phone, a tab; the variables follow. */
static void emit_line(struct batch_import *imp, const char *phone)
{
	out_put(imp, imp->prefix, imp->prefix_len);
	out_put(imp, phone, strlen(phone));
	out_put(imp, "\t", 1);
}

static void csv_row(struct batch_import *imp, const struct csv_record *rec)
{
	char e164[E164_BUF];
	enum e164_fault fault;

	imp->rows++;
	if (rec->n_fields != imp->ncols) {
		note_bad(imp, rec->row, "%u field%s; the header has %u", rec->n_fields,
			 rec->n_fields == 1 ? "" : "s", imp->ncols);
		return;
	}
	const struct csv_field *ph = &rec->field[imp->phone_col];
	if (e164_normalise(ph->data, ph->len, e164, sizeof(e164), &fault) < 0) {
		note_bad(imp, rec->row, "phone: %s", e164_fault_str(fault));
		return;
	}
	if (imp->stopping)
		return;
	size_t need = imp->prefix_len + E164_BUF + 8 + imp->key_off[imp->ncols];
	for (uint32_t i = 0; i < rec->n_fields; i++)
		need += (size_t)rec->field[i].len * 12 + 8;
	if (!out_reserve(imp, need)) {
		fail(imp, BATCH_IMPORT_UNAVAILABLE, "unavailable", true, "out of memory");
		return;
	}
	emit_line(imp, e164);
	if (imp->ncols == 1) {
		out_put(imp, "\\N\n", 3);
		return;
	}
	char *o = imp->out + imp->out_len;
	char sep = '{';
	for (uint32_t i = 0; i < rec->n_fields; i++) {
		if (i == imp->phone_col)
			continue;
		*o++ = sep;
		sep = ',';
		size_t kl = imp->key_off[i + 1] - imp->key_off[i]; /* the phone's is empty */
		memcpy(o, imp->keys + imp->key_off[i], kl);
		o += kl;
		*o++ = '"';
		o += json_copy_str(o, rec->field[i].data, rec->field[i].len);
		*o++ = '"';
	}
	*o++ = '}';
	*o++ = '\n';
	imp->out_len = (size_t)(o - imp->out);
}

static int on_record(const struct csv_record *rec, void *ud)
{
	struct batch_import *imp = ud;

	imp->records++;
	if (!imp->header_seen)
		return csv_header(imp, rec);
	csv_row(imp, rec);
	return imp->settled ? -ECANCELED : 0;
}

/* A malformed file: the parser's error, named by row and line. */
static void csv_failed(struct batch_import *imp, int rc)
{
	if (rc != -EBADMSG)
		return; /* ours: already recorded */
	char msg[200], list[400] = "";
	csv_error_message(csv_last_error(&imp->csv), msg, sizeof(msg));
	if (imp->bad > 0) {
		char n[32];
		size_t o = (size_t)snprintf(list, sizeof(list), "; before it, %s invalid ",
					    thousands(imp->bad, n));
		named_list(imp, list + o, sizeof(list) - o);
	}
	fail(imp, BATCH_IMPORT_INVALID, "invalid_csv", true,
	     "invalid CSV: %s%s. Nothing was imported.", msg, list);
}

/* --- database side --- */

static void end_txn(struct batch_import *imp, bool commit);

static void end_cb(int status, const struct pg_results *r, void *data)
{
	struct batch_import *imp = data;

	imp->owed--;
	imp->phase = PH_OVER;
	if (status != 0 && imp->status == BATCH_IMPORT_OK && !imp->stopping) {
		/* COMMIT failed or its outcome is unknown: report it (the row may exist). */
		if (status == DSP_EPG)
			log_error(LOG_PG, "batch %s: COMMIT refused: %s", imp->batch_id,
				  r->error ? PQresultErrorMessage(r->error) : "");
		fail(imp, status == DSP_EPG ? BATCH_IMPORT_ERROR : BATCH_IMPORT_UNAVAILABLE,
		     status == DSP_EPG ? "internal_error" : "unavailable", true,
		     "the batch could not be committed (%s)", dsp_strerror(status));
	}
	progress(imp);
}

static void end_txn(struct batch_import *imp, bool commit)
{
	struct pg_txn *txn = imp->txn;

	imp->txn = NULL;
	imp->phase = PH_END;
	int rc = commit ? pg_txn_commit(txn, end_cb, imp) : pg_txn_rollback(txn, end_cb, imp);
	if (rc == 0) {
		imp->owed++;
		return;
	}
	imp->phase = PH_OVER; /* lost: nothing was committed */
	if (commit)
		fail(imp, BATCH_IMPORT_UNAVAILABLE, "unavailable", true,
		     "the database connection was lost (%s)", dsp_strerror(rc));
}

/* A database failure of a statement of ours. */
static void db_failed(struct batch_import *imp, const char *what, int status,
		      const struct pg_results *r)
{
	if (status == DSP_EPG) {
		log_error(LOG_PG, "batch %s: %s refused: %s", imp->batch_id, what,
			  r && r->error ? PQresultErrorMessage(r->error) : "");
		fail(imp, BATCH_IMPORT_ERROR, "internal_error", true,
		     "the database refused the import's %s", what);
	} else {
		fail(imp, BATCH_IMPORT_UNAVAILABLE, "unavailable", true,
		     "the database is unavailable (%s: %s)", what, dsp_strerror(status));
	}
}

static int txn_exec(struct batch_import *imp, const char *sql, int n, const char *const *v,
		    pg_result_cb cb)
{
	int rc = pg_txn_exec(imp->txn, &(struct pg_query){ .sql = sql, .nparams = n, .values = v },
			     cb, imp);
	if (rc == 0)
		imp->owed++;
	return rc;
}

static void drain(struct batch_import *imp)
{
	while (imp->copy && !imp->copy_full && !imp->copy_ended && imp->out_off < imp->out_len) {
		size_t n = imp->out_len - imp->out_off;
		n = n > PUT_BYTES ? PUT_BYTES : n;
		int rc = pg_copy_put(imp->copy, imp->out + imp->out_off, n);
		if (rc == 0 || rc == 1)
			imp->out_off += n;
		if (rc != 0) {
			imp->copy_full = rc == 1 || rc == -EAGAIN;
			break; /* -EPIPE: done_cb says why */
		}
	}
	if (imp->out_off == imp->out_len)
		imp->out_off = imp->out_len = 0;
	if (imp->finished && imp->copy && !imp->copy_ended && imp->out_len == 0) {
		imp->copy_ended = true;
		pg_copy_end(imp->copy);
	}
}

static void copy_ready_cb(struct pg_copy *copy, void *data)
{
	struct batch_import *imp = data;

	imp->copy = copy;
	imp->copy_full = false;
	if (imp->stopping && !imp->copy_ended) {
		imp->copy_ended = true;
		pg_copy_abort(copy, "batch import refused");
		return;
	}
	drain(imp);
	progress(imp);
}

static void count_cb(int status, const struct pg_results *r, void *data);

/* The total, SAVEPOINT and timeout statements: only errors matter (the timeout's keeps the
 * session's value, restored after the count). */
static void check_cb(int status, const struct pg_results *r, void *data)
{
	struct batch_import *imp = data;

	imp->owed--;
	if (status == 0 && r->n > 0 && PQnfields(r->res[0]) == 2)
		snprintf(imp->saved_timeout, sizeof(imp->saved_timeout), "%s",
			 PQgetvalue(r->res[0], 0, 0));
	else if (status != 0 && !imp->count_timeout)
		db_failed(imp, "backlog check", status, r);
	progress(imp);
}

/* The lock or the count, under the statement timeout: a timeout (57014) fails open; the count
 * after a timed-out lock fails with 25P02, which is the same timeout. */
static void count_cb(int status, const struct pg_results *r, void *data)
{
	struct batch_import *imp = data;
	const char *st = status == DSP_EPG && r->error
				 ? PQresultErrorField(r->error, PG_DIAG_SQLSTATE)
				 : NULL;
	char a[32], b[32], c[32], d[32];

	imp->owed--;
	if (st && (strcmp(st, "57014") == 0 || (imp->count_timeout && strcmp(st, "25P02") == 0))) {
		if (!imp->count_timeout)
			log_warn(LOG_PG,
				 "batch %s: the pending count took over %" PRIu64
				 " ms; the ceiling is not checked (fails open)",
				 imp->batch_id, imp->opts.count_timeout_ms);
		imp->count_timeout = true;
	} else if (status != 0) {
		db_failed(imp, "backlog count", status, r);
	} else if (PQnfields(r->res[0]) == 1 && PQntuples(r->res[0]) == 1 &&
		   !PQgetisnull(r->res[0], 0, 0) && PQgetvalue(r->res[0], 0, 0)[0] != '\0') {
		uint64_t pending = strtoull(PQgetvalue(r->res[0], 0, 0), NULL, 10);
		imp->ceiling_checked = true;
		imp->pending_before = pending >= imp->rows ? pending - imp->rows : 0;
		if (pending > imp->opts.pending_ceiling)
			fail(imp, BATCH_IMPORT_CEILING, "pending_ceiling_exceeded", true,
			     "the organisation has %s pending contacts; this batch's %s would make "
			     "%s, over its pending ceiling of %s. Nothing was imported.",
			     thousands(imp->pending_before, a), thousands(imp->rows, b),
			     thousands(pending, c), thousands(imp->opts.pending_ceiling, d));
	}
	progress(imp);
}

/* The COPY is over and written: total, then the count under its own timeout. */
static void start_check(struct batch_import *imp)
{
	char rows[24], ms[24];
	const char *total[] = { imp->batch_id, rows };
	const char *org[] = { imp->org_id };
	const char *timeout[] = { ms };

	snprintf(rows, sizeof(rows), "%" PRIu64, imp->rows);
	snprintf(ms, sizeof(ms), "%" PRIu64, imp->opts.count_timeout_ms);
	imp->phase = PH_CHECK;
	if (txn_exec(imp, sql_total, 2, total, check_cb) < 0 ||
	    txn_exec(imp, "SAVEPOINT batch_ceiling", 0, NULL, check_cb) < 0 ||
	    txn_exec(imp, sql_timeout, 1, timeout, check_cb) < 0 ||
	    txn_exec(imp, sql_lock, 1, org, count_cb) < 0 ||
	    txn_exec(imp, sql_count, 1, org, count_cb) < 0)
		fail(imp, BATCH_IMPORT_UNAVAILABLE, "unavailable", true,
		     "the database connection was lost");
}

static void copy_done_cb(int status, const struct pg_copy_report *rep, void *data)
{
	struct batch_import *imp = data;

	imp->owed--;
	imp->copy = NULL;
	if (status == 0 && !imp->stopping && rep->rows != imp->rows - imp->bad)
		fail(imp, BATCH_IMPORT_ERROR, "internal_error", true,
		     "the database took %" PRIu64 " contacts of %" PRIu64, rep->rows, imp->rows);
	else if (status == DSP_EPG && !imp->stopping) {
		log_error(LOG_PG, "batch %s: COPY refused at line %ld: %s", imp->batch_id,
			  rep->line, rep->error ? PQresultErrorMessage(rep->error) : "");
		fail(imp, BATCH_IMPORT_ERROR, "internal_error", true,
		     "the database refused contact %ld of the batch", rep->line);
	} else if (status != 0 && status != DSP_EPG && !imp->stopping)
		db_failed(imp, "COPY", status, NULL);
	if (imp->stopping || status != 0) {
		imp->stopping = true;
		end_txn(imp, false);
	} else
		start_check(imp);
	progress(imp);
}

static void insert_cb(int status, const struct pg_results *r, void *data)
{
	struct batch_import *imp = data;

	imp->owed--;
	if (status != 0) {
		db_failed(imp, "batch insert", status, r);
	} else if (PQntuples(r->res[0]) == 0) {
		fail(imp, BATCH_IMPORT_NOT_FOUND, "not_found", true, "campaign %s not found",
		     imp->campaign_id);
	} else if (strcmp(PQgetvalue(r->res[0], 0, 1), "1") != 0) {
		fail(imp, BATCH_IMPORT_CONFLICT, "campaign_not_accepting", true,
		     "campaign %s is %s: it takes no new batches", imp->campaign_id,
		     PQgetvalue(r->res[0], 0, 0));
	}
	if (imp->stopping) {
		end_txn(imp, false);
		progress(imp);
		return;
	}
	imp->phase = PH_COPY;
	struct pg_copy_options o = { .ready_cb = copy_ready_cb,
				     .done_cb = copy_done_cb,
				     .data = imp };
	int rc = pg_txn_copy_in(imp->txn, sql_copy, &o);
	if (rc == 0)
		imp->owed++;
	else {
		db_failed(imp, "COPY", rc, NULL);
		end_txn(imp, false);
	}
	progress(imp);
}

static void begin_cb(int status, struct pg_txn *txn, void *data)
{
	struct batch_import *imp = data;
	const char *source = imp->opts.source == BATCH_IMPORT_CSV ? "csv" : "json";
	const char *v[] = { imp->org_id, imp->campaign_id, imp->batch_id, imp->name, source };

	imp->owed--;
	if (status != 0) {
		imp->phase = PH_OVER;
		db_failed(imp, "BEGIN", status, NULL);
		progress(imp);
		return;
	}
	imp->txn = txn;
	imp->phase = PH_INSERT;
	if (imp->stopping) {
		end_txn(imp, false);
	} else if (txn_exec(imp, sql_insert, 5, v, insert_cb) < 0) {
		fail(imp, BATCH_IMPORT_UNAVAILABLE, "unavailable", true,
		     "the database connection was lost");
		end_txn(imp, false);
	}
	progress(imp);
}

/* --- driving it all --- */

static void closed_cb(uv_handle_t *h)
{
	struct batch_import *imp = h->data;
	void (*cb)(void *) = imp->closed_cb;
	void *data = imp->closed_data;

	free(imp->org_id);
	free(imp->campaign_id);
	free(imp->name);
	free(imp->out);
	free(imp->csv_work);
	free(imp->keys);
	free(imp->key_off);
	free(imp);
	if (cb)
		cb(data);
}

/* Drops an incomplete UTF-8 sequence that a truncating snprintf left at the end of s. */
static void trim_utf8(char *s)
{
	size_t n = strlen(s), i = n;

	while (i > 0 && n - i < 4 && ((unsigned char)s[i - 1] & 0xC0) == 0x80)
		i--;
	if (i == 0 || ((unsigned char)s[i - 1] & 0x80) == 0)
		return;
	unsigned char lead = (unsigned char)s[i - 1];
	size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
	if (n - (i - 1) < want)
		s[i - 1] = '\0';
}

static void deliver_cb(uv_timer_t *t)
{
	struct batch_import *imp = t->data;
	bool ok = imp->status == BATCH_IMPORT_OK;
	struct batch_import_result res = {
		.status = imp->status,
		.http_status = http_of(imp->status),
		.error = ok ? NULL : imp->error,
		.message = ok ? "" : imp->message,
		.batch_id = ok ? imp->batch_id : NULL,
		.campaign_id = imp->campaign_id,
		.name = imp->name,
		.source = imp->opts.source,
		.total_rows = imp->rows,
		.bad_rows = imp->bad,
		.rows = imp->named,
		.n_rows = imp->n_named,
		.ceiling = imp->opts.pending_ceiling,
		.ceiling_checked = imp->ceiling_checked,
		.pending_before = imp->pending_before,
	};

	trim_utf8(imp->message);
	for (unsigned i = 0; i < imp->n_named; i++)
		trim_utf8(imp->named[i].reason);
	if (ok)
		log_info(LOG_HTTP, "batch %s: %" PRIu64 " contacts imported (ceiling %s)",
			 imp->batch_id, imp->rows,
			 imp->ceiling_checked ? "checked" : "not checked");
	imp->opts.done_cb(&res, imp->opts.data);
	imp->closing = true;
	uv_close((uv_handle_t *)&imp->defer, closed_cb);
}

/* The check's statements are all answered: COMMIT (leaving the savepoint, or rolling back to
 * it after a timed-out count) or ROLLBACK. */
static void end_check(struct batch_import *imp)
{
	const char *v[] = { imp->saved_timeout };

	if (imp->stopping) {
		end_txn(imp, false);
		return;
	}
	int rc = imp->count_timeout
			 ? txn_exec(imp, "ROLLBACK TO SAVEPOINT batch_ceiling", 0, NULL, check_cb)
			 : txn_exec(imp, "RELEASE SAVEPOINT batch_ceiling", 0, NULL, check_cb);
	if (rc == 0 && !imp->count_timeout)
		rc = txn_exec(imp, sql_restore, 1, v, check_cb);
	if (rc < 0)
		fail(imp, BATCH_IMPORT_UNAVAILABLE, "unavailable", true,
		     "the database connection was lost");
	end_txn(imp, !imp->stopping);
}

static void progress(struct batch_import *imp)
{
	if (imp->phase == PH_CHECK && imp->owed == 0 && imp->txn)
		end_check(imp);
	if (imp->paused && !imp->aborted && !imp->in_api &&
	    (imp->stopping || imp->out_len - imp->out_off < LOW_WATER)) {
		imp->paused = false;
		imp->opts.resume_cb(imp->opts.data); /* may feed, finish or abort */
	}
	if (imp->phase != PH_OVER || imp->owed > 0 || imp->closing)
		return;
	if (imp->aborted) {
		imp->closing = true;
		uv_close((uv_handle_t *)&imp->defer, closed_cb);
	} else if (imp->finished && !imp->delivered) {
		imp->delivered = true;
		uv_timer_start(&imp->defer, deliver_cb, 0, 0);
	}
}

/* After each piece of input: the ceiling on this batch alone, the hand-over, back-pressure. */
static int after_input(struct batch_import *imp)
{
	if (imp->rows > imp->opts.pending_ceiling && !imp->too_many) {
		imp->too_many = true;
		stop_writing(imp);
	}
	imp->in_api = true;
	if (!imp->stopping)
		drain(imp);
	progress(imp);
	imp->in_api = false;
	if (!imp->stopping && imp->out_len - imp->out_off > HIGH_WATER) {
		imp->paused = true;
		return BATCH_IMPORT_PAUSE;
	}
	return 0;
}

int batch_import_feed(struct batch_import *imp, const void *data, size_t len)
{
	if (!imp || imp->opts.source != BATCH_IMPORT_CSV || imp->finished || (!data && len > 0))
		return -EINVAL;
	if (imp->settled || len == 0)
		return 0;
	int rc = csv_feed(&imp->csv, data, len);
	if (rc < 0)
		csv_failed(imp, rc);
	return after_input(imp);
}

/* One JSON number's text (valid JSON grammar): whether both cJSON (a finite double) and
 * PostgreSQL's jsonb (numeric: an exponent within +-1000, at most 16383 digits after the point)
 * hold it. 1e999999 is infinity to cJSON and refused by jsonb in the COPY (a 500 otherwise). */
static bool number_ok(const char *s, size_t len)
{
	size_t i = 0, frac = 0;
	long long exp = 0;
	char buf[64];

	if (s[i] == '-')
		i++;
	while (i < len && s[i] >= '0' && s[i] <= '9')
		i++;
	if (i < len && s[i] == '.')
		for (i++; i < len && s[i] >= '0' && s[i] <= '9'; i++)
			frac++;
	if (i < len && (s[i] == 'e' || s[i] == 'E')) {
		bool neg = false;
		i++;
		if (i < len && (s[i] == '+' || s[i] == '-'))
			neg = s[i++] == '-';
		for (; i < len && s[i] >= '0' && s[i] <= '9'; i++)
			if (exp <= 100000)
				exp = exp * 10 + (s[i] - '0');
		exp = neg ? -exp : exp;
	}
	if (exp > 1000 || exp < -1000 || (long long)frac - exp > 16383)
		return false;
	/* Finite as a double: strtod on the text (a long one cut: its digits past 40 cannot move
	 * it past DBL_MAX but by rounding, judged on the first 40 and the exponent). */
	if (len < sizeof(buf)) {
		memcpy(buf, s, len);
		buf[len] = '\0';
		return isfinite(strtod(buf, NULL));
	}
	size_t intd = 0, k = s[0] == '-';
	while (k < len && s[k] == '0')
		k++;
	while (k + intd < len && s[k + intd] >= '0' && s[k + intd] <= '9')
		intd++;
	return (long long)intd + exp <= 308;
}

/* Every number in the JSON text s[0..len) (already valid JSON): number_ok(). Returns the first
 * bad one's offset, or len when none. */
static size_t numbers_check(const char *s, size_t len, size_t *bad_len)
{
	for (size_t i = 0; i < len; i++) {
		if (s[i] == '"') {
			for (i++; i < len && s[i] != '"'; i++)
				if (s[i] == '\\')
					i++;
		} else if (s[i] == '-' || (s[i] >= '0' && s[i] <= '9')) {
			size_t e = i;
			while (e < len && strchr("+-.eE0123456789", s[e]))
				e++;
			if (!number_ok(s + i, e - i)) {
				*bad_len = e - i;
				return i;
			}
			i = e - 1;
		}
	}
	return len;
}

int batch_import_add(struct batch_import *imp, const char *phone, size_t phone_len,
		     const char *variables, size_t variables_len)
{
	char e164[E164_BUF], err[JSON_STRICT_ERR];
	enum e164_fault fault;

	if (!imp || imp->opts.source != BATCH_IMPORT_JSON || imp->finished ||
	    (!phone && phone_len > 0))
		return -EINVAL;
	if (imp->settled)
		return 0;
	uint64_t idx = imp->rows++;
	if (e164_normalise(phone, phone_len, e164, sizeof(e164), &fault) < 0) {
		note_bad(imp, idx, "phone: %s", e164_fault_str(fault));
		return after_input(imp);
	}
	if (variables) {
		cJSON *j = NULL;
		size_t at, bad_len = 0;
		if (variables_len > BATCH_IMPORT_MAX_VARIABLES)
			note_bad(imp, idx, "variables: longer than %d bytes",
				 BATCH_IMPORT_MAX_VARIABLES);
		else if (!utf8_valid(variables, variables_len))
			note_bad(imp, idx, "variables: not UTF-8");
		else if (!(j = json_strict_parse(variables, variables_len, err, sizeof(err))))
			note_bad(imp, idx, "variables: %s", err);
		else if (!cJSON_IsObject(j))
			note_bad(imp, idx, "variables: must be a JSON object");
		else if ((at = numbers_check(variables, variables_len, &bad_len)) < variables_len)
			note_bad(imp, idx,
				 "variables: the number %.*s%s is out of range (infinite, or more "
				 "than jsonb holds)",
				 (int)(bad_len > 24 ? 24 : bad_len), variables + at,
				 bad_len > 24 ? "..." : "");
		cJSON_Delete(j);
	}
	if (!imp->stopping) {
		if (!out_reserve(imp, imp->prefix_len + E164_BUF + 2 * variables_len + 8)) {
			fail(imp, BATCH_IMPORT_UNAVAILABLE, "unavailable", true, "out of memory");
			return after_input(imp);
		}
		emit_line(imp, e164);
		if (variables)
			imp->out_len +=
				copy_text(imp->out + imp->out_len, variables, variables_len);
		else
			out_put(imp, "\\N", 2);
		out_put(imp, "\n", 1);
	}
	return after_input(imp);
}

bool batch_import_settled(const struct batch_import *imp)
{
	return imp->settled;
}

/* At the end of the input: what the whole input says (bad contacts, none, too many). */
static void judge_input(struct batch_import *imp)
{
	char a[32], b[32];

	if (imp->status != BATCH_IMPORT_OK)
		return;
	if (imp->bad > 0) {
		bad_message(imp);
	} else if (imp->rows == 0) {
		const char *why = imp->opts.source == BATCH_IMPORT_JSON
					  ? "the batch has no contacts"
				  : imp->records == 0 ? "the file is empty: a header row with a "
							"phone column, then one row per contact"
						      : "the file has a header row and no contacts";
		imp->status = BATCH_IMPORT_INVALID;
		imp->error =
			imp->opts.source == BATCH_IMPORT_CSV ? "invalid_csv" : "invalid_contacts";
		snprintf(imp->message, sizeof(imp->message), "%s", why);
	} else if (imp->too_many) {
		imp->status = BATCH_IMPORT_CEILING;
		imp->error = "pending_ceiling_exceeded";
		snprintf(
			imp->message, sizeof(imp->message),
			"the batch has %s contacts, over the organisation's pending ceiling of %s. "
			"Nothing was imported.",
			thousands(imp->rows, a), thousands(imp->opts.pending_ceiling, b));
	}
	if (imp->status != BATCH_IMPORT_OK)
		stop_writing(imp);
}

int batch_import_finish(struct batch_import *imp)
{
	if (!imp || imp->finished)
		return -EINVAL;
	if (imp->opts.source == BATCH_IMPORT_CSV && !imp->settled) {
		int rc = csv_finish(&imp->csv);
		if (rc < 0)
			csv_failed(imp, rc);
	}
	judge_input(imp);
	imp->finished = true;
	imp->paused = false;
	imp->in_api = true;
	if (!imp->stopping)
		drain(imp);
	progress(imp);
	imp->in_api = false;
	return 0;
}

void batch_import_abort(struct batch_import *imp, void (*cb)(void *data), void *data)
{
	imp->aborted = true;
	imp->closed_cb = cb;
	imp->closed_data = data;
	if (imp->status == BATCH_IMPORT_OK)
		fail(imp, BATCH_IMPORT_UNAVAILABLE, "aborted", true, "the client went away");
	stop_writing(imp);
	imp->in_api = true;
	progress(imp);
	imp->in_api = false;
}

static void draw_id(char *out)
{
	static const char hex[] = "0123456789abcdef";
	unsigned char r[10];

	if (RAND_bytes(r, sizeof(r)) != 1) /* never on Linux; keep the id unique anyway */
		for (size_t i = 0; i < sizeof(r); i++)
			r[i] = (unsigned char)(uv_hrtime() >> (i * 3));
	memcpy(out, "batch_", 6);
	for (size_t i = 0; i < sizeof(r); i++) {
		out[6 + 2 * i] = hex[r[i] >> 4];
		out[7 + 2 * i] = hex[r[i] & 15];
	}
	out[BATCH_IMPORT_ID_LEN] = '\0';
}

static int set_up(struct batch_import *imp, const struct batch_import_options *opts)
{
	imp->opts = *opts;
	if (!imp->opts.count_timeout_ms)
		imp->opts.count_timeout_ms = 2000;
	if (!imp->opts.timeout_ms)
		imp->opts.timeout_ms = 600000;
	if (!imp->opts.max_record_bytes)
		imp->opts.max_record_bytes = 65536;
	if (!imp->opts.max_fields)
		imp->opts.max_fields = 256;
	imp->org_id = strdup(opts->org_id);
	imp->campaign_id = strdup(opts->campaign_id);
	imp->name = strdup(opts->name ? opts->name : "");
	if (!imp->org_id || !imp->campaign_id || !imp->name)
		return -ENOMEM;
	draw_id(imp->batch_id);
	imp->prefix_len = (size_t)snprintf(imp->prefix, sizeof(imp->prefix), "%s\t%s\t%s\t",
					   imp->org_id, imp->campaign_id, imp->batch_id);
	if (opts->source == BATCH_IMPORT_CSV) {
		struct csv_limits lim = { .max_field_bytes = imp->opts.max_record_bytes,
					  .max_fields = imp->opts.max_fields,
					  .max_record_bytes = imp->opts.max_record_bytes };
		size_t n = csv_work_size(&lim);
		imp->csv_work = n ? malloc(n) : NULL;
		if (!imp->csv_work)
			return -ENOMEM;
		if (csv_init(&imp->csv, &lim, on_record, imp, imp->csv_work, n) < 0)
			return -EINVAL;
	}
	return 0;
}

int batch_import_new(uv_loop_t *loop, struct pg_pool *pool, const struct batch_import_options *opts,
		     struct batch_import **out)
{
	if (!loop || !pool || !opts || !out || !opts->done_cb || !opts->resume_cb ||
	    !ident_ok(opts->org_id) || !opts->campaign_id ||
	    (opts->source != BATCH_IMPORT_JSON && opts->source != BATCH_IMPORT_CSV))
		return -EINVAL;
	size_t name_len = opts->name ? strlen(opts->name) : 0;
	if (name_len > BATCH_IMPORT_MAX_NAME || !utf8_valid(opts->name, name_len))
		return -EINVAL;
	struct batch_import *imp = calloc(1, sizeof(*imp));
	if (!imp)
		return -ENOMEM;
	imp->loop = loop;
	imp->pool = pool;
	int rc = set_up(imp, opts);
	if (rc == 0 && ident_ok(opts->campaign_id)) {
		rc = pg_pool_begin(pool,
				   &(struct pg_txn_options){ .timeout_ms = imp->opts.timeout_ms },
				   begin_cb, imp);
		imp->owed = rc == 0 ? 1 : 0;
		imp->phase = PH_BEGIN;
	} else if (rc == 0) {
		/* Not an id at all: no such campaign, without asking the database. */
		imp->phase = PH_OVER;
		fail(imp, BATCH_IMPORT_NOT_FOUND, "not_found", true, "campaign not found");
	}
	if (rc < 0) {
		free(imp->org_id);
		free(imp->campaign_id);
		free(imp->name);
		free(imp->csv_work);
		free(imp);
		return rc;
	}
	uv_timer_init(loop, &imp->defer);
	imp->defer.data = imp;
	*out = imp;
	return 0;
}

/* --- the body a route answers --- */

cJSON *batch_import_result_json(const struct batch_import_result *res)
{
	cJSON *j = cJSON_CreateObject();
	bool ok = res->status == BATCH_IMPORT_OK;

	if (!j)
		return NULL;
	if (ok) {
		cJSON *c = cJSON_CreateObject();
		cJSON_AddStringToObject(j, "id", res->batch_id);
		cJSON_AddStringToObject(j, "campaign_id", res->campaign_id);
		cJSON_AddStringToObject(j, "name", res->name);
		cJSON_AddStringToObject(j, "source",
					res->source == BATCH_IMPORT_CSV ? "csv" : "json");
		cJSON_AddStringToObject(j, "status", "active");
		cJSON_AddNumberToObject(j, "total_contacts", (double)res->total_rows);
		if (c) {
			cJSON_AddNumberToObject(c, "limit", (double)res->ceiling);
			cJSON_AddBoolToObject(c, "checked", res->ceiling_checked);
			if (res->ceiling_checked)
				cJSON_AddNumberToObject(c, "pending_before",
							(double)res->pending_before);
			cJSON_AddItemToObject(j, "pending_ceiling", c);
		}
	} else {
		cJSON_AddStringToObject(j, "error", res->error);
		cJSON_AddStringToObject(j, "message", res->message);
		if (res->status == BATCH_IMPORT_INVALID && res->bad_rows > 0) {
			cJSON *rows = cJSON_AddArrayToObject(j, "rows");
			cJSON_AddNumberToObject(j, "invalid_rows", (double)res->bad_rows);
			for (unsigned i = 0; rows && i < res->n_rows; i++) {
				cJSON *r = cJSON_CreateObject();
				if (!r)
					break;
				cJSON_AddNumberToObject(
					r, res->source == BATCH_IMPORT_CSV ? "row" : "index",
					(double)res->rows[i].row);
				cJSON_AddStringToObject(r, "reason", res->rows[i].reason);
				cJSON_AddItemToArray(rows, r);
			}
		}
	}
	return j;
}
