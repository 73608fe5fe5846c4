package delivery

import (
	"context"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// With tracing off (this package's tests install no provider), an attempt's
// span costs nothing: the hot path stays as it was.
//
// Not parallel: testing.AllocsPerRun refuses to run in a parallel test.
func TestHTTPSpanOffIsFree(t *testing.T) { //nolint:paralleltest // testing.AllocsPerRun refuses to run in a parallel test
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://127.0.0.1:8080/hook?token=x", nil)
	require.NoError(t, err)
	j := &river.Job[job.DeliverArgs]{Args: job.DeliverArgs{EventID: "e"}}
	allocs := testing.AllocsPerRun(1000, func() {
		span := startHTTPSpan(req.Context(), req, uuid.Nil, j)
		endHTTPSpan(span, http.StatusOK, verdict{})
	})
	require.Zero(t, allocs)
}

func BenchmarkHTTPSpanOff(b *testing.B) {
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://127.0.0.1:8080/hook", nil)
	j := &river.Job[job.DeliverArgs]{Args: job.DeliverArgs{EventID: "e"}}
	b.ReportAllocs()
	for b.Loop() {
		span := startHTTPSpan(req.Context(), req, uuid.Nil, j)
		endHTTPSpan(span, http.StatusOK, verdict{})
	}
}
