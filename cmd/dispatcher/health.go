package main

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
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

// healthz answers /healthz with a database ping, reusing a result for up to
// every: a burst of probes (several kubelets, a load balancer, a scraper)
// costs the database one ping per period, not one per request. Requests
// arriving during a ping wait for it and share its answer.
type healthz struct {
	db    pinger
	every time.Duration
	now   func() time.Time
	mu    sync.Mutex
	at    time.Time
	err   error
	valid bool
}

// healthzPingTimeout bounds one ping, so a hung database answers 503 in
// time for a probe instead of never.
const healthzPingTimeout = 5 * time.Second

// newHealthz returns the /healthz handler; now nil means time.Now.
func newHealthz(db pinger, every time.Duration, now func() time.Time) *healthz {
	if now == nil {
		now = time.Now
	}
	return &healthz{db: db, every: every, now: now}
}

func (h *healthz) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	if !h.valid || h.now().Sub(h.at) >= h.every {
		// Not the request's context: its answer is shared, and one probe
		// giving up must not turn into a cached failure for the others.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), healthzPingTimeout)
		h.err = h.db.Ping(ctx)
		cancel()
		h.at, h.valid = h.now(), true
	}
	err := h.err
	h.mu.Unlock()
	w.Header().Set("Cache-Control", "no-store")
	if err != nil {
		http.Error(w, "database unreachable", http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ok\n")
}
