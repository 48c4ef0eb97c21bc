/* Private to gate_pgmode*.c: one admission transaction's state, what its reads found, and the
 * decision step (gate_pgmode_model.c). */
#ifndef DSP_GATE_PGMODE_INT_H
#define DSP_GATE_PGMODE_INT_H

#include "gate_pg_int.h"
#include "gate_pgmode.h"

#define PGMODE_UUID_LEN 36

/* Live calls of the org per (campaign, agent), from the call rows. */
struct pgmode_count {
	const char *campaign; /* NULL: direct dials */
	const char *agent;
	uint32_t n;
};

/* A campaign the decision needs: a candidate, one holding a floor, or one with live calls. */
struct pgmode_campaign {
	const char *id;
	uint32_t ceiling; /* FAIRSHARE_UNLIMITED when max_concurrent_calls is NULL */
	const char *agent;
	uint32_t floor; /* installed floor (counted only while the install is valid) */
};

/* What the reads under the locks found. Strings are owned here. */
struct pgmode_reads {
	int status; /* the first failure */
	struct gate_pg_mode mode;
	uint32_t system_limit;
	bool org_found;
	uint32_t org_limit;
	uint32_t per_agent; /* 0: unset */
	bool enforced;
	uint32_t system_running;
	uint32_t org_running;
	uint64_t floors_version; /* 0: none installed */
	uint64_t floors_left_ms; /* how long the installed floors still count */
	uint32_t direct_floor;
	uint32_t waiting; /* k */
	struct pgmode_count *counts;
	uint32_t n_counts;
	char *counts_str;
	struct pgmode_campaign *camps; /* sorted by id */
	uint32_t n_camps;
	char *camps_str;
	char (*registered)[PGMODE_UUID_LEN + 1]; /* our direct call ids already waiting */
	uint32_t n_registered;
};

struct admit_op;

struct read_step {
	struct admit_op *op;
	enum stmt_id id;
};

struct req_copy {
	const char *call;
	uint32_t first; /* index of its first candidate in admit_op.cands */
	uint32_t n;	/* candidates */
	bool wait;
	bool direct;
};

struct admit_op {
	struct gate_pg *g;
	gate_pgmode_cb cb;
	void *data;
	char org[65];
	uint64_t epoch;
	uint64_t deadline_ms;
	char budget[24]; /* deadline_ms as the budget statement's parameter */
	struct req_copy *reqs;
	uint32_t n;
	struct gate_pg_dial *cands;
	uint32_t n_cands;
	char *strings;
	struct gate_pgmode_result *results;
	struct pgarr cand_lit;	 /* the candidates' campaigns, text[] */
	struct pgarr direct_lit; /* the direct requests' call ids, uuid[] */
	uint32_t n_direct;
	struct pg_txn *txn;
	struct read_step steps[10]; /* every read of begin_cb */
	int nsteps;
	int pending; /* reads in flight */
	struct pgmode_reads rd;
	bool floors_valid;
	/* the admitted calls' writes */
	struct gate_pg_call *wcalls;
	uint32_t *wreq; /* the request of each */
	enum gate_pg_outcome *wout;
	uint32_t nw;
	char *ids, *orgs; /* their array literals, for a fence */
	bool write_parsed;
	/* direct-dial waiters: register, agents, withdraw */
	bool wait_changes;
	struct pgarr wait_arr[3];
	char wait_ttl[24];
	const char *wait_values[5];
	bool rolled_back;
	int final_status;
};

/* Parses the result of read id into rd. Returns 0, -EPROTO or -ENOMEM. */
int pgmode_read_parse(struct pgmode_reads *rd, enum stmt_id id, const PGresult *res);
void pgmode_reads_free(struct pgmode_reads *rd);

/* Builds the array literals the reads need. Returns 0 or -ENOMEM. */
int pgmode_lits(struct admit_op *op);

/* Builds the organisation's fairshare_gate from op->rd, decides every request in order, and
 * fills op->results and the writes (wcalls, wreq, wout, nw). Returns 0, -ENOMEM or -EPROTO. */
int pgmode_decide(struct admit_op *op);

/* Builds the waiter statement's parameters from the results (wait_changes says whether there
 * is anything to send). Returns 0 or -ENOMEM. */
int pgmode_wait_params(struct admit_op *op);

#endif
