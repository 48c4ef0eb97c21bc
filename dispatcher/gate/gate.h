/* The Redis slot gate (SPEC C1–C5, C11, C12, §7): admission and release of calls through the
 * Lua scripts of this folder, on a borrowed Redis connection.
 *
 * One admission is one round trip (gate_admit.lua): the selector's ordered candidates are
 * decided in order by the rule of dispatcher/core/fairshare_gate.h, the first admitted takes
 * its slots at the system, organisation, agent and campaign levels, and every refusal names its
 * level and reason. Acquire and release are idempotent per call id. The key layout, records,
 * versions and scripts are dispatcher/gate/README.md.
 *
 * The generation guard: every per-org script runs only when the org's generation key holds the
 * generation the gate was given (gate_set_generation(), the value of dsp:v1:{sys}:gen that the
 * Redis connection's up event reports). Otherwise the org's state is absent or from another
 * generation (FLUSHALL, a restart, a failover) and the operation answers GATE_ELOST: nothing is
 * admitted, nothing changed. The worker then switches the fleet to the postgres mode (C11).
 *
 * Ids (organisations, campaigns, agents, calls) match ^[A-Za-z0-9_-]{1,64}$, as in the schema;
 * anything else is refused with -EINVAL before anything is sent.
 *
 * Async contract (STYLE rule 4): if a function that takes a callback returns an error, the
 * callback is never called; otherwise it is called exactly once: with status 0 and a result,
 * or with a negative status and a NULL result — a transport error of the connection
 * (-ENOTCONN, -ECONNRESET: the script may have run, -ETIMEDOUT), GATE_ELOST, -ENOENT (admit:
 * no limits installed for the organisation), -EOVERFLOW (a count at FAIRSHARE_COUNT_MAX),
 * DSP_EREDIS (any other error reply, logged), or -ECANCELED when the gate is freed or the
 * connection closed first. Every function that takes a callback may also return -ENOTCONN (the
 * connection is down), -ESHUTDOWN (the connection or the gate is closing) or -ENOMEM. Results
 * and every pointer in them are borrowed: valid only during the callback. Callbacks may call any
 * gate function, gate_free() included (but a callback answered -ECANCELED from inside
 * gate_free() must not use that gate).
 */
#ifndef DSP_GATE_H
#define DSP_GATE_H

#include "fairshare_gate.h"
#include "redis_conn.h"
#include "redis_script.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GATE_CANDIDATES_MAX   16		  /* candidates per admission */
#define GATE_ELOST	      (-ENODATA)	  /* gate state absent or of another generation */
#define GATE_VERSION_MAX      9007199254740991ULL /* 2^53 - 1: versions are exact in Lua */
#define GATE_GEN_MAX	      64		  /* bytes of a generation */
#define GATE_WAKE_DEADLINE_MS 300		  /* default hand-off deadline */

struct gate;

/* Why a candidate was refused: the core's reasons, plus one the core cannot have. */
enum gate_reason {
	GATE_REASON_NONE = FAIRSHARE_REASON_NONE,
	GATE_REASON_FULL = FAIRSHARE_REASON_FULL,
	GATE_REASON_DIRECT_RESERVE = FAIRSHARE_REASON_DIRECT_RESERVE,
	GATE_REASON_FLOORS = FAIRSHARE_REASON_FLOORS,
	GATE_REASON_AGENT_FLOORS = FAIRSHARE_REASON_AGENT_FLOORS,
	GATE_REASON_UNKNOWN, /* level campaign: no limits installed for this campaign (only
			      * with enforcement on: off, C3, the campaign level refuses nothing) */
};

/* One candidate's decision (fairshare_decision, as the script took it). */
struct gate_decision {
	enum fairshare_level level; /* FAIRSHARE_LEVEL_NONE when admitted */
	enum gate_reason reason;
	bool fcfs; /* enforcement on and floors expired or never installed (R9) */
};

enum gate_outcome {
	GATE_REFUSED = 0,  /* every evaluated candidate refused (decisions say why) */
	GATE_ADMITTED = 1, /* decisions[n_decisions - 1] admitted; its slots are taken */
	GATE_HELD = 2,	   /* the call id already holds a slot: nothing taken, nothing decided */
};

/* An admission request. Every pointer is borrowed for the call only. */
struct gate_admit_req {
	const char *org;
	const char *call;	      /* the call id (the slot id at every level) */
	const char *const *campaigns; /* batch: the candidates, in the selector's order */
	uint32_t n_campaigns;	      /* 1..GATE_CANDIDATES_MAX; 0 for a direct dial */
	bool direct;		      /* a direct dial (the org's direct pseudo-campaign) */
	const char *agent;	      /* direct: the dial's agent, NULL for none */
	bool wait;		      /* if refused, register as a waiter (C9/C10): a direct dial
				       * as a waiting direct dial, a batch call under each of its
				       * candidates, woken once (README.md "Hand-off") */
	const char *worker;	      /* the worker holding the waiter (its wake channel,
				       * handoff.h); needed for a batch wait; NULL for a direct
				       * dial: it counts in k but is never woken, and its
				       * registration expires 10 s after its last refusal */
};

struct gate_admit_result {
	enum gate_outcome outcome;
	int index;		 /* ADMITTED: the admitted candidate's index, -1 for a direct dial;
			       * otherwise -1 */
	const char *campaign;	 /* ADMITTED/HELD: the campaign, NULL for a direct dial */
	const char *agent;	 /* HELD: the agent the call counts on, NULL for none */
	uint64_t taken_ms;	 /* HELD: Redis time the slot was taken */
	uint64_t now_ms;	 /* the script's clock (Redis TIME) */
	uint32_t direct_waiting; /* k after this step */
	int waiter;		 /* +1 registered as waiting, -1 registration withdrawn, 0 none */
	uint32_t n_decisions;	 /* candidates evaluated: a refusal that holds for every
				  * campaign (fairshare_gate_blocks_org) ends the walk */
	struct gate_decision decisions[GATE_CANDIDATES_MAX];
};

enum gate_release_outcome {
	GATE_NOT_HELD = 0, /* no slot record: duplicate, out-of-order or unknown; nothing freed */
	GATE_FREED = 1,	   /* the call's slots are back at every level */
	GATE_RANGE = 2,	   /* a count was already 0: nothing changed (the state needs the
			    * reconciler; logged) */
};

struct gate_release_result {
	enum gate_release_outcome outcome;
	const char *campaign;	/* FREED/RANGE: the record's campaign, NULL for a direct dial */
	const char *agent;	/* FREED/RANGE: its agent, NULL for none */
	uint64_t taken_ms;	/* FREED/RANGE: when the slot was taken (Redis time) */
	uint64_t now_ms;	/* the script's clock */
	uint32_t woken;		/* FREED: waiters woken (the freed line's, and one per expired
			       * wake passed on) */
	uint32_t passed;	/* FREED: expired wakes passed on */
	uint32_t receivers;	/* FREED: subscribers the wake PUBLISHes reached */
	const char *woken_call; /* FREED: the last woken waiter's call id, NULL for none */
	bool refresh;		/* FREED: the campaign was left below its floor with no waiter:
				 * "demand below floor" published on dsp:v1:refresh (README.md
				 * "Hand-off"; at most once per org per 100 ms) */
};

/* What a hand-off script did (gate_handoff_beat(), gate_handoff_wake()). */
struct gate_handoff_result {
	uint32_t woken;		 /* waiters woken */
	uint32_t passed;	 /* expired wakes passed on */
	uint32_t dropped;	 /* waiters of dead workers dropped, and expired registrations of
				  * direct waiters without a worker (README.md "Hand-off") */
	uint32_t receivers;	 /* subscribers the wake PUBLISHes reached */
	uint64_t now_ms;	 /* the script's clock */
	uint32_t direct_waiting; /* k after the call */
};

/* One campaign's limits (C7, C2). */
struct gate_campaign_limits {
	const char *campaign;
	uint32_t ceiling;  /* max_concurrent_calls, 0 for none */
	const char *agent; /* the campaign's agent, NULL for none */
};

/* An organisation's limits, installed as a whole under version (C4). */
struct gate_limits {
	uint64_t version;   /* organisations.limits_version, 1..GATE_VERSION_MAX */
	uint32_t org_limit; /* >= 1 */
	uint32_t per_agent; /* 0 when unset */
	bool enforced;	    /* concurrency_management_enabled (C3) */
	const struct gate_campaign_limits *campaigns; /* every campaign of the org */
	uint32_t n_campaigns;
};

/* One campaign's floor; campaign NULL is the direct pseudo-campaign. */
struct gate_floor {
	const char *campaign;
	uint32_t floor;
};

struct gate_install_result {
	bool applied;	    /* false: the version was not newer, nothing changed */
	uint64_t version;   /* the stored version after the call */
	uint64_t now_ms;    /* the script's clock */
	uint64_t expire_ms; /* floors: valid while Redis time < expire_ms */
	uint64_t shortfall; /* S after the install (limits, floors) */
};

struct gate_wait_result {
	bool changed;		 /* false: already registered / not registered */
	uint32_t direct_waiting; /* k after the call */
};

struct gate_campaign_view {
	const char *id;	   /* NULL for the direct pseudo-campaign */
	uint32_t running;  /* live calls */
	uint32_t floor;	   /* installed floor (kept after expiry) */
	uint32_t ceiling;  /* 0 for none */
	const char *agent; /* NULL for none */
	bool known;	   /* limits installed for it */
};

struct gate_agent_view {
	const char *id;
	uint32_t running;   /* live calls on the agent, direct dials included */
	uint64_t shortfall; /* S_a of its batch campaigns (R7) */
};

/* One organisation's state in one round trip (the capacity view, item 4 of issue 8). */
struct gate_view {
	uint64_t now_ms;
	uint64_t limits_version; /* 0: no limits installed */
	uint32_t org_limit;
	uint32_t per_agent; /* 0 when unset */
	bool enforced;
	uint32_t org_running;
	uint64_t shortfall;	 /* S */
	uint32_t direct_waiting; /* k */
	uint32_t direct_reserve; /* at now_ms */
	uint64_t floors_version; /* 0: none installed */
	uint64_t floors_expire_ms;
	bool floors_valid;
	uint32_t system_limit;
	uint32_t system_running;
	uint64_t system_version; /* of the installed system limit (limits_version); 0: none */
	uint32_t slots;		 /* slot records (live calls) */
	uint32_t waiters;	 /* waiter records */
	const struct gate_campaign_view *campaigns; /* sorted by id, "*" (direct) first */
	uint32_t n_campaigns;
	const struct gate_agent_view *agents; /* sorted by id */
	uint32_t n_agents;
};

struct gate_counts {
	uint64_t admitted;
	uint64_t fcfs;
	uint64_t refused[FAIRSHARE_LEVEL_COUNT]; /* by level; [FAIRSHARE_LEVEL_NONE] is 0 */
};

struct gate_stats {
	uint64_t now_s;		   /* Redis time, seconds */
	struct gate_counts total;  /* since the org's state was built */
	struct gate_counts minute; /* the seconds in (now - 60 s, now] */
};

/* A live call, for gate_org_rebuild(). */
struct gate_slot_record {
	const char *call;
	const char *campaign; /* NULL for a direct dial */
	const char *agent;    /* NULL for none */
	uint64_t taken_ms;
};

typedef void (*gate_admit_cb)(struct gate *g, int status, const struct gate_admit_result *res,
			      void *data);
typedef void (*gate_release_cb)(struct gate *g, int status, const struct gate_release_result *res,
				void *data);
typedef void (*gate_install_cb)(struct gate *g, int status, const struct gate_install_result *res,
				void *data);
typedef void (*gate_wait_cb)(struct gate *g, int status, const struct gate_wait_result *res,
			     void *data);
typedef void (*gate_read_cb)(struct gate *g, int status, const struct gate_view *view, void *data);
typedef void (*gate_stats_cb)(struct gate *g, int status, const struct gate_stats *stats,
			      void *data);
typedef void (*gate_done_cb)(struct gate *g, int status, void *data);
typedef void (*gate_handoff_cb)(struct gate *g, int status, const struct gate_handoff_result *res,
				void *data);

/* Registers the gate's scripts in reg (before the connections that use it start). Returns 0 or
 * a code of redis_scripts_add() (-EEXIST when already registered, -EBUSY once frozen). */
int gate_scripts_register(struct redis_scripts *reg);

/* Tests only: gate_scripts_register() and the test clock script (gate_test_pin_clock()). The
 * daemon never calls it, so production can never pin an org's clock. */
int gate_test_scripts_register(struct redis_scripts *reg);

/* Creates a gate over conn (borrowed: it must outlive the gate) whose registry reg (borrowed
 * likewise) holds the gate's scripts. generation (copied, may be NULL: set it later) is G.
 * *out is owned by the caller until gate_free(). Returns 0, -EINVAL (scripts not registered, a
 * generation longer than GATE_GEN_MAX) or -ENOMEM. */
int gate_new(struct redis_conn *conn, const struct redis_scripts *reg, const char *generation,
	     struct gate **out);

/* Sets the generation G (copied, 1..GATE_GEN_MAX bytes) the next operations run under; NULL
 * clears it (every operation then answers GATE_ELOST). Returns 0 or -EINVAL. */
int gate_set_generation(struct gate *g, const char *generation);

/* Frees the gate. Operations still pending are answered -ECANCELED from inside this call (their
 * replies, when they come, are dropped). Safe from a gate callback. NULL is ignored. */
void gate_free(struct gate *g);

/* Decides one admission (see the top of this file and README.md) and, when admitted, takes the
 * call's slots. A direct dial has no candidates and may register as waiting when refused (wait);
 * its admission withdraws its registration. Returns 0 (cb will be called) or -EINVAL (bad ids,
 * no or too many candidates, candidates with a direct dial, wait without direct). */
int gate_admit(struct gate *g, const struct gate_admit_req *req, gate_admit_cb cb, void *data);

/* Gives the call's slots back, if it holds any (idempotent), and in the same script wakes the
 * one waiter the rule would admit on the freed line (README.md "Hand-off"). Like an admission it
 * checks the system generation too: GATE_ELOST when the org's or the system's generation is not
 * the gate's (between a way back's system init and the org's rebuild, the new system count has
 * never counted this call): nothing is freed and the caller does not retry (the rebuild from
 * PostgreSQL's live calls settles it). Returns 0 or -EINVAL. */
int gate_release(struct gate *g, const char *org, const char *call, gate_release_cb cb, void *data);

/* Installs an organisation's limits and its campaigns' ceilings and agents, replacing the
 * previous set (a campaign left out becomes unknown), when l->version is newer than the stored
 * one. Returns 0 or -EINVAL (bad ids or bounds). */
int gate_install_limits(struct gate *g, const char *org, const struct gate_limits *l,
			gate_install_cb cb, void *data);

/* Installs floors[0..n) (a campaign left out has floor 0) under version, valid for ttl_ms of
 * Redis time, when version is newer than the stored one. Returns 0 or -EINVAL. */
int gate_install_floors(struct gate *g, const char *org, uint64_t version, uint64_t ttl_ms,
			const struct gate_floor *floors, uint32_t n, gate_install_cb cb,
			void *data);

/* Changes only the floors of changed[0..n) (the other campaigns keep theirs), moves S and each
 * S_a by the differences and renews the expiry (now + ttl_ms) under version: O(n), where a full
 * install is O(campaigns) and blocks Redis for it (≈ 95 ms at 10,000 campaigns). Applied only
 * when the stored floors version is exactly base_version (the floors the caller computed the
 * change against) and version is newer; otherwise nothing changes and the result says
 * applied false with the stored version: the caller then installs in full
 * (gate_install_floors()). Returns 0 or -EINVAL (bad ids, version not above base_version). */
int gate_install_floors_delta(struct gate *g, const char *org, uint64_t base_version,
			      uint64_t version, uint64_t ttl_ms, const struct gate_floor *changed,
			      uint32_t n, gate_install_cb cb, void *data);

/* Packs a floors version from the refresher lease's fencing version (1..2^27-1) and a sequence
 * within that lease (0..2^26-1): lease * 2^26 + seq. Returns 0 or -ERANGE. */
int gate_floors_version(uint64_t lease_version, uint64_t seq, uint64_t *out);

/* Installs the system limit (C1) when version (system_settings.limits_version) is newer than the
 * stored one. Guarded by the system generation. Returns 0 or -EINVAL. */
int gate_install_system_limit(struct gate *g, uint64_t version, uint32_t limit, gate_install_cb cb,
			      void *data);

/* Registers (gate_direct_wait) or withdraws (gate_direct_unwait) one waiting direct dial of
 * the org, by call id (idempotent). The registration has no worker: it is never woken and
 * expires 10 s (Redis time) after its last gate_direct_wait(), which renews it (README.md
 * "Hand-off"). agent may be NULL. Return 0 or -EINVAL. */
int gate_direct_wait(struct gate *g, const char *org, const char *call, const char *agent,
		     gate_wait_cb cb, void *data);
int gate_direct_unwait(struct gate *g, const char *org, const char *call, gate_wait_cb cb,
		       void *data);

/* The hand-off's deadline: a woken waiter that has not taken its line within deadline_ms of
 * Redis time loses its wake to the next waiter (default GATE_WAKE_DEADLINE_MS). Applies to the
 * next operations. Returns 0 or -EINVAL (0 or above 60,000). */
int gate_set_wake_deadline(struct gate *g, uint64_t deadline_ms);

/* The worker's heartbeat in org: its waiters there stay registered while Redis time < now +
 * ttl_ms; then the deadline sweep (expired wakes passed on). Returns 0 or -EINVAL. */
int gate_handoff_beat(struct gate *g, const char *org, const char *worker, uint64_t ttl_ms,
		      gate_handoff_cb cb, void *data);

/* The sweep, then up to max (1..16) waiters woken that the rule admits on lines not promised
 * yet: for whoever installed floors or raised a limit. Returns 0 or -EINVAL. */
int gate_handoff_wake(struct gate *g, const char *org, uint32_t max, gate_handoff_cb cb,
		      void *data);

/* Withdraws one waiter (batch or direct) that gives up: its record and queue entry go (a direct
 * one with k - 1: like gate_direct_unwait()); if it had been woken, its promised line is passed
 * to the next waiter in the same script. The result's dropped is 1 when it was registered.
 * Returns 0 or -EINVAL. */
int gate_handoff_unwait(struct gate *g, const char *org, const char *call, gate_handoff_cb cb,
			void *data);

/* Removes the worker's heartbeat in org (its waiters are dropped when met). Returns 0 or
 * -EINVAL. */
int gate_handoff_leave(struct gate *g, const char *org, const char *worker, gate_handoff_cb cb,
		       void *data);

/* Reads one organisation's limits, floors and live counts (campaigns, agents, system) in one
 * round trip: O(campaigns). Returns 0 or -EINVAL. */
int gate_read(struct gate *g, const char *org, gate_read_cb cb, void *data);

/* Reads one organisation's decision counters, in total and over the rolling minute. Not
 * guarded (counters are read even when the state is lost). Returns 0 or -EINVAL. */
int gate_read_stats(struct gate *g, const char *org, gate_stats_cb cb, void *data);

/* Starts the gate generation (the gate's own, gate_set_generation()) at the system level: writes
 * dsp:v1:{sys}:gen and the system limit with running 0. For the state's builder only (the
 * reconciler under the C11 locks; tests): every org must then be rebuilt under it. The callback
 * gets -EEXIST, nothing changed, when the system generation already is the gate's (a reset of the
 * system count under orgs still built under it would lose their calls at the system level).
 * Returns 0 or -EINVAL (no generation set, bad bounds). */
int gate_system_init(struct gate *g, uint64_t version, uint32_t limit, gate_done_cb cb, void *data);

/* (Re)builds an org's slot state under the gate's generation from its live calls
 * (records[0..n), borrowed for the call), keeping its limits, floors and counters; also how a
 * new organisation is first created (n = 0). Answers GATE_ELOST when the system generation is
 * not the gate's. Returns 0 or -EINVAL. */
int gate_org_rebuild(struct gate *g, const char *org, const struct gate_slot_record *records,
		     uint32_t n, gate_done_cb cb, void *data);

/* Tests only: pins the clock of the org's scripts to now_ms (a negative value unpins it), so
 * the shared test vectors can set their clock. Returns 0, -EINVAL, or -ENOTSUP when the gate's
 * registry was filled by gate_scripts_register() (the product's: the script is not there). */
int gate_test_pin_clock(struct gate *g, const char *org, int64_t now_ms, gate_done_cb cb,
			void *data);

/* Static names for logs and metrics labels ("unknown_campaign" for GATE_REASON_UNKNOWN). */
const char *gate_reason_name(enum gate_reason reason);

/* Builds the name of an org's key into buf ("dsp:v1:{o:<org>}:<what>"). Returns the length, or
 * -EINVAL (bad org) / -ENOSPC. For tests, tools and colleagues' scripts. */
int gate_org_key(const char *org, const char *what, char *buf, size_t size);

/* The system keys. */
#define GATE_SYS_GEN_KEY   "dsp:v1:{sys}:gen"
#define GATE_SYS_STATE_KEY "dsp:v1:{sys}:state"

/* Start-up checks (SPEC §7), blocking: they run before the loop serves anything. */
struct gate_startup_options {
	const char *redis_url;	     /* checked with the Redis layer's own handshake */
	uint64_t connect_timeout_ms; /* deadline for the Redis check */
	const char *database_url;    /* NULL skips the schema check */
	uint64_t
		pg_connect_timeout_ms; /* deadline for the database connection (0: the Redis one) */
};

/* Refuses to start, with a message in msg (NUL-terminated, truncated to size) naming the fix,
 * when Redis evicts keys (maxmemory-policy other than noeviction: DSP_ECONFIG, the Redis
 * layer's message), when the database schema is not current (migrations pending: DSP_ESCHEMA,
 * "run dispatcher migrate"), when Redis does not answer within the deadline (-ETIMEDOUT) or the
 * database cannot be reached within its deadline (DSP_EPG). Returns 0 when everything is in order. */
int gate_startup_check(const struct gate_startup_options *o, char *msg, size_t size);

#endif
