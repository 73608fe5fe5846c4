-- Operator sessions ended by logout before they expire. A session is a
-- signed cookie every replica accepts (internal/auth), so ending one on the
-- server means telling every replica: each checks this table. A row is kept
-- only until the session would have expired anyway; logging out prunes the
-- rows past that, so the table holds at most the logouts of one session
-- lifetime (12 h).
CREATE TABLE session_revocations (
    -- The session's nonce (random, 16 bytes, base64url).
    session_id text PRIMARY KEY,
    -- When the session would have expired: the row is useless after it.
    expires_at timestamptz NOT NULL
);
