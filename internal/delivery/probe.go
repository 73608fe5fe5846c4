package delivery

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Recovery probing. While an endpoint is failing, its deliveries are held:
// new ones wait the failing cool-down (fanout), failed ones their retry step
// (5 min after the second failure, then longer). Left alone, a receiver that
// was down for a minute would hear nothing for five. So each process looks
// every probeLook for failing endpoints whose probe is due (probe_at) and
// makes one of their waiting deliveries available at once: the probe. It is
// a real delivery and spends an attempt.
//
// When probes go. The first is due probeFirst after the first failure: the
// delivery that failed retries after 5 s on its own schedule, and that
// retry is in effect the first probe. Then each probe is due probeFirst ×
// 2^probes after the one before, capped at probeEvery, whether it has
// answered or not; and any failed request to the endpoint (a schedule
// retry, a delivery that was already running) pushes the next probe to
// at least probeFirst × 2^probes, at most probeEvery, after it. So a failing
// receiver hears at least one request every probeEvery (plus the length of
// a request that hangs), and probing adds none to an interval in which it
// already heard one: a receiver that stays down gets at most 3600 s /
// probeEvery = 240 probes an hour, fewer when deliveries' own retries fall
// due, and a receiver that comes back after any outage gets its next
// request, and with it the release of its backlog, within probeEvery plus
// a look.
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
// but not its place. A delivery probed before its time keeps it: its
// max_attempts grows by one, the time it was due is recorded as probe_due in
// its metadata, and if the probe fails the delivery waits for that time
// (nextRetry), not for a retry step of its own; probes do not count as steps
// of the schedule (job.ProbeMark: the River attempt it runs as is
// recorded too, so that what people see counts scheduled attempts and probes
// apart). So a probe is one request, never followed by its
// delivery's 5-s retry, and a receiver that stays down still sees each
// delivery tried on the 18-attempt, 5.3-day schedule; the disable-after
// period is unchanged. A delivery due within probeOnTime (a retry step that
// has come, or is about to) is no probe: it is made available as its own
// scheduled attempt, a little early at most, so its due time can never pass
// while a probe of it is in flight. A probe picks, among the endpoint's
// oldest waiting deliveries (probePool), one that is due, else the one that
// has spent the fewest attempts, so a long outage spreads its probes over
// them; an ordered endpoint's probe is always its head. A paused endpoint
// is not probed: the receiver said when (its probe then is the pause's own,
// job.PauseProbeGap).
const (
	// probeLook is how often a process looks for due probes and releases.
	probeLook = time.Second
	// probeFirst is the first probe's delay after the first failure; each
	// further probe waits twice as long as the one before, up to
	// probeEvery.
	probeFirst = 10 * time.Second
	// probeEvery is the longest wait between two requests to a failing
	// endpoint: how late, at most, a receiver that is back hears of it
	// (plus a look and River's fetch), whatever the outage's length.
	probeEvery = 15 * time.Second
	// probeOnTime: a waiting delivery due within this is sent as its own
	// scheduled attempt, not as a probe (see above). It is longer than an
	// attempt can last (job timeout), so that a probe's due time is still
	// ahead when the probe fails.
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
	// this many times, releaseRecheck apart. A delivery held while the
	// success that ended the failing state was in flight has its hold
	// written by River's completer, in a batch, possibly after the release
	// ran; a recheck releases it too.
	releaseRechecks = 2
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
// The probed delivery is one already due (or due within $5): it goes as its
// own attempt, unmarked (an earlier probe's due time, which is this one,
// forgotten); else the one with the fewest attempts, marked as a
// probe (job.ProbeMark) and given one more attempt.
var probeSQL = `
WITH due AS (
    SELECT id, ordered
      FROM webhook_endpoints
     WHERE probe_at <= now() AND failing_since IS NOT NULL AND enabled
       AND (paused_until IS NULL OR paused_until <= now())
     ORDER BY probe_at
     LIMIT $1
       FOR NO KEY UPDATE SKIP LOCKED
),
pick AS (
    SELECT d.id AS endpoint_id, p.id AS job_id
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
    SELECT d.id, h.id
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
           max_attempts = j.max_attempts + CASE WHEN j.scheduled_at > now() + make_interval(secs => $5) THEN 1 ELSE 0 END,
           metadata     = CASE WHEN j.scheduled_at > now() + make_interval(secs => $5)
                               THEN j.metadata || jsonb_build_object('probe_due', j.scheduled_at,
                                                     'probes', coalesce((j.metadata->>'probes')::int, 0) + 1,
                                                     'probe_attempts', coalesce(j.metadata->'probe_attempts', '[]'::jsonb) || to_jsonb(j.attempt + 1))
                               -- Its own attempt: an earlier probe's due
                               -- time is this one, spent now, so nextRetry
                               -- must not send it again then.
                               ELSE j.metadata - 'probe_due' END
      FROM pick p
     WHERE j.id = p.job_id AND j.state IN ('retryable', 'scheduled')
 RETURNING p.endpoint_id
)
UPDATE webhook_endpoints ep
   SET probe_at = now() + ` + probeGapSQL("ep.probes + 1", "$3", "$4") + `,
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
// with fewer is looked at again $4 times, $5 seconds apart (probes counts
// the passes).
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
                       WHEN ep.probes < $4 THEN now() + make_interval(secs => $5::float8) END,
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
