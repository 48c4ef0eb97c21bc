#include "settings.h"

#include "addr.h"
#include "error.h"
#include "ident.h"
#include "redis_conn.h"

#include <libpq-fe.h>

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* DISPATCHER_LEASE_SECONDS >= 2 x slot wait + provider timeout + this: the call-row write's
 * deadline (GATE_PG_WRITE_DEADLINE_MS, 2 s) and the dialer's send fence (1 s, dial_lease.c). */
#define LEASE_MARGIN_MS 3000

#define OFF(field) offsetof(struct settings, field)

/* name, type, min, max, default, choices, unit, runtime, offset, help */
const struct config_setting settings_table[] = {
	{ "DATABASE_URL", CONFIG_STRING, 0, 0, NULL, NULL, NULL, false, OFF(database_url),
	  "PostgreSQL connection string or URI. Unset: commands that need it refuse to start "
	  "(demo and tests start a private server)." },
	{ "REDIS_URL", CONFIG_STRING, 0, 0, NULL, NULL, NULL, false, OFF(redis_url),
	  "redis://[user[:password]@]host[:port][/db] or unix:///path/to/redis.sock[?db=N] "
	  "(user and password percent-encoded). Unset: as DATABASE_URL." },
	{ "DISPATCHER_LISTEN", CONFIG_STRING, 0, 0, "127.0.0.1:8080", NULL, NULL, false,
	  OFF(listen),
	  "Address of the HTTP API: IPv4:port or [IPv6]:port (numeric; port 1..65535)." },
	{ "DISPATCHER_LOG_LEVEL", CONFIG_ENUM, 0, 0, "info", "error|warn|info|debug", NULL, false,
	  OFF(log_level), "Lowest level written to stderr (JSON lines)." },
	{ "DISPATCHER_WORKER_ID", CONFIG_STRING, 0, 0, NULL, NULL, NULL, false, OFF(worker_id),
	  "This worker's name in leases, Redis keys and logs: letters, digits, _ and -, at most "
	  "64. "
	  "Unset: hostname-pid." },
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
	{ "PROVIDER_URL", CONFIG_STRING, 0, 0, NULL, NULL, NULL, false, OFF(provider_url),
	  "http(s) URL the worker POSTs calls to. Unset: `dispatcher run` refuses to start." },
	{ "PROVIDER_TOKEN", CONFIG_STRING, 0, 0, NULL, NULL, NULL, false, OFF(provider_token),
	  "Bearer token sent to the provider; never logged. Unset: no Authorization header." },
	{ "PROVIDER_WEBHOOK_SECRET", CONFIG_STRING, 0, 0, NULL, NULL, NULL, false,
	  OFF(webhook_secret),
	  "Secret the provider signs its events with. Unset: `dispatcher run` refuses to start." },
	{ "DISPATCHER_PUBLIC_URL", CONFIG_STRING, 0, 0, NULL, NULL, NULL, false, OFF(public_url),
	  "http(s) base URL the provider calls back (events go to <it>/provider/events). Unset: "
	  "http://DISPATCHER_LISTEN." },
	{ "DISPATCHER_LEASE_SECONDS", CONFIG_INT, 5, 3600, "60", NULL, "s", false, OFF(lease_s),
	  "Lease of a claimed contact; at least 2 x the slot wait + the provider timeout + 3 s "
	  "(else `run` refuses to start)." },
	{ "DISPATCHER_LEASE_SWEEP_SECONDS", CONFIG_INT, 1, 600, "5", NULL, "s", false,
	  OFF(lease_sweep_s),
	  "Period of the sweep returning contacts whose lease expired without a call." },
	{ "DISPATCHER_MAX_CALL_SECONDS", CONFIG_INT, 60, 86400, "7200", NULL, "s", false,
	  OFF(max_call_s),
	  "A call with no terminal event is ended and its slots freed after this." },
	{ "DISPATCHER_CALL_SWEEP_SECONDS", CONFIG_INT, 1, 3600, "30", NULL, "s", false,
	  OFF(call_sweep_s), "Period of the maximum-call-duration sweep." },
	{ "DISPATCHER_RETENTION_DAYS", CONFIG_INT, 1, 3650, "30", NULL, "days", false,
	  OFF(retention_days),
	  "Calls, dial attempts and events older than this are deleted (by one elected worker)." },
	{ "DISPATCHER_DRAIN_SECONDS", CONFIG_INT, 1, 600, "30", NULL, "s", false, OFF(drain_s),
	  "On SIGTERM: stop claiming, finish in-flight requests, exit within this." },
	{ "DISPATCHER_PROVIDER_TIMEOUT_MS", CONFIG_INT, 100, 120000, "10000", NULL, "ms", false,
	  OFF(provider_timeout_ms), "Deadline of one request to the provider." },
	{ "DISPATCHER_LANE_PROBE_SECONDS", CONFIG_INT, 1, 86400, "300", NULL, "s", false,
	  OFF(lane_probe_s), "A lane stopped by a 401/403 probes the provider again after this." },
	{ "DISPATCHER_LANE_RATE_PER_S", CONFIG_INT, 0, 1000000, "0", NULL, "1/s", false,
	  OFF(lane_rate_per_s),
	  "Dials per second per organisation to the provider, for the whole fleet (a token bucket "
	  "in Redis); 0: unpaced. Set it to the provider's per-account rate." },
	{ "DISPATCHER_LANE_BURST", CONFIG_INT, 1, 100000, "10", NULL, NULL, false, OFF(lane_burst),
	  "Depth of the lane's token bucket (dials sent at once after a pause)." },
	{ "DISPATCHER_CLAIM_PAGE", CONFIG_INT, 1, 1000, "50", NULL, NULL, false, OFF(claim_page),
	  "Contacts claimed per statement." },
	{ "DISPATCHER_REFRESH_PERIOD_MS", CONFIG_INT, 50, 60000, "1000", NULL, "ms", false,
	  OFF(refresh_period_ms), "Period of the elected refresher (floors and limits)." },
	{ "DISPATCHER_FLOOR_TTL_SECONDS", CONFIG_INT, 1, 3600, "10", NULL, "s", false,
	  OFF(floor_ttl_s),
	  "Installed floors expire after this unless renewed; must exceed the refresh period." },
	{ "DISPATCHER_RECONCILE_SECONDS", CONFIG_INT, 1, 10, "10", NULL, "s", false,
	  OFF(reconcile_s),
	  "Period of the elected reconciler (gate against PostgreSQL); at most 10 s (SPEC C11)." },
	{ "DISPATCHER_HTTP_MAX_CONNECTIONS", CONFIG_INT, 16, 1000000, "1024", NULL, NULL, false,
	  OFF(http_max_connections),
	  "Open connections of the HTTP server (capped under the file-descriptor limit); beyond "
	  "it: 503." },
	/* review finding: the body timeout is an idle timeout, bounded by a minimum rate */
	{ "DISPATCHER_HTTP_BODY_TIMEOUT_MS", CONFIG_INT, 1000, 3600000, "30000", NULL, "ms", false,
	  OFF(http_body_timeout_ms),
	  "Idle timeout of a request body, as nginx's client_body_timeout: no body bytes for this "
	  "long: 408 (each read of body bytes starts it again)." },
	{ "DISPATCHER_HTTP_BODY_MIN_RATE", CONFIG_INT, 1, 1000000000, "16384", NULL, "B/s", false,
	  OFF(http_body_min_rate),
	  "Minimum average rate of a request body, as Apache's MinRate: reading it may take at "
	  "most the body timeout + bytes received / this rate, else 408 (a trickle is cut)." },
	{ "DISPATCHER_ROLE", CONFIG_ENUM, 0, 0, "all", "all|api|worker", NULL, false, OFF(role),
	  "What `dispatcher run` does: all = serve the API and dispatch batches; api = serve the "
	  "API only (no batch contact is claimed); worker = dispatch only (no /v2 or /api routes). "
	  "Every role accepts provider events; the process that accepts a direct dial places it." },

	/* --- operator listener (issue 10 items 7-8) --- */
	{ "DISPATCHER_OPERATOR_LISTEN", CONFIG_STRING, 0, 0, "127.0.0.1:9464", NULL, NULL, false,
	  OFF(operator_listen),
	  "Address of the operator listener (GET /metrics, /healthz, /status: the status page), as "
	  "DISPATCHER_LISTEN, or off. Off loopback it needs DISPATCHER_ADMIN_TOKEN (refused at "
	  "start without it); a port "
	  "already taken (a second worker of the host) is logged and the worker runs without "
	  "it." },
	{ "DISPATCHER_ADMIN_TOKEN", CONFIG_STRING, 0, 0, NULL, NULL, NULL, false, OFF(admin_token),
	  "When set, the operator routes need Authorization: Bearer <it> (compared in constant "
	  "time; 401 otherwise); never logged. Unset: the listener's address is the only guard." },
	/* --- end operator listener --- */
};

const size_t settings_table_len = sizeof(settings_table) / sizeof(settings_table[0]);

/* Writes "NAME=\"value\" <what>" into err (the value escaped) and returns DSP_ECONFIG. */
static int refuse(char *err, size_t len, const char *name, const char *value, const char *what)
{
	char shown[CONFIG_SHOWN_MAX];

	config_escape(value, shown, sizeof(shown));
	snprintf(err, len, "%s=\"%s\" %s", name, shown, what);
	return DSP_ECONFIG;
}

static int check_database_url(const char *url, char *err, size_t len)
{
	char *msg = NULL, what[160];
	PQconninfoOption *opts = PQconninfoParse(url, &msg);

	if (opts) {
		PQconninfoFree(opts);
		return 0;
	}
	snprintf(what, sizeof(what), "is not a PostgreSQL connection string or URI (%.*s)",
		 msg ? (int)strcspn(msg, "\n") : 14, msg ? msg : "out of memory");
	PQfreemem(msg);
	return refuse(err, len, "DATABASE_URL", url, what);
}

static int check_http_url(const char *name, const char *url, char *err, size_t len)
{
	char why[64], what[96];

	if (addr_http_url_check(url, why, sizeof(why)) == 0)
		return 0;
	snprintf(what, sizeof(what), "is not an http(s) URL: %s", why);
	return refuse(err, len, name, url, what);
}

/* The text settings: each must parse as what it names. */
static int check_text(struct settings *s, char *err, size_t len)
{
	char host[64];
	int port;
	struct redis_url r;

	if (addr_hostport_parse(s->listen, host, sizeof(host), &port) < 0)
		return refuse(err, len, "DISPATCHER_LISTEN", s->listen,
			      "is not host:port (an IPv4 address, or an IPv6 one in brackets as "
			      "[::1]:8080; port 1 to 65535)");
	if (strcmp(s->operator_listen, "off") != 0 &&
	    addr_hostport_parse(s->operator_listen, host, sizeof(host), &port) < 0)
		return refuse(err, len, "DISPATCHER_OPERATOR_LISTEN", s->operator_listen,
			      "is not host:port (as DISPATCHER_LISTEN) or off");
	/* /metrics and /healthz answer anyone who reaches the listener when no token is set: off
	 * loopback, a token is required (dispatcher/worker/operator.h). */
	if (strcmp(s->operator_listen, "off") != 0 && !addr_is_loopback(host) &&
	    !(s->admin_token && s->admin_token[0]))
		return refuse(err, len, "DISPATCHER_OPERATOR_LISTEN", s->operator_listen,
			      "is not a loopback address and DISPATCHER_ADMIN_TOKEN is unset: set "
			      "the token, or listen on 127.0.0.1 / [::1], or off");
	if (s->redis_url && redis_url_parse(s->redis_url, &r) < 0)
		return refuse(err, len, "REDIS_URL", s->redis_url,
			      "is not redis://[user[:password]@]host[:port][/db] or "
			      "unix:///path[?db=N]");
	if (s->database_url && check_database_url(s->database_url, err, len) < 0)
		return DSP_ECONFIG;
	if (s->provider_url && check_http_url("PROVIDER_URL", s->provider_url, err, len) < 0)
		return DSP_ECONFIG;
	if (s->public_url) {
		if (check_http_url("DISPATCHER_PUBLIC_URL", s->public_url, err, len) < 0)
			return DSP_ECONFIG;
		size_t n = strlen(s->public_url); /* the callback URL appends "/provider/events" */
		while (n > 0 && s->public_url[n - 1] == '/')
			s->public_url[--n] = '\0';
	}
	/* It names leases, the hand-off's Redis keys and the elections: the worker's parts refuse
	 * anything else (they used to fail the start with "cannot build: Invalid argument"). */
	if (s->worker_id && !ident_ok(s->worker_id))
		return refuse(err, len, "DISPATCHER_WORKER_ID", s->worker_id,
			      "is not 1 to 64 letters, digits, _ or -");
	return 0;
}

/* The bounds that span settings. Writes the message into err and returns DSP_ECONFIG. */
static int cross_check(const struct settings *s, char *err, size_t len)
{
	if (s->reconnect_max_ms < s->reconnect_min_ms) {
		snprintf(err, len,
			 "DISPATCHER_RECONNECT_MAX_MS=%lld must not be below "
			 "DISPATCHER_RECONNECT_MIN_MS=%lld",
			 s->reconnect_max_ms, s->reconnect_min_ms);
		return DSP_ECONFIG;
	}
	/* A claimed contact waits for a slot twice (the claimed set, then the waiting admission),
	 * its call row is written, then it dials: the dialer assumes its lease has
	 * lease - 2 x slot wait - the write deadline left (dispatcher/worker/dial.h, "Leases"), and
	 * its first request must fit in that whole (timeout + the send fence's 1 s). */
	long long need = 2 * s->batch_slot_wait_s * 1000 + s->provider_timeout_ms + LEASE_MARGIN_MS;
	if (s->lease_s * 1000 < need) {
		snprintf(err, len,
			 "DISPATCHER_LEASE_SECONDS=%lld must be at least %lld s: 2 x "
			 "BATCH_DISPATCH_SLOT_WAIT_SECONDS=%lld plus "
			 "DISPATCHER_PROVIDER_TIMEOUT_MS=%lld plus %d ms",
			 s->lease_s, (need + 999) / 1000, s->batch_slot_wait_s,
			 s->provider_timeout_ms, LEASE_MARGIN_MS);
		return DSP_ECONFIG;
	}
	if (s->floor_ttl_s * 1000 <= s->refresh_period_ms) {
		snprintf(err, len,
			 "DISPATCHER_FLOOR_TTL_SECONDS=%lld must exceed "
			 "DISPATCHER_REFRESH_PERIOD_MS=%lld",
			 s->floor_ttl_s, s->refresh_period_ms);
		return DSP_ECONFIG;
	}
	return 0;
}

int settings_load(struct settings *out)
{
	char err[512];
	int rc = config_load(settings_table, settings_table_len, out, NULL, NULL, err, sizeof(err));

	if (rc < 0) {
		fprintf(stderr, "dispatcher: configuration error: %s\n", err);
		return rc;
	}
	if (check_text(out, err, sizeof(err)) < 0 || cross_check(out, err, sizeof(err)) < 0) {
		fprintf(stderr, "dispatcher: configuration error: %s\n", err);
		settings_free(out);
		return DSP_ECONFIG;
	}
	if (!out->public_url) {
		size_t n = strlen(out->listen) + sizeof("http://");
		out->public_url = malloc(n);
		if (!out->public_url) {
			settings_free(out);
			return -ENOMEM;
		}
		snprintf(out->public_url, n, "http://%s", out->listen);
	}
	return 0;
}

int settings_check_run(const struct settings *s)
{
	const char *missing = !s->provider_url	   ? "PROVIDER_URL"
			      : !s->webhook_secret ? "PROVIDER_WEBHOOK_SECRET"
			      : !s->database_url   ? "DATABASE_URL"
			      : !s->redis_url	   ? "REDIS_URL"
						   : NULL;

	if (!missing)
		return 0;
	fprintf(stderr, "dispatcher: configuration error: %s is not set (needed by `run`)\n",
		missing);
	return DSP_ECONFIG;
}

void settings_free(struct settings *s)
{
	config_free(settings_table, settings_table_len, s);
}
