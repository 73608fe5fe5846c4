package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// fakePinger fails while down is set.
type fakePinger struct{ down atomic.Bool }

func (p *fakePinger) Ping(context.Context) error {
	if p.down.Load() {
		return errors.New("connection refused")
	}
	return nil
}

func TestFollowDatabase(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		const api = "webhooks.v1.EventService"
		hs := health.NewServer()
		for _, s := range []string{"", api} {
			hs.SetServingStatus(s, healthpb.HealthCheckResponse_SERVING)
		}
		status := func(service string) healthpb.HealthCheckResponse_ServingStatus {
			res, err := hs.Check(context.Background(), &healthpb.HealthCheckRequest{Service: service})
			require.NoError(t, err)
			return res.GetStatus()
		}
		db := &fakePinger{}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			followDatabase(ctx, db, hs, []string{api}, time.Second, slog.New(slog.DiscardHandler))
			close(done)
		}()

		time.Sleep(1500 * time.Millisecond)
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, status(api))

		db.down.Store(true)
		time.Sleep(time.Second) // the next look
		synctest.Wait()
		require.Equal(t, healthpb.HealthCheckResponse_NOT_SERVING, status(api), "not ready while the database is away")
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, status(""), "the process itself is alive")

		db.down.Store(false)
		time.Sleep(time.Second)
		synctest.Wait()
		require.Equal(t, healthpb.HealthCheckResponse_SERVING, status(api), "ready again")

		cancel()
		<-done
	})
}

// countingPinger counts pings and fails while down is set.
type countingPinger struct {
	fakePinger
	pings atomic.Int32
}

func (p *countingPinger) Ping(ctx context.Context) error {
	p.pings.Add(1)
	return p.fakePinger.Ping(ctx)
}

func TestHealthzCached(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		db := &countingPinger{}
		h := newHealthz(db, time.Second, nil)
		get := func() int {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
			return rec.Code
		}
		for range 50 {
			require.Equal(t, http.StatusOK, get())
		}
		require.Equal(t, int32(1), db.pings.Load(), "50 probes within a second: one ping")

		db.down.Store(true)
		require.Equal(t, http.StatusOK, get(), "the cached answer, for under a second")
		time.Sleep(time.Second)
		require.Equal(t, http.StatusServiceUnavailable, get())
		require.Equal(t, int32(2), db.pings.Load())

		db.down.Store(false)
		time.Sleep(time.Second)
		require.Equal(t, http.StatusOK, get())
		require.Equal(t, int32(3), db.pings.Load())
	})
}
