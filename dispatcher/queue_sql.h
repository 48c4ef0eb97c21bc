/* The contact queue's statements, shared by the contact store and the schema tests (which
 * assert their plans). Parameters are text, as libpq sends them. */
#ifndef DSP_QUEUE_SQL_H
#define DSP_QUEUE_SQL_H

/* The next dialable contacts of one campaign: pending, due, oldest due first; a page of them,
 * locked so that concurrent claimers skip each other's rows. Must be an index range scan on
 * contacts_dialable_idx (tests/integration/test_schema.c checks the plan).
 * $1 campaign_id, $2 page size. */
#define SQL_NEXT_DIALABLE                                                                          \
	"SELECT id, phone, attempts FROM contacts"                                                 \
	" WHERE campaign_id = $1 AND state = 'pending' AND next_attempt_at <= now()"               \
	" ORDER BY next_attempt_at, id LIMIT $2 FOR UPDATE SKIP LOCKED"

/* How many contacts of one campaign are pending and due (the "due" input of fair share).
 * $1 campaign_id. */
#define SQL_COUNT_DUE                                                                              \
	"SELECT count(*) FROM contacts"                                                            \
	" WHERE campaign_id = $1 AND state = 'pending' AND next_attempt_at <= now()"

/* SQL_COUNT_DUE counted up to a cap: the refresher needs no more than org_limit (need never
 * exceeds it), so the count reads at most $2 entries of contacts_dialable_idx (a capped index
 * range scan; tests/integration/test_refresher.c checks the plan). The ORDER BY is the index's
 * order: without it the planner may walk contacts_org_pending_idx instead, filtering by
 * campaign, which is unbounded for a small campaign in a large organisation. 175 ms on 226 k due contacts
 * uncapped, 0.7 ms with a cap of 20 (issue 8). $1 campaign_id, $2 cap. */
#define SQL_COUNT_DUE_CAPPED                                                                       \
	"SELECT count(*) FROM (SELECT 1 FROM contacts"                                             \
	" WHERE campaign_id = $1 AND state = 'pending' AND next_attempt_at <= now()"               \
	" ORDER BY next_attempt_at LIMIT $2) d"

#endif
