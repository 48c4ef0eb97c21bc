/* Test harness for the client and stub tests: one libuv loop holding the provider stub, an
 * event receiver (our HTTP server) and an HTTP client; helpers that run the loop until a
 * condition holds, with a generous deadline that fails the test instead of hanging. */
#ifndef DSP_TEST_HARNESS_H
#define DSP_TEST_HARNESS_H

#include "http_client.h"
#include "http_server.h"
#include "stub.h"

#include <stdbool.h>

#define HARNESS_DEADLINE_MS 30000
#define HARNESS_MAX_EVENTS  4096

struct received {
	char body[512];
	char signature[128];
};

struct harness {
	uv_loop_t loop;
	struct stub *stub;
	struct http_server *recv;
	struct http_client *client;
	int stub_port, recv_port;
	int recv_status; /* what the receiver answers [200] */
	unsigned nevents;
	struct received events[HARNESS_MAX_EVENTS];
	bool stub_closed, recv_closed, client_closed;
};

/* The result of one request made through harness_request. */
struct reply {
	bool done;
	enum http_client_class cls;
	int status;
	char body[4096];
	char retry_after[128];
	long new_connections;
	unsigned events_at_done; /* events the receiver had when the answer came */
	struct harness *h;
};

/* Starts everything; cfg may be NULL for the stub defaults. */
struct harness *harness_start(const struct stub_config *cfg);
/* Closes everything (the stub unless h->stub was set to NULL after the test closed it), runs
 * the loop dry, checks every handle closed, frees. */
void harness_stop(struct harness *h);
/* Runs the loop until *flag (or fails the test after HARNESS_DEADLINE_MS). */
void harness_wait(struct harness *h, const bool *flag);
/* Runs the loop until the receiver has n events. */
void harness_wait_events(struct harness *h, unsigned n);
/* Runs the loop until the stat at path reaches at least v. */
void harness_wait_stat(struct harness *h, const char *path, double v);
/* Sends a request and waits for its answer. */
void harness_request(struct harness *h, const char *method, const char *path, const char *body,
		     const char *const *headers, size_t nheaders, uint64_t timeout_ms,
		     struct reply *r);
/* POSTs a D0 dial for (key, org, campaign, contact, attempt) and waits. */
void harness_dial(struct harness *h, const char *key, const char *org, const char *campaign,
		  const char *contact, int attempt, struct reply *r);
/* Starts a dial without waiting (r->done turns true later). */
void harness_dial_async(struct harness *h, const char *key, const char *org, const char *campaign,
			const char *contact, int attempt, struct reply *r);
/* GET /stats, and the number at a dotted path in it ("orgs.o1.live"); -1 if absent. */
double harness_stat(struct harness *h, const char *path);
/* POSTs json to a control route and waits; returns the status. */
int harness_control(struct harness *h, const char *route, const char *json);

#endif
