/* A small JSON Schema check over cJSON for the OpenAPI 3.1 description's schemas
 * (dispatcher/api/openapi.json): what the tests need to hold real answers (and the document's
 * own examples) to the schemas the document gives them, no more.
 *
 * Keywords: local `$ref` ("#/components/…", with its siblings), `type` (a name or a list of
 * them, "null" and "integer" included), `const`, `enum`, `allOf`, `required`, `properties`
 * (recursively), `additionalProperties` (false or a schema), `items`, `minimum`, `maxItems`.
 * Anything else (format, pattern, description…) is not checked. Stricter than JSON Schema on
 * one point: an object's property that a schema naming `properties` does not name is refused
 * unless `additionalProperties` allows it (an answer must be fully described, or a generated
 * client cannot read it).
 *
 * Header-only (static functions): tests/integration/test_api_openapi.c and
 * tests/unit/test_openapi.c include it. */
#ifndef DSP_TEST_OPENAPI_VALIDATE_H
#define DSP_TEST_OPENAPI_VALIDATE_H

#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

/* The node a local reference ("#/a/b") names in doc, or NULL. */
static inline const cJSON *oav_resolve(const cJSON *doc, const char *ref)
{
	char tok[128];
	const cJSON *n = doc;

	if (!ref || strncmp(ref, "#/", 2) != 0)
		return NULL;
	for (const char *p = ref + 2; n && *p;) {
		size_t len = strcspn(p, "/"), k = 0;
		for (size_t i = 0; i < len && k + 1 < sizeof(tok); i++) {
			if (p[i] == '~' && i + 1 < len && (p[i + 1] == '0' || p[i + 1] == '1'))
				tok[k++] = p[++i] == '0' ? '~' : '/';
			else
				tok[k++] = p[i];
		}
		tok[k] = 0;
		n = cJSON_GetObjectItemCaseSensitive(n, tok);
		p += len + (p[len] == '/');
	}
	return n;
}

static inline bool oav_is_type(const cJSON *v, const char *t)
{
	if (!strcmp(t, "null"))
		return cJSON_IsNull(v);
	if (!strcmp(t, "boolean"))
		return cJSON_IsBool(v);
	if (!strcmp(t, "object"))
		return cJSON_IsObject(v);
	if (!strcmp(t, "array"))
		return cJSON_IsArray(v);
	if (!strcmp(t, "string"))
		return cJSON_IsString(v);
	if (!strcmp(t, "number"))
		return cJSON_IsNumber(v);
	if (!strcmp(t, "integer"))
		return cJSON_IsNumber(v) && v->valuedouble == (double)(long long)v->valuedouble;
	return false;
}

__attribute__((format(printf, 4, 5))) static inline int
oav_fail(char *err, size_t size, const char *path, const char *fmt, ...)
{
	char what[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	snprintf(err, size, "%s: %s", path, what);
	return -1;
}

/* 0 when v matches schema s (of document doc); else -1 with the first mismatch, named by its
 * path ("$.floor_eta.basis"), in err. */
static inline int oav_check(const cJSON *doc, const cJSON *s, const cJSON *v, const char *path,
			    char *err, size_t size)
{
	const cJSON *k, *x;
	char sub[512];

	if (!cJSON_IsObject(s))
		return s && cJSON_IsTrue(s) ? 0 : oav_fail(err, size, path, "no schema");
	if ((k = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) {
		const cJSON *t = oav_resolve(doc, cJSON_GetStringValue(k));
		if (!t)
			return oav_fail(err, size, path, "unresolved $ref %s",
					cJSON_GetStringValue(k));
		if (oav_check(doc, t, v, path, err, size))
			return -1;
	}
	if ((k = cJSON_GetObjectItemCaseSensitive(s, "type"))) {
		bool ok = false;
		if (cJSON_IsString(k))
			ok = oav_is_type(v, k->valuestring);
		cJSON_ArrayForEach(x, (cJSON_IsArray(k) ? k : NULL))
		{
			ok = ok || (cJSON_IsString(x) && oav_is_type(v, x->valuestring));
		}
		if (!ok) {
			char *want = cJSON_PrintUnformatted(k), *got = cJSON_PrintUnformatted(v);
			oav_fail(err, size, path, "type %s wanted, got %.120s", want, got);
			cJSON_free(want);
			cJSON_free(got);
			return -1;
		}
	}
	if ((k = cJSON_GetObjectItemCaseSensitive(s, "const")) && !cJSON_Compare(k, v, true))
		return oav_fail(err, size, path, "not the const");
	if ((k = cJSON_GetObjectItemCaseSensitive(s, "enum"))) {
		bool ok = false;
		cJSON_ArrayForEach(x, k)
		{
			ok = ok || cJSON_Compare(x, v, true);
		}
		if (!ok) {
			char *got = cJSON_PrintUnformatted(v);
			oav_fail(err, size, path, "%.120s is not in the enum", got);
			cJSON_free(got);
			return -1;
		}
	}
	cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(s, "allOf"))
	{
		if (oav_check(doc, x, v, path, err, size))
			return -1;
	}
	if ((k = cJSON_GetObjectItemCaseSensitive(s, "minimum")) && cJSON_IsNumber(v) &&
	    v->valuedouble < k->valuedouble)
		return oav_fail(err, size, path, "%g below the minimum %g", v->valuedouble,
				k->valuedouble);
	if (cJSON_IsArray(v)) {
		int i = 0;
		if ((k = cJSON_GetObjectItemCaseSensitive(s, "maxItems")) &&
		    cJSON_GetArraySize(v) > k->valueint)
			return oav_fail(err, size, path, "more than %d items", k->valueint);
		k = cJSON_GetObjectItemCaseSensitive(s, "items");
		cJSON_ArrayForEach(x, (k ? v : NULL))
		{
			snprintf(sub, sizeof(sub), "%s[%d]", path, i++);
			if (oav_check(doc, k, x, sub, err, size))
				return -1;
		}
	}
	if (!cJSON_IsObject(v))
		return 0;
	cJSON_ArrayForEach(x, cJSON_GetObjectItemCaseSensitive(s, "required"))
	{
		if (!cJSON_GetObjectItemCaseSensitive(v, cJSON_GetStringValue(x)))
			return oav_fail(err, size, path, "required %s missing",
					cJSON_GetStringValue(x));
	}
	const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
	const cJSON *extra = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
	cJSON_ArrayForEach(x, v)
	{
		const cJSON *ps = cJSON_GetObjectItemCaseSensitive(props, x->string);
		snprintf(sub, sizeof(sub), "%s.%s", path, x->string);
		if (ps) {
			if (oav_check(doc, ps, x, sub, err, size))
				return -1;
		} else if (cJSON_IsFalse(extra) || (!extra && props)) {
			return oav_fail(err, size, path, "property %s not in the schema",
					x->string);
		} else if (cJSON_IsObject(extra) && oav_check(doc, extra, x, sub, err, size)) {
			return -1;
		}
	}
	return 0;
}

/* The schema of the application/json answer of (method, path template, status) in doc (a
 * `responses` $ref resolved), or NULL when the document declares no such answer. */
static inline const cJSON *oav_response_schema(const cJSON *doc, const char *method,
					       const char *tmpl, int status)
{
	char st[8];
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(doc, "paths"), tmpl);

	snprintf(st, sizeof(st), "%d", status);
	r = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, method),
					     "responses");
	r = cJSON_GetObjectItemCaseSensitive(r, st);
	if (r && cJSON_GetObjectItemCaseSensitive(r, "$ref"))
		r = oav_resolve(doc,
				cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(r, "$ref")));
	r = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "content"),
					     "application/json");
	return cJSON_GetObjectItemCaseSensitive(r, "schema");
}

#endif
