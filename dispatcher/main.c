/* dispatcher: the command-line entry point. Parses the command, loads the settings table, and
 * hands over to the command's module. */
#include "build_config.h"
#include "demo.h"
#include "error.h"
#include "log.h"
#include "migrate.h"
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
		"  demo [--minutes M] [--workers N] [--lines L] [--seed S]\n"
		"                     run everything on this machine for about a minute and show\n"
		"                     the fair share live (private PostgreSQL, Redis, provider\n"
		"                     stub); see demo --help\n"
		"  config [--markdown]\n"
		"                     print the configuration table with its bounds and defaults\n"
		"  --help, -h         this text\n"
		"  --version          the version\n"
		"\n"
		"Configuration (environment variables):\n");
	config_print(settings_table, settings_table_len, out, false);
}

static int run_command(int argc, char **argv, const struct settings *s)
{
	const char *cmd = argv[1];

	if (strcmp(cmd, "migrate") == 0) {
		bool status_only = argc > 2 && strcmp(argv[2], "--status") == 0;
		if (argc > 2 && !status_only) {
			fprintf(stderr, "dispatcher: migrate: unknown option '%s'\n", argv[2]);
			return 2;
		}
		return migrate_main(s, status_only);
	}
	if (strcmp(cmd, "config") == 0) {
		bool md = argc > 2 && strcmp(argv[2], "--markdown") == 0;
		config_print(settings_table, settings_table_len, stdout, md);
		return 0;
	}
	fprintf(stderr, "dispatcher: unknown command '%s' (try --help)\n", cmd);
	return 2;
}

int main(int argc, char **argv)
{
	struct settings s;

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("dispatcher %s\n", DISPATCHER_VERSION);
		return 0;
	}
	if (strcmp(argv[1], "demo") == 0) /* its own environment: it sets its workers' */
		return demo_main(argc - 2, argv + 2);
	if (settings_load(&s) < 0)
		return 2;
	log_set_level((enum log_level)s.log_level);
	int rc = run_command(argc, argv, &s);
	settings_free(&s);
	return rc;
}
