/* Host names resolved off the loop thread.
 *
 * getaddrinfo() blocks: a slow or unreachable DNS server would hold the caller for seconds. hiredis
 * (redisAsyncConnect) and libpq (PQconnectStart/PQconnectPoll) both call it on the caller's
 * thread when given a name, so the connection layers resolve names here first, with
 * uv_getaddrinfo() on libuv's thread pool, and connect to the numeric address (libpq: hostaddr=
 * beside host=, so TLS and .pgpass still see the name). Literal addresses, unix socket paths and
 * empty hosts need no lookup (resolve_is_name()).
 */
#ifndef DSP_RESOLVE_H
#define DSP_RESOLVE_H

#include <netinet/in.h>
#include <stdbool.h>
#include <uv.h>

#define RESOLVE_MAX 8 /* addresses kept per lookup, in getaddrinfo's order */

/* The numeric addresses of one name, as text ("127.0.0.1", "::1"), without duplicates. */
struct resolved {
	int n;
	char addr[RESOLVE_MAX][INET6_ADDRSTRLEN];
};

/* status 0 with r->n >= 1, or a libuv error (UV_EAI_NONAME, UV_EAI_AGAIN, ...; uv_strerror()
 * says it) with r NULL. Runs on the loop. */
typedef void (*resolve_cb)(int status, const struct resolved *r, void *data);

struct resolve;

/* Whether host is a name to look up: not empty, not a unix socket path ('/' or '@' first), not
 * an IPv4 or IPv6 literal. */
bool resolve_is_name(const char *host);

/* Starts looking host up (TCP addresses of any family). cb is called once on the loop, unless
 * resolve_cancel() is called first. *out identifies the lookup until cb runs. Returns 0,
 * -ENOMEM, or a libuv error (cb is then never called). */
int resolve_start(uv_loop_t *loop, const char *host, resolve_cb cb, void *data,
		  struct resolve **out);

/* Forgets a lookup whose cb has not run: cb is never called; the request is freed when libuv
 * hands it back (at once if it had not started; a getaddrinfo() already running on the pool
 * finishes first, so the loop runs until then). */
void resolve_cancel(struct resolve *r);

/* The address of each connect attempt of a connection to one host (Redis: hiredis takes one
 * address). A literal, a socket path or an empty host is used as it is; a name is looked up
 * (one lookup at a time) and its addresses are used one per attempt, in turn, then looked up
 * again. */
typedef void (*resolve_cursor_cb)(int status, const char *addr, void *data);

struct resolve_cursor {
	uv_loop_t *loop;
	const char *host; /* borrowed */
	resolve_cursor_cb cb;
	void *data;
	struct resolve *lookup; /* in flight, or NULL */
	bool waiting;		/* an attempt waits for it */
	struct resolved addrs;	/* from the last lookup */
	int next;		/* index of the next address to use; addrs.n: look up again */
	uint64_t lookups;	/* lookups started */
};

void resolve_cursor_init(struct resolve_cursor *c, uv_loop_t *loop, const char *host,
			 resolve_cursor_cb cb, void *data);

/* Starts an attempt: cb(0, addr) at once when an address is at hand, else after the lookup;
 * cb(< 0, NULL) when the lookup failed. */
void resolve_cursor_next(struct resolve_cursor *c);

/* The attempt gave up waiting (its deadline passed): cb is not called for it; a lookup in
 * flight goes on, and its addresses serve the next attempt. */
void resolve_cursor_abandon(struct resolve_cursor *c);

/* Forgets the addresses: the next attempt looks the name up again (after a connection that was
 * up is lost, so that a changed DNS entry is followed). */
void resolve_cursor_forget(struct resolve_cursor *c);

/* Cancels a lookup in flight; cb is never called again. */
void resolve_cursor_close(struct resolve_cursor *c);

#endif
