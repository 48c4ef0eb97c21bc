#include "log.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <time.h>

enum log_level log_current_level = LOG_INFO;

static const char *const level_names[] = { "error", "warn", "info", "debug" };
static const char *const group_names[LOG_GROUP_COUNT] = {
	"main", "pg", "redis", "http", "gate", "dial", "embed",
};

void log_set_level(enum log_level level)
{
	log_current_level = level;
}

int log_level_parse(const char *name, enum log_level *out)
{
	for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcasecmp(name, level_names[i]) == 0) {
			*out = (enum log_level)i;
			return 0;
		}
	}
	return -EINVAL;
}

const char *log_level_name(enum log_level level)
{
	if ((unsigned)level < sizeof(level_names) / sizeof(level_names[0]))
		return level_names[level];
	return "unknown";
}

static void format_ts(char *buf, size_t len)
{
	struct timespec ts;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	size_t n = strftime(buf, len, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + n, len - n, ".%03ldZ", ts.tv_nsec / 1000000);
}

static void add_id(cJSON *obj, const char *key, const char *value)
{
	if (value)
		cJSON_AddStringToObject(obj, key, value);
}

void log_emit(enum log_level level, enum log_group group, const struct log_ids *ids,
	      const char *fmt, ...)
{
	char msg[1024];
	char ts[40];
	va_list ap;
	int saved_errno = errno;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	format_ts(ts, sizeof(ts));

	cJSON *obj = cJSON_CreateObject();
	char *line = NULL;
	if (obj) {
		cJSON_AddStringToObject(obj, "ts", ts);
		cJSON_AddStringToObject(obj, "level", log_level_name(level));
		cJSON_AddStringToObject(
			obj, "group", (unsigned)group < LOG_GROUP_COUNT ? group_names[group] : "?");
		cJSON_AddStringToObject(obj, "msg", msg);
		if (ids) {
			add_id(obj, "org", ids->org);
			add_id(obj, "campaign", ids->campaign);
			add_id(obj, "contact", ids->contact);
			add_id(obj, "call", ids->call);
			add_id(obj, "conn", ids->conn);
		}
		line = cJSON_PrintUnformatted(obj);
		cJSON_Delete(obj);
	}
	if (line) {
		fprintf(stderr, "%s\n", line);
		cJSON_free(line);
	} else {
		/* Out of memory: still say something, without JSON escaping guarantees. */
		fprintf(stderr, "{\"level\":\"%s\",\"msg\":\"log line lost (no memory)\"}\n",
			log_level_name(level));
	}
	errno = saved_errno;
}

char *log_mask_phone(const char *phone, char *buf, size_t len)
{
	size_t n = phone ? strlen(phone) : 0;
	const char *tail = n > 4 ? phone + n - 4 : (phone ? phone : "");

	if (len > 0)
		snprintf(buf, len, "***%s", tail);
	return buf;
}
