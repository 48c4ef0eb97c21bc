/* The operator's status page (issue 10 item 8): `GET /status` (status.html, one file embedded
 * in the binary) and `GET /status.json` (what the page draws), on the operator listener only
 * (operator.h: behind DISPATCHER_ADMIN_TOKEN when it is set; never on the public listener).
 *
 * /status.json answers, for each organisation this worker's selector knows (as /metrics), its
 * campaigns: running, the installed floor, the effective limit, pending contacts, the binding
 * limit in words — the C12 capacity view computed by core/capacity.h from the gate's read
 * (gate_capacity_snapshot(), capacity_sum(), capacity_answer(): the formulas the capacity
 * endpoint and the demo use; nothing is computed twice) — and the organisation's refusals by
 * level over the gate's rolling minute (gate_read_stats()). One PostgreSQL statement (names,
 * states, active flags, pending counts) then, in redis mode, one gate_read() and one
 * gate_read_stats() per organisation, sent together.
 *
 * The chart's history is kept here, so that a page opened now shows the last minutes at once:
 * a ring of WSTATUS_RING samples of the live calls per campaign (one gate_read() per
 * organisation per sample, the same reads), taken every WSTATUS_SAMPLE_MS while the page has
 * been asked for within WSTATUS_VIEW_HOLD_MS, every WSTATUS_IDLE_MS otherwise; at most
 * WSTATUS_SERIES_MAX campaigns are charted (a series absent from every kept sample is reused).
 * Memory: WSTATUS_RING × WSTATUS_SERIES_MAX × 4 bytes (150 KiB). In postgres mode the gate is
 * not read: no samples, and the campaigns are listed with their live calls from PostgreSQL.
 */
#ifndef DSP_WORKER_WSTATUS_H
#define DSP_WORKER_WSTATUS_H

#include "http_server.h"

#include <stdint.h>

struct worker;
struct wstatus;

#define WSTATUS_RING	      300    /* samples kept */
#define WSTATUS_SERIES_MAX    128    /* campaigns charted */
#define WSTATUS_SAMPLE_MS     1000   /* sample period while the page is watched */
#define WSTATUS_IDLE_MS	      5000   /* sample period otherwise */
#define WSTATUS_VIEW_HOLD_MS  60000  /* "watched": /status.json asked within this */
#define WSTATUS_WINDOW_MS     300000 /* the chart's window: the samples /status.json sends */
#define WSTATUS_ORGS_MAX      256    /* organisations read (the rest: "complete": false) */
#define WSTATUS_CAMPAIGNS_MAX 500    /* campaigns listed per organisation (the rest counted) */

/* Creates the page's state for w (borrowed: it must outlive it). Returns 0, -ENOMEM, -EINVAL. */
int wstatus_new(struct worker *w, struct wstatus **out);

/* Starts the sampler on w's loop (after the gate and the selector exist). */
void wstatus_start(struct wstatus *s);

/* Stops the sampler (its timer closed); reads in flight are answered later by the gate. */
void wstatus_stop(struct wstatus *s);

/* Frees it once the gate and the pool are freed (their callbacks answered). NULL is ignored. */
void wstatus_free(struct wstatus *s);

/* The handlers (data: the struct wstatus). */
void wstatus_page(struct http_request *req, void *data);
void wstatus_json(struct http_request *req, void *data);

#endif
