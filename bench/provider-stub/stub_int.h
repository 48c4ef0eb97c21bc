/* The stub's internal state, shared by stub.c (HTTP side, accounting), stub_events.c (event
 * timelines and posting) and stub_config.c. */
#ifndef DSP_STUB_INT_H
#define DSP_STUB_INT_H

#include "http_client.h"
#include "http_server.h"
#include "list.h"
#include "stub.h"
#include "stub_handoff.h"
#include "stub_map.h"

struct stub_org {
	struct stub_org_config cfg;
	bool has_cfg; /* cfg set for this org; else the defaults apply */
	uint64_t live, max_live, placed, requests, throttled_429, throttled_body, errors_5xx;
	uint64_t live_ms, live_at; /* integral of live over time (call-ms) up to live_at (uv_now) */
	int64_t win;		   /* current window index */
	unsigned cur, prev;	   /* dials counted in the current and previous window */
	struct stub_handoff handoff; /* P2, armed by POST /control/handoff */
};

struct stub_campaign {
	uint64_t live, max_live, placed;
	uint64_t live_ms, live_at; /* as in struct stub_org */
};

struct stub_call {
	struct stub *stub;
	char *key, *call_id, *org, *campaign;
	char *callback_url;
	enum stub_outcome outcome;
	uint64_t duration_ms;
	uint64_t placed_at; /* uv_now at placement */
	unsigned seq;	    /* last event sequence used */
	int stage;	    /* 0 placed, 1 ringing, 2 answered, 3 ended */
	bool live;
	bool held;	  /* waits for /control/end before its outcome */
	bool timer_open;  /* timer initialised and not yet closed */
	uv_timer_t timer; /* next event of the timeline */
};

struct stub_event {
	struct stub *stub;
	struct list_node node; /* in stub->events */
	uv_timer_t timer;      /* delay (reorder) and retry back-off */
	struct http_client_call *inflight;
	char *url, *body;
	size_t len;
	unsigned tries;
	struct http_request *reply_req; /* early event: the dial waiting for it */
	char *reply_body;
};

/* A dial answered later (slow mode). */
struct stub_delayed {
	struct stub *stub;
	struct list_node node; /* in stub->delayed */
	uv_timer_t timer;
	struct http_request *req;
	int status;
	char *body;
	char retry_after[64];
};

struct stub {
	uv_loop_t *loop;
	struct stub_config cfg;
	struct http_server *server;
	struct http_client *client;
	struct map calls;	  /* key -> struct stub_call */
	struct map orgs;	  /* org id -> struct stub_org */
	struct map campaigns;	  /* campaign id -> struct stub_campaign */
	struct map attempts;	  /* "contact|attempt" -> first key (strdup) */
	struct map key_tries;	  /* key -> request count (uintptr_t) */
	struct map call_ids;	  /* call id -> struct stub_call (borrowed) */
	struct list_node events;  /* event posts not finished (struct stub_event) */
	struct list_node delayed; /* dials answered later (struct stub_delayed) */
	char *cb_in, *cb_out;	  /* the last accepted callback_url and its checked form (owned) */
	uint64_t next_id;
	uint64_t requests, placed, replays, duplicates, throttled_429, throttled_body;
	uint64_t errors_5xx, rejected, live, max_live;
	uint64_t live_ms, live_at; /* as in struct stub_org, over every call */
	uint64_t first_dial_at;	   /* uv_now of the first call placed, 0 before */
	uint64_t events_sent, events_failed, events_dropped, events_duplicated;
	uint64_t events_reordered, events_early;
	uint64_t accepted_at_close; /* the server's accepted connections, once it is gone */
	uint64_t outcomes[STUB_OUTCOMES];
	int closing_handles; /* uv handles still closing */
	bool closing, server_closed, client_closed;
	stub_close_cb close_cb;
	void *close_data;
};

/* stub.c */
struct stub_org *stub_org_get(struct stub *s, const char *id); /* created when missing; NULL: OOM */
void stub_handle_dial(struct http_request *req, void *data);   /* POST /calls */
void stub_calls_free(struct stub *s);
void stub_delayed_flush(struct stub *s);
uint64_t stub_draw(const struct stub *s, const char *key, unsigned purpose);
void stub_call_ended(struct stub_call *c);
/* The integral of live up to now (call-ms): *live_ms plus live x (now - live_at). */
uint64_t stub_live_ms(uint64_t live_ms, uint64_t live_at, uint64_t live, uint64_t now);
void stub_handle_closed(struct stub *s);
const struct stub_org_config *stub_org_cfg(struct stub *s, const char *org);
/* Counts a dial of org o at now (ms): returns true when it is within cfg's window (fixed, or
 * sliding: the previous window weighted by the share of it still inside the last window_ms).
 * Otherwise counts nothing and sets *retry_s to the seconds until the current window ends (at
 * least 1). Pure arithmetic on o's counters, exported for the tests. */
bool stub_window_allows(struct stub_org *o, const struct stub_org_config *cfg, uint64_t now,
			uint64_t *retry_s);

/* stub_events.c */
void stub_call_start(struct stub_call *c, struct http_request *early_req, char *reply);
void stub_call_end(struct stub_call *c, int status_override);
void stub_events_close(struct stub *s);
int stub_outcome_parse(const char *name);

#endif
