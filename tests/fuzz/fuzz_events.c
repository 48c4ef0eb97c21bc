/* Fuzz target: the provider event body (POST /provider/events), as dispatcher/worker/events.c
 * reads it once its signature is verified (events_body.h), plus its RFC 3339 reader and the
 * X-Signature check of common/signing.h on the same bytes.
 *
 * Properties: no crash; a refusal has a message; an accepted event has a lower-case uuid, a
 * printable provider id of 1 to 128 bytes, one of the seven statuses (terminal exactly for the
 * five terminal ones), a sequence in 0..2^31-1 and a time after 1970; events_parse_time agrees
 * with timegm() on every time it accepts. */
#include "fuzz.h"

#include "events_body.h"
#include "signing.h"

#include <ctype.h>
#include <errno.h>
#include <string.h>
#include <time.h>

static void check_event(const struct events_event *e)
{
	static const char *const st[] = { "ringing",   "answered", "completed", "failed",
					  "no-answer", "busy",	   "canceled" };
	size_t i, n;

	FUZZ_CHECK(strlen(e->call) == 36);
	for (i = 0; i < 36; i++)
		FUZZ_CHECK(i == 8 || i == 13 || i == 18 || i == 23
				   ? e->call[i] == '-'
				   : isxdigit((unsigned char)e->call[i]) &&
					     !isupper((unsigned char)e->call[i]));
	n = strlen(e->pcid);
	FUZZ_CHECK(n >= 1 && n <= EVENTS_PROVIDER_ID_MAX);
	for (i = 0; i < n; i++)
		FUZZ_CHECK(e->pcid[i] > 0x20 && e->pcid[i] < 0x7f);
	for (i = 0; i < sizeof(st) / sizeof(st[0]); i++)
		if (strcmp(e->status, st[i]) == 0)
			break;
	FUZZ_CHECK(i < sizeof(st) / sizeof(st[0]));
	FUZZ_CHECK(e->terminal == (i >= 2));
	FUZZ_CHECK(e->seq >= 0);
	FUZZ_CHECK(!e->has_time || e->occ_us >= 0);
}

/* The input as a date-time: where it is accepted, the same instant as timegm() says. */
static void check_time(const char *s)
{
	int64_t us;
	struct tm tm = { 0 };
	char tail;

	if (events_parse_time(s, &us))
		return;
	/* Compare whole seconds of the plain forms, "YYYY-MM-DDTHH:MM:SSZ". */
	if (strlen(s) != 20 || s[19] != 'Z' || s[17] == '6' ||
	    sscanf(s, "%4d-%2d-%2d%*c%2d:%2d:%2d%c", &tm.tm_year, &tm.tm_mon, &tm.tm_mday,
		   &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &tail) != 7)
		return;
	tm.tm_year -= 1900;
	tm.tm_mon -= 1;
	FUZZ_CHECK((int64_t)timegm(&tm) * 1000000 == us);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct events_event e;
	char err[EVENTS_BODY_ERR];
	char *s;
	const uint8_t *nl;

	if (events_parse_body((const char *)data, size, &e, err, sizeof(err)) == 0)
		check_event(&e);
	else
		FUZZ_CHECK(err[0] != '\0' && strlen(err) < sizeof(err));

	s = malloc(size + 1);
	FUZZ_CHECK(s != NULL);
	memcpy(s, data, size);
	s[size] = '\0';
	check_time(s);
	/* "<X-Signature>\n<body>": the header as the server hands it over (a C string). */
	nl = memchr(data, '\n', size);
	if (nl) {
		size_t h = (size_t)(nl - data);
		s[h] = '\0';
		int rc = signing_verify("whsec_fuzz", s, nl + 1, size - h - 1, 1714564800, 0);
		FUZZ_CHECK(rc == 0 || rc == -EBADMSG || rc == -ESTALE || rc == -EPERM);
	}
	free(s);
	return 0;
}
