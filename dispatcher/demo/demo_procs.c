/* The demo's child processes (demo_int.h): the provider stub and the workers, each in its own
 * process group with a parent-death signal, so nothing outlives the demo, even a SIGKILLed one. */
#include "demo_int.h"

#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

/* Every child's pid, for the signal handler (a second Ctrl-C kills them at once). */
static volatile pid_t children[DEMO_WORKERS_MAX + 1];
static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	(void)sig;
	if (interrupted++) {
		for (size_t i = 0; i < DEMO_WORKERS_MAX + 1; i++)
			if (children[i] > 0)
				kill(-children[i], SIGKILL);
		_exit(130); /* the embedded services' guardian removes the rest */
	}
}

void demo_signals_install(void)
{
	struct sigaction sa = { .sa_handler = on_signal };

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
}

bool demo_interrupted(void)
{
	return interrupted != 0;
}

static void remember(pid_t pid)
{
	for (size_t i = 0; i < DEMO_WORKERS_MAX + 1; i++) {
		if (children[i] <= 0) {
			children[i] = pid;
			return;
		}
	}
}

static void forget(pid_t pid)
{
	for (size_t i = 0; i < DEMO_WORKERS_MAX + 1; i++)
		if (children[i] == pid)
			children[i] = 0;
}

/* Forks and execs argv with envp (NULL: this environment); stdout to out_fd (-1: the log),
 * stderr to log_path. Returns the pid or a negative errno. */
static pid_t spawn(char *const *argv, char *const *envp, int out_fd, const char *log_path)
{
	pid_t parent = getpid();
	int log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);

	if (log_fd < 0)
		return -errno;
	pid_t pid = fork();
	if (pid < 0) {
		int e = -errno;
		close(log_fd);
		return e;
	}
	if (pid == 0) {
		setpgid(0, 0); /* Ctrl-C reaches the demo, which stops the children in order */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		signal(SIGPIPE, SIG_DFL);
		int null = open("/dev/null", O_RDONLY);
		dup2(null, 0);
		dup2(out_fd >= 0 ? out_fd : log_fd, 1);
		dup2(log_fd, 2);
		execve(argv[0], argv, envp ? envp : environ);
		dprintf(2, "cannot run %s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	setpgid(pid, pid);
	close(log_fd);
	remember(pid);
	return pid;
}

int demo_stub_start(struct demo_procs *p, const char *stub_path, const struct demo_options *o,
		    const char *secret)
{
	char seed_s[24], dur[48], log_path[300], line[256];
	int fds[2];
	size_t len = 0;

	snprintf(seed_s, sizeof(seed_s), "%llu", (unsigned long long)o->seed);
	snprintf(dur, sizeof(dur), "%u-%u", o->hold_min_ms, o->hold_max_ms);
	snprintf(log_path, sizeof(log_path), "%s/stub.log", p->dir);
	char *argv[] = { (char *)stub_path, "--seed",	    seed_s, "--duration-ms", dur,
			 "--secret",	    (char *)secret, NULL };
	if (pipe(fds) < 0 || fcntl(fds[0], F_SETFD, FD_CLOEXEC) < 0 ||
	    fcntl(fds[1], F_SETFD, FD_CLOEXEC) < 0)
		return -errno;
	pid_t pid = spawn(argv, NULL, fds[1], log_path);
	close(fds[1]);
	if (pid < 0) {
		close(fds[0]);
		return (int)pid;
	}
	p->stub = pid;
	/* "provider-stub listening on http://127.0.0.1:<port>\n", within 10 s */
	for (int waited = 0; waited < 10000 && !demo_interrupted();) {
		struct pollfd pfd = { .fd = fds[0], .events = POLLIN };
		int r = poll(&pfd, 1, 100);
		if (r == 0) {
			waited += 100;
			continue;
		}
		if (r < 0 && errno == EINTR)
			continue;
		ssize_t n = r > 0 ? read(fds[0], line + len, sizeof(line) - 1 - len) : -1;
		if (n <= 0)
			break;
		len += (size_t)n;
		line[len] = '\0';
		const char *at = strstr(line, "listening on http://127.0.0.1:");
		if (at && strchr(at, '\n')) {
			p->stub_port = atoi(at + strlen("listening on http://127.0.0.1:"));
			close(fds[0]);
			return p->stub_port > 0 ? 0 : -EPROTO;
		}
	}
	close(fds[0]);
	return demo_interrupted() ? -EINTR : -ETIMEDOUT;
}

int demo_free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -EADDRNOTAVAIL;

	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port;
}

/* This environment without the names the demo sets, then the demo's own entries. Owned by the
 * caller (free() the array; the strings are borrowed or from set[]). */
static char **worker_env(char *const *set, size_t nset)
{
	size_t n = 0;

	while (environ[n])
		n++;
	char **env = calloc(n + nset + 1, sizeof(*env));
	size_t k = 0;
	if (!env)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		bool ours = strncmp(environ[i], "PROVIDER_TOKEN=", 15) == 0;
		for (size_t j = 0; j < nset && !ours; j++) {
			size_t nl = strcspn(set[j], "=") + 1;
			ours = strncmp(environ[i], set[j], nl) == 0;
		}
		if (!ours)
			env[k++] = environ[i];
	}
	for (size_t j = 0; j < nset; j++)
		env[k++] = set[j];
	return env;
}

int demo_workers_start(struct demo_procs *p, const char *self, unsigned n,
		       const struct demo_worker_env *we)
{
	char db[600], redis[300], provider[80], secret[120], listen[64], public[80], id[64];
	char level[48], log_path[300], op[64];
	char *set[] = { db, redis, provider, secret, listen, public, id, level, op };

	snprintf(level, sizeof(level), "DISPATCHER_LOG_LEVEL=%s",
		 we->log_level ? we->log_level : "warn");

	snprintf(db, sizeof(db), "DATABASE_URL=%s", we->database_url);
	snprintf(redis, sizeof(redis), "REDIS_URL=%s", we->redis_url);
	snprintf(provider, sizeof(provider), "PROVIDER_URL=http://127.0.0.1:%d", p->stub_port);
	snprintf(secret, sizeof(secret), "PROVIDER_WEBHOOK_SECRET=%s", we->secret);
	snprintf(listen, sizeof(listen), "DISPATCHER_LISTEN=127.0.0.1:%d", we->port);
	snprintf(public, sizeof(public), "DISPATCHER_PUBLIC_URL=http://127.0.0.1:%d", we->port);
	for (unsigned i = 0; i < n; i++) {
		snprintf(id, sizeof(id), "DISPATCHER_WORKER_ID=demo-w%u", i + 1);
		/* Each worker its own operator listener: they share the public port, not this one. */
		p->operator_ports[i] = demo_free_port();
		snprintf(op, sizeof(op), "DISPATCHER_OPERATOR_LISTEN=127.0.0.1:%d",
			 p->operator_ports[i]);
		snprintf(log_path, sizeof(log_path), "%s/worker-%u.log", p->dir, i + 1);
		char **env = worker_env(set, sizeof(set) / sizeof(set[0]));
		char *argv[] = { (char *)self, "run", NULL };
		if (!env)
			return -ENOMEM;
		pid_t pid = spawn(argv, env, -1, log_path);
		free(env);
		if (pid < 0)
			return (int)pid;
		p->workers[p->n_workers++] = pid;
	}
	return 0;
}

/* Waits up to ms for pid; returns its wait status, or -1 when it still runs. */
static int wait_for(pid_t pid, int ms)
{
	int status;

	for (int t = 0;; t += 20) {
		pid_t r = waitpid(pid, &status, WNOHANG);
		if (r == pid || (r < 0 && errno == ECHILD))
			return r == pid ? status : 0;
		if (t >= ms)
			return -1;
		nanosleep(&(struct timespec){ .tv_nsec = 20000000 }, NULL);
	}
}

int demo_workers_poll(struct demo_procs *p)
{
	int status;

	for (unsigned i = 0; i < p->n_workers; i++) {
		if (p->workers[i] > 0 &&
		    waitpid(p->workers[i], &status, WNOHANG) == p->workers[i]) {
			forget(p->workers[i]);
			p->workers[i] = 0;
			return (int)i + 1;
		}
	}
	return 0;
}

/* SIGTERM to each process group, then SIGKILL to what is left after ms. Returns how many had
 * to be killed. */
static int stop_all(pid_t *pids, unsigned n, int ms)
{
	int killed = 0;

	for (unsigned i = 0; i < n; i++)
		if (pids[i] > 0)
			kill(-pids[i], SIGTERM);
	for (unsigned i = 0; i < n; i++) {
		if (pids[i] <= 0)
			continue;
		if (wait_for(pids[i], ms) == -1) {
			kill(-pids[i], SIGKILL);
			wait_for(pids[i], 5000);
			killed++;
		}
		kill(-pids[i], SIGKILL); /* anything left in its group */
		forget(pids[i]);
		pids[i] = 0;
	}
	return killed;
}

int demo_workers_stop(struct demo_procs *p, int ms)
{
	return stop_all(p->workers, p->n_workers, ms);
}

void demo_procs_stop(struct demo_procs *p)
{
	demo_workers_stop(p, 10000);
	stop_all(&p->stub, 1, 3000);
}
