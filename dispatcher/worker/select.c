/* Selection: organisations with demand, their claimed contacts, DRR order, slot wait, drain
 * (select.h). The admissions themselves are admit.c. */
#include "select_int.h"

#include "error.h"
#include "log.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CLAIM_MARGIN 1 /* contacts per campaign beyond the tokens' need */

static uint64_t now_ms(const struct select *s)
{
	return uv_now(s->o.loop);
}

uint32_t sel_tokens(const struct sorg *o)
{
	uint32_t t = o->s->o.tokens_max;

	if (!t)
		t = o->org_limit < GATE_CANDIDATES_MAX ? o->org_limit : GATE_CANDIDATES_MAX;
	return t ? t : 1;
}

/* How many contacts the org should hold claimed: what its tokens can offer at once. */
static uint32_t claim_target(const struct sorg *o)
{
	uint32_t camps = o->n_camps ? o->n_camps : 1;
	uint32_t per = camps < GATE_CANDIDATES_MAX ? camps : GATE_CANDIDATES_MAX;
	uint64_t t = (uint64_t)sel_tokens(o) * per + camps * CLAIM_MARGIN;
	uint64_t cap = 2ULL * o->org_limit + camps;

	return (uint32_t)(t < cap ? t : cap);
}

static struct sorg *org_get(struct select *s, const char *id, bool create)
{
	for (struct list_node *n = s->orgs.next; n != &s->orgs; n = n->next) {
		struct sorg *o = list_entry(n, struct sorg, node);
		if (strcmp(o->id, id) == 0)
			return o;
	}
	if (!create)
		return NULL;
	struct sorg *o = calloc(1, sizeof(*o));
	if (!o)
		return NULL;
	o->s = s;
	snprintf(o->id, sizeof(o->id), "%s", id);
	list_init(&o->admits);
	for (uint32_t i = 0; i < SEL_CAMP_MAX; i++) {
		o->camps[i].slot = i;
		list_init(&o->camps[i].contacts);
	}
	drr_init(&o->drr, o->entries, SEL_CAMP_MAX, 1, 4);
	list_add_tail(&s->orgs, &o->node);
	s->st.orgs++;
	return o;
}

static struct scamp *camp_find(struct sorg *o, const char *id)
{
	for (uint32_t i = 0; i < SEL_CAMP_MAX; i++)
		if (o->camps[i].used && strcmp(o->camps[i].id, id) == 0)
			return &o->camps[i];
	return NULL;
}

static struct scamp *camp_add(struct sorg *o, const struct claim_demand *d)
{
	for (uint32_t i = 0; i < SEL_CAMP_MAX; i++) {
		struct scamp *c = &o->camps[i];
		if (c->used)
			continue;
		c->used = true;
		snprintf(c->id, sizeof(c->id), "%s", d->campaign);
		snprintf(c->agent, sizeof(c->agent), "%s", d->agent);
		c->has_from = d->from_number != NULL;
		snprintf(c->from, sizeof(c->from), "%s", d->from_number ? d->from_number : "");
		drr_add(&o->drr, c->slot);
		o->n_camps++;
		return c;
	}
	log_warn(LOG_GATE, "org %s: more than %d campaigns with demand; %s waits", o->id,
		 SEL_CAMP_MAX, d->campaign);
	return NULL;
}

/* The admitted campaign's pick (C8): the campaigns before it in the proposal could not use
 * theirs (refused, or no free contact), so their turns pass with their remainder carried. */
static enum drr_ready only_cb(void *ctx, uint32_t slot)
{
	return slot == *(const uint32_t *)ctx ? DRR_READY : DRR_NOT_READY;
}

void sel_charge(struct sorg *o, const struct sadmit *a, uint32_t index)
{
	enum drr_ready ans[GATE_CANDIDATES_MAX];
	uint32_t k = a->cand_slot[index], slot = a->slots[k], got;

	for (uint32_t i = 0; i < k; i++)
		ans[i] = DRR_NOT_READY;
	ans[k] = DRR_READY;
	if (drr_charge(&o->drr, a->slots, ans, k + 1, &got) == -ESTALE &&
	    drr_contains(&o->drr, slot))
		drr_next(&o->drr, only_cb, &slot, &got); /* the ring moved meanwhile */
}

/* A contact leaves the in-memory set: admitted (its row is written), or lost (lease). */
void sel_release_contact(struct scontact *c, bool free_it)
{
	struct scamp *cp = c->camp;

	list_del(&c->node);
	cp->n--;
	if (free_it)
		free(c);
}

/* ---- hand-back ---- */

static void back_cb(struct claim *c, int status, uint64_t n, void *data)
{
	struct select *s = data;

	(void)c;
	(void)status;
	s->st.handed_back += n;
	s->pending--;
	sel_maybe_drained(s);
}

static void hand_back_list(struct select *s, struct claim_handback *h, uint32_t n)
{
	for (uint32_t i = 0; i < n; i += CLAIM_HANDBACK_MAX) {
		uint32_t k = n - i < CLAIM_HANDBACK_MAX ? n - i : CLAIM_HANDBACK_MAX;
		if (claim_hand_back(s->o.claim, h + i, k, back_cb, s) == 0)
			s->pending++;
	}
}

/* Hands back the org's free contacts claimed before cutoff (all free ones with cutoff
 * UINT64_MAX). */
static void hand_back_org(struct sorg *o, uint64_t cutoff)
{
	struct claim_handback *h = NULL;
	uint32_t n = 0, cap = 0;

	for (uint32_t i = 0; i < SEL_CAMP_MAX; i++) {
		struct scamp *cp = &o->camps[i];
		struct list_node *p, *t;
		list_for_each_safe (p, t, &cp->contacts) {
			struct scontact *c = list_entry(p, struct scontact, node);
			if (c->reserved || c->claimed_ms > cutoff)
				continue;
			if (n == cap) {
				cap = cap ? cap * 2 : 64;
				struct claim_handback *g = realloc(h, cap * sizeof(*h));
				if (!g)
					break;
				h = g;
			}
			h[n++] = (struct claim_handback){ .id = c->id, .lease_token = c->token };
			o->held--;
			o->freec--;
			sel_release_contact(c, true);
		}
	}
	if (n)
		hand_back_list(o->s, h, n);
	free(h);
}

/* ---- claim ---- */

static void take_cb(struct claim *cl, int status, const struct claim_contact *rows, uint32_t n,
		    void *data)
{
	struct sorg *o = data;
	struct select *s = o->s;
	uint64_t now = now_ms(s);

	(void)cl;
	o->claiming = false;
	s->pending--;
	if (status) {
		log_warn(LOG_GATE, "org %s: claim failed: %s", o->id, dsp_strerror(status));
		sel_maybe_drained(s);
		return;
	}
	s->st.claims++;
	s->st.claimed += n;
	struct claim_handback *back = NULL;
	uint32_t nb = 0;
	for (uint32_t i = 0; i < n; i++) {
		struct scamp *cp = camp_find(o, rows[i].campaign);
		struct scontact *c = cp && !s->draining ? calloc(1, sizeof(*c)) : NULL;
		if (!c) { /* campaign gone meanwhile, draining, or no memory: back at once */
			if (!back)
				back = calloc(n, sizeof(*back));
			if (back)
				back[nb++] =
					(struct claim_handback){ rows[i].id, rows[i].lease_token };
			continue;
		}
		c->camp = cp;
		c->id = rows[i].id;
		c->token = rows[i].lease_token;
		c->attempts = rows[i].attempts;
		c->claimed_ms = now;
		snprintf(c->phone, sizeof(c->phone), "%s", rows[i].phone);
		list_add_tail(&cp->contacts, &c->node);
		cp->n++;
		o->held++;
		o->freec++;
	}
	if (nb)
		hand_back_list(s, back, nb);
	free(back);
	sel_pump(o);
	sel_maybe_drained(s);
}

static void claim_org(struct sorg *o)
{
	struct select *s = o->s;
	uint32_t target = claim_target(o);
	const char *ids[SEL_CAMP_MAX];
	uint32_t counts[SEL_CAMP_MAX], n = 0;

	if (o->claiming || o->held * 2 > target || !o->n_camps)
		return;
	uint32_t per = (target + o->n_camps - 1) / o->n_camps;
	uint32_t page = s->o.claim_page ? s->o.claim_page : 50;
	for (uint32_t i = 0; i < SEL_CAMP_MAX; i++) {
		struct scamp *cp = &o->camps[i];
		if (!cp->used || !cp->seen || cp->n >= per)
			continue;
		ids[n] = cp->id;
		counts[n] = per - cp->n < page ? per - cp->n : page;
		n++;
	}
	if (!n)
		return;
	if (claim_take(s->o.claim, ids, counts, n, take_cb, o) == 0) {
		o->claiming = true;
		s->pending++;
	}
}

/* ---- the pump: bounded work for one org ---- */

void sel_pump(struct sorg *o)
{
	struct select *s = o->s;

	if (s->draining || s->closing || dial_lane_stopped(s->o.dial, o->id))
		return; /* a stopped lane admits nothing: claiming would only hand back */
	claim_org(o);
	if (o->retry_at > now_ms(s))
		return;
	/* Admissions not in flight and not waiting go out; new ones while tokens and free
	 * contacts last. */
	uint32_t launched = 0, tokens = sel_tokens(o);
	struct list_node *p, *t;
	list_for_each_safe (p, t, &o->admits) {
		struct sadmit *a = list_entry(p, struct sadmit, node);
		if (a->st == SA_IDLE && launched++ < tokens)
			admit_launch(a);
	}
	while (o->n_admits < tokens && o->freec > 0 && launched++ < tokens) {
		struct sadmit *a = calloc(1, sizeof(*a));
		if (!a)
			return;
		a->org = o;
		list_add_tail(&o->admits, &a->node);
		o->n_admits++;
		admit_launch(a);
		if (a->st == SA_IDLE) /* nothing could be sent (mode, no candidate) */
			break;
	}
}

/* ---- timers ---- */

static void tick_cb(uv_timer_t *t)
{
	struct select *s = t->data;
	uint64_t now = now_ms(s);

	for (struct list_node *n = s->orgs.next; n != &s->orgs; n = n->next) {
		struct sorg *o = list_entry(n, struct sorg, node);
		struct list_node *p, *q;
		/* C9: waiters and contacts past the slot wait. */
		list_for_each_safe (p, q, &o->admits) {
			struct sadmit *a = list_entry(p, struct sadmit, node);
			if (a->st == SA_WAITING && now - a->since_ms >= s->o.slot_wait_ms) {
				s->st.gave_up++;
				admit_free(a, true);
			}
		}
		if (now >= s->o.slot_wait_ms)
			hand_back_org(o, now - s->o.slot_wait_ms);
		admit_wake_org(o); /* postgres mode: refused admissions try again */
		sel_pump(o);
	}
}

static void demand_cb(struct claim *cl, int status, const struct claim_demand *rows, uint32_t n,
		      void *data)
{
	struct select *s = data;

	(void)cl;
	s->scanning = false;
	s->pending--;
	if (status || s->draining || s->closing) {
		sel_maybe_drained(s);
		return;
	}
	for (struct list_node *p = s->orgs.next; p != &s->orgs; p = p->next) {
		struct sorg *o = list_entry(p, struct sorg, node);
		for (uint32_t i = 0; i < SEL_CAMP_MAX; i++)
			o->camps[i].seen = false;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct sorg *o = org_get(s, rows[i].org, true);
		if (!o)
			continue;
		o->org_limit = rows[i].org_limit;
		struct scamp *cp = camp_find(o, rows[i].campaign);
		if (!cp)
			cp = camp_add(o, &rows[i]);
		if (cp)
			cp->seen = true;
	}
	/* Campaigns without demand and without claimed contacts leave the ring. */
	for (struct list_node *p = s->orgs.next; p != &s->orgs; p = p->next) {
		struct sorg *o = list_entry(p, struct sorg, node);
		for (uint32_t i = 0; i < SEL_CAMP_MAX; i++) {
			struct scamp *cp = &o->camps[i];
			if (cp->used && !cp->seen && cp->n == 0) {
				drr_remove(&o->drr, cp->slot);
				cp->used = false;
				o->n_camps--;
			}
		}
		sel_pump(o);
	}
}

static void demand_timer_cb(uv_timer_t *t)
{
	struct select *s = t->data;

	if (s->scanning || s->draining)
		return;
	if (claim_demand(s->o.claim, demand_cb, s) == 0) {
		s->scanning = true;
		s->pending++;
	}
}

/* ---- public ---- */

int select_new(const struct select_options *o, struct select **out)
{
	struct select *s;

	if (!o || !out || !o->loop || !o->claim || !o->gate || !o->flow || !o->gpg || !o->mode ||
	    !o->handoff || !o->dial || !o->slot_wait_ms)
		return -EINVAL;
	if (!(s = calloc(1, sizeof(*s))))
		return -ENOMEM;
	s->o = *o;
	if (!s->o.demand_ms)
		s->o.demand_ms = 500;
	if (!s->o.tick_ms)
		s->o.tick_ms = 100;
	if (!s->o.write_deadline_ms)
		s->o.write_deadline_ms = GATE_PG_WRITE_DEADLINE_MS;
	list_init(&s->orgs);
	uv_timer_init(o->loop, &s->tick);
	uv_timer_init(o->loop, &s->demand);
	s->tick.data = s;
	s->demand.data = s;
	s->handles = 2;
	*out = s;
	return 0;
}

int select_start(struct select *s)
{
	if (s->started)
		return -EBUSY;
	s->started = true;
	uv_timer_start(&s->tick, tick_cb, s->o.tick_ms, s->o.tick_ms);
	uv_timer_start(&s->demand, demand_timer_cb, 0, s->o.demand_ms);
	return 0;
}

void select_mode_changed(struct select *s)
{
	for (struct list_node *n = s->orgs.next; n != &s->orgs; n = n->next) {
		struct sorg *o = list_entry(n, struct sorg, node);
		/* A waiter of the old mode is known to no one in the new one (a postgres-mode
		 * waiter is not registered in Redis, a Redis waiter gets no NOTIFY): each tries
		 * again now, and registers anew if refused. */
		for (struct list_node *p = o->admits.next; p != &o->admits; p = p->next) {
			struct sadmit *a = list_entry(p, struct sadmit, node);
			if (a->st == SA_WAITING)
				a->st = SA_IDLE;
		}
		sel_pump(o);
	}
}

void select_org_freed(struct select *s, const char *org)
{
	struct sorg *o = org_get(s, org, false);

	if (o) {
		admit_wake_org(o);
		sel_pump(o);
	}
}

void sel_maybe_drained(struct select *s)
{
	if (!s->draining || !s->drained_cb || s->pending)
		return;
	for (struct list_node *n = s->orgs.next; n != &s->orgs; n = n->next) {
		struct sorg *o = list_entry(n, struct sorg, node);
		if (o->n_admits)
			return;
	}
	void (*cb)(void *) = s->drained_cb;
	s->drained_cb = NULL;
	cb(s->drained_data);
}

void select_drain(struct select *s, void (*cb)(void *data), void *data)
{
	s->draining = true;
	s->drained_cb = cb;
	s->drained_data = data;
	uv_timer_stop(&s->tick);
	uv_timer_stop(&s->demand);
	for (struct list_node *n = s->orgs.next; n != &s->orgs; n = n->next) {
		struct sorg *o = list_entry(n, struct sorg, node);
		struct list_node *p, *q;
		list_for_each_safe (p, q, &o->admits) {
			struct sadmit *a = list_entry(p, struct sadmit, node);
			if (a->st != SA_INFLIGHT)
				admit_free(a, true);
		}
		hand_back_org(o, UINT64_MAX); /* reserved ones go back when answered */
	}
	sel_maybe_drained(s);
}

/* After an answer while draining: the answered admission's contacts go back. */
void admit_drained_org(struct sorg *o);
void admit_drained_org(struct sorg *o)
{
	hand_back_org(o, UINT64_MAX);
}

void select_get_stats(const struct select *s, struct select_stats *out)
{
	*out = s->st;
	out->held = 0;
	for (struct list_node *n = s->orgs.next; n != &s->orgs; n = n->next)
		out->held += list_entry(n, struct sorg, node)->held;
}

static void timer_closed(uv_handle_t *h)
{
	struct select *s = h->data;

	if (--s->handles)
		return;
	while (!list_empty(&s->orgs)) {
		struct sorg *o = list_entry(list_first(&s->orgs), struct sorg, node);
		list_del(&o->node);
		while (!list_empty(&o->admits)) {
			struct sadmit *a = list_entry(list_first(&o->admits), struct sadmit, node);
			list_del(&a->node);
			free(a);
		}
		for (uint32_t i = 0; i < SEL_CAMP_MAX; i++)
			while (!list_empty(&o->camps[i].contacts))
				sel_release_contact(list_entry(list_first(&o->camps[i].contacts),
							       struct scontact, node),
						    true);
		free(o);
	}
	void (*cb)(void *) = s->closed_cb;
	void *data = s->closed_data;
	free(s);
	if (cb)
		cb(data);
}

void select_close(struct select *s, void (*cb)(void *data), void *data)
{
	s->closing = true;
	s->closed_cb = cb;
	s->closed_data = data;
	uv_close((uv_handle_t *)&s->tick, timer_closed);
	uv_close((uv_handle_t *)&s->demand, timer_closed);
}
