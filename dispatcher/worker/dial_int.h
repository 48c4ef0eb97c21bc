/* The dialer's insides, shared by dial.c and dial_fleet.c only (dial.h is the public face). */
#ifndef DSP_WORKER_DIAL_INT_H
#define DSP_WORKER_DIAL_INT_H

#include "dial.h"
#include "list.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define LANE_ORG_MAX 65
#define TAKE_MAX     64	  /* tokens one fleet take asks for (the calls queued, up to this) */
#define LOCAL_MS     1000 /* after a failed fleet take, pace locally this long before asking again */

struct dlane {
	struct list_node node;
	struct dial *d;
	char org[LANE_ORG_MAX];
	char name[LANE_ORG_MAX + 32];
	struct lane lane;
	struct list_node queue; /* calls waiting to be sent, in order */
	uv_timer_t timer;	/* lane wait */
	uv_timer_t probe;	/* stopped: resume after lane_probe_ms */
	bool alerted;
	int open_handles; /* closing: freed when both timers (and a take in flight) are done */
	bool closing;	  /* dial_close(): only the handles' callbacks still come */
	bool taking;	  /* fleet: a lane_take.lua call is in flight (its answer pumps) */
	uint32_t granted; /* fleet: tokens of the last take not used yet (this pump only) */
	enum lane_fleet_what fprobe; /* fleet: the next send is this probe (PROBE_*), else GO */
	int64_t fprobe_until;	     /* with fprobe: what lane_fleet_clear() expects */
	int64_t next_take_ms;	     /* fleet: no take before this (bucket, park or open wait) */
	int64_t local_until_ms;	     /* fleet: paced locally until then (Redis did not answer) */
};

struct dcall {
	struct list_node node; /* lane queue, or the resend list */
	struct dial *d;
	struct dlane *lane;
	struct dial_call c;
	char call[40], org[65], campaign[65], agent[65], to[20], from[36];
	unsigned sends, throttled;
	enum lane_fleet_what fprobe; /* this send is the fleet's probe (PROBE_*), else GO */
	int64_t fprobe_until;
	struct list_node care;	/* d->care while leased (fenced) */
	int64_t lease_until_ms; /* the lease known here (this loop's clock); 0: not fenced */
	int64_t lease_token;	/* as last seen; 0: not known (renewal checks the owner) */
	uint64_t renew_seq;	/* the renewal in flight that covers it, 0: none */
	unsigned own_sends;	/* sends by this worker (the budget's first send vs re-send) */
	bool takeover;		/* taken over from an expired lease (dial_resend()) */
	bool lease_lost;	/* a renewal found the lease gone */
	bool maybe_delivered, queued, inflight, resend_wait;
	uint64_t queued_ms;
	uv_timer_t timer; /* resend delay */
	struct http_client_call *http;
};

struct row {
	char call[40], org[65], lane[LANE_ORG_MAX + 32], cls[16], reason[128];
	int64_t contact;
	int attempt, try, status, waited_ms, latency_ms;
};

struct dial {
	uv_loop_t *loop;
	struct pg_pool *pool;
	struct http_client *http;
	const struct pg_stmt *attempts, *unknown;
	char *url, *auth, *callback, *provider;
	struct dial_options o;
	struct lane_fleet *fleet; /* NULL: lanes per worker */
	bool fleet_down;	  /* logged: Redis did not answer a take, pacing locally */
	struct list_node lanes, resend;
	struct list_node care; /* fenced calls in care (dcall.care) */
	const struct pg_stmt *renew_st;
	char *owner;	  /* NULL: no fencing */
	uv_timer_t renew; /* lease renewal tick */
	uint64_t renew_seq;
	unsigned renewing; /* renewal statements in flight */
	struct row *rows;
	uint32_t n_rows, cap_rows;
	uv_timer_t flush; /* zero timer: the loop turn's attempt rows in one statement */
	unsigned flushing;
	bool draining, closing;
	void (*drained_cb)(void *data);
	void *drained_data;
	void (*closed_cb)(void *data);
	void *closed_data;
	unsigned handles;
	struct dial_stats st;
	uint64_t rng;
};

static inline int64_t dial_now_ms(struct dial *d)
{
	return (int64_t)uv_now(d->loop);
}

/* Frees d once it is closing and nothing is left, and calls the drain callback once it is
 * draining and nothing is in flight. */
void dial_maybe_done(struct dial *d);
/* Sends what l's queue may send now; else arms l's timer (or a fleet take is in flight). */
void dial_lane_pump(struct dlane *l);
/* Ends every call queued on l with disp; a queued re-send of a send that may have been
 * delivered ends DIAL_UNKNOWN instead (the call may be live: its slots are kept). */
void dial_stop_lane_calls(struct dlane *l, enum dial_disposition disp);
/* A stopped lane's probe timer: resumes the lane and pumps it. */
void dial_probe_cb(uv_timer_t *t);

/* dial_lease.c (dial.h, "Leases"). */
enum dial_lease_gate { DIAL_LEASE_GO, DIAL_LEASE_WAIT, DIAL_LEASE_GONE };
/* Prepares the renewal statement and the tick (dial_new(), when d->owner is set). */
int dial_lease_init(struct dial *d);
/* c is fenced from now on with the lease known to run until until_ms (token 0: unknown). */
void dial_lease_hold(struct dcall *c, int64_t until_ms, int64_t token);
/* Whether c may be sent at now: GO (its lease covers the request), WAIT (renewal asked; the
 * caller retries shortly), GONE (lost, or run out here: end it DIAL_LEASE_LOST). */
enum dial_lease_gate dial_lease_check(struct dcall *c, int64_t now);
/* The fenced call in care with this id, NULL if none. */
struct dcall *dial_lease_find(struct dial *d, const char *call);
/* Ends a call now with disposition r (dial.c; takes it off any queue first). */
void dial_finish_now(struct dcall *c, enum dial_disposition disp);

/* dial_fleet.c. Whether a fleet token is at hand for one send of l now (one left from the last
 * take, or, while Redis does not answer, one of l's own bucket); false: a take is in flight (its
 * answer pumps l) or *wait is set. */
bool dial_fleet_token(struct dlane *l, int64_t now, uint64_t *wait);
/* After lane_record() of c's answer: writes what it changed for the fleet. opened: the circuit's
 * open count before the answer. */
void dial_fleet_record(struct dcall *c, int status, const struct retry_decision *dec,
		       uint64_t opened);

#endif
