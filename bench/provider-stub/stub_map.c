#include "stub_map.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

unsigned long long map_hash(const char *s)
{
	unsigned long long h = 1469598103934665603ULL;

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ULL;
	}
	return h ^ (h >> 29);
}

void *map_get(const struct map *m, const char *key)
{
	if (!m->nslots)
		return NULL;
	for (struct map_entry *e = m->slots[map_hash(key) % m->nslots]; e; e = e->next)
		if (strcmp(e->key, key) == 0)
			return e->val;
	return NULL;
}

static int grow(struct map *m)
{
	size_t n = m->nslots ? m->nslots * 2 : 64;
	struct map_entry **slots = calloc(n, sizeof(*slots));

	if (!slots)
		return -ENOMEM;
	for (size_t i = 0; i < m->nslots; i++) {
		struct map_entry *e = m->slots[i], *next;
		for (; e; e = next) {
			next = e->next;
			size_t j = map_hash(e->key) % n;
			e->next = slots[j];
			slots[j] = e;
		}
	}
	free(m->slots);
	m->slots = slots;
	m->nslots = n;
	return 0;
}

int map_put(struct map *m, const char *key, void *val)
{
	struct map_entry *e;

	if ((m->count + 1) * 4 > m->nslots * 3 && grow(m))
		return -ENOMEM;
	size_t i = map_hash(key) % m->nslots;
	for (e = m->slots[i]; e; e = e->next) {
		if (strcmp(e->key, key) == 0) {
			e->val = val;
			return 0;
		}
	}
	if (!(e = malloc(sizeof(*e))) || !(e->key = strdup(key))) {
		free(e);
		return -ENOMEM;
	}
	e->val = val;
	e->next = m->slots[i];
	m->slots[i] = e;
	m->count++;
	return 0;
}

void map_each(const struct map *m, void (*fn)(const char *key, void *val, void *data), void *data)
{
	for (size_t i = 0; i < m->nslots; i++)
		for (struct map_entry *e = m->slots[i]; e; e = e->next)
			fn(e->key, e->val, data);
}

void map_free(struct map *m, void (*free_val)(void *val))
{
	for (size_t i = 0; i < m->nslots; i++) {
		struct map_entry *e = m->slots[i], *next;
		for (; e; e = next) {
			next = e->next;
			if (free_val)
				free_val(e->val);
			free(e->key);
			free(e);
		}
	}
	free(m->slots);
	m->slots = NULL;
	m->nslots = 0;
	m->count = 0;
}
