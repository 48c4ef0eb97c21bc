/* Fuzz target: the body of POST /v2/calls (dispatcher/api/calls_body.h, calls_body_parse).
 * Properties beyond no crash: the outcome is one of 0/400/404/422 and the same on a second run
 * and with small message buffers (then cut, never overrun); a 400 is exactly a body that
 * json_strict refuses; a 422 names its field (one of the three, an unknown member of the body,
 * or none when the body is not an object) and its message starts with it; a 404's agent_id is
 * not an id; an accepted body's agent_id is an id equal to the body's, and its numbers are
 * E.164 that normalise to themselves and come from the body's fields. */
#include "fuzz.h"

#include "calls_body.h"
#include "ident.h"
#include "json_strict.h"

#include <string.h>

static bool is_e164(const char *s)
{
	char again[E164_BUF];
	enum e164_fault f;

	if (s[0] != '+' || e164_normalise(s, strlen(s), again, sizeof(again), &f))
		return false;
	return strcmp(again, s) == 0;
}

/* The number written in field name of b, normalised, equals n. */
static bool number_of(const cJSON *b, const char *name, const char *n)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(b, name);
	char norm[E164_BUF];
	enum e164_fault f;

	return cJSON_IsString(v) &&
	       !e164_normalise(v->valuestring, strlen(v->valuestring), norm, sizeof(norm), &f) &&
	       strcmp(norm, n) == 0;
}

static void check_accepted(const cJSON *b, const struct calls_body *out)
{
	const cJSON *agent = cJSON_GetObjectItemCaseSensitive(b, "agent_id");
	const cJSON *from = cJSON_GetObjectItemCaseSensitive(b, "from_number");

	FUZZ_CHECK(cJSON_IsObject(b));
	FUZZ_CHECK(ident_ok(out->agent));
	FUZZ_CHECK(cJSON_IsString(agent) && strcmp(agent->valuestring, out->agent) == 0);
	FUZZ_CHECK(is_e164(out->to) && number_of(b, "to_number", out->to));
	if (!from || cJSON_IsNull(from))
		FUZZ_CHECK(out->from[0] == '\0');
	else
		FUZZ_CHECK(is_e164(out->from) && number_of(b, "from_number", out->from));
}

/* Whether b has a member named field (or, field cut to its buffer, starting with it). */
static bool member_named(const cJSON *b, const char *field)
{
	size_t n = strlen(field);
	const cJSON *m;

	if (strcmp(field, "\"\"") == 0) /* an empty name, quoted */
		return cJSON_GetObjectItemCaseSensitive(b, "") != NULL;

	cJSON_ArrayForEach(
		m, b) if (strncmp(m->string, field, n) == 0 &&
			  (m->string[n] == '\0' || n == CALLS_BODY_ID_SIZE - 1)) return true;
	return false;
}

static void check_422(const cJSON *b, const char *field, const char *msg)
{
	size_t n = strlen(field);

	if (!n) { /* the body is not an object */
		FUZZ_CHECK(!cJSON_IsObject(b));
		FUZZ_CHECK(strstr(msg, "JSON object") != NULL);
		return;
	}
	FUZZ_CHECK(cJSON_IsObject(b));
	FUZZ_CHECK(strncmp(msg, field, n < 64 ? n : 64) == 0 && msg[n < 64 ? n : 64] == ' ');
	FUZZ_CHECK(strcmp(field, "agent_id") == 0 || strcmp(field, "to_number") == 0 ||
		   strcmp(field, "from_number") == 0 || member_named(b, field));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *body = (const char *)data;
	struct calls_body out, again;
	char field[CALLS_BODY_ID_SIZE], msg[CALLS_BODY_MSG], f2[CALLS_BODY_ID_SIZE],
		m2[CALLS_BODY_MSG], f3[4], m3[12], err[JSON_STRICT_ERR];
	int rc = calls_body_parse(body, size, &out, field, sizeof(field), msg, sizeof(msg));
	cJSON *b = json_strict_parse(body, size, err, sizeof(err));

	FUZZ_CHECK(rc == 0 || rc == 400 || rc == 404 || rc == 422);
	FUZZ_CHECK(memchr(field, 0, sizeof(field)) && memchr(msg, 0, sizeof(msg)));
	FUZZ_CHECK((rc == 0) == (msg[0] == '\0'));
	/* Deterministic, and the same with other buffers (cut to fit). */
	FUZZ_CHECK(calls_body_parse(body, size, &again, f2, sizeof(f2), m2, sizeof(m2)) == rc);
	FUZZ_CHECK(strcmp(f2, field) == 0 && strcmp(m2, msg) == 0);
	if (rc == 0)
		FUZZ_CHECK(strcmp(again.agent, out.agent) == 0 && strcmp(again.to, out.to) == 0 &&
			   strcmp(again.from, out.from) == 0);
	FUZZ_CHECK(calls_body_parse(body, size, &again, f3, sizeof(f3), m3, sizeof(m3)) == rc);
	FUZZ_CHECK(strncmp(f3, field, sizeof(f3) - 1) == 0 && strlen(f3) < sizeof(f3));
	FUZZ_CHECK(strncmp(m3, msg, sizeof(m3) - 1) == 0 && strlen(m3) < sizeof(m3));
	FUZZ_CHECK(calls_body_parse(body, size, &again, NULL, 0, NULL, 0) == rc);

	FUZZ_CHECK((rc == 400) == (b == NULL));
	if (rc == 400)
		FUZZ_CHECK(strcmp(msg, err) == 0);
	else if (rc == 0)
		check_accepted(b, &out);
	else if (rc == 422)
		check_422(b, field, msg);
	else /* 404: an agent_id that is not an id */
		FUZZ_CHECK(strcmp(field, "agent_id") == 0 && !ident_ok(msg));
	cJSON_Delete(b);
	return 0;
}
