#include "config.h"

#include "error.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *env_getter(const char *name, void *ctx)
{
	(void)ctx;
	return getenv(name);
}

static int parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = { "1", "true", "yes", "on" };
	static const char *const no[] = { "0", "false", "no", "off" };

	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = true;
			return 0;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = false;
			return 0;
		}
	}
	return -EINVAL;
}

/* Returns the index of s among the '|'-separated choices, or -1. */
static int find_choice(const char *choices, const char *s)
{
	size_t len = strlen(s);
	int index = 0;

	for (const char *p = choices; *p; index++) {
		const char *end = strchr(p, '|');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		if (n == len && strncasecmp(p, s, n) == 0)
			return index;
		if (!end)
			break;
		p = end + 1;
	}
	return -1;
}

void config_escape(const char *in, char *out, size_t outlen)
{
	static const char hex[] = "0123456789abcdef";
	size_t o = 0;

	if (!outlen)
		return;
	for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
		char buf[5];
		size_t n = 0;

		if (*p < 0x20 || *p == 0x7f || *p == '"' || *p == '\\') {
			buf[n++] = '\\';
			if (*p == '\n' || *p == '\t' || *p == '\r')
				buf[n++] = *p == '\n' ? 'n' : *p == '\t' ? 't' : 'r';
			else if (*p == '"' || *p == '\\')
				buf[n++] = (char)*p;
			else {
				buf[n++] = 'x';
				buf[n++] = hex[*p >> 4];
				buf[n++] = hex[*p & 15];
			}
		} else {
			buf[n++] = (char)*p;
		}
		if (o + n + 4 > outlen) { /* room for "..." and the NUL */
			snprintf(out + o, outlen - o, "%s", outlen - o >= 4 ? "..." : "");
			return;
		}
		memcpy(out + o, buf, n);
		o += n;
	}
	out[o] = '\0';
}

static int load_one(const struct config_setting *s, const char *text, char *base, char *err,
		    size_t errlen)
{
	void *slot = base + s->offset;
	char shown[CONFIG_SHOWN_MAX];
	char *end;

	config_escape(text ? text : "", shown, sizeof(shown));

	switch (s->type) {
	case CONFIG_STRING:
		*(char **)slot = NULL;
		if (!text)
			return 0;
		*(char **)slot = strdup(text);
		return *(char **)slot ? 0 : -ENOMEM;
	case CONFIG_INT: {
		errno = 0;
		long long v = strtoll(text, &end, 10);
		if (errno || end == text || *end != '\0') {
			snprintf(err, errlen,
				 "%s=\"%s\" is not a whole number (allowed: %lld to %lld)", s->name,
				 shown, s->min, s->max);
			return DSP_ECONFIG;
		}
		if (v < s->min || v > s->max) {
			snprintf(err, errlen,
				 "%s=%lld is out of bounds: it must be between %lld and %lld%s%s",
				 s->name, v, s->min, s->max, s->unit ? " " : "",
				 s->unit ? s->unit : "");
			return DSP_ECONFIG;
		}
		*(long long *)slot = v;
		return 0;
	}
	case CONFIG_BOOL:
		if (parse_bool(text, (bool *)slot) < 0) {
			snprintf(err, errlen, "%s=\"%s\" is not a boolean (use true or false)",
				 s->name, shown);
			return DSP_ECONFIG;
		}
		return 0;
	case CONFIG_ENUM: {
		int i = find_choice(s->choices, text);
		if (i < 0) {
			snprintf(err, errlen, "%s=\"%s\" is not one of %s", s->name, shown,
				 s->choices);
			return DSP_ECONFIG;
		}
		*(int *)slot = i;
		return 0;
	}
	}
	snprintf(err, errlen, "%s: unknown setting type", s->name);
	return DSP_ECONFIG;
}

int config_load(const struct config_setting *tab, size_t n, void *target, config_getter get,
		void *ctx, char *err, size_t errlen)
{
	char *base = target;

	if (!get)
		get = env_getter;
	for (size_t i = 0; i < n; i++) {
		if (tab[i].type == CONFIG_STRING)
			*(char **)(base + tab[i].offset) = NULL;
	}
	for (size_t i = 0; i < n; i++) {
		const char *text = get(tab[i].name, ctx);
		if (text && *text == '\0') { /* a mistake more often than a choice: refuse it */
			snprintf(err, errlen,
				 "%s is set but empty; unset it to use the default (%s)",
				 tab[i].name, tab[i].def ? tab[i].def : "unset");
			config_free(tab, n, target);
			return DSP_ECONFIG;
		}
		if (!text)
			text = tab[i].def;
		if (!text && tab[i].type != CONFIG_STRING) {
			snprintf(err, errlen, "%s: no value and no default", tab[i].name);
			config_free(tab, n, target);
			return DSP_ECONFIG;
		}
		int rc = load_one(&tab[i], text, base, err, errlen);
		if (rc < 0) {
			if (rc == -ENOMEM)
				snprintf(err, errlen, "%s: out of memory", tab[i].name);
			config_free(tab, n, target);
			return rc;
		}
	}
	return 0;
}

void config_free(const struct config_setting *tab, size_t n, void *target)
{
	char *base = target;

	for (size_t i = 0; i < n; i++) {
		if (tab[i].type != CONFIG_STRING)
			continue;
		char **slot = (char **)(base + tab[i].offset);
		free(*slot);
		*slot = NULL;
	}
}

static void describe_bounds(const struct config_setting *s, char *buf, size_t len)
{
	switch (s->type) {
	case CONFIG_INT:
		snprintf(buf, len, "%lld..%lld%s%s", s->min, s->max, s->unit ? " " : "",
			 s->unit ? s->unit : "");
		break;
	case CONFIG_BOOL:
		snprintf(buf, len, "true|false");
		break;
	case CONFIG_ENUM:
		snprintf(buf, len, "%s", s->choices);
		break;
	default:
		snprintf(buf, len, "text");
		break;
	}
}

void config_print(const struct config_setting *tab, size_t n, FILE *out, bool markdown)
{
	char bounds[96];

	if (markdown)
		fprintf(out, "| variable | values | default | runtime | meaning |\n"
			     "|---|---|---|---|---|\n");
	for (size_t i = 0; i < n; i++) {
		const struct config_setting *s = &tab[i];
		describe_bounds(s, bounds, sizeof(bounds));
		if (markdown) {
			for (char *c = bounds; *c; c++)
				*c = *c == '|' ? '/' : *c; /* a '|' would split the table cell */
			fprintf(out, "| `%s` | %s | %s | %s | %s |\n", s->name, bounds,
				s->def ? s->def : "(unset)", s->runtime ? "yes" : "no", s->help);
		} else {
			fprintf(out, "  %-36s %s (default: %s)%s\n      %s\n", s->name, bounds,
				s->def ? s->def : "unset", s->runtime ? ", changes at runtime" : "",
				s->help);
		}
	}
}
