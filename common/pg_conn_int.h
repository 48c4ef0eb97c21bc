/* Internals shared by the files of one PostgreSQL connection: pg_conn.c (lifecycle: connect,
 * set-up, up/down, close), pg_pipe.c (requests: queues, sending, results, deadlines), pg_txn.c
 * (interactive transactions) and pg_copy.c (COPY FROM STDIN). Not for other modules.
 */
#ifndef DSP_PG_CONN_INT_H
#define DSP_PG_CONN_INT_H

#include "backoff.h"
#include "list.h"
#include "log.h"
#include "pg_conn.h"
#include "pg_copy.h"
#include "pg_txn.h"
#include "resolve.h"

#define PG_LOG(conn, level, ...) LOG_CONN(level, LOG_PG, (conn)->label, __VA_ARGS__)

#define PG_MAX_BATCH 1000 /* statements in one batch */

enum conn_state {
	ST_IDLE,       /* created, not started */
	ST_DOWN,       /* waiting for the reconnect timer */
	ST_CONNECTING, /* PQconnectPoll under way */
	ST_SETUP,      /* connected: preparing statements, listening */
	ST_UP,	       /* accepting requests */
	ST_CLOSED,     /* closed by the owner */
};

enum req_kind {
	REQ_PIPE,   /* statements then a sync: one implicit transaction */
	REQ_HOLD,   /* takes the connection for an interactive transaction */
	REQ_SCRIPT, /* several commands, simple protocol, outside pipeline mode */
	REQ_COPY,   /* COPY FROM STDIN, outside pipeline mode */
};

enum q_op {
	Q_SQL,	   /* PQsendQueryParams */
	Q_STMT,	   /* PQsendQueryPrepared */
	Q_PREPARE, /* PQsendPrepare (connection set-up) */
};

struct pg_stmt {
	struct pg_stmts *set; /* the set it belongs to */
	char name[24];	      /* generated: "dsp_<n>" */
	char *sql;	      /* owned */
	int nparams;
};

struct pg_stmts {
	struct pg_stmt **v; /* owned, each owned */
	int n;
	bool frozen; /* a connection using it has started */
};

/* One statement of a request; its strings live in the request's block. */
struct pg_q {
	enum q_op op;
	const struct pg_stmt *stmt;
	const char *sql;
	int nparams;
	const char *const *values;
};

struct pg_req {
	struct list_node node; /* on waitq, holdq or inflight */
	enum req_kind kind;
	struct pg_txn *txn; /* the transaction it belongs to, or NULL */
	bool ends_hold;	    /* COMMIT/ROLLBACK: the hold ends when it is sent */
	bool on_holdq;	    /* queued on holdq rather than waitq */
	bool expired;	    /* its deadline passed */
	bool rolled_back;   /* REQ_SCRIPT: ROLLBACK sent for a transaction block it left open */
	int nq;		    /* statements */
	struct pg_q *q;	    /* nq, in the same block */
	int cur;	    /* statement whose results are being read */
	int failed;	    /* first failing statement, -1 */
	PGresult **res;	    /* results kept, in order (owned) */
	int nres, rescap;
	uint64_t queued_at;	 /* loop time it was queued (ms) */
	uint64_t deadline;	 /* loop time past which it times out, once sent (0: not sent) */
	uint64_t fixed_deadline; /* a transaction's deadline, used instead of sent + timeout */
	uint64_t timeout_ms;	 /* from sending (0: the connection's query timeout) */
	pg_result_cb cb;
	void *data;
	struct pg_copy *copy; /* REQ_COPY: its state (owned) */
};

struct pg_txn {
	struct list_node node; /* on conn->txns while it may touch conn */
	struct pg_conn *conn;  /* NULL once lost or ended */
	struct pg_txn_options opts;
	uint64_t deadline; /* loop time, from BEGIN */
	int fail;	   /* why the transaction is lost (< 0), or 0 */
	PGresult *error;   /* first statement error (owned) */
	bool ending;	   /* commit or rollback called */
	unsigned pending;  /* its requests not yet completed */
	pg_txn_cb begin_cb;
	void *begin_data;
};

struct listen {
	char channel[64];
	pg_notify_cb cb;
	void *data;
};

struct pg_poll {
	uv_poll_t handle;
	struct pg_conn *conn; /* NULL once detached */
	int events; /* watched now, 0 when stopped (uv_poll_start costs epoll_ctl calls) */
};

struct pg_conn {
	uv_loop_t *loop;
	struct pg_conn_options opts;
	char *conninfo;		/* owned copy */
	struct pg_hosts *hosts; /* its host names, looked up off the loop; NULL: none (owned) */
	char label[48];		/* "pg[name]" */
	PGconn *pg;		/* NULL when down */
	struct pg_poll *poll;	/* watches PQsocket(pg) */
	enum conn_state state;
	struct pg_stmts *stmts; /* opts.stmts, or own_stmts */
	struct pg_stmts *own_stmts;
	struct listen *listens; /* owned array */
	int nlistens;
	struct list_node waitq;	   /* queued requests, in order */
	struct list_node holdq;	   /* the holding transaction's requests not yet sent */
	struct list_node inflight; /* sent, in order */
	unsigned nwait, nhold, ninflight;
	unsigned claims;	   /* HOLD, SCRIPT and COPY requests queued or running */
	struct pg_txn *holder;	   /* the transaction holding the connection */
	struct list_node txns;	   /* transactions that may still touch the connection */
	struct pg_req *excl;	   /* the script or COPY running outside pipeline mode */
	bool io_failed;		   /* a send failed: drop the connection at the next flush */
	uv_timer_t retry_timer;	   /* reconnect delay, then connect deadline */
	uv_timer_t deadline_timer; /* the earliest request deadline or queue bound */
	uint64_t deadline_due;	   /* when deadline_timer fires, 0 when stopped */
	uv_idle_t flush;	   /* sends queued requests at the next turn of the loop */
	bool flush_active;
	struct backoff backoff;
	uint64_t rng;
	int open_handles;
	void (*closed_cb)(void *data);
	void *closed_data;
	struct pg_conn_stats stats;
};

/* pg_conn.c */
void conn_lost(struct pg_conn *conn, const char *why);
void conn_lost_pq(struct pg_conn *conn);
int conn_watch(struct pg_conn *conn, int events);
/* Sending or flushing failed: libpq may already have closed the socket (it does when it finds
 * the connection broken), so the poll handle is closed now, before the descriptor can be
 * reused, and the connection is dropped at the next flush (no callback runs from here). */
void conn_io_failed(struct pg_conn *conn);
void conn_dispatch_notifies(struct pg_conn *conn);

/* Starts libpq's connect with the conninfo (kw NULL) or with these parameters (the conninfo's,
 * hostaddr added: pg_conn_hosts.c). */
void conn_connect(struct pg_conn *conn, const char *const *kw, const char *const *val);

/* pg_conn_hosts.c: sets conn->hosts when the conninfo names a host to look up (else NULL:
 * libpq gets the conninfo as it is). Returns 0 or -ENOMEM. */
int hosts_new(struct pg_conn *conn);
/* Looks the names up for an attempt (a lookup still in flight from an earlier one is waited
 * for), then calls conn_connect() with hostaddr=, or conn_lost() when no host resolved. */
void hosts_begin(struct pg_conn *conn);
/* The attempt gave up (deadline, close): nothing is called when the lookups come back. */
void hosts_abandon(struct pg_hosts *hs);
/* Cancels the lookups in flight and frees hs (NULL allowed). */
void hosts_free(struct pg_hosts *hs);
/* Lookups started so far (0 for NULL). */
uint64_t hosts_lookups(const struct pg_hosts *hs);

/* pg_pipe.c */
struct pg_req *req_new(const struct pg_query *q, int nq);
void req_free(struct pg_req *req);
int req_enqueue(struct pg_conn *conn, struct pg_req *req);
void req_enqueue_held(struct pg_conn *conn, struct pg_req *req);
int conn_check_query(const struct pg_conn *conn, const struct pg_query *q);
void pipe_schedule(struct pg_conn *conn);
void pipe_flush_out(struct pg_conn *conn);
void pipe_send_setup(struct pg_conn *conn, struct pg_req *req);
void pipe_input(struct pg_conn *conn);
void pipe_writable(struct pg_conn *conn);
void pipe_arm_deadline(struct pg_conn *conn, uint64_t due);
void pipe_fail_all(struct pg_conn *conn, int inflight_status, int queued_status);
void pipe_flush_cb(uv_idle_t *h);
void pipe_deadline_cb(uv_timer_t *t);

/* pg_sql.c: whether a statement's text (NULL allowed) is a COPY, or transaction control that
 * would begin or end a transaction block (ROLLBACK TO a savepoint is not). */
bool conn_sql_is_copy(const char *sql);
bool conn_sql_is_txn_control(const char *sql);

/* pg_txn.c */
void txn_take_hold(struct pg_conn *conn, struct pg_req *hold);
void txn_release_hold(struct pg_conn *conn);
void txn_request_done(struct pg_conn *conn, struct pg_req *req, int status, struct pg_results *r);
void txn_idle_deadline(struct pg_conn *conn, uint64_t now);
void txn_conn_gone(struct pg_conn *conn, int status);

/* pg_copy.c */
bool copy_start(struct pg_conn *conn, struct pg_req *req);
bool copy_streaming(const struct pg_copy *copy);
bool copy_result(struct pg_conn *conn, struct pg_req *req, PGresult *res);
void copy_writable(struct pg_conn *conn, struct pg_req *req);
void copy_complete(struct pg_req *req, int status, const struct pg_results *r);
void copy_free(struct pg_copy *copy);

#endif
