/* Fuzz target: the Authorization header of every /v2 request (dispatcher/api/apikey.h,
 * apikey_parse_bearer). Properties: no crash, no read outside the value; an accepted key lies
 * inside the value, is APIKEY_LEN bytes and well formed, and its preview is "gat_...XXXX". */
#include "fuzz.h"

#include "apikey.h"

#include <errno.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *value = (const char *)data, *key = NULL;
	char preview[APIKEY_PREVIEW_SIZE];
	int rc = apikey_parse_bearer(value, size, &key);

	FUZZ_CHECK(rc == 0 || rc == -EINVAL);
	if (rc == 0) {
		FUZZ_CHECK(key >= value && key + APIKEY_LEN <= value + size);
		FUZZ_CHECK(apikey_well_formed(key, APIKEY_LEN));
		apikey_preview(key, preview);
		FUZZ_CHECK(strlen(preview) == APIKEY_PREVIEW_SIZE - 1);
		FUZZ_CHECK(memcmp(preview + APIKEY_PREVIEW_SIZE - 5, key + APIKEY_LEN - 4, 4) == 0);
	}
	/* The whole input as a bare key: well formed exactly when apikey_parse_bearer would take
	 * it after "Bearer ". */
	if (apikey_well_formed(value, size))
		FUZZ_CHECK(size == APIKEY_LEN && memcmp(value, APIKEY_PREFIX, 4) == 0);
	return 0;
}
