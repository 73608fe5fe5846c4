-- The outbox contract: the main application applies this DDL to its own
-- database (the dispatcher's relay reads it through DISPATCHER_OUTBOX_DATABASE_URL).
-- Write rows inside the same transaction as the change they describe; the
-- Go helper github.com/standmeet/webhook-dispatcher/pkg/outbox does it for you.
--
-- The relay claims rows with FOR UPDATE SKIP LOCKED (never a cursor), copies
-- them into the dispatcher, then marks them relayed (or deletes them). A row
-- that can never be valid is marked with its error and skipped.
CREATE TABLE IF NOT EXISTS webhook_outbox (
    id          bigserial   PRIMARY KEY,
    event_id    text        NOT NULL,
    owner_id    text        NOT NULL,
    type        text        NOT NULL,
    subject     text        NOT NULL,
    occurred_at timestamptz NOT NULL DEFAULT now(),
    data        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at  timestamptz NOT NULL DEFAULT now(),
    relayed_at  timestamptz,
    error       text
);

-- The relay claims unrelayed, unpoisoned rows in id order.
CREATE INDEX IF NOT EXISTS webhook_outbox_pending_idx
    ON webhook_outbox (id) WHERE relayed_at IS NULL AND error IS NULL;

-- Wake the relay at commit instead of waiting for its poll.
CREATE OR REPLACE FUNCTION webhook_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('webhook_outbox', '');
    RETURN NULL;
END;
$$;

DROP TRIGGER IF EXISTS webhook_outbox_notify ON webhook_outbox;
CREATE TRIGGER webhook_outbox_notify
    AFTER INSERT ON webhook_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION webhook_outbox_notify();
