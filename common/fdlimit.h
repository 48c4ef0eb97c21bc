/* The process's file-descriptor limit: raised at start, and the connection caps sized under it
 * (a full table then answers 503 instead of failing accept() with EMFILE). */
#ifndef DSP_FDLIMIT_H
#define DSP_FDLIMIT_H

#include <stdint.h>

struct fdlimit {
	uint64_t before; /* soft limit found at start */
	uint64_t after;	 /* soft limit now */
	uint64_t hard;	 /* hard limit (the most an unprivileged process may raise to) */
};

/* Raises RLIMIT_NOFILE's soft limit to the hard limit (to /proc/sys/fs/nr_open's value when the
 * hard limit is unlimited) and logs the result (info when raised or already there, warn when the
 * kernel refused). Fills *out either way. Returns 0 or a negative errno of setrlimit/getrlimit. */
int fdlimit_raise(struct fdlimit *out);

/* The largest number of connections to accept: wanted, or less so that reserved descriptors
 * (listeners, the PostgreSQL pool, Redis, the provider client, logs) stay free under the soft
 * limit l->after; at least 1. */
uint64_t fdlimit_cap(const struct fdlimit *l, uint64_t wanted, uint64_t reserved);

#endif
