/* conn_pg_bench: statements per second through the PostgreSQL layer (issue 7).
 *
 * Starts its own embedded PostgreSQL (common/embedded.h), creates a table of its own, and
 * measures, for a one-row INSERT and a 50-row multi-row INSERT (both prepared):
 *   - one at a time without pipeline mode: blocking libpq, PQexecPrepared, each result awaited
 *     before the next statement is sent (the shape of the layer before issue 7);
 *   - pg_conn in pipeline mode with 1, 16 and 64 statements kept in flight (depth 1 also waits
 *     for each result before sending the next, through the event loop).
 * Each cell runs for a fixed time (--seconds, default 3; --quick: 0.5) on an emptied table and
 * prints one markdown table row. The command line and the machine facts come first.
 *
 *   conn_pg_bench [--seconds S] [--quick] [--tcp]
 */
#include "embedded.h"
#include "log.h"
#include "pg_conn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define WIDE_ROWS 50

struct options {
	double seconds;
	bool tcp;
};

struct shape {
	const char *name;
	int rows;	     /* rows per statement */
	char sql[2048];	     /* the INSERT */
	const char **values; /* 2 * rows parameters */
};

struct run {
	uv_loop_t *loop;
	struct pg_conn *conn;
	const struct pg_stmt *stmt;
	const struct shape *shape;
	uint64_t end_ns; /* stop sending after this */
	long sent, done, failed;
	int depth;
};

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "conn_pg_bench: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
	exit(1);
}

static void build_shape(struct shape *s, const char *name, int rows)
{
	size_t len;

	s->name = name;
	s->rows = rows;
	len = (size_t)snprintf(s->sql, sizeof(s->sql), "INSERT INTO bench_rows (a, b) VALUES ");
	for (int i = 0; i < rows; i++)
		len += (size_t)snprintf(s->sql + len, sizeof(s->sql) - len, "%s($%d::int, $%d)",
					i ? ", " : "", 2 * i + 1, 2 * i + 2);
	s->values = calloc((size_t)(2 * rows), sizeof(*s->values));
	if (!s->values)
		die("out of memory", NULL);
	for (int i = 0; i < rows; i++) {
		s->values[2 * i] = "42";
		s->values[2 * i + 1] = "a short text value";
	}
}

static void exec_blocking(PGconn *c, const char *sql)
{
	PGresult *res = PQexec(c, sql);

	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
		die(sql, PQerrorMessage(c));
	PQclear(res);
}

/* One at a time on a blocking connection, no pipeline mode. Returns statements per second. */
static double run_blocking(PGconn *c, const struct shape *s, double seconds)
{
	PGresult *res = PQprepare(c, "ins", s->sql, 2 * s->rows, NULL);
	long n = 0;

	if (PQresultStatus(res) != PGRES_COMMAND_OK)
		die("prepare", PQerrorMessage(c));
	PQclear(res);
	uint64_t start = uv_hrtime(), end = start + (uint64_t)(seconds * 1e9), now;
	do {
		res = PQexecPrepared(c, "ins", 2 * s->rows, s->values, NULL, NULL, 0);
		if (PQresultStatus(res) != PGRES_COMMAND_OK)
			die("insert", PQerrorMessage(c));
		PQclear(res);
		n++;
		now = uv_hrtime();
	} while (now < end);
	exec_blocking(c, "DEALLOCATE ins");
	return (double)n * 1e9 / (double)(now - start);
}

static void send_one(struct run *r);

static void insert_cb(int status, const struct pg_results *res, void *data)
{
	struct run *r = data;

	r->done++;
	if (status != 0)
		r->failed++;
	if (uv_hrtime() < r->end_ns)
		send_one(r);
}

static void send_one(struct run *r)
{
	struct pg_query q = { .stmt = r->stmt,
			      .nparams = 2 * r->shape->rows,
			      .values = r->shape->values };

	if (pg_conn_exec(r->conn, &q, insert_cb, r) < 0)
		die("pg_conn_exec refused a statement", NULL);
	r->sent++;
}

/* depth statements in flight through pg_conn until the time is up. Returns statements/s. */
static double run_pipelined(struct run *r, int depth, double seconds)
{
	r->depth = depth;
	r->sent = r->done = r->failed = 0;
	uint64_t start = uv_hrtime();
	r->end_ns = start + (uint64_t)(seconds * 1e9);
	for (int i = 0; i < depth; i++)
		send_one(r);
	while (r->done < r->sent)
		uv_run(r->loop, UV_RUN_ONCE);
	uint64_t elapsed = uv_hrtime() - start;
	if (r->failed)
		die("statements failed", NULL);
	return (double)r->done * 1e9 / (double)elapsed;
}

static void print_row(const struct shape *s, const char *mode, double per_s)
{
	printf("| %s | %s | %.0f | %.0f |\n", s->name, mode, per_s, per_s * s->rows);
	fflush(stdout);
}

static bool up(void *conn)
{
	return pg_conn_is_up(conn);
}

static struct pg_conn *open_layer(uv_loop_t *loop, const char *url, const struct shape *s,
				  const struct pg_stmt **stmt)
{
	struct pg_conn_options o = {
		.conninfo = url,
		.name = "bench",
		.connect_timeout_ms = 10000,
		.query_timeout_ms = 60000,
		.reconnect_min_ms = 100,
		.reconnect_max_ms = 1000,
	};
	struct pg_conn *c;

	if (pg_conn_new(loop, &o, &c) < 0 || pg_conn_prepare(c, s->sql, 2 * s->rows, stmt) < 0 ||
	    pg_conn_start(c) < 0)
		die("cannot create the connection", NULL);
	while (!up(c))
		uv_run(loop, UV_RUN_ONCE);
	return c;
}

static void closed_cb(void *data)
{
	*(bool *)data = true;
}

static void bench_shape(const struct options *opt, const char *url, PGconn *admin,
			const struct shape *s)
{
	static const int depths[] = { 1, 16, 64 };
	uv_loop_t loop;
	struct run r = { .loop = &loop, .shape = s };
	bool closed = false;

	exec_blocking(admin, "TRUNCATE bench_rows");
	print_row(s, "one at a time, blocking libpq (no pipeline)",
		  run_blocking(admin, s, opt->seconds));
	uv_loop_init(&loop);
	r.conn = open_layer(&loop, url, s, &r.stmt);
	for (size_t i = 0; i < sizeof(depths) / sizeof(depths[0]); i++) {
		char mode[64];
		exec_blocking(admin, "TRUNCATE bench_rows");
		snprintf(mode, sizeof(mode), "pg_conn pipelined, depth %d", depths[i]);
		print_row(s, mode, run_pipelined(&r, depths[i], opt->seconds));
	}
	pg_conn_close(r.conn, closed_cb, &closed);
	while (!closed)
		uv_run(&loop, UV_RUN_ONCE);
	uv_run(&loop, UV_RUN_DEFAULT);
	uv_loop_close(&loop);
}

static int parse(int argc, char **argv, struct options *opt)
{
	*opt = (struct options){ .seconds = 3 };
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
			opt->seconds = strtod(argv[++i], NULL);
		else if (strcmp(argv[i], "--quick") == 0)
			opt->seconds = 0.5;
		else if (strcmp(argv[i], "--tcp") == 0)
			opt->tcp = true;
		else
			return -1;
	}
	return opt->seconds > 0 && opt->seconds <= 600 ? 0 : -1;
}

static void print_header(int argc, char **argv, const struct options *opt, PGconn *admin)
{
	PGresult *res = PQexec(admin, "SHOW server_version");

	printf("command:");
	for (int i = 0; i < argc; i++)
		printf(" %s", argv[i]);
	printf("\nmachine: nproc %ld, PostgreSQL %s (embedded: fsync off, %s), libpq %d, %.1f s "
	       "per cell\n\n",
	       sysconf(_SC_NPROCESSORS_ONLN), PQgetvalue(res, 0, 0),
	       opt->tcp ? "loopback TCP" : "unix socket", PQlibVersion(), opt->seconds);
	PQclear(res);
	printf("| statement | mode | statements/s | rows/s |\n|---|---|---:|---:|\n");
}

int main(int argc, char **argv)
{
	struct options opt;
	struct embedded e;
	struct shape one, wide;

	if (parse(argc, argv, &opt) < 0) {
		fprintf(stderr, "usage: conn_pg_bench [--seconds S (0..600]] [--quick] [--tcp]\n");
		return 2;
	}
	log_set_level(LOG_WARN);
	if (embedded_start(&e, &(struct embedded_options){ .postgres = true, .tcp = opt.tcp }) != 0)
		die("cannot start the embedded PostgreSQL", NULL);
	const char *url = opt.tcp ? e.database_url_tcp : e.database_url;
	PGconn *admin = PQconnectdb(url);
	if (PQstatus(admin) != CONNECTION_OK)
		die("cannot connect", PQerrorMessage(admin));
	exec_blocking(admin, "CREATE TABLE bench_rows (id bigserial PRIMARY KEY, a int NOT NULL, "
			     "b text NOT NULL)");
	build_shape(&one, "INSERT, 1 row", 1);
	build_shape(&wide, "INSERT, 50 rows", WIDE_ROWS);
	print_header(argc, argv, &opt, admin);
	bench_shape(&opt, url, admin, &one);
	bench_shape(&opt, url, admin, &wide);
	PQfinish(admin);
	free(one.values);
	free(wide.values);
	embedded_stop(&e);
	return 0;
}
