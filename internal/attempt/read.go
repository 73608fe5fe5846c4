package attempt

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// List returns up to limit of owner's attempts of one delivery, newest
// first, with ids below beforeID (0 for the first page).
func List(ctx context.Context, pool *pgxpool.Pool, owner string, deliveryID, beforeID int64, limit int) ([]Attempt, error) {
	rows, err := pool.Query(ctx, `
SELECT id, delivery_id, attempt, owner_id, endpoint_id, event_id, started_at, duration_us, outcome, http_status,
       response_body, error, coalesce(snooze_reason, ''), snoozed_until, probes, probe
  FROM delivery_attempts
 WHERE delivery_id = $1 AND owner_id = $2 AND ($3::bigint = 0 OR id < $3::bigint)
 ORDER BY id DESC
 LIMIT $4`, deliveryID, owner, beforeID, limit)
	if err != nil {
		return nil, fmt.Errorf("list attempts: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Attempt, error) {
		var (
			a       Attempt
			number  int32
			micros  int64
			outcome string
			status  int32
			probes  int32
		)
		err := r.Scan(&a.ID, &a.DeliveryID, &number, &a.OwnerID, &a.EndpointID, &a.EventID, &a.StartedAt, &micros, &outcome, &status,
			&a.Body, &a.Error, &a.SnoozeReason, &a.SnoozedUntil, &probes, &a.Probe)
		a.Probes = int(probes)
		a.Number, a.Duration, a.Outcome, a.Status = int(number), time.Duration(micros)*time.Microsecond, ParseOutcome(outcome), int(status)
		return a, err
	})
	if err != nil {
		return nil, fmt.Errorf("list attempts: %w", err)
	}
	return out, nil
}

// Window is a period Stats covers, ending now.
type Window int

// Windows.
const (
	WindowHour Window = iota // the minute buckets of the last hour, the current one included
	WindowDay                // the hour buckets of the last 24 hours, the current one included
	WindowWeek               // the hour buckets of the last 7 days, the current one included
)

// Windows lists every Window, in order.
var Windows = []Window{WindowHour, WindowDay, WindowWeek}

func (w Window) String() string {
	switch w {
	case WindowHour:
		return "hour"
	case WindowDay:
		return "day"
	case WindowWeek:
		return "week"
	default:
		return "window"
	}
}

// Counts is what one endpoint's attempts came to over one window.
type Counts struct {
	Attempts   int64
	Successes  int64
	HTTP4xx    int64
	HTTP5xx    int64
	HTTPOther  int64
	Timeouts   int64
	Connection int64
	Blocked    int64
	RetryAfter int64
	// Latency is the histogram over LatencyBounds of every attempt that sent
	// a request.
	Latency [LatencyBuckets]int64
	// Filtered counts the events the endpoint's filter kept from it: no
	// attempt, and in none of the counts above.
	Filtered int64
}

// Failures is every attempt that was not a success.
func (c *Counts) Failures() int64 { return c.Attempts - c.Successes }

// Percentile estimates the q-quantile (0 < q ≤ 1) of the latency: the
// bucket it falls in, interpolated linearly within it. 0 without attempts;
// beyond the last bound it is that bound.
func (c *Counts) Percentile(q float64) time.Duration {
	var total int64
	for _, n := range c.Latency {
		total += n
	}
	if total == 0 {
		return 0
	}
	rank := q * float64(total)
	var seen int64
	for i, n := range c.Latency {
		if n == 0 || float64(seen+n) < rank {
			seen += n
			continue
		}
		if i == len(LatencyBounds) {
			return LatencyBounds[i-1]
		}
		var lower time.Duration
		if i > 0 {
			lower = LatencyBounds[i-1]
		}
		frac := (rank - float64(seen)) / float64(n)
		return lower + time.Duration(frac*float64(LatencyBounds[i]-lower))
	}
	return LatencyBounds[len(LatencyBounds)-1]
}

// EndpointStats is one endpoint's Counts per window.
type EndpointStats struct {
	EndpointID uuid.UUID
	Windows    [3]Counts // indexed by Window
}

// statsSQL sums the buckets of each window in one pass over at most 60
// minute rows and 168 hour rows per endpoint (the primary key's range
// scans). Window starts are aligned to the bucket span, so a window covers
// its full buckets plus the current one.
var statsSQL = func() string {
	cols := statsColumns()
	sums := make([]string, len(cols))
	for i, c := range cols {
		sums[i] = "sum(s." + c + ")::bigint"
	}
	return `
WITH w(n, span, since) AS (
    VALUES (0, 60,   date_trunc('minute', $2::timestamptz) - interval '59 minutes'),
           (1, 3600, date_trunc('hour', $2::timestamptz) - interval '23 hours'),
           (2, 3600, date_trunc('hour', $2::timestamptz) - interval '167 hours')
)
SELECT s.endpoint_id, w.n, ` + strings.Join(sums, ", ") + `, sum(s.filtered)::bigint
  FROM w JOIN endpoint_stats s ON s.span = w.span AND s.bucket >= w.since AND s.bucket <= $2::timestamptz
 WHERE s.endpoint_id = ANY($1::uuid[])
 GROUP BY s.endpoint_id, w.n`
}()

// Stats returns the statistics of each endpoint in ids, in that order, as
// of now. Endpoints without attempts have zero Counts.
func Stats(ctx context.Context, pool *pgxpool.Pool, ids []uuid.UUID, now time.Time) ([]EndpointStats, error) {
	out := make([]EndpointStats, len(ids))
	index := make(map[uuid.UUID][]int, len(ids))
	for i, id := range ids {
		out[i].EndpointID = id
		index[id] = append(index[id], i)
	}
	rows, err := pool.Query(ctx, statsSQL, ids, now)
	if err != nil {
		return nil, fmt.Errorf("endpoint stats: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id  uuid.UUID
			win int32
			c   Counts
		)
		dest := []any{&id, &win, &c.Attempts, &c.Successes, &c.HTTP4xx, &c.HTTP5xx, &c.HTTPOther, &c.Timeouts, &c.Connection, &c.Blocked, &c.RetryAfter}
		for i := range c.Latency {
			dest = append(dest, &c.Latency[i])
		}
		dest = append(dest, &c.Filtered)
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("endpoint stats: %w", err)
		}
		if win < 0 || int(win) >= len(Windows) {
			continue
		}
		for _, i := range index[id] {
			out[i].Windows[win] = c
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("endpoint stats: %w", err)
	}
	return out, nil
}

// Retention of the statistics' buckets: a little more than the longest
// window each span serves.
const (
	MinuteBucketsKept = 2 * time.Hour
	HourBucketsKept   = 8 * 24 * time.Hour
)

// pruneBatch bounds each DELETE, as retention does for events.
const pruneBatch = 5000

// Prune deletes attempts started before now - retention and buckets older
// than their span serves, in bounded batches. It returns how many attempt
// rows it deleted.
func Prune(ctx context.Context, pool *pgxpool.Pool, retention time.Duration) (int64, error) {
	var total int64
	for {
		tag, err := pool.Exec(ctx, `
DELETE FROM delivery_attempts WHERE ctid = ANY (ARRAY(
    SELECT ctid FROM delivery_attempts WHERE started_at < now() - make_interval(secs => $1) LIMIT $2
))`, retention.Seconds(), pruneBatch)
		if err != nil {
			return total, fmt.Errorf("prune attempts: %w", err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < pruneBatch {
			break
		}
	}
	if _, err := pool.Exec(ctx, `
DELETE FROM endpoint_stats
 WHERE (span = 60 AND bucket < now() - make_interval(secs => $1))
    OR (span = 3600 AND bucket < now() - make_interval(secs => $2))`,
		MinuteBucketsKept.Seconds(), HourBucketsKept.Seconds()); err != nil {
		return total, fmt.Errorf("prune endpoint stats: %w", err)
	}
	return total, nil
}
