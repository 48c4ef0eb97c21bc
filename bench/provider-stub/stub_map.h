/* A string-keyed hash map with chaining, for the stub's state. Keys are copied; values are
 * borrowed pointers the caller owns (map_free can free them).
 *
 * The table doubles at 3/4 load and rehashes incrementally: a few buckets of the old table move
 * with every map_put, so no single request pays for moving every entry (a full rehash of 400 k
 * held calls stalled the stub for hundreds of milliseconds and showed in wrk's p99). */
#ifndef DSP_STUB_MAP_H
#define DSP_STUB_MAP_H

#include <stddef.h>

struct map_entry {
	char *key;
	void *val;
	unsigned long long hash; /* map_hash(key), kept so moving an entry does not rehash it */
	struct map_entry *next;
};

struct map {
	struct map_entry **slots; /* the current table */
	size_t nslots, count;	  /* its size; entries in both tables */
	struct map_entry **old;	  /* the table being emptied into slots, or NULL */
	size_t nold;		  /* its size */
	size_t moved;		  /* buckets of old already moved */
};

/* Returns the value stored under key, or NULL. */
void *map_get(const struct map *m, const char *key);

/* Stores val under key (replacing any value). Returns 0 or -ENOMEM. */
int map_put(struct map *m, const char *key, void *val);

/* Calls fn(key, val, data) for every entry. */
void map_each(const struct map *m, void (*fn)(const char *key, void *val, void *data), void *data);

/* Frees the map; calls free_val(val) on every value when free_val is not NULL. */
void map_free(struct map *m, void (*free_val)(void *val));

/* 64-bit FNV-1a of s, mixed. */
unsigned long long map_hash(const char *s);

#endif
