/* The API's front: route table, key authentication and cache, rate limit, answers (api.h). */
#include "api_int.h"

#include "error.h"
#include "log.h"
#include "meta_cache.h" /* SPEC P7 */
#include "pg_pool.h"
#include "ratelimit_redis.h"
#include "strmap.h"

#include <libpq-fe.h>
#include <openssl/crypto.h> /* OPENSSL_cleanse */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#define KEY_CACHE_MS_DEFAULT 2000
#define KEY_CACHE_MAX	     4096 /* entries; past it the expired ones go, then all */
#define NEG_CACHE_MS_DEFAULT 2000
#define NEG_CACHE_MAX	     4096 /* unknown hashes remembered; past it all are forgotten */
#define KEY_LOOKUPS_MAX	     64	  /* key lookups in flight; past it 503 (never 401) */
#define BODY_BUDGET_DEFAULT  ((size_t)256 << 20)
/* A buffered body up to this size is small: it draws on the whole budget and on no
 * organisation's share (POST /v2/calls: 4 KiB), so large ones never keep it out. */
#define BODY_SMALL ((size_t)64 << 10)

/* The one 401 body: a missing, malformed, unknown or revoked key all read the same (R4). */
#define UNAUTHORIZED_MESSAGE                                                                       \
	"A valid API key is required: send Authorization: Bearer gat_... with an active key of "   \
	"your organisation."

/* Columns: 0 key id, 1 key name, 2 preview, 3 key_hash (hex), 4 org id, 5 org name, 6 org_limit,
 * 7 per_agent_limit (0: unset), 8 enforced, 9 rate default, 10 rate calls, 11 rate executions,
 * 12 pending ceiling, 13 plan, 14 rate_limit_tier, 15 global_limit. */
static const char SQL_KEY[] =
	"SELECT k.id, k.name, k.key_preview, encode(k.key_hash, 'hex'), o.id, o.name, o.org_limit, "
	"coalesce(o.per_agent_limit, 0), o.concurrency_management_enabled, "
	"o.rate_default_per_minute, o.rate_calls_per_minute, o.rate_executions_per_minute, "
	"o.pending_ceiling, o.plan, o.rate_limit_tier, s.global_limit "
	"FROM api_keys k JOIN organisations o ON o.id = k.org_id CROSS JOIN system_settings s "
	"WHERE k.key_hash = decode($1, 'hex') AND k.revoked_at IS NULL";

struct binding {
	struct api *api;
	const struct api_route_def *def;
};

struct key_entry {
	char hex[2 * APIKEY_HASH_LEN + 1]; /* the map's key */
	uint64_t expires_ms;		   /* loop time */
	/* loop time, per bucket: refused until then (refuse()) */
	uint64_t limited_until_ms[RATELIMIT_BUCKETS];
	struct api_key_info info;
};

struct neg_entry {
	char hex[2 * APIKEY_HASH_LEN + 1]; /* the map's key */
	uint64_t expires_ms;		   /* loop time */
};

struct api {
	struct api_options o;
	const struct pg_stmt *st_key;
	/* --- SPEC P7: the read routes' prepared statements and the capacity cache --- */
	const struct pg_stmt *st_capacity_meta, *st_me;
	struct meta_cache *meta_cache;
	/* --- end SPEC P7 --- */
	struct binding *bindings;
	size_t n_bindings;
	struct strmap cache;	    /* hex hash -> struct key_entry */
	struct strmap neg;	    /* hex hash -> struct neg_entry: no active key has it */
	unsigned lookups;	    /* key lookups in flight */
	size_t bodies;		    /* bytes reserved by buffered bodies in flight */
	struct strmap org_bodies;   /* org id -> struct org_bodies: its large bodies in flight */
	struct ratelimit_redis *rl; /* NULL without a Redis connection: every check fails open */
	struct api_stats stats;
};

static const struct {
	const struct api_route_def *defs;
	const size_t *n;
} tables[] = {
	{ api_routes_me, &api_routes_me_n },
	{ api_routes_capacity, &api_routes_capacity_n },
	{ api_routes_batches, &api_routes_batches_n },
	{ api_routes_calls, &api_routes_calls_n },
	{ api_routes_openapi, &api_routes_openapi_n },
};

/* ---- answers ---- */

/* The large bodies of one organisation being received: at most a quarter of the budget. */
struct org_bodies {
	char org[API_ID_SIZE];
	size_t bytes;
};

static void body_release(struct api_call *c)
{
	struct api *a = c->api;
	struct org_bodies *ob;

	a->bodies -= c->body_reserved;
	if (c->body_reserved > BODY_SMALL && (ob = strmap_get(&a->org_bodies, c->key.org.id)) &&
	    (ob->bytes -= c->body_reserved) == 0) {
		strmap_del(&a->org_bodies, ob->org);
		free(ob);
	}
	c->body_reserved = 0;
}

static void held_free(struct api_call *c);

static void call_free(struct api_call *c)
{
	body_release(c);
	held_free(c);
	OPENSSL_cleanse(c->hash, sizeof(c->hash));
	free(c);
}

static void limit_headers(struct api_call *c)
{
	char v[32];

	if (!c->limit.limit)
		return; /* no organisation known (401, 503 of the lookup): no limit to show */
	snprintf(v, sizeof(v), "%" PRIu32, c->limit.limit);
	http_response_header(c->req, "X-RateLimit-Limit", v);
	snprintf(v, sizeof(v), "%" PRIu32, c->limit.remaining);
	http_response_header(c->req, "X-RateLimit-Remaining", v);
	snprintf(v, sizeof(v), "%" PRIu32, c->limit.reset_s);
	http_response_header(c->req, "X-RateLimit-Reset", v);
}

static void held_free(struct api_call *c)
{
	if (c->has_held) {
		free(c->held.a);
		free(c->held.b);
		c->held = (struct api_held){ 0 };
		c->has_held = false;
	}
}

static void refuse(struct api_call *c);

static void send_answer(struct api_call *c, int status, bool error, const char *a, const void *b,
			size_t len)
{
	limit_headers(c);
	if (error)
		http_respond_error(c->req, status, a, b);
	else
		http_respond(c->req, status, a, b, len);
	call_free(c);
}

/* Every answer of an authenticated request goes out here, with the headers of its rate-limit
 * decision (R2). Given while that decision is still in flight (a read route, limit_check()),
 * it is kept (c->held) until the decision comes: sent if allowed, replaced by the 429 if not. */
static void answer(struct api_call *c, int status, bool error, const char *a, const void *b,
		   size_t len)
{
	if (c->limit_pending) {
		struct api_held *h = &c->held;
		*h = (struct api_held){ .status = status, .error = error, .len = len };
		if (error) /* a message: a string */
			len = b ? strlen(b) : 0;
		h->a = a ? strdup(a) : NULL;
		h->b = malloc(len + 1);
		if ((a && !h->a) || !h->b) { /* said as a 503 when the decision comes */
			free(h->a);
			free(h->b);
			*h = (struct api_held){ .oom = true };
		} else {
			memcpy(h->b, b ? b : "", len);
			h->b[len] = '\0';
		}
		c->has_held = true;
		return;
	}
	if (c->refuse_late) { /* refused while the handler ran: its answer is not sent */
		c->refuse_late = false;
		http_response_headers_reset(c->req);
		refuse(c);
		return;
	}
	send_answer(c, status, error, a, b, len);
}

/* The decision came for a request whose handler answered already. */
static void held_send(struct api_call *c)
{
	struct api_held h = c->held;

	c->has_held = false;
	c->held = (struct api_held){ 0 };
	if (h.oom)
		send_answer(c, 503, true, "unavailable", "Out of memory; retry shortly.", 0);
	else
		send_answer(c, h.status, h.error, h.a, h.b, h.len);
	free(h.a);
	free(h.b);
}

void api_json(struct api_call *c, int status, cJSON *body)
{
	char *text = body ? cJSON_PrintUnformatted(body) : NULL;

	cJSON_Delete(body);
	if (!text)
		answer(c, 500, true, "internal", "The answer could not be built.", 0);
	else
		answer(c, status, false, "application/json", text, strlen(text));
	free(text);
}

void api_respond(struct api_call *c, int status, const char *content_type, const void *body,
		 size_t len)
{
	answer(c, status, false, content_type, body, len);
}

void api_error(struct api_call *c, int status, const char *code, const char *message)
{
	answer(c, status, true, code, message, 0);
}

void api_error_1300(struct api_call *c, unsigned retry_after_s, const char *message)
{
	cJSON *b = cJSON_CreateObject();
	char v[16];

	snprintf(v, sizeof(v), "%u", retry_after_s);
	http_response_header(c->req, "Retry-After", v);
	if (b && (!cJSON_AddNumberToObject(b, "error", 1300) ||
		  !cJSON_AddStringToObject(b, "message", message))) {
		cJSON_Delete(b);
		b = NULL;
	}
	api_json(c, 429, b);
}

void api_not_found(struct api_call *c, const char *what, const char *id)
{
	char msg[256];

	snprintf(msg, sizeof(msg), "No %s %.80s in your organisation.", what, id);
	api_error(c, 404, "not_found", msg);
}

void api_db_error(struct api_call *c, int status, const char *what)
{
	log_warn(LOG_HTTP, "%s %s: %s failed: %s", http_request_method(c->req),
		 http_request_path(c->req), what, dsp_strerror(status));
	if (status == DSP_EPG) {
		api_error(c, 500, "internal", "The database refused the request.");
		return;
	}
	http_response_header(c->req, "Retry-After", "1");
	api_error(c, 503, "unavailable", "The database cannot be reached now; retry shortly.");
}

void api_not_implemented(struct api_call *c)
{
	api_error(c, 501, "not_implemented", "This route is not served by this build yet.");
}

struct pg_pool *api_pool(const struct api *a)
{
	return a->o.pool;
}

struct pg_pool *api_import_pool(const struct api *a)
{
	return a->o.import_pool;
}

struct gate *api_gate(const struct api *a)
{
	return a->o.gate;
}

const struct api_dialer *api_dialer(const struct api *a)
{
	return a->o.dialer;
}

uv_loop_t *api_loop(const struct api *a)
{
	return a->o.loop;
}

/* --- SPEC P7 --- */
const struct pg_stmt *api_stmt_capacity_meta(const struct api *a)
{
	return a->st_capacity_meta;
}

const struct pg_stmt *api_stmt_me(const struct api *a)
{
	return a->st_me;
}

struct meta_cache *api_meta_cache(const struct api *a)
{
	return a->meta_cache;
}
/* --- end SPEC P7 --- */

/* ---- buffered bodies ---- */

/* The end of a collected body: the handler runs, reading it with http_request_body(); a body
 * that failed was answered by the server (413, 408, 400, 500) or by nobody (client gone). */
static void body_collected(struct http_request *req, int status, void *data)
{
	struct api_call *c = data;

	(void)req;
	if (status < 0) {
		call_free(c);
		return;
	}
	c->route->handler(c);
}

/* What a body will hold once buffered: its Content-Length, or the route's max_body for a
 * chunked one (its length is not known before it has come). */
static size_t body_size(const struct api_call *c)
{
	const char *cl = http_request_header(c->req, "Content-Length");
	char *end;

	if (cl && !http_request_header(c->req, "Transfer-Encoding")) {
		unsigned long long v = strtoull(cl, &end, 10);
		if (end != cl && !*end)
			return v < c->route->max_body ? (size_t)v : c->route->max_body;
	}
	return c->route->max_body;
}

/* A route whose handler reads http_request_body() is mounted as a stream route: the key and
 * the rate limit were checked at the end of the headers, and only now is the body read,
 * within the budget of buffered bodies in flight (api_options.body_budget). A large body (over
 * BODY_SMALL) may take at most a quarter of the budget per organisation and all large bodies
 * together at most seven eighths of it, so that one organisation's uploads never keep
 * another's out, nor large bodies a small one (a direct dial's). */
static void body_collect(struct api_call *c)
{
	struct api *a = c->api;
	size_t need = body_size(c), budget = a->o.body_budget;
	bool large = need > BODY_SMALL;
	struct org_bodies *ob = large ? strmap_get(&a->org_bodies, c->key.org.id) : NULL;
	size_t share = budget / 4, held = ob ? ob->bytes : 0;
	int rc;

	if (large && held + need > share) {
		char msg[256];

		a->stats.bodies_refused++;
		snprintf(msg, sizeof(msg),
			 "This organisation's request bodies being received on this server would "
			 "cross its share of %zu bytes (%zu held); retry when they are done.",
			 share, held);
		http_response_header(c->req, "Retry-After", "1");
		api_error(c, 503, "unavailable", msg);
		return;
	}
	if (a->bodies + need > (large ? budget - budget / 8 : budget)) {
		a->stats.bodies_refused++;
		http_response_header(c->req, "Retry-After", "1");
		api_error(c, 503, "unavailable",
			  "The server is receiving as many request bodies as it holds; retry "
			  "shortly.");
		return;
	}
	if (large && !ob) {
		if (!(ob = calloc(1, sizeof(*ob)))) {
			api_error(c, 503, "unavailable", "Out of memory; retry shortly.");
			return;
		}
		snprintf(ob->org, sizeof(ob->org), "%s", c->key.org.id);
		if (strmap_put(&a->org_bodies, ob->org, ob)) {
			free(ob);
			api_error(c, 503, "unavailable", "Out of memory; retry shortly.");
			return;
		}
	}
	if (ob)
		ob->bytes += need;
	a->bodies += need;
	c->body_reserved = need;
	if ((rc = http_request_body_collect(c->req, body_collected, c)))
		api_error(c, 400, "bad_request", "The request body can no longer be read.");
}

/* ---- rate limit (R1-R3) ---- */

static int64_t wall_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The 429 of a refused decision (R2). The key's cache entry remembers it until the retry time:
 * no read is started before its decision until then (limit_check()). */
static void refuse(struct api_call *c)
{
	const struct api_options *o = &c->api->o;
	struct key_entry *e = strmap_get(&c->api->cache, c->hash_hex);
	char msg[160];

	if (e)
		e->limited_until_ms[c->route->bucket] =
			uv_now(o->loop) + (uint64_t)c->limit.retry_after_s * 1000;
	if (o->on_limited)
		o->on_limited(ratelimit_bucket_name(c->route->bucket), o->on_limited_data);
	snprintf(msg, sizeof(msg),
		 "Rate limit exceeded: %" PRIu32 " requests per minute for this "
		 "organization. Retry in %" PRIu32 "s.",
		 c->limit.limit, c->limit.retry_after_s);
	api_error_1300(c, c->limit.retry_after_s, msg);
}

static void admitted(struct api_call *c)
{
	if (!c->limit.allowed) {
		refuse(c);
		return;
	}
	if (c->route->stream || !c->route->max_body) {
		c->route->handler(c);
		return;
	}
	body_collect(c);
}

static void limit_done(const struct ratelimit_result *r, void *data)
{
	struct api_call *c = data;

	c->limit = r->d;
	if (!c->speculative) {
		admitted(c);
		return;
	}
	c->limit_pending = false;
	if (c->limit.allowed) {
		if (c->has_held)
			held_send(c);
		return; /* else the handler answers when it is done, as any */
	}
	if (c->has_held) {
		held_free(c);
		http_response_headers_reset(c->req);
		refuse(c);
		return;
	}
	c->refuse_late = true; /* the handler's answer becomes the 429 (answer()) */
}

/* One Redis round trip per request, per organisation and bucket (ratelimit_redis.h); it fails
 * open (R3) when Redis does not answer within its deadline.
 *
 * Reads sent with the rate limit (SPEC P7). A read route (GET, no body) starts its handler at
 * once, with the decision in flight, so that its own reads (the capacity route's gate_read(),
 * on the gate's Redis connection while the limiter's script is on the limiter's own) go out in
 * the same loop turn and are answered in parallel, rather than one round trip after the other.
 * Its answer waits for the decision (answer()): allowed, it is sent with the decision's headers;
 * refused, the 429 is sent instead and the answer is dropped, headers included. A read costs
 * nothing to drop, and once a key has been refused in a bucket, its reads in that bucket wait
 * for their decision while its cache entry remembers (until the retry time, at most the entry's
 * 2 s), so a client over its limit does not make every 429 cost a read. */
static void limit_check(struct api_call *c)
{
	const struct api_route_def *r = c->route;
	uint32_t limit = c->key.org.rate.per_minute[r->bucket];

	c->speculative = c->api->rl && !c->no_speculate && !r->max_body && !r->stream &&
			 strcmp(r->method, "GET") == 0;
	c->limit_pending = c->speculative;
	if (!c->api->rl ||
	    ratelimit_redis_check(c->api->rl, c->key.org.id, r->bucket, limit, limit_done, c)) {
		c->speculative = c->limit_pending = false;
		ratelimit_fail_open(limit, wall_ms(), &c->limit);
		admitted(c);
		return;
	}
	if (c->speculative)
		r->handler(c);
}

/* ---- keys (R4) ---- */

static void unauthorized(struct api_call *c)
{
	c->api->stats.unauthorized++;
	http_response_header(c->req, "WWW-Authenticate", "Bearer");
	api_error(c, 401, "unauthorized", UNAUTHORIZED_MESSAGE);
}

static uint32_t col_u32(const PGresult *r, int col)
{
	unsigned long v = strtoul(PQgetvalue(r, 0, col), NULL, 10);

	return v > UINT32_MAX ? UINT32_MAX : (uint32_t)v;
}

static void col_str(const PGresult *r, int col, char *out, size_t size)
{
	snprintf(out, size, "%s", PQgetvalue(r, 0, col));
}

static int hex_to_hash(const char *hex, unsigned char out[APIKEY_HASH_LEN])
{
	if (strlen(hex) != 2 * APIKEY_HASH_LEN)
		return -EINVAL;
	for (size_t i = 0; i < APIKEY_HASH_LEN; i++) {
		unsigned v;

		if (sscanf(hex + 2 * i, "%2x", &v) != 1)
			return -EINVAL;
		out[i] = (unsigned char)v;
	}
	return 0;
}

static void cache_clear(struct api *a)
{
	for (uint32_t i = 0; i < a->cache.cap; i++)
		if (a->cache.slots[i].key)
			free(a->cache.slots[i].value);
	strmap_free(&a->cache);
}

static void cache_put(struct api *a, const struct api_call *c)
{
	struct key_entry *e;

	if (a->cache.count >= KEY_CACHE_MAX)
		cache_clear(a); /* bounded: at worst every key is looked up once more */
	if (!(e = calloc(1, sizeof(*e))))
		return;
	memcpy(e->hex, c->hash_hex, sizeof(e->hex));
	e->expires_ms = uv_now(a->o.loop) + a->o.key_cache_ms;
	e->info = c->key;
	if (strmap_put(&a->cache, e->hex, e))
		free(e);
}

static void neg_clear(struct api *a)
{
	for (uint32_t i = 0; i < a->neg.cap; i++)
		if (a->neg.slots[i].key)
			free(a->neg.slots[i].value);
	strmap_free(&a->neg);
}

/* Remembers that no active key has this hash, for neg_cache_ms. */
static void neg_put(struct api *a, const char *hex)
{
	struct neg_entry *e;

	if (a->neg.count >= NEG_CACHE_MAX)
		neg_clear(a); /* bounded: the lookup cap still holds PostgreSQL's load */
	if (!(e = calloc(1, sizeof(*e))))
		return;
	memcpy(e->hex, hex, sizeof(e->hex));
	e->expires_ms = uv_now(a->o.loop) + a->o.neg_cache_ms;
	if (strmap_put(&a->neg, e->hex, e))
		free(e);
}

/* Whether the hash was found unknown less than neg_cache_ms ago (an expired entry goes). */
static bool neg_hit(struct api *a, const char *hex)
{
	struct neg_entry *e = strmap_get(&a->neg, hex);

	if (!e)
		return false;
	if (e->expires_ms > uv_now(a->o.loop))
		return true;
	strmap_del(&a->neg, e->hex);
	free(e);
	return false;
}

static void key_done(int status, const struct pg_results *r, void *data)
{
	struct api_call *c = data;
	struct api *a = c->api;
	unsigned char stored[APIKEY_HASH_LEN];

	a->lookups--;
	if (status) {
		a->stats.unavailable++;
		api_db_error(c, status, "the key lookup");
		return;
	}
	const PGresult *res = r->res[0];
	if (PQntuples(res) != 1 || hex_to_hash(PQgetvalue(res, 0, 3), stored) ||
	    !apikey_hash_equal(stored, c->hash)) {
		neg_put(a, c->hash_hex);
		unauthorized(c);
		return;
	}
	struct api_key_info *k = &c->key;
	col_str(res, 0, k->id, sizeof(k->id));
	col_str(res, 1, k->name, sizeof(k->name));
	col_str(res, 2, k->preview, sizeof(k->preview));
	col_str(res, 4, k->org.id, sizeof(k->org.id));
	col_str(res, 5, k->org.name, sizeof(k->org.name));
	k->org.org_limit = col_u32(res, 6);
	k->org.per_agent_limit = col_u32(res, 7);
	k->org.enforced = PQgetvalue(res, 0, 8)[0] == 't';
	k->org.rate.per_minute[RATELIMIT_DEFAULT] = col_u32(res, 9);
	k->org.rate.per_minute[RATELIMIT_CALLS_CREATE] = col_u32(res, 10);
	k->org.rate.per_minute[RATELIMIT_EXECUTIONS_LIST] = col_u32(res, 11);
	k->org.pending_ceiling = col_u32(res, 12);
	col_str(res, 13, k->org.plan, sizeof(k->org.plan));
	col_str(res, 14, k->org.rate_limit_tier, sizeof(k->org.rate_limit_tier));
	k->org.global_limit = col_u32(res, 15);
	cache_put(a, c);
	limit_check(c);
}

static unsigned authorization_count(const struct http_request *req)
{
	unsigned n = 0;

	for (unsigned i = 0; i < http_request_header_count(req); i++) {
		const char *name, *value;
		http_request_header_at(req, i, &name, &value);
		n += strcasecmp(name, "Authorization") == 0;
	}
	return n;
}

static void authenticate(struct api_call *c)
{
	struct api *a = c->api;
	const char *h = http_request_header(c->req, "Authorization");
	const char *key;

	if (authorization_count(c->req) > 1) { /* which one is meant? neither is guessed */
		unauthorized(c);
		return;
	}
	if (apikey_parse_bearer(h, h ? strlen(h) : 0, &key) ||
	    apikey_hash(key, APIKEY_LEN, c->hash)) {
		unauthorized(c);
		return;
	}
	/* SPEC P7: a table, not 32 snprintf() calls (5 % of a cached request's CPU, measured). */
	static const char hex[] = "0123456789abcdef";
	for (size_t i = 0; i < APIKEY_HASH_LEN; i++) {
		c->hash_hex[2 * i] = hex[c->hash[i] >> 4];
		c->hash_hex[2 * i + 1] = hex[c->hash[i] & 15];
	}
	c->hash_hex[2 * APIKEY_HASH_LEN] = 0;
	struct key_entry *e = strmap_get(&a->cache, c->hash_hex);
	/* The map compares hex SHA-256s, not keys: timing can only tell an attacker about hashes,
	 * which do not lead back to a key. */
	if (e && e->expires_ms > uv_now(a->o.loop)) {
		a->stats.key_cache_hits++;
		c->key = e->info;
		c->no_speculate = e->limited_until_ms[c->route->bucket] > uv_now(a->o.loop);
		limit_check(c);
		return;
	}
	if (e) { /* expired: looked up again, so a revocation is seen */
		strmap_del(&a->cache, e->hex);
		free(e);
	}
	if (neg_hit(a, c->hash_hex)) {
		a->stats.key_negative_hits++;
		unauthorized(c);
		return;
	}
	if (a->lookups >= a->o.max_key_lookups) {
		/* Not a 401: the key may be good. */
		a->stats.lookups_refused++;
		http_response_header(c->req, "Retry-After", "1");
		api_error(c, 503, "unavailable",
			  "The server is checking as many API keys as it can; retry shortly.");
		return;
	}
	a->stats.key_lookups++;
	const char *v[1] = { c->hash_hex };
	struct pg_query q = { .stmt = a->st_key, .nparams = 1, .values = v };
	int rc = pg_pool_exec(a->o.pool, PG_LANE_NORMAL, &q, key_done, c);
	if (rc) {
		a->stats.unavailable++;
		api_db_error(c, rc, "the key lookup");
		return;
	}
	a->lookups++;
}

static void on_request(struct http_request *req, void *data)
{
	const struct binding *b = data;
	struct api_call *c = calloc(1, sizeof(*c));

	if (!c) {
		http_respond_error(req, 503, "unavailable", "Out of memory; retry shortly.");
		return;
	}
	c->api = b->api;
	c->req = req;
	c->route = b->def;
	b->api->stats.requests++;
	if (b->def->public_route) {
		b->def->handler(c);
		return;
	}
	authenticate(c);
}

/* ---- the API ---- */

int api_scripts_register(struct redis_scripts *reg)
{
	return ratelimit_redis_scripts_register(reg);
}

int api_new(const struct api_options *o, struct api **out)
{
	struct api *a;
	size_t n = 0;
	int rc;

	if (!o || !o->loop || !o->pool || !out)
		return -EINVAL;
	if (!(a = calloc(1, sizeof(*a))))
		return -ENOMEM;
	a->o = *o;
	if (!a->o.key_cache_ms)
		a->o.key_cache_ms = KEY_CACHE_MS_DEFAULT;
	if (!a->o.neg_cache_ms)
		a->o.neg_cache_ms = NEG_CACHE_MS_DEFAULT;
	if (!a->o.max_key_lookups)
		a->o.max_key_lookups = KEY_LOOKUPS_MAX;
	if (!a->o.body_budget)
		a->o.body_budget = BODY_BUDGET_DEFAULT;
	strmap_init(&a->cache);
	strmap_init(&a->neg);
	strmap_init(&a->org_bodies);
	for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++)
		n += *tables[t].n;
	if (!(a->bindings = calloc(n, sizeof(*a->bindings)))) {
		free(a);
		return -ENOMEM;
	}
	for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++)
		for (size_t i = 0; i < *tables[t].n; i++)
			a->bindings[a->n_bindings++] = (struct binding){ a, &tables[t].defs[i] };
	if ((o->conn && o->reg &&
	     (rc = ratelimit_redis_new(o->loop, o->conn, o->reg, NULL, &a->rl))) ||
	    (rc = pg_pool_prepare(o->pool, SQL_KEY, 1, &a->st_key)) ||
	    /* SPEC P7 */
	    (rc = pg_pool_prepare(o->pool, api_sql_capacity_meta, 2, &a->st_capacity_meta)) ||
	    (rc = pg_pool_prepare(o->pool, api_sql_me, 1, &a->st_me)) ||
	    (rc = meta_cache_new(o->loop, o->pool, &a->meta_cache))) {
		api_free(a);
		return rc;
	}
	*out = a;
	return 0;
}

size_t api_route_defs(const struct api_route_def **out, size_t cap)
{
	size_t n = 0;

	for (size_t t = 0; t < sizeof(tables) / sizeof(tables[0]); t++)
		for (size_t i = 0; i < *tables[t].n; i++, n++)
			if (n < cap)
				out[n] = &tables[t].defs[i];
	return n;
}

size_t api_routes(struct api *a, struct http_route *out, size_t cap)
{
	for (size_t i = 0; i < a->n_bindings && i < cap; i++) {
		const struct api_route_def *d = a->bindings[i].def;

		/* Every route that takes a body is a stream route at the HTTP level: its key and
		 * rate limit are checked at the end of the headers, before any of the body is read
		 * (body_collect() buffers it afterwards for the handlers that read it whole). */
		out[i] = (struct http_route){ .method = d->method,
					      .pattern = d->pattern,
					      .max_body = d->max_body,
					      .stream = d->stream || d->max_body > 0,
					      .handler = on_request,
					      .data = &a->bindings[i] };
	}
	return a->n_bindings;
}

void api_get_stats(const struct api *a, struct api_stats *out)
{
	*out = a->stats;
}

void api_get_limiter_stats(const struct api *a, struct ratelimit_redis_stats *out)
{
	if (a->rl)
		ratelimit_redis_get_stats(a->rl, out);
	else
		*out = (struct ratelimit_redis_stats){ 0 };
}

void api_close(struct api *a)
{
	if (!a)
		return;
	ratelimit_redis_close(a->rl);
	a->rl = NULL;
}

void api_free(struct api *a)
{
	if (!a)
		return;
	cache_clear(a);
	neg_clear(a);
	meta_cache_free(a->meta_cache);			 /* SPEC P7 */
	for (uint32_t i = 0; i < a->org_bodies.cap; i++) /* none once every call is answered */
		if (a->org_bodies.slots[i].key)
			free(a->org_bodies.slots[i].value);
	strmap_free(&a->org_bodies);
	free(a->bindings);
	free(a);
}
