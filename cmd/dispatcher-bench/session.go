package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/event"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// session is one scenario's world: a fresh schema, its dispatcher processes
// and receivers. close undoes all of it.
type session struct {
	b      *bench
	name   string
	schema string
	drop   func()
	creds  credentials
	procs  []*proc
	recv   *receivers
	env    []string
	// schemaDone: -schema-sql already ran.
	schemaDone bool
	// retries counts publishes retried after Unavailable.
	retries atomic.Int64
}

func (b *bench) newSession(name string) (*session, error) {
	creds, err := newCredentials()
	if err != nil {
		return nil, err
	}
	schema, drop := b.newSchema()
	return &session{b: b, name: name, schema: schema, drop: drop, creds: creds}, nil
}

// processEnv is the environment of each of n processes: the pool is sized
// from the connection budget unless the caller sized it.
func (s *session) processEnv(n int, extra ...string) []string {
	env := slices.Clone(s.b.cfg.Env)
	env = append(env, extra...)
	sized := slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "DISPATCHER_DB_MAX_CONNS=") })
	if !sized {
		env = append(env, "DISPATCHER_DB_MAX_CONNS="+strconv.Itoa(min(40, s.b.cfg.ConnBudget/n)))
	}
	return env
}

// start runs n dispatcher processes one after the other (the first applies
// the migrations; the others find them applied).
func (s *session) start(ctx context.Context, n int, extraEnv ...string) error {
	s.env = s.processEnv(n, extraEnv...)
	for i := range n {
		p, err := s.b.startProc(ctx, fmt.Sprintf("%s-p%d", s.name, i+1), s.schema, s.creds, s.env)
		if err != nil {
			return err
		}
		s.procs = append(s.procs, p)
		if i == 0 {
			if err := s.schemaSQL(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

// schemaSQL runs -schema-sql in the session's schema, once.
func (s *session) schemaSQL(ctx context.Context) error {
	if s.b.cfg.SchemaSQL == "" || s.schemaDone {
		return nil
	}
	s.schemaDone = true
	return pgx.BeginFunc(ctx, s.b.admin, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('search_path', $1, true)`, s.schema); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, s.b.cfg.SchemaSQL); err != nil {
			return fmt.Errorf("-schema-sql: %w", err)
		}
		return nil
	})
}

func (s *session) close() {
	var wg sync.WaitGroup
	for _, p := range s.procs {
		wg.Go(func() { s.b.stopProc(p) })
	}
	wg.Wait()
	if s.recv != nil {
		s.recv.close()
	}
	s.drop()
}

// table is a schema-qualified table name for the bench's own queries.
func (s *session) table(name string) string {
	return pgx.Identifier{s.schema, name}.Sanitize()
}

// endpointSpec is one endpoint to create.
type endpointSpec struct {
	owner string
	types []string
	// maxPerSecond > 0 sets the endpoint's rate limit.
	maxPerSecond int32
	// maxInFlight > 1 lets that many deliveries be in flight at once.
	maxInFlight int32
}

// createEndpoints creates the endpoints over gRPC (8 at a time); endpoint i
// points at receiver endpoint i.
func (s *session) createEndpoints(ctx context.Context, specs []endpointSpec) error {
	p := s.procs[0]
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	jobs := make(chan int)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range jobs {
				_, err := p.endpoints().CreateEndpoint(s.creds.adminCtx(ctx), &webhooksv1.CreateEndpointRequest{
					OwnerId: specs[i].owner, Url: s.recv.url(i), Description: "bench " + strconv.Itoa(i), EventTypes: specs[i].types,
					MaxPerSecond: specs[i].maxPerSecond, MaxInFlight: specs[i].maxInFlight,
				})
				if err != nil {
					select {
					case errs <- fmt.Errorf("create endpoint %d: %w", i, err):
					default:
					}
					cancel()
					return
				}
			}
		})
	}
	for i := range specs {
		select {
		case jobs <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(jobs)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return ctx.Err()
	}
}

// newEvent is a valid thin event (not yet timestamped) whose data is its
// type's documented example, so it passes the type's schema; prefix makes ids
// unique per scenario.
func newEvent(prefix, owner, typ string, seq int) *webhooksv1.Event {
	return &webhooksv1.Event{
		Id: prefix + "-" + strconv.Itoa(seq), OwnerId: owner, Type: typ,
		Subject: "bench://item/" + strconv.Itoa(seq), Data: exampleData(typ),
	}
}

// exampleData is typ's documented example data (docs/events.md), which its
// schema accepts.
func exampleData(typ string) *structpb.Struct {
	d := &structpb.Struct{}
	if err := protojson.Unmarshal(event.Example(typ), d); err != nil {
		panic("bench: example data of " + typ + ": " + err.Error())
	}
	return d
}

// publishBatches publishes events in batches of size, conc batches at a
// time, round-robin over the processes. Each event's occurred_at is the
// moment its batch is sent; occurred[i] records it for events[i].
func (s *session) publishBatches(ctx context.Context, events []*webhooksv1.Event, size, conc int, occurred []time.Time) error {
	type batch struct{ from, to int }
	batches := make(chan batch)
	errs := make(chan error, conc)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for w := range conc {
		wg.Go(func() {
			n := w
			for bt := range batches {
				p := s.procs[n%len(s.procs)]
				n += conc
				now := time.Now()
				ts := timestamppb.New(now)
				for i := bt.from; i < bt.to; i++ {
					events[i].OccurredAt = ts
					occurred[i] = now
				}
				err := s.retryUnavailable(ctx, func(ctx context.Context) error {
					_, err := p.events().PublishBatch(s.creds.publisherCtx(ctx), &webhooksv1.PublishBatchRequest{Events: events[bt.from:bt.to]})
					return err
				})
				if err != nil {
					select {
					case errs <- fmt.Errorf("PublishBatch: %w", err):
					default:
					}
					cancel()
					return
				}
			}
		})
	}
	for from := 0; from < len(events) && ctx.Err() == nil; from += size {
		select {
		case batches <- batch{from, min(from+size, len(events))}:
		case <-ctx.Done():
		}
	}
	close(batches)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return ctx.Err()
	}
}

// publishSingles publishes events one per Publish RPC from conc callers, each
// as fast as it can; caller w publishes to process w mod len(procs). Each
// event's occurred_at is the moment it is sent; occurred[i] records it for
// events[i]. The first failure stops every caller.
func (s *session) publishSingles(ctx context.Context, events []*webhooksv1.Event, conc int, occurred []time.Time, rpc []time.Duration) error {
	errs := make(chan error, conc)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg   sync.WaitGroup
		next atomic.Int64
	)
	for w := range conc {
		wg.Go(func() {
			p := s.procs[w%len(s.procs)]
			for ctx.Err() == nil {
				i := int(next.Add(1)) - 1
				if i >= len(events) {
					return
				}
				now := time.Now()
				events[i].OccurredAt = timestamppb.New(now)
				occurred[i] = now
				err := s.retryUnavailable(ctx, func(ctx context.Context) error {
					_, err := p.events().Publish(s.creds.publisherCtx(ctx), &webhooksv1.PublishRequest{Event: events[i]})
					return err
				})
				rpc[i] = time.Since(now)
				if err != nil {
					select {
					case errs <- fmt.Errorf("publish: %w", err):
					default:
					}
					cancel()
					return
				}
			}
		})
	}
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return ctx.Err()
	}
}

// retryUnavailable runs call (with a 1 min timeout each time) and retries it
// up to 5 times, with backoff, while it fails with Unavailable (the
// dispatcher's "could not store the events; retrying is safe").
func (s *session) retryUnavailable(ctx context.Context, call func(context.Context) error) error {
	for attempt := 0; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := call(cctx)
		cancel()
		if err == nil || status.Code(err) != codes.Unavailable || attempt >= 5 {
			return err
		}
		s.retries.Add(1)
		if err := sleepCtx(ctx, time.Duration(100<<attempt)*time.Millisecond); err != nil {
			return err
		}
	}
}

// logTails is the end of every process's log, for error reports.
func (s *session) logTails() string {
	var b strings.Builder
	for _, p := range s.procs {
		t := p.logs.String()
		if len(t) > 2000 {
			t = t[len(t)-2000:]
		}
		if t = strings.TrimSpace(t); t != "" {
			fmt.Fprintf(&b, "\n--- %s log tail ---\n%s", p.name, t)
		}
	}
	return b.String()
}

// measure holds the start of a measurement window.
type measure struct {
	s        *session
	idle     pgCounters
	start    pgCounters
	procs    []procSample
	bench    procSample
	metrics  []map[string]float64
	idleRate float64
	ownTx    int64 // the bench's own transactions inside the window
	t0       time.Time
	tEnd     time.Time
	procsEnd []procSample
	benchEnd procSample
	// pgCPUEnd: CPU seconds of the dispatcher's backends at loadDone.
	pgCPUEnd map[int]float64
}

// idleWindow is how long the background (River polling, leadership) is
// measured before load starts.
const idleWindow = 2 * time.Second

// begin scrapes the processes, measures their idle commit rate and opens the
// window. Call it after set-up (endpoints created), right before the load.
func (s *session) begin(ctx context.Context) (*measure, error) {
	m := &measure{s: s}
	for _, p := range s.procs {
		mm, err := p.scrape(ctx)
		if err != nil {
			return nil, fmt.Errorf("scrape %s: %w", p.name, err)
		}
		m.metrics = append(m.metrics, mm)
	}
	if err := sleepCtx(ctx, statsFlush); err != nil {
		return nil, err
	}
	var err error
	if m.idle, err = s.b.snapshot(ctx); err != nil {
		return nil, err
	}
	if err := sleepCtx(ctx, idleWindow); err != nil {
		return nil, err
	}
	if m.start, err = s.b.snapshot(ctx); err != nil {
		return nil, err
	}
	// The idle snapshot's own transaction counts once.
	m.idleRate = float64(m.start.commits-m.idle.commits-1) / m.start.at.Sub(m.idle.at).Seconds()
	m.ownTx = 1 // the start snapshot's own commit lands inside the window
	for _, p := range s.procs {
		m.procs = append(m.procs, p.sample())
	}
	m.bench, _ = sampleProc(os.Getpid())
	m.t0 = time.Now()
	return m, nil
}

// loadDone marks the end of the load (the last delivery arrived): CPU is
// sampled here, before the drain and flush waits.
func (m *measure) loadDone() {
	m.tEnd = time.Now()
	m.procsEnd = m.procsEnd[:0]
	for _, p := range m.s.procs {
		m.procsEnd = append(m.procsEnd, p.sample())
	}
	m.benchEnd, _ = sampleProc(os.Getpid())
	if pids, err := m.s.b.backendPIDs(context.Background()); err == nil {
		m.ownTx++
		m.pgCPUEnd = map[int]float64{}
		for _, pid := range pids {
			if s, err := sampleProc(pid); err == nil {
				m.pgCPUEnd[pid] = s.cpuSecs
			}
		}
	}
}

// settle waits (bounded) until no fanout or delivery job is left
// unfinished, so the window holds every commit of the load. It returns how
// many are left.
func (m *measure) settle(ctx context.Context, bound time.Duration) int64 {
	deadline := time.Now().Add(bound)
	var n int64
	for {
		err := m.s.b.admin.QueryRow(ctx, `SELECT count(*) FROM `+m.s.table("river_job")+
			` WHERE finalized_at IS NULL AND kind IN ('webhook.fanout', 'webhook.deliver')`).Scan(&n)
		m.ownTx++
		if err != nil || n == 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return n
		}
		_ = sleepCtx(ctx, 100*time.Millisecond)
	}
}

// finish closes the window and fills res. deliveries is what the rates are
// per (deliveries, or rows for the relay).
func (m *measure) finish(ctx context.Context, res *result, units int64) error {
	if m.tEnd.IsZero() {
		m.loadDone()
	}
	if err := sleepCtx(ctx, statsFlush); err != nil {
		return err
	}
	end, err := m.s.b.snapshot(ctx)
	if err != nil {
		return err
	}
	res.Processes = len(m.s.procs)
	res.IdleCommitsPS = round(m.idleRate, 1)
	res.Commits = end.commits - m.start.commits - m.ownTx
	res.Rollbacks = end.rollbacks - m.start.rollbacks
	res.Backends = end.backends
	res.WALBytes = end.walBytes - m.start.walBytes
	res.Statements = -1
	if total, top := statementDeltas(m.start, end); total >= 0 {
		// The bench's own statements in the window: each of its transactions
		// is a BEGIN/COMMIT pair or one statement; a snapshot runs ~6.
		res.Statements = total - 4*m.ownTx
		res.AttemptHistory = attemptHistoryCost(top, units)
		if len(top) > m.s.b.cfg.Top {
			top = top[:m.s.b.cfg.Top]
		}
		for i := range top {
			top[i].PerDelivery = round(float64(top[i].Calls)/float64(max(units, 1)), 3)
		}
		res.Top = top
	}
	// CPU: cores over the load window (t0 → loadDone); seconds and ms per
	// unit over the whole window, drain included.
	loadSecs := m.tEnd.Sub(m.t0).Seconds()
	var pgCPU, pgCPULoad float64
	for pid, c := range end.backendCPU {
		pgCPU += c - m.start.backendCPU[pid]
	}
	for pid, c := range m.pgCPUEnd {
		pgCPULoad += c - m.start.backendCPU[pid]
	}
	res.PGBackendCPUSeconds = round(pgCPU, 2)
	var cpu, cpuLoad float64
	for i, p := range m.s.procs {
		a, l := m.procs[i], m.procsEnd[i]
		b := p.sample()
		if p.exited() {
			b = l
		}
		cpu += b.cpuSecs - a.cpuSecs
		cpuLoad += l.cpuSecs - a.cpuSecs
		res.PerProcess = append(res.PerProcess, procFigures{
			Name: p.name, CPUSeconds: round(b.cpuSecs-a.cpuSecs, 2),
			RSSPeakMB: round(float64(b.hwmKB)/1024, 1), RSSEndMB: round(float64(b.rssKB)/1024, 1),
		})
		res.RSSPeakMB = math.Max(res.RSSPeakMB, round(float64(b.hwmKB)/1024, 1))
	}
	res.CPUSeconds = round(cpu, 2)
	if loadSecs > 0 {
		res.CPUCores = round(cpuLoad/loadSecs, 2)
		res.BenchCPUCores = round((m.benchEnd.cpuSecs-m.bench.cpuSecs)/loadSecs, 2)
		res.PGBackendCPUCores = round(pgCPULoad/loadSecs, 2)
	}
	res.Outcomes = map[string]float64{}
	ingest := map[string]float64{}
	for i, p := range m.s.procs {
		after, err := p.scrape(ctx)
		if err != nil {
			return fmt.Errorf("scrape %s: %w", p.name, err)
		}
		for k, v := range after {
			d := v - m.metrics[i][k]
			switch {
			case strings.HasPrefix(k, "dispatcher_ingest_") && strings.Contains(k, "/"):
				ingest[k] += d
			case k == "dispatcher_delivery_snoozes_total":
				res.Snoozes += d
			case strings.HasPrefix(k, "dispatcher_deliveries_total/"):
				res.Outcomes[strings.TrimPrefix(k, "dispatcher_deliveries_total/")] += d
			case strings.HasPrefix(k, "dispatcher_delivery_snoozes_total/"):
				res.Outcomes["snooze:"+strings.TrimPrefix(k, "dispatcher_delivery_snoozes_total/")] += d
			}
		}
	}
	if note := ingestNote(ingest); note != "" {
		res.notef("%s", note)
	}
	if units > 0 {
		u := float64(units)
		res.CommitsPerUnit = round(float64(res.Commits)/u, 3)
		if res.Statements >= 0 {
			res.StatementsPerUnit = round(float64(res.Statements)/u, 2)
		}
		res.SnoozesPerUnit = round(res.Snoozes/u, 3)
		res.WALBytesPerUnit = round(float64(res.WALBytes)/u, 0)
		res.CPUMillisPerUnit = round(cpu*1000/u, 3)
		res.PGCPUMillisPerUnit = round(pgCPU*1000/u, 3)
	}
	return nil
}

// stages breaks the pipeline's latency down from the jobs' own timestamps
// (read after the window closed): event stored, fanout picked up and done,
// delivery picked up (its last attempt) and finalized. Milliseconds, p50
// and p99.
func (s *session) stages(ctx context.Context, res *result) {
	rows, err := s.b.admin.Query(ctx, `
		WITH d AS (
			SELECT e.occurred_at, e.created_at AS stored,
			       f.attempted_at AS f_start, f.finalized_at AS f_end,
			       j.created_at AS d_created, j.attempted_at AS d_start, j.finalized_at AS d_end
			  FROM `+s.table("events")+` e
			  JOIN `+s.table("river_job")+` f ON f.kind = 'webhook.fanout' AND f.args->>'event_id' = e.id
			  LEFT JOIN `+s.table("river_job")+` j ON j.kind = 'webhook.deliver' AND j.args->>'event_id' = e.id
		), x AS (
			SELECT 'ingest (occurred → stored)' AS stage, 1 AS ord, extract(epoch FROM stored - occurred_at) * 1000 AS ms FROM d
			UNION ALL SELECT 'fanout wait (stored → picked up)', 2, extract(epoch FROM f_start - stored) * 1000 FROM d
			UNION ALL SELECT 'fanout run (picked up → done)', 3, extract(epoch FROM f_end - f_start) * 1000 FROM d
			UNION ALL SELECT 'deliver wait (enqueued → last attempt)', 4, extract(epoch FROM d_start - d_created) * 1000 FROM d
			UNION ALL SELECT 'deliver run (last attempt → finalized)', 5, extract(epoch FROM d_end - d_start) * 1000 FROM d
		)
		SELECT stage, percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), percentile_cont(0.99) WITHIN GROUP (ORDER BY ms)
		  FROM x WHERE ms IS NOT NULL GROUP BY stage, ord ORDER BY ord`)
	if err != nil {
		res.notef("stage breakdown: %v", err)
		return
	}
	defer rows.Close()
	for rows.Next() {
		var st stage
		if err := rows.Scan(&st.Stage, &st.P50, &st.P99); err != nil {
			res.notef("stage breakdown: %v", err)
			return
		}
		st.P50, st.P99 = round(st.P50, 1), round(st.P99, 1)
		res.Stages = append(res.Stages, st)
	}
}

// latencies fills res with occurred_at → received percentiles.
func latencies(res *result, receipts []receipt, occurred map[string]time.Time) {
	ds := make([]float64, 0, len(receipts))
	for _, r := range receipts {
		if t, ok := occurred[r.id]; ok {
			ds = append(ds, float64(r.at.Sub(t))/float64(time.Millisecond))
		}
	}
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	q := func(p float64) float64 {
		i := int(math.Ceil(p*float64(len(ds)))) - 1
		return round(ds[max(0, min(i, len(ds)-1))], 1)
	}
	res.LatencyMs = &latency{P50: q(0.50), P95: q(0.95), P99: q(0.99), Max: q(1)}
}

func lastReceipt(receipts []receipt) time.Time {
	var last time.Time
	for _, r := range receipts {
		if r.at.After(last) {
			last = r.at
		}
	}
	return last
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}
