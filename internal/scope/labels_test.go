package scope

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/metrics"
)

// TestMetricLabelsAreKnown keeps the rule names this package emits in step
// with the list internal/metrics creates at 0.
func TestMetricLabelsAreKnown(t *testing.T) {
	t.Parallel()

	require.ElementsMatch(t, metrics.ScopeRules,
		[]string{RuleRaw, RuleInternal, RuleOwner, RuleTestTarget, RulePublishedSlice, RuleEmbed, RuleUnscoped})
}
