package e2e

import (
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/connlimit"
	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/delivery"
	"github.com/standmeet/webhook-dispatcher/internal/ingest"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/partition"
	"github.com/standmeet/webhook-dispatcher/internal/scope"
)

// seriesRE finds the metric names the alert rules and the dashboard read.
var seriesRE = regexp.MustCompile(`\b(?:dispatcher|go|process)_[a-z_]*[a-z]\b`)

// label is one label of a series and every value the code can emit for it,
// as the package that emits it exports them.
type label struct {
	name   string
	values []string
}

// labelled are the series with bounded labels, each with every value its
// labels can take: the lists the emitting packages export (and the
// composition root hands to internal/metrics), not a copy of them. The
// labels are in name order, as the exposition format writes them.
func labelled() map[string][]label {
	return map[string][]label{
		"dispatcher_deliveries_total":                        {{"outcome", delivery.Outcomes()}, {"status_class", delivery.StatusClasses()}},
		"dispatcher_delivery_attempt_duration_seconds_count": {{"status_class", delivery.StatusClasses()}},
		"dispatcher_delivery_snoozes_total":                  {{"reason", job.SnoozeReasons()}},
		"dispatcher_endpoint_pauses_total":                   {{"reason", delivery.PauseReasons()}},
		"dispatcher_scope_decisions_total":                   {{"result", scope.Results()}, {"rule", scope.Rules()}},
		"dispatcher_ingest_events_total":                     {{"path", ingest.Paths()}, {"result", ingest.Results()}},
		"dispatcher_ingest_wait_seconds_count":               {{"path", ingest.Paths()}},
		"dispatcher_queue_jobs":                              {{"kind", job.Kinds()}, {"state", metrics.QueueStates()}},
		"dispatcher_queue_oldest_available_age_seconds":      {{"kind", job.Kinds()}},
		"dispatcher_endpoints":                               {{"state", metrics.EndpointStates()}},
		"dispatcher_jobs_rescued_total":                      {{"kind", partition.RescueKinds()}},
		"dispatcher_refusals_total":                          {{"port", connlimit.Ports()}, {"reason", connlimit.Reasons()}},
	}
}

// unbounded are the labelled series whose values are data, not code: the
// catalog's digest, the unknown type names an owner sends, the owners with
// the largest backlogs (at most metrics.TopOwners of them beside "other",
// which an idle dispatcher reports at 0: checked in TestIdleMetrics).
var unbounded = []string{"dispatcher_catalog_types", "dispatcher_ingest_unknown_types_total",
	"dispatcher_owner_backlog_deliveries", "dispatcher_owner_oldest_waiting_age_seconds"}

// seriesLines returns name's series over every combination of the labels'
// values, as the exposition format writes them, valued 0.
func seriesLines(name string, labels []label) []string {
	lines := []string{""}
	for _, l := range labels {
		var next []string
		for _, prefix := range lines {
			for _, v := range l.values {
				sep := ","
				if prefix == "" {
					sep = ""
				}
				next = append(next, prefix+sep+l.name+`="`+v+`"`)
			}
		}
		lines = next
	}
	for i, l := range lines {
		lines[i] = name + "{" + l + "} 0"
	}
	return lines
}

// labelledRE finds the names of the labelled dispatcher series of a scrape.
var labelledRE = regexp.MustCompile(`(?m)^(dispatcher_[a-z_]*[a-z])\{([^}]*)\}`)

// bucketRE is a histogram bucket's own label.
var bucketRE = regexp.MustCompile(`,?le="[^"]*"`)

// TestIdleMetrics scrapes a dispatcher that has done nothing yet: every
// series an alert or the dashboard reads is there, at 0 where nothing
// happened, for every label value the code can emit.
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
		// Fairness: the owners with the largest backlogs, none yet.
		`dispatcher_owner_backlog_deliveries{owner="other"} 0`,
		`dispatcher_owner_oldest_waiting_age_seconds{owner="other"} 0`,
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
		"dispatcher_ingest_transaction_seconds_count 0",
		"dispatcher_ingest_group_calls_count 0",
		"dispatcher_state_scrape_success 1",
	} {
		require.Contains(t, body, "\n"+line+"\n")
	}

	// Every value of every bounded label, at 0. The state series are read
	// from Postgres, where the retention's prune job, run at start, may
	// already be queued or done by the scrape: those must exist, at any
	// value.
	series := labelled()
	var missing []string
	for name, labels := range series {
		for _, line := range seriesLines(name, labels) {
			want := "\n" + line + "\n"
			if strings.HasPrefix(name, "dispatcher_queue_") {
				want = "\n" + strings.TrimSuffix(line, " 0") + " "
			}
			if !strings.Contains(body, want) {
				missing = append(missing, line)
			}
		}
	}
	require.Empty(t, missing, "series the code can emit that an idle dispatcher lacks")
	// Delivered jobs are not counted: the prune job run at start, done by
	// the scrape or not, never shows as a completed series.
	require.NotRegexp(t, `dispatcher_queue_jobs\{[^}]*state="completed"`, body)
	// And no labelled series is left out of that check.
	for _, m := range labelledRE.FindAllStringSubmatch(body, -1) {
		name := m[1]
		if bucketRE.ReplaceAllString(m[2], "") == "" {
			continue // a histogram's buckets without labels of their own
		}
		if base, ok := strings.CutSuffix(name, "_bucket"); ok {
			name = base + "_count" // a histogram's buckets go with its count
		} else if base, ok := strings.CutSuffix(name, "_sum"); ok {
			name = base + "_count"
		}
		_, bounded := series[name]
		require.True(t, bounded || slices.Contains(unbounded, name), "%s has labels; list its values in labelled() or it in unbounded", name)
	}
}
