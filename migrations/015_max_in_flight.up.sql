-- Per-endpoint concurrency (internal/delivery, docs/design.md): how many
-- deliveries to the endpoint may be in flight at once, cluster-wide. 1, the
-- default, is one at a time, as before this column existed. The process
-- holding the endpoint's lease (busy_until, lease_token) runs up to this many
-- under it; the lease stays one per endpoint.
ALTER TABLE webhook_endpoints
    ADD COLUMN max_in_flight integer NOT NULL DEFAULT 1
        CONSTRAINT webhook_endpoints_max_in_flight_range CHECK (max_in_flight BETWEEN 1 AND 64),
    -- An ordered endpoint's deliveries go one after the other: its head
    -- holds the ones behind it, so more than one in flight means nothing.
    ADD CONSTRAINT webhook_endpoints_ordered_one_in_flight CHECK (NOT ordered OR max_in_flight = 1);
