/* Internal to select.c and admit.c: the per-organisation state of the selector. */
#ifndef DSP_WORKER_SELECT_INT_H
#define DSP_WORKER_SELECT_INT_H

#include "drr.h"
#include "list.h"
#include "select.h"
#include "strmap.h"

/* How far along the DRR ring (from the campaign whose turn it is) an admission looks for
 * candidates and a claim for campaigns to claim for: four claim statements' worth. */
#define SEL_WALK_MAX	(4 * CLAIM_CAMPAIGNS_MAX)
#define SEL_ID		65
#define SEL_RECHECK_MAX 8

struct sorg;

struct scontact {
	struct list_node node; /* its campaign's queue, oldest claim first */
	struct scamp *camp;
	int64_t id, token;
	int32_t attempts;
	char batch[SEL_ID];
	char phone[20];
	uint64_t claimed_ms;
	bool reserved; /* a candidate of an admission in flight */
	bool revoked;  /* stopped / paused meanwhile, or past the slot wait: back when unreserved */
};

/* A campaign with demand (or with claimed contacts still held), allocated while it is known. */
struct scamp {
	char id[SEL_ID], agent[SEL_ID], from[36];
	bool has_from, seen;
	bool asked;    /* in the claim statement in flight */
	bool dry;      /* a claim got fewer than it asked: none left until the next demand scan */
	uint32_t slot; /* index in sorg.camps and in the DRR entries */
	struct list_node contacts;
	uint32_t n;
	uint32_t got;	  /* rows of the claim in flight */
	uint32_t leading; /* admissions in flight whose first candidate it is (large orgs) */
};

enum sadmit_state {
	SA_IDLE = 0, /* not sent yet, or answered and not waiting */
	SA_INFLIGHT,
	SA_WAITING, /* refused: registered as a waiter (redis) or retried on a tick (postgres) */
};

struct sadmit {
	struct list_node node; /* sorg.admits */
	struct sorg *org;
	char call[40];
	enum sadmit_state st;
	bool registered; /* handoff_add() done */
	bool woken;	 /* a wake arrived while in flight */
	uint64_t since_ms;
	uint64_t asked_ms; /* first sent (the slot-wait histogram) */
	uint64_t epoch;
	struct scontact *cand[GATE_CANDIDATES_MAX];
	uint32_t n;
	uint32_t slots[SEL_WALK_MAX]; /* drr_propose()'s walk, candidates or not */
	uint32_t n_slots;
	uint32_t cand_slot[GATE_CANDIDATES_MAX]; /* index in slots[] of cand[i] */
	struct scamp *lead; /* its first candidate's campaign (large orgs), until answered */
};

struct sorg {
	struct list_node node;
	struct select *s;
	char id[SEL_ID];
	uint32_t org_limit;
	/* Campaigns by slot (NULL: free slot), by id, and on the DRR ring; all three grow with
	 * the campaigns (doubling) and are freed when the org has none left. */
	struct scamp **camps;
	struct drr_entry *entries;
	uint32_t cap_camps;
	uint32_t *free_slots; /* stack of free slots below cap_camps */
	uint32_t n_free;
	struct strmap by_id;
	struct drr drr;
	uint32_t n_camps, held, freec;
	struct scamp *asked[CLAIM_CAMPAIGNS_MAX]; /* the claim in flight */
	uint32_t asked_n[CLAIM_CAMPAIGNS_MAX];
	uint32_t n_asked;
	struct list_node admits;
	uint32_t n_admits;
	bool claiming;
	/* Stop / pause notifications that arrived while a claim was in flight: its rows may
	 * predate them, so they are checked again when it answers (all: too many to keep). */
	struct {
		char camp[SEL_ID], batch[SEL_ID];
	} recheck[SEL_RECHECK_MAX];
	uint32_t n_recheck;
	bool recheck_all;
	/* Campaigns that entered 'active' (select_dispatch_notify(), "+" payloads) until a claim
	 * brings one of their contacts: then the org's waiting admissions are re-proposed
	 * (admit_repropose()). Forgotten at activated_until (one slot wait after the last). More
	 * than fit: any campaign the claim brings with none claimed before (activated_any). */
	struct {
		char camp[SEL_ID];
	} activated[SEL_RECHECK_MAX];
	uint32_t n_activated;
	bool activated_any;
	uint64_t activated_until;
	bool revoked;	   /* some reserved contact is marked revoked */
	uint64_t retry_at; /* no admission before (after an error) */
};

struct select {
	struct select_options o;
	struct list_node orgs;
	uv_timer_t tick, demand;
	bool started, draining, closing, scanning;
	unsigned pending; /* hand-backs and claims in flight */
	unsigned handles;
	void (*drained_cb)(void *data);
	void *drained_data;
	void (*closed_cb)(void *data);
	void *closed_data;
	struct select_stats st;
};

/* select.c */
void sel_pump(struct sorg *o);
void sel_release_contact(struct scontact *c, bool free_it);
void sel_charge(struct sorg *o, const struct sadmit *a, uint32_t index);
uint32_t sel_tokens(const struct sorg *o);
void sel_maybe_drained(struct select *s);
void sel_hand_back_one(struct select *s, int64_t id, int64_t token);
void sel_hand_back_revoked(struct sorg *o);
/* admit.c */
void admit_launch(struct sadmit *a);
void admit_free(struct sadmit *a, bool unwait);
void admit_wake_org(struct sorg *o);
void admit_repropose(struct sorg *o);

#endif
