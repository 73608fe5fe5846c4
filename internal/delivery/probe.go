package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// Recovery probing. While an endpoint is failing (after its first
// failingHoldAfter), its receiver hears probes only: every other delivery
// to it is held, without a request and without spending an attempt
// (failing.go), new ones behind the failing cool-down first (fanout), and
// waits for the endpoint, not for its own clock. Each process looks every probeLook for failing endpoints whose
// probe is due (probe_at) and makes one of their held deliveries available
// at once, with the endpoint's probe slot (job.ProbeSlotKey): the probe. It
// is a real delivery, and the only one that may send.
//
// When probes go. The first is due probeFirst (15 s) after the first
// failure (the delivery that failed is held at its first retry like the
// others). Then each probe is due
// probeFirst × 2^probes after the one before, capped at probeEvery, whether
// it has answered or not; and any failed request to the endpoint (the
// probe itself, a delivery that was already in flight) pushes the next
// probe to at least probeFirst × 2^probes, at most probeEvery, after its
// start (settleSQL). So a failing receiver hears one request per
// probeEvery, at most, whatever the event rate and however long its
// requests hang: at most 3600 s / probeEvery = 240 an hour (when its
// requests hang until the 10 s timeout, each hangs two thirds of the time:
// the price of hearing a returning receiver soon). A receiver that comes
// back after any outage gets its next request, and with it the release of
// its backlog, within probeEvery plus a look.
//
// The first success (a probe's or any other delivery's) clears failing_since
// in the settle statement, which also sets probe_at to now: the endpoint's
// held deliveries are due for release. The next look releases them, in order
// (ordered endpoints: by seq; the ordered gate still sends one at a time),
// paced by what the endpoint can take: max_per_second if set, else
// releasePerSlot per second for each of its max_in_flight slots. So a
// backlog does not fill every worker at once. Both the probe schedule and
// the release are in the endpoint's row, so they survive a crash and any
// process may run them (FOR NO KEY UPDATE SKIP LOCKED picks each endpoint
// once per look). An operator who clears an endpoint's failing state
// (UpdateEndpoint enabled) releases its held deliveries the same way.
//
// What a probe costs the delivery it carries: an attempt in its history,
// but not its place. Its max_attempts grows by one, the time it was due is
// recorded as probe_due in its metadata, and if the probe fails the delivery
// waits for that time (nextRetry), not for a retry step of its own; probes
// do not count as steps of the schedule (job.ProbeMark: the River attempt it
// runs as is recorded too, so that what people see counts scheduled
// attempts and probes apart). So a probe is one request, never followed by
// its delivery's 5-s retry, and a delivery spends none of its 18 scheduled
// attempts while its endpoint fails: it ends, if the receiver never comes
// back, with its retry window (5.3 days) or with the endpoint, disabled
// after 5 days of continuous failure. A probe picks, among the endpoint's
// oldest waiting deliveries (probePool), one whose hold ends within
// probeOnTime, else the one that has spent the fewest attempts, so a long
// outage spreads its probes over them; an ordered endpoint's probe is
// always its head. A paused endpoint is not probed: the receiver said when
// (its probe then is the pause's own, job.PauseProbeGap).
const (
	// probeLook is how often a process looks for due probes and releases.
	probeLook = time.Second
	// probeFirst is the first probe's delay after the first failure; each
	// further probe waits twice as long as the one before, up to
	// probeEvery. It is probeEvery: a failing receiver hears one request
	// per probeEvery from its first failure on.
	probeFirst = probeEvery
	// probeEvery is the longest wait between two probes of a failing
	// endpoint, and the least time from the start of a failed request to
	// it to the next: how late, at most, a receiver that is back hears of
	// it (plus a look and River's fetch), whatever the outage's length.
	probeEvery = job.ProbeEvery
	// probeOnTime: a probe prefers a waiting delivery whose hold ends
	// within this (it would look again soon anyway, and the probe saves it
	// that look).
	probeOnTime = 30 * time.Second
	// probeEndpoints bounds the endpoints one look probes or releases.
	probeEndpoints = 100
	// probePool is how many of an endpoint's oldest waiting deliveries a
	// probe chooses from.
	probePool = 50
	// releaseBatch bounds the held deliveries one look releases per
	// endpoint; the rest follow at the next look after those are due.
	releaseBatch = 1000
	// releasePerSlot paces a release to an endpoint without max_per_second:
	// this many deliveries a second for each of its max_in_flight slots, what
	// a receiver answering in 20 ms takes.
	releasePerSlot = 50
	// releaseRechecks: after a release, the endpoint is looked at again
	// this many times, releaseRecheck after it and then twice as long after
	// each look (3, 6, 12, 24 and 48 s: 93 s in all). A delivery held while
	// the success that ended the failing state was in flight has its hold
	// written after the release ran: by River's completer, in a batch, which
	// tries for about 7 s while the database is away; by a direct run's
	// outcome writer, which tries until the job's hand-off hold ends (1 min
	// by default); or by a delivery that read the endpoint as failing just
	// before the success. A recheck releases it too; what even the last
	// one misses waits for its hold to end (at most failingHoldMax).
	releaseRechecks = 5
	releaseRecheck  = 3 * time.Second
)

// notDirect is the predicate that leaves out deliveries handed to a process
// directly (in flight, scheduled only as a fallback); it is the partial
// index river_job_webhook_deliver_waiting_idx's, spelled the same so the
// planner uses it.
const notDirect = `NOT (j.metadata @> '{"output": {"snooze_reason": "direct"}}')`

// probeSQL sends one probe to each of up to $1 failing endpoints whose
// probe is due, and schedules their next. $2: probePool; $3: probeFirst and
// $4: probeEvery, in seconds; $5: probeOnTime, in seconds.
//
// The probed delivery is, among the endpoint's $2 oldest waiting ones, one
// whose hold ends within $5 (it would look again soon anyway), else the one
// with the fewest attempts. It is marked as a probe (job.ProbeMark: one more
// attempt, its due time kept) and given the endpoint's probe slot
// (job.ProbeSlotKey: the next probe's time, which is also the endpoint's new
// probe_at), without which a delivery to a failing endpoint is held
// (failing.go).
var probeSQL = `
WITH due AS (
    SELECT id, ordered, now() + ` + probeGapSQL("probes + 1", "$3", "$4") + ` AS next_at
      FROM webhook_endpoints
     WHERE probe_at <= now() AND failing_since IS NOT NULL AND enabled
       AND (paused_until IS NULL OR paused_until <= now())
     ORDER BY probe_at
     LIMIT $1
       FOR NO KEY UPDATE SKIP LOCKED
),
pick AS (
    SELECT d.id AS endpoint_id, d.next_at, p.id AS job_id
      FROM due d CROSS JOIN LATERAL (
          SELECT w.id
            FROM (SELECT j.id, j.attempt, j.scheduled_at
                    FROM river_job j
                   WHERE j.kind = 'webhook.deliver' AND j.args->>'endpoint_id' = d.id::text
                     AND j.state IN ('retryable', 'scheduled') AND ` + notDirect + `
                   ORDER BY j.id
                   LIMIT $2) w
           ORDER BY w.scheduled_at <= now() + make_interval(secs => $5) DESC, w.attempt, w.id
           LIMIT 1) p
     WHERE NOT d.ordered
    UNION ALL
    SELECT d.id, d.next_at, h.id
      FROM due d CROSS JOIN LATERAL (
          SELECT j.id, j.state
            FROM river_job j
           WHERE j.kind = 'webhook.deliver' AND j.args ? 'seq' AND j.args->>'endpoint_id' = d.id::text
             AND j.state IN ('available', 'pending', 'retryable', 'running', 'scheduled')
           ORDER BY (j.args->>'seq')::bigint
           LIMIT 1) h
     WHERE d.ordered AND h.state IN ('retryable', 'scheduled')
),
probed AS (
    UPDATE river_job j
       SET state        = 'available',
           scheduled_at = now(),
           max_attempts = j.max_attempts + 1,
           metadata     = j.metadata || jsonb_build_object('probe_due', j.scheduled_at,
                              'probes', coalesce((j.metadata->>'probes')::int, 0) + 1,
                              'probe_attempts', coalesce(j.metadata->'probe_attempts', '[]'::jsonb) || to_jsonb(j.attempt + 1),
                              '` + job.ProbeSlotKey + `', (extract(epoch FROM p.next_at) * 1000000)::bigint)
      FROM pick p
     WHERE j.id = p.job_id AND j.state IN ('retryable', 'scheduled')
 RETURNING p.endpoint_id
)
UPDATE webhook_endpoints ep
   SET probe_at = d.next_at,
       probes   = ep.probes + 1
  FROM due d
 WHERE ep.id = d.id
RETURNING (SELECT count(*) FROM probed)`

// probeGapSQL is the wait after a failing endpoint's probes-th probe:
// first × 2^probes seconds, at most every seconds (SQL expressions).
func probeGapSQL(probes, first, every string) string {
	return `least(make_interval(secs => ` + first + `::float8 * power(2, least(` + probes + `, 30))), make_interval(secs => ` + every + `::float8))`
}

// releaseSQL releases the held deliveries of up to $1 endpoints whose
// release is due (probe_at due, failing_since NULL): up to $2 each, made
// available at paced times ($3 per second per slot, or max_per_second),
// never later than they were due anyway. An endpoint with more held than
// that keeps its release due for when the last one released is due; one
// with fewer is looked at again $4 times, $5 seconds after the release and
// then twice as long after each look (probes counts the passes).
// Endpoints that cannot be sent to now (paused, disabled) are left for
// later or dropped.
var releaseSQL = `
WITH tidy AS (
    UPDATE webhook_endpoints
       SET probe_at = CASE WHEN enabled THEN paused_until END
     WHERE probe_at <= now() AND (NOT enabled OR paused_until > now())
),
due AS (
    SELECT id, CASE WHEN max_per_second IS NOT NULL THEN 1.0 / max_per_second
                    ELSE 1.0 / ($3::float8 * max_in_flight) END::float8 AS spacing
      FROM webhook_endpoints
     WHERE probe_at <= now() AND failing_since IS NULL AND enabled
       AND (paused_until IS NULL OR paused_until <= now())
     ORDER BY probe_at
     LIMIT $1
       FOR NO KEY UPDATE SKIP LOCKED
),
held AS (
    SELECT d.id AS endpoint_id, d.spacing, h.id AS job_id,
           row_number() OVER (PARTITION BY d.id ORDER BY h.seq NULLS LAST, h.id) - 1 AS k
      FROM due d CROSS JOIN LATERAL (
          SELECT j.id, (j.args->>'seq')::bigint AS seq
            FROM river_job j
           WHERE j.kind = 'webhook.deliver' AND j.args->>'endpoint_id' = d.id::text
             AND j.state IN ('retryable', 'scheduled') AND ` + notDirect + `
           ORDER BY j.id
           LIMIT $2) h
),
moved AS (
    UPDATE river_job j
       SET state        = 'available',
           scheduled_at = least(j.scheduled_at, now() + make_interval(secs => h.k * h.spacing))
      FROM held h
     WHERE j.id = h.job_id AND j.state IN ('retryable', 'scheduled')
 RETURNING h.endpoint_id
),
counts AS (
    SELECT endpoint_id, count(*) AS n, max(k) AS last, max(spacing) AS spacing FROM held GROUP BY endpoint_id
)
UPDATE webhook_endpoints ep
   SET probe_at = CASE WHEN c.n >= $2 THEN now() + make_interval(secs => (c.last + 1) * c.spacing)
                       WHEN ep.probes < $4 THEN now() + make_interval(secs => $5::float8 * power(2, ep.probes)) END,
       probes   = CASE WHEN c.n >= $2 THEN ep.probes WHEN ep.probes < $4 THEN ep.probes + 1 ELSE 0 END
  FROM due d LEFT JOIN counts c ON c.endpoint_id = d.id
 WHERE ep.id = d.id
RETURNING (SELECT count(*) FROM moved)`

// probeOnce runs one look: releases, then probes. It returns how many
// probes went out and how many held deliveries were released.
func probeOnce(ctx context.Context, pool *pgxpool.Pool) (probes, released int64, err error) {
	rows, err := pool.Query(ctx, releaseSQL, probeEndpoints, releaseBatch, releasePerSlot, releaseRechecks, releaseRecheck.Seconds())
	if err != nil {
		return 0, 0, fmt.Errorf("release held deliveries: %w", err)
	}
	for rows.Next() {
		if err := rows.Scan(&released); err != nil {
			rows.Close()
			return 0, 0, fmt.Errorf("release held deliveries: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return 0, 0, fmt.Errorf("release held deliveries: %w", err)
	}
	rows, err = pool.Query(ctx, probeSQL, probeEndpoints, probePool, probeFirst.Seconds(), probeEvery.Seconds(), probeOnTime.Seconds())
	if err != nil {
		return 0, released, fmt.Errorf("probe failing endpoints: %w", err)
	}
	for rows.Next() {
		if err := rows.Scan(&probes); err != nil {
			rows.Close()
			return 0, released, fmt.Errorf("probe failing endpoints: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return 0, released, fmt.Errorf("probe failing endpoints: %w", err)
	}
	return probes, released, nil
}

// probe runs the probing and release looks until ctx is done: every
// probeLook, and at once when a settlement here ended an endpoint's failing
// state (w.recovered).
func (w *Worker) probe(ctx context.Context) {
	ticker := time.NewTicker(probeLook)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-w.recovered:
		}
		probes, released, err := probeOnce(ctx, w.pool)
		if err != nil {
			if ctx.Err() == nil {
				w.logger.WarnContext(ctx, "recovery probing: look failed; the next look retries", slog.Any("error", err))
			}
			continue
		}
		w.metrics.EndpointProbesTotal.Add(float64(probes))
		w.metrics.HeldReleasedTotal.Add(float64(released))
	}
}
