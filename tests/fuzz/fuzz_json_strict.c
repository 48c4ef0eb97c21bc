/* Fuzz target: common/json_strict on arbitrary bytes, the reader of every JSON route body and
 * of the provider event body. Properties: no crash; a refusal always says why, in a terminated
 * message; an accepted text has no NUL and no control character but tab, CR and LF; an
 * accepted tree reads integers without undefined behaviour, and prints to a text
 * that is accepted again and prints the same (nothing accepted is lost or changed by a round
 * trip: no key twice, no NUL). */
#include "fuzz.h"

#include "json_strict.h"

#include <errno.h>
#include <string.h>

/* json_strict_int on every member of every object, with a few ranges. */
static void read_ints(const cJSON *j, int depth)
{
	static const int64_t ranges[][2] = { { 0, 0 },
					     { 0, INT32_MAX },
					     { -JSON_STRICT_INT_MAX, JSON_STRICT_INT_MAX },
					     { 1, 1000 } };
	char err[JSON_STRICT_ERR];

	if (depth > 64)
		return;
	for (const cJSON *c = j->child; c; c = c->next) {
		if (cJSON_IsObject(j)) {
			for (size_t r = 0; r < sizeof(ranges) / sizeof(ranges[0]); r++) {
				int64_t v = INT64_MIN;
				int rc = json_strict_int(j, c->string, ranges[r][0], ranges[r][1],
							 &v, err, sizeof(err));
				FUZZ_CHECK(rc == 0 || rc == -ENOENT || rc == -EINVAL);
				FUZZ_CHECK(rc != 0 || (v >= ranges[r][0] && v <= ranges[r][1]));
				FUZZ_CHECK(rc == 0 || strlen(err) < sizeof(err));
			}
		}
		read_ints(c, depth + 1);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[JSON_STRICT_ERR];
	cJSON *j = json_strict_parse((const char *)data, size, err, sizeof(err));
	char *out, *again;
	cJSON *k;

	if (!j) {
		FUZZ_CHECK(err[0] != '\0' && strlen(err) < sizeof(err));
		return 0;
	}
	/* RFC 8259: no NUL anywhere, and between tokens only space, tab, CR and LF (inside strings
	 * control characters are refused already). */
	FUZZ_CHECK(memchr(data, 0, size) == NULL);
	for (size_t i = 0; i < size; i++)
		FUZZ_CHECK(data[i] >= 0x20 || data[i] == '\t' || data[i] == '\r' ||
			   data[i] == '\n');
	read_ints(j, 0);
	out = cJSON_PrintUnformatted(j);
	cJSON_Delete(j);
	if (!out)
		return 0; /* out of memory */
	k = json_strict_parse(out, strlen(out), err, sizeof(err));
	if (!k)
		fprintf(stderr, "printed tree refused: %s\n%s\n", err, out);
	FUZZ_CHECK(k != NULL);
	again = cJSON_PrintUnformatted(k);
	FUZZ_CHECK(again == NULL || strcmp(out, again) == 0);
	cJSON_free(again);
	cJSON_Delete(k);
	cJSON_free(out);
	return 0;
}
