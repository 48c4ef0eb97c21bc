/* REDIS_URL parsing (redis_url_parse() in redis_conn.h): no I/O. */
#include "redis_conn.h"

#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* Copies the percent-decoded text [p, p + n) into out (outlen bytes). Returns 0 or -EINVAL (a
 * bad escape, a NUL, too long). */
static int url_decode(const char *p, size_t n, char *out, size_t outlen)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		unsigned v = (unsigned char)p[i];
		if (p[i] == '%') {
			char hex[3] = { 0 };
			char *end;
			if (i + 2 >= n)
				return -EINVAL;
			memcpy(hex, p + i + 1, 2);
			v = (unsigned)strtoul(hex, &end, 16);
			if (*end || !isxdigit((unsigned char)hex[0]))
				return -EINVAL;
			i += 2;
		}
		if (v == 0 || o + 1 >= outlen)
			return -EINVAL;
		out[o++] = (char)v;
	}
	out[o] = '\0';
	return 0;
}

/* Parses a database number 0..65535 that ends the text. */
static int parse_db(const char *p, int *db)
{
	char *end;
	long v;

	if (*p < '0' || *p > '9')
		return -EINVAL;
	v = strtol(p, &end, 10);
	if (*end || v > 65535)
		return -EINVAL;
	*db = (int)v;
	return 0;
}

static int parse_unix(const char *p, struct redis_url *out)
{
	size_t n = strcspn(p, "?");

	if (*p != '/' || n >= sizeof(out->path))
		return -EINVAL;
	memcpy(out->path, p, n);
	out->path[n] = '\0';
	if (p[n] == '\0')
		return 0;
	if (strncmp(p + n, "?db=", 4) != 0)
		return -EINVAL;
	return parse_db(p + n + 4, &out->db);
}

static int parse_userinfo(const char *p, size_t n, struct redis_url *out)
{
	const char *colon = memchr(p, ':', n);
	size_t ulen = colon ? (size_t)(colon - p) : n;

	if (url_decode(p, ulen, out->user, sizeof(out->user)) < 0 ||
	    (colon &&
	     url_decode(colon + 1, n - ulen - 1, out->password, sizeof(out->password)) < 0))
		return -EINVAL;
	out->auth = out->user[0] || out->password[0];
	return 0;
}

static int parse_tcp(const char *p, struct redis_url *out)
{
	const char *at = strrchr(p, '@');
	size_t n;

	if (at) {
		if (parse_userinfo(p, (size_t)(at - p), out) < 0)
			return -EINVAL;
		p = at + 1;
	}
	if (*p == '[') { /* an IPv6 literal */
		const char *close = strchr(p, ']');
		if (!close)
			return -EINVAL;
		n = (size_t)(close - p - 1);
		if (n == 0 || n >= sizeof(out->host))
			return -EINVAL;
		memcpy(out->host, p + 1, n);
		p = close + 1;
	} else {
		n = strcspn(p, ":/?#");
		if (n == 0 || n >= sizeof(out->host))
			return -EINVAL;
		memcpy(out->host, p, n);
		p += n;
	}
	out->host[n] = '\0';
	for (const char *h = out->host; *h; h++)
		if ((unsigned char)*h <= ' ' || *h == '@')
			return -EINVAL;
	if (*p == ':') {
		char *end;
		long v;
		if (p[1] < '0' || p[1] > '9')
			return -EINVAL;
		v = strtol(p + 1, &end, 10);
		if (v < 1 || v > 65535 || (*end && *end != '/'))
			return -EINVAL;
		out->port = (int)v;
		p = end;
	}
	if (*p == '\0' || strcmp(p, "/") == 0)
		return 0;
	if (*p != '/')
		return -EINVAL;
	return parse_db(p + 1, &out->db);
}

int redis_url_parse(const char *url, struct redis_url *out)
{
	int rc;

	*out = (struct redis_url){ .port = 6379 };
	if (!url)
		return -EINVAL;
	if (strncmp(url, "unix://", 7) == 0)
		rc = parse_unix(url + 7, out);
	else if (strncmp(url, "redis://", 8) == 0)
		rc = parse_tcp(url + 8, out);
	else
		rc = -EINVAL;
	if (rc < 0)
		*out = (struct redis_url){ .port = 6379 };
	return rc;
}
