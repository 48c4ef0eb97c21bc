-- 0011_limits_version_triggers: the limits versions move with the limits, in the database
-- (issue 9; SPEC C4).
-- Applied by `dispatcher migrate` inside one transaction: no BEGIN/COMMIT in migration files.
--
-- The refresher installs an organisation's resolved limits (org_limit, per_agent_limit,
-- concurrency_management_enabled, and every campaign's ceiling and agent) in Redis only when
-- organisations.limits_version is newer than the version the gate holds, and the system limit
-- only when system_settings.limits_version is. Until now every writer (the API, an operator's
-- SQL) had to bump the version by hand: a campaign inserted without the bump stayed unknown to
-- the gate (its admissions refused, reason `unknown`) and a limit changed without it never
-- reached the workers, against C4. These triggers bump the versions whenever anything that
-- feeds the resolved limits changes:
--   - organisations: org_limit, per_agent_limit or concurrency_management_enabled changed, and
--     system_settings: global_limit changed — a BEFORE row trigger sets limits_version to
--     OLD + 1 unless the same statement already raised it (a writer who bumps by hand gets
--     exactly its own bump, never two);
--   - campaigns inserted or deleted, or their status, max_concurrent_calls, agent_id or org_id
--     changed; agents inserted or deleted — one bump per organisation per statement (statement
--     triggers with transition tables; organisations locked in id order, so two statements
--     over several organisations cannot deadlock on their rows).
-- A version only has to grow: a writer who also bumps by hand in another statement of the
-- same transaction adds one more, which changes nothing. The bump is an UPDATE of the
-- organisations row that touches none of the columns of 0004's organisations_refresh WHEN, so
-- it sends no NOTIFY of its own: 0004's trigger on the changed table sends the one
-- notification, and PostgreSQL delivers it at commit, when the bumped version is visible to
-- the refresher's cycle it starts. Contacts are not involved: no trigger is added there.

-- BEFORE UPDATE (organisations, system_settings): the row's own version.
CREATE FUNCTION dsp_limits_version_own() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.limits_version <= OLD.limits_version THEN
        NEW.limits_version := OLD.limits_version + 1;
    END IF;
    RETURN NEW;
END $$;

-- AFTER INSERT / DELETE statement triggers (campaigns, agents): the transition table is
-- named changed in every trigger that uses this function.
CREATE FUNCTION dsp_limits_version_rows() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    o text;
BEGIN
    FOR o IN SELECT DISTINCT org_id FROM changed ORDER BY 1 LOOP
        UPDATE organisations SET limits_version = limits_version + 1 WHERE id = o;
    END LOOP;
    RETURN NULL;
END $$;

-- AFTER UPDATE statement trigger (campaigns): only the rows whose limit inputs changed, both
-- organisations when a campaign moved.
CREATE FUNCTION dsp_limits_version_campaigns() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    o text;
BEGIN
    FOR o IN
        SELECT DISTINCT x.org_id FROM old_rows b JOIN new_rows a ON a.id = b.id,
               LATERAL (VALUES (b.org_id), (a.org_id)) x(org_id)
         WHERE b.status IS DISTINCT FROM a.status
            OR b.max_concurrent_calls IS DISTINCT FROM a.max_concurrent_calls
            OR b.agent_id IS DISTINCT FROM a.agent_id
            OR b.org_id IS DISTINCT FROM a.org_id
         ORDER BY 1
    LOOP
        UPDATE organisations SET limits_version = limits_version + 1 WHERE id = o;
    END LOOP;
    RETURN NULL;
END $$;

CREATE TRIGGER organisations_limits_version BEFORE UPDATE ON organisations
    FOR EACH ROW WHEN (OLD.org_limit IS DISTINCT FROM NEW.org_limit
        OR OLD.per_agent_limit IS DISTINCT FROM NEW.per_agent_limit
        OR OLD.concurrency_management_enabled IS DISTINCT FROM NEW.concurrency_management_enabled)
    EXECUTE FUNCTION dsp_limits_version_own();
CREATE TRIGGER system_settings_limits_version BEFORE UPDATE ON system_settings
    FOR EACH ROW WHEN (OLD.global_limit IS DISTINCT FROM NEW.global_limit)
    EXECUTE FUNCTION dsp_limits_version_own();

CREATE TRIGGER campaigns_limits_version_insert AFTER INSERT ON campaigns
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION dsp_limits_version_rows();
CREATE TRIGGER campaigns_limits_version_delete AFTER DELETE ON campaigns
    REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION dsp_limits_version_rows();
CREATE TRIGGER campaigns_limits_version_update AFTER UPDATE ON campaigns
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION dsp_limits_version_campaigns();

CREATE TRIGGER agents_limits_version_insert AFTER INSERT ON agents
    REFERENCING NEW TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION dsp_limits_version_rows();
CREATE TRIGGER agents_limits_version_delete AFTER DELETE ON agents
    REFERENCING OLD TABLE AS changed
    FOR EACH STATEMENT EXECUTE FUNCTION dsp_limits_version_rows();
