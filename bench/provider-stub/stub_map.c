#include "stub_map.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MOVE_PER_PUT 64 /* old buckets moved per map_put: done long before the next doubling */

unsigned long long map_hash(const char *s)
{
	unsigned long long h = 1469598103934665603ULL;

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ULL;
	}
	return h ^ (h >> 29);
}

static struct map_entry *find(struct map_entry **slots, size_t n, unsigned long long h,
			      const char *key)
{
	if (!n)
		return NULL;
	for (struct map_entry *e = slots[h % n]; e; e = e->next)
		if (e->hash == h && strcmp(e->key, key) == 0)
			return e;
	return NULL;
}

void *map_get(const struct map *m, const char *key)
{
	unsigned long long h = map_hash(key);
	struct map_entry *e = find(m->slots, m->nslots, h, key);

	if (!e && m->old)
		e = find(m->old, m->nold, h, key);
	return e ? e->val : NULL;
}

/* Moves up to `buckets` buckets of the old table into the current one. */
static void move_some(struct map *m, size_t buckets)
{
	for (; m->old && buckets > 0 && m->moved < m->nold; buckets--, m->moved++) {
		struct map_entry *e = m->old[m->moved], *next;
		for (; e; e = next) {
			next = e->next;
			size_t j = e->hash % m->nslots;
			e->next = m->slots[j];
			m->slots[j] = e;
		}
		m->old[m->moved] = NULL;
	}
	if (m->old && m->moved == m->nold) {
		free(m->old);
		m->old = NULL;
		m->nold = m->moved = 0;
	}
}

static int grow(struct map *m)
{
	size_t n = m->nslots ? m->nslots * 2 : 64;
	struct map_entry **slots = calloc(n, sizeof(*slots));

	if (!slots)
		return -ENOMEM;
	move_some(m, (size_t)-1); /* a previous doubling still moving: finish it first */
	m->old = m->slots;
	m->nold = m->nslots;
	m->moved = 0;
	m->slots = slots;
	m->nslots = n;
	if (!m->old)
		m->nold = 0;
	return 0;
}

int map_put(struct map *m, const char *key, void *val)
{
	unsigned long long h = map_hash(key);
	struct map_entry *e = find(m->slots, m->nslots, h, key);

	if (!e && m->old)
		e = find(m->old, m->nold, h, key);
	if (e) {
		e->val = val;
		return 0;
	}
	if ((m->count + 1) * 4 > m->nslots * 3 && grow(m))
		return -ENOMEM;
	move_some(m, MOVE_PER_PUT);
	if (!(e = malloc(sizeof(*e))) || !(e->key = strdup(key))) {
		free(e);
		return -ENOMEM;
	}
	size_t i = h % m->nslots;
	e->val = val;
	e->hash = h;
	e->next = m->slots[i];
	m->slots[i] = e;
	m->count++;
	return 0;
}

static void each_in(struct map_entry **slots, size_t n,
		    void (*fn)(const char *key, void *val, void *data), void *data)
{
	for (size_t i = 0; i < n; i++)
		for (struct map_entry *e = slots[i]; e; e = e->next)
			fn(e->key, e->val, data);
}

void map_each(const struct map *m, void (*fn)(const char *key, void *val, void *data), void *data)
{
	each_in(m->slots, m->nslots, fn, data);
	if (m->old)
		each_in(m->old, m->nold, fn, data);
}

static void free_slots(struct map_entry **slots, size_t n, void (*free_val)(void *val))
{
	for (size_t i = 0; i < n; i++) {
		struct map_entry *e = slots[i], *next;
		for (; e; e = next) {
			next = e->next;
			if (free_val)
				free_val(e->val);
			free(e->key);
			free(e);
		}
	}
	free(slots);
}

void map_free(struct map *m, void (*free_val)(void *val))
{
	free_slots(m->slots, m->nslots, free_val);
	if (m->old)
		free_slots(m->old, m->nold, free_val);
	memset(m, 0, sizeof(*m));
}
