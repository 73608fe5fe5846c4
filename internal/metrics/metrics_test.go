package metrics_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
)

// known stands for the label values the composition root gathers from the
// packages that emit them.
var known = metrics.Labels{
	DeliveryOutcomes: []string{"completed", "retryable", "snoozed", "cancelled", "discarded"},
	StatusClasses:    []string{"none", "1xx", "2xx", "3xx", "4xx", "5xx"},
	SnoozeReasons:    []string{"lease_busy", "retry_after", "ordered"},
	PauseReasons:     []string{"retry_after", "throttled"},
	ScopeRules:       []string{"raw", "internal", "owner", "test_target", "published_slice", "embed", "unscoped"},
	ScopeResults:     []string{"admit", "deny", "error"},
	IngestPaths:      []string{"grpc", "outbox", "test", "operational"},
	IngestResults:    []string{"stored", "duplicate", "dropped_internal", "dropped_unknown", "dropped_raw", "invalid", "conflict"},
}

func TestMetricsLintClean(t *testing.T) {
	t.Parallel()

	reg := prometheus.NewRegistry()
	m := metrics.New(reg, known)
	m.DeliveriesTotal.WithLabelValues("completed", "2xx").Inc()
	m.SnoozesTotal.WithLabelValues("lease_busy").Inc()
	m.AttemptDuration.WithLabelValues("2xx").Observe(0.01)
	m.IngestEventsTotal.WithLabelValues("grpc", "stored").Inc()
	m.IngestWait.WithLabelValues("grpc").Observe(0.002)
	m.IngestTransaction.Observe(0.004)
	m.IngestGroupCalls.Observe(3)
	m.ScopeDecisionsTotal.WithLabelValues("embed", "admit").Inc()
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}

func TestStateCollector(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	db := dbtest.New(t)
	testfactory.Endpoint(ctx, t, db.Pool, nil)
	testfactory.Endpoint(ctx, t, db.Pool, &testfactory.EndpointOpts{FailingSince: new(time.Now())})
	testfactory.Endpoint(ctx, t, db.Pool, &testfactory.EndpointOpts{Disabled: true, FailingSince: new(time.Now())})
	testfactory.Job(ctx, t, db.Pool, &testfactory.JobOpts{ScheduledAt: new(time.Now().Add(-90 * time.Second))})
	testfactory.Job(ctx, t, db.Pool, &testfactory.JobOpts{State: rivertype.JobStateCompleted})

	c := metrics.NewStateCollector(db.Pool, slog.New(slog.DiscardHandler), job.Kinds())
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)

	expected := `
# HELP dispatcher_endpoints Endpoints by health state: enabled (healthy), failing, disabled.
# TYPE dispatcher_endpoints gauge
dispatcher_endpoints{state="disabled"} 1
dispatcher_endpoints{state="enabled"} 1
dispatcher_endpoints{state="failing"} 1
# HELP dispatcher_state_scrape_success 1 when the state queries succeeded during this scrape.
# TYPE dispatcher_state_scrape_success gauge
dispatcher_state_scrape_success 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(expected),
		"dispatcher_endpoints", "dispatcher_state_scrape_success"))

	jobs := gauges(t, reg, "dispatcher_queue_jobs")
	require.Len(t, jobs, 3*7, "every known kind in every River state but completed")
	require.NotContains(t, jobs, `kind="webhook.deliver",state="completed"`, "completed jobs are not counted")
	require.InDelta(t, 1.0, jobs[`kind="webhook.deliver",state="available"`], 0)
	require.InDelta(t, 0.0, jobs[`kind="webhook.fanout",state="available"`], 0, "0, not missing")
	require.InDelta(t, 0.0, jobs[`kind="webhook.deliver",state="retryable"`], 0)

	oldest := gauges(t, reg, "dispatcher_queue_oldest_available_age_seconds")
	require.Len(t, oldest, 3)
	require.GreaterOrEqual(t, oldest[`kind="webhook.deliver"`], 89.0)
	require.InDelta(t, 0.0, oldest[`kind="webhook.fanout"`], 0, "0 when none, as its help says")
	require.InDelta(t, 0.0, oldest[`kind="webhook.prune_events"`], 0)
}

func TestOwnerBacklogs(t *testing.T) {
	t.Parallel()

	t.Run("TheLargestOwnersByNameTheRestAsOther", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		db := dbtest.New(t)
		// Owner o<i> has i+1 deliveries waiting, the oldest i minutes old.
		for i := range 12 {
			ep := testfactory.Endpoint(ctx, t, db.Pool, &testfactory.EndpointOpts{OwnerID: fmt.Sprintf("o%02d", i)})
			for j := range i + 1 {
				testfactory.Job(ctx, t, db.Pool, &testfactory.JobOpts{
					Args:        job.DeliverArgs{EndpointID: ep.String(), EventID: fmt.Sprintf("evt_%d_%d", i, j)},
					ScheduledAt: new(time.Now().Add(-time.Duration(i) * time.Minute)),
				})
			}
		}
		// Not waiting: scheduled later, or done.
		ep := testfactory.Endpoint(ctx, t, db.Pool, &testfactory.EndpointOpts{OwnerID: "later"})
		testfactory.Job(ctx, t, db.Pool, &testfactory.JobOpts{Args: job.DeliverArgs{EndpointID: ep.String(), EventID: "evt_l"}, State: rivertype.JobStateScheduled, ScheduledAt: new(time.Now().Add(time.Hour))})
		testfactory.Job(ctx, t, db.Pool, &testfactory.JobOpts{Args: job.DeliverArgs{EndpointID: ep.String(), EventID: "evt_c"}, State: rivertype.JobStateCompleted})

		reg := prometheus.NewRegistry()
		reg.MustRegister(metrics.NewStateCollector(db.Pool, slog.New(slog.DiscardHandler), job.Kinds()))
		backlog := gauges(t, reg, "dispatcher_owner_backlog_deliveries")
		require.Len(t, backlog, metrics.TopOwners+1, "bounded: the top owners and other")
		require.InDelta(t, 12.0, backlog[`owner="o11"`], 0)
		require.InDelta(t, 3.0, backlog[`owner="o02"`], 0)
		require.InDelta(t, 1.0+2.0, backlog[`owner="other"`], 0, "the two smallest, summed")
		require.NotContains(t, backlog, `owner="later"`)
		oldest := gauges(t, reg, "dispatcher_owner_oldest_waiting_age_seconds")
		require.GreaterOrEqual(t, oldest[`owner="o11"`], 11*60.0)
		require.Less(t, oldest[`owner="other"`], 2*60.0, "the oldest of the rest: o01's, a minute")
	})

	t.Run("OtherAtZeroWhenNothingWaits", func(t *testing.T) {
		t.Parallel()
		db := dbtest.New(t)
		reg := prometheus.NewRegistry()
		reg.MustRegister(metrics.NewStateCollector(db.Pool, slog.New(slog.DiscardHandler), job.Kinds()))
		require.Equal(t, map[string]float64{`owner="other"`: 0}, gauges(t, reg, "dispatcher_owner_backlog_deliveries"))
		require.Equal(t, map[string]float64{`owner="other"`: 0}, gauges(t, reg, "dispatcher_owner_oldest_waiting_age_seconds"))
	})
}

func TestZeroSeries(t *testing.T) {
	t.Parallel()

	t.Run("EveryKnownLabelValueStartsAtZero", func(t *testing.T) {
		t.Parallel()
		reg := prometheus.NewRegistry()
		metrics.New(reg, known)
		deliveries := gauges(t, reg, "dispatcher_deliveries_total")
		require.Len(t, deliveries, len(known.DeliveryOutcomes)*len(known.StatusClasses))
		for _, s := range []string{`outcome="retryable",status_class="5xx"`, `outcome="completed",status_class="2xx"`, `outcome="cancelled",status_class="none"`} {
			v, ok := deliveries[s]
			require.True(t, ok, s)
			require.Zero(t, v)
		}
		require.Len(t, gauges(t, reg, "dispatcher_delivery_snoozes_total"), 3)
		require.Equal(t, map[string]float64{`reason="retry_after"`: 0, `reason="throttled"`: 0}, gauges(t, reg, "dispatcher_endpoint_pauses_total"))
		require.Len(t, gauges(t, reg, "dispatcher_ingest_events_total"), 4*7)
		scope := gauges(t, reg, "dispatcher_scope_decisions_total")
		require.Contains(t, scope, `result="error",rule="embed"`)
		require.Len(t, scope, 7*3)
		require.Len(t, gauges(t, reg, "dispatcher_delivery_attempt_duration_seconds"), len(known.StatusClasses))
		require.Equal(t, map[string]float64{`path="grpc"`: 0, `path="outbox"`: 0, `path="test"`: 0, `path="operational"`: 0},
			gauges(t, reg, "dispatcher_ingest_wait_seconds"))
		require.Equal(t, map[string]float64{"": 0}, gauges(t, reg, "dispatcher_ingest_transaction_seconds"))
		require.Equal(t, map[string]float64{"": 0}, gauges(t, reg, "dispatcher_ingest_group_calls"))
	})

	t.Run("StateSeriesOfAnEmptyDatabase", func(t *testing.T) {
		t.Parallel()
		db := dbtest.New(t)
		reg := prometheus.NewRegistry()
		reg.MustRegister(metrics.NewStateCollector(db.Pool, slog.New(slog.DiscardHandler), job.Kinds()))
		oldest := gauges(t, reg, "dispatcher_queue_oldest_available_age_seconds")
		require.Equal(t, map[string]float64{`kind="webhook.prune_events"`: 0, `kind="webhook.deliver"`: 0, `kind="webhook.fanout"`: 0}, oldest)
		require.Len(t, gauges(t, reg, "dispatcher_queue_jobs"), 3*7)
		require.Len(t, gauges(t, reg, "dispatcher_endpoints"), 3)
	})
}

// gauges gathers reg and returns the series of family name, keyed by their
// labels as `a="x",b="y"` (sorted by name), valued by their gauge, counter or
// histogram count.
func gauges(t *testing.T, reg *prometheus.Registry, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, lp := range m.GetLabel() {
				labels = append(labels, lp.GetName()+`="`+lp.GetValue()+`"`)
			}
			v := m.GetGauge().GetValue() + m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
			out[strings.Join(labels, ",")] = v
		}
	}
	return out
}

func TestSum(t *testing.T) {
	t.Parallel()

	m := metrics.New(prometheus.NewRegistry(), metrics.Labels{})
	require.Zero(t, metrics.Sum(m.ScopeDecisionsTotal))
	m.ScopeDecisionsTotal.WithLabelValues("embed", "admit").Inc()
	m.ScopeDecisionsTotal.WithLabelValues("owner", "deny").Add(2)
	require.InDelta(t, 3, metrics.Sum(m.ScopeDecisionsTotal), 0)
}
