/* Embedded services: a private PostgreSQL and a private Redis, started from Debian's packages.
 *
 * Used by the integration tests, the benchmarks and `dispatcher demo`. Everything lives in one
 * temporary directory: PostgreSQL's data directory (initdb, trust auth, fsync off), both unix
 * sockets, and the servers' logs. PostgreSQL listens on a unix socket and, with tcp set, on a
 * free loopback port; Redis likewise (maxmemory-policy noeviction, no persistence). Either
 * server can be stopped and started again in the middle of a test. As root, both servers run as
 * the unprivileged user "dispatcher-embed" (created when missing, else "postgres", else
 * "nobody"). PostgreSQL trusts its private unix socket only; loopback TCP logins need the
 * generated password (scram-sha-256). Each server runs in its own process group, so a stop
 * reaches its children too.
 *
 * Teardown is guaranteed: a guardian process, in its own session, holds the read end of a pipe
 * whose write end only this process has. When this process exits for any reason (returns,
 * crashes, is killed by a signal or a test runner's timeout), the guardian sees end-of-file,
 * kills whatever server is still running and removes the directory.
 *
 * The functions block (they are for set-up, not for the event loop).
 */
#ifndef DSP_EMBEDDED_H
#define DSP_EMBEDDED_H

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

struct embedded_options {
	bool postgres;	/* start PostgreSQL */
	bool redis;	/* start Redis */
	bool tcp;	/* also listen on free loopback ports (for proxies, wrk, curl) */
	bool keep_logs; /* print the path of the logs instead of deleting them on failure */
	bool pg_stat_statements; /* preload pg_stat_statements with track_planning on
				  * (bench/worker: statements per cycle, where PostgreSQL spends);
				  * the caller creates the extension [off] */
};

struct embedded {
	char dir[128];		    /* the private directory */
	char database_url[512];	    /* libpq connection string of the "dispatcher" database (unix
				 * socket, trust) */
	char database_url_tcp[512]; /* the same over loopback TCP with the password; "" without
				     * tcp */
	char pg_password[33];	    /* the superuser's generated password (TCP logins only) */
	char redis_url[256];	    /* unix:///.../redis.sock */
	int pg_port;		    /* TCP port (also names the unix socket) */
	int redis_port;		    /* TCP port, 0 when tcp is off */
	pid_t pg_pid;		    /* postmaster, 0 when stopped */
	pid_t redis_pid;	    /* redis-server, 0 when stopped */
	uid_t pg_uid;		    /* user PostgreSQL runs as */
	gid_t pg_gid;
	bool tcp;
	bool pg_stat_statements; /* as in struct embedded_options (kept for a restart) */
	int guardian_fd;	 /* write end of the guardian's pipe, -1 when none */
	pid_t guardian_pid;
};

/* Creates the directory, starts the guardian and the requested servers, waits until each
 * answers (PostgreSQL: a "dispatcher" database exists; Redis: PING answers PONG). With tcp, a
 * port taken between its choice and the server's bind is replaced (three tries). Returns 0, or
 * DSP_ESERVICE with the reason logged (and the server's log tail printed) after undoing what it
 * did. */
int embedded_start(struct embedded *e, const struct embedded_options *opts);

/* Stops PostgreSQL (fast shutdown) and waits for it to exit. Returns 0 or DSP_ESERVICE. */
int embedded_pg_stop(struct embedded *e);

/* Starts PostgreSQL again on the same directory and port and waits until it answers. Returns 0
 * or DSP_ESERVICE. */
int embedded_pg_start(struct embedded *e);

/* Stops Redis (its data is lost: there is no persistence) and waits for it to exit. */
int embedded_redis_stop(struct embedded *e);

/* Starts Redis again on the same socket and port (empty) and waits until it answers. */
int embedded_redis_start(struct embedded *e);

/* Sends sig to the running server (SIGSTOP/SIGCONT for fault tests). Returns 0 or -ESRCH. */
int embedded_pg_signal(struct embedded *e, int sig);
int embedded_redis_signal(struct embedded *e, int sig);

/* Stops both servers, removes the directory and ends the guardian. Safe to call twice. */
void embedded_stop(struct embedded *e);

#endif
