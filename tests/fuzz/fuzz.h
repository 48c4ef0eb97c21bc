/* What every fuzz target shares (README.md): the libFuzzer entry point, and a check that
 * aborts — a crash for libFuzzer and for the corpus replay alike — naming the broken property.
 */
#ifndef DSP_FUZZ_H
#define DSP_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Runs one input (size bytes at data, borrowed for the call). Returns 0. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_CHECK(cond)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "%s:%d: property broken: %s\n", __FILE__, __LINE__,        \
				#cond);                                                            \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

#endif
