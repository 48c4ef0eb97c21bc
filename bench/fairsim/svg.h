/* A small line-chart writer for fairsim: stacked panels sharing one time axis, one polyline per
 * series, a legend per panel, vertical event markers. Plain SVG 1.1 text, no dependencies. */
#ifndef DSP_BENCH_FAIRSIM_SVG_H
#define DSP_BENCH_FAIRSIM_SVG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define SVG_MAX_SERIES	8
#define SVG_MAX_MARKERS 8
#define SVG_MAX_PANELS	4

struct svg_series {
	const char *name;
	const double *y; /* n_points values, y[i * stride] */
	size_t stride;
};

struct svg_marker {
	double x;	   /* in x units */
	const char *label; /* short text at the top of the line */
};

struct svg_panel {
	const char *title;
	double y_max;
	uint32_t n_series;
	struct svg_series s[SVG_MAX_SERIES];
	uint32_t n_markers;
	struct svg_marker m[SVG_MAX_MARKERS];
};

struct svg_chart {
	const char *title;
	const char *subtitle;
	const char *x_label;
	const char *y_label;
	double x_step;	 /* x distance between points */
	double x_tick;	 /* x distance between labelled ticks */
	size_t n_points; /* points per series */
	uint32_t n_panels;
	struct svg_panel p[SVG_MAX_PANELS];
};

/* Writes the chart to f (borrowed). Strings are borrowed for the call and must not need XML
 * escaping beyond what svg_write does (&, <, > are escaped). Returns 0 or -EIO. */
int svg_write(FILE *f, const struct svg_chart *c);

#endif
