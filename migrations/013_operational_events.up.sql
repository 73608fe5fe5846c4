-- operational_outbox: the dispatcher's own outbox, for its operational events
-- (endpoint.failing, endpoint.disabled, endpoint.recovered). The deliver
-- worker's settle statement, the one that records an endpoint's health
-- transition, inserts the event's row here in that same statement, so a
-- transition and its event commit together or not at all; a relay inside the
-- dispatcher (internal/ingest, the same code as the main app's outbox relay)
-- stores and fans it out like any published event and deletes the row. The
-- columns are the outbox contract's (migrations/outbox), so the relay reads
-- both alike.
CREATE TABLE operational_outbox (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id    text        NOT NULL,
    owner_id    text        NOT NULL,
    type        text        NOT NULL,
    subject     text        NOT NULL,
    occurred_at timestamptz NOT NULL DEFAULT now(),
    data        jsonb       NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    relayed_at  timestamptz,
    error       text
);

CREATE INDEX operational_outbox_pending_idx
    ON operational_outbox (id) WHERE relayed_at IS NULL AND error IS NULL;

-- Operational events are stored with source 'operational'. NOT VALID: the
-- rows already there passed the narrower check, and validating would scan
-- every event under an exclusive lock; new rows are checked all the same.
ALTER TABLE events DROP CONSTRAINT events_source_check;
ALTER TABLE events ADD CONSTRAINT events_source_check
    CHECK (source IN ('grpc', 'outbox', 'test', 'operational')) NOT VALID;
