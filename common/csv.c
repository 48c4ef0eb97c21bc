/* The streaming CSV parser: one state machine fed a byte at a time (see csv.h for the grammar).
 *
 * Memory bound: every byte of a record as written adds at most one byte to buf (content, or the
 * NUL that ends a field at a comma) and the record's end adds one NUL, so buf never holds more
 * than max_record_bytes + 1 bytes; the record limit is checked before a byte is stored.
 */
#include "csv.h"

#include <errno.h>
#include <stdalign.h>
#include <stdio.h>
#include <string.h>

static const uint8_t bom_bytes[3] = { 0xEF, 0xBB, 0xBF };

size_t csv_work_size(const struct csv_limits *lim)
{
	size_t fields;

	if (!lim || !lim->max_field_bytes || !lim->max_fields || !lim->max_record_bytes)
		return 0;
	fields = (size_t)lim->max_fields * sizeof(struct csv_field);
	if (fields / sizeof(struct csv_field) != lim->max_fields ||
	    fields > SIZE_MAX - lim->max_record_bytes - 1)
		return 0;
	return fields + (size_t)lim->max_record_bytes + 1;
}

int csv_init(struct csv_parser *p, const struct csv_limits *lim, csv_record_cb cb, void *ud,
	     void *work, size_t work_size)
{
	size_t need;

	if (!p || !lim || !cb || !work)
		return -EINVAL;
	need = csv_work_size(lim);
	if (!need || (uintptr_t)work % alignof(struct csv_field))
		return -EINVAL;
	if (work_size < need)
		return -ENOBUFS;
	*p = (struct csv_parser){ .lim = *lim, .cb = cb, .ud = ud, .row = 1, .line = 1 };
	p->field = work;
	p->buf = (char *)work + (size_t)lim->max_fields * sizeof(struct csv_field);
	return 0;
}

static int fail(struct csv_parser *p, enum csv_error_kind kind, uint32_t limit)
{
	p->err = (struct csv_error){
		.kind = kind,
		.row = p->row,
		.line = p->line,
		.field = p->n_fields ? p->n_fields : 1,
		.offset = p->offset,
		.limit = limit,
		.in_quotes = p->state == CSV_QUOTED,
	};
	p->rc = -EBADMSG;
	return p->rc;
}

/* Counts one more byte of the record as written. */
static int take(struct csv_parser *p)
{
	if (p->raw >= p->lim.max_record_bytes)
		return fail(p, CSV_ERECORD_LONG, p->lim.max_record_bytes);
	p->raw++;
	return 0;
}

static int begin_field(struct csv_parser *p)
{
	if (p->n_fields >= p->lim.max_fields) {
		fail(p, CSV_EFIELDS, p->lim.max_fields);
		p->err.field = p->n_fields + 1;
		return p->rc;
	}
	p->field[p->n_fields] = (struct csv_field){ .data = p->buf + p->used };
	p->n_fields++;
	return 0;
}

static void end_field(struct csv_parser *p)
{
	struct csv_field *f = &p->field[p->n_fields - 1];

	f->len = (uint32_t)(p->buf + p->used - f->data);
	p->buf[p->used++] = '\0';
}

/* Appends one content byte to the current field. */
static int content(struct csv_parser *p, uint8_t c)
{
	const struct csv_field *f = &p->field[p->n_fields - 1];
	int rc;

	if ((uint32_t)(p->buf + p->used - f->data) >= p->lim.max_field_bytes)
		return fail(p, CSV_EFIELD_LONG, p->lim.max_field_bytes);
	rc = take(p);
	if (rc)
		return rc;
	p->buf[p->used++] = (char)c;
	return 0;
}

/* A comma outside quotes: ends the current field and begins the next one. */
static int comma(struct csv_parser *p)
{
	int rc;

	end_field(p);
	rc = begin_field(p);
	if (!rc)
		rc = take(p);
	p->state = CSV_FIELD_START;
	return rc;
}

/* A line end outside quotes (c is CR or LF): emits the record, if any, and moves to the next
 * row. */
static int end_record(struct csv_parser *p, uint8_t c)
{
	int rc = 0;

	if (p->n_fields) {
		struct csv_record rec = { .row = p->row,
					  .header = p->records == 0,
					  .n_fields = p->n_fields,
					  .field = p->field };

		end_field(p);
		p->records++;
		rc = p->cb(&rec, p->ud);
		if (rc)
			p->rc = rc;
	}
	p->row++;
	p->n_fields = 0;
	p->used = 0;
	p->raw = 0;
	p->state = CSV_FIELD_START;
	p->skip_lf = c == '\r';
	return rc;
}

/* Checks c against the UTF-8 sequence in progress. */
static bool utf8_ok(struct csv_parser *p, uint8_t c)
{
	if (p->u8_need) {
		if (c < p->u8_lo || c > p->u8_hi)
			return false;
		p->u8_need--;
		p->u8_lo = 0x80;
		p->u8_hi = 0xBF;
		return true;
	}
	if (c < 0x80)
		return true;
	if (c < 0xC2 || c > 0xF4)
		return false; /* a continuation byte, an overlong lead, or beyond U+10FFFF */
	p->u8_need = c < 0xE0 ? 1 : c < 0xF0 ? 2 : 3;
	p->u8_lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
	p->u8_hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
	return true;
}

static int field_start(struct csv_parser *p, uint8_t c)
{
	int rc;

	if (c == '\r' || c == '\n')
		return end_record(p, c);
	if (!p->n_fields) {
		rc = begin_field(p);
		if (rc)
			return rc;
	}
	if (c == ',')
		return comma(p);
	if (c == '"') {
		rc = take(p);
		if (rc)
			return rc;
		p->field[p->n_fields - 1].quoted = true;
		p->open_line = p->line;
		p->open_offset = p->offset;
		p->state = CSV_QUOTED;
		return 0;
	}
	p->state = CSV_UNQUOTED;
	return content(p, c);
}

static int step(struct csv_parser *p, uint8_t c)
{
	if (c == '\0')
		return fail(p, CSV_ENUL, 0);
	if (!utf8_ok(p, c))
		return fail(p, CSV_EUTF8, 0);
	if (p->skip_lf) {
		p->skip_lf = false;
		if (c == '\n')
			return 0;
	}
	switch (p->state) {
	case CSV_FIELD_START:
		return field_start(p, c);
	case CSV_UNQUOTED:
		if (c == ',')
			return comma(p);
		if (c == '\r' || c == '\n')
			return end_record(p, c);
		if (c == '"')
			return fail(p, CSV_EBARE_QUOTE, 0);
		return content(p, c);
	case CSV_QUOTED:
		if (c != '"')
			return content(p, c);
		p->state = CSV_QUOTE_SEEN;
		return take(p);
	case CSV_QUOTE_SEEN:
		if (c == ',')
			return comma(p);
		if (c == '\r' || c == '\n')
			return end_record(p, c);
		if (c != '"')
			return fail(p, CSV_EAFTER_QUOTE, 0);
		p->state = CSV_QUOTED;
		return content(p, c);
	}
	return 0;
}

/* One byte of input: a step of the state machine, then the line and offset bookkeeping. */
static int consume(struct csv_parser *p, uint8_t c)
{
	int rc = step(p, c);

	if (rc)
		return rc;
	if (c == '\r' || (c == '\n' && !p->prev_cr))
		p->line++;
	p->prev_cr = c == '\r';
	p->offset++;
	return 0;
}

/* Gives back the bytes of a leading byte order mark that turned out not to be one. */
static int bom_replay(struct csv_parser *p)
{
	uint8_t n = p->bom;
	int rc = 0;

	p->bom = 3;
	for (uint8_t i = 0; i < n && !rc; i++)
		rc = consume(p, bom_bytes[i]);
	return rc;
}

int csv_feed(struct csv_parser *p, const void *data, size_t len)
{
	const uint8_t *d = data;
	int rc;

	if (!p)
		return -EINVAL;
	if (p->rc)
		return p->rc;
	if (p->finished || (!data && len))
		return -EINVAL;
	for (size_t i = 0; i < len; i++) {
		if (p->bom < 3) {
			if (d[i] == bom_bytes[p->bom]) {
				if (++p->bom == 3)
					p->offset = 3; /* a whole mark: skipped */
				continue;
			}
			rc = bom_replay(p);
			if (rc)
				return rc;
		}
		rc = consume(p, d[i]);
		if (rc)
			return rc;
	}
	return 0;
}

int csv_finish(struct csv_parser *p)
{
	int rc;

	if (!p)
		return -EINVAL;
	if (p->rc)
		return p->rc;
	if (p->finished)
		return -EINVAL;
	p->finished = true;
	if (p->bom < 3) {
		rc = bom_replay(p);
		if (rc)
			return rc;
	}
	if (p->u8_need)
		return fail(p, CSV_EUTF8, 0);
	if (p->state == CSV_QUOTED) {
		fail(p, CSV_EUNTERMINATED, 0);
		p->err.line = p->open_line;
		p->err.offset = p->open_offset;
		return p->rc;
	}
	p->skip_lf = false;
	return end_record(p, '\n');
}

const struct csv_error *csv_last_error(const struct csv_parser *p)
{
	return &p->err;
}

uint64_t csv_records(const struct csv_parser *p)
{
	return p->records;
}

const char *csv_error_kind_str(enum csv_error_kind kind)
{
	switch (kind) {
	case CSV_OK:
		return "no error";
	case CSV_EAFTER_QUOTE:
		return "malformed quoted field: a byte other than a comma or a line end follows "
		       "the closing quote (write a quote inside a quoted field as \"\")";
	case CSV_EUNTERMINATED:
		return "malformed quoted field: the quote is never closed";
	case CSV_EBARE_QUOTE:
		return "malformed field: a quote inside an unquoted field (quote the whole field "
		       "and double the quote)";
	case CSV_EUTF8:
		return "invalid UTF-8 (the file must be encoded in UTF-8)";
	case CSV_ENUL:
		return "a NUL byte (is this a text file?)";
	case CSV_EFIELDS:
		return "too many fields";
	case CSV_EFIELD_LONG:
		return "field too long";
	case CSV_ERECORD_LONG:
		return "row too long";
	}
	return "unknown CSV error";
}

int csv_error_message(const struct csv_error *e, char *buf, size_t len)
{
	char where[96];
	const char *what = csv_error_kind_str(e->kind);
	const char *hint =
		e->in_quotes ? " (inside a quoted field: is its closing quote missing?)" : "";

	if (e->line != e->row)
		snprintf(where, sizeof(where), "row %llu (line %llu), field %u",
			 (unsigned long long)e->row, (unsigned long long)e->line, e->field);
	else
		snprintf(where, sizeof(where), "row %llu, field %u", (unsigned long long)e->row,
			 e->field);
	switch (e->kind) {
	case CSV_EFIELDS:
		return snprintf(buf, len, "%s: more than %u fields", where, e->limit);
	case CSV_EFIELD_LONG:
		return snprintf(buf, len, "%s: field longer than %u bytes%s", where, e->limit,
				hint);
	case CSV_ERECORD_LONG:
		return snprintf(buf, len, "%s: row longer than %u bytes%s", where, e->limit, hint);
	default:
		return snprintf(buf, len, "%s: %s", where, what);
	}
}
