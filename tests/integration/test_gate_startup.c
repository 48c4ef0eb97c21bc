/* The gate's start-up checks (SPEC §7): the worker refuses to start, naming the fix, when Redis
 * would evict keys (maxmemory-policy allkeys-lru) or the database schema is not current; it
 * starts when both are in order. */
#include "error.h"
#include "fixture.h"
#include "gate_harness.h"
#include "migrate.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

static struct embedded svc;

static int setup(void **state)
{
	fixture_start(&svc, true, true, false, false); /* no migrations yet */
	return 0;
}

static int teardown(void **state)
{
	embedded_stop(&svc);
	return 0;
}

static int check(const char *redis_url, const char *database_url, uint64_t timeout_ms, char *msg,
		 size_t size)
{
	struct gate_startup_options o = {
		.redis_url = redis_url,
		.connect_timeout_ms = timeout_ms,
		.database_url = database_url,
	};

	return gate_startup_check(&o, msg, size);
}

/* A schema with migrations pending is refused with the command that fixes it. */
static void schema_not_current(void **state)
{
	char msg[512];
	PGconn *c;

	assert_int_equal(check(svc.redis_url, svc.database_url, 10000, msg, sizeof(msg)),
			 DSP_ESCHEMA);
	assert_non_null(strstr(msg, "schema is not current"));
	assert_non_null(strstr(msg, "dispatcher migrate"));

	c = fixture_pg(&svc);
	assert_int_equal(migrate_apply(c, NULL), 0);
	PQfinish(c);
	assert_int_equal(check(svc.redis_url, svc.database_url, 10000, msg, sizeof(msg)), 0);
	assert_string_equal(msg, "");
}

/* A Redis that evicts (allkeys-lru) is refused, naming maxmemory-policy and the fix. */
static void evicting_redis(void **state)
{
	struct gate_env env;
	char msg[512];

	genv_open(&env, svc.redis_url, "startup-test", true);
	genv_cmd(&env, NULL, 0, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru", NULL);
	assert_int_equal(check(svc.redis_url, NULL, 10000, msg, sizeof(msg)), DSP_ECONFIG);
	assert_non_null(strstr(msg, "maxmemory-policy"));
	assert_non_null(strstr(msg, "allkeys-lru"));
	assert_non_null(strstr(msg, "noeviction"));
	genv_cmd(&env, NULL, 0, "CONFIG", "SET", "maxmemory-policy", "noeviction", NULL);
	assert_int_equal(check(svc.redis_url, NULL, 10000, msg, sizeof(msg)), 0);
	genv_close(&env);
}

/* A Redis that does not answer is refused at the deadline, not waited for for ever. */
static void unreachable_redis(void **state)
{
	char msg[512], url[256];

	snprintf(url, sizeof(url), "unix://%s/no-such.sock", svc.dir);
	assert_int_equal(check(url, NULL, 300, msg, sizeof(msg)), -ETIMEDOUT);
	assert_non_null(strstr(msg, "REDIS_URL"));
	assert_int_equal(check("http://nowhere", NULL, 300, msg, sizeof(msg)), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(schema_not_current),
		cmocka_unit_test(evicting_redis),
		cmocka_unit_test(unreachable_redis),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
