-- The portal (internal/portal), second round.
--
-- A session knows whose portal it is and the way back to the application
-- (display_name, return_url), whether its link opens only after a click on
-- a page of the portal's own (confirm: a link meant for email or chat, which
-- link previewers must not spend), its branding overrides, and who minted it
-- when an operator opened an owner's portal from the console (read-only).
-- Signing out ends a session (ended_at) rather than deleting it, so that the
-- page a spent link or an ended session leads to can still offer the way
-- back; rows go a day after they expire.
ALTER TABLE portal_sessions
    ADD COLUMN display_name text NOT NULL DEFAULT '',
    ADD COLUMN return_url   text NOT NULL DEFAULT '',
    ADD COLUMN confirm      boolean NOT NULL DEFAULT false,
    ADD COLUMN branding     jsonb NOT NULL DEFAULT '{}',
    ADD COLUMN minted_by    text NOT NULL DEFAULT '',
    ADD COLUMN ended_at     timestamptz;

-- A secret the portal has made (an endpoint created, a secret rotated) and
-- shows once, on the page its form's redirect leads to. The form carries a
-- one-time request id: a resubmitted form finds its row and repeats
-- nothing. The secret is sealed with the master keyring, bound to the
-- session and the request id, and erased when the page shows it or a few
-- minutes after it was made, whichever comes first; the row itself stays
-- for the session's life, so that a reload says the secret was shown.
CREATE TABLE portal_reveals (
    session_id          bigint NOT NULL REFERENCES portal_sessions (id) ON DELETE CASCADE,
    request_id          uuid NOT NULL,
    kind                text NOT NULL CHECK (kind IN ('created', 'rotated')),
    endpoint_id         uuid NOT NULL,
    secret_enc          bytea,
    public_key          text NOT NULL DEFAULT '',
    previous_expires_at timestamptz,
    created_at          timestamptz NOT NULL DEFAULT now(),
    shown_at            timestamptz,
    PRIMARY KEY (session_id, request_id)
);

-- The sweep that erases secrets never shown goes through it.
CREATE INDEX portal_reveals_unshown_idx ON portal_reveals (created_at) WHERE secret_enc IS NOT NULL;
