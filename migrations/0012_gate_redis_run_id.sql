-- 0012_gate_redis_run_id: the Redis server the last committed rebuild was built on (issue 8;
-- SPEC C11).
-- Applied by `dispatcher migrate` inside one transaction: no BEGIN/COMMIT in migration files.
--
-- The reconciler's way back (gate_pg_rebuild_finish) sets it with gate_generation (0003), in
-- the statement that sets mode redis and epoch + 1: the run_id (INFO server) of the server it
-- rebuilt, read from its connection at the start and at the end of the rebuild (equal, or it
-- rolls back). A generation alone does not name a server: a restart that reloads a snapshot,
-- or a replica promoted during the epoch, keeps the generation but may have lost the newest
-- slot records. Workers adopt a server at a redis epoch only when its run_id equals this one
-- and its {sys}:gen equals gate_generation; any other server switches the fleet to postgres
-- mode (dispatcher/gate/gate_mode.h).
-- NULL (no rebuild committed since this migration, or a server that reports no run_id): only a
-- server that reports no run_id either is adopted, so a fleet in redis mode on a real server
-- switches to postgres mode once and the reconciler rebuilds under a recorded run_id.
ALTER TABLE system_settings
    ADD COLUMN gate_redis_run_id text CHECK (octet_length(gate_redis_run_id) BETWEEN 1 AND 64);
