/* pipe2() and nftw() are GNU/XSI extensions. */
#define _GNU_SOURCE
#include "embedded.h"

#include "error.h"
#include "log.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <grp.h>
#include <hiredis/hiredis.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef DSP_PG_BINDIR
#define DSP_PG_BINDIR "/usr/lib/postgresql/15/bin"
#endif
#ifndef DSP_REDIS_SERVER
#define DSP_REDIS_SERVER "/usr/bin/redis-server"
#endif

#define EMBED_USER	 "dispatcher-embed"
#define READY_TIMEOUT_MS 90000 /* generous: initdb and start under ASan on a loaded machine */

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static long long now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Asks the kernel for a free loopback port. Returns it, or a negative errno. */
static int free_port(void)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sa);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int port = -errno;

	if (fd < 0)
		return port;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
		port = ntohs(sa.sin_port);
	else
		port = -errno;
	close(fd);
	return port;
}

/* A free port other than `other` (the two servers must not be handed the same one). */
static int free_port_except(int other)
{
	int port = free_port();

	for (int i = 0; i < 10 && port == other; i++)
		port = free_port();
	return port;
}

static void print_log_tail(const char *path)
{
	char line[512];
	long pos;
	FILE *f = fopen(path, "r");

	if (!f)
		return;
	fseek(f, 0, SEEK_END);
	pos = ftell(f);
	fseek(f, pos > 4000 ? pos - 4000 : 0, SEEK_SET);
	fprintf(stderr, "---- last lines of %s ----\n", path);
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	fprintf(stderr, "---- end of %s ----\n", path);
	fclose(f);
}

/* Forks and execs argv with stdout/stderr appended to log_path. As root with drop set, the
 * child becomes e->pg_uid first. The child dies with deathsig when this thread exits. Returns
 * the pid or a negative errno. */
static pid_t spawn(struct embedded *e, char *const argv[], const char *log_path, bool drop,
		   int deathsig)
{
	pid_t parent = getpid();
	pid_t pid = fork();

	if (pid < 0)
		return -errno;
	if (pid > 0)
		return pid;
	int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
	int null = open("/dev/null", O_RDONLY);
	if (fd < 0 || null < 0)
		_exit(126);
	dup2(null, STDIN_FILENO);
	dup2(fd, STDOUT_FILENO);
	dup2(fd, STDERR_FILENO);
	if (drop && geteuid() == 0) {
		if (fchown(fd, e->pg_uid, e->pg_gid) < 0 || setgroups(0, NULL) < 0 ||
		    setgid(e->pg_gid) < 0 || setuid(e->pg_uid) < 0)
			_exit(125);
	}
	/* Its own process group, so a stop can reach the server and every child it forked. */
	setpgid(0, 0);
	/* After the uid change: changing credentials clears the parent-death signal. */
	prctl(PR_SET_PDEATHSIG, deathsig);
	if (getppid() != parent)
		_exit(124);
	execv(argv[0], argv);
	_exit(127);
}

/* Runs argv to completion. Returns its exit status, or a negative errno. */
static int run(struct embedded *e, char *const argv[], const char *log_path, bool drop)
{
	int status;
	pid_t pid = spawn(e, argv, log_path, drop, SIGKILL);

	if (pid < 0)
		return pid;
	while (waitpid(pid, &status, 0) < 0) {
		if (errno != EINTR)
			return -errno;
	}
	return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* As root, picks the unprivileged user PostgreSQL runs as, creating EMBED_USER if missing. */
static int resolve_user(struct embedded *e)
{
	static const char *const fallbacks[] = { EMBED_USER, "postgres", "nobody" };
	/* clang-format off */
	char *useradd[] = { "/usr/sbin/useradd", "--system", "--no-create-home",
			    "--home-dir", "/nonexistent", "--shell", "/usr/sbin/nologin",
			    EMBED_USER, NULL };
	/* clang-format on */

	e->pg_uid = getuid();
	e->pg_gid = getgid();
	if (geteuid() != 0)
		return 0;
	if (!getpwnam(EMBED_USER) && run(e, useradd, "/dev/null", false) != 0)
		log_warn(LOG_EMBED, "could not create user %s; trying postgres, nobody",
			 EMBED_USER);
	for (size_t i = 0; i < sizeof(fallbacks) / sizeof(fallbacks[0]); i++) {
		struct passwd *pw = getpwnam(fallbacks[i]);
		if (pw && pw->pw_uid != 0) {
			e->pg_uid = pw->pw_uid;
			e->pg_gid = pw->pw_gid;
			return 0;
		}
	}
	log_error(LOG_EMBED, "no unprivileged user to run PostgreSQL as");
	return DSP_ESERVICE;
}

static int remove_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	remove(path);
	return 0;
}

static void remove_tree(const char *dir)
{
	if (dir[0])
		nftw(dir, remove_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* The guardian: reads "pg <pid>" / "redis <pid>" lines; at end-of-file kills what still runs
 * and removes dir. Never returns. */
static void guardian_main(int fd, const char *dir)
{
	char buf[256];
	size_t used = 0;
	long pg = 0, redis = 0;

	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	for (;;) {
		ssize_t n = read(fd, buf + used, sizeof(buf) - 1 - used);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		used += (size_t)n;
		buf[used] = '\0';
		char *nl;
		while ((nl = strchr(buf, '\n'))) {
			*nl = '\0';
			if (strncmp(buf, "pg ", 3) == 0)
				pg = strtol(buf + 3, NULL, 10);
			else if (strncmp(buf, "redis ", 6) == 0)
				redis = strtol(buf + 6, NULL, 10);
			used -= (size_t)(nl + 1 - buf);
			memmove(buf, nl + 1, used + 1);
		}
		if (used >= sizeof(buf) - 1)
			used = 0;
	}
	if (redis > 0)
		kill(-(pid_t)redis, SIGKILL);
	if (pg > 0) {
		kill(-(pid_t)pg, SIGCONT); /* a fault test may have left it stopped */
		kill((pid_t)pg, SIGQUIT); /* immediate shutdown: the postmaster ends its backends */
		for (int i = 0; i < 500 && kill((pid_t)pg, 0) == 0; i++)
			sleep_ms(20);
		kill(-(pid_t)pg, SIGKILL); /* the postmaster and any backend left */
	}
	remove_tree(dir);
	_exit(0);
}

static int guardian_start(struct embedded *e)
{
	int fds[2];

	if (pipe2(fds, O_CLOEXEC) < 0)
		return -errno;
	fflush(NULL);
	pid_t pid = fork();
	if (pid < 0) {
		int rc = -errno;
		close(fds[0]);
		close(fds[1]);
		return rc;
	}
	if (pid == 0) {
		close(fds[1]);
		setsid(); /* outlives a kill of the caller's process group */
		guardian_main(fds[0], e->dir);
	}
	close(fds[0]);
	e->guardian_fd = fds[1];
	e->guardian_pid = pid;
	return 0;
}

static void guardian_tell(struct embedded *e, const char *what, pid_t pid)
{
	char line[64];
	int n = snprintf(line, sizeof(line), "%s %ld\n", what, (long)pid);

	if (e->guardian_fd >= 0 && write(e->guardian_fd, line, (size_t)n) != n)
		log_warn(LOG_EMBED, "guardian did not take the %s pid", what);
}

/* Waits until pid exits (SIGKILL after timeout_ms). Returns 0. */
static int reap(pid_t pid, long timeout_ms)
{
	long long deadline = now_ms() + timeout_ms;
	int status;

	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid || (r < 0 && errno == ECHILD))
			return 0;
		if (now_ms() > deadline) {
			kill(-pid, SIGKILL); /* the server's whole process group */
			waitpid(pid, &status, 0);
			return 0;
		}
		sleep_ms(10);
	}
}

/* Returns true while pid has not exited. */
static bool alive(pid_t pid)
{
	int status;
	return waitpid(pid, &status, WNOHANG) == 0;
}

static void path_in(const struct embedded *e, char *buf, size_t len, const char *name)
{
	snprintf(buf, len, "%s/%s", e->dir, name);
}

/* Writes text to path, readable by the server's user only. Returns 0 or DSP_ESERVICE. */
static int write_secret(const struct embedded *e, const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	size_t n = strlen(text);
	bool ok = fd >= 0 && write(fd, text, n) == (ssize_t)n;

	if (ok && geteuid() == 0)
		ok = fchown(fd, e->pg_uid, e->pg_gid) == 0;
	if (fd >= 0)
		close(fd);
	return ok ? 0 : DSP_ESERVICE;
}

/* Fills e->pg_password with 32 hex digits from /dev/urandom. Returns 0 or DSP_ESERVICE. */
static int make_password(struct embedded *e)
{
	unsigned char raw[16];
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	bool ok = fd >= 0 && read(fd, raw, sizeof(raw)) == (ssize_t)sizeof(raw);

	if (fd >= 0)
		close(fd);
	if (!ok)
		return DSP_ESERVICE;
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(e->pg_password + 2 * i, 3, "%02x", raw[i]);
	return 0;
}

/* initdb: trust on the private unix socket only (the directory is the caller's and the server
 * user's alone); loopback TCP needs the generated password (scram-sha-256), so another local
 * user cannot log in as the superuser. */
static int pg_initdb(struct embedded *e)
{
	char bin[256], data[256], log[256], pwfile[256], pwopt[300];
	/* clang-format off */
	char *argv[] = { bin, "-D", data, "-U", "dispatcher", "--auth-local=trust",
			 "--auth-host=scram-sha-256", pwopt, "--no-sync",
			 "--no-instructions", "-E", "UTF8", "--locale=C", NULL };
	/* clang-format on */

	snprintf(bin, sizeof(bin), "%s/initdb", DSP_PG_BINDIR);
	path_in(e, data, sizeof(data), "pgdata");
	path_in(e, log, sizeof(log), "initdb.log");
	path_in(e, pwfile, sizeof(pwfile), "pwfile");
	snprintf(pwopt, sizeof(pwopt), "--pwfile=%s", pwfile);
	if (make_password(e) < 0 || write_secret(e, pwfile, e->pg_password) < 0)
		return DSP_ESERVICE;
	int rc = run(e, argv, log, true);
	unlink(pwfile);
	if (rc != 0) {
		log_error(LOG_EMBED, "initdb failed (exit %d)", rc);
		print_log_tail(log);
		return DSP_ESERVICE;
	}
	return 0;
}

static int pg_spawn(struct embedded *e)
{
	char bin[256], data[256], log[256], port[16], listen[64];
	/* clang-format off */
	char *argv[] = { bin, "-D", data, "-k", e->dir, "-p", port, "-c", listen,
			 "-c", "fsync=off", "-c", "synchronous_commit=off",
			 "-c", "full_page_writes=off", "-c", "shared_buffers=32MB",
			 "-c", "max_connections=200", "-c", "unix_socket_permissions=0777",
			 /* A fresh database fills its tables within seconds: analyze them as
			  * they grow, or the plans prepared on empty tables (seq scans) stay
			  * cached until the first autovacuum round, a minute later. */
			 "-c", "autovacuum_naptime=1",
			 NULL, NULL, NULL, NULL, NULL };
	/* clang-format on */

	snprintf(bin, sizeof(bin), "%s/postgres", DSP_PG_BINDIR);
	path_in(e, data, sizeof(data), "pgdata");
	path_in(e, log, sizeof(log), "postgres.log");
	snprintf(port, sizeof(port), "%d", e->pg_port);
	snprintf(listen, sizeof(listen), "listen_addresses=%s", e->tcp ? "127.0.0.1" : "");
	if (e->pg_stat_statements) { /* the four NULL slots after the list's end */
		size_t n = 0;
		while (argv[n])
			n++;
		argv[n] = "-c";
		argv[n + 1] = "shared_preload_libraries=pg_stat_statements";
		argv[n + 2] = "-c";
		argv[n + 3] = "pg_stat_statements.track_planning=on";
	}
	pid_t pid = spawn(e, argv, log, true, SIGQUIT);
	if (pid < 0)
		return DSP_ESERVICE;
	e->pg_pid = pid;
	guardian_tell(e, "pg", pid);
	return 0;
}

/* Polls answers(arg) until it is true. When the server *pid (tag: its name for the guardian,
 * "pg" or "redis") exits or the deadline passes, prints its log, kills and reaps it, and returns
 * DSP_ESERVICE. */
static int wait_ready(struct embedded *e, pid_t *pid, const char *tag, const char *log_name,
		      bool (*answers)(const void *arg), const void *arg)
{
	long long deadline = now_ms() + READY_TIMEOUT_MS;
	char log[256];

	while (!answers(arg)) {
		if (!alive(*pid) || now_ms() > deadline) {
			path_in(e, log, sizeof(log), log_name);
			log_error(LOG_EMBED, "%s server did not start", tag);
			print_log_tail(log);
			kill(-*pid, SIGKILL);
			reap(*pid, 30000);
			*pid = 0;
			guardian_tell(e, tag, 0);
			return DSP_ESERVICE;
		}
		sleep_ms(10);
	}
	return 0;
}

static bool pg_answers(const void *conninfo)
{
	return PQping(conninfo) == PQPING_OK;
}

static int pg_wait_ready(struct embedded *e, const char *conninfo)
{
	return wait_ready(e, &e->pg_pid, "pg", "postgres.log", pg_answers, conninfo);
}

static int pg_create_database(struct embedded *e)
{
	char conninfo[512];
	snprintf(conninfo, sizeof(conninfo), "host=%s port=%d user=dispatcher dbname=postgres",
		 e->dir, e->pg_port);
	PGconn *c = PQconnectdb(conninfo);
	PGresult *res = PQexec(c, "CREATE DATABASE dispatcher");
	int rc = PQresultStatus(res) == PGRES_COMMAND_OK ? 0 : DSP_ESERVICE;

	if (rc < 0)
		log_error(LOG_EMBED, "CREATE DATABASE failed: %s", PQerrorMessage(c));
	PQclear(res);
	PQfinish(c);
	return rc;
}

int embedded_pg_start(struct embedded *e)
{
	if (e->pg_pid)
		return 0;
	int rc = pg_spawn(e);
	return rc < 0 ? rc : pg_wait_ready(e, e->database_url);
}

int embedded_pg_stop(struct embedded *e)
{
	if (!e->pg_pid)
		return 0;
	kill(-e->pg_pid, SIGCONT); /* a stopped server would never act on the next signal */
	kill(e->pg_pid, SIGINT);   /* fast shutdown: aborts open transactions, closes clients */
	reap(e->pg_pid, 30000);
	e->pg_pid = 0;
	guardian_tell(e, "pg", 0);
	return 0;
}

static int pg_first_start(struct embedded *e)
{
	char conninfo[512];
	int rc = pg_initdb(e);

	if (rc < 0)
		return rc;
	/* With tcp, the free port may be taken between free_port() and the server's bind: try
	 * again on another one. */
	for (int attempt = 0; attempt < 3; attempt++) {
		if (attempt > 0)
			e->pg_port = free_port_except(e->redis_port);
		rc = pg_spawn(e);
		if (rc < 0)
			return rc;
		snprintf(conninfo, sizeof(conninfo),
			 "host=%s port=%d user=dispatcher dbname=postgres", e->dir, e->pg_port);
		rc = pg_wait_ready(e, conninfo);
		if (rc == 0 || !e->tcp)
			break;
	}
	if (rc == 0)
		rc = pg_create_database(e);
	if (rc == 0 && e->tcp)
		snprintf(e->database_url_tcp, sizeof(e->database_url_tcp),
			 "host=127.0.0.1 port=%d user=dispatcher password=%s dbname=dispatcher",
			 e->pg_port, e->pg_password);
	return rc;
}

static int redis_spawn(struct embedded *e)
{
	char sock[256], log[256], port[16];
	/* clang-format off */
	char *argv[] = { DSP_REDIS_SERVER, "--port", port, "--bind", "127.0.0.1",
			 "--unixsocket", sock, "--unixsocketperm", "700",
			 "--save", "", "--appendonly", "no",
			 "--maxmemory-policy", "noeviction", "--daemonize", "no",
			 "--dir", e->dir, "--protected-mode", "no", NULL };
	/* clang-format on */

	path_in(e, sock, sizeof(sock), "redis.sock");
	path_in(e, log, sizeof(log), "redis.log");
	snprintf(port, sizeof(port), "%d", e->redis_port);
	pid_t pid = spawn(e, argv, log, true, SIGKILL); /* as the unprivileged user too */
	if (pid < 0)
		return DSP_ESERVICE;
	e->redis_pid = pid;
	guardian_tell(e, "redis", pid);
	return 0;
}

static bool redis_pings(const void *sock)
{
	struct timeval tv = { 0, 200000 };
	redisContext *c = redisConnectUnixWithTimeout(sock, tv);
	bool ok = false;

	if (c && !c->err) {
		redisReply *r = redisCommand(c, "PING");
		ok = r && r->type == REDIS_REPLY_STATUS && strcmp(r->str, "PONG") == 0;
		if (r)
			freeReplyObject(r);
	}
	if (c)
		redisFree(c);
	return ok;
}

int embedded_redis_start(struct embedded *e)
{
	char sock[256];

	if (e->redis_pid)
		return 0;
	int rc = redis_spawn(e);
	if (rc < 0)
		return rc;
	path_in(e, sock, sizeof(sock), "redis.sock");
	return wait_ready(e, &e->redis_pid, "redis", "redis.log", redis_pings, sock);
}

int embedded_redis_stop(struct embedded *e)
{
	if (!e->redis_pid)
		return 0;
	kill(e->redis_pid, SIGCONT);
	kill(e->redis_pid, SIGTERM);
	reap(e->redis_pid, 30000);
	e->redis_pid = 0;
	guardian_tell(e, "redis", 0);
	return 0;
}

int embedded_pg_signal(struct embedded *e, int sig)
{
	return e->pg_pid && kill(e->pg_pid, sig) == 0 ? 0 : -ESRCH;
}

int embedded_redis_signal(struct embedded *e, int sig)
{
	return e->redis_pid && kill(e->redis_pid, sig) == 0 ? 0 : -ESRCH;
}

/* As embedded_redis_start(), trying another port when the TCP one was taken meanwhile. */
static int redis_first_start(struct embedded *e)
{
	int rc = DSP_ESERVICE;

	for (int attempt = 0; attempt < 3; attempt++) {
		if (attempt > 0)
			e->redis_port = free_port_except(e->pg_port);
		rc = embedded_redis_start(e);
		if (rc == 0 || !e->tcp)
			break;
	}
	return rc;
}

static int make_dir(struct embedded *e)
{
	snprintf(e->dir, sizeof(e->dir), "/tmp/dsp-embedded-XXXXXX");
	if (!mkdtemp(e->dir)) {
		log_error(LOG_EMBED, "mkdtemp: %s", strerror(errno));
		e->dir[0] = '\0';
		return DSP_ESERVICE;
	}
	if (geteuid() == 0 && chown(e->dir, e->pg_uid, e->pg_gid) < 0) {
		log_error(LOG_EMBED, "chown %s: %s", e->dir, strerror(errno));
		return DSP_ESERVICE;
	}
	return 0;
}

static int pick_ports(struct embedded *e, const struct embedded_options *opts)
{
	e->pg_port = opts->tcp ? free_port() : 5432;
	e->redis_port = opts->tcp ? free_port_except(e->pg_port) : 0;
	if (e->pg_port < 0 || e->redis_port < 0) {
		log_error(LOG_EMBED, "no free loopback port");
		return DSP_ESERVICE;
	}
	return 0;
}

int embedded_start(struct embedded *e, const struct embedded_options *opts)
{
	int rc;

	memset(e, 0, sizeof(*e));
	e->guardian_fd = -1;
	e->tcp = opts->tcp;
	e->pg_stat_statements = opts->pg_stat_statements;
	rc = resolve_user(e);
	if (rc == 0)
		rc = make_dir(e);
	if (rc == 0)
		rc = pick_ports(e, opts);
	if (rc == 0)
		rc = guardian_start(e) < 0 ? DSP_ESERVICE : 0;
	snprintf(e->database_url, sizeof(e->database_url),
		 "host=%s port=%d user=dispatcher dbname=dispatcher", e->dir, e->pg_port);
	snprintf(e->redis_url, sizeof(e->redis_url), "unix://%s/redis.sock", e->dir);
	if (rc == 0 && opts->postgres)
		rc = pg_first_start(e);
	if (rc == 0 && opts->redis)
		rc = redis_first_start(e);
	if (rc < 0) {
		embedded_stop(e);
		return DSP_ESERVICE;
	}
	log_info(LOG_EMBED, "services up in %s (postgres%s, redis%s)", e->dir,
		 opts->postgres ? "" : " off", opts->redis ? "" : " off");
	return 0;
}

void embedded_stop(struct embedded *e)
{
	embedded_redis_stop(e);
	embedded_pg_stop(e);
	remove_tree(e->dir);
	e->dir[0] = '\0';
	if (e->guardian_fd >= 0) {
		close(e->guardian_fd); /* the guardian sees EOF, finds nothing left, exits */
		e->guardian_fd = -1;
	}
	if (e->guardian_pid > 0) {
		reap(e->guardian_pid, 30000);
		e->guardian_pid = 0;
	}
}
