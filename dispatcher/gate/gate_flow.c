/* The admit operation: Redis admission, then the call rows of one loop turn (gate_flow.h). */
#include "gate_flow.h"

#include "log.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define ID_SZ  65
#define NUM_SZ 33

struct dial_copy {
	char campaign[ID_SZ], agent[ID_SZ], to[NUM_SZ], from[NUM_SZ];
	bool has_campaign, has_agent, has_from;
	int64_t contact, lease_token;
	int32_t attempt;
};

enum entry_state { ENTRY_SENT, ENTRY_QUEUED, ENTRY_WRITING };

struct entry {
	struct entry *prev, *next;
	struct gate_flow *f;
	enum entry_state state;
	bool answered;	/* cb called (or cancelled) */
	bool cancelled; /* answered -ECANCELED by gate_flow_close() */
	gate_flow_cb cb;
	void *data;
	char call[ID_SZ], org[ID_SZ];
	enum gate_mode mode;
	uint64_t epoch, sent_ms;
	uint32_t n_dials;
	struct dial_copy dials[GATE_CANDIDATES_MAX];
	struct gate_admit_result admit; /* pointers into admit_campaign / admit_agent */
	char admit_campaign[ID_SZ], admit_agent[ID_SZ];
	int chosen;
};

struct batch {
	struct gate_flow *f;
	uint32_t n;
	struct entry *e[GATE_PG_WRITE_MAX];
};

struct gate_flow {
	uv_loop_t *loop;
	struct gate *gate;
	struct gate_pg *pg;
	uint64_t deadline_ms;
	uv_timer_t timer;
	struct entry *head; /* every live entry */
	uint32_t live;	    /* entries + batches in flight */
	bool closing, timer_closed;
	void (*closed_cb)(void *data);
	void *closed_data;
	struct gate_flow_stats stats;
};

static void flush(uv_timer_t *t);

static bool copy_str(char *dst, size_t size, const char *src)
{
	size_t n;

	if (!src)
		return false;
	n = strlen(src);
	if (n >= size)
		return false;
	memcpy(dst, src, n + 1);
	return true;
}

int gate_flow_new(const struct gate_flow_options *o, struct gate_flow **out)
{
	struct gate_flow *f;

	if (!o || !o->loop || !o->gate || !o->pg || !out)
		return -EINVAL;
	f = calloc(1, sizeof(*f));
	if (!f)
		return -ENOMEM;
	f->loop = o->loop;
	f->gate = o->gate;
	f->pg = o->pg;
	f->deadline_ms = o->write_deadline_ms ? o->write_deadline_ms : GATE_PG_WRITE_DEADLINE_MS;
	uv_timer_init(o->loop, &f->timer);
	f->timer.data = f;
	*out = f;
	return 0;
}

static void maybe_free(struct gate_flow *f)
{
	if (!f->closing || f->live || !f->timer_closed)
		return;
	if (f->closed_cb)
		f->closed_cb(f->closed_data);
	free(f);
}

static void entry_free(struct entry *e)
{
	struct gate_flow *f = e->f;

	if (e->prev)
		e->prev->next = e->next;
	else
		f->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	free(e);
	f->live--;
	maybe_free(f);
}

static void answer(struct entry *e, int status, const struct gate_flow_result *r)
{
	if (e->answered)
		return;
	e->answered = true;
	e->cb(e->f, status, r, e->data);
}

struct release_ctx {
	char call[ID_SZ], org[ID_SZ];
};

static void release_cb(struct gate *g, int status, const struct gate_release_result *res,
		       void *data)
{
	struct release_ctx *c = data;

	(void)g;
	(void)res;
	/* Never retried. GATE_ELOST (the org's or the system's generation is not the gate's: a way
	 * back is rebuilding, or the state is gone): nothing was freed, and the rebuild from
	 * PostgreSQL's live calls, which do not hold this call, is the truth. */
	if (status == GATE_ELOST)
		LOG_AT(LOG_INFO, LOG_GATE,
		       (&(const struct log_ids){ .org = c->org, .call = c->call }),
		       "release of a call not dialled refused (stale generation): the rebuild "
		       "settles it");
	else if (status)
		LOG_AT(LOG_WARN, LOG_GATE,
		       (&(const struct log_ids){ .org = c->org, .call = c->call }),
		       "release of a call not dialled failed (%d): the reconciler frees it",
		       status);
	free(c);
}

/* Sends the Redis release of e's slots (its row was not written, or was ended). Returns whether
 * it was sent. */
static bool release(struct entry *e)
{
	struct release_ctx *c = malloc(sizeof(*c));

	if (!c) {
		LOG_AT(LOG_ERROR, LOG_GATE,
		       (&(const struct log_ids){ .org = e->org, .call = e->call }),
		       "release of a call not dialled: out of memory; the reconciler frees it");
		return false;
	}
	memcpy(c->call, e->call, sizeof(c->call));
	memcpy(c->org, e->org, sizeof(c->org));
	int rc = gate_release(e->f->gate, e->org, e->call, release_cb, c);
	if (rc) {
		LOG_AT(LOG_WARN, LOG_GATE,
		       (&(const struct log_ids){ .org = e->org, .call = e->call }),
		       "release of a call not dialled not sent (%d): the reconciler frees it", rc);
		free(c);
		return false;
	}
	e->f->stats.released++;
	return true;
}

/* e was admitted but its row will not be written (outcome o). */
static void not_written(struct entry *e, enum gate_pg_outcome o)
{
	struct gate_flow_result r = {
		.outcome = GATE_FLOW_NOT_WRITTEN, .call = e->call, .admit = &e->admit, .write = o
	};

	if (gate_pg_outcome_releases(o))
		r.released = release(e);
	answer(e, 0, &r);
}

static void admit_cb(struct gate *g, int status, const struct gate_admit_result *res, void *data)
{
	struct entry *e = data;
	struct gate_flow *f = e->f;
	struct gate_flow_result r = { .call = e->call, .admit = &e->admit };

	(void)g;
	if (status) {
		answer(e, status, NULL);
		entry_free(e);
		return;
	}
	e->admit = *res;
	e->admit.campaign = NULL;
	e->admit.agent = NULL;
	if (copy_str(e->admit_campaign, sizeof(e->admit_campaign), res->campaign))
		e->admit.campaign = e->admit_campaign;
	if (copy_str(e->admit_agent, sizeof(e->admit_agent), res->agent))
		e->admit.agent = e->admit_agent;
	if (res->outcome != GATE_ADMITTED) {
		r.outcome = res->outcome == GATE_HELD ? GATE_FLOW_HELD : GATE_FLOW_REFUSED;
		if (r.outcome == GATE_FLOW_REFUSED)
			f->stats.refused++;
		answer(e, 0, &r);
		entry_free(e);
		return;
	}
	e->chosen = res->index < 0 ? 0 : res->index;
	if (e->chosen >= (int)e->n_dials || f->closing) {
		if (e->chosen >= (int)e->n_dials)
			LOG_AT(LOG_ERROR, LOG_GATE,
			       (&(const struct log_ids){ .org = e->org, .call = e->call }),
			       "admitted candidate %d has no dial", res->index);
		not_written(e, GATE_PG_FAILED);
		entry_free(e);
		return;
	}
	e->state = ENTRY_QUEUED;
	if (!uv_is_active((uv_handle_t *)&f->timer))
		uv_timer_start(&f->timer, flush, 0, 0);
}

static void to_dial(const struct dial_copy *d, struct gate_pg_dial *out)
{
	*out = (struct gate_pg_dial){
		.campaign = d->has_campaign ? d->campaign : NULL,
		.agent = d->has_agent ? d->agent : NULL,
		.contact = d->contact,
		.lease_token = d->lease_token,
		.attempt = d->attempt,
		.to_number = d->to,
		.from_number = d->has_from ? d->from : NULL,
	};
}

/* Rows written for callers answered -ECANCELED (the flow closed while their write was in
 * flight): ended in PostgreSQL (gate_pg_cancel_written()), then their slots released. */
struct cancel {
	struct gate_flow *f;
	uint32_t n;
	struct entry *e[GATE_PG_WRITE_MAX];
};

static void cancel_cb(struct gate_pg *g, int status, const bool *ended, uint32_t n, void *data)
{
	struct cancel *c = data;
	struct gate_flow *f = c->f;

	(void)g;
	f->live++; /* hold f while the entries go */
	if (status)
		log_error(LOG_GATE,
			  "%u call rows written after their callers were cancelled could not be"
			  " ended (%d): they stay dialing, slots held, until the maximum-duration"
			  " sweep",
			  c->n, status);
	for (uint32_t i = 0; i < c->n; i++) {
		/* Only a row ended here: one that left dialing otherwise is its ender's. */
		if (!status && i < n && ended[i]) {
			f->stats.cancelled++;
			release(c->e[i]);
		}
		entry_free(c->e[i]);
	}
	free(c);
	f->live--; /* the cancel */
	f->live--; /* the hold */
	maybe_free(f);
}

/* Ends the rows of c's entries; frees c and them when it cannot be sent. */
static void cancel_send(struct gate_flow *f, struct cancel *c)
{
	struct gate_pg_call calls[GATE_PG_WRITE_MAX];
	int rc;

	for (uint32_t i = 0; i < c->n; i++) {
		struct entry *e = c->e[i];
		calls[i] = (struct gate_pg_call){ .call = e->call, .org = e->org };
		to_dial(&e->dials[e->chosen], &calls[i].dial);
	}
	f->live++;
	rc = gate_pg_cancel_written(f->pg, calls, c->n, f->deadline_ms, cancel_cb, c);
	if (rc)
		cancel_cb(f->pg, rc, NULL, c->n, c);
}

static void write_cb(struct gate_pg *g, const enum gate_pg_outcome *out, uint32_t n, void *data)
{
	struct batch *b = data;
	struct gate_flow *f = b->f;
	struct cancel *c = NULL;

	(void)g;
	f->live++; /* hold f while the entries go */
	for (uint32_t i = 0; i < b->n; i++) {
		struct entry *e = b->e[i];
		enum gate_pg_outcome o = i < n ? out[i] : GATE_PG_FAILED;
		if (o == GATE_PG_WRITTEN && e->cancelled) {
			/* Written, but its caller will never dial it: end it now rather than
			 * leave it dialing with its slots until the maximum-duration sweep. */
			if (!c)
				c = calloc(1, sizeof(*c));
			if (c) {
				c->f = f;
				c->e[c->n++] = e;
				continue;
			}
			log_error(LOG_GATE,
				  "a call row written for a cancelled caller: out of memory;"
				  " it stays dialing until the maximum-duration sweep");
		} else if (o == GATE_PG_WRITTEN) {
			struct gate_flow_result r = { .outcome = GATE_FLOW_ADMITTED,
						      .call = e->call,
						      .admit = &e->admit,
						      .write = o };
			f->stats.written++;
			answer(e, 0, &r);
		} else {
			not_written(e, o);
		}
		entry_free(e);
	}
	free(b);
	if (c)
		cancel_send(f, c);
	f->live--; /* the batch */
	f->live--; /* the hold */
	maybe_free(f);
}

/* Whether e's call id or contact is one of the batch's already (gate_pg_calls_check() refuses
 * such a write whole). */
static bool in_batch(const struct batch *b, const struct gate_pg_call *calls, const struct entry *e)
{
	const struct dial_copy *d = &e->dials[e->chosen];

	for (uint32_t i = 0; i < b->n; i++)
		if (strcasecmp(calls[i].call, e->call) == 0 ||
		    (d->contact && calls[i].dial.contact == d->contact))
			return true;
	return false;
}

/* Writes the queued rows whose epoch and mode are those of the first queued one. An entry whose
 * call id or contact is in the batch already waits for the next batch (of the same flush): a
 * stale copy of a contact (claimed again after its lease ran out) is then refused alone (lease
 * lost) instead of the check refusing the whole write. */
static bool write_one_batch(struct gate_flow *f)
{
	struct entry *first = NULL;
	struct gate_pg_call calls[GATE_PG_WRITE_MAX];
	struct batch *b;
	uint64_t now = uv_now(f->loop), oldest = now;

	for (struct entry *e = f->head; e; e = e->next)
		if (e->state == ENTRY_QUEUED) {
			first = e;
			break;
		}
	if (!first)
		return false;
	b = calloc(1, sizeof(*b));
	if (!b) {
		for (struct entry *e = f->head, *next; e; e = next) {
			next = e->next;
			if (e->state == ENTRY_QUEUED) {
				not_written(e, GATE_PG_FAILED);
				entry_free(e);
			}
		}
		return false;
	}
	b->f = f;
	for (struct entry *e = first; e && b->n < GATE_PG_WRITE_MAX; e = e->next) {
		if (e->state != ENTRY_QUEUED || e->epoch != first->epoch ||
		    e->mode != first->mode || in_batch(b, calls, e))
			continue;
		e->state = ENTRY_WRITING;
		b->e[b->n] = e;
		calls[b->n] = (struct gate_pg_call){ .call = e->call, .org = e->org };
		to_dial(&e->dials[e->chosen], &calls[b->n].dial);
		if (e->sent_ms < oldest)
			oldest = e->sent_ms;
		b->n++;
	}
	uint64_t spent = now - oldest;
	int rc = spent >= f->deadline_ms
			 ? -ETIMEDOUT
			 : gate_pg_write(f->pg, first->mode, first->epoch, f->deadline_ms - spent,
					 calls, b->n, write_cb, b);
	f->live++;
	if (rc == 0) {
		f->stats.batches++;
		return true;
	}
	enum gate_pg_outcome o[GATE_PG_WRITE_MAX];
	for (uint32_t i = 0; i < b->n; i++)
		o[i] = rc == -ETIMEDOUT ? GATE_PG_DEADLINE : GATE_PG_FAILED;
	if (rc != -ETIMEDOUT)
		log_warn(LOG_GATE, "call-row write of %u calls not sent (%d): releasing them", b->n,
			 rc);
	write_cb(f->pg, o, b->n, b);
	return true;
}

static void flush(uv_timer_t *t)
{
	struct gate_flow *f = t->data;

	f->live++;
	while (write_one_batch(f))
		;
	f->live--;
	maybe_free(f);
}

int gate_flow_admit(struct gate_flow *f, const struct gate_admit_req *req,
		    const struct gate_flow_row *row, gate_flow_cb cb, void *data)
{
	struct entry *e;
	uint32_t n;

	if (!f || !req || !row || !row->dials || !cb)
		return -EINVAL;
	if (f->closing)
		return -ESHUTDOWN;
	n = req->direct ? 1 : req->n_campaigns;
	if (n < 1 || n > GATE_CANDIDATES_MAX)
		return -EINVAL;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	if (!copy_str(e->call, sizeof(e->call), req->call) ||
	    !copy_str(e->org, sizeof(e->org), req->org))
		goto inval;
	for (uint32_t i = 0; i < n; i++) {
		const struct gate_pg_dial *d = &row->dials[i];
		struct dial_copy *c = &e->dials[i];
		c->has_campaign = d->campaign != NULL;
		c->has_agent = d->agent != NULL;
		c->has_from = d->from_number != NULL;
		if ((d->campaign && !copy_str(c->campaign, sizeof(c->campaign), d->campaign)) ||
		    (d->agent && !copy_str(c->agent, sizeof(c->agent), d->agent)) ||
		    !copy_str(c->to, sizeof(c->to), d->to_number) ||
		    (d->from_number && !copy_str(c->from, sizeof(c->from), d->from_number)))
			goto inval;
		c->contact = d->contact;
		c->lease_token = d->lease_token;
		c->attempt = d->attempt;
	}
	e->n_dials = n;
	e->f = f;
	e->cb = cb;
	e->data = data;
	e->mode = row->mode;
	e->epoch = row->epoch;
	e->sent_ms = uv_now(f->loop);
	e->state = ENTRY_SENT;
	int rc = gate_admit(f->gate, req, admit_cb, e);
	if (rc) {
		free(e);
		return rc;
	}
	e->next = f->head;
	if (f->head)
		f->head->prev = e;
	f->head = e;
	f->live++;
	f->stats.admits++;
	return 0;
inval:
	free(e);
	return -EINVAL;
}

static void timer_closed(uv_handle_t *h)
{
	struct gate_flow *f = h->data;

	f->timer_closed = true;
	maybe_free(f);
}

void gate_flow_close(struct gate_flow *f, void (*closed_cb)(void *data), void *data)
{
	if (!f || f->closing)
		return;
	f->closing = true;
	f->closed_cb = closed_cb;
	f->closed_data = data;
	f->live++; /* hold f while callbacks run */
	uv_timer_stop(&f->timer);
	for (struct entry *e = f->head, *next; e; e = next) {
		next = e->next;
		if (e->state == ENTRY_QUEUED) { /* admitted, not written: give the slots back */
			release(e);
			answer(e, -ECANCELED, NULL);
			entry_free(e);
		} else {
			e->cancelled = true;
			answer(e, -ECANCELED, NULL);
		}
	}
	uv_close((uv_handle_t *)&f->timer, timer_closed);
	f->live--;
	maybe_free(f);
}

void gate_flow_get_stats(const struct gate_flow *f, struct gate_flow_stats *out)
{
	*out = f->stats;
}
