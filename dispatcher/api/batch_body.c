/* The JSON body of POST /v2/batches, read with no I/O (batch_body.h). */
#include "batch_body.h"

#include "json_strict.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Records a refusal: the first 400 wins, else the first 422. */
static void refuse(struct batch_body *p, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void refuse(struct batch_body *p, int status, const char *fmt, ...)
{
	va_list ap;

	if (p->status == 400 || (p->status && status != 400))
		return;
	p->status = status;
	va_start(ap, fmt);
	vsnprintf(p->msg, sizeof(p->msg), fmt, ap);
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

struct member {
	size_t key, key_end; /* the key's text, quotes included (objects only) */
	size_t val, val_end;
};

/* Returns 1 (a member in *m), 0 (the closing bracket, consumed) or -1 (malformed at w->pos). */
static int walk_next(struct batch_body_walk *w, struct member *m)
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

/* A contact's number: one of these members (the CSV header's phone column names). */
static const char *const phone_names[] = { "phone", "phone_number", "to_number" };

/* The first pass's check of one contact (index i, text b[s..e)). */
static void check_contact(struct batch_body *p, size_t s, size_t e, uint64_t i)
{
	char msg[JSON_STRICT_ERR];

	if (e - s > BATCH_BODY_CONTACT_MAX) { /* by its length, before any parsing */
		refuse(p, 422,
		       "field contacts[%llu] is %zu bytes of JSON (from byte %zu); a contact may "
		       "take at most %d",
		       (unsigned long long)i, e - s, s, BATCH_BODY_CONTACT_MAX);
		return;
	}
	p->parsed += e - s;
	cJSON *j = json_strict_parse(p->b + s, e - s, msg, sizeof(msg));

	if (!j) {
		refuse(p, 400, "contacts[%llu] (from byte %zu): %s", (unsigned long long)i, s, msg);
		return;
	}
	const cJSON *phone = NULL, *vars = cJSON_GetObjectItemCaseSensitive(j, "variables");
	const char *pname = phone_names[0], *other = NULL;
	for (size_t n = 0; n < sizeof(phone_names) / sizeof(phone_names[0]); n++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, phone_names[n]);
		if (v && phone && !other)
			other = phone_names[n];
		else if (v && !phone)
			phone = v, pname = phone_names[n];
	}
	if (!cJSON_IsObject(j))
		refuse(p, 422, "field contacts[%llu] must be an object", (unsigned long long)i);
	else if (!phone)
		refuse(p, 422,
		       "field contacts[%llu].phone is missing (the number may also be named "
		       "phone_number or to_number)",
		       (unsigned long long)i);
	else if (other)
		refuse(p, 422,
		       "field contacts[%llu] has both %s and %s: give the number once, under "
		       "one of phone, phone_number, to_number",
		       (unsigned long long)i, pname, other);
	else if (!cJSON_IsString(phone))
		refuse(p, 422, "field contacts[%llu].%s must be a string", (unsigned long long)i,
		       pname);
	else if (vars && !cJSON_IsNull(vars) && !cJSON_IsObject(vars))
		refuse(p, 422, "field contacts[%llu].variables must be an object",
		       (unsigned long long)i);
	cJSON_Delete(j);
}

/* A top-level string field (b[s..e)) into out. Returns the length, or -1 (refused). */
static long string_field(struct batch_body *p, size_t s, size_t e, const char *field, char *out,
			 size_t size)
{
	char msg[JSON_STRICT_ERR];
	cJSON *j = json_strict_parse(p->b + s, e - s, msg, sizeof(msg));
	long n = -1;

	if (!j)
		refuse(p, 400, "field %s (from byte %zu): %s", field, s, msg);
	else if (!cJSON_IsString(j))
		refuse(p, 422, "field %s must be a string", field);
	else /* cut to fit: the caller judges the length returned */
		n = (long)strlen(j->valuestring), snprintf(out, size, "%s", j->valuestring);
	cJSON_Delete(j);
	return n;
}

/* Records the top-level key (a 400 when it is there twice or one too many). */
static void key_seen(struct batch_body *p, const char *key)
{
	for (unsigned i = 0; i < p->nseen; i++)
		if (strcmp(p->seen[i], key) == 0)
			refuse(p, 400, "field %.64s appears twice", key);
	if (p->nseen == BATCH_BODY_FIELDS_MAX)
		refuse(p, 400, "the body has more than %d fields", BATCH_BODY_FIELDS_MAX);
	else if (!(p->seen[p->nseen++] = strdup(key)))
		refuse(p, 400, "out of memory");
}

/* One top-level member of the body (m). */
static void check_member(struct batch_body *p, const struct member *m)
{
	const char *b = p->b;
	char msg[JSON_STRICT_ERR];

	if (m->key_end - m->key > BATCH_BODY_FIELD_MAX) { /* by its length, before parsing */
		refuse(p, 422, "a field name (from byte %zu) is longer than %d bytes", m->key,
		       BATCH_BODY_FIELD_MAX);
		return;
	}
	cJSON *k = json_strict_parse(b + m->key, m->key_end - m->key, msg, sizeof(msg));

	if (!k || !cJSON_IsString(k)) {
		refuse(p, 400, "a field name (from byte %zu): %s", m->key, msg);
		cJSON_Delete(k);
		return;
	}
	const char *key = k->valuestring ? k->valuestring : ""; /* a string's is never NULL */
	key_seen(p, key);
	if (p->status == 400) {
		cJSON_Delete(k);
		return;
	}
	if (strcmp(key, "contacts") != 0 && m->val_end - m->val > BATCH_BODY_FIELD_MAX) {
		/* by its length, before any parsing: only the contacts may be long */
		refuse(p, 422, "field %.64s is %zu bytes of JSON; at most %d", key,
		       m->val_end - m->val, BATCH_BODY_FIELD_MAX);
		if (strcmp(key, "campaign_id") == 0)
			p->have_cid = true; /* refused above: not "missing" as well */
		cJSON_Delete(k);
		return;
	}
	if (strcmp(key, "contacts") == 0) {
		p->have_contacts = true;
		if (b[m->val] != '[') {
			refuse(p, 422, "field contacts must be an array");
		} else {
			p->arr_at = m->val;
			p->arr = (struct batch_body_walk){ .b = b,
							   .len = m->val_end,
							   .pos = m->val + 1,
							   .first = true,
							   .close = ']' };
			p->in_contacts = true; /* walked by batch_body_check() */
		}
	} else if (strcmp(key, "campaign_id") == 0) {
		long n = string_field(p, m->val, m->val_end, "campaign_id", p->campaign_id,
				      sizeof(p->campaign_id));
		p->have_cid = n >= 0;
		p->campaign_id_len = n >= 0 ? (size_t)n : 0;
	} else if (strcmp(key, "name") == 0 && b[m->val] != 'n') { /* null: no name */
		char why[64];
		const char *fault;
		long n = string_field(p, m->val, m->val_end, "name", p->name, sizeof(p->name));
		if (n > BATCH_BODY_NAME_MAX)
			refuse(p, 422, "field name is longer than %d bytes", BATCH_BODY_NAME_MAX);
		else if (n >= 0 &&
			 (fault = batch_body_name_fault(p->name, (size_t)n, why, sizeof(why))))
			refuse(p, 422, "field name %s", fault);
		p->has_name = n >= 0;
	} else { /* another field (or a null name): checked as JSON, ignored */
		cJSON *v = json_strict_parse(b + m->val, m->val_end - m->val, msg, sizeof(msg));
		if (!v)
			refuse(p, 400, "field %.64s (from byte %zu): %s", key, m->val, msg);
		cJSON_Delete(v);
	}
	cJSON_Delete(k);
}

int batch_body_init(struct batch_body *p, const char *body, size_t len)
{
	size_t at = skip_ws(body, len, 0);

	*p = (struct batch_body){ .b = body, .len = len };
	if (at >= len || body[at] != '{') {
		refuse(p, 400, "the body must be a JSON object (byte %zu)", at);
		return 400;
	}
	p->top = (struct batch_body_walk){
		.b = body, .len = len, .pos = at + 1, .first = true, .close = '}'
	};
	return 0;
}

bool batch_body_check(struct batch_body *p, unsigned budget)
{
	struct member m;
	int rc;

	p->parsed = 0;
	while (p->status != 400) {
		if (p->in_contacts) {
			if ((rc = walk_next(&p->arr, &m)) == 1) {
				check_contact(p, m.val, m.val_end, p->contacts++);
				if (--budget == 0 || p->parsed >= BATCH_BODY_SLICE_BYTES)
					return false;
				continue;
			}
			if (rc < 0)
				refuse(p, 400, "invalid JSON at byte %zu", p->arr.pos);
			p->in_contacts = false;
			continue;
		}
		if ((rc = walk_next(&p->top, &m)) == 1) {
			check_member(p, &m);
			continue;
		}
		size_t at;
		if (rc < 0)
			refuse(p, 400, "invalid JSON at byte %zu", p->top.pos);
		else if ((at = skip_ws(p->b, p->len, p->top.pos)) < p->len)
			refuse(p, 400, "trailing bytes after the JSON value at byte %zu", at);
		break;
	}
	if (!p->have_cid)
		refuse(p, 422, "field campaign_id is missing");
	if (!p->have_contacts)
		refuse(p, 422, "field contacts is missing");
	return true;
}

void batch_body_deinit(struct batch_body *p)
{
	for (unsigned i = 0; i < p->nseen; i++)
		free(p->seen[i]);
	p->nseen = 0;
}

void batch_body_contacts(const struct batch_body *p, struct batch_body_walk *w)
{
	*w = (struct batch_body_walk){
		.b = p->b, .len = p->len, .pos = p->arr_at + 1, .first = true, .close = ']'
	};
}

int batch_body_next(struct batch_body_walk *w, struct batch_body_contact *c)
{
	const char *b = w->b;
	struct member m, f;

	*c = (struct batch_body_contact){ .phone = "" };
	if (walk_next(w, &m) != 1)
		return 0; /* the end (the first pass vouched for the shape) */
	struct batch_body_walk o = {
		.b = b, .len = m.val_end, .pos = m.val + 1, .first = true, .close = '}'
	};
	while (walk_next(&o, &f) == 1) {
		if (key_is(b, &f, phone_names[0]) || key_is(b, &f, phone_names[1]) ||
		    key_is(b, &f, phone_names[2])) { /* one of them: the first pass saw to it */
			c->phone = b + f.val + 1;
			c->phone_len = f.val_end - f.val - 2;
			if (memchr(c->phone, '\\', c->phone_len)) { /* escapes: decoded */
				cJSON_Delete(c->decoded);
				c->decoded = cJSON_ParseWithLength(b + f.val, f.val_end - f.val);
				c->phone =
					cJSON_IsString(c->decoded) ? c->decoded->valuestring : "";
				c->phone_len = strlen(c->phone);
			}
		} else if (key_is(b, &f, "variables") && b[f.val] != 'n') {
			c->vars = b + f.val;
			c->vars_len = f.val_end - f.val;
		}
	}
	return 1;
}

void batch_body_contact_deinit(struct batch_body_contact *c)
{
	cJSON_Delete(c->decoded);
	c->decoded = NULL;
}

const char *batch_body_name_fault(const char *name, size_t len, char *buf, size_t cap)
{
	if (len > BATCH_BODY_NAME_MAX) {
		snprintf(buf, cap, "is longer than %d bytes", BATCH_BODY_NAME_MAX);
		return buf;
	}
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f) {
			snprintf(buf, cap, "contains a control character (byte %zu)", i);
			return buf;
		}
	return NULL;
}

int batch_body_control(const char *body, size_t len, char *msg, size_t cap)
{
	char err[JSON_STRICT_ERR];
	cJSON *j;

	if (skip_ws(body, len, 0) == len)
		return 0;
	if (!(j = json_strict_parse(body, len, err, sizeof(err))) || !cJSON_IsObject(j)) {
		snprintf(msg, cap,
			 "This route takes no body: send none, or the empty JSON object {} (%s).",
			 j ? "the body is JSON but not an object" : err);
		cJSON_Delete(j);
		return 400;
	}
	int rc = 0;
	if (j->child) {
		snprintf(msg, cap,
			 "field %.64s is not a field of this route: it takes no body; send none, "
			 "or the empty JSON object {}.",
			 j->child->string[0] ? j->child->string : "\"\"");
		rc = 422;
	}
	cJSON_Delete(j);
	return rc;
}
