/* refresher_bench: the refresher's cost per recompute (issue 8).
 *
 * Starts its own embedded PostgreSQL and Redis, applies the migrations, and for one
 * organisation of 10, 1,000 and 10,000 campaigns (org_limit 20, one agent per campaign, 3 due
 * contacts per campaign, so every campaign is active and need exceeds the pool) runs the
 * refresher's cycle (refresher_step(), elapsed 1000 ms) --steps times after one warm-up cycle
 * (the election and the limits install), one at a time, and prints the median and the largest
 * wall time of a cycle with the median of its phases: reads (PostgreSQL batch and gate_read in
 * parallel), compute (fairshare_recompute and the install arrays), installs (floors in Redis and
 * in PostgreSQL). The command line comes first.
 *
 *   refresher_bench [--steps N] [--quick]
 */
#include "embedded.h"
#include "gate.h"
#include "gate_pg.h"
#include "log.h"
#include "migrate.h"
#include "redis_conn.h"
#include "refresher.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define STEPS_MAX 200

struct bench {
	uv_loop_t loop;
	PGconn *admin;
	struct redis_scripts *reg;
	struct redis_conn *conn;
	struct gate *gate;
	int done, status;
};

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "refresher_bench: %s%s%s\n", what, detail ? ": " : "",
		detail ? detail : "");
	exit(1);
}

static void sql(struct bench *b, const char *q)
{
	PGresult *res = PQexec(b->admin, q);
	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
		die(q, PQerrorMessage(b->admin));
	PQclear(res);
}

static void run_until_done(struct bench *b)
{
	while (!b->done)
		uv_run(&b->loop, UV_RUN_ONCE);
	b->done = 0;
}

static void done_cb(struct gate *g, int status, void *data)
{
	struct bench *b = data;
	(void)g;
	b->status = status;
	b->done = 1;
}

static void step_cb(struct refresher *r, int status, void *data)
{
	struct bench *b = data;
	(void)r;
	b->status = status;
	b->done = 1;
}

static void state_cb(struct pg_pool *pool, unsigned index, bool up, void *data)
{
	(void)pool;
	(void)index;
	(void)up;
	(void)data;
}

static void closed_cb(void *data)
{
	((struct bench *)data)->done = 1;
}

static int cmp_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, c = *(const uint64_t *)y;
	return a < c ? -1 : a > c;
}

static void seed(struct bench *b, const char *org, int n)
{
	char q[1024];
	sql(b, "TRUNCATE organisations, fair_share_installs, fair_share_floors, fair_share_carries "
	       "CASCADE");
	snprintf(q, sizeof(q), "INSERT INTO organisations (id, name) VALUES ('%s', '%s')", org,
		 org);
	sql(b, q);
	snprintf(
		q, sizeof(q),
		"INSERT INTO agents (id, org_id) SELECT '%s_a' || g, '%s'"
		" FROM generate_series(1, %d) g;"
		"INSERT INTO campaigns (id, org_id, agent_id) SELECT '%s_c' || g, '%s', '%s_a' || g"
		" FROM generate_series(1, %d) g;"
		"INSERT INTO batches (id, org_id, campaign_id) SELECT '%s_b' || g, '%s', '%s_c' || "
		"g"
		" FROM generate_series(1, %d) g;"
		"INSERT INTO contacts (org_id, campaign_id, batch_id, phone, next_attempt_at)"
		" SELECT '%s', '%s_c' || (g %% %d + 1), '%s_b' || (g %% %d + 1),"
		" '+1415' || lpad(g::text, 7, '0'), now() - interval '1 minute'"
		" FROM generate_series(1, %d) g; ANALYZE",
		org, org, n, org, org, org, n, org, org, org, n, org, org, n, org, n, 3 * n);
	sql(b, q);
	if (gate_org_rebuild(b->gate, org, NULL, 0, done_cb, b))
		die("gate_org_rebuild", NULL);
	run_until_done(b);
	if (b->status)
		die("gate_org_rebuild failed", NULL);
}

static void measure(struct bench *b, struct pg_pool *pool, struct refresher *r, int n, int steps)
{
	char org[16];
	uint64_t wall[STEPS_MAX], rd[STEPS_MAX], cp[STEPS_MAX], in[STEPS_MAX];
	struct refresher_stats st;

	(void)pool;
	snprintf(org, sizeof(org), "b%d", n);
	seed(b, org, n);
	for (int k = -1; k < steps; k++) {
		uint64_t t = uv_hrtime();
		if (refresher_step(r, k < 0 ? 0 : 1000, step_cb, b))
			die("refresher_step", NULL);
		run_until_done(b);
		if (b->status)
			die("a cycle failed", NULL);
		if (k < 0)
			continue;
		refresher_get_stats(r, &st);
		wall[k] = (uv_hrtime() - t) / 1000;
		rd[k] = st.last_read_us;
		cp[k] = st.last_compute_us;
		in[k] = st.last_install_us;
	}
	uint64_t mx = 0;
	for (int k = 0; k < steps; k++)
		mx = wall[k] > mx ? wall[k] : mx;
	qsort(wall, (size_t)steps, sizeof(uint64_t), cmp_u64);
	qsort(rd, (size_t)steps, sizeof(uint64_t), cmp_u64);
	qsort(cp, (size_t)steps, sizeof(uint64_t), cmp_u64);
	qsort(in, (size_t)steps, sizeof(uint64_t), cmp_u64);
	printf("| %d | %.2f | %.2f | %.2f | %.3f | %.2f |\n", n, wall[steps / 2] / 1000.0,
	       mx / 1000.0, rd[steps / 2] / 1000.0, cp[steps / 2] / 1000.0, in[steps / 2] / 1000.0);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	static struct bench b;
	struct embedded e;
	int steps = 20;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick"))
			steps = 5;
		else if (!strcmp(argv[i], "--steps") && i + 1 < argc)
			steps = atoi(argv[++i]);
		else
			die("usage: refresher_bench [--steps N] [--quick]", NULL);
	}
	if (steps < 1 || steps > STEPS_MAX)
		die("--steps out of 1..200", NULL);
	log_set_level(LOG_WARN);
	if (embedded_start(&e, &(struct embedded_options){ .postgres = true, .redis = true }))
		die("cannot start the embedded servers", NULL);
	b.admin = PQconnectdb(e.database_url);
	if (PQstatus(b.admin) != CONNECTION_OK || migrate_apply(b.admin, NULL))
		die("cannot connect or migrate", PQerrorMessage(b.admin));
	uv_loop_init(&b.loop);
	struct redis_conn_options ro = { .url = e.redis_url,
					 .name = "bench",
					 .connect_timeout_ms = 10000,
					 .command_timeout_ms = 60000,
					 .reconnect_min_ms = 10,
					 .reconnect_max_ms = 200 };
	if (redis_scripts_new(&b.reg) || gate_scripts_register(b.reg))
		die("scripts", NULL);
	ro.scripts = b.reg;
	if (redis_conn_new(&b.loop, &ro, &b.conn) || gate_new(b.conn, b.reg, "B1", &b.gate) ||
	    redis_conn_start(b.conn))
		die("redis", NULL);
	while (!redis_conn_is_up(b.conn))
		uv_run(&b.loop, UV_RUN_ONCE);
	if (gate_system_init(b.gate, 1, 1000, done_cb, &b))
		die("gate_system_init", NULL);
	run_until_done(&b);

	struct pg_pool_options po = { .conninfo = e.database_url,
				      .name = "bench",
				      .size = 2,
				      .connect_timeout_ms = 10000,
				      .query_timeout_ms = 60000,
				      .reconnect_min_ms = 20,
				      .reconnect_max_ms = 200,
				      .state_cb = state_cb };
	struct pg_pool *pool;
	struct gate_pg *gpg;
	struct refresher *r;
	struct refresher_options o = {
		.owner = "bench", .manual = true, .period_ms = 100, .lease_ms = 600000
	};
	if (pg_pool_new(&b.loop, &po, &pool) || gate_pg_new(pool, NULL, &gpg) ||
	    refresher_new(&b.loop, pool, b.gate, gpg, &o, &r) || pg_pool_start(pool))
		die("pool", NULL);
	while (pg_pool_up_count(pool) < pg_pool_size(pool))
		uv_run(&b.loop, UV_RUN_ONCE);

	printf("command:");
	for (int i = 0; i < argc; i++)
		printf(" %s", argv[i]);
	printf("\n%d cycles per size after one warm-up; times in ms\n\n", steps);
	printf("| campaigns | cycle median | cycle max | reads | compute | installs |\n");
	printf("|---:|---:|---:|---:|---:|---:|\n");
	const int sizes[] = { 10, 1000, 10000 };
	for (int i = 0; i < 3; i++)
		measure(&b, pool, r, sizes[i], steps);

	refresher_free(r);
	b.done = 0;
	pg_pool_close(pool, closed_cb, &b);
	run_until_done(&b);
	gate_free(b.gate);
	redis_conn_close(b.conn, NULL, NULL);
	uv_run(&b.loop, UV_RUN_DEFAULT);
	uv_loop_close(&b.loop);
	gate_pg_free(gpg);
	redis_scripts_free(b.reg);
	PQfinish(b.admin);
	embedded_stop(&e);
	return 0;
}
