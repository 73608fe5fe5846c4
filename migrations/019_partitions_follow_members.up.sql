-- Delivery partitions follow the cluster (internal/partition): every live
-- member holds a slot, slot p works partition deliver_<p>, and there are as
-- many active partitions as slots in use, so a 13th process delivers like the
-- first. A member keeps its slot while it lives, and a crashed member's slot
-- waits a moment for its replacement, so processes coming and going move only
-- what must move.
ALTER TABLE delivery_members
    -- The member's slot, as it computed it at its last heartbeat.
    ADD COLUMN slot integer,
    -- The application_name of the member's database sessions: once none is
    -- left, the process is gone (SIGKILL, OOM), and the others need not wait
    -- for its heartbeat to expire.
    ADD COLUMN backend text,
    -- When another member gave back the jobs this one was running when it
    -- died (NULL while it lives).
    ADD COLUMN rescued_at timestamptz;

-- The most partitions that have taken new deliveries: each is worked while
-- it may hold jobs, whatever the cluster shrinks to. Never below twelve, the
-- fixed count before partitions followed the cluster (deliver_0 … deliver_11).
CREATE TABLE delivery_partitions (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    partitions integer NOT NULL CHECK (partitions > 0)
);
