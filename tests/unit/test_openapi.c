/* The OpenAPI description against the router (issue 10 item 7): dispatcher/api/openapi.json, as
 * embedded in the binary, must describe exactly the routes the public listener serves — every
 * api_routes_* table that api.c mounts (api_route_defs()) and the worker's own routes
 * (worker_routes[]) — no more, no fewer. No servers: the tables and the embedded text are read
 * in-process.
 *
 *  - document_is_openapi_3_1: openapi "3.1.0", info, paths, components, the two security
 *    schemes, every $ref resolves, every response has a description, operationIds unique; the
 *    embedded text is the repository's file byte for byte.
 *  - paths_equal_routes: the set of (method, path template) of `paths` equals the routers' set;
 *    each keyed route (every API route but the public ones) declares bearerAuth, a 401, a 429
 *    with Retry-After, the X-RateLimit-* headers on every answer that carries them (all but
 *    401, 413 and 503), its rate-limit bucket and its table's summary; each public or worker
 *    route declares its security explicitly (never the bearer key); path parameters declared.
 *  - checker_catches_drift: the same checks fail on a document missing a route, on one listing
 *    a route no router serves, on a keyed operation without bearerAuth or its X-RateLimit
 *    headers, and on a route table with a route the document lacks.
 *  - examples_match_schemas: every example the document gives (a media type's `example` and
 *    `examples`, a component schema's `example`) matches its schema (tests/openapi_validate.h,
 *    the check tests/integration/test_api_openapi.c holds real answers to); a broken one is
 *    caught.
 */
#include "../openapi_validate.h"
#include "api_int.h"
#include "worker.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <cmocka.h>

#define MAX_ROUTES 128

enum kind { KEYED, PUBLIC_API, WORKER };

struct route {
	char method[16]; /* lower case, as OpenAPI spells it */
	const char *pattern;
	enum kind kind;
	const struct api_route_def *def; /* NULL for the worker's */
};

static const char *const METHODS[] = { "get",	  "put",  "post",  "delete",
				       "options", "head", "patch", "trace" };

static void lower(char *out, size_t size, const char *s)
{
	size_t i = 0;

	for (; s[i] && i + 1 < size; i++)
		out[i] = (char)tolower((unsigned char)s[i]);
	out[i] = 0;
}

/* Every route the public listener serves. */
static size_t served(struct route *out, size_t cap)
{
	const struct api_route_def *defs[MAX_ROUTES];
	size_t n = api_route_defs(defs, MAX_ROUTES), k = 0;

	assert_true(n <= MAX_ROUTES && n + worker_routes_n <= cap);
	for (size_t i = 0; i < n; i++, k++) {
		lower(out[k].method, sizeof(out[k].method), defs[i]->method);
		out[k].pattern = defs[i]->pattern;
		out[k].kind = defs[i]->public_route ? PUBLIC_API : KEYED;
		out[k].def = defs[i];
	}
	for (size_t i = 0; i < worker_routes_n; i++, k++) {
		lower(out[k].method, sizeof(out[k].method), worker_routes[i].method);
		out[k].pattern = worker_routes[i].pattern;
		out[k].kind = WORKER;
		out[k].def = NULL;
	}
	return k;
}

static cJSON *load_embedded(void)
{
	size_t len;
	const char *text = api_openapi_text(&len);
	cJSON *doc = cJSON_ParseWithLength(text, len);

	assert_non_null(doc);
	return doc;
}

/* ---- the checker: counts the problems, printing each ---- */

static int problems;

static void problem(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "openapi: ");
	vfprintf(stderr, fmt, ap);
	fprintf(stderr, "\n");
	va_end(ap);
	problems++;
}

/* Follows a local "$ref" (JSON pointer "#/a/b") once; other nodes are returned as is. */
static const cJSON *deref(const cJSON *doc, const cJSON *node)
{
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(node, "$ref");
	char buf[256], *save = NULL;
	const cJSON *v = doc;

	if (!cJSON_IsString(r))
		return node;
	if (strncmp(r->valuestring, "#/", 2) || strlen(r->valuestring) >= sizeof(buf))
		return NULL;
	snprintf(buf, sizeof(buf), "%s", r->valuestring + 2);
	for (char *t = strtok_r(buf, "/", &save); t && v; t = strtok_r(NULL, "/", &save))
		v = cJSON_GetObjectItemCaseSensitive(v, t);
	return v;
}

static void refs_resolve(const cJSON *doc, const cJSON *node)
{
	const cJSON *child;

	if (cJSON_IsObject(node) &&
	    cJSON_IsString(cJSON_GetObjectItemCaseSensitive(node, "$ref")) && !deref(doc, node))
		problem("$ref %s does not resolve",
			cJSON_GetObjectItemCaseSensitive(node, "$ref")->valuestring);
	cJSON_ArrayForEach(child, node)
	{
		refs_resolve(doc, child);
	}
}

static bool is_method(const char *s)
{
	for (size_t i = 0; i < sizeof(METHODS) / sizeof(METHODS[0]); i++)
		if (strcmp(s, METHODS[i]) == 0)
			return true;
	return false;
}

static const struct route *find_route(const struct route *r, size_t n, const char *method,
				      const char *path)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(r[i].method, method) == 0 && strcmp(r[i].pattern, path) == 0)
			return &r[i];
	return NULL;
}

/* security is exactly [{"<scheme>": []}] (scheme NULL: exactly []). */
static bool security_is(const cJSON *op, const char *scheme)
{
	const cJSON *s = cJSON_GetObjectItemCaseSensitive(op, "security");

	if (!cJSON_IsArray(s))
		return false;
	if (!scheme)
		return cJSON_GetArraySize(s) == 0;
	const cJSON *req = cJSON_GetArrayItem(s, 0);
	const cJSON *scopes = cJSON_GetObjectItemCaseSensitive(req, scheme);
	return cJSON_GetArraySize(s) == 1 && cJSON_GetArraySize(req) == 1 &&
	       cJSON_IsArray(scopes) && cJSON_GetArraySize(scopes) == 0;
}

static bool security_mentions(const cJSON *op, const char *scheme)
{
	const cJSON *req;

	cJSON_ArrayForEach(req, cJSON_GetObjectItemCaseSensitive(op, "security"))
	{
		if (cJSON_GetObjectItemCaseSensitive(req, scheme))
			return true;
	}
	return false;
}

static bool has_header(const cJSON *doc, const cJSON *response, const char *name)
{
	const cJSON *h = cJSON_GetObjectItemCaseSensitive(response, "headers");
	const cJSON *one;

	cJSON_ArrayForEach(one, h)
	{
		if (strcasecmp(one->string, name) == 0 && deref(doc, one))
			return true;
	}
	return false;
}

/* Each {name} of the template has a required path parameter (operation or path level). */
static void path_params(const cJSON *doc, const char *path, const cJSON *item, const cJSON *op,
			const char *method)
{
	for (const char *p = strchr(path, '{'); p; p = strchr(p + 1, '{')) {
		const char *e = strchr(p, '}');
		bool found = false;

		if (!e)
			break;
		for (int lvl = 0; lvl < 2 && !found; lvl++) {
			const cJSON *prm;
			cJSON_ArrayForEach(prm, cJSON_GetObjectItemCaseSensitive(lvl ? item : op,
										 "parameters"))
			{
				const cJSON *d = deref(doc, prm);
				const cJSON *nm = cJSON_GetObjectItemCaseSensitive(d, "name");
				const cJSON *in = cJSON_GetObjectItemCaseSensitive(d, "in");
				if (cJSON_IsString(nm) && cJSON_IsString(in) &&
				    strlen(nm->valuestring) == (size_t)(e - p - 1) &&
				    strncmp(nm->valuestring, p + 1, (size_t)(e - p - 1)) == 0 &&
				    strcmp(in->valuestring, "path") == 0 &&
				    cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "required")))
					found = true;
			}
		}
		if (!found)
			problem("%s %s: no required path parameter %.*s", method, path,
				(int)(e - p - 1), p + 1);
	}
}

static void check_keyed(const cJSON *doc, const struct route *r, const cJSON *op)
{
	const cJSON *responses = cJSON_GetObjectItemCaseSensitive(op, "responses");
	const cJSON *resp, *bucket = cJSON_GetObjectItemCaseSensitive(op, "x-ratelimit-bucket");
	const char *m = r->method, *p = r->pattern;

	if (!security_is(op, "bearerAuth"))
		problem("%s %s needs a key: security must be [{\"bearerAuth\": []}]", m, p);
	if (!deref(doc, cJSON_GetObjectItemCaseSensitive(responses, "401")))
		problem("%s %s needs a key: no 401 response", m, p);
	const cJSON *r429 = deref(doc, cJSON_GetObjectItemCaseSensitive(responses, "429"));
	if (!r429 || !has_header(doc, r429, "Retry-After"))
		problem("%s %s: no 429 response with Retry-After (R2)", m, p);
	if (!cJSON_IsString(bucket) ||
	    strcmp(bucket->valuestring, ratelimit_bucket_name(r->def->bucket)) != 0)
		problem("%s %s: x-ratelimit-bucket must be \"%s\" (its route table's)", m, p,
			ratelimit_bucket_name(r->def->bucket));
	cJSON_ArrayForEach(resp, responses)
	{
		/* 401: no organisation known; 413: answered by the HTTP server before the key; 503:
		 * the key lookup itself may have failed. Every other answer carries the trio (R2). */
		if (!strcmp(resp->string, "401") || !strcmp(resp->string, "413") ||
		    !strcmp(resp->string, "503"))
			continue;
		const cJSON *d = deref(doc, resp);
		if (!has_header(doc, d, "X-RateLimit-Limit") ||
		    !has_header(doc, d, "X-RateLimit-Remaining") ||
		    !has_header(doc, d, "X-RateLimit-Reset"))
			problem("%s %s: response %s lacks the X-RateLimit-* headers (R2)", m, p,
				resp->string);
	}
}

/* One operation of the document (op, method op->string, of the path item item). ids collects
 * the operationIds seen. */
static void check_op(const cJSON *doc, const struct route *routes, size_t n, const cJSON *item,
		     const cJSON *op, char (*ids)[64], size_t *nids)
{
	const char *m = op->string, *p = item->string;
	if (!is_method(m))
		return; /* parameters, summary, ... of the path item */
	const struct route *r = find_route(routes, n, m, p);
	const cJSON *id = cJSON_GetObjectItemCaseSensitive(op, "operationId");
	const cJSON *sum = cJSON_GetObjectItemCaseSensitive(op, "summary");
	const cJSON *responses = cJSON_GetObjectItemCaseSensitive(op, "responses");
	const cJSON *resp;

	if (!r) {
		problem("%s %s is in openapi.json but no router serves it", m, p);
		return;
	}
	if (!cJSON_IsString(id) || !id->valuestring[0])
		problem("%s %s: no operationId", m, p);
	else {
		for (size_t j = 0; j < *nids; j++)
			if (!strcmp(ids[j], id->valuestring))
				problem("operationId %s used twice", id->valuestring);
		if (*nids < MAX_ROUTES)
			snprintf(ids[(*nids)++], sizeof(ids[0]), "%s", id->valuestring);
	}
	if (!cJSON_IsString(sum))
		problem("%s %s: no summary", m, p);
	else if (r->def && strcmp(sum->valuestring, r->def->summary) != 0)
		problem("%s %s: summary \"%s\" is not its route table's \"%s\"", m, p,
			sum->valuestring, r->def->summary);
	if (!cJSON_IsObject(responses) || !cJSON_GetArraySize(responses))
		problem("%s %s: no responses", m, p);
	cJSON_ArrayForEach(resp, responses)
	{
		const cJSON *d = deref(doc, resp);
		if (!cJSON_IsString(cJSON_GetObjectItemCaseSensitive(d, "description")))
			problem("%s %s: response %s has no description", m, p, resp->string);
	}
	path_params(doc, p, item, op, m);
	if (r->kind == KEYED) {
		check_keyed(doc, r, op);
		return;
	}
	/* No key: the document's default (bearerAuth) must be overridden explicitly. */
	if (!cJSON_IsArray(cJSON_GetObjectItemCaseSensitive(op, "security")) ||
	    security_mentions(op, "bearerAuth"))
		problem("%s %s takes no key: its security must be declared without "
			"bearerAuth",
			m, p);
	else if (cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(op, "security")) &&
		 !deref(doc, cJSON_GetObjectItemCaseSensitive(responses, "401")))
		problem("%s %s is authenticated: no 401 response", m, p);
}

/* Checks doc against the routes; returns the number of problems found (each printed). */
static int check(const cJSON *doc, const struct route *routes, size_t n)
{
	const cJSON *paths = cJSON_GetObjectItemCaseSensitive(doc, "paths");
	const cJSON *item, *op;
	char ids[MAX_ROUTES][64];
	size_t nids = 0;

	problems = 0;
	if (!cJSON_IsObject(paths)) {
		problem("no paths object");
		return problems;
	}
	for (size_t i = 0; i < n; i++) {
		const cJSON *o = cJSON_GetObjectItemCaseSensitive(
			cJSON_GetObjectItemCaseSensitive(paths, routes[i].pattern),
			routes[i].method);
		if (!cJSON_IsObject(o))
			problem("%s %s is served but not in openapi.json", routes[i].method,
				routes[i].pattern);
		for (size_t j = 0; j < i; j++)
			if (!strcmp(routes[i].method, routes[j].method) &&
			    !strcmp(routes[i].pattern, routes[j].pattern))
				problem("%s %s is mounted twice", routes[i].method,
					routes[i].pattern);
	}
	cJSON_ArrayForEach(item, paths)
	{
		cJSON_ArrayForEach(op, item)
		{
			check_op(doc, routes, n, item, op, ids, &nids);
		}
	}
	return problems;
}

/* ---- the tests ---- */

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n >= 0);
	rewind(f);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = 0;
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static void document_is_openapi_3_1(void **state)
{
	size_t len, flen;
	const char *text = api_openapi_text(&len);
	char *file = read_file(DSP_OPENAPI_JSON, &flen);
	cJSON *doc = load_embedded();
	const cJSON *info = cJSON_GetObjectItemCaseSensitive(doc, "info");
	const cJSON *schemes = cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(doc, "components"), "securitySchemes");
	const cJSON *bearer = cJSON_GetObjectItemCaseSensitive(schemes, "bearerAuth");
	const cJSON *sig = cJSON_GetObjectItemCaseSensitive(schemes, "providerSignature");

	(void)state;
	/* The binary serves the repository's file. */
	assert_int_equal(len, flen);
	assert_memory_equal(text, file, len);
	free(file);
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(doc, "openapi")),
			    "3.1.0");
	assert_true(cJSON_IsObject(info));
	assert_true(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(info, "title")));
	assert_true(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(info, "version")));
	assert_true(cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(doc, "paths")));
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(bearer, "type")),
			    "http");
	assert_string_equal(
		cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(bearer, "scheme")), "bearer");
	assert_string_equal(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(sig, "name")),
			    "X-Signature");
	problems = 0;
	refs_resolve(doc, doc);
	assert_int_equal(problems, 0);
	cJSON_Delete(doc);
}

static void paths_equal_routes(void **state)
{
	struct route routes[MAX_ROUTES];
	size_t n = served(routes, MAX_ROUTES);
	cJSON *doc = load_embedded();

	(void)state;
	/* The routes at least: 1 + 1 + 7 + 3 + 1 API routes, 3 of the worker. */
	assert_true(n >= 16);
	assert_int_equal(check(doc, routes, n), 0);
	cJSON_Delete(doc);
}

static void checker_catches_drift(void **state)
{
	struct route routes[MAX_ROUTES];
	size_t n = served(routes, MAX_ROUTES);
	cJSON *doc = load_embedded(), *bad;

	(void)state;
	/* A served route the document lacks (a route added without the document). */
	bad = cJSON_Duplicate(doc, true);
	cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(bad, "paths"),
						"/v2/batches/{batch_id}/pause");
	assert_int_equal(check(bad, routes, n), 1);
	cJSON_Delete(bad);
	bad = cJSON_Duplicate(doc, true);
	cJSON_DeleteItemFromObjectCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(bad, "paths"),
						 "/v2/calls"),
		"get");
	assert_int_equal(check(bad, routes, n), 1);
	cJSON_Delete(bad);
	/* A route in the table the document lacks. */
	struct api_route_def extra = { .method = "DELETE",
				       .pattern = "/v2/batches/{batch_id}",
				       .summary = "x" };
	routes[n] = (struct route){
		.method = "delete", .pattern = extra.pattern, .kind = KEYED, .def = &extra
	};
	assert_int_equal(check(doc, routes, n + 1), 1);
	routes[n] = (struct route){ .method = "get", .pattern = "/metrics", .kind = WORKER };
	assert_int_equal(check(doc, routes, n + 1), 1);
	/* A documented route no router serves. */
	bad = cJSON_Duplicate(doc, true);
	cJSON_AddItemToObject(
		cJSON_GetObjectItemCaseSensitive(bad, "paths"), "/v2/nope",
		cJSON_Duplicate(
			cJSON_GetObjectItemCaseSensitive(
				cJSON_GetObjectItemCaseSensitive(doc, "paths"), "/v2/user/me"),
			true));
	assert_int_equal(check(bad, routes, n), 1);
	cJSON_Delete(bad);
	/* A keyed operation without bearerAuth; one whose 200 lost its X-RateLimit headers; one
	 * without its 401. */
	bad = cJSON_Duplicate(doc, true);
	cJSON *me = cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(bad, "paths"),
						 "/v2/user/me"),
		"get");
	cJSON_ReplaceItemInObjectCaseSensitive(me, "security", cJSON_CreateArray());
	assert_true(check(bad, routes, n) >= 1);
	cJSON_Delete(bad);
	bad = cJSON_Duplicate(doc, true);
	me = cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(bad, "paths"),
						 "/v2/user/me"),
		"get");
	cJSON *ok = cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(me, "responses"), "200");
	cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(ok, "headers"),
						"X-RateLimit-Remaining");
	assert_int_equal(check(bad, routes, n), 1);
	cJSON_DeleteItemFromObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(me, "responses"),
						"401");
	assert_int_equal(check(bad, routes, n), 2);
	cJSON_Delete(bad);
	cJSON_Delete(doc);
}

/* Checks every example under node against its schema; returns how many do not match. */
static int examples_under(const cJSON *doc, const cJSON *node, const char *where)
{
	const cJSON *schema = cJSON_GetObjectItemCaseSensitive(node, "schema"), *x, *c;
	char err[512], sub[512];
	int bad = 0;

	if (!cJSON_IsObject(node) && !cJSON_IsArray(node))
		return 0;
	if (cJSON_IsObject(schema) && (x = cJSON_GetObjectItemCaseSensitive(node, "example")) &&
	    oav_check(doc, schema, x, "$", err, sizeof(err))) {
		problem("%s: example: %s", where, err);
		bad++;
	}
	cJSON_ArrayForEach(x, (cJSON_IsObject(schema)
				       ? cJSON_GetObjectItemCaseSensitive(node, "examples")
				       : NULL))
	{
		if (oav_check(doc, schema, cJSON_GetObjectItemCaseSensitive(x, "value"), "$", err,
			      sizeof(err))) {
			problem("%s: examples.%s: %s", where, x->string, err);
			bad++;
		}
	}
	cJSON_ArrayForEach(c, node)
	{
		if (c->string && (!strcmp(c->string, "example") || !strcmp(c->string, "examples")))
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", where, c->string ? c->string : "[]");
		bad += examples_under(doc, c, sub);
	}
	return bad;
}

static int examples_check(const cJSON *doc)
{
	const cJSON *s, *x;
	char err[512];
	int bad = examples_under(doc, cJSON_GetObjectItemCaseSensitive(doc, "paths"), "paths");

	cJSON_ArrayForEach(s,
			   cJSON_GetObjectItemCaseSensitive(
				   cJSON_GetObjectItemCaseSensitive(doc, "components"), "schemas"))
	{
		if ((x = cJSON_GetObjectItemCaseSensitive(s, "example")) &&
		    oav_check(doc, s, x, "$", err, sizeof(err))) {
			problem("components/schemas/%s: example: %s", s->string, err);
			bad++;
		}
	}
	bad += examples_under(
		doc,
		cJSON_GetObjectItemCaseSensitive(
			cJSON_GetObjectItemCaseSensitive(doc, "components"), "responses"),
		"components/responses");
	return bad;
}

static void examples_match_schemas(void **state)
{
	cJSON *doc = load_embedded();

	(void)state;
	problems = 0;
	assert_int_equal(examples_check(doc), 0);
	/* a broken example is caught: the capacity example without its source */
	cJSON *ex =
		(cJSON *)oav_resolve(doc, "#/paths/~1api~1v1~1campaigns~1{campaign_id}~1capacity"
					  "/get/responses/200/content/application~1json/example");
	assert_non_null(cJSON_GetObjectItemCaseSensitive(ex, "source"));
	cJSON_DeleteItemFromObjectCaseSensitive(ex, "source");
	assert_int_equal(examples_check(doc), 1);
	cJSON_Delete(doc);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(document_is_openapi_3_1),
		cmocka_unit_test(paths_equal_routes),
		cmocka_unit_test(checker_catches_drift),
		cmocka_unit_test(examples_match_schemas),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
