/* The admit operation, whole (issue 8 item 2): the Redis admission, then the call row. An
 * admission is complete only when its call row is written, conditional on the gate epoch it was
 * decided under and, for a batch contact, on the contact's lease token (gate_pg.h).
 *
 * gate_flow_admit() sends the Redis admission at once (gate_admit(), one round trip per call).
 * The admitted calls are queued; at the end of the loop turn (a zero timer: it runs before the
 * next poll, so every admission answered in one turn is in it) their rows are written together
 * with one gate_pg_write() per epoch and up to GATE_PG_WRITE_MAX calls, each row conditional on
 * its own fences, and each call gets its own answer:
 *   GATE_FLOW_ADMITTED     the row is written (write GATE_PG_WRITTEN): dial it;
 *   GATE_FLOW_REFUSED      refused by Redis (admit.decisions say why): no row, nothing held;
 *   GATE_FLOW_HELD         Redis says the call id already holds a slot (admit.campaign,
 *                          admit.agent, admit.taken_ms: the slot record's): nothing taken,
 *                          written or released. The slot is the caller's existing call with
 *                          this id — an admission of it that is still in flight here or was
 *                          answered before (a retry, a duplicate) — never a second call. The
 *                          caller must not dial on this answer and must not release the slot:
 *                          it follows that existing call, whose own answer settles it (ADMITTED:
 *                          dial that one; NOT_WRITTEN: released or not as it says). If that
 *                          answer was lost to the caller (a restart), the slot is settled
 *                          without it: a written row is found dialing (the caller re-sends
 *                          under the same Idempotency-Key, D1) and ends by its events or the
 *                          maximum-duration sweep, which release it; a row never written makes
 *                          the slot an orphan that the reconciler fences and releases once it
 *                          is older than the write deadline and its margin (README-pg.md). A
 *                          new dial needs a new call id. The flow does not settle HELD itself:
 *                          the only way to tell "row coming" from "orphan" before the deadline
 *                          is the fence, which would fail the existing call's write;
 *   GATE_FLOW_NOT_WRITTEN  admitted but the row was not written (write says why: stale epoch,
 *                          lease lost, fenced, deadline, failed). When the outcome releases
 *                          (gate_pg_outcome_releases()) gate_release() was sent before the
 *                          callback (released true); GATE_PG_EXISTS and GATE_PG_UNKNOWN keep
 *                          the slots (released false; the reconciler settles UNKNOWN).
 * The write's deadline is what is left of write_deadline_ms since the oldest admission of the
 * batch was sent; none left: every call of it is NOT_WRITTEN with GATE_PG_DEADLINE.
 *
 * Async contract (STYLE rule 4): if gate_flow_admit() returns an error the callback is never
 * called; otherwise it is called exactly once and never before gate_flow_admit() returns: with
 * status 0 and a result, or with a negative status and a NULL result: the Redis admission's
 * error (gate.h: transport errors, GATE_ELOST, -ENOENT, -EOVERFLOW, DSP_EREDIS; nothing was
 * taken that this call knows of) or -ECANCELED from inside gate_flow_close(). Results are
 * borrowed for the callback only. Callbacks may call gate_flow_admit() and gate_flow_close().
 */
#ifndef DSP_GATE_FLOW_H
#define DSP_GATE_FLOW_H

#include "gate.h"
#include "gate_pg.h"

#include <uv.h>

struct gate_flow;

struct gate_flow_options {
	uv_loop_t *loop;    /* borrowed */
	struct gate *gate;  /* borrowed: outlives the flow */
	struct gate_pg *pg; /* borrowed: outlives the flow */
	uint64_t
		write_deadline_ms; /* admission sent → row written (0: GATE_PG_WRITE_DEADLINE_MS) */
};

/* The call row of an admission: one dial per candidate, in req's order (the admitted
 * candidate's is written), exactly one for a direct dial. Borrowed for the call only. */
struct gate_flow_row {
	enum gate_mode mode; /* the mode and epoch the admission is decided under (gate_mode.h) */
	uint64_t epoch;
	const struct gate_pg_dial *dials;
};

enum gate_flow_outcome {
	GATE_FLOW_ADMITTED = 0,
	GATE_FLOW_REFUSED,
	GATE_FLOW_HELD,
	GATE_FLOW_NOT_WRITTEN,
};

struct gate_flow_result {
	enum gate_flow_outcome outcome;
	const char *call;		       /* the call id */
	const struct gate_admit_result *admit; /* Redis's answer (index, campaign, decisions) */
	enum gate_pg_outcome write;	       /* ADMITTED: GATE_PG_WRITTEN; NOT_WRITTEN: why */
	bool released;			       /* NOT_WRITTEN: gate_release() sent */
};

typedef void (*gate_flow_cb)(struct gate_flow *f, int status, const struct gate_flow_result *r,
			     void *data);

struct gate_flow_stats {
	uint64_t admits;    /* gate_flow_admit() accepted */
	uint64_t batches;   /* gate_pg_write() calls sent */
	uint64_t written;   /* calls answered ADMITTED */
	uint64_t refused;   /* calls answered REFUSED */
	uint64_t released;  /* gate_release() sent for rows not written, or ended */
	uint64_t cancelled; /* rows written for callers cancelled by close, ended at once */
};

/* Creates a flow. Returns 0, -EINVAL or -ENOMEM; *out is owned until gate_flow_close(). */
int gate_flow_new(const struct gate_flow_options *o, struct gate_flow **out);

/* Admits req (gate_admit()) and, when admitted, writes the admitted candidate's row of row at
 * the end of the loop turn. Returns 0 (cb will be called), -EINVAL (bad request or row),
 * -ESHUTDOWN (closing), -ENOMEM, or gate_admit()'s refusal. */
int gate_flow_admit(struct gate_flow *f, const struct gate_admit_req *req,
		    const struct gate_flow_row *row, gate_flow_cb cb, void *data);

/* Closes the flow: every call not answered yet is answered -ECANCELED from inside this call; an
 * admission admitted later by Redis, or queued and not written, is released; a write in flight
 * completes and its unwritten calls are released. A row it does write belongs to a caller that
 * was answered -ECANCELED and will never dial it: it is ended at once (gate_pg_cancel_written():
 * state ended, outcome 'refused', reason 'cancelled before dial', its contact back to pending
 * with no attempt charged while its lease token still matches), then its slots are released —
 * all before closed_cb. Only if that statement fails (logged) does the row stay dialing with
 * its slots until the maximum-duration sweep. closed_cb (may be NULL) is called when nothing of
 * the flow is pending any more; then the flow is freed. Close the flow before the pool. */
void gate_flow_close(struct gate_flow *f, void (*closed_cb)(void *data), void *data);

void gate_flow_get_stats(const struct gate_flow *f, struct gate_flow_stats *out);

#endif
