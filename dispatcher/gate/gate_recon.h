/* The Redis side of the reconciler (SPEC C11): the reads the reconciler and the gate mode
 * controller need from Redis beyond gate.h — one org's slot records with the Redis time
 * (gate_slots.lua, step 2 of core/reconcile.h), the system generation, and the Redis time —
 * and its one write beyond gate.h: the slot of a live call that has none (gate_slot_add.lua,
 * RECONCILE_ADD).
 * Kept apart from gate.c so the gate's client does not change (README.md lists the script).
 *
 * Async contract (STYLE rule 4): if a function returns an error the callback is never called;
 * otherwise it is called exactly once, with status 0 and a result, or with a negative status and
 * a NULL result: a transport error (-ENOTCONN, -ECONNRESET, -ETIMEDOUT), GATE_ELOST (the org's
 * generation is not the gate's; for gate_slot_add() also the system's), DSP_EREDIS (a malformed or error reply, logged) or -ECANCELED
 * when the connection is closed first. These requests belong to the connection, not to the
 * gate: gate_free() does not cancel them, and their callbacks get no gate pointer. Results are
 * borrowed for the callback only.
 */
#ifndef DSP_GATE_RECON_H
#define DSP_GATE_RECON_H

#include "gate.h"

/* One org's slot records (records[i].campaign NULL: direct; agent NULL: none). */
struct gate_slots {
	uint64_t now_ms; /* Redis TIME when the records were read */
	const struct gate_slot_record *records;
	uint32_t n;
};

typedef void (*gate_slots_cb)(int status, const struct gate_slots *s, void *data);

/* status 0: gen (gen_len bytes, not NUL-terminated; NULL when the key is absent) is the value
 * of dsp:v1:{sys}:gen. */
typedef void (*gate_gen_cb)(int status, const char *gen, size_t gen_len, void *data);

/* status 0: *added is true when the slot was written, false when the call already had a slot
 * record (nothing changed). */
typedef void (*gate_slot_add_cb)(int status, bool added, void *data);

/* Registers gate_slots.lua and gate_slot_add.lua in reg (guarded by the org generation). The
 * daemon calls it beside gate_scripts_register(). Returns as redis_scripts_add(). */
int gate_recon_scripts_register(struct redis_scripts *reg);

/* Reads org's slot records and the Redis time in one round trip, under the gate's generation.
 * reg is the registry the gate's connection loads (borrowed). O(slots of the org). Returns 0,
 * -EINVAL (bad org, script not registered) or the connection's refusal. */
int gate_slots_read(struct gate *g, const struct redis_scripts *reg, const char *org,
		    gate_slots_cb cb, void *data);

/* Puts back the slot of a live call that has no slot record (RECONCILE_ADD): only when
 * rec->call has none, writes its record (rec->campaign, NULL: direct; rec->agent, NULL: none;
 * rec->taken_ms) and adds 1 at every level (system, org, campaign, agent) with the shortfall
 * aggregates by the stored floor, as an admission's acquire — without any limit check (the call
 * exists; a level may end above its limit and then refuses until calls end, C6/R13). Under the
 * gate's generation, one round trip. Returns 0, -EINVAL (bad org or record, script not
 * registered) or the connection's refusal. */
int gate_slot_add(struct gate *g, const struct redis_scripts *reg, const char *org,
		  const struct gate_slot_record *rec, gate_slot_add_cb cb, void *data);

/* Reads the system generation (GET dsp:v1:{sys}:gen) on the gate's connection. Returns 0 or the
 * connection's refusal. */
int gate_read_generation(struct gate *g, gate_gen_cb cb, void *data);

/* The run_id of the server of the gate's connection's last up (redis_conn_run_id(); "" before
 * the first up or when the server reports none). A reply received with status 0 came from that
 * server: a connection answers on one server until it goes down, and its next up sets it. The
 * string is the connection's, valid until its next up. */
const char *gate_server_run_id(const struct gate *g);

/* Parses one slot record value "<campaign>|<agent>|<taken_ms>" of call into *out (campaign and
 * agent copied into the buffers, GATE_GEN_MAX + 1 bytes each; "*" and "" become NULL). Returns 0
 * or -EINVAL. */
int gate_slot_parse(const char *call, const char *value, size_t len, char *campaign, char *agent,
		    struct gate_slot_record *out);

#endif
