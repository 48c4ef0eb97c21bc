/* The Redis gate script behind struct seq_backend (seq_driver.h): every operation is one call
 * of the gate's client (dispatcher/gate/gate.h) run to completion on the harness's loop
 * (tests/integration/gate_harness.h), on organisation org, its clock pinned
 * (gate_test_pin_clock). Other organisations' calls at the system level are direct dials of an
 * unenforced organisation "fill". Releases are by call id (the script's slot records); the
 * decision counters are the script's (gate_read_stats). Integration tests only. */
#ifndef DSP_TEST_SEQ_SCRIPT_H
#define DSP_TEST_SEQ_SCRIPT_H

#include "gate_harness.h"
#include "seq_driver.h"

struct seq_script {
	struct seq_backend b; /* first: the backend handle */
	struct gate_env *env; /* borrowed, open */
	const char *org;      /* borrowed */
};

/* Fills s's backend handle over env (borrowed: open for as long as the backend is used) and
 * organisation org (borrowed); returns it. setup() flushes Redis. */
struct seq_backend *seq_script_backend(struct seq_script *s, struct gate_env *env, const char *org);

#endif
