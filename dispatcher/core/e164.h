/* Phone numbers: checks one written by a user (a CSV cell, a JSON string) and gives its E.164
 * form, "+" then 7 to 15 digits, the first not 0 (SPEC R6, D0) — the same rule as the
 * schema's CHECK on contacts.phone and calls.to_number (^\+[1-9][0-9]{6,14}$), so a number
 * accepted here is never refused by the database.
 *
 * The source document shows only the canonical form ("+919876543210") and does not say what
 * else to accept. The choice made here: accept the visual separators of ITU-T E.123 that
 * spreadsheets and people add, and strip them; refuse everything that would need a guess.
 * - Accepted and removed: spaces and tabs around the number; one ' ', '-' or '.' between two
 *   digits (or between a digit and a parenthesised group); one parenthesised group of digits
 *   after the country code's first digit, as in "+1 (415) 555-0100".
 * - Refused: no leading '+' (a national number, or an "00" international prefix: we never
 *   guess a country); letters, extensions ("x12", ";ext=", "#", "*"); separators doubled, at
 *   the start or the end; a group opened and not closed, nested or repeated; a group whose
 *   first digit is 0 ("+44 (0)20 …": the trunk prefix, whose removal the reader would have to
 *   guess); any byte that is not ASCII (no-break space, Unicode dashes, full-width digits).
 *
 * Pure: no I/O, no allocation.
 */
#ifndef DSP_CORE_E164_H
#define DSP_CORE_E164_H

#include <stddef.h>

#define E164_MIN_DIGITS 7
#define E164_MAX_DIGITS 15
#define E164_BUF	(E164_MAX_DIGITS + 2) /* '+', the digits, the NUL */

enum e164_fault {
	E164_OK = 0,
	E164_EMPTY,	    /* nothing but spaces */
	E164_NO_PLUS,	    /* does not start with '+' */
	E164_BAD_CHAR,	    /* a byte that is neither a digit nor an accepted separator */
	E164_BAD_SEPARATOR, /* a separator doubled, first, last, or a group misplaced */
	E164_TRUNK_ZERO,    /* a parenthesised group starting with 0, such as "(0)" */
	E164_LEADING_ZERO,  /* the country code starts with 0 */
	E164_TOO_SHORT,	    /* fewer than E164_MIN_DIGITS digits */
	E164_TOO_LONG,	    /* more than E164_MAX_DIGITS digits */
};

/* Checks the len bytes at in (no NUL needed; a NUL byte is a bad character) and writes the
 * E.164 form, NUL-terminated, into out (out_size >= E164_BUF). Returns 0; -EINVAL when the
 * number is refused, with the reason in *fault (fault may be NULL; it is E164_OK on success);
 * -ENOBUFS when out is too small; -EFAULT for a NULL in (len > 0) or out. out is left empty
 * on failure. */
int e164_normalise(const char *in, size_t len, char *out, size_t out_size, enum e164_fault *fault);

/* Returns a static English description of fault, never NULL (for example "the number must
 * start with + and its country code"). */
const char *e164_fault_str(enum e164_fault fault);

#endif
