/* One step interpreter for the gate's sequences (tests/vectors/fairshare.json, `sequences`),
 * run against one or more backends at once: the C model (dispatcher/core/fairshare_gate.h,
 * seq_model_backend()) and the Redis gate script (tests/driver/seq_script.h, integration only).
 *
 * Every operation goes to every backend of a run; their answers (an install's verdict, every
 * decision of an admission, a release's outcome, a wait's change) must be equal, and
 * seq_compare() reads every backend's state (running per campaign, agent, org and system,
 * Σ shortfall of the org and per agent, k, the direct reserve, the decision counters) and
 * fails the test (cmocka) naming the run's label, the event and both states when they differ.
 *
 * Calls are named by the driver ("c<n>"), so a release is by call id and idempotent on both
 * sides: the model backend keeps a call id → slot map, as the script keeps slot records.
 *
 * Ownership: a run and its backends are the caller's (static storage: they are large); a run
 * borrows its backends, and the ids and agent names of its org (until the run is done).
 */
#ifndef DSP_TEST_SEQ_DRIVER_H
#define DSP_TEST_SEQ_DRIVER_H

#include "fairshare_gate.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#define SEQ_MAX_C     16   /* campaigns per org (the direct one included) */
#define SEQ_MAX_A     16   /* agents per org */
#define SEQ_MAX_CALLS 4096 /* live calls and waiting dials a run keeps */
#define SEQ_MAX_B     2	   /* backends per run */
#define SEQ_CALL_LEN  24

/* One organisation's gate set-up and its current limits. Limits unset are
 * FAIRSHARE_UNLIMITED; agents are indices into agent[] (FAIRSHARE_NO_AGENT for none). */
struct seq_org {
	uint32_t system_limit;
	uint32_t system_running; /* other organisations' calls at the start */
	uint32_t org_limit, per_agent;
	bool enforced;
	uint32_t n;		      /* campaigns */
	const char *ids[SEQ_MAX_C];   /* borrowed */
	uint32_t ceiling[SEQ_MAX_C];  /* max_concurrent_calls */
	uint32_t agent_of[SEQ_MAX_C]; /* the campaign's agent */
	uint32_t direct;	      /* index of the direct campaign, FAIRSHARE_NO_CAMPAIGN */
	uint32_t n_agents;
	const char *agent[SEQ_MAX_A]; /* borrowed names, in order of first appearance */
};

/* An admission's answer: one decision per evaluated candidate, in order. */
struct seq_decisions {
	bool admitted;
	uint32_t n;
	struct {
		enum fairshare_level level;
		int reason; /* enum fairshare_reason, or the script's GATE_REASON_UNKNOWN */
		bool fcfs;
	} d[SEQ_MAX_C];
};

/* A backend's state, read after an event. */
struct seq_state {
	uint32_t org_running, system_running, direct_waiting, direct_reserve;
	uint64_t shortfall;
	uint32_t running[SEQ_MAX_C], floor[SEQ_MAX_C];
	uint32_t agent_running[SEQ_MAX_A];
	uint64_t agent_shortfall[SEQ_MAX_A];
	uint64_t admitted, fcfs, refused[FAIRSHARE_LEVEL_COUNT];
};

/* A backend: every operation runs to completion before it returns and fails the test on an
 * error of its own (a transport error, an unexpected status). org is the run's, read only. */
struct seq_backend {
	const char *name;
	/* Starts the org afresh: counts 0, no floors, the clock at 0, org's limits installed. */
	void (*setup)(struct seq_backend *b, const struct seq_org *org);
	void (*set_clock)(struct seq_backend *b, uint64_t now_ms);
	/* Returns 0, or -ESTALE when version is not newer (nothing changes). */
	int (*install_floors)(struct seq_backend *b, const struct seq_org *org, uint64_t version,
			      const uint32_t *floors, uint64_t ttl_ms);
	/* A delta install (gate_install_floors_delta()): only the campaigns with changed[i] are
	 * sent; floors[0..org->n) is the whole result, the other entries equal to the installed
	 * floors. Returns 0 when the installed floors version is exactly base_version (version >
	 * base_version), else -ESTALE (nothing changes). The model has no delta: it checks the
	 * base and installs floors in full — the install the delta stands for. */
	int (*install_floors_delta)(struct seq_backend *b, const struct seq_org *org,
				    uint64_t base_version, uint64_t version, const uint32_t *floors,
				    const bool *changed, uint64_t ttl_ms);
	/* Installs org's current limits and ceilings under version (always newer). */
	void (*install_limits)(struct seq_backend *b, const struct seq_org *org, uint64_t version);
	/* Decides call over cands[0..n) (batch), or a direct dial (n 0; agent, wait). */
	void (*admit)(struct seq_backend *b, const struct seq_org *org, const char *call,
		      const uint32_t *cands, uint32_t n, uint32_t agent, bool wait,
		      struct seq_decisions *out);
	/* Returns true when the call's slots were freed (false: not held). */
	bool (*release)(struct seq_backend *b, const struct seq_org *org, const char *call);
	/* Registers / withdraws a waiting direct dial; returns true when k changed. */
	bool (*direct_wait)(struct seq_backend *b, const char *call, bool wait);
	void (*read_state)(struct seq_backend *b, const struct seq_org *org, struct seq_state *out);
};

/* The C model behind struct seq_backend (no services). */
struct seq_model {
	struct seq_backend b; /* first: the backend handle */
	struct fairshare_gate g;
	struct fairshare_gate_campaign gc[SEQ_MAX_C];
	struct fairshare_gate_agent ga[SEQ_MAX_A];
	struct fairshare_system sys;
	uint64_t now;
	struct {
		char call[SEQ_CALL_LEN];
		struct fairshare_slot slot;
	} held[SEQ_MAX_CALLS];
	uint32_t n_held;
	char waiting[SEQ_MAX_CALLS][SEQ_CALL_LEN];
	uint32_t n_waiting;
};

/* Fills m's backend handle; returns it. */
struct seq_backend *seq_model_backend(struct seq_model *m);

struct seq_held {
	char call[SEQ_CALL_LEN];
	uint32_t campaign, agent;
};

/* A run: an org, its backends, the driver's calls and clock. */
struct seq_run {
	char label[128]; /* printed with a failure (seed, case) */
	long event;	 /* events applied since seq_start() */
	struct seq_org org;
	struct seq_backend *b[SEQ_MAX_B];
	uint32_t nb;
	uint64_t now, limits_version, floors_version, floors_expire;
	uint32_t floors[SEQ_MAX_C]; /* the floors installed at floors_version */
	unsigned next_call;
	struct seq_held held[SEQ_MAX_CALLS];
	uint32_t n_held;
	char waiting[SEQ_MAX_CALLS][SEQ_CALL_LEN];
	uint32_t n_waiting;
	char released[SEQ_CALL_LEN]; /* the last call released (for a duplicate release) */
	uint64_t seen[FAIRSHARE_LEVEL_COUNT][8]; /* decisions seen, by level and reason */
	uint64_t seen_fcfs, seen_stale;		 /* fcfs decisions, refused installs */
	uint64_t seen_delta, seen_delta_stale;	 /* delta installs applied, refused */
};

/* Prints what r's decisions covered (levels, reasons, fcfs, stale installs). */
void seq_print_coverage(const struct seq_run *r);

/* Starts run r over backends b[0..nb) with org (copied; its strings stay borrowed): each
 * backend is set up and the org's limits installed under version 1. */
void seq_start(struct seq_run *r, const struct seq_org *org, struct seq_backend **b, uint32_t nb);

/* The operations, applied to every backend and compared. */
void seq_set_clock(struct seq_run *r, uint64_t now_ms);
int seq_install_floors(struct seq_run *r, uint64_t version, const uint32_t *floors,
		       uint64_t ttl_ms);
/* A delta install against base_version: floors is the whole result, changed[i] the campaigns
 * sent (see install_floors_delta above); the unchanged entries must be r->floors'. Returns 0
 * or -ESTALE, the same on every backend. */
int seq_install_floors_delta(struct seq_run *r, uint64_t base_version, uint64_t version,
			     const uint32_t *floors, const bool *changed, uint64_t ttl_ms);
void seq_install_limits(struct seq_run *r); /* r->org's limits, under the next version */
/* Returns the index in r->held of the call admitted, or -1. */
int seq_admit(struct seq_run *r, const uint32_t *cands, uint32_t n, uint32_t agent, bool wait,
	      struct seq_decisions *out);
bool seq_release(struct seq_run *r, const char *call);
/* Releases held call i (removed from r->held). */
bool seq_release_held(struct seq_run *r, uint32_t i);
/* Registers a new waiting dial, or withdraws the last registered (none: an unknown id). */
bool seq_wait(struct seq_run *r, bool wait);

/* Reads every backend's state and fails the test when they differ; *out is backend 0's. */
void seq_compare(struct seq_run *r, struct seq_state *out);

/* Index of campaign id / agent name (an agent is added when new). Fails on an unknown id. */
uint32_t seq_campaign(const struct seq_run *r, const char *id);
uint32_t seq_agent(struct seq_run *r, const char *name);
uint32_t seq_org_agent(struct seq_org *org, const char *name);

/* Runs one `sequences` case of the vectors file through backends b[0..nb), checking its
 * expectations against backend 0 and every backend against the others after every step. */
void seq_run_case(struct seq_run *r, const cJSON *c, struct seq_backend **b, uint32_t nb);

/* Runs events random events of seed over backends b[0..nb) on a fixed org (several
 * campaigns, two sharing a gating agent, one with a ceiling, a direct pseudo-campaign),
 * comparing after every event. */
void seq_random(struct seq_run *r, uint64_t seed, long events, struct seq_backend **b, uint32_t nb);

#endif
