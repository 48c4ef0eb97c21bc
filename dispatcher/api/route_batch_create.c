/* POST /v2/batches (JSON) and POST /v2/batches/upload (CSV): SPEC R6, issue 10 item 4, over the
 * batch importer (batch_import.h). The requests, answers and the choices made where the issue is
 * silent: dispatcher/api/README.md, "Creating batches".
 *
 * JSON: the body is buffered by the server (at most API_BATCH_JSON_BODY_MAX) and read twice
 * without ever building its whole tree: a first pass checks the shape (strict JSON, each contact
 * parsed alone with json_strict_parse() and freed), so a malformed body is refused before any
 * database work; a second pass walks the contacts' text and hands each to batch_import_add(),
 * pausing when the importer says so. Memory: the body, plus one contact's tree at a time.
 *
 * CSV: multipart/form-data (a file part named *.csv of type text/csv) or a raw text/csv body,
 * parsed as it arrives (multipart.h) and fed to batch_import_feed(), pausing when it says so.
 *
 * Each import holds a pool connection for its whole length: at most imports_cap() run at once
 * in a process; beyond, 503 with Retry-After. */
#include "api_int.h"
#include "batch_import.h"
#include "json_strict.h"
#include "log.h"
#include "multipart.h"
#include "pg_pool.h"

#include <openssl/crypto.h> /* OPENSSL_cleanse */

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define BUSY_RETRY_S   "5"  /* Retry-After of the 503 when that many run */
#define TOP_FIELDS_MAX 32   /* fields of the JSON body's object */
#define VALUE_BYTES    256  /* a query parameter or form field, decoded */
#define CHECK_SLICE    2000 /* contacts checked per loop turn by the JSON route's first pass */
#define CHECK_BYTES    ((size_t)1 << 20) /* ... and bytes of them parsed per loop turn */
/* A contact's JSON text, at most: its variables' limit and room for the phone and the keys.
 * Refused by length before it is parsed (a 64 MiB contact parsed whole took 2.5 GiB). */
#define CONTACT_TEXT_MAX (BATCH_IMPORT_MAX_VARIABLES + 1024)
#define FIELD_TEXT_MAX	 4096 /* another top-level field's text (or a field name), at most */

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

static void error_fmt(struct api_call *c, int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void error_fmt(struct api_call *c, int status, const char *code, const char *fmt, ...)
{
	char msg[320];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	api_error(c, status, code, msg);
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

/* ==== JSON: POST /v2/batches ==== */

/* What the first pass found, or its first error (a 400 wins over a 422). */
struct jerr {
	int status; /* 0: none */
	char msg[256];
};

static void jerr_set(struct jerr *e, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void jerr_set(struct jerr *e, int status, const char *fmt, ...)
{
	va_list ap;

	if (e->status == 400 || (e->status && status != 400))
		return; /* the first 400, else the first 422 */
	e->status = status;
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
}

static size_t skip_ws(const char *b, size_t len, size_t i)
{
	while (i < len && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r'))
		i++;
	return i;
}

/* One past the end of the JSON value that starts at b[i], or 0 when none ends before len. It
 * finds the extent only (strings with their escapes, nested brackets counted): the value's
 * grammar is json_strict_parse()'s to check. */
static size_t value_end(const char *b, size_t len, size_t i)
{
	size_t depth = 0, j;

	if (i >= len)
		return 0;
	if (b[i] != '"' && b[i] != '{' && b[i] != '[') { /* a number, true, false, null */
		for (j = i; j < len && b[j] && !strchr(" \t\r\n,]}:[{\"", b[j]); j++)
			;
		return j > i ? j : 0;
	}
	for (j = i; j < len; j++) {
		char ch = b[j];
		if (ch == '"') {
			for (j++; j < len && b[j] != '"'; j++)
				if (b[j] == '\\')
					j++;
			if (j >= len)
				return 0;
			if (depth == 0)
				return j + 1;
		} else if (ch == '{' || ch == '[') {
			depth++;
		} else if ((ch == '}' || ch == ']') && --depth == 0) {
			return j + 1;
		}
	}
	return 0;
}

/* Walks the members of an object or the elements of an array in b[0..len), pos just after its
 * opening bracket. */
struct walk {
	const char *b;
	size_t len, pos;
	bool first;
	char close; /* '}' or ']' */
};

struct member {
	size_t key, key_end; /* the key's text, quotes included (objects only) */
	size_t val, val_end;
};

/* Returns 1 (a member in *m), 0 (the closing bracket, consumed) or -1 (malformed at w->pos). */
static int walk_next(struct walk *w, struct member *m)
{
	const char *b = w->b;
	size_t p = skip_ws(b, w->len, w->pos);

	if (p < w->len && b[p] == w->close && w->first) {
		w->pos = p + 1;
		return 0;
	}
	if (!w->first) {
		if (p < w->len && b[p] == w->close) {
			w->pos = p + 1;
			return 0;
		}
		if (p >= w->len || b[p] != ',') {
			w->pos = p;
			return -1;
		}
		p = skip_ws(b, w->len, p + 1);
	}
	w->first = false;
	if (w->close == '}') {
		if (p >= w->len || b[p] != '"' || !(m->key_end = value_end(b, w->len, p))) {
			w->pos = p;
			return -1;
		}
		m->key = p;
		p = skip_ws(b, w->len, m->key_end);
		if (p >= w->len || b[p] != ':') {
			w->pos = p;
			return -1;
		}
		p = skip_ws(b, w->len, p + 1);
	}
	if (!(m->val_end = value_end(b, w->len, p))) {
		w->pos = p;
		return -1;
	}
	m->val = p;
	w->pos = m->val_end;
	return 1;
}

/* Whether the member's key is name (a key with escapes is decoded first). */
static bool key_is(const char *b, const struct member *m, const char *name)
{
	size_t n = m->key_end - m->key - 2, nlen = strlen(name);

	if (!memchr(b + m->key, '\\', m->key_end - m->key))
		return n == nlen && memcmp(b + m->key + 1, name, n) == 0;
	cJSON *k = cJSON_ParseWithLength(b + m->key, m->key_end - m->key);
	bool eq = cJSON_IsString(k) && strcmp(k->valuestring, name) == 0;
	cJSON_Delete(k);
	return eq;
}

/* The first pass's check of one contact (index i, text b[s..e)). */
static void check_contact(const char *b, size_t s, size_t e, uint64_t i, struct jerr *err)
{
	char msg[JSON_STRICT_ERR];

	if (e - s > CONTACT_TEXT_MAX) { /* by its length, before any parsing */
		jerr_set(err, 422,
			 "field contacts[%llu] is %zu bytes of JSON (from byte %zu); a contact may "
			 "take at most %d",
			 (unsigned long long)i, e - s, s, CONTACT_TEXT_MAX);
		return;
	}
	cJSON *j = json_strict_parse(b + s, e - s, msg, sizeof(msg));

	if (!j) {
		jerr_set(err, 400, "contacts[%llu] (from byte %zu): %s", (unsigned long long)i, s,
			 msg);
		return;
	}
	const cJSON *phone = cJSON_GetObjectItemCaseSensitive(j, "phone");
	const cJSON *vars = cJSON_GetObjectItemCaseSensitive(j, "variables");
	if (!cJSON_IsObject(j))
		jerr_set(err, 422, "field contacts[%llu] must be an object", (unsigned long long)i);
	else if (!phone)
		jerr_set(err, 422, "field contacts[%llu].phone is missing", (unsigned long long)i);
	else if (!cJSON_IsString(phone))
		jerr_set(err, 422, "field contacts[%llu].phone must be a string",
			 (unsigned long long)i);
	else if (vars && !cJSON_IsNull(vars) && !cJSON_IsObject(vars))
		jerr_set(err, 422, "field contacts[%llu].variables must be an object",
			 (unsigned long long)i);
	cJSON_Delete(j);
}

struct jcreate {
	struct api_call *c; /* NULL once answered */
	struct batch_import *imp;
	uv_timer_t tick; /* the first pass, a slice per loop turn */
	const char *b;	 /* the body (the request's, valid until the answer) */
	size_t len;
	/* the first pass */
	struct walk top, arr; /* the body's object; the contacts array while in it */
	bool in_contacts, have_cid, have_contacts, checked;
	uint64_t idx; /* the next contact's index */
	struct jerr err;
	size_t parsed;		    /* bytes parsed by the first pass in this loop turn */
	int slot;		    /* the import slot taken (slot_take()), -1: none */
	char *seen[TOP_FIELDS_MAX]; /* the top-level keys so far */
	unsigned nseen;
	/* the second pass */
	size_t arr_at;	      /* the contacts array's '[' */
	struct walk contacts; /* its walk */
	bool has_name;
	char campaign_id[VALUE_BYTES];
	char name[BATCH_IMPORT_MAX_NAME + 1];
};

static void jfree_cb(uv_handle_t *h)
{
	free(h->data);
}

static void jfree(struct jcreate *j)
{
	for (unsigned i = 0; i < j->nseen; i++)
		free(j->seen[i]);
	j->nseen = 0;
	uv_close((uv_handle_t *)&j->tick, jfree_cb);
}

/* A top-level string field (b[s..e)) into out. Returns the length, or -1 (err set). */
static long string_field(const char *b, size_t s, size_t e, const char *field, char *out,
			 size_t size, struct jerr *err)
{
	char msg[JSON_STRICT_ERR];
	cJSON *j = json_strict_parse(b + s, e - s, msg, sizeof(msg));
	long n = -1;

	if (!j)
		jerr_set(err, 400, "field %s (from byte %zu): %s", field, s, msg);
	else if (!cJSON_IsString(j))
		jerr_set(err, 422, "field %s must be a string", field);
	else /* cut to fit: the caller judges the length returned */
		n = (long)strlen(j->valuestring), snprintf(out, size, "%s", j->valuestring);
	cJSON_Delete(j);
	return n;
}

/* One top-level member of the body (m). */
static void check_member(struct jcreate *j, const struct member *m)
{
	const char *b = j->b;
	struct jerr *err = &j->err;
	char msg[JSON_STRICT_ERR];

	if (m->key_end - m->key > FIELD_TEXT_MAX) { /* by its length, before any parsing */
		jerr_set(err, 422, "a field name (from byte %zu) is longer than %d bytes", m->key,
			 FIELD_TEXT_MAX);
		return;
	}
	cJSON *k = json_strict_parse(b + m->key, m->key_end - m->key, msg, sizeof(msg));

	if (!k || !cJSON_IsString(k)) {
		jerr_set(err, 400, "a field name (from byte %zu): %s", m->key, msg);
		cJSON_Delete(k);
		return;
	}
	const char *key = k->valuestring;
	for (unsigned i = 0; i < j->nseen; i++)
		if (strcmp(j->seen[i], key) == 0)
			jerr_set(err, 400, "field %.64s appears twice", key);
	if (j->nseen == TOP_FIELDS_MAX)
		jerr_set(err, 400, "the body has more than %d fields", TOP_FIELDS_MAX);
	else if (!(j->seen[j->nseen++] = strdup(key)))
		jerr_set(err, 400, "out of memory");
	if (err->status == 400) {
		cJSON_Delete(k);
		return;
	}
	if (strcmp(key, "contacts") != 0 && m->val_end - m->val > FIELD_TEXT_MAX) {
		/* by its length, before any parsing: only the contacts may be long */
		jerr_set(err, 422, "field %.64s is %zu bytes of JSON; at most %d", key,
			 m->val_end - m->val, FIELD_TEXT_MAX);
		if (strcmp(key, "campaign_id") == 0)
			j->have_cid = true; /* refused above: not "missing" as well */
		cJSON_Delete(k);
		return;
	}
	if (strcmp(key, "contacts") == 0) {
		j->have_contacts = true;
		if (b[m->val] != '[') {
			jerr_set(err, 422, "field contacts must be an array");
		} else {
			j->arr_at = m->val;
			j->arr = (struct walk){ .b = b,
						.len = m->val_end,
						.pos = m->val + 1,
						.first = true,
						.close = ']' };
			j->in_contacts = true; /* walked by check_slice() */
		}
	} else if (strcmp(key, "campaign_id") == 0) {
		j->have_cid = string_field(b, m->val, m->val_end, "campaign_id", j->campaign_id,
					   sizeof(j->campaign_id), err) >= 0;
	} else if (strcmp(key, "name") == 0 && b[m->val] != 'n') { /* null: no name */
		long n = string_field(b, m->val, m->val_end, "name", j->name, sizeof(j->name), err);
		if (n > BATCH_IMPORT_MAX_NAME)
			jerr_set(err, 422, "field name is longer than %d bytes",
				 BATCH_IMPORT_MAX_NAME);
		j->has_name = n >= 0;
	} else { /* another field (or a null name): checked as JSON, ignored */
		j->parsed += m->val_end - m->val;
		cJSON *v = json_strict_parse(b + m->val, m->val_end - m->val, msg, sizeof(msg));
		if (!v)
			jerr_set(err, 400, "field %.64s (from byte %zu): %s", key, m->val, msg);
		cJSON_Delete(v);
	}
	cJSON_Delete(k);
}

/* The first pass, up to budget contacts or CHECK_BYTES of text parsed: the body's shape, each
 * contact parsed alone. Returns true when the pass is over (j->err says how it went). */
static bool check_slice(struct jcreate *j, unsigned budget)
{
	struct jerr *err = &j->err;
	struct member m;
	int rc;

	while (err->status != 400) {
		if (j->in_contacts) {
			if ((rc = walk_next(&j->arr, &m)) == 1) {
				check_contact(j->b, m.val, m.val_end, j->idx++, err);
				if (m.val_end - m.val <= CONTACT_TEXT_MAX)
					j->parsed += m.val_end - m.val;
				if (--budget == 0 || j->parsed >= CHECK_BYTES)
					return false;
				continue;
			}
			if (rc < 0)
				jerr_set(err, 400, "invalid JSON at byte %zu", j->arr.pos);
			j->in_contacts = false;
			continue;
		}
		if ((rc = walk_next(&j->top, &m)) == 1) {
			check_member(j, &m);
			continue;
		}
		size_t p;
		if (rc < 0)
			jerr_set(err, 400, "invalid JSON at byte %zu", j->top.pos);
		else if ((p = skip_ws(j->b, j->len, j->top.pos)) < j->len)
			jerr_set(err, 400, "trailing bytes after the JSON value at byte %zu", p);
		break;
	}
	if (!j->have_cid)
		jerr_set(err, 422, "field campaign_id is missing");
	if (!j->have_contacts)
		jerr_set(err, 422, "field contacts is missing");
	return true;
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
	struct member m, f;
	int rc;

	while (!batch_import_settled(j->imp)) {
		if (http_request_aborted(j->c->req)) { /* nothing will read the answer */
			api_error(j->c, 503, "aborted", "The client went away.");
			j->c = NULL;
			batch_import_abort(j->imp, json_closed, j);
			return;
		}
		if ((rc = walk_next(&j->contacts, &m)) != 1)
			break; /* the end (the first pass vouched for the shape) */
		struct walk o = {
			.b = j->b, .len = m.val_end, .pos = m.val + 1, .first = true, .close = '}'
		};
		const char *phone = "", *vars = NULL;
		size_t plen = 0, vlen = 0;
		cJSON *decoded = NULL;
		while (walk_next(&o, &f) == 1) {
			if (key_is(j->b, &f, "phone")) {
				phone = j->b + f.val + 1;
				plen = f.val_end - f.val - 2;
				if (memchr(phone, '\\', plen)) { /* escapes: decoded */
					cJSON_Delete(decoded);
					decoded = cJSON_ParseWithLength(j->b + f.val,
									f.val_end - f.val);
					phone = cJSON_IsString(decoded) ? decoded->valuestring : "";
					plen = strlen(phone);
				}
			} else if (key_is(j->b, &f, "variables") && j->b[f.val] != 'n') {
				vars = j->b + f.val;
				vlen = f.val_end - f.val;
			}
		}
		rc = batch_import_add(j->imp, phone, plen, vars, vlen);
		cJSON_Delete(decoded);
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

	if (j->err.status) {
		api_error(c, j->err.status,
			  j->err.status == 400 ? "bad_request" : "invalid_request", j->err.msg);
		jfree(j);
		return;
	}
	if (strlen(j->campaign_id) >= API_ID_SIZE) { /* not an id: no such campaign */
		api_not_found(c, "campaign", "(an over-long id)");
		jfree(j);
		return;
	}
	if ((j->slot = slot_take(c)) < 0) {
		jfree(j);
		return;
	}
	j->contacts = (struct walk){
		.b = j->b, .len = j->len, .pos = j->arr_at + 1, .first = true, .close = ']'
	};
	struct batch_import_options o = { .org_id = c->key.org.id,
					  .campaign_id = j->campaign_id,
					  .name = j->has_name ? j->name : NULL,
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

	j->parsed = 0;
	if (http_request_aborted(j->c->req)) {
		api_error(j->c, 503, "aborted", "The client went away.");
		jfree(j);
	} else if (check_slice(j, CHECK_SLICE)) {
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
	j->b = http_request_body(c->req, &j->len);
	uv_timer_init(api_loop(c->api), &j->tick);
	j->tick.data = j;
	size_t p = skip_ws(j->b, j->len, 0);
	if (p >= j->len || j->b[p] != '{') {
		jerr_set(&j->err, 400, "the body must be a JSON object (byte %zu)", p);
		json_checked(j);
		return;
	}
	j->top = (struct walk){
		.b = j->b, .len = j->len, .pos = p + 1, .first = true, .close = '}'
	};
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
	char cb_msg[256];
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
	char msg[320];
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
	if (!ends_with_csv(p->filename) ||
	    (strcmp(mt, "text/csv") != 0 && strcmp(mt, "application/csv") != 0) ||
	    (multipart_param(p->content_type, "charset", cs, sizeof(cs)) &&
	     strcasecmp(cs, "utf-8") != 0 && strcasecmp(cs, "us-ascii") != 0)) {
		char msg[256];
		snprintf(
			msg, sizeof(msg),
			"Only .csv files are accepted: the file part must be named *.csv and typed "
			"text/csv (UTF-8); got \"%.64s\" as \"%.48s\".",
			p->filename, p->content_type[0] ? p->content_type : "(no type)");
		return cb_fail(u, 415, "unsupported_media_type", msg);
	}
	if (!u->has_cid)
		return cb_fail(u, 422, "invalid_request",
			       "field campaign_id is missing: give it as a query parameter or as a "
			       "form field before the file part");
	u->file_seen = true;
	u->field = F_FILE;
	if (!u->has_name) {
		name_from_file(u->name, sizeof(u->name), p->filename);
		u->has_name = true;
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
		memcpy(u->name, u->fbuf, u->flen + 1);
		u->has_name = true;
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

/* Percent-decodes query parameter name of q into out. Returns 1 (found), 0 (absent), -EINVAL
 * (bad encoding, a NUL, or given twice) or -E2BIG. */
static int query_param(const char *q, const char *name, char *out, size_t size)
{
	size_t nlen = strlen(name);
	int found = 0;

	while (q && *q) {
		const char *amp = strchr(q, '&'), *end = amp ? amp : q + strlen(q);
		if ((size_t)(end - q) > nlen && strncmp(q, name, nlen) == 0 && q[nlen] == '=') {
			size_t o = 0;
			if (found)
				return -EINVAL;
			found = 1;
			for (const char *p = q + nlen + 1; p < end; p++) {
				int ch = (unsigned char)*p;
				if (ch == '+') {
					ch = ' ';
				} else if (ch == '%') {
					unsigned v;
					if (end - p < 3 || sscanf(p + 1, "%2x", &v) != 1 ||
					    !strchr("0123456789abcdefABCDEF", p[1]) ||
					    !strchr("0123456789abcdefABCDEF", p[2]) || v == 0)
						return -EINVAL;
					ch = (int)v;
					p += 2;
				}
				if (o + 1 >= size)
					return -E2BIG;
				out[o++] = (char)ch;
			}
			out[o] = '\0';
		}
		q = amp ? amp + 1 : NULL;
	}
	return found;
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
			  "Only .csv files are accepted: send multipart/form-data with a .csv file "
			  "part of type text/csv, or a text/csv body.");
		return;
	}
	if (!(u = calloc(1, sizeof(*u)))) {
		api_error(c, 503, "unavailable", "Out of memory; retry shortly.");
		return;
	}
	u->c = c;
	u->multipart = multipart;
	if ((rc = query_param(query, "campaign_id", u->campaign_id, sizeof(u->campaign_id))) < 0 ||
	    (u->has_cid = u->cid_query = rc > 0,
	     (rc = query_param(query, "name", u->name, sizeof(u->name))) < 0) ||
	    (u->has_name = u->name_query = rc > 0,
	     (rc = query_param(query, "filename", fname, sizeof(fname))) < 0)) {
		free(u);
		api_error(c, rc == -E2BIG ? 422 : 400,
			  rc == -E2BIG ? "invalid_request" : "bad_request",
			  rc == -E2BIG ? "a query parameter is too long"
				       : "a query parameter is malformed (percent-encoding, a NUL) "
					 "or given twice");
		return;
	}
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
			rc > 0 || (cd && multipart_param(cd, "filename", fname, sizeof(fname)));
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
	if (u->has_name && strlen(u->name) > BATCH_IMPORT_MAX_NAME) {
		free(u);
		error_fmt(c, 422, "invalid_request", "field name is longer than %d bytes",
			  BATCH_IMPORT_MAX_NAME);
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
