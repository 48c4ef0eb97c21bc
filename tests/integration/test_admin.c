/* `dispatcher admin` (issue 10 item 1, SPEC R4, C4) against a real PostgreSQL, through the
 * binary: an organisation, an agent, a campaign and a key created, listed, a limit changed (its
 * version bumped), a key revoked; bad input at, below and above every bound refused with exit 2,
 * a message naming the argument, and nothing written. */
#include "apikey.h"
#include "fixture.h"

#include <errno.h>
#include <poll.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

static struct embedded svc;

struct run {
	int code;
	char out[16384];
	char err[8192];
};

/* Reads both pipes to their end (poll, so neither can fill up and block the child). */
static void drain(int ofd, int efd, struct run *r)
{
	size_t lens[2] = { 0, 0 }, caps[2] = { sizeof(r->out) - 1, sizeof(r->err) - 1 };
	char *bufs[2] = { r->out, r->err };
	struct pollfd p[2] = { { .fd = ofd, .events = POLLIN }, { .fd = efd, .events = POLLIN } };
	int open = 2;

	while (open > 0) {
		if (poll(p, 2, -1) < 0) {
			assert_int_equal(errno, EINTR);
			continue;
		}
		for (int i = 0; i < 2; i++) {
			if (p[i].fd < 0 || !p[i].revents)
				continue;
			char tmp[4096];
			ssize_t n = read(p[i].fd, tmp, sizeof(tmp));
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0) {
				close(p[i].fd);
				p[i].fd = -1;
				open--;
				continue;
			}
			size_t take = (size_t)n < caps[i] - lens[i] ? (size_t)n : caps[i] - lens[i];
			memcpy(bufs[i] + lens[i], tmp, take);
			lens[i] += take;
		}
	}
	r->out[lens[0]] = r->err[lens[1]] = '\0';
}

/* Runs `dispatcher admin args...` (NULL-terminated) with this process's environment. */
static void admin(struct run *r, const char *const *args)
{
	const char *bin = getenv("DSP_DISPATCHER");
	char *argv[32] = { (char *)bin, "admin" };
	int out[2], err[2], n = 2;

	assert_non_null(bin);
	for (int i = 0; args[i]; i++) {
		assert_true(n < 31);
		argv[n++] = (char *)args[i];
	}
	argv[n] = NULL;
	assert_int_equal(pipe(out), 0);
	assert_int_equal(pipe(err), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(120); /* a command that hangs dies */
		dup2(out[1], STDOUT_FILENO);
		dup2(err[1], STDERR_FILENO);
		close(out[0]);
		close(err[0]);
		close(out[1]);
		close(err[1]);
		execv(bin, argv);
		_exit(127);
	}
	close(out[1]);
	close(err[1]);
	drain(out[0], err[0], r);
	r->code = fixture_wait(pid);
}

#define ADMIN(r, ...) admin(r, (const char *const[]){ __VA_ARGS__, NULL })

/* One text value from a blocking statement (malloc'd). */
static char *one(PGconn *c, const char *sql)
{
	PGresult *res = fixture_sql(c, sql);
	assert_int_equal(PQntuples(res), 1);
	char *v = strdup(PQgetisnull(res, 0, 0) ? "NULL" : PQgetvalue(res, 0, 0));
	PQclear(res);
	return v;
}

static void expect(PGconn *c, const char *sql, const char *want)
{
	char *v = one(c, sql);
	if (strcmp(v, want) != 0)
		fail_msg("%s: got '%s', want '%s'", sql, v, want);
	free(v);
}

/* Everything the admin commands can write, as one digest: any insert, update or delete
 * changes it (updated_at, revoked_at, limits_version are in the row texts). */
#define SNAPSHOT_SQL                                                                               \
	"SELECT md5(concat("                                                                       \
	" (SELECT string_agg(t::text, '|' ORDER BY id) FROM organisations t),"                     \
	" (SELECT string_agg(t::text, '|' ORDER BY id) FROM agents t),"                            \
	" (SELECT string_agg(t::text, '|' ORDER BY id) FROM campaigns t),"                         \
	" (SELECT string_agg(t::text, '|' ORDER BY id) FROM api_keys t),"                          \
	" (SELECT string_agg(t::text, '|') FROM system_settings t)))"

/* Runs a command that must be refused: exit 2, the message names `names`, stdout empty, and
 * nothing in the database changed. */
static void refused(PGconn *c, const char *names, const char *const *args)
{
	struct run r;
	char *before = one(c, SNAPSHOT_SQL);

	admin(&r, args);
	if (r.code != 2 || !strstr(r.err, names) || r.out[0])
		fail_msg("admin %s %s ...: exit %d, stdout [%s], stderr [%s] (want 2 naming %s)",
			 args[0], args[1] ? args[1] : "", r.code, r.out, r.err, names);
	char *after = one(c, SNAPSHOT_SQL);
	assert_string_equal(before, after);
	free(before);
	free(after);
}

#define REFUSED(c, names, ...) refused(c, names, (const char *const[]){ __VA_ARGS__, NULL })

static void ok(struct run *r)
{
	if (r->code != 0)
		fail_msg("exit %d, stdout [%s], stderr [%s]", r->code, r->out, r->err);
}

static void create_list_change_revoke(void **state)
{
	PGconn *c = fixture_pg(&svc);
	struct run r;
	char sql[512], key[128], key_id[80];

	(void)state;
	ADMIN(&r, "org", "create", "--name", "Acme Calls", "--id", "org_acme", "--org-limit", "20",
	      "--per-agent-limit", "10", "--rate-calls", "700", "--plan", "growth", "--tier",
	      "growth");
	ok(&r);
	assert_string_equal(r.out, "org_acme\n");
	expect(c,
	       "SELECT concat_ws(',', name, org_limit, per_agent_limit, rate_calls_per_minute, "
	       "plan,"
	       " rate_limit_tier, concurrency_management_enabled) FROM organisations"
	       " WHERE id = 'org_acme'",
	       "Acme Calls,20,10,700,growth,growth,t");

	ADMIN(&r, "agent", "create", "--org", "org_acme", "--id", "agent_one", "--name", "Sales",
	      "--from-number", "+14155550100");
	ok(&r);
	assert_string_equal(r.out, "agent_one\n");
	ADMIN(&r, "agent", "create", "--org", "org_acme"); /* generated id */
	ok(&r);
	assert_memory_equal(r.out, "agent_", 6);

	ADMIN(&r, "campaign", "create", "--org", "org_acme", "--agent", "agent_one", "--id",
	      "cmp_spring", "--ceiling", "5", "--retry-max-attempts", "4", "--retry-delay-seconds",
	      "60");
	ok(&r);
	assert_string_equal(r.out, "cmp_spring\n");
	expect(c,
	       "SELECT concat_ws(',', org_id, agent_id, status, max_concurrent_calls,"
	       " retry_max_attempts, retry_delay_seconds) FROM campaigns WHERE id = 'cmp_spring'",
	       "org_acme,agent_one,active,5,4,60");

	/* A key: its id then the key on stdout, once; only its SHA-256 kept. */
	ADMIN(&r, "key", "create", "--org", "org_acme", "--name", "backend");
	ok(&r);
	assert_int_equal(sscanf(r.out, "%79s %127s", key_id, key), 2);
	assert_memory_equal(key_id, "k_", 2);
	assert_true(apikey_well_formed(key, strlen(key)));
	unsigned char h[APIKEY_HASH_LEN];
	char hex[65], preview[APIKEY_PREVIEW_SIZE];
	assert_int_equal(apikey_hash(key, strlen(key), h), 0);
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", h[i]);
	apikey_preview(key, preview);
	snprintf(sql, sizeof(sql),
		 "SELECT concat_ws(',', org_id, name, encode(key_hash, 'hex'), key_preview,"
		 " revoked_at IS NULL) FROM api_keys WHERE id = '%s'",
		 key_id);
	char want[256];
	snprintf(want, sizeof(want), "org_acme,backend,%s,%s,t", hex, preview);
	expect(c, sql, want);
	/* The key itself is nowhere in the database. */
	snprintf(sql, sizeof(sql),
		 "SELECT count(*) FROM api_keys t WHERE strpos(t::text, '%s') > 0", key + 4);
	expect(c, sql, "0");

	/* Lists: tab-separated, names first; the key list shows the preview, never the key. */
	ADMIN(&r, "org", "list");
	ok(&r);
	assert_non_null(strstr(r.out, "id\tname\torg_limit\tper_agent_limit\tenforced"));
	assert_non_null(strstr(r.out, "org_acme\tAcme Calls\t20\t10\tt\t1000\t700\t600\t250000\t"
				      "growth\tgrowth\t"));
	ADMIN(&r, "agent", "list", "--org", "org_acme");
	ok(&r);
	assert_non_null(strstr(r.out, "agent_one\torg_acme\tSales\t+14155550100\n"));
	ADMIN(&r, "campaign", "list");
	ok(&r);
	assert_non_null(strstr(r.out, "cmp_spring\torg_acme\tagent_one\t\tactive\t5\t4\t60\n"));
	ADMIN(&r, "key", "list", "--org", "org_acme");
	ok(&r);
	assert_non_null(strstr(r.out, preview));
	assert_non_null(strstr(r.out, "\tactive\t"));
	assert_null(strstr(r.out, key));
	ADMIN(&r, "key", "list", "--org", "org_nobody");
	ok(&r);
	assert_string_equal(r.out, "id\torg_id\tname\tpreview\tstate\tcreated_at\trevoked_at\n");

	/* A limit changed: the version moves (0011's trigger), once per change (C4). */
	char *v = one(c, "SELECT limits_version FROM organisations WHERE id = 'org_acme'");
	long long v0 = atoll(v);
	free(v);
	ADMIN(&r, "org", "set", "--org", "org_acme", "--org-limit", "30");
	ok(&r);
	snprintf(want, sizeof(want), "organisation org_acme: limits_version %lld -> %lld\n", v0,
		 v0 + 1);
	assert_string_equal(r.out, want);
	ADMIN(&r, "org", "set", "--org", "org_acme", "--per-agent-limit", "none", "--enforced",
	      "false");
	ok(&r);
	snprintf(sql, sizeof(sql), "%lld,30,NULL,f", v0 + 2);
	expect(c,
	       "SELECT concat_ws(',', limits_version, org_limit, coalesce(per_agent_limit::text,"
	       " 'NULL'), concurrency_management_enabled) FROM organisations WHERE id = "
	       "'org_acme'",
	       sql);
	/* The rate buckets are read per request, not installed in the gate: no bump. */
	ADMIN(&r, "org", "set", "--org", "org_acme", "--rate-default", "1200");
	ok(&r);
	snprintf(want, sizeof(want), "organisation org_acme: limits_version %lld -> %lld\n", v0 + 2,
		 v0 + 2);
	assert_string_equal(r.out, want);
	/* A campaign's ceiling feeds the gate: its organisation's version moves. */
	ADMIN(&r, "campaign", "set", "--campaign", "cmp_spring", "--ceiling", "none");
	ok(&r);
	snprintf(want, sizeof(want),
		 "campaign cmp_spring: organisation org_acme limits_version %lld -> %lld\n", v0 + 2,
		 v0 + 3);
	assert_string_equal(r.out, want);
	expect(c,
	       "SELECT coalesce(max_concurrent_calls::text, 'NULL') FROM campaigns WHERE id ="
	       " 'cmp_spring'",
	       "NULL");

	/* Revoked, once; a second revoke changes nothing. */
	ADMIN(&r, "key", "revoke", "--key", key_id);
	ok(&r);
	assert_non_null(strstr(r.out, "revoked"));
	snprintf(sql, sizeof(sql), "SELECT revoked_at::text FROM api_keys WHERE id = '%s'", key_id);
	char *at = one(c, sql);
	assert_string_not_equal(at, "NULL");
	ADMIN(&r, "key", "revoke", "--key", key_id);
	ok(&r);
	assert_non_null(strstr(r.out, "already revoked"));
	expect(c, sql, at);
	free(at);
	ADMIN(&r, "key", "list");
	ok(&r);
	assert_non_null(strstr(r.out, "\trevoked\t"));
	PQfinish(c);
}

/* The defaults of `org create` and `campaign create` (admin_sql.h) are the schema's. */
static void defaults_are_the_schemas(void **state)
{
	PGconn *c = fixture_pg(&svc);
	struct run r;

	(void)state;
	ADMIN(&r, "org", "create", "--name", "Defaults", "--id", "org_dflt_cli");
	ok(&r);
	PQclear(fixture_sql(c, "INSERT INTO organisations (id, name) VALUES ('org_dflt_sql', "
			       "'Defaults');"
			       "INSERT INTO agents (id, org_id) VALUES ('agent_dflt', "
			       "'org_dflt_sql')"));
	ADMIN(&r, "campaign", "create", "--org", "org_dflt_sql", "--agent", "agent_dflt", "--id",
	      "cmp_dflt_cli");
	ok(&r);
	PQclear(fixture_sql(c, "INSERT INTO campaigns (id, org_id, agent_id) VALUES "
			       "('cmp_dflt_sql', 'org_dflt_sql', 'agent_dflt')"));
	expect(c,
	       "SELECT count(DISTINCT (name, org_limit, per_agent_limit,"
	       " concurrency_management_enabled, rate_default_per_minute, rate_calls_per_minute,"
	       " rate_executions_per_minute, pending_ceiling, plan, rate_limit_tier)) FROM"
	       " organisations WHERE id IN ('org_dflt_cli', 'org_dflt_sql')",
	       "1");
	expect(c,
	       "SELECT count(DISTINCT (name, status, max_concurrent_calls, retry_max_attempts,"
	       " retry_delay_seconds)) FROM campaigns WHERE id IN ('cmp_dflt_cli', 'cmp_dflt_sql')",
	       "1");
	PQfinish(c);
}

/* Every bound: the value at it is accepted, one below and one above refused. */
static void bounds_at_below_above(void **state)
{
	PGconn *c = fixture_pg(&svc);
	struct run r;

	(void)state;
	ADMIN(&r, "org", "create", "--name", "Bounds", "--id", "org_b");
	ok(&r);
	ADMIN(&r, "agent", "create", "--org", "org_b", "--id", "agent_b");
	ok(&r);
	static const struct {
		const char *opt, *below, *at_lo, *at_hi, *above;
	} org[] = {
		{ "--org-limit", "0", "1", "100000", "100001" },
		{ "--per-agent-limit", "0", "1", "100000", "100001" },
		{ "--rate-default", "0", "1", "1000000", "1000001" },
		{ "--rate-calls", "0", "1", "1000000", "1000001" },
		{ "--rate-executions", "0", "1", "1000000", "1000001" },
		{ "--pending-ceiling", "-1", "0", "100000000", "100000001" },
	};
	for (size_t i = 0; i < sizeof(org) / sizeof(org[0]); i++) {
		REFUSED(c, org[i].opt, "org", "set", "--org", "org_b", org[i].opt, org[i].below);
		REFUSED(c, org[i].opt, "org", "set", "--org", "org_b", org[i].opt, org[i].above);
		REFUSED(c, org[i].opt, "org", "create", "--name", "x", org[i].opt, org[i].above);
		ADMIN(&r, "org", "set", "--org", "org_b", org[i].opt, org[i].at_lo);
		ok(&r);
		ADMIN(&r, "org", "set", "--org", "org_b", org[i].opt, org[i].at_hi);
		ok(&r);
	}
	static const struct {
		const char *opt, *below, *at_lo, *at_hi, *above;
	} cmp[] = {
		{ "--ceiling", "0", "1", "100000", "100001" },
		{ "--retry-max-attempts", "0", "1", "20", "21" },
		{ "--retry-delay-seconds", "-1", "0", "604800", "604801" },
	};
	for (size_t i = 0; i < sizeof(cmp) / sizeof(cmp[0]); i++) {
		REFUSED(c, cmp[i].opt, "campaign", "create", "--org", "org_b", "--agent", "agent_b",
			cmp[i].opt, cmp[i].below);
		REFUSED(c, cmp[i].opt, "campaign", "create", "--org", "org_b", "--agent", "agent_b",
			cmp[i].opt, cmp[i].above);
		ADMIN(&r, "campaign", "create", "--org", "org_b", "--agent", "agent_b", cmp[i].opt,
		      cmp[i].at_lo);
		ok(&r);
		char id[80];
		snprintf(id, sizeof(id), "%.*s", (int)strcspn(r.out, "\n"), r.out);
		REFUSED(c, cmp[i].opt, "campaign", "set", "--campaign", id, cmp[i].opt,
			cmp[i].above);
		ADMIN(&r, "campaign", "set", "--campaign", id, cmp[i].opt, cmp[i].at_hi);
		ok(&r);
	}
	/* Names: 200 bytes accepted, 201 refused; ids: 64 accepted, 65 refused. */
	char n200[201], n201[202], id64[65], id65[66];
	memset(n200, 'n', 200);
	n200[200] = '\0';
	memset(n201, 'n', 201);
	n201[201] = '\0';
	memset(id64, 'i', 64);
	id64[64] = '\0';
	memset(id65, 'i', 65);
	id65[65] = '\0';
	REFUSED(c, "--name", "org", "create", "--name", n201);
	REFUSED(c, "--id", "org", "create", "--name", "x", "--id", id65);
	ADMIN(&r, "org", "create", "--name", n200, "--id", id64);
	ok(&r);
	PQfinish(c);
}

/* Malformed values, unknown words, missing and repeated options, rows that do not exist. */
static void bad_input_is_refused_and_writes_nothing(void **state)
{
	PGconn *c = fixture_pg(&svc);
	struct run r;

	(void)state;
	ADMIN(&r, "org", "create", "--name", "Other", "--id", "org_other");
	ok(&r);
	ADMIN(&r, "agent", "create", "--org", "org_other", "--id", "agent_other");
	ok(&r);
	ADMIN(&r, "org", "create", "--name", "Mine", "--id", "org_mine");
	ok(&r);

	REFUSED(c, "--name is required", "org", "create");
	REFUSED(c, "--name", "org", "create", "--name", "");
	REFUSED(c, "--name", "org", "create", "--name", "bell\x07");
	REFUSED(c, "--name", "org", "create", "--name", "bad \xff utf-8");
	REFUSED(c, "--name", "org", "create", "--name", "overlong \xc0\xaf");
	REFUSED(c, "--id", "org", "create", "--name", "x", "--id", "has space");
	REFUSED(c, "--id", "org", "create", "--name", "x", "--id", "");
	REFUSED(c, "--org-limit", "org", "create", "--name", "x", "--org-limit", "abc");
	REFUSED(c, "--org-limit", "org", "create", "--name", "x", "--org-limit", "20x");
	REFUSED(c, "--org-limit", "org", "create", "--name", "x", "--org-limit", "+20");
	REFUSED(c, "--org-limit", "org", "create", "--name", "x", "--org-limit", " 20");
	REFUSED(c, "--org-limit", "org", "create", "--name", "x", "--org-limit",
		"99999999999999999999999");
	REFUSED(c, "--org-limit", "org", "create", "--name", "x", "--org-limit", "none");
	REFUSED(c, "--org-limit needs a value", "org", "create", "--name", "x", "--org-limit");
	REFUSED(c, "--org-limit given twice", "org", "create", "--name", "x", "--org-limit", "5",
		"--org-limit=6");
	REFUSED(c, "--enforced", "org", "create", "--name", "x", "--enforced", "yes");
	REFUSED(c, "unknown option '--bogus'", "org", "create", "--name", "x", "--bogus", "1");
	REFUSED(c, "unexpected argument 'extra'", "org", "create", "--name", "x", "extra");
	REFUSED(c, "--id: 'org_other' already exists", "org", "create", "--name", "x", "--id",
		"org_other");
	REFUSED(c, "nothing to change", "org", "set", "--org", "org_other");
	REFUSED(c, "--org: no organisation 'org_ghost'", "org", "set", "--org", "org_ghost",
		"--org-limit", "5");
	REFUSED(c, "unknown option '--org'", "org", "list", "--org", "org_other");
	REFUSED(c, "unknown command 'org destroy'", "org", "destroy");
	REFUSED(c, "unknown command 'widget create'", "widget", "create");
	REFUSED(c, "unknown command 'org'", "org");

	REFUSED(c, "--org: no organisation 'org_ghost'", "agent", "create", "--org", "org_ghost");
	REFUSED(c, "--from-number", "agent", "create", "--org", "org_mine", "--from-number",
		"4155550100");
	REFUSED(c, "--from-number", "agent", "create", "--org", "org_mine", "--from-number",
		"+0155550100");
	REFUSED(c, "--from-number", "agent", "create", "--org", "org_mine", "--from-number",
		"+1234567890123456");
	/* Another organisation's agent: refused like a missing one. */
	REFUSED(c, "--agent: no agent 'agent_other' in organisation 'org_mine'", "campaign",
		"create", "--org", "org_mine", "--agent", "agent_other");
	REFUSED(c, "--agent is required", "campaign", "create", "--org", "org_mine");
	REFUSED(c, "--ceiling", "campaign", "create", "--org", "org_mine", "--agent", "a",
		"--ceiling", "nothing");
	REFUSED(c, "--campaign: no campaign 'cmp_ghost'", "campaign", "set", "--campaign",
		"cmp_ghost", "--ceiling", "3");

	REFUSED(c, "--org: no organisation 'org_ghost'", "key", "create", "--org", "org_ghost");
	REFUSED(c, "--org is required", "key", "create");
	REFUSED(c, "--key: no key 'k_ghost'", "key", "revoke", "--key", "k_ghost");
	REFUSED(c, "--key", "key", "revoke", "--key", "gat_notanid!");

	/* The environment: DATABASE_URL unset is bad usage; unreachable fails (exit 1). */
	unsetenv("DATABASE_URL");
	REFUSED(c, "DATABASE_URL", "org", "create", "--name", "x");
	setenv("DATABASE_URL", "host=/nonexistent port=1 dbname=x", 1);
	ADMIN(&r, "org", "create", "--name", "x");
	assert_int_equal(r.code, 1);
	assert_non_null(strstr(r.err, "cannot connect"));
	setenv("DATABASE_URL", svc.database_url, 1);
	PQfinish(c);
}

static void help_lists_every_subcommand(void **state)
{
	struct run r;
	const char *words[] = { "org create", "org list",	 "org set",	  "agent create",
				"agent list", "campaign create", "campaign list", "campaign set",
				"key create", "key list",	 "key revoke" };

	(void)state;
	ADMIN(&r, "--help");
	ok(&r);
	for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
		assert_non_null(strstr(r.out, words[i]));
	admin(&r, (const char *const[]){ NULL });
	assert_int_equal(r.code, 2);
	assert_non_null(strstr(r.err, "usage: dispatcher admin"));
}

static int setup(void **state)
{
	(void)state;
	fixture_start(&svc, true, false, false, true);
	return 0;
}

static int teardown(void **state)
{
	(void)state;
	embedded_stop(&svc);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(create_list_change_revoke),
		cmocka_unit_test(defaults_are_the_schemas),
		cmocka_unit_test(bounds_at_below_above),
		cmocka_unit_test(bad_input_is_refused_and_writes_nothing),
		cmocka_unit_test(help_lists_every_subcommand),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
