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

#endif
