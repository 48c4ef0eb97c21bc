/* Fuzz target: the JSON body of POST /v2/batches (dispatcher/api/batch_body.h), both passes.
 * Properties beyond no crash:
 *   - the first pass gives the same outcome (status, message, fields, contacts counted) in one
 *     go and in slices of 1 to 4 contacts (budgets drawn from a hash of the input), and again;
 *   - a refusal is a 400 or a 422 with a message, every 422 names a field ("field ...");
 *   - a body json_strict refuses is never accepted, and one it accepts (an object of at most
 *     BATCH_BODY_FIELDS_MAX members) is never a 400;
 *   - an accepted body is what json_strict reads: campaign_id and name equal its strings, and
 *     the second pass gives exactly its contacts, each phone (under phone, phone_number or
 *     to_number) byte for byte and each variables
 *     text parsing to the same object (none when absent or null). */
#include "fuzz.h"

#include "batch_body.h"
#include "json_strict.h"

#include <string.h>

static uint32_t next(uint32_t *s)
{
	*s ^= *s << 13;
	*s ^= *s >> 17;
	*s ^= *s << 5;
	return *s;
}

static void first_pass(struct batch_body *p, const char *b, size_t len, uint32_t seed)
{
	if (batch_body_init(p, b, len))
		return;
	if (!seed) {
		FUZZ_CHECK(batch_body_check(p, 1u << 30));
		return;
	}
	for (;;) {
		uint64_t before = p->contacts;
		unsigned budget = 1 + next(&seed) % 4;
		if (batch_body_check(p, budget))
			break;
		FUZZ_CHECK(p->contacts == before + budget); /* a slice stops at its budget */
	}
}

static bool same(const struct batch_body *a, const struct batch_body *b)
{
	return a->status == b->status && strcmp(a->msg, b->msg) == 0 &&
	       a->contacts == b->contacts && a->has_name == b->has_name &&
	       (a->status ||
		(strcmp(a->campaign_id, b->campaign_id) == 0 &&
		 a->campaign_id_len == b->campaign_id_len && strcmp(a->name, b->name) == 0));
}

/* The second pass against json_strict's tree of the whole body. */
static void check_accepted(const struct batch_body *p, const cJSON *t)
{
	const cJSON *cid = cJSON_GetObjectItemCaseSensitive(t, "campaign_id");
	const cJSON *name = cJSON_GetObjectItemCaseSensitive(t, "name");
	const cJSON *arr = cJSON_GetObjectItemCaseSensitive(t, "contacts"), *c;
	struct batch_body_walk w;
	struct batch_body_contact k;
	char err[JSON_STRICT_ERR];

	FUZZ_CHECK(cJSON_IsString(cid) && strlen(cid->valuestring) == p->campaign_id_len);
	FUZZ_CHECK(strncmp(cid->valuestring, p->campaign_id, BATCH_BODY_VALUE - 1) == 0);
	FUZZ_CHECK(p->has_name == (name && !cJSON_IsNull(name)));
	if (p->has_name)
		FUZZ_CHECK(cJSON_IsString(name) && strcmp(name->valuestring, p->name) == 0);
	FUZZ_CHECK(cJSON_IsArray(arr) && (uint64_t)cJSON_GetArraySize(arr) == p->contacts);
	batch_body_contacts(p, &w);
	cJSON_ArrayForEach(c, arr)
	{
		const cJSON *phone = cJSON_GetObjectItemCaseSensitive(c, "phone");
		if (!phone) /* the other names of the number (one per contact) */
			phone = cJSON_GetObjectItemCaseSensitive(c, "phone_number");
		if (!phone)
			phone = cJSON_GetObjectItemCaseSensitive(c, "to_number");
		const cJSON *vars = cJSON_GetObjectItemCaseSensitive(c, "variables");

		FUZZ_CHECK(batch_body_next(&w, &k) == 1);
		FUZZ_CHECK(cJSON_IsString(phone) && strlen(phone->valuestring) == k.phone_len &&
			   memcmp(phone->valuestring, k.phone, k.phone_len) == 0);
		if (!vars || cJSON_IsNull(vars)) {
			FUZZ_CHECK(k.vars == NULL);
		} else {
			cJSON *v = json_strict_parse(k.vars, k.vars_len, err, sizeof(err));
			FUZZ_CHECK(v && cJSON_Compare(v, vars, true));
			cJSON_Delete(v);
		}
		batch_body_contact_deinit(&k);
	}
	FUZZ_CHECK(batch_body_next(&w, &k) == 0);
	batch_body_contact_deinit(&k);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *body = (const char *)data;
	struct batch_body whole, sliced, again;
	char err[JSON_STRICT_ERR];
	uint32_t seed = 2166136261u;

	for (size_t i = 0; i < size; i++)
		seed = (seed ^ data[i]) * 16777619u;
	first_pass(&whole, body, size, 0);
	first_pass(&sliced, body, size, seed | 1);
	first_pass(&again, body, size, 0);
	FUZZ_CHECK(same(&whole, &sliced) && same(&whole, &again));

	FUZZ_CHECK(whole.status == 0 || whole.status == 400 || whole.status == 422);
	FUZZ_CHECK((whole.status == 0) == (whole.msg[0] == '\0'));
	if (whole.status == 422)
		FUZZ_CHECK(strncmp(whole.msg, "field ", 6) == 0);

	cJSON *t = json_strict_parse(body, size, err, sizeof(err));
	if (!t)
		FUZZ_CHECK(whole.status != 0);
	else if (cJSON_IsObject(t) && cJSON_GetArraySize(t) <= BATCH_BODY_FIELDS_MAX)
		FUZZ_CHECK(whole.status != 400);
	if (whole.status == 0)
		check_accepted(&whole, t);
	cJSON_Delete(t);
	batch_body_deinit(&whole);
	batch_body_deinit(&sliced);
	batch_body_deinit(&again);
	return 0;
}
