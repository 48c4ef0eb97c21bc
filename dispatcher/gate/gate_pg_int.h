/* Private to gate_pg*.c and gate_pgmode*.c: the gate's state, its statements, the helpers that
 * build array parameters, and the call-row write statement shared by both modes. */
#ifndef DSP_GATE_PG_INT_H
#define DSP_GATE_PG_INT_H

#include "gate_pg.h"
#include "ident.h" /* ident_ok, ident_uuid_ok: the ids' checks */
#include "log.h"

#include <stddef.h>

/* GATE_PG_EPOCH_LOCK_KEY as SQL text (the statements name it as a constant). */
#define EPOCH_LOCK_SQL "7564136"

/* The states in which a call holds its slots (SPEC §2: live). */
#define LIVE_STATES "('dialing', 'live', 'unknown')"

enum stmt_id {
	/* gate_pg.c */
	ST_BUDGET,	/* statement_timeout and lock_timeout = what is left of $1 ms */
	ST_BUDGET_TXN,	/* the same plus idle_in_transaction_session_timeout */
	ST_LOCK_SHARED, /* the epoch lock, shared */
	ST_LOCK_EXCL,	/* the epoch lock, exclusive */
	ST_WRITE,	/* the call-row write */
	ST_FENCE,
	ST_MODE_READ,
	ST_SWITCH,	 /* compare-and-set of the mode and epoch, NOTIFY */
	ST_SWITCH_REDIS, /* the way back's commit: mode redis, epoch + 1, generation, NOTIFY */
	ST_SYSTEM_LOCK,	 /* the system row, FOR UPDATE */
	ST_LEASE,
	ST_ALL_LIVE,
	ST_ORG_LIVE,
	ST_CALL_ROWS,
	ST_PRUNE,
	ST_CANCEL, /* ends rows written for cancelled callers (gate_pg_sql.h) */
	/* gate_pgmode.c */
	ST_ORG_LOCK,
	ST_SCALARS,
	ST_ORG_COUNTS,
	ST_CAMPAIGNS,
	ST_WAITERS_OF,
	ST_WAIT_SET,
	ST_RELEASE,
	ST_INSTALL_HEAD,
	ST_INSTALL_FLOORS,
	ST_COUNT,
};

struct stmt_def {
	enum stmt_id id;
	int nparams;
	const char *sql;
};

/* Each file's statements, registered by gate_pg_new(). */
extern const struct stmt_def gate_pg_stmts[];
extern const size_t gate_pg_n_stmts;
extern const struct stmt_def gate_pgmode_stmts[];
extern const size_t gate_pgmode_n_stmts;

struct gate_pg {
	struct pg_pool *pool;		    /* borrowed */
	const struct pg_stmt *st[ST_COUNT]; /* owned by the pool */
	struct gate_pg_options opts;
	struct gate_pg_stats stats;
};

#define GLOG(level, ...) LOG_AT(level, LOG_GATE, NULL, __VA_ARGS__)

/* --- array parameters in PostgreSQL's text form: {"a","b",NULL} --- */

struct pgarr {
	char *buf;
	size_t len, cap;
	bool oom;
	bool any; /* at least one element */
};

void pgarr_init(struct pgarr *a);
void pgarr_text(struct pgarr *a, const char *s); /* NULL: SQL NULL */
void pgarr_int(struct pgarr *a, int64_t v, bool null);
/* Closes the literal; returns it (owned by a) or NULL when out of memory. */
const char *pgarr_end(struct pgarr *a);
void pgarr_free(struct pgarr *a);

/* --- validation --- */

bool gate_pg_phone_ok(const char *s); /* ^\+[1-9][0-9]{6,14}$ */

/* Checks calls[0..n) for gate_pg_write(): ids, numbers, no call id or contact twice. */
int gate_pg_calls_check(const struct gate_pg_call *calls, uint32_t n);

/* --- the call-row write, shared by both modes --- */

#define WRITE_NPARAMS 11

struct write_params {
	struct pgarr arr[9]; /* ids, orgs, campaigns, agents, contacts, tokens, attempts, to,
			      * from */
	char epoch[24];
	const char *values[WRITE_NPARAMS];
};

/* Builds the ST_WRITE parameters for checked calls. Returns 0 or -ENOMEM (p is then freed). */
int write_params_build(struct write_params *p, enum gate_mode mode, uint64_t epoch,
		       const struct gate_pg_call *calls, uint32_t n);
void write_params_free(struct write_params *p);

/* Fills out[0..n) from the ST_WRITE result. Returns 0 or -EPROTO (a result of another shape). */
int write_parse(const PGresult *res, uint32_t n, enum gate_pg_outcome *out);

/* The outcome of every call of a write that failed as a whole with status (DSP_EPG: r->error). */
enum gate_pg_outcome write_failure(int status, const struct pg_results *r);

/* Counts out[0..n) in the stats. */
void gate_pg_count(struct gate_pg *g, const enum gate_pg_outcome *out, uint32_t n);

/* The SQLSTATE of a failed request ("" when none). */
const char *gate_pg_sqlstate(int status, const struct pg_results *r);

/* True for the SQLSTATEs of a server-side bound: statement_timeout (57014) and lock_timeout
 * (55P03). */
bool gate_pg_is_timeout(const char *sqlstate);

/* A budget statement's parameter: ms as text into buf (24 bytes). */
const char *gate_pg_ms(char *buf, uint64_t ms);

/* Fences calls given as array literals (ids uuid[], orgs text[]), n of them: the shared body of
 * gate_pg_fence() and the settling of a lost write. Returns as gate_pg_fence(). */
int gate_pg_fence_lits(struct gate_pg *g, const char *ids, const char *orgs, uint32_t n,
		       gate_pg_fence_cb cb, void *data);

#endif
