package job

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAttempts(t *testing.T) {
	t.Parallel()

	t.Run("CountTakesProbesOutOfRiversCounts", func(t *testing.T) {
		t.Parallel()
		// River's sixth attempt of 20, after probes as its third and fifth.
		mark := ReadProbeMark([]byte(`{"probes": 2, "probe_attempts": [3, 5], "output": {}}`))
		require.Equal(t, Attempts{Attempt: 4, Max: DeliverMaxAttempts, Probes: 2}, mark.Count(6, 20))
		require.Equal(t, "attempt 4 of 18, 2 probes", mark.Count(6, 20).String())
		// River's fifth attempt was the second probe.
		require.Equal(t, Attempts{Attempt: 3, Max: DeliverMaxAttempts, Probes: 2, Probe: true}, mark.Count(5, 20))
		require.Equal(t, "probe 2, after attempt 3 of 18", mark.Count(5, 20).String())
	})

	t.Run("AQueuedProbeIsNotTakenOffTheAttemptsSpent", func(t *testing.T) {
		t.Parallel()
		// Two attempts spent, then a probe queued (marked as River's
		// third attempt, max_attempts raised to 19) that no worker has run
		// yet: still "attempt 2 of 18", not "1 of 18".
		mark := ReadProbeMark([]byte(`{"probes": 1, "probe_attempts": [3], "probe_due": "2026-01-01T00:00:00Z"}`))
		require.Equal(t, Attempts{Attempt: 2, Max: DeliverMaxAttempts}, mark.Count(2, DeliverMaxAttempts+1))
		// Running: the probe is River's third attempt.
		require.Equal(t, Attempts{Attempt: 2, Max: DeliverMaxAttempts, Probes: 1, Probe: true}, mark.Count(3, DeliverMaxAttempts+1))
		// A second probe queued after it and a scheduled attempt.
		mark = ReadProbeMark([]byte(`{"probes": 2, "probe_attempts": [3, 5]}`))
		require.Equal(t, Attempts{Attempt: 3, Max: DeliverMaxAttempts, Probes: 1}, mark.Count(4, DeliverMaxAttempts+2))
	})

	t.Run("NeverProbed", func(t *testing.T) {
		t.Parallel()
		for _, md := range []string{``, `{}`, `{"output": {"snooze_reason": "direct"}}`, `not json`} {
			n := ReadProbeMark([]byte(md)).Count(4, DeliverMaxAttempts)
			require.Equal(t, Attempts{Attempt: 4, Max: DeliverMaxAttempts}, n, md)
			require.Equal(t, "attempt 4 of 18", n.String())
		}
	})

	t.Run("OneProbe", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "attempt 2 of 18, 1 probe", Attempts{Attempt: 2, Max: 18, Probes: 1}.String())
	})

	t.Run("CountNeverGoesNegative", func(t *testing.T) {
		t.Parallel()
		// A mark that claims more probes than attempts (hand-edited).
		n := ProbeMark{Probes: 5}.Count(2, 3)
		require.Equal(t, Attempts{Attempt: 0, Max: 1, Probes: 2}, n)
	})

	t.Run("HeaderRoundTrips", func(t *testing.T) {
		t.Parallel()
		for _, n := range []Attempts{
			{Attempt: 1, Max: 18},
			{Attempt: 4, Max: 18, Probes: 2},
			{Attempt: 3, Max: 18, Probes: 2, Probe: true},
		} {
			got, ok := ParseAttemptHeader(n.Header())
			require.True(t, ok, n.Header())
			require.Equal(t, n, got)
		}
		require.Equal(t, "attempt=3, max=18, probes=2, probe", Attempts{Attempt: 3, Max: 18, Probes: 2, Probe: true}.Header())
	})

	t.Run("HeaderRefusesWhatItCannotRead", func(t *testing.T) {
		t.Parallel()
		for _, v := range []string{"", "attempt=1", "max=18", "attempt=x, max=18", "attempt=-1, max=18", "4/19"} {
			_, ok := ParseAttemptHeader(v)
			require.False(t, ok, v)
		}
	})
}

// BenchmarkAttemptsHeader is what every delivery attempt adds: the probe
// mark read from the job's metadata and the Dispatcher-Attempt value.
func BenchmarkAttemptsHeader(b *testing.B) {
	for _, md := range []struct{ name, metadata string }{
		{"NeverProbed", `{"output": {"snooze_reason": "direct", "snooze_until": "2026-12-01T10:00:00Z"}}`},
		{"Probed", `{"probes": 2, "probe_due": "2026-12-01T10:00:00Z", "probe_attempts": [3, 5]}`},
	} {
		b.Run(md.name, func(b *testing.B) {
			metadata := []byte(md.metadata)
			b.ReportAllocs()
			for b.Loop() {
				_ = ReadProbeMark(metadata).Count(6, 20).Header()
			}
		})
	}
}
