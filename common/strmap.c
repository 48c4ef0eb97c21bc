/* Text-keyed map (strmap.h): linear probing, backward-shift deletion, FNV-1a hashes. */
#include "strmap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MIN_CAP 8

static uint64_t hash_of(const char *s)
{
	uint64_t h = 14695981039346656037ULL;

	for (; *s; s++) {
		h ^= (unsigned char)*s;
		h *= 1099511628211ULL;
	}
	return h;
}

void strmap_init(struct strmap *m)
{
	*m = (struct strmap){ 0 };
}

void strmap_free(struct strmap *m)
{
	free(m->slots);
	strmap_init(m);
}

static uint32_t find(const struct strmap *m, const char *key, uint64_t h)
{
	uint32_t mask = m->cap - 1;

	for (uint32_t i = (uint32_t)h & mask;; i = (i + 1) & mask) {
		const struct strmap_slot *s = &m->slots[i];
		if (!s->key || (s->hash == h && strcmp(s->key, key) == 0))
			return i;
	}
}

static int resize(struct strmap *m, uint32_t cap)
{
	struct strmap_slot *old = m->slots, *slots = calloc(cap, sizeof(*slots));
	uint32_t old_cap = m->cap;

	if (!slots)
		return -ENOMEM;
	m->slots = slots;
	m->cap = cap;
	for (uint32_t i = 0; i < old_cap; i++)
		if (old[i].key)
			m->slots[find(m, old[i].key, old[i].hash)] = old[i];
	free(old);
	return 0;
}

void *strmap_get(const struct strmap *m, const char *key)
{
	if (!m->count || !key)
		return NULL;
	const struct strmap_slot *s = &m->slots[find(m, key, hash_of(key))];
	return s->key ? s->value : NULL;
}

int strmap_put(struct strmap *m, const char *key, void *value)
{
	uint64_t h;
	uint32_t i;
	int rc;

	if (!key || !value)
		return -EINVAL;
	if (m->count >= UINT32_MAX / 4)
		return -ENOMEM;
	if ((m->count + 1) * 2 > m->cap && (rc = resize(m, m->cap ? m->cap * 2 : MIN_CAP)))
		return rc;
	h = hash_of(key);
	i = find(m, key, h);
	if (m->slots[i].key)
		return -EEXIST;
	m->slots[i] = (struct strmap_slot){ .key = key, .value = value, .hash = h };
	m->count++;
	return 0;
}

void *strmap_del(struct strmap *m, const char *key)
{
	if (!m->count || !key)
		return NULL;
	uint32_t mask = m->cap - 1, i = find(m, key, hash_of(key));
	void *value = m->slots[i].value;

	if (!m->slots[i].key)
		return NULL;
	/* Backward shift: entries after the hole that may live in it move back. */
	for (uint32_t j = (i + 1) & mask; m->slots[j].key; j = (j + 1) & mask) {
		uint32_t home = (uint32_t)m->slots[j].hash & mask;
		/* j's entry may move to i when its home is not in (i, j] cyclically. */
		if (((j - home) & mask) >= ((j - i) & mask)) {
			m->slots[i] = m->slots[j];
			i = j;
		}
	}
	m->slots[i] = (struct strmap_slot){ 0 };
	m->count--;
	if (m->count == 0)
		strmap_free(m);
	else if (m->cap > MIN_CAP && m->count * 8 < m->cap)
		(void)resize(m, m->cap / 2); /* no memory: stays larger, still correct */
	return value;
}
