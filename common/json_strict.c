#include "json_strict.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SMALL_OBJECT 16 /* objects up to this many keys are checked pairwise, larger sorted */

/* Finds a control character inside a string, raw or as \u0000, before cJSON sees the text:
 * cJSON copies a raw NUL into the string (ending it early) and decodes \u0000 to one. Also
 * finds the first control character outside strings other than tab, CR and LF (*ctl; len when
 * none): cJSON skips every byte up to 32 as whitespace, NUL included, where RFC 8259 allows
 * only these four — the caller refuses it when it lies inside the value. */
static bool scan_strings(const char *buf, size_t len, size_t *ctl, char *err, size_t errlen)
{
	bool in = false;

	*ctl = len;
	for (size_t i = 0; i < len; i++) {
		unsigned char ch = (unsigned char)buf[i];
		if (!in) {
			if (ch == '"')
				in = true;
			else if (ch < 0x20 && ch != '\t' && ch != '\r' && ch != '\n' && *ctl == len)
				*ctl = i; /* and go on: the strings after it are checked too */
			continue;
		}
		if (ch == '"') {
			in = false;
		} else if (ch < 0x20) {
			snprintf(err, errlen, "%s inside a string at byte %zu",
				 ch ? "a control character" : "a NUL", i);
			return false;
		} else if (ch == '\\' && i + 1 < len) {
			/* RFC 8259's escapes only: cJSON decodes a \u without four hex digits
			 * to a NUL (cutting the string) and takes any byte after a backslash. */
			char e = buf[i + 1];
			if (e == 'u') {
				size_t h = 0;
				while (h < 4 && i + 2 + h < len &&
				       isxdigit((unsigned char)buf[i + 2 + h]))
					h++;
				if (h < 4) {
					snprintf(
						err, errlen,
						"an invalid \\u escape inside a string at byte %zu "
						"(four hex digits wanted)",
						i);
					return false;
				}
				if (memcmp(buf + i + 2, "0000", 4) == 0) {
					snprintf(err, errlen,
						 "a NUL (\\u0000) inside a string at byte %zu", i);
					return false;
				}
			} else if (!strchr("\"\\/bfnrt", e) || e == '\0') {
				snprintf(err, errlen,
					 "an invalid escape inside a string at byte %zu", i);
				return false;
			}
			i++; /* the escaped character */
		}
	}
	return true;
}

static int cmp_keys(const void *a, const void *b)
{
	return strcmp((*(const cJSON *const *)a)->string, (*(const cJSON *const *)b)->string);
}

/* The first key of object o that appears twice, or NULL (also when out of memory: -ENOMEM in
 * *rc). */
static const char *dup_key(const cJSON *o, int *rc)
{
	size_t n = 0, i = 0;
	const cJSON *c, *d, **v;
	const char *dup = NULL;

	for (c = o->child; c; c = c->next)
		n++;
	if (n <= SMALL_OBJECT) {
		for (c = o->child; c; c = c->next)
			for (d = c->next; d; d = d->next)
				if (strcmp(c->string, d->string) == 0)
					return c->string;
		return NULL;
	}
	if (!(v = malloc(n * sizeof(*v)))) {
		*rc = -ENOMEM;
		return NULL;
	}
	for (c = o->child; c; c = c->next)
		v[i++] = c;
	qsort(v, n, sizeof(*v), cmp_keys);
	for (i = 1; i < n && !dup; i++)
		if (strcmp(v[i - 1]->string, v[i]->string) == 0)
			dup = v[i]->string;
	free(v);
	return dup;
}

/* Walks the tree for duplicated keys; path is the field path so far (pathlen used). */
static bool check_keys(const cJSON *j, char *path, size_t pathlen, size_t pathcap, char *err,
		       size_t errlen)
{
	int rc = 0;
	size_t idx = 0;

	if (!cJSON_IsObject(j) && !cJSON_IsArray(j))
		return true;
	if (cJSON_IsObject(j)) {
		const char *dup = dup_key(j, &rc);
		if (rc) {
			snprintf(err, errlen, "out of memory");
			return false;
		}
		if (dup) {
			snprintf(err, errlen, "field %s%s%.64s appears twice", path,
				 pathlen ? "." : "", dup);
			return false;
		}
	}
	for (const cJSON *c = j->child; c; c = c->next, idx++) {
		int n = cJSON_IsObject(j)
				? snprintf(path + pathlen, pathcap - pathlen, "%s%.48s",
					   pathlen ? "." : "", c->string)
				: snprintf(path + pathlen, pathcap - pathlen, "[%zu]", idx);
		size_t next = pathlen + (n > 0 ? (size_t)n : 0);
		if (next >= pathcap)
			next = pathcap - 1; /* cut: the message still names the start */
		if (!check_keys(c, path, next, pathcap, err, errlen))
			return false;
		path[pathlen] = '\0';
	}
	return true;
}

cJSON *json_strict_parse(const char *buf, size_t len, char *err, size_t errlen)
{
	const char *end = NULL;
	char path[96] = "";
	size_t ctl;
	cJSON *j;

	if (errlen)
		err[0] = '\0';
	if (!scan_strings(buf, len, &ctl, err, errlen))
		return NULL;
	if (!(j = cJSON_ParseWithLengthOpts(buf, len, &end, 0))) {
		const char *at = cJSON_GetErrorPtr();
		size_t pos = at && at >= buf && at <= buf + len ? (size_t)(at - buf) : 0;
		snprintf(err, errlen, "invalid JSON at byte %zu", pos);
		return NULL;
	}
	size_t pos = (size_t)(end - buf);
	if (ctl < pos) {
		snprintf(err, errlen,
			 "invalid JSON at byte %zu: a control character outside a string", ctl);
		cJSON_Delete(j);
		return NULL;
	}
	while (pos < len && strchr(" \t\r\n", buf[pos]) && buf[pos])
		pos++;
	if (pos < len) {
		snprintf(err, errlen, "trailing bytes after the JSON value at byte %zu", pos);
		cJSON_Delete(j);
		return NULL;
	}
	if (!check_keys(j, path, 0, sizeof(path), err, errlen)) {
		cJSON_Delete(j);
		return NULL;
	}
	return j;
}

int json_strict_int(const cJSON *obj, const char *name, int64_t min, int64_t max, int64_t *out,
		    char *err, size_t errlen)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(obj, name);
	double v;

	if (!f || cJSON_IsNull(f)) {
		snprintf(err, errlen, "field %.64s is missing", name);
		return -ENOENT;
	}
	v = f->valuedouble;
	if (!cJSON_IsNumber(f) || !isfinite(v) || floor(v) != v || v < (double)min ||
	    v > (double)max || fabs(v) > (double)JSON_STRICT_INT_MAX) {
		snprintf(err, errlen, "field %.64s must be an integer from %lld to %lld", name,
			 (long long)min, (long long)max);
		return -EINVAL;
	}
	*out = (int64_t)v;
	return 0;
}
