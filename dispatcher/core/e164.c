/* Phone numbers to E.164: a left-to-right scan of the written form (see e164.h for the rule). */
#include "e164.h"

#include <errno.h>
#include <stdbool.h>

enum prev { P_PLUS, P_DIGIT, P_SEP, P_OPEN, P_CLOSE };

struct scan {
	enum prev prev;
	bool in_group;	  /* inside "( … )" */
	bool had_group;	  /* a group was seen */
	size_t group_len; /* digits in the open group */
	size_t digits;	  /* digits seen */
};

static bool is_space(char c)
{
	return c == ' ' || c == '\t';
}

static enum e164_fault digit(struct scan *s, char c, char *out)
{
	if (s->digits == 0 && c == '0')
		return E164_LEADING_ZERO;
	if (s->in_group && s->group_len++ == 0 && c == '0')
		return E164_TRUNK_ZERO;
	if (s->digits < E164_MAX_DIGITS)
		out[1 + s->digits] = c;
	s->digits++;
	s->prev = P_DIGIT;
	return E164_OK;
}

/* One byte after the '+'. */
static enum e164_fault scan_byte(struct scan *s, char c, char *out)
{
	if (c >= '0' && c <= '9')
		return digit(s, c, out);
	switch (c) {
	case ' ':
	case '-':
	case '.':
		if (s->in_group || (s->prev != P_DIGIT && s->prev != P_CLOSE))
			return E164_BAD_SEPARATOR;
		s->prev = P_SEP;
		return E164_OK;
	case '(':
		if (s->had_group || (s->prev != P_DIGIT && s->prev != P_SEP))
			return E164_BAD_SEPARATOR;
		s->had_group = s->in_group = true;
		s->group_len = 0;
		s->prev = P_OPEN;
		return E164_OK;
	case ')':
		if (!s->in_group || s->prev != P_DIGIT)
			return E164_BAD_SEPARATOR;
		s->in_group = false;
		s->prev = P_CLOSE;
		return E164_OK;
	default:
		return E164_BAD_CHAR;
	}
}

static enum e164_fault check(const char *in, size_t len, char *out)
{
	struct scan s = { .prev = P_PLUS };
	enum e164_fault f;

	while (len && is_space(in[0])) {
		in++;
		len--;
	}
	while (len && is_space(in[len - 1]))
		len--;
	if (!len)
		return E164_EMPTY;
	if (in[0] != '+')
		return E164_NO_PLUS;
	for (size_t i = 1; i < len; i++) {
		f = scan_byte(&s, in[i], out);
		if (f != E164_OK)
			return f;
	}
	if (s.in_group || (s.prev != P_DIGIT && s.prev != P_CLOSE && s.digits))
		return E164_BAD_SEPARATOR;
	if (s.digits > E164_MAX_DIGITS)
		return E164_TOO_LONG;
	if (s.digits < E164_MIN_DIGITS)
		return E164_TOO_SHORT;
	out[0] = '+';
	out[1 + s.digits] = '\0';
	return E164_OK;
}

int e164_normalise(const char *in, size_t len, char *out, size_t out_size, enum e164_fault *fault)
{
	enum e164_fault f;

	if (fault)
		*fault = E164_OK;
	if (!out || (!in && len))
		return -EFAULT;
	if (out_size < E164_BUF) {
		if (out_size)
			out[0] = '\0';
		return -ENOBUFS;
	}
	f = check(in, len, out);
	if (f == E164_OK)
		return 0;
	out[0] = '\0';
	if (fault)
		*fault = f;
	return -EINVAL;
}

const char *e164_fault_str(enum e164_fault fault)
{
	switch (fault) {
	case E164_OK:
		return "valid";
	case E164_EMPTY:
		return "the number is empty";
	case E164_NO_PLUS:
		return "the number must start with + and its country code (E.164, e.g. "
		       "+14155550100)";
	case E164_BAD_CHAR:
		return "the number may hold only digits, spaces, '-', '.' and one '( )' group";
	case E164_BAD_SEPARATOR:
		return "a space, '-', '.' or parenthesis out of place (one between two digits)";
	case E164_TRUNK_ZERO:
		return "a parenthesised trunk prefix such as (0) is ambiguous: leave it out";
	case E164_LEADING_ZERO:
		return "the country code cannot start with 0";
	case E164_TOO_SHORT:
		return "too few digits (E.164 needs at least 7 after the +)";
	case E164_TOO_LONG:
		return "too many digits (E.164 allows at most 15 after the +)";
	}
	return "invalid number";
}
