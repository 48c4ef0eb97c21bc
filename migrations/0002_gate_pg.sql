-- 0002_gate_pg: what the PostgreSQL side of the slot gate needs (issue 8; SPEC C5, C10, C11).
-- Applied by `dispatcher migrate` inside one transaction: no BEGIN/COMMIT in migration files.
-- The fences and why they cannot race: dispatcher/gate/README-pg.md.
--
-- The epoch lock. Every call-row write takes pg_advisory_xact_lock_shared(7564136) before it
-- reads system_settings.gate_epoch; the mode switch and the fence below take it exclusively
-- (pg_locks: locktype advisory, classid 0, objid 7564136). It is a lock, not a row: a FOR SHARE
-- on the system row would create a MultiXact per overlapping pair of writes.

-- Fences. A call id here can never get a call row: the reconciler (or a worker whose write's
-- outcome was lost with its connection) inserts it, holding the epoch lock exclusively, only
-- after checking that no row exists; every write checks it under the shared lock. So for each
-- call id exactly one of the two happens: its row is written, or it is fenced. Pruned after a
-- day (a write is bounded by its deadline, seconds): gate_pg_prune_fences().
CREATE TABLE gate_fences (
    call_id    uuid PRIMARY KEY,
    org_id     text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX gate_fences_created_idx ON gate_fences (created_at);

-- The floors install of one organisation, as the postgres gate mode reads it (C5, C11): the
-- version fences a paused refresher (an install whose version is not newer changes nothing),
-- and the floors count while now() < expires_at (PostgreSQL's clock: the install writes
-- now() + ttl, the admission compares with clock_timestamp(); no other clock is involved).
CREATE TABLE fair_share_installs (
    org_id       text PRIMARY KEY REFERENCES organisations (id) ON DELETE CASCADE,
    version      bigint NOT NULL CHECK (version > 0),
    installed_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL
);

-- The refresher's exact carry (dispatcher/core/fairshare.h, struct fairshare_carry), so that a
-- refresher taking over continues the rotation where the previous one left it, and the active
-- flag of the installed set (core/capacity.h V1). The inexact double columns are replaced.
ALTER TABLE fair_share_floors
    DROP COLUMN deficit,
    DROP COLUMN fluid_share,
    ADD COLUMN deficit_us bigint NOT NULL DEFAULT 0,      -- integral of (fluid - floor) dt, line-µs
    ADD COLUMN fluid_num  bigint NOT NULL DEFAULT 0,      -- fluid share = fluid_num / fluid_den
    ADD COLUMN fluid_den  bigint NOT NULL DEFAULT 0 CHECK (fluid_den >= 0),  -- 0: no fluid share
    ADD COLUMN idle_ms    bigint NOT NULL DEFAULT 0 CHECK (idle_ms >= 0),    -- R5 grace
    ADD COLUMN active     boolean NOT NULL DEFAULT false;  -- in the installed active set

-- Waiting direct dials while the gate is in postgres mode (C5 direct_reserve, C10): k is the
-- number of unexpired rows of the org. Registered and withdrawn by the postgres-mode admission
-- in the same transaction as its decision; a row outlives a crashed worker only until
-- expires_at (the direct dial's 5 s wait plus a margin).
CREATE TABLE gate_direct_waiters (
    call_id    uuid PRIMARY KEY,
    org_id     text NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    agent_id   text,
    expires_at timestamptz NOT NULL
);
CREATE INDEX gate_direct_waiters_org_idx ON gate_direct_waiters (org_id, expires_at);


-- The postgres-mode admission reads, besides its candidates, only the campaigns that hold a
-- floor (at most org_limit of them have one) or a live call, so its cost does not grow with
-- the number of campaigns an organisation has.
CREATE INDEX fair_share_floors_held_idx ON fair_share_floors (org_id, campaign_id) WHERE floor > 0;
