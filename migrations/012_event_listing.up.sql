-- Admin reads of events (ListEvents, GetEvent).
--
-- An owner's events newest first, the order ListEvents pages in (keyset on
-- occurred_at, id): a page is one index range scan of page_size rows, however
-- many events the table holds. The subject-prefix and glob filters are
-- checked on the rows the scan reads.
CREATE INDEX IF NOT EXISTS events_owner_occurred_idx ON events (owner_id, occurred_at DESC, id DESC);

-- An exact event type: the same order within (owner, type), so a rare type
-- among millions of events is a short range scan too.
CREATE INDEX IF NOT EXISTS events_owner_type_occurred_idx ON events (owner_id, type, occurred_at DESC, id DESC);

-- GetEvent lists the event's deliveries across endpoints. Like the endpoint
-- index of 001, partial on the deliver kind.
CREATE INDEX IF NOT EXISTS river_job_webhook_deliver_event_idx
    ON river_job ((args ->> 'event_id'))
    WHERE kind = 'webhook.deliver';
