/* The capacity route's cache (meta_cache.h). */
#include "meta_cache.h"

#include "gate_pg.h" /* GATE_PG_CHANNEL_MODE */
#include "pg_pool.h"
#include "strmap.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define KEY_SIZE (2 * 65 + 1) /* "<org> <campaign>" */

struct meta_entry {
	char key[KEY_SIZE]; /* the map's key */
	uint64_t expires_ms;
	struct meta_cache_meta m; /* rows owned */
};

struct stats_entry {
	char org[65]; /* the map's key */
	uint64_t expires_ms;
	uint64_t refused[FAIRSHARE_LEVEL_COUNT];
};

struct meta_cache {
	uv_loop_t *loop;
	uint64_t gen;
	struct strmap meta;  /* "<org> <campaign>" -> struct meta_entry */
	struct strmap stats; /* org -> struct stats_entry */
	uint64_t rows;	     /* rows held by all the meta entries (META_CACHE_ROWS_MAX) */
	struct meta_cache_stats counters;
};

static void entry_free_raw(struct meta_entry *e)
{
	free(e->m.rows);
	free(e);
}

/* Frees an entry that was in the map (its rows counted). */
static void entry_free(struct meta_cache *c, struct meta_entry *e)
{
	c->rows -= e->m.n;
	entry_free_raw(e);
}

static void meta_clear(struct meta_cache *c)
{
	for (uint32_t i = 0; i < c->meta.cap; i++)
		if (c->meta.slots[i].key)
			entry_free(c, c->meta.slots[i].value);
	strmap_free(&c->meta);
}

static void stats_clear(struct meta_cache *c)
{
	for (uint32_t i = 0; i < c->stats.cap; i++)
		if (c->stats.slots[i].key)
			free(c->stats.slots[i].value);
	strmap_free(&c->stats);
}

/* Drops every entry of org (all when org is NULL). */
static void drop_org(struct meta_cache *c, const char *org, size_t len)
{
	c->gen++;
	if (!org) {
		c->counters.drops_notified += c->meta.count;
		meta_clear(c);
		return;
	}
	/* Collected first, then deleted: a deletion may shrink the map under a scan. */
	struct meta_entry **drop = malloc((c->meta.count ? c->meta.count : 1) * sizeof(*drop));
	uint32_t n = 0;

	if (!drop) {
		c->counters.drops_notified += c->meta.count;
		meta_clear(c);
		return;
	}
	for (uint32_t i = 0; i < c->meta.cap; i++) {
		struct meta_entry *e = c->meta.slots[i].value;

		if (c->meta.slots[i].key && strncmp(e->key, org, len) == 0 && e->key[len] == ' ')
			drop[n++] = e;
	}
	for (uint32_t i = 0; i < n; i++) {
		strmap_del(&c->meta, drop[i]->key);
		entry_free(c, drop[i]);
	}
	c->counters.drops_notified += n;
	free(drop);
}

/* dsp_dispatch: "<org> <campaign> <batch>", "<org> <campaign>" or "+<org> <campaign>". */
static void on_dispatch(const char *channel, const char *payload, void *data)
{
	struct meta_cache *c = data;
	const char *org = payload + (payload[0] == '+');
	const char *sp = strchr(org, ' ');

	(void)channel;
	drop_org(c, sp ? org : NULL, sp ? (size_t)(sp - org) : 0);
}

static void on_mode(const char *channel, const char *payload, void *data)
{
	(void)channel;
	(void)payload;
	drop_org(data, NULL, 0);
}

int meta_cache_new(uv_loop_t *loop, struct pg_pool *pool, struct meta_cache **out)
{
	struct meta_cache *c = calloc(1, sizeof(*c));
	int rc;

	if (!c)
		return -ENOMEM;
	c->loop = loop;
	strmap_init(&c->meta);
	strmap_init(&c->stats);
	if ((rc = pg_pool_listen(pool, META_CACHE_CHANNEL_DISPATCH, on_dispatch, c)) ||
	    (rc = pg_pool_listen(pool, GATE_PG_CHANNEL_MODE, on_mode, c))) {
		free(c);
		return rc;
	}
	*out = c;
	return 0;
}

void meta_cache_free(struct meta_cache *c)
{
	if (!c)
		return;
	meta_clear(c);
	stats_clear(c);
	free(c);
}

uint64_t meta_cache_gen(const struct meta_cache *c)
{
	return c->gen;
}

static void make_key(char key[KEY_SIZE], const char *org, const char *campaign)
{
	snprintf(key, KEY_SIZE, "%.64s %.64s", org, campaign);
}

int meta_cache_get(struct meta_cache *c, const char *org, const char *campaign,
		   struct meta_cache_meta *out)
{
	char key[KEY_SIZE];
	struct meta_entry *e;

	make_key(key, org, campaign);
	if (!(e = strmap_get(&c->meta, key)) || e->expires_ms <= uv_now(c->loop)) {
		if (e) {
			strmap_del(&c->meta, e->key);
			entry_free(c, e);
		}
		c->counters.misses++;
		return -ENOENT;
	}
	*out = e->m;
	if (!(out->rows = malloc((e->m.n ? e->m.n : 1) * sizeof(*out->rows))))
		return -ENOMEM;
	memcpy(out->rows, e->m.rows, e->m.n * sizeof(*out->rows));
	c->counters.hits++;
	return 0;
}

void meta_cache_put(struct meta_cache *c, const char *org, const char *campaign, uint64_t gen,
		    const struct meta_cache_meta *m)
{
	struct meta_entry *e, *old;

	if (gen != c->gen)
		return; /* a notification came while it was read: it may predate the change */
	if (m->limits_version && m->installs_version != m->floors_version)
		return; /* the rows and the view of two installs (meta_cache.h) */
	/* Bounded by entries and by rows (each entry copies its organisation's active set, so an
	 * organisation of many campaigns polled for each would otherwise grow with their square):
	 * at worst every campaign is read once more. */
	if (m->n > META_CACHE_ROWS_MAX)
		return;
	if (c->meta.count >= META_CACHE_MAX || c->rows + m->n > META_CACHE_ROWS_MAX)
		meta_clear(c);
	if (!(e = calloc(1, sizeof(*e))) ||
	    !(e->m.rows = malloc((m->n ? m->n : 1) * sizeof(*e->m.rows)))) {
		free(e);
		return;
	}
	make_key(e->key, org, campaign);
	e->expires_ms = uv_now(c->loop) + META_CACHE_TTL_MS;
	struct meta_cache_row *rows = e->m.rows;
	e->m = *m;
	e->m.rows = rows;
	memcpy(rows, m->rows, m->n * sizeof(*rows));
	if ((old = strmap_del(&c->meta, e->key)))
		entry_free(c, old);
	if (strmap_put(&c->meta, e->key, e))
		entry_free_raw(e);
	else
		c->rows += e->m.n;
}

void meta_cache_drop(struct meta_cache *c, const char *org, const char *campaign)
{
	char key[KEY_SIZE];
	struct meta_entry *e;

	make_key(key, org, campaign);
	if ((e = strmap_del(&c->meta, key))) {
		entry_free(c, e);
		c->counters.drops_version++;
	}
}

bool meta_cache_stats_get(struct meta_cache *c, const char *org,
			  uint64_t out[FAIRSHARE_LEVEL_COUNT])
{
	struct stats_entry *e = strmap_get(&c->stats, org);

	if (!e)
		return false;
	if (e->expires_ms <= uv_now(c->loop)) {
		strmap_del(&c->stats, e->org);
		free(e);
		return false;
	}
	memcpy(out, e->refused, sizeof(e->refused));
	c->counters.stats_hits++;
	return true;
}

void meta_cache_stats_put(struct meta_cache *c, const char *org,
			  const uint64_t refused[FAIRSHARE_LEVEL_COUNT])
{
	struct stats_entry *e = strmap_get(&c->stats, org);

	if (!e) {
		if (c->stats.count >= META_CACHE_MAX)
			stats_clear(c);
		if (!(e = calloc(1, sizeof(*e))))
			return;
		snprintf(e->org, sizeof(e->org), "%s", org);
		if (strmap_put(&c->stats, e->org, e)) {
			free(e);
			return;
		}
	}
	e->expires_ms = uv_now(c->loop) + META_CACHE_TTL_MS;
	memcpy(e->refused, refused, sizeof(e->refused));
}

void meta_cache_get_stats(const struct meta_cache *c, struct meta_cache_stats *out)
{
	*out = c->counters;
	out->rows = c->rows;
}
