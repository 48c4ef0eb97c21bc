-- 0016_batch_resume_notify: a batch or a campaign entering 'active' (resumed, or a new active
-- batch) reaches every worker at once too (issue 10 item 4; SPEC R6, C9).
-- Applied by `dispatcher migrate` inside one transaction: no BEGIN/COMMIT in migration files.
--
-- 0015 NOTIFYs dsp_dispatch when a batch or a campaign leaves 'active'. Entering it NOTIFYs the
-- same channel at commit with payload "+<org> <campaign>" ('+' never occurs in an id, so a
-- worker of 0015 takes it for an unknown organisation and ignores it; one payload per campaign,
-- which PostgreSQL folds to one notification per campaign per transaction however many batches
-- the statement touches). A worker whose admissions of that organisation all wait under other
-- campaigns re-proposes them once its claim brings the campaign's contacts
-- (dispatcher/worker/select.h, select_dispatch_notify()), so that they wait under it too:
-- before, a freed line woke none of them while the other campaigns were at their floors, and
-- the campaign waited for the slot wait (dispatcher/worker/README.md, *Stop, pause, resume*).
-- A campaign row's INSERT needs none: its contacts come with a batch.

CREATE FUNCTION dsp_dispatch_active_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'batches' THEN
        PERFORM pg_notify('dsp_dispatch', '+' || NEW.org_id || ' ' || NEW.campaign_id);
    ELSE
        PERFORM pg_notify('dsp_dispatch', '+' || NEW.org_id || ' ' || NEW.id);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER batches_dispatch_active AFTER UPDATE ON batches
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status = 'active')
    EXECUTE FUNCTION dsp_dispatch_active_notify();
CREATE TRIGGER batches_dispatch_insert AFTER INSERT ON batches
    FOR EACH ROW WHEN (NEW.status = 'active')
    EXECUTE FUNCTION dsp_dispatch_active_notify();
CREATE TRIGGER campaigns_dispatch_active AFTER UPDATE ON campaigns
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status = 'active')
    EXECUTE FUNCTION dsp_dispatch_active_notify();
