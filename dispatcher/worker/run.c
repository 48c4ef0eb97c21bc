/* `dispatcher run` (run.h). */
#include "run.h"

#include "worker.h"

#include <stdio.h>
#include <unistd.h>

int run_main(const struct settings *s)
{
	char id[80];

	if (settings_check_run(s) < 0)
		return 2;
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
		.lease_sweep_s = (uint64_t)s->lease_sweep_s,
		.call_sweep_s = (uint64_t)s->call_sweep_s,
		.max_call_s = (uint64_t)s->max_call_s,
		.retention_days = (uint64_t)s->retention_days,
	};
	return worker_run(&o);
}
