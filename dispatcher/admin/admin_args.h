/* `dispatcher admin` options: a table per subcommand and one parser that checks every value
 * against it before anything connects (pure: no libpq, no I/O besides the message stream).
 *
 * Options are `--name VALUE` or `--name=VALUE`; each at most once; anything not in the
 * subcommand's table is refused. A value is checked against its type and bounds and kept as
 * canonical text (integers re-printed in decimal, booleans as true/false, "none" as the empty
 * string), ready to be a parameter of a prepared statement.
 */
#ifndef DSP_ADMIN_ARGS_H
#define DSP_ADMIN_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define ADMIN_MAX_OPTS 12

enum admin_type {
	ADMIN_ID,	   /* [A-Za-z0-9_-]{1,64}: the ids of the schema's CHECKs, plan, tier */
	ADMIN_NAME,	   /* 1..200 bytes of UTF-8 without control characters */
	ADMIN_INT,	   /* a decimal integer within [lo, hi] */
	ADMIN_INT_OR_NONE, /* as ADMIN_INT, or "none" (unset: kept as "") */
	ADMIN_BOOL,	   /* true/false */
	ADMIN_E164,	   /* +[1-9] then 6..14 digits */
};

struct admin_opt {
	const char *name;     /* "--org-limit" */
	enum admin_type type; /* how the value is checked */
	long long lo, hi;     /* bounds of ADMIN_INT and ADMIN_INT_OR_NONE */
	bool required;	      /* refused when absent */
	const char *help;     /* one line for --help */
};

struct admin_spec {
	const char *noun, *verb;      /* "org", "create" */
	const char *summary;	      /* one line for --help */
	const struct admin_opt *opts; /* borrowed, static */
	size_t nopts;		      /* at most ADMIN_MAX_OPTS */
	bool need_one;		      /* at least one optional option must be given */
};

struct admin_args {
	const struct admin_spec *spec;	 /* borrowed */
	const char *val[ADMIN_MAX_OPTS]; /* per option of spec: its value, NULL when absent */
	char buf[ADMIN_MAX_OPTS][24];	 /* canonical text of integer and boolean values */
};

/* Parses argv[0..argc) (the options after the subcommand's two words) against spec into *out.
 * Values point into argv or into out->buf (borrowed: valid while both live). Returns 0, or
 * -EINVAL after one line on err naming the subcommand, the option and what it accepts. */
int admin_args_parse(const struct admin_spec *spec, int argc, char **argv, struct admin_args *out,
		     FILE *err);

/* The value of option name ("--org"), or NULL when it was not given. name must be one of the
 * spec's options (a programming error otherwise: aborts). */
const char *admin_arg(const struct admin_args *a, const char *name);

#endif
