package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/event"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// result is one scenario's figures. Rates and "per unit" figures are per
// delivery, except for S4 (per outbox row relayed).
type result struct {
	Scenario   string `json:"scenario"`
	Title      string `json:"title"`
	Processes  int    `json:"processes"`
	Unit       string `json:"unit"`
	Endpoints  int    `json:"endpoints"`
	Events     int    `json:"events"`
	Expected   int64  `json:"expected"`
	Deliveries int64  `json:"deliveries"`
	Rows       int64  `json:"rows,omitempty"`
	Duplicates int64  `json:"duplicate_deliveries"`

	Seconds           float64  `json:"seconds"`
	PublishSeconds    float64  `json:"publish_seconds,omitempty"`
	Rate              float64  `json:"rate_per_s"`
	PerBaselineCommit float64  `json:"per_baseline_commit"`
	LatencyMs         *latency `json:"latency_ms,omitempty"`
	// PublishMs is how long one Publish call took (S5, S5b, S7): the
	// caller's wait for its event to be durable.
	PublishMs *latency `json:"publish_ms,omitempty"`
	// MachineBusyPct is how busy the whole machine was while the load was
	// offered (open), in percent of one core.
	MachineBusyPct float64 `json:"machine_busy_pct,omitempty"`
	// Floor is the open scenario's bare INSERT + COMMIT at the same rate.
	Floor *floorFigures `json:"floor,omitempty"`

	Commits           int64   `json:"commits"`
	CommitsPerUnit    float64 `json:"commits_per_unit"`
	Rollbacks         int64   `json:"rollbacks"`
	IdleCommitsPS     float64 `json:"idle_commits_per_s"`
	Statements        int64   `json:"statements"` // -1: n/a
	StatementsPerUnit float64 `json:"statements_per_unit"`
	WALBytes          int64   `json:"wal_bytes_cluster"`
	WALBytesPerUnit   float64 `json:"wal_bytes_per_unit"`
	Snoozes           float64 `json:"snoozes"`
	SnoozesPerUnit    float64 `json:"snoozes_per_unit"`
	// S8: the rate the receiver saw and its busiest one-second window.
	RateLimitRate    float64 `json:"rate_limit_rate_per_s,omitempty"`
	RateLimitBusiest int     `json:"rate_limit_busiest_second,omitempty"`
	// S10: the rate the receiver saw and the time per delivery a slot spent
	// outside the POST.
	SlowRate   float64 `json:"slow_rate_per_s,omitempty"`
	OverheadMs float64 `json:"overhead_ms_per_delivery,omitempty"`

	CPUSeconds          float64       `json:"dispatcher_cpu_s"`
	CPUCores            float64       `json:"dispatcher_cpu_cores"`
	CPUMillisPerUnit    float64       `json:"dispatcher_cpu_ms_per_unit"`
	PGBackendCPUSeconds float64       `json:"pg_backend_cpu_s"`
	PGBackendCPUCores   float64       `json:"pg_backend_cpu_cores"`
	PGCPUMillisPerUnit  float64       `json:"pg_backend_cpu_ms_per_unit"`
	BenchCPUCores       float64       `json:"bench_cpu_cores"`
	RSSPeakMB           float64       `json:"rss_peak_mb"`
	PerProcess          []procFigures `json:"per_process"`

	// ReceiverHosts is the number of receiver listeners (1 with -one-host);
	// ReceiverConns the TCP connections they accepted over the whole
	// scenario: the churn of the dispatcher's HTTP client pool.
	ReceiverHosts int   `json:"receiver_hosts,omitempty"`
	ReceiverConns int64 `json:"receiver_connections"`

	MaxConcurrencyPerEndpoint int `json:"max_concurrency_per_endpoint"`
	// AllowedInFlight is the endpoints' max_in_flight (0: the default, 1).
	AllowedInFlight int                `json:"allowed_in_flight,omitempty"`
	Backends        int64              `json:"pg_backends_at_end"`
	Unsettled       int64              `json:"unsettled_jobs"`
	Outcomes        map[string]float64 `json:"outcomes,omitempty"`
	Env             []string           `json:"env,omitempty"`
	Top             []stmtDelta        `json:"top_statements,omitempty"`
	// AttemptHistory is the attempt recorder's share (nil when it wrote nothing).
	AttemptHistory *historyCost  `json:"attempt_history,omitempty"`
	Stages         []stage       `json:"stages_ms,omitempty"`
	Notes          []string      `json:"notes,omitempty"`
	Error          string        `json:"error,omitempty"`
	Targets        []targetCheck `json:"targets,omitempty"`
	// Noisy: S12's figures (the quiet owner beside the burst).
	Noisy *s12Figures `json:"noisy,omitempty"`
	// Soak: the samples over time and whether each series levelled off.
	Soak *soakFigures `json:"soak,omitempty"`
}

type latency struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90,omitempty"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// stage is one step of the pipeline's latency, from the jobs' timestamps.
type stage struct {
	Stage string  `json:"stage"`
	P50   float64 `json:"p50"`
	P99   float64 `json:"p99"`
}

type procFigures struct {
	Name       string  `json:"name"`
	CPUSeconds float64 `json:"cpu_s"`
	RSSPeakMB  float64 `json:"rss_peak_mb"`
	RSSEndMB   float64 `json:"rss_end_mb"`
}

func (r *result) notef(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
}

// scaled applies -scale to a count, never below floor.
func (b *bench) scaled(n, floor int) int {
	return max(floor, int(math.Round(float64(n)*b.cfg.Scale)))
}

func (b *bench) runScenario(ctx context.Context, name string) []result {
	runFor := func(timeout time.Duration, f func(context.Context) result) result {
		sctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		start := time.Now()
		r := f(sctx)
		b.progressf("%s done in %s: %s", r.Scenario, time.Since(start).Round(time.Second), r.summary())
		return r
	}
	run := func(f func(context.Context) result) result { return runFor(b.cfg.Timeout, f) }
	switch name {
	case "S1":
		return []result{run(func(ctx context.Context) result { return b.sustained(ctx, "S1", 1) })}
	case "S2":
		return []result{run(b.hotEndpoint)}
	case "S3":
		return []result{run(b.fanout)}
	case "S13":
		return []result{run(b.fanoutShape)}
	case "S4":
		return []result{run(b.relay)}
	case "S4d":
		return []result{run(b.relayDeliver)}
	case "S5":
		return []result{run(func(ctx context.Context) result { return b.fixedRate(ctx, "S5", 200, 64, 0) })}
	case "S5b":
		return []result{run(func(ctx context.Context) result { return b.fixedRate(ctx, "S5b", 1000, 2000, 0) })}
	case "S6":
		var out []result
		for _, n := range b.cfg.S6Procs {
			if ctx.Err() != nil {
				break
			}
			out = append(out, run(func(ctx context.Context) result { return b.sustained(ctx, fmt.Sprintf("S6x%d", n), n) }))
		}
		return out
	case "S7":
		return []result{run(b.peerTableA)}
	case "S8":
		return []result{run(b.rateLimited)}
	case "S9":
		return []result{run(b.eventSearch)}
	case "S11":
		var out []result
		for _, hung := range []int{0, s11Hung} {
			if ctx.Err() != nil {
				break
			}
			out = append(out, run(func(ctx context.Context) result {
				return b.fixedRate(ctx, fmt.Sprintf("S11h%d", hung), s11Rate, 256, hung)
			}))
		}
		return out
	case "S12":
		return []result{run(b.noisyNeighbour)}
	case "soak":
		// Bounded by its own length: the load, then the drain and settle.
		return []result{runFor(b.cfg.SoakDuration+15*time.Minute, b.soak)}
	case "open":
		var out []result
		for _, rate := range b.cfg.OpenRates {
			if ctx.Err() != nil {
				break
			}
			out = append(out, run(func(ctx context.Context) result {
				return b.fixedRate(ctx, fmt.Sprintf("O%d", rate), rate, openSenders(rate), 0)
			}))
		}
		return out
	case "S10":
		var out []result
		for _, n := range b.cfg.S10InFlight {
			if ctx.Err() != nil {
				break
			}
			out = append(out, run(func(ctx context.Context) result { return b.slowReceiver(ctx, n) }))
		}
		return out
	}
	return nil
}

func (r *result) summary() string {
	if r.Error != "" {
		return "error: " + r.Error
	}
	s := fmt.Sprintf("%.0f %s/s", r.Rate, r.Unit)
	if r.LatencyMs != nil {
		s += fmt.Sprintf(", p99 %.0f ms", r.LatencyMs.P99)
	}
	return s + fmt.Sprintf(", %.2f commits/%s", r.CommitsPerUnit, r.Unit)
}

// s1Types: ten groups of ten endpoints; group g subscribes to glob and
// receives events of typ, so every event fans out to exactly ten endpoints.
// Each endpoint also subscribes to a type nobody publishes.
var s1Types = []struct{ glob, typ string }{
	{"code.issued", "code.issued"},
	{"booking.*", "booking.created"},
	{"conversation.*", "conversation.message"},
	{"supplier.connected", "supplier.connected"},
	{"page.*", "page.promoted_live"},
	{"gas.*", "gas.refilled"},
	{"owner.login", "owner.login"},
	{"api_key.*", "api_key.issued"},
	{"writing.published", "writing.published"},
	{"block.*", "block.installed"},
}

// deliveryRun is the common tail of the gRPC-published scenarios.
type deliveryRun struct {
	s        *session
	m        *measure
	res      *result
	events   []*webhooksv1.Event
	occurred []time.Time
	t0       time.Time
}

// complete waits for the deliveries and fills in the figures.
// stallTimeout ends a scenario whose receivers heard nothing new for this long.
const stallTimeout = time.Minute

func (d *deliveryRun) complete(ctx context.Context) error {
	res := d.res
	waitErr := d.s.recv.wait(ctx, res.Expected)
	d.m.loadDone()
	receipts := d.s.recv.snapshot()
	res.Deliveries = int64(len(receipts))
	res.Duplicates = d.s.recv.dups.Load()
	res.MaxConcurrencyPerEndpoint = d.s.recv.maxConcurrency()
	if last := lastReceipt(receipts); !last.IsZero() {
		res.Seconds = round(last.Sub(d.t0).Seconds(), 3)
		if res.Seconds > 0 {
			res.Rate = round(float64(res.Deliveries)/res.Seconds, 1)
		}
	}
	occ := make(map[string]time.Time, len(d.events))
	for i, e := range d.events {
		if !d.occurred[i].IsZero() {
			occ[e.GetId()] = d.occurred[i]
		}
	}
	latencies(res, receipts, occ)
	if waitErr != nil {
		return waitErr
	}
	res.Unsettled = d.m.settle(ctx, 20*time.Second)
	if err := d.m.finish(ctx, res, res.Deliveries); err != nil {
		return err
	}
	d.s.stages(ctx, res)
	if allowed := max(res.AllowedInFlight, 1); res.MaxConcurrencyPerEndpoint > allowed {
		res.notef("LEASE VIOLATION: an endpoint had %d concurrent POSTs (max_in_flight %d)", res.MaxConcurrencyPerEndpoint, allowed)
	}
	if n := d.s.retries.Load(); n > 0 {
		res.notef("%d publishes retried after Unavailable", n)
	}
	if res.Duplicates > 0 {
		res.notef("%d duplicate deliveries (same webhook-id to the same endpoint)", res.Duplicates)
	}
	if bad := d.s.recv.bad.Load(); bad > 0 {
		res.notef("%d malformed requests at the receivers", bad)
	}
	if res.Unsettled > 0 {
		res.notef("%d jobs still unfinished 20s after the last delivery", res.Unsettled)
	}
	return nil
}

// sustained is S1 (and S6 with n processes): 100 endpoints in ten groups,
// every event matching the ten endpoints of its group.
func (b *bench) sustained(ctx context.Context, label string, n int) (res result) {
	res = result{Scenario: label, Unit: "delivery", Endpoints: 100,
		Title: fmt.Sprintf("sustained: 100 endpoints, each event fans out to 10 (%d process(es))", n)}
	events := b.scaled(5000, 20)
	res.Events, res.Expected = events, int64(events*10)
	defer func() { r := recover(); b.recovered(&res, r) }()

	s, err := b.newSession(label)
	if err != nil {
		return failed(res, err)
	}
	defer s.close()
	defer s.conclude(&res)
	if s.recv, err = b.newReceivers(100, 100, b.cfg.Latency, int(res.Expected)); err != nil {
		return failed(res, err)
	}
	if err := s.start(ctx, n); err != nil {
		return failed(res, err)
	}
	res.Env = s.env
	specs := make([]endpointSpec, 100)
	for i := range specs {
		specs[i] = endpointSpec{owner: "bench-s1", types: []string{s1Types[i%10].glob, "ip_ban.added"}}
	}
	if err := s.createEndpoints(ctx, specs); err != nil {
		return failed(res, err)
	}
	prefix := "s1" + randomSuffix()
	evs := make([]*webhooksv1.Event, events)
	for i := range evs {
		evs[i] = newEvent(prefix, "bench-s1", s1Types[i%10].typ, i)
	}
	m, err := s.begin(ctx)
	if err != nil {
		return failed(res, err)
	}
	d := &deliveryRun{s: s, m: m, res: &res, events: evs, occurred: make([]time.Time, events), t0: time.Now()}
	if err := s.publishBatches(ctx, evs, 100, 4, d.occurred); err != nil {
		return failed(res, err)
	}
	res.PublishSeconds = round(time.Since(d.t0).Seconds(), 3)
	if err := d.complete(ctx); err != nil {
		return failed(res, err)
	}
	return res
}

// hotEndpoint is S2: a burst to one endpoint whose receiver takes 1 ms.
func (b *bench) hotEndpoint(ctx context.Context) (res result) {
	res = result{Scenario: "S2", Unit: "delivery", Endpoints: 1, Title: "hot endpoint: one endpoint, 1 ms receiver"}
	events := b.scaled(5000, 20)
	res.Events, res.Expected = events, int64(events)
	defer func() { r := recover(); b.recovered(&res, r) }()

	s, err := b.newSession("S2")
	if err != nil {
		return failed(res, err)
	}
	defer s.close()
	defer s.conclude(&res)
	if s.recv, err = b.newReceivers(1, 1, time.Millisecond, events); err != nil {
		return failed(res, err)
	}
	if err := s.start(ctx, 1); err != nil {
		return failed(res, err)
	}
	res.Env = s.env
	if err := s.createEndpoints(ctx, []endpointSpec{{owner: "bench-s2", types: []string{"*"}}}); err != nil {
		return failed(res, err)
	}
	prefix := "s2" + randomSuffix()
	evs := make([]*webhooksv1.Event, events)
	for i := range evs {
		evs[i] = newEvent(prefix, "bench-s2", s1Types[i%10].typ, i)
	}
	m, err := s.begin(ctx)
	if err != nil {
		return failed(res, err)
	}
	d := &deliveryRun{s: s, m: m, res: &res, events: evs, occurred: make([]time.Time, events), t0: time.Now()}
	if err := s.publishBatches(ctx, evs, 500, 2, d.occurred); err != nil {
		return failed(res, err)
	}
	res.PublishSeconds = round(time.Since(d.t0).Seconds(), 3)
	if err := d.complete(ctx); err != nil {
		return failed(res, err)
	}
	return res
}

// fanout is S3: one event to 1,000 endpoints on 1,000 receiver hosts (cold
// connections), then a second event (warm connections).
func (b *bench) fanout(ctx context.Context) (res result) {
	endpoints := b.scaled(1000, 10)
	res = result{Scenario: "S3", Unit: "delivery", Endpoints: endpoints, Events: 1, Expected: int64(endpoints),
		Title: fmt.Sprintf("fanout: one event to %d endpoints (publish → last receipt)", endpoints)}
	defer func() { r := recover(); b.recovered(&res, r) }()

	s, err := b.newSession("S3")
	if err != nil {
		return failed(res, err)
	}
	defer s.close()
	defer s.conclude(&res)
	if s.recv, err = b.newReceivers(endpoints, endpoints, b.cfg.Latency, 2*endpoints); err != nil {
		return failed(res, err)
	}
	// One owner holds every endpoint: lift the per-owner cap (default 100)
	// where the dispatcher lets it be configured.
	if err := s.start(ctx, 1, maxEndpointsEnv+"="+strconv.Itoa(endpoints)); err != nil {
		return failed(res, err)
	}
	res.Env = s.env
	specs := make([]endpointSpec, endpoints)
	for i := range specs {
		specs[i] = endpointSpec{owner: "bench-s3", types: []string{"code.*"}}
	}
	b.debugf("S3: creating %d endpoints", endpoints)
	if err := s.createEndpoints(ctx, specs); err != nil {
		if status.Code(errors.Unwrap(err)) == codes.ResourceExhausted {
			err = fmt.Errorf("%w (the dispatcher caps endpoints per owner and did not take %s=%d)", err, maxEndpointsEnv, endpoints)
		}
		return failed(res, err)
	}
	prefix := "s3" + randomSuffix()
	evs := []*webhooksv1.Event{newEvent(prefix, "bench-s3", "code.issued", 0), newEvent(prefix, "bench-s3", "code.revoked", 1)}
	m, err := s.begin(ctx)
	if err != nil {
		return failed(res, err)
	}
	d := &deliveryRun{s: s, m: m, res: &res, events: evs[:1], occurred: make([]time.Time, 1), t0: time.Now()}
	if err := s.publishBatches(ctx, evs[:1], 1, 1, d.occurred); err != nil {
		return failed(res, err)
	}
	res.PublishSeconds = round(time.Since(d.t0).Seconds(), 3)
	if err := d.complete(ctx); err != nil {
		return failed(res, err)
	}

	// The same again with the connections warm: a note, not the figure.
	connsCold := s.recv.conns.Load()
	t1 := time.Now()
	occ := make([]time.Time, 1)
	if err := s.publishBatches(ctx, evs[1:], 1, 1, occ); err != nil {
		res.notef("warm fanout: %v", err)
		return res
	}
	if err := s.recv.wait(ctx, int64(2*endpoints)); err != nil {
		res.notef("warm fanout: %v", err)
		return res
	}
	var last time.Time
	for _, r := range s.recv.snapshot() {
		if r.id == evs[1].GetId() && r.at.After(last) {
			last = r.at
		}
	}
	res.notef("second event, connections warm: all %d delivered %.3f s after publish; %d new receiver connections (first event: %d)",
		endpoints, last.Sub(t1).Seconds(), s.recv.conns.Load()-connsCold, connsCold)
	return res
}

// maxEndpointsEnv lifts the dispatcher's endpoints-per-owner cap for S3.
const maxEndpointsEnv = "DISPATCHER_MAX_ENDPOINTS_PER_OWNER"

// migrateOutbox applies the dispatcher's and the outbox's migrations to the
// session's schema with `dispatcher migrate`.
func (s *session) migrateOutbox(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, s.b.cfg.Binary, "migrate", "--outbox-database-url", schemaURL(s.b.dbURL, s.schema))
	cmd.Env = append(os.Environ(), "DATABASE_URL="+s.b.dbURL, "DISPATCHER_SCHEMA="+s.schema)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("dispatcher migrate --outbox-database-url: %w\n%s", err, out)
	}
	return s.schemaSQL(ctx)
}

// relay is S4: a backlog of outbox rows for an owner without endpoints,
// drained by one process: the ingest path alone (store event + enqueue
// fanout, then fanout finding nothing).
func (b *bench) relay(ctx context.Context) (res result) {
	rows := b.scaled(100000, 100)
	res = result{Scenario: "S4", Unit: "row", Events: rows, Rows: int64(rows),
		Title: fmt.Sprintf("outbox relay: %d rows drained (owner without endpoints)", rows)}
	defer func() { r := recover(); b.recovered(&res, r) }()

	s, err := b.newSession("S4")
	if err != nil {
		return failed(res, err)
	}
	defer s.close()
	defer s.conclude(&res)
	if err := s.migrateOutbox(ctx); err != nil {
		return failed(res, err)
	}
	prefix := "s4" + randomSuffix()
	now := time.Now()
	src := make([][]any, rows)
	for i := range src {
		src[i] = []any{prefix + "-" + strconv.Itoa(i), "bench-s4-nobody", s1Types[i%10].typ, "bench://item/" + strconv.Itoa(i), now, string(event.Example(s1Types[i%10].typ))}
	}
	if _, err := b.admin.CopyFrom(ctx, pgx.Identifier{s.schema, "webhook_outbox"},
		[]string{"event_id", "owner_id", "type", "subject", "occurred_at", "data"}, pgx.CopyFromRows(src)); err != nil {
		return failed(res, fmt.Errorf("fill the outbox: %w", err))
	}
	if _, err := b.admin.Exec(ctx, `ANALYZE `+s.table("webhook_outbox")); err != nil {
		return failed(res, err)
	}
	if err := sleepCtx(ctx, statsFlush); err != nil {
		return failed(res, err)
	}
	start, err := b.snapshot(ctx)
	if err != nil {
		return failed(res, err)
	}
	m := &measure{s: s, start: start, ownTx: 1, bench: mustSample(os.Getpid()), t0: time.Now()}
	if err := s.start(ctx, 1, "DISPATCHER_OUTBOX_DATABASE_URL="+schemaURL(b.dbURL, s.schema)); err != nil {
		return failed(res, err)
	}
	res.Env = s.env
	tServing := time.Now()
	// The process started inside the window: all its CPU counts.
	m.procs = []procSample{{}}
	m.metrics = []map[string]float64{{}}

	var left int64
	for {
		err := b.admin.QueryRow(ctx, `SELECT count(*) FROM `+s.table("webhook_outbox")+` WHERE relayed_at IS NULL AND error IS NULL`).Scan(&left)
		m.ownTx++
		if err != nil {
			return failed(res, err)
		}
		if left == 0 {
			break
		}
		if s.procs[0].exited() {
			return failed(res, fmt.Errorf("dispatcher exited: %w\n%s", s.procs[0].waitErr, s.procs[0].logs.String()))
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return failed(res, fmt.Errorf("%d rows left: %w", left, err))
		}
	}
	m.loadDone()
	m.t0 = tServing
	res.Seconds = round(time.Since(tServing).Seconds(), 3)
	res.Rate = round(float64(rows)/res.Seconds, 1)
	var poisoned int64
	_ = b.admin.QueryRow(ctx, `SELECT count(*) FROM `+s.table("webhook_outbox")+` WHERE error IS NOT NULL`).Scan(&poisoned)
	m.ownTx++
	if poisoned > 0 {
		res.notef("%d rows set aside as invalid", poisoned)
	}
	res.Unsettled = m.settle(ctx, 2*time.Minute)
	res.notef("fanout jobs (finding no endpoint) finished %.1f s after the relay started", time.Since(tServing).Seconds())
	if err := m.finish(ctx, &res, int64(rows)); err != nil {
		return failed(res, err)
	}
	s.stages(ctx, &res)
	if res.Unsettled > 0 {
		res.notef("%d fanout jobs unfinished 2 min after the drain", res.Unsettled)
	}
	return res
}

func mustSample(pid int) procSample {
	s, _ := sampleProc(pid)
	return s
}

// spreadEndpoints is how many owners spreadOwners makes.
const spreadEndpoints = 100

// spreadOwners: owners bench-o0 … bench-o99 with one "*" endpoint each, so
// every event is exactly one delivery.
func spreadOwners() []endpointSpec {
	specs := make([]endpointSpec, spreadEndpoints)
	for i := range specs {
		specs[i] = endpointSpec{owner: "bench-o" + strconv.Itoa(i), types: []string{"*"}}
	}
	return specs
}

// relayDeliver is S4d: outbox rows written while the dispatcher runs (100-row
// transactions, as an application would), relayed, fanned out and delivered;
// 100 owners with one endpoint each.
func (b *bench) relayDeliver(ctx context.Context) (res result) {
	rows := b.scaled(20000, 100)
	res = result{Scenario: "S4d", Unit: "delivery", Endpoints: 100, Events: rows, Expected: int64(rows), Rows: int64(rows),
		Title: fmt.Sprintf("outbox relay with deliveries: %d rows → 100 endpoints", rows)}
	defer func() { r := recover(); b.recovered(&res, r) }()

	s, err := b.newSession("S4d")
	if err != nil {
		return failed(res, err)
	}
	defer s.close()
	defer s.conclude(&res)
	if s.recv, err = b.newReceivers(100, 100, b.cfg.Latency, rows); err != nil {
		return failed(res, err)
	}
	if err := s.migrateOutbox(ctx); err != nil {
		return failed(res, err)
	}
	if err := s.start(ctx, 1, "DISPATCHER_OUTBOX_DATABASE_URL="+schemaURL(b.dbURL, s.schema)); err != nil {
		return failed(res, err)
	}
	res.Env = s.env
	if err := s.createEndpoints(ctx, spreadOwners()); err != nil {
		return failed(res, err)
	}
	prefix := "s4d" + randomSuffix()
	evs := make([]*webhooksv1.Event, rows)
	for i := range evs {
		evs[i] = newEvent(prefix, "bench-o"+strconv.Itoa(i%100), s1Types[i%10].typ, i)
	}
	m, err := s.begin(ctx)
	if err != nil {
		return failed(res, err)
	}
	d := &deliveryRun{s: s, m: m, res: &res, events: evs, occurred: make([]time.Time, rows), t0: time.Now()}
	// Two writers, 100 rows per transaction.
	var (
		wg      sync.WaitGroup
		next    atomic.Int64
		txs     atomic.Int64
		errOnce sync.Once
		werr    error
	)
	const size = 100
	for range 2 {
		wg.Go(func() {
			for {
				from := int(next.Add(size)) - size
				if from >= rows || ctx.Err() != nil {
					return
				}
				to := min(from+size, rows)
				now := time.Now()
				src := make([][]any, 0, to-from)
				for i := from; i < to; i++ {
					d.occurred[i] = now
					e := evs[i]
					src = append(src, []any{e.GetId(), e.GetOwnerId(), e.GetType(), e.GetSubject(), now, e.GetData().AsMap()})
				}
				_, err := b.admin.CopyFrom(ctx, pgx.Identifier{s.schema, "webhook_outbox"},
					[]string{"event_id", "owner_id", "type", "subject", "occurred_at", "data"}, pgx.CopyFromRows(src))
				txs.Add(1)
				if err != nil {
					errOnce.Do(func() { werr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	m.ownTx += txs.Load()
	if werr != nil {
		return failed(res, fmt.Errorf("write outbox rows: %w", werr))
	}
	res.PublishSeconds = round(time.Since(d.t0).Seconds(), 3)
	if err := d.complete(ctx); err != nil {
		return failed(res, err)
	}
	res.notef("outbox writes: %d transactions of %d rows (excluded from commits)", txs.Load(), size)
	return res
}

// fixedRate is S5 (200/s) and S5b (1,000/s): events published one by one
// (Publish) at a fixed offered rate for 20 s (scaled, at least 3 s), each to
// one of 100 endpoints (100 owners); latency percentiles are from the
// scheduled send time, so a publisher falling behind counts against the
// dispatcher rather than hiding (no coordinated omission).
//
// senders is the number of concurrent Publish callers. The publisher keeps
// the offered rate while one Publish takes up to senders/rate seconds; past
// that, sends start late (reported in a note, and counted in the latency).
// S5 keeps the 64 it was first measured with (320 ms); S5b has 2,000 (2 s),
// because at 1,000/s the dispatcher's own Publish latency passes 500 ms on a
// 2-core box and fewer callers made the publisher, not the dispatcher, the
// limit.
//
// With hung > 0 (S11) the receivers of the first hung endpoints never
// answer (each attempt to them ends at the attempt timeout): the figures are
// the other endpoints' deliveries, which must not wait for workers that the
// hung endpoints' deliveries hold.
func (b *bench) fixedRate(ctx context.Context, label string, rate, senders, hung int) (res result) {
	dur := time.Duration(math.Max(3, 20*b.cfg.Scale) * float64(time.Second))
	if hung > 0 {
		// Long enough for the hung endpoints to fail and stay failing.
		dur = time.Duration(math.Max(20, 40*b.cfg.Scale) * float64(time.Second))
	}
	events := int(dur.Seconds() * float64(rate))
	healthy := events - hung*(events/100) - min(hung, events%100)
	res = result{Scenario: label, Unit: "delivery", Endpoints: 100, Events: events, Expected: int64(healthy),
		Title: fmt.Sprintf("latency at %d/s offered for %s (one delivery per event, one Publish per event)", rate, dur)}
	if hung > 0 || strings.HasPrefix(label, "S11") {
		res.Title = fmt.Sprintf("hung receivers: %d of 100 endpoints never answer; the others' latency at %d/s offered for %s", hung, rate, dur)
	}
	defer func() { r := recover(); b.recovered(&res, r) }()

	s, err := b.newSession(label)
	if err != nil {
		return failed(res, err)
	}
	defer s.close()
	defer s.conclude(&res)
	if s.recv, err = b.newReceivers(100, 100, b.cfg.Latency, events); err != nil {
		return failed(res, err)
	}
	s.recv.hung = hung
	if err := s.start(ctx, 1); err != nil {
		return failed(res, err)
	}
	res.Env = s.env
	if err := s.createEndpoints(ctx, spreadOwners()); err != nil {
		return failed(res, err)
	}
	prefix := strings.ToLower(label) + randomSuffix()
	evs := make([]*webhooksv1.Event, events)
	for i := range evs {
		evs[i] = newEvent(prefix, "bench-o"+strconv.Itoa(i%100), s1Types[i%10].typ, i)
	}
	m, err := s.begin(ctx)
	if err != nil {
		return failed(res, err)
	}
	d := &deliveryRun{s: s, m: m, res: &res, events: evs, occurred: make([]time.Time, events), t0: time.Now()}
	interval := time.Second / time.Duration(rate)
	jobs := make(chan int, events)
	var (
		wg       sync.WaitGroup
		late     atomic.Int64
		failures atomic.Int64
		firstErr atomic.Value
		// sendLag[i]: scheduled time → a sender picked event i up;
		// rpc[i]: the Publish call's duration (retries included).
		sendLag = make([]time.Duration, events)
		rpc     = make([]time.Duration, events)
	)
	p := s.procs[0]
	for range senders {
		wg.Go(func() {
			for i := range jobs {
				t := time.Now()
				sendLag[i] = t.Sub(d.occurred[i])
				err := s.retryUnavailable(ctx, func(ctx context.Context) error {
					_, err := p.events().Publish(s.creds.publisherCtx(ctx), &webhooksv1.PublishRequest{Event: evs[i]})
					return err
				})
				rpc[i] = time.Since(t)
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	busy := machineBusy()
	for i := 0; i < events && ctx.Err() == nil; i++ {
		at := d.t0.Add(time.Duration(i) * interval)
		if wait := time.Until(at); wait > 0 {
			time.Sleep(wait)
		} else if wait < -50*time.Millisecond {
			late.Add(1)
		}
		d.occurred[i] = at
		evs[i].OccurredAt = timestamppb.New(at)
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	res.MachineBusyPct = busy()
	res.PublishSeconds = round(time.Since(d.t0).Seconds(), 3)
	if n := failures.Load(); n > 0 {
		return failed(res, fmt.Errorf("%d publishes failed, first: %v", n, firstErr.Load()))
	}
	if ctx.Err() != nil {
		return failed(res, ctx.Err())
	}
	if n := late.Load(); n > 0 {
		res.notef("%d events handed to the senders more than 50 ms late (bench overloaded)", n)
	}
	lag, lagLate := durationQuantiles(sendLag, 50*time.Millisecond)
	rpcQ, _ := durationQuantiles(rpc, 0)
	res.PublishMs = &latency{P50: rpcQ[0], P90: percentiles(rpc).P90, P99: rpcQ[1], Max: rpcQ[2]}
	var lastSend time.Time
	for i := range sendLag {
		lastSend = maxTime(lastSend, d.occurred[i].Add(sendLag[i]))
	}
	res.notef("publisher: %d senders; %.0f events/s sent (offered %d/s); sends started p50 %.1f / p99 %.1f / max %.1f ms after schedule, %d more than 50 ms late; Publish RPC p50 %.1f / p99 %.1f ms",
		senders, float64(events)/lastSend.Sub(d.t0).Seconds(), rate, lag[0], lag[1], lag[2], lagLate, rpcQ[0], rpcQ[1])
	if lagLate > 0 && rpcQ[0]*float64(rate)/1000 >= 0.9*float64(senders) {
		res.notef("senders saturated: Publish p50 × offered rate ≥ 0.9 × senders, so sends queued behind slow Publish calls (the dispatcher's ingest, unless the note on late hand-offs says the bench itself was overloaded)")
	}
	if err := d.complete(ctx); err != nil {
		return failed(res, err)
	}
	if strings.HasPrefix(label, "O") {
		conns := 40
		for _, kv := range s.env {
			if v, ok := strings.CutPrefix(kv, "DISPATCHER_DB_MAX_CONNS="); ok {
				conns, _ = strconv.Atoi(v)
			}
		}
		f, err := b.floor(ctx, s.schema, rate, senders, conns, dur)
		if err != nil {
			return failed(res, fmt.Errorf("floor: %w", err))
		}
		res.Floor = f
		if err := b.rpcFloor(ctx, s, p, f, rate, senders, dur); err != nil {
			return failed(res, fmt.Errorf("floor: %w", err))
		}
		res.notef("Publish ms p50 %.2f / p90 %.2f / p99 %.2f; machine busy %.0f %% of a core",
			res.PublishMs.P50, res.PublishMs.P90, res.PublishMs.P99, res.MachineBusyPct)
		res.notef("floor, durable write (INSERT + COMMIT of one row per call, %d/s, %d callers, %d connections): ms p50 %.2f / p90 %.2f / p99 %.2f; machine busy %.0f %%",
			rate, senders, conns, f.CallMs.P50, f.CallMs.P90, f.CallMs.P99, f.BusyPct)
		res.notef("floor, transport (a no-op gRPC call to the dispatcher, %d/s, %d callers): ms p50 %.2f / p90 %.2f / p99 %.2f; machine busy %.0f %%",
			rate, senders, f.RPCMs.P50, f.RPCMs.P90, f.RPCMs.P99, f.RPCBusyPct)
		res.notef("transport-inclusive floor (the two added): ms p50 %.2f / p99 %.2f; Publish ÷ it: p50 %.2f×, p99 %.2f× (÷ the INSERT alone: p50 %.2f×, p99 %.2f×)",
			f.SumMs.P50, f.SumMs.P99, res.PublishMs.P50/max(f.SumMs.P50, 0.001), res.PublishMs.P99/max(f.SumMs.P99, 0.001),
			res.PublishMs.P50/max(f.CallMs.P50, 0.001), res.PublishMs.P99/max(f.CallMs.P99, 0.001))
		res.notef("CPU per delivery: dispatcher %.3f ms + Postgres %.3f ms = %.3f ms; commits per delivery %.2f",
			res.CPUMillisPerUnit, res.PGCPUMillisPerUnit, res.CPUMillisPerUnit+res.PGCPUMillisPerUnit, res.CommitsPerUnit)
	}
	return res
}

// durationQuantiles returns p50, p99 and max of ds in milliseconds, and how
// many exceed over (when over > 0).
func durationQuantiles(ds []time.Duration, over time.Duration) ([3]float64, int) {
	var q [3]float64
	if len(ds) == 0 {
		return q, 0
	}
	sorted := slices.Clone(ds)
	slices.Sort(sorted)
	at := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(sorted)))) - 1
		return round(float64(sorted[max(0, min(i, len(sorted)-1))])/float64(time.Millisecond), 1)
	}
	n := 0
	if over > 0 {
		n = len(sorted) - sort.Search(len(sorted), func(i int) bool { return sorted[i] > over })
	}
	return [3]float64{at(0.5), at(0.99), at(1)}, n
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// s7Callers is the number of concurrent Publish callers in S7.
const s7Callers = 32

// peerTableA is S7, scenario A of the peer table: 100 owners with one "*"
// endpoint each; event i belongs to owner i mod 100, so every event is
// exactly one delivery; published one event per Publish RPC by 32 callers,
// each as fast as it can.
func (b *bench) peerTableA(ctx context.Context) (res result) {
	events := b.scaled(20000, 100)
	res = result{Scenario: "S7", Unit: "delivery", Endpoints: 100, Events: events, Expected: int64(events),
		Title: fmt.Sprintf("peer table, scenario A: 100 owners × 1 endpoint, %d events, one Publish per event from %d callers", events, s7Callers)}
	defer func() { r := recover(); b.recovered(&res, r) }()

	s, err := b.newSession("S7")
	if err != nil {
		return failed(res, err)
	}
	defer s.close()
	defer s.conclude(&res)
	if s.recv, err = b.newReceivers(100, 100, b.cfg.Latency, events); err != nil {
		return failed(res, err)
	}
	if err := s.start(ctx, 1); err != nil {
		return failed(res, err)
	}
	res.Env = s.env
	if err := s.createEndpoints(ctx, spreadOwners()); err != nil {
		return failed(res, err)
	}
	prefix := "s7" + randomSuffix()
	evs := make([]*webhooksv1.Event, events)
	for i := range evs {
		evs[i] = newEvent(prefix, "bench-o"+strconv.Itoa(i%100), s1Types[i%10].typ, i)
	}
	m, err := s.begin(ctx)
	if err != nil {
		return failed(res, err)
	}
	d := &deliveryRun{s: s, m: m, res: &res, events: evs, occurred: make([]time.Time, events), t0: time.Now()}
	rpc := make([]time.Duration, events)
	if err := s.publishSingles(ctx, evs, s7Callers, d.occurred, rpc); err != nil {
		return failed(res, err)
	}
	res.PublishSeconds = round(time.Since(d.t0).Seconds(), 3)
	q, _ := durationQuantiles(rpc, 0)
	res.PublishMs = &latency{P50: q[0], P99: q[1], Max: q[2]}
	if res.PublishSeconds > 0 {
		res.notef("publish: %.0f events/s (one Publish per event, %d callers); Publish RPC p50 %.1f / p99 %.1f ms",
			float64(events)/res.PublishSeconds, s7Callers, q[0], q[1])
	}
	if err := d.complete(ctx); err != nil {
		return failed(res, err)
	}
	return res
}

// conclude records the receivers' connection count and adds the processes'
// log tails to a failed result.
func (s *session) conclude(res *result) {
	if s.recv != nil {
		res.ReceiverHosts = s.recv.hosts()
		res.ReceiverConns = s.recv.conns.Load()
	}
	if res.Error != "" {
		res.Error += s.logTails()
	}
}

func failed(res result, err error) result {
	if res.Error == "" {
		res.Error = err.Error()
		if errors.Is(err, context.DeadlineExceeded) {
			res.Error += " (scenario -timeout reached)"
		}
	}
	return res
}

func (b *bench) recovered(res *result, r any) {
	if r != nil {
		res.Error = fmt.Sprintf("panic: %v", r)
	}
}

// S13's shape: s13Events events, each to every one of s13Endpoints
// endpoints of one owner, published in batches of s13Batch from
// s13Callers callers.
const (
	s13Events    = 200
	s13Endpoints = 100
	s13Batch     = 10
	s13Callers   = 2
)

// fanoutShape is S13, the fanout shape: 200 events × 100 endpoints (20,000
// deliveries, every event to every endpoint), publish → last receipt. It
// is where a change to the hand-off (how many of an event's deliveries
// the process takes on at once, how many go through River) shows as rate.
func (b *bench) fanoutShape(ctx context.Context) (res result) {
	events := b.scaled(s13Events, 10)
	res = result{Scenario: "S13", Unit: "delivery", Endpoints: s13Endpoints, Events: events, Expected: int64(events * s13Endpoints),
		Title: fmt.Sprintf("fanout shape: %d events × %d endpoints, batches of %d from %d callers (publish → last receipt)",
			events, s13Endpoints, s13Batch, s13Callers)}
	defer func() { r := recover(); b.recovered(&res, r) }()

	s, err := b.newSession("S13")
	if err != nil {
		return failed(res, err)
	}
	defer s.close()
	defer s.conclude(&res)
	if s.recv, err = b.newReceivers(s13Endpoints, s13Endpoints, b.cfg.Latency, events*s13Endpoints); err != nil {
		return failed(res, err)
	}
	if err := s.start(ctx, 1); err != nil {
		return failed(res, err)
	}
	res.Env = s.env
	specs := make([]endpointSpec, s13Endpoints)
	for i := range specs {
		specs[i] = endpointSpec{owner: "bench-s13", types: []string{"code.*"}}
	}
	if err := s.createEndpoints(ctx, specs); err != nil {
		return failed(res, err)
	}
	prefix := "s13" + randomSuffix()
	evs := make([]*webhooksv1.Event, events)
	for i := range evs {
		evs[i] = newEvent(prefix, "bench-s13", "code.issued", i)
	}
	m, err := s.begin(ctx)
	if err != nil {
		return failed(res, err)
	}
	d := &deliveryRun{s: s, m: m, res: &res, events: evs, occurred: make([]time.Time, events), t0: time.Now()}
	if err := s.publishBatches(ctx, evs, s13Batch, s13Callers, d.occurred); err != nil {
		return failed(res, err)
	}
	res.PublishSeconds = round(time.Since(d.t0).Seconds(), 3)
	if err := d.complete(ctx); err != nil {
		return failed(res, err)
	}
	return res
}
