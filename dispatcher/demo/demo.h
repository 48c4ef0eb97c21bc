/* `dispatcher demo` (issue 9, item 10): the whole product on one machine for about a minute —
 * see README.md in this folder for what it starts and its data flow.
 *
 * The options parser and the figures of the summary are pure (no I/O, no clock), so
 * tests/unit/test_demo.c checks them; demo_main() does the rest (it blocks: it is a command, not
 * a part of the worker's event loop).
 */
#ifndef DSP_DEMO_H
#define DSP_DEMO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define DEMO_WORKERS_MAX  16
#define DEMO_LINES_MAX	  1000
#define DEMO_MINUTES_MAX  60.0
#define DEMO_CAMPAIGNS	  4
#define DEMO_CEILING	  3	/* max_concurrent_calls of the capped campaign */
#define DEMO_CONTACTS	  5000	/* per campaign, at least */
#define DEMO_LATE_JOIN_MS 20000 /* the late campaign joins then (or at a third of the run) */
#define DEMO_CALL_MIN_MS  1000	/* the stub's call durations, uniform */
#define DEMO_CALL_MAX_MS  3000
#define DEMO_WINDOW_S_MAX 3600 /* --window-s: 1..this */
#define DEMO_WARMUP_S_MAX 600  /* --warmup-s: 0..this */

struct demo_options {
	double minutes;			   /* how long the table runs [1] */
	unsigned workers;		   /* `dispatcher run` processes [3] */
	unsigned lines;			   /* the organisation's limit [20] */
	uint64_t seed;			   /* the stub's seed: call durations and outcomes [1] */
	uint32_t contacts;		   /* per campaign, 0: demo_contacts_per_campaign's [0] */
	uint32_t hold_min_ms, hold_max_ms; /* the stub's call durations [1000-3000] */
	bool bench; /* bench/worker: no table, no late join; after --warmup-s from the first call,
		     * a window of --window-s (shorter when cmp-alpha or cmp-bravo has no due
		     * contact left, or at --minutes); a "bench:" line */
	uint32_t window_s; /* --bench: the measured window, s [30] */
	uint32_t warmup_s; /* --bench: from the first call placed to the window's start, s [3] */
};

/* Parses argv[0..argc) (the words after "demo") into *o, defaults first. Accepts "--name value"
 * and "--name=value". Returns 0, 1 when --help/-h was given (nothing else is checked), or
 * -EINVAL after writing a message naming the option and its bounds to err (an unknown option, a
 * missing or bad value). */
int demo_options_parse(int argc, char **argv, struct demo_options *o, FILE *err);

/* Writes the --help text. */
void demo_usage(FILE *out);

/* Contacts per campaign: DEMO_CONTACTS, or more when a long or wide run would drain them (a
 * campaign must stay backlogged to the end for the fairness figure to mean anything). */
uint32_t demo_contacts_per_campaign(const struct demo_options *o);

/* When the late campaign joins, ms after the start: DEMO_LATE_JOIN_MS, or a third of the run
 * when the run is shorter than a minute. */
uint64_t demo_late_join_ms(const struct demo_options *o);

/* Max-min fair shares of `lines` over n campaigns with ceilings (0: none), by water-filling:
 * the campaigns' fair entitlement when all are backlogged. Writes share[0..n). */
void demo_fair_shares(uint32_t lines, const uint32_t *ceiling, size_t n, double *share);

/* Jain's fairness index (sum x)^2 / (n sum x^2) of x[0..n): 1 when all equal, 1/n when one has
 * everything. Returns 0 when n is 0 or every x is 0. */
double demo_jain(const double *x, size_t n);

/* One reading of the late campaign: stub clock, its live calls, its floor as last read from the
 * gate (0: none installed yet). */
struct demo_sample {
	uint64_t t_ms;
	uint32_t live;
	uint32_t floor;
};

/* The time from join_ms to the first sample whose live reached its floor (a floor above 0).
 * Returns 0 and *ms, or -ENOENT when no sample did. */
int demo_time_to_floor(const struct demo_sample *s, size_t n, uint64_t join_ms, uint64_t *ms);

/* `dispatcher demo ARGS`: returns the process exit code — 0 done and the targets of the summary
 * met by the ground truth's invariants (no duplicate, maximum live within the lines), 1 an
 * invariant broken or something failed (said on stderr), 2 bad usage, 130 interrupted. */
int demo_main(int argc, char **argv);

#endif
