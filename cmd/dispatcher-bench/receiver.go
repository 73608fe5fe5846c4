package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// receipt is one POST a receiver got.
type receipt struct {
	endpoint int32
	id       string
	at       time.Time
}

// receivers are the loopback webhook receivers of one scenario: endpoint i is
// http://127.0.0.1:<port of host i mod hosts>/e/i. Each host is its own
// listener, so the dispatcher's per-host connection pools behave as with
// receivers on distinct machines (with -one-host there is one listener and
// every endpoint is a path on it). Handlers answer 200 at once (after the
// optional latency) and keep connections alive. Every TCP connection the
// listeners accept is counted, to show the churn of the dispatcher's HTTP
// client pool.
type receivers struct {
	latency time.Duration
	// hung: endpoints 0..hung-1 never answer (S11): their requests are held
	// until the sender gives up, and nothing of them is recorded.
	hung    int
	servers []*http.Server
	ports   []int

	// conns counts the TCP connections accepted (http.StateNew).
	conns atomic.Int64

	mu       sync.Mutex
	receipts []receipt
	seen     map[receiptKey]struct{}

	unique    atomic.Int64
	dups      atomic.Int64
	bad       atomic.Int64
	inflight  []atomic.Int32
	maxFlight []atomic.Int32
}

type receiptKey struct {
	endpoint int32
	id       string
}

// newReceivers starts the receivers of a scenario: endpoints spread over
// hosts listeners, or all on one with -one-host.
func (b *bench) newReceivers(endpoints, hosts int, latency time.Duration, expect int) (*receivers, error) {
	if b.cfg.OneHost {
		hosts = 1
	}
	return newReceivers(endpoints, hosts, latency, expect)
}

func newReceivers(endpoints, hosts int, latency time.Duration, expect int) (*receivers, error) {
	hosts = max(1, min(hosts, endpoints))
	r := &receivers{
		latency:   latency,
		receipts:  make([]receipt, 0, expect),
		seen:      make(map[receiptKey]struct{}, expect),
		inflight:  make([]atomic.Int32, endpoints),
		maxFlight: make([]atomic.Int32, endpoints),
	}
	for range hosts {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			r.close()
			return nil, fmt.Errorf("receiver listen (raise ulimit -n for many hosts): %w", err)
		}
		srv := &http.Server{
			Handler:           http.HandlerFunc(r.serve),
			ReadHeaderTimeout: 10 * time.Second,
			IdleTimeout:       2 * time.Minute,
			ConnState: func(_ net.Conn, st http.ConnState) {
				if st == http.StateNew {
					r.conns.Add(1)
				}
			},
		}
		r.servers = append(r.servers, srv)
		r.ports = append(r.ports, lis.Addr().(*net.TCPAddr).Port)
		go func() { _ = srv.Serve(lis) }()
	}
	return r, nil
}

// hosts is the number of listeners (receiver hosts).
func (r *receivers) hosts() int { return len(r.servers) }

func (r *receivers) url(endpoint int) string {
	return "http://127.0.0.1:" + strconv.Itoa(r.ports[endpoint%len(r.ports)]) + "/e/" + strconv.Itoa(endpoint)
}

func (r *receivers) serve(w http.ResponseWriter, req *http.Request) {
	at := time.Now()
	idx, err := strconv.Atoi(strings.TrimPrefix(req.URL.Path, "/e/"))
	id := req.Header.Get("webhook-id")
	if err != nil || idx < 0 || idx >= len(r.inflight) || req.Method != http.MethodPost || id == "" {
		r.bad.Add(1)
		http.Error(w, "not a bench endpoint", http.StatusNotFound)
		return
	}
	if idx < r.hung {
		<-req.Context().Done()
		return
	}
	n := r.inflight[idx].Add(1)
	for {
		m := r.maxFlight[idx].Load()
		if n <= m || r.maxFlight[idx].CompareAndSwap(m, n) {
			break
		}
	}
	_, _ = io.Copy(io.Discard, req.Body)

	k := receiptKey{int32(idx), id}
	r.mu.Lock()
	_, dup := r.seen[k]
	if !dup {
		r.seen[k] = struct{}{}
		r.receipts = append(r.receipts, receipt{endpoint: k.endpoint, id: id, at: at})
	}
	r.mu.Unlock()
	if dup {
		r.dups.Add(1)
	} else {
		r.unique.Add(1)
	}
	if r.latency > 0 {
		time.Sleep(r.latency)
	}
	r.inflight[idx].Add(-1)
	w.WriteHeader(http.StatusOK)
}

// wait blocks until target distinct deliveries arrived, ctx ends, or nothing
// new arrived for stallTimeout (then it reports how many are missing). Completion
// times come from the receipts, so the polling step does not matter.
func (r *receivers) wait(ctx context.Context, target int64) error {
	const stall = stallTimeout
	last, lastAt := r.unique.Load(), time.Now()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		n := r.unique.Load()
		if n >= target {
			return nil
		}
		if n != last {
			last, lastAt = n, time.Now()
		} else if time.Since(lastAt) > stall {
			return fmt.Errorf("%d of %d deliveries arrived; none for %s", n, target, stall)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d deliveries arrived: %w", n, target, ctx.Err())
		case <-tick.C:
		}
	}
}

// snapshot returns the receipts so far (a copy).
func (r *receivers) snapshot() []receipt {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]receipt(nil), r.receipts...)
}

// maxConcurrency is the most POSTs one endpoint ever had in flight at once.
func (r *receivers) maxConcurrency() int {
	m := int32(0)
	for i := range r.maxFlight {
		m = max(m, r.maxFlight[i].Load())
	}
	return int(m)
}

func (r *receivers) close() {
	var wg sync.WaitGroup
	for _, s := range r.servers {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			if err := s.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
				_ = s.Close()
			}
		})
	}
	wg.Wait()
}
