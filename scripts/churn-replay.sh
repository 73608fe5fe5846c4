#!/usr/bin/env bash
# Time-compressed replay of a soak's churn, to see where the dispatcher's
# tables and their indexes settle in bytes without running for hours: each
# step is one minute of a steady load (RATE deliveries/s, one event, one
# delivery job and one attempt each, over 100 owners and endpoints) followed by
# what retention does in that minute (events and attempts older than
# RETENTION_MIN minutes deleted, finished jobs likewise, as River's cleaner
# does) and a VACUUM of each table, as autovacuum does about once a minute
# under such a load. The job row is written as the direct hand-off writes it
# (inserted scheduled, then completed). Sizes are printed every 5 steps.
#
# It approximates the load (no concurrency, one update per job where River
# makes two or three) but not the indexes: the same migrations, so the same
# indexes, as the dispatcher. docs/benchmarks.md ("Soak") has what it showed.
#
#   DATABASE_URL=postgres://postgres@127.0.0.1:5433/postgres?sslmode=disable \
#     scripts/churn-replay.sh            # 40 steps at 100/s, retention 5 min
#   STEPS=60 RATE=300 scripts/churn-replay.sh
#
# It migrates a schema of its own (churn_replay, dropped at the end) with
# `go run ./cmd/dispatcher migrate`. Bounded: STEPS steps, each of RATE*60 rows.
set -euo pipefail

: "${DATABASE_URL:?set DATABASE_URL}"
STEPS=${STEPS:-40}
RATE=${RATE:-100}
RETENTION_MIN=${RETENTION_MIN:-5}
SCHEMA=churn_replay
N=$((RATE * 60))

psql_() { psql "$DATABASE_URL" -qAt -v ON_ERROR_STOP=1 "$@"; }
trap 'psql_ -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" >/dev/null 2>&1 || true' EXIT

DISPATCHER_SCHEMA=$SCHEMA go run ./cmd/dispatcher migrate >/dev/null

for k in $(seq 0 "$STEPS"); do
	psql_ <<SQL
SET search_path = $SCHEMA;
CREATE TEMP TABLE step AS
SELECT i, timestamptz '2026-01-01' + make_interval(mins => $k) + (i % $N) * (interval '60 s' / $N) AS at
  FROM generate_series($k * $N, $k * $N + $N - 1) i;
INSERT INTO events (id, owner_id, type, subject, occurred_at, data, source, created_at)
SELECT 'replay-' || i, 'owner-' || (i % 100), 'booking.created', 'bench://item/' || i, at,
       '{"booking_id":"bk_123","starts_at":"2026-01-01T10:00:00Z","guest_count":2}', 'grpc', at
  FROM step;
INSERT INTO river_job (state, args, kind, queue, max_attempts, created_at, scheduled_at, unique_key, unique_states)
SELECT 'scheduled', jsonb_build_object('endpoint_id', md5('ep' || (i % 100))::uuid::text, 'event_id', 'replay-' || i),
       'webhook.deliver', 'deliver_0', 18, at, at + interval '10 s', sha256(('webhook.deliver&' || i)::bytea), B'11110101'
  FROM step;
UPDATE river_job SET state = 'completed', attempt = 1, attempted_at = created_at + interval '5 ms',
       finalized_at = created_at + interval '20 ms', attempted_by = '{replay}'
 WHERE state = 'scheduled';
INSERT INTO delivery_attempts (delivery_id, attempt, owner_id, endpoint_id, event_id, started_at, duration_us, outcome, http_status, response_body, error)
SELECT i, 1, 'owner-' || (i % 100), md5('ep' || (i % 100))::uuid, 'replay-' || i, at, 900, 'success', 200, '', ''
  FROM step;
DELETE FROM events WHERE created_at < timestamptz '2026-01-01' + make_interval(mins => $k - $RETENTION_MIN);
DELETE FROM delivery_attempts WHERE started_at < timestamptz '2026-01-01' + make_interval(mins => $k - $RETENTION_MIN);
DELETE FROM river_job WHERE state = 'completed' AND finalized_at < timestamptz '2026-01-01' + make_interval(mins => $k - $RETENTION_MIN);
SQL
	psql_ -c "VACUUM $SCHEMA.events" -c "VACUUM $SCHEMA.river_job" -c "VACUUM $SCHEMA.delivery_attempts"
	if ((k % 5 == 0)); then
		echo "step $k (minute $k): MB, every relation of 0.1 MB or more:"
		psql_ -c "SELECT '  ' || c.relname || ' ' || round(pg_relation_size(c.oid) / 1048576.0, 2)
		              FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		             WHERE n.nspname = '$SCHEMA' AND c.relkind IN ('r', 'i') AND pg_relation_size(c.oid) >= 100000
		             ORDER BY c.relname"
	fi
done
