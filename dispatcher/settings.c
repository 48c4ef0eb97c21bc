#include "settings.h"

#include "error.h"

#include <stddef.h>
#include <stdio.h>

#define OFF(field) offsetof(struct settings, field)

/* name, type, min, max, default, choices, unit, runtime, offset, help */
const struct config_setting settings_table[] = {
	{ "DATABASE_URL", CONFIG_STRING, 0, 0, NULL, NULL, NULL, false, OFF(database_url),
	  "PostgreSQL connection string or URI. Unset: commands that need it refuse to start "
	  "(demo and tests start a private server)." },
	{ "REDIS_URL", CONFIG_STRING, 0, 0, NULL, NULL, NULL, false, OFF(redis_url),
	  "redis://host:port or unix:///path/to/redis.sock. Unset: as DATABASE_URL." },
	{ "DISPATCHER_LISTEN", CONFIG_STRING, 0, 0, "127.0.0.1:8080", NULL, NULL, false,
	  OFF(listen), "Address of the HTTP API (host:port)." },
	{ "DISPATCHER_LOG_LEVEL", CONFIG_ENUM, 0, 0, "info", "error|warn|info|debug", NULL, false,
	  OFF(log_level), "Lowest level written to stderr (JSON lines)." },
	{ "DISPATCHER_WORKER_ID", CONFIG_STRING, 0, 0, NULL, NULL, NULL, false, OFF(worker_id),
	  "This worker's name in leases and logs. Unset: hostname:pid." },
	{ "BATCH_DISPATCH_SLOT_WAIT_SECONDS", CONFIG_INT, 1, 300, "15", NULL, "s", false,
	  OFF(batch_slot_wait_s),
	  "How long a claimed batch contact waits for a line before going back to the queue "
	  "(C9)." },
	{ "DISPATCHER_PG_CONNECT_TIMEOUT_MS", CONFIG_INT, 100, 60000, "5000", NULL, "ms", false,
	  OFF(pg_connect_timeout_ms), "Deadline for one PostgreSQL connection attempt." },
	{ "DISPATCHER_PG_QUERY_TIMEOUT_MS", CONFIG_INT, 10, 600000, "10000", NULL, "ms", false,
	  OFF(pg_query_timeout_ms),
	  "Deadline for one statement; past it the connection is dropped and re-made." },
	{ "DISPATCHER_REDIS_CONNECT_TIMEOUT_MS", CONFIG_INT, 100, 60000, "2000", NULL, "ms", false,
	  OFF(redis_connect_timeout_ms), "Deadline for one Redis connection attempt." },
	{ "DISPATCHER_REDIS_COMMAND_TIMEOUT_MS", CONFIG_INT, 10, 60000, "1000", NULL, "ms", false,
	  OFF(redis_command_timeout_ms),
	  "Deadline for one Redis command; past it the connection is dropped and re-made." },
	{ "DISPATCHER_RECONNECT_MIN_MS", CONFIG_INT, 10, 60000, "100", NULL, "ms", false,
	  OFF(reconnect_min_ms), "First reconnect delay; doubles per failure, with jitter." },
	{ "DISPATCHER_RECONNECT_MAX_MS", CONFIG_INT, 100, 600000, "5000", NULL, "ms", false,
	  OFF(reconnect_max_ms), "Cap on the reconnect delay." },
};

const size_t settings_table_len = sizeof(settings_table) / sizeof(settings_table[0]);

int settings_load(struct settings *out)
{
	char err[256];
	int rc = config_load(settings_table, settings_table_len, out, NULL, NULL, err, sizeof(err));

	if (rc < 0) {
		fprintf(stderr, "dispatcher: configuration error: %s\n", err);
		return rc;
	}
	if (out->reconnect_max_ms < out->reconnect_min_ms) {
		fprintf(stderr,
			"dispatcher: configuration error: DISPATCHER_RECONNECT_MAX_MS=%lld must "
			"not be "
			"below DISPATCHER_RECONNECT_MIN_MS=%lld\n",
			out->reconnect_max_ms, out->reconnect_min_ms);
		settings_free(out);
		return DSP_ECONFIG;
	}
	return 0;
}

void settings_free(struct settings *s)
{
	config_free(settings_table, settings_table_len, s);
}
