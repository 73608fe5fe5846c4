-- Endpoint filters (internal/filter, docs/events.md "Filters"): a condition
-- on the event's subject and data that an endpoint's deliveries must meet,
-- in canonical JSON (compact, keys sorted; at most 4096 bytes, checked by
-- the API). NULL: no filter. text rather than jsonb: the fanout reads it with
-- every endpoint row and parses it itself (once per distinct filter, cached
-- by its text), so Postgres only hands the bytes over, without a jsonb-to-text
-- conversion per row per event.
ALTER TABLE webhook_endpoints
    ADD COLUMN filter text
        CONSTRAINT webhook_endpoints_filter_size CHECK (octet_length(filter) BETWEEN 2 AND 4096);

-- Events an endpoint's filter kept from it, per minute and hour bucket beside
-- its attempts (internal/attempt's recorder writes both).
ALTER TABLE endpoint_stats
    ADD COLUMN filtered bigint NOT NULL DEFAULT 0;
