#include "http_buf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void http_buf_free(struct http_buf *b)
{
	free(b->data);
	b->data = NULL;
	b->len = 0;
	b->cap = 0;
}

static int reserve(struct http_buf *b, size_t extra)
{
	size_t need = b->len + extra + 1;
	size_t cap = b->cap ? b->cap : 64;
	char *p;

	if (need <= b->cap)
		return 0;
	while (cap < need)
		cap *= 2;
	if (!(p = realloc(b->data, cap)))
		return -ENOMEM;
	b->data = p;
	b->cap = cap;
	return 0;
}

int http_buf_append(struct http_buf *b, const void *p, size_t len)
{
	if (reserve(b, len))
		return -ENOMEM;
	if (len)
		memcpy(b->data + b->len, p, len);
	b->len += len;
	b->data[b->len] = '\0';
	return 0;
}

int http_buf_puts(struct http_buf *b, const char *s)
{
	return http_buf_append(b, s, strlen(s));
}

int http_buf_printf(struct http_buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0)
		return -EINVAL;
	if (reserve(b, (size_t)n))
		return -ENOMEM;
	va_start(ap, fmt);
	vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	b->len += (size_t)n;
	return 0;
}

char *http_buf_take(struct http_buf *b)
{
	char *p = b->data;

	b->data = NULL;
	b->len = 0;
	b->cap = 0;
	return p;
}

const char *http_reason(int status)
{
	switch (status) {
	case 100:
		return "Continue";
	case 200:
		return "OK";
	case 201:
		return "Created";
	case 202:
		return "Accepted";
	case 204:
		return "No Content";
	case 400:
		return "Bad Request";
	case 401:
		return "Unauthorized";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 408:
		return "Request Timeout";
	case 409:
		return "Conflict";
	case 413:
		return "Content Too Large";
	case 414:
		return "URI Too Long";
	case 415:
		return "Unsupported Media Type";
	case 422:
		return "Unprocessable Content";
	case 429:
		return "Too Many Requests";
	case 431:
		return "Request Header Fields Too Large";
	case 500:
		return "Internal Server Error";
	case 501:
		return "Not Implemented";
	case 502:
		return "Bad Gateway";
	case 503:
		return "Service Unavailable";
	case 504:
		return "Gateway Timeout";
	case 505:
		return "HTTP Version Not Supported";
	default:
		return "Unknown";
	}
}
