/* A map from text keys to pointers: open addressing with linear probing, grown and shrunk with
 * its content so its memory follows the number of entries (load between 1/8 and 1/2 once it
 * has more than 8 slots; no memory at all when empty). Keys are borrowed: a key must stay unchanged while its entry is in the map
 * (typically it lives in the value). Pure: no I/O; allocates with malloc.
 *
 *     struct strmap m;  strmap_init(&m);
 *     strmap_put(&m, item->name, item);   ...   strmap_get(&m, "x");   strmap_del(&m, "x");
 *     strmap_free(&m);  (the values are the caller's)
 *
 * get, put and del cost O(1) on average (load at most 1/2).
 */
#ifndef DSP_STRMAP_H
#define DSP_STRMAP_H

#include <stdint.h>

struct strmap_slot {
	const char *key; /* NULL: empty */
	void *value;
	uint64_t hash;
};

struct strmap {
	struct strmap_slot *slots;
	uint32_t cap; /* slots, 0 or a power of two */
	uint32_t count;
};

void strmap_init(struct strmap *m);

/* Frees the map's own memory (not the keys or values) and leaves it empty and usable. */
void strmap_free(struct strmap *m);

/* The value of key, or NULL. */
void *strmap_get(const struct strmap *m, const char *key);

/* Adds key → value (value not NULL). Returns 0, -EEXIST (key present: nothing changes), -EINVAL
 * or -ENOMEM. */
int strmap_put(struct strmap *m, const char *key, void *value);

/* Removes key; returns its value, or NULL when absent. */
void *strmap_del(struct strmap *m, const char *key);

#endif
