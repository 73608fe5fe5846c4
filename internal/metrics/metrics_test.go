package metrics_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
)

func TestMetricsLintClean(t *testing.T) {
	t.Parallel()

	reg := prometheus.NewRegistry()
	m := metrics.New(reg)
	m.DeliveriesTotal.WithLabelValues("completed", "2xx").Inc()
	m.SnoozesTotal.WithLabelValues("lease_busy").Inc()
	m.AttemptDuration.WithLabelValues("2xx").Observe(0.01)
	m.IngestEventsTotal.WithLabelValues("grpc", "stored").Inc()
	m.ScopeDecisionsTotal.WithLabelValues("embed", metrics.ScopeAdmit).Inc()
	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}

func TestStatusClass(t *testing.T) {
	t.Parallel()

	require.Equal(t, "2xx", metrics.StatusClass(204))
	require.Equal(t, "4xx", metrics.StatusClass(410))
	require.Equal(t, "5xx", metrics.StatusClass(599))
	require.Equal(t, "none", metrics.StatusClass(0))
	require.Equal(t, "none", metrics.StatusClass(600))
}

func TestStateCollector(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	db := dbtest.New(t)
	testfactory.Endpoint(ctx, t, db.Pool, nil)
	testfactory.Endpoint(ctx, t, db.Pool, &testfactory.EndpointOpts{FailingSince: new(time.Now())})
	testfactory.Endpoint(ctx, t, db.Pool, &testfactory.EndpointOpts{Disabled: true, FailingSince: new(time.Now())})
	_, err := db.Pool.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at) VALUES ('{}', 'webhook.deliver', 18, 'deliver', 'available', now() - interval '90 seconds')`)
	require.NoError(t, err)

	c := metrics.NewStateCollector(db.Pool, slog.New(slog.DiscardHandler))
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
# HELP dispatcher_queue_jobs River jobs by kind and state (cluster-wide).
# TYPE dispatcher_queue_jobs gauge
dispatcher_queue_jobs{kind="webhook.deliver",state="available"} 1
# HELP dispatcher_state_scrape_success 1 when the state queries succeeded during this scrape.
# TYPE dispatcher_state_scrape_success gauge
dispatcher_state_scrape_success 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(expected),
		"dispatcher_endpoints", "dispatcher_queue_jobs", "dispatcher_state_scrape_success"))

	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "dispatcher_queue_oldest_available_age_seconds" {
			require.GreaterOrEqual(t, mf.GetMetric()[0].GetGauge().GetValue(), 89.0)
			return
		}
	}
	t.Fatal("oldest available age not reported")
}
