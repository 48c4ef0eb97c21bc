/* Interactive transactions: a connection held by its owner from BEGIN to COMMIT or ROLLBACK.
 *
 * pg_conn_begin() queues a request for the connection; when its turn comes the connection is
 * held (nothing else is sent on it until the transaction ends), BEGIN is sent, and the owner's
 * begin callback gets a struct pg_txn. The owner sends statements with pg_txn_exec() (several
 * may be in flight; results come back in order), decides in C from their results, and ends
 * with pg_txn_commit() or pg_txn_rollback(). The hold ends when COMMIT or ROLLBACK is sent.
 *
 * One deadline for the whole transaction (timeout_ms, from when BEGIN is sent): a statement in
 * flight past it completes with -ETIMEDOUT and the connection is dropped; an idle transaction
 * past it is rolled back, and later calls report -ETIMEDOUT.
 *
 * A lost connection loses the transaction: nothing of it is committed, its pending statements
 * complete with -ECONNRESET, and every later pg_txn_exec(), pg_txn_commit() or
 * pg_txn_rollback() returns -ECONNRESET at once. A reconnect never hands a fresh connection to
 * a transaction that began on the old one. A COMMIT whose answer is lost with the connection
 * completes with -ECONNRESET, and one still unanswered at the transaction's deadline with
 * -ETIMEDOUT: either way PostgreSQL may or may not have committed it. (pg_conn_close() with a
 * COMMIT in flight reports -ECANCELED, with the same uncertainty.)
 *
 * A statement that fails (DSP_EPG) puts the transaction in PostgreSQL's aborted state: later
 * statements fail with SQLSTATE 25P02, and pg_txn_commit() rolls back and reports DSP_EPG with
 * the first error.
 *
 * Async contract as in pg_conn.h. Ownership: the handle given to the begin callback is the
 * owner's until it calls pg_txn_commit() or pg_txn_rollback() (exactly one of them, once);
 * it must not be used after that call, whatever it returns.
 */
#ifndef DSP_PG_TXN_H
#define DSP_PG_TXN_H

#include "pg_conn.h"
#include "pg_copy.h"

struct pg_txn;

enum pg_isolation {
	PG_READ_COMMITTED = 0, /* PostgreSQL's default */
	PG_REPEATABLE_READ,
	PG_SERIALIZABLE,
};

struct pg_txn_options {
	uint64_t timeout_ms;	     /* whole transaction, from BEGIN (0: query_timeout_ms) */
	enum pg_isolation isolation; /* BEGIN ISOLATION LEVEL ... */
};

/* status 0 with txn (owned by the caller, see above) once the connection is held and BEGIN is
 * sent; otherwise a negative errno (-ETIMEDOUT: waited longer than the queue bound;
 * -ENOTCONN, -ECANCELED) with txn NULL. */
typedef void (*pg_txn_cb)(int status, struct pg_txn *txn, void *data);

/* Queues a request for an interactive transaction on conn (opts may be NULL for the defaults).
 * Returns 0 (cb will be called once), -EINVAL, -ENOTCONN, -EAGAIN, -ESHUTDOWN or -ENOMEM. */
int pg_conn_begin(struct pg_conn *conn, const struct pg_txn_options *opts, pg_txn_cb cb,
		  void *data);

/* Sends one statement inside the transaction. Returns 0 (cb will be called once), -EINVAL (bad
 * query, or transaction control as in pg_conn_exec(): the transaction ends with pg_txn_commit()
 * or pg_txn_rollback(); SAVEPOINT, RELEASE and ROLLBACK TO are allowed), -EBUSY (commit or
 * rollback already called), -ENOMEM, or, when the transaction is already lost, -ECONNRESET,
 * -ETIMEDOUT or -ECANCELED. */
int pg_txn_exec(struct pg_txn *txn, const struct pg_query *q, pg_result_cb cb, void *data);

/* Runs a COPY ... FROM STDIN inside the transaction, as pg_conn_copy_in() does (pg_copy.h: the
 * same callbacks, back-pressure and report) but on the held connection, in order with the
 * transaction's other statements: it starts once those sent before it are answered, and those
 * sent after it wait for it. Its rows are the transaction's: a later ROLLBACK (or a failure)
 * removes them, COMMIT keeps them. Its deadline is the transaction's (opts->timeout_ms is
 * ignored). A COPY that fails (a bad row, pg_copy_abort()) puts the transaction in the aborted
 * state, as a failed statement does. Returns 0 (done_cb will be called once), -EINVAL (not a
 * COPY, a callback missing), -EBUSY (commit or rollback already called), -ENOMEM, or the loss
 * status of a transaction already lost. */
int pg_txn_copy_in(struct pg_txn *txn, const char *sql, const struct pg_copy_options *opts);

/* Ends the transaction with COMMIT and gives the handle up. cb (may be NULL) gets 0 once
 * committed, DSP_EPG when PostgreSQL refused (r->error; the transaction is rolled back), or a
 * transport error or the deadline (-ECONNRESET, -ETIMEDOUT, -ECANCELED: the outcome is
 * unknown, see above). Returns 0 (cb will be called once);
 * -EBUSY when already ended; -ENOMEM (the handle is kept: try again or roll back); or, when the
 * transaction was already lost, its loss status (nothing committed; the handle is given up and
 * no callback follows). */
int pg_txn_commit(struct pg_txn *txn, pg_result_cb cb, void *data);

/* Ends the transaction with ROLLBACK and gives the handle up: nothing of it is committed,
 * whatever the status cb gets. Returns as pg_txn_commit(). */
int pg_txn_rollback(struct pg_txn *txn, pg_result_cb cb, void *data);

#endif
