package attempt

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Hour is one hour bucket of an endpoint's attempts.
type Hour struct {
	Start time.Time
	Counts
}

// hourlySQL reads the hour buckets of one endpoint from since, through the
// primary key's range.
var hourlySQL = func() string {
	return "SELECT bucket, " + strings.Join(statsColumns(), ", ") + ` FROM endpoint_stats WHERE endpoint_id = $1 AND span = 3600 AND bucket >= $2 ORDER BY bucket`
}()

// Hourly returns one endpoint's attempts per hour over the last n hours up
// to now, the current hour included, oldest first: n entries, hours without
// attempts at zero (a chart's series).
func Hourly(ctx context.Context, pool *pgxpool.Pool, id uuid.UUID, n int, now time.Time) ([]Hour, error) {
	first := now.UTC().Truncate(time.Hour).Add(-time.Duration(n-1) * time.Hour)
	out := make([]Hour, n)
	for i := range out {
		out[i].Start = first.Add(time.Duration(i) * time.Hour)
	}
	rows, err := pool.Query(ctx, hourlySQL, id, first)
	if err != nil {
		return nil, fmt.Errorf("endpoint hourly stats: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			at time.Time
			c  Counts
		)
		dest := []any{&at, &c.Attempts, &c.Successes, &c.HTTP4xx, &c.HTTP5xx, &c.HTTPOther, &c.Timeouts, &c.Connection, &c.Blocked, &c.RetryAfter}
		for i := range c.Latency {
			dest = append(dest, &c.Latency[i])
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, fmt.Errorf("endpoint hourly stats: %w", err)
		}
		if i := int(at.Sub(first) / time.Hour); i >= 0 && i < n {
			out[i].Counts = c
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("endpoint hourly stats: %w", err)
	}
	return out, nil
}
