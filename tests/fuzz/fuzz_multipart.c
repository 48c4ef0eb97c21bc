/* Fuzz target: the CSV upload's multipart/form-data parser (dispatcher/api/multipart.h).
 *
 * Input: 1 byte of parameters (the boundary's length, 1..16, taken from the next bytes, and
 * whether data callbacks pause), the boundary, then the body.
 * Properties: no crash and no read or write outside the parser; every part's content within the
 * body's bytes; the same parts, contents and outcome (digest) whether the body comes whole, in
 * chunks cut at pseudo-random places, or byte by byte; a feed never claims more than it was
 * given; errors final. */
#include "fuzz.h"

#include "multipart.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

struct run {
	uint64_t digest;
	bool pause;
	size_t data_bytes, body_len;
};

static void mix(struct run *r, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		r->digest = (r->digest ^ b[i]) * 1099511628211ULL;
}

static int on_begin(const struct multipart_part *p, void *ud)
{
	struct run *r = ud;

	FUZZ_CHECK(memchr(p->name, '\0', sizeof(p->name)) &&
		   memchr(p->filename, '\0', sizeof(p->filename)) &&
		   memchr(p->content_type, '\0', sizeof(p->content_type)));
	mix(r, "B", 1);
	mix(r, p->name, strlen(p->name) + 1);
	mix(r, p->filename, strlen(p->filename) + 1);
	mix(r, p->content_type, strlen(p->content_type) + 1);
	return 0;
}

static int on_data(const char *buf, size_t len, void *ud)
{
	struct run *r = ud;

	FUZZ_CHECK(len > 0);
	r->data_bytes += len;
	FUZZ_CHECK(r->data_bytes <= r->body_len);
	mix(r, buf, len);
	return r->pause ? MULTIPART_PAUSE : 0;
}

static int on_end(void *ud)
{
	mix(ud, "E", 1);
	return 0;
}

static const struct multipart_callbacks cbs = { on_begin, on_data, on_end };

/* Parses body in pieces of at most step bytes (0: pseudo-random sizes from seed). Returns the
 * digest of everything seen and the outcome. */
static uint64_t parse(const char *boundary, const uint8_t *body, size_t len, size_t step,
		      bool pause)
{
	static struct multipart m; /* 4 KiB of header room: off the stack */
	struct run r = { .digest = 14695981039346656037ULL, .pause = pause, .body_len = len };
	uint64_t seed = len * 2654435761u + 1;
	size_t off = 0;
	long rc = 0;

	if (multipart_init(&m, boundary, &cbs, &r))
		return 1;
	while (off < len && rc >= 0) {
		size_t n = step;
		if (!n) {
			seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
			n = 1 + (size_t)(seed >> 33) % 97;
		}
		if (n > len - off)
			n = len - off;
		for (size_t done = 0, zero = 0; done < n;) {
			rc = multipart_feed(&m, (const char *)body + off + done, n - done);
			if (rc < 0)
				break;
			FUZZ_CHECK((size_t)rc <= n - done);
			FUZZ_CHECK(rc > 0 || (pause && zero++ == 0));
			if (rc > 0)
				zero = 0;
			done += (size_t)rc;
		}
		off += n;
	}
	if (rc >= 0)
		rc = multipart_finish(&m);
	else
		FUZZ_CHECK(multipart_feed(&m, "x", 1) == rc && multipart_finish(&m) == rc);
	FUZZ_CHECK(rc == 0 || rc == -EBADMSG);
	mix(&r, &rc, sizeof(rc));
	return r.digest;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char boundary[17];

	if (size < 2)
		return 0;
	size_t blen = 1 + (data[0] & 15);
	bool pause = data[0] & 16;
	if (size < 1 + blen)
		return 0;
	memcpy(boundary, data + 1, blen);
	boundary[blen] = '\0';
	const uint8_t *body = data + 1 + blen;
	size_t len = size - 1 - blen;
	uint64_t whole = parse(boundary, body, len, len ? len : 1, false);
	FUZZ_CHECK(parse(boundary, body, len, 0, pause) == whole);
	FUZZ_CHECK(parse(boundary, body, len, 1, !pause) == whole);
	return 0;
}
