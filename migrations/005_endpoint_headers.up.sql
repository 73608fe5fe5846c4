-- Custom headers sent on every delivery to an endpoint (a gateway's static
-- key, say). The values may be credentials, so they are sealed with the
-- master keyring like the signing secrets (headers_enc, NULL for none); only
-- the names are kept in plaintext, for the API to show.
ALTER TABLE webhook_endpoints
    ADD COLUMN header_names text[] NOT NULL DEFAULT '{}',
    ADD COLUMN headers_enc  bytea,
    ADD CONSTRAINT webhook_endpoints_headers_sealed
        CHECK ((cardinality(header_names) = 0) = (headers_enc IS NULL));

-- Signing with a key pair (Standard Webhooks v1a, Ed25519) instead of a shared
-- secret. For 'v1a' endpoints secret_enc and previous_secret_enc hold the
-- sealed 32-byte Ed25519 seed (same sealing, same associated data), and the
-- public keys are kept in plaintext ("whpk_…"): the owner may read them at any
-- time and hand them to receivers.
ALTER TABLE webhook_endpoints
    ADD COLUMN signing_scheme      text NOT NULL DEFAULT 'v1' CHECK (signing_scheme IN ('v1', 'v1a')),
    ADD COLUMN public_key          text,
    ADD COLUMN previous_public_key text,
    ADD CONSTRAINT webhook_endpoints_public_key_scheme
        CHECK ((signing_scheme = 'v1a') = (public_key IS NOT NULL));
