/* Webhook signatures (SPEC D0): HMAC-SHA256 over "<t>.<raw body>" with a shared secret, sent as
 *
 *     X-Signature: t=<unix seconds>,v1=<64 lower-case hex digits>
 *
 * Verification parses the header, refuses a timestamp more than `tolerance_s` (300 s, the
 * 5-minute replay window) in the past, or more than SIGNING_FUTURE_SKEW_S (30 s, clock skew
 * between two hosts) in the future, then compares the HMAC in constant time (CRYPTO_memcmp).
 * Several v1= entries are accepted (a sender rotating secrets may send one per secret); any one
 * that matches is enough. Unknown keys (v0=, ...) are ignored; spaces around each part are
 * trimmed and the hex digits are compared case-insensitively (lower-cased first). Time is an argument: `now` is
 * Unix seconds from the caller's clock.
 */
#ifndef DSP_SIGNING_H
#define DSP_SIGNING_H

#include <stddef.h>
#include <stdint.h>

#define SIGNING_TOLERANCE_S   300
#define SIGNING_FUTURE_SKEW_S 30
/* "t=" + 20 digits + ",v1=" + 64 hex + NUL, rounded up. */
#define SIGNING_HEADER_MAX 96

/* Writes the 64 hex digits (and a NUL) of HMAC-SHA256(key, msg) into hex[65]. Returns 0, or
 * -EINVAL when libcrypto fails. Key and msg are borrowed for the call. */
int signing_hmac_hex(const void *key, size_t key_len, const void *msg, size_t msg_len,
		     char hex[65]);

/* Writes "t=<t>,v1=<hex>" for body into out (out_len >= SIGNING_HEADER_MAX). Returns 0,
 * -ENOSPC when out is too small, or -EINVAL. */
int signing_sign(const char *secret, int64_t t, const void *body, size_t len, char *out,
		 size_t out_len);

/* Checks header against body. Returns 0 when one v1 matches and t is inside the window;
 * -EBADMSG when the header is missing or malformed (no t=, no v1=, bad digits);
 * -ESTALE when t is older than now - tolerance_s or newer than now + SIGNING_FUTURE_SKEW_S;
 * -EPERM when no v1 matches. tolerance_s 0 means SIGNING_TOLERANCE_S. */
int signing_verify(const char *secret, const char *header, const void *body, size_t len,
		   int64_t now, int64_t tolerance_s);

#endif
