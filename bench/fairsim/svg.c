/* SVG line charts for fairsim; see svg.h. */
#include "svg.h"

#include <errno.h>
#include <math.h>

#define WIDTH	  1100.0
#define LEFT	  70.0
#define RIGHT	  190.0 /* legend column */
#define PANEL_H	  210.0
#define PANEL_GAP 70.0
#define TOP	  80.0

static const char *const palette[] = { "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e",
				       "#9467bd", "#8c564b", "#e377c2", "#17becf" };

static void text(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '&')
			fputs("&amp;", f);
		else if (*s == '<')
			fputs("&lt;", f);
		else if (*s == '>')
			fputs("&gt;", f);
		else
			fputc(*s, f);
	}
}

static double nice_step(double y_max)
{
	const double steps[] = { 1, 2, 5, 10, 20, 50, 100, 200, 500, 1000 };

	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
		if (y_max / steps[i] <= 6)
			return steps[i];
	return 1000;
}

static void axes(FILE *f, const struct svg_chart *c, const struct svg_panel *p, double top)
{
	double plot_w = WIDTH - LEFT - RIGHT, x_max = c->x_step * (double)(c->n_points);
	double step = nice_step(p->y_max);

	fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"pt\">", LEFT, top - 12);
	text(f, p->title);
	fputs("</text>\n", f);
	for (double y = 0; y <= p->y_max + 1e-9; y += step) {
		double py = top + PANEL_H - y / p->y_max * PANEL_H;

		fprintf(f,
			"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"grid\"/>"
			"<text x=\"%.1f\" y=\"%.1f\" class=\"yl\">%g</text>\n",
			LEFT, py, LEFT + plot_w, py, LEFT - 6, py + 4, y);
	}
	for (double x = 0; x <= x_max + 1e-9; x += c->x_tick) {
		double px = LEFT + x / x_max * plot_w;

		fprintf(f,
			"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"tick\"/>"
			"<text x=\"%.1f\" y=\"%.1f\" class=\"xl\">%g</text>\n",
			px, top + PANEL_H, px, top + PANEL_H + 5, px, top + PANEL_H + 18, x);
	}
	fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" class=\"frame\"/>\n",
		LEFT, top, plot_w, PANEL_H);
	fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"al\" transform=\"rotate(-90 %.1f %.1f)\">",
		LEFT - 42, top + PANEL_H / 2, LEFT - 42, top + PANEL_H / 2);
	text(f, c->y_label);
	fputs("</text>\n", f);
}

static void markers(FILE *f, const struct svg_chart *c, const struct svg_panel *p, double top)
{
	double plot_w = WIDTH - LEFT - RIGHT, x_max = c->x_step * (double)(c->n_points);

	for (uint32_t i = 0; i < p->n_markers; i++) {
		double px = LEFT + p->m[i].x / x_max * plot_w;

		fprintf(f,
			"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" class=\"mark\"/>"
			"<text x=\"%.1f\" y=\"%.1f\" class=\"ml\">",
			px, top, px, top + PANEL_H, px + 3, top + 11 + 11.0 * (i % 2));
		text(f, p->m[i].label);
		fputs("</text>\n", f);
	}
}

static void series(FILE *f, const struct svg_chart *c, const struct svg_panel *p, double top)
{
	double plot_w = WIDTH - LEFT - RIGHT;

	for (uint32_t k = 0; k < p->n_series; k++) {
		const struct svg_series *s = &p->s[k];
		const char *col = palette[k % (sizeof(palette) / sizeof(palette[0]))];
		double ly = top + 14 + 18.0 * k;

		fprintf(f, "<polyline class=\"line\" stroke=\"%s\" points=\"", col);
		for (size_t i = 0; i < c->n_points; i++) {
			double y = s->y[i * s->stride];

			y = y > p->y_max ? p->y_max : y;
			fprintf(f, "%.1f,%.1f ", LEFT + (i + 0.5) / (double)c->n_points * plot_w,
				top + PANEL_H - y / p->y_max * PANEL_H);
		}
		fputs("\"/>\n", f);
		fprintf(f,
			"<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
			"stroke-width=\"3\"/><text x=\"%.1f\" y=\"%.1f\" class=\"lg\">",
			WIDTH - RIGHT + 14, ly, WIDTH - RIGHT + 34, ly, col, WIDTH - RIGHT + 40,
			ly + 4);
		text(f, s->name);
		fputs("</text>\n", f);
	}
}

int svg_write(FILE *f, const struct svg_chart *c)
{
	double height = TOP + c->n_panels * (PANEL_H + PANEL_GAP) + 10;

	fprintf(f,
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
		"viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n"
		"<style>.t{font-size:18px;font-weight:bold}.st{font-size:12px;fill:#444}"
		".pt{font-size:14px;font-weight:bold}.yl{font-size:11px;text-anchor:end}"
		".xl{font-size:11px;text-anchor:middle}.al{font-size:12px;text-anchor:middle}"
		".lg{font-size:12px}.ml{font-size:10px;fill:#555}"
		".grid{stroke:#ddd;stroke-width:1}.tick{stroke:#333}"
		".frame{fill:none;stroke:#333}.mark{stroke:#888;stroke-dasharray:4 3}"
		".line{fill:none;stroke-width:1.6;stroke-linejoin:round}</style>\n"
		"<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
		WIDTH, height, WIDTH, height);
	fprintf(f, "<text x=\"%.1f\" y=\"28\" class=\"t\">", LEFT);
	text(f, c->title);
	fprintf(f, "</text>\n<text x=\"%.1f\" y=\"48\" class=\"st\">", LEFT);
	text(f, c->subtitle);
	fputs("</text>\n", f);
	for (uint32_t i = 0; i < c->n_panels; i++) {
		double top = TOP + i * (PANEL_H + PANEL_GAP) + 10;

		axes(f, c, &c->p[i], top);
		markers(f, c, &c->p[i], top);
		series(f, c, &c->p[i], top);
		fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" class=\"al\">",
			LEFT + (WIDTH - LEFT - RIGHT) / 2, top + PANEL_H + 36);
		text(f, c->x_label);
		fputs("</text>\n", f);
	}
	fputs("</svg>\n", f);
	return ferror(f) ? -EIO : 0;
}
