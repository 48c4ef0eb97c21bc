-- 0004_refresh_notify: the refresher's kicks from PostgreSQL, and its carry in one row per
-- organisation (issue 8 item 3; SPEC C4, C5).
-- Applied by `dispatcher migrate` inside one transaction: no BEGIN/COMMIT in migration files.

-- Kicks. The refresher recomputes every period (default 1 s) and at once when the active set, a
-- ceiling or a limit changes. Every such change NOTIFYs channel dsp_refresh with the org id as
-- payload ('*': every organisation, the system limit); the refresher's holder LISTENs and runs
-- a cycle (coalesced: dispatcher/gate/refresher.h). PostgreSQL delivers a NOTIFY at commit and
-- only once per (channel, payload) per transaction, so a statement that touches many rows of
-- one org kicks once. Row triggers are filtered by WHEN (no function call for the rows that do
-- not matter: the claim and lease UPDATEs of contacts pay one comparison); bulk INSERTs and
-- DELETEs use statement triggers with a transition table (one NOTIFY per org per statement).
-- A notification sent while the refresher's connection is down is lost; the period covers it.

CREATE FUNCTION dsp_refresh_notify_row() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'system_settings' THEN
        PERFORM pg_notify('dsp_refresh', '*');
    ELSIF TG_TABLE_NAME = 'organisations' THEN
        PERFORM pg_notify('dsp_refresh', NEW.id);
    ELSIF TG_OP = 'DELETE' THEN
        PERFORM pg_notify('dsp_refresh', OLD.org_id);
    ELSE
        PERFORM pg_notify('dsp_refresh', NEW.org_id);
    END IF;
    RETURN NULL;
END $$;

-- Statement triggers: the transition table is named changed in every trigger that uses it.
CREATE FUNCTION dsp_refresh_notify_rows() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('dsp_refresh', o.org_id) FROM (SELECT DISTINCT org_id FROM changed) o;
    RETURN NULL;
END $$;

-- Limits (C1–C4): the system limit, an organisation's limits, a new organisation.
CREATE TRIGGER system_settings_refresh AFTER UPDATE ON system_settings
    FOR EACH ROW WHEN (OLD.global_limit IS DISTINCT FROM NEW.global_limit)
    EXECUTE FUNCTION dsp_refresh_notify_row();
CREATE TRIGGER organisations_refresh_insert AFTER INSERT ON organisations
    FOR EACH ROW EXECUTE FUNCTION dsp_refresh_notify_row();
CREATE TRIGGER organisations_refresh AFTER UPDATE ON organisations
    FOR EACH ROW WHEN (OLD.org_limit IS DISTINCT FROM NEW.org_limit
        OR OLD.per_agent_limit IS DISTINCT FROM NEW.per_agent_limit
        OR OLD.concurrency_management_enabled IS DISTINCT FROM NEW.concurrency_management_enabled)
    EXECUTE FUNCTION dsp_refresh_notify_row();

-- Agents (the per-agent level's membership).
CREATE TRIGGER agents_refresh AFTER INSERT OR UPDATE OR DELETE ON agents
    FOR EACH ROW EXECUTE FUNCTION dsp_refresh_notify_row();

-- Campaigns: the active set (insert, delete, status), a ceiling, the agent a campaign counts on.
CREATE TRIGGER campaigns_refresh_insert AFTER INSERT ON campaigns
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION dsp_refresh_notify_rows();
CREATE TRIGGER campaigns_refresh_delete AFTER DELETE ON campaigns
    REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION dsp_refresh_notify_rows();
CREATE TRIGGER campaigns_refresh AFTER UPDATE ON campaigns
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status
        OR OLD.max_concurrent_calls IS DISTINCT FROM NEW.max_concurrent_calls
        OR OLD.agent_id IS DISTINCT FROM NEW.agent_id)
    EXECUTE FUNCTION dsp_refresh_notify_row();

-- Contacts: a new batch makes its campaign active at once (one NOTIFY per org per INSERT or
-- COPY, whatever its size); a batch paused or resumed (its contacts to or from 'held') changes
-- the active set too. Only held transitions call the function; a pause of n contacts makes n
-- calls that PostgreSQL folds into one notification per org.
CREATE TRIGGER contacts_refresh_insert AFTER INSERT ON contacts
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION dsp_refresh_notify_rows();
CREATE TRIGGER contacts_refresh_held AFTER UPDATE ON contacts
    FOR EACH ROW WHEN ((OLD.state = 'held') <> (NEW.state = 'held'))
    EXECUTE FUNCTION dsp_refresh_notify_row();

-- The carry in one row per organisation. Every active campaign's carry moves at each recompute
-- (its deficit integrates fluid − floor), so one row per campaign meant rewriting every active
-- campaign's row every period (≈ 0.12 s at 10,000 campaigns: bench/RESULTS.md). The exact
-- struct fairshare_carry of every campaign whose carry is kept (dispatcher/core/fairshare.h)
-- now lives in parallel arrays of one row per org, written with each floors install under the
-- same version fence; fair_share_floors keeps the installed state (floor, active flag) of the
-- campaigns that hold a floor or are in the active set, and only its changed rows are written.
CREATE TABLE fair_share_carries (
    org_id       text PRIMARY KEY REFERENCES organisations (id) ON DELETE CASCADE,
    version      bigint NOT NULL CHECK (version > 0),  -- the floors install that wrote it
    campaign_ids text[] NOT NULL,    -- '' is the direct pseudo-campaign
    floors       integer[] NOT NULL, -- carry.floor (the floor installed with it)
    deficit_us   bigint[] NOT NULL,  -- carry.deficit, line-µs
    fluid_num    bigint[] NOT NULL,  -- carry.fluid_num
    fluid_den    bigint[] NOT NULL,  -- carry.fluid_den (0: no fluid share)
    idle_ms      bigint[] NOT NULL,  -- carry.idle_ms
    CHECK (cardinality(floors) = cardinality(campaign_ids)
       AND cardinality(deficit_us) = cardinality(campaign_ids)
       AND cardinality(fluid_num) = cardinality(campaign_ids)
       AND cardinality(fluid_den) = cardinality(campaign_ids)
       AND cardinality(idle_ms) = cardinality(campaign_ids))
);

-- The data migration: every stored carry, exactly (the same integers, in campaign byte order).
INSERT INTO fair_share_carries (org_id, version, campaign_ids, floors, deficit_us, fluid_num,
                                fluid_den, idle_ms)
SELECT f.org_id, greatest(coalesce(max(i.version), max(f.version)), 1),
       array_agg(f.campaign_id ORDER BY f.campaign_id COLLATE "C"),
       array_agg(f.floor ORDER BY f.campaign_id COLLATE "C"),
       array_agg(f.deficit_us ORDER BY f.campaign_id COLLATE "C"),
       array_agg(f.fluid_num ORDER BY f.campaign_id COLLATE "C"),
       array_agg(f.fluid_den ORDER BY f.campaign_id COLLATE "C"),
       array_agg(f.idle_ms ORDER BY f.campaign_id COLLATE "C")
  FROM fair_share_floors f LEFT JOIN fair_share_installs i ON i.org_id = f.org_id
 GROUP BY f.org_id;

-- Rows kept only for their carry (no floor, not active) go; the carry columns go.
DELETE FROM fair_share_floors WHERE floor = 0 AND NOT active;
ALTER TABLE fair_share_floors
    DROP COLUMN deficit_us,
    DROP COLUMN fluid_num,
    DROP COLUMN fluid_den,
    DROP COLUMN idle_ms;
