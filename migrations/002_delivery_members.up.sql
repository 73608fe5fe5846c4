-- delivery_members: the dispatcher processes working this schema's delivery
-- queues. Each heartbeats its row; all of them split the deliver partitions
-- (deliver_0 … deliver_11) among the live rows (internal/partition).
CREATE TABLE delivery_members (
    id           text        PRIMARY KEY,
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);
