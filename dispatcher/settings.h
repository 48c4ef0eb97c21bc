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
	/* The worker (issue 9). */
	char *provider_url;	       /* PROVIDER_URL: where calls are POSTed; run refuses NULL */
	char *provider_token;	       /* PROVIDER_TOKEN: bearer token, NULL = none; never logged */
	char *webhook_secret;	       /* PROVIDER_WEBHOOK_SECRET: signs events; run refuses NULL */
	char *public_url;	       /* base URL the provider calls back (callback_url is
					 * <public_url>/provider/events); never NULL after load:
					 * default http://<listen> */
	long long lease_s;	       /* claim lease; >= 2 x slot wait + timeout + 3 s */
	long long lease_sweep_s;       /* period of the expired-lease sweep */
	long long max_call_s;	       /* a call with no terminal event ends after this */
	long long call_sweep_s;	       /* period of the maximum-duration sweep */
	long long retention_days;      /* calls, attempts, events older than this are deleted */
	long long drain_s;	       /* SIGTERM: exit within this */
	long long provider_timeout_ms; /* deadline of one provider request */
	long long lane_rate_per_s;     /* fleet-wide dials per second per org lane, 0: unpaced */
	long long lane_burst;	       /* token bucket depth of a lane */
	long long lane_probe_s;	       /* a lane stopped by 401/403 probes again after this */
	long long claim_page;	       /* contacts claimed per statement */
	long long refresh_period_ms;   /* the refresher's period */
	long long floor_ttl_s;	       /* installed floors expire after this */
	long long reconcile_s;	       /* the reconciler's period */
	long long http_max_connections; /* open connections of the HTTP server; beyond: 503 */
	long long http_body_timeout_ms; /* a request body's idle timeout */
	long long http_body_min_rate;	/* bytes/s a request body must average */
	int role;			/* enum worker_role: 0 all, 1 api, 2 worker */

	/* The operator listener (issue 10 items 7-8). */
	char *operator_listen; /* host:port of /metrics and /healthz, or "off" */
	char *admin_token;     /* required on the operator routes when set; never logged */
};

extern const struct config_setting settings_table[];
extern const size_t settings_table_len;

/* Loads the settings from the environment. On a bad value prints the message naming the
 * setting and its bound to stderr and returns DSP_ECONFIG; 0 on success. Release with
 * settings_free(). */
int settings_load(struct settings *out);

/* `dispatcher run`'s extra requirements: PROVIDER_URL and PROVIDER_WEBHOOK_SECRET set. Prints a
 * message naming the first missing setting to stderr and returns DSP_ECONFIG; 0 when complete. */
int settings_check_run(const struct settings *s);

/* Frees the strings held by s. */
void settings_free(struct settings *s);

#endif
