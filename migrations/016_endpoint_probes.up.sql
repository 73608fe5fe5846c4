-- Recovery probing (internal/delivery/probe.go, docs/design.md): while an
-- endpoint is failing, its held deliveries (new ones behind the failing
-- cool-down, failed ones waiting a retry step) are not all tried at their
-- own times; one of them, sent alone, probes the receiver on a short
-- backoff, and the first success releases the rest at once.
ALTER TABLE webhook_endpoints
    -- When the next probe is due while failing_since is set; when the
    -- endpoint's held deliveries are to be released while it is NULL (a
    -- success or an operator cleared the failing state). NULL: nothing to do.
    ADD COLUMN probe_at timestamptz,
    -- Probes sent since the endpoint began failing: the backoff's exponent.
    ADD COLUMN probes   integer NOT NULL DEFAULT 0;

CREATE INDEX webhook_endpoints_probe_idx ON webhook_endpoints (probe_at) WHERE probe_at IS NOT NULL;

-- An endpoint's waiting deliveries, oldest first: what a probe picks from
-- and what a recovery releases. Deliveries handed to a process directly
-- (scheduled only as a fallback, noted "direct") are in flight, not
-- waiting, so the index holds nothing for the common path.
CREATE INDEX river_job_webhook_deliver_waiting_idx
    ON river_job ((args ->> 'endpoint_id'), id)
    WHERE kind = 'webhook.deliver' AND state IN ('retryable', 'scheduled')
      AND NOT (metadata @> '{"output": {"snooze_reason": "direct"}}');
