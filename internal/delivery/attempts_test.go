package delivery

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
	"github.com/standmeet/webhook-dispatcher/internal/egress"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/testtime"
)

// withAttempts gives the bundle's worker an attempt recorder keeping
// bodyBytes of each body.
func (b *testBundle) withAttempts(t *testing.T, bodyBytes int) *attempt.Recorder {
	t.Helper()
	rec := attempt.NewRecorder(attempt.RecorderConfig{BodyBytes: bodyBytes}, b.db.Pool, slog.New(slog.DiscardHandler))
	b.worker = NewWorker(Config{Attempts: rec}, b.db.Pool, b.worker.client, endpoint.NewKeyOpener(b.keyring), b.metrics, slog.New(slog.DiscardHandler))
	return rec
}

// attempts flushes rec and returns the delivery's attempts, newest first.
func (b *testBundle) attempts(t *testing.T, rec *attempt.Recorder, deliveryID int64) []attempt.Attempt {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, rec.Flush(ctx))
	got, err := attempt.List(ctx, b.db.Pool, "owner-1", deliveryID, 0, 100)
	require.NoError(t, err)
	return got
}

func TestAttemptHistory(t *testing.T) {
	t.Parallel()

	t.Run("RecordsFailureThenSuccessWithStatusBodyAndError", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.withAttempts(t, attempt.DefaultBodyBytes)
		fail := true
		rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) {
			if fail {
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = w.Write([]byte("upstream \x00down\xff " + strings.Repeat("x", 2000)))
				return
			}
			_, _ = w.Write([]byte(`{"ok":true}`))
		})
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{ownerID: "owner-1", enabled: true})
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		before := time.Now()
		requireRetryable(t, b.work(t, j))
		fail = false
		j.Attempt = 2
		require.NoError(t, b.work(t, j))

		got := b.attempts(t, rec, j.ID)
		require.Len(t, got, 2, "one row per attempt")
		ok, failed := got[0], got[1]
		require.Equal(t, attempt.OutcomeSuccess, ok.Outcome)
		require.Equal(t, 200, ok.Status)
		require.JSONEq(t, `{"ok":true}`, ok.Body, "kept as text, never parsed")
		require.Empty(t, ok.Error)
		require.Equal(t, 2, ok.Number)

		require.Equal(t, attempt.OutcomeHTTP5xx, failed.Outcome)
		require.Equal(t, 500, failed.Status)
		require.Equal(t, 1, failed.Number)
		require.Len(t, failed.Body, attempt.DefaultBodyBytes+4, "the first KiB of the body (the two replaced bytes became three each)")
		require.True(t, strings.HasPrefix(failed.Body, "upstream \uFFFDdown\uFFFD x"), "NUL and invalid UTF-8 made safe: %q", failed.Body[:20])
		require.True(t, strings.HasPrefix(failed.Error, "HTTP 500: upstream"), failed.Error)
		require.Equal(t, epID, failed.EndpointID)
		require.Equal(t, j.Args.EventID, failed.EventID)
		require.False(t, failed.StartedAt.Before(before.Add(-time.Second)))
		require.Positive(t, failed.Duration)
		require.Nil(t, failed.SnoozedUntil)

		stats, err := attempt.Stats(context.Background(), b.db.Pool, []uuid.UUID{epID}, time.Now())
		require.NoError(t, err)
		hour := stats[0].Windows[attempt.WindowHour]
		require.Equal(t, int64(2), hour.Attempts)
		require.Equal(t, int64(1), hour.Successes)
		require.Equal(t, int64(1), hour.HTTP5xx)
	})

	t.Run("RecordsRetryAfterSnoozeWithUntil", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.withAttempts(t, attempt.DefaultBodyBytes)
		rc := newReceiver(t, status(http.StatusTooManyRequests, "Retry-After", "120"))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{ownerID: "owner-1", enabled: true})
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		before := time.Now()
		requireSnooze(t, b.work(t, j))
		after := time.Now()

		got := b.attempts(t, rec, j.ID)
		require.Len(t, got, 1)
		require.Equal(t, attempt.OutcomeRetryAfter, got[0].Outcome)
		require.Equal(t, 429, got[0].Status)
		require.NotNil(t, got[0].SnoozedUntil)
		testtime.RequireBetween(t, before.Add(120*time.Second).Truncate(time.Microsecond), after.Add(120*time.Second), *got[0].SnoozedUntil)
		require.Equal(t, job.SnoozeRetryAfter, got[0].SnoozeReason)
	})

	t.Run("ThrottledSnoozeKeepsTheAnswersClass", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.withAttempts(t, attempt.DefaultBodyBytes)
		rc := newReceiver(t, status(http.StatusTooManyRequests))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{ownerID: "owner-1", enabled: true})
		runWorker(t, b.worker) // the run of 429s is counted in the lingering lane
		for range throttleRun - 1 {
			requireRetryable(t, b.work(t, b.asProbe(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x")))))
		}
		j := b.asProbe(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x")))
		requireSnooze(t, b.work(t, j))

		got := b.attempts(t, rec, j.ID)
		require.Len(t, got, 1)
		require.Equal(t, attempt.OutcomeHTTP4xx, got[0].Outcome, "a 429 without Retry-After")
		require.Equal(t, job.SnoozeThrottled, got[0].SnoozeReason)
		require.NotNil(t, got[0].SnoozedUntil)
	})

	t.Run("RecordsCancelOn4xxWithoutRiversPrefix", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.withAttempts(t, attempt.DefaultBodyBytes)
		rc := newReceiver(t, status(http.StatusGone))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{ownerID: "owner-1", enabled: true})
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		requireCancel(t, b.work(t, j))

		got := b.attempts(t, rec, j.ID)
		require.Len(t, got, 1)
		require.Equal(t, attempt.OutcomeHTTP4xx, got[0].Outcome)
		require.Equal(t, "HTTP 410: Gone", got[0].Error)
	})

	t.Run("RecordsConnectionFailureAndBlockedDestination", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.withAttempts(t, attempt.DefaultBodyBytes)
		lis, err := new(net.ListenConfig).Listen(context.Background(), "tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := lis.Addr().String()
		require.NoError(t, lis.Close())
		epID, _ := b.createEndpoint(t, "http://"+addr+"/hook", endpointOpts{ownerID: "owner-1", enabled: true})
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		requireRetryable(t, b.work(t, j))
		got := b.attempts(t, rec, j.ID)
		require.Len(t, got, 1)
		require.Equal(t, attempt.OutcomeConnection, got[0].Outcome)
		require.Zero(t, got[0].Status)
		require.Contains(t, got[0].Error, "request failed")

		b.worker.client = egress.NewClient(egress.Config{}) // production policy: loopback denied
		rc := newReceiver(t, status(http.StatusOK))
		ep2, _ := b.createEndpoint(t, rc.URL, endpointOpts{ownerID: "owner-1", enabled: true})
		j2 := b.runningJob(t, ep2, b.insertEvent(t, "owner-1", "code.issued", "code://y"))
		requireCancel(t, b.work(t, j2))
		got = b.attempts(t, rec, j2.ID)
		require.Len(t, got, 1)
		require.Equal(t, attempt.OutcomeBlocked, got[0].Outcome)
		require.Contains(t, got[0].Error, "destination not allowed")
	})

	t.Run("TimeoutIsItsOwnClass", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.withAttempts(t, attempt.DefaultBodyBytes)
		b.worker.client = egress.NewClient(egress.Config{AllowCIDRs: loopback, Timeout: 200 * time.Millisecond})
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		rc := newReceiver(t, func(http.ResponseWriter, *http.Request) {
			select {
			case <-release:
			case <-time.After(5 * time.Second):
			}
		})
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{ownerID: "owner-1", enabled: true})
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		requireRetryable(t, b.work(t, j))
		got := b.attempts(t, rec, j.ID)
		require.Len(t, got, 1)
		require.Equal(t, attempt.OutcomeTimeout, got[0].Outcome)
		require.GreaterOrEqual(t, got[0].Duration, 150*time.Millisecond)
	})

	t.Run("BodyBytesZeroKeepsNoBody", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.withAttempts(t, 0)
		rc := newReceiver(t, status(http.StatusInternalServerError))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{ownerID: "owner-1", enabled: true})
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		requireRetryable(t, b.work(t, j))
		got := b.attempts(t, rec, j.ID)
		require.Len(t, got, 1)
		require.Empty(t, got[0].Body)
		require.Equal(t, "HTTP 500: Internal Server Error", got[0].Error, "the error summary still reads the body")
	})

	t.Run("LeaseBusySnoozeIsNoAttempt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rec := b.withAttempts(t, attempt.DefaultBodyBytes)
		b.worker.cfg.LocalWait = 10 * time.Millisecond
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{ownerID: "owner-1", enabled: true})
		_, err := b.db.Pool.Exec(context.Background(), `UPDATE webhook_endpoints SET busy_until = now() + interval '1 minute', lease_token = gen_random_uuid() WHERE id = $1`, epID)
		require.NoError(t, err)
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		requireSnooze(t, b.work(t, j))
		require.Empty(t, b.attempts(t, rec, j.ID), "nothing was sent; ListDeliveries says why it waits")
	})
}
