package scope

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/testutil"
)

// TestMetricLabelsAreKnown: the lists internal/metrics creates at 0 name
// every rule and result this package declares.
func TestMetricLabelsAreKnown(t *testing.T) {
	t.Parallel()

	require.ElementsMatch(t, testutil.StringConsts(t, "Rule"), Rules())
	require.ElementsMatch(t, testutil.StringConsts(t, "Result"), Results())
}
