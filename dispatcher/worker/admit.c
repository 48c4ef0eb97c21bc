/* Admissions: one gate call per admission with the DRR's ordered candidates, the waiters of
 * C9, and the hand-over of admitted calls to the dialer (select.h). */
#include "select_int.h"

#include "error.h"
#include "gate_pgmode.h"
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

void admit_drained_org(struct sorg *o); /* select.c */

void select_new_call_id(char *out, size_t size)
{
	static uint64_t x;
	uint8_t b[16];

	if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b)) {
		if (!x)
			x = uv_hrtime() | 1;
		for (int i = 0; i < 16; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			b[i] = (uint8_t)(x >> 24);
		}
	}
	b[6] = (uint8_t)((b[6] & 0x0f) | 0x40);
	b[8] = (uint8_t)((b[8] & 0x3f) | 0x80);
	snprintf(out, size, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
		 b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
		 b[13], b[14], b[15]);
}

static void unreserve_all(struct sadmit *a)
{
	if (a->lead) {
		a->lead->leading--;
		a->lead = NULL;
	}
	for (uint32_t i = 0; i < a->n; i++) {
		if (a->cand[i]) {
			a->cand[i]->reserved = false;
			a->org->freec++;
		}
		a->cand[i] = NULL;
	}
	a->n = 0;
	if (a->org->revoked)
		sel_hand_back_revoked(a->org);
}

/* The contact of candidate i leaves the set (admitted, or lost). */
static struct scontact *take_cand(struct sadmit *a, uint32_t i)
{
	struct scontact *c = i < a->n ? a->cand[i] : NULL;

	if (c) {
		a->cand[i] = NULL;
		a->org->held--;
		sel_release_contact(c, false);
	}
	return c;
}

static void noop_unwait(struct gate *g, int status, const struct gate_handoff_result *r, void *d)
{
	(void)g;
	(void)status;
	(void)r;
	(void)d;
}

void admit_free(struct sadmit *a, bool unwait)
{
	struct sorg *o = a->org;
	struct select *s = o->s;

	unreserve_all(a);
	if (a->registered) {
		handoff_remove(s->o.handoff, a->call);
		if (unwait)
			gate_handoff_unwait(s->o.gate, o->id, a->call, noop_unwait, NULL);
	}
	list_del(&a->node);
	o->n_admits--;
	free(a);
}

static void after_answer(struct sorg *o)
{
	struct select *s = o->s;

	if (s->draining) {
		/* An admission answered after the drain started (refused: now waiting, or idle)
		 * is withdrawn here: nothing else frees it once the tick and wakes are stopped. */
		struct list_node *p, *t;
		list_for_each_safe (p, t, &o->admits) {
			struct sadmit *a = list_entry(p, struct sadmit, node);
			if (a->st != SA_INFLIGHT)
				admit_free(a, true);
		}
		admit_drained_org(o);
		sel_maybe_drained(s);
	} else {
		sel_pump(o);
	}
}

/* The admitted candidate's call goes to the dialer; its campaign is charged its pick. */
static void admitted(struct sadmit *a, int index)
{
	struct sorg *o = a->org;
	struct select *s = o->s;
	struct scontact *c = take_cand(a, (uint32_t)index);

	if (!c) {
		log_error(LOG_GATE, "org %s call %s: admitted candidate %d unknown", o->id, a->call,
			  index);
		return;
	}
	struct scamp *cp = c->camp;
	struct dial_call d = { .call = a->call,
			       .org = o->id,
			       .campaign = cp->id,
			       .agent = cp->agent,
			       .contact = c->id,
			       .attempt = c->attempts + 1,
			       .to = c->phone,
			       .from = cp->has_from ? cp->from : NULL };
	sel_charge(o, a, (uint32_t)index);
	s->st.admitted++;
	metrics_histogram_observe(&s->st.slot_wait,
				  (double)(uv_now(s->o.loop) - a->asked_ms) / 1000.0);
	int rc = dial_start(s->o.dial, &d);
	if (rc) /* the row is written and the slots held: the sweeps settle it */
		log_error(LOG_DIAL, "org %s call %s: not dialled: %s", o->id, a->call,
			  dsp_strerror(rc));
	free(c);
}

static void not_written(struct sadmit *a, int index, enum gate_pg_outcome w)
{
	struct select *s = a->org->s;

	if (w == GATE_PG_LEASE_LOST || w == GATE_PG_EXISTS || w == GATE_PG_UNKNOWN) {
		struct scontact *c = take_cand(a, (uint32_t)index);
		/* Lease lost includes a batch or campaign stopped or paused since the claim: the
		 * contact goes back now (held, cancelled), not at the lease's end. */
		if (c && w == GATE_PG_LEASE_LOST)
			sel_hand_back_one(s, c->id, c->token);
		free(c); /* not ours any more, or settled elsewhere */
		s->st.lost++;
	}
	if (w == GATE_PG_STALE_EPOCH)
		gate_mode_pg_up(s->o.mode); /* re-read the mode */
	log_info(LOG_GATE, "org %s call %s: admitted, row not written (%s)", a->org->id, a->call,
		 gate_pg_outcome_name(w));
}

static void refused(struct sadmit *a)
{
	struct select *s = a->org->s;

	s->st.refused++;
	unreserve_all(a);
	if (!a->since_ms)
		a->since_ms = uv_now(s->o.loop);
	a->st = SA_WAITING;
}

/* One candidate's decision, counted as the gate counts them (select.h, the metrics). */
static void count_decision(struct select *s, enum fairshare_level level, bool fcfs)
{
	if (level != FAIRSHARE_LEVEL_NONE && (unsigned)level < FAIRSHARE_LEVEL_COUNT)
		s->st.refused_level[level]++;
	s->st.fcfs += fcfs;
}

static void flow_cb(struct gate_flow *f, int status, const struct gate_flow_result *r, void *data)
{
	struct sadmit *a = data;
	struct sorg *o = a->org;
	struct select *s = o->s;

	(void)f;
	a->st = SA_IDLE;
	if (status) {
		s->st.errors++;
		if (status != -ECANCELED)
			gate_mode_report(s->o.mode, a->epoch, status);
		unreserve_all(a);
		o->retry_at = uv_now(s->o.loop) + (status == -ENOENT ? 1000 : 200);
		if (status == -ECANCELED || s->draining)
			admit_free(a, false);
		after_answer(o);
		return;
	}
	for (uint32_t i = 0; r->admit && i < r->admit->n_decisions; i++)
		count_decision(s, r->admit->decisions[i].level, r->admit->decisions[i].fcfs);
	switch (r->outcome) {
	case GATE_FLOW_ADMITTED:
		admitted(a, r->admit->index);
		admit_free(a, false);
		break;
	case GATE_FLOW_REFUSED:
		refused(a);
		if (a->woken && !s->draining) {
			a->woken = false;
			a->st = SA_IDLE; /* a wake came while in flight: try again now */
		}
		break;
	case GATE_FLOW_HELD:
		log_error(LOG_GATE, "org %s call %s: a fresh call id holds a slot", o->id, a->call);
		admit_free(a, true);
		break;
	case GATE_FLOW_NOT_WRITTEN:
		not_written(a, r->admit->index, r->write);
		admit_free(a, false);
		break;
	}
	after_answer(o);
}

static void pg_cb(struct gate_pg *g, int status, const struct gate_pgmode_answer *ans, void *data)
{
	struct sadmit *a = data;
	struct sorg *o = a->org;
	struct select *s = o->s;

	(void)g;
	a->st = SA_IDLE;
	if (status) {
		s->st.errors++;
		if (status == -ESTALE)
			gate_mode_pg_up(s->o.mode);
		unreserve_all(a);
		o->retry_at = uv_now(s->o.loop) + 200;
		if (status == -ECANCELED || s->draining)
			admit_free(a, false);
		after_answer(o);
		return;
	}
	const struct gate_pgmode_result *r = &ans->results[0];
	for (uint32_t i = 0; i < r->n_decisions && i < GATE_PGMODE_CANDIDATES_MAX; i++)
		count_decision(s, r->decisions[i].level, r->decisions[i].fcfs);
	switch (r->outcome) {
	case GATE_PGMODE_ADMITTED:
		admitted(a, r->index);
		admit_free(a, false);
		break;
	case GATE_PGMODE_REFUSED:
		refused(a);
		break;
	case GATE_PGMODE_NOT_WRITTEN:
		not_written(a, r->index, r->write);
		admit_free(a, false);
		break;
	}
	after_answer(o);
}

static void wake_cb(struct handoff *h, const char *org, const char *call, enum handoff_why why,
		    void *data)
{
	struct sadmit *a = data;
	struct select *s = a->org->s;

	(void)h;
	(void)org;
	(void)call;
	(void)why;
	s->st.wakes++;
	if (a->st == SA_INFLIGHT) {
		a->woken = true;
		return;
	}
	if (a->st != SA_WAITING || s->draining)
		return;
	a->st = SA_IDLE;
	admit_launch(a);
	if (a->st == SA_IDLE) /* no candidate left: give the promised line on */
		admit_free(a, true);
}

void admit_wake_org(struct sorg *o)
{
	struct gate_mode_state ms;

	gate_mode_get(o->s->o.mode, &ms);
	if (ms.mode != GATE_MODE_POSTGRES)
		return;
	for (struct list_node *n = o->admits.next; n != &o->admits; n = n->next) {
		struct sadmit *a = list_entry(n, struct sadmit, node);
		if (a->st == SA_WAITING)
			a->st = SA_IDLE;
	}
}

/* A campaign entered 'active' and the claim brought its contacts (select.c): the waiting
 * admissions try again now with the current candidates, so that, refused, they wait under it
 * too (gate_admit.lua registers a waiter refused again under its latest candidates, with its
 * record, its since and its wake channel unchanged: no second registration). Before, they
 * stayed registered under the campaigns of their first refusal, and a freed line woke none of
 * them while those were at their floors. Those in flight try again when refused (woken). */
void admit_repropose(struct sorg *o)
{
	struct list_node *p, *t;

	list_for_each_safe (p, t, &o->admits) {
		struct sadmit *a = list_entry(p, struct sadmit, node);
		if (a->st == SA_INFLIGHT) {
			a->woken = true;
			continue;
		}
		if (a->st != SA_WAITING)
			continue;
		a->st = SA_IDLE;
		admit_launch(a);
		/* Nothing sent (the gate switching or unusable for a moment, or its contacts taken
		 * by earlier admissions of this loop): it stays registered as it was, woken or
		 * given up (slot_wait_ms) as before, rather than withdrawn for a passing state. */
		if (a->st == SA_IDLE)
			a->st = SA_WAITING;
	}
}

/* The oldest contact of cp that no admission offers, or NULL. */
static struct scontact *free_contact(struct scamp *cp)
{
	for (struct list_node *n = cp->contacts.next; n != &cp->contacts; n = n->next) {
		struct scontact *c = list_entry(n, struct scontact, node);
		if (!c->reserved)
			return c;
	}
	return NULL;
}

/* c becomes candidate a->n, from position k of the walk. */
static void reserve(struct sadmit *a, struct scontact *c, uint32_t k)
{
	c->reserved = true;
	a->org->freec--;
	a->cand_slot[a->n] = k;
	a->cand[a->n++] = c;
}

/* The proposal of an org with more campaigns than one claim covers: most campaigns hold one
 * contact, claimed for their next turn, so the rotation of small orgs would let an admission's
 * later candidates take the contacts the next admissions start with, and every charge would
 * pass them for a round. Instead the first candidate is the first campaign along the walk that
 * no admission in flight starts with (any with a free contact when there is none), and the
 * later candidates leave out the next tokens − 1 campaigns with a free contact: those are the
 * next admissions' first candidates. */
static void propose_spread(struct sadmit *a)
{
	struct sorg *o = a->org;
	uint32_t skip = sel_tokens(o) - 1, lead = a->n_slots;

	for (int any = 0; any < 2 && lead == a->n_slots; any++)
		for (uint32_t k = 0; k < a->n_slots; k++) {
			struct scamp *cp = o->camps[a->slots[k]];
			struct scontact *c = any || !cp->leading ? free_contact(cp) : NULL;
			if (c) {
				reserve(a, c, k);
				lead = k;
				a->lead = cp;
				cp->leading++;
				break;
			}
		}
	for (uint32_t k = lead + 1; k < a->n_slots && a->n < GATE_CANDIDATES_MAX; k++) {
		struct scamp *cp = o->camps[a->slots[k]];
		struct scontact *c = free_contact(cp);
		if (!c)
			continue;
		if (skip && !cp->leading) {
			skip--;
			continue;
		}
		reserve(a, c, k);
	}
}

/* The DRR's proposal: the campaigns in ring order from the one whose turn it is (at most
 * SEL_WALK_MAX along the ring), each with a free claimed contact offering its oldest, at most
 * GATE_CANDIDATES_MAX. The campaigns passed over on the way have no free contact: when a later
 * one is admitted their turns pass (DRR_NOT_READY), as drr_next() would. */
static void propose(struct sadmit *a)
{
	struct sorg *o = a->org;

	a->n = 0;
	if (drr_propose(&o->drr, 0, a->slots, SEL_WALK_MAX, &a->n_slots))
		a->n_slots = 0;
	/* In a large org the walk stops at a campaign whose contacts the claim in flight is
	 * fetching: it will be ready in a moment, and admitting one after it would pass its turn
	 * (a small org claims for all its campaigns at once and keeps contacts for several turns). */
	for (uint32_t k = 0; o->n_camps > CLAIM_CAMPAIGNS_MAX && k < a->n_slots; k++) {
		const struct scamp *cp = o->camps[a->slots[k]];
		if (cp->asked && cp->n == 0) {
			a->n_slots = k;
			break;
		}
	}
	if (o->n_camps > CLAIM_CAMPAIGNS_MAX) {
		propose_spread(a);
		return;
	}
	/* Admissions in flight together start their walk one campaign further each, so that
	 * concurrent admissions do not all offer the campaign whose turn it is (its charge comes
	 * only with the answer). */
	uint32_t rot = 0;
	for (struct list_node *n = o->admits.next; n != &o->admits; n = n->next)
		rot += list_entry(n, struct sadmit, node)->st == SA_INFLIGHT;
	for (uint32_t j = 0; j < a->n_slots && a->n < GATE_CANDIDATES_MAX; j++) {
		uint32_t k = (j + rot) % a->n_slots;
		struct scontact *c = free_contact(o->camps[a->slots[k]]);
		if (c)
			reserve(a, c, k);
	}
}

void admit_launch(struct sadmit *a)
{
	struct sorg *o = a->org;
	struct select *s = o->s;
	struct gate_mode_state ms;
	const char *names[GATE_CANDIDATES_MAX];
	struct gate_pg_dial dials[GATE_CANDIDATES_MAX];
	int rc;

	gate_mode_get(s->o.mode, &ms);
	if (s->draining || !ms.usable || ms.switching || dial_lane_stopped(s->o.dial, o->id))
		return;
	propose(a);
	if (!a->n)
		return;
	if (!a->call[0]) {
		select_new_call_id(a->call, sizeof(a->call));
		a->asked_ms = uv_now(s->o.loop);
	}
	for (uint32_t i = 0; i < a->n; i++) {
		struct scontact *c = a->cand[i];
		names[i] = c->camp->id;
		dials[i] = (struct gate_pg_dial){ .campaign = c->camp->id,
						  .agent = c->camp->agent,
						  .contact = c->id,
						  .lease_token = c->token,
						  .attempt = c->attempts + 1,
						  .to_number = c->phone,
						  .from_number = c->camp->has_from ? c->camp->from
										   : NULL };
	}
	a->epoch = ms.epoch;
	a->st = SA_INFLIGHT;
	s->st.admissions++;
	if (ms.mode == GATE_MODE_REDIS) {
		if (!a->registered &&
		    (rc = handoff_add(s->o.handoff, o->id, a->call, wake_cb, a)) == 0)
			a->registered = true;
		struct gate_admit_req req = { .org = o->id,
					      .call = a->call,
					      .campaigns = names,
					      .n_campaigns = a->n,
					      .wait = a->registered,
					      .worker = handoff_worker(s->o.handoff) };
		struct gate_flow_row row = { .mode = GATE_MODE_REDIS,
					     .epoch = ms.epoch,
					     .dials = dials };
		rc = gate_flow_admit(s->o.flow, &req, &row, flow_cb, a);
		if (rc)
			gate_mode_report(s->o.mode, ms.epoch, rc);
	} else {
		struct gate_pgmode_req req = { .call = a->call,
					       .candidates = dials,
					       .n_candidates = a->n };
		rc = gate_pgmode_admit(s->o.gpg, o->id, ms.epoch, s->o.write_deadline_ms, &req, 1,
				       pg_cb, a);
	}
	if (rc) {
		log_warn(LOG_GATE, "org %s: admission not sent: %s", o->id, dsp_strerror(rc));
		s->st.errors++;
		a->st = SA_IDLE;
		unreserve_all(a);
		o->retry_at = uv_now(s->o.loop) + 200;
	}
}
