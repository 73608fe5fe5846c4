package ingest

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/testutil"
)

// TestMetricLabelsAreKnown: the lists internal/metrics creates at 0 name
// every source and every result this package declares.
func TestMetricLabelsAreKnown(t *testing.T) {
	t.Parallel()

	require.ElementsMatch(t, testutil.StringConsts(t, "Source"), Paths())
	results := testutil.StringConsts(t, "result")
	for o := OutcomeStored; o <= OutcomeDroppedUnknown; o++ {
		require.NotContains(t, o.String(), "Outcome(", "every Outcome is named")
		results = append(results, o.String())
	}
	require.ElementsMatch(t, results, Results())
}
