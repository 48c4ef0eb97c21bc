-- 0014_calls_list_index: GET /v2/calls (issue 10 item 5) lists an organisation's calls newest
-- first and pages on (created_at, id) (dispatcher/api/README.md, "Calls"): one index range scan
-- per page, whatever the table's size.
-- Applied by `dispatcher migrate` inside one transaction: no BEGIN/COMMIT in migration files.
CREATE INDEX calls_org_created_idx ON calls (org_id, created_at DESC, id DESC);
