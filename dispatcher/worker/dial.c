/* The dialer: lanes, the provider POST, the retry table, the attempt ledger (dial.h). */
#include "dial.h"
#include "dial_int.h"

#include "error.h"
#include "gate_pg_int.h" /* struct pgarr */
#include "list.h"
#include "log.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One row per request (D4); the idempotency key is the call id. Arrays, one per column. */
#define SQL_ATTEMPTS                                                                               \
	"INSERT INTO dial_attempts (call_id, contact_id, org_id, lane, attempt, try, status,"      \
	" class, reason, waited_ms, latency_ms, idempotency_key)"                                  \
	" SELECT a.call_id, a.contact_id, a.org_id, a.lane, a.attempt, a.try, a.status, a.class,"  \
	" a.reason, a.waited_ms, a.latency_ms, a.call_id"                                          \
	" FROM unnest($1::uuid[], $2::bigint[], $3::text[], $4::text[], $5::int[], $6::int[],"     \
	" $7::int[], $8::text[], $9::text[], $10::int[], $11::int[])"                              \
	" AS a(call_id, contact_id, org_id, lane, attempt, try, status, class, reason, waited_ms," \
	" latency_ms)"

/* $1 call id: no tries left, outcome unknown (D2); slots stay until an event or the sweep. */
#define SQL_MARK_UNKNOWN                                                                           \
	"UPDATE calls SET state = 'unknown', updated_at = now()"                                   \
	" WHERE id = $1::uuid AND state = 'dialing'"

#define N_COLS	 11
#define ROWS_MAX 1000 /* attempt rows per statement */
static uint32_t rnd32(struct dial *d)
{
	d->rng ^= d->rng << 13;
	d->rng ^= d->rng >> 7;
	d->rng ^= d->rng << 17;
	return (uint32_t)(d->rng >> 11);
}

static int64_t unix_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the attempt ledger ---- */

#define LEDGER_INFLIGHT_MAX 2 /* INSERTs in flight at most */

static void flush_rows(uv_timer_t *t);

struct flush {
	struct dial *d;
	uint32_t n; /* rows in the INSERT */
};

static void flush_done(int status, const struct pg_results *r, void *data)
{
	struct flush *f = data;
	struct dial *d = f->d;

	(void)r;
	if (status) {
		log_warn(LOG_DIAL, "dial_attempts insert failed: %s (%u rows lost)",
			 dsp_strerror(status), f->n);
		d->st.attempts_lost += f->n;
	}
	free(f);
	d->flushing--;
	/* closing: the flush timer is closed; dial_maybe_done() sends what is left */
	if (d->n_rows && !d->closing)
		uv_timer_start(&d->flush, flush_rows, 0, 0);
	dial_maybe_done(d);
}

/* Sends one INSERT of up to ROWS_MAX rows. */
static void send_rows(struct dial *d)
{
	struct pgarr a[N_COLS];
	uint32_t n = d->n_rows < ROWS_MAX ? d->n_rows : ROWS_MAX;
	const char *v[N_COLS];
	struct flush *f = malloc(sizeof(*f));
	int rc = -ENOMEM;

	for (int k = 0; k < N_COLS; k++)
		pgarr_init(&a[k]);
	for (uint32_t i = 0; i < n; i++) {
		struct row *w = &d->rows[i];
		pgarr_text(&a[0], w->call);
		pgarr_int(&a[1], w->contact, w->contact == 0);
		pgarr_text(&a[2], w->org);
		pgarr_text(&a[3], w->lane);
		pgarr_int(&a[4], w->attempt, false);
		pgarr_int(&a[5], w->try, false);
		pgarr_int(&a[6], w->status, w->status == 0);
		pgarr_text(&a[7], w->cls);
		pgarr_text(&a[8], w->reason[0] ? w->reason : NULL);
		pgarr_int(&a[9], w->waited_ms, false);
		pgarr_int(&a[10], w->latency_ms, w->latency_ms < 0);
	}
	bool ok = true;
	for (int k = 0; k < N_COLS; k++)
		ok = (v[k] = pgarr_end(&a[k])) && ok;
	struct pg_query q = { .stmt = d->attempts, .nparams = N_COLS, .values = v };
	if (f)
		*f = (struct flush){ .d = d, .n = n };
	if (ok && f && !(rc = pg_pool_exec(d->pool, PG_LANE_NORMAL, &q, flush_done, f))) {
		d->flushing++;
		d->st.attempts_rows += n;
	} else {
		log_warn(LOG_DIAL, "dial_attempts insert not sent: %s (%u rows lost)",
			 dsp_strerror(rc), n);
		d->st.attempts_lost += n;
		free(f);
	}
	for (int k = 0; k < N_COLS; k++)
		pgarr_free(&a[k]);
	memmove(d->rows, d->rows + n, (d->n_rows - n) * sizeof(*d->rows));
	d->n_rows -= n;
}

/* The loop turn's rows: group commit, as call_end and events (under load the rows wait for an
 * answer while LEDGER_INFLIGHT_MAX inserts are in flight). */
static void flush_rows(uv_timer_t *t)
{
	struct dial *d = t->data;

	if (!d->n_rows || d->flushing >= LEDGER_INFLIGHT_MAX)
		return;
	send_rows(d);
	if (d->n_rows)
		uv_timer_start(&d->flush, flush_rows, 0, 0);
}

/* Closing: every row left, whatever is in flight (the flush timer is gone; rows added by the
 * cancelled requests' answers come after dial_close()). */
static void flush_all(struct dial *d)
{
	while (d->n_rows)
		send_rows(d);
}

static void add_row(struct dcall *c, int status, enum retry_verdict cls, const char *reason,
		    int64_t waited, int64_t latency)
{
	struct dial *d = c->d;

	if ((unsigned)cls < DIAL_CLASSES)
		d->st.attempts[cls]++;

	if (d->n_rows == d->cap_rows) {
		uint32_t cap = d->cap_rows ? d->cap_rows * 2 : 64;
		struct row *r = realloc(d->rows, cap * sizeof(*r));
		if (!r) {
			d->st.attempts_lost++;
			return;
		}
		d->rows = r;
		d->cap_rows = cap;
	}
	struct row *w = &d->rows[d->n_rows++];
	memset(w, 0, sizeof(*w));
	snprintf(w->call, sizeof(w->call), "%s", c->call);
	snprintf(w->org, sizeof(w->org), "%s", c->org);
	snprintf(w->lane, sizeof(w->lane), "%s", c->lane->name);
	snprintf(w->cls, sizeof(w->cls), "%s", retry_verdict_name(cls));
	snprintf(w->reason, sizeof(w->reason), "%s", reason ? reason : "");
	w->contact = c->c.contact;
	w->attempt = c->c.attempt;
	w->try = (int)c->sends - 1;
	w->status = status;
	w->waited_ms = waited < 0 ? 0 : (int)waited;
	w->latency_ms = (int)latency;
	if (!d->closing && !uv_is_active((uv_handle_t *)&d->flush))
		uv_timer_start(&d->flush, flush_rows, 0, 0);
}

/* ---- lanes ---- */

static void handle_closed(uv_handle_t *h)
{
	struct dial *d = h->data;

	d->handles--;
	dial_maybe_done(d);
}

static void lane_handle_closed(uv_handle_t *h)
{
	struct dlane *l = h->data;
	struct dial *d = l->d;

	if (--l->open_handles == 0)
		free(l);
	d->handles--;
	dial_maybe_done(d);
}

static struct dlane *lane_get(struct dial *d, const char *org)
{
	struct list_node *n;
	struct dlane *l;

	for (n = d->lanes.next; n != &d->lanes; n = n->next) {
		l = list_entry(n, struct dlane, node);
		if (strcmp(l->org, org) == 0)
			return l;
	}
	if (!(l = calloc(1, sizeof(*l))))
		return NULL;
	l->d = d;
	snprintf(l->org, sizeof(l->org), "%s", org);
	snprintf(l->name, sizeof(l->name), "%s/%s", d->provider, org);
	lane_init(&l->lane, &d->o.lane, dial_now_ms(d));
	list_init(&l->queue);
	uv_timer_init(d->loop, &l->timer);
	uv_timer_init(d->loop, &l->probe);
	l->timer.data = l;
	l->probe.data = l;
	list_add_tail(&d->lanes, &l->node);
	return l;
}

static void lane_timer_cb(uv_timer_t *t)
{
	dial_lane_pump(t->data);
}

static void finish(struct dcall *c, struct dial_result *r);

/* A queued call may be a re-send (resend_cb() puts it back in the queue) of a send that may have
 * been delivered: the call may be live at the provider, so it ends DIAL_UNKNOWN (slots kept, the
 * contact not handed back; its events or the maximum-duration sweep end it), as send_call() and
 * end_waiting() end such a call. Ending it `disp` (STOPPED, DRAINED: the contact back to pending,
 * its slots released) let a live call go uncounted and its contact be dialled again (issue 9). */
void dial_stop_lane_calls(struct dlane *l, enum dial_disposition disp)
{
	while (!list_empty(&l->queue)) {
		struct dcall *c = list_entry(list_first(&l->queue), struct dcall, node);
		list_del(&c->node);
		c->queued = false;
		struct dial_result r = { .disposition = c->maybe_delivered ? DIAL_UNKNOWN : disp,
					 .reason = RETRY_REASON_CREDENTIALS };
		finish(c, &r);
	}
}

void dial_probe_cb(uv_timer_t *t)
{
	struct dlane *l = t->data;

	log_info(LOG_DIAL, "lane %s: probing again after a stop", l->name);
	lane_resume(&l->lane);
	l->lane.stopped = false;
	l->alerted = false;
	dial_lane_pump(l);
}

/* ---- one call ---- */

static void call_closed(uv_handle_t *h)
{
	struct dcall *c = h->data;
	struct dial *d = c->d;

	free(c);
	d->handles--;
	dial_maybe_done(d);
}

/* The answer to the mark of an unknown call; data: the call id (a copy, freed here). A failure
 * leaves the row 'dialing': its events, the re-send sweep or the maximum-duration sweep end it. */
static void marked_unknown(int status, const struct pg_results *res, void *data)
{
	char *call = data;

	if (status)
		LOG_AT(LOG_WARN, LOG_DIAL, (&(const struct log_ids){ .call = call }),
		       "call not marked unknown (%s%s%s): it stays dialing until an event or a "
		       "sweep",
		       dsp_strerror(status), status == DSP_EPG && res && res->error ? ": " : "",
		       status == DSP_EPG && res && res->error ? PQresultErrorMessage(res->error)
							      : "");
	free(call);
}

static void finish(struct dcall *c, struct dial_result *r)
{
	struct dial *d = c->d;

	r->call = &c->c;
	if (!r->text)
		r->text = "";
	if (c->lease_lost) /* not ours any more, whatever the verdict: the holder finishes it */
		r->disposition = DIAL_LEASE_LOST;
	if (c->lease_until_ms) { /* fenced: its end applies only under this lease */
		r->lease_owner = d->owner;
		r->lease_token = c->lease_token;
	}
	switch (r->disposition) {
	case DIAL_PLACED:
		d->st.placed++;
		break;
	case DIAL_REFUSED:
		d->st.refused++;
		break;
	case DIAL_INVALID:
		d->st.invalid++;
		break;
	case DIAL_STOPPED:
		d->st.stopped++;
		break;
	case DIAL_UNKNOWN:
		d->st.unknown++;
		break;
	case DIAL_DRAINED:
		d->st.drained++;
		break;
	case DIAL_LEASE_LOST:
		d->st.lease_lost++;
		break;
	}
	list_del(&c->care);
	if (r->disposition == DIAL_UNKNOWN) {
		const char *v[1] = { c->call };
		struct pg_query q = { .stmt = d->unknown, .nparams = 1, .values = v };
		char *call = strdup(c->call);
		int rc = call ? pg_pool_exec(d->pool, PG_LANE_NORMAL, &q, marked_unknown, call)
			      : -ENOMEM;
		if (rc) {
			free(call);
			LOG_AT(LOG_WARN, LOG_DIAL, (&(const struct log_ids){ .call = c->call }),
			       "call not marked unknown (%s): it stays dialing until an event or a"
			       " sweep",
			       dsp_strerror(rc));
		}
	}
	d->o.done_cb(d, r, d->o.data);
	uv_close((uv_handle_t *)&c->timer, call_closed);
}

static void send_call(struct dcall *c);

void dial_finish_now(struct dcall *c, enum dial_disposition disp)
{
	struct dial_result r = { .disposition = disp };

	if (c->queued || c->resend_wait)
		list_del(&c->node);
	if (c->resend_wait)
		uv_timer_stop(&c->timer);
	c->queued = c->resend_wait = false;
	finish(c, &r);
}

static void resend_cb(uv_timer_t *t)
{
	struct dcall *c = t->data;

	list_del(&c->node);
	c->resend_wait = false;
	c->queued = true;
	c->queued_ms = (uint64_t)dial_now_ms(c->d);
	list_add_head(&c->lane->queue, &c->node);
	dial_lane_pump(c->lane);
}

#define LEASE_WAIT_MS 250 /* a call held by its fence looks again after this */

/* The call's lease does not cover a send now: off the lane queue until the renewal answers. */
static void lease_wait(struct dcall *c)
{
	list_del(&c->node);
	c->queued = false;
	c->resend_wait = true;
	list_add_tail(&c->d->resend, &c->node);
	uv_timer_start(&c->timer, resend_cb, LEASE_WAIT_MS, 0);
}

static bool body_throttled(const char *body)
{
	cJSON *j = cJSON_Parse(body);
	const cJSON *e = j ? cJSON_GetObjectItemCaseSensitive(j, "error") : NULL;
	bool t = cJSON_IsString(e) && strstr(e->valuestring, "throttl") != NULL;

	cJSON_Delete(j);
	return t;
}

static void provider_id(const char *body, char *out, size_t size)
{
	cJSON *j = cJSON_Parse(body);
	const cJSON *e = j ? cJSON_GetObjectItemCaseSensitive(j, "call_id") : NULL;

	out[0] = '\0';
	if (cJSON_IsString(e))
		snprintf(out, size, "%s", e->valuestring);
	cJSON_Delete(j);
}

static enum retry_transport transport_of(enum http_client_class cls)
{
	switch (cls) {
	case HTTP_CLIENT_OK:
		return RETRY_TRANSPORT_NONE;
	case HTTP_CLIENT_CONNECT_TIMEOUT:
		return RETRY_TRANSPORT_CONNECT_TIMEOUT;
	case HTTP_CLIENT_CONNECT_FAILED:
		return RETRY_TRANSPORT_CONNECT_FAILED;
	case HTTP_CLIENT_READ_TIMEOUT:
		return RETRY_TRANSPORT_READ_TIMEOUT;
	default:
		return RETRY_TRANSPORT_RESET; /* may have been delivered */
	}
}

static void answered(const struct http_client_response *resp, void *data)
{
	struct dcall *c = data;
	struct dial *d = c->d;
	struct retry_answer a = { 0 };
	struct retry_decision dec;
	char pid[128] = "";

	c->http = NULL;
	c->inflight = false;
	d->st.inflight--;
	if (resp->cls == HTTP_CLIENT_CANCELLED) { /* dial_close(): it may have been delivered */
		add_row(c, 0, RETRY_UNKNOWN, "cancelled", 0, (int64_t)resp->total_ms);
		struct dial_result r = { .disposition = DIAL_UNKNOWN };
		finish(c, &r);
		return;
	}
	a.status = resp->cls == HTTP_CLIENT_OK ? resp->status : 0;
	a.transport = transport_of(resp->cls);
	a.retry_after = http_client_response_header(resp, "Retry-After");
	a.body_throttled = a.status >= 200 && a.status < 300 && body_throttled(resp->body);
	struct retry_counts cnt = { .throttled = c->throttled,
				    .sends = c->sends,
				    .maybe_delivered = c->maybe_delivered };
	retry_classify(&d->o.policy, &a, &cnt, unix_ms(), rnd32(d), &dec);
	uint64_t opened = c->lane->lane.circuit.opened;
	lane_record(&c->lane->lane, dial_now_ms(d), &dec);
	if (d->fleet)
		dial_fleet_record(c, a.status, &dec, opened);
	if (dec.reason == RETRY_REASON_THROTTLED || dec.reason == RETRY_REASON_THROTTLED_HEADER)
		c->throttled++;
	if (a.transport != RETRY_TRANSPORT_NONE && a.transport != RETRY_TRANSPORT_CONNECT_FAILED &&
	    a.transport != RETRY_TRANSPORT_CONNECT_TIMEOUT)
		c->maybe_delivered = true;
	if (a.status >= 500)
		c->maybe_delivered = true;
	char reason[128];
	snprintf(reason, sizeof(reason), "%s%s%s", retry_reason_name(dec.reason),
		 resp->cls == HTTP_CLIENT_OK ? "" : ": ",
		 resp->cls == HTTP_CLIENT_OK ? "" : resp->error);
	if (c->takeover && c->own_sends == 1 && dec.verdict == RETRY_OK)
		snprintf(reason, sizeof(reason), "takeover: re-sent after its lease expired");
	add_row(c, a.status, dec.verdict,
		dec.verdict == RETRY_OK && !(c->takeover && c->own_sends == 1) ? NULL : reason, 0,
		(int64_t)resp->total_ms);
	struct dial_result r = { .reason = dec.reason, .status = a.status };
	if (dec.verdict == RETRY_RESEND && c->lease_lost)
		dec.verdict = RETRY_UNKNOWN; /* not ours any more: ends DIAL_LEASE_LOST below */
	switch (dec.verdict) {
	case RETRY_OK:
		provider_id(resp->body, pid, sizeof(pid));
		r.disposition = DIAL_PLACED;
		r.provider_call_id = pid[0] ? pid : NULL;
		finish(c, &r);
		break;
	case RETRY_RESEND:
		if (d->draining) {
			r.disposition = DIAL_UNKNOWN;
			finish(c, &r);
			break;
		}
		c->resend_wait = true;
		list_add_tail(&d->resend, &c->node);
		uv_timer_start(&c->timer, resend_cb, dec.delay_ms, 0);
		break;
	case RETRY_UNKNOWN:
		r.disposition = c->lease_lost ? DIAL_LEASE_LOST : DIAL_UNKNOWN;
		finish(c, &r);
		break;
	case RETRY_REFUSED:
		r.disposition = DIAL_REFUSED;
		r.delay_ms = dec.delay_ms;
		r.requeue = dec.requeue;
		finish(c, &r);
		break;
	case RETRY_INVALID:
		r.disposition = DIAL_INVALID;
		r.text = resp->body;
		finish(c, &r);
		break;
	case RETRY_STOP_LANE: {
		struct dlane *l = c->lane;
		if (!l->alerted) {
			l->alerted = true;
			d->st.lane_stops++;
			log_error(LOG_DIAL,
				  "ALERT lane %s stopped: the provider answered %d (credentials or "
				  "contract; check PROVIDER_TOKEN); probing again in %llu ms",
				  l->name, a.status, (unsigned long long)d->o.lane_probe_ms);
			uv_timer_start(&l->probe, dial_probe_cb, d->o.lane_probe_ms, 0);
		}
		r.disposition = DIAL_STOPPED;
		finish(c, &r);
		dial_stop_lane_calls(l, DIAL_STOPPED);
		break;
	}
	}
	dial_maybe_done(d);
}

static int post(struct dcall *c)
{
	struct dial *d = c->d;
	char key[64];
	const char *headers[3] = { "Content-Type: application/json", key, d->auth };
	cJSON *j = cJSON_CreateObject();
	char *body;
	int rc;

	snprintf(key, sizeof(key), "Idempotency-Key: %s", c->call);
	if (!j)
		return -ENOMEM;
	cJSON_AddStringToObject(j, "to", c->c.to);
	if (c->c.from)
		cJSON_AddStringToObject(j, "from", c->c.from);
	else
		cJSON_AddNullToObject(j, "from");
	cJSON_AddStringToObject(j, "org_id", c->c.org);
	if (c->c.campaign)
		cJSON_AddStringToObject(j, "campaign_id", c->c.campaign);
	else
		cJSON_AddNullToObject(j, "campaign_id");
	cJSON_AddStringToObject(j, "agent_id", c->c.agent);
	if (c->c.contact) {
		char ct[24];
		snprintf(ct, sizeof(ct), "%" PRId64, c->c.contact);
		cJSON_AddStringToObject(j, "contact_id", ct);
	} else {
		cJSON_AddNullToObject(j, "contact_id");
	}
	cJSON_AddNumberToObject(j, "attempt", c->c.attempt);
	/* the organisation in the callback URL: whichever worker gets the terminal event can free
	 * the call's slots before PostgreSQL records it (events.h, early release); org ids are
	 * [A-Za-z0-9_-], nothing to escape */
	char cb[1200];
	snprintf(cb, sizeof(cb), "%s?org=%s", d->callback, c->c.org);
	cJSON_AddStringToObject(j, "callback_url", cb);
	body = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	if (!body)
		return -ENOMEM;
	struct http_client_request req = { .method = "POST",
					   .url = d->url,
					   .headers = headers,
					   .nheaders = d->auth ? 3 : 2,
					   .body = body,
					   .body_len = strlen(body) };
	rc = http_client_send(d->http, &req, answered, c, &c->http);
	free(body);
	return rc;
}

static void send_call(struct dcall *c)
{
	struct dial *d = c->d;
	int64_t waited = dial_now_ms(d) - (int64_t)c->queued_ms;

	c->sends++;
	c->own_sends++;
	d->st.sends++;
	if (c->sends > 1)
		d->st.resends++;
	int rc = post(c);
	if (rc) {
		add_row(c, 0, RETRY_REFUSED, "not sent", waited, -1);
		struct dial_result r = { .disposition = DIAL_REFUSED, .delay_ms = 1000 };
		if (c->maybe_delivered)
			r.disposition = DIAL_UNKNOWN;
		finish(c, &r);
		return;
	}
	c->inflight = true;
	d->st.inflight++;
}

void dial_lane_pump(struct dlane *l)
{
	struct dial *d = l->d;

	while (!list_empty(&l->queue) && !l->taking) {
		struct dcall *c = list_entry(list_first(&l->queue), struct dcall, node);
		int64_t now = dial_now_ms(d);
		bool resend = c->own_sends > 0; /* a takeover's first send here is a first send */
		uint64_t wait = 0;
		if (c->lease_until_ms) {
			enum dial_lease_gate lg = dial_lease_check(c, now);
			if (lg == DIAL_LEASE_GONE) {
				dial_finish_now(c, DIAL_LEASE_LOST);
				continue;
			}
			if (lg == DIAL_LEASE_WAIT) {
				lease_wait(c);
				continue;
			}
		}
		enum lane_gate g = d->fleet ? lane_check(&l->lane, now, resend, &wait)
					    : lane_admit(&l->lane, now, resend, &wait);
		if (g == LANE_STOPPED) {
			dial_stop_lane_calls(l, DIAL_STOPPED);
			break;
		}
		if (g == LANE_WAIT || (d->fleet && !dial_fleet_token(l, now, &wait))) {
			if (wait)
				uv_timer_start(&l->timer, lane_timer_cb, wait, 0);
			break;
		}
		if (d->fleet)
			lane_sent(&l->lane, now, resend);
		list_del(&c->node);
		c->queued = false;
		c->fprobe = l->fprobe;
		c->fprobe_until = l->fprobe_until;
		l->fprobe = LANE_FLEET_GO;
		send_call(c);
	}
	/* Tokens are used at once or dropped: one kept for later would be sent over the rate. */
	if (!l->taking) {
		l->granted = 0;
		l->fprobe = LANE_FLEET_GO;
	}
}

/* ---- the public face ---- */

int dial_new(const struct dial_options *o, struct dial **out)
{
	struct http_client_config hc;
	struct dial *d;
	int rc = -ENOMEM;

	if (!o || !out || !o->loop || !o->pool || !o->provider_url || !o->callback_url ||
	    !o->done_cb)
		return -EINVAL;
	if (!(d = calloc(1, sizeof(*d))))
		return -ENOMEM;
	d->loop = o->loop;
	d->pool = o->pool;
	d->o = *o;
	if (!d->o.timeout_ms)
		d->o.timeout_ms = 10000;
	if (!d->o.connect_timeout_ms)
		d->o.connect_timeout_ms = 2000;
	if (!d->o.lane_probe_ms)
		d->o.lane_probe_ms = 300000;
	d->rng = 0x9e3779b97f4a7c15ULL ^ (uint64_t)uv_hrtime();
	list_init(&d->lanes);
	list_init(&d->resend);
	list_init(&d->care);
	size_t ul = strlen(o->provider_url);
	while (ul && o->provider_url[ul - 1] == '/')
		ul--;
	if (!(d->url = malloc(ul + 7)))
		goto fail;
	snprintf(d->url, ul + 7, "%.*s/calls", (int)ul, o->provider_url);
	if (!(d->callback = strdup(o->callback_url)) ||
	    !(d->provider = strdup(o->provider_name ? o->provider_name : "provider")))
		goto fail;
	if (o->token && *o->token) {
		size_t n = strlen(o->token) + 32;
		if (!(d->auth = malloc(n)))
			goto fail;
		snprintf(d->auth, n, "Authorization: Bearer %s", o->token);
	}
	if (o->redis && (rc = lane_fleet_new(o->redis, o->scripts, d->provider,
					     d->o.timeout_ms + 1000, &d->fleet))) {
		log_error(LOG_DIAL, "fleet-wide lanes: %s (provider name \"%s\")", dsp_strerror(rc),
			  d->provider);
		goto fail;
	}
	if ((rc = pg_pool_prepare(o->pool, SQL_ATTEMPTS, N_COLS, &d->attempts)) ||
	    (rc = pg_pool_prepare(o->pool, SQL_MARK_UNKNOWN, 1, &d->unknown)))
		goto fail;
	if (o->owner && o->owner[0] && o->lease_ms) {
		rc = -ENOMEM;
		if (!(d->owner = strdup(o->owner)) || (rc = dial_lease_init(d)))
			goto fail;
	}
	http_client_config_defaults(&hc);
	hc.timeout_ms = d->o.timeout_ms;
	hc.connect_timeout_ms = d->o.connect_timeout_ms;
	hc.no_proxy = true;
	hc.max_cached_connections = 256;
	hc.idle_handles = 256;
	if ((rc = http_client_new(o->loop, &hc, &d->http)))
		goto fail;
	uv_timer_init(o->loop, &d->flush);
	d->flush.data = d;
	if (d->owner) {
		uv_timer_init(o->loop, &d->renew);
		d->renew.data = d;
	}
	*out = d;
	return 0;
fail:
	free(d->owner);
	lane_fleet_free(d->fleet);
	free(d->url);
	free(d->callback);
	free(d->provider);
	free(d->auth);
	free(d);
	return rc;
}

static int call_new(struct dial *d, const struct dial_call *in, struct dcall **out)
{
	struct dcall *c;
	struct dlane *l;

	if (!in || !in->call || !in->org || !in->agent || !in->to || in->attempt < 1)
		return -EINVAL;
	if (d->draining || d->closing)
		return -ESHUTDOWN;
	if (!(l = lane_get(d, in->org)) || !(c = calloc(1, sizeof(*c))))
		return -ENOMEM;
	c->d = d;
	c->lane = l;
	snprintf(c->call, sizeof(c->call), "%s", in->call);
	snprintf(c->org, sizeof(c->org), "%s", in->org);
	snprintf(c->campaign, sizeof(c->campaign), "%s", in->campaign ? in->campaign : "");
	snprintf(c->agent, sizeof(c->agent), "%s", in->agent);
	snprintf(c->to, sizeof(c->to), "%s", in->to);
	snprintf(c->from, sizeof(c->from), "%s", in->from ? in->from : "");
	c->c = (struct dial_call){ .call = c->call,
				   .org = c->org,
				   .campaign = in->campaign ? c->campaign : NULL,
				   .agent = c->agent,
				   .contact = in->contact,
				   .attempt = in->attempt,
				   .to = c->to,
				   .from = in->from ? c->from : NULL };
	uv_timer_init(d->loop, &c->timer);
	c->timer.data = c;
	list_init(&c->care);
	d->handles++;
	*out = c;
	return 0;
}

static void call_queue(struct dcall *c)
{
	struct dlane *l = c->lane;

	c->queued = true;
	c->queued_ms = (uint64_t)dial_now_ms(c->d);
	list_add_tail(&l->queue, &c->node);
	/* Sent from the lane's timer, never from inside this call (done_cb may run on a stop). */
	if (!uv_is_active((uv_handle_t *)&l->timer))
		uv_timer_start(&l->timer, lane_timer_cb, 0, 0);
}

int dial_start(struct dial *d, const struct dial_call *in)
{
	struct dcall *c;
	int rc = call_new(d, in, &c);

	if (rc)
		return rc;
	if (d->owner && in->contact)
		dial_lease_hold(c, dial_now_ms(d) + (int64_t)d->o.lease_left_ms, 0);
	call_queue(c);
	return 0;
}

int dial_resend(struct dial *d, const struct dial_call *in, unsigned prior_sends,
		int64_t lease_token, uint64_t lease_until_ms)
{
	struct dcall *c;
	int rc;

	if (!d->owner || !in || !in->call || !in->contact)
		return -EINVAL;
	if ((c = dial_lease_find(d, in->call))) { /* still ours here: the new lease is ours too */
		c->lease_until_ms = (int64_t)lease_until_ms;
		c->lease_token = lease_token;
		c->lease_lost = false;
		return 0;
	}
	if ((rc = call_new(d, in, &c)))
		return rc;
	c->takeover = true;
	c->maybe_delivered = true;
	c->sends = prior_sends ? prior_sends : 1;
	d->st.takeovers++;
	dial_lease_hold(c, (int64_t)lease_until_ms, lease_token);
	call_queue(c);
	return 0;
}

bool dial_lane_stopped(struct dial *d, const char *org)
{
	struct list_node *n;

	for (n = d->lanes.next; n != &d->lanes; n = n->next) {
		struct dlane *l = list_entry(n, struct dlane, node);
		if (strcmp(l->org, org) == 0)
			return l->lane.stopped;
	}
	return false;
}

void dial_maybe_done(struct dial *d)
{
	if (d->draining && d->drained_cb && !d->st.inflight && !d->n_rows && !d->flushing &&
	    !d->renewing) {
		void (*cb)(void *) = d->drained_cb;
		d->drained_cb = NULL;
		cb(d->drained_data);
	}
	if (d->closing && d->n_rows)
		flush_all(d); /* the rows of the requests cancelled by the close */
	if (d->closing && !d->handles && !d->flushing && !d->renewing && d->http == NULL) {
		void (*cb)(void *) = d->closed_cb;
		void *data = d->closed_data;
		free(d->rows);
		lane_fleet_free(d->fleet);
		free(d->url);
		free(d->callback);
		free(d->provider);
		free(d->auth);
		free(d->owner);
		free(d);
		if (cb)
			cb(data);
	}
}

static void end_waiting(struct dial *d)
{
	struct list_node *n;

	for (n = d->lanes.next; n != &d->lanes; n = n->next)
		dial_stop_lane_calls(list_entry(n, struct dlane, node), DIAL_DRAINED);
	while (!list_empty(&d->resend)) {
		struct dcall *c = list_entry(list_first(&d->resend), struct dcall, node);
		list_del(&c->node);
		uv_timer_stop(&c->timer);
		c->resend_wait = false;
		struct dial_result r = { .disposition = DIAL_UNKNOWN };
		finish(c, &r);
	}
}

void dial_drain(struct dial *d, void (*cb)(void *data), void *data)
{
	d->draining = true;
	d->drained_cb = cb;
	d->drained_data = data;
	end_waiting(d);
	dial_maybe_done(d);
}

void dial_lane_states(const struct dial *d, uint32_t out[DIAL_LANE_STATES])
{
	int64_t now = (int64_t)uv_now(d->loop);

	memset(out, 0, DIAL_LANE_STATES * sizeof(out[0]));
	for (struct list_node *n = d->lanes.next; n != &d->lanes; n = n->next) {
		const struct lane *l = &list_entry(n, struct dlane, node)->lane;
		enum dial_lane_state st = l->stopped			  ? DIAL_LANE_STOPPED
					  : lane_park_wait(&l->park, now) ? DIAL_LANE_PARKED
					  : l->circuit.state == LANE_CIRCUIT_OPEN ? DIAL_LANE_OPEN
					  : l->circuit.state == LANE_CIRCUIT_HALF_OPEN
						  ? DIAL_LANE_HALF_OPEN
						  : DIAL_LANE_OPEN_FOR_CALLS;
		out[st]++;
	}
}

const char *dial_lane_state_name(enum dial_lane_state st)
{
	static const char *const names[] = { "closed", "half_open", "open", "parked", "stopped" };

	return (unsigned)st < DIAL_LANE_STATES ? names[st] : "?";
}

void dial_get_stats(const struct dial *d, struct dial_stats *out)
{
	*out = d->st;
	out->queued = 0;
	for (struct list_node *n = d->lanes.next; n != &d->lanes; n = n->next) {
		struct dlane *l = list_entry(n, struct dlane, node);
		for (struct list_node *m = l->queue.next; m != &l->queue; m = m->next)
			out->queued++;
	}
	for (struct list_node *m = d->resend.next; m != &d->resend; m = m->next)
		out->queued++;
}

static void client_closed(struct http_client *c, void *data)
{
	struct dial *d = data;

	(void)c;
	d->http = NULL;
	dial_maybe_done(d);
}

void dial_close(struct dial *d, void (*closed_cb)(void *data), void *data)
{
	d->draining = true;
	d->drained_cb = NULL;
	end_waiting(d);
	d->closing = true;
	d->closed_cb = closed_cb;
	d->closed_data = data;
	uv_timer_stop(&d->flush);
	flush_all(d); /* whatever is in flight; the pool may answer -ECANCELED (counted lost) */
	while (!list_empty(&d->lanes)) {
		struct dlane *l = list_entry(list_first(&d->lanes), struct dlane, node);
		list_del(&l->node);
		d->handles += 2;
		l->open_handles = 2 + (l->taking ? 1 : 0); /* a take's answer still comes */
		l->closing = true;
		uv_close((uv_handle_t *)&l->timer, lane_handle_closed);
		uv_close((uv_handle_t *)&l->probe, lane_handle_closed);
	}
	d->handles++;
	d->flush.data = d;
	uv_close((uv_handle_t *)&d->flush, handle_closed);
	if (d->owner) {
		d->handles++;
		d->renew.data = d;
		uv_close((uv_handle_t *)&d->renew, handle_closed);
	}
	http_client_close(d->http, client_closed, d); /* in-flight calls end DIAL_UNKNOWN */
}
