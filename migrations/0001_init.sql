-- 0001_init: the dispatcher's schema.
-- Applied by `dispatcher migrate` inside one transaction: no BEGIN/COMMIT in migration files.
-- Ids that the API shows (organisations, agents, campaigns, batches, api keys) are short text
-- ids with a type prefix; contacts are bigint (millions of rows, the hot index); calls are
-- uuid because a call id is also the slot id at every gate level and the provider's
-- Idempotency-Key (SPEC §2, D1).

CREATE FUNCTION dsp_new_id(prefix text) RETURNS text
LANGUAGE sql VOLATILE AS $$
    SELECT prefix || '_' || substr(replace(gen_random_uuid()::text, '-', ''), 1, 20)
$$;

-- One row: fleet-wide settings (SPEC C1 system level, C11 gate mode and epoch).
CREATE TABLE system_settings (
    id              boolean PRIMARY KEY DEFAULT true CHECK (id),
    global_limit    integer NOT NULL DEFAULT 1000 CHECK (global_limit BETWEEN 1 AND 1000000),
    gate_mode       text NOT NULL DEFAULT 'redis' CHECK (gate_mode IN ('redis', 'postgres')),
    gate_epoch      bigint NOT NULL DEFAULT 1 CHECK (gate_epoch > 0),
    limits_version  bigint NOT NULL DEFAULT 1,   -- C4: bumped whenever any limit changes
    updated_at      timestamptz NOT NULL DEFAULT now()
);
INSERT INTO system_settings DEFAULT VALUES;

-- Leases with fencing versions: the refresher (C5) and the reconciler (C11) are elected here.
-- A holder's version only grows; the gate keeps only floors stamped with a newer version.
CREATE TABLE leases (
    name        text PRIMARY KEY CHECK (name ~ '^[a-z][a-z_]{0,62}$'),  -- one row per elected job
    owner       text,
    version     bigint NOT NULL DEFAULT 0,
    lease_until timestamptz NOT NULL DEFAULT '-infinity'
);
INSERT INTO leases (name) VALUES ('refresher'), ('reconciler');

CREATE TABLE organisations (
    id                              text PRIMARY KEY DEFAULT dsp_new_id('org')
                                    CHECK (id ~ '^[A-Za-z0-9_-]{1,64}$'),
    name                            text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    org_limit                       integer NOT NULL DEFAULT 20 CHECK (org_limit BETWEEN 1 AND 100000),
    per_agent_limit                 integer CHECK (per_agent_limit BETWEEN 1 AND 100000), -- NULL: unset (C2)
    concurrency_management_enabled  boolean NOT NULL DEFAULT true,                         -- C3
    rate_default_per_minute         integer NOT NULL DEFAULT 1000 CHECK (rate_default_per_minute > 0),
    rate_calls_per_minute           integer NOT NULL DEFAULT 600 CHECK (rate_calls_per_minute > 0),
    rate_executions_per_minute      integer NOT NULL DEFAULT 600 CHECK (rate_executions_per_minute > 0),
    pending_ceiling                 integer NOT NULL DEFAULT 250000 CHECK (pending_ceiling >= 0),
    plan                            text NOT NULL DEFAULT 'free',
    rate_limit_tier                 text NOT NULL DEFAULT 'free',
    limits_version                  bigint NOT NULL DEFAULT 1,  -- C4: bumped on any limit change
    created_at                      timestamptz NOT NULL DEFAULT now(),
    updated_at                      timestamptz NOT NULL DEFAULT now()
);

-- Only the SHA-256 of a key is stored; key_preview is what /v2/user/me shows ("gat_...9f31").
CREATE TABLE api_keys (
    id          text PRIMARY KEY DEFAULT dsp_new_id('k') CHECK (id ~ '^[A-Za-z0-9_-]{1,64}$'),
    org_id      text NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    name        text NOT NULL DEFAULT '',
    key_hash    bytea NOT NULL UNIQUE CHECK (length(key_hash) = 32),
    key_preview text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at  timestamptz
);
CREATE INDEX api_keys_org_idx ON api_keys (org_id);

CREATE TABLE agents (
    id          text PRIMARY KEY DEFAULT dsp_new_id('agent') CHECK (id ~ '^[A-Za-z0-9_-]{1,64}$'),
    org_id      text NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    name        text NOT NULL DEFAULT '',
    from_number text CHECK (from_number ~ '^\+[1-9][0-9]{6,14}$'),
    created_at  timestamptz NOT NULL DEFAULT now(),
    UNIQUE (org_id, id)
);

CREATE TYPE campaign_status AS ENUM ('active', 'paused', 'stopped', 'completed');

-- A campaign is the unit of fair share (C5). max_concurrent_calls is a ceiling, never a
-- reservation (C7); NULL means no campaign ceiling. The retry policy of D5 lives here.
CREATE TABLE campaigns (
    id                   text PRIMARY KEY DEFAULT dsp_new_id('cmp') CHECK (id ~ '^[A-Za-z0-9_-]{1,64}$'),
    org_id               text NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    agent_id             text NOT NULL,
    name                 text NOT NULL DEFAULT '',
    status               campaign_status NOT NULL DEFAULT 'active',
    max_concurrent_calls integer CHECK (max_concurrent_calls BETWEEN 1 AND 100000),
    retry_max_attempts   integer NOT NULL DEFAULT 3 CHECK (retry_max_attempts BETWEEN 1 AND 20),
    retry_delay_seconds  integer NOT NULL DEFAULT 3600 CHECK (retry_delay_seconds BETWEEN 0 AND 604800),
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (org_id, agent_id) REFERENCES agents (org_id, id),
    UNIQUE (org_id, id)
);
CREATE INDEX campaigns_org_idx ON campaigns (org_id) WHERE status = 'active';

CREATE TYPE batch_status AS ENUM ('active', 'paused', 'stopped', 'completed');

CREATE TABLE batches (
    id             text PRIMARY KEY DEFAULT dsp_new_id('batch') CHECK (id ~ '^[A-Za-z0-9_-]{1,64}$'),
    org_id         text NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    campaign_id    text NOT NULL,
    name           text NOT NULL DEFAULT '',
    status         batch_status NOT NULL DEFAULT 'active',
    source         text NOT NULL DEFAULT 'json' CHECK (source IN ('json', 'csv')),
    total_contacts integer NOT NULL DEFAULT 0 CHECK (total_contacts >= 0),
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (org_id, campaign_id) REFERENCES campaigns (org_id, id),
    UNIQUE (org_id, id),
    UNIQUE (org_id, campaign_id, id)   -- lets contacts prove their denormalised campaign_id
);
CREATE INDEX batches_campaign_idx ON batches (campaign_id);

CREATE TYPE contact_state AS ENUM
    ('pending', 'claimed', 'dialing', 'live', 'done', 'failed', 'cancelled', 'held');

-- The queue. pending -> claimed (lease) -> dialing (call row written) -> live -> done/failed,
-- or back to pending (slot wait expired, lease lost without a call row, a retried outcome), or
-- cancelled (batch stopped), or held (batch paused: one UPDATE through contacts_batch_state_idx
-- moves its pending contacts to held and back, so the dialable index stays pending-only). next_attempt_at is the single scheduling input (SPEC §7).
-- attempts counts calls that reached an outcome (D5); tries counts re-sends and throttled
-- retries within one call (D2).
CREATE TABLE contacts (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    org_id          text NOT NULL,
    campaign_id     text NOT NULL,
    batch_id        text NOT NULL,
    phone           text NOT NULL CHECK (phone ~ '^\+[1-9][0-9]{6,14}$'),
    variables       jsonb,
    state           contact_state NOT NULL DEFAULT 'pending',
    attempts        integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
    tries           integer NOT NULL DEFAULT 0 CHECK (tries >= 0),
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    lease_owner     text,
    lease_token     bigint,
    lease_until     timestamptz,
    last_outcome    text,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (org_id, campaign_id, batch_id) REFERENCES batches (org_id, campaign_id, id)
        ON DELETE CASCADE,
    CHECK (state <> 'claimed' OR (lease_token IS NOT NULL AND lease_until IS NOT NULL))
);
-- "The next dialable contacts of campaign X": an index range scan on (campaign, due time),
-- pending rows only, so done contacts never cost the claim anything.
CREATE INDEX contacts_dialable_idx ON contacts (campaign_id, next_attempt_at, id)
    WHERE state = 'pending';
-- The lease sweeper: expired claims.
CREATE INDEX contacts_lease_idx ON contacts (lease_until) WHERE state = 'claimed';
-- Progress of a batch, pending backlog of an org (R6 ceiling).
CREATE INDEX contacts_batch_state_idx ON contacts (batch_id, state);
CREATE INDEX contacts_org_pending_idx ON contacts (org_id) WHERE state = 'pending';

CREATE TYPE call_state AS ENUM ('dialing', 'live', 'ended', 'unknown');

-- A call exists from the moment a dial is decided: this row is written (state dialing) before
-- the provider is asked, conditional on the gate epoch (C11) and the contact's lease token (D1).
-- Its id is the slot id at every level and the provider's Idempotency-Key. It holds its slots
-- while state is dialing, live or unknown.
CREATE TABLE calls (
    id               uuid PRIMARY KEY,
    org_id           text NOT NULL,
    campaign_id      text,               -- NULL: a direct dial (the org's direct pseudo-campaign)
    agent_id         text NOT NULL,
    contact_id       bigint REFERENCES contacts (id) ON DELETE SET NULL,  -- history outlives it
    attempt          integer NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    tries            integer NOT NULL DEFAULT 0 CHECK (tries >= 0),
    to_number        text NOT NULL CHECK (to_number ~ '^\+[1-9][0-9]{6,14}$'),
    from_number      text,
    state            call_state NOT NULL DEFAULT 'dialing',
    gate_mode        text NOT NULL CHECK (gate_mode IN ('redis', 'postgres')),
    gate_epoch       bigint NOT NULL,
    provider_call_id text,
    outcome          text CHECK (outcome IN ('completed', 'failed', 'no-answer', 'busy', 'canceled',
                                             'refused', 'swept')),
    outcome_reason   text,
    last_sequence    integer,
    created_at       timestamptz NOT NULL DEFAULT now(),
    answered_at      timestamptz,
    ended_at         timestamptz,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CHECK ((state = 'ended') = (ended_at IS NOT NULL))
);
-- Live calls per level (postgres gate mode, reconciler, maximum-duration sweep).
CREATE INDEX calls_live_org_idx ON calls (org_id, campaign_id, agent_id)
    WHERE state IN ('dialing', 'live', 'unknown');
CREATE INDEX calls_live_age_idx ON calls (created_at) WHERE state IN ('dialing', 'live', 'unknown');
CREATE INDEX calls_contact_idx ON calls (contact_id);
-- The backstop of D1/C9: a contact never has two live calls, whatever a fencing bug does.
CREATE UNIQUE INDEX calls_one_live_per_contact ON calls (contact_id)
    WHERE state IN ('dialing', 'live', 'unknown') AND contact_id IS NOT NULL;
CREATE UNIQUE INDEX calls_provider_idx ON calls (provider_call_id) WHERE provider_call_id IS NOT NULL;
-- Retention pruning (default 30 days, SPEC §7).
CREATE INDEX calls_ended_idx ON calls (ended_at) WHERE state = 'ended';

-- Provider events (R7, D0), deduplicated by (call, sequence). No foreign key: an event is
-- recorded even when its call row has already been pruned or it names an unknown call.
CREATE TABLE provider_events (
    call_id          uuid NOT NULL,
    sequence         integer NOT NULL CHECK (sequence >= 0),
    status           text NOT NULL CHECK (status IN ('ringing', 'answered', 'completed', 'failed',
                                                     'no-answer', 'busy', 'canceled')),
    provider_call_id text,
    occurred_at      timestamptz,
    received_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (call_id, sequence)
);
CREATE INDEX provider_events_received_idx ON provider_events (received_at);

-- The attempt ledger (D4): one row per provider request, whether it worked or not.
CREATE TABLE dial_attempts (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    call_id         uuid NOT NULL,
    contact_id      bigint,
    org_id          text NOT NULL,
    lane            text NOT NULL,
    attempt         integer NOT NULL,
    try             integer NOT NULL DEFAULT 0,
    status          integer,            -- HTTP status; NULL when no answer came
    class           text NOT NULL CHECK (class IN ('ok', 'refused', 'unknown', 'stop_lane', 'invalid')),
    reason          text,
    waited_ms       integer NOT NULL DEFAULT 0 CHECK (waited_ms >= 0),
    latency_ms      integer CHECK (latency_ms >= 0),
    idempotency_key uuid NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dial_attempts_call_idx ON dial_attempts (call_id);
CREATE INDEX dial_attempts_created_idx ON dial_attempts (created_at);

-- Floors installed by the refresher (C5), kept in PostgreSQL too for the postgres gate mode
-- (C11). One row per (org, campaign). The direct pseudo-campaign is campaign_id '' here and
-- NULL in calls (a direct dial has no campaign): join with coalesce(calls.campaign_id, '').
-- Real campaign ids can never be '' (their CHECK), so the two cannot collide.
CREATE TABLE fair_share_floors (
    org_id        text NOT NULL REFERENCES organisations (id) ON DELETE CASCADE,
    campaign_id   text NOT NULL,
    floor         integer NOT NULL CHECK (floor >= 0),
    deficit       double precision NOT NULL DEFAULT 0,
    fluid_share   double precision NOT NULL DEFAULT 0,
    version       bigint NOT NULL,      -- the refresher lease version that wrote it (fencing)
    computed_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (org_id, campaign_id)
);
