-- An endpoint's name (for people; not unique) and the owner's labels, a flat
-- JSON object of string keys to string values ({"env": "prod"}), bounded by
-- the API (internal/endpoint/labels.go). ListEndpoints filters by labels with
-- containment (labels @> '{"env": "prod"}'), which this GIN index serves;
-- jsonb_path_ops indexes exactly what @> needs, at a fraction of the default
-- operator class's size.
ALTER TABLE webhook_endpoints
    ADD COLUMN name   text  NOT NULL DEFAULT '',
    ADD COLUMN labels jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(labels) = 'object');

CREATE INDEX webhook_endpoints_labels_idx ON webhook_endpoints USING gin (labels jsonb_path_ops);
