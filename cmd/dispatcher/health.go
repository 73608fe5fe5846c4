package main

import (
	"context"
	"log/slog"
	"time"

	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// healthEvery is how often the API services' health looks at the database.
const healthEvery = 2 * time.Second

// pinger is what followDatabase needs of the pool.
type pinger interface {
	Ping(ctx context.Context) error
}

// followDatabase keeps the gRPC health of the API services (services) in step
// with the database, as /healthz is: NOT_SERVING while a ping fails (a
// readiness probe, or a client that checks health, then sends calls to
// another replica: every one of them needs the database), SERVING again once
// one succeeds. The server as a whole ("") is left SERVING for as long as
// the process runs: it is what a liveness check asks, and restarting the
// process would not bring the database back. It returns when ctx is done.
// It starts from SERVING, which serve sets once River has started.
func followDatabase(ctx context.Context, db pinger, hs *health.Server, services []string, every time.Duration, logger *slog.Logger) {
	up := true
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		pctx, cancel := context.WithTimeout(ctx, every)
		err := db.Ping(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if (err == nil) == up {
			continue
		}
		up = err == nil
		status := healthpb.HealthCheckResponse_SERVING
		if up {
			logger.InfoContext(ctx, "database reachable again: the API services' gRPC health is SERVING")
		} else {
			status = healthpb.HealthCheckResponse_NOT_SERVING
			logger.WarnContext(ctx, "database unreachable: the API services' gRPC health is NOT_SERVING until it answers", slog.Any("error", err))
		}
		for _, s := range services {
			hs.SetServingStatus(s, status)
		}
	}
}
