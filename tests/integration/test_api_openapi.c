/* GET /openapi.json on `dispatcher run` (issue 10 item 7), against a private PostgreSQL and
 * Redis: the public listener answers 200 application/json without a key (and with a bad one:
 * the route is public), no X-RateLimit-* headers (no organisation, no limit), and a body equal
 * byte for byte to dispatcher/api/openapi.json.
 * The description's agreement with the router is tests/unit/test_openapi.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "api_test.h"

static struct embedded svc;
static struct api_worker w1;

static char *read_file(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	assert_true(n > 0);
	rewind(f);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = 0;
	fclose(f);
	*len = (size_t)n;
	return buf;
}

static void openapi_served_without_a_key(void **state)
{
	struct raw_response r;
	size_t len;
	char *file = read_file(DSP_OPENAPI_JSON, &len);
	char v[64];

	(void)state;
	api_worker_start(&w1, "api-openapi");
	const char *keys[] = { NULL, "Authorization: Bearer gat_nope" };
	for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
		assert_int_equal(
			api_request(w1.port, "GET", "/openapi.json", keys[i], NULL, NULL, &r), 200);
		assert_non_null(raw_header(&r, "Content-Type", v, sizeof(v)));
		assert_string_equal(v, "application/json");
		assert_null(raw_header(&r, "X-RateLimit-Limit", v, sizeof(v)));
		assert_int_equal(r.body_len, len);
		assert_memory_equal(r.body, file, len);
		cJSON *doc = api_body(&r);
		assert_string_equal(api_str(doc, "openapi"), "3.1.0");
		cJSON_Delete(doc);
		raw_response_free(&r);
	}
	free(file);
	api_worker_stop(&w1);
}

static int setup(void **state)
{
	(void)state;
	fixture_start(&svc, true, true, false, true);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	api_worker_kill(&w1);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(openapi_served_without_a_key),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
