#include "retry_policy.h"

#include "backoff.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

void retry_policy_defaults(struct retry_policy *p)
{
	p->header_retries = 5;
	p->jitter_min_ms = 300;
	p->jitter_max_ms = 1200;
	p->throttle_base_ms = 1000;
	p->throttle_cap_ms = 32000;
	p->requeue_min_ms = 60000;
	p->server_tries = 4;
	p->server_base_ms = 500;
	p->server_cap_ms = 8000;
	p->timeout_tries = 3;
	p->timeout_delay_ms = 2000;
	p->retry_after_cap_ms = 86400000;
}

uint64_t retry_full_jitter(uint64_t ceiling, uint32_t rnd)
{
	if (ceiling >= UINT32_MAX)
		return (uint64_t)rnd * (ceiling / UINT32_MAX);
	/* (ceiling + 1) * rnd / 2^32 lies in [0, ceiling] and is uniform up to rounding. */
	return ((ceiling + 1) * (uint64_t)rnd) >> 32;
}

uint64_t retry_half_jitter(uint64_t d, uint32_t rnd)
{
	return d - d / 2 + retry_full_jitter(d / 2, rnd);
}

/* ---- HTTP-date (RFC 9110 §5.6.7) ---- */

static const char *const months[12] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
					"Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil). */
static int64_t days_from_civil(int64_t y, unsigned m, unsigned d)
{
	y -= m <= 2;
	const int64_t era = (y >= 0 ? y : y - 399) / 400;
	const unsigned yoe = (unsigned)(y - era * 400);
	const unsigned doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	const unsigned doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;

	return era * 146097 + (int64_t)doe - 719468;
}

/* Reads exactly n digits. */
static const char *digits(const char *s, int n, int *out)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return NULL;
		v = v * 10 + (s[i] - '0');
	}
	*out = v;
	return s + n;
}

static const char *month(const char *s, int *out)
{
	for (int i = 0; i < 12; i++) {
		if (strncmp(s, months[i], 3) == 0) {
			*out = i + 1;
			return s + 3;
		}
	}
	return NULL;
}

/* "HH:MM:SS" */
static const char *clock_part(const char *s, int *h, int *mi, int *sec)
{
	if (!(s = digits(s, 2, h)) || *s++ != ':')
		return NULL;
	if (!(s = digits(s, 2, mi)) || *s++ != ':')
		return NULL;
	return digits(s, 2, sec);
}

struct date_parts {
	int year, mon, day, hour, min, sec;
};

/* After "Sun, ": "06 Nov 1994 08:49:37 GMT" or "06-Nov-94 08:49:37 GMT". */
static const char *after_comma(const char *s, struct date_parts *d)
{
	if (!(s = digits(s, 2, &d->day)))
		return NULL;
	char sep = *s++;
	if ((sep != ' ' && sep != '-') || !(s = month(s, &d->mon)) || *s++ != sep)
		return NULL;
	if (sep == ' ') {
		if (!(s = digits(s, 4, &d->year)))
			return NULL;
	} else {
		if (!(s = digits(s, 2, &d->year)))
			return NULL;
		d->year += d->year < 70 ? 2000 : 1900;
	}
	if (*s++ != ' ' || !(s = clock_part(s, &d->hour, &d->min, &d->sec)))
		return NULL;
	return strncmp(s, " GMT", 4) == 0 ? s + 4 : NULL;
}

/* After "Sun ": "Nov  6 08:49:37 1994". */
static const char *asctime_part(const char *s, struct date_parts *d)
{
	if (!(s = month(s, &d->mon)) || *s++ != ' ')
		return NULL;
	if (*s == ' ') {
		if (!(s = digits(s + 1, 1, &d->day)))
			return NULL;
	} else if (!(s = digits(s, 2, &d->day))) {
		return NULL;
	}
	if (*s++ != ' ' || !(s = clock_part(s, &d->hour, &d->min, &d->sec)) || *s++ != ' ')
		return NULL;
	return digits(s, 4, &d->year);
}

int retry_http_date_parse(const char *s, int64_t *unix_s)
{
	struct date_parts d = { 0 };
	const char *p = s;

	if (!s)
		return -EINVAL;
	while ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z'))
		p++;
	if (p - s < 3)
		return -EINVAL;
	if (p[0] == ',' && p[1] == ' ')
		p = after_comma(p + 2, &d);
	else if (p[0] == ' ')
		p = asctime_part(p + 1, &d);
	else
		return -EINVAL;
	if (!p || *p != '\0')
		return -EINVAL;
	if (d.day < 1 || d.day > 31 || d.hour > 23 || d.min > 59 || d.sec > 60)
		return -EINVAL;
	*unix_s = days_from_civil(d.year, (unsigned)d.mon, (unsigned)d.day) * 86400 +
		  d.hour * 3600 + d.min * 60 + d.sec;
	return 0;
}

int retry_after_parse(const char *value, int64_t now_unix_ms, uint64_t *delay_ms)
{
	int64_t when;

	if (!value || !*value)
		return -EINVAL;
	if (value[0] >= '0' && value[0] <= '9') {
		uint64_t secs = 0;
		for (const char *p = value; *p; p++) {
			if (*p < '0' || *p > '9')
				return -EINVAL;
			if (secs < UINT64_MAX / 10000)
				secs = secs * 10 + (uint64_t)(*p - '0');
		}
		*delay_ms = secs < UINT64_MAX / 1000 ? secs * 1000 : UINT64_MAX;
		return 0;
	}
	if (retry_http_date_parse(value, &when) != 0)
		return -EINVAL;
	when *= 1000;
	*delay_ms = when > now_unix_ms ? (uint64_t)(when - now_unix_ms) : 0;
	return 0;
}

/* ---- the table ---- */

/* The delay a throttled answer asks for: the header plus jitter, or the doubling schedule. */
static void throttle_delay(const struct retry_policy *p, const struct retry_answer *a,
			   const struct retry_counts *c, int64_t now, uint32_t rnd,
			   struct retry_decision *out)
{
	uint64_t ra;

	if (a->status == 429 && retry_after_parse(a->retry_after, now, &ra) == 0) {
		if (ra > p->retry_after_cap_ms)
			ra = p->retry_after_cap_ms;
		uint64_t span = p->jitter_max_ms - p->jitter_min_ms;
		out->reason = RETRY_REASON_THROTTLED_HEADER;
		out->park_ms = (int64_t)ra;
		if (c->throttled >= p->header_retries && !c->maybe_delivered) {
			out->requeue = true;
			if (ra < p->requeue_min_ms)
				ra = p->requeue_min_ms;
		}
		out->delay_ms = ra + p->jitter_min_ms + retry_full_jitter(span, rnd);
		return;
	}
	out->reason = RETRY_REASON_THROTTLED;
	out->park_ms = -1;
	out->delay_ms = retry_full_jitter(
		backoff_doubled(p->throttle_base_ms, c->throttled, p->throttle_cap_ms), rnd);
}

/* Throttled. A refusal, unless an earlier send of this call may have been delivered: the call
 * may exist, so it is re-sent with the same key (never a new one) and keeps its slots. */
static void throttled(const struct retry_policy *p, const struct retry_answer *a,
		      const struct retry_counts *c, int64_t now, uint32_t rnd,
		      struct retry_decision *out)
{
	out->park_lane = true;
	out->circuit_refusal = true;
	throttle_delay(p, a, c, now, rnd, out);
	if (!c->maybe_delivered)
		out->verdict = RETRY_REFUSED;
	else if (c->throttled >= p->header_retries)
		out->verdict = RETRY_UNKNOWN;
	else
		out->verdict = RETRY_RESEND;
	if (out->verdict == RETRY_UNKNOWN)
		out->delay_ms = 0;
}

/* Unknown outcome: re-send the same key while tries remain. */
static void unknown(unsigned tries, uint64_t delay, bool flat, enum retry_reason reason,
		    const struct retry_counts *c, uint32_t rnd, struct retry_decision *out)
{
	out->reason = reason;
	out->circuit_refusal = true;
	if (c->sends >= tries) {
		out->verdict = RETRY_UNKNOWN;
		return;
	}
	out->verdict = RETRY_RESEND;
	out->delay_ms = flat ? delay : retry_half_jitter(delay, rnd);
}

/* A connect that failed or timed out: this send was not delivered. With no earlier send that
 * may have been, nothing was placed: a definitive refusal (release the slots, call again). */
static void not_connected(const struct retry_policy *p, const struct retry_counts *c,
			  enum retry_reason reason, uint32_t rnd, struct retry_decision *out)
{
	out->verdict = RETRY_REFUSED;
	out->reason = reason;
	out->circuit_refusal = true;
	(void)c;
	out->delay_ms = retry_half_jitter(p->server_base_ms, rnd);
}

static void by_transport(const struct retry_policy *p, const struct retry_counts *c,
			 enum retry_transport t, uint32_t rnd, struct retry_decision *out)
{
	unsigned n = c->sends > 0 ? c->sends - 1 : 0;
	uint64_t server = backoff_doubled(p->server_base_ms, n, p->server_cap_ms);
	bool timeout = t == RETRY_TRANSPORT_CONNECT_TIMEOUT || t == RETRY_TRANSPORT_READ_TIMEOUT;
	enum retry_reason reason = timeout ? RETRY_REASON_TIMEOUT : RETRY_REASON_CONNECTION;
	bool connect = t == RETRY_TRANSPORT_CONNECT_FAILED || t == RETRY_TRANSPORT_CONNECT_TIMEOUT;

	if (connect && !c->maybe_delivered)
		not_connected(p, c, reason, rnd, out);
	else if (timeout)
		unknown(p->timeout_tries, p->timeout_delay_ms, true, reason, c, rnd, out);
	else
		unknown(p->server_tries, server, false, reason, c, rnd, out);
}

static void by_status(const struct retry_policy *p, const struct retry_answer *a,
		      const struct retry_counts *c, uint32_t rnd, struct retry_decision *out)
{
	int s = a->status;
	unsigned n = c->sends > 0 ? c->sends - 1 : 0;
	uint64_t server = backoff_doubled(p->server_base_ms, n, p->server_cap_ms);

	if (s >= 500 && s <= 599) {
		unknown(p->server_tries, server, false, RETRY_REASON_SERVER_ERROR, c, rnd, out);
	} else if (s == 409 || s == 425) {
		unknown(p->server_tries, server, false, RETRY_REASON_SERVER_ERROR, c, rnd, out);
	} else if (s == 408) {
		unknown(p->timeout_tries, p->timeout_delay_ms, true, RETRY_REASON_TIMEOUT, c, rnd,
			out);
	} else if (s == 400 || s == 404 || s == 422) {
		out->verdict = RETRY_INVALID;
		out->reason = RETRY_REASON_REJECTED;
	} else if (s == 401 || s == 403) {
		out->verdict = RETRY_STOP_LANE;
		out->reason = RETRY_REASON_CREDENTIALS;
	} else {
		out->verdict = RETRY_STOP_LANE;
		out->reason = RETRY_REASON_UNEXPECTED;
	}
	out->stop_lane = out->verdict == RETRY_STOP_LANE;
	if (c->maybe_delivered &&
	    (out->verdict == RETRY_INVALID || out->verdict == RETRY_STOP_LANE)) {
		/* An earlier send may have placed the call: releasing its slots or failing the
		 * contact could leave a live call uncounted. It ends unknown (slots kept, no new
		 * key); an event or the maximum-duration sweep finishes it. The lane still stops. */
		out->verdict = RETRY_UNKNOWN;
	}
}

void retry_classify(const struct retry_policy *p, const struct retry_answer *a,
		    const struct retry_counts *c, int64_t now_unix_ms, uint32_t rnd,
		    struct retry_decision *out)
{
	struct retry_policy defaults;

	if (!p) {
		retry_policy_defaults(&defaults);
		p = &defaults;
	}
	memset(out, 0, sizeof(*out));
	out->park_ms = -1;
	if (a->status == 0 || a->transport != RETRY_TRANSPORT_NONE) {
		by_transport(p, c, a->transport, rnd, out);
		return;
	}
	if (a->status == 429 || (a->status >= 200 && a->status <= 299 && a->body_throttled)) {
		throttled(p, a, c, now_unix_ms, rnd, out);
		return;
	}
	if (a->status >= 200 && a->status <= 299) {
		out->verdict = RETRY_OK;
		return;
	}
	by_status(p, a, c, rnd, out);
}

const char *retry_verdict_name(enum retry_verdict v)
{
	static const char *const names[] = { "ok",	"refused",   "resend",
					     "unknown", "stop_lane", "invalid" };

	return (unsigned)v < sizeof(names) / sizeof(names[0]) ? names[v] : "?";
}

const char *retry_reason_name(enum retry_reason r)
{
	static const char *const names[] = { "none",	     "throttled_header", "throttled",
					     "server_error", "timeout",		 "connection",
					     "credentials",  "rejected",	 "unexpected" };

	return (unsigned)r < sizeof(names) / sizeof(names[0]) ? names[r] : "?";
}
