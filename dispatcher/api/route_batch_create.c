/* POST /v2/batches (JSON) and POST /v2/batches/upload (CSV): SPEC R6, issue 10 item 4, over the
 * batch importer (batch_import.h). The requests, answers and the choices made where the issue is
 * silent: dispatcher/api/README.md, "Creating batches".
 *
 * JSON: the body is buffered by the server (at most API_BATCH_JSON_BODY_MAX) and read twice
 * without ever building its whole tree: a first pass checks the shape (strict JSON, each contact
 * parsed alone with json_strict_parse() and freed), so a malformed body is refused before any
 * database work; a second pass walks the contacts' text and hands each to batch_import_add(),
 * pausing when the importer says so. Memory: the body, plus one contact's tree at a time. Both
 * passes are batch_body.h's (no I/O, fuzzed); this file slices the first over loop turns.
 *
 * CSV: multipart/form-data (a file part named *.csv, of type text/csv or another a CSV file is
 * sent with: csv_part_type()) or a raw text/csv body,
 * parsed as it arrives (multipart.h) and fed to batch_import_feed(), pausing when it says so.
 *
 * Each import holds a pool connection for its whole length: at most imports_cap() run at once
 * in a process; beyond, 503 with Retry-After. */
#include "api_int.h"
#include "batch_body.h"
#include "batch_import.h"
#include "json_strict.h"
#include "log.h"
#include "multipart.h"
#include "pg_pool.h"
#include "query.h"

#include <openssl/crypto.h> /* OPENSSL_cleanse */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define BUSY_RETRY_S "5"  /* Retry-After of the 503 when that many run */
#define VALUE_BYTES  256  /* a query parameter or form field, decoded */
#define CHECK_SLICE  2000 /* contacts checked per loop turn by the JSON route's first pass */

/* The imports running in this process (the loop's thread only): each holds one connection of
 * the API's import pool for its whole length, so at most the pool's size run at once, and at
 * most one per organisation, so that one organisation's slow uploads never keep the others
 * out. */
static char import_org[API_IMPORT_POOL_SIZE][API_ID_SIZE]; /* "": a free slot */

static int imports_cap(const struct api_call *c)
{
	struct pg_pool *p = api_import_pool(c->api);
	unsigned n = p ? pg_pool_size(p) : 0;

	return (int)(n > API_IMPORT_POOL_SIZE ? API_IMPORT_POOL_SIZE : n);
}

/* Takes an import slot for the key's organisation. Returns its index, or -1 (answered 503). */
static int slot_take(struct api_call *c)
{
	int cap = imports_cap(c), free_slot = -1, running = 0;

	if (cap == 0) {
		api_error(c, 503, "unavailable", "Batch imports are not served by this process.");
		return -1;
	}
	for (int i = 0; i < cap; i++) {
		if (!import_org[i][0]) {
			if (free_slot < 0)
				free_slot = i;
			continue;
		}
		running++;
		if (strcmp(import_org[i], c->key.org.id) == 0) {
			http_response_header(c->req, "Retry-After", BUSY_RETRY_S);
			api_error(
				c, 503, "imports_busy",
				"An import of this organisation is running on this server: one at "
				"a time; retry in " BUSY_RETRY_S " s.");
			return -1;
		}
	}
	if (free_slot < 0) {
		char msg[160];

		snprintf(msg, sizeof(msg),
			 "%d imports are running on this server, its most at once; retry in %s s.",
			 running, BUSY_RETRY_S);
		http_response_header(c->req, "Retry-After", BUSY_RETRY_S);
		api_error(c, 503, "imports_busy", msg);
		return -1;
	}
	snprintf(import_org[free_slot], API_ID_SIZE, "%s", c->key.org.id);
	return free_slot;
}

static void slot_give(int slot)
{
	if (slot >= 0 && slot < API_IMPORT_POOL_SIZE)
		import_org[slot][0] = '\0';
}

/* The import's result as the answer (201, 404, 409, 422, 500, 503). */
static void answer_result(struct api_call *c, const struct batch_import_result *res)
{
	if (res->status == BATCH_IMPORT_ERROR || res->status == BATCH_IMPORT_UNAVAILABLE)
		log_warn(LOG_HTTP, "%s %s: batch import for org %s: %s",
			 http_request_method(c->req), http_request_path(c->req), c->key.org.id,
			 res->message);
	if (res->status == BATCH_IMPORT_UNAVAILABLE)
		http_response_header(c->req, "Retry-After", "1");
	api_json(c, res->http_status, batch_import_result_json(res));
}

/* batch_import_new()'s failure as the answer. */
static void answer_new_failed(struct api_call *c, int rc)
{
	if (rc == -EINVAL)
		api_error(c, 422, "invalid_request",
			  "field name must be UTF-8 text of at most 200 bytes");
	else
		api_db_error(c, rc, "the batch import");
}

/* A request the server has finished itself (a streamed body's failure: the client went away,
 * a 413 or 408 it answered): freed without answering, as api.c frees an answered one. */
static void call_drop(struct api_call *c)
{
	OPENSSL_cleanse(c->hash, sizeof(c->hash));
	free(c);
}

/* The batch's name when none is given: the file's, cut to BATCH_IMPORT_MAX_NAME bytes on a
 * UTF-8 boundary. */
static void name_from_file(char *out, size_t size, const char *file)
{
	for (const char *q = file; *q; q++) /* a path before the name is dropped */
		if (*q == '/' || *q == '\\')
			file = q + 1;
	size_t n = strlen(file);

	if (n > BATCH_IMPORT_MAX_NAME) {
		n = BATCH_IMPORT_MAX_NAME;
		while (n > 0 && ((unsigned char)file[n] & 0xC0) == 0x80)
			n--;
	}
	snprintf(out, size, "%.*s", (int)n, file);
}

static bool ends_with_csv(const char *name)
{
	size_t n = strlen(name);

	return n > 4 && strcasecmp(name + n - 4, ".csv") == 0;
}

/* The types a .csv file part comes with (mt lower-cased, "" when the part has none): curl -F
 * sends application/octet-stream, Windows browsers application/vnd.ms-excel, some text/plain.
 * The file's name is what says it is CSV; the type only keeps out what is plainly another. */
#define CSV_PART_TYPES                                                                             \
	"text/csv, application/csv, text/plain, application/vnd.ms-excel, "                        \
	"application/octet-stream or none"
static bool csv_part_type(const char *mt)
{
	static const char *const ok[] = { "",
					  "text/csv",
					  "application/csv",
					  "text/plain",
					  "application/vnd.ms-excel",
					  "application/octet-stream" };

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (strcmp(mt, ok[i]) == 0)
			return true;
	return false;
}

/* Whether the batch's name (given or from the file) may be used; else the 422 is written into
 * msg (cap bytes). from_file: the name was taken from the file's. */
static bool name_usable(const char *name, bool from_file, char *msg, size_t cap)
{
	char why[64];
	const char *fault = batch_body_name_fault(name, strlen(name), why, sizeof(why));

	if (fault)
		snprintf(msg, cap, "field name %s%s", fault,
			 from_file ? " (taken from the file's name: give a name)" : "");
	return !fault;
}

/* ==== JSON: POST /v2/batches ==== */

struct jcreate {
	struct api_call *c; /* NULL once answered */
	struct batch_import *imp;
	uv_timer_t tick;		 /* the first pass, a slice per loop turn */
	struct batch_body body;		 /* the first pass (over the request's body) */
	struct batch_body_walk contacts; /* the second pass */
	int slot;			 /* the import slot taken (slot_take()), -1: none */
};

_Static_assert(BATCH_BODY_NAME_MAX == BATCH_IMPORT_MAX_NAME, "batch_body.h's name is the import's");
_Static_assert(BATCH_BODY_CONTACT_MAX == BATCH_IMPORT_MAX_VARIABLES + 1024,
	       "batch_body.h's contact is the import's variables and 1 KiB");

static void jfree_cb(uv_handle_t *h)
{
	free(h->data);
}

static void jfree(struct jcreate *j)
{
	batch_body_deinit(&j->body);
	uv_close((uv_handle_t *)&j->tick, jfree_cb);
}

static void json_done(const struct batch_import_result *res, void *data)
{
	struct jcreate *j = data;

	slot_give(j->slot);
	if (j->c)
		answer_result(j->c, res);
	jfree(j);
}

static void json_closed(void *data)
{
	slot_give(((struct jcreate *)data)->slot);
	jfree(data);
}

/* The second pass: each contact to the importer, until it asks for a pause or the end. */
static void json_feed(struct jcreate *j)
{
	struct batch_body_contact k;
	int rc;

	while (!batch_import_settled(j->imp)) {
		if (http_request_aborted(j->c->req)) { /* nothing will read the answer */
			api_error(j->c, 503, "aborted", "The client went away.");
			j->c = NULL;
			batch_import_abort(j->imp, json_closed, j);
			return;
		}
		if (!batch_body_next(&j->contacts, &k))
			break; /* the end */
		rc = batch_import_add(j->imp, k.phone, k.phone_len, k.vars, k.vars_len);
		batch_body_contact_deinit(&k);
		if (rc == BATCH_IMPORT_PAUSE)
			return; /* json_resume() goes on */
	}
	batch_import_finish(j->imp);
}

static void json_resume(void *data)
{
	json_feed(data);
}

/* The first pass is over: answer its error, or start the import. */
static void json_checked(struct jcreate *j)
{
	struct api_call *c = j->c;

	if (j->body.status) {
		api_error(c, j->body.status,
			  j->body.status == 400 ? "bad_request" : "invalid_request", j->body.msg);
		jfree(j);
		return;
	}
	if (strlen(j->body.campaign_id) >= API_ID_SIZE) { /* not an id: no such campaign */
		api_not_found(c, "campaign", "(an over-long id)");
		jfree(j);
		return;
	}
	if ((j->slot = slot_take(c)) < 0) {
		jfree(j);
		return;
	}
	batch_body_contacts(&j->body, &j->contacts);
	struct batch_import_options o = { .org_id = c->key.org.id,
					  .campaign_id = j->body.campaign_id,
					  .name = j->body.has_name ? j->body.name : NULL,
					  .source = BATCH_IMPORT_JSON,
					  .pending_ceiling = c->key.org.pending_ceiling,
					  .done_cb = json_done,
					  .resume_cb = json_resume,
					  .data = j };
	int rc = batch_import_new(api_loop(c->api), api_import_pool(c->api), &o, &j->imp);
	if (rc) {
		slot_give(j->slot);
		answer_new_failed(c, rc);
		jfree(j);
		return;
	}
	json_feed(j);
}

/* A slice of the first pass per loop turn: 250,000 contacts take ~0.5 s of parsing, which would
 * otherwise hold the dispatcher's loop in one go. */
static void check_tick(uv_timer_t *t)
{
	struct jcreate *j = t->data;

	if (http_request_aborted(j->c->req)) {
		api_error(j->c, 503, "aborted", "The client went away.");
		jfree(j);
	} else if (batch_body_check(&j->body, CHECK_SLICE)) {
		json_checked(j);
	} else {
		uv_timer_start(&j->tick, check_tick, 0, 0);
	}
}

void api_batch_create(struct api_call *c)
{
	char mt[64], charset[32];
	const char *ct = http_request_header(c->req, "Content-Type");
	struct jcreate *j;

	multipart_media_type(ct, mt, sizeof(mt));
	if (strcmp(mt, "application/json") != 0 ||
	    (multipart_param(ct, "charset", charset, sizeof(charset)) &&
	     strcasecmp(charset, "utf-8") != 0)) {
		api_error(c, 415, "unsupported_media_type",
			  "POST /v2/batches takes Content-Type: application/json (UTF-8); a CSV "
			  "file goes to POST /v2/batches/upload.");
		return;
	}
	if (!(j = calloc(1, sizeof(*j)))) {
		api_error(c, 503, "unavailable", "Out of memory; retry shortly.");
		return;
	}
	j->c = c;
	j->slot = -1;
	uv_timer_init(api_loop(c->api), &j->tick);
	j->tick.data = j;
	size_t len;
	const char *body = http_request_body(c->req, &len);
	if (batch_body_init(&j->body, body, len)) { /* not an object: the 400 at once */
		json_checked(j);
		return;
	}
	check_tick(&j->tick);
}

/* ==== CSV: POST /v2/batches/upload ==== */

enum field { F_NONE, F_FILE, F_CAMPAIGN, F_NAME, F_OTHER };

struct upload {
	struct api_call *c;	  /* NULL once answered (or dropped) */
	struct batch_import *imp; /* NULL before the file, and once over */
	unsigned busy;		  /* inside one of our entry points: not freed */
	bool multipart;
	bool paused;   /* the importer asked for a pause: no input until resume */
	bool stopped;  /* no more input wanted (answered, finishing) */
	bool finished; /* batch_import_finish() called */
	bool file_seen;
	bool has_cid, cid_query, has_name, name_query;
	enum field field;
	char campaign_id[VALUE_BYTES];
	char name[VALUE_BYTES];
	char fbuf[VALUE_BYTES]; /* the form field being read */
	size_t flen;
	int cb_status; /* a callback's answer that stopped the multipart parser */
	const char *cb_code;
	char cb_msg[320];
	char *pending; /* input taken from the server but not yet parsed (paused) */
	size_t pending_len, pending_cap;
	int slot; /* the import slot taken (slot_take()) */
	struct multipart mp;
};

static void upload_free(struct upload *u)
{
	slot_give(u->slot);
	free(u->pending);
	free(u);
}

static void upload_maybe_free(struct upload *u)
{
	if (!u->busy && !u->c && !u->imp)
		upload_free(u);
}

static void upload_closed(void *data)
{
	struct upload *u = data;

	u->imp = NULL;
	upload_maybe_free(u);
}

/* Answers an error now: the import (if any) is rolled back, no more input is read. */
static void upload_fail(struct upload *u, int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void upload_fail(struct upload *u, int status, const char *code, const char *fmt, ...)
{
	char msg[384];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	u->stopped = true;
	if (u->imp && !u->finished)
		batch_import_abort(u->imp, upload_closed, u);
	else if (u->finished)
		return; /* the import answers */
	if (u->c) {
		api_error(u->c, status, code, msg);
		u->c = NULL;
	}
}

static void upload_done(const struct batch_import_result *res, void *data)
{
	struct upload *u = data;

	u->imp = NULL;
	if (u->c) {
		answer_result(u->c, res);
		u->c = NULL;
	}
	upload_maybe_free(u);
}

static void upload_resume(void *data);

static int upload_start(struct upload *u)
{
	struct api_call *c = u->c;
	struct batch_import_options o = { .org_id = c->key.org.id,
					  .campaign_id = u->campaign_id,
					  .name = u->has_name ? u->name : NULL,
					  .source = BATCH_IMPORT_CSV,
					  .pending_ceiling = c->key.org.pending_ceiling,
					  .done_cb = upload_done,
					  .resume_cb = upload_resume,
					  .data = u };
	int rc = batch_import_new(api_loop(c->api), api_import_pool(c->api), &o, &u->imp);

	if (rc) {
		u->imp = NULL;
		u->stopped = true;
		answer_new_failed(c, rc);
		u->c = NULL;
	}
	return rc;
}

/* The importer took the file's bytes; a pause or a settled outcome stops the input. */
static int file_data(struct upload *u, const char *buf, size_t len)
{
	int rc = batch_import_feed(u->imp, buf, len);

	if (batch_import_settled(u->imp)) {
		u->stopped = true;
		u->finished = true;
		batch_import_finish(u->imp); /* the rest of the body cannot change the answer */
		return -ECANCELED;
	}
	if (rc == BATCH_IMPORT_PAUSE) {
		u->paused = true;
		return MULTIPART_PAUSE;
	}
	return 0;
}

static int cb_fail(struct upload *u, int status, const char *code, const char *msg)
{
	u->cb_status = status;
	u->cb_code = code;
	snprintf(u->cb_msg, sizeof(u->cb_msg), "%s", msg);
	return -EPROTO;
}

static int mp_begin(const struct multipart_part *p, void *ud)
{
	struct upload *u = ud;
	char mt[64], cs[32];

	u->flen = 0;
	if (!p->has_filename) {
		bool *has = NULL, query = false;
		if (strcmp(p->name, "campaign_id") == 0) {
			u->field = F_CAMPAIGN;
			has = &u->has_cid;
			query = u->cid_query;
		} else if (strcmp(p->name, "name") == 0) {
			u->field = F_NAME;
			has = &u->has_name;
			query = u->name_query;
		} else {
			u->field = F_OTHER;
			return 0;
		}
		if (*has || u->file_seen)
			return cb_fail(u, 400, "bad_request",
				       query	      ? "a form field repeats a query parameter"
				       : u->file_seen ? "form fields must come before the file "
							"part"
						      : "a form field appears twice");
		return 0;
	}
	if (u->file_seen)
		return cb_fail(u, 422, "invalid_request", "the upload carries more than one file");
	multipart_media_type(p->content_type, mt, sizeof(mt));
	if (!ends_with_csv(p->filename) || !csv_part_type(mt) ||
	    (multipart_param(p->content_type, "charset", cs, sizeof(cs)) &&
	     strcasecmp(cs, "utf-8") != 0 && strcasecmp(cs, "us-ascii") != 0)) {
		char msg[320];
		snprintf(msg, sizeof(msg),
			 "Only .csv files are accepted: the file part's name must end in .csv and "
			 "its type be " CSV_PART_TYPES " (UTF-8); got \"%.48s\" as \"%.40s\".",
			 p->filename, p->content_type[0] ? p->content_type : "(no type)");
		return cb_fail(u, 415, "unsupported_media_type", msg);
	}
	if (!u->has_cid) /* given after the file, or not at all: what follows is not read */
		return cb_fail(u, 400, "bad_request",
			       "campaign_id must come before the file part: give it as a query "
			       "parameter or as a form field ahead of the file (form fields after "
			       "the file are not read)");
	u->file_seen = true;
	u->field = F_FILE;
	if (!u->has_name) {
		char msg[160];
		name_from_file(u->name, sizeof(u->name), p->filename);
		u->has_name = true;
		if (!name_usable(u->name, true, msg, sizeof(msg)))
			return cb_fail(u, 422, "invalid_request", msg);
	}
	if (upload_start(u))
		return -ECANCELED; /* answered */
	return 0;
}

static int mp_data(const char *buf, size_t len, void *ud)
{
	struct upload *u = ud;

	if (u->field == F_FILE)
		return file_data(u, buf, len);
	if (u->field == F_CAMPAIGN || u->field == F_NAME) {
		if (u->flen + len >= sizeof(u->fbuf))
			return cb_fail(u, 422, "invalid_request", "a form field is too long");
		memcpy(u->fbuf + u->flen, buf, len);
		u->flen += len;
	}
	return 0;
}

static int mp_end(void *ud)
{
	struct upload *u = ud;

	u->fbuf[u->flen] = '\0';
	if (memchr(u->fbuf, '\0', u->flen))
		return cb_fail(u, 400, "bad_request", "a NUL in a form field");
	if (u->field == F_CAMPAIGN) {
		memcpy(u->campaign_id, u->fbuf, u->flen + 1);
		u->has_cid = true;
	} else if (u->field == F_NAME) {
		char msg[160];
		memcpy(u->name, u->fbuf, u->flen + 1);
		u->has_name = true;
		if (!name_usable(u->name, false, msg, sizeof(msg)))
			return cb_fail(u, 422, "invalid_request", msg);
	}
	u->field = F_NONE;
	return 0;
}

static const struct multipart_callbacks mp_cbs = { mp_begin, mp_data, mp_end };

/* Keeps buf (the part not parsed because of a pause) for upload_resume(). */
static int keep(struct upload *u, const char *buf, size_t len)
{
	if (len > u->pending_cap) {
		char *p = realloc(u->pending, len);
		if (!p)
			return -ENOMEM;
		u->pending = p;
		u->pending_cap = len;
	}
	memmove(u->pending, buf, len); /* buf may be inside pending */
	u->pending_len = len;
	return 0;
}

/* A piece of the body. */
static void upload_input(struct upload *u, const char *buf, size_t len)
{
	if (u->stopped || len == 0)
		return;
	if (!u->multipart) {
		file_data(u, buf, len);
		return;
	}
	long n = multipart_feed(&u->mp, buf, len);
	if (n == -EBADMSG) {
		upload_fail(u, 400, "bad_request", "malformed multipart body: %s",
			    multipart_error(&u->mp));
	} else if (n == -EPROTO) {
		upload_fail(u, u->cb_status, u->cb_code, "%s", u->cb_msg);
	} else if (n < 0) {
		u->stopped = true; /* answered or finishing */
	} else if ((size_t)n < len && keep(u, buf + n, len - (size_t)n)) {
		upload_fail(u, 503, "unavailable", "Out of memory; retry shortly.");
	}
}

/* The end of the body. */
static void upload_end(struct upload *u)
{
	if (u->stopped)
		return;
	u->stopped = true;
	if (u->multipart) {
		if (multipart_finish(&u->mp)) {
			upload_fail(u, 400, "bad_request", "malformed multipart body: %s",
				    multipart_error(&u->mp));
			return;
		}
		if (!u->file_seen) {
			upload_fail(u, 422, "invalid_request",
				    "the upload has no file: send the CSV as a form part with a "
				    "filename ending .csv");
			return;
		}
	}
	u->finished = true;
	batch_import_finish(u->imp);
}

static void upload_resume(void *data)
{
	struct upload *u = data;

	u->busy++;
	u->paused = false;
	if (u->pending_len) {
		size_t n = u->pending_len;
		u->pending_len = 0;
		upload_input(u, u->pending, n);
	}
	if (!u->paused && !u->stopped && u->c)
		http_request_body_resume(u->c->req); /* may call on_body() at once */
	u->busy--;
	upload_maybe_free(u);
}

/* The streamed body (http_request_body_read()): pieces, then its end or a failure. */
static void on_body(struct http_request *req, const char *buf, size_t len, int status, void *data)
{
	struct upload *u = data;

	u->busy++;
	if (status < 0) { /* the server has finished the request: no answer from us */
		u->stopped = true;
		if (u->c)
			call_drop(u->c);
		u->c = NULL;
		if (u->imp && !u->finished)
			batch_import_abort(u->imp, upload_closed, u);
	} else if (len) {
		upload_input(u, buf, len);
	} else {
		upload_end(u);
	}
	/* A pause, or an outcome already settled that the import has yet to answer: the socket
	 * is not read meanwhile. */
	if (u->c && (u->paused || u->stopped))
		http_request_body_pause(req);
	u->busy--;
	upload_maybe_free(u);
}

void api_batch_upload(struct api_call *c)
{
	char mt[64], param[256], fname[256];
	const char *ct = http_request_header(c->req, "Content-Type");
	const char *query = http_request_query(c->req);
	struct upload *u;
	int rc;

	multipart_media_type(ct, mt, sizeof(mt));
	bool multipart = strcmp(mt, "multipart/form-data") == 0;
	if (!multipart && strcmp(mt, "text/csv") != 0 && strcmp(mt, "application/csv") != 0) {
		api_error(c, 415, "unsupported_media_type",
			  "Only .csv files are accepted: send multipart/form-data with a file part "
			  "named *.csv, or a text/csv (or application/csv) body.");
		return;
	}
	if (!(u = calloc(1, sizeof(*u)))) {
		api_error(c, 503, "unavailable", "Out of memory; retry shortly.");
		return;
	}
	u->c = c;
	u->multipart = multipart;
	/* The query as every route's (query.h): unknown, repeated, empty or badly encoded names
	 * are 400 invalid_parameter naming the parameter. */
	struct query_param qp[] = { { .name = "campaign_id" },
				    { .name = "name" },
				    { .name = "filename" } };
	if (query_parse(query, qp, 3, param, sizeof(param))) {
		free(u);
		api_error(c, 400, "invalid_parameter", param);
		return;
	}
	u->has_cid = u->cid_query = qp[0].set;
	u->has_name = u->name_query = qp[1].set;
	snprintf(u->campaign_id, sizeof(u->campaign_id), "%s", qp[0].value);
	snprintf(u->name, sizeof(u->name), "%s", qp[1].value);
	snprintf(fname, sizeof(fname), "%s", qp[2].value);
	if (multipart) {
		if (!multipart_param(ct, "boundary", param, sizeof(param)) ||
		    multipart_init(&u->mp, param, &mp_cbs, u)) {
			free(u);
			api_error(c, 400, "bad_request",
				  "multipart/form-data needs a boundary of 1 to 70 characters");
			return;
		}
	} else {
		const char *cd = http_request_header(c->req, "Content-Disposition");
		bool named =
			qp[2].set || (cd && multipart_param(cd, "filename", fname, sizeof(fname)));
		if ((named && !ends_with_csv(fname)) ||
		    (multipart_param(ct, "charset", param, sizeof(param)) &&
		     strcasecmp(param, "utf-8") != 0 && strcasecmp(param, "us-ascii") != 0)) {
			free(u);
			api_error(
				c, 415, "unsupported_media_type",
				"Only .csv files are accepted: the file's name must end with .csv "
				"and its charset be UTF-8.");
			return;
		}
		if (!u->has_cid) {
			free(u);
			api_error(c, 422, "invalid_request",
				  "field campaign_id is missing: give it as a query parameter");
			return;
		}
		if (named && !u->has_name) {
			name_from_file(u->name, sizeof(u->name), fname);
			u->has_name = true;
		}
	}
	if (u->has_cid && strlen(u->campaign_id) >= API_ID_SIZE) {
		free(u);
		api_not_found(c, "campaign", "(an over-long id)");
		return;
	}
	if (u->has_name && !name_usable(u->name, !u->name_query, param, sizeof(param))) {
		free(u);
		api_error(c, 422, "invalid_request", param);
		return;
	}
	if ((u->slot = slot_take(c)) < 0) {
		free(u);
		return;
	}
	u->busy++;
	if (!multipart)
		upload_start(u);
	if (u->c && (rc = http_request_body_read(c->req, on_body, u))) {
		/* The body can no longer be read (the client went away): answered for form's sake,
		 * the server drops it. */
		upload_fail(u, 400, "bad_request", "The request body cannot be read.");
	}
	u->busy--;
	upload_maybe_free(u);
}
