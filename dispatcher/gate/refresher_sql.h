/* The refresher's statements (refresher*.c), named here so the tests can check their plans. */
#ifndef DSP_REFRESHER_SQL_H
#define DSP_REFRESHER_SQL_H

#include "gate_pg.h"

/* The lease's compare-and-set. $1 owner, $2 the caller's tenure version (0: none), $3 lease
 * duration in ms, $4 true to start a new tenure even when holding. Renews (version kept) when
 * the caller holds an unexpired lease, starts a new tenure (version + 1) when the lease has run
 * out (anyone) or the caller holds it with $4; otherwise no row. The row lock serialises two
 * callers: the second re-checks the WHERE against the first's commit. */
#define SQL_REFRESHER_LEASE                                                                        \
	"UPDATE leases SET owner = $1::text,"                                                      \
	" version = CASE WHEN owner = $1::text AND version = $2::bigint"                           \
	" AND lease_until > clock_timestamp() AND NOT $4::boolean THEN version ELSE version + 1 "  \
	"END,"                                                                                     \
	" lease_until = clock_timestamp() + make_interval(secs => $3::double precision / 1000)"    \
	" WHERE name = 'refresher' AND (lease_until <= clock_timestamp()"                          \
	" OR (owner = $1::text AND version = $2::bigint))"                                         \
	" RETURNING version"

/* Every organisation, in byte order. */
#define SQL_REFRESHER_ORGS "SELECT id FROM organisations ORDER BY id COLLATE \"C\""

/* The gate's mode (gate_pg.h): in postgres mode the running counts come from the call rows
 * (SQL_REFRESHER_RUNNING, SQL_REFRESHER_LIVE) and the floors go to PostgreSQL only. */
#define SQL_REFRESHER_MODE "SELECT gate_mode FROM system_settings"

/* One organisation's limits, the system limit, and the elapsed time since its last floors
 * install on the database's clock (-1: never). $1 org. */
#define SQL_REFRESHER_ORG                                                                          \
	"SELECT o.limits_version, o.org_limit, coalesce(o.per_agent_limit, 0),"                    \
	" o.concurrency_management_enabled, s.global_limit, s.limits_version,"                     \
	" coalesce(floor(extract(epoch FROM clock_timestamp() - i.installed_at) * 1000), "         \
	"-1)::bigint"                                                                              \
	" FROM organisations o CROSS JOIN system_settings s"                                       \
	" LEFT JOIN fair_share_installs i ON i.org_id = o.id WHERE o.id = $1::text"

/* Every campaign of the organisation in byte order: id, agent, status, ceiling (0: none), due
 * contacts counted up to org_limit (the form of SQL_COUNT_DUE_CAPPED, dispatcher/queue_sql.h:
 * at most org_limit index entries of contacts_dialable_idx per active campaign). $1 org. */
#define SQL_REFRESHER_CAMPAIGNS                                                                    \
	"SELECT c.id, c.agent_id, c.status::text, coalesce(c.max_concurrent_calls, 0),"            \
	" CASE WHEN c.status = 'active' THEN (SELECT count(*) FROM (SELECT 1 FROM contacts k"      \
	" WHERE k.campaign_id = c.id AND k.state = 'pending' AND k.next_attempt_at <= now()"       \
	" ORDER BY k.next_attempt_at LIMIT o.org_limit) d) ELSE 0 END"                             \
	" FROM campaigns c JOIN organisations o ON o.id = c.org_id"                                \
	" WHERE c.org_id = $1::text ORDER BY c.id COLLATE \"C\""

/* Claimed contacts per campaign (the `waiting` input until the worker registers its waiters),
 * capped at org_limit. Scans contacts_lease_idx: every claimed contact of the fleet, a set
 * bounded by the workers' claim pages. $1 org. */
#define SQL_REFRESHER_WAITING                                                                      \
	"SELECT campaign_id, least(count(*), (SELECT org_limit FROM organisations"                 \
	" WHERE id = $1::text)) FROM contacts WHERE state = 'claimed' AND org_id = $1::text"       \
	" GROUP BY campaign_id"

/* The exact carries stored with the last floors (fair_share_carries, one row per org,
 * migration 0004), one row per entry in stored order: campaign id ('' the direct one), floor,
 * deficit, fluid numerator and denominator, idle time. Merged with the campaigns by the
 * refresher, not joined here (no plan to go wrong at 10,000 campaigns). $1 org. */
#define SQL_REFRESHER_CARRIES                                                                      \
	"SELECT t.* FROM fair_share_carries k, unnest(k.campaign_ids, k.floors, k.deficit_us,"     \
	" k.fluid_num, k.fluid_den, k.idle_ms) AS t(campaign_id, floor, deficit_us, fluid_num,"    \
	" fluid_den, idle_ms) WHERE k.org_id = $1::text"

/* The org's live calls (state dialing, live or unknown: the postgres-mode gate's count) per
 * campaign, then per agent, on calls_live_org_idx: by_agent (0: campaign rows, campaign_id NULL
 * the direct calls; 1: agent rows, agent_id NULL the calls without one), campaign_id, agent_id,
 * count; each group in byte order. $1 org. */
#define SQL_REFRESHER_RUNNING                                                                      \
	"SELECT grouping(campaign_id), campaign_id, agent_id, count(*) FROM calls"                 \
	" WHERE org_id = $1::text AND state IN ('dialing', 'live', 'unknown')"                     \
	" GROUP BY GROUPING SETS ((campaign_id), (agent_id))"                                      \
	" ORDER BY 1, campaign_id COLLATE \"C\", agent_id COLLATE \"C\""

/* The system's live calls and the org's waiting direct dials (k), as the postgres-mode gate
 * counts them. $1 org. */
#define SQL_REFRESHER_LIVE                                                                         \
	"SELECT (SELECT count(*) FROM calls WHERE state IN ('dialing', 'live', 'unknown')),"       \
	" (SELECT count(*) FROM gate_direct_waiters WHERE org_id = $1::text"                       \
	" AND expires_at > clock_timestamp())"

/* Postgres mode's wake after an applied floors install: the workers with contacts of the org
 * waiting try again (the channel a postgres-mode release NOTIFYs). $1 org. */
#define SQL_REFRESHER_WAKE "SELECT pg_notify('" GATE_PG_CHANNEL_FREE "', $1::text)"

#endif
