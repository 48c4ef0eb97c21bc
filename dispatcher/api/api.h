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
 * issue 10's 5 s. A hash found unknown is remembered for neg_cache_ms (2 s; at most 4096 of
 * them), so a client repeating a bad key costs PostgreSQL one query per 2 s, and at most
 * max_key_lookups lookups are in flight (past it 503). A key created just after a failed
 * attempt with it is accepted within neg_cache_ms.
 *
 * Bodies: every route that takes one is a stream route at the HTTP level, so the key and the
 * rate limit are checked before any byte of the body is read (401 and 429 never wait for it);
 * the handlers that read the body whole get it buffered afterwards
 * (http_request_body_collect()), within body_budget bytes for all requests in flight.
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

/* ---- POST /v2/calls's dialer (issue 10 item 5, SPEC C10) ----
 * The worker's direct dial (dispatcher/worker/direct.h), seen through a table of functions so
 * the API never links the worker: worker.c fills one over direct_dial_submit() /
 * direct_dial_cancel(). Strings in a request are copied by submit; the result and every pointer
 * in it are borrowed for the callback only. */
struct api_dial_req {
	const char *org;	 /* the key's organisation */
	const char *agent;	 /* the body's agent_id (^[A-Za-z0-9_-]{1,64}$) */
	const char *to_number;	 /* E.164, canonical */
	const char *from_number; /* E.164, canonical; NULL: the agent's from_number */
};

enum api_dial_outcome {
	API_DIAL_PLACED = 0,  /* 201: the call row is written, the dialer has the call */
	API_DIAL_BUSY,	      /* 429: no line within the wait */
	API_DIAL_NOT_FOUND,   /* 404: no such agent in the organisation */
	API_DIAL_UNAVAILABLE, /* 503: the gate decided nothing, the worker drains, PostgreSQL */
};

struct api_dial_result {
	enum api_dial_outcome outcome;
	const char *call;	/* PLACED: the call id (uuid) */
	const char *state;	/* PLACED: its state ("dialing") */
	const char *from;	/* PLACED: the caller id used, NULL for none */
	const char *busy_body;	/* BUSY: the exact 429 body of C10 (direct_busy_body()) */
	unsigned retry_after_s; /* BUSY: the Retry-After (5) */
	const char *message;	/* NOT_FOUND, UNAVAILABLE: why, in words; may be NULL */
	uint64_t waited_ms;	/* submit -> answer */
};

typedef void (*api_dial_cb)(const struct api_dial_result *r, void *data);

struct api_dialer {
	void *ctx; /* passed to submit */
	/* Submits one dial. Returns 0 and sets *handle (for cancel, valid until cb is called or
	 * cancel returns): cb is then called exactly once, from the loop, never from within
	 * submit, unless cancel is called first. Returns -EINVAL (a malformed field), -ESHUTDOWN
	 * (draining or closing) or another negative errno: cb is never called. */
	int (*submit)(void *ctx, const struct api_dial_req *req, api_dial_cb cb, void *data,
		      void **handle);
	/* Withdraws a dial not answered yet: cb is never called after it returns. */
	void (*cancel)(void *handle);
};

/* The import pool's size the worker creates: the most imports at once in a process (at most
 * one per organisation besides). dispatcher/api/README.md, "Creating batches". */
#define API_IMPORT_POOL_SIZE 4

struct api_options {
	uv_loop_t *loop;
	struct pg_pool *pool; /* keys, organisations, batches, calls */
	/* The batch imports' own connections (issue10-g1): an import holds one in a transaction
	 * for its whole upload, so never the worker's pool (whose connection 0 holds every
	 * LISTEN). Its size is the process's import cap (API_IMPORT_POOL_SIZE); NULL: the import
	 * routes answer 503. Borrowed; the caller starts and closes it. */
	struct pg_pool *import_pool;
	struct gate *gate;	   /* live counts (capacity, user/me); may be NULL */
	struct redis_conn *conn;   /* the rate limiter's connection; may be NULL (fails open) */
	struct redis_scripts *reg; /* holds the limiter's script (api_scripts_register()) */
	/* POST /v2/calls: the worker's direct dial (dispatcher/worker/), passed in so the API never
	 * links the worker; NULL: POST /v2/calls answers 503. */
	const struct api_dialer *dialer;
	uint64_t key_cache_ms; /* how long a looked-up key is trusted; 0: the default [2000] */
	/* How long a hash no active key has is answered 401 without a lookup; a key created
	 * within that time after a failed attempt with it works once it has passed. 0: the
	 * default [2000] */
	uint64_t neg_cache_ms;
	/* Key lookups in PostgreSQL in flight at once; past it a request needing one is answered
	 * 503 with Retry-After: 1 (never 401: its key may be good). 0: the default [64] */
	unsigned max_key_lookups;
	/* Bytes of request bodies buffered for the handlers at once (a body reserves its
	 * Content-Length, a chunked one its route's max_body, from the end of its headers to its
	 * answer); past it 503 with Retry-After: 1. A body over 64 KiB may take at most a
	 * quarter of it per organisation, and such bodies together seven eighths. 0: the default
	 * [268435456] */
	size_t body_budget;
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
	uint64_t requests;	    /* requests that reached the API's routes */
	uint64_t unauthorized;	    /* 401s */
	uint64_t key_lookups;	    /* PostgreSQL lookups (cache misses) */
	uint64_t key_cache_hits;    /* requests served from the key cache */
	uint64_t unavailable;	    /* 503s: the key could not be looked up */
	uint64_t key_negative_hits; /* 401s from the negative cache (no lookup) */
	uint64_t lookups_refused;   /* 503s: max_key_lookups lookups were in flight */
	uint64_t bodies_refused;    /* 503s: the body would have crossed body_budget */
};
void api_get_stats(const struct api *a, struct api_stats *out);

/* The rate limiter's counters (ratelimit_redis.h; all zero without a Redis connection). */
struct ratelimit_redis_stats;
void api_get_limiter_stats(const struct api *a, struct ratelimit_redis_stats *out);

/* Closes what the API holds on the loop (the rate limiter: pending checks are answered fail-open)
 * once the HTTP server has closed. The loop must run afterwards. NULL is a no-op; twice too. */
void api_close(struct api *a);

/* Frees the API; call once the HTTP server has closed (no request in flight). NULL is a
 * no-op. */
void api_free(struct api *a);

#endif
