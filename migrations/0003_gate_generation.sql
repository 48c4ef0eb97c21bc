-- 0003_gate_generation: the generation the last committed rebuild wrote (issue 8; SPEC C11).
-- Applied by `dispatcher migrate` inside one transaction: no BEGIN/COMMIT in migration files.
--
-- The reconciler's way back (gate_pg_rebuild_finish) sets it in the same statement that sets
-- mode redis and epoch + 1, so for a redis epoch it names the one Redis state the fleet may use.
-- Workers adopt only this exact {sys}:gen: a stale reconciler whose transaction was lost and
-- that writes its own e<epoch>.… generation afterwards makes them switch to postgres mode
-- instead of being adopted (dispatcher/gate/README.md, "Reconciler and mode controller").
-- NULL (never rebuilt since this migration): no generation is adopted, so a fleet in redis mode
-- switches to postgres mode once and the reconciler rebuilds under a recorded generation.
ALTER TABLE system_settings
    ADD COLUMN gate_generation text CHECK (octet_length(gate_generation) BETWEEN 1 AND 64);
