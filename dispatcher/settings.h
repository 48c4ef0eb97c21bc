/* The dispatcher's configuration: one table (settings.c), one immutable struct. */
#ifndef DSP_SETTINGS_H
#define DSP_SETTINGS_H

#include "config.h"

struct settings {
	char *database_url;		    /* libpq connection string or URI; NULL = not set */
	char *redis_url;		    /* redis://host:port, or unix:///path/to/socket */
	char *listen;			    /* host:port of the HTTP API */
	int log_level;			    /* enum log_level */
	char *worker_id;		    /* this process's name in leases; NULL = host:pid */
	long long batch_slot_wait_s;	    /* C9: how long a claimed contact waits for a slot */
	long long pg_connect_timeout_ms;    /* connect deadline of the PostgreSQL layer */
	long long pg_query_timeout_ms;	    /* per-statement deadline */
	long long redis_connect_timeout_ms; /* connect deadline of the Redis layer */
	long long redis_command_timeout_ms; /* per-command deadline */
	long long reconnect_min_ms;	    /* first reconnect delay (before jitter) */
	long long reconnect_max_ms;	    /* cap on the reconnect delay */
};

extern const struct config_setting settings_table[];
extern const size_t settings_table_len;

/* Loads the settings from the environment. On a bad value prints the message naming the
 * setting and its bound to stderr and returns DSP_ECONFIG; 0 on success. Release with
 * settings_free(). */
int settings_load(struct settings *out);

/* Frees the strings held by s. */
void settings_free(struct settings *s);

#endif
