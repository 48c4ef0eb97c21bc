/* API keys (dispatcher/api/apikey.h, SPEC R4): the generated format, the SHA-256 of known
 * vectors, the comparison going through CRYPTO_memcmp, and the Bearer header forms that are
 * refused. */
#include "apikey.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

/* This executable's CRYPTO_memcmp takes the place of libcrypto's for every caller in it, so the
 * test sees whether apikey compares through it. Same contract: zero iff equal, time independent
 * of the contents. */
static int memcmp_calls;

int CRYPTO_memcmp(const void *in_a, const void *in_b, size_t len)
{
	const volatile unsigned char *a = in_a, *b = in_b;
	unsigned char x = 0;

	memcmp_calls++;
	for (size_t i = 0; i < len; i++)
		x |= a[i] ^ b[i];
	return x;
}

static void hex(const unsigned char *h, char out[65])
{
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", h[i]);
}

static void generated_keys_have_the_documented_format(void **state)
{
	char a[APIKEY_LEN + 1], b[APIKEY_LEN + 1];
	int seen[128] = { 0 };

	(void)state;
	for (int i = 0; i < 2000; i++) {
		assert_int_equal(apikey_generate(a), 0);
		assert_int_equal(strlen(a), 47);
		assert_memory_equal(a, "gat_", 4);
		assert_true(apikey_well_formed(a, strlen(a)));
		for (size_t k = 4; k < APIKEY_LEN; k++) {
			assert_non_null(memchr(apikey_alphabet, a[k], sizeof(apikey_alphabet)));
			seen[(unsigned char)a[k]]++;
		}
	}
	/* 86,000 draws: every one of the 62 characters appears (each ~1387 times if uniform). */
	for (size_t k = 0; k < sizeof(apikey_alphabet); k++)
		assert_true(seen[(unsigned char)apikey_alphabet[k]] > 1000);
	assert_int_equal(apikey_generate(b), 0);
	assert_true(strcmp(a, b) != 0);
}

static void sha256_known_vectors(void **state)
{
	unsigned char h[APIKEY_HASH_LEN];
	char x[65];

	(void)state;
	assert_int_equal(apikey_hash("abc", 3, h), 0); /* FIPS 180-2, appendix B.1 */
	hex(h, x);
	assert_string_equal(x, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	const char *k = "gat_0000000000000000000000000000000000000000000";
	assert_int_equal(apikey_hash(k, strlen(k), h), 0); /* printf '%s' "$k" | sha256sum */
	hex(h, x);
	assert_string_equal(x, "6336ddbdbe06b50b45f4699ff9853b3d13e0a496af81ba616f88e196895d6411");
}

static void comparison_is_constant_time(void **state)
{
	char k[APIKEY_LEN + 1], other[APIKEY_LEN + 1];
	unsigned char h[APIKEY_HASH_LEN], g[APIKEY_HASH_LEN];

	(void)state;
	assert_int_equal(apikey_generate(k), 0);
	assert_int_equal(apikey_hash(k, APIKEY_LEN, h), 0);
	memcpy(g, h, sizeof(g));

	memcmp_calls = 0;
	assert_true(apikey_hash_equal(h, g));
	assert_int_equal(memcmp_calls, 1);
	g[31] ^= 1; /* differs in the last byte only */
	assert_false(apikey_hash_equal(h, g));
	assert_int_equal(memcmp_calls, 2);

	memcmp_calls = 0;
	assert_true(apikey_matches(k, APIKEY_LEN, h));
	assert_int_equal(memcmp_calls, 1);
	memcpy(other, k, sizeof(other));
	other[APIKEY_LEN - 1] = other[APIKEY_LEN - 1] == 'a' ? 'b' : 'a';
	assert_false(apikey_matches(other, APIKEY_LEN, h));
	assert_int_equal(memcmp_calls, 2);
	assert_false(apikey_matches(k, APIKEY_LEN - 1, h)); /* malformed: never compared */
	assert_int_equal(memcmp_calls, 2);
}

static void preview_shows_the_last_four(void **state)
{
	char p[APIKEY_PREVIEW_SIZE];

	(void)state;
	apikey_preview("gat_0000000000000000000000000000000000000009f31", p);
	assert_string_equal(p, "gat_...9f31");
}

static int parse(const char *v, const char **key)
{
	return apikey_parse_bearer(v, v ? strlen(v) : 0, key);
}

static void bearer_accepted_forms(void **state)
{
	const char *k = "gat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ";
	const char *forms[] = { "Bearer gat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ",
				"bearer gat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ",
				"BEARER   gat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ",
				" \tBearer gat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ \t" };
	const char *key;

	(void)state;
	assert_int_equal(strlen(k), APIKEY_LEN);
	for (size_t i = 0; i < sizeof(forms) / sizeof(forms[0]); i++) {
		assert_int_equal(parse(forms[i], &key), 0);
		assert_memory_equal(key, k, APIKEY_LEN);
	}
}

static void bearer_malformed_forms(void **state)
{
	const char *bad[] = {
		"",
		"Bearer",
		"Bearer ",
		"Bearer\tgat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ", /* 1*SP, not HTAB */
		"Bearergat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ",
		"Basic gat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ",
		"Token gat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ",
		"gat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ",
		"Bearer gat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP",   /* 46 */
		"Bearer gat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQR", /* 48 */
		"Bearer GAT_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ",
		"Bearer xat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ",
		"Bearer gat-abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ",
		"Bearer gat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP-",
		"Bearer gat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP=",
		"Bearer gat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLM\xc3\xa9P",
		"Bearer gat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ x",
		"Bearer gat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ,gat_x",
		"Bearer gat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ\r\n",
		"Bearer \"gat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ\"",
	};
	const char *key = "x";

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (parse(bad[i], &key) != -EINVAL)
			fail_msg("accepted or wrong code: [%s]", bad[i]);
		assert_null(key);
	}
	assert_int_equal(parse(NULL, &key), -ENOENT);
	/* A NUL inside the value (the length says there is more): refused. */
	const char nul[] = "Bearer gat_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ\0";
	assert_int_equal(apikey_parse_bearer(nul, sizeof(nul) - 1, &key), -EINVAL);
	const char nul2[] = "Bearer gat_abcdefghijklmnop\0rstuvwxyzABCDEFGHIJKLMNOPQ";
	assert_int_equal(apikey_parse_bearer(nul2, sizeof(nul2) - 1, &key), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(generated_keys_have_the_documented_format),
		cmocka_unit_test(sha256_known_vectors),
		cmocka_unit_test(comparison_is_constant_time),
		cmocka_unit_test(preview_shows_the_last_four),
		cmocka_unit_test(bearer_accepted_forms),
		cmocka_unit_test(bearer_malformed_forms),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
