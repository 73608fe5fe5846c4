package job

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/testutil"
)

// TestLabelValues: the lists the metrics are created from name every
// constant of their kind, so a new one cannot be left out.
func TestLabelValues(t *testing.T) {
	t.Parallel()

	t.Run("SnoozeReasons", func(t *testing.T) {
		t.Parallel()
		reasons := slices.DeleteFunc(testutil.StringConsts(t, "Snooze"), func(r string) bool { return r == SnoozeDirect })
		require.ElementsMatch(t, reasons, SnoozeReasons())
	})

	t.Run("Kinds", func(t *testing.T) {
		t.Parallel()
		require.ElementsMatch(t, testutil.StringConsts(t, "Kind"), Kinds())
	})
}
