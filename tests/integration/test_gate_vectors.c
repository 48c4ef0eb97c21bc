/* Same answers as the model (issue 8, item 8): the `sequences` of tests/vectors/fairshare.json
 * and random sequences run through the sequence driver (tests/driver/seq_driver.h) against the
 * C model (dispatcher/core/fairshare_gate.c) and the Redis gate (its scripts and client) at
 * once. Every answer (install verdict, every decision of an admission, release, wait) and,
 * after every event, every count (running per campaign, agent, org and system, Σ shortfall of
 * the org and per agent, k, the direct reserve, the decision counters) must be equal; the
 * vectors' expectations are checked too. The vectors' schema is checked by the unit test. */
#include "fixture.h"
#include "gate_harness.h"
#include "seq_script.h"

#include <cjson/cJSON.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#define ORG "v"

static struct embedded svc;
static struct gate_env env;
static struct seq_model model;
static struct seq_script script;
static struct seq_run run;

static char *slurp(void)
{
	char path[512];
	const char *root = getenv("DSP_SOURCE_ROOT");
	FILE *f;
	long len;
	char *buf;

	snprintf(path, sizeof(path), "%s/tests/vectors/fairshare.json", root ? root : ".");
	f = fopen(path, "rb");
	if (!f)
		fail_msg("cannot open %s (set DSP_SOURCE_ROOT)", path);
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	rewind(f);
	buf = malloc((size_t)len + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)len, f), (size_t)len);
	buf[len] = '\0';
	fclose(f);
	return buf;
}

static void backends(struct seq_backend **b)
{
	b[0] = seq_model_backend(&model);
	b[1] = seq_script_backend(&script, &env, ORG);
}

static void sequences(void **state)
{
	char *text = slurp();
	cJSON *root = cJSON_Parse(text);
	const cJSON *c;
	struct seq_backend *b[2];
	int n = 0;

	(void)state;
	backends(b);
	assert_non_null(root);
	assert_string_equal(cJSON_GetObjectItem(root, "format")->valuestring,
			    "dsp-fairshare-vectors");
	assert_int_equal(cJSON_GetObjectItem(root, "version")->valueint, 2);
	cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "sequences"))
	{
		seq_run_case(&run, c, b, 2);
		n++;
	}
	print_message("%d sequences: the model and the Redis gate agree with them\n", n);
	assert_true(n >= 11);
	cJSON_Delete(root);
	free(text);
}

/* Fixed seeds, 12,000 events in all, compared after every event. */
static void random_sequences(void **state)
{
	static const uint64_t seeds[] = { 1, 2, 3, 20240808 };
	struct seq_backend *b[2];
	long total = 0;

	(void)state;
	backends(b);
	for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
		seq_random(&run, seeds[i], 3000, b, 2);
		total += run.event;
		seq_print_coverage(&run);
		/* delta installs compared too: on the installed version and on a stale one */
		assert_true(run.seen_delta > 0);
		assert_true(run.seen_delta_stale > 0);
	}
	print_message("%ld random events: the model and the Redis gate agree\n", total);
	assert_true(total >= 10000);
}

static int setup(void **state)
{
	(void)state;
	fixture_start(&svc, false, true, false, false);
	genv_open(&env, svc.redis_url, "vectors", true);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	genv_close(&env);
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(sequences),
		cmocka_unit_test(random_sequences),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
