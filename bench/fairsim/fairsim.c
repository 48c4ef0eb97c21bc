/* fairsim: the fair-share simulator (issue 3, SPEC P3).
 *
 * Drives the allocator (dispatcher/core/fairshare*.c) and the selector (drr.c) through a fixed
 * default scenario, then runs a FIFO baseline (oldest contact first through the same gate with no
 * floors: the system, organisation, agent and campaign levels hold, there is no fair share) on
 * the same workload and seed, and prints for both: Jain's index over windows of ten mean call
 * lengths of each backlogged campaign's line-seconds divided by its fluid-share entitlement, the
 * late campaign's time to 90 % and 100 % of its floor, and line utilisation. A second, light
 * scenario (contacts arrive over time; demand below the lines) shows utilisation where it can
 * differ. Writes a CSV time series, the per-window Jain indexes and an SVG chart of the default
 * scenario to --out (default bench/out/fairsim).
 *
 *   fairsim [--out DIR] [--seed N] [--hours H]
 */
#include "fairshare.h"
#include "fairshare_gate.h"
#include "sim.h"
#include "svg.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define S  1000ull
#define MC SIM_MAX_CAMPAIGNS

struct options {
	const char *out;
	uint64_t seed;
	double hours;
};

/* Contacts of the campaigns present at the start were created over the same past hour, one per
 * second per campaign, interleaved (created_ms is the campaign's offset); a late campaign's
 * contacts are created when its batch arrives, so they are newer than the others' backlog. */
static struct sim_campaign_spec campaign(const char *id, uint32_t ceiling, uint32_t agent,
					 uint64_t join_s, int64_t created_ms)
{
	return (struct sim_campaign_spec){ .id = id,
					   .ceiling = ceiling,
					   .agent = agent,
					   .join_ms = join_s * S,
					   .created_ms = created_ms,
					   .pause_ms = SIM_NEVER,
					   .resume_ms = SIM_NEVER,
					   .backlog = 100000 };
}

/* Two organisations. acme: org_limit 20, six campaigns, one with max_concurrent_calls 2, one
 * joining after an hour, one paused for half an hour. beta: org_limit 8 with per_agent 4, two
 * of its three campaigns on one agent. Every campaign has a backlog it cannot finish. */
static void default_spec(struct sim_spec *sp, const struct options *opt)
{
	struct sim_org_spec *a = &sp->org[0], *b = &sp->org[1];

	*sp = (struct sim_spec){ .seed = opt->seed,
				 .duration_ms = (uint64_t)(opt->hours * 3600 * S),
				 .mean_call_s = 90,
				 .sigma = 1.0,
				 .max_call_ms = 3600 * S,
				 .refresh_ms = S,
				 .window_ms = 900 * S,
				 .sample_ms = 10 * S,
				 .contact_spacing_ms = S,
				 .system_limit = 1000,
				 .n_orgs = 2 };
	*a = (struct sim_org_spec){ .id = "acme",
				    .org_limit = 20,
				    .per_agent = FAIRSHARE_UNLIMITED,
				    .n_agents = 3,
				    .n = 6 };
	a->c[0] = campaign("a1-oldest", FAIRSHARE_UNLIMITED, 0, 0, -3600000);
	a->c[1] = campaign("a2-max2", 2, 1, 0, -3599800);
	a->c[2] = campaign("a3-late", FAIRSHARE_UNLIMITED, 2, 3600, 3600000);
	a->c[3] = campaign("a4-paused", FAIRSHARE_UNLIMITED, 0, 0, -3599600);
	a->c[3].pause_ms = 5400 * S;
	a->c[3].resume_ms = 7200 * S;
	a->c[4] = campaign("a5", FAIRSHARE_UNLIMITED, 1, 0, -3599400);
	a->c[5] = campaign("a6", FAIRSHARE_UNLIMITED, 2, 0, -3599200);
	*b = (struct sim_org_spec){
		.id = "beta", .org_limit = 8, .per_agent = 4, .n_agents = 2, .n = 3
	};
	b->c[0] = campaign("b1-agent1", FAIRSHARE_UNLIMITED, 0, 0, -3600000);
	b->c[1] = campaign("b2-agent1", FAIRSHARE_UNLIMITED, 0, 0, -3599700);
	b->c[2] = campaign("b3-agent2", FAIRSHARE_UNLIMITED, 1, 0, -3599400);
}

/* The light scenario: the default one, but every campaign's contacts arrive one per period from
 * its join (offered load about 15.5 of acme's 20 lines and 6 of beta's 8, mean call 90 s), so
 * lines go idle and utilisation measures whether a scheduler leaves work undone. */
static void light_spec(struct sim_spec *sp, const struct options *opt)
{
	static const uint64_t acme_s[] = { 30, 60, 30, 30, 30, 45 }, beta_s[] = { 60, 60, 30 };

	default_spec(sp, opt);
	for (uint32_t c = 0; c < sp->org[0].n; c++)
		sp->org[0].c[c].arrival_ms = acme_s[c] * S;
	for (uint32_t c = 0; c < sp->org[1].n; c++)
		sp->org[1].c[c].arrival_ms = beta_s[c] * S;
}

static int mkdirs(const char *path)
{
	char buf[4096];
	size_t n = strlen(path);

	if (n == 0 || n >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, path, n + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, 0777) && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0777) && errno != EEXIST)
		return -errno;
	return 0;
}

static int parse(int argc, char **argv, struct options *opt)
{
	*opt = (struct options){ .out = "bench/out/fairsim", .seed = 42, .hours = 4 };
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--out") == 0 && i + 1 < argc)
			opt->out = argv[++i];
		else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
			opt->seed = strtoull(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--hours") == 0 && i + 1 < argc)
			opt->hours = strtod(argv[++i], NULL);
		else
			return -EINVAL;
	}
	return opt->hours > 0 && opt->hours <= 48 ? 0 : -EINVAL;
}

static FILE *open_out(const char *dir, const char *name, char *path, size_t size)
{
	snprintf(path, size, "%s/%s", dir, name);
	return fopen(path, "w");
}

/* 60-second means from the 10-second series: pts[(org * MC + c) * n + i]. */
static double *minute_means(const struct sim_spec *sp, const struct sim_result *r, size_t *n)
{
	size_t per = 6, np = r->n_samples / per;
	double *pts = calloc((size_t)sp->n_orgs * MC * (np ? np : 1), sizeof(double));

	*n = np;
	if (!pts)
		return NULL;
	for (uint32_t o = 0; o < sp->n_orgs; o++)
		for (uint32_t c = 0; c < MC; c++)
			for (size_t i = 0; i < np; i++) {
				double sum = 0;

				for (size_t k = 0; k < per; k++)
					sum += r->series[((i * per + k) * sp->n_orgs + o) * MC + c];
				pts[((size_t)o * MC + c) * np + i] = sum / per;
			}
	return pts;
}

/* One panel per (org, mode): a line per campaign, markers at joins, pauses and resumes, the y
 * axis scaled to the data (at most org_limit) so that close lines stay apart. */
static void panel(struct svg_panel *p, const struct sim_org_spec *o, const double *pts, uint32_t oi,
		  size_t n, const char *title, char (*labels)[48])
{
	double top = 0;

	*p = (struct svg_panel){ .title = title, .n_series = o->n };
	for (uint32_t c = 0; c < o->n; c++) {
		const struct sim_campaign_spec *cs = &o->c[c];
		const uint64_t at[3] = { cs->join_ms, cs->pause_ms, cs->resume_ms };
		const char *what[3] = { "joins", "paused", "resumed" };

		p->s[c] = (struct svg_series){ cs->id, pts + ((size_t)oi * MC + c) * n, 1 };
		for (size_t i = 0; i < n; i++)
			top = p->s[c].y[i] > top ? p->s[c].y[i] : top;
		for (int k = 0; k < 3 && p->n_markers < SVG_MAX_MARKERS; k++) {
			if (at[k] == 0 || at[k] == SIM_NEVER)
				continue;
			snprintf(labels[p->n_markers], 48, "%s %s", cs->id, what[k]);
			p->m[p->n_markers] =
				(struct svg_marker){ at[k] / 3.6e6, labels[p->n_markers] };
			p->n_markers++;
		}
	}
	p->y_max = ceil(top * 1.25) < o->org_limit ? ceil(top * 1.25) : o->org_limit;
	p->y_max = p->y_max < 2 ? 2 : p->y_max;
}

static double jain_all(const struct sim_spec *sp, const struct sim_result *r)
{
	double m = 1;

	for (uint32_t o = 0; o < sp->n_orgs; o++)
		m = r->org[o].windows && r->org[o].jain_min < m ? r->org[o].jain_min : m;
	return m;
}

static int chart(const struct options *opt, const struct sim_spec *sp, const struct sim_result *res,
		 char *path, size_t size)
{
	size_t n;
	double *fair = minute_means(sp, &res[SIM_FAIR], &n),
	       *fifo = minute_means(sp, &res[SIM_FIFO], &n);
	struct svg_chart c = { .title = "fairsim: running calls per campaign (60-s means)",
			       .x_label = "simulated time (hours)",
			       .y_label = "running calls",
			       .x_step = 1.0 / 60,
			       .x_tick = 0.5,
			       .n_points = n,
			       .n_panels = 4 };
	char sub[256], labels[4][SVG_MAX_MARKERS][48];
	FILE *f = open_out(opt->out, "fairsim.svg", path, size);
	int rc = -ENOMEM;

	snprintf(sub, sizeof(sub),
		 "seed %llu, calls lognormal mean 90 s; Jain min over 900-s windows: fair share "
		 "%.4f, FIFO %.4f",
		 (unsigned long long)opt->seed, jain_all(sp, &res[SIM_FAIR]),
		 jain_all(sp, &res[SIM_FIFO]));
	c.subtitle = sub;
	if (f && fair && fifo) {
		panel(&c.p[0], &sp->org[0], fair, 0, n, "acme (org_limit 20): fair share + DRR",
		      labels[0]);
		panel(&c.p[1], &sp->org[0], fifo, 0, n,
		      "acme (org_limit 20): FIFO baseline, oldest contact first, C1 levels, no "
		      "fair share",
		      labels[1]);
		panel(&c.p[2], &sp->org[1], fair, 1, n,
		      "beta (org_limit 8, per_agent 4; b1, b2 share agent 1): fair share + DRR",
		      labels[2]);
		panel(&c.p[3], &sp->org[1], fifo, 1, n, "beta: FIFO baseline", labels[3]);
		rc = svg_write(f, &c);
	}
	if (f && fclose(f) && !rc)
		rc = -EIO;
	free(fair);
	free(fifo);
	return f ? rc : -errno;
}

static void late_line(const char *what, uint64_t ms_fair, uint64_t ms_fifo, double fifo_line_s)
{
	char a[64], b[96];

	if (ms_fair == SIM_NEVER)
		snprintf(a, sizeof(a), "never");
	else
		snprintf(a, sizeof(a), "%.1f s", ms_fair / 1000.0);
	if (ms_fifo == SIM_NEVER)
		snprintf(b, sizeof(b), "never (starved: %.0f line-s)", fifo_line_s);
	else
		snprintf(b, sizeof(b), "%.1f s", ms_fifo / 1000.0);
	printf("%-44s %-16s %s\n", what, a, b);
}

static void report_jain(const struct sim_spec *sp, const struct sim_result *r)
{
	char what[96], a[32], b[32];

	for (uint32_t o = 0; o < sp->n_orgs; o++) {
		const struct sim_org_result *x = &r[SIM_FAIR].org[o], *y = &r[SIM_FIFO].org[o];

		snprintf(what, sizeof(what), "%s: Jain min / mean over %u windows", sp->org[o].id,
			 x->windows);
		snprintf(a, sizeof(a), "%.4f / %.4f", x->jain_min, x->jain_mean);
		snprintf(b, sizeof(b), "%.4f / %.4f", y->jain_min, y->jain_mean);
		printf("%-44s %-16s %s\n", what, a, b);
	}
	printf("%-44s %-16.4f %.4f\n", "Jain min, all orgs and windows", jain_all(sp, &r[SIM_FAIR]),
	       jain_all(sp, &r[SIM_FIFO]));
}

static void report_late(const struct sim_spec *sp, const struct sim_result *r)
{
	const struct sim_org_result *fa = &r[SIM_FAIR].org[0], *fi = &r[SIM_FIFO].org[0];
	char what[96];

	if (fa->late < 0)
		return;
	snprintf(what, sizeof(what), "%s: time to 90 %% of its floor", sp->org[0].c[fa->late].id);
	late_line(what, fa->late_t90_ms, fi->late_t90_ms, fi->late_line_s);
	snprintf(what, sizeof(what), "%s: time to 100 %% of its floor", sp->org[0].c[fa->late].id);
	late_line(what, fa->late_t100_ms, fi->late_t100_ms, fi->late_line_s);
	printf("%-44s %.1f s\n", "  P3 bound: longest running call at join + 1 s",
	       fa->late_bound_ms / 1000.0);
}

static void report_lines(const struct sim_spec *sp, const struct sim_result *r)
{
	const struct sim_org_result *fa = &r[SIM_FAIR].org[0], *fi = &r[SIM_FIFO].org[0];
	char what[96], a[32];

	for (uint32_t o = 0; o < sp->n_orgs; o++) {
		snprintf(what, sizeof(what), "%s: line utilisation", sp->org[o].id);
		snprintf(a, sizeof(a), "%.3f %%", 100 * r[SIM_FAIR].org[o].utilisation);
		printf("%-44s %-16s %.3f %%\n", what, a, 100 * r[SIM_FIFO].org[o].utilisation);
	}
	printf("%-44s %-16.3f %.3f\n", "line utilisation, all orgs (%)",
	       100 * r[SIM_FAIR].utilisation, 100 * r[SIM_FIFO].utilisation);
	printf("%-44s %-16llu %llu\n", "calls started (acme)", (unsigned long long)fa->calls,
	       (unsigned long long)fi->calls);
	printf("%-44s %-16.2f %.2f\n", "gate decisions per call started (acme)",
	       (double)fa->decisions / (double)(fa->calls ? fa->calls : 1),
	       (double)fi->decisions / (double)(fi->calls ? fi->calls : 1));
	printf("gate refusals, fair-share run, acme: organisation %llu, agent %llu, campaign %llu, "
	       "fair_share %llu\n",
	       (unsigned long long)fa->refused[FAIRSHARE_LEVEL_ORG],
	       (unsigned long long)fa->refused[FAIRSHARE_LEVEL_AGENT],
	       (unsigned long long)fa->refused[FAIRSHARE_LEVEL_CAMPAIGN],
	       (unsigned long long)fa->refused[FAIRSHARE_LEVEL_FAIR_SHARE]);
}

/* The light scenario: utilisation, calls and the mean wait of a contact, per org. */
static void report_light(const struct sim_spec *sp, const struct sim_result *r)
{
	char what[96], a[32];

	printf("light scenario (contacts arrive over time, demand below the lines):\n");
	for (uint32_t o = 0; o < sp->n_orgs; o++) {
		const struct sim_org_result *x = &r[SIM_FAIR].org[o], *y = &r[SIM_FIFO].org[o];

		snprintf(what, sizeof(what), "%s: line utilisation", sp->org[o].id);
		snprintf(a, sizeof(a), "%.3f %%", 100 * x->utilisation);
		printf("%-44s %-16s %.3f %%\n", what, a, 100 * y->utilisation);
		snprintf(what, sizeof(what), "%s: calls started", sp->org[o].id);
		printf("%-44s %-16llu %llu\n", what, (unsigned long long)x->calls,
		       (unsigned long long)y->calls);
		snprintf(what, sizeof(what), "%s: mean wait, arrival to dial", sp->org[o].id);
		snprintf(a, sizeof(a), "%.1f s", x->wait_s);
		printf("%-44s %-16s %.1f s\n", what, a, y->wait_s);
		snprintf(what, sizeof(what), "%s: Jain min over %u windows", sp->org[o].id,
			 x->windows);
		snprintf(a, sizeof(a), "%.4f", x->jain_min);
		printf("%-44s %-16s %.4f\n", what, a, y->jain_min);
	}
}

static void report(const struct options *opt, const struct sim_spec *sp, const struct sim_result *r)
{
	printf("fairsim: seed %llu, %.1f simulated hours, call durations lognormal (mean %.0f s, "
	       "sigma %.1f, cap %llu s), refresh %llu ms, Jain windows %llu s\n",
	       (unsigned long long)opt->seed, opt->hours, sp->mean_call_s, sp->sigma,
	       (unsigned long long)(sp->max_call_ms / S), (unsigned long long)sp->refresh_ms,
	       (unsigned long long)(sp->window_ms / S));
	printf("%-44s %-16s %s\n", "", "fair share", "FIFO baseline");
	report_jain(sp, r);
	report_late(sp, r);
	report_lines(sp, r);
}

int main(int argc, char **argv)
{
	struct options opt;
	struct sim_spec sp;
	struct sim_result res[2];
	char csv_path[4200], win_path[4200], svg_path[4200];
	FILE *csv, *win;
	int rc;

	if (parse(argc, argv, &opt)) {
		fprintf(stderr, "usage: fairsim [--out DIR] [--seed N] [--hours H (0-48]]\n");
		return 2;
	}
	default_spec(&sp, &opt);
	rc = mkdirs(opt.out);
	csv = rc ? NULL : open_out(opt.out, "fairsim.csv", csv_path, sizeof(csv_path));
	win = rc ? NULL : open_out(opt.out, "fairsim_windows.csv", win_path, sizeof(win_path));
	if (!csv || !win) {
		fprintf(stderr, "fairsim: cannot write to %s: %s\n", opt.out,
			strerror(rc ? -rc : errno));
		return 1;
	}
	sim_csv_header(csv, win);
	rc = sim_run(&sp, SIM_FAIR, csv, win, &res[SIM_FAIR]);
	if (!rc)
		rc = sim_run(&sp, SIM_FIFO, csv, win, &res[SIM_FIFO]);
	if (fclose(csv) | fclose(win))
		rc = rc ? rc : -EIO;
	if (!rc)
		rc = chart(&opt, &sp, res, svg_path, sizeof(svg_path));
	if (rc) {
		fprintf(stderr, "fairsim: %s\n", strerror(-rc));
		return 1;
	}
	report(&opt, &sp, res);
	printf("wrote %s, %s, %s\n", csv_path, win_path, svg_path);
	sim_result_free(&res[SIM_FAIR]);
	sim_result_free(&res[SIM_FIFO]);
	light_spec(&sp, &opt);
	rc = sim_run(&sp, SIM_FAIR, NULL, NULL, &res[SIM_FAIR]);
	if (!rc)
		rc = sim_run(&sp, SIM_FIFO, NULL, NULL, &res[SIM_FIFO]);
	if (rc) {
		fprintf(stderr, "fairsim: light scenario: %s\n", strerror(-rc));
		return 1;
	}
	report_light(&sp, res);
	sim_result_free(&res[SIM_FAIR]);
	sim_result_free(&res[SIM_FIFO]);
	return 0;
}
