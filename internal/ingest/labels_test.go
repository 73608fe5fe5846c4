package ingest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/metrics"
)

// TestMetricLabelsAreKnown keeps the label values this package emits in step
// with the lists internal/metrics creates at 0.
func TestMetricLabelsAreKnown(t *testing.T) {
	t.Parallel()

	require.ElementsMatch(t, metrics.IngestPaths, []string{string(SourceGRPC), string(SourceOutbox), string(SourceTest), string(SourceOperational)})
	results := []string{resultInvalid, resultConflict}
	for o := OutcomeStored; o <= OutcomeDroppedUnknown; o++ {
		results = append(results, o.String())
	}
	require.ElementsMatch(t, metrics.IngestResults, results)
}
