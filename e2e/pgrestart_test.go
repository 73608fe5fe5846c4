package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/standmeet/webhook-dispatcher/internal/database"
	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/riverlevel"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/client"
	"github.com/standmeet/webhook-dispatcher/pkg/outbox"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// inCI reports whether the tests run in CI (CI=true, as .ci/run and the
// usual CI services set it), where a missing tool is a failure, not a skip.
func inCI() bool {
	ci, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && ci
}

// pgCluster is a Postgres cluster of the test's own, on a loopback port,
// which the test stops and starts as it likes: the shared server is never
// restarted.
type pgCluster struct {
	bindir string
	dir    string // holds data/ and server.log
	port   int
	// owner runs the server programs when the test runs as root (initdb
	// refuses root): the postgres user, or "" to run them directly.
	owner string
}

// pgBindir finds the newest installed Postgres server programs (initdb and
// pg_ctl), as scripts/run-dev.sh does.
func pgBindir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	more, _ := filepath.Glob("/usr/pgsql-*/bin")
	dirs = append(dirs, more...)
	sort.Slice(dirs, func(i, j int) bool { return pgVersion(dirs[i]) > pgVersion(dirs[j]) })
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		dirs = append(dirs, strings.TrimSpace(string(out)))
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "pg_ctl")) {
			return d, nil
		}
	}
	return "", errors.New("no Postgres server programs (initdb, pg_ctl) in /usr/lib/postgresql/*/bin, pg_config --bindir or PATH")
}

// pgVersion is the major version in a path like /usr/lib/postgresql/15/bin.
func pgVersion(bindir string) int {
	v := filepath.Base(filepath.Dir(bindir))
	n, _ := strconv.Atoi(strings.TrimPrefix(v, "pgsql-"))
	return n
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// newPGCluster creates and starts a cluster. Without initdb it skips the
// test on a developer's machine and fails it in CI.
func newPGCluster(t *testing.T) *pgCluster {
	t.Helper()
	bindir, err := pgBindir()
	if err != nil {
		if inCI() {
			t.Fatalf("CI must have Postgres's server programs for this test: %v", err)
		}
		t.Skipf("%v: install the Postgres server (apt-get install postgresql) to run this test", err)
	}
	c := &pgCluster{bindir: bindir}
	// Not t.TempDir: running as root, the postgres user must enter it, and
	// t.TempDir's parent is private to this user.
	c.dir, err = os.MkdirTemp("", "dispatcher-e2e-pg") //nolint:usetesting // see above
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(c.dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		require.NoError(t, err, "running as root, the cluster needs the postgres user to own it (initdb refuses root)")
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		require.NoError(t, os.Chown(c.dir, uid, gid))
		c.owner = u.Username
	}
	// A port free now; nothing else on loopback is expected to take it in
	// the moment before the server does.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	c.port = l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())

	c.run(t, "initdb", "-D", c.data(), "-U", "postgres", "--auth=trust", "--no-sync")
	c.start(t)
	t.Cleanup(func() {
		// Whatever state the test left it in.
		_ = c.command("pg_ctl", "-D", c.data(), "-m", "immediate", "-w", "stop").Run()
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(c.dir, "server.log")); err == nil {
				t.Logf("--- private Postgres server log (tail):\n%s", tail(string(b), 30))
			}
		}
	})
	return c
}

func (c *pgCluster) data() string { return filepath.Join(c.dir, "data") }

// command runs one of the server programs, as the cluster's owner.
func (c *pgCluster) command(program string, args ...string) *exec.Cmd {
	path := filepath.Join(c.bindir, program)
	var cmd *exec.Cmd
	if c.owner != "" {
		cmd = exec.Command("runuser", append([]string{"-u", c.owner, "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = "/" // a directory the owner can enter, whoever runs the test
	return cmd
}

func (c *pgCluster) run(t *testing.T, program string, args ...string) {
	t.Helper()
	out, err := c.command(program, args...).CombinedOutput()
	require.NoError(t, err, "%s %v:\n%s", program, args, out)
}

// start starts the server and waits until it accepts connections (after
// crash recovery, when the last stop was immediate).
func (c *pgCluster) start(t *testing.T) {
	t.Helper()
	// fsync off: the test kills the server, never the machine, so what a
	// commit wrote to the operating system survives an immediate stop.
	// synchronous_commit stays on: with it off, a commit the client saw
	// could be lost by an immediate stop, which is not the dispatcher's doing.
	opts := fmt.Sprintf("-p %d -c listen_addresses=127.0.0.1 -c unix_socket_directories='' "+
		"-c fsync=off -c full_page_writes=off -c max_connections=60 -c shared_buffers=16MB", c.port)
	// -t: a liveness bound, generous for a loaded machine (crash recovery
	// included).
	c.run(t, "pg_ctl", "-D", c.data(), "-l", filepath.Join(c.dir, "server.log"), "-o", opts, "-w", "-t", "120", "start")
}

// stop stops the server in mode ("fast": connections are terminated and a
// checkpoint is written; "immediate": every server process quits at once,
// and the next start recovers from the WAL, as after a crash).
func (c *pgCluster) stop(t *testing.T, mode string) {
	t.Helper()
	c.run(t, "pg_ctl", "-D", c.data(), "-m", mode, "-w", "-t", "120", "stop")
}

func (c *pgCluster) url(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, database)
}

// codeRecorder counts the status codes of every Publish call a client makes,
// each of its retries included.
type codeRecorder struct {
	mu    sync.Mutex
	codes map[codes.Code]int
	// other is the first answer that was neither OK nor Unavailable.
	other error
}

func (r *codeRecorder) intercept(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	err := invoker(ctx, method, req, reply, cc, opts...)
	code := status.Code(err)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.codes[code]++
	if code != codes.OK && code != codes.Unavailable && r.other == nil {
		r.other = fmt.Errorf("%s: %w", method, err)
	}
	return err
}

func (r *codeRecorder) counts() map[codes.Code]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.codes)
}

// TestOutagePostgresRestart restarts the dispatcher's Postgres server, once
// with `pg_ctl stop -m fast` and once with `-m immediate` (a crash: the
// server recovers from its WAL), while publishers send events through
// pkg/client and the main application writes outbox rows, and deliveries
// flow to receivers. The server is a cluster of the test's own (it also holds
// the main application's database), so the restart hits everything at once,
// as it would in production.
//
// While the server is down, each process's /healthz answers 503, the gRPC
// health of its API services NOT_SERVING (the server's own, "", stays
// SERVING: the process is alive), and Publish answers Unavailable (and only
// that: no call of the run gets any other error), which pkg/client retries.
// Once it is back, both health checks say ready again, the relay and River carry on by themselves, and in the end every
// event is stored once and delivered to every endpoint at least once (a
// repeat only with the same webhook-id and body). Nothing the restarts
// cause is logged at ERROR: what is tried again is a warning, River's
// included, whose batch completer would otherwise say it gave up.
//
// About 35–40 s on an idle 2-core machine (a minute or more on a busy
// one); it runs in make test and make test/chaos.
func TestOutagePostgresRestart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pg := newPGCluster(t)

	// The dispatcher's database, migrated, and the main application's, with
	// the outbox table.
	schema := "dispatcher_e2e"
	require.NoError(t, database.ValidateSchema(schema))
	cfg, err := database.PoolConfig(pg.url("postgres"), schema)
	require.NoError(t, err)
	cfg.MaxConns = 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)
	require.NoError(t, database.Migrate(ctx, pool, schema, slog.New(slog.DiscardHandler)))
	db := &dbtest.DB{Pool: pool, Schema: schema, URL: pg.url("postgres")}
	_, err = pool.Exec(ctx, `CREATE DATABASE app`)
	require.NoError(t, err)
	appPool, err := pgxpool.New(ctx, pg.url("app"))
	require.NoError(t, err)
	t.Cleanup(appPool.Close)
	require.NoError(t, database.MigrateOutbox(ctx, appPool))

	c := startCluster(t, 2, options{db: db, env: []string{
		"DISPATCHER_OUTBOX_DATABASE_URL=" + pg.url("app"),
		"DISPATCHER_LOG_LEVEL=info",
		"DISPATCHER_DB_MAX_CONNS=5",
	}})

	const owner = "pg-restart-owner"
	sinks := make([]*sink, 4)
	for i := range sinks {
		sinks[i] = newSink(t, fmt.Sprintf("endpoint %d", i), func() time.Duration { return time.Millisecond })
		sinks[i].setSecret(t, createEndpoint(t, c.proc(0), owner, sinks[i].URL, "*").GetSecret())
	}

	// Publishers: pkg/client with retries long enough to outlast a restart
	// (the default gives up after about 1.5 s of waiting), one client per
	// process, each call's answer recorded.
	rec := &codeRecorder{codes: map[codes.Code]int{}}
	clients := make([]*client.Client, 2)
	for i := range clients {
		cl, err := client.Dial(c.proc(i).grpcAddr, client.WithInsecure(), client.WithToken(publisherToken),
			client.WithRetry(client.Retry{MaxAttempts: 60, InitialBackoff: 100 * time.Millisecond, MaxBackoff: time.Second}),
			client.WithDialOptions(grpc.WithUnaryInterceptor(rec.intercept)))
		require.NoError(t, err)
		t.Cleanup(func() { _ = cl.Close() })
		clients[i] = cl
	}

	var (
		stop      atomic.Bool
		idsMu     sync.Mutex
		published []string                 // stored, as Publish answered
		appRows   []string                 // committed to the outbox
		sentAt    = map[string]time.Time{} // each event's first try
		loadErr   = make(chan error, 5)
		loadWG    sync.WaitGroup
	)
	// Four publishers, about 40 events/s in all.
	for p := range 4 {
		loadWG.Go(func() {
			cl := clients[p%len(clients)]
			for i := 0; !stop.Load(); i++ {
				id := uuid.NewString()
				idsMu.Lock()
				sentAt[id] = time.Now()
				idsMu.Unlock()
				cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
				res, err := cl.Publish(cctx, &webhook.Event{
					ID: id, OwnerID: owner, Type: "booking.created", Subject: fmt.Sprintf("booking://%d/%d", p, i),
					OccurredAt: time.Now(), Data: json.RawMessage(fmt.Sprintf(`{"booking_id":"bk_%d_%d"}`, p, i)),
				})
				cancel()
				if err != nil {
					loadErr <- fmt.Errorf("publisher %d, event %d: %w", p, i, err)
					return
				}
				if o := res.GetOutcome(); o != webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED && o != webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DUPLICATE {
					loadErr <- fmt.Errorf("publisher %d, event %d: outcome %s", p, i, o)
					return
				}
				idsMu.Lock()
				published = append(published, id)
				idsMu.Unlock()
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
	// The main application: one outbox row per transaction, about 10/s,
	// retrying a transaction that fails (the database is away) as an
	// application would. A retry after a commit whose answer was lost
	// writes a second row with the same event id, which the relay stores
	// once (a duplicate of the same content).
	loadWG.Go(func() {
		for i := 0; !stop.Load(); i++ {
			id := fmt.Sprintf("outbox-%05d", i)
			idsMu.Lock()
			sentAt[id] = time.Now()
			idsMu.Unlock()
			deadline := time.Now().Add(2 * time.Minute)
			for {
				err := pgx.BeginFunc(ctx, appPool, func(tx pgx.Tx) error {
					return outbox.Write(ctx, tx, outbox.Event{
						ID: id, OwnerID: owner, Type: "booking.created", Subject: "booking://outbox/" + id,
						Data: map[string]any{"booking_id": id},
					})
				})
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					loadErr <- fmt.Errorf("outbox row %s not written in 2 minutes: %w", id, err)
					return
				}
				time.Sleep(200 * time.Millisecond)
			}
			idsMu.Lock()
			appRows = append(appRows, id)
			idsMu.Unlock()
			time.Sleep(100 * time.Millisecond)
		}
	})
	noLoadError := func(t *testing.T) {
		t.Helper()
		select {
		case err := <-loadErr:
			t.Fatal(err)
		default:
		}
		c.requireAlive(t)
	}

	// A probe Publish that is not retried: what a caller sees while the
	// server is down.
	probe := func(d *dispatcher) error {
		pctx, cancel := context.WithTimeout(withToken(ctx, publisherToken), 30*time.Second)
		defer cancel()
		_, err := d.events().Publish(pctx, &webhooksv1.PublishRequest{
			Event: newEvent(owner, "booking.created", "booking://probe", `{"booking_id":"probe"}`),
		})
		return err
	}
	healthz := func(d *dispatcher) int {
		code, _ := d.get(t, "/healthz")
		return code
	}
	// The gRPC health of a service ("": the server as a whole).
	grpcHealth := func(d *dispatcher, service string) healthpb.HealthCheckResponse_ServingStatus {
		hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		res, err := healthpb.NewHealthClient(d.conn).Check(hctx, &healthpb.HealthCheckRequest{Service: service})
		require.NoError(t, err)
		return res.GetStatus()
	}
	const eventService = "webhooks.v1.EventService"

	begin := time.Now()
	type restart struct {
		mode           string
		down, up, back time.Duration // since begin: stopped, started, every process ready again
	}
	var restarts []restart
	// River's batch completer, when it cannot write job outcomes for
	// about 7 s (three tries), says it gives up; what the operator reads.
	completerGaveUp := func() bool {
		for _, d := range c.all {
			if strings.Contains(d.logs.String(), riverlevel.CompleterRetrying) {
				return true
			}
		}
		return false
	}
	for k, mode := range []string{"fast", "immediate"} {
		// Traffic flows for a while first. Before the second restart,
		// every job a restart failed has been retried: a delivery failed
		// by both would wait the schedule's second step (5 min).
		if k == 0 {
			time.Sleep(6 * time.Second)
		} else {
			time.Sleep(3 * time.Second)
		}
		// A liveness bound, generous for a loaded machine: the retries are
		// due 5 s after the failure, and River's leader promotes them.
		waitFor(t, 2*time.Minute, "every job the last restart failed to be retried", func() bool {
			return countRows(t, db, `SELECT count(*)::int FROM river_job WHERE errors IS NOT NULL AND state NOT IN ('completed', 'cancelled', 'discarded')`) == 0
		})
		noLoadError(t)
		r := restart{mode: mode}
		pg.stop(t, mode)
		r.down = time.Since(begin)
		// Down until every process has said so: not ready, and Publish
		// Unavailable. Waited for, not timed: a liveness bound, generous
		// for a loaded machine.
		for i := range 2 {
			d := c.proc(i)
			waitFor(t, 30*time.Second, fmt.Sprintf("process %d's /healthz to answer 503 with the database down", i),
				func() bool { return healthz(d) == http.StatusServiceUnavailable })
			waitFor(t, 30*time.Second, fmt.Sprintf("process %d's gRPC health of %s to be NOT_SERVING with the database down", i, eventService),
				func() bool { return grpcHealth(d, eventService) == healthpb.HealthCheckResponse_NOT_SERVING })
			require.Equal(t, healthpb.HealthCheckResponse_SERVING, grpcHealth(d, ""), "process %d: alive, for a liveness check", i)
			err := probe(d)
			require.Equal(t, codes.Unavailable, status.Code(err), "process %d: Publish with the database down: %v", i, err)
		}
		if mode == "immediate" {
			// This one lasts until River's batch completer has given up on
			// the outcomes of the jobs it ran as the server died (it tries
			// for about 7 s), if it had any: whether it had is up to
			// timing, so this is looked for, not required. Deliveries
			// cannot fail twice meanwhile: nothing runs until the server
			// is back.
			deadline := time.Now().Add(20 * time.Second)
			for !completerGaveUp() && time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
			}
		}
		pg.start(t)
		r.up = time.Since(begin)
		for i := range 2 {
			d := c.proc(i)
			waitFor(t, 30*time.Second, fmt.Sprintf("process %d's /healthz to answer 200 with the database back", i),
				func() bool { return healthz(d) == http.StatusOK })
			waitFor(t, 30*time.Second, fmt.Sprintf("process %d's gRPC health of %s to be SERVING with the database back", i, eventService),
				func() bool { return grpcHealth(d, eventService) == healthpb.HealthCheckResponse_SERVING })
		}
		r.back = time.Since(begin)
		restarts = append(restarts, r)
		t.Logf("stop -m %s at %.1fs, started at %.1fs, every /healthz 200 at %.1fs", mode, r.down.Seconds(), r.up.Seconds(), r.back.Seconds())
	}
	// Traffic after the last restart too, then the publishers stop.
	time.Sleep(6 * time.Second)
	noLoadError(t)
	stop.Store(true)
	loadDone := make(chan struct{})
	go func() { loadWG.Wait(); close(loadDone) }()
	select {
	case <-loadDone:
	case <-time.After(3 * time.Minute): // a liveness bound: each call retries for at most 2 minutes
		t.Fatal("publishers did not stop")
	}
	noLoadError(t)
	lastUp := begin.Add(restarts[len(restarts)-1].up)

	idsMu.Lock()
	events := slices.Concat(published, appRows)
	nPublished, nRows := len(published), len(appRows)
	idsMu.Unlock()
	want := make([][]string, len(sinks))
	for i := range want {
		want[i] = events
	}
	// A liveness bound, generous for a loaded machine: the run settles in
	// seconds when nothing is wrong.
	settle(t, db, 2*time.Minute, sinks, want, c.requireAlive)
	settled := time.Since(lastUp)

	// Every event stored exactly once: the publishers' retries (and the
	// probes, two per restart) and the relay's re-reads all found it stored.
	// (The probes, sent while the server was down, stored nothing.)
	require.Equal(t, len(events), countRows(t, db, `SELECT count(*)::int FROM events`))
	require.Equal(t, len(events), countRows(t, db, `SELECT count(*)::int FROM events WHERE id = ANY($1)`, events))
	// Every outbox row relayed, none set aside.
	var unrelayed int
	require.NoError(t, appPool.QueryRow(ctx, `SELECT count(*)::int FROM webhook_outbox WHERE relayed_at IS NULL OR error IS NOT NULL`).Scan(&unrelayed))
	require.Zero(t, unrelayed, "every outbox row relayed")
	// Nothing lost; repeats only of the same webhook-id and body (the sinks
	// check that as they serve).
	repeats := 0
	for _, s := range sinks {
		s.check(t)
		for _, k := range s.counts() {
			repeats += k - 1
		}
	}
	// One delivery per event and endpoint, each completed.
	requireAllCompleted(t, jobStates(t, db), len(events), len(events)*len(sinks))

	// And each arrived within seconds of when it could: of its first try,
	// or of the database's return if that came later. A delivery caught by
	// a restart in its hand-off (its ingest commit's answer lost) is given
	// back at once, not left for the hand-off's hold (the rescue horizon,
	// 1 min by default) with no error recorded.
	var (
		waits        []time.Duration
		worst        time.Duration
		worstEvent   string
		sinceOf      = map[string]time.Time{}
		upAt         []time.Time
		lateAfterOne = 20 * time.Second
	)
	for _, r := range restarts {
		upAt = append(upAt, begin.Add(r.up))
	}
	idsMu.Lock()
	for _, id := range events {
		sinceOf[id] = sentAt[id]
	}
	idsMu.Unlock()
	for _, sk := range sinks {
		for id, at := range sk.firstAt() {
			from := sinceOf[id]
			for _, up := range upAt {
				if up.After(from) && !up.After(at) {
					from = up
				}
			}
			w := at.Sub(from)
			waits = append(waits, w)
			if w > worst {
				worst, worstEvent = w, id
			}
		}
	}
	slices.Sort(waits)
	t.Logf("each delivery's wait from its first try (or the database's return): p50 %.2fs, p99 %.1fs, max %.1fs (%s)",
		quantile(waits, 0.5).Seconds(), quantile(waits, 0.99).Seconds(), worst.Seconds(), worstEvent)
	if worst > lateAfterOne {
		rows, err := db.Pool.Query(ctx, `SELECT format('%s %s attempt %s/%s errors %s metadata %s created %s finalized %s',
		       args->>'event_id', state, attempt, max_attempts, errors::text, metadata::text, created_at, finalized_at)
		  FROM river_job WHERE kind = 'webhook.deliver' AND args->>'event_id' = $1`, worstEvent)
		require.NoError(t, err)
		jobs, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		t.Logf("the slowest event's jobs:\n%s", strings.Join(jobs, "\n"))
	}
	require.LessOrEqual(t, worst, lateAfterOne, "event %s: no delivery waits for a rescue", worstEvent)

	// Every answer a publisher got was OK or Unavailable.
	got := rec.counts()
	require.NoError(t, rec.other, "Publish answered something other than Unavailable: %v", got)
	require.Positive(t, got[codes.Unavailable], "the publishers met the outage")

	// Nothing the restarts caused is logged at ERROR: what is tried again
	// (by River, the relay, the publisher told Unavailable) is a warning,
	// and River's completer does not say it gave up.
	errorLines := 0
	for i, d := range c.all {
		for line := range strings.Lines(d.logs.String()) {
			var rec map[string]any
			if json.Unmarshal([]byte(line), &rec) != nil || rec["level"] != "ERROR" {
				continue
			}
			errorLines++
			if errorLines <= 10 {
				t.Logf("process %d logged at ERROR (not about the database being away): %s", i, strings.TrimSpace(line))
			}
			msg, _ := rec["msg"].(string)
			require.NotContains(t, msg, "giving up", "process %d: %s", i, line)
			for _, key := range []string{"err", "error"} {
				if e, ok := rec[key].(string); ok {
					require.False(t, database.UnreachableText(e), "process %d logged an unreachable database at ERROR: %s", i, line)
				}
			}
		}
	}
	t.Logf("%d events published (%d Publish calls answered Unavailable and were retried; %v), %d outbox rows; "+
		"%d deliveries, %d repeats (same webhook-id); %d ERROR log lines; River's completer gave up for a while: %t; "+
		"settled %.1fs after the last restart",
		nPublished, got[codes.Unavailable], got, nRows, len(events)*len(sinks), repeats, errorLines, completerGaveUp(), settled.Seconds())
}
