/* The gate in postgres mode (SPEC C11): admissions decided in PostgreSQL while Redis is down
 * or its state is lost, the release that ends a call row and wakes waiters, and the floors
 * install the refresher also writes to PostgreSQL.
 *
 * An admission transaction serves one organisation and one or more admissions of one loop
 * turn (gate_pgmode_admit). It takes the epoch lock shared, locks the org row and then the
 * system row (FOR UPDATE: every postgres-mode admission of the fleet serialises on the system
 * row, every one of an org on the org row), counts the live calls per level from the call rows,
 * reads the limits (system_settings, organisations, campaigns), the installed floors
 * (fair_share_installs, fair_share_floors) and the waiting direct dials (gate_direct_waiters),
 * builds the organisation's struct fairshare_gate from them and decides each admission with
 * fairshare_gate_admit() — the model itself (dispatcher/core/fairshare_gate.h), so the decision
 * order, the aggregates and the refusal levels are those of the Redis script and of the tests'
 * vectors. Each admitted call's row is then written by the same statement and fences as
 * gate_pg_write(), in the same transaction, and the transaction commits. So the limits hold
 * exactly across the fleet: a decision sees every call row committed before it, and no other
 * postgres-mode decision commits in between.
 *
 * Costs (README-pg.md, bench/RESULTS.md): three round trips per transaction (BEGIN; the reads,
 * pipelined; the write and COMMIT, pipelined), with the system row held for the last two.
 *
 * Async contract and validation as in gate_pg.h.
 */
#ifndef DSP_GATE_PGMODE_H
#define DSP_GATE_PGMODE_H

#include "fairshare.h"
#include "fairshare_gate.h"
#include "gate_pg.h"

#define GATE_PGMODE_CANDIDATES_MAX 16	  /* candidates per admission, as the Redis gate */
#define GATE_PGMODE_REQS_MAX	   64	  /* admissions per transaction */
#define GATE_PGMODE_WAIT_TTL_MS	   10000u /* a waiting direct dial's registration lasts this */

/* One admission. Borrowed for the call only. */
struct gate_pgmode_req {
	const char *call; /* uuid: the call id if admitted */
	/* batch: 1..GATE_PGMODE_CANDIDATES_MAX candidates in the selector's order, each with its
	 * campaign and its claimed contact (dial.agent is ignored: a batch call counts on its
	 * campaign's agent); direct: exactly one candidate with campaign NULL, naming its agent. */
	const struct gate_pg_dial *candidates;
	uint32_t n_candidates;
	bool wait; /* direct: register as a waiting direct dial when refused */
};

enum gate_pgmode_outcome {
	GATE_PGMODE_ADMITTED = 0, /* admitted and its call row written: dial it */
	GATE_PGMODE_REFUSED,	  /* every evaluated candidate refused (decisions say why) */
	GATE_PGMODE_NOT_WRITTEN,  /* admitted by the rule but its row was not written (write
				   * says why; GATE_PG_WRITTEN never, GATE_PG_UNKNOWN when the
				   * outcome was lost and could not be settled) */
};

/* One candidate's decision. */
struct gate_pgmode_decision {
	enum fairshare_level level; /* FAIRSHARE_LEVEL_NONE when admitted */
	enum fairshare_reason reason;
	bool fcfs;    /* enforcement on, floors expired or never installed (R9) */
	bool unknown; /* level campaign: no such campaign in the organisation */
};

struct gate_pgmode_result {
	enum gate_pgmode_outcome outcome;
	int index;		    /* the admitted candidate's index, else -1 */
	enum gate_pg_outcome write; /* ADMITTED: WRITTEN; NOT_WRITTEN: why */
	int waiter;		    /* +1 registered as waiting, -1 registration withdrawn, 0 */
	uint32_t n_decisions;	    /* candidates evaluated (a refusal that holds for every
				   * campaign ends the walk, fairshare_gate_blocks_org()) */
	struct gate_pgmode_decision decisions[GATE_PGMODE_CANDIDATES_MAX];
};

/* What one admission transaction saw and decided. */
struct gate_pgmode_answer {
	struct gate_pg_mode mode; /* as read under the lock */
	uint32_t system_running;  /* live calls of the system, before these admissions */
	uint32_t org_running;	  /* live calls of the org, before */
	bool floors_valid;	  /* installed floors counted (else first come first served) */
	uint32_t n;
	const struct gate_pgmode_result *results; /* results[i] answers reqs[i] */
};

/* status 0: a is filled (some admissions may be refused or not written). -ESTALE: the mode is
 * not postgres at the caller's epoch (a->mode says what it is; nothing decided). -ENOENT: no
 * such organisation. Otherwise (-ETIMEDOUT: the server's bound; DSP_EPG; a transport error;
 * -ECANCELED) a is NULL and nothing is admitted — except that a transaction whose COMMIT was
 * lost is settled by a fence first, so its answer is status 0 with each admitted call WRITTEN,
 * FENCED, or (when that fence fails too) UNKNOWN. */
typedef void (*gate_pgmode_cb)(struct gate_pg *g, int status, const struct gate_pgmode_answer *a,
			       void *data);

/* Decides reqs[0..n) in order for org in one transaction (see the top of this file), each
 * admission taking the slots the earlier ones of the same call took into account, at the
 * caller's epoch, bounded on the server by deadline_ms. Returns 0 (cb will be called),
 * -EINVAL (n outside 1..GATE_PGMODE_REQS_MAX, bad ids or numbers, a call id twice, a contact
 * twice, a direct request without exactly one candidate, wait on a batch request), -ETIMEDOUT
 * (deadline_ms 0), -ENOMEM, or the pool's refusal. */
int gate_pgmode_admit(struct gate_pg *g, const char *org, uint64_t epoch, uint64_t deadline_ms,
		      const struct gate_pgmode_req *reqs, uint32_t n, gate_pgmode_cb cb,
		      void *data);

/* status 0: ended[i] says whether calls[i] was live and is now ended (false: already ended or
 * unknown — a duplicate release frees nothing). */
typedef void (*gate_pgmode_release_cb)(struct gate_pg *g, int status, const bool *ended, uint32_t n,
				       void *data);

/* Ends calls[0..n) (state ended, outcome when none is set yet, ended_at): in postgres mode this
 * is the release itself; in redis mode it comes first and the Redis release follows. In
 * postgres mode the same transaction NOTIFYs GATE_PG_CHANNEL_FREE once per organisation that
 * had a call ended, so that waiting contacts of that org try again at once. outcome is one of
 * calls.outcome's values (completed, failed, no-answer, busy, canceled, refused, swept). cb may
 * be NULL. Returns 0, -EINVAL or the pool's refusal. */
int gate_pgmode_release(struct gate_pg *g, const char *const *calls, uint32_t n,
			const char *outcome, gate_pgmode_release_cb cb, void *data);

/* status 0: the waiter's row is gone (deleted now, or never there). */
typedef void (*gate_pgmode_unwait_cb)(struct gate_pg *g, int status, void *data);

/* Withdraws the waiting direct dial call (its gate_direct_waiters row, so k goes down at once
 * rather than at the row's expiry). Idempotent: a call that is not waiting changes nothing. cb
 * may be NULL. Returns 0, -EINVAL (not a uuid) or the pool's refusal. */
int gate_pgmode_unwait(struct gate_pg *g, const char *call, gate_pgmode_unwait_cb cb, void *data);

/* One campaign's floor as the refresher installs it; campaign NULL is the direct one. */
struct gate_pgmode_floor {
	const char *campaign;
	uint32_t floor;
	bool active;		      /* in the installed active set (capacity.h V1) */
	struct fairshare_carry carry; /* the exact carry for the next recompute */
};

/* status 0: applied says whether version was newer than the installed one (else nothing
 * changed: a fenced refresher). */
typedef void (*gate_pgmode_install_cb)(struct gate_pg *g, int status, bool applied, void *data);

/* Installs an organisation's floors in PostgreSQL under version (the same packed version as
 * the Redis install), valid for ttl_ms of PostgreSQL time, when version is newer than the
 * installed one: the org's fair_share_floors rows become those of floors[] with a floor or
 * active (only changed rows written), and every entry's carry is stored in the org's
 * fair_share_carries row (migration 0004). Returns 0, -EINVAL (bad ids, version 0, n over
 * FAIRSHARE_CAMPAIGNS_MAX, a campaign twice) or the pool's refusal. */
int gate_pgmode_install_floors(struct gate_pg *g, const char *org, uint64_t version,
			       uint64_t ttl_ms, const struct gate_pgmode_floor *floors, uint32_t n,
			       gate_pgmode_install_cb cb, void *data);

#endif
