/* dispatcher/core is pure decision logic (STYLE rule 1): it must not include I/O headers.
 * This file shadows the real uv.h for code compiled as part of the core library. */
#error "dispatcher/core must not include uv.h: pass inputs and time as arguments instead"
