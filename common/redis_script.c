#include "redis_script.h"

#include "log.h"

#include <errno.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The fragments of common/lua/ (embedded by common/meson.build). */
extern const struct embedded_file redis_lua_common[];
extern const size_t redis_lua_common_count;

#define GUARD_FILE "generation_guard.lua"

struct redis_script {
	const struct redis_scripts *reg;
	char *name;
	char *text; /* guard + file text, NUL-terminated */
	size_t len;
	char sha[41];
	int numkeys;
	int numargs;
	bool more_args; /* ARGV ends with "..." */
	size_t index;	/* in reg->v */
	struct redis_script_calls calls;
};

struct redis_scripts {
	struct redis_script **v;
	size_t n, cap;
	bool frozen;
};

/* What a header says. */
struct header {
	int keys, args;
	bool more_args;
	char first_key[32], first_arg[32]; /* "" when the list is empty */
	bool seen_keys, seen_args;
};

static bool is_ident(const char *p, size_t n)
{
	if (n == 0 || (p[0] >= '0' && p[0] <= '9'))
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = p[i];
		if (!(c == '_' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9')))
			return false;
	}
	return true;
}

/* Parses the names of one header line (p..end). Returns 0 or -EINVAL with *why set. */
static int parse_names(const char *p, const char *end, bool allow_more, int *count, bool *more,
		       char *first, size_t firstlen, const char **why)
{
	*count = 0;
	*more = false;
	first[0] = '\0';
	while (p < end) {
		if (*p == ' ' || *p == '\t' || *p == '\r') {
			p++;
			continue;
		}
		size_t n = strcspn(p, " \t\r\n");
		if (*more) {
			*why = "\"...\" must be the last name";
			return -EINVAL;
		}
		if (n == 3 && memcmp(p, "...", 3) == 0 && allow_more) {
			*more = true;
		} else if (is_ident(p, n)) {
			if (*count == 0)
				snprintf(first, firstlen, "%.*s", (int)n, p);
			++*count;
		} else {
			*why = allow_more ? "ARGV names must be identifiers, \"...\" last"
					  : "KEYS names must be identifiers";
			return -EINVAL;
		}
		p += n;
	}
	return 0;
}

/* Reads the leading "--" lines of text. Returns 0 or -EINVAL with *why set. */
static int parse_header(const char *text, struct header *h, const char **why)
{
	bool unused;

	memset(h, 0, sizeof(*h));
	for (const char *p = text; strncmp(p, "--", 2) == 0;) {
		const char *end = strchr(p, '\n');
		end = end ? end : p + strlen(p);
		int rc = 0;
		if (strncmp(p, "-- KEYS:", 8) == 0) {
			rc = h->seen_keys ? (*why = "two KEYS lines", -EINVAL)
					  : parse_names(p + 8, end, false, &h->keys, &unused,
							h->first_key, sizeof(h->first_key), why);
			h->seen_keys = true;
		} else if (strncmp(p, "-- ARGV:", 8) == 0) {
			rc = h->seen_args ? (*why = "two ARGV lines", -EINVAL)
					  : parse_names(p + 8, end, true, &h->args, &h->more_args,
							h->first_arg, sizeof(h->first_arg), why);
			h->seen_args = true;
		}
		if (rc < 0)
			return rc;
		p = *end ? end + 1 : end;
	}
	if (!h->seen_keys || !h->seen_args) {
		*why = "the header (leading \"--\" lines) must have a \"-- KEYS:\" and an "
		       "\"-- ARGV:\" line";
		return -EINVAL;
	}
	return 0;
}

static const struct embedded_file *guard_file(void)
{
	for (size_t i = 0; i < redis_lua_common_count; i++) {
		if (strcmp(redis_lua_common[i].name, GUARD_FILE) == 0)
			return &redis_lua_common[i];
	}
	return NULL;
}

/* Copies the text (after the guard when guarded) and computes its SHA-1. */
static int script_text(struct redis_script *s, const struct embedded_file *file, bool guarded)
{
	const struct embedded_file *g = guarded ? guard_file() : NULL;
	size_t glen = g ? g->len : 0;
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;

	if (guarded && !g)
		return -ENOENT;
	s->len = glen + file->len;
	s->text = malloc(s->len + 1);
	if (!s->text)
		return -ENOMEM;
	if (glen)
		memcpy(s->text, g->text, glen);
	memcpy(s->text + glen, file->text, file->len);
	s->text[s->len] = '\0';
	if (EVP_Digest(s->text, s->len, md, &mdlen, EVP_sha1(), NULL) != 1 || mdlen != 20)
		return -EIO;
	for (unsigned i = 0; i < mdlen; i++)
		snprintf(s->sha + 2 * i, 3, "%02x", md[i]);
	return 0;
}

int redis_scripts_new(struct redis_scripts **out)
{
	*out = calloc(1, sizeof(**out));
	return *out ? 0 : -ENOMEM;
}

static void script_free(struct redis_script *s)
{
	if (!s)
		return;
	free(s->name);
	free(s->text);
	free(s);
}

void redis_scripts_free(struct redis_scripts *reg)
{
	if (!reg)
		return;
	for (size_t i = 0; i < reg->n; i++)
		script_free(reg->v[i]);
	free(reg->v);
	free(reg);
}

/* Parses and checks the header of file for flags; logs why it is refused. */
static int check_header(const struct embedded_file *file, unsigned flags, struct header *h)
{
	const char *why = NULL;

	if (parse_header(file->text, h, &why) == 0 && (flags & REDIS_SCRIPT_GUARDED) &&
	    (strcmp(h->first_key, "gen_key") != 0 || strcmp(h->first_arg, "gen") != 0))
		why = "a guarded script's header must list gen_key first in KEYS and gen first in "
		      "ARGV";
	if (!why)
		return 0;
	log_error(LOG_REDIS, "script %s refused: %s", file->name, why);
	return -EINVAL;
}

static int grow(struct redis_scripts *reg)
{
	if (reg->n < reg->cap)
		return 0;
	size_t cap = reg->cap ? 2 * reg->cap : 8;
	struct redis_script **v = realloc(reg->v, cap * sizeof(*v));
	if (!v)
		return -ENOMEM;
	reg->v = v;
	reg->cap = cap;
	return 0;
}

int redis_scripts_add(struct redis_scripts *reg, const struct embedded_file *file, unsigned flags,
		      const struct redis_script **out)
{
	struct header h;

	if (reg->frozen)
		return -EBUSY;
	if (!file || !file->name || !file->text)
		return -EINVAL;
	if (redis_scripts_find(reg, file->name))
		return -EEXIST;
	int rc = check_header(file, flags, &h);
	if (rc < 0 || (rc = grow(reg)) < 0)
		return rc;
	struct redis_script *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->reg = reg;
	s->index = reg->n;
	s->numkeys = h.keys;
	s->numargs = h.args;
	s->more_args = h.more_args;
	s->name = strdup(file->name);
	rc = s->name ? script_text(s, file, flags & REDIS_SCRIPT_GUARDED) : -ENOMEM;
	if (rc < 0) {
		script_free(s);
		return rc;
	}
	reg->v[reg->n++] = s;
	if (out)
		*out = s;
	return 0;
}

const struct redis_script *redis_scripts_find(const struct redis_scripts *reg, const char *name)
{
	for (size_t i = 0; i < reg->n; i++) {
		if (strcmp(reg->v[i]->name, name) == 0)
			return reg->v[i];
	}
	return NULL;
}

size_t redis_scripts_count(const struct redis_scripts *reg)
{
	return reg->n;
}

const struct redis_script *redis_scripts_at(const struct redis_scripts *reg, size_t i)
{
	return i < reg->n ? reg->v[i] : NULL;
}

void redis_scripts_freeze(struct redis_scripts *reg)
{
	reg->frozen = true;
}

const struct redis_scripts *redis_script_registry(const struct redis_script *s)
{
	return s->reg;
}

const char *redis_script_name(const struct redis_script *s)
{
	return s->name;
}

const char *redis_script_sha(const struct redis_script *s)
{
	return s->sha;
}

const char *redis_script_text(const struct redis_script *s, size_t *len)
{
	if (len)
		*len = s->len;
	return s->text;
}

int redis_script_numkeys(const struct redis_script *s)
{
	return s->numkeys;
}

bool redis_script_fits(const struct redis_script *s, int argc)
{
	int want = s->numkeys + s->numargs;
	return s->more_args ? argc >= want : argc == want;
}

void redis_scripts_note_call(struct redis_scripts *reg, const struct redis_script *s, bool retry)
{
	if (!reg || !s || s->index >= reg->n || reg->v[s->index] != s)
		return;
	struct redis_script_calls *c = &reg->v[s->index]->calls;
	if (retry)
		c->retries++;
	else
		c->calls++;
}

int redis_scripts_calls(const struct redis_scripts *reg, const char *name,
			struct redis_script_calls *out)
{
	const struct redis_script *s = redis_scripts_find(reg, name);

	if (!s) {
		memset(out, 0, sizeof(*out));
		return -ENOENT;
	}
	*out = s->calls;
	return 0;
}

void redis_script_get_calls(const struct redis_script *s, struct redis_script_calls *out)
{
	*out = s->calls;
}

static bool error_starts(const redisReply *reply, const char *prefix)
{
	size_t n = strlen(prefix);
	return reply && reply->type == REDIS_REPLY_ERROR && reply->len >= n &&
	       memcmp(reply->str, prefix, n) == 0;
}

bool redis_reply_is_noscript(const redisReply *reply)
{
	return error_starts(reply, "NOSCRIPT");
}

bool redis_reply_is_stale_generation(const redisReply *reply)
{
	return error_starts(reply, "STALEGEN");
}
