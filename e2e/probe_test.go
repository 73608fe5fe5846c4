package e2e

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// TestReceiverOutageRecovery takes a receiver down for a minute (HTTP 503)
// while events are published before, during and after the outage. Its
// deliveries are held while the endpoint fails (the cool-down, the 5-minute
// retry step), and recovery probing sends one of them on a short backoff:
// the first that succeeds after the receiver is back releases every held
// delivery at once, so all of them arrive seconds after the return instead
// of up to five minutes later.
func TestReceiverOutageRecovery(t *testing.T) {
	t.Parallel()
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})
	t.Cleanup(func() {
		if t.Failed() {
			t.Log(d.logs.String())
		}
	})

	const (
		owner  = "probe-owner"
		outage = 60 * time.Second
	)
	var (
		down      atomic.Bool
		mu        sync.Mutex
		delivered = map[string]time.Time{} // webhook-id → first 2xx
	)
	down.Store(true)
	rc := newReceiver(t)
	rc.setHandler(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		mu.Lock()
		if _, ok := delivered[r.Header.Get("webhook-id")]; !ok {
			delivered[r.Header.Get("webhook-id")] = time.Now()
		}
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	ep := createEndpoint(t, d, owner, rc.URL, "code.*").GetEndpoint()

	var ids []string
	publishOne := func(phase string, i int) {
		e := newEvent(owner, "code.issued", fmt.Sprintf("code://%s/%d", phase, i), `{}`)
		publish(t, d, e)
		ids = append(ids, e.GetId())
	}
	// Before: queued as the receiver goes down.
	for i := range 5 {
		publishOne("before", i)
	}
	outageStart := time.Now()
	waitFor(t, 30*time.Second, "the endpoint to be failing", func() bool {
		got, err := d.endpoints().GetEndpoint(adminCtx(t), &webhooksv1.GetEndpointRequest{OwnerId: owner, EndpointId: ep.GetId()})
		require.NoError(t, err)
		return got.GetEndpoint().GetFailingSince() != nil && got.GetEndpoint().GetNextProbeAt() != nil
	})
	// During: one every 5 s.
	for i := 0; time.Since(outageStart) < outage; i++ {
		publishOne("during", i)
		time.Sleep(5 * time.Second)
	}
	down.Store(false)
	back := time.Now()
	// After: published while the endpoint still counts as failing, so they
	// start behind the cool-down.
	for i := range 3 {
		publishOne("after", i)
	}

	// The bound is a liveness bound, generous for a loaded machine (the
	// next probe is due at most ~40 s after the return; on an idle machine
	// everything arrives 10-20 s after it), and far short of the 5-minute
	// cool-down and retry step that held deliveries would wait without
	// probing.
	waitFor(t, 90*time.Second, "every delivery after the receiver's return", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(delivered) == len(ids)
	})
	mu.Lock()
	var last time.Time
	for _, id := range ids {
		at, ok := delivered[id]
		require.True(t, ok, "event %s delivered", id)
		if at.After(last) {
			last = at
		}
	}
	mu.Unlock()
	t.Logf("%d deliveries (before, during, after a %s outage): the last arrived %.1fs after the receiver's return",
		len(ids), outage, last.Sub(back).Seconds())

	got, err := d.endpoints().GetEndpoint(adminCtx(t), &webhooksv1.GetEndpointRequest{OwnerId: owner, EndpointId: ep.GetId()})
	require.NoError(t, err)
	require.Nil(t, got.GetEndpoint().GetFailingSince(), "recovered")
	require.Nil(t, got.GetEndpoint().GetNextProbeAt(), "no probe while healthy")
	require.Positive(t, metricValue(t, d, "dispatcher_endpoint_probes_total"))
	require.Positive(t, metricValue(t, d, "dispatcher_endpoint_held_deliveries_released_total"))
}
