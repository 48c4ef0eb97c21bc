/* dispatcher/core is pure decision logic (STYLE rule 1): it must not include I/O headers.
 * This file shadows the real curl/curl.h for code compiled as part of the core library. */
#error "dispatcher/core must not include curl/curl.h: pass inputs and time as arguments instead"
