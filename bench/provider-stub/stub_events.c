/* The stub's call timelines and event posting: ringing, answered, the outcome; signed with
 * X-Signature; dropped, duplicated, reordered or sent early by their rates; retried when the
 * receiver does not answer 2xx. */
#include "stub_int.h"

#include "signing.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const outcome_names[STUB_OUTCOMES] = { "completed", "no-answer", "busy",
							  "failed", "canceled" };

const char *stub_outcome_name(enum stub_outcome o)
{
	return (unsigned)o < STUB_OUTCOMES ? outcome_names[o] : "?";
}

int stub_outcome_parse(const char *name)
{
	for (int i = 0; i < STUB_OUTCOMES; i++)
		if (strcmp(name, outcome_names[i]) == 0)
			return i;
	return -1;
}

/* ---- one event post ---- */

static void on_event_closed(uv_handle_t *h)
{
	struct stub_event *e = h->data;
	struct stub *s = e->stub;

	free(e->url);
	free(e->body);
	free(e->reply_body);
	free(e);
	stub_handle_closed(s);
}

/* Answers the dial waiting for this (early) event, if any. */
static void event_reply(struct stub_event *e)
{
	if (!e->reply_req)
		return;
	http_respond(e->reply_req, 201, "application/json", e->reply_body, strlen(e->reply_body));
	e->reply_req = NULL;
}

static void event_free(struct stub_event *e)
{
	struct stub *s = e->stub;

	event_reply(e);
	list_del(&e->node);
	s->closing_handles++;
	uv_close((uv_handle_t *)&e->timer, on_event_closed);
}

static void event_post(struct stub_event *e);

static void on_retry(uv_timer_t *t)
{
	event_post(t->data);
}

static void on_posted(const struct http_client_response *r, void *data)
{
	struct stub_event *e = data;
	struct stub *s = e->stub;

	e->inflight = NULL;
	if (r->cls == HTTP_CLIENT_OK && r->status >= 200 && r->status <= 299) {
		s->events_sent++;
	} else if (r->cls != HTTP_CLIENT_CANCELLED && e->tries < s->cfg.event_retries) {
		e->tries++;
		event_reply(e); /* do not hold the dial for a receiver that fails */
		uv_timer_start(&e->timer, on_retry, 200ULL << (e->tries - 1), 0);
		return;
	} else {
		s->events_failed++;
	}
	event_free(e);
}

static void event_post(struct stub_event *e)
{
	struct stub *s = e->stub;
	char sig[SIGNING_HEADER_MAX + 16] = "X-Signature: ";
	const char *headers[2] = { "Content-Type: application/json", sig };
	struct http_client_request req = { .method = "POST",
					   .url = e->url,
					   .headers = headers,
					   .nheaders = 2,
					   .body = e->body,
					   .body_len = e->len,
					   .timeout_ms = s->cfg.event_timeout_ms };

	if (s->closing ||
	    signing_sign(s->cfg.secret, (int64_t)time(NULL), e->body, e->len, sig + 13,
			 sizeof(sig) - 13) ||
	    http_client_send(s->client, &req, on_posted, e, &e->inflight)) {
		s->events_failed++;
		event_free(e);
	}
}

static void on_delay(uv_timer_t *t)
{
	event_post(t->data);
}

static struct stub_event *event_new(struct stub *s, const char *url, const char *body, size_t len)
{
	struct stub_event *e = calloc(1, sizeof(*e));

	if (!e)
		return NULL;
	e->stub = s;
	e->url = strdup(url);
	e->body = malloc(len + 1);
	if (!e->url || !e->body) {
		free(e->url);
		free(e->body);
		free(e);
		return NULL;
	}
	memcpy(e->body, body, len + 1);
	e->len = len;
	uv_timer_init(s->loop, &e->timer);
	e->timer.data = e;
	list_add_tail(&s->events, &e->node);
	return e;
}

/* Returns the event's JSON body (cJSON_free it), or NULL when out of memory. */
static char *event_body(struct stub_call *c, const char *status)
{
	char when[40], stamp[64];
	struct timespec ts;
	struct tm tm;
	cJSON *j = cJSON_CreateObject();
	char *out = NULL;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(stamp, sizeof(stamp), "%s.%03dZ", when, (int)(ts.tv_nsec / 1000000) % 1000);
	if (j && cJSON_AddStringToObject(j, "call_id", c->call_id) &&
	    cJSON_AddStringToObject(j, "idempotency_key", c->key) &&
	    cJSON_AddStringToObject(j, "status", status) &&
	    cJSON_AddNumberToObject(j, "sequence", c->seq) &&
	    cJSON_AddStringToObject(j, "occurred_at", stamp))
		out = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	return out;
}

/* Sends one event of c with its faults. reply_req/reply: an early event the dial waits for. */
static void event_send(struct stub_call *c, const char *status, struct http_request *reply_req,
		       char *reply)
{
	struct stub *s = c->stub;
	unsigned base = 1000 + c->seq * 8;
	bool drop = stub_draw(s, c->key, base) % 100 < s->cfg.drop_pct;
	bool dup = stub_draw(s, c->key, base + 1) % 100 < s->cfg.dup_pct;
	bool late = stub_draw(s, c->key, base + 2) % 100 < s->cfg.reorder_pct;
	char *body;

	c->seq++;
	if (drop || !(body = event_body(c, status))) {
		s->events_dropped += drop;
		if (reply_req)
			http_respond(reply_req, 201, "application/json", reply, strlen(reply));
		free(reply);
		return;
	}
	for (int copy = 0; copy < (dup ? 2 : 1); copy++) {
		struct stub_event *e = event_new(s, c->callback_url, body, strlen(body));
		if (!e)
			break;
		if (copy == 0 && reply_req) {
			e->reply_req = reply_req;
			e->reply_body = reply;
			reply_req = NULL;
			reply = NULL;
		}
		if (late && !e->reply_req) {
			uv_timer_start(&e->timer, on_delay, s->cfg.reorder_ms, 0);
			continue;
		}
		event_post(e);
	}
	s->events_duplicated += dup;
	s->events_reordered += late;
	if (reply_req)
		http_respond(reply_req, 201, "application/json", reply, strlen(reply));
	free(reply);
	cJSON_free(body);
}

/* ---- timelines ---- */

static void on_call_timer_closed(uv_handle_t *h)
{
	struct stub_call *c = h->data;

	stub_handle_closed(c->stub);
}

static void call_close_timer(struct stub_call *c)
{
	if (!c->timer_open)
		return;
	c->timer_open = false;
	c->stub->closing_handles++;
	uv_close((uv_handle_t *)&c->timer, on_call_timer_closed);
}

static uint64_t ring_at(const struct stub_call *c)
{
	uint64_t r = c->stub->cfg.ring_ms;

	return r < c->duration_ms / 4 ? r : c->duration_ms / 4;
}

static void on_call_timer(uv_timer_t *t);

/* Arms the timer for the next stage, or waits (held calls wait for /control/end). */
static void call_next(struct stub_call *c)
{
	uint64_t at, elapsed = uv_now(c->stub->loop) - c->placed_at;

	if (c->stage == 0)
		at = ring_at(c);
	else if (c->stage == 1 && c->outcome == STUB_COMPLETED)
		at = c->duration_ms / 2;
	else if (c->held)
		return;
	else
		at = c->duration_ms;
	uv_timer_start(&c->timer, on_call_timer, at > elapsed ? at - elapsed : 0, 0);
}

static void on_call_timer(uv_timer_t *t)
{
	struct stub_call *c = t->data;

	if (c->stage == 0) {
		event_send(c, "ringing", NULL, NULL);
		c->stage = 1;
	} else if (c->stage == 1 && c->outcome == STUB_COMPLETED) {
		event_send(c, "answered", NULL, NULL);
		c->stage = 2;
	} else {
		stub_call_end(c, -1);
		return;
	}
	call_next(c);
}

void stub_call_start(struct stub_call *c, struct http_request *early_req, char *reply)
{
	struct stub *s = c->stub;

	c->placed_at = uv_now(s->loop);
	uv_timer_init(s->loop, &c->timer);
	c->timer.data = c;
	c->timer_open = true;
	if (early_req) {
		s->events_early++;
		event_send(c, "ringing", early_req, reply);
		c->stage = 1;
	}
	call_next(c);
}

void stub_call_end(struct stub_call *c, int status_override)
{
	if (c->stage == 3)
		return;
	if (status_override >= 0 && status_override < STUB_OUTCOMES)
		c->outcome = (enum stub_outcome)status_override;
	c->stage = 3;
	call_close_timer(c);
	stub_call_ended(c);
	event_send(c, stub_outcome_name(c->outcome), NULL, NULL);
}

static void close_call_timer(const char *key, void *val, void *data)
{
	(void)key;
	(void)data;
	call_close_timer(val);
}

void stub_events_close(struct stub *s)
{
	map_each(&s->calls, close_call_timer, NULL);
	while (!list_empty(&s->events)) {
		struct stub_event *e = list_entry(s->events.next, struct stub_event, node);
		if (e->inflight)
			http_client_cancel(e->inflight); /* on_posted frees it */
		else
			event_free(e);
	}
}
