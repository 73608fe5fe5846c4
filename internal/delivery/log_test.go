package delivery

import (
	"log/slog"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/egress"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/testutil"
)

// attemptRecords returns the "delivery attempt" records logs holds.
func attemptRecords(t *testing.T, logs *testutil.JSONLog) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, rec := range logs.Records(t) {
		if rec["msg"] == "delivery attempt" {
			out = append(out, rec)
		}
	}
	return out
}

func TestAttemptLogLevel(t *testing.T) {
	t.Parallel()

	// setupLogged is setup with the worker logging JSON at level to a buffer.
	setupLogged := func(t *testing.T, level slog.Level) (*testBundle, *testutil.JSONLog) {
		t.Helper()
		b := setup(t)
		logs := &testutil.JSONLog{}
		b.worker = NewWorker(b.worker.cfg, b.db.Pool, egress.NewClient(egress.Config{AllowCIDRs: loopback}),
			endpoint.NewKeyOpener(b.keyring), b.metrics, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: level})))
		return b, logs
	}

	t.Run("SuccessWritesNoInfoLine", func(t *testing.T) {
		t.Parallel()
		b, logs := setupLogged(t, slog.LevelInfo)
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		require.NoError(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))))
		require.EqualValues(t, 1, rc.hits.Load())
		require.Empty(t, attemptRecords(t, logs))
		require.Empty(t, logs.Records(t), "a success writes nothing at info")
	})

	t.Run("SuccessIsLoggedAtDebug", func(t *testing.T) {
		t.Parallel()
		b, logs := setupLogged(t, slog.LevelDebug)
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		require.NoError(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))))
		recs := attemptRecords(t, logs)
		require.Len(t, recs, 1)
		require.Equal(t, "DEBUG", recs[0]["level"])
		require.Equal(t, "completed", recs[0]["outcome"])
	})

	t.Run("FailureWritesAnInfoLine", func(t *testing.T) {
		t.Parallel()
		b, logs := setupLogged(t, slog.LevelInfo)
		rc := newReceiver(t, status(http.StatusInternalServerError))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		requireRetryable(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))))
		recs := attemptRecords(t, logs)
		require.Len(t, recs, 1)
		require.Equal(t, "INFO", recs[0]["level"])
		require.Equal(t, "retryable", recs[0]["outcome"])
		require.EqualValues(t, 500, recs[0]["status"])
		require.Contains(t, recs[0]["error"], "HTTP 500")
	})

	t.Run("RetryAfterSnoozeWritesAnInfoLine", func(t *testing.T) {
		t.Parallel()
		b, logs := setupLogged(t, slog.LevelInfo)
		rc := newReceiver(t, status(http.StatusServiceUnavailable, "Retry-After", "30"))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		requireSnooze(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))))
		recs := attemptRecords(t, logs)
		require.Len(t, recs, 1)
		require.Equal(t, "INFO", recs[0]["level"])
		require.Equal(t, "snoozed", recs[0]["outcome"])
	})
}
