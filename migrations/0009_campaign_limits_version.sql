-- 0009_campaign_limits_version: a campaign's arrival, departure or limit change bumps its
-- organisation's limits_version (issue 9; SPEC C4). Applied by `dispatcher migrate` inside one
-- transaction.
--
-- The refresher installs an organisation's limits in the gate (each campaign's ceiling and agent,
-- and the "known" mark without which the gate refuses the campaign's candidates as unknown) only
-- when organisations.limits_version is newer than the installed version. Nothing bumped it when a
-- campaign was created, so a campaign that joined a running organisation was never admitted:
-- its contacts were claimed and handed back for ever. The trigger bumps it for every writer,
-- once the organisation's floors have been installed (a fair_share_installs row): before that,
-- the refresher's first install carries every campaign it reads anyway. (A campaign created
-- between the first cycle's read and its install row is installed by the next bump; the gate-side
-- cure is a refresher that installs the limits when a campaign it reads is not known in the view.)
CREATE FUNCTION dsp_campaign_limits_bump() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    org text := CASE WHEN TG_OP = 'DELETE' THEN OLD.org_id ELSE NEW.org_id END;
BEGIN
    IF EXISTS (SELECT 1 FROM fair_share_installs WHERE org_id = org) THEN
        UPDATE organisations SET limits_version = limits_version + 1, updated_at = now()
         WHERE id = org;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER campaigns_limits_bump_ins AFTER INSERT ON campaigns
    FOR EACH ROW EXECUTE FUNCTION dsp_campaign_limits_bump();
CREATE TRIGGER campaigns_limits_bump_del AFTER DELETE ON campaigns
    FOR EACH ROW EXECUTE FUNCTION dsp_campaign_limits_bump();
CREATE TRIGGER campaigns_limits_bump_upd AFTER UPDATE OF max_concurrent_calls, agent_id
    ON campaigns FOR EACH ROW
    WHEN (OLD.max_concurrent_calls IS DISTINCT FROM NEW.max_concurrent_calls
          OR OLD.agent_id IS DISTINCT FROM NEW.agent_id)
    EXECUTE FUNCTION dsp_campaign_limits_bump();
