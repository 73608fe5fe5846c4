-- The dispatcher's own tables. River's tables live in the same schema and are
-- created by rivermigrate (see internal/database).

-- events holds every event that may leave: the thin event plus its owner.
-- The primary key is the event id, which makes ingest idempotent.
CREATE TABLE events (
    id          text        PRIMARY KEY,
    owner_id    text        NOT NULL,
    type        text        NOT NULL,
    subject     text        NOT NULL,
    occurred_at timestamptz NOT NULL,
    data        jsonb       NOT NULL,
    source      text        NOT NULL DEFAULT 'grpc' CHECK (source IN ('grpc', 'outbox', 'test')),
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- Retention prunes by age.
CREATE INDEX events_created_at_idx ON events (created_at);

-- webhook_endpoints: one receiver of one owner.
CREATE TABLE webhook_endpoints (
    id                         uuid        PRIMARY KEY,
    owner_id                   text        NOT NULL,
    url                        text        NOT NULL,
    description                text        NOT NULL DEFAULT '',
    event_types                text[]      NOT NULL CHECK (cardinality(event_types) > 0),
    -- The signing secret, sealed with the master keyring; never plaintext.
    secret_enc                 bytea       NOT NULL,
    -- The previous secret during a rotation grace period (deliveries carry both signatures).
    previous_secret_enc        bytea,
    previous_secret_expires_at timestamptz,
    embed_id                   text,
    enabled                    boolean     NOT NULL DEFAULT true,
    disabled_reason            text,
    failing_since              timestamptz,
    -- The delivery lease: one delivery per endpoint at a time, cluster-wide.
    busy_until                 timestamptz,
    lease_token                uuid,
    created_at                 timestamptz NOT NULL DEFAULT now(),
    updated_at                 timestamptz NOT NULL DEFAULT now()
);

-- Fanout reads an owner's enabled endpoints; the admin UI lists an owner's endpoints.
CREATE INDEX webhook_endpoints_owner_idx ON webhook_endpoints (owner_id, created_at, id);

-- Deliveries are River jobs; ListDeliveries and Redeliver find an endpoint's
-- jobs by this expression.
CREATE INDEX river_job_webhook_deliver_endpoint_idx
    ON river_job ((args ->> 'endpoint_id'), id)
    WHERE kind = 'webhook.deliver';
