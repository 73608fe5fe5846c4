package e2e

import (
	"context"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// TestChaosChurn is make test/chaos's churn run: three dispatcher processes
// on one schema, events published at a steady rate for the whole run, and one
// of the processes (at random) SIGKILLed and restarted every 5–10 s (at
// random) for as long as events are published; then the kills stop and the
// cluster settles. The same run without kills comes first, for comparison.
//
// It asserts what must hold whatever the timing: every (endpoint, event) pair
// arrives, every repeat carries the same webhook-id and body, no endpoint ever
// has more POSTs in flight than its max_in_flight, and every job ends
// completed. It reports the figures (a test asserts no rate or duration:
// docs/development.md): the delivery rate with and without the kills, the time
// to settle after the last kill, how long after its kill each cut delivery
// arrived again, the repeats and the jobs given back.
//
// CHAOS_CHURN is how long events are published and processes killed (unset:
// the test is skipped; make test/chaos sets 120s); CHAOS_CHURN_RATE the
// events per second (default 75, as in make test/chaos; each is 1.57
// deliveries on average); CHAOS_CHURN_KILL_EVERY the shortest and longest
// gap between kills ("5s-10s"); CHAOS_DB_MAX_CONNS each process's pool (3;
// make test/chaos: 8). CHAOS_SETTLE_TIMEOUT bounds the wait for the cluster
// to settle after the kills (a liveness bound).
//
// Not parallel, for the reason TestChaosKill gives.
func TestChaosChurn(t *testing.T) { //nolint:paralleltest // three dispatchers under load are all a shared 2-core machine should give one test (TestChaosKill)
	window := envDuration(t, "CHAOS_CHURN", 0)
	if window == 0 {
		t.Skip("the churn run is make test/chaos's: set CHAOS_CHURN (how long to publish and kill, e.g. 120s)")
	}
	rate := envInt(t, "CHAOS_CHURN_RATE", 75)
	gapMin, gapMax := 5*time.Second, 10*time.Second
	if v := os.Getenv("CHAOS_CHURN_KILL_EVERY"); v != "" {
		lo, hi, ok := strings.Cut(v, "-")
		require.True(t, ok, "CHAOS_CHURN_KILL_EVERY is min-max, e.g. 5s-10s")
		var err error
		gapMin, err = time.ParseDuration(lo)
		require.NoError(t, err)
		gapMax, err = time.ParseDuration(hi)
		require.NoError(t, err)
	}
	require.Positive(t, rate)
	require.LessOrEqual(t, gapMin, gapMax)
	n := rate * int(window/time.Second)

	var quiet, churn churnResult
	t.Run("WithoutKills", func(t *testing.T) { //nolint:paralleltest // one cluster at a time (above)
		quiet = runChurn(t, n, window, 0, 0)
	})
	t.Run("WithKills", func(t *testing.T) { //nolint:paralleltest // one cluster at a time (above)
		churn = runChurn(t, n, window, gapMin, gapMax)
	})
	if t.Failed() {
		return
	}
	t.Logf("without kills: %d deliveries in %.1fs, %.0f/s; settled %.1fs after the last publish; %d repeats",
		quiet.pairs, quiet.total.Seconds(), quiet.rate(), quiet.afterPublish.Seconds(), quiet.repeats)
	t.Logf("with %d kills: %d deliveries in %.1fs, %.0f/s (%.0f %% of the rate without kills); settled %.1fs after the last kill; "+
		"%d repeats (same webhook-id and body; %d of them across a kill), %d requests cut off by a kill, %d jobs given back (%d of them more than once)",
		churn.kills, churn.pairs, churn.total.Seconds(), churn.rate(), 100*churn.rate()/quiet.rate(), churn.afterLastKill.Seconds(),
		churn.repeats, churn.repeatsAcrossKill, churn.broken, churn.rescued, churn.rescuedTwice)
	if len(churn.backAfter) > 0 {
		t.Logf("cut deliveries arrived again after their kill: p50 %.1fs, p90 %.1fs, max %.1fs (%d of them)",
			quantile(churn.backAfter, 0.5).Seconds(), quantile(churn.backAfter, 0.9).Seconds(), quantile(churn.backAfter, 1).Seconds(), len(churn.backAfter))
	}
}

// churnResult is what one run measured.
type churnResult struct {
	pairs, kills, repeats, rescued, rescuedTwice int
	// repeatsAcrossKill: repeats whose first and last arrival have a kill
	// between them (a delivery cut by the kill, re-sent).
	repeatsAcrossKill int
	broken            int64
	// total: from the first publish to settled; afterPublish and
	// afterLastKill: from the last publish and the last kill to settled.
	total, afterPublish, afterLastKill time.Duration
	// backAfter: for each delivery given back after a kill, from the kill
	// to its first arrival after it.
	backAfter []time.Duration
}

func (r churnResult) rate() float64 { return float64(r.pairs) / r.total.Seconds() }

// runChurn publishes n events evenly over window to a fresh three-process
// cluster and, if gapMax > 0, kills and restarts one process every gapMin to
// gapMax (at random) while it publishes; then it waits for the cluster to
// settle and checks everything arrived as it must.
func runChurn(t *testing.T, n int, window, gapMin, gapMax time.Duration) churnResult {
	t.Helper()
	db := dbtest.New(t)
	c := startCluster(t, 3, options{db: db, env: []string{
		"DISPATCHER_RESCUE_STUCK_AFTER=" + rescueStuckAfter,
		"DISPATCHER_LOG_LEVEL=info",
		"DISPATCHER_DB_MAX_CONNS=" + strconv.Itoa(envInt(t, "CHAOS_DB_MAX_CONNS", 3)),
	}})
	w := newChaosWorkload(t, c, n)
	t.Logf("%d events, %d deliveries to %d endpoints, published over %s", n, w.pairs, len(w.sinks), window)

	begin := time.Now()
	published := make(chan error, 1)
	go func() {
		_, err := c.publishPaced(w.events, 20, window)
		published <- err
	}()

	var kills []time.Time
	killed := map[string]bool{} // member ids
	if gapMax > 0 {
		// Until publishing is over: the kills span the whole run, the
		// deliveries that keep up with publishing included.
		for next := begin.Add(gapMin); time.Until(begin.Add(window)) > 0; next = next.Add(gapMin + rand.N(gapMax-gapMin+1)) {
			time.Sleep(time.Until(next))
			slot := rand.IntN(3)
			killed[memberOf(t, c.proc(slot))] = true
			kills = append(kills, time.Now())
			c.killAndRestart(t, slot)
			t.Logf("%6.1fs: killed and restarted process slot %d (%d of %d deliveries arrived)", time.Since(begin).Seconds(), slot, w.received(), w.pairs)
		}
	}
	select {
	case err := <-published:
		require.NoError(t, err, "publishing")
	case <-time.After(window + 3*time.Minute):
		t.Fatal("publishing did not finish")
	}
	lastPublish := time.Now()
	lastKill := lastPublish
	if len(kills) > 0 {
		lastKill = kills[len(kills)-1]
	}
	t.Logf("%6.1fs: all %d events published (%d of %d deliveries arrived)", time.Since(begin).Seconds(), n, w.received(), w.pairs)

	// A liveness bound, generous for a loaded machine.
	settleTimeout := envDuration(t, "CHAOS_SETTLE_TIMEOUT", 5*time.Minute)
	settled := w.waitSettled(t, c, db, lastKill, settleTimeout)
	c.requireAlive(t)
	// Only the processes killed were ever taken for dead: a live one's jobs
	// given back, or its leases released, could be sent twice at once.
	c.mu.Lock()
	for _, d := range c.all {
		for _, m := range givenBack(d) {
			require.True(t, killed[m], "the jobs of %s were given back, but it was never killed", m)
		}
	}
	c.mu.Unlock()

	r := churnResult{pairs: w.pairs, kills: len(kills), total: settled.Sub(begin),
		afterPublish: settled.Sub(lastPublish), afterLastKill: settled.Sub(lastKill)}
	r.repeats, _, r.broken = w.check(t)
	r.repeatsAcrossKill = w.repeatsAcross(kills)
	requireAllCompleted(t, jobStates(t, db), n, w.pairs)
	require.Equal(t, n, countRows(t, db, `SELECT count(*)::int FROM events`))

	// The deliveries given back, and when each arrived again after its kill.
	rows, err := db.Pool.Query(context.Background(), `
		SELECT args->>'endpoint_id', args->>'event_id',
		       (SELECT count(*) FROM unnest(errors) e WHERE e->>'error' IN ($1, $2))::int,
		       (SELECT max((e->>'at')::timestamptz) FROM unnest(errors) e WHERE e->>'error' IN ($1, $2))
		  FROM river_job
		 WHERE kind = 'webhook.deliver' AND EXISTS (SELECT 1 FROM unnest(errors) e WHERE e->>'error' IN ($1, $2))`,
		job.JobCut, job.RiverRescued)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var (
			endpointID, eventID string
			cuts                int
			cutAt               time.Time
		)
		require.NoError(t, rows.Scan(&endpointID, &eventID, &cuts, &cutAt))
		r.rescued++
		if cuts > 1 {
			r.rescuedTwice++
		}
		if d, ok := w.backAfterKill(endpointID, eventID, cutAt, kills); ok {
			r.backAfter = append(r.backAfter, d)
		}
	}
	require.NoError(t, rows.Err())
	if gapMax > 0 {
		require.Positive(t, r.rescued, "the kills hit running jobs, which were given back")
	}
	return r
}

// backAfterKill returns how long after the kill that cut it (the last kill
// before it was given back at cutAt) the delivery of eventID to endpointID
// arrived for the last time.
func (w *chaosWorkload) backAfterKill(endpointID, eventID string, cutAt time.Time, kills []time.Time) (time.Duration, bool) {
	e, ok := w.sinkOf[endpointID]
	if !ok {
		return 0, false
	}
	s := w.sinks[e]
	s.mu.Lock()
	receipts := slices.Clone(s.got[eventID])
	s.mu.Unlock()
	i, _ := slices.BinarySearchFunc(kills, cutAt, func(k, at time.Time) int { return k.Compare(at) })
	if len(receipts) == 0 || i == 0 {
		return 0, false
	}
	return receipts[len(receipts)-1].at.Sub(kills[i-1]), true
}

var (
	memberRE    = regexp.MustCompile(`"msg":"partition: rebalanced","member":"([^"]+)"`)
	givenBackRE = regexp.MustCompile(`"msg":"partition: gave back the jobs of dead members","members":\[([^\]]*)\]`)
)

// memberOf returns d's member id (internal/partition), from its log: its
// first heartbeat logs it, a moment after it serves.
func memberOf(t *testing.T, d *dispatcher) string {
	t.Helper()
	var m []string
	// A liveness bound, generous for a loaded machine.
	waitFor(t, 30*time.Second, "the process's first partition log line", func() bool {
		m = memberRE.FindStringSubmatch(d.logs.String())
		return m != nil
	})
	return m[1]
}

// givenBack returns the members whose jobs d gave back, from its log.
func givenBack(d *dispatcher) []string {
	var out []string
	for _, m := range givenBackRE.FindAllStringSubmatch(d.logs.String(), -1) {
		for id := range strings.SplitSeq(m[1], ",") {
			out = append(out, strings.Trim(id, `"`))
		}
	}
	return out
}

// repeatsAcross counts the deliveries that arrived more than once with a
// kill between their first and last arrival.
func (w *chaosWorkload) repeatsAcross(kills []time.Time) int {
	n := 0
	for _, s := range w.sinks {
		s.mu.Lock()
		for _, rs := range s.got {
			if len(rs) < 2 {
				continue
			}
			first, last := rs[0].at, rs[len(rs)-1].at
			for _, k := range kills {
				if k.After(first) && k.Before(last) {
					n += len(rs) - 1
					break
				}
			}
		}
		s.mu.Unlock()
	}
	return n
}

func quantile(ds []time.Duration, q float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}
