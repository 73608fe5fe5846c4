package delivery

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
)

// TestMetricLabelsAreKnown keeps the label values this package emits in step
// with the lists internal/metrics creates at 0.
func TestMetricLabelsAreKnown(t *testing.T) {
	t.Parallel()

	var outcomes []string
	for o := outcomeCompleted; o <= outcomeDiscarded; o++ {
		outcomes = append(outcomes, o.String())
	}
	require.ElementsMatch(t, metrics.DeliveryOutcomes, outcomes)
	require.ElementsMatch(t, metrics.SnoozeReasons, []string{job.SnoozeLeaseBusy, job.SnoozeRetryAfter})
	for _, status := range []int{0, 100, 200, 302, 410, 503, 600} {
		require.Contains(t, metrics.StatusClasses, metrics.StatusClass(status))
	}
}
