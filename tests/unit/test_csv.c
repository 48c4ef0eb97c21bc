/* The streaming CSV parser (common/csv.h): the grammar, every error kind with its row, the
 * limits at, below and above, the same records whatever the chunking, and a random round trip.
 * The work area comes from cmocka's test_malloc, so a leak or an overrun fails. */
#include "csv.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#define OUT_MAX 8192

/* Records rendered as text: "R<row>[h]:" then "<len>[q]<bytes>|" per field, then "\n". */
struct sink {
	char out[OUT_MAX];
	size_t n;
	int stop_at_row; /* the callback answers -ECANCELED at this row (0: never) */
};

static void put(struct sink *s, const char *fmt, ...)
{
	va_list ap;
	int w;

	va_start(ap, fmt);
	w = vsnprintf(s->out + s->n, OUT_MAX - s->n, fmt, ap);
	va_end(ap);
	assert_true(w >= 0 && (size_t)w < OUT_MAX - s->n);
	s->n += (size_t)w;
}

static int sink_cb(const struct csv_record *rec, void *ud)
{
	struct sink *s = ud;

	if (s->stop_at_row && rec->row == (uint64_t)s->stop_at_row)
		return -ECANCELED;
	put(s, "R%llu%s:", (unsigned long long)rec->row, rec->header ? "h" : "");
	for (uint32_t i = 0; i < rec->n_fields; i++) {
		const struct csv_field *f = &rec->field[i];

		assert_int_equal(strlen(f->data), f->len);
		put(s, "%u%s", f->len, f->quoted ? "q" : "");
		assert_true(s->n + f->len + 2 < OUT_MAX);
		memcpy(s->out + s->n, f->data, f->len);
		s->n += f->len;
		put(s, "|");
	}
	put(s, "\n");
	return 0;
}

static const struct csv_limits roomy = { .max_field_bytes = 256,
					 .max_fields = 16,
					 .max_record_bytes = 1024 };

/* Parses in (len bytes) cut at the cuts[] offsets (ascending), renders the records into s and,
 * on an error, appends "E<kind> row line field offset". Returns what the parser returned. */
static int parse_cut(const struct csv_limits *lim, const char *in, size_t len, const size_t *cuts,
		     size_t n_cuts, struct sink *s, struct csv_error *err)
{
	struct csv_parser p;
	size_t size = csv_work_size(lim), at = 0;
	void *work = test_malloc(size);
	int rc;

	assert_int_equal(csv_init(&p, lim, sink_cb, s, work, size), 0);
	rc = 0;
	for (size_t i = 0; i <= n_cuts && !rc; i++) {
		size_t end = i < n_cuts ? cuts[i] : len;

		rc = csv_feed(&p, in + at, end - at);
		at = end;
	}
	if (!rc)
		rc = csv_finish(&p);
	if (rc == -EBADMSG) {
		const struct csv_error *e = csv_last_error(&p);

		put(s, "E%d row %llu line %llu field %u offset %llu", (int)e->kind,
		    (unsigned long long)e->row, (unsigned long long)e->line, e->field,
		    (unsigned long long)e->offset);
		if (err)
			*err = *e;
		/* Errors are final. */
		assert_int_equal(csv_feed(&p, "x", 1), -EBADMSG);
		assert_int_equal(csv_finish(&p), -EBADMSG);
	}
	test_free(work);
	return rc;
}

static int parse(const struct csv_limits *lim, const char *in, struct sink *s,
		 struct csv_error *err)
{
	memset(s, 0, sizeof(*s));
	return parse_cut(lim, in, strlen(in), NULL, 0, s, err);
}

static void expect_records(const char *in, const char *want)
{
	struct sink s;

	assert_int_equal(parse(&roomy, in, &s, NULL), 0);
	assert_string_equal(s.out, want);
}

static void grammar(void **state)
{
	(void)state;
	expect_records("phone,name\n+14155550100,Ann\n",
		       "R1h:5phone|4name|\nR2:12+14155550100|3Ann|\n");
	/* CRLF, lone CR, no line end at the end. */
	expect_records("a,b\r\nc,d\re,f", "R1h:1a|1b|\nR2:1c|1d|\nR3:1e|1f|\n");
	/* Quoted: commas, doubled quotes, line ends inside; empty quoted field. */
	expect_records("\"a,b\",\"say \"\"hi\"\"\",\"l1\r\nl2\",\"\"\n",
		       "R1h:3qa,b|8qsay \"hi\"|6ql1\r\nl2|0q|\n");
	/* Empty fields, a trailing comma, spaces kept. */
	expect_records(",a,, b ,\n", "R1h:0|1a|0|3 b |0|\n");
	/* Blank lines are skipped but take a row number; the header flag is the first record. */
	expect_records("\n\nh\n\r\nx\n\n", "R3h:1h|\nR5:1x|\n");
	/* A lone "" is one empty field, not a blank line. */
	expect_records("h\n\"\"\n", "R1h:1h|\nR2:0q|\n");
	/* A leading byte order mark is skipped; one later is content. */
	expect_records("\xEF\xBB\xBFh,\"q\"\n\xEF\xBB\xBF\n", "R1h:1h|1qq|\nR2:3\xEF\xBB\xBF|\n");
	/* Bytes that start like a mark but are not one are content. */
	expect_records("\xEF\xBB\x80x\n", "R1h:4\xEF\xBB\x80x|\n");
	expect_records("\xEF\x80\x80\n", "R1h:3\xEF\x80\x80|\n");
	/* UTF-8 of every length, up to U+10FFFF. */
	expect_records("\xC3\xA9,\xE2\x82\xAC,\xF0\x9F\x98\x80,\xF4\x8F\xBF\xBF\n",
		       "R1h:2\xC3\xA9|3\xE2\x82\xAC|4\xF0\x9F\x98\x80|4\xF4\x8F\xBF\xBF|\n");
	/* Empty input, only a mark, only blank lines: no record. */
	expect_records("", "");
	expect_records("\xEF\xBB\xBF", "");
	expect_records("\r\n\n", "");
}

struct bad_case {
	const char *in;
	enum csv_error_kind kind;
	unsigned row, line, field, offset;
};

static void check_bad(const struct csv_limits *lim, const struct bad_case *c)
{
	struct sink s;
	struct csv_error e;
	char msg[256], rowtxt[32];

	print_message("bad: %zu bytes\n", strlen(c->in));
	assert_int_equal(parse(lim, c->in, &s, &e), -EBADMSG);
	assert_int_equal(e.kind, c->kind);
	assert_int_equal(e.row, c->row);
	assert_int_equal(e.line, c->line);
	assert_int_equal(e.field, c->field);
	assert_int_equal(e.offset, c->offset);
	assert_true(csv_error_message(&e, msg, sizeof(msg)) > 0);
	snprintf(rowtxt, sizeof(rowtxt), "row %u", c->row);
	assert_non_null(strstr(msg, rowtxt));
}

static void every_error_names_its_row(void **state)
{
	static const struct bad_case cases[] = {
		/* bytes after a closing quote */
		{ "h\nok\n\"x\"y,z\n", CSV_EAFTER_QUOTE, 3, 3, 1, 8 },
		{ "h\na,\"x\" \n", CSV_EAFTER_QUOTE, 2, 2, 2, 7 },
		/* a quote never closed: the row and line where it opened */
		{ "h\nb\nc,\"open\nmore\n", CSV_EUNTERMINATED, 3, 3, 2, 6 },
		/* a quote inside an unquoted field */
		{ "h\nab\"c\n", CSV_EBARE_QUOTE, 2, 2, 1, 4 },
		/* not UTF-8: bad continuation, lone continuation, overlong, surrogate, too high,
		 * a byte never used, a sequence cut by a line end and by the end of input */
		{ "h\nok\n\xC3\x28\n", CSV_EUTF8, 3, 3, 1, 6 },
		{ "h\n\x80\n", CSV_EUTF8, 2, 2, 1, 2 },
		{ "h\n\xC0\xAF\n", CSV_EUTF8, 2, 2, 1, 2 },
		{ "h\n\xE0\x80\xAF\n", CSV_EUTF8, 2, 2, 1, 3 },
		{ "h\n\xED\xA0\x80\n", CSV_EUTF8, 2, 2, 1, 3 },
		{ "h\n\xF4\x90\x80\x80\n", CSV_EUTF8, 2, 2, 1, 3 },
		{ "h\na,\xFF\n", CSV_EUTF8, 2, 2, 2, 4 },
		{ "h\n\xE2\x82\n", CSV_EUTF8, 2, 2, 1, 4 },
		{ "h\nx,\xE2\x82", CSV_EUTF8, 2, 2, 2, 6 },
		/* row and line differ after a quoted field that holds a line end */
		{ "h\n\"a\nb\",x\n\"c\"d\n", CSV_EAFTER_QUOTE, 3, 4, 1, 13 },
		{ "h\r\n\"a\r\nb\",x\r\n\"c\"d\r\n", CSV_EAFTER_QUOTE, 3, 4, 1, 16 },
		{ "h\r\"a\rb\",x\r\"c\"d\r", CSV_EAFTER_QUOTE, 3, 4, 1, 13 },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		check_bad(&roomy, &cases[i]);
}

static void nul_byte_names_its_row(void **state)
{
	static const char in[] = "h\nab\0c\n";
	struct sink s = { 0 };
	struct csv_error e;

	(void)state;
	assert_int_equal(parse_cut(&roomy, in, sizeof(in) - 1, NULL, 0, &s, &e), -EBADMSG);
	assert_int_equal(e.kind, CSV_ENUL);
	assert_int_equal(e.row, 2);
	assert_int_equal(e.field, 1);
	assert_int_equal(e.offset, 4);
	/* Inside quotes too. */
	memset(&s, 0, sizeof(s));
	assert_int_equal(parse_cut(&roomy, "\"\0\"", 3, NULL, 0, &s, &e), -EBADMSG);
	assert_int_equal(e.kind, CSV_ENUL);
	assert_int_equal(e.row, 1);
}

/* max_field_bytes 5, max_fields 3, max_record_bytes 12. */
static const struct csv_limits tight = { .max_field_bytes = 5,
					 .max_fields = 3,
					 .max_record_bytes = 12 };

static void limits_at_below_above(void **state)
{
	static const struct bad_case over[] = {
		{ "h\nabcdef\n", CSV_EFIELD_LONG, 2, 2, 1, 7 },
		/* a quoted field's content counts, "" as one byte */
		{ "h\n\"a\"\"bcd\"\"\"\n", CSV_EFIELD_LONG, 2, 2, 1, 10 },
		{ "h\na,b,c,d\n", CSV_EFIELDS, 2, 2, 4, 7 },
		{ "h\n,,,\n", CSV_EFIELDS, 2, 2, 4, 4 },
		/* the record counts bytes as written: 13 here (quotes and commas) */
		{ "h\n\"abc\",\"def\",\"\n", CSV_ERECORD_LONG, 2, 2, 3, 14 },
		{ "h\nabcde,abcde,x\n", CSV_ERECORD_LONG, 2, 2, 3, 14 },
	};
	struct sink s;
	struct csv_error e;
	char msg[256];

	(void)state;
	/* Below and at each limit. */
	assert_int_equal(parse(&tight, "abcd\nabcde\n\"a\"\"bcd\"\n", &s, NULL), 0);
	assert_string_equal(s.out, "R1h:4abcd|\nR2:5abcde|\nR3:5qa\"bcd|\n");
	assert_int_equal(parse(&tight, "a,b\na,b,c\n", &s, NULL), 0);
	assert_string_equal(s.out, "R1h:1a|1b|\nR2:1a|1b|1c|\n");
	assert_int_equal(parse(&tight, "abcd,abcd,x\nabcde,abcde,\n", &s, NULL), 0);
	assert_string_equal(s.out, "R1h:4abcd|4abcd|1x|\nR2:5abcde|5abcde|0|\n");
	/* Above. */
	for (size_t i = 0; i < sizeof(over) / sizeof(over[0]); i++)
		check_bad(&tight, &over[i]);
	/* The message says the limit, and hints at a missing quote inside one. */
	assert_int_equal(parse(&tight, "h\n\"abc\ndef\n", &s, &e), -EBADMSG);
	csv_error_message(&e, msg, sizeof(msg));
	assert_string_equal(msg, "row 2 (line 3), field 1: field longer than 5 bytes (inside a "
				 "quoted field: is its closing quote missing?)");
	/* A record that reaches its limit at an opening quote is not "inside" one. */
	assert_int_equal(parse(&tight, "h\nabcde,abcde,\"x\"\n", &s, &e), -EBADMSG);
	csv_error_message(&e, msg, sizeof(msg));
	assert_string_equal(msg, "row 2, field 3: row longer than 12 bytes");
	assert_int_equal(parse(&tight, "h\na,b,c,d\n", &s, &e), -EBADMSG);
	csv_error_message(&e, msg, sizeof(msg));
	assert_string_equal(msg, "row 2, field 4: more than 3 fields");
}

static void init_and_misuse(void **state)
{
	struct csv_limits zero = tight;
	struct csv_parser p;
	struct sink s = { 0 };
	size_t size = csv_work_size(&tight);
	char *work = test_malloc(size + 8);

	(void)state;
	/* The work area depends only on the limits. */
	assert_int_equal(size, 3 * sizeof(struct csv_field) + 13);
	zero.max_fields = 0;
	assert_int_equal(csv_work_size(&zero), 0);
	assert_int_equal(csv_init(&p, &zero, sink_cb, &s, work, size), -EINVAL);
	assert_int_equal(csv_init(&p, &tight, NULL, &s, work, size), -EINVAL);
	assert_int_equal(csv_init(&p, &tight, sink_cb, &s, work, size - 1), -ENOBUFS);
	assert_int_equal(csv_init(&p, &tight, sink_cb, &s, work + 1, size), -EINVAL);
	assert_int_equal(csv_init(&p, &tight, sink_cb, &s, work, size), 0);
	assert_int_equal(csv_feed(&p, NULL, 1), -EINVAL);
	assert_int_equal(csv_feed(&p, NULL, 0), 0);
	assert_int_equal(csv_feed(&p, "a\nb", 3), 0);
	assert_int_equal(csv_records(&p), 1);
	assert_int_equal(csv_finish(&p), 0);
	assert_int_equal(csv_records(&p), 2);
	assert_int_equal(csv_last_error(&p)->kind, CSV_OK);
	assert_int_equal(csv_finish(&p), -EINVAL);
	assert_int_equal(csv_feed(&p, "c", 1), -EINVAL);
	/* A callback's code stops the parser for good. */
	memset(&s, 0, sizeof(s));
	s.stop_at_row = 2;
	assert_int_equal(csv_init(&p, &tight, sink_cb, &s, work, size), 0);
	assert_int_equal(csv_feed(&p, "a\nb\nc\n", 6), -ECANCELED);
	assert_int_equal(csv_feed(&p, "d\n", 2), -ECANCELED);
	assert_int_equal(csv_finish(&p), -ECANCELED);
	assert_string_equal(s.out, "R1h:1a|\n");
	test_free(work);
}

/* Inputs whose chunking is tricky: quotes, "", CRLF, UTF-8 and the mark across chunks, and
 * errors found at a chunk's edge. */
static const char *const tricky[] = {
	"\xEF\xBB\xBFph,\"a \"\"q\"\" b\"\r\n\"x\r\ny\",\xE2\x82\xAC\r\n\r\nlast,\"\"",
	"a,\"\"\"\",\"\"\r\rb\n\"c,d\"\r\n",
	"\xEF\xBB\x80,\xF0\x9F\x98\x80\r\n\"\xC3\xA9\"\"\",\n",
	"h\r\n\"ok\",\"bad\"x\n",
	"h\n\"never closed\r\n",
	"h\n\xF0\x9F\x98\n",
	"h\nabc\"d\n",
	"h\n"
	"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa,b\n",
};

static void same_records_at_every_cut(void **state)
{
	static const struct csv_limits lim = { .max_field_bytes = 64,
					       .max_fields = 4,
					       .max_record_bytes = 80 };
	struct sink whole, cut;
	size_t cuts[2];

	(void)state;
	for (size_t t = 0; t < sizeof(tricky) / sizeof(tricky[0]); t++) {
		const char *in = tricky[t];
		size_t len = strlen(in);
		int rc = parse(&lim, in, &whole, NULL);

		print_message("tricky %zu: rc %d\n%s\n", t, rc, whole.out);
		/* Two chunks, cut at every offset (empty chunks included). */
		for (size_t i = 0; i <= len; i++) {
			memset(&cut, 0, sizeof(cut));
			cuts[0] = i;
			assert_int_equal(parse_cut(&lim, in, len, cuts, 1, &cut, NULL), rc);
			assert_string_equal(cut.out, whole.out);
		}
		/* Three chunks, every pair of cuts. */
		for (size_t i = 0; i <= len; i++) {
			for (size_t j = i; j <= len; j++) {
				memset(&cut, 0, sizeof(cut));
				cuts[0] = i;
				cuts[1] = j;
				assert_int_equal(parse_cut(&lim, in, len, cuts, 2, &cut, NULL), rc);
				assert_string_equal(cut.out, whole.out);
			}
		}
	}
}

/* --- random round trip ----------------------------------------------------------------- */

#define RT_RECORDS    3000
#define RT_MAX_FIELDS 8
#define RT_MAX_FIELD  24

static uint64_t rnd(uint64_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 7;
	*s ^= *s << 17;
	return *s;
}

/* Pieces a field is made of: ASCII, the characters CSV must quote, UTF-8 of each length. */
static const char *const pieces[] = { "a",
				      "Z",
				      "7",
				      " ",
				      ",",
				      "\"",
				      "\r",
				      "\n",
				      "\r\n",
				      "\xC3\xA9",
				      "\xE2\x82\xAC",
				      "\xF0\x9F\x98\x80",
				      "+" };

struct rt_field {
	char data[RT_MAX_FIELD * 4 + 1];
	uint32_t len;
};

struct rt_record {
	uint32_t n;
	struct rt_field f[RT_MAX_FIELDS];
};

struct rt_check {
	const struct rt_record *want;
	size_t next;
};

static int rt_cb(const struct csv_record *rec, void *ud)
{
	struct rt_check *c = ud;
	const struct rt_record *w = &c->want[c->next];

	assert_true(c->next < RT_RECORDS);
	assert_int_equal(rec->row, c->next + 1);
	assert_int_equal(rec->n_fields, w->n);
	for (uint32_t i = 0; i < w->n; i++) {
		assert_int_equal(rec->field[i].len, w->f[i].len);
		assert_memory_equal(rec->field[i].data, w->f[i].data, w->f[i].len);
	}
	c->next++;
	return 0;
}

static size_t encode_field(const struct rt_field *f, bool force_quote, char *out)
{
	bool quote = force_quote || f->len == 0 || strpbrk(f->data, ",\"\r\n") != NULL;
	size_t n = 0;

	if (!quote) {
		memcpy(out, f->data, f->len);
		return f->len;
	}
	out[n++] = '"';
	for (uint32_t i = 0; i < f->len; i++) {
		if (f->data[i] == '"')
			out[n++] = '"';
		out[n++] = f->data[i];
	}
	out[n++] = '"';
	return n;
}

static void random_round_trip(void **state)
{
	static const struct csv_limits lim = { .max_field_bytes = RT_MAX_FIELD * 4,
					       .max_fields = RT_MAX_FIELDS,
					       .max_record_bytes = 2048 };
	size_t cap = (size_t)RT_RECORDS * RT_MAX_FIELDS * (RT_MAX_FIELD * 8 + 3) + 4;
	struct rt_record *want = test_malloc(RT_RECORDS * sizeof(*want));
	char *csv = test_malloc(cap);
	size_t len = 0, size = csv_work_size(&lim);
	void *work = test_malloc(size);
	uint64_t seed = 0x2545F4914F6CDD1DULL;
	struct rt_check check = { .want = want };
	struct csv_parser p;

	(void)state;
	for (size_t r = 0; r < RT_RECORDS; r++) {
		struct rt_record *rec = &want[r];

		rec->n = 1 + (uint32_t)(rnd(&seed) % RT_MAX_FIELDS);
		for (uint32_t i = 0; i < rec->n; i++) {
			struct rt_field *f = &rec->f[i];
			uint32_t k = (uint32_t)(rnd(&seed) % (RT_MAX_FIELD + 1));

			f->len = 0;
			for (uint32_t j = 0; j < k; j++) {
				const char *pc =
					pieces[rnd(&seed) % (sizeof(pieces) / sizeof(pieces[0]))];

				memcpy(f->data + f->len, pc, strlen(pc));
				f->len += (uint32_t)strlen(pc);
			}
			f->data[f->len] = '\0';
			if (i)
				csv[len++] = ',';
			len += encode_field(f, rnd(&seed) % 5 == 0, csv + len);
		}
		/* Line ends: CRLF, LF, CR; the last record sometimes has none. */
		if (r + 1 < RT_RECORDS || rnd(&seed) % 2) {
			switch (rnd(&seed) % 3) {
			case 0:
				csv[len++] = '\r';
				csv[len++] = '\n';
				break;
			case 1:
				csv[len++] = '\n';
				break;
			default:
				csv[len++] = '\r';
				break;
			}
		}
		assert_true(len < cap);
	}
	/* Parse in random chunks of 1 to 40 bytes, three times over with different cuts. */
	for (int round = 0; round < 3; round++) {
		check.next = 0;
		assert_int_equal(csv_init(&p, &lim, rt_cb, &check, work, size), 0);
		for (size_t at = 0; at < len;) {
			size_t n = 1 + (size_t)(rnd(&seed) % 40);

			if (n > len - at)
				n = len - at;
			assert_int_equal(csv_feed(&p, csv + at, n), 0);
			at += n;
		}
		assert_int_equal(csv_finish(&p), 0);
		assert_int_equal(check.next, RT_RECORDS);
	}
	test_free(work);
	test_free(csv);
	test_free(want);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(grammar),
		cmocka_unit_test(every_error_names_its_row),
		cmocka_unit_test(nul_byte_names_its_row),
		cmocka_unit_test(limits_at_below_above),
		cmocka_unit_test(init_and_misuse),
		cmocka_unit_test(same_records_at_every_cut),
		cmocka_unit_test(random_round_trip),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
