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

/* The campaigns one claim statement covers: all of them in a small org; in a larger one the
 * next CLAIM_CAMPAIGNS_MAX along the DRR ring, and the claimed set is sized for those. */
static uint32_t claim_window(const struct sorg *o)
{
	uint32_t camps = o->n_camps < CLAIM_CAMPAIGNS_MAX ? o->n_camps : CLAIM_CAMPAIGNS_MAX;

	return camps ? camps : 1;
}

/* How many contacts the org should hold claimed: what its tokens can offer at once. */
static uint32_t claim_target(const struct sorg *o)
{
	uint32_t camps = claim_window(o);
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
	strmap_init(&o->by_id);
	drr_init(&o->drr, NULL, 0, 1, 4);
	list_add_tail(&s->orgs, &o->node);
	s->st.orgs++;
	return o;
}

static struct scamp *camp_find(struct sorg *o, const char *id)
{
	return strmap_get(&o->by_id, id);
}

/* Doubles the org's campaign slots: the slot table, the free stack, the DRR entries. */
static int camps_grow(struct sorg *o)
{
	uint32_t old = o->cap_camps, cap = old ? old * 2 : 16;
	struct scamp **c;
	uint32_t *f;
	struct drr_entry *e;

	if (old >= DRR_NONE / 2)
		return -ENOMEM;
	if (!(c = realloc(o->camps, cap * sizeof(*c))))
		return -ENOMEM;
	o->camps = c;
	if (!(f = realloc(o->free_slots, cap * sizeof(*f))))
		return -ENOMEM;
	o->free_slots = f;
	if (!(e = realloc(o->entries, cap * sizeof(*e))))
		return -ENOMEM;
	o->entries = e;
	drr_grow(&o->drr, e, cap); /* the ring, deficits and turn carry over */
	for (uint32_t i = cap; i-- > old;) {
		c[i] = NULL;
		f[o->n_free++] = i; /* the lowest slot on top */
	}
	o->cap_camps = cap;
	return 0;
}

/* Forgets every campaign slot (the org has none left): its memory goes with them. */
static void camps_reset(struct sorg *o)
{
	free(o->camps);
	free(o->free_slots);
	free(o->entries);
	o->camps = NULL;
	o->free_slots = NULL;
	o->entries = NULL;
	o->cap_camps = o->n_free = 0;
	strmap_free(&o->by_id);
	drr_init(&o->drr, NULL, 0, 1, 4);
}

static struct scamp *camp_add(struct sorg *o, const struct claim_demand *d)
{
	struct scamp *c;

	if (strlen(d->campaign) >= SEL_ID) {
		log_warn(LOG_GATE, "org %s: campaign id too long, not dialled: %.64s...", o->id,
			 d->campaign);
		return NULL;
	}
	if ((!o->n_free && camps_grow(o)) || !(c = calloc(1, sizeof(*c)))) {
		log_warn(LOG_GATE, "org %s: out of memory for campaign %s: it waits", o->id,
			 d->campaign);
		return NULL;
	}
	snprintf(c->id, sizeof(c->id), "%s", d->campaign);
	snprintf(c->agent, sizeof(c->agent), "%s", d->agent);
	c->has_from = d->from_number != NULL;
	snprintf(c->from, sizeof(c->from), "%s", d->from_number ? d->from_number : "");
	list_init(&c->contacts);
	if (strmap_put(&o->by_id, c->id, c)) {
		free(c);
		return NULL;
	}
	c->slot = o->free_slots[--o->n_free];
	o->camps[c->slot] = c;
	drr_add(&o->drr, c->slot);
	o->n_camps++;
	return c;
}

/* A campaign with no demand and no claimed contact leaves: off the ring, its memory freed. */
static void camp_remove(struct sorg *o, struct scamp *c)
{
	drr_remove(&o->drr, c->slot);
	strmap_del(&o->by_id, c->id);
	o->camps[c->slot] = NULL;
	o->free_slots[o->n_free++] = c->slot;
	free(c);
	if (--o->n_camps == 0)
		camps_reset(o);
}

/* Frees an org known to have nothing in flight (no admission, no claim). */
static void org_free(struct sorg *o)
{
	list_del(&o->node);
	while (!list_empty(&o->admits)) {
		struct sadmit *a = list_entry(list_first(&o->admits), struct sadmit, node);
		list_del(&a->node);
		free(a);
	}
	for (uint32_t i = 0; i < o->cap_camps; i++) {
		struct scamp *cp = o->camps[i];
		if (!cp)
			continue;
		while (!list_empty(&cp->contacts))
			sel_release_contact(
				list_entry(list_first(&cp->contacts), struct scontact, node), true);
		free(cp);
	}
	camps_reset(o);
	o->s->st.orgs--;
	free(o);
}

/* The admitted campaign's pick (C8): the campaigns before it in the proposal could not use
 * theirs (refused, or no free contact), so their turns pass with their remainder carried. */
static enum drr_ready only_cb(void *ctx, uint32_t slot)
{
	return slot == *(const uint32_t *)ctx ? DRR_READY : DRR_NOT_READY;
}

void sel_charge(struct sorg *o, const struct sadmit *a, uint32_t index)
{
	enum drr_ready ans[SEL_WALK_MAX];
	uint32_t walk[SEL_WALK_MAX], k = a->cand_slot[index], slot = a->slots[k], got, n = 0, p;

	for (uint32_t i = 0; i < k; i++)
		ans[i] = DRR_NOT_READY;
	ans[k] = DRR_READY;
	if (drr_charge(&o->drr, a->slots, ans, k + 1, &got) != -ESTALE ||
	    !drr_contains(&o->drr, slot))
		return;
	/* The ring moved meanwhile (admissions answered out of order). Where the campaign stands
	 * now tells whether its turn is still ahead: then it is charged as drr_next() would,
	 * passing the campaigns before it; when the head has passed it already (it is no nearer
	 * than when proposed), the pick comes out of what it carried and the turn stays — walking
	 * to it would pass every other campaign for a whole round. */
	if (drr_propose(&o->drr, 0, walk, SEL_WALK_MAX, &n))
		n = 0;
	for (p = 0; p < n && walk[p] != slot; p++)
		;
	if (p <= k && p < n)
		drr_next(&o->drr, only_cb, &slot, &got);
	else
		drr_debit(&o->drr, slot);
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
 * UINT64_MAX) of campaign camp (NULL: any) and batch batch (NULL: any). revoke 1: the matching
 * contacts an admission has in flight are marked, to go back when it ends without dialling them
 * (stop / pause, the slot wait); revoke 2: only marked contacts go back. */
static void hand_back_where(struct sorg *o, uint64_t cutoff, const char *camp, const char *batch,
			    int revoke)
{
	struct claim_handback *h = NULL;
	uint32_t n = 0, cap = 0;

	for (uint32_t i = 0; i < o->cap_camps; i++) {
		struct scamp *cp = o->camps[i];
		struct list_node *p, *t;
		if (!cp || (camp && strcmp(cp->id, camp) != 0))
			continue;
		list_for_each_safe (p, t, &cp->contacts) {
			struct scontact *c = list_entry(p, struct scontact, node);
			if (c->claimed_ms > cutoff || (batch && strcmp(c->batch, batch) != 0) ||
			    (revoke == 2 && !c->revoked))
				continue;
			if (c->reserved) { /* in an admission in flight: back if refused */
				if (revoke == 1) {
					c->revoked = true;
					o->revoked = true;
				}
				continue;
			}
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

static void hand_back_org(struct sorg *o, uint64_t cutoff)
{
	hand_back_where(o, cutoff, NULL, NULL, 0);
}

/* After an admission's candidates were given back (admit.c): those marked by a stop or pause
 * while it was in flight go back now. */
void sel_hand_back_revoked(struct sorg *o)
{
	o->revoked = false;
	hand_back_where(o, UINT64_MAX, NULL, NULL, 2);
	for (uint32_t i = 0; i < o->cap_camps && !o->revoked; i++) {
		struct scamp *cp = o->camps[i];
		struct list_node *p;
		if (!cp)
			continue;
		for (p = cp->contacts.next; p != &cp->contacts && !o->revoked; p = p->next)
			o->revoked = list_entry(p, struct scontact, node)->revoked;
	}
}

/* One contact whose call row was refused (admit.c: lease lost — its batch or campaign may have
 * left 'active' since the claim): back now rather than at the lease's end. A lease really lost
 * (swept, claimed again) no longer holds this token: the statement then changes nothing. */
void sel_hand_back_one(struct select *s, int64_t id, int64_t token)
{
	struct claim_handback h = { .id = id, .lease_token = token };

	hand_back_list(s, &h, 1);
}

/* The rechecks noted while the claim was in flight (select_dispatch_notify()). */
static void recheck_org(struct sorg *o)
{
	if (o->recheck_all)
		hand_back_org(o, UINT64_MAX);
	else
		for (uint32_t i = 0; i < o->n_recheck; i++)
			hand_back_where(o, UINT64_MAX, o->recheck[i].camp,
					o->recheck[i].batch[0] ? o->recheck[i].batch : NULL, 1);
	o->n_recheck = 0;
	o->recheck_all = false;
}

/* ---- claim ---- */

/* A claim answered while campaigns that entered 'active' are noted (select_dispatch_notify()):
 * when it brought contacts of one of them, the org's waiting admissions are re-proposed with
 * the new candidates (admit_repropose()), once per noted campaign. */
static void activated_claimed(struct sorg *o, const struct claim_contact *rows, uint32_t n,
			      bool fresh)
{
	bool hit = false;

	if (now_ms(o->s) >= o->activated_until) {
		o->n_activated = 0;
		o->activated_any = false;
		return;
	}
	if (o->activated_any && fresh) {
		o->activated_any = false;
		o->n_activated = 0;
		hit = true;
	}
	for (uint32_t i = 0; i < n && o->n_activated; i++)
		for (uint32_t k = 0; k < o->n_activated; k++)
			if (strcmp(o->activated[k].camp, rows[i].campaign) == 0) {
				o->activated[k] = o->activated[--o->n_activated];
				hit = true;
				break;
			}
	if (hit)
		admit_repropose(o);
}

/* The copy of contact id that cp holds already, or NULL. A contact is claimed again while held
 * only when its lease was lost meanwhile (swept, re-pended, claimed anew). */
static struct scontact *held_copy(struct scamp *cp, int64_t id)
{
	for (struct list_node *p = cp->contacts.next; p != &cp->contacts; p = p->next) {
		struct scontact *c = list_entry(p, struct scontact, node);
		if (c->id == id)
			return c;
	}
	return NULL;
}

/* Fills c from the claim's row r (a new contact, or a held copy refreshed in place: its new
 * lease token, and it waits its slot wait anew). */
static void contact_set(struct scontact *c, const struct claim_contact *r, uint64_t now)
{
	c->token = r->lease_token;
	c->attempts = r->attempts;
	c->claimed_ms = now;
	snprintf(c->batch, sizeof(c->batch), "%s", r->batch ? r->batch : "");
	snprintf(c->phone, sizeof(c->phone), "%s", r->phone);
}

static void take_cb(struct claim *cl, int status, const struct claim_contact *rows, uint32_t n,
		    void *data)
{
	struct sorg *o = data;
	struct select *s = o->s;
	uint64_t now = now_ms(s);
	bool fresh = false; /* rows of a campaign that had none claimed (activated_any) */

	(void)cl;
	o->claiming = false;
	s->pending--;
	if (status) {
		for (uint32_t i = 0; i < o->n_asked; i++)
			o->asked[i]->asked = false;
		o->n_asked = 0;
		o->n_recheck = 0;
		o->recheck_all = false;
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
		struct scontact *c = cp && !s->draining ? held_copy(cp, rows[i].id) : NULL;
		if (c) { /* one copy per contact: two admitted together would share a call-row write */
			cp->got++;
			contact_set(c, &rows[i], now);
			c->revoked = false; /* active at the claim (a stop since: recheck_org) */
			continue; /* an admission in flight with its old token: lease lost, back */
		}
		if (cp && !s->draining)
			c = calloc(1, sizeof(*c));
		if (!c) { /* campaign gone meanwhile, draining, or no memory: back at once */
			if (!back)
				back = calloc(n, sizeof(*back));
			if (back)
				back[nb++] =
					(struct claim_handback){ rows[i].id, rows[i].lease_token };
			continue;
		}
		cp->got++;
		fresh |= cp->n == 0;
		c->camp = cp;
		c->id = rows[i].id;
		contact_set(c, &rows[i], now);
		list_add_tail(&cp->contacts, &c->node);
		cp->n++;
		o->held++;
		o->freec++;
	}
	if (nb)
		hand_back_list(s, back, nb);
	free(back);
	if (o->n_recheck || o->recheck_all)
		recheck_org(o);
	/* In a large org, a campaign that gave nothing has none left to claim now: the next claims
	 * go further along the ring until the next demand scan says otherwise. (A small org asks
	 * all its campaigns in each statement; there a campaign is asked again at once, as a
	 * concurrent claim of another worker may have held its rows.) */
	for (uint32_t i = 0; i < o->n_asked; i++) {
		struct scamp *cp = o->asked[i];
		cp->asked = false;
		cp->dry = o->n_camps > CLAIM_CAMPAIGNS_MAX && cp->got == 0;
		cp->got = 0;
	}
	o->n_asked = 0;
	if (o->n_activated || o->activated_any)
		activated_claimed(o, rows, n, fresh);
	sel_pump(o);
	sel_maybe_drained(s);
}

/* One claim statement for the campaigns whose turn comes next: along the DRR ring from the
 * campaign whose turn it is (drr_propose()'s walk, at most SEL_WALK_MAX campaigns), the first
 * CLAIM_CAMPAIGNS_MAX with demand, not dry, and short of their part of the claimed set. In an org
 * with more campaigns than one statement covers, a campaign's part is also at most the picks
 * its next turn grants (drr_turn_picks()): contacts it could not use before the round comes
 * back would only wait out the slot wait and go back. As turns are taken the walk moves on, so
 * every campaign with demand is claimed for in its turn. */
static void claim_org(struct sorg *o)
{
	struct select *s = o->s;
	uint32_t target = claim_target(o), window = claim_window(o);
	uint32_t walk[SEL_WALK_MAX], nw = 0, n = 0;
	const char *ids[CLAIM_CAMPAIGNS_MAX];

	if (o->claiming || o->held * 2 > target || !o->n_camps)
		return;
	uint32_t per = (target + window - 1) / window;
	uint32_t page = s->o.claim_page ? s->o.claim_page : 50;
	bool big = o->n_camps > window;
	if (drr_propose(&o->drr, 0, walk, SEL_WALK_MAX, &nw))
		return;
	for (uint32_t i = 0; i < nw && n < CLAIM_CAMPAIGNS_MAX; i++) {
		struct scamp *cp = o->camps[walk[i]];
		uint32_t want = per;
		if (big) {
			uint32_t picks = drr_turn_picks(&o->drr, walk[i]);
			want = picks < want ? picks : want;
		}
		if (!cp || !cp->seen || cp->dry || cp->n >= want)
			continue;
		ids[n] = cp->id;
		o->asked[n] = cp;
		o->asked_n[n] = want - cp->n < page ? want - cp->n : page;
		n++;
	}
	if (!n)
		return;
	if (claim_take(s->o.claim, ids, o->asked_n, n, take_cb, o) == 0) {
		o->claiming = true;
		s->pending++;
		o->n_asked = n;
		for (uint32_t i = 0; i < n; i++) {
			o->asked[i]->asked = true;
			o->asked[i]->got = 0;
		}
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
		/* Those in an admission in flight too, when it is not admitted with them: in a
		 * large org the admissions' candidates can keep a contact reserved at every tick
		 * (each admission's answer launches the next with the same candidates) past its
		 * lease; swept and claimed again, it was held twice. */
		if (now >= s->o.slot_wait_ms)
			hand_back_where(o, now - s->o.slot_wait_ms, NULL, NULL, 1);
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
		for (uint32_t i = 0; i < o->cap_camps; i++)
			if (o->camps[i])
				o->camps[i]->seen = o->camps[i]->dry = false;
	}
	struct sorg *o = NULL;
	for (uint32_t i = 0; i < n; i++) {
		/* Rows come ordered by org: look the org up once per run of rows. */
		if (!o || strcmp(o->id, rows[i].org) != 0)
			o = org_get(s, rows[i].org, true);
		if (!o)
			continue;
		o->org_limit = rows[i].org_limit;
		struct scamp *cp = camp_find(o, rows[i].campaign);
		if (!cp)
			cp = camp_add(o, &rows[i]);
		if (cp)
			cp->seen = true;
	}
	/* Campaigns without demand and without claimed contacts leave the ring (not one the claim
	 * in flight asked for: its rows are on the way), and orgs left with nothing leave too. */
	struct list_node *p, *q;
	list_for_each_safe (p, q, &s->orgs) {
		o = list_entry(p, struct sorg, node);
		for (uint32_t i = 0; i < o->cap_camps; i++) {
			struct scamp *cp = o->camps[i];
			if (cp && !cp->seen && cp->n == 0 && !cp->asked)
				camp_remove(o, cp); /* may reset the slots when it was the last */
			if (!o->cap_camps)
				break;
		}
		if (!o->n_camps && !o->n_admits && !o->claiming && !o->held)
			org_free(o);
		else
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
	metrics_histogram_init(&s->st.slot_wait, select_slot_wait_le, SELECT_SLOT_WAIT_N);
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

/* "+<org> <campaign>" (migration 0016): the campaign, or one of its batches, entered 'active'. */
static int dispatch_activated(struct select *s, const char *payload)
{
	char org[SEL_ID], camp[SEL_ID];

	if (sscanf(payload, "%64s %64s", org, camp) != 2)
		return -EINVAL;
	struct sorg *o = org_get(s, org, false);
	if (!o || s->draining || s->closing)
		return 0; /* no admission here: new contacts get new ones */
	s->st.notified++;
	struct scamp *cp = camp_find(o, camp);
	if (cp && cp->n) { /* its contacts are here already (claimed before this arrived) */
		admit_repropose(o);
		return 0;
	}
	o->activated_until = now_ms(s) + s->o.slot_wait_ms;
	for (uint32_t k = 0; k < o->n_activated; k++)
		if (strcmp(o->activated[k].camp, camp) == 0)
			return 0;
	if (o->n_activated < SEL_RECHECK_MAX)
		snprintf(o->activated[o->n_activated++].camp, SEL_ID, "%s", camp);
	else
		o->activated_any = true;
	return 0;
}

void select_listen_up(struct select *s)
{
	if (s->draining || s->closing)
		return;
	for (struct list_node *n = s->orgs.next; n != &s->orgs; n = n->next) {
		struct sorg *o = list_entry(n, struct sorg, node);
		o->activated_until = now_ms(s) + s->o.slot_wait_ms;
		o->activated_any = true;
		admit_repropose(o);
	}
}

int select_dispatch_notify(struct select *s, const char *payload)
{
	char org[SEL_ID], camp[SEL_ID], batch[SEL_ID] = "";
	int n;

	if (payload && payload[0] == '+')
		return dispatch_activated(s, payload + 1);
	if (!payload || (n = sscanf(payload, "%64s %64s %64s", org, camp, batch)) < 2)
		return -EINVAL;
	struct sorg *o = org_get(s, org, false);
	if (!o || s->draining || s->closing)
		return 0; /* nothing claimed here; a drain hands everything back anyway */
	s->st.notified++;
	hand_back_where(o, UINT64_MAX, camp, n == 3 ? batch : NULL, 1);
	if (o->claiming) {
		if (o->n_recheck < SEL_RECHECK_MAX) {
			snprintf(o->recheck[o->n_recheck].camp, SEL_ID, "%s", camp);
			snprintf(o->recheck[o->n_recheck].batch, SEL_ID, "%s", n == 3 ? batch : "");
			o->n_recheck++;
		} else {
			o->recheck_all = true;
		}
	}
	return 0;
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

const double select_slot_wait_le[SELECT_SLOT_WAIT_N] = { 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
							 1,	2.5,  5,     10,   15,	30,   60 };

void select_foreach_org(const struct select *s, void (*cb)(const char *org, void *data), void *data)
{
	for (struct list_node *n = s->orgs.next; n != &s->orgs; n = n->next)
		cb(list_entry(n, struct sorg, node)->id, data);
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
	while (!list_empty(&s->orgs))
		org_free(list_entry(list_first(&s->orgs), struct sorg, node));
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
