package e2e

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// The reliability tests (this file and outage_test.go) break things on
// purpose while traffic flows through the real binary, then check at the
// receivers that nothing was lost, doubled in a way a receiver cannot undo, or
// delivered where it must not go. Every loop is bounded in count and time;
// all traffic stays on loopback.

// rescueStuckAfter is what the reliability tests give River for rescuing the
// jobs of a killed process: longer than the deliver job's timeout (20 s), as
// the dispatcher insists, and short enough for a run to settle in about a
// minute (River's rescuer itself only looks every 30 s).
const rescueStuckAfter = "25s"

// sink is a receiver that checks every request as it arrives: the signature
// verifies with the endpoint's secret, webhook-id is the body's id, a repeat
// of an id carries the same body, and never more requests overlap than the
// endpoint's max_in_flight allows (one unless setLimit says more),
// cluster-wide.
type sink struct {
	*httptest.Server
	name     string
	verifier atomic.Pointer[webhook.Verifier]
	// delay is how long to hold each request, to widen the window in
	// which an overlap would show.
	delay func() time.Duration

	// catch, if set, may hold a request until the test has seen whose it
	// is (catcher).
	catch atomic.Pointer[catcher]

	inFlight, peak atomic.Int64
	// limit is the endpoint's max_in_flight (0: 1).
	limit    atomic.Int64
	requests atomic.Int64
	broken   atomic.Int64 // requests whose sender died mid-body

	mu       sync.Mutex
	got      map[string][]receipt // by event id
	problems []string
}

// receipt is one request a sink accepted.
type receipt struct {
	body []byte
	at   time.Time
}

func newSink(t *testing.T, name string, delay func() time.Duration) *sink {
	t.Helper()
	s := &sink{name: name, delay: delay, got: map[string][]receipt{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *sink) setSecret(t *testing.T, secret string) {
	t.Helper()
	v, err := webhook.NewVerifier(secret)
	require.NoError(t, err)
	s.verifier.Store(v)
}

func (s *sink) problemf(format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.problems) < 20 {
		s.problems = append(s.problems, fmt.Sprintf(format, args...))
	}
}

func (s *sink) serve(w http.ResponseWriter, r *http.Request) {
	// The decrement is deferred, so it runs before the response is flushed:
	// the sender cannot see this answer, settle and send the next request
	// while this one still counts as in flight.
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for p := s.peak.Load(); n > p && !s.peak.CompareAndSwap(p, n); p = s.peak.Load() {
	}
	if limit := max(s.limit.Load(), 1); n > limit {
		s.problemf("%s: %d POSTs in flight at once, max_in_flight %d (%s)", s.name, n, limit, r.Header.Get("webhook-id"))
	}
	s.requests.Add(1)

	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		s.broken.Add(1) // the sender was killed mid-request
		return
	}
	id := r.Header.Get("webhook-id")
	v := s.verifier.Load()
	switch thin, derr := webhook.Decode(body); {
	case v == nil:
		s.problemf("%s: request before the endpoint existed", s.name)
	case derr != nil:
		s.problemf("%s: undecodable body %q: %v", s.name, body, derr)
	case thin.ID != id:
		s.problemf("%s: webhook-id %q but body id %q", s.name, id, thin.ID)
	default:
		if err := v.Verify(r.Header, body); err != nil {
			s.problemf("%s: signature of %s does not verify: %v", s.name, id, err)
		}
	}
	s.mu.Lock()
	if prev := s.got[id]; len(prev) > 0 && !bytes.Equal(prev[0].body, body) {
		s.problems = append(s.problems, fmt.Sprintf("%s: repeat of %s with another body:\n%s\n%s", s.name, id, prev[0].body, body))
	}
	s.got[id] = append(s.got[id], receipt{body: body, at: time.Now()})
	s.mu.Unlock()

	if c := s.catch.Load(); c != nil && !c.hold(r.Context(), s, id) {
		s.broken.Add(1) // held until its sender was killed
		return
	}
	if s.delay != nil {
		time.Sleep(s.delay())
	}
	w.WriteHeader(http.StatusOK)
}

// catcher holds the requests that arrive at the sinks while it is armed,
// until the test releases them, so that a kill can be timed to catch a
// process with a delivery in flight: whether a kill at a given moment finds
// one otherwise depends on how busy the machine is, and a kill that found
// none has nothing to give back.
type catcher struct {
	mu    sync.Mutex
	armed bool
	held  map[*heldRequest]bool
}

// heldRequest is a request a catcher holds: event at sink.
type heldRequest struct {
	sink    *sink
	event   string
	release chan struct{}
}

// hold holds a request while c is armed. It returns false if the sender went
// away meanwhile.
func (c *catcher) hold(ctx context.Context, s *sink, event string) bool {
	c.mu.Lock()
	if !c.armed {
		c.mu.Unlock()
		return true
	}
	h := &heldRequest{sink: s, event: event, release: make(chan struct{})}
	c.held[h] = true
	c.mu.Unlock()
	select {
	case <-h.release:
		return true
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.held, h)
		c.mu.Unlock()
		return false
	}
}

func (c *catcher) arm() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = true
}

// heldNow returns the requests held now.
func (c *catcher) heldNow() []*heldRequest {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Collect(maps.Keys(c.held))
}

// let releases h, if it is still held.
func (c *catcher) let(h *heldRequest) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held[h] {
		delete(c.held, h)
		close(h.release)
	}
}

// disarm stops holding requests and releases those held.
func (c *catcher) disarm() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = false
	for h := range c.held {
		close(h.release)
	}
	clear(c.held)
}

// counts returns how often each event id arrived.
func (s *sink) counts() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.got))
	for id, rs := range s.got {
		out[id] = len(rs)
	}
	return out
}

// firstAt returns when each event id first arrived.
func (s *sink) firstAt() map[string]time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]time.Time, len(s.got))
	for id, rs := range s.got {
		out[id] = rs[0].at
	}
	return out
}

// check fails t with everything the sink found wrong while serving.
func (s *sink) check(t *testing.T) {
	t.Helper()
	s.mu.Lock()
	problems := slices.Clone(s.problems)
	s.mu.Unlock()
	require.Empty(t, problems, "receiver %s", s.name)
	require.LessOrEqual(t, s.peak.Load(), max(s.limit.Load(), 1), "receiver %s: never more concurrent POSTs to one endpoint than its max_in_flight", s.name)
}

// cluster is a set of dispatcher processes on one schema that the test kills
// and restarts; publish spreads calls over whichever are alive.
type cluster struct {
	opts options

	mu    sync.Mutex
	procs []*dispatcher
	// every process ever started, for the logs of a failed run.
	all []*dispatcher
}

func startCluster(t *testing.T, n int, opts options) *cluster {
	t.Helper()
	if opts.masterKey == "" {
		opts.masterKey = masterKey(t) // one key for all: any process opens any secret
	}
	c := &cluster{opts: opts}
	for range n {
		d := start(t, opts)
		c.procs = append(c.procs, d)
		c.all = append(c.all, d)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, d := range c.all {
			t.Logf("--- dispatcher %d (pid %d) log tail:\n%s", i, d.cmd.Process.Pid, tail(d.logs.String(), 40))
		}
	})
	return c
}

func (c *cluster) proc(i int) *dispatcher {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.procs[i%len(c.procs)]
}

// killAndRestart SIGKILLs process i and starts a replacement in its slot.
func (c *cluster) killAndRestart(t *testing.T, i int) {
	t.Helper()
	c.proc(i).kill(t)
	c.restart(t, i)
}

// restart starts a replacement for the killed process i in its slot.
func (c *cluster) restart(t *testing.T, i int) {
	t.Helper()
	d := start(t, c.opts)
	c.mu.Lock()
	c.procs[i] = d
	c.all = append(c.all, d)
	c.mu.Unlock()
}

// requireAlive fails t if a current process ended on its own.
func (c *cluster) requireAlive(t *testing.T) {
	t.Helper()
	c.mu.Lock()
	procs := slices.Clone(c.procs)
	c.mu.Unlock()
	for i, d := range procs {
		if gone, err := d.exited(); gone {
			t.Fatalf("dispatcher %d exited on its own: %v\n%s", i, err, tail(d.logs.String(), 40))
		}
	}
}

// publishPaced publishes events in batches spread evenly over window,
// rotating over the live processes; a call that fails (its process was just
// killed, or the database is away) is retried on the next one. Publishing is
// idempotent by event id, so a retry of a batch that did commit is harmless.
// It returns when every event is stored, with the number of calls that failed
// and were retried.
func (c *cluster) publishPaced(events []*webhooksv1.Event, batch int, window time.Duration) (int, error) {
	start := time.Now()
	batches := (len(events) + batch - 1) / batch
	call, failed := 0, 0
	for b := 0; b*batch < len(events); b++ {
		chunk := events[b*batch : min((b+1)*batch, len(events))]
		deadline := time.Now().Add(90 * time.Second)
		for {
			call++
			ctx, cancel := context.WithTimeout(withToken(context.Background(), publisherToken), 10*time.Second)
			res, err := c.proc(call).events().PublishBatch(ctx, &webhooksv1.PublishBatchRequest{Events: chunk})
			cancel()
			if err == nil {
				for i, r := range res.GetResults() {
					switch r.GetOutcome() {
					case webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DUPLICATE:
					default:
						return failed, fmt.Errorf("event %s: outcome %s", chunk[i].GetId(), r.GetOutcome())
					}
				}
				break
			}
			failed++
			if time.Now().After(deadline) {
				return failed, fmt.Errorf("batch %d not stored after 90s of retries: %w", b, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		time.Sleep(time.Until(start.Add(window * time.Duration(b+1) / time.Duration(batches))))
	}
	return failed, nil
}

// jobStates counts webhook.fanout and webhook.deliver jobs by kind and state.
func jobStates(t *testing.T, db *dbtest.DB) map[string]int {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
		SELECT kind || ':' || state::text, count(*)::int FROM river_job
		 WHERE kind IN ('webhook.fanout', 'webhook.deliver') GROUP BY 1`)
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var k string
		var n int
		require.NoError(t, rows.Scan(&k, &n))
		out[k] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// requireAllCompleted asserts that every job ended completed: exactly
// deliveries webhook.deliver jobs, and no webhook.fanout job in another state.
// Events whose deliveries ingest could decide on its own (no embed-bound
// endpoint to ask the access service about) are fanned out in the ingest
// transaction and get no fanout job, so there are at most events of those.
func requireAllCompleted(t *testing.T, states map[string]int, events, deliveries int) {
	t.Helper()
	fanouts := states["webhook.fanout:completed"]
	require.LessOrEqual(t, fanouts, events, "at most one fanout job per event")
	rest := maps.Clone(states)
	delete(rest, "webhook.fanout:completed")
	require.Equal(t, map[string]int{"webhook.deliver:completed": deliveries}, rest)
}

// waitSettled waits until every pair has arrived and no job is left
// unfinished, checking that every process is still alive, and fails the test
// if that takes more than timeout after lastKill (a liveness bound). It
// returns when the run settled.
func (w *chaosWorkload) waitSettled(t *testing.T, c *cluster, db *dbtest.DB, lastKill time.Time, timeout time.Duration) time.Time {
	t.Helper()
	for {
		m, example := w.missing()
		states := jobStates(t, db)
		if m == 0 && unsettled(states) == 0 {
			return time.Now()
		}
		if time.Since(lastKill) > timeout {
			t.Fatalf("not settled %s after the last kill: %d pairs missing (e.g. %s); jobs %v\n%s",
				timeout, m, example, states, stuckJobSample(t, db))
		}
		c.requireAlive(t)
		time.Sleep(250 * time.Millisecond)
	}
}

// unsettled counts the jobs that are not final yet.
func unsettled(states map[string]int) int {
	n := 0
	for k, c := range states {
		switch k[strings.IndexByte(k, ':')+1:] {
		case "available", "running", "retryable", "scheduled", "pending":
			n += c
		}
	}
	return n
}

// stuckJobSample describes a few unsettled jobs, for a failure message.
func stuckJobSample(t *testing.T, db *dbtest.DB) string {
	t.Helper()
	rows, err := db.Pool.Query(context.Background(), `
		SELECT id, kind, state::text, attempt, scheduled_at, coalesce(errors::text, ''),
		       coalesce(args->>'endpoint_id', ''), coalesce(attempted_by[cardinality(attempted_by)], ''),
		       coalesce(metadata->'output'->>'snooze_reason', ''), coalesce(metadata->>'snoozes', '0')
		  FROM river_job
		 WHERE kind IN ('webhook.fanout', 'webhook.deliver')
		   AND state IN ('available', 'running', 'retryable', 'scheduled', 'pending')
		 ORDER BY id LIMIT 5`)
	require.NoError(t, err)
	var b strings.Builder
	for rows.Next() {
		var (
			id                                    int64
			kind, st, es, ep, by, reason, snoozes string
			attempt                               int
			scheduledAt                           time.Time
		)
		require.NoError(t, rows.Scan(&id, &kind, &st, &attempt, &scheduledAt, &es, &ep, &by, &reason, &snoozes))
		fmt.Fprintf(&b, "job %d %s %s attempt %d scheduled %s endpoint %s by %s snoozed %s (last: %s) errors %s\n",
			id, kind, st, attempt, scheduledAt.Format(time.RFC3339), ep, by, snoozes, reason, es)
	}
	require.NoError(t, rows.Err())
	return b.String()
}

func countRows(t *testing.T, db *dbtest.DB, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.Pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

func tail(s string, lines int) string {
	all := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(all[max(0, len(all)-lines):], "\n")
}

func envInt(t *testing.T, key string, def int) int {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "%s", key)
	return n
}

func envDuration(t *testing.T, key string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(key)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, "%s", key)
	return d
}

// TestChaosKill is the crash test: three dispatcher processes share one
// schema while events flow to 50 endpoints, and every few seconds one of them
// is SIGKILLed mid-work and restarted. The live processes give the dead ones' jobs back,
// the endpoint leases they held expire by themselves, and in the end every
// (endpoint, event) pair has arrived at least once, every repeat carries the
// same webhook-id and body, no endpoint ever saw more POSTs at once than its
// max_in_flight (1 for most; 3 for one in five), and no job is left
// unfinished.
//
// CHAOS_EVENTS (default 2000; make test/chaos: 10000), CHAOS_KILLS (4; 6),
// CHAOS_KILL_EVERY (3s), CHAOS_SETTLE_TIMEOUT and CHAOS_DB_MAX_CONNS (each
// process's pool: 3; make test/chaos: 8) scale it.
//
// It is deliberately not parallel: three dispatchers under load are as much
// CPU and as many Postgres connections as a shared 2-core machine should give
// one test.
func TestChaosKill(t *testing.T) { //nolint:paralleltest // three dispatchers under load are all a shared 2-core machine should give one test (above)
	n := envInt(t, "CHAOS_EVENTS", 2000)
	kills := envInt(t, "CHAOS_KILLS", 4)
	killEvery := envDuration(t, "CHAOS_KILL_EVERY", 3*time.Second)
	require.GreaterOrEqual(t, n, 100)
	require.GreaterOrEqual(t, kills, 1)
	publishWindow := max(time.Duration(kills)*killEvery, time.Duration(n)*time.Millisecond)

	db := dbtest.New(t)
	c := startCluster(t, 3, options{db: db, env: []string{
		"DISPATCHER_RESCUE_STUCK_AFTER=" + rescueStuckAfter,
		"DISPATCHER_LOG_LEVEL=info",
		// Three processes of 3 (plus their LISTEN sessions) keep make test
		// near its 20 connections; make test/chaos gives them more.
		"DISPATCHER_DB_MAX_CONNS=" + strconv.Itoa(envInt(t, "CHAOS_DB_MAX_CONNS", 3)),
	}})

	w := newChaosWorkload(t, c, n)
	events, pairs := w.events, w.pairs
	t.Logf("%d events, %d deliveries to %d endpoints; %d kills every %s; publishing over %s",
		n, pairs, len(w.sinks), kills, killEvery, publishWindow)

	begin := time.Now()
	published := make(chan error, 1)
	go func() {
		failed, err := c.publishPaced(events, 100, publishWindow)
		if err == nil {
			t.Logf("%d publish calls failed (their process was killed) and were retried", failed)
		}
		published <- err
	}()

	// The chaos: SIGKILL one process (round-robin, so the River leader is hit
	// too) and restart it, every killEvery, each time once the sinks hold a
	// request of its (caught): then the kill cuts off a delivery for certain.
	killed := map[string]bool{} // member ids
	var caught []*heldRequest
	for k := range kills {
		time.Sleep(time.Until(begin.Add(killEvery/2 + time.Duration(k)*killEvery)))
		victim := memberOf(t, c.proc(k%3))
		killed[victim] = true
		h := w.catchInFlight(t, db, victim, catchFor)
		c.proc(k % 3).kill(t)
		w.catch.disarm()
		if h != nil {
			caught = append(caught, h)
		}
		c.restart(t, k%3)
		t.Logf("%6.1fs: killed and restarted process slot %d (a delivery in flight caught: %t)", time.Since(begin).Seconds(), k%3, h != nil)
	}
	// The first kill comes while publishing has most of its window to go,
	// so its process gets deliveries; a later one, delayed by a busy
	// machine, may come when its process has none left to do.
	require.NotEmpty(t, caught, "a kill caught a process with a delivery in flight")
	lastKill := time.Now()
	select {
	case err := <-published:
		require.NoError(t, err, "publishing")
	case <-time.After(3 * time.Minute):
		t.Fatal("publishing did not finish")
	}
	t.Logf("%6.1fs: all %d events published", time.Since(begin).Seconds(), n)

	// The killed processes' jobs come back within seconds, their endpoints
	// once the leases they held expire (30 s); the backlog drains on top of
	// that. River's rescuer (rescueStuckAfter plus its 30 s period, plus a
	// leader election when the leader was killed) is the fallback.
	settleTimeout := envDuration(t, "CHAOS_SETTLE_TIMEOUT", 120*time.Second+time.Duration(n)*10*time.Millisecond)
	w.waitSettled(t, c, db, lastKill, settleTimeout)
	t.Logf("%6.1fs: settled, %.1fs after the last kill", time.Since(begin).Seconds(), time.Since(lastKill).Seconds())
	c.requireAlive(t)

	// Only the processes killed were ever taken for dead.
	c.mu.Lock()
	for _, d := range c.all {
		for _, m := range givenBack(d) {
			require.True(t, killed[m], "the jobs of %s were given back, but it was never killed", m)
		}
	}
	c.mu.Unlock()

	// At the receivers.
	duplicates, requests, broken := w.check(t)
	// In the database: everything final, nothing given up.
	states := jobStates(t, db)
	requireAllCompleted(t, states, n, pairs)
	require.Equal(t, n, countRows(t, db, `SELECT count(*)::int FROM events`))
	rescued := countRows(t, db, `SELECT count(*)::int FROM river_job j WHERE EXISTS (SELECT 1 FROM unnest(j.errors) e WHERE e->>'error' IN ($1, $2))`,
		job.JobCut, job.RiverRescued)
	for _, h := range caught {
		require.Equal(t, 1, countRows(t, db, `SELECT count(*)::int FROM river_job j
			 WHERE j.kind = $1 AND j.args->>'endpoint_id' = $2 AND j.args->>'event_id' = $3
			   AND EXISTS (SELECT 1 FROM unnest(j.errors) e WHERE e->>'error' IN ($4, $5))`,
			job.KindDeliver, w.endpointOf[h.sink], h.event, job.JobCut, job.RiverRescued),
			"the delivery of %s to %s in flight at a kill was given back", h.event, h.sink.name)
	}
	t.Logf("%d requests for %d deliveries: %d repeats (same webhook-id and body), %d cut off by a kill; %d jobs rescued from killed processes",
		requests, pairs, duplicates, broken, rescued)
}

// chaosWorkload is the traffic of the chaos tests: 50 endpoints, 10 owners
// with 5 each (one in five with max_in_flight 3), each endpoint j of an owner
// hearing one type of its own plus a broadcast type all five hear, and n
// events round-robin over the endpoints, every 7th to all five of an owner.
type chaosWorkload struct {
	sinks []*sink
	// sinkOf is each endpoint's sink, by endpoint id.
	sinkOf map[string]int
	// endpointOf is each sink's endpoint id.
	endpointOf map[*sink]string
	// catch can hold the sinks' requests (catchInFlight).
	catch  *catcher
	events []*webhooksv1.Event
	// want is, per sink, the event ids it must receive.
	want  []map[string]bool
	pairs int
}

func newChaosWorkload(t *testing.T, c *cluster, n int) *chaosWorkload {
	t.Helper()
	const owners, perOwner = 10, 5
	types := []string{"code.issued", "code.revoked", "code.redeemed", "booking.created", "booking.cancelled"}
	const broadcast = "conversation.message"
	owner := func(k int) string { return fmt.Sprintf("chaos-owner-%02d", k) }
	w := &chaosWorkload{sinks: make([]*sink, owners*perOwner), sinkOf: map[string]int{}, endpointOf: map[*sink]string{},
		catch: &catcher{held: map[*heldRequest]bool{}}, events: make([]*webhooksv1.Event, n)}
	for e := range w.sinks {
		w.sinks[e] = newSink(t, fmt.Sprintf("endpoint %02d", e), func() time.Duration {
			return time.Duration(rand.IntN(2000)) * time.Microsecond
		})
		w.sinks[e].catch.Store(w.catch)
		res := createEndpoint(t, c.proc(0), owner(e/perOwner), w.sinks[e].URL, types[e%perOwner], broadcast)
		w.sinks[e].setSecret(t, res.GetSecret())
		w.sinkOf[res.GetEndpoint().GetId()] = e
		w.endpointOf[w.sinks[e]] = res.GetEndpoint().GetId()
		if e%5 == 4 {
			setMaxInFlight(t, c.proc(0), res.GetEndpoint(), 3)
			w.sinks[e].limit.Store(3)
		}
	}
	w.want = make([]map[string]bool, len(w.sinks))
	for e := range w.want {
		w.want[e] = map[string]bool{}
	}
	for i := range w.events {
		e := i % len(w.sinks)
		k := e / perOwner
		typ, targets := types[e%perOwner], []int{e}
		if i%7 == 3 {
			typ, targets = broadcast, nil
			for j := range perOwner {
				targets = append(targets, k*perOwner+j)
			}
		}
		w.events[i] = newEvent(owner(k), typ, fmt.Sprintf("app://chaos/%d", i), string(event.Example(typ)))
		for _, e := range targets {
			w.want[e][w.events[i].GetId()] = true
			w.pairs++
		}
	}
	return w
}

// catchFor bounds how long a kill waits for its process to have a delivery
// in flight; a process with none left to do is killed without.
const catchFor = 30 * time.Second

// inFlightOfSQL picks, of the held requests ($1 endpoints, $2 events), those
// whose delivery member $3 has in flight: running it (River's fetch records
// the process in attempted_by), or handed off to itself (internal/delivery's
// direct path; the process in the note). A held request's delivery cannot
// end before the request does, so it stays in flight until it is released
// or its process is killed.
const inFlightOfSQL = `
SELECT h.i::int FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS h(endpoint, event, i)
  JOIN river_job j ON j.kind = $4 AND j.args->>'endpoint_id' = h.endpoint AND j.args->>'event_id' = h.event
 WHERE (j.state = 'running' AND j.attempted_by[cardinality(j.attempted_by)] = $3)
    OR (j.state = 'scheduled' AND j.attempt = 0 AND j.metadata->'output'->>'snooze_reason' = $5
        AND j.metadata->'output'->>'by' = $3)
 LIMIT 1`

// catchInFlight has the sinks hold their requests until one is a delivery
// member has in flight, and returns that one, still held (the catcher stays
// armed; disarm it after the kill). The others' requests are let through as
// soon as they are seen to be someone else's. Nil if none came in time.
func (w *chaosWorkload) catchInFlight(t *testing.T, db *dbtest.DB, member string, within time.Duration) *heldRequest {
	t.Helper()
	w.catch.arm()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		held := w.catch.heldNow()
		if len(held) == 0 {
			continue
		}
		endpoints, events := make([]string, len(held)), make([]string, len(held))
		for i, h := range held {
			endpoints[i], events[i] = w.endpointOf[h.sink], h.event
		}
		var i int
		err := db.Pool.QueryRow(context.Background(), inFlightOfSQL, endpoints, events, member, job.KindDeliver, job.SnoozeDirect).Scan(&i)
		if err == nil {
			return held[i-1]
		}
		require.ErrorIs(t, err, pgx.ErrNoRows)
		for _, h := range held {
			w.catch.let(h)
		}
	}
	return nil
}

// missing counts the (endpoint, event) pairs not received yet, with one of
// them.
func (w *chaosWorkload) missing() (int, string) {
	count, example := 0, ""
	for e, s := range w.sinks {
		got := s.counts()
		for id := range w.want[e] {
			if got[id] == 0 {
				count++
				example = fmt.Sprintf("event %s at endpoint %02d", id, e)
			}
		}
	}
	return count, example
}

// received counts the pairs received so far.
func (w *chaosWorkload) received() int {
	n := 0
	for _, s := range w.sinks {
		n += len(s.counts())
	}
	return n
}

// check fails t with what any receiver found wrong (a signature, a repeat
// with another body, more in flight than allowed, an event it is not
// subscribed to), and returns the repeats, the requests and the requests cut
// off by a kill.
func (w *chaosWorkload) check(t *testing.T) (duplicates int, requests, broken int64) {
	t.Helper()
	for e, s := range w.sinks {
		s.check(t)
		for id, count := range s.counts() {
			require.True(t, w.want[e][id], "endpoint %02d received event %s it is not subscribed to", e, id)
			duplicates += count - 1
		}
		requests += s.requests.Load()
		broken += s.broken.Load()
	}
	return duplicates, requests, broken
}

// setMaxInFlight lets n deliveries to ep be in flight at once.
func setMaxInFlight(t *testing.T, d *dispatcher, ep *webhooksv1.Endpoint, n int32) {
	t.Helper()
	res, err := d.endpoints().UpdateEndpoint(adminCtx(t), &webhooksv1.UpdateEndpointRequest{
		OwnerId: ep.GetOwnerId(), EndpointId: ep.GetId(), UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"max_in_flight"}}, MaxInFlight: n,
	})
	require.NoError(t, err)
	require.Equal(t, n, res.GetEndpoint().GetMaxInFlight())
}

// TestRescueStuckAfterMustExceedDeliverTimeout: a rescue horizon shorter than
// a delivery may legitimately run would have River rescue (and re-run) live
// deliveries, so serve refuses it.
func TestRescueStuckAfterMustExceedDeliverTimeout(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	cmd := exec.Command(binary, "serve", "--grpc-addr", "127.0.0.1:0", "--ops-addr", "127.0.0.1:0", "--rescue-stuck-after", "20s")
	cmd.Env = append(cmd.Environ(), "DATABASE_URL="+db.URL, "DISPATCHER_SCHEMA="+db.Schema,
		"DISPATCHER_MASTER_KEYS="+masterKey(t), "DISPATCHER_ADMIN_TOKENS="+adminToken)
	out, err := cmd.CombinedOutput()
	require.Error(t, err)
	require.Contains(t, string(out), "rescue-stuck-after 20s: must exceed the deliver job timeout (20s)")
}
