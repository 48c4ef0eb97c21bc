/* Strict JSON over cJSON, for bodies that come from outside (API routes, provider events, the
 * provider stub). cJSON alone accepts what a strict reader must refuse: bytes after the value
 * ({"a":1}xyz parses as {"a":1}), a NUL inside a string (the C string silently ends there), a
 * duplicated key (the first one wins), and any number where an integer is expected. Here each
 * of these is an error whose message names the field or the byte position, so a route can
 * answer 400/422 with it. Pure (no I/O); the rules are listed in common/README.md.
 *
 * Example:
 *     char err[JSON_STRICT_ERR];
 *     int64_t n;
 *     cJSON *j = json_strict_parse(body, len, err, sizeof(err));
 *     if (!j || json_strict_int(j, "count", 0, 1000, &n, err, sizeof(err)))
 *             ... answer 400 with err ...
 */
#ifndef DSP_JSON_STRICT_H
#define DSP_JSON_STRICT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#define JSON_STRICT_ERR 160 /* enough for every message, with a field name cut to fit */

/* The largest integer a JSON number carries exactly through cJSON's double (2^53). */
#define JSON_STRICT_INT_MAX 9007199254740992LL

/* Parses buf (len bytes, need not be NUL-terminated) as exactly one JSON value, surrounded
 * by optional whitespace (space, tab, CR, LF only). Refuses, with a message in err (errlen
 * bytes, always terminated): invalid JSON ("...at byte N"), which includes a NUL or another
 * control character between tokens ("invalid JSON at byte N: a control character outside a
 * string" — cJSON alone skips them as whitespace); bytes after the value ("trailing bytes after the JSON value
 * at byte N"); a NUL or another control character inside a string, raw or as \u0000 ("at
 * byte N"); a key twice in one object ("field contacts[3].to appears twice"). Returns the
 * tree (free with cJSON_Delete) or NULL. */
cJSON *json_strict_parse(const char *buf, size_t len, char *err, size_t errlen);

/* Reads integer field name of object obj into *out. The value must be a JSON number with no
 * fractional part, from min to max (both within +-JSON_STRICT_INT_MAX). Returns 0; -ENOENT
 * when the field is absent or null (err says it is missing; callers with optional fields test
 * for it); -EINVAL when it is not an integer or out of range (err names the field and the
 * range). */
int json_strict_int(const cJSON *obj, const char *name, int64_t min, int64_t max, int64_t *out,
		    char *err, size_t errlen);

#endif
