package metrics

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river/rivertype"
)

// StateCollector reads queue depth, the oldest available job's age, endpoint
// health states and River leadership from Postgres at scrape time. Every
// replica reports the same cluster-wide values; aggregate with max(), not sum().
// Each known job kind (and, for the depth, each state of QueueStates) is
// reported even when no job has it, at 0.
type StateCollector struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
	kinds  []string

	jobs      *prometheus.Desc
	oldest    *prometheus.Desc
	endpoints *prometheus.Desc
	paused    *prometheus.Desc
	leader    *prometheus.Desc
	up        *prometheus.Desc
	// The owners with the largest backlogs (fairness across owners).
	ownerBacklog *prometheus.Desc
	ownerOldest  *prometheus.Desc
}

// TopOwners is how many owners the per-owner backlog series name; the
// others are summed under OtherOwners, so the label's values stay bounded.
const TopOwners = 10

// OtherOwners is the owner label's value for every owner beyond TopOwners.
const OtherOwners = "other"

// ownerBacklogSQL counts each owner's deliveries waiting to be fetched
// (available and due) and finds its oldest, in the same index range as
// oldestAvailableSQL; grouped by endpoint first, so the join to the
// endpoints is one row per endpoint, not per delivery.
const ownerBacklogSQL = `
WITH by_endpoint AS (
  SELECT args->>'endpoint_id' AS endpoint_id, count(*) AS n, min(scheduled_at) AS oldest
    FROM river_job
   WHERE state = 'available' AND scheduled_at <= now() AND kind = 'webhook.deliver'
   GROUP BY 1
)
SELECT e.owner_id, sum(b.n)::bigint, extract(epoch FROM now() - min(b.oldest))::float8
  FROM by_endpoint b JOIN webhook_endpoints e ON e.id::text = b.endpoint_id
 GROUP BY 1
 ORDER BY 2 DESC, 1`

// EndpointStates returns the "state" label's values of dispatcher_endpoints,
// every one reported at each scrape.
func EndpointStates() []string { return []string{"enabled", "failing", "disabled"} }

// QueueStates returns the "state" label's values of dispatcher_queue_jobs,
// every one reported at each scrape: each River job state but completed.
// Delivered jobs are kept for up to a day (tens of millions of rows at a few
// hundred deliveries a second), so counting them would scan the table at
// every scrape, and nothing reads their count; the other states are counted
// through River's index on (state, queue, priority, scheduled_at, id), at a
// cost that follows the work waiting or failed, not the table.
func QueueStates() []string {
	var states []string
	for _, state := range rivertype.JobStates() {
		if state != rivertype.JobStateCompleted {
			states = append(states, string(state))
		}
	}
	return states
}

// countJobsSQL counts the jobs of QueueStates by kind and state. The states
// are literals, not a parameter, so the plan (prepared once per connection,
// generic since it has no parameters) sees which states it counts and picks
// the index for them.
var countJobsSQL = `SELECT kind, state::text, count(*) FROM river_job WHERE state IN ('` +
	strings.Join(QueueStates(), "', '") + `') GROUP BY 1, 2`

// oldestAvailableSQL finds each kind's oldest job that is ready to run, in
// the same index's range of available jobs.
const oldestAvailableSQL = `
SELECT kind, extract(epoch FROM now() - min(scheduled_at))::float8
  FROM river_job WHERE state = 'available' AND scheduled_at <= now() GROUP BY kind`

// NewStateCollector builds the collector over the dispatcher's pool. kinds
// are the job kinds the dispatcher inserts (internal/job's Kinds).
func NewStateCollector(pool *pgxpool.Pool, logger *slog.Logger, kinds []string) *StateCollector {
	return &StateCollector{
		pool:   pool,
		logger: logger,
		kinds:  kinds,
		jobs: prometheus.NewDesc("dispatcher_queue_jobs",
			"River jobs by kind and state (cluster-wide), every state but completed (delivered jobs, kept up to a day, are not counted).", []string{"kind", "state"}, nil),
		oldest: prometheus.NewDesc("dispatcher_queue_oldest_available_age_seconds",
			"Age of the oldest job that is ready to run but not running, by kind (0 when none).", []string{"kind"}, nil),
		endpoints: prometheus.NewDesc("dispatcher_endpoints",
			"Endpoints by health state: enabled (healthy), failing, disabled.", []string{"state"}, nil),
		paused: prometheus.NewDesc("dispatcher_endpoints_paused",
			"Endpoints paused now because their receiver asked (paused_until in the future).", nil, nil),
		leader: prometheus.NewDesc("dispatcher_river_leader_elected",
			"1 when a River leader (which runs maintenance and periodic jobs) holds an unexpired lease.", nil, nil),
		ownerBacklog: prometheus.NewDesc("dispatcher_owner_backlog_deliveries",
			"Deliveries waiting to be fetched (available and due), for the 10 owners with the most and \"other\" for the rest summed (cluster-wide).", []string{"owner"}, nil),
		ownerOldest: prometheus.NewDesc("dispatcher_owner_oldest_waiting_age_seconds",
			"Age of the oldest delivery waiting to be fetched, for the owners of dispatcher_owner_backlog_deliveries (\"other\": the oldest of the rest; 0 when none).", []string{"owner"}, nil),
		up: prometheus.NewDesc("dispatcher_state_scrape_success",
			"1 when the state queries succeeded during this scrape.", nil, nil),
	}
}

// Describe implements prometheus.Collector.
func (c *StateCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.jobs
	ch <- c.oldest
	ch <- c.endpoints
	ch <- c.paused
	ch <- c.leader
	ch <- c.ownerBacklog
	ch <- c.ownerOldest
	ch <- c.up
}

// Collect implements prometheus.Collector.
func (c *StateCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.collect(ctx, ch); err != nil {
		c.logger.Warn("metrics: state queries failed", slog.Any("error", err))
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
}

func (c *StateCollector) collect(ctx context.Context, ch chan<- prometheus.Metric) error {
	type kindState struct{ kind, state string }
	counts := map[kindState]int64{}
	ages := map[string]float64{}
	for _, kind := range c.kinds {
		ages[kind] = 0
		for _, state := range QueueStates() {
			counts[kindState{kind, state}] = 0
		}
	}
	rows, err := c.pool.Query(ctx, countJobsSQL)
	if err != nil {
		return err
	}
	for rows.Next() {
		var kind, state string
		var n int64
		if err := rows.Scan(&kind, &state, &n); err != nil {
			rows.Close()
			return err
		}
		counts[kindState{kind, state}] = n
	}
	if err := rows.Err(); err != nil {
		return err
	}

	rows, err = c.pool.Query(ctx, oldestAvailableSQL)
	if err != nil {
		return err
	}
	for rows.Next() {
		var kind string
		var age float64
		if err := rows.Scan(&kind, &age); err != nil {
			rows.Close()
			return err
		}
		ages[kind] = max(age, 0)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	for ks, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(n), ks.kind, ks.state)
	}
	for kind, age := range ages {
		ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age, kind)
	}

	var enabled, failing, disabled, paused int64
	err = c.pool.QueryRow(ctx, `
SELECT count(*) FILTER (WHERE enabled AND failing_since IS NULL),
       count(*) FILTER (WHERE enabled AND failing_since IS NOT NULL),
       count(*) FILTER (WHERE NOT enabled),
       count(*) FILTER (WHERE enabled AND paused_until > now())
  FROM webhook_endpoints`).Scan(&enabled, &failing, &disabled, &paused)
	if err != nil {
		return err
	}
	states := EndpointStates()
	for i, n := range []int64{enabled, failing, disabled} { // in states' order
		ch <- prometheus.MustNewConstMetric(c.endpoints, prometheus.GaugeValue, float64(n), states[i])
	}
	ch <- prometheus.MustNewConstMetric(c.paused, prometheus.GaugeValue, float64(paused))

	backlogs, err := OwnerBacklogs(ctx, c.pool)
	if err != nil {
		return err
	}
	for _, b := range TopBacklogs(backlogs, TopOwners) {
		ch <- prometheus.MustNewConstMetric(c.ownerBacklog, prometheus.GaugeValue, float64(b.Deliveries), b.Owner)
		ch <- prometheus.MustNewConstMetric(c.ownerOldest, prometheus.GaugeValue, b.OldestSeconds, b.Owner)
	}

	var leaders int64
	if err := c.pool.QueryRow(ctx, `SELECT count(*) FROM river_leader WHERE expires_at > now()`).Scan(&leaders); err != nil {
		return err
	}
	ch <- prometheus.MustNewConstMetric(c.leader, prometheus.GaugeValue, float64(min(leaders, 1)))
	return nil
}

// OwnerBacklog is one owner's deliveries waiting to be fetched.
type OwnerBacklog struct {
	Owner         string
	Deliveries    int64
	OldestSeconds float64
}

// OwnerBacklogs reads every owner's backlog, the largest first.
func OwnerBacklogs(ctx context.Context, pool *pgxpool.Pool) ([]OwnerBacklog, error) {
	rows, err := pool.Query(ctx, ownerBacklogSQL)
	if err != nil {
		return nil, fmt.Errorf("owner backlogs: %w", err)
	}
	defer rows.Close()
	var out []OwnerBacklog
	for rows.Next() {
		var b OwnerBacklog
		if err := rows.Scan(&b.Owner, &b.Deliveries, &b.OldestSeconds); err != nil {
			return nil, fmt.Errorf("owner backlogs: %w", err)
		}
		b.OldestSeconds = max(b.OldestSeconds, 0)
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("owner backlogs: %w", err)
	}
	return out, nil
}

// TopBacklogs keeps the first n of backlogs (the largest first) and sums the
// rest under OtherOwners, always present (0 when none), so that the owner
// label has at most n+1 values.
func TopBacklogs(backlogs []OwnerBacklog, n int) []OwnerBacklog {
	other := OwnerBacklog{Owner: OtherOwners}
	var out []OwnerBacklog
	for i, b := range backlogs {
		if i < n && b.Owner != OtherOwners {
			out = append(out, b)
			continue
		}
		other.Deliveries += b.Deliveries
		other.OldestSeconds = max(other.OldestSeconds, b.OldestSeconds)
	}
	return append(out, other)
}
