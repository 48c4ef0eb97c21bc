#include "signing.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

int signing_hmac_hex(const void *key, size_t key_len, const void *msg, size_t msg_len, char hex[65])
{
	static const char digits[] = "0123456789abcdef";
	unsigned char mac[EVP_MAX_MD_SIZE];
	unsigned int mac_len = 0;

	if (key_len > INT32_MAX)
		return -EINVAL;
	if (!HMAC(EVP_sha256(), key, (int)key_len, msg, msg_len, mac, &mac_len) || mac_len != 32)
		return -EINVAL;
	for (unsigned i = 0; i < 32; i++) {
		hex[2 * i] = digits[mac[i] >> 4];
		hex[2 * i + 1] = digits[mac[i] & 15];
	}
	hex[64] = '\0';
	return 0;
}

/* HMAC of "<t>.<body>". */
static int sign_hex(const char *secret, int64_t t, const void *body, size_t len, char hex[65])
{
	char prefix[24];
	int n = snprintf(prefix, sizeof(prefix), "%lld.", (long long)t);
	char *msg = malloc((size_t)n + len + 1);
	int err;

	if (!msg)
		return -ENOMEM;
	memcpy(msg, prefix, (size_t)n);
	if (len)
		memcpy(msg + n, body, len);
	err = signing_hmac_hex(secret, strlen(secret), msg, (size_t)n + len, hex);
	free(msg);
	return err;
}

int signing_sign(const char *secret, int64_t t, const void *body, size_t len, char *out,
		 size_t out_len)
{
	char hex[65];
	int err = sign_hex(secret, t, body, len, hex);

	if (err)
		return err;
	int n = snprintf(out, out_len, "t=%lld,v1=%s", (long long)t, hex);
	return n < 0 || (size_t)n >= out_len ? -ENOSPC : 0;
}

/* Parses a decimal timestamp of 1..18 digits (19 could overflow int64_t; 18 reach far past any
 * real clock). */
static int parse_t(const char *p, size_t n, int64_t *t)
{
	int64_t v = 0;

	if (n == 0 || n > 18)
		return -EBADMSG;
	for (size_t i = 0; i < n; i++) {
		if (p[i] < '0' || p[i] > '9')
			return -EBADMSG;
		v = v * 10 + (p[i] - '0');
	}
	*t = v;
	return 0;
}

struct parsed {
	int64_t t;
	bool have_t;
	char v1[4][64]; /* up to four candidate signatures, lower-cased */
	unsigned nv1;
};

/* Copies 64 hex digits lower-cased (the sender may write them in upper case). */
static void lower_hex(char out[64], const char *in)
{
	for (int i = 0; i < 64; i++)
		out[i] = in[i] >= 'A' && in[i] <= 'F' ? (char)(in[i] - 'A' + 'a') : in[i];
}

static int parse_header(const char *h, struct parsed *p)
{
	memset(p, 0, sizeof(*p));
	while (*h) {
		const char *end = strchr(h, ',');
		size_t n = end ? (size_t)(end - h) : strlen(h);
		const char *next = h + n;
		while (n && *h == ' ')
			h++, n--;
		while (n && h[n - 1] == ' ')
			n--;
		if (n > 2 && strncmp(h, "t=", 2) == 0) {
			if (p->have_t || parse_t(h + 2, n - 2, &p->t))
				return -EBADMSG;
			p->have_t = true;
		} else if (n == 67 && strncmp(h, "v1=", 3) == 0 && p->nv1 < 4) {
			lower_hex(p->v1[p->nv1++], h + 3);
		}
		h = next;
		if (*h == ',')
			h++;
	}
	return p->have_t && p->nv1 ? 0 : -EBADMSG;
}

int signing_verify(const char *secret, const char *header, const void *body, size_t len,
		   int64_t now, int64_t tolerance_s)
{
	struct parsed p;
	char hex[65];
	int err, match = 0;

	if (!header || !secret)
		return -EBADMSG;
	if ((err = parse_header(header, &p)))
		return err;
	if (tolerance_s <= 0)
		tolerance_s = SIGNING_TOLERANCE_S;
	if (p.t < now - tolerance_s || p.t > now + SIGNING_FUTURE_SKEW_S)
		return -ESTALE;
	if ((err = sign_hex(secret, p.t, body, len, hex)))
		return err;
	/* Compare every candidate (no early exit on a match). */
	for (unsigned i = 0; i < p.nv1; i++)
		match |= CRYPTO_memcmp(hex, p.v1[i], 64) == 0;
	return match ? 0 : -EPERM;
}
