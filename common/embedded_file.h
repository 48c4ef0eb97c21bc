/* A text file compiled into the binary by common/tools/embed.py (migrations, Lua scripts). */
#ifndef DSP_EMBEDDED_FILE_H
#define DSP_EMBEDDED_FILE_H

#include <stddef.h>

struct embedded_file {
	const char *name; /* base name, e.g. "0001_init.sql" */
	const char *text; /* contents, NUL-terminated */
	size_t len;	  /* length of text in bytes */
};

#endif
