-- 0015_batch_control: batch stop / pause / resume reach every worker at once, and the list
-- of an organisation's batches reads one index (issue 10 item 4; SPEC R6).
-- Applied by `dispatcher migrate` inside one transaction: no BEGIN/COMMIT in migration files.
--
-- A batch or a campaign leaving 'active' (paused, stopped, completed) NOTIFYs channel
-- dsp_dispatch at commit, payload "<org> <campaign> <batch>" for a batch and "<org> <campaign>"
-- for a campaign (ids are ^[A-Za-z0-9_-]{1,64}$: a space never occurs in one). Every worker
-- LISTENs (dispatcher/worker/select.h, select_dispatch_notify()) and hands its claimed contacts
-- of that batch or campaign back at once: 'held' when paused, 'cancelled' when stopped (the
-- hand-back reads the status). The claim never sees them again: a paused batch's pending
-- contacts are 'held' and a stopped one's 'cancelled' (the API's statement moves them in the
-- same transaction), and the call-row write refuses a contact whose batch or campaign is not
-- active (gate_pg.c). Resuming needs no kick: the held contacts go back to 'pending' and the
-- next demand scan (500 ms) finds them; 0004's contacts_refresh_held tells the refresher.
-- The row triggers fire only on a status change away from 'active' (the WHEN costs the claim
-- and lease UPDATEs of contacts nothing: they are on another table).

CREATE FUNCTION dsp_dispatch_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_TABLE_NAME = 'batches' THEN
        PERFORM pg_notify('dsp_dispatch', NEW.org_id || ' ' || NEW.campaign_id || ' ' || NEW.id);
    ELSE
        PERFORM pg_notify('dsp_dispatch', NEW.org_id || ' ' || NEW.id);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER batches_dispatch AFTER UPDATE ON batches
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status <> 'active')
    EXECUTE FUNCTION dsp_dispatch_notify();
CREATE TRIGGER campaigns_dispatch AFTER UPDATE ON campaigns
    FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status AND NEW.status <> 'active')
    EXECUTE FUNCTION dsp_dispatch_notify();

-- GET /v2/batches: newest first, keyset-paginated on (created_at, id) per organisation.
CREATE INDEX batches_org_list_idx ON batches (org_id, created_at DESC, id DESC);
