/* `dispatcher admin` options (admin_args.h): pure. */
#include "admin_args.h"

#include "ident.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Writes v into out with control characters and non-ASCII escaped, truncated. */
static void shown(const char *v, char *out, size_t cap)
{
	static const char hex[] = "0123456789abcdef";
	size_t n = 0;

	for (; *v && n + 5 < cap; v++) {
		unsigned char c = (unsigned char)*v;
		if (c >= 0x20 && c < 0x7f) {
			out[n++] = (char)c;
			continue;
		}
		out[n++] = '\\';
		out[n++] = 'x';
		out[n++] = hex[c >> 4];
		out[n++] = hex[c & 15];
	}
	if (*v && n + 4 <= cap) {
		memcpy(out + n, "...", 3);
		n += 3;
	}
	out[n] = '\0';
}

/* Length of the UTF-8 sequence at s (1..4), or 0 when it is not valid UTF-8. */
static size_t utf8_len(const unsigned char *s)
{
	size_t n = s[0] < 0x80			 ? 1
		   : s[0] >= 0xc2 && s[0] < 0xe0 ? 2
		   : s[0] >= 0xe0 && s[0] < 0xf0 ? 3
		   : s[0] >= 0xf0 && s[0] < 0xf5 ? 4
						 : 0;

	for (size_t i = 1; i < n; i++)
		if ((s[i] & 0xc0) != 0x80)
			return 0;
	if ((n == 3 && s[0] == 0xe0 && s[1] < 0xa0) || (n == 3 && s[0] == 0xed && s[1] >= 0xa0) ||
	    (n == 4 && s[0] == 0xf0 && s[1] < 0x90) || (n == 4 && s[0] == 0xf4 && s[1] >= 0x90))
		return 0;
	return n;
}

static bool is_name(const char *v)
{
	const unsigned char *s = (const unsigned char *)v;
	size_t len = strlen(v);

	if (len < 1 || len > 200)
		return false;
	while (*s) {
		size_t n = utf8_len(s);
		if (n == 0 || (n == 1 && (*s < 0x20 || *s == 0x7f)))
			return false;
		s += n;
	}
	return true;
}

static bool is_e164(const char *v)
{
	size_t n = strlen(v);

	return n >= 8 && n <= 16 && v[0] == '+' && v[1] >= '1' && v[1] <= '9' &&
	       strspn(v + 1, "0123456789") == n - 1;
}

static bool parse_int(const char *v, long long lo, long long hi, long long *out)
{
	char *end;

	if (!*v || strspn(v, "-0123456789") != strlen(v))
		return false;
	errno = 0;
	long long n = strtoll(v, &end, 10);
	if (errno || *end || n < lo || n > hi)
		return false;
	*out = n;
	return true;
}

/* Checks v against o; stores its canonical text in *val (pointing at v or buf). */
static bool check(const struct admin_opt *o, const char *v, char buf[24], const char **val)
{
	long long n;

	*val = v;
	switch (o->type) {
	case ADMIN_ID:
		return ident_ok(v);
	case ADMIN_NAME:
		return is_name(v);
	case ADMIN_E164:
		return is_e164(v);
	case ADMIN_BOOL:
		if (strcmp(v, "true") && strcmp(v, "false"))
			return false;
		return true;
	case ADMIN_INT_OR_NONE:
		if (strcmp(v, "none") == 0) {
			*val = "";
			return true;
		}
		/* fall through */
	case ADMIN_INT:
		if (!parse_int(v, o->lo, o->hi, &n))
			return false;
		snprintf(buf, 24, "%lld", n);
		*val = buf;
		return true;
	}
	return false;
}

static void describe(const struct admin_opt *o, char *out, size_t cap)
{
	switch (o->type) {
	case ADMIN_ID:
		snprintf(out, cap, "1 to 64 of A-Z a-z 0-9 _ -");
		break;
	case ADMIN_NAME:
		snprintf(out, cap, "1 to 200 bytes of UTF-8, no control characters");
		break;
	case ADMIN_E164:
		snprintf(out, cap, "an E.164 number: + then 7 to 15 digits, the first not 0");
		break;
	case ADMIN_BOOL:
		snprintf(out, cap, "true or false");
		break;
	case ADMIN_INT:
		snprintf(out, cap, "an integer %lld..%lld", o->lo, o->hi);
		break;
	case ADMIN_INT_OR_NONE:
		snprintf(out, cap, "an integer %lld..%lld, or none", o->lo, o->hi);
		break;
	}
}

static int refuse(FILE *err, const struct admin_spec *s, const char *what, const char *arg)
{
	char v[80];

	shown(arg, v, sizeof(v));
	fprintf(err, "dispatcher admin %s %s: %s '%s' (try dispatcher admin --help)\n", s->noun,
		s->verb, what, v);
	return -EINVAL;
}

static int find(const struct admin_spec *s, const char *name, size_t len)
{
	for (size_t i = 0; i < s->nopts; i++)
		if (strlen(s->opts[i].name) == len && strncmp(s->opts[i].name, name, len) == 0)
			return (int)i;
	return -1;
}

/* Applies argv[*i] (and its value) to out. */
static int one(const struct admin_spec *s, int argc, char **argv, int *i, struct admin_args *out,
	       FILE *err)
{
	const char *a = argv[*i], *eq = strchr(a, '='), *v;
	size_t len = eq ? (size_t)(eq - a) : strlen(a);
	int k = strncmp(a, "--", 2) == 0 ? find(s, a, len) : -1;
	char what[160], bounds[96];

	if (k < 0)
		return refuse(err, s,
			      strncmp(a, "--", 2) ? "unexpected argument" : "unknown option", a);
	if (out->val[k]) {
		snprintf(what, sizeof(what), "%s given twice, again as", s->opts[k].name);
		return refuse(err, s, what, a);
	}
	if (eq) {
		v = eq + 1;
	} else if (*i + 1 < argc) {
		v = argv[++*i];
	} else {
		snprintf(what, sizeof(what), "%s needs a value", s->opts[k].name);
		fprintf(err, "dispatcher admin %s %s: %s\n", s->noun, s->verb, what);
		return -EINVAL;
	}
	if (!check(&s->opts[k], v, out->buf[k], &out->val[k])) {
		out->val[k] = NULL;
		describe(&s->opts[k], bounds, sizeof(bounds));
		char sv[80];
		shown(v, sv, sizeof(sv));
		fprintf(err, "dispatcher admin %s %s: %s: bad value '%s' (%s)\n", s->noun, s->verb,
			s->opts[k].name, sv, bounds);
		return -EINVAL;
	}
	return 0;
}

int admin_args_parse(const struct admin_spec *spec, int argc, char **argv, struct admin_args *out,
		     FILE *err)
{
	size_t optional = 0;

	memset(out, 0, sizeof(*out));
	out->spec = spec;
	for (int i = 0; i < argc; i++)
		if (one(spec, argc, argv, &i, out, err) < 0)
			return -EINVAL;
	for (size_t k = 0; k < spec->nopts; k++) {
		if (spec->opts[k].required && !out->val[k]) {
			fprintf(err, "dispatcher admin %s %s: %s is required\n", spec->noun,
				spec->verb, spec->opts[k].name);
			return -EINVAL;
		}
		optional += !spec->opts[k].required && out->val[k];
	}
	if (spec->need_one && optional == 0) {
		fprintf(err, "dispatcher admin %s %s: nothing to change: give at least one of",
			spec->noun, spec->verb);
		for (size_t k = 0; k < spec->nopts; k++)
			if (!spec->opts[k].required)
				fprintf(err, " %s", spec->opts[k].name);
		fputc('\n', err);
		return -EINVAL;
	}
	return 0;
}

const char *admin_arg(const struct admin_args *a, const char *name)
{
	int k = find(a->spec, name, strlen(name));

	if (k < 0)
		abort();
	return a->val[k];
}
