/* What the capacity route (route_capacity.c) keeps between requests (SPEC P7): the campaign
 * meta per (organisation, campaign) and the organisation's refusals of the last minute, each
 * for at most META_CACHE_TTL_MS, so that most capacity requests need no PostgreSQL round trip
 * and no second Redis script. README "GET /api/v1/campaigns/{id}/capacity", *Caching*, states
 * how stale an answer can be.
 *
 * The meta (one read of SQL_META: the state of the campaign asked for and of every campaign of
 * the installed active set, whether each is in that set, the fleet's gate mode) is dropped
 *   - for the whole organisation when `dsp_dispatch` (migrations 0015/0016) announces one of its
 *     campaigns or batches changing status (paused, resumed, stopped, a new active batch);
 *   - everywhere when `dsp_gate_mode` announces a gate mode change;
 *   - by the route when the gate's view carries other limits or floors versions than the ones
 *     the entry was read with (meta_cache_drop());
 *   - after META_CACHE_TTL_MS in any case (a notification is lost while the pool's connection 0
 *     is down).
 * A meta read that was in flight when a notification came is not stored (meta_cache_gen()).
 *
 * Everything on the loop's thread. Entries are copied out: a request never holds one. */
#ifndef DSP_META_CACHE_H
#define DSP_META_CACHE_H

#include "capacity.h"
#include "fairshare.h"
#include "fairshare_gate.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define META_CACHE_TTL_MS 1000
#define META_CACHE_MAX	  4096 /* entries of each kind; past it all of that kind are dropped */
/* Campaign rows held by all the meta entries (about 80 bytes each: 5 MiB); past it all are
 * dropped, and a meta of more rows is not kept. */
#define META_CACHE_ROWS_MAX 65536
/* migration 0015 (SELECT_CHANNEL_DISPATCH of dispatcher/worker/select.h, which the API does not
 * include) */
#define META_CACHE_CHANNEL_DISPATCH "dsp_dispatch"

struct meta_cache;
struct pg_pool;

/* One campaign of the meta. */
struct meta_cache_row {
	char id[65]; /* API_ID_SIZE */
	enum fairshare_state state;
	bool active;
};

/* One (organisation, campaign)'s meta. */
struct meta_cache_meta {
	struct meta_cache_row *rows; /* sorted by id, bytewise (SQL_META's order) */
	uint32_t n;
	bool postgres_mode;
	/* the gate view's versions it was read with (0, 0: not read from a view) */
	uint64_t limits_version, floors_version;
	/* fair_share_installs.version the rows were read with (0: none installed). With a view,
	 * a meta is stored only when this is the view's floors_version: the refresher writes the
	 * table, then the same version to Redis, so the rows and the view then come from one
	 * install (an install between the meta read and the view read would otherwise pair the
	 * old rows with the new versions, and the version check would keep them). */
	uint64_t installs_version;
};

/* Creates the cache and registers its LISTENs on pool (before pg_pool_start()). Returns 0,
 * -ENOMEM or as pg_pool_listen(). */
int meta_cache_new(uv_loop_t *loop, struct pg_pool *pool, struct meta_cache **out);
void meta_cache_free(struct meta_cache *c);

/* Bumped by every notification: a meta read started under one generation is stored only if it
 * is still the current one when its answer comes. */
uint64_t meta_cache_gen(const struct meta_cache *c);

/* Copies the fresh entry of (org, campaign) into *out (rows malloc'ed: free(out->rows)).
 * Returns 0, -ENOENT (none, or expired) or -ENOMEM. */
int meta_cache_get(struct meta_cache *c, const char *org, const char *campaign,
		   struct meta_cache_meta *out);
/* Stores a copy of m for (org, campaign) unless gen is no longer meta_cache_gen(), or m was read
 * from a view (limits_version set) of another floors version than its rows' installs_version. */
void meta_cache_put(struct meta_cache *c, const char *org, const char *campaign, uint64_t gen,
		    const struct meta_cache_meta *m);
void meta_cache_drop(struct meta_cache *c, const char *org, const char *campaign);

/* The organisation's refusals over the rolling minute (gate_read_stats()), when read less than
 * META_CACHE_TTL_MS ago: true and *out filled. */
bool meta_cache_stats_get(struct meta_cache *c, const char *org,
			  uint64_t out[FAIRSHARE_LEVEL_COUNT]);
void meta_cache_stats_put(struct meta_cache *c, const char *org,
			  const uint64_t refused[FAIRSHARE_LEVEL_COUNT]);

/* Counters, for tests and the benchmark. */
struct meta_cache_stats {
	uint64_t hits, misses, drops_notified, drops_version, stats_hits;
	uint64_t rows; /* campaign rows held now (at most META_CACHE_ROWS_MAX) */
};
void meta_cache_get_stats(const struct meta_cache *c, struct meta_cache_stats *out);

#endif
