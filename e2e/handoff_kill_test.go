package e2e

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// TestChaosKillAtCreation: deliveries created at the moment their process
// is killed (SIGKILL), handed off to it or queued for it, arrive within
// seconds of the kill, as the deliveries it was running do: the others give
// them back at once, and the endpoint leases the dead one held are released,
// rather than left to River's rescuer, the hand-off's hold or a lease's
// expiry. Events are published one per call, rotating over the processes,
// and one process after the other is killed (and restarted) while they take
// calls. CHAOS_AT_CREATION_PROCS (2), CHAOS_AT_CREATION_KILLS (3) and
// CHAOS_AT_CREATION_KILL_EVERY (8s) shape it.
func TestChaosKillAtCreation(t *testing.T) { //nolint:paralleltest // a cluster under load (TestChaosKill)
	const (
		rate   = 40 // calls a second
		around = time.Second
	)
	procs := envInt(t, "CHAOS_AT_CREATION_PROCS", 2)
	kills := envInt(t, "CHAOS_AT_CREATION_KILLS", 3)
	killEvery := envDuration(t, "CHAOS_AT_CREATION_KILL_EVERY", 8*time.Second)
	db := dbtest.New(t)
	c := startCluster(t, procs, options{db: db, env: []string{
		"DISPATCHER_RESCUE_STUCK_AFTER=" + rescueStuckAfter,
		"DISPATCHER_LOG_LEVEL=info",
		"DISPATCHER_DB_MAX_CONNS=" + strconv.Itoa(envInt(t, "CHAOS_DB_MAX_CONNS", 3)),
	}})
	window := time.Duration(kills+1) * killEvery
	n := int(window.Seconds()) * rate
	w := newChaosWorkload(t, c, n)

	var (
		mu     sync.Mutex
		sentAt = make(map[string]time.Time, n) // the first call that carried it
	)
	published := make(chan error, 1)
	go func() {
		begin := time.Now()
		for i, e := range w.events {
			first := time.Now()
			mu.Lock()
			sentAt[e.GetId()] = first
			mu.Unlock()
			var err error
			for call := i; time.Since(first) < time.Minute; call++ {
				ctx, cancel := context.WithTimeout(withToken(context.Background(), publisherToken), 10*time.Second)
				_, err = c.proc(call).events().Publish(ctx, &webhooksv1.PublishRequest{Event: e})
				cancel()
				if err == nil {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if err != nil {
				published <- err
				return
			}
			time.Sleep(time.Until(begin.Add(time.Duration(i+1) * time.Second / rate)))
		}
		published <- nil
	}()

	var killed []time.Time
	for k := range kills {
		time.Sleep(time.Until(time.Now().Add(killEvery)))
		killed = append(killed, time.Now())
		c.killAndRestart(t, k%procs)
		t.Logf("kill %d", k+1)
	}
	select {
	case err := <-published:
		require.NoError(t, err, "publishing")
	case <-time.After(3 * time.Minute):
		t.Fatal("publishing did not finish")
	}
	w.waitSettled(t, c, db, killed[len(killed)-1], 3*time.Minute)
	c.requireAlive(t)
	w.check(t)
	requireAllCompleted(t, jobStates(t, db), n, w.pairs)

	// Each pair's wait: from the first call that carried its event to its
	// first arrival. Those whose event was sent within a second of a kill
	// were created at the moment of it.
	var atKill, all []time.Duration
	mu.Lock()
	for s, sk := range w.sinks {
		first := sk.firstAt()
		for id := range w.want[s] {
			d := first[id].Sub(sentAt[id])
			all = append(all, d)
			for _, k := range killed {
				if sentAt[id].After(k.Add(-around)) && sentAt[id].Before(k.Add(around)) {
					atKill = append(atKill, d)
				}
			}
		}
	}
	mu.Unlock()
	slices.Sort(atKill)
	slices.Sort(all)
	require.NotEmpty(t, atKill)
	t.Logf("%d deliveries; created within %s of a kill: %d, waited p50 %.1fs, p90 %.1fs, max %.1fs; all: p50 %.2fs, max %.1fs",
		w.pairs, around, len(atKill), quantile(atKill, 0.5).Seconds(), quantile(atKill, 0.9).Seconds(), quantile(atKill, 1).Seconds(),
		quantile(all, 0.5).Seconds(), quantile(all, 1).Seconds())
	// The others see the dead one gone within about 3 s (its sessions end
	// with it; a grace of three heartbeats), give back what it had and
	// release its leases: a liveness bound over that, generous for a loaded
	// machine, and far short of the hand-off's hold or River's rescuer
	// (rescueStuckAfter, 25 s, plus its 30-s period).
	require.LessOrEqual(t, quantile(atKill, 1), 12*time.Second, "deliveries created at a kill arrive within seconds")
}
