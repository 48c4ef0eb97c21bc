/* dispatcher: the command-line entry point. Parses the command, loads the settings table, and
 * hands over to the command's module. */
#include "admin.h"
#include "build_config.h"
#include "demo.h"
#include "error.h"
#include "log.h"
#include "migrate.h"
#include "run.h"
#include "settings.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *out)
{
	fprintf(out,
		"usage: dispatcher COMMAND [OPTIONS]\n"
		"\n"
		"Campaign fair-share batch dispatcher of an outbound voice-call platform.\n"
		"\n"
		"Commands:\n"
		"  migrate            apply pending database migrations (needs DATABASE_URL); safe "
		"to\n"
		"                     run from many workers at once\n"
		"  migrate --status   list migrations and whether each is applied; exit 3 if any "
		"is\n"
		"                     pending\n"
		"  run                the worker: claim, select, admit, dial; SIGTERM drains\n"
		"  demo [--minutes M] [--workers N] [--lines L] [--seed S]\n"
		"                     run everything on this machine for about a minute and show\n"
		"                     the fair share live (private PostgreSQL, Redis, provider\n"
		"                     stub); see demo --help\n"
		"  admin NOUN VERB [--option VALUE]...\n"
		"                     organisations and their limits, agents, campaigns, API keys\n"
		"                     (DATABASE_URL); see admin --help\n"
		"  config [--markdown]\n"
		"                     print the configuration table with its bounds and defaults\n"
		"  --help, -h         this text\n"
		"  --version          the version\n"
		"\n"
		"Configuration (environment variables):\n");
	config_print(settings_table, settings_table_len, out, false);
}

/* A parsed command line. */
struct command {
	enum { CMD_MIGRATE, CMD_CONFIG, CMD_RUN } which;
	bool status_only; /* migrate --status */
	bool markdown;	  /* config --markdown */
};

/* Parses argv[1..argc): the command and its options, every other argument refused. Returns 0, or
 * 2 after a message on stderr. */
static int parse_command(int argc, char **argv, struct command *c)
{
	const char *cmd = argv[1];
	bool *flag = NULL;
	const char *flag_name = NULL;

	*c = (struct command){ 0 };
	if (strcmp(cmd, "migrate") == 0) {
		c->which = CMD_MIGRATE;
		flag = &c->status_only;
		flag_name = "--status";
	} else if (strcmp(cmd, "run") == 0) {
		c->which = CMD_RUN;
	} else if (strcmp(cmd, "config") == 0) {
		c->which = CMD_CONFIG;
		flag = &c->markdown;
		flag_name = "--markdown";
	} else {
		fprintf(stderr, "dispatcher: unknown command '%s' (try --help)\n", cmd);
		return 2;
	}
	for (int i = 2; i < argc; i++) {
		if (flag && strcmp(argv[i], flag_name) == 0 && !*flag) {
			*flag = true;
			continue;
		}
		char shown[CONFIG_SHOWN_MAX];
		config_escape(argv[i], shown, sizeof(shown));
		fprintf(stderr, "dispatcher: %s: unexpected argument '%s' (try --help)\n", cmd,
			shown);
		return 2;
	}
	return 0;
}

/* The flags that stand alone: --help, -h, --version. Returns -1 when argv[1] is none of them. */
static int standalone(int argc, char **argv)
{
	bool help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0;
	bool version = strcmp(argv[1], "--version") == 0;

	if (!help && !version)
		return -1;
	if (argc > 2) {
		fprintf(stderr, "dispatcher: %s takes no argument\n", argv[1]);
		return 2;
	}
	if (help)
		usage(stdout);
	else
		printf("dispatcher %s\n", DISPATCHER_VERSION);
	return 0;
}

int main(int argc, char **argv)
{
	struct settings s;
	struct command c;
	int rc;

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if ((rc = standalone(argc, argv)) >= 0)
		return rc;
	if (strcmp(argv[1], "demo") == 0) /* its own environment: it sets its workers' */
		return demo_main(argc - 2, argv + 2);
	if (strcmp(argv[1], "admin") == 0) /* its own options, checked before settings */
		return admin_main(argc - 2, argv + 2);
	if (parse_command(argc, argv, &c))
		return 2;
	if (settings_load(&s) < 0)
		return 2;
	log_set_level((enum log_level)s.log_level);
	if (c.which == CMD_MIGRATE) {
		rc = migrate_main(&s, c.status_only);
	} else if (c.which == CMD_RUN) {
		rc = run_main(&s);
	} else {
		config_print(settings_table, settings_table_len, stdout, c.markdown);
		rc = 0;
	}
	settings_free(&s);
	return rc;
}
