/* A streaming CSV parser (RFC 4180) with limits and errors that name the row.
 *
 * Fed chunks of any size (a field, a doubled quote, a CRLF or a UTF-8 sequence may span
 * chunks); emits one record at a time through a callback. It never allocates: the caller gives
 * it a work area of csv_work_size() bytes, which depends only on the limits, so memory is
 * constant per parser whatever the input's size. Pure: no I/O.
 *
 *     struct csv_parser p;
 *     size_t n = csv_work_size(&lim);   void *work = malloc(n);
 *     csv_init(&p, &lim, record_cb, ud, work, n);
 *     while (...) rc = csv_feed(&p, chunk, len);   rc = csv_finish(&p);
 *     if (rc == -EBADMSG) csv_error_message(csv_last_error(&p), msg, sizeof(msg));
 *     free(work);
 *
 * The grammar (RFC 4180, with the leniencies said here and nowhere else):
 * - Fields are separated by ',' and records end with CRLF, LF or a lone CR. The last record may
 *   lack a line end. A line with no byte at all (blank line) is skipped, but counted as a row.
 * - A field that starts with '"' is quoted: it ends at the next '"' not followed by another
 *   '"'; "" inside it stands for one '"'; commas, CR and LF inside it are content. After its
 *   closing quote only ',', a line end or the end of input may follow (CSV_EAFTER_QUOTE).
 *   A '"' inside an unquoted field is refused (CSV_EBARE_QUOTE); spaces are content, never
 *   trimmed.
 * - The input must be UTF-8 (overlong forms, surrogates and code points above U+10FFFF are
 *   refused) and contain no NUL byte. One UTF-8 byte order mark at the very start is skipped.
 *
 * Rows: a row is one record as a spreadsheet shows it, 1-based; the first one (the header) is
 * row 1, and a skipped blank line still takes a row number. A quoted field that holds line ends
 * does not start a new row, so errors also give the physical line (1-based; CRLF, LF and a lone
 * CR each end one), which is larger than the row after such a field.
 *
 * Errors are final: after csv_feed() or csv_finish() returned an error, every later call
 * returns the same error and emits nothing.
 */
#ifndef DSP_CSV_H
#define DSP_CSV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct csv_limits {
	uint32_t max_field_bytes;  /* a field's content after unquoting (>= 1) */
	uint32_t max_fields;	   /* fields per record (>= 1) */
	uint32_t max_record_bytes; /* a record's bytes as written, quotes and commas included,
				    * line end excluded (>= 1) */
};

struct csv_field {
	const char *data; /* NUL-terminated (the input has no NUL); borrowed for the callback */
	uint32_t len;	  /* bytes, without the NUL */
	bool quoted;	  /* written between quotes */
};

struct csv_record {
	uint64_t row;		       /* 1-based; the header is row 1 */
	bool header;		       /* the first record of the input (blank lines skipped) */
	uint32_t n_fields;	       /* >= 1 */
	const struct csv_field *field; /* n_fields entries; borrowed for the callback */
};

/* Called once per record, in input order. Returns 0 to go on, or a negative code that stops the
 * parser: csv_feed() / csv_finish() return it at once and at every later call. The record and
 * its fields live only during the call. */
typedef int (*csv_record_cb)(const struct csv_record *rec, void *ud);

enum csv_error_kind {
	CSV_OK = 0,
	CSV_EAFTER_QUOTE,  /* a byte other than ',' or a line end after a closing quote */
	CSV_EUNTERMINATED, /* a quoted field still open at the end of input */
	CSV_EBARE_QUOTE,   /* a '"' inside an unquoted field */
	CSV_EUTF8,	   /* a byte sequence that is not UTF-8 (also one cut by the end) */
	CSV_ENUL,	   /* a NUL byte */
	CSV_EFIELDS,	   /* more fields than max_fields in a record */
	CSV_EFIELD_LONG,   /* a field longer than max_field_bytes */
	CSV_ERECORD_LONG,  /* a record longer than max_record_bytes */
};

struct csv_error {
	enum csv_error_kind kind;
	uint64_t row;	 /* the row of the record the error is in (where it started) */
	uint64_t line;	 /* the physical line of the offending byte; for CSV_EUNTERMINATED, of
			  * the opening quote */
	uint32_t field;	 /* 1-based field of the offending byte within its record */
	uint64_t offset; /* 0-based byte offset of the offending byte in the whole input (the
			  * opening quote for CSV_EUNTERMINATED; the input's length for a
			  * UTF-8 sequence cut by the end) */
	uint32_t limit;	 /* the limit exceeded, for the three limit kinds; else 0 */
	bool in_quotes;	 /* the offending byte was inside a quoted field (a long "field" may
			  * then be a missing closing quote) */
};

enum csv_state {
	CSV_FIELD_START, /* before a field's first byte */
	CSV_UNQUOTED,	 /* inside an unquoted field */
	CSV_QUOTED,	 /* inside a quoted field */
	CSV_QUOTE_SEEN,	 /* a '"' inside a quoted field: its end, or the first of "" */
};

/* The parser. Fields are private; read them through the functions below. */
struct csv_parser {
	struct csv_limits lim;
	csv_record_cb cb;
	void *ud;
	char *buf;		 /* work area: field contents, each followed by a NUL */
	struct csv_field *field; /* work area: max_fields entries */
	enum csv_state state;
	uint32_t used;	      /* bytes of buf in use */
	uint32_t n_fields;    /* fields begun in the current record */
	uint32_t raw;	      /* bytes of the current record as written */
	uint64_t row;	      /* row of the current record */
	uint64_t line;	      /* physical line of the next byte */
	uint64_t offset;      /* bytes consumed so far */
	uint64_t records;     /* records emitted */
	uint64_t open_line;   /* line of the current quoted field's opening quote */
	uint64_t open_offset; /* offset of that quote */
	uint8_t u8_need;      /* UTF-8 continuation bytes still expected */
	uint8_t u8_lo, u8_hi; /* bounds of the next continuation byte */
	uint8_t bom;	      /* bytes of a leading byte order mark matched so far; 3: settled */
	bool prev_cr;	      /* the previous byte was CR */
	bool skip_lf;	      /* a CR ended a record: an LF right after belongs to it */
	bool finished;	      /* csv_finish() ran */
	int rc;		      /* 0, or the final error / callback code */
	struct csv_error err;
};

/* Returns the work area size for these limits, or 0 when a limit is 0 or the size overflows. */
size_t csv_work_size(const struct csv_limits *lim);

/* Prepares p to parse a new input. work (work_size bytes, at least csv_work_size(lim)) is
 * borrowed until the parser is no longer used; lim is copied; cb is called for every record
 * with ud. Returns 0, -EINVAL (NULL argument, a limit of 0) or -ENOBUFS (work area too small).
 */
int csv_init(struct csv_parser *p, const struct csv_limits *lim, csv_record_cb cb, void *ud,
	     void *work, size_t work_size);

/* Parses len bytes (data is borrowed for the call; len 0 does nothing). Calls cb for each
 * record completed by these bytes. Returns 0; -EBADMSG when the input is malformed or exceeds a
 * limit (csv_last_error() says where and why); the callback's negative code when it stopped the
 * parser; -EINVAL after csv_finish() or for a NULL data with len > 0. */
int csv_feed(struct csv_parser *p, const void *data, size_t len);

/* Ends the input: emits the last record when it has no line end, and checks that no quoted
 * field or UTF-8 sequence is left open. Returns as csv_feed(); -EINVAL when called twice. */
int csv_finish(struct csv_parser *p);

/* Returns the error that made csv_feed() / csv_finish() return -EBADMSG, else one of kind
 * CSV_OK. Borrowed from p. */
const struct csv_error *csv_last_error(const struct csv_parser *p);

/* Returns the number of records emitted so far (the header included; blank lines not). */
uint64_t csv_records(const struct csv_parser *p);

/* Returns a static description of kind, never NULL (for example "malformed quoted field: a
 * byte other than a comma or a line end follows the closing quote"). */
const char *csv_error_kind_str(enum csv_error_kind kind);

/* Writes an English message for e into buf (always NUL-terminated when len > 0), for example
 * "row 7 (line 9), field 3: field longer than 256 bytes". Returns what snprintf returns. */
int csv_error_message(const struct csv_error *e, char *buf, size_t len);

#endif
