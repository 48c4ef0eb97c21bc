/* The project's identifiers, checked in one place.
 *
 * Ids of organisations, campaigns, agents, batches, workers and API keys match
 * ^[A-Za-z0-9_-]{1,64}$ (the schema's CHECKs, migration 0001); call ids are uuids in their
 * 8-4-4-4-12 hex form, either case. Pure: no I/O, no allocation.
 */
#ifndef DSP_IDENT_H
#define DSP_IDENT_H

#include <stdbool.h>
#include <stddef.h>

#define IDENT_MAX      64 /* the longest id, in bytes */
#define IDENT_UUID_LEN 36 /* a uuid's 8-4-4-4-12 form */

/* True when s (NUL-terminated, may be NULL) matches ^[A-Za-z0-9_-]{1,64}$. */
bool ident_ok(const char *s);

/* True when s (may be NULL) is 1 to max bytes of [A-Za-z0-9_-]; ident_ok() is max IDENT_MAX.
 * Reads at most max + 1 bytes of s. */
bool ident_ok_max(const char *s, size_t max);

/* True when s (may be NULL) is a uuid: 8-4-4-4-12 hex digits of either case, nothing after. */
bool ident_uuid_ok(const char *s);

#endif
