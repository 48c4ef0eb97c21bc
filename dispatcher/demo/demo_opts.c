/* `dispatcher demo` options and the figures of its summary (demo.h): pure. */
#include "demo.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void demo_usage(FILE *out)
{
	fprintf(out,
		"usage: dispatcher demo [--minutes M] [--workers N] [--lines L] [--seed S]\n"
		"                       [--contacts N] [--hold-ms A-B]\n"
		"                       [--bench [--window-s S] [--warmup-s S]]\n"
		"\n"
		"Runs the whole dispatcher on this machine and shows what it does: a private\n"
		"PostgreSQL and Redis, the provider stub (calls of 1-3 s, signed events), N\n"
		"`dispatcher run` workers sharing one listening port, and one organisation with L\n"
		"lines and one agent: two campaigns of 5,000 contacts, a third that joins after\n"
		"about 20 s, and a fourth with a ceiling of %d concurrent calls.\n"
		"\n"
		"While it runs, a table per campaign, refreshed once a second (one plain line per\n"
		"refresh when stdout is not a terminal), read from the gate's capacity view:\n"
		"running calls, guaranteed floor, effective limit, dialled (the stub's count),\n"
		"pending contacts, and the limit that binds, in words.\n"
		"\n"
		"Then a summary from the stub's ground truth: calls dialled, duplicates, maximum\n"
		"live calls of the organisation and of each campaign, line utilisation while\n"
		"backlogged, Jain's fairness index over the campaigns while all were backlogged,\n"
		"and how long the late campaign took to reach its floor. Exit 0; exit 1 when a\n"
		"duplicate was dialled or the maximum live exceeded the lines (the summary says\n"
		"so). Ctrl-C stops it at any moment and leaves nothing running.\n"
		"\n"
		"Options:\n"
		"  --minutes M   how long the table runs, 0 < M <= %.0f, fractions allowed [1]\n"
		"  --workers N   worker processes, 1..%d [3]\n"
		"  --lines L     the organisation's concurrent-call limit, %d..%d [20]\n"
		"  --seed S      the stub's seed (call durations and outcomes) [1]\n"
		"  --contacts N  contacts per campaign, 1..10000000 [5,000 or what the run needs]\n"
		"  --hold-ms A-B the stub's call durations in ms, 1 <= A <= B <= 600000 "
		"[1000-3000]\n"
		"  --bench       for bench/worker/run.sh: no table, no late campaign; measures a\n"
		"                window while backlogged (ground truth, CPU, Redis and PostgreSQL\n"
		"                counters, the top statements) and prints one 'bench:' line\n"
		"  --window-s S  --bench: the window, 1..%d s; it ends sooner when cmp-alpha or\n"
		"                cmp-bravo has no due contact left [30]\n"
		"  --warmup-s S  --bench: from the first call placed to the window, 0..%d s [3]\n"
		"  --help, -h    this text\n",
		DEMO_CEILING, DEMO_MINUTES_MAX, DEMO_WORKERS_MAX, DEMO_CEILING + 1, DEMO_LINES_MAX,
		DEMO_WINDOW_S_MAX, DEMO_WARMUP_S_MAX);
}

static int bad(FILE *err, const char *name, const char *v, const char *bounds)
{
	fprintf(err, "dispatcher demo: %s: bad value '%s' (%s)\n", name, v, bounds);
	return -EINVAL;
}

static int parse_uint(const char *v, unsigned long long lo, unsigned long long hi,
		      unsigned long long *out)
{
	char *end;

	if (!*v || *v == '-' || *v == '+' || *v == ' ')
		return -EINVAL;
	errno = 0;
	unsigned long long n = strtoull(v, &end, 10);
	if (errno || *end || n < lo || n > hi)
		return -EINVAL;
	*out = n;
	return 0;
}

/* Applies one option; v is its value (never NULL). */
static int apply(struct demo_options *o, const char *name, const char *v, FILE *err)
{
	unsigned long long n;
	char bounds[64];

	if (strcmp(name, "--minutes") == 0) {
		char *end;
		double m;

		errno = 0;
		m = *v ? strtod(v, &end) : NAN;
		if (!*v || errno || *end || !isfinite(m) || m <= 0 || m > DEMO_MINUTES_MAX)
			return bad(err, name, v, "a number of minutes above 0, at most 60");
		o->minutes = m;
		return 0;
	}
	if (strcmp(name, "--workers") == 0) {
		snprintf(bounds, sizeof(bounds), "1..%d", DEMO_WORKERS_MAX);
		if (parse_uint(v, 1, DEMO_WORKERS_MAX, &n))
			return bad(err, name, v, bounds);
		o->workers = (unsigned)n;
		return 0;
	}
	if (strcmp(name, "--lines") == 0) {
		snprintf(bounds, sizeof(bounds), "%d..%d", DEMO_CEILING + 1, DEMO_LINES_MAX);
		if (parse_uint(v, DEMO_CEILING + 1, DEMO_LINES_MAX, &n))
			return bad(err, name, v, bounds);
		o->lines = (unsigned)n;
		return 0;
	}
	if (strcmp(name, "--seed") == 0) {
		if (parse_uint(v, 0, UINT64_MAX, &n))
			return bad(err, name, v, "an unsigned 64-bit integer");
		o->seed = n;
		return 0;
	}
	if (strcmp(name, "--contacts") == 0) {
		if (parse_uint(v, 1, 10000000, &n))
			return bad(err, name, v, "1..10000000");
		o->contacts = (uint32_t)n;
		return 0;
	}
	if (strcmp(name, "--hold-ms") == 0) {
		char a[24];
		const char *dash = strchr(v, '-');
		unsigned long long lo, hi;

		if (!dash || (size_t)(dash - v) >= sizeof(a))
			return bad(err, name, v, "A-B, 1 <= A <= B <= 600000");
		snprintf(a, sizeof(a), "%.*s", (int)(dash - v), v);
		if (parse_uint(a, 1, 600000, &lo) || parse_uint(dash + 1, 1, 600000, &hi) ||
		    lo > hi)
			return bad(err, name, v, "A-B, 1 <= A <= B <= 600000");
		o->hold_min_ms = (uint32_t)lo;
		o->hold_max_ms = (uint32_t)hi;
		return 0;
	}
	if (strcmp(name, "--bench") == 0) {
		fprintf(err, "dispatcher demo: --bench takes no value\n");
		return -EINVAL;
	}
	if (strcmp(name, "--window-s") == 0) {
		snprintf(bounds, sizeof(bounds), "seconds, 1..%d", DEMO_WINDOW_S_MAX);
		if (parse_uint(v, 1, DEMO_WINDOW_S_MAX, &n))
			return bad(err, name, v, bounds);
		o->window_s = (uint32_t)n;
		return 0;
	}
	if (strcmp(name, "--warmup-s") == 0) {
		snprintf(bounds, sizeof(bounds), "seconds, 0..%d", DEMO_WARMUP_S_MAX);
		if (parse_uint(v, 0, DEMO_WARMUP_S_MAX, &n))
			return bad(err, name, v, bounds);
		o->warmup_s = (uint32_t)n;
		return 0;
	}
	fprintf(err, "dispatcher demo: unknown option '%s' (try --help)\n", name);
	return -EINVAL;
}

static bool known(const char *name)
{
	return !strcmp(name, "--minutes") || !strcmp(name, "--workers") ||
	       !strcmp(name, "--lines") || !strcmp(name, "--seed") || !strcmp(name, "--contacts") ||
	       !strcmp(name, "--hold-ms") || !strcmp(name, "--window-s") ||
	       !strcmp(name, "--warmup-s");
}

int demo_options_parse(int argc, char **argv, struct demo_options *o, FILE *err)
{
	*o = (struct demo_options){ .minutes = 1,
				    .workers = 3,
				    .lines = 20,
				    .seed = 1,
				    .hold_min_ms = DEMO_CALL_MIN_MS,
				    .hold_max_ms = DEMO_CALL_MAX_MS,
				    .window_s = 30,
				    .warmup_s = 3 };
	bool windowed = false;
	for (int i = 0; i < argc; i++)
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			return 1;
	for (int i = 0; i < argc; i++) {
		char name[32];

		if (strcmp(argv[i], "--bench") == 0) { /* the one option without a value */
			o->bench = true;
			continue;
		}
		const char *a = argv[i], *eq = strchr(a, '='), *v;

		if (strncmp(a, "--", 2) != 0 || strlen(a) > sizeof(name) - 1) {
			fprintf(err, "dispatcher demo: unknown option '%s' (try --help)\n", a);
			return -EINVAL;
		}
		if (eq) {
			snprintf(name, sizeof(name), "%.*s", (int)(eq - a), a);
			v = eq + 1;
		} else {
			snprintf(name, sizeof(name), "%s", a);
			if (i + 1 >= argc) {
				if (!known(name)) {
					fprintf(err,
						"dispatcher demo: unknown option '%s' (try "
						"--help)\n",
						name);
					return -EINVAL;
				}
				fprintf(err, "dispatcher demo: %s needs a value\n", name);
				return -EINVAL;
			}
			v = argv[++i];
		}
		if (apply(o, name, v, err))
			return -EINVAL;
		windowed |= !strcmp(name, "--window-s") || !strcmp(name, "--warmup-s");
	}
	if (windowed && !o->bench) {
		fprintf(err, "dispatcher demo: --window-s and --warmup-s need --bench\n");
		return -EINVAL;
	}
	return 0;
}

uint32_t demo_contacts_per_campaign(const struct demo_options *o)
{
	/* at most lines / (mean call 2 s) calls a second, all to one campaign in the worst case,
	 * with a quarter more for the outcomes that come back */
	double need = o->lines / 2.0 * o->minutes * 60 * 1.25;

	if (o->contacts)
		return o->contacts;
	return need > DEMO_CONTACTS ? (uint32_t)ceil(need) : DEMO_CONTACTS;
}

uint64_t demo_late_join_ms(const struct demo_options *o)
{
	uint64_t third = (uint64_t)(o->minutes * 60000 / 3);

	return third < DEMO_LATE_JOIN_MS ? third : DEMO_LATE_JOIN_MS;
}

void demo_fair_shares(uint32_t lines, const uint32_t *ceiling, size_t n, double *share)
{
	double left = lines;
	size_t open = n;
	bool done[64] = { false };

	if (n > 64)
		n = 64;
	for (size_t i = 0; i < n; i++)
		share[i] = 0;
	while (open > 0) {
		double each = left / (double)open;
		bool capped = false;

		for (size_t i = 0; i < n; i++) {
			if (!done[i] && ceiling[i] && ceiling[i] <= each) {
				share[i] = ceiling[i];
				left -= ceiling[i];
				done[i] = true;
				open--;
				capped = true;
			}
		}
		if (capped)
			continue;
		for (size_t i = 0; i < n; i++)
			if (!done[i])
				share[i] = each;
		break;
	}
}

double demo_jain(const double *x, size_t n)
{
	double s = 0, s2 = 0;

	for (size_t i = 0; i < n; i++) {
		s += x[i];
		s2 += x[i] * x[i];
	}
	return n == 0 || s2 == 0 ? 0 : s * s / ((double)n * s2);
}

int demo_time_to_floor(const struct demo_sample *s, size_t n, uint64_t join_ms, uint64_t *ms)
{
	for (size_t i = 0; i < n; i++) {
		if (s[i].t_ms >= join_ms && s[i].floor > 0 && s[i].live >= s[i].floor) {
			*ms = s[i].t_ms - join_ms;
			return 0;
		}
	}
	return -ENOENT;
}
