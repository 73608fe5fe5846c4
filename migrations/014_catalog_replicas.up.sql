-- catalog_replicas: which event catalog each running dispatcher process
-- uses. Every process writes its own row (the catalog's digest) every few
-- seconds and reads the live rows: two catalogs at once means replicas decide
-- the same event differently (one delivers a type the other drops), which a
-- rolling update of the catalog shows for a moment and a mistake shows for
-- good. Reported by the metric dispatcher_catalog_replica_catalogs and a log
-- line; nothing else depends on it.
CREATE TABLE catalog_replicas (
    replica     text        PRIMARY KEY,
    digest      text        NOT NULL,
    source      text        NOT NULL,
    types       integer     NOT NULL,
    seen_at     timestamptz NOT NULL DEFAULT now()
);
