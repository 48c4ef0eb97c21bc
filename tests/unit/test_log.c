#include "log.h"

#include <cjson/cJSON.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

/* Runs fn with stderr redirected to a temporary file and returns what it wrote (malloc'd). */
static char *capture(void (*fn)(void))
{
	char path[] = "/tmp/test_log_XXXXXX";
	int fd = mkstemp(path);
	int saved = dup(STDERR_FILENO);
	char *buf = calloc(1, 8192);

	assert_true(fd >= 0 && saved >= 0 && buf);
	fflush(stderr);
	dup2(fd, STDERR_FILENO);
	fn();
	fflush(stderr);
	dup2(saved, STDERR_FILENO);
	close(saved);
	lseek(fd, 0, SEEK_SET);
	ssize_t n = read(fd, buf, 8191);
	assert_true(n >= 0);
	close(fd);
	unlink(path);
	return buf;
}

static void emit_two(void)
{
	struct log_ids ids = { .org = "org_1", .call = "c-\"1\"", .conn = "pg[gate]" };

	log_set_level(LOG_INFO);
	log_debug(LOG_PG, "dropped %d", 1);
	LOG_AT(LOG_WARN, LOG_GATE, &ids, "quote \" and newline \n kept %s", "safe");
}

static void lines_are_json_with_ids(void **state)
{
	char *out = capture(emit_two);
	char *nl = strchr(out, '\n');

	assert_non_null(nl);
	assert_null(strchr(nl + 1, '\n')); /* exactly one line: debug was dropped */
	*nl = '\0';
	cJSON *obj = cJSON_Parse(out);
	assert_non_null(obj);
	assert_string_equal(cJSON_GetObjectItem(obj, "level")->valuestring, "warn");
	assert_string_equal(cJSON_GetObjectItem(obj, "group")->valuestring, "gate");
	assert_string_equal(cJSON_GetObjectItem(obj, "org")->valuestring, "org_1");
	assert_string_equal(cJSON_GetObjectItem(obj, "call")->valuestring, "c-\"1\"");
	assert_string_equal(cJSON_GetObjectItem(obj, "conn")->valuestring, "pg[gate]");
	assert_null(cJSON_GetObjectItem(obj, "campaign"));
	assert_non_null(strstr(cJSON_GetObjectItem(obj, "msg")->valuestring, "newline \n kept"));
	cJSON_Delete(obj);
	free(out);
}

static void phone_is_masked(void **state)
{
	char buf[16];

	assert_string_equal(log_mask_phone("+919876543210", buf, sizeof(buf)), "***3210");
	assert_string_equal(log_mask_phone("12", buf, sizeof(buf)), "***12");
	assert_string_equal(log_mask_phone(NULL, buf, sizeof(buf)), "***");
}

static void level_names_round_trip(void **state)
{
	enum log_level l;

	for (int i = LOG_ERROR; i <= LOG_DEBUG; i++) {
		assert_int_equal(log_level_parse(log_level_name((enum log_level)i), &l), 0);
		assert_int_equal(l, i);
	}
	assert_true(log_level_parse("loud", &l) < 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(lines_are_json_with_ids),
		cmocka_unit_test(phone_is_masked),
		cmocka_unit_test(level_names_round_trip),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
