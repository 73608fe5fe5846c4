package job

import (
	"fmt"
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

func TestDeliverQueue(t *testing.T) {
	t.Parallel()

	endpoints := make([]string, 4000)
	for i := range endpoints {
		endpoints[i] = fmt.Sprintf("00000000-0000-4000-8000-%012d", i)
	}

	t.Run("OneActivePartitionIsTheFirst", func(t *testing.T) {
		t.Parallel()
		for _, ep := range endpoints[:50] {
			require.Equal(t, "deliver_0", DeliverQueue(ep, 1))
			require.Equal(t, "deliver_0", DeliverQueue(ep, 0), "below 1 counts as 1")
		}
	})

	t.Run("SpreadsEvenlyBeyondTwelve", func(t *testing.T) {
		t.Parallel()
		for _, n := range []int{2, 3, 12, 13, 20} {
			per := make([]int, n)
			for _, ep := range endpoints {
				p := DeliverPartition(ep, n)
				require.True(t, p >= 0 && p < n, "partition %d of %d", p, n)
				per[p]++
			}
			want := len(endpoints) / n
			for p, c := range per {
				require.InDelta(t, want, c, float64(want)/4, "%d partitions: partition %d has %d endpoints", n, p, c)
			}
		}
	})

	t.Run("OnePartitionMoreMovesOnlyWhatGoesToIt", func(t *testing.T) {
		t.Parallel()
		for n := 1; n <= 20; n++ {
			moved := 0
			for _, ep := range endpoints {
				before, after := DeliverPartition(ep, n), DeliverPartition(ep, n+1)
				if before != after {
					require.Equal(t, n, after, "from %d to %d partitions an endpoint moves only to the new one", n, n+1)
					moved++
				}
			}
			want := len(endpoints) / (n + 1)
			require.InDelta(t, want, moved, float64(want)/4, "from %d to %d partitions about 1/%d of the endpoints move", n, n+1, n+1)
		}
	})
}
