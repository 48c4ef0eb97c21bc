/* dispatcher/api/multipart.h: the incremental multipart/form-data parser of the CSV upload.
 * Every body is parsed whole, split in two at every byte, byte by byte, and with a pause asked
 * at every data callback; the parts must come out the same each way. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "multipart.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct seen {
	char out[4096]; /* "name|filename|type=data;" per part */
	size_t len;
	bool pause_each; /* answer MULTIPART_PAUSE to every data call */
};

static void put(struct seen *s, const char *buf, size_t len)
{
	assert_true(s->len + len < sizeof(s->out));
	memcpy(s->out + s->len, buf, len);
	s->len += len;
	s->out[s->len] = '\0';
}

static int on_begin(const struct multipart_part *p, void *ud)
{
	char b[1024];

	snprintf(b, sizeof(b), "%s|%s|%s=", p->name, p->has_filename ? p->filename : "-",
		 p->content_type);
	put(ud, b, strlen(b));
	return 0;
}

static int on_data(const char *buf, size_t len, void *ud)
{
	struct seen *s = ud;

	assert_true(len > 0);
	put(s, buf, len);
	return s->pause_each ? MULTIPART_PAUSE : 0;
}

static int on_end(void *ud)
{
	put(ud, ";", 1);
	return 0;
}

static const struct multipart_callbacks cbs = { on_begin, on_data, on_end };

/* Feeds body in the pieces given by cuts (sorted offsets), resuming after pauses. Returns
 * multipart_finish()'s answer or the first error. */
static int run(const char *boundary, const char *body, size_t len, const size_t *cuts, int ncuts,
	       bool pause_each, struct seen *s, struct multipart *m)
{
	size_t from = 0;

	memset(s, 0, sizeof(*s));
	s->pause_each = pause_each;
	assert_int_equal(multipart_init(m, boundary, &cbs, s), 0);
	for (int i = 0; i <= ncuts; i++) {
		size_t to = i < ncuts ? cuts[i] : len;
		for (int zero = 0; from < to;) {
			long n = multipart_feed(m, body + from, to - from);
			if (n < 0)
				return (int)n;
			/* 0 only when a pause came on bytes held from before (a partial
			 * boundary handed back as data): the next call goes on. */
			assert_true(n > 0 || (pause_each && zero++ == 0));
			if (n > 0)
				zero = 0;
			from += (size_t)n;
		}
	}
	return multipart_finish(m);
}

static void check_all_ways(const char *boundary, const char *body, const char *want)
{
	struct multipart m;
	struct seen s;
	size_t len = strlen(body);
	size_t *cuts = malloc(len * sizeof(*cuts));

	assert_int_equal(run(boundary, body, len, NULL, 0, false, &s, &m), 0);
	assert_string_equal(s.out, want);
	assert_int_equal(run(boundary, body, len, NULL, 0, true, &s, &m), 0);
	assert_string_equal(s.out, want);
	for (size_t c = 1; c < len; c++) {
		assert_int_equal(run(boundary, body, len, &c, 1, c % 2 == 0, &s, &m), 0);
		assert_string_equal(s.out, want);
	}
	for (size_t i = 0; i + 1 < len; i++)
		cuts[i] = i + 1;
	assert_int_equal(run(boundary, body, len, cuts, (int)len - 1, false, &s, &m), 0);
	assert_string_equal(s.out, want);
	free(cuts);
}

static void parts_any_split(void **state)
{
	(void)state;
	/* Two parts; the file's content holds near-boundaries ("\r\n--", "\r\n--bn", "\r\r\n--b"),
	 * the preamble and epilogue are dropped, padding after a boundary is allowed. */
	check_all_ways(
		"bnd",
		"preamble\r\n--bnd\r\nContent-Disposition: form-data; name=\"campaign_id\"\r\n"
		"\r\ncmp-a\r\n--bnd  \r\nContent-Disposition: form-data; name=\"file\"; "
		"filename=\"C:\\\\x\\\\a.csv\"\r\nContent-Type: text/csv\r\n\r\nphone\r\n--"
		"\r\n--bn\r\r\n--b+1\r\n\r\n--bnd--\r\nepilogue\r\n--bnd\r\n",
		"campaign_id|-|=cmp-a;file|a.csv|text/csv=phone\r\n--\r\n--bn\r\r\n--b+1"
		"\r\n;");
	/* A full Windows path longer than the name kept (256 bytes): its last segment still. */
	{
		char body[2048], dir[400];
		memset(dir, 'd', sizeof(dir) - 1);
		dir[sizeof(dir) - 1] = '\0';
		snprintf(body, sizeof(body),
			 "--bnd\r\nContent-Disposition: form-data; name=\"file\"; "
			 "filename=\"C:\\\\%s\\\\list.csv\"\r\n\r\nphone\r\n--bnd--",
			 dir);
		check_all_ways("bnd", body, "file|list.csv|=phone;");
	}
	/* The body starting with the boundary; an empty part. */
	check_all_ways("x'()+_,-./:=?y",
		       "--x'()+_,-./:=?y\r\ncontent-disposition: form-data; name=e\r\n\r\n"
		       "\r\n--x'()+_,-./:=?y--",
		       "e|-|=;");
}

static void malformed(void **state)
{
	struct multipart m;
	struct seen s;
	const char *bad[] = {
		"--b\r\nContent-Disposition: form-data; name=f\r\n\r\ndata",	    /* no end */
		"no boundary at all",						    /* none */
		"--b\r\nContent-Type: text/csv\r\n\r\nx\r\n--b--",		    /* no CD */
		"--b\r\nContent-Disposition: attachment; name=f\r\n\r\nx\r\n--b--", /* not form */
		"--b\r\nContent-Disposition: form-data\r\n\r\nx\r\n--b--",	    /* no name */
		"--b\r\nContent-Disposition: form-data; name=f\r\n folded\r\n\r\nx\r\n--b--",
		"--bX\r\n", /* junk */
		"--b-x",    /* one dash */
		"--b\rx",   /* CR alone */
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = run("b", bad[i], strlen(bad[i]), NULL, 0, false, &s, &m);
		if (rc != -EBADMSG)
			fail_msg("case %zu: %d", i, rc);
		assert_true(multipart_error(&m)[0] != '\0');
		/* Errors are final. */
		assert_int_equal(multipart_feed(&m, "x", 1), -EBADMSG);
	}
	/* A headers block over the limit. */
	size_t n = MULTIPART_HEADERS_MAX + 64;
	char *big = malloc(n + 16);
	memcpy(big, "--b\r\nX: ", 8);
	memset(big + 8, 'a', n - 8);
	assert_int_equal(run("b", big, n, NULL, 0, false, &s, &m), -EBADMSG);
	free(big);
	/* Boundaries RFC 2046 refuses. */
	assert_int_equal(multipart_init(&m, "", &cbs, &s), -EINVAL);
	assert_int_equal(multipart_init(&m, "a\rb", &cbs, &s), -EINVAL);
	assert_int_equal(multipart_init(&m, "ends with space ", &cbs, &s), -EINVAL);
	char longb[80];
	memset(longb, 'a', 71);
	longb[71] = '\0';
	assert_int_equal(multipart_init(&m, longb, &cbs, &s), -EINVAL);
	longb[70] = '\0';
	assert_int_equal(multipart_init(&m, longb, &cbs, &s), 0);
}

static void params(void **state)
{
	char out[64], mt[64];
	(void)state;

	assert_true(multipart_param("multipart/form-data; boundary=\"a b\\\"c\"", "boundary", out,
				    sizeof(out)));
	assert_string_equal(out, "a b\"c");
	assert_true(multipart_param("multipart/form-data;BOUNDARY=xyz;charset=x", "boundary", out,
				    sizeof(out)));
	assert_string_equal(out, "xyz");
	assert_false(multipart_param("text/csv", "charset", out, sizeof(out)));
	/* A Windows path as old browsers send it, backslashes unescaped: kept (the part's
	 * filename is then its last segment); only \" and \\ are escapes. */
	assert_true(multipart_param("form-data; name=\"file\"; filename=\"C:\\Users\\x\\a.csv\"",
				    "filename", out, sizeof(out)));
	assert_string_equal(out, "C:\\Users\\x\\a.csv");
	assert_true(multipart_param("form-data; filename=\"a\\\\b\\\"c\\d\"", "filename", out,
				    sizeof(out)));
	assert_string_equal(out, "a\\b\"c\\d");
	assert_false(
		multipart_param("form-data; filename*=UTF-8''a.csv", "filename", out, sizeof(out)));
	multipart_media_type("  Text/CSV ; charset=utf-8", mt, sizeof(mt));
	assert_string_equal(mt, "text/csv");
	multipart_media_type(NULL, mt, sizeof(mt));
	assert_string_equal(mt, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(parts_any_split),
		cmocka_unit_test(malformed),
		cmocka_unit_test(params),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
