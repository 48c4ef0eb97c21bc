/* An incremental multipart/form-data parser (RFC 7578 over RFC 2046), for the CSV upload
 * (POST /v2/batches/upload, route_batch_create.c). Pure: no I/O, no allocation; constant memory
 * whatever the body's size (the part headers are held, at most MULTIPART_HEADERS_MAX bytes).
 *
 * Fed chunks of any size, split anywhere (inside the boundary, a CRLF, the part headers); a
 * callback may ask to pause, and multipart_feed() then says how much it consumed, so the caller
 * keeps the rest for later.
 *
 *     multipart_init(&m, boundary, &cbs, ud);
 *     n = multipart_feed(&m, buf, len);   (n < len: paused by a callback; feed buf+n later)
 *     rc = multipart_finish(&m);          (the body's end: -EBADMSG unless it was complete)
 *
 * The grammar, and what is refused (-EBADMSG, with a message from multipart_error()):
 * - The body is an optional preamble, then "--boundary", then parts each ended by
 *   CRLF "--boundary", the last by CRLF "--boundary--", then an epilogue that is ignored.
 *   Transport padding (spaces, tabs) may follow a boundary before its CRLF.
 * - A part starts with header lines ending in an empty line (CRLF only; no folding), at most
 *   MULTIPART_HEADERS_MAX bytes. Content-Disposition must be form-data with a name; its
 *   filename, when there is one, is kept (without path: whatever follows the last '/' or '\';
 *   in a quoted value a backslash escapes only '"' and '\', so C:\Users\x\a.csv as old
 *   browsers send it, unescaped, is a.csv).
 *   Content-Type is kept as sent (parameters included). Other headers are ignored.
 * - The boundary (1 to 70 characters of RFC 2046's bchars, not ending with a space) is refused
 *   by multipart_init() otherwise (-EINVAL). A CR never occurs in it, which is what lets the
 *   matcher hand back a partial match as data on a mismatch without backtracking.
 */
#ifndef DSP_API_MULTIPART_H
#define DSP_API_MULTIPART_H

#include <stdbool.h>
#include <stddef.h>

#define MULTIPART_BOUNDARY_MAX 70
#define MULTIPART_HEADERS_MAX  4096 /* one part's header lines, bytes */
#define MULTIPART_PAUSE	       1    /* a data callback's answer: stop after this call */

struct multipart_part {
	char name[128];		/* the form field's name (cut to fit) */
	char filename[256];	/* "" when none (or when has_filename is false) */
	char content_type[128]; /* "" when the part has none */
	bool has_filename;	/* Content-Disposition carried a filename */
};

struct multipart_callbacks {
	/* A part's headers are read. Returns 0, or a negative error that stops the parser. */
	int (*part_begin)(const struct multipart_part *p, void *ud);
	/* Some of the part's content (len > 0, borrowed for the call). Returns 0, MULTIPART_PAUSE
	 * (taken; multipart_feed() returns now) or a negative error that stops the parser. */
	int (*part_data)(const char *buf, size_t len, void *ud);
	/* The part's content is complete. Returns 0 or a negative error. */
	int (*part_end)(void *ud);
};

struct multipart {
	char delim[4 + MULTIPART_BOUNDARY_MAX + 1]; /* "\r\n--" boundary */
	size_t dlen;
	size_t match; /* bytes of delim matched so far (held back) */
	int state;
	int err; /* the first error, final */
	char msg[120];
	struct multipart_part part;
	char hbuf[MULTIPART_HEADERS_MAX];
	size_t hlen;
	unsigned parts;
	const struct multipart_callbacks *cb;
	void *ud;
};

/* Sets up m for boundary (copied). Returns 0, or -EINVAL for a boundary RFC 2046 refuses. */
int multipart_init(struct multipart *m, const char *boundary, const struct multipart_callbacks *cb,
		   void *ud);

/* Parses up to len bytes of the body. Returns the number of bytes consumed: len, or fewer when
 * part_data asked for a pause (feed the rest, from buf + the count, later); or a negative error
 * (-EBADMSG: malformed, see multipart_error(); a callback's error as it returned it). Errors
 * are final. */
long multipart_feed(struct multipart *m, const char *buf, size_t len);

/* The end of the body: 0 when the closing boundary was read, else -EBADMSG (or the error
 * already met). */
int multipart_finish(struct multipart *m);

/* The message of the last -EBADMSG ("" otherwise). */
const char *multipart_error(const struct multipart *m);

/* Whether the closing boundary has been read (what follows is the ignored epilogue). */
bool multipart_done(const struct multipart *m);

/* Reads parameter name (case-insensitive) of a header value such as
 * `form-data; name="file"; filename="a.csv"` or `multipart/form-data; boundary=x` into out
 * (size bytes, unquoted, cut to fit). Returns true when found. */
bool multipart_param(const char *value, const char *name, char *out, size_t size);

/* Writes the media type of a Content-Type value ("text/csv" of "Text/CSV; charset=utf-8"),
 * lower-cased and trimmed, into out. */
void multipart_media_type(const char *value, char *out, size_t size);

#endif
