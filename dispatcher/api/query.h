/* The query string of a GET list route, parsed one way for the whole API (README "Query
 * parameters").
 *
 * A route names the parameters it takes; query_parse() splits the query at '&', percent-decodes
 * each name and value ('+' is a space), and refuses an unknown or repeated name, an empty value,
 * a bad escape, an encoded NUL and a value longer than QUERY_VALUE_MAX bytes decoded. Empty
 * pairs ("a=1&&b=2", a trailing '&') are skipped. The limit and the keyset cursor have helpers
 * of their own. Every refusal writes one sentence naming the parameter into msg; the route
 * answers it 400 invalid_parameter. Pure: no I/O, no allocation.
 *
 *     struct query_param p[] = { { .name = "limit" }, { .name = "cursor" } };
 *     if (query_parse(http_request_query(req), p, 2, msg, sizeof(msg)) ||
 *         query_limit(&p[0], 50, 100, &rows, msg, sizeof(msg)) || ...)
 *             api_error(c, 400, "invalid_parameter", msg);
 */
#ifndef DSP_API_QUERY_H
#define DSP_API_QUERY_H

#include "ident.h"

#include <stdbool.h>
#include <stddef.h>

#define QUERY_VALUE_MAX	 255 /* the longest value taken, in bytes once decoded */
#define QUERY_US_SIZE	 19  /* a cursor's microseconds: 1 to 18 digits and the NUL */
#define QUERY_CURSOR_MAX (QUERY_US_SIZE + IDENT_MAX + 1) /* "<µs>.<id>" and the NUL */

struct query_param {
	const char *name;		 /* in: the parameter's name (borrowed) */
	bool set;			 /* out: it was given */
	char value[QUERY_VALUE_MAX + 1]; /* out: its decoded value when set, else "" */
};

/* Parses q (the query after '?', without it; NULL or "" for none) against the n parameters of
 * p, filling each one's set and value. Returns 0, or -EINVAL with the reason in msg (cap
 * bytes, always terminated). */
int query_parse(const char *q, struct query_param *p, size_t n, char *msg, size_t cap);

/* The page size of p (parsed): def when p is not set, else its value, which must be 1 to max
 * written in decimal digits alone. Returns 0 with *out set, or -EINVAL with msg. */
int query_limit(const struct query_param *p, unsigned def, unsigned max, unsigned *out, char *msg,
		size_t cap);

/* A keyset cursor "<µs>.<id>" as query_cursor_format() wrote it: 1 to 18 digits, '.', then an
 * id that id_ok accepts (ident_ok, ident_uuid_ok). When p is set, splits it into us and id
 * (IDENT_MAX + 1 bytes); when it is not, leaves them alone. Returns 0, or -EINVAL with msg. */
int query_cursor(const struct query_param *p, bool (*id_ok)(const char *), char us[QUERY_US_SIZE],
		 char id[IDENT_MAX + 1], char *msg, size_t cap);

/* Writes the cursor "<us>.<id>" into out (QUERY_CURSOR_MAX bytes); us is the page's last row's
 * created_at in microseconds since the epoch (decimal), id its id. */
void query_cursor_format(char out[QUERY_CURSOR_MAX], const char *us, const char *id);

#endif
