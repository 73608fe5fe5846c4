-- delivery_attempts: one row per delivery attempt that sent a request (or
-- tried to: a refused destination counts), written in batches by the deliver
-- worker's attempt recorder (internal/attempt), never one commit per attempt.
-- delivery_id is the River job id; owner_id is copied from the endpoint so the
-- history stays owner-scoped after the job row is cleaned up. No foreign
-- keys: the recorder must not fail a batch because an endpoint was deleted a
-- moment ago; retention prunes rows by started_at.
CREATE TABLE delivery_attempts (
    id            bigint      GENERATED ALWAYS AS IDENTITY,
    delivery_id   bigint      NOT NULL,
    attempt       integer     NOT NULL,
    owner_id      text        NOT NULL,
    endpoint_id   uuid        NOT NULL,
    event_id      text        NOT NULL,
    started_at    timestamptz NOT NULL,
    duration_us   bigint      NOT NULL,
    -- success, http_4xx, http_5xx, http_other, timeout, connection, blocked, retry_after
    outcome       text        NOT NULL,
    -- 0: no response.
    http_status   integer     NOT NULL,
    -- The first bytes of the response body as text (invalid UTF-8 and NUL
    -- replaced), never interpreted; '' when recording bodies is off.
    response_body text        NOT NULL,
    error         text        NOT NULL,
    -- Set for a snooze: why (retry_after, throttled) and until when.
    snooze_reason text,
    snoozed_until timestamptz
);

-- ListAttempts reads one delivery's attempts, newest first.
CREATE INDEX delivery_attempts_delivery_idx ON delivery_attempts (delivery_id, id);
-- Retention deletes by age; rows arrive in time order, so a BRIN index is
-- enough and costs next to nothing per insert.
CREATE INDEX delivery_attempts_started_at_idx ON delivery_attempts USING brin (started_at);

-- endpoint_stats: per endpoint, a rollup of its attempts in buckets of span
-- seconds (60: minutes, kept two hours, for the last hour; 3600: hours, kept
-- eight days, for the last day and week), maintained by the same statement
-- that records a batch of attempts. lat_N counts attempts whose duration fell
-- in the Nth latency bucket (bounds in internal/attempt), from which the
-- percentiles are estimated. Updated in place, so leave room for HOT updates.
CREATE TABLE endpoint_stats (
    endpoint_id     uuid        NOT NULL,
    span            integer     NOT NULL,
    bucket          timestamptz NOT NULL,
    attempts        bigint      NOT NULL,
    successes       bigint      NOT NULL,
    http_4xx        bigint      NOT NULL,
    http_5xx        bigint      NOT NULL,
    http_other      bigint      NOT NULL,
    timeouts        bigint      NOT NULL,
    connection      bigint      NOT NULL,
    blocked         bigint      NOT NULL,
    retry_after     bigint      NOT NULL,
    lat_0  bigint NOT NULL, lat_1  bigint NOT NULL, lat_2  bigint NOT NULL, lat_3  bigint NOT NULL,
    lat_4  bigint NOT NULL, lat_5  bigint NOT NULL, lat_6  bigint NOT NULL, lat_7  bigint NOT NULL,
    lat_8  bigint NOT NULL, lat_9  bigint NOT NULL, lat_10 bigint NOT NULL, lat_11 bigint NOT NULL,
    lat_12 bigint NOT NULL, lat_13 bigint NOT NULL,
    PRIMARY KEY (endpoint_id, span, bucket)
) WITH (fillfactor = 70);
