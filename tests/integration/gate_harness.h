/* Test harness for the Redis slot gate (dispatcher/gate/gate.h): one loop, one Redis connection
 * with the gate's scripts, one gate, and blocking wrappers that run the loop until the
 * operation's callback has come (results copied out). Fails the test (cmocka) on a harness error;
 * the operations' own statuses are returned for the test to check. Also usable by the shared
 * model-vs-script driver. */
#ifndef DSP_TEST_GATE_HARNESS_H
#define DSP_TEST_GATE_HARNESS_H

#include "gate.h"

#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#define GENV_GEN	   "G1" /* the generation genv_fresh() builds under */
#define GENV_MAX_CAMPAIGNS 64
#define GENV_TIMEOUT_MS	   60000

struct gate_env {
	uv_loop_t loop;
	struct redis_scripts *reg;
	struct redis_conn *conn;
	struct gate *g;
	int ups, refusals, refusal_status;
	char refusal[512];
};

/* Opens the loop, the connection (named name) to url with the gate's scripts and the gate with
 * generation GENV_GEN; waits until the connection is up unless wait_up is false. */
void genv_open(struct gate_env *e, const char *url, const char *name, bool wait_up);
void genv_close(struct gate_env *e);

/* Runs one command (NULL-terminated argv); returns its integer answer (or 0), and copies a
 * string/status/error answer into out when out is not NULL. */
long long genv_cmd(struct gate_env *e, char *out, size_t size, ...);

/* HKEYS key: copies up to max field names (each ≤ 64 bytes) into out; returns how many. */
int genv_hkeys(struct gate_env *e, const char *key, char (*out)[65], int max);

/* FLUSHALL, then the system (limit, version 1) and each org of orgs (NULL-terminated) built
 * under GENV_GEN. */
/* gate_system_init() under the gate's generation; its status. */
int genv_system_init(struct gate_env *e, uint64_t version, uint32_t system_limit);
void genv_fresh(struct gate_env *e, uint32_t system_limit, const char *const *orgs);

struct admit_out {
	int status;
	struct gate_admit_result r; /* r.campaign / r.agent point into the copies below */
	char campaign[65], agent[65];
};

/* Batch admission: candidates is a space-separated list of campaign ids. */
struct admit_out genv_admit(struct gate_env *e, const char *org, const char *call,
			    const char *candidates);
/* Direct dial: agent may be NULL. */
struct admit_out genv_admit_direct(struct gate_env *e, const char *org, const char *call,
				   const char *agent, bool wait);

struct release_out {
	int status;
	struct gate_release_result r;
	char campaign[65], agent[65];
	char woken_call[65]; /* "" when nobody was woken */
};
struct release_out genv_release(struct gate_env *e, const char *org, const char *call);

/* Limits: campaigns is a space-separated list of "id:ceiling:agent" (ceiling or agent empty for
 * none). Returns the status; *res is filled when not NULL. */
int genv_limits(struct gate_env *e, const char *org, uint64_t version, uint32_t org_limit,
		uint32_t per_agent, bool enforced, const char *campaigns,
		struct gate_install_result *res);
/* Floors: "id:floor" pairs, "*" for the direct pseudo-campaign. */
int genv_floors(struct gate_env *e, const char *org, uint64_t version, uint64_t ttl_ms,
		const char *floors, struct gate_install_result *res);
/* A delta install of "id:floor" pairs against base_version. */
int genv_floors_delta(struct gate_env *e, const char *org, uint64_t base_version, uint64_t version,
		      uint64_t ttl_ms, const char *floors, struct gate_install_result *res);
int genv_system_limit(struct gate_env *e, uint64_t version, uint32_t limit,
		      struct gate_install_result *res);

/* Waiting direct dials. Returns the status; *res filled when not NULL. */
int genv_wait(struct gate_env *e, const char *org, const char *call, bool wait,
	      struct gate_wait_result *res);

/* A copy of gate_read()'s view. */
struct view_copy {
	struct gate_view v; /* the lists' pointers are not valid: use the copies below */
	uint32_t n_campaigns, n_agents;
	struct {
		char id[65];
		uint32_t running, floor, ceiling;
		char agent[65];
		bool known;
	} campaigns[GENV_MAX_CAMPAIGNS];
	struct {
		char id[65];
		uint32_t running;
		uint64_t shortfall;
	} agents[GENV_MAX_CAMPAIGNS];
};
int genv_read(struct gate_env *e, const char *org, struct view_copy *out);
/* running / floor of campaign id ("*" direct) in a view, 0 when absent. */
uint32_t view_running(const struct view_copy *v, const char *id);
uint32_t view_floor(const struct view_copy *v, const char *id);
/* running / shortfall of an agent, 0 when absent. */
uint32_t view_agent_running(const struct view_copy *v, const char *id);
uint64_t view_agent_shortfall(const struct view_copy *v, const char *id);

int genv_stats(struct gate_env *e, const char *org, struct gate_stats *out);
int genv_pin_clock(struct gate_env *e, const char *org, int64_t now_ms);
int genv_rebuild(struct gate_env *e, const char *org, const struct gate_slot_record *recs,
		 uint32_t n);

#endif
