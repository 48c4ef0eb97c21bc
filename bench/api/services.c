/* bench/api/services: a private PostgreSQL and Redis for the API benchmark (bench/api/run.sh),
 * started from Debian's packages like the demo's (common/embedded.h). Prints
 *     DATABASE_URL=<libpq string>
 *     REDIS_URL=<url>
 * on stdout, one per line, then waits until stdin reaches EOF (or SIGTERM/SIGINT) and stops
 * both. Exit 0, or 1 when they cannot start (the reason on stderr). */
#include "embedded.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

int main(void)
{
	struct embedded_options o = { .postgres = true, .redis = true };
	struct embedded e;
	struct sigaction sa = { .sa_handler = on_signal };
	char buf[256];

	if (embedded_start(&e, &o)) {
		fprintf(stderr, "services: cannot start PostgreSQL and Redis\n");
		return 1;
	}
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	printf("DATABASE_URL=%s\nREDIS_URL=%s\n", e.database_url, e.redis_url);
	fflush(stdout);
	while (!stop && read(STDIN_FILENO, buf, sizeof(buf)) > 0)
		;
	embedded_stop(&e);
	return 0;
}
