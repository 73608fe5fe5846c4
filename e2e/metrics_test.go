package e2e

import (
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
)

// seriesRE finds the metric names the alert rules and the dashboard read.
var seriesRE = regexp.MustCompile(`\b(?:dispatcher|go|process)_[a-z_]*[a-z]\b`)

// TestIdleMetrics scrapes a dispatcher that has done nothing yet: every
// series an alert or the dashboard reads is there, at 0 where nothing
// happened, for every known label value the rules select.
func TestIdleMetrics(t *testing.T) {
	t.Parallel()

	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
	code, body := d.get(t, "/metrics")
	require.Equal(t, http.StatusOK, code)

	var read []string
	for _, f := range []string{"../deploy/prometheus/alerts.yaml", "../deploy/grafana/dispatcher-dashboard.json"} {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		read = append(read, seriesRE.FindAllString(string(b), -1)...)
	}
	require.Contains(t, read, "dispatcher_queue_oldest_available_age_seconds")
	for _, name := range read {
		require.True(t, strings.Contains(body, "\n"+name+" ") || strings.Contains(body, "\n"+name+"{"),
			"%s is read by an alert or the dashboard but not exported by an idle dispatcher", name)
	}

	for _, line := range []string{
		// The backlog alert and the dashboard's oldest-job panel.
		`dispatcher_queue_oldest_available_age_seconds{kind="webhook.deliver"} 0`,
		`dispatcher_queue_oldest_available_age_seconds{kind="webhook.fanout"} 0`,
		`dispatcher_queue_jobs{kind="webhook.deliver",state="retryable"} 0`,
		// The failing-deliveries ratio, over every outcome it selects.
		`dispatcher_deliveries_total{outcome="completed",status_class="2xx"} 0`,
		`dispatcher_deliveries_total{outcome="retryable",status_class="5xx"} 0`,
		`dispatcher_deliveries_total{outcome="discarded",status_class="none"} 0`,
		`dispatcher_deliveries_total{outcome="cancelled",status_class="4xx"} 0`,
		`dispatcher_delivery_snoozes_total{reason="retry_after"} 0`,
		`dispatcher_delivery_attempt_duration_seconds_count{status_class="2xx"} 0`,
		`dispatcher_scope_decisions_total{result="error",rule="embed"} 0`,
		`dispatcher_ingest_events_total{path="outbox",result="stored"} 0`,
		`dispatcher_endpoints{state="failing"} 0`,
		"dispatcher_endpoints_disabled_total 0",
		"dispatcher_egress_blocked_total 0",
		"dispatcher_relay_errors_total 0",
		"dispatcher_relay_poisoned_rows_total 0",
		"dispatcher_relay_lag_seconds_count 0",
		"dispatcher_delivery_lag_seconds_count 0",
		"dispatcher_state_scrape_success 1",
	} {
		require.Contains(t, body, "\n"+line+"\n")
	}
}
