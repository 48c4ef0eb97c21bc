/* Structured logging: one JSON object per line on stderr.
 *
 * Levels, and what each one means:
 *   LOG_ERROR  something failed that an operator must look at (a limit could not be enforced,
 *              a service is unreachable past its retries, data was refused).
 *   LOG_WARN   something unexpected that the process recovered from by itself (a reconnect,
 *              a retried request, a lane parked by the provider).
 *   LOG_INFO   lifecycle: start, stop, migrations applied, mode changes, connections up/down.
 *   LOG_DEBUG  per-request and per-decision detail; off in production.
 *
 * The level is checked before any formatting happens, so a disabled DEBUG line costs one compare.
 * Each line carries "ts", "level", "group", "msg" and, when given, the ids that matter
 * ("org", "campaign", "contact", "call", and "conn" for the connection layers). Phone numbers and secrets never go into a log line:
 * use log_mask_phone().
 */
#ifndef DSP_LOG_H
#define DSP_LOG_H

#include <stddef.h>

enum log_level {
	LOG_ERROR = 0,
	LOG_WARN = 1,
	LOG_INFO = 2,
	LOG_DEBUG = 3,
};

enum log_group {
	LOG_MAIN,  /* process lifecycle, configuration */
	LOG_PG,	   /* PostgreSQL connection layer, migrations */
	LOG_REDIS, /* Redis connection layer */
	LOG_HTTP,  /* HTTP server and client */
	LOG_GATE,  /* slot gate, fair share, reconciler */
	LOG_DIAL,  /* dial path: lanes, retries, provider events */
	LOG_EMBED, /* embedded PostgreSQL/Redis */
	LOG_GROUP_COUNT,
};

/* Optional ids attached to a line; any field may be NULL. Borrowed for the call only. */
struct log_ids {
	const char *org;
	const char *campaign;
	const char *contact;
	const char *call;
	const char *conn; /* the connection a layer line is about: "pg[gate]", "redis[sub]" */
};

extern enum log_level log_current_level;

/* Sets the level below which lines are dropped. */
void log_set_level(enum log_level level);

/* Parses "error", "warn", "info" or "debug". Returns 0 and sets *out, or -EINVAL. */
int log_level_parse(const char *name, enum log_level *out);

/* Returns the lower-case name of a level ("info"). */
const char *log_level_name(enum log_level level);

/* Formats and writes one line. Use the LOG_* macros, which check the level first. */
void log_emit(enum log_level level, enum log_group group, const struct log_ids *ids,
	      const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Writes "***1234" (the last four digits of phone) into buf; always NUL-terminates.
 * Returns buf. */
char *log_mask_phone(const char *phone, char *buf, size_t len);

#define LOG_AT(level, group, ids, ...)                                                             \
	do {                                                                                       \
		if ((level) <= log_current_level)                                                  \
			log_emit((level), (group), (ids), __VA_ARGS__);                            \
	} while (0)

#define log_error(group, ...) LOG_AT(LOG_ERROR, group, NULL, __VA_ARGS__)
#define log_warn(group, ...)  LOG_AT(LOG_WARN, group, NULL, __VA_ARGS__)
#define log_info(group, ...)  LOG_AT(LOG_INFO, group, NULL, __VA_ARGS__)
#define log_debug(group, ...) LOG_AT(LOG_DEBUG, group, NULL, __VA_ARGS__)

/* A line about one connection of a layer: name is its label ("pg[gate]"), written as "conn". */
#define LOG_CONN(level, group, name, ...)                                                          \
	LOG_AT(level, group, (&(const struct log_ids){ .conn = (name) }), __VA_ARGS__)

#endif
