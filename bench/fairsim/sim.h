/* fairsim's discrete-event engine: organisations dialling campaigns through the fair-share gate +
 * deficit-round-robin selector (mode SIM_FAIR), or oldest contact first with no fair share (mode
 * SIM_FIFO), on the same workload.
 *
 * Both modes admit every call through the same gate (fairshare_gate.h), so both keep the four
 * levels of C1 (system, organisation, agent, campaign ceiling); in FIFO mode no floors are ever
 * installed, so the gate is first come first served and the only order is the contacts' age.
 * A contact's created_at is per contact: contact k of campaign c was created at
 * created_ms(c) + k * contact_spacing_ms (backlogged campaigns: contacts of different campaigns
 * interleave), or arrives and is created at join_ms + k * arrival_ms (arriving campaigns).
 *
 * Deterministic: time is simulated (milliseconds); a call's duration is a function of (seed,
 * campaign, contact number), so both modes dial the same contacts with the same durations, whatever
 * order they reach them in. Durations are lognormal (long-tailed), capped at max_call_ms.
 */
#ifndef DSP_BENCH_FAIRSIM_SIM_H
#define DSP_BENCH_FAIRSIM_SIM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define SIM_MAX_ORGS	  2
#define SIM_MAX_CAMPAIGNS 8
#define SIM_MAX_AGENTS	  4
#define SIM_NEVER	  UINT64_MAX

enum sim_mode {
	SIM_FAIR =
		0, /* fairshare_gate + drr, refresher every refresh_ms and on active-set change */
	SIM_FIFO,  /* oldest contact first through the gate without floors (C1 levels, no share) */
};

struct sim_campaign_spec {
	const char *id;
	uint32_t ceiling;   /* max_concurrent_calls, FAIRSHARE_UNLIMITED when unset */
	uint32_t agent;	    /* agent index within the org */
	uint64_t join_ms;   /* batch submitted: dialable from then */
	int64_t created_ms; /* created_at of contact 0 (FIFO order); may precede the run */
	uint64_t
		arrival_ms; /* 0: the whole backlog is there at join; else one contact per period */
	uint64_t pause_ms;  /* SIM_NEVER: never paused */
	uint64_t resume_ms; /* SIM_NEVER: never resumed */
	uint32_t backlog;   /* contacts */
};

struct sim_org_spec {
	const char *id;
	uint32_t org_limit;
	uint32_t per_agent; /* FAIRSHARE_UNLIMITED when unset */
	uint32_t n_agents;
	uint32_t n;
	struct sim_campaign_spec c[SIM_MAX_CAMPAIGNS];
};

struct sim_spec {
	uint64_t seed;
	uint64_t duration_ms;
	double mean_call_s; /* lognormal mean */
	double sigma;	    /* lognormal shape */
	uint64_t max_call_ms;
	uint64_t refresh_ms;
	uint64_t window_ms;	     /* Jain window: ten mean call lengths */
	uint64_t sample_ms;	     /* CSV and chart resolution */
	uint64_t contact_spacing_ms; /* created_at step between one backlog's contacts */
	uint32_t system_limit;
	uint32_t n_orgs;
	struct sim_org_spec org[SIM_MAX_ORGS];
};

struct sim_org_result {
	double jain_min; /* over windows with >= 2 backlogged campaigns */
	double jain_mean;
	uint32_t windows;
	double utilisation;	/* busy line-seconds / (org_limit * duration) */
	uint64_t calls;		/* calls started */
	int late;		/* index of the late campaign, -1 if none */
	uint64_t late_t90_ms;	/* join -> running >= 90 % of its floor, SIM_NEVER */
	uint64_t late_t100_ms;	/* join -> running >= its floor, SIM_NEVER */
	uint64_t late_bound_ms; /* longest remaining call at join + one refresh period */
	double late_line_s;	/* the late campaign's line-seconds */
	uint64_t refused[8];	/* gate refusals by enum fairshare_level */
	uint64_t decisions;	/* gate decisions: admissions + refusals */
	double wait_s;		/* mean wait of a dialled contact, arrival to dial (arrivals) */
};

struct sim_result {
	struct sim_org_result org[SIM_MAX_ORGS];
	double utilisation; /* all orgs */
	uint32_t n_samples;
	/* Mean running calls per sample interval: series[(sample * n_orgs + org) * MAX_C + c]. */
	double *series;
};

/* Runs the scenario in one mode. csv (may be NULL) receives one row per sample and campaign,
 * windows (may be NULL) one row per Jain window and org; both are borrowed for the call. On
 * success res->series is allocated (free it with sim_result_free()). Returns 0 or -ENOMEM /
 * -EINVAL. */
int sim_run(const struct sim_spec *spec, enum sim_mode mode, FILE *csv, FILE *windows,
	    struct sim_result *res);

/* Frees what sim_run() allocated in res. */
void sim_result_free(struct sim_result *res);

/* Column headers of the csv and windows outputs. */
void sim_csv_header(FILE *csv, FILE *windows);

const char *sim_mode_name(enum sim_mode mode);

#endif
