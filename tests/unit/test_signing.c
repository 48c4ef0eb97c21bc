/* Webhook signing: RFC 4231 HMAC-SHA256 vectors, the header format, the replay window in both
 * directions, malformed headers, constant-time comparison paths. */
#include "signing.h"

#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

struct vector {
	unsigned char key[131];
	size_t key_len;
	const char *data;
	unsigned char fill; /* when data is NULL: fill_len bytes of fill */
	size_t fill_len;
	const char *hex;
};

static void rfc4231_vectors(void **state)
{
	static struct vector v[6] = {
		{ .key_len = 20,
		  .data = "Hi There",
		  .hex = "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7" },
		{ .key = "Jefe",
		  .key_len = 4,
		  .data = "what do ya want for nothing?",
		  .hex = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843" },
		{ .key_len = 20,
		  .fill = 0xdd,
		  .fill_len = 50,
		  .hex = "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe" },
		{ .key_len = 25,
		  .fill = 0xcd,
		  .fill_len = 50,
		  .hex = "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b" },
		{ .key_len = 131,
		  .data = "Test Using Larger Than Block-Size Key - Hash Key First",
		  .hex = "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54" },
		{ .key_len = 131,
		  .data = "This is a test using a larger than block-size key and a larger than "
			  "block-size data. The key needs to be hashed before being used by the "
			  "HMAC algorithm.",
		  .hex = "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2" },
	};
	unsigned char buf[64];
	char hex[65];

	memset(v[0].key, 0x0b, 20);
	memset(v[2].key, 0xaa, 20);
	for (int i = 0; i < 25; i++)
		v[3].key[i] = (unsigned char)(i + 1);
	memset(v[4].key, 0xaa, 131);
	memset(v[5].key, 0xaa, 131);
	for (size_t i = 0; i < 6; i++) {
		const void *msg = v[i].data;
		size_t len = v[i].data ? strlen(v[i].data) : v[i].fill_len;
		if (!v[i].data) {
			memset(buf, v[i].fill, v[i].fill_len);
			msg = buf;
		}
		assert_int_equal(signing_hmac_hex(v[i].key, v[i].key_len, msg, len, hex), 0);
		assert_string_equal(hex, v[i].hex);
	}
}

static const char body[] = "{\"call_id\":\"pc_1\",\"status\":\"completed\"}";
/* openssl dgst -sha256 -hmac whsec_test over "1700000000.<body>" */
static const char want[] =
	"t=1700000000,v1=827f65e919695f28428361cf43675381f99c07e689d077b1489080b4415df7e6";

static void sign_known_header(void **state)
{
	char out[SIGNING_HEADER_MAX];

	assert_int_equal(
		signing_sign("whsec_test", 1700000000, body, strlen(body), out, sizeof(out)), 0);
	assert_string_equal(out, want);
	assert_int_equal(signing_sign("whsec_test", 1700000000, body, strlen(body), out, 20),
			 -ENOSPC);
	/* An empty body signs "<t>." */
	assert_int_equal(signing_sign("s", 0, "", 0, out, sizeof(out)), 0);
	assert_string_equal(
		out, "t=0,v1=2572e102ebbc88d57bc0ef48471ee28bb7fc8c6e9c0558b3c8e5d276f84ac9c3");
}

static void verify_accepts_and_window(void **state)
{
	const int64_t t = 1700000000;
	size_t n = strlen(body);

	assert_int_equal(signing_verify("whsec_test", want, body, n, t, 0), 0);
	/* Past: at the 300 s limit accepted, one second beyond refused. */
	assert_int_equal(signing_verify("whsec_test", want, body, n, t + 300, 0), 0);
	assert_int_equal(signing_verify("whsec_test", want, body, n, t + 301, 0), -ESTALE);
	/* Future: 30 s of skew accepted, 31 refused. */
	assert_int_equal(signing_verify("whsec_test", want, body, n, t - 30, 0), 0);
	assert_int_equal(signing_verify("whsec_test", want, body, n, t - 31, 0), -ESTALE);
	/* A custom tolerance. */
	assert_int_equal(signing_verify("whsec_test", want, body, n, t + 61, 60), -ESTALE);
	assert_int_equal(signing_verify("whsec_test", want, body, n, t + 60, 60), 0);
}

static void verify_refuses_wrong(void **state)
{
	const int64_t t = 1700000000;
	size_t n = strlen(body);
	char bad[sizeof(want)];

	assert_int_equal(signing_verify("other", want, body, n, t, 0), -EPERM);
	assert_int_equal(signing_verify("whsec_test", want, body, n - 1, t, 0), -EPERM);
	memcpy(bad, want, sizeof(want));
	bad[sizeof(want) - 2] ^= 1; /* last hex digit */
	assert_int_equal(signing_verify("whsec_test", bad, body, n, t, 0), -EPERM);
	/* The timestamp is signed: moving it breaks the MAC. */
	memcpy(bad, want, sizeof(want));
	bad[11] = '1';
	assert_int_equal(signing_verify("whsec_test", bad, body, n, t, 0), -EPERM);
}

static void verify_malformed(void **state)
{
	const char *cases[] = {
		"",
		"t=1700000000",
		"v1=827f65e919695f28428361cf43675381f99c07e689d077b1489080b4415df7e6",
		"t=abc,v1=827f65e919695f28428361cf43675381f99c07e689d077b1489080b4415df7e6",
		"t=,v1=827f65e919695f28428361cf43675381f99c07e689d077b1489080b4415df7e6",
		"t=1700000000,v1=827f",
		"t=1,t=2,v1=827f65e919695f28428361cf43675381f99c07e689d077b1489080b4415df7e6",
		"t=99999999999999999999,v1=827f65e919695f28428361cf43675381f99c07e689d077b14890",
	};

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
		assert_int_equal(
			signing_verify("whsec_test", cases[i], body, strlen(body), 1700000000, 0),
			-EBADMSG);
	assert_int_equal(signing_verify("whsec_test", NULL, body, 1, 1700000000, 0), -EBADMSG);
}

static void verify_rotation_and_spaces(void **state)
{
	const char *h =
		"t=1700000000, v1=0000000000000000000000000000000000000000000000000000000000"
		"000000,v0=zz,v1=827f65e919695f28428361cf43675381f99c07e689d077b1489080b4415df7e6";

	assert_int_equal(signing_verify("whsec_test", h, body, strlen(body), 1700000000, 0), 0);
}

/* Spaces around each part are trimmed; hex digits compare case-insensitively. */
static void verify_trailing_spaces_and_upper_case(void **state)
{
	const char *spaced = " t=1700000000 , v1=827f65e919695f28428361cf43675381f99c07e689d077b1"
			     "489080b4415df7e6 ";
	const char *upper = "t=1700000000,v1=827F65E919695F28428361CF43675381F99C07E689D077B1"
			    "489080B4415DF7E6";

	assert_int_equal(signing_verify("whsec_test", spaced, body, strlen(body), 1700000000, 0),
			 0);
	assert_int_equal(signing_verify("whsec_test", upper, body, strlen(body), 1700000000, 0), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(rfc4231_vectors),
		cmocka_unit_test(sign_known_header),
		cmocka_unit_test(verify_accepts_and_window),
		cmocka_unit_test(verify_refuses_wrong),
		cmocka_unit_test(verify_malformed),
		cmocka_unit_test(verify_rotation_and_spaces),
		cmocka_unit_test(verify_trailing_spaces_and_upper_case),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
