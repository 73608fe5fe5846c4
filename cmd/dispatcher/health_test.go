package main

import (
	"context"
	"errors"
	"log/slog"
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
