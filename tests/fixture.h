/* Integration-test fixture: private PostgreSQL/Redis (common/embedded.h), the schema, a libuv
 * loop runner that waits for observable conditions, and child processes of the dispatcher. */
#ifndef DSP_TEST_FIXTURE_H
#define DSP_TEST_FIXTURE_H

#include "embedded.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <sys/types.h>
#include <uv.h>

/* Starts the requested servers (and applies the migrations when migrate is true) and exports
 * DATABASE_URL / REDIS_URL. Fails the test on error. */
void fixture_start(struct embedded *e, bool pg, bool redis, bool tcp, bool migrate);

/* Opens a blocking connection to the embedded database; fails the test on error. */
PGconn *fixture_pg(const struct embedded *e);

/* Runs one statement on a blocking connection; fails the test unless it succeeds. Returns the
 * result (caller PQclear()s it). */
PGresult *fixture_sql(PGconn *c, const char *sql);

/* Runs loop until cond(arg) is true; fails the test after timeout_ms. */
void fixture_run_until(uv_loop_t *loop, bool (*cond)(void *arg), void *arg, long timeout_ms);

/* Runs loop until *counter >= target; fails the test after timeout_ms. */
void fixture_run_until_count(uv_loop_t *loop, const int *counter, int target, long timeout_ms);

/* Closes every handle left on loop, runs it until they are gone and closes it; fails the test
 * if the loop cannot close (a handle leaked). */
void fixture_loop_close(uv_loop_t *loop);

/* Starts the dispatcher binary ($DSP_DISPATCHER) with args (NULL-terminated, after argv[0]);
 * its stdout goes to *out_fd (a pipe) when out_fd is not NULL. Returns the pid. */
pid_t fixture_spawn_dispatcher(char *const args[], int *out_fd);

/* Waits for pid and returns its exit code (128+signal when killed). */
int fixture_wait(pid_t pid);

/* Reads everything from fd into a malloc'd string and closes fd. */
char *fixture_read_all(int fd);

/* Milliseconds on a monotonic clock. */
long long fixture_now_ms(void);

/* Sleeps ms milliseconds; only for polling loops with a deadline, never to wait out a race. */
void fixture_sleep_ms(long ms);

#endif
