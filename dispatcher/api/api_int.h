/* What the route files (route_*.c) share with api.c: the authenticated request, the route
 * definitions, and the one way to answer. Not for use outside dispatcher/api/. */
#ifndef DSP_API_INT_H
#define DSP_API_INT_H

#include "api.h"
#include "apikey.h"
#include "ratelimit.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define API_ID_SIZE 65 /* ids are ^[A-Za-z0-9_-]{1,64}$ (migration 0001) */

/* The key's organisation, as the lookup read it (organisations + system_settings). */
struct api_org {
	char id[API_ID_SIZE];
	char name[201];
	uint32_t org_limit;
	uint32_t per_agent_limit; /* 0: unset */
	bool enforced;		  /* concurrency_management_enabled */
	struct ratelimit_limits rate;
	uint32_t pending_ceiling;
	char plan[64];
	char rate_limit_tier[64];
	uint32_t global_limit; /* system_settings.global_limit */
};

/* The presented key (never the key itself: its id, name and preview). */
struct api_key_info {
	char id[API_ID_SIZE];
	char name[201];
	char preview[APIKEY_PREVIEW_SIZE];
	struct api_org org;
};

struct api_route_def;

/* One authenticated, admitted request. Valid until it is answered (api_json(), api_error(),
 * api_respond()), which frees it. */
struct api_call {
	struct api *api;
	struct http_request *req;
	const struct api_route_def *route;
	struct api_key_info key;
	struct ratelimit_decision limit; /* the decision whose headers the answer carries */
	unsigned char hash[APIKEY_HASH_LEN];
	char hash_hex[2 * APIKEY_HASH_LEN + 1];
	size_t body_reserved; /* bytes of api_options.body_budget its buffered body holds */
	/* SPEC P7: a read route's handler runs while its rate-limit decision is in flight
	 * (api.c, "Reads sent with the rate limit"); its answer waits here for the decision. */
	bool speculative;  /* the handler was started with the decision in flight */
	bool no_speculate; /* the key's organisation was refused lately: decision first */
	bool limit_pending, refuse_late, has_held;
	struct api_held {
		int status;
		bool error; /* http_respond_error(a = code, b = message), else http_respond(a =
			     * content type or NULL, b = body of len bytes) */
		bool oom;   /* it could not be copied: a 503 is sent instead */
		char *a, *b;
		size_t len;
	} held;
};

typedef void (*api_handler)(struct api_call *c);

struct api_route_def {
	const char *method;
	const char *pattern;
	size_t max_body;
	bool stream;		      /* body streamed to the handler (common/http_server.h) */
	bool public_route;	      /* no key needed (/openapi.json) */
	enum ratelimit_bucket bucket; /* R1 */
	api_handler handler;
	const char *summary; /* one line, for the OpenAPI description */
};

/* The route tables, one per file. */
extern const struct api_route_def api_routes_me[];
extern const size_t api_routes_me_n;
extern const struct api_route_def api_routes_capacity[];
extern const size_t api_routes_capacity_n;
extern const struct api_route_def api_routes_batches[];
extern const size_t api_routes_batches_n;
extern const struct api_route_def api_routes_calls[];
extern const size_t api_routes_calls_n;
/* --- OpenAPI description (issue 10 item 7): route_openapi.c --- */
extern const struct api_route_def api_routes_openapi[];
extern const size_t api_routes_openapi_n;

/* Writes the definitions of every route api.c mounts (all tables, in mounting order) into
 * out[0..cap) and returns how many there are (more than cap: call again with a larger array).
 * Needs no struct api: the OpenAPI drift test (tests/unit/test_openapi.c) reads it. */
size_t api_route_defs(const struct api_route_def **out, size_t cap);

/* The OpenAPI 3.1 description (dispatcher/api/openapi.json, embedded at build time), served by
 * GET /openapi.json; *len gets its length in bytes. */
const char *api_openapi_text(size_t *len);
/* --- end OpenAPI description --- */

/* POST /v2/batches and /v2/batches/upload (route_batch_create.c; mounted in route_batches.c's
 * table). */
void api_batch_create(struct api_call *c);
void api_batch_upload(struct api_call *c);
/* Their body limits (413 above): the JSON body is buffered, so 64 MiB (250,000 contacts of
 * ~268 bytes each); the CSV is streamed at constant memory, so 256 MiB. */
#define API_BATCH_JSON_BODY_MAX ((size_t)64 << 20)
#define API_BATCH_CSV_BODY_MAX	((size_t)256 << 20)

/* What the handlers use of the API's dependencies. */
struct pg_pool *api_pool(const struct api *a);
struct pg_pool *api_import_pool(const struct api *a); /* NULL: none (imports answer 503) */
struct gate *api_gate(const struct api *a);
const struct api_dialer *api_dialer(const struct api *a);
uv_loop_t *api_loop(const struct api *a);

/* --- prepared route statements and the capacity cache (SPEC P7) ---
 * The statements of the hot read routes, prepared once per pool connection by api_new()
 * (pg_pool_prepare(), like the key lookup), so they are not planned on every call. */
extern const char api_sql_capacity_meta[]; /* route_capacity.c; $1 org, $2 campaign */
extern const char api_sql_me[];		   /* route_me.c; $1 org */
const struct pg_stmt *api_stmt_capacity_meta(const struct api *a);
const struct pg_stmt *api_stmt_me(const struct api *a);
/* The capacity route's cache of campaign meta and refusals (meta_cache.h). */
struct meta_cache *api_meta_cache(const struct api *a);
/* --- end prepared route statements and the capacity cache --- */

/* Answers body (consumed, may be NULL: then 500) as application/json with status, and frees
 * c. */
void api_json(struct api_call *c, int status, cJSON *body);
/* Answers {"error":code,"message":message} with status, and frees c. */
void api_error(struct api_call *c, int status, const char *code, const char *message);
/* Answers {"error":1300,"message":message} (the source document's 429 bodies) with status
 * 429 and Retry-After: retry_after_s, and frees c. */
void api_error_1300(struct api_call *c, unsigned retry_after_s, const char *message);
/* Answers {"error":"not_found",...} 404 naming what (e.g. "campaign cmp_x"), and frees c. */
void api_not_found(struct api_call *c, const char *what, const char *id);
/* The answer for a failed database statement: 503 with Retry-After: 1 when the database
 * cannot be reached or timed out, else 500; logs it; frees c. */
void api_db_error(struct api_call *c, int status, const char *what);

/* Answers len bytes of body (copied) as content_type with status, and frees c. */
void api_respond(struct api_call *c, int status, const char *content_type, const void *body,
		 size_t len);

/* A route served but not built yet: 501. */
void api_not_implemented(struct api_call *c);

#endif
