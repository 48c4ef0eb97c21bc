/* The demo's parts (see README.md): processes (demo_procs.c), the database set-up
 * (demo_setup.c), the live table and the summary (demo_run.c). Blocking, single-threaded. */
#ifndef DSP_DEMO_INT_H
#define DSP_DEMO_INT_H

#include "demo.h"

#include <libpq-fe.h>
#include <stdbool.h>
#include <sys/types.h>

#define DEMO_ORG   "org-demo"
#define DEMO_AGENT "agent-demo"

/* The campaigns, in the table's order. */
struct demo_campaign {
	const char *id;
	const char *what; /* the table's note */
	uint32_t ceiling; /* max_concurrent_calls, 0: none */
	bool late;	  /* created when the late campaign joins */
};
extern const struct demo_campaign demo_campaigns[DEMO_CAMPAIGNS];

struct demo_procs {
	const char *dir; /* where the logs go (borrowed: the embedded services' directory) */
	pid_t stub;
	int stub_port;
	pid_t workers[DEMO_WORKERS_MAX];
	unsigned n_workers;
	int operator_ports
		[DEMO_WORKERS_MAX]; /* each worker's operator listener (/metrics, /status) */
};

struct demo_worker_env {
	const char *database_url, *redis_url, *secret;
	int port;	       /* the one listening port the workers share (SO_REUSEPORT) */
	const char *log_level; /* DISPATCHER_LOG_LEVEL (NULL: warn; --bench: info, for the exit
				* line with the script calls) */
};

/* Signals: the first SIGINT/SIGTERM/SIGHUP asks the demo to stop (demo_interrupted()), a second
 * one kills the children at once and exits 130. */
void demo_signals_install(void);
bool demo_interrupted(void);

/* Starts the stub at stub_path (its log in p->dir) and reads its port. Returns 0, -ETIMEDOUT,
 * -EINTR (interrupted) or a negative errno. */
int demo_stub_start(struct demo_procs *p, const char *stub_path, const struct demo_options *o,
		    const char *secret);

/* A free loopback TCP port, or a negative errno. */
int demo_free_port(void);

/* Starts n `self run` workers with the demo's environment (their logs in p->dir). Returns 0 or
 * a negative errno (those started stay in p). */
int demo_workers_start(struct demo_procs *p, const char *self, unsigned n,
		       const struct demo_worker_env *we);

/* Reaps a worker that exited; returns its number (1..) or 0 when all still run. */
int demo_workers_poll(struct demo_procs *p);

/* SIGTERM to the workers (they drain), SIGKILL after ms. Returns how many had to be killed. */
int demo_workers_stop(struct demo_procs *p, int ms);

/* Stops every child (workers first, then the stub). Safe to call twice. */
void demo_procs_stop(struct demo_procs *p);

/* Applies the migrations and writes the organisation, its agent and the campaigns that start
 * at once with their contacts. Returns 0 or -EIO (logged). */
int demo_setup(PGconn *pg, const struct demo_options *o);

/* Writes the late campaign with its contacts in one transaction. Returns 0 or -EIO. */
int demo_late_join(PGconn *pg, const struct demo_options *o);

/* Reads pending and in-progress contacts per campaign into pending[]/busy[] (DEMO_CAMPAIGNS
 * entries, in demo_campaigns order). Returns 0 or -EIO. */
int demo_backlog(PGconn *pg, uint32_t *pending, uint32_t *busy);

/* --bench probes (demo_sql.h; each carries the DEMO_PROBE marker). Each returns 0 or -EIO.
 * demo_db_counters: committed transactions and rows written (pg_stat_database, this
 * database). demo_due: whether campaign has a contact due now. demo_stmt_reset: empties
 * pg_stat_statements. demo_stmt_totals: statements executed and their rows since the reset
 * (the demo's own left out). demo_stmt_top: writes the top statements by total time to out. */
int demo_db_counters(PGconn *pg, double *xact, double *rows);
int demo_due(PGconn *pg, const char *campaign, bool *due);
int demo_stmt_reset(PGconn *pg);
int demo_stmt_totals(PGconn *pg, double *calls, double *rows);
int demo_stmt_top(PGconn *pg, FILE *out);

/* Writes the fleet's gate mode and epoch ("redis mode, epoch 2") into mode. Returns 0 or -EIO. */
int demo_gate_mode(PGconn *pg, char *mode, size_t len);

#endif
