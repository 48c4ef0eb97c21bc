/* Statements of the gate's PostgreSQL side kept apart from the tables of gate_pg.c and
 * gate_pgmode.c, registered by gate_pg_new() like them (named, prepared on the pool). */
#ifndef DSP_GATE_PG_SQL_H
#define DSP_GATE_PG_SQL_H

#include "gate_pg.h" /* GATE_PG_CHANNEL_FREE */

/* Ends call rows that were written but will never be dialled (gate_pg_cancel_written(): the
 * caller was answered -ECANCELED while the write was in flight, gate_flow_close()). $1 call ids
 * (uuid[]), $2 their contacts (bigint[], NULL for a direct dial), $3 the claims' lease tokens
 * (bigint[]). Sent after the shared epoch lock, like the write. A row is ended only while it is
 * still dialing with no provider call (never POSTed): state ended, outcome 'refused',
 * outcome_reason 'cancelled before dial'. Its contact goes back to pending — no attempt or try
 * charged, its claim cleared, next_attempt_at unchanged (still due) — only while it is dialing
 * under the same lease token (checked under its row lock by READ COMMITTED, as the write's).
 * In postgres mode the orgs of the ended rows are NOTIFYed like a release. One boolean per call,
 * in input order: its row was ended here. */
#define SQL_GATE_PG_CANCEL                                                                         \
	"WITH i AS (SELECT * FROM unnest($1::uuid[], $2::bigint[], $3::bigint[])"                  \
	" WITH ORDINALITY AS t(id, contact_id, lease_token, n)),"                                  \
	" u AS (UPDATE calls c SET state = 'ended', outcome = 'refused',"                          \
	" outcome_reason = 'cancelled before dial', ended_at = now(), updated_at = now()"          \
	" FROM i WHERE c.id = i.id AND c.state = 'dialing' AND c.provider_call_id IS NULL"         \
	" RETURNING c.id, c.org_id, i.contact_id, i.lease_token),"                                 \
	" k AS (UPDATE contacts k SET state = 'pending', lease_owner = NULL, lease_token = NULL,"  \
	" lease_until = NULL, updated_at = now() FROM u WHERE k.id = u.contact_id"                 \
	" AND k.state = 'dialing' AND k.lease_token = u.lease_token RETURNING k.id),"              \
	" n AS (SELECT pg_notify('" GATE_PG_CHANNEL_FREE "', o.org_id)"                            \
	" FROM (SELECT DISTINCT org_id FROM u) o"                                                  \
	" WHERE (SELECT gate_mode FROM system_settings) = 'postgres')"                             \
	" SELECT i.id IN (SELECT id FROM u) FROM i"                                                \
	" WHERE (SELECT count(*) FROM k) + (SELECT count(*) FROM n) >= 0 ORDER BY i.n"

#endif
