/* The sequence driver (tests/driver/seq_driver.h) on the model alone: random sequences run to
 * the end with two model backends compared after every event, and the comparison fails when
 * the two differ. */
#include "seq_driver.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

static struct seq_model m1, m2;
static struct seq_run run;

static void random_model_twice(void **state)
{
	struct seq_backend *b[2] = { seq_model_backend(&m1), seq_model_backend(&m2) };

	(void)state;
	for (uint64_t seed = 1; seed <= 4; seed++)
		seq_random(&run, seed, 5000, b, 2);
	assert_true(run.event >= 5000);
}

/* Held calls, waiting dials and the clock stay within what the run keeps. */
static void random_stays_bounded(void **state)
{
	struct seq_backend *b = seq_model_backend(&m1);

	(void)state;
	seq_random(&run, 42, 20000, &b, 1);
	assert_true(run.n_held <= 40);
	assert_true(run.n_waiting < SEQ_MAX_CALLS);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(random_model_twice),
		cmocka_unit_test(random_stays_bounded),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
