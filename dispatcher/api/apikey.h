/* API keys (SPEC R4): the `gat_…` Bearer keys of the API, one organisation each.
 *
 * Format: "gat_" followed by APIKEY_BODY_LEN (43) characters of the base62 alphabet
 * [0-9A-Za-z], drawn uniformly from OpenSSL's RAND_bytes (rejection sampling, so every
 * character carries log2(62) bits: 43 of them carry 256 bits). A key is APIKEY_LEN (47)
 * characters, nothing else: no separator, no checksum, no whitespace.
 *
 * Only the key's SHA-256 (32 bytes) is stored (api_keys.key_hash); the key itself is shown once,
 * when it is created, and never again. A presented key is hashed and looked up by its hash; the
 * stored and computed hashes are compared with CRYPTO_memcmp (constant time), never memcmp.
 * key_preview ("gat_...9f31": the prefix and the last four characters) is what /v2/user/me and
 * `dispatcher admin key list` show.
 *
 * No function here logs a key or writes it anywhere; none does I/O besides RAND_bytes.
 */
#ifndef DSP_APIKEY_H
#define DSP_APIKEY_H

#include <stdbool.h>
#include <stddef.h>

#define APIKEY_PREFIX	  "gat_"
#define APIKEY_PREFIX_LEN 4
#define APIKEY_BODY_LEN	  43
#define APIKEY_LEN	  (APIKEY_PREFIX_LEN + APIKEY_BODY_LEN)
#define APIKEY_HASH_LEN	  32 /* SHA-256 */
/* "gat_...XXXX" and its NUL. */
#define APIKEY_PREVIEW_SIZE (APIKEY_PREFIX_LEN + 3 + 4 + 1)

/* The alphabet of a key's body, in the order the generator maps random values to it. */
extern const char apikey_alphabet[62];

/* Writes a new random key and its NUL into out. Returns 0, or -EIO when RAND_bytes fails (the
 * key must then not be used; out holds an empty string). */
int apikey_generate(char out[APIKEY_LEN + 1]);

/* Whether key[0..len) has the format above (prefix, length, alphabet). */
bool apikey_well_formed(const char *key, size_t len);

/* Writes SHA-256(key[0..len)) into out. Returns 0, or -EIO when libcrypto fails. */
int apikey_hash(const char *key, size_t len, unsigned char out[APIKEY_HASH_LEN]);

/* Whether the two hashes are equal, in time independent of where they differ (CRYPTO_memcmp). */
bool apikey_hash_equal(const unsigned char a[APIKEY_HASH_LEN],
		       const unsigned char b[APIKEY_HASH_LEN]);

/* Whether key[0..len) is well formed and hashes to stored (compared in constant time). */
bool apikey_matches(const char *key, size_t len, const unsigned char stored[APIKEY_HASH_LEN]);

/* Writes "gat_...XXXX" (the last four characters of a well-formed key) into out. */
void apikey_preview(const char *key, char out[APIKEY_PREVIEW_SIZE]);

/* Parses an Authorization header value: optional leading and trailing spaces or tabs (the
 * field's OWS), the scheme "Bearer" in any case, one or more spaces, then exactly one
 * well-formed key. On success *key points at the key inside value (borrowed: valid as long as
 * value) and it is APIKEY_LEN characters long. Returns 0; -ENOENT when value is NULL (no
 * header); -EINVAL for anything else (another scheme, no key, a malformed key, bytes after it,
 * a NUL inside). Every failure must be answered with the same 401 body. */
int apikey_parse_bearer(const char *value, size_t len, const char **key);

#endif
