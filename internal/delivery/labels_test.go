package delivery

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// TestMetricLabelsAreKnown: the lists internal/metrics creates at 0 hold
// every value this package emits.
func TestMetricLabelsAreKnown(t *testing.T) {
	t.Parallel()

	require.Len(t, Outcomes(), 5)
	for _, o := range Outcomes() {
		require.NotContains(t, o, "outcome(", "every outcome is named")
	}
	for status := -1; status < 1000; status++ {
		require.Contains(t, StatusClasses(), statusClass(status))
	}
	for _, v := range []verdict{{kind: verdictSnooze}, {kind: verdictSnooze, throttled: 3}} {
		require.Contains(t, PauseReasons(), v.snoozeReason())
		require.Contains(t, job.SnoozeReasons(), v.snoozeReason())
	}
}
