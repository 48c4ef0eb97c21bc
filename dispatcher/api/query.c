/* Query strings of the list routes (query.h). */
#include "query.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#define NAME_MAX_SHOWN 40 /* an unknown name is quoted up to this many bytes */

static int hexval(char ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* Percent-decodes ('+' as a space) the n bytes at s into out (cap bytes with the NUL). Returns
 * 0, or -EINVAL for a bad escape, a NUL, or a result longer than cap - 1. */
static int decode(const char *s, size_t n, char *out, size_t cap)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		int ch = (unsigned char)s[i];

		if (ch == '%') {
			int hi = i + 2 < n ? hexval(s[i + 1]) : -1;
			int lo = hi >= 0 ? hexval(s[i + 2]) : -1;
			if (lo < 0)
				return -EINVAL;
			ch = hi * 16 + lo;
			i += 2;
		} else if (ch == '+') {
			ch = ' ';
		}
		if (!ch || o + 1 >= cap)
			return -EINVAL;
		out[o++] = (char)ch;
	}
	out[o] = '\0';
	return 0;
}

/* name, shown in a message: bytes other than [A-Za-z0-9_.-] as '?', at most NAME_MAX_SHOWN. */
static void shown(const char *name, size_t n, char *out)
{
	size_t i = 0;

	for (; i < n && i < NAME_MAX_SHOWN; i++) {
		unsigned char c = (unsigned char)name[i];
		out[i] = c && (isalnum(c) || strchr("_.-", c)) ? (char)c : '?';
	}
	out[i] = '\0';
}

static int unknown(const char *name, size_t n, const struct query_param *p, size_t np, char *msg,
		   size_t cap)
{
	char s[NAME_MAX_SHOWN + 1];
	int w;

	shown(name, n, s);
	w = snprintf(msg, cap, "Query parameter '%s' is unknown: use ", s);
	for (size_t i = 0; i < np && w >= 0 && (size_t)w < cap; i++)
		w += snprintf(msg + w, cap - (size_t)w, "%s%s", p[i].name,
			      i + 2 < np   ? ", "
			      : i + 1 < np ? " or "
					   : ".");
	return -EINVAL;
}

int query_parse(const char *q, struct query_param *p, size_t n, char *msg, size_t cap)
{
	char name[NAME_MAX_SHOWN + 1];

	for (size_t i = 0; i < n; i++) {
		p[i].set = false;
		p[i].value[0] = '\0';
	}
	while (q && *q) {
		size_t len = strcspn(q, "&"), nlen = strcspn(q, "=");
		const char *v = q + nlen + 1;
		size_t i = 0;

		if (nlen > len)
			nlen = len;
		if (len) {
			if (decode(q, nlen, name, sizeof(name)))
				return unknown(q, nlen, p, n, msg, cap);
			while (i < n && strcmp(name, p[i].name))
				i++;
			if (i == n)
				return unknown(name, strlen(name), p, n, msg, cap);
			if (p[i].set) {
				snprintf(msg, cap, "Query parameter '%s' is given twice.",
					 p[i].name);
				return -EINVAL;
			}
			p[i].set = true;
			if (nlen == len || v == q + len) {
				snprintf(msg, cap, "Query parameter '%s' is empty.", p[i].name);
				return -EINVAL;
			}
			if (decode(v, (size_t)(q + len - v), p[i].value, sizeof(p[i].value))) {
				snprintf(msg, cap,
					 "Query parameter '%s' is not a valid value (a bad %% "
					 "escape, "
					 "a NUL, or longer than %d bytes).",
					 p[i].name, QUERY_VALUE_MAX);
				return -EINVAL;
			}
		}
		q += len + (q[len] == '&');
	}
	return 0;
}

/* True when the n bytes at s are 1 to max decimal digits. */
static bool digits(const char *s, size_t n, size_t max)
{
	if (n < 1 || n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return true;
}

int query_limit(const struct query_param *p, unsigned def, unsigned max, unsigned *out, char *msg,
		size_t cap)
{
	unsigned long v = 0;

	if (!p->set) {
		*out = def;
		return 0;
	}
	if (digits(p->value, strlen(p->value), 9))
		for (const char *s = p->value; *s; s++)
			v = v * 10 + (unsigned long)(*s - '0');
	if (v < 1 || v > max) {
		snprintf(msg, cap, "Query parameter '%s' must be an integer from 1 to %u.", p->name,
			 max);
		return -EINVAL;
	}
	*out = (unsigned)v;
	return 0;
}

int query_cursor(const struct query_param *p, bool (*id_ok)(const char *), char us[QUERY_US_SIZE],
		 char id[IDENT_MAX + 1], char *msg, size_t cap)
{
	const char *dot = strchr(p->value, '.');
	size_t un = dot ? (size_t)(dot - p->value) : 0;

	if (!p->set)
		return 0;
	if (!dot || !digits(p->value, un, QUERY_US_SIZE - 1) || strlen(dot + 1) > IDENT_MAX ||
	    !id_ok(dot + 1)) {
		snprintf(msg, cap,
			 "Query parameter '%s' is not a cursor this API gave (next_cursor).",
			 p->name);
		return -EINVAL;
	}
	memcpy(us, p->value, un);
	us[un] = '\0';
	strcpy(id, dot + 1);
	return 0;
}

void query_cursor_format(char out[QUERY_CURSOR_MAX], const char *us, const char *id)
{
	snprintf(out, QUERY_CURSOR_MAX, "%.*s.%.*s", QUERY_US_SIZE - 1, us, IDENT_MAX, id);
}
