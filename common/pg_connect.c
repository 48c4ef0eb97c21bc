/* A synchronous PostgreSQL connect with a deadline of our own, for command-line commands that
 * are not on a loop (`dispatcher migrate`); see pg_conn.h. */
#include "pg_conn.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static int failed(PGconn *pg, const char *why, int rc, char *err, size_t errlen)
{
	snprintf(err, errlen, "%.*s", (int)strcspn(why, "\n"), why);
	PQfinish(pg);
	return rc;
}

int pg_connect_blocking(const char *conninfo, uint64_t timeout_ms, PGconn **out, char *err,
			size_t errlen)
{
	uint64_t deadline = now_ms() + timeout_ms;
	PostgresPollingStatusType st = PGRES_POLLING_WRITING; /* libpq: as if it said so */
	PGconn *pg = PQconnectStart(conninfo);

	*out = NULL;
	if (!pg)
		return failed(NULL, "out of memory", -ENOMEM, err, errlen);
	if (PQstatus(pg) == CONNECTION_BAD)
		return failed(pg, PQerrorMessage(pg), -ECONNREFUSED, err, errlen);
	while (st != PGRES_POLLING_OK) {
		if (st == PGRES_POLLING_FAILED)
			return failed(pg, PQerrorMessage(pg), -ECONNREFUSED, err, errlen);
		uint64_t now = now_ms();
		if (now >= deadline) {
			snprintf(err, errlen, "no answer within %llu ms",
				 (unsigned long long)timeout_ms);
			PQfinish(pg);
			return -ETIMEDOUT;
		}
		struct pollfd p = { .fd = PQsocket(pg),
				    .events = st == PGRES_POLLING_READING ? POLLIN : POLLOUT };
		int n = poll(&p, 1, (int)(deadline - now));
		if (n < 0 && errno != EINTR)
			return failed(pg, strerror(errno), -errno, err, errlen);
		if (n > 0)
			st = PQconnectPoll(pg);
	}
	*out = pg;
	return 0;
}
