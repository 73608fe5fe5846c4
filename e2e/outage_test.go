package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/standmeet/webhook-dispatcher/internal/access/accesstest"
	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/migrations"
	accessv1 "github.com/standmeet/webhook-dispatcher/pkg/api/access/v1"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/outbox"
)

// withURL returns base (a postgres:// URL) changed by edit.
func withURL(t *testing.T, base string, edit func(u *url.URL, q url.Values)) string {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	require.Contains(t, []string{"postgres", "postgresql"}, u.Scheme, "the outage tests need a postgres:// URL")
	q := u.Query()
	edit(u, q)
	u.RawQuery = q.Encode()
	return u.String()
}

// withAppName tags connections made with the URL, so the test can find (and
// terminate) exactly those backends and no other test's.
func withAppName(t *testing.T, base, name string) string {
	t.Helper()
	return withURL(t, base, func(_ *url.URL, q url.Values) { q.Set("application_name", name) })
}

func randomSuffix() string { return fmt.Sprintf("%08x", rand.Uint32()) }

// settle waits until every sink has every event it should and no
// fanout/deliver job is left unfinished.
func settle(t *testing.T, db *dbtest.DB, timeout time.Duration, sinks []*sink, want [][]string, alive func(*testing.T)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		missing, example := 0, ""
		for i, s := range sinks {
			got := s.counts()
			for _, id := range want[i] {
				if got[id] == 0 {
					missing++
					example = fmt.Sprintf("event %s at %s", id, s.name)
				}
			}
		}
		states := jobStates(t, db)
		if missing == 0 && unsettled(states) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not settled within %s: %d deliveries missing (e.g. %s); jobs %v\n%s",
				timeout, missing, example, states, stuckJobSample(t, db))
		}
		alive(t)
		time.Sleep(250 * time.Millisecond)
	}
}

func eventIDs(events []*webhooksv1.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.GetId()
	}
	return out
}

// metricValue reads one un-labelled sample from a process's /metrics.
func metricValue(t *testing.T, d *dispatcher, name string) float64 {
	t.Helper()
	code, body := d.get(t, "/metrics")
	require.Equal(t, http.StatusOK, code)
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` (\S+)$`).FindStringSubmatch(body)
	require.NotNil(t, m, "metric %s", name)
	v, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	return v
}

// TestOutagePostgres cuts every connection the dispatchers hold, repeatedly
// for a few seconds (what a Postgres restart or failover looks like from the
// client side), while events are published and delivered. The processes keep
// running, reconnect on their own, and lose nothing.
//
// Only the test's own dispatchers' backends are terminated (they connect with
// an application_name of their own); the shared server is never stopped.
func TestOutagePostgres(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	appName := "dispatcher-outage-" + randomSuffix()
	c := startCluster(t, 2, options{db: db, env: []string{
		"DATABASE_URL=" + withAppName(t, db.URL, appName),
		"DISPATCHER_RESCUE_STUCK_AFTER=" + rescueStuckAfter,
		"DISPATCHER_LOG_LEVEL=info",
		"DISPATCHER_DB_MAX_CONNS=3",
	}})

	const owner = "pg-outage-owner"
	sinks := make([]*sink, 5)
	for i := range sinks {
		sinks[i] = newSink(t, fmt.Sprintf("endpoint %d", i), func() time.Duration { return time.Millisecond })
		sinks[i].setSecret(t, createEndpoint(t, c.proc(0), owner, sinks[i].URL, "*").GetSecret())
	}
	const n = 400
	events := make([]*webhooksv1.Event, n)
	for i := range events {
		events[i] = newEvent(owner, "booking.created", fmt.Sprintf("booking://%d", i), fmt.Sprintf(`{"booking_id":"bk_%d"}`, i))
	}
	want := make([][]string, len(sinks))
	for i := range want {
		want[i] = eventIDs(events)
	}

	published := make(chan error, 1)
	var failedCalls int
	go func() {
		var err error
		failedCalls, err = c.publishPaced(events, 20, 12*time.Second)
		published <- err
	}()

	// The outage: from 4 s in, terminate the dispatchers' backends every
	// 250 ms for 2.5 s, so reconnections are cut too. It stays shorter than
	// the first delivery retry (5 s): a job fails at most once, and its
	// retry finds the database back.
	time.Sleep(4 * time.Second)
	terminated := 0
	outageEnd := time.Now().Add(2500 * time.Millisecond)
	for round := 0; time.Now().Before(outageEnd); round++ {
		var k int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `
			SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity
			 WHERE datname = current_database() AND pid <> pg_backend_pid() AND application_name = $1`,
			appName).Scan(&k))
		if round == 0 {
			require.Positive(t, k, "the dispatchers hold connections to terminate")
		}
		terminated += k
		time.Sleep(250 * time.Millisecond)
	}
	c.requireAlive(t)

	select {
	case err := <-published:
		require.NoError(t, err, "publishing")
	case <-time.After(2 * time.Minute):
		t.Fatal("publishing did not finish")
	}
	settle(t, db, 2*time.Minute, sinks, want, c.requireAlive)
	settled := time.Since(outageEnd)

	for i := range 2 {
		code, _ := c.proc(i).get(t, "/healthz")
		require.Equal(t, http.StatusOK, code, "process %d reconnected", i)
	}
	repeats := 0
	for _, s := range sinks {
		s.check(t)
		for _, k := range s.counts() {
			repeats += k - 1
		}
	}
	requireAllCompleted(t, jobStates(t, db), n, n*len(sinks))
	require.Equal(t, n, countRows(t, db, `SELECT count(*)::int FROM events`))
	t.Logf("%d backends terminated; %d publish calls failed and were retried; %d repeated deliveries (same webhook-id); "+
		"%d jobs saw an error (retried), %d were rescued; settled %.1fs after the outage",
		terminated, failedCalls, repeats,
		countRows(t, db, `SELECT count(*)::int FROM river_job WHERE errors IS NOT NULL`),
		countRows(t, db, `SELECT count(*)::int FROM river_job WHERE errors::text LIKE '%rescued%'`), settled.Seconds())
}

// TestOutageOutboxDatabase makes the main application's database (where the
// outbox lives) unavailable to the relay for a while, as the main app keeps
// committing outbox rows. Nothing is relayed while it is away, the dispatcher
// keeps running, and once it is back every row is relayed: no loss, no
// duplicates.
func TestOutageOutboxDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := dbtest.New(t)

	// The main app's database: a database of its own on the same server.
	name := "chaos_outbox_" + randomSuffix()
	quoted := pgx.Identifier{name}.Sanitize()
	_, err := db.Pool.Exec(ctx, `CREATE DATABASE `+quoted)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), `ALTER DATABASE `+quoted+` ALLOW_CONNECTIONS true`)
		_, err := db.Pool.Exec(context.Background(), `DROP DATABASE `+quoted+` WITH (FORCE)`)
		require.NoError(t, err)
	})
	appURL := withURL(t, db.URL, func(u *url.URL, _ url.Values) { u.Path = "/" + name })
	// The main app's connections, opened before the outage: ALLOW_CONNECTIONS
	// false refuses new connections (a superuser's too), not existing ones.
	// app writes (from its own goroutine), probe looks.
	app, err := pgx.Connect(ctx, appURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = app.Close(context.Background()) })
	probe, err := pgx.Connect(ctx, appURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = probe.Close(context.Background()) })
	ours := []int64{int64(app.PgConn().PID()), int64(probe.PgConn().PID())}
	ddl, err := fs.Glob(migrations.Outbox, "outbox/*.up.sql")
	require.NoError(t, err)
	for _, f := range ddl {
		b, err := fs.ReadFile(migrations.Outbox, f)
		require.NoError(t, err)
		_, err = app.Exec(ctx, string(b))
		require.NoError(t, err, f)
	}

	d := start(t, options{db: db, args: nil, env: []string{
		"DISPATCHER_OUTBOX_DATABASE_URL=" + withAppName(t, appURL, "dispatcher-relay-"+randomSuffix()),
		"DISPATCHER_OUTBOX_POLL=500ms",
		"DISPATCHER_LOG_LEVEL=info",
	}})
	const owner = "relay-outage-owner"
	sinks := make([]*sink, 3)
	for i := range sinks {
		sinks[i] = newSink(t, fmt.Sprintf("endpoint %d", i), nil)
		sinks[i].setSecret(t, createEndpoint(t, d, owner, sinks[i].URL, "*").GetSecret())
	}

	// The main app commits 10 outbox rows every 200 ms for 10 s; the outage
	// runs from 3 s to 8 s, so rows are written before, during and after it,
	// and a relay batch may be cut mid-flight.
	const txs, perTx = 50, 10
	ids := make([]string, 0, txs*perTx)
	for i := range txs * perTx {
		ids = append(ids, fmt.Sprintf("relay-%s-%04d", name, i))
	}
	// The rows' data passes its type's schema, as every event of the suite
	// must (newEvent checks the gRPC ones).
	require.NoError(t, event.ValidateData("writing.published", json.RawMessage(`{"writing_id":"`+ids[0]+`"}`)))
	written := make(chan error, 1)
	go func() {
		start := time.Now()
		for tx := range txs {
			err := pgx.BeginFunc(ctx, app, func(tx2 pgx.Tx) error {
				for _, id := range ids[tx*perTx : (tx+1)*perTx] {
					if err := outbox.Write(ctx, tx2, outbox.Event{
						ID: id, OwnerID: owner, Type: "writing.published", Subject: "writing://" + id,
						Data: map[string]any{"writing_id": id},
					}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				written <- fmt.Errorf("outbox transaction %d: %w", tx, err)
				return
			}
			time.Sleep(time.Until(start.Add(time.Duration(tx+1) * 200 * time.Millisecond)))
		}
		written <- nil
	}()

	time.Sleep(3 * time.Second)
	_, err = db.Pool.Exec(ctx, `ALTER DATABASE `+quoted+` ALLOW_CONNECTIONS false`)
	require.NoError(t, err)
	var cut int
	require.NoError(t, db.Pool.QueryRow(ctx, `
		SELECT count(pg_terminate_backend(pid))::int FROM pg_stat_activity WHERE datname = $1 AND pid <> ALL($2::int[])`,
		name, ours).Scan(&cut))
	require.Positive(t, cut, "the relay holds connections to the outbox database (its listener at least)")
	downAt := time.Now()
	// A batch cut mid-flight may still commit its dispatcher side; after
	// that, nothing can be relayed until the database is back.
	time.Sleep(time.Second)
	stored := countRows(t, db, `SELECT count(*)::int FROM events`)
	time.Sleep(time.Until(downAt.Add(5 * time.Second)))
	require.Equal(t, stored, countRows(t, db, `SELECT count(*)::int FROM events`), "nothing relayed while the outbox is unreachable")
	var pending int
	require.NoError(t, probe.QueryRow(ctx, `SELECT count(*)::int FROM webhook_outbox WHERE relayed_at IS NULL`).Scan(&pending))
	require.Positive(t, pending, "rows committed during the outage wait in the outbox")
	require.Positive(t, metricValue(t, d, "dispatcher_relay_errors_total"), "the relay noticed")
	exited, err := d.exited()
	require.False(t, exited, "the dispatcher survives the outbox database going away: %v", err)
	code, _ := d.get(t, "/healthz")
	require.Equal(t, http.StatusOK, code, "its own database is fine")
	_, err = db.Pool.Exec(ctx, `ALTER DATABASE `+quoted+` ALLOW_CONNECTIONS true`)
	require.NoError(t, err)
	t.Logf("outbox database away for %s: %d connections cut, %d events stored before, %d rows waiting",
		time.Since(downAt).Round(time.Millisecond), cut, stored, pending)

	select {
	case err := <-written:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("the main app's writes did not finish")
	}
	want := make([][]string, len(sinks))
	for i := range want {
		want[i] = ids
	}
	settle(t, db, time.Minute, sinks, want, func(t *testing.T) {
		t.Helper()
		if gone, err := d.exited(); gone {
			t.Fatalf("dispatcher exited: %v\n%s", err, tail(d.logs.String(), 40))
		}
	})

	// No loss, no duplicates: every row relayed once into events, fanned out
	// once, delivered once per endpoint.
	var unrelayed int
	require.NoError(t, probe.QueryRow(ctx, `SELECT count(*)::int FROM webhook_outbox WHERE relayed_at IS NULL OR error IS NOT NULL`).Scan(&unrelayed))
	require.Zero(t, unrelayed, "every outbox row relayed, none set aside")
	require.Equal(t, len(ids), countRows(t, db, `SELECT count(*)::int FROM events`))
	require.Equal(t, len(ids), countRows(t, db, `SELECT count(*)::int FROM events WHERE id = ANY($1)`, ids))
	requireAllCompleted(t, jobStates(t, db), len(ids), len(ids)*len(sinks))
	for _, s := range sinks {
		s.check(t)
		for id, k := range s.counts() {
			require.Equal(t, 1, k, "%s received %s exactly once", s.name, id)
		}
	}
}

// recordingAccess serves the fake access service and remembers when it first
// admitted each event.
type recordingAccess struct {
	accessv1.UnimplementedAccessServiceServer
	fake *accesstest.Server

	mu       sync.Mutex
	admitted map[string]time.Time
	refused  int
}

func (r *recordingAccess) EmbedAdmits(ctx context.Context, req *accessv1.EmbedAdmitsRequest) (*accessv1.EmbedAdmitsResponse, error) {
	res, err := r.fake.EmbedAdmits(ctx, req)
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case err != nil:
		r.refused++
	case res.GetAdmits():
		if _, ok := r.admitted[req.GetEventId()]; !ok {
			r.admitted[req.GetEventId()] = time.Now()
		}
	}
	return res, err
}

func (r *recordingAccess) state() (map[string]time.Time, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.admitted), r.refused
}

// TestOutageAccessService takes the access service down for a while. Scope
// fails closed: no embed-scoped event is delivered while it is down (the
// fanout fails and River retries it; nothing is guessed), events that need no
// access decision keep flowing, and once it is back every admitted event is
// delivered, and nothing it does not admit.
func TestOutageAccessService(t *testing.T) {
	t.Parallel()
	fake := accesstest.NewServer()
	fake.Load(accesstest.Table{
		Embeds: map[string]accesstest.Embed{"embed-1": {OwnerID: "access-outage-owner", CodeID: "code-1"}},
		Codes:  map[string]accesstest.Code{"code-1": {SubjectPrefixes: []string{"wiki://public/"}}},
	})
	rec := &recordingAccess{fake: fake, admitted: map[string]time.Time{}}
	srv := grpc.NewServer()
	accessv1.RegisterAccessServiceServer(srv, rec)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	db := dbtest.New(t)
	d := start(t, options{db: db, env: []string{
		"DISPATCHER_ACCESS_ADDR=" + lis.Addr().String(),
		"DISPATCHER_LOG_LEVEL=info",
	}})
	const owner = "access-outage-owner"
	embedded := newSink(t, "embed-bound endpoint", nil)
	res, err := d.endpoints().CreateEndpoint(adminCtx(t), &webhooksv1.CreateEndpointRequest{
		OwnerId: owner, Url: embedded.URL, EventTypes: []string{event.TypeNoteChanged}, EmbedId: "embed-1",
	})
	require.NoError(t, err)
	embedded.setSecret(t, res.GetSecret())
	standalone := newSink(t, "standalone endpoint", nil)
	standalone.setSecret(t, createEndpoint(t, d, owner, standalone.URL, "*").GetSecret())

	type batch struct{ public, private, other []*webhooksv1.Event }
	seq := 0
	publishBatch := func() batch {
		var b batch
		for range 8 {
			seq++
			b.public = append(b.public, newEvent(owner, event.TypeNoteChanged, fmt.Sprintf("wiki://public/notes/%d", seq), `{"op":"updated","published":true}`))
			if seq%2 == 0 {
				b.private = append(b.private, newEvent(owner, event.TypeNoteChanged, fmt.Sprintf("wiki://private/notes/%d", seq), `{"op":"updated","published":true}`))
				b.other = append(b.other, newEvent(owner, "code.issued", fmt.Sprintf("code://%d", seq), `{}`))
			}
		}
		for _, group := range [][]*webhooksv1.Event{b.public, b.private, b.other} {
			for _, e := range group {
				publish(t, d, e)
			}
		}
		return b
	}
	has := func(s *sink, events ...[]*webhooksv1.Event) func() bool {
		return func() bool {
			got := s.counts()
			for _, group := range events {
				for _, e := range group {
					if got[e.GetId()] == 0 {
						return false
					}
				}
			}
			return true
		}
	}

	before := publishBatch()
	waitFor(t, 30*time.Second, "deliveries before the outage", func() bool {
		return has(embedded, before.public)() && has(standalone, before.public, before.private, before.other)()
	})

	fake.SetDown(true)
	downAt := time.Now()
	during := publishBatch()
	waitFor(t, 20*time.Second, "unscoped events while the access service is down",
		has(standalone, during.other))
	time.Sleep(time.Until(downAt.Add(6 * time.Second)))
	_, refusedWhileDown := rec.state()
	embeddedWhileDown := len(embedded.counts())
	standaloneWhileDown := standalone.counts()
	fake.SetDown(false)
	upAt := time.Now()

	require.Positive(t, refusedWhileDown, "the dispatcher asked while the service was down")
	require.Equal(t, len(before.public), embeddedWhileDown, "no embed-scoped event delivered while the access service is down")
	// (The standalone endpoint needs no access decision, but today a
	// fanout is one transaction: its share of those events waits too.
	// The rules allow either, so that is logged, not asserted.)
	heldForStandalone := 0
	for _, e := range append(append([]*webhooksv1.Event(nil), during.public...), during.private...) {
		if standaloneWhileDown[e.GetId()] == 0 {
			heldForStandalone++
		}
	}

	after := publishBatch()
	// River retries the failed fanouts at 1 s, 16 s, 81 s … (its default
	// policy, attempt⁴): a 6 s outage is caught up at the 16 s retry.
	waitFor(t, 90*time.Second, "every admitted event once the access service is back", func() bool {
		return has(embedded, before.public, during.public, after.public)() &&
			has(standalone, before.public, before.private, before.other, during.public, during.private, during.other,
				after.public, after.private, after.other)()
	})
	waitFor(t, 30*time.Second, "every job finished", func() bool { return unsettled(jobStates(t, db)) == 0 })

	embedded.check(t)
	standalone.check(t)
	admitted, _ := rec.state()
	firstAt := embedded.firstAt()
	require.Len(t, firstAt, 3*8, "the embed-bound endpoint gets the public notes, never the private ones")
	for _, e := range append(append(append([]*webhooksv1.Event(nil), before.public...), during.public...), after.public...) {
		at, ok := firstAt[e.GetId()]
		require.True(t, ok)
		admittedAt, ok := admitted[e.GetId()]
		require.True(t, ok, "event %s delivered to the embed without the access service admitting it", e.GetId())
		require.True(t, admittedAt.Before(at), "admitted before delivered")
		require.False(t, at.After(downAt) && at.Before(upAt), "event %s delivered to the embed while the access service was down", e.GetId())
	}
	for _, e := range during.public {
		require.True(t, firstAt[e.GetId()].After(upAt), "held back until the access service was back")
	}
	for _, s := range []*sink{embedded, standalone} {
		for id, k := range s.counts() {
			require.Equal(t, 1, k, "%s received %s once", s.name, id)
		}
	}
	require.Len(t, standalone.counts(), 3*(8+4+4))
	t.Logf("access service down for %s: %d calls refused; %d of %d note events also waited for the standalone endpoint; "+
		"held-back events reached the embed %.1fs after the service came back",
		upAt.Sub(downAt).Round(time.Millisecond), refusedWhileDown, heldForStandalone, len(during.public)+len(during.private),
		lastOf(firstAt, during.public).Sub(upAt).Seconds())
}

func lastOf(at map[string]time.Time, events []*webhooksv1.Event) time.Time {
	var last time.Time
	for _, e := range events {
		if t := at[e.GetId()]; t.After(last) {
			last = t
		}
	}
	return last
}
