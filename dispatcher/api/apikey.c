/* API keys: generation, hashing, constant-time comparison, the Bearer header (apikey.h). */
#include "apikey.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <string.h>
#include <strings.h>

const char apikey_alphabet[62] = { '0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 'A', 'B', 'C',
				   'D', 'E', 'F', 'G', 'H', 'I', 'J', 'K', 'L', 'M', 'N', 'O', 'P',
				   'Q', 'R', 'S', 'T', 'U', 'V', 'W', 'X', 'Y', 'Z', 'a', 'b', 'c',
				   'd', 'e', 'f', 'g', 'h', 'i', 'j', 'k', 'l', 'm', 'n', 'o', 'p',
				   'q', 'r', 's', 't', 'u', 'v', 'w', 'x', 'y', 'z' };

/* Random bytes at or above this are dropped: 248 = 4 × 62, so the rest map uniformly. */
#define ACCEPT_BELOW 248

int apikey_generate(char out[APIKEY_LEN + 1])
{
	unsigned char buf[64];
	size_t n = APIKEY_PREFIX_LEN;

	memcpy(out, APIKEY_PREFIX, APIKEY_PREFIX_LEN);
	while (n < APIKEY_LEN) {
		if (RAND_bytes(buf, sizeof(buf)) != 1) {
			OPENSSL_cleanse(out, APIKEY_LEN + 1);
			out[0] = '\0';
			return -EIO;
		}
		for (size_t i = 0; i < sizeof(buf) && n < APIKEY_LEN; i++)
			if (buf[i] < ACCEPT_BELOW)
				out[n++] = apikey_alphabet[buf[i] % 62];
	}
	out[APIKEY_LEN] = '\0';
	OPENSSL_cleanse(buf, sizeof(buf));
	return 0;
}

static bool in_alphabet(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
}

bool apikey_well_formed(const char *key, size_t len)
{
	if (!key || len != APIKEY_LEN || memcmp(key, APIKEY_PREFIX, APIKEY_PREFIX_LEN) != 0)
		return false;
	for (size_t i = APIKEY_PREFIX_LEN; i < len; i++)
		if (!in_alphabet(key[i]))
			return false;
	return true;
}

int apikey_hash(const char *key, size_t len, unsigned char out[APIKEY_HASH_LEN])
{
	unsigned int mdlen = 0;

	if (EVP_Digest(key, len, out, &mdlen, EVP_sha256(), NULL) != 1 || mdlen != APIKEY_HASH_LEN)
		return -EIO;
	return 0;
}

bool apikey_hash_equal(const unsigned char a[APIKEY_HASH_LEN],
		       const unsigned char b[APIKEY_HASH_LEN])
{
	return CRYPTO_memcmp(a, b, APIKEY_HASH_LEN) == 0;
}

bool apikey_matches(const char *key, size_t len, const unsigned char stored[APIKEY_HASH_LEN])
{
	unsigned char h[APIKEY_HASH_LEN];
	bool ok;

	if (!apikey_well_formed(key, len) || apikey_hash(key, len, h) < 0)
		return false;
	ok = apikey_hash_equal(h, stored);
	OPENSSL_cleanse(h, sizeof(h));
	return ok;
}

void apikey_preview(const char *key, char out[APIKEY_PREVIEW_SIZE])
{
	memcpy(out, APIKEY_PREFIX "...", APIKEY_PREFIX_LEN + 3);
	memcpy(out + APIKEY_PREFIX_LEN + 3, key + APIKEY_LEN - 4, 4);
	out[APIKEY_PREVIEW_SIZE - 1] = '\0';
}

static bool ows(char c)
{
	return c == ' ' || c == '\t';
}

int apikey_parse_bearer(const char *value, size_t len, const char **key)
{
	size_t b = 0, e = len, k;

	*key = NULL;
	if (!value)
		return -ENOENT;
	if (memchr(value, '\0', len))
		return -EINVAL;
	while (b < e && ows(value[b]))
		b++;
	while (e > b && ows(value[e - 1]))
		e--;
	if (e - b < 7 || strncasecmp(value + b, "Bearer", 6) != 0 || value[b + 6] != ' ')
		return -EINVAL;
	for (k = b + 6; k < e && value[k] == ' '; k++)
		;
	if (!apikey_well_formed(value + k, e - k))
		return -EINVAL;
	*key = value + k;
	return 0;
}
