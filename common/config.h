/* Table-driven configuration (STYLE rule 7).
 *
 * Every setting is one row: its environment variable, type, bounds, default, whether it may
 * change while the process runs, and one line of help. config_load() reads the variables over
 * the defaults, validates every value once, and writes them into a caller-defined struct at the
 * row's offset. The same table prints `--help` and the README's configuration table, so the
 * documentation cannot drift from the code.
 */
#ifndef DSP_CONFIG_H
#define DSP_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

enum config_type {
	CONFIG_STRING, /* char * (owned by the target struct; NULL when unset and no default) */
	CONFIG_INT,    /* long long within [min, max] */
	CONFIG_BOOL,   /* bool: true/false, 1/0, yes/no, on/off */
	CONFIG_ENUM,   /* int: index into the '|'-separated `choices` */
};

struct config_setting {
	const char *name; /* environment variable */
	enum config_type type;
	long long min;	     /* CONFIG_INT: smallest accepted value */
	long long max;	     /* CONFIG_INT: largest accepted value */
	const char *def;     /* default, as text; NULL = unset (CONFIG_STRING only) */
	const char *choices; /* CONFIG_ENUM: "a|b|c" */
	const char *unit;    /* shown in the help ("ms", "s"), or NULL */
	bool runtime;	     /* may change without a restart */
	size_t offset;	     /* where the value goes in the target struct */
	const char *help;    /* one sentence */
};

/* Looks up a variable; returns NULL when it is not set. The default is getenv(). */
typedef const char *(*config_getter)(const char *name, void *ctx);

/* Reads every setting of tab[0..n) into target. get may be NULL (getenv). A variable set to the
 * empty string is refused (DSP_ECONFIG), not taken as unset. On the first bad value
 * writes a message naming the setting and its bound into err, frees what was loaded, and returns
 * DSP_ECONFIG; returns -ENOMEM on allocation failure; 0 on success. Strings in target are owned
 * by it: release them with config_free(). */
int config_load(const struct config_setting *tab, size_t n, void *target, config_getter get,
		void *ctx, char *err, size_t errlen);

/* Longest escaped value shown in a message (config_escape()), with its NUL. */
#define CONFIG_SHOWN_MAX 96

/* Writes in to out (outlen bytes, NUL-terminated) for a message: control characters, '"' and
 * '\\' escaped (\n, \t, \r, \xNN, \", \\), cut with "..." when it does not fit. */
void config_escape(const char *in, char *out, size_t outlen);

/* Frees the strings config_load() stored in target and sets them to NULL. */
void config_free(const struct config_setting *tab, size_t n, void *target);

/* Prints the table for humans (`--help`) when markdown is false, or as a Markdown table. */
void config_print(const struct config_setting *tab, size_t n, FILE *out, bool markdown);

#endif
