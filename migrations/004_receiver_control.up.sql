-- Receivers in control of their traffic (internal/delivery, docs/design.md):
-- endpoint-wide pauses, per-endpoint rate limits and ordered (FIFO) endpoints.

ALTER TABLE webhook_endpoints
    -- While in the future, nothing is sent to the endpoint: the receiver said
    -- Retry-After (or answered 429 several times in a row). Its queued
    -- deliveries are rescheduled to this time, spending no attempts.
    ADD COLUMN paused_until   timestamptz,
    ADD COLUMN pause_reason   text,
    -- At most this many requests per second, spaced evenly; NULL: no limit.
    ADD COLUMN max_per_second integer CHECK (max_per_second > 0),
    -- Deliveries in ingest order (events.seq), one after the other.
    ADD COLUMN ordered        boolean NOT NULL DEFAULT false;

-- The ingest sequence: the order in which events were stored, the order key
-- of ordered endpoints. Existing events are numbered in no particular order.
ALTER TABLE events ADD COLUMN seq bigint GENERATED ALWAYS AS IDENTITY;

-- The head of an ordered endpoint's queue: its live delivery with the lowest
-- seq. Only deliveries to ordered endpoints carry args.seq, so the index
-- holds nothing for the others and costs their deliveries nothing.
CREATE INDEX river_job_webhook_deliver_ordered_idx
    ON river_job ((args ->> 'endpoint_id'), ((args ->> 'seq')::bigint))
    WHERE kind = 'webhook.deliver' AND args ? 'seq'
      AND state IN ('available', 'pending', 'retryable', 'running', 'scheduled');
