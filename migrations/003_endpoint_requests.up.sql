-- Idempotent CreateEndpoint: a client-chosen request_id, remembered per owner
-- for 24 hours, so a retried create returns the endpoint the first one made
-- instead of a twin. params_hash fingerprints the request's parameters (a
-- reused request_id with others is refused); secret_hash fingerprints the
-- secret the first reply showed, so a retry shows it again only while it is
-- still the endpoint's current secret. Neither holds anything secret: both
-- are SHA-256 of values with 256 bits of entropy or of the request.
CREATE TABLE webhook_endpoint_requests (
    owner_id    text        NOT NULL,
    request_id  text        NOT NULL,
    params_hash bytea       NOT NULL,
    -- NULL only inside the creating transaction.
    endpoint_id uuid        REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    secret_hash bytea,
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner_id, request_id)
);

CREATE INDEX webhook_endpoint_requests_endpoint_idx ON webhook_endpoint_requests (endpoint_id);
