-- Custom headers sent on every delivery to an endpoint (a gateway's static
-- key, say). The values may be credentials, so they are sealed with the
-- master keyring like the signing secrets (headers_enc, NULL for none); only
-- the names are kept in plaintext, for the API to show.
ALTER TABLE webhook_endpoints
    ADD COLUMN header_names text[] NOT NULL DEFAULT '{}',
    ADD COLUMN headers_enc  bytea,
    ADD CONSTRAINT webhook_endpoints_headers_sealed
        CHECK ((cardinality(header_names) = 0) = (headers_enc IS NULL));
