-- 0006_retention_lease: the election of the retention job (issue 9; SPEC §7).
-- Applied by `dispatcher migrate` inside one transaction: no BEGIN/COMMIT in migration files.
--
-- One worker at a time deletes ended calls, dial_attempts and provider_events older than the
-- retention (dispatcher/worker/sweep.h): the one whose name is in this row with lease_until in
-- the future. It renews the row in the same transaction as each delete, and a delete commits
-- only with the row held by its worker.
INSERT INTO leases (name) VALUES ('retention') ON CONFLICT (name) DO NOTHING;
