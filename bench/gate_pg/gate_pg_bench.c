/* gate_pg_bench: the gate's PostgreSQL side, measured (issue 8).
 *
 * Starts its own embedded PostgreSQL (common/embedded.h), applies the migrations, seeds 8
 * organisations (org_limit 20, 4 campaigns each, one agent per campaign, claimed contacts) and
 * 400 live calls of other organisations (what a busy system's count has to scan), then measures:
 *
 *   - call-row writes (redis mode, gate_pg_write): one loop turn's admissions written together
 *     in one batch (16 and 64 calls per batch) against one call per transaction, several in
 *     flight on a pool of 2 connections; rows/s. Each call is a batch dial: lease checked under
 *     the contact's row lock, contact set dialing.
 *   - postgres-mode decisions (gate_pgmode_admit): transactions of 1 and of 8 admissions of one
 *     organisation, 1 and 4 transactions in flight (round robin over the organisations, which all
 *     serialise on the system row), each admitted call released at once so the orgs stay below
 *     their limits; transactions/s and decisions/s.
 *
 * Each cell runs for --seconds (default 3; --quick 0.5) after a short warm-up, on a table where
 * every earlier call has been ended, and prints one markdown row. The command line and the
 * machine facts come first.
 *
 *   gate_pg_bench [--seconds S] [--quick]
 */
#include "embedded.h"
#include "error.h"
#include "gate_pg.h"
#include "gate_pgmode.h"
#include "log.h"
#include "migrate.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ORGS	  8
#define CAMPAIGNS 4
#define PER_CAMP  12000 /* claimed contacts per campaign */
#define BATCH_MAX 64

struct bench {
	uv_loop_t loop;
	struct pg_pool *pool;
	struct gate_pg *g;
	PGconn *admin;
	uint64_t epoch;
	long long first[ORGS][CAMPAIGNS]; /* first contact id of each campaign */
	int used[ORGS][CAMPAIGNS];
	unsigned seq;	 /* call ids */
	unsigned rr;	 /* round robin over orgs and campaigns */
	uint64_t end_ns; /* stop sending after this */
	int inflight;
	long txns, rows, decisions, admitted, failed;
	uint32_t per_txn;
};

static void die(const char *what, const char *detail)
{
	fprintf(stderr, "gate_pg_bench: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
	exit(1);
}

static void sql(PGconn *c, const char *text)
{
	PGresult *res = PQexec(c, text);

	if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK)
		die(text, PQerrorMessage(c));
	PQclear(res);
}

static long long value(PGconn *c, const char *text)
{
	PGresult *res = PQexec(c, text);
	long long v;

	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
		die(text, PQerrorMessage(c));
	v = atoll(PQgetvalue(res, 0, 0));
	PQclear(res);
	return v;
}

static void seed(struct bench *b)
{
	char q[1024];

	for (int o = 0; o < ORGS; o++) {
		snprintf(q, sizeof(q), "INSERT INTO organisations (id, name) VALUES ('o%d', 'o%d')",
			 o, o);
		sql(b->admin, q);
		for (int c = 0; c < CAMPAIGNS; c++) {
			snprintf(
				q, sizeof(q),
				"INSERT INTO agents (id, org_id) VALUES ('o%d_a%d', 'o%d');"
				"INSERT INTO campaigns (id, org_id, agent_id) VALUES"
				" ('o%d_c%d', 'o%d', 'o%d_a%d');"
				"INSERT INTO batches (id, org_id, campaign_id) VALUES"
				" ('o%d_b%d', 'o%d', 'o%d_c%d');"
				"INSERT INTO contacts (org_id, campaign_id, batch_id, phone, state,"
				" lease_token, lease_until) SELECT 'o%d', 'o%d_c%d', 'o%d_b%d',"
				" '+14155550100', 'claimed', 0, now() + interval '1 day'"
				" FROM generate_series(1, %d)",
				o, c, o, o, c, o, o, c, o, c, o, o, c, o, o, c, o, c, PER_CAMP);
			sql(b->admin, q);
			snprintf(q, sizeof(q),
				 "SELECT min(id) FROM contacts WHERE campaign_id = 'o%d_c%d'", o,
				 c);
			b->first[o][c] = value(b->admin, q);
		}
	}
	sql(b->admin, "UPDATE contacts SET lease_token = id + 1000");
	/* Other organisations' live calls: the system count scans them on every decision. */
	sql(b->admin,
	    "INSERT INTO organisations (id, name, org_limit) VALUES ('busy', 'busy', 1000);"
	    "INSERT INTO calls (id, org_id, campaign_id, agent_id, to_number, gate_mode,"
	    " gate_epoch) SELECT gen_random_uuid(), 'busy', NULL, 'busy_a',"
	    " '+14155550100', 'redis', 1 FROM generate_series(1, 400)");
	sql(b->admin, "VACUUM ANALYZE");
}

static const char *next_call(struct bench *b, char *buf)
{
	snprintf(buf, 37, "00000000-0000-4000-8000-%012x", ++b->seq);
	return buf;
}

/* A batch dial of the next unused contact of org o, campaign c. */
static struct gate_pg_dial dial_of(struct bench *b, int o, int c, char *campaign, char *agent)
{
	if (b->used[o][c] >= PER_CAMP)
		die("out of contacts", "use fewer --seconds");
	long long id = b->first[o][c] + b->used[o][c]++;
	snprintf(campaign, 16, "o%d_c%d", o, c);
	snprintf(agent, 16, "o%d_a%d", o, c);
	return (struct gate_pg_dial){ .campaign = campaign,
				      .agent = agent,
				      .contact = id,
				      .lease_token = id + 1000,
				      .attempt = 1,
				      .to_number = "+14155550100" };
}

/* --- call-row writes --- */

static void send_write(struct bench *b);

static void write_cb(struct gate_pg *g, const enum gate_pg_outcome *out, uint32_t n, void *data)
{
	struct bench *b = data;

	b->inflight--;
	b->txns++;
	for (uint32_t i = 0; i < n; i++) {
		if (out[i] == GATE_PG_WRITTEN)
			b->rows++;
		else
			b->failed++;
	}
	if (uv_hrtime() < b->end_ns)
		send_write(b);
}

static void send_write(struct bench *b)
{
	struct gate_pg_call calls[BATCH_MAX];
	char ids[BATCH_MAX][37], camps[BATCH_MAX][16], agents[BATCH_MAX][16], org[BATCH_MAX][8];

	for (uint32_t i = 0; i < b->per_txn; i++) {
		unsigned k = b->rr++;
		int o = (int)(k % ORGS), c = (int)(k / ORGS % CAMPAIGNS);
		snprintf(org[i], sizeof(org[i]), "o%d", o);
		calls[i] = (struct gate_pg_call){ .call = next_call(b, ids[i]),
						  .org = org[i],
						  .dial = dial_of(b, o, c, camps[i], agents[i]) };
	}
	if (gate_pg_write(b->g, GATE_MODE_REDIS, b->epoch, 5000, calls, b->per_txn, write_cb, b))
		die("gate_pg_write refused", NULL);
	b->inflight++;
}

/* --- postgres-mode decisions --- */

static void send_admit(struct bench *b);

static void release_cb(struct gate_pg *g, int status, const bool *ended, uint32_t n, void *data)
{
	struct bench *b = data;

	b->inflight--;
	if (status)
		die("release failed", NULL);
}

/* One admission transaction's call ids, to release the admitted ones. */
struct admit_ctx {
	struct bench *b;
	char ids[GATE_PGMODE_REQS_MAX][37];
};

static void admit_cb(struct gate_pg *g, int status, const struct gate_pgmode_answer *a, void *data)
{
	struct admit_ctx *ctx = data;
	struct bench *b = ctx->b;
	const char *done[GATE_PGMODE_REQS_MAX];
	uint32_t n = 0;

	b->inflight--;
	if (status)
		die("admission failed", dsp_strerror(status));
	b->txns++;
	for (uint32_t i = 0; i < a->n; i++) {
		b->decisions += a->results[i].n_decisions;
		if (a->results[i].outcome == GATE_PGMODE_ADMITTED)
			done[n++] = ctx->ids[i];
	}
	b->admitted += n;
	if (n) { /* the calls end at once: the orgs stay below their limits */
		if (gate_pgmode_release(g, done, n, "completed", release_cb, b))
			die("release refused", NULL);
		b->inflight++;
	}
	free(ctx);
	if (uv_hrtime() < b->end_ns)
		send_admit(b);
}

static void send_admit(struct bench *b)
{
	struct gate_pgmode_req reqs[GATE_PGMODE_REQS_MAX];
	struct gate_pg_dial cands[GATE_PGMODE_REQS_MAX];
	char camps[GATE_PGMODE_REQS_MAX][16], agents[GATE_PGMODE_REQS_MAX][16], org[8];
	struct admit_ctx *ctx = malloc(sizeof(*ctx));
	int o = (int)(b->rr++ % ORGS);

	if (!ctx)
		die("out of memory", NULL);
	ctx->b = b;
	snprintf(org, sizeof(org), "o%d", o);
	for (uint32_t i = 0; i < b->per_txn; i++) {
		cands[i] = dial_of(b, o, (int)(i % CAMPAIGNS), camps[i], agents[i]);
		reqs[i] = (struct gate_pgmode_req){ .call = next_call(b, ctx->ids[i]),
						    .candidates = &cands[i],
						    .n_candidates = 1 };
	}
	if (gate_pgmode_admit(b->g, org, b->epoch, 5000, reqs, b->per_txn, admit_cb, ctx))
		die("gate_pgmode_admit refused", NULL);
	b->inflight++;
}

/* --- cells --- */

static void reset(struct bench *b)
{
	sql(b->admin, "UPDATE calls SET state = 'ended', ended_at = now() WHERE org_id <> 'busy'"
		      " AND state <> 'ended'");
	sql(b->admin, "VACUUM ANALYZE calls");
	sql(b->admin, "VACUUM contacts");
}

/* Runs the cell for seconds with depth transactions in flight; returns the elapsed ns. */
static uint64_t run(struct bench *b, void (*send)(struct bench *), int depth, double seconds)
{
	uint64_t start = uv_hrtime();

	b->end_ns = start + (uint64_t)(seconds * 1e9);
	b->txns = b->rows = b->decisions = b->admitted = b->failed = 0;
	for (int i = 0; i < depth; i++)
		send(b);
	while (b->inflight > 0)
		uv_run(&b->loop, UV_RUN_ONCE);
	return uv_hrtime() - start;
}

static void cell_write(struct bench *b, uint32_t per_txn, int depth, double seconds)
{
	b->per_txn = per_txn;
	reset(b);
	run(b, send_write, depth, seconds / 5); /* warm-up */
	uint64_t ns = run(b, send_write, depth, seconds);
	if (b->failed)
		die("some calls were not written", NULL);
	printf("| call-row writes, redis mode | %u per batch, %d in flight | %.0f | %.0f |\n",
	       per_txn, depth, (double)b->txns * 1e9 / (double)ns,
	       (double)b->rows * 1e9 / (double)ns);
	fflush(stdout);
}

static void cell_admit(struct bench *b, uint32_t per_txn, int depth, double seconds)
{
	b->per_txn = per_txn;
	reset(b);
	run(b, send_admit, depth, seconds / 5);
	uint64_t ns = run(b, send_admit, depth, seconds);
	printf("| postgres-mode admissions | %u per transaction, %d in flight | %.0f | %.0f"
	       " decisions/s (%.0f admitted/s) |\n",
	       per_txn, depth, (double)b->txns * 1e9 / (double)ns,
	       (double)b->decisions * 1e9 / (double)ns, (double)b->admitted * 1e9 / (double)ns);
	fflush(stdout);
}

static bool all_up(struct bench *b)
{
	return pg_pool_up_count(b->pool) == pg_pool_size(b->pool);
}

static void open_pool(struct bench *b, const char *url)
{
	struct pg_pool_options o = {
		.conninfo = url,
		.name = "bench",
		.size = 4,
		.priority_size = 1,
		.connect_timeout_ms = 10000,
		.query_timeout_ms = 60000,
		.reconnect_min_ms = 100,
		.reconnect_max_ms = 1000,
	};

	uv_loop_init(&b->loop);
	if (pg_pool_new(&b->loop, &o, &b->pool) || gate_pg_new(b->pool, NULL, &b->g) ||
	    pg_pool_start(b->pool))
		die("cannot create the pool", NULL);
	while (!all_up(b))
		uv_run(&b->loop, UV_RUN_ONCE);
}

static void closed_cb(void *data)
{
	*(bool *)data = true;
}

int main(int argc, char **argv)
{
	static struct bench b;
	struct embedded e;
	double seconds = 3;
	bool closed = false;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
			seconds = strtod(argv[++i], NULL);
		else if (strcmp(argv[i], "--quick") == 0)
			seconds = 0.5;
		else
			seconds = -1;
	}
	if (seconds <= 0 || seconds > 5) {
		fprintf(stderr, "usage: gate_pg_bench [--seconds S (0..5]] [--quick]\n");
		return 2;
	}
	log_set_level(LOG_WARN);
	if (embedded_start(&e, &(struct embedded_options){ .postgres = true }) != 0)
		die("cannot start the embedded PostgreSQL", NULL);
	b.admin = PQconnectdb(e.database_url);
	if (PQstatus(b.admin) != CONNECTION_OK || migrate_apply(b.admin, NULL))
		die("cannot connect or migrate", PQerrorMessage(b.admin));
	seed(&b);
	printf("command:");
	for (int i = 0; i < argc; i++)
		printf(" %s", argv[i]);
	printf("\nmachine: nproc %ld, PostgreSQL %lld (embedded: fsync off, unix socket), pool of"
	       " 4 + 1, %.1f s per cell; 8 orgs x 4 campaigns, 400 other live calls\n\n",
	       sysconf(_SC_NPROCESSORS_ONLN), value(b.admin, "SHOW server_version_num"), seconds);
	printf("| what | shape | transactions/s | rows/s or decisions/s |\n|---|---|---:|---:|\n");
	open_pool(&b, e.database_url);
	b.epoch = 1;
	cell_write(&b, 1, 16, seconds);
	cell_write(&b, 16, 4, seconds);
	cell_write(&b, 64, 2, seconds);
	sql(b.admin, "UPDATE system_settings SET gate_mode = 'postgres', gate_epoch = 2");
	b.epoch = 2;
	cell_admit(&b, 1, 1, seconds);
	cell_admit(&b, 1, 4, seconds);
	cell_admit(&b, 8, 1, seconds);
	cell_admit(&b, 8, 4, seconds);
	pg_pool_close(b.pool, closed_cb, &closed);
	while (!closed)
		uv_run(&b.loop, UV_RUN_ONCE);
	uv_run(&b.loop, UV_RUN_DEFAULT);
	uv_loop_close(&b.loop);
	gate_pg_free(b.g);
	PQfinish(b.admin);
	embedded_stop(&e);
	return 0;
}
