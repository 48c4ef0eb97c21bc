/* The body of POST /v2/calls, parsed and checked with no I/O (calls_body.h). */
#include "calls_body.h"

#include "ident.h"
#include "json_strict.h"

#include <stdio.h>
#include <string.h>

/* Where calls_body_parse() writes a refusal. */
struct refusal {
	char *field, *msg;
	size_t fcap, mcap;
};

/* A 422 "<field> <what>" (what ends the sentence); returns 422. */
static int field_error(const struct refusal *r, const char *field, const char *what)
{
	snprintf(r->field, r->fcap, "%s", field);
	snprintf(r->msg, r->mcap, "%.64s %s", field, what);
	return 422;
}

/* The string field name of body in *out (NULL when an optional one is absent or null): 0, or
 * the 422. */
static int string_field(const struct refusal *r, const cJSON *body, const char *name, bool optional,
			const cJSON **out)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, name);

	*out = NULL;
	if (!v || cJSON_IsNull(v)) {
		if (optional)
			return 0;
		return field_error(r, name, "is missing: it is required.");
	}
	if (!cJSON_IsString(v))
		return field_error(r, name, "must be a string.");
	*out = v;
	return 0;
}

/* The number of field name (v, a string) normalised into out (E164_BUF): 0, or the 422. */
static int number_field(const struct refusal *r, const cJSON *v, const char *name, char *out)
{
	enum e164_fault f;
	char why[160];

	if (e164_normalise(v->valuestring, strlen(v->valuestring), out, E164_BUF, &f)) {
		snprintf(why, sizeof(why), "is not a phone number in E.164 form: %s.",
			 e164_fault_str(f));
		return field_error(r, name, why);
	}
	return 0;
}

/* The members of b (an object) are all fields of a call: 0, or the 422. */
static int known_fields(const struct refusal *r, const cJSON *b)
{
	static const char *const known[] = { "agent_id", "to_number", "from_number" };
	const cJSON *f;

	cJSON_ArrayForEach(f, b)
	{
		size_t i = 0;

		while (i < sizeof(known) / sizeof(known[0]) && strcmp(f->string, known[i]))
			i++;
		if (i == sizeof(known) / sizeof(known[0]))
			return field_error(r, f->string[0] ? f->string : "\"\"",
					   "is not a field of a call: send agent_id, to_number "
					   "and optionally from_number.");
	}
	return 0;
}

/* The checks of a parsed body, in the order of calls_body.h. */
static int check(const struct refusal *r, const cJSON *b, struct calls_body *out)
{
	const cJSON *agent, *to, *from;
	int rc;

	if (!cJSON_IsObject(b)) {
		snprintf(r->field, r->fcap, "%s", "");
		snprintf(r->msg, r->mcap, "%s",
			 "The body must be a JSON object with agent_id and to_number.");
		return 422;
	}
	if ((rc = known_fields(r, b)) || (rc = string_field(r, b, "agent_id", false, &agent)) ||
	    (rc = string_field(r, b, "to_number", false, &to)) ||
	    (rc = string_field(r, b, "from_number", true, &from)))
		return rc;
	if (!agent->valuestring[0])
		return field_error(r, "agent_id", "must not be empty.");
	out->from[0] = '\0';
	if ((rc = number_field(r, to, "to_number", out->to)) ||
	    (from && (rc = number_field(r, from, "from_number", out->from))))
		return rc;
	if (!ident_ok(agent->valuestring)) { /* no agent can have that id */
		snprintf(r->field, r->fcap, "%s", "agent_id");
		snprintf(r->msg, r->mcap, "%s", agent->valuestring);
		return 404;
	}
	snprintf(out->agent, sizeof(out->agent), "%s", agent->valuestring);
	return 0;
}

int calls_body_parse(const char *body, size_t len, struct calls_body *out, char *field, size_t fcap,
		     char *msg, size_t mcap)
{
	const struct refusal r = { .field = field, .msg = msg, .fcap = fcap, .mcap = mcap };
	char err[JSON_STRICT_ERR];
	cJSON *b = json_strict_parse(body, len, err, sizeof(err));
	int rc;

	if (fcap)
		field[0] = '\0';
	if (mcap)
		msg[0] = '\0';
	if (!b) {
		snprintf(msg, mcap, "%s", err);
		return 400;
	}
	rc = check(&r, b, out);
	cJSON_Delete(b);
	return rc;
}
