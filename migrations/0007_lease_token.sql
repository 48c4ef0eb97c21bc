-- 0007_lease_token: the claim's fencing token (issue 9; SPEC C9, D1).
-- Applied by `dispatcher migrate` inside one transaction: no BEGIN/COMMIT in migration files.
--
-- Every claim (dispatcher/worker/claim.c) writes contacts.lease_token from this sequence in the
-- same statement that locks the row (FOR UPDATE SKIP LOCKED) and sets state claimed: a token is
-- never reused, so a call-row write fenced by it (gate_pg_write) can only succeed for the claim
-- that drew it, never for an older or a later claim of the same contact.
CREATE SEQUENCE contacts_lease_token_seq AS bigint START WITH 1 CACHE 64;
