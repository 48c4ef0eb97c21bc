/* A growable byte buffer and the small text helpers the HTTP server, client and their users
 * share: JSON string escaping and HTTP reason phrases. Pure (no I/O). */
#ifndef DSP_HTTP_BUF_H
#define DSP_HTTP_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct http_buf {
	char *data; /* owned; NUL-terminated whenever len > 0; NULL when empty */
	size_t len; /* bytes used, not counting the NUL */
	size_t cap; /* bytes allocated */
};

/* Empties the buffer and releases its memory. */
void http_buf_free(struct http_buf *b);

/* Appends len bytes. Returns 0 or -ENOMEM (the buffer is unchanged on failure). */
int http_buf_append(struct http_buf *b, const void *p, size_t len);

/* Appends a NUL-terminated string. Returns 0 or -ENOMEM. */
int http_buf_puts(struct http_buf *b, const char *s);

/* Appends printf-formatted text. Returns 0, -ENOMEM or -EINVAL. */
int http_buf_printf(struct http_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Hands the data to the caller (who frees it with free()) and empties the buffer. Returns
 * NULL when the buffer is empty. */
char *http_buf_take(struct http_buf *b);

/* Returns the reason phrase of a status ("Not Found"); "Unknown" for codes it does not know. */
const char *http_reason(int status);

#endif
