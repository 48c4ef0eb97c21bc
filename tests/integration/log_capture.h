/* The process's log lines (stderr) captured while a test provokes a condition, to check the
 * level a line is written at (common/log.h: one JSON object per line). */
#ifndef DSP_TEST_LOG_CAPTURE_H
#define DSP_TEST_LOG_CAPTURE_H

#include "log.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

struct log_capture {
	FILE *file;
	int saved; /* the real stderr */
	enum log_level level;
};

/* From here until log_capture_end(), stderr goes to a temporary file and the level is at least
 * level. */
static inline void log_capture_begin(struct log_capture *c, enum log_level level)
{
	fflush(stderr);
	c->file = tmpfile();
	assert_non_null(c->file);
	c->saved = dup(STDERR_FILENO);
	assert_true(c->saved >= 0);
	assert_true(dup2(fileno(c->file), STDERR_FILENO) >= 0);
	c->level = log_current_level;
	if (level > log_current_level)
		log_set_level(level);
}

/* Puts stderr and the level back and reads what was written meanwhile into buf (also written
 * to the real stderr, so it stays in the test's log). */
static inline void log_capture_end(struct log_capture *c, char *buf, size_t size)
{
	size_t n;

	fflush(stderr);
	assert_true(dup2(c->saved, STDERR_FILENO) >= 0);
	close(c->saved);
	log_set_level(c->level);
	rewind(c->file);
	n = fread(buf, 1, size - 1, c->file);
	buf[n] = '\0';
	fclose(c->file);
	fputs(buf, stderr);
}

/* The level of the first line of buf whose message contains msg ("warn", "error"...), or NULL
 * when no line does. */
static inline const char *log_capture_level(const char *buf, const char *msg, char *lvl,
					    size_t size)
{
	const char *hit = strstr(buf, msg), *line, *l;

	if (!hit)
		return NULL;
	for (line = hit; line > buf && line[-1] != '\n'; line--)
		;
	l = strstr(line, "\"level\":\"");
	if (!l || l > hit)
		return NULL;
	l += 9;
	snprintf(lvl, size, "%.*s", (int)strcspn(l, "\""), l);
	return lvl;
}

#endif
