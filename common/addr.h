/* Addresses given as text in the configuration: a listening host:port and an http(s) URL.
 * Parsing only, no I/O (no name resolution). */
#ifndef DSP_ADDR_H
#define DSP_ADDR_H

#include <stddef.h>

/* Parses "host:port" where host is an IPv4 literal ("127.0.0.1") or a bracketed IPv6 literal
 * ("[::1]"), and port is 1..65535 in decimal, into host (NUL-terminated, without the brackets;
 * hostlen >= 46 holds any literal) and *port. Names are refused: the HTTP server binds numeric
 * addresses. Returns 0 or -EINVAL (nothing meaningful written). */
int addr_hostport_parse(const char *text, char *host, size_t hostlen, int *port);

/* Checks that text is an absolute http:// or https:// URL with a host (libcurl's URL parser).
 * Returns 0, or -EINVAL with a short reason in why (whylen bytes), or -ENOMEM. */
int addr_http_url_check(const char *text, char *why, size_t whylen);

#endif
