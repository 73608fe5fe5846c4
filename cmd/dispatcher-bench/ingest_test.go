package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestIngestNote(t *testing.T) {
	t.Parallel()

	t.Run("KeysOnlyTheGRPCPathsWait", func(t *testing.T) {
		t.Parallel()
		k, ok := ingestHistogram("dispatcher_ingest_wait_seconds_bucket", `{path="grpc",le="0.005"}`)
		require.True(t, ok)
		require.Equal(t, "dispatcher_ingest_wait_seconds/le/0.005", k)
		_, ok = ingestHistogram("dispatcher_ingest_wait_seconds_bucket", `{path="outbox",le="0.005"}`)
		require.False(t, ok)
		k, ok = ingestHistogram("dispatcher_ingest_transaction_seconds_count", "")
		require.True(t, ok)
		require.Equal(t, "dispatcher_ingest_transaction_seconds/count", k)
		_, ok = ingestHistogram("dispatcher_ingest_events_total", `{path="grpc",result="stored"}`)
		require.False(t, ok)
	})

	t.Run("MeanAndInterpolatedQuantiles", func(t *testing.T) {
		t.Parallel()
		// 100 waits: 50 up to 1 ms, 40 more up to 5 ms, 10 more up to 10 ms.
		note := ingestNote(map[string]float64{
			"dispatcher_ingest_wait_seconds/le/0.001": 50,
			"dispatcher_ingest_wait_seconds/le/0.005": 90,
			"dispatcher_ingest_wait_seconds/le/0.01":  100,
			"dispatcher_ingest_wait_seconds/le/+Inf":  100,
			"dispatcher_ingest_wait_seconds/sum":      0.2,
			"dispatcher_ingest_wait_seconds/count":    100,
		})
		require.Equal(t, "dispatcher's ingest metrics: wait for a group transaction (grpc) mean 2.0ms p50 ~1.0 p99 ~9.5 (100)", note)
		require.Empty(t, ingestNote(map[string]float64{}), "an older binary exports none")
	})
}
