/* The provider stub (SPEC D0, D6): a telephony provider that speaks the dial contract, places
 * pretend calls, posts signed status events back, throttles and fails on demand, and keeps the
 * ground truth the benchmarks and tests compare against. Loopback only.
 *
 * Routes (all bodies JSON):
 *   POST /calls          the dial. Idempotency-Key required (400 without). First time: 201
 *                        {"call_id":"pc_<n>"}; a key seen before: 200 with the same call_id,
 *                        nothing placed (a replay). Replays are looked up before the
 *                        window, forced statuses and injected faults, and do not count
 *                        against the window (a seen key always answers 200). A second key for
 *                        the same (contact_id, attempt) is placed and counted as a duplicate.
 *                        400 bad JSON, 422 a missing field, a "to" that is not +E.164, or a
 *                        callback_url that is not plain http to loopback (parsed by libcurl's
 *                        URL API: no user info; host 127.0.0.0/8, [::1] or localhost, which
 *                        is pinned to 127.0.0.1). 401 when --token is set and the bearer
 *                        differs. 503 once the stub is closing (also the control routes).
 *   GET  /stats          the ground truth (see stub_stats_json()).
 *   POST /control/end    {"idempotency_key":k} | {"call_id":id} | {"org_id":o} | {"all":true},
 *                        optional "status": ends those live calls now (their terminal event is
 *                        sent); answers {"ended":n}. The way tests end calls in hold mode.
 *   POST /control/org    {"org_id":o | "*", <org settings, as in the JSON config>}: changes one
 *                        organisation's throttling/fault settings ("*": the defaults) at once.
 *   POST /control/hold   {"hold":true|false}: calls placed from now on wait for /control/end.
 *   POST /control/handoff {"org_id":o,"lines":L}: (re)starts the hand-off measurement of o, an
 *                        organisation of L lines (0: off), forgetting earlier samples (P2,
 *                        stub_handoff.h: terminal event → next call placed for the org, only
 *                        while all its lines are busy).
 *   GET  /handoff        {"orgs":{o:{"lines","samples","p50_us","p90_us","p99_us","max_us",
 *                        "waiting","dropped","lost"}}} for each armed organisation.
 *   GET  /healthz        200 {"ok":true}.
 *
 * Every draw is a hash of (seed, idempotency key, purpose): the outcome, the duration, and each
 * event's faults; reruns with the same seed and keys see the same calls. The 5xx and slow draws
 * also hash the key's request count, so a re-send of the same key can succeed.
 *
 * Events of a call: "ringing" after ring_ms, "answered" (completed calls only) half-way, then the
 * outcome at the drawn duration (in hold mode: when told). `sequence` counts from 1 per call.
 * Each event may be dropped, duplicated, delayed by reorder_ms (so a later one overtakes it),
 * and the ringing event may be sent before the dial's 201 (early), by their rates. Failed posts
 * are retried event_retries times (200 ms doubling), then counted as failed.
 */
#ifndef DSP_STUB_H
#define DSP_STUB_H

#include <stdbool.h>
#include <stdint.h>

#include <uv.h>

enum stub_outcome {
	STUB_COMPLETED = 0,
	STUB_NO_ANSWER,
	STUB_BUSY,
	STUB_FAILED,
	STUB_CANCELED,
	STUB_OUTCOMES,
};

enum stub_window { STUB_WINDOW_FIXED = 0, STUB_WINDOW_SLIDING };

enum stub_throttle {
	STUB_THROTTLE_RETRY_AFTER = 0,	/* 429 + Retry-After: <seconds> */
	STUB_THROTTLE_RETRY_AFTER_DATE, /* 429 + Retry-After: <HTTP-date> */
	STUB_THROTTLE_NO_HEADER,	/* 429 without Retry-After */
	STUB_THROTTLE_BODY,		/* 200 {"error":"throttled",...} */
};

/* Throttling and faults, per organisation (or the defaults). */
struct stub_org_config {
	unsigned limit;		     /* dials per window, 0 = unlimited [0] */
	uint64_t window_ms;	     /* [1000] */
	enum stub_window window;     /* [fixed] */
	enum stub_throttle throttle; /* [retry_after] */
	unsigned fail_pct;	     /* % of dials answered fail_status without placing [0] */
	int fail_status;	     /* [503] */
	unsigned fail_placed_pct;    /* % of first dials placed but answered fail_status [0] */
	unsigned slow_pct;	     /* % of dials answered after slow_ms [0] */
	uint64_t slow_ms;	     /* [0] */
	int force_status; /* answer every dial with this status (401, 403, 400...) [0 = off] */
};

struct stub_config {
	const char *host;		 /* must be a loopback address ["127.0.0.1"] */
	int port;			 /* 0 = any free port [0] */
	uint64_t seed;			 /* [1] */
	unsigned weights[STUB_OUTCOMES]; /* outcome weights [70 15 5 5 5] */
	uint64_t dur_min_ms, dur_max_ms; /* call duration, uniform [1000, 1000] */
	uint64_t ring_ms;   /* time to "ringing" (capped at a quarter of the duration) [20] */
	bool hold;	    /* calls stay live until /control/end [false] */
	const char *secret; /* webhook signing secret ["stub-secret"] */
	const char *token;  /* required bearer token, NULL = none [NULL] */
	unsigned dup_pct, reorder_pct, drop_pct, early_pct; /* event faults, % [0] */
	uint64_t reorder_ms;				    /* delay of a reordered event [200] */
	unsigned event_retries;				    /* re-posts of a failed event [3] */
	uint64_t event_timeout_ms;			    /* per event post [2000] */
	struct stub_org_config defaults;
};

struct stub;

typedef void (*stub_close_cb)(struct stub *s, void *data);

/* Fills *c with the defaults in brackets. */
void stub_config_defaults(struct stub_config *c);

/* Parses command-line flags into *c (after stub_config_defaults), including --config FILE (a
 * JSON object with the same settings, names with '_', plus an "orgs" object of per-org
 * settings). Returns 0, 1 when --help was printed, or -EINVAL with a message on stderr. String
 * settings point into argv or into the parsed config, which *json_out receives (a cJSON tree,
 * or NULL; the caller applies its orgs with stub_config_orgs() and frees it with
 * cJSON_Delete() after the stub is gone). */
int stub_config_parse(struct stub_config *c, int argc, char **argv, void **json_out);

/* Parses one org's settings from a JSON object into *o (fields not given stay). Returns 0 or
 * -EINVAL. `json` is a cJSON object pointer (void * keeps cJSON out of this header). */
int stub_org_from_json(struct stub_org_config *o, const void *json);

/* Starts the stub on loop. cfg is copied (its strings are borrowed for the stub's life).
 * Returns 0 and *out, or a negative errno (-EINVAL for a non-loopback host). */
int stub_new(uv_loop_t *loop, const struct stub_config *cfg, struct stub **out);

/* Applies per-org settings ("*" = the defaults). Returns 0 or -ENOMEM. */
int stub_set_org(struct stub *s, const char *org, const struct stub_org_config *o);

/* Applies the "orgs" object of a config tree from stub_config_parse (NULL: nothing). Returns 0
 * or -EINVAL. */
int stub_config_orgs(struct stub *s, const void *json);

/* Returns the bound port. */
int stub_port(const struct stub *s);

/* Returns the ground truth as a JSON text (malloc'ed; the caller frees it): counters of
 * requests, calls and events, per org and campaign, and connections_accepted (TCP connections
 * the stub's server accepted: a client that keeps its connection alive shows as 1). The live
 * timeline: now_ms (the stub's monotonic clock, ms), first_dial_ms (that clock when the first
 * call was placed, 0 before), and live_ms, the integral of live calls over time up to now_ms in
 * call-milliseconds, in total, per org and per campaign (a difference of two snapshots is the
 * line-time used between them). */
char *stub_stats_json(struct stub *s);

/* Stops listening, ends nothing (live calls stay counted), cancels pending event posts and
 * timers, frees everything, then calls cb (optional) from the loop. Requests already being
 * received are still answered: dials and control requests with 503 "closing", so nothing new
 * starts; every call timer is closed before its call is freed. */
void stub_close(struct stub *s, stub_close_cb cb, void *data);

/* Name of an outcome as it appears in events ("no-answer"). */
const char *stub_outcome_name(enum stub_outcome o);

#endif
