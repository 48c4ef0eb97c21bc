/* A string-keyed hash map with chaining, for the stub's state. Keys are copied; values are
 * borrowed pointers the caller owns (map_free can free them). */
#ifndef DSP_STUB_MAP_H
#define DSP_STUB_MAP_H

#include <stddef.h>

struct map_entry {
	char *key;
	void *val;
	struct map_entry *next;
};

struct map {
	struct map_entry **slots;
	size_t nslots, count;
};

/* Returns the value stored under key, or NULL. */
void *map_get(const struct map *m, const char *key);

/* Stores val under key (replacing any value). Returns 0 or -ENOMEM. */
int map_put(struct map *m, const char *key, void *val);

/* Calls fn(val, data) for every value. */
void map_each(const struct map *m, void (*fn)(const char *key, void *val, void *data), void *data);

/* Frees the map; calls free_val(val) on every value when free_val is not NULL. */
void map_free(struct map *m, void (*free_val)(void *val));

/* 64-bit FNV-1a of s, mixed. */
unsigned long long map_hash(const char *s);

#endif
