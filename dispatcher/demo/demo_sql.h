/* The demo's statements (named, prepared; parameters are text as libpq sends them). The demo
 * writes its organisation as an operator would; the worker never runs these. */
#ifndef DSP_DEMO_SQL_H
#define DSP_DEMO_SQL_H

/* $1 id, $2 name, $3 org_limit. The rate limits are set high: the demo shows the line limit and
 * fair share, not the provider's per-minute rate. */
#define DEMO_SQL_ORG                                                                               \
	"INSERT INTO organisations (id, name, org_limit, rate_default_per_minute,"                 \
	" rate_calls_per_minute, rate_executions_per_minute) VALUES ($1, $2, $3, $4, $4, $4)"

/* $1 id, $2 org_id, $3 from_number. */
#define DEMO_SQL_AGENT "INSERT INTO agents (id, org_id, name, from_number) VALUES ($1, $2, $1, $3)"

/* $1 id, $2 org_id, $3 agent_id, $4 max_concurrent_calls (NULL: none). */
#define DEMO_SQL_CAMPAIGN                                                                          \
	"INSERT INTO campaigns (id, org_id, agent_id, name, max_concurrent_calls)"                 \
	" VALUES ($1, $2, $3, $1, $4)"

/* $1 id, $2 org_id, $3 campaign_id, $4 total_contacts. */
#define DEMO_SQL_BATCH                                                                             \
	"INSERT INTO batches (id, org_id, campaign_id, name, total_contacts)"                      \
	" VALUES ($1, $2, $3, $1, $4)"

/* A batch's contacts in one multi-row statement: numbers $4 + 1 .. $4 + $5 (E.164 without the
 * '+'). $1 org_id, $2 campaign_id, $3 batch_id, $4 first number - 1, $5 count. */
#define DEMO_SQL_CONTACTS                                                                          \
	"INSERT INTO contacts (org_id, campaign_id, batch_id, phone)"                              \
	" SELECT $1, $2, $3, '+' || ($4::bigint + g)::text FROM generate_series(1, $5::int) g"

/* Per campaign of the organisation: contacts pending (due or not), and claimed or in a call.
 * $1 org_id. */
#define DEMO_SQL_BACKLOG                                                                           \
	DEMO_PROBE "SELECT campaign_id, count(*) FILTER (WHERE state = 'pending'),"                \
		   " count(*) FILTER (WHERE state IN ('claimed', 'dialing', 'live'))"              \
		   " FROM contacts WHERE org_id = $1 GROUP BY campaign_id"

/* A new campaign is a new set of limits for its organisation (its ceiling, its agent): the
 * version the refresher installs by (SPEC C4) moves, as the API's campaign creation would.
 * $1 org_id. */
#define DEMO_SQL_LIMITS_BUMP                                                                       \
	"UPDATE organisations SET limits_version = limits_version + 1, updated_at = now()"         \
	" WHERE id = $1"

/* Asks the elected refresher to recompute the organisation now (delivered at commit), as a
 * limits change through the API does (dispatcher/gate/refresher.h). $1 org_id. */
#define DEMO_SQL_REFRESH_KICK "SELECT pg_notify('dsp_refresh', $1)"

/* The fleet's gate mode and epoch (C11): the table's header. */
#define DEMO_SQL_GATE_MODE DEMO_PROBE "SELECT gate_mode, gate_epoch FROM system_settings"

/* --bench (bench/worker). Each statement the demo runs while the workers do carries this
 * marker, so the per-cycle figures from pg_stat_statements leave the demo's own out. */
#define DEMO_PROBE "/* demo-probe */ "

/* Whether campaign $1 has a contact due now (an index probe: contacts_dialable_idx): the
 * window ends when cmp-alpha or cmp-bravo has none (the retries wait an hour). */
#define DEMO_SQL_DUE                                                                               \
	DEMO_PROBE "SELECT EXISTS (SELECT 1 FROM contacts WHERE campaign_id = $1"                  \
		   " AND state = 'pending' AND next_attempt_at <= now())"

/* Committed transactions and rows written (inserted, updated, deleted) of this database. */
#define DEMO_SQL_DB_COUNTERS                                                                       \
	DEMO_PROBE "SELECT xact_commit, tup_inserted + tup_updated + tup_deleted"                  \
		   " FROM pg_stat_database WHERE datname = current_database()"

#define DEMO_SQL_STMT_RESET DEMO_PROBE "SELECT pg_stat_statements_reset()"

/* Statements executed and their rows since the reset, the demo's own left out. */
#define DEMO_SQL_STMT_TOTALS                                                                       \
	DEMO_PROBE                                                                                 \
	"SELECT coalesce(sum(calls), 0), coalesce(sum(rows), 0) FROM pg_stat_statements"           \
	" WHERE query NOT LIKE '%demo-probe%'"

/* Where PostgreSQL spends: the top statements by execution + planning time. */
#define DEMO_SQL_STMT_TOP                                                                          \
	DEMO_PROBE "SELECT calls, round(total_exec_time::numeric, 1),"                             \
		   " round(total_plan_time::numeric, 1), rows,"                                    \
		   " left(regexp_replace(query, '\\s+', ' ', 'g'), 150) FROM pg_stat_statements"   \
		   " WHERE query NOT LIKE '%demo-probe%'"                                          \
		   " ORDER BY total_exec_time + total_plan_time DESC LIMIT 15"

#endif
