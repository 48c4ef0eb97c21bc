/* The body of POST /v2/calls (route_calls.c, README "Calls"), parsed and checked with no I/O:
 * what the route does with a body before it submits the dial, apart so that it can be
 * unit-tested and fuzzed (tests/fuzz/fuzz_calls_body.c) without a server or a database.
 *
 * The body is {"agent_id", "to_number", "from_number"?}, parsed strictly (common/json_strict.h:
 * trailing bytes, a NUL in a string, a key twice -> 400). Then, in this order: not an object,
 * an unknown member, a field missing or not a string (from_number may be absent or null), an
 * empty agent_id, a number that is not E.164 -> 422 naming the field; an agent_id that cannot be
 * an id (^[A-Za-z0-9_-]{1,64}$) -> 404, as an unknown agent.
 */
#ifndef DSP_API_CALLS_BODY_H
#define DSP_API_CALLS_BODY_H

#include "e164.h"

#include <stdbool.h>
#include <stddef.h>

#define CALLS_BODY_ID_SIZE 65  /* an id and its NUL: API_ID_SIZE (api_int.h) */
#define CALLS_BODY_MSG	   256 /* room for every message of calls_body_parse() */

/* A body that passed every check. */
struct calls_body {
	char agent[CALLS_BODY_ID_SIZE]; /* agent_id, an id */
	char to[E164_BUF];		/* to_number, normalised (e164_normalise) */
	char from[E164_BUF];		/* from_number, normalised; "" when absent or null */
};

/* Parses and checks body (len bytes, need not be NUL-terminated) into *out. Returns:
 *   0    *out filled (fully written only then);
 *   400  not strict JSON: msg holds json_strict_parse()'s message;
 *   422  msg holds the sentence "<field> <why>." and field (fcap bytes) the field refused: one
 *        of agent_id, to_number, from_number, or the unknown member's name (an empty name as the two
 *        characters "", so that the message names it); empty when the body is not an object;
 *   404  agent_id cannot be an id: field is "agent_id" and msg the agent_id as sent.
 * field and msg are always NUL-terminated (cut to fcap and mcap bytes); CALLS_BODY_MSG holds
 * every message whole (a 404's agent_id excepted, cut to fit). */
int calls_body_parse(const char *body, size_t len, struct calls_body *out, char *field, size_t fcap,
		     char *msg, size_t mcap);

#endif
