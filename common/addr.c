/* Addresses given as text; see addr.h. */
#include "addr.h"

#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

bool addr_is_loopback(const char *host)
{
	static const unsigned char mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	unsigned char b[sizeof(struct in6_addr)];

	if (!host)
		return false;
	if (inet_pton(AF_INET, host, b) == 1)
		return b[0] == 127;
	if (inet_pton(AF_INET6, host, b) != 1)
		return false;
	if (!memcmp(b, mapped, sizeof(mapped)))
		return b[12] == 127;
	return !memcmp(b, &in6addr_loopback, sizeof(b));
}

int addr_hostport_parse(const char *text, char *host, size_t hostlen, int *port)
{
	unsigned char bin[sizeof(struct in6_addr)];
	const char *colon, *h = text;
	size_t n;
	int family = AF_INET;

	if (!text || !host || !port)
		return -EINVAL;
	if (*text == '[') {
		const char *close = strchr(text, ']');
		if (!close || close[1] != ':')
			return -EINVAL;
		h = text + 1;
		n = (size_t)(close - h);
		colon = close + 1;
		family = AF_INET6;
	} else {
		colon = strrchr(text, ':');
		if (!colon || memchr(text, ':', (size_t)(colon - text)))
			return -EINVAL; /* no port, or a bare IPv6 literal (brackets needed) */
		n = (size_t)(colon - text);
	}
	if (n == 0 || n >= hostlen)
		return -EINVAL;
	memcpy(host, h, n);
	host[n] = '\0';
	if (inet_pton(family, host, bin) != 1)
		return -EINVAL;
	const char *p = colon + 1;
	if (*p < '0' || *p > '9' || strlen(p) > 5)
		return -EINVAL;
	char *end;
	long v = strtol(p, &end, 10);
	if (*end || v < 1 || v > 65535)
		return -EINVAL;
	*port = (int)v;
	return 0;
}

int addr_http_url_check(const char *text, char *why, size_t whylen)
{
	CURLU *u = curl_url();
	char *scheme = NULL, *host = NULL;
	int rc = -EINVAL;

	if (!u)
		return -ENOMEM;
	if (!text || curl_url_set(u, CURLUPART_URL, text, 0) != CURLUE_OK) {
		snprintf(why, whylen, "not a URL");
		goto out;
	}
	if (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
	    (strcasecmp(scheme, "http") != 0 && strcasecmp(scheme, "https") != 0)) {
		snprintf(why, whylen, "the scheme must be http or https");
		goto out;
	}
	if (curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK || !*host) {
		snprintf(why, whylen, "no host");
		goto out;
	}
	rc = 0;
out:
	curl_free(scheme);
	curl_free(host);
	curl_url_cleanup(u);
	return rc;
}
