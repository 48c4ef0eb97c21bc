/* `dispatcher run`: the settings table mapped onto the worker's options (the only place that
 * knows both). */
#ifndef DSP_WORKER_RUN_H
#define DSP_WORKER_RUN_H

#include "settings.h"

/* Checks run's required settings, builds the options and runs the worker until it has drained.
 * Returns the process's exit code (0 after a completed drain, 2 for a configuration or start-up
 * refusal). */
int run_main(const struct settings *s);

#endif
