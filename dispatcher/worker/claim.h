/* The claim (SPEC C8, C9, D1; issue 9 item 2): where a contact is picked from the queue.
 *
 * Three statements, each a named prepared statement on the worker's pool:
 *   - the demand scan: the active campaigns that have pending, due contacts, with their
 *     organisation's limit, agent and caller id (the scheduler's view of who has work);
 *   - the claim: ONE statement that locks a page of due pending contacts per campaign asked
 *     (FOR UPDATE SKIP LOCKED, through contacts_dialable_idx) and writes their lease in the same
 *     statement: state claimed, lease_owner, a fresh lease_token from contacts_lease_token_seq
 *     (migration 0007; the fence of the call-row write, D1), lease_until = now() + lease on the
 *     database's clock. Only campaigns whose status is active are claimed from; contacts of a
 *     paused batch are 'held', never pending, so never claimed;
 *   - the hand-back: claimed contacts of this claim (id and token must match) go back undialled,
 *     nothing charged (attempts and tries unchanged, next_attempt_at unchanged), lease cleared:
 *     to 'cancelled' when their batch or campaign is stopped now, 'held' when paused, else to
 *     'pending' (C9). The call-row write refuses a contact whose campaign or batch left
 *     active since its claim (gate_pg.h: lease lost), so such contacts come back here.
 *
 * Async contract (STYLE rule 4): if a function that takes a callback returns an error the
 * callback is never called; otherwise it is called exactly once, with status 0 and the rows, or
 * a negative status (DSP_EPG, a transport error, -ECANCELED when the pool closes) and no rows.
 * Rows passed to callbacks are borrowed for the callback only.
 */
#ifndef DSP_WORKER_CLAIM_H
#define DSP_WORKER_CLAIM_H

#include "pg_pool.h"

#include <stdint.h>

#define CLAIM_CAMPAIGNS_MAX 64	 /* campaigns per claim statement */
#define CLAIM_PAGE_MAX	    1000 /* contacts per campaign per claim statement */
#define CLAIM_HANDBACK_MAX  1000 /* contacts per hand-back statement */

struct claim;

struct claim_options {
	const char *owner; /* lease_owner written with each claim (copied, 1..64 bytes) */
	uint64_t lease_ms; /* lease length from the claim (database clock), >= 1000 */
};

/* One campaign with demand (the demand scan). */
struct claim_demand {
	const char *org;
	uint32_t org_limit;
	const char *campaign;
	const char *agent;
	const char *from_number; /* the agent's caller id, NULL for none */
};

/* One claimed contact. */
struct claim_contact {
	int64_t id;
	const char *campaign;
	const char *phone; /* E.164 */
	int32_t attempts;  /* calls that reached an outcome so far (D5) */
	int64_t lease_token;
	const char *batch; /* its batch (stop / pause: select_dispatch_notify()) */
};

/* A contact to hand back: the claim's id and token. */
struct claim_handback {
	int64_t id;
	int64_t lease_token;
};

typedef void (*claim_demand_cb)(struct claim *c, int status, const struct claim_demand *rows,
				uint32_t n, void *data);
typedef void (*claim_take_cb)(struct claim *c, int status, const struct claim_contact *rows,
			      uint32_t n, void *data);
typedef void (*claim_count_cb)(struct claim *c, int status, uint64_t n, void *data);

/* Creates the claim module on pool (borrowed, not started yet: the statements are prepared
 * now). *out is owned by the caller (claim_free(), after the pool is closed). Returns 0,
 * -EINVAL (bad options), -EBUSY (pool started) or -ENOMEM. */
int claim_new(struct pg_pool *pool, const struct claim_options *o, struct claim **out);

void claim_free(struct claim *c);

/* Reads the campaigns with demand (see the top of this file), ordered by organisation, then
 * the campaigns' creation. Returns 0 or the pool's refusal. */
int claim_demand(struct claim *c, claim_demand_cb cb, void *data);

/* Claims up to counts[i] (1..CLAIM_PAGE_MAX) contacts of campaigns[i], for i in 0..n
 * (1..CLAIM_CAMPAIGNS_MAX), in one statement. The rows come back in no particular order.
 * Returns 0, -EINVAL or the pool's refusal. */
int claim_take(struct claim *c, const char *const *campaigns, const uint32_t *counts, uint32_t n,
	       claim_take_cb cb, void *data);

/* Hands back h[0..n) (1..CLAIM_HANDBACK_MAX) in one statement; cb (may be NULL) gets how many
 * rows still held their claim and went back. Returns 0, -EINVAL or the pool's refusal. */
int claim_hand_back(struct claim *c, const struct claim_handback *h, uint32_t n, claim_count_cb cb,
		    void *data);

#endif
