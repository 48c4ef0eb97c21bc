/* `dispatcher admin`: the subcommand table, the connection, and the commands (admin.h). */
#include "admin.h"

#include "admin_args.h"
#include "admin_sql.h"
#include "apikey.h"
#include "config.h"
#include "log.h"
#include "pg_conn.h"
#include "settings.h"

#include <openssl/crypto.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PARAMS 12

/* One subcommand: its options and what runs it on a connection. */
struct command {
	struct admin_spec spec;
	int (*run)(PGconn *c, const struct admin_args *a);
};

/* The limits an organisation carries, shared by org create and org set. */
/* clang-format off */
#define ORG_LIMIT_OPTS \
	{ "--org-limit", ADMIN_INT, 1, 100000, false, \
	  "concurrent calls of the organisation (C1) [20]" }, \
	{ "--per-agent-limit", ADMIN_INT_OR_NONE, 1, 100000, false, \
	  "concurrent calls per agent; gates only below the org limit (C2) [none]" }, \
	{ "--enforced", ADMIN_BOOL, 0, 0, false, "concurrency_management_enabled (C3) [true]" }, \
	{ "--rate-default", ADMIN_INT, 1, 1000000, false, \
	  "requests per minute, default bucket (R1) [1000]" }, \
	{ "--rate-calls", ADMIN_INT, 1, 1000000, false, \
	  "requests per minute, calls.create bucket [600]" }, \
	{ "--rate-executions", ADMIN_INT, 1, 1000000, false, \
	  "requests per minute, executions.list bucket [600]" }, \
	{ "--pending-ceiling", ADMIN_INT, 0, 100000000, false, \
	  "undialled contacts the organisation may queue (R6) [250000]" }, \
	{ "--plan", ADMIN_ID, 0, 0, false, "plan shown by /v2/user/me [free]" }, \
	{ "--tier", ADMIN_ID, 0, 0, false, "rate_limit_tier shown by /v2/user/me [free]" }
/* clang-format on */

static const struct admin_opt org_create_opts[] = {
	{ "--name", ADMIN_NAME, 0, 0, true, "the organisation's name" },
	{ "--id", ADMIN_ID, 0, 0, false, "its id [org_ and 20 random hex digits]" },
	ORG_LIMIT_OPTS,
};
static const struct admin_opt org_set_opts[] = {
	{ "--org", ADMIN_ID, 0, 0, true, "the organisation" },
	ORG_LIMIT_OPTS,
};
static const struct admin_opt filter_opts[] = {
	{ "--org", ADMIN_ID, 0, 0, false, "only this organisation's" },
};
static const struct admin_opt agent_create_opts[] = {
	{ "--org", ADMIN_ID, 0, 0, true, "its organisation" },
	{ "--id", ADMIN_ID, 0, 0, false, "its id [agent_ and 20 random hex digits]" },
	{ "--name", ADMIN_NAME, 0, 0, false, "its name [empty]" },
	{ "--from-number", ADMIN_E164, 0, 0, false, "caller id of its calls [none]" },
};
static const struct admin_opt campaign_create_opts[] = {
	{ "--org", ADMIN_ID, 0, 0, true, "its organisation" },
	{ "--agent", ADMIN_ID, 0, 0, true, "the organisation's agent that places its calls" },
	{ "--id", ADMIN_ID, 0, 0, false, "its id [cmp_ and 20 random hex digits]" },
	{ "--name", ADMIN_NAME, 0, 0, false, "its name [empty]" },
	{ "--ceiling", ADMIN_INT_OR_NONE, 1, 100000, false,
	  "max_concurrent_calls, a ceiling never a reservation (C7) [none]" },
	{ "--retry-max-attempts", ADMIN_INT, 1, 20, false, "calls per contact at most (D5) [3]" },
	{ "--retry-delay-seconds", ADMIN_INT, 0, 604800, false,
	  "wait before a contact's next call (D5) [3600]" },
};
static const struct admin_opt campaign_set_opts[] = {
	{ "--campaign", ADMIN_ID, 0, 0, true, "the campaign" },
	{ "--ceiling", ADMIN_INT_OR_NONE, 1, 100000, false, "max_concurrent_calls, or none" },
	{ "--retry-max-attempts", ADMIN_INT, 1, 20, false, "calls per contact at most" },
	{ "--retry-delay-seconds", ADMIN_INT, 0, 604800, false, "wait between calls" },
};
static const struct admin_opt key_create_opts[] = {
	{ "--org", ADMIN_ID, 0, 0, true, "the organisation the key acts for" },
	{ "--name", ADMIN_NAME, 0, 0, false, "what the key is for [empty]" },
};
static const struct admin_opt key_revoke_opts[] = {
	{ "--key", ADMIN_ID, 0, 0, true, "the key's id (k_…), as key list shows it" },
};

#define OPTS(a) a, sizeof(a) / sizeof(a[0])

/* A statement's parameters: the values of the named options, in order. */
static void params_of(const struct admin_args *a, const char *const *names, const char **out)
{
	for (size_t i = 0; names[i]; i++)
		out[i] = admin_arg(a, names[i]);
}

/* Prints an error of the database on stderr: exit 2 for what the operator named wrongly (a
 * missing or duplicated row), 1 for the rest. */
static int db_failed(PGconn *c, PGresult *res, const struct admin_args *a, const char *missing)
{
	const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
	const struct admin_spec *s = a->spec;

	if (state && strcmp(state, "23503") == 0) {
		fprintf(stderr, "dispatcher admin %s %s: %s\n", s->noun, s->verb, missing);
		return 2;
	}
	if (state && strcmp(state, "23505") == 0) {
		fprintf(stderr, "dispatcher admin %s %s: --id: '%s' already exists\n", s->noun,
			s->verb, admin_arg(a, "--id") ? admin_arg(a, "--id") : "?");
		return 2;
	}
	log_error(LOG_PG, "admin %s %s failed: %s", s->noun, s->verb, PQerrorMessage(c));
	fprintf(stderr,
		"dispatcher admin %s %s: the database refused it (see the log line above)\n",
		s->noun, s->verb);
	return 1;
}

/* Runs sql with n text parameters; returns the result, or NULL after db_failed() set *rc. */
static PGresult *exec(PGconn *c, const char *sql, int n, const char *const *p,
		      const struct admin_args *a, const char *missing, int *rc)
{
	PGresult *res = PQexecParams(c, sql, n, NULL, p, NULL, NULL, 0);
	ExecStatusType st = PQresultStatus(res);

	if (st == PGRES_TUPLES_OK || st == PGRES_COMMAND_OK)
		return res;
	*rc = db_failed(c, res, a, missing);
	PQclear(res);
	return NULL;
}

/* Prints a result as tab-separated lines, the column names first. */
static void print_table(PGresult *res)
{
	int nf = PQnfields(res);

	for (int j = 0; j < nf; j++)
		printf("%s%c", PQfname(res, j), j + 1 < nf ? '\t' : '\n');
	for (int i = 0; i < PQntuples(res); i++)
		for (int j = 0; j < nf; j++)
			printf("%s%c", PQgetvalue(res, i, j), j + 1 < nf ? '\t' : '\n');
}

static int create(PGconn *c, const struct admin_args *a, const char *sql, const char *const *names,
		  const char *missing)
{
	const char *p[MAX_PARAMS];
	int n = 0, rc = 0;

	while (names[n])
		n++;
	params_of(a, names, p);
	PGresult *res = exec(c, sql, n, p, a, missing, &rc);
	if (!res)
		return rc;
	printf("%s\n", PQgetvalue(res, 0, 0));
	PQclear(res);
	return 0;
}

static int org_create(PGconn *c, const struct admin_args *a)
{
	static const char *const names[] = { "--id",
					     "--name",
					     "--org-limit",
					     "--per-agent-limit",
					     "--enforced",
					     "--rate-default",
					     "--rate-calls",
					     "--rate-executions",
					     "--pending-ceiling",
					     "--plan",
					     "--tier",
					     NULL };
	return create(c, a, ADMIN_SQL_ORG_CREATE, names, "");
}

static int org_set(PGconn *c, const struct admin_args *a)
{
	static const char *const names[] = { "--org",
					     "--org-limit",
					     "--per-agent-limit",
					     "--enforced",
					     "--rate-default",
					     "--rate-calls",
					     "--rate-executions",
					     "--pending-ceiling",
					     "--plan",
					     "--tier",
					     NULL };
	const char *p[MAX_PARAMS];
	int rc = 0;

	params_of(a, names, p);
	PGresult *res = exec(c, ADMIN_SQL_ORG_SET, 10, p, a, "", &rc);
	if (!res)
		return rc;
	if (PQntuples(res) == 0) {
		fprintf(stderr, "dispatcher admin org set: --org: no organisation '%s'\n", p[0]);
		PQclear(res);
		return 2;
	}
	printf("organisation %s: limits_version %s -> %s\n", p[0], PQgetvalue(res, 0, 0),
	       PQgetvalue(res, 0, 1));
	PQclear(res);
	return 0;
}

static int list(PGconn *c, const struct admin_args *a, const char *sql, int nparams)
{
	const char *p[1] = { nparams ? admin_arg(a, "--org") : NULL };
	int rc = 0;
	PGresult *res = exec(c, sql, nparams, p, a, "", &rc);

	if (!res)
		return rc;
	print_table(res);
	PQclear(res);
	return 0;
}

static int org_list(PGconn *c, const struct admin_args *a)
{
	return list(c, a, ADMIN_SQL_ORG_LIST, 0);
}

static int agent_create(PGconn *c, const struct admin_args *a)
{
	static const char *const names[] = { "--id", "--org", "--name", "--from-number", NULL };
	char missing[128];

	snprintf(missing, sizeof(missing), "--org: no organisation '%s'", admin_arg(a, "--org"));
	return create(c, a, ADMIN_SQL_AGENT_CREATE, names, missing);
}

static int agent_list(PGconn *c, const struct admin_args *a)
{
	return list(c, a, ADMIN_SQL_AGENT_LIST, 1);
}

static int campaign_create(PGconn *c, const struct admin_args *a)
{
	static const char *const names[] = { "--id",
					     "--org",
					     "--agent",
					     "--name",
					     "--ceiling",
					     "--retry-max-attempts",
					     "--retry-delay-seconds",
					     NULL };
	char missing[200];

	snprintf(missing, sizeof(missing), "--agent: no agent '%s' in organisation '%s' (--org)",
		 admin_arg(a, "--agent"), admin_arg(a, "--org"));
	return create(c, a, ADMIN_SQL_CAMPAIGN_CREATE, names, missing);
}

/* campaign set, inside its transaction: the organisation's version before and after. */
static int campaign_set_txn(PGconn *c, const struct admin_args *a)
{
	static const char *const names[] = { "--campaign", "--ceiling", "--retry-max-attempts",
					     "--retry-delay-seconds", NULL };
	const char *p[MAX_PARAMS];
	char org[80], before[24];
	int rc = 0;

	params_of(a, names, p);
	PGresult *res = exec(c, ADMIN_SQL_CAMPAIGN_ORG, 1, p, a, "", &rc);
	if (!res)
		return rc;
	if (PQntuples(res) == 0) {
		fprintf(stderr, "dispatcher admin campaign set: --campaign: no campaign '%s'\n",
			p[0]);
		PQclear(res);
		return 2;
	}
	snprintf(org, sizeof(org), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	const char *op[1] = { org };
	if (!(res = exec(c, ADMIN_SQL_ORG_VERSION_LOCK, 1, op, a, "", &rc)))
		return rc;
	snprintf(before, sizeof(before), "%s", PQgetvalue(res, 0, 0));
	PQclear(res);
	if (!(res = exec(c, ADMIN_SQL_CAMPAIGN_SET, 4, p, a, "", &rc)))
		return rc;
	PQclear(res);
	if (!(res = exec(c, ADMIN_SQL_ORG_VERSION, 1, op, a, "", &rc)))
		return rc;
	printf("campaign %s: organisation %s limits_version %s -> %s\n", p[0], org, before,
	       PQgetvalue(res, 0, 0));
	PQclear(res);
	return 0;
}

static int campaign_set(PGconn *c, const struct admin_args *a)
{
	PQclear(PQexec(c, "BEGIN"));
	int rc = campaign_set_txn(c, a);
	PGresult *res = PQexec(c, rc == 0 ? "COMMIT" : "ROLLBACK");

	if (rc == 0 && PQresultStatus(res) != PGRES_COMMAND_OK)
		rc = db_failed(c, res, a, "");
	PQclear(res);
	return rc;
}

static int campaign_list(PGconn *c, const struct admin_args *a)
{
	return list(c, a, ADMIN_SQL_CAMPAIGN_LIST, 1);
}

static int key_create(PGconn *c, const struct admin_args *a)
{
	char key[APIKEY_LEN + 1], preview[APIKEY_PREVIEW_SIZE], missing[128];
	unsigned char hash[APIKEY_HASH_LEN];
	const char *p[4] = { admin_arg(a, "--org"), admin_arg(a, "--name"), (const char *)hash,
			     preview };
	const int lens[4] = { 0, 0, APIKEY_HASH_LEN, 0 }, formats[4] = { 0, 0, 1, 0 };
	int rc = 0;

	if (apikey_generate(key) < 0 || apikey_hash(key, APIKEY_LEN, hash) < 0) {
		fprintf(stderr, "dispatcher admin key create: libcrypto could not make a key\n");
		return 1;
	}
	apikey_preview(key, preview);
	PGresult *res = PQexecParams(c, ADMIN_SQL_KEY_CREATE, 4, NULL, p, lens, formats, 0);
	if (PQresultStatus(res) == PGRES_TUPLES_OK) {
		printf("%s\n%s\n", PQgetvalue(res, 0, 0), key);
		fprintf(stderr,
			"dispatcher admin key create: the key (second line) is shown "
			"this once and never again: store it now; only its SHA-256 is kept\n");
	} else {
		snprintf(missing, sizeof(missing), "--org: no organisation '%s'", p[0]);
		rc = db_failed(c, res, a, missing);
	}
	PQclear(res);
	OPENSSL_cleanse(key, sizeof(key));
	return rc;
}

static int key_list(PGconn *c, const struct admin_args *a)
{
	return list(c, a, ADMIN_SQL_KEY_LIST, 1);
}

static int key_revoke(PGconn *c, const struct admin_args *a)
{
	const char *p[1] = { admin_arg(a, "--key") };
	int rc = 0;
	PGresult *res = exec(c, ADMIN_SQL_KEY_REVOKE, 1, p, a, "", &rc);

	if (!res)
		return rc;
	if (PQntuples(res) == 0) {
		fprintf(stderr, "dispatcher admin key revoke: --key: no key '%s'\n", p[0]);
		rc = 2;
	} else {
		printf("key %s: %s\n", p[0],
		       strcmp(PQgetvalue(res, 0, 0), "t") == 0 ? "was already revoked" : "revoked");
	}
	PQclear(res);
	return rc;
}

static const struct command commands[] = {
	{ { "org", "create", "create an organisation with its limits; prints its id",
	    OPTS(org_create_opts), false },
	  org_create },
	{ { "org", "list", "list the organisations, their limits and limits_version", NULL, 0,
	    false },
	  org_list },
	{ { "org", "set", "change an organisation's limits (bumps limits_version, C4)",
	    OPTS(org_set_opts), true },
	  org_set },
	{ { "agent", "create", "create an agent; prints its id", OPTS(agent_create_opts), false },
	  agent_create },
	{ { "agent", "list", "list the agents", OPTS(filter_opts), false }, agent_list },
	{ { "campaign", "create", "create a campaign; prints its id", OPTS(campaign_create_opts),
	    false },
	  campaign_create },
	{ { "campaign", "list", "list the campaigns", OPTS(filter_opts), false }, campaign_list },
	{ { "campaign", "set", "change a campaign's ceiling or retry policy (C4)",
	    OPTS(campaign_set_opts), true },
	  campaign_set },
	{ { "key", "create", "create an API key; prints its id, then the key: once, never again",
	    OPTS(key_create_opts), false },
	  key_create },
	{ { "key", "list", "list the keys (id, preview, state; never the key)", OPTS(filter_opts),
	    false },
	  key_list },
	{ { "key", "revoke", "revoke a key: every request with it is refused from now on",
	    OPTS(key_revoke_opts), false },
	  key_revoke },
};
#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

static void usage(FILE *out)
{
	fprintf(out,
		"usage: dispatcher admin NOUN VERB [--option VALUE]...\n"
		"\n"
		"Tenants and keys, on DATABASE_URL (bounded by "
		"DISPATCHER_PG_CONNECT_TIMEOUT_MS).\n"
		"Every argument is checked before anything is written. Exit 0 done, 1 failed,\n"
		"2 bad usage (the message names the argument). Lists are tab-separated, the\n"
		"column names first. [default]\n");
	for (size_t i = 0; i < NCOMMANDS; i++) {
		const struct admin_spec *s = &commands[i].spec;
		fprintf(out, "\n  %s %s: %s\n", s->noun, s->verb, s->summary);
		for (size_t k = 0; k < s->nopts; k++)
			fprintf(out, "      %-22s %s%s\n", s->opts[k].name, s->opts[k].help,
				s->opts[k].required ? " (required)" : "");
	}
}

static const struct command *lookup(int argc, char **argv)
{
	for (size_t i = 0; argc >= 2 && i < NCOMMANDS; i++)
		if (strcmp(commands[i].spec.noun, argv[0]) == 0 &&
		    strcmp(commands[i].spec.verb, argv[1]) == 0)
			return &commands[i];
	return NULL;
}

/* Connects and runs cmd. Returns the exit code. */
static int connect_and_run(const struct command *cmd, const struct admin_args *a)
{
	struct settings s;
	PGconn *c;
	char why[256];
	int rc;

	if (settings_load(&s) < 0)
		return 2;
	log_set_level((enum log_level)s.log_level);
	if (!s.database_url) {
		fprintf(stderr, "dispatcher admin: DATABASE_URL is not set; set it to the "
				"PostgreSQL connection string\n");
		settings_free(&s);
		return 2;
	}
	if (pg_connect_blocking(s.database_url, (uint64_t)s.pg_connect_timeout_ms, &c, why,
				sizeof(why)) < 0) {
		fprintf(stderr,
			"dispatcher admin: cannot connect to DATABASE_URL: %s "
			"(DISPATCHER_PG_CONNECT_TIMEOUT_MS=%lld)\n",
			why, s.pg_connect_timeout_ms);
		settings_free(&s);
		return 1;
	}
	settings_free(&s);
	pg_route_notices(c);
	PQclear(PQexec(c, "SET application_name = 'dispatcher admin'"));
	rc = cmd->run(c, a);
	PQfinish(c);
	return rc;
}

int admin_main(int argc, char **argv)
{
	struct admin_args a;

	for (int i = 0; i < argc; i++) {
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return 0;
		}
	}
	if (argc == 0) {
		usage(stderr);
		return 2;
	}
	const struct command *cmd = lookup(argc, argv);
	if (!cmd) {
		char noun[CONFIG_SHOWN_MAX], verb[CONFIG_SHOWN_MAX];
		config_escape(argv[0], noun, sizeof(noun));
		config_escape(argc >= 2 ? argv[1] : "", verb, sizeof(verb));
		fprintf(stderr,
			"dispatcher admin: unknown command '%s%s%s' (try dispatcher admin "
			"--help)\n",
			noun, argc >= 2 ? " " : "", verb);
		return 2;
	}
	if (admin_args_parse(&cmd->spec, argc - 2, argv + 2, &a, stderr) < 0)
		return 2;
	return connect_and_run(cmd, &a);
}
