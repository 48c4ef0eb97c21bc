/* Direct dials: lookup, the waiting direct admission, the fenced call-row write, the dialer,
 * and the 429 (direct.h). */
#include "direct.h"

#include "error.h"
#include "gate_pgmode.h"
#include "ident.h"
#include "list.h"
#include "log.h"
#include "select.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TICK_MS 50 /* deadlines, re-tries after errors, postgres-mode re-tries */

/* The agent of the organisation, its caller id, and the org's limit (the 429's message). */
#define SQL_DIRECT_LOOKUP                                                                          \
	"SELECT a.from_number, o.org_limit FROM agents a JOIN organisations o ON o.id = a.org_id"  \
	" WHERE a.org_id = $1::text AND a.id = $2::text"

enum dd_state {
	DD_LOOKUP,    /* the agent lookup is in flight */
	DD_IDLE,      /* to be sent at retry_at */
	DD_INFLIGHT,  /* an admission is in flight */
	DD_WAITING,   /* refused and registered as a waiting direct dial */
	DD_FINISHING, /* timed out: the counts for the 429 are being read */
};

struct direct {
	struct direct_options o;
	const struct pg_stmt *lookup;
	struct list_node dials; /* every struct direct_dial not freed yet */
	uv_timer_t tick;
	bool ticking, draining, closing;
	void (*closed_cb)(void *data);
	void *closed_data;
	struct direct_stats st;
};

struct direct_dial {
	struct direct *d;
	struct list_node node;
	direct_dial_cb cb;
	void *data;
	enum dd_state st;
	char org[65], agent[65], to[20], from[20], call[40];
	bool has_from;
	bool answered;	   /* the callback was called, or the dial was cancelled */
	bool registered;   /* a local waiter of the hand-off (handoff_add) */
	bool gate_waiting; /* maybe registered as a waiting direct dial in Redis: set when a waiting
			    * admission is sent (it may run in Redis even when its answer is lost) */
	bool pg_waiting;   /* the same in postgres mode (a gate_direct_waiters row) */
	bool decided;	   /* the gate answered at least one admission */
	bool woken;	   /* a wake came while an admission was in flight */
	unsigned ops;	   /* requests in flight that call back with this dial */
	enum gate_mode mode;
	uint64_t epoch;
	uint64_t submitted_ms, deadline_ms, retry_at, last_try;
	int64_t org_limit, pg_running;
	uint32_t tries;
};

/* ^\+[1-9][0-9]{6,14}$, the schema's CHECK on calls.to_number. */
static bool e164_ok(const char *s)
{
	size_t n = 1;

	if (!s || s[0] != '+' || s[1] < '1' || s[1] > '9')
		return false;
	for (; s[n]; n++)
		if (s[n] < '0' || s[n] > '9')
			return false;
	return n - 1 >= 7 && n - 1 <= 15;
}

static uint64_t now_ms(const struct direct *d)
{
	return uv_now(d->o.loop);
}

static void noop_unwait(struct gate *g, int status, const struct gate_handoff_result *r, void *x)
{
	(void)g;
	(void)r;
	(void)x;
	if (status && status != -ECANCELED)
		log_debug(LOG_GATE, "direct dial withdrawal: %s", dsp_strerror(status));
}

static void noop_pg_unwait(struct gate_pg *g, int status, void *data)
{
	(void)g;
	(void)data;
	if (status && status != -ECANCELED)
		log_debug(LOG_GATE, "direct dial withdrawal (postgres): %s", dsp_strerror(status));
}

static void tick_closed(uv_handle_t *h)
{
	struct direct *d = h->data;
	void (*cb)(void *) = d->closed_cb;
	void *data = d->closed_data;

	free(d);
	if (cb)
		cb(data);
}

static void withdraw(struct direct_dial *dd);

static void maybe_free(struct direct_dial *dd)
{
	struct direct *d = dd->d;

	if (!dd->answered || dd->ops)
		return;
	if (!d->closing) /* an admission answered after a cancel (or lost) may have registered */
		withdraw(dd);
	list_del(&dd->node);
	free(dd);
	if (list_empty(&d->dials) && d->ticking) {
		uv_timer_stop(&d->tick);
		d->ticking = false;
	}
	if (d->closing && list_empty(&d->dials))
		uv_close((uv_handle_t *)&d->tick, tick_closed);
}

/* Out of the hand-off and the gate's waiters (k - 1), in Redis and in PostgreSQL: whichever a
 * waiting admission was sent to (both unwaits are idempotent). */
static void withdraw(struct direct_dial *dd)
{
	struct direct *d = dd->d;

	if (dd->registered && !d->closing)
		handoff_remove(d->o.handoff, dd->call);
	dd->registered = false;
	if (dd->gate_waiting)
		gate_handoff_unwait(d->o.gate, dd->org, dd->call, noop_unwait, NULL);
	dd->gate_waiting = false;
	if (dd->pg_waiting)
		gate_pgmode_unwait(d->o.gpg, dd->call, noop_pg_unwait, NULL);
	dd->pg_waiting = false;
}

/* Calls the callback once (never after a cancel). The caller calls maybe_free() after. */
static void answer(struct direct_dial *dd, struct direct_dial_result *r)
{
	struct direct *d = dd->d;

	withdraw(dd);
	if (dd->answered)
		return;
	dd->answered = true;
	r->waited_ms = now_ms(d) - dd->submitted_ms;
	r->tries = dd->tries;
	switch (r->outcome) {
	case DIRECT_PLACED:
		d->st.placed++;
		break;
	case DIRECT_BUSY:
		d->st.timed_out++;
		break;
	case DIRECT_NOT_FOUND:
		d->st.not_found++;
		break;
	case DIRECT_UNAVAILABLE:
		d->st.unavailable++;
		break;
	}
	LOG_AT(LOG_INFO, LOG_DIAL, (&(const struct log_ids){ .org = dd->org, .call = dd->call }),
	       "direct dial %s%s%s after %" PRIu64 " ms, %u admissions",
	       direct_outcome_name(r->outcome), r->message ? ": " : "",
	       r->message ? r->message : "", r->waited_ms, r->tries);
	dd->cb(d, r, dd->data);
}

static void answer_unavailable(struct direct_dial *dd, const char *why)
{
	struct direct_dial_result r = {
		.outcome = DIRECT_UNAVAILABLE, .running = -1, .limit = -1, .message = why
	};
	answer(dd, &r);
}

/* ---- the 429 ---- */

static void busy_read_cb(struct gate *g, int status, const struct gate_view *v, void *data)
{
	struct direct_dial *dd = data;
	struct direct_dial_result r = { .outcome = DIRECT_BUSY, .running = -1, .limit = -1 };

	(void)g;
	dd->ops--;
	if (status == 0 && v->limits_version) {
		r.running = v->org_running;
		r.limit = v->org_limit;
	}
	answer(dd, &r);
	maybe_free(dd);
}

/* wait_ms passed without a line: withdraw, read the counts (redis mode), answer 429. A dial
 * the gate never decided (unusable, errors throughout) answers 503 instead. */
static void finish(struct direct_dial *dd)
{
	struct direct *d = dd->d;

	if (!dd->decided) {
		answer_unavailable(dd, "the concurrency gate did not decide within the wait");
		return;
	}
	withdraw(dd);
	if (dd->mode == GATE_MODE_POSTGRES) {
		struct direct_dial_result r = { .outcome = DIRECT_BUSY,
						.running = dd->pg_running,
						.limit = dd->org_limit };
		answer(dd, &r);
		return;
	}
	dd->st = DD_FINISHING;
	if (gate_read(d->o.gate, dd->org, busy_read_cb, dd) == 0) {
		dd->ops++;
		return;
	}
	struct direct_dial_result r = { .outcome = DIRECT_BUSY, .running = -1, .limit = -1 };
	answer(dd, &r);
}

/* ---- admission ---- */

static void launch(struct direct_dial *dd);

static void cancelled_redis_release(struct gate *g, int status,
				    const struct gate_release_result *res, void *data)
{
	(void)g;
	(void)res;
	(void)data;
	if (status && status != -ECANCELED) /* the reconciler frees a slot whose row has ended */
		log_warn(LOG_GATE, "cancelled direct dial's slot release: %s",
			 dsp_strerror(status));
}

static void cancelled_ended(struct gate_pg *g, int status, const bool *ended, uint32_t n,
			    void *data)
{
	struct direct_dial *dd = data;
	struct direct *d = dd->d;

	(void)g;
	(void)n;
	dd->ops--;
	if (status) /* the row stays live: the maximum-duration sweep ends it and its slots */
		log_warn(LOG_DIAL, "cancelled direct dial %s not ended: %s", dd->call,
			 dsp_strerror(status));
	else if (ended[0])
		d->st.released++;
	if (status == 0 && ended[0] && dd->mode == GATE_MODE_REDIS && !d->closing)
		gate_release(d->o.gate, dd->org, dd->call, cancelled_redis_release, NULL);
	maybe_free(dd);
}

/* Admitted after direct_dial_cancel() (the admission was in flight): nobody wants the call, so it
 * is never dialled; its row is ended (outcome canceled) and its slots released (in postgres mode
 * the row's end is the release; in redis mode gate_release() follows it). */
static void cancelled_admitted(struct direct_dial *dd)
{
	struct direct *d = dd->d;
	const char *calls[1] = { dd->call };
	int rc;

	LOG_AT(LOG_INFO, LOG_DIAL, (&(const struct log_ids){ .org = dd->org, .call = dd->call }),
	       "direct dial admitted after its cancel: released, not dialled");
	if (d->closing)
		return; /* the sweep ends it */
	if ((rc = gate_pgmode_release(d->o.gpg, calls, 1, "canceled", cancelled_ended, dd)))
		log_warn(LOG_DIAL, "cancelled direct dial %s not ended: %s", dd->call,
			 dsp_strerror(rc));
	else
		dd->ops++;
}

static void placed(struct direct_dial *dd)
{
	struct direct *d = dd->d;

	dd->gate_waiting = false; /* the admission withdrew the registration */
	dd->pg_waiting = false;
	if (dd->answered) {
		cancelled_admitted(dd);
		return;
	}
	struct dial_call c = { .call = dd->call,
			       .org = dd->org,
			       .campaign = NULL, /* the org's direct pseudo-campaign */
			       .agent = dd->agent,
			       .contact = 0,
			       .attempt = 1,
			       .to = dd->to,
			       .from = dd->has_from ? dd->from : NULL };
	int rc = d->closing ? -ESHUTDOWN : dial_start(d->o.dial, &c);

	if (rc) { /* the row is written and the slots held: the sweep ends it */
		LOG_AT(LOG_ERROR, LOG_DIAL,
		       (&(const struct log_ids){ .org = dd->org, .call = dd->call }),
		       "direct dial admitted, not dialled: %s", dsp_strerror(rc));
		answer_unavailable(dd, "the call could not be handed to the dialer");
		return;
	}
	struct direct_dial_result r = { .outcome = DIRECT_PLACED,
					.call = dd->call,
					.state = "dialing",
					.from = dd->has_from ? dd->from : NULL,
					.running = -1,
					.limit = -1 };
	answer(dd, &r);
}

/* A refusal: the dial waits for a wake (or, in postgres mode, a NOTIFY or the re-try). */
static void refused(struct direct_dial *dd)
{
	struct direct *d = dd->d;

	dd->decided = true;
	dd->st = DD_WAITING;
	dd->last_try = now_ms(d);
	/* The refusal registered (or refreshed) the waiter: a cancel's withdrawal sent while the
	 * admission was in flight may have come before it (in postgres mode the waiter row was
	 * not committed yet), so the withdrawal is owed again. */
	if (dd->mode == GATE_MODE_REDIS)
		dd->gate_waiting = true;
	else
		dd->pg_waiting = true;
	if (dd->answered || d->draining) {
		answer_unavailable(dd, "the worker is draining");
		return;
	}
	if (now_ms(d) >= dd->deadline_ms) {
		finish(dd);
	} else if (dd->woken) {
		dd->woken = false;
		launch(dd);
	}
}

/* An error, or a call not written: re-try at retry_at under a fresh call id if need be. */
static void failed(struct direct_dial *dd, int status, const char *what)
{
	struct direct *d = dd->d;

	dd->st = DD_IDLE;
	dd->retry_at = now_ms(d) + DIRECT_ERROR_RETRY_MS;
	LOG_AT(LOG_INFO, LOG_GATE, (&(const struct log_ids){ .org = dd->org, .call = dd->call }),
	       "direct dial admission: %s (%s)", what, dsp_strerror(status));
	if (d->draining)
		answer_unavailable(dd, "the worker is draining");
	else if (now_ms(d) >= dd->deadline_ms)
		finish(dd);
}

/* The row was not written: the slots were released (or are kept for a row that exists or may
 * exist: then this call id is not ours to dial any more). A new call id, and try again. */
static void not_written(struct direct_dial *dd, enum gate_pg_outcome w)
{
	struct direct *d = dd->d;

	if (w == GATE_PG_STALE_EPOCH)
		gate_mode_pg_up(d->o.mode);
	if (w == GATE_PG_EXISTS || w == GATE_PG_UNKNOWN) {
		answer_unavailable(dd, "the call row's write could not be settled");
		return;
	}
	withdraw(dd);
	select_new_call_id(dd->call, sizeof(dd->call));
	failed(dd, -EAGAIN, gate_pg_outcome_name(w));
}

static void flow_cb(struct gate_flow *f, int status, const struct gate_flow_result *r, void *data)
{
	struct direct_dial *dd = data;
	struct direct *d = dd->d;

	(void)f;
	dd->ops--;
	dd->st = DD_IDLE;
	if (status) {
		if (status != -ECANCELED && !d->closing)
			gate_mode_report(d->o.mode, dd->epoch, status);
		if (status == -ECANCELED || d->closing)
			answer_unavailable(dd, "the worker is closing");
		else
			failed(dd, status, "not decided");
	} else if (r->outcome == GATE_FLOW_ADMITTED) {
		placed(dd);
	} else if (r->outcome == GATE_FLOW_REFUSED) {
		refused(dd);
	} else if (r->outcome == GATE_FLOW_NOT_WRITTEN) {
		not_written(dd, r->write);
	} else { /* HELD: a fresh call id cannot hold a slot */
		LOG_AT(LOG_ERROR, LOG_GATE,
		       (&(const struct log_ids){ .org = dd->org, .call = dd->call }),
		       "a fresh direct call id holds a slot");
		answer_unavailable(dd, "the call id already holds a slot");
	}
	maybe_free(dd);
}

static void pg_cb(struct gate_pg *g, int status, const struct gate_pgmode_answer *ans, void *data)
{
	struct direct_dial *dd = data;
	struct direct *d = dd->d;

	(void)g;
	dd->ops--;
	dd->st = DD_IDLE;
	if (status) {
		if (status == -ESTALE && !d->closing)
			gate_mode_pg_up(d->o.mode);
		/* The answer was lost, not the transaction: it may have committed a waiter row
		 * after a cancel's withdrawal, which is owed again (as in refused()). */
		if (status != -ECANCELED && !d->closing)
			dd->pg_waiting = true;
		if (status == -ECANCELED || d->closing)
			answer_unavailable(dd, "the worker is closing");
		else if (status == -ENOENT)
			answer_unavailable(dd, "no such organisation");
		else
			failed(dd, status, "not decided");
		maybe_free(dd);
		return;
	}
	const struct gate_pgmode_result *r = &ans->results[0];
	dd->pg_running = ans->org_running;
	if (r->outcome == GATE_PGMODE_ADMITTED)
		placed(dd);
	else if (r->outcome == GATE_PGMODE_REFUSED)
		refused(dd);
	else
		not_written(dd, r->write);
	maybe_free(dd);
}

static void wake_cb(struct handoff *h, const char *org, const char *call, enum handoff_why why,
		    void *data)
{
	struct direct_dial *dd = data;

	(void)h;
	(void)org;
	(void)call;
	(void)why;
	dd->d->st.wakes++;
	if (dd->st == DD_INFLIGHT)
		dd->woken = true;
	else if (dd->st == DD_WAITING && !dd->answered)
		launch(dd);
}

/* One admission: redis mode through gate_flow (the Redis script, then the fenced call-row
 * write), postgres mode through gate_pgmode_admit (the decision and the write in one
 * transaction). Either way a refusal registers the dial as waiting. */
static void launch(struct direct_dial *dd)
{
	struct direct *d = dd->d;
	struct gate_mode_state ms;
	struct gate_pg_dial dial = { .campaign = NULL,
				     .agent = dd->agent,
				     .attempt = 1,
				     .to_number = dd->to,
				     .from_number = dd->has_from ? dd->from : NULL };
	int rc;

	gate_mode_get(d->o.mode, &ms);
	dd->st = DD_IDLE;
	dd->woken = false;
	if (!ms.usable || ms.switching) {
		dd->retry_at = now_ms(d) + DIRECT_ERROR_RETRY_MS;
		return;
	}
	dd->mode = ms.mode;
	dd->epoch = ms.epoch;
	dd->last_try = now_ms(d);
	if (ms.mode == GATE_MODE_REDIS) {
		if (!dd->registered &&
		    handoff_add(d->o.handoff, dd->org, dd->call, wake_cb, dd) == 0)
			dd->registered = true;
		struct gate_admit_req req = { .org = dd->org,
					      .call = dd->call,
					      .direct = true,
					      .agent = dd->agent,
					      .wait = true,
					      .worker = dd->registered
								? handoff_worker(d->o.handoff)
								: NULL };
		struct gate_flow_row row = { .mode = GATE_MODE_REDIS,
					     .epoch = ms.epoch,
					     .dials = &dial };
		rc = gate_flow_admit(d->o.flow, &req, &row, flow_cb, dd);
		if (rc)
			gate_mode_report(d->o.mode, ms.epoch, rc);
		else /* it may register the waiter even if its answer never comes back */
			dd->gate_waiting = true;
	} else {
		struct gate_pgmode_req req = {
			.call = dd->call, .candidates = &dial, .n_candidates = 1, .wait = true
		};
		rc = gate_pgmode_admit(d->o.gpg, dd->org, ms.epoch, d->o.write_deadline_ms, &req, 1,
				       pg_cb, dd);
		if (rc == 0)
			dd->pg_waiting = true;
	}
	if (rc) {
		dd->retry_at = now_ms(d) + DIRECT_ERROR_RETRY_MS;
		return;
	}
	dd->ops++;
	dd->tries++;
	d->st.admissions++;
	dd->st = DD_INFLIGHT;
}

/* ---- the lookup ---- */

static void lookup_cb(int status, const struct pg_results *r, void *data)
{
	struct direct_dial *dd = data;
	struct direct *d = dd->d;
	const PGresult *res = status == 0 && r->n == 1 ? r->res[0] : NULL;

	dd->ops--;
	dd->st = DD_IDLE;
	if (dd->answered) {
		maybe_free(dd);
		return;
	}
	if (!res) {
		if (status == DSP_EPG && r->error)
			log_error(LOG_PG, "direct dial lookup: %s", PQresultErrorMessage(r->error));
		answer_unavailable(dd, "the agent could not be read");
	} else if (PQntuples(res) != 1) {
		struct direct_dial_result nf = { .outcome = DIRECT_NOT_FOUND,
						 .running = -1,
						 .limit = -1,
						 .message = "agent not found" };
		answer(dd, &nf);
	} else if (d->draining) {
		answer_unavailable(dd, "the worker is draining");
	} else if (now_ms(d) >= dd->deadline_ms) {
		answer_unavailable(dd, "the agent was read after the wait");
	} else {
		if (!dd->has_from && !PQgetisnull(res, 0, 0)) {
			snprintf(dd->from, sizeof(dd->from), "%s", PQgetvalue(res, 0, 0));
			dd->has_from = true;
		}
		dd->org_limit = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
		launch(dd);
	}
	maybe_free(dd);
}

/* ---- the tick: deadlines, re-tries ---- */

static void tick_cb(uv_timer_t *t)
{
	struct direct *d = t->data;
	uint64_t now = now_ms(d);
	struct list_node *p, *tmp;

	list_for_each_safe (p, tmp, &d->dials) {
		struct direct_dial *dd = list_entry(p, struct direct_dial, node);

		if (dd->answered)
			continue;
		if (dd->st == DD_IDLE || dd->st == DD_WAITING) {
			if (now >= dd->deadline_ms)
				finish(dd);
			else if (dd->st == DD_IDLE && now >= dd->retry_at)
				launch(dd);
			else if (dd->st == DD_WAITING && dd->mode == GATE_MODE_POSTGRES &&
				 now >= dd->last_try + DIRECT_PG_RETRY_MS)
				launch(dd);
			maybe_free(dd);
		}
	}
}

/* ---- the API ---- */

int direct_new(const struct direct_options *o, struct direct **out)
{
	struct direct *d;
	int rc;

	if (!o || !out || !o->loop || !o->pool || !o->gate || !o->flow || !o->gpg || !o->mode ||
	    !o->handoff || !o->dial)
		return -EINVAL;
	if (!(d = calloc(1, sizeof(*d))))
		return -ENOMEM;
	d->o = *o;
	if (!d->o.write_deadline_ms)
		d->o.write_deadline_ms = GATE_PG_WRITE_DEADLINE_MS;
	list_init(&d->dials);
	if ((rc = pg_pool_prepare(o->pool, SQL_DIRECT_LOOKUP, 2, &d->lookup))) {
		free(d);
		return rc;
	}
	uv_timer_init(o->loop, &d->tick);
	d->tick.data = d;
	*out = d;
	return 0;
}

int direct_dial_submit(struct direct *d, const struct direct_dial_req *req, direct_dial_cb cb,
		       void *data, struct direct_dial **out)
{
	struct direct_dial *dd;

	if (!d || !req || !cb || !ident_ok(req->org) || !ident_ok(req->agent) ||
	    !e164_ok(req->to_number) || (req->from_number && !e164_ok(req->from_number)))
		return -EINVAL;
	if (d->draining || d->closing)
		return -ESHUTDOWN;
	if (!(dd = calloc(1, sizeof(*dd))))
		return -ENOMEM;
	*dd = (struct direct_dial){ .d = d, .cb = cb, .data = data, .st = DD_LOOKUP };
	snprintf(dd->org, sizeof(dd->org), "%s", req->org);
	snprintf(dd->agent, sizeof(dd->agent), "%s", req->agent);
	snprintf(dd->to, sizeof(dd->to), "%s", req->to_number);
	if (req->from_number) {
		snprintf(dd->from, sizeof(dd->from), "%s", req->from_number);
		dd->has_from = true;
	}
	select_new_call_id(dd->call, sizeof(dd->call));
	dd->submitted_ms = now_ms(d);
	dd->deadline_ms = dd->submitted_ms + (req->wait_ms ? req->wait_ms : DIRECT_WAIT_MS);
	dd->org_limit = -1;
	dd->pg_running = -1;
	const char *v[2] = { dd->org, dd->agent };
	struct pg_query q = { .stmt = d->lookup, .nparams = 2, .values = v };
	int rc = pg_pool_exec(d->o.pool, PG_LANE_NORMAL, &q, lookup_cb, dd);
	if (rc) {
		free(dd);
		return rc;
	}
	dd->ops++;
	list_add_tail(&d->dials, &dd->node);
	if (!d->ticking) {
		uv_timer_start(&d->tick, tick_cb, TICK_MS, TICK_MS);
		d->ticking = true;
	}
	d->st.submitted++;
	if (out)
		*out = dd;
	return 0;
}

void direct_dial_cancel(struct direct_dial *dd)
{
	if (!dd || dd->answered)
		return;
	dd->answered = true;
	dd->d->st.cancelled++;
	withdraw(dd);
	maybe_free(dd);
}

void direct_org_freed(struct direct *d, const char *org)
{
	struct list_node *p, *tmp;

	list_for_each_safe (p, tmp, &d->dials) {
		struct direct_dial *dd = list_entry(p, struct direct_dial, node);

		if (dd->answered || dd->mode != GATE_MODE_POSTGRES || strcmp(dd->org, org) != 0)
			continue;
		d->st.wakes++;
		if (dd->st == DD_INFLIGHT)
			dd->woken = true;
		else if (dd->st == DD_WAITING)
			launch(dd);
	}
}

void direct_mode_changed(struct direct *d)
{
	struct list_node *p, *tmp;

	list_for_each_safe (p, tmp, &d->dials) {
		struct direct_dial *dd = list_entry(p, struct direct_dial, node);

		if (dd->answered)
			continue;
		if (dd->st == DD_INFLIGHT)
			dd->woken = true;
		else if (dd->st == DD_WAITING)
			launch(dd);
	}
}

void direct_drain(struct direct *d)
{
	struct list_node *p, *tmp;

	if (!d)
		return;
	d->draining = true;
	list_for_each_safe (p, tmp, &d->dials) {
		struct direct_dial *dd = list_entry(p, struct direct_dial, node);

		if (dd->st == DD_IDLE || dd->st == DD_WAITING) {
			answer_unavailable(dd, "the worker is draining");
			maybe_free(dd);
		}
	}
}

void direct_close(struct direct *d, void (*closed_cb)(void *data), void *data)
{
	struct list_node *p, *tmp;

	if (!d)
		return;
	direct_drain(d);
	d->closed_cb = closed_cb;
	d->closed_data = data;
	list_for_each_safe (p, tmp, &d->dials) { /* in flight: answered now, freed when back */
		struct direct_dial *dd = list_entry(p, struct direct_dial, node);

		withdraw(dd);
		if (!dd->answered)
			answer_unavailable(dd, "the worker is closing");
	}
	d->closing = true;
	if (list_empty(&d->dials))
		uv_close((uv_handle_t *)&d->tick, tick_closed);
}

void direct_get_stats(const struct direct *d, struct direct_stats *out)
{
	const struct list_node *p;

	*out = d->st;
	out->waiting = 0;
	for (p = d->dials.next; p != &d->dials; p = p->next)
		out->waiting += !list_entry(p, struct direct_dial, node)->answered;
}

int direct_http_status(enum direct_outcome o)
{
	switch (o) {
	case DIRECT_PLACED:
		return 201;
	case DIRECT_BUSY:
		return 429;
	case DIRECT_NOT_FOUND:
		return 404;
	case DIRECT_UNAVAILABLE:
		break;
	}
	return 503;
}

const char *direct_outcome_name(enum direct_outcome o)
{
	static const char *const names[] = { "placed", "busy", "not_found", "unavailable" };

	return (unsigned)o < sizeof(names) / sizeof(names[0]) ? names[o] : "unknown";
}

int direct_busy_body(int64_t running, int64_t limit, char *buf, size_t size)
{
	int n;

	if (running >= 0 && limit > 0)
		n = snprintf(
			buf, size,
			"{\"error\":%d,\"message\":\"Account concurrency limit reached (%" PRId64
			" of %" PRId64 " lines in use).\"}",
			DIRECT_ERROR_CODE, running, limit);
	else
		n = snprintf(buf, size,
			     "{\"error\":%d,\"message\":\"Account concurrency limit reached; all "
			     "lines are in use.\"}",
			     DIRECT_ERROR_CODE);
	return n < 0 || (size_t)n >= size ? -ENOSPC : n;
}
