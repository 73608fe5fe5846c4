-- Portal sessions (internal/portal): CreatePortalSession stores a one-time
-- link here, only as the SHA-256 of its token; opening the link spends it
-- (opened_at) and stores the SHA-256 of the browser session's cookie. Both
-- end at expires_at. A stolen copy of this table opens nothing.
CREATE TABLE portal_sessions (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    link_hash       bytea NOT NULL UNIQUE,
    session_hash    bytea UNIQUE,
    owner_id        text NOT NULL,
    access          text NOT NULL CHECK (access IN ('read', 'manage')),
    allowed_origins text[] NOT NULL DEFAULT '{}',
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL,
    opened_at       timestamptz,
    CHECK ((opened_at IS NULL) = (session_hash IS NULL))
);

-- The prune at each new session deletes the expired ones through it.
CREATE INDEX portal_sessions_expires_idx ON portal_sessions (expires_at);
