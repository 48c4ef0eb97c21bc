/* A registry of Lua scripts for Redis (STYLE rule 11).
 *
 * Scripts live in .lua files compiled into the binary by common/tools/embed.py (struct
 * embedded_file). Each file starts with a header of "--" comment lines that lists its keys and
 * arguments, one line each:
 *
 *     -- incr.lua: adds one to a counter.
 *     -- KEYS: counter
 *     -- ARGV: by
 *
 * Names are identifiers ([A-Za-z_][A-Za-z0-9_]*), separated by spaces; an empty list means none;
 * ARGV may end with "..." (any number of further arguments). A file without both lines, or with
 * anything else on them, is refused at registration. The key count becomes EVALSHA's numkeys
 * and every call is checked against the header.
 *
 * A registry is filled before the connections that use it start (redis_conn_options.scripts),
 * then frozen: every (re)connect loads every script (SCRIPT LOAD) before it reports up, calls go
 * out as EVALSHA (redis_conn_evalsha()), and a NOSCRIPT answer is retried once with EVAL. The
 * SHA-1 of each script is computed here and checked against SCRIPT LOAD's answer.
 *
 * The generation guard (lost-data guard). A script registered with REDIS_SCRIPT_GUARDED gets
 * common/lua/generation_guard.lua put in front of its text. Its header must then name the
 * generation key first and the expected generation first:
 *
 *     -- KEYS: gen_key ...
 *     -- ARGV: gen ...
 *
 * and every call passes the generation key as KEYS[1] and, as ARGV[1], the generation its
 * caller built its state under (the value reported by the connection's up event). When the key
 * holds anything else, or nothing (FLUSHALL, a restart from an old snapshot or an empty one), the
 * script does nothing and answers the error "STALEGEN <found>" (redis_reply_is_stale_generation),
 * so a caller can never act on state that is gone. The owner of the state writes the key (a new
 * value each time it rebuilds the state) and re-reads it on every up.
 *
 * Not thread-safe; one registry may serve several connections of one loop.
 */
#ifndef DSP_REDIS_SCRIPT_H
#define DSP_REDIS_SCRIPT_H

#include "embedded_file.h"

#include <hiredis/hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct redis_scripts;
struct redis_script;

enum redis_script_flags {
	REDIS_SCRIPT_GUARDED = 1, /* prepend the generation guard (see above) */
};

/* Creates an empty registry. *out is owned by the caller (redis_scripts_free()), and must outlive
 * every connection it is given to. Returns 0 or -ENOMEM. */
int redis_scripts_new(struct redis_scripts **out);

/* Frees the registry and its scripts (NULL is ignored). Script handles die with it. */
void redis_scripts_free(struct redis_scripts *reg);

/* Registers file (its name and text are copied) and sets *out (may be NULL) to its handle, which
 * is owned by the registry. Returns 0; -EINVAL when the header is missing or malformed, or a
 * guarded script's header does not start with gen_key / gen (the reason is logged with the file's
 * name); -EEXIST when a script of that name is registered; -EBUSY once the registry is frozen;
 * -ENOMEM. */
int redis_scripts_add(struct redis_scripts *reg, const struct embedded_file *file, unsigned flags,
		      const struct redis_script **out);

/* The script registered under name ("incr.lua"), or NULL. */
const struct redis_script *redis_scripts_find(const struct redis_scripts *reg, const char *name);

/* Number of scripts, and the i-th in registration order (NULL past the end). */
size_t redis_scripts_count(const struct redis_scripts *reg);
const struct redis_script *redis_scripts_at(const struct redis_scripts *reg, size_t i);

/* Refuses further registrations (redis_conn_start() calls it: a script added later would not be
 * loaded by a connection that is already up). */
void redis_scripts_freeze(struct redis_scripts *reg);

/* The registry a script belongs to. */
const struct redis_scripts *redis_script_registry(const struct redis_script *s);

/* The script's file name; its SHA-1 as 40 lower-case hex digits; its full text (guard included)
 * and length. All borrowed from the registry. */
const char *redis_script_name(const struct redis_script *s);
const char *redis_script_sha(const struct redis_script *s);
const char *redis_script_text(const struct redis_script *s, size_t *len);

/* Number of keys the header lists (EVALSHA's numkeys). */
int redis_script_numkeys(const struct redis_script *s);

/* Whether argc values (keys then arguments) fit the header: argc == keys + args, or at least that
 * many when ARGV ends with "...". */
bool redis_script_fits(const struct redis_script *s, int argc);

/* How often a script was called, summed over every connection its registry serves. */
struct redis_script_calls {
	uint64_t calls;	  /* calls sent: EVALSHA, or EVAL inside MULTI (one per call made) */
	uint64_t retries; /* NOSCRIPT answers sent again as EVAL: extra round trips, not in calls */
};

/* Counts one call of s sent on a connection of reg (retry: the EVAL re-send of a call already
 * counted). redis_conn_evalsha() calls it; s must belong to reg (else ignored). */
void redis_scripts_note_call(struct redis_scripts *reg, const struct redis_script *s, bool retry);

/* The counts of the script registered under name. Returns 0, or -ENOENT (*out zeroed). */
int redis_scripts_calls(const struct redis_scripts *reg, const char *name,
			struct redis_script_calls *out);

/* The counts of s (a handle from any registry). */
void redis_script_get_calls(const struct redis_script *s, struct redis_script_calls *out);

/* Whether reply is Redis' NOSCRIPT error (the server does not have the script). */
bool redis_reply_is_noscript(const redisReply *reply);

/* Whether reply is the generation guard's refusal ("STALEGEN <found>"). */
bool redis_reply_is_stale_generation(const redisReply *reply);

#endif
