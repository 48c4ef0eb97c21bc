/* The worker's metrics (SPEC R8; issue 10 item 7): the families of `GET /metrics` on the
 * operator listener, their names, labels and meaning in dispatcher/worker/README.md ("Metrics").
 *
 * Nothing is kept current for the scrape: the counters are the plain uint64 fields the modules
 * already increment in place (select_stats, dial_stats, reconciler_stats, http requests), and
 * the gauges (lanes, gate mode, slots in use) are computed when /metrics is asked. Slots in use
 * are the gate's: in redis mode the scrape reads each organisation this worker knows with one
 * gate_read() (sent together, answered within WMETRICS_READ_MS, else rendered without the ones
 * missing and dispatcher_slots_read_complete 0); in postgres mode they are not read.
 */
#ifndef DSP_WORKER_WMETRICS_H
#define DSP_WORKER_WMETRICS_H

#include "http_server.h"

struct worker;
struct wmetrics;

#define WMETRICS_READ_MS  250 /* deadline of the scrape's gate reads */
#define WMETRICS_ORGS_MAX 256 /* organisations read per scrape (the rest: not complete) */

/* Creates the registry of w's families (w borrowed: it must outlive the metrics). Returns 0,
 * -ENOMEM or -EINVAL. */
int wmetrics_new(struct worker *w, struct wmetrics **out);

/* Frees it. A scrape in flight must have been answered (the HTTP servers are closed first). */
void wmetrics_free(struct wmetrics *m);

/* Counts one HTTP response by listener ("public", "operator"), route pattern (or "unmatched")
 * and status: call it from the servers' decorate hooks. m may be NULL. */
void wmetrics_http(struct wmetrics *m, const char *listener, struct http_request *req, int status);

/* Counts one 429 of the API rate limiter for bucket ("calls.create", "executions.list",
 * "default": dispatcher_ratelimit_refused_total). m may be NULL (no-op). */
void wmetrics_ratelimit_refused(struct wmetrics *m, const char *bucket);

/* The GET /metrics handler (data: the struct wmetrics). */
void wmetrics_handler(struct http_request *req, void *data);

#endif
