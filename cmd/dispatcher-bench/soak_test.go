package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestSoakLevels(t *testing.T) {
	t.Parallel()

	type testBundle struct{ fig *soakFigures }

	// setup makes n samples 60 s apart after a 300 s warm-up, every series
	// flat at 100 with one spike, every table at 1,000 rows.
	setup := func(t *testing.T, n int) *testBundle {
		t.Helper()
		fig := &soakFigures{WarmupS: 300, StatsBound: 31400, ConnBound: 43}
		for i := range n + 5 {
			sm := soakSample{AtS: float64(i * 60), RSSMB: 100, HeapInuseMB: 100, Goroutines: 100, DBConns: 20, SchemaMB: 100,
				Tables: make([]soakTableSize, len(soakTables))}
			for j := range sm.Tables {
				sm.Tables[j] = soakTableSize{Rows: 1000, MB: 10}
			}
			fig.Samples = append(fig.Samples, sm)
		}
		fig.Samples[len(fig.Samples)-2].HeapInuseMB = 400 // a spike is not growth
		return &testBundle{fig: fig}
	}
	level := func(t *testing.T, levels []soakLevel, series string) soakLevel {
		t.Helper()
		for _, l := range levels {
			if l.Series == series {
				return l
			}
		}
		t.Fatalf("no series %q", series)
		return soakLevel{}
	}

	t.Run("FlatSeriesLevelOff", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 10)
		for _, l := range soakLevels(b.fig) {
			require.True(t, l.Judged, l.Series)
			require.True(t, l.Level, "%s: %+v", l.Series, l)
		}
		require.InDelta(t, 400, level(t, soakLevels(b.fig), "heap in use MB").Max, 0.01, "the spike is reported as the highest value")
	})

	t.Run("GrowingSeriesGrow", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 10)
		for i := range b.fig.Samples {
			b.fig.Samples[i].RSSMB = 100 + 10*float64(i) // 10 MB a minute
			b.fig.Samples[i].Tables[1].Rows = int64(1000 + 100*i)
		}
		levels := soakLevels(b.fig)
		rss := level(t, levels, "RSS MB")
		require.False(t, rss.Level)
		require.InDelta(t, 100*(220.0-170.0)/170.0, rss.GrowthPct, 0.1, "medians of samples 5-9 and 10-14")
		require.False(t, level(t, levels, "events rows").Level)
		require.True(t, level(t, levels, "river_job rows").Level)
	})

	t.Run("BoundedSeriesAgainstTheirBound", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 10)
		for i := range b.fig.Samples {
			b.fig.Samples[i].Tables[3].Rows = int64(100 * (i + 1)) // endpoint_stats fills up
			b.fig.Samples[i].DBConns = int64(10 + i)
		}
		levels := soakLevels(b.fig)
		stats := level(t, levels, "endpoint_stats rows")
		require.True(t, stats.Bounded)
		require.True(t, stats.Level, "growing, but within the bound")
		conns := level(t, levels, "DB connections")
		require.True(t, conns.Level, "24 ≤ 43")

		b.fig.Samples[len(b.fig.Samples)-3].DBConns = 44
		require.False(t, level(t, soakLevels(b.fig), "DB connections").Level, "past the pool")
		for _, l := range levels {
			require.NotEqual(t, "endpoint_stats MB", l.Series, "judged by its rows")
		}
	})

	t.Run("TooShortIsNotJudged", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 3)
		b.fig.Levels = soakLevels(b.fig)
		for _, l := range b.fig.Levels {
			require.False(t, l.Judged, l.Series)
		}
		var out bytes.Buffer
		writeSoak(&out, b.fig)
		require.Contains(t, out.String(), "levels: not judged: 3 samples after the 300 s warm-up")
		require.Len(t, targets(&result{Scenario: "soak", Soak: b.fig}), 1, "only the RSS ceiling")
	})
}

func TestMedian(t *testing.T) {
	t.Parallel()
	require.InDelta(t, 2.0, median([]float64{3, 1, 2}), 0)
	require.InDelta(t, 2.5, median([]float64{4, 1, 3, 2}), 0)
	require.InDelta(t, 0.0, median(nil), 0)
}

func TestSoakEvery(t *testing.T) {
	t.Parallel()

	t.Run("WalksThroughThePruneCycle", func(t *testing.T) {
		t.Parallel()
		// An hour at a 5-minute retention: the prune job runs every minute,
		// and a thirtieth of the hour (capped at a minute) would divide it.
		require.Equal(t, 55*time.Second, soakEvery(0, time.Hour, time.Minute))
		// 10 minutes: 20 s divides the minute too.
		every := soakEvery(0, 10*time.Minute, time.Minute)
		require.NotZero(t, time.Minute%every)
	})

	t.Run("KeepsAnIntervalThatDoesNotDivide", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, 35*time.Second, soakEvery(0, 35*30*time.Second, time.Minute))
	})

	t.Run("KeepsWhatTheCallerSet", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, time.Minute, soakEvery(time.Minute, time.Hour, time.Minute))
	})
}
