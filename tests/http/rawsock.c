#include "rawsock.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

/* Bytes read past the end of one response are kept per fd for the next call. */
#define MAX_FD 1024
static char *carry[MAX_FD];
static size_t carry_len[MAX_FD];

int raw_connect(int port, int timeout_ms)
{
	struct sockaddr_in a = { 0 };
	struct timeval tv = { timeout_ms / 1000, (timeout_ms % 1000) * 1000 };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || fd >= MAX_FD)
		return -1;
	a.sin_family = AF_INET;
	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&a, sizeof(a))) {
		close(fd);
		return -1;
	}
	free(carry[fd]);
	carry[fd] = NULL;
	carry_len[fd] = 0;
	return fd;
}

int raw_send(int fd, const char *s, size_t len)
{
	while (len) {
		ssize_t n = send(fd, s, len, MSG_NOSIGNAL);
		if (n <= 0)
			return -1;
		s += n;
		len -= (size_t)n;
	}
	return 0;
}

int raw_send_str(int fd, const char *s)
{
	return raw_send(fd, s, strlen(s));
}

const char *raw_header(const struct raw_response *r, const char *name, char *out, size_t len)
{
	size_t n = strlen(name);

	for (const char *p = strstr(r->head, "\r\n"); p && p[2]; p = strstr(p + 2, "\r\n")) {
		const char *line = p + 2;
		if (strncasecmp(line, name, n) == 0 && line[n] == ':') {
			const char *v = line + n + 1;
			while (*v == ' ')
				v++;
			size_t vl = strcspn(v, "\r\n");
			if (vl >= len)
				vl = len - 1;
			memcpy(out, v, vl);
			out[vl] = '\0';
			return out;
		}
	}
	return NULL;
}

/* Fills buf from carry, then the socket; returns bytes available or -1. */
static ssize_t fill(int fd, char *buf, size_t have, size_t cap)
{
	if (carry_len[fd]) {
		size_t n = carry_len[fd] < cap - have ? carry_len[fd] : cap - have;
		memcpy(buf + have, carry[fd], n);
		memmove(carry[fd], carry[fd] + n, carry_len[fd] - n);
		carry_len[fd] -= n;
		return (ssize_t)n;
	}
	ssize_t n = recv(fd, buf + have, cap - have, 0);
	return n;
}

static void keep(int fd, const char *p, size_t n)
{
	char *c = realloc(carry[fd], carry_len[fd] + n + 1);

	memmove(c + n, c, carry_len[fd]);
	memcpy(c, p, n);
	carry[fd] = c;
	carry_len[fd] += n;
}

/* Reads one response; with_body false: its head only (HEAD, 204, 304 carry no body). */
static int read_response(int fd, struct raw_response *r, bool with_body)
{
	static char buf[1 << 20];
	size_t have = 0;
	char *end = NULL;

	memset(r, 0, sizeof(*r));
	while (!(end = have ? strstr(buf, "\r\n\r\n") : NULL)) {
		ssize_t n = fill(fd, buf, have, sizeof(buf) - 1);
		if (n <= 0)
			return -1;
		have += (size_t)n;
		buf[have] = '\0';
	}
	size_t hlen = (size_t)(end - buf) + 4;
	memcpy(r->head, buf, hlen < sizeof(r->head) ? hlen : sizeof(r->head) - 1);
	r->head[hlen < sizeof(r->head) ? hlen : sizeof(r->head) - 1] = '\0';
	sscanf(buf, "HTTP/1.%*d %d", &r->status);
	char cl[32];
	size_t blen = with_body && raw_header(r, "Content-Length", cl, sizeof(cl))
			      ? strtoul(cl, NULL, 10)
			      : 0;
	while (have < hlen + blen) {
		ssize_t n = fill(fd, buf, have, sizeof(buf) - 1);
		if (n <= 0)
			return -1;
		have += (size_t)n;
	}
	r->body = malloc(blen + 1);
	memcpy(r->body, buf + hlen, blen);
	r->body[blen] = '\0';
	r->body_len = blen;
	if (have > hlen + blen)
		keep(fd, buf + hlen + blen, have - hlen - blen);
	return 0;
}

int raw_read_response(int fd, struct raw_response *r)
{
	return read_response(fd, r, true);
}

int raw_read_head(int fd, struct raw_response *r)
{
	return read_response(fd, r, false);
}

void raw_close_reset(int fd)
{
	struct linger l = { 1, 0 };

	setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	close(fd);
}

bool raw_wait_closed(int fd)
{
	char b[4096];

	if (carry_len[fd])
		return false;
	for (;;) {
		ssize_t n = recv(fd, b, sizeof(b), 0);
		if (n == 0 || (n < 0 && errno == ECONNRESET))
			return true;
		if (n < 0)
			return false; /* timeout */
	}
}

void raw_response_free(struct raw_response *r)
{
	free(r->body);
	r->body = NULL;
}
