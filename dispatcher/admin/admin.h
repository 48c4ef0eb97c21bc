/* `dispatcher admin …`: the operator's commands for tenants and keys (README.md in this
 * folder): organisations with their limits, agents, campaigns, API keys. Each subcommand is one
 * statement (or one transaction) on a blocking connection to DATABASE_URL, bounded by
 * DISPATCHER_PG_CONNECT_TIMEOUT_MS; every argument is checked before the connection is made, so
 * bad input writes nothing. */
#ifndef DSP_ADMIN_H
#define DSP_ADMIN_H

/* Runs `dispatcher admin` with argv[0..argc) the words after "admin". Returns the process exit
 * code: 0 done, 1 failed (database unreachable or an error it reported: logged), 2 bad usage
 * (unknown subcommand or option, a bad value, a missing required option, an id that does not
 * exist or already exists, DATABASE_URL not set or a bad setting), each with a message on
 * stderr naming the argument. */
int admin_main(int argc, char **argv);

#endif
