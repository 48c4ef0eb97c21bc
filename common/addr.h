/* Addresses given as text in the configuration: a listening host:port and an http(s) URL.
 * Parsing only, no I/O (no name resolution). */
#ifndef DSP_ADDR_H
#define DSP_ADDR_H

#include <stdbool.h>
#include <stddef.h>

/* Parses "host:port" where host is an IPv4 literal ("127.0.0.1") or a bracketed IPv6 literal
 * ("[::1]"), and port is 1..65535 in decimal, into host (NUL-terminated, without the brackets;
 * hostlen >= 46 holds any literal) and *port. Names are refused: the HTTP server binds numeric
 * addresses. Returns 0 or -EINVAL (nothing meaningful written). */
int addr_hostport_parse(const char *text, char *host, size_t hostlen, int *port);

/* True when host (an address literal as addr_hostport_parse() writes it, without brackets) is a
 * loopback address: IPv4 127.0.0.0/8, IPv6 ::1, or an IPv4-mapped 127.x (::ffff:127.0.0.1).
 * Anything else, the unspecified 0.0.0.0 and :: included, is not. */
bool addr_is_loopback(const char *host);

/* Checks that text is an absolute http:// or https:// URL with a host (libcurl's URL parser).
 * Returns 0, or -EINVAL with a short reason in why (whylen bytes), or -ENOMEM. */
int addr_http_url_check(const char *text, char *why, size_t whylen);

#endif
