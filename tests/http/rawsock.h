/* Test helpers: blocking loopback sockets and a minimal HTTP/1.1 response reader, used from the
 * test thread while the code under test runs its libuv loop in another thread. */
#ifndef DSP_TEST_RAWSOCK_H
#define DSP_TEST_RAWSOCK_H

#include <stdbool.h>
#include <stddef.h>

struct raw_response {
	int status;	  /* 0 when nothing (or garbage) came back */
	char head[16384]; /* status line and headers, NUL-terminated */
	char *body;	  /* malloc'ed, NUL-terminated; free with raw_response_free() */
	size_t body_len;
	bool closed; /* the server closed the connection right after */
};

/* Connects to 127.0.0.1:port with a receive timeout of timeout_ms. Returns the fd or -1. */
int raw_connect(int port, int timeout_ms);

/* Sends all of s (len bytes). Returns 0 or -1. */
int raw_send(int fd, const char *s, size_t len);

/* Sends the NUL-terminated string s. Returns 0 or -1. */
int raw_send_str(int fd, const char *s);

/* Reads one response (Content-Length bodies only). Returns 0, or -1 on timeout/EOF before a
 * complete response. */
int raw_read_response(int fd, struct raw_response *r);

/* Reads the head of one response and no body, whatever its Content-Length says (the answer
 * to a HEAD, a 204 or a 304). Returns 0 or -1 like raw_read_response(). */
int raw_read_head(int fd, struct raw_response *r);

/* Closes fd with a reset (SO_LINGER {1, 0}) instead of a FIN. */
void raw_close_reset(int fd);

/* Returns true when the peer closes the connection (EOF or reset) within timeout. */
bool raw_wait_closed(int fd);

/* Returns the value of header name in r->head (case-insensitive) copied into out, or NULL. */
const char *raw_header(const struct raw_response *r, const char *name, char *out, size_t len);

void raw_response_free(struct raw_response *r);

#endif
