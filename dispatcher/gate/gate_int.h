/* The gate client's internals, shared by gate.c (requests, admission, release, installs) and
 * gate_reply.c (parsing the scripts' answers). Not for use outside dispatcher/gate/. */
#ifndef DSP_GATE_INT_H
#define DSP_GATE_INT_H

#include "gate.h"
#include "list.h"

#include <hiredis/hiredis.h>

#define GATE_ID_MAX 64

enum gate_op {
	GATE_OP_ADMIT,
	GATE_OP_RELEASE,
	GATE_OP_INSTALL,
	GATE_OP_WAIT,
	GATE_OP_READ,
	GATE_OP_STATS,
	GATE_OP_DONE,
	GATE_OP_HANDOFF,
};

/* One operation in flight: owned by the gate until its reply comes, then freed; orphaned (g
 * NULL) when the gate is freed first. */
struct gate_req {
	struct list_node node; /* on gate.pending while g is set */
	struct gate *g;	       /* NULL once orphaned */
	enum gate_op op;
	union {
		gate_admit_cb admit;
		gate_release_cb release;
		gate_install_cb install;
		gate_wait_cb wait;
		gate_read_cb read;
		gate_stats_cb stats;
		gate_done_cb done;
		gate_handoff_cb handoff;
	} cb;
	void *data;
	bool direct;		    /* admit: a direct dial */
	uint32_t n_candidates;	    /* admit: candidates sent */
	char org[GATE_ID_MAX + 1];  /* for log lines ("" for system operations) */
	char call[GATE_ID_MAX + 1]; /* for log lines */
	const char *what;	    /* the operation's name, for log lines */
};

struct gate {
	struct redis_conn *conn; /* borrowed */
	const struct redis_script *admit, *release, *install, *wait, *read, *stats, *system,
		*system_init, *rebuild, *handoff, *test_clock;
	uint64_t wake_deadline_ms;  /* gate_set_wake_deadline() */
	char gen[GATE_GEN_MAX + 1]; /* "" when none: every guarded script then answers STALEGEN */
	struct list_node pending;   /* struct gate_req */
	bool closing;		    /* in gate_free(): new operations are refused */
};

/* Maps an error reply to a status (0 for any other reply); logs what is not expected.
 * (gate_reply.c) */
int gate_reply_error(const struct gate_req *req, const redisReply *r);

/* Parse a script's reply and call the request's callback (exactly once), with a result or with
 * the status the parse found. status is the transport status (0: reply is set). */
void gate_reply_dispatch(struct gate_req *req, int status, const redisReply *reply);

/* Logs a malformed reply and returns DSP_EREDIS. */
int gate_reply_malformed(const struct gate_req *req, const char *why);

#endif
