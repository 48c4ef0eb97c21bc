/* COPY ... FROM STDIN on a connection, with rows streamed by the caller.
 *
 * libpq forbids COPY in pipeline mode, so a COPY takes the connection: when its turn comes the
 * connection stops sending, waits until everything in flight has been answered, leaves
 * pipeline mode, sends the COPY, and enters pipeline mode again once it is over. In a pool the
 * connection is also kept out of routing for that time (pg_pool.h).
 *
 * Push with back-pressure: ready_cb says the COPY can take data (first when it has started,
 * then each time a full buffer has drained); the caller then calls pg_copy_put() with rows in
 * the COPY's format, as many as it likes while put returns 0, and stops when it returns 1 (the
 * data was taken but the socket is full: wait for the next ready_cb). It ends with
 * pg_copy_end() (or pg_copy_abort()), and done_cb reports the outcome.
 *
 * A bad row fails the whole COPY and writes nothing (it is one statement): done_cb gets DSP_EPG,
 * the server's error, and the line number PostgreSQL names in its CONTEXT ("COPY t, line N"):
 * the Nth line of the data stream, a header line included, counted from 1.
 *
 * Deadline: timeout_ms for the whole COPY from when it is sent; past it the connection is
 * dropped (done_cb gets -ETIMEDOUT). A queued COPY has the connection's queue bound.
 *
 * Async contract as in pg_conn.h: when pg_conn_copy_in() returns 0, done_cb is called exactly
 * once (ready_cb zero or more times before it). Ownership: the struct pg_copy given to ready_cb
 * belongs to the layer; it is valid until done_cb returns and must not be used after.
 */
#ifndef DSP_PG_COPY_H
#define DSP_PG_COPY_H

#include "pg_conn.h"

#include <stddef.h>

struct pg_copy;

/* The COPY can take data (see above). */
typedef void (*pg_copy_ready_cb)(struct pg_copy *copy, void *data);

struct pg_copy_report {
	uint64_t rows;	       /* rows written (0 unless status is 0) */
	long line;	       /* line of the data stream that failed, 0 when none is named */
	const PGresult *error; /* the server's error (status DSP_EPG), borrowed, else NULL */
};

/* status: 0 when every row was written; DSP_EPG when PostgreSQL refused the COPY (nothing was
 * written); -ECONNRESET, -ENOTCONN, -ETIMEDOUT, -ECANCELED as in pg_conn.h. rep is borrowed for
 * the call. */
typedef void (*pg_copy_done_cb)(int status, const struct pg_copy_report *rep, void *data);

struct pg_copy_options {
	uint64_t timeout_ms;	   /* whole COPY, from when it is sent (0: query_timeout_ms) */
	pg_copy_ready_cb ready_cb; /* required */
	pg_copy_done_cb done_cb;   /* required */
	void *data;		   /* passed to both, borrowed */
};

/* Queues sql, a "COPY ... FROM STDIN ..." statement (copied). Returns 0 (done_cb will be called
 * once), -EINVAL (not a COPY, or a callback missing), -ENOTCONN, -EAGAIN, -ESHUTDOWN or
 * -ENOMEM. */
int pg_conn_copy_in(struct pg_conn *conn, const char *sql, const struct pg_copy_options *opts);

/* Hands len bytes of COPY data (copied by libpq; rows need not be aligned with calls). Returns
 * 0 (taken; more welcome), 1 (taken; wait for ready_cb before the next put), -EAGAIN (not
 * taken: libpq could not buffer it; wait for ready_cb and put it again), -EPIPE when the COPY
 * takes no more data (ended, aborted, or failing: done_cb will say), or -EINVAL. */
int pg_copy_put(struct pg_copy *copy, const void *buf, size_t len);

/* Ends the data; done_cb follows. Returns 0 or -EPIPE when already ended. */
int pg_copy_end(struct pg_copy *copy);

/* Abandons the COPY (reason copied into the server's error); nothing is written and done_cb
 * follows with DSP_EPG. Returns 0 or -EPIPE when already ended. */
int pg_copy_abort(struct pg_copy *copy, const char *reason);

#endif
