/* The provider event body (events.h), parsed and validated with no I/O: what events.c does
 * with a body once its signature is verified, apart so that it can be unit-tested and fuzzed
 * (tests/fuzz/fuzz_events.c) without a server, a database or a loop.
 *
 * The body is {"call_id","idempotency_key","status","sequence","occurred_at"?}, parsed strictly
 * (common/json_strict.h: trailing bytes, a NUL or control character in a string, a key twice, a
 * non-integer sequence are refused). The rules are those of events.h's 400 line.
 */
#ifndef DSP_WORKER_EVENTS_BODY_H
#define DSP_WORKER_EVENTS_BODY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define EVENTS_PROVIDER_ID_MAX 128 /* bytes of the provider's call id */
#define EVENTS_BODY_ERR	       192 /* room for every message of events_parse_body() */

/* One event, validated. */
struct events_event {
	char call[37];			       /* idempotency_key lower-cased: our call id */
	char pcid[EVENTS_PROVIDER_ID_MAX + 1]; /* the provider's call id (call_id) */
	char status[16];		       /* one of the seven statuses */
	int32_t seq;			       /* sequence, 0..INT32_MAX */
	bool has_time;			       /* occurred_at was given (not null) */
	bool terminal;			       /* completed, failed, no-answer, busy, canceled */
	int64_t occ_us;			       /* occurred_at, µs since the epoch (>= 0) */
};

/* Parses and validates body (len bytes, need not be NUL-terminated) into *out. Returns 0, or
 * -EINVAL with the message of the 400 in err (errlen bytes, always NUL-terminated when errlen >
 * 0; EVENTS_BODY_ERR holds every message whole), naming the byte or field when there is one.
 * *out is fully written only on success. */
int events_parse_body(const char *body, size_t len, struct events_event *out, char *err,
		      size_t errlen);

/* Parses an RFC 3339 date-time ("2024-05-01T12:00:00.123Z", "...+02:00") into microseconds
 * since the Unix epoch. Returns 0 or -EINVAL (malformed, out of range: year 1..9999, a day the
 * month does not have). */
int events_parse_time(const char *s, int64_t *out_us);

#endif
