/* The API (issue 10; SPEC C10, C12, R1-R6): what an organisation's backend calls, on the
 * worker's public HTTP server. Data flow of one request:
 *
 *   http_server -> api.c: Bearer key -> key cache (or one PostgreSQL lookup) -> the key's
 *   organisation -> rate limiter (one Redis round trip, per organisation and bucket; fails
 *   open) -> X-RateLimit-* headers -> the route's handler (route_*.c) -> one JSON answer.
 *
 * A handler only ever sees its own organisation (struct api_call.key.org): every id it reads
 * is looked up WITH that organisation, so another organisation's id answers 404, never 403.
 * Unknown, revoked and malformed keys all get the same 401 body, before any handler runs.
 *
 * Keys are cached for key_cache_ms (2 s by default) after a successful lookup: a revoked key
 * (or a changed rate limit) is seen by every node within that time plus one lookup, well under
 * issue 10's 5 s. Failed lookups are not cached.
 *
 * Threading: everything on the loop's thread, like the rest of the worker.
 */
#ifndef DSP_API_H
#define DSP_API_H

#include "http_server.h"

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

struct api;
struct pg_pool;
struct gate;
struct redis_conn;
struct redis_scripts;
struct api_dialer;

struct api_options {
	uv_loop_t *loop;
	struct pg_pool *pool;	   /* keys, organisations, batches, calls */
	struct gate *gate;	   /* live counts (capacity, user/me); may be NULL */
	struct redis_conn *conn;   /* the rate limiter's connection; may be NULL (fails open) */
	struct redis_scripts *reg; /* holds the limiter's script (api_scripts_register()) */
	/* POST /v2/calls: the worker's direct dial (dispatcher/worker/), passed in so the API never
	 * links the worker; NULL: POST /v2/calls answers 503. */
	const struct api_dialer *dialer;
	uint64_t key_cache_ms; /* how long a looked-up key is trusted; 0: the default [2000] */
	/* Called for each rate-limit 429 with the bucket's name (the worker counts it in
	 * /metrics); may be NULL. */
	void (*on_limited)(const char *bucket, void *data);
	void *on_limited_data;
};

/* Adds the API's Redis scripts (the rate limiter's) to reg, before its connection starts.
 * Returns as redis_scripts_add(). */
int api_scripts_register(struct redis_scripts *reg);

/* Creates the API. Must be called before the pool starts (it prepares its statements) and
 * before reg is frozen. Returns 0, -EINVAL or -ENOMEM. */
int api_new(const struct api_options *o, struct api **out);

/* Writes the public routes (/v2/..., /api/v1/...) into out[0..cap) and returns how many there
 * are (more than cap: nothing useful was written; call again with a larger array). The routes'
 * data point into the api, which must outlive the server. */
size_t api_routes(struct api *a, struct http_route *out, size_t cap);

/* Counters, for /metrics and tests. */
struct api_stats {
	uint64_t requests;	 /* requests that reached the API's routes */
	uint64_t unauthorized;	 /* 401s */
	uint64_t key_lookups;	 /* PostgreSQL lookups (cache misses) */
	uint64_t key_cache_hits; /* requests served from the key cache */
	uint64_t unavailable;	 /* 503s: the key could not be looked up */
};
void api_get_stats(const struct api *a, struct api_stats *out);

/* Closes what the API holds on the loop (the rate limiter: pending checks are answered fail-open)
 * once the HTTP server has closed. The loop must run afterwards. NULL is a no-op; twice too. */
void api_close(struct api *a);

/* Frees the API; call once the HTTP server has closed (no request in flight). NULL is a
 * no-op. */
void api_free(struct api *a);

#endif
