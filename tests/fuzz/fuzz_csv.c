/* Fuzz target: the CSV upload path (POST /v2/batches/upload): common/csv.h parsing the body in
 * chunks cut at random places, and core/e164.h checking the phone column of every row.
 *
 * Input: 4 bytes of parameters (the three limits, the seed of the chunk cuts), then the CSV.
 * Properties: no crash and no read or write outside the work area; every record within the
 * limits, its fields NUL-terminated at their length; rows increasing, the header first; the same
 * records and the same error (kind, row, line, field, offset) whether the body comes whole, in
 * random chunks or byte by byte; errors final; an accepted phone number is E.164 and
 * normalising it again gives itself. */
#include "fuzz.h"

#include "csv.h"
#include "e164.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

struct run {
	struct csv_limits lim;
	uint64_t digest; /* FNV-1a over every record, then the outcome */
	uint64_t last_row;
	uint64_t records;
	int phone_col; /* the header's "phone" column, else 0 */
};

static void mix(struct run *r, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		r->digest = (r->digest ^ b[i]) * 1099511628211ULL;
}

static bool is_e164(const char *s)
{
	size_t n = strlen(s);

	if (n < 1 + E164_MIN_DIGITS || n > 1 + E164_MAX_DIGITS || s[0] != '+' || s[1] == '0')
		return false;
	for (size_t i = 1; i < n; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return true;
}

static void check_phone(const struct csv_field *f)
{
	char out[E164_BUF], again[E164_BUF];
	enum e164_fault fault;
	int rc = e164_normalise(f->data, f->len, out, sizeof(out), &fault);

	FUZZ_CHECK(rc == 0 || rc == -EINVAL);
	FUZZ_CHECK((rc == 0) == (fault == E164_OK));
	FUZZ_CHECK(e164_fault_str(fault) != NULL);
	if (rc) {
		FUZZ_CHECK(out[0] == '\0');
		return;
	}
	FUZZ_CHECK(is_e164(out));
	FUZZ_CHECK(e164_normalise(out, strlen(out), again, sizeof(again), NULL) == 0);
	FUZZ_CHECK(strcmp(out, again) == 0);
}

static int record_cb(const struct csv_record *rec, void *ud)
{
	struct run *r = ud;

	FUZZ_CHECK(rec->n_fields >= 1 && rec->n_fields <= r->lim.max_fields);
	FUZZ_CHECK(rec->row > r->last_row);
	FUZZ_CHECK(rec->header == (r->records == 0));
	r->last_row = rec->row;
	r->records++;
	mix(r, &rec->row, sizeof(rec->row));
	mix(r, &rec->n_fields, sizeof(rec->n_fields));
	for (uint32_t i = 0; i < rec->n_fields; i++) {
		const struct csv_field *f = &rec->field[i];
		FUZZ_CHECK(f->len <= r->lim.max_field_bytes);
		FUZZ_CHECK(strlen(f->data) == f->len);
		mix(r, &f->len, sizeof(f->len));
		mix(r, &f->quoted, sizeof(f->quoted));
		mix(r, f->data, f->len);
		if (rec->header && f->len == 5 && memcmp(f->data, "phone", 5) == 0)
			r->phone_col = (int)i;
	}
	if (!rec->header && (uint32_t)r->phone_col < rec->n_fields)
		check_phone(&rec->field[r->phone_col]);
	return 0;
}

/* Parses in[0..len) cut as chosen by mode (0: whole, 1: byte by byte, 2: random cuts from
 * seed); returns the digest of the records and the outcome. */
static uint64_t parse(const struct csv_limits *lim, const uint8_t *in, size_t len, int mode,
		      uint32_t seed)
{
	struct run r = { .lim = *lim, .digest = 14695981039346656037ULL };
	struct csv_parser p;
	size_t size = csv_work_size(lim), at = 0;
	void *work = malloc(size);
	int rc = 0;

	FUZZ_CHECK(work != NULL);
	FUZZ_CHECK(csv_init(&p, lim, record_cb, &r, work, size) == 0);
	while (at < len && !rc) {
		size_t n = len - at;
		if (mode == 1) {
			n = 1;
		} else if (mode == 2) {
			seed = seed * 1103515245u + 12345u;
			n = 1 + (seed >> 16) % 17;
			n = n < len - at ? n : len - at;
		}
		rc = csv_feed(&p, in + at, n);
		at += n;
	}
	if (!rc)
		rc = csv_finish(&p);
	FUZZ_CHECK(rc == 0 || rc == -EBADMSG);
	FUZZ_CHECK(csv_records(&p) == r.records);
	mix(&r, &rc, sizeof(rc));
	if (rc) {
		const struct csv_error *e = csv_last_error(&p);
		char msg[256];
		FUZZ_CHECK(e->kind != CSV_OK);
		FUZZ_CHECK(csv_error_message(e, msg, sizeof(msg)) > 0 && msg[0]);
		FUZZ_CHECK(csv_error_kind_str(e->kind) != NULL);
		FUZZ_CHECK(e->offset <= len);
		mix(&r, &e->kind, sizeof(e->kind));
		mix(&r, &e->row, sizeof(e->row));
		mix(&r, &e->line, sizeof(e->line));
		mix(&r, &e->field, sizeof(e->field));
		mix(&r, &e->offset, sizeof(e->offset));
		mix(&r, &e->limit, sizeof(e->limit));
		/* Errors are final. */
		FUZZ_CHECK(csv_feed(&p, "a\n", 2) == rc);
		FUZZ_CHECK(csv_finish(&p) == rc);
	}
	free(work);
	return r.digest;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct csv_limits lim;
	uint64_t whole;
	uint32_t seed;

	if (size < 4)
		return 0;
	lim.max_field_bytes = 1 + data[0] % 64u * 4u; /* 1..253 */
	lim.max_fields = 1 + data[1] % 16u;	      /* 1..16 */
	lim.max_record_bytes = 1 + data[2] * 4u;      /* 1..1021 */
	seed = data[3];
	data += 4;
	size -= 4;
	whole = parse(&lim, data, size, 0, 0);
	FUZZ_CHECK(parse(&lim, data, size, 2, seed) == whole);
	if (size <= 4096)
		FUZZ_CHECK(parse(&lim, data, size, 1, 0) == whole);
	return 0;
}
