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
	"time"

	"github.com/jackc/pgx/v5"
	"google.golang.org/protobuf/types/known/timestamppb"

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
	}
	return nil
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

// newEvent is a valid thin event (not yet timestamped); prefix makes ids
// unique per scenario.
func newEvent(prefix, owner, typ string, seq int) *webhooksv1.Event {
	return &webhooksv1.Event{
		Id: prefix + "-" + strconv.Itoa(seq), OwnerId: owner, Type: typ,
		Subject: "bench://item/" + strconv.Itoa(seq), Data: `{"seq":` + strconv.Itoa(seq) + `,"published":true}`,
	}
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
				cctx, c := context.WithTimeout(ctx, time.Minute)
				_, err := p.events().PublishBatch(s.creds.publisherCtx(cctx), &webhooksv1.PublishBatchRequest{Events: events[bt.from:bt.to]})
				c()
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
		if len(top) > m.s.b.cfg.Top {
			top = top[:m.s.b.cfg.Top]
		}
		for i := range top {
			top[i].PerDelivery = round(float64(top[i].Calls)/float64(max(units, 1)), 3)
		}
		res.Top = top
	}
	var pgCPU float64
	if len(end.backendCPU) > 0 {
		for pid, c := range end.backendCPU {
			pgCPU += c - m.start.backendCPU[pid]
		}
		res.PGBackendCPUSeconds = round(pgCPU, 2)
	}
	loadSecs := m.tEnd.Sub(m.t0).Seconds()
	var cpu float64
	for i, p := range m.s.procs {
		a, b := m.procs[i], m.procsEnd[i]
		cpu += b.cpuSecs - a.cpuSecs
		res.PerProcess = append(res.PerProcess, procFigures{
			Name: p.name, CPUSeconds: round(b.cpuSecs-a.cpuSecs, 2),
			RSSPeakMB: round(float64(b.hwmKB)/1024, 1), RSSEndMB: round(float64(b.rssKB)/1024, 1),
		})
		res.RSSPeakMB = math.Max(res.RSSPeakMB, round(float64(b.hwmKB)/1024, 1))
	}
	res.CPUSeconds = round(cpu, 2)
	if loadSecs > 0 {
		res.CPUCores = round(cpu/loadSecs, 2)
		res.BenchCPUCores = round((m.benchEnd.cpuSecs-m.bench.cpuSecs)/loadSecs, 2)
		if len(end.backendCPU) > 0 {
			res.PGBackendCPUCores = round(pgCPU/loadSecs, 2)
		}
	}
	res.Outcomes = map[string]float64{}
	for i, p := range m.s.procs {
		after, err := p.scrape(ctx)
		if err != nil {
			return fmt.Errorf("scrape %s: %w", p.name, err)
		}
		for k, v := range after {
			d := v - m.metrics[i][k]
			switch {
			case k == "dispatcher_delivery_snoozes_total":
				res.Snoozes += d
			case strings.HasPrefix(k, "dispatcher_deliveries_total/"):
				res.Outcomes[strings.TrimPrefix(k, "dispatcher_deliveries_total/")] += d
			case strings.HasPrefix(k, "dispatcher_delivery_snoozes_total/"):
				res.Outcomes["snooze:"+strings.TrimPrefix(k, "dispatcher_delivery_snoozes_total/")] += d
			}
		}
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
	}
	return nil
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
