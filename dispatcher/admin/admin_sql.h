/* The statements of `dispatcher admin` (admin.c): static text, every value a parameter. An
 * absent option is a NULL parameter (the column keeps its value, or takes the schema's default
 * on create); "none" is the empty string (the column becomes NULL). The limits_version bumps
 * are migration 0011's triggers (SPEC C4): no statement here bumps by hand. */
#ifndef DSP_ADMIN_SQL_H
#define DSP_ADMIN_SQL_H

/* $1 id, $2 name, $3 org_limit, $4 per_agent_limit, $5 enforced, $6..$8 rate buckets,
 * $9 pending_ceiling, $10 plan, $11 tier. The coalesce() defaults repeat the schema's (0001);
 * tests/integration/test_admin.c checks that they agree. */
#define ADMIN_SQL_ORG_CREATE                                                                       \
	"INSERT INTO organisations (id, name, org_limit, per_agent_limit,"                         \
	" concurrency_management_enabled, rate_default_per_minute, rate_calls_per_minute,"         \
	" rate_executions_per_minute, pending_ceiling, plan, rate_limit_tier)"                     \
	" VALUES (coalesce($1, dsp_new_id('org')), $2, coalesce($3::int, 20),"                     \
	" nullif($4::text, '')::int, coalesce($5::boolean, true), coalesce($6::int, 1000),"        \
	" coalesce($7::int, 600), coalesce($8::int, 600), coalesce($9::int, 250000),"              \
	" coalesce($10, 'free'), coalesce($11, 'free')) RETURNING id"

/* $1 org id, then $2.. as ADMIN_SQL_ORG_CREATE's $3..: the version before and after. */
#define ADMIN_SQL_ORG_SET                                                                          \
	"WITH old AS (SELECT id, limits_version FROM organisations WHERE id = $1 FOR UPDATE)"      \
	" UPDATE organisations o SET"                                                              \
	" org_limit = coalesce($2::int, o.org_limit),"                                             \
	" per_agent_limit = CASE WHEN $3::text IS NULL THEN o.per_agent_limit"                     \
	"  ELSE nullif($3::text, '')::int END,"                                                    \
	" concurrency_management_enabled = coalesce($4::boolean, "                                 \
	"o.concurrency_management_enabled),"                                                       \
	" rate_default_per_minute = coalesce($5::int, o.rate_default_per_minute),"                 \
	" rate_calls_per_minute = coalesce($6::int, o.rate_calls_per_minute),"                     \
	" rate_executions_per_minute = coalesce($7::int, o.rate_executions_per_minute),"           \
	" pending_ceiling = coalesce($8::int, o.pending_ceiling),"                                 \
	" plan = coalesce($9, o.plan), rate_limit_tier = coalesce($10, o.rate_limit_tier),"        \
	" updated_at = now()"                                                                      \
	" FROM old WHERE o.id = old.id RETURNING old.limits_version, o.limits_version"

#define ADMIN_SQL_ORG_LIST                                                                         \
	"SELECT o.id, o.name, o.org_limit, coalesce(o.per_agent_limit::text, 'none')"              \
	" AS per_agent_limit, o.concurrency_management_enabled AS enforced,"                       \
	" o.rate_default_per_minute AS rate_default, o.rate_calls_per_minute AS rate_calls,"       \
	" o.rate_executions_per_minute AS rate_executions, o.pending_ceiling, o.plan,"             \
	" o.rate_limit_tier AS tier, o.limits_version,"                                            \
	" (SELECT count(*) FROM api_keys k WHERE k.org_id = o.id AND k.revoked_at IS NULL)"        \
	" AS active_keys FROM organisations o ORDER BY o.id"

/* $1 id, $2 org, $3 name, $4 from_number. */
#define ADMIN_SQL_AGENT_CREATE                                                                     \
	"INSERT INTO agents (id, org_id, name, from_number)"                                       \
	" VALUES (coalesce($1, dsp_new_id('agent')), $2, coalesce($3, ''), $4) RETURNING id"

/* $1 org or NULL for all. */
#define ADMIN_SQL_AGENT_LIST                                                                       \
	"SELECT id, org_id, name, coalesce(from_number, '-') AS from_number FROM agents"           \
	" WHERE $1::text IS NULL OR org_id = $1 ORDER BY org_id, id"

/* $1 id, $2 org, $3 agent, $4 name, $5 ceiling, $6 retry_max_attempts, $7 retry_delay. */
#define ADMIN_SQL_CAMPAIGN_CREATE                                                                  \
	"INSERT INTO campaigns (id, org_id, agent_id, name, max_concurrent_calls,"                 \
	" retry_max_attempts, retry_delay_seconds)"                                                \
	" VALUES (coalesce($1, dsp_new_id('cmp')), $2, $3, coalesce($4, ''),"                      \
	" nullif($5::text, '')::int, coalesce($6::int, 3), coalesce($7::int, 3600)) RETURNING id"

/* $1 campaign, $2 ceiling, $3 retry_max_attempts, $4 retry_delay: the organisation. */
#define ADMIN_SQL_CAMPAIGN_SET                                                                     \
	"UPDATE campaigns SET"                                                                     \
	" max_concurrent_calls = CASE WHEN $2::text IS NULL THEN max_concurrent_calls"             \
	"  ELSE nullif($2::text, '')::int END,"                                                    \
	" retry_max_attempts = coalesce($3::int, retry_max_attempts),"                             \
	" retry_delay_seconds = coalesce($4::int, retry_delay_seconds), updated_at = now()"        \
	" WHERE id = $1 RETURNING org_id"

/* $1 org: its limits version (read inside the transaction of a campaign change). */
#define ADMIN_SQL_ORG_VERSION	   "SELECT limits_version FROM organisations WHERE id = $1"
#define ADMIN_SQL_ORG_VERSION_LOCK ADMIN_SQL_ORG_VERSION " FOR UPDATE"

/* $1 campaign: its organisation. */
#define ADMIN_SQL_CAMPAIGN_ORG "SELECT org_id FROM campaigns WHERE id = $1"

#define ADMIN_SQL_CAMPAIGN_LIST                                                                    \
	"SELECT id, org_id, agent_id, name, status,"                                               \
	" coalesce(max_concurrent_calls::text, 'none') AS ceiling, retry_max_attempts,"            \
	" retry_delay_seconds FROM campaigns WHERE $1::text IS NULL OR org_id = $1"                \
	" ORDER BY org_id, id"

/* $1 org, $2 name, $3 key_hash (binary), $4 key_preview. */
#define ADMIN_SQL_KEY_CREATE                                                                       \
	"INSERT INTO api_keys (org_id, name, key_hash, key_preview)"                               \
	" VALUES ($1, coalesce($2, ''), $3, $4) RETURNING id"

#define ADMIN_SQL_KEY_LIST                                                                         \
	"SELECT id, org_id, name, key_preview AS preview,"                                         \
	" CASE WHEN revoked_at IS NULL THEN 'active' ELSE 'revoked' END AS state,"                 \
	" to_char(created_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"') AS created_at," \
	" coalesce(to_char(revoked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), '-')" \
	" AS revoked_at FROM api_keys WHERE $1::text IS NULL OR org_id = $1"                       \
	" ORDER BY org_id, created_at, id"

/* $1 key id: whether it was revoked before this statement. */
#define ADMIN_SQL_KEY_REVOKE                                                                       \
	"WITH old AS (SELECT id, revoked_at FROM api_keys WHERE id = $1 FOR UPDATE)"               \
	" UPDATE api_keys k SET revoked_at = coalesce(old.revoked_at, now())"                      \
	" FROM old WHERE k.id = old.id RETURNING old.revoked_at IS NOT NULL"

#endif
