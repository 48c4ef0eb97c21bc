/* `dispatcher run` (run.h). */
#include "run.h"

#include "worker.h"

#include "fdlimit.h"
#include "log.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* File descriptors kept free under the soft limit for everything but the HTTP server's open
 * connections: DISPATCHER_HTTP_MAX_CONNECTIONS is capped to (soft limit - RUN_FD_RESERVED).
 *    32  the process: stdio, libuv's epoll, signal, async and EMFILE-reserve descriptors, the
 *        listener, curl's resolver and wake-up descriptors
 *     5  the PostgreSQL pool (4 ordinary connections + 1 priority)
 *     2  Redis: the gate's command connection and the hand-off subscriber
 *   256  provider connections (the dialer's connection cache: its concurrent requests)
 *    64  connections being answered 503 because the table is full (each holds a descriptor
 *        while its answer is written and for the linger after it) */
#define RUN_FD_RESERVED (32 + 5 + 2 + 256 + 64)

/* Raises the file-descriptor limit to the hard limit and returns the HTTP server's connection
 * cap under it (logged when it is below the setting). */
static unsigned http_connections(const struct settings *s)
{
	uint64_t want = (uint64_t)s->http_max_connections, cap;
	struct fdlimit l;

	if (fdlimit_raise(&l) < 0 && l.after == 0)
		return (unsigned)want; /* getrlimit failed: nothing to size under */
	cap = fdlimit_cap(&l, want, RUN_FD_RESERVED);
	if (cap < want)
		log_warn(
			LOG_MAIN,
			"DISPATCHER_HTTP_MAX_CONNECTIONS=%llu capped to %llu: the file-descriptor "
			"limit is %llu and %d are kept for PostgreSQL, Redis, the provider and 503 "
			"answers; raise the hard limit (ulimit -Hn, LimitNOFILE=) to lift it",
			(unsigned long long)want, (unsigned long long)cap,
			(unsigned long long)l.after, RUN_FD_RESERVED);
	return (unsigned)cap;
}

int run_main(const struct settings *s)
{
	char id[80];

	if (settings_check_run(s) < 0)
		return 2;
	unsigned max_connections = http_connections(s);
	if (s->worker_id) {
		snprintf(id, sizeof(id), "%s", s->worker_id);
	} else {
		char host[48] = "host";
		gethostname(host, sizeof(host) - 1);
		for (char *p = host; *p; p++) /* ids match ^[A-Za-z0-9_-]{1,64}$ */
			if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			      (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
				*p = '-';
		snprintf(id, sizeof(id), "%s-%ld", host, (long)getpid());
	}
	struct worker_options o = {
		.database_url = s->database_url,
		.redis_url = s->redis_url,
		.listen = s->listen,
		.worker_id = id,
		.provider_url = s->provider_url,
		.provider_token = s->provider_token,
		.public_url = s->public_url,
		.webhook_secret = s->webhook_secret,
		.slot_wait_ms = (uint64_t)s->batch_slot_wait_s * 1000,
		.lease_ms = (uint64_t)s->lease_s * 1000,
		.drain_ms = (uint64_t)s->drain_s * 1000,
		.provider_timeout_ms = (uint64_t)s->provider_timeout_ms,
		.lane_probe_ms = (uint64_t)s->lane_probe_s * 1000,
		.lane_rate_per_s = (uint32_t)s->lane_rate_per_s,
		.lane_burst = (uint32_t)s->lane_burst,
		.claim_page = (uint32_t)s->claim_page,
		.refresh_period_ms = (uint64_t)s->refresh_period_ms,
		.floors_ttl_ms = (uint64_t)s->floor_ttl_s * 1000,
		.reconcile_ms = (uint64_t)s->reconcile_s * 1000,
		.pg_connect_timeout_ms = (uint64_t)s->pg_connect_timeout_ms,
		.pg_query_timeout_ms = (uint64_t)s->pg_query_timeout_ms,
		.redis_connect_timeout_ms = (uint64_t)s->redis_connect_timeout_ms,
		.redis_command_timeout_ms = (uint64_t)s->redis_command_timeout_ms,
		.reconnect_min_ms = (uint64_t)s->reconnect_min_ms,
		.reconnect_max_ms = (uint64_t)s->reconnect_max_ms,
		.http_max_connections = (unsigned)s->http_max_connections,
		.http_body_timeout_ms = (uint64_t)s->http_body_timeout_ms,
		.http_body_min_rate = (uint64_t)s->http_body_min_rate,
		.role = (enum worker_role)s->role,
		.lease_sweep_s = (uint64_t)s->lease_sweep_s,
		.call_sweep_s = (uint64_t)s->call_sweep_s,
		.max_call_s = (uint64_t)s->max_call_s,
		.retention_days = (uint64_t)s->retention_days,
		.operator_listen =
			strcmp(s->operator_listen, "off") == 0 ? NULL : s->operator_listen,
		.admin_token = s->admin_token,
	};
	o.http_max_connections = max_connections;
	return worker_run(&o);
}
