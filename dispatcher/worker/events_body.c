/* The provider event body, parsed and validated (events_body.h). No I/O. */
#include "events_body.h"

#include "ident.h"
#include "json_strict.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

static const char *const terminal_statuses[] = { "completed", "failed", "no-answer", "busy",
						 "canceled" };

/* --- RFC 3339 --- */

static int digits(const char *s, int n, int *out)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if (!isdigit((unsigned char)s[i]))
			return -EINVAL;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return 0;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian; H. Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
	y -= m <= 2;
	int64_t era = (y >= 0 ? y : y - 399) / 400;
	int64_t yoe = y - era * 400;
	int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
	return era * 146097 + doe - 719468;
}

static int month_days(int y, int m)
{
	static const int days[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;

	return m == 2 && leap ? 29 : days[m - 1];
}

int events_parse_time(const char *s, int64_t *out_us)
{
	int y, mo, d, h, mi, sec, oh = 0, om = 0, sign = 0;
	int64_t frac_us = 0;
	const char *p;

	if (!s || strlen(s) < 20 || digits(s, 4, &y) || s[4] != '-' || digits(s + 5, 2, &mo) ||
	    s[7] != '-' || digits(s + 8, 2, &d) || !strchr("Tt ", s[10]) || !s[10] ||
	    digits(s + 11, 2, &h) || s[13] != ':' || digits(s + 14, 2, &mi) || s[16] != ':' ||
	    digits(s + 17, 2, &sec))
		return -EINVAL;
	if (y < 1 || mo < 1 || mo > 12 || d < 1 || d > month_days(y, mo) || h > 23 || mi > 59 ||
	    sec > 60)
		return -EINVAL;
	p = s + 19;
	if (*p == '.') {
		int n = 0;
		for (p++; isdigit((unsigned char)*p); p++, n++)
			if (n < 6)
				frac_us = frac_us * 10 + (*p - '0');
		if (n == 0)
			return -EINVAL;
		for (; n < 6; n++)
			frac_us *= 10;
	}
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		sign = *p == '+' ? 1 : -1;
		if (digits(p + 1, 2, &oh) || p[3] != ':' || digits(p + 4, 2, &om) || oh > 23 ||
		    om > 59)
			return -EINVAL;
		p += 6;
	} else {
		return -EINVAL;
	}
	if (*p)
		return -EINVAL;
	int64_t t = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec -
		    sign * (oh * 3600 + om * 60);
	*out_us = t * 1000000 + frac_us;
	return 0;
}

static const char *str_field(const cJSON *o, const char *name)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(o, name);

	return cJSON_IsString(f) ? f->valuestring : NULL;
}

static bool printable(const char *s, size_t max)
{
	size_t n = 0;

	for (; s[n]; n++)
		if (n >= max || s[n] < 0x21 || s[n] > 0x7e)
			return false;
	return n > 0;
}

/* The checks of events_parse_body() on e. Returns NULL or the message of a 400: a constant,
 * or err (errlen bytes) when it names a byte or field. */
static const char *parse(struct events_event *r, const char *body, size_t len, char *err,
			 size_t errlen)
{
	char jerr[JSON_STRICT_ERR];
	cJSON *j = json_strict_parse(body, len, jerr, sizeof(jerr));
	const char *msg = NULL, *key, *pcid, *status, *when;
	const cJSON *occ;
	int64_t seq;
	size_t i;

	if (!j) {
		snprintf(err, errlen, "the body is not a JSON object: %s", jerr);
		return err;
	}
	if (!cJSON_IsObject(j)) {
		msg = "the body is not a JSON object";
		goto out;
	}
	key = str_field(j, "idempotency_key");
	pcid = str_field(j, "call_id");
	status = str_field(j, "status");
	occ = cJSON_GetObjectItemCaseSensitive(j, "occurred_at");
	if (!ident_uuid_ok(key)) {
		msg = "idempotency_key must be the call id (a uuid)";
		goto out;
	}
	if (!pcid || !printable(pcid, EVENTS_PROVIDER_ID_MAX)) {
		msg = "call_id must be 1 to 128 printable characters";
		goto out;
	}
	if (!status || strlen(status) >= sizeof(r->status)) {
		msg = "status is missing";
		goto out;
	}
	if (json_strict_int(j, "sequence", 0, INT32_MAX, &seq, err, errlen)) {
		msg = err;
		goto out;
	}
	if (occ && !cJSON_IsNull(occ)) {
		when = cJSON_IsString(occ) ? occ->valuestring : NULL;
		if (!when || events_parse_time(when, &r->occ_us) || r->occ_us < 0) {
			msg = "occurred_at must be an RFC 3339 date-time after 1970";
			goto out;
		}
		r->has_time = true;
	}
	snprintf(r->status, sizeof(r->status), "%s", status);
	if (strcmp(status, "ringing") != 0 && strcmp(status, "answered") != 0) {
		for (i = 0; i < sizeof(terminal_statuses) / sizeof(terminal_statuses[0]); i++)
			if (strcmp(status, terminal_statuses[i]) == 0)
				break;
		if (i == sizeof(terminal_statuses) / sizeof(terminal_statuses[0])) {
			msg = "status must be ringing, answered, completed, failed, no-answer, "
			      "busy "
			      "or canceled";
			goto out;
		}
		r->terminal = true;
	}
	for (i = 0; i < sizeof(r->call); i++)
		r->call[i] = (char)tolower((unsigned char)key[i]);
	snprintf(r->pcid, sizeof(r->pcid), "%s", pcid);
	r->seq = (int32_t)seq;
out:
	cJSON_Delete(j);
	return msg;
}

int events_parse_body(const char *body, size_t len, struct events_event *out, char *err,
		      size_t errlen)
{
	struct events_event e = { 0 };
	char buf[EVENTS_BODY_ERR];
	const char *msg;

	if (errlen)
		err[0] = '\0';
	if (!body)
		len = 0; /* no body: "invalid JSON at byte 0" */
	msg = parse(&e, body ? body : "", len, buf, sizeof(buf));
	if (msg) {
		if (errlen)
			snprintf(err, errlen, "%s", msg);
		return -EINVAL;
	}
	*out = e;
	return 0;
}
