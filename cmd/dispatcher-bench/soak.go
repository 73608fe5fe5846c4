package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
	"github.com/standmeet/webhook-dispatcher/internal/retention"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// The soak scenario: a steady load for a long time, sampled over time, to
// show that memory, goroutines, connections and every table the load writes
// level off (retention and River's cleaner removing as fast as the load
// adds) rather than grow with the run.

// soakFigures is the soak scenario's own part of its result.
type soakFigures struct {
	DurationS    float64 `json:"duration_s"`
	RatePerS     int     `json:"offered_rate_per_s"`
	Retention    string  `json:"retention"`
	PruneEvery   string  `json:"prune_every"`
	SampleEveryS float64 `json:"sample_every_s"`
	// WarmupS: samples before this (retention, a prune interval and
	// River's cleaner pass after the load started) are not judged.
	WarmupS     float64      `json:"warmup_s"`
	Samples     []soakSample `json:"samples"`
	Levels      []soakLevel  `json:"levels,omitempty"`
	HeapProfile string       `json:"heap_profile,omitempty"`
	HeapTop     []string     `json:"heap_top,omitempty"`
	HeapGrowth  []string     `json:"heap_growth_top,omitempty"`
	// Vacuum is each sampled table's live and dead rows and autovacuum
	// runs at the end (pg_stat_user_tables).
	Vacuum     []soakVacuum `json:"vacuum,omitempty"`
	StatsBound int64        `json:"endpoint_stats_bound_rows"`
	// ConnBound: the pool's size and the connections taken out of it for
	// LISTEN for good (soakListenConns).
	ConnBound int64         `json:"db_connections_bound"`
	Tables    []soakTableID `json:"tables"`
}

// soakTableID names a sampled table and says what bounds it.
type soakTableID struct {
	Name  string `json:"name"`
	Bound string `json:"bound"`
}

// soakSample is the state at one moment of the soak.
type soakSample struct {
	AtS         float64 `json:"at_s"`
	Published   int64   `json:"published"`
	Delivered   int64   `json:"delivered"`
	RSSMB       float64 `json:"rss_mb"`
	HeapInuseMB float64 `json:"heap_inuse_mb"`
	Goroutines  int64   `json:"goroutines"`
	DBConns     int64   `json:"db_connections"`
	// Tables, in soakTables order; JobsPending is river_job's unfinished rows.
	Tables      []soakTableSize `json:"tables"`
	JobsPending int64           `json:"river_job_pending"`
	SchemaMB    float64         `json:"schema_mb"`
	// Relations: the bytes of every table and index of the schema (a
	// table's TOAST counted with it), to tell which one grows.
	Relations map[string]int64 `json:"relation_bytes"`
	// Draining: taken after the load stopped.
	Draining bool `json:"draining,omitempty"`
}

type soakVacuum struct {
	Table       string `json:"table"`
	Live        int64  `json:"live_rows"`
	Dead        int64  `json:"dead_rows"`
	Autovacuums int64  `json:"autovacuums"`
	Autoanalyze int64  `json:"autoanalyzes"`
}

type soakTableSize struct {
	Rows  int64   `json:"rows"`
	Bytes int64   `json:"bytes"`
	MB    float64 `json:"mb"`
}

// soakLevel says whether one series levelled off: its median over the
// second half of the judged samples against the first half's. Medians, not
// highest values: a table pruned once a minute saw-tooths, and the heap and
// goroutines spike for a sample, neither of which is growth. A series with
// a bound of its own (connections: the pool; endpoint_stats: the
// endpoints) is judged by its highest value against that bound instead.
type soakLevel struct {
	Series       string  `json:"series"`
	Judged       bool    `json:"judged"`
	FirstMedian  float64 `json:"first_half_median"`
	SecondMedian float64 `json:"second_half_median"`
	Max          float64 `json:"max"`
	GrowthPct    float64 `json:"growth_pct"`
	Level        bool    `json:"levels_off"`
	Bounded      bool    `json:"bounded,omitempty"`
	Bound        float64 `json:"bound,omitempty"`
	Note         string  `json:"note,omitempty"`
}

// soakTables are the tables the soak follows: everything the load writes.
var soakTables = []soakTableID{
	{"river_job", "finished jobs: River's cleaner after min(retention, 24 h) (failed: 7 days)"},
	{"events", "the prune job after the retention"},
	{"delivery_attempts", "the prune job after the retention"},
	{"endpoint_stats", "per endpoint: minute rows 2 h, hour rows 8 days"},
}

// soakGrowthPct is how much a series may grow from the first half of the
// judged samples to the second and still count as level: rows pruned once
// per prune interval saw-tooth by up to a fifth of the retention's rows.
const soakGrowthPct = 10

// soakListenConns are the connections a dispatcher takes out of its pool
// for good, for LISTEN: the lease channel and the relay's. (River's
// notifier holds one of the pool's.) Measured: a process with
// DISPATCHER_DB_MAX_CONNS=5 under load peaked at 7 sessions.
const soakListenConns = 2

// soakSenders publish concurrently, as S5 does.
const soakSenders = 32

// soakEndpoints: 100 owners with one endpoint each (spreadOwners), every
// event one delivery.
const soakEndpoints = spreadEndpoints

// soakEvery is the time between samples: sample if set, else a thirtieth of
// the soak, 5 s to 1 min. A default that divides the prune interval, or is a
// multiple of it, would land at the same point of every prune cycle, so
// every sample would show one phase of the tables' saw-tooth (at a 5-minute
// retention the prune job runs every minute, and one-minute samples saw only
// the low point just after each prune); it is shortened by a twelfth so that
// the samples walk through the cycle. A sample interval the caller set is
// kept as given.
func soakEvery(sample, duration, prune time.Duration) time.Duration {
	if sample > 0 {
		return sample
	}
	every := min(time.Minute, max(5*time.Second, duration/30))
	if prune > 0 && (prune%every == 0 || every%prune == 0) {
		every -= every / 12
	}
	return every
}

func (b *bench) soak(ctx context.Context) (res result) {
	c := b.cfg
	events := int(c.SoakDuration.Seconds() * float64(c.SoakRate))
	res = result{Scenario: "soak", Unit: "delivery", Endpoints: soakEndpoints, Events: events, Expected: int64(events),
		Title: fmt.Sprintf("soak: %d/s offered for %s (one Publish per event, one delivery each), retention %s", c.SoakRate, c.SoakDuration, c.SoakRetention)}
	defer func() { r := recover(); b.recovered(&res, r) }()
	prune := retention.Interval(c.SoakRetention)
	every := soakEvery(c.SoakSample, c.SoakDuration, prune)
	fig := &soakFigures{
		DurationS: c.SoakDuration.Seconds(), RatePerS: c.SoakRate, Retention: c.SoakRetention.String(), PruneEvery: prune.String(),
		SampleEveryS: every.Seconds(),
		// Rows are removed once they are a retention old, by a job that
		// runs every prune interval (River's cleaner every 30 s): only then
		// can a table stop growing.
		WarmupS:    (c.SoakRetention + prune + 30*time.Second).Seconds(),
		StatsBound: soakEndpoints * int64(attempt.MinuteBucketsKept/time.Minute+attempt.HourBucketsKept/time.Hour+2),
		Tables:     soakTables,
	}
	res.Soak = fig

	s, err := b.newSession("soak")
	if err != nil {
		return failed(res, err)
	}
	defer s.close()
	defer s.conclude(&res)
	if s.recv, err = b.newReceivers(soakEndpoints, soakEndpoints, b.cfg.Latency, min(events, 1<<20)); err != nil {
		return failed(res, err)
	}
	// The profiler for the heap profiles; the retention under test.
	if err := s.start(ctx, 1, "DISPATCHER_PPROF=true", "DISPATCHER_RETENTION="+c.SoakRetention.String()); err != nil {
		return failed(res, err)
	}
	res.Env = s.env
	for _, kv := range s.env {
		if v, ok := strings.CutPrefix(kv, "DISPATCHER_DB_MAX_CONNS="); ok {
			n, _ := strconv.Atoi(v)
			fig.ConnBound = int64(n) + soakListenConns
		}
	}
	if err := s.createEndpoints(ctx, spreadOwners()); err != nil {
		return failed(res, err)
	}
	m, err := s.begin(ctx)
	if err != nil {
		return failed(res, err)
	}
	p := s.procs[0]
	t0 := time.Now()
	var published atomic.Int64

	// The sampler: every `every` until the drain is over.
	var (
		sampleMu  sync.Mutex
		samplerTx int64
		warmHeap  string
		draining  atomic.Bool
	)
	sampleOnce := func() {
		sm, tx := s.soakSample(ctx, p, t0, published.Load())
		sm.Draining = draining.Load()
		sampleMu.Lock()
		fig.Samples = append(fig.Samples, sm)
		samplerTx += tx
		sampleMu.Unlock()
		b.progressf("soak %s: published %d, delivered %d; RSS %.1f MB, heap %.1f MB, %d goroutines, %d DB connections; rows: river_job %d (%d pending), events %d, attempts %d, stats %d; schema %.1f MB",
			time.Duration(sm.AtS*float64(time.Second)).Round(time.Second), sm.Published, sm.Delivered, sm.RSSMB, sm.HeapInuseMB, sm.Goroutines, sm.DBConns,
			sm.Tables[0].Rows, sm.JobsPending, sm.Tables[1].Rows, sm.Tables[2].Rows, sm.Tables[3].Rows, sm.SchemaMB)
	}
	stopSampler := make(chan struct{})
	samplerDone := make(chan struct{})
	go func() {
		defer close(samplerDone)
		tick := time.NewTicker(every)
		defer tick.Stop()
		warm := time.NewTimer(time.Duration(fig.WarmupS * float64(time.Second)))
		defer warm.Stop()
		sampleOnce()
		for {
			select {
			case <-stopSampler:
				return
			case <-ctx.Done():
				return
			case <-warm.C:
				// The heap as the steady state begins, to diff the end's against.
				if path, err := s.heapProfile(ctx, p, "warm"); err == nil {
					warmHeap = path
				} else {
					b.progressf("soak: heap profile at warm-up: %v", err)
				}
			case <-tick.C:
				sampleOnce()
			}
		}
	}()

	// The publisher: a fixed rate from soakSenders callers, events made as
	// they are sent (an hour at 300/s is a million of them).
	prefix := "soak" + randomSuffix()
	occurred := make([]time.Time, events)
	interval := time.Second / time.Duration(c.SoakRate)
	jobs := make(chan int, soakSenders*4)
	var (
		wg       sync.WaitGroup
		late     atomic.Int64
		failures atomic.Int64
		firstErr atomic.Value
		rpcMu    sync.Mutex
		rpc      = make([]time.Duration, 0, min(events, 1<<20))
	)
	for range soakSenders {
		wg.Go(func() {
			for i := range jobs {
				e := newEvent(prefix, "bench-o"+strconv.Itoa(i%soakEndpoints), s1Types[i%10].typ, i)
				e.OccurredAt = timestamppb.New(occurred[i])
				t := time.Now()
				err := s.retryUnavailable(ctx, func(ctx context.Context) error {
					_, err := p.events().Publish(s.creds.publisherCtx(ctx), &webhooksv1.PublishRequest{Event: e})
					return err
				})
				d := time.Since(t)
				if err != nil {
					failures.Add(1)
					firstErr.CompareAndSwap(nil, err)
					continue
				}
				published.Add(1)
				rpcMu.Lock()
				if len(rpc) < cap(rpc) {
					rpc = append(rpc, d)
				}
				rpcMu.Unlock()
			}
		})
	}
	for i := 0; i < events && ctx.Err() == nil && failures.Load() == 0; i++ {
		at := t0.Add(time.Duration(i) * interval)
		if wait := time.Until(at); wait > 0 {
			time.Sleep(wait)
		} else if wait < -50*time.Millisecond {
			late.Add(1)
		}
		occurred[i] = at
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	res.PublishSeconds = round(time.Since(t0).Seconds(), 3)
	stopSampling := func() {
		select {
		case <-stopSampler:
		default:
			close(stopSampler)
		}
		<-samplerDone
	}
	defer stopSampling()
	if n := failures.Load(); n > 0 {
		return failed(res, fmt.Errorf("%d publishes failed, first: %v", n, firstErr.Load()))
	}
	if ctx.Err() != nil {
		return failed(res, ctx.Err())
	}
	draining.Store(true)
	if n := late.Load(); n > 0 {
		res.notef("%d events handed to the senders more than 50 ms late (bench overloaded)", n)
	}
	q, _ := durationQuantiles(rpc, 0)
	res.PublishMs = &latency{P50: q[0], P99: q[1], Max: q[2]}

	waitErr := s.recv.wait(ctx, res.Expected)
	m.loadDone()
	receipts := s.recv.snapshot()
	res.Deliveries = int64(len(receipts))
	res.Duplicates = s.recv.dups.Load()
	res.MaxConcurrencyPerEndpoint = s.recv.maxConcurrency()
	if last := lastReceipt(receipts); !last.IsZero() {
		res.Seconds = round(last.Sub(t0).Seconds(), 3)
		if res.Seconds > 0 {
			res.Rate = round(float64(res.Deliveries)/res.Seconds, 1)
		}
	}
	occ := make(map[string]time.Time, events)
	for i, at := range occurred {
		if !at.IsZero() {
			occ[prefix+"-"+strconv.Itoa(i)] = at
		}
	}
	latencies(&res, receipts, occ)
	if waitErr != nil {
		return failed(res, waitErr)
	}
	res.Unsettled = m.settle(ctx, 20*time.Second)
	stopSampling()
	sampleOnce() // the state once drained
	fig.Vacuum = s.soakVacuumState(ctx)
	m.ownTx += samplerTx + int64(len(fig.Vacuum))
	fig.Levels = soakLevels(fig)

	if path, err := s.heapProfile(ctx, p, "end"); err != nil {
		res.notef("heap profile: %v", err)
	} else {
		fig.HeapProfile = path
		fig.HeapTop = pprofTop(ctx, path, "", 12)
		if warmHeap != "" {
			fig.HeapGrowth = pprofTop(ctx, path, warmHeap, 8)
		}
	}
	if err := m.finish(ctx, &res, res.Deliveries); err != nil {
		return failed(res, err)
	}
	if allowed := max(res.AllowedInFlight, 1); res.MaxConcurrencyPerEndpoint > allowed {
		res.notef("LEASE VIOLATION: an endpoint had %d concurrent POSTs (max_in_flight %d)", res.MaxConcurrencyPerEndpoint, allowed)
	}
	if n := s.retries.Load(); n > 0 {
		res.notef("%d publishes retried after Unavailable", n)
	}
	if res.Duplicates > 0 {
		res.notef("%d duplicate deliveries (same webhook-id to the same endpoint)", res.Duplicates)
	}
	if res.Unsettled > 0 {
		res.notef("%d jobs still unfinished 20s after the last delivery", res.Unsettled)
	}
	if !b.cfg.IsolatedDB {
		res.notef("DB connections count every backend of the database (-isolated-db=false): other clients too")
	}
	return res
}

// soakSample reads the process and the schema. It returns the sample and
// how many transactions of the bench's own it took.
func (s *session) soakSample(ctx context.Context, p *proc, t0 time.Time, published int64) (soakSample, int64) {
	sm := soakSample{AtS: round(time.Since(t0).Seconds(), 1), Published: published, Delivered: s.recv.unique.Load(),
		Tables: make([]soakTableSize, len(soakTables))}
	ps := p.sample()
	sm.RSSMB = round(float64(ps.rssKB)/1024, 1)
	if mm, err := p.scrape(ctx); err == nil {
		sm.Goroutines = int64(mm["go_goroutines"])
		sm.HeapInuseMB = round(mm["go_memstats_heap_inuse_bytes"]/(1<<20), 1)
	}
	var tx int64
	// Every backend of the measured database but the bench's own: the
	// dispatcher's pool and its listener.
	_ = s.b.admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND coalesce(application_name, '') <> $1 AND pid <> pg_backend_pid()`, benchAppName).Scan(&sm.DBConns)
	tx++
	// Exact counts: estimates lag behind autovacuum's ANALYZE, which is
	// what a soak must not depend on.
	var sql strings.Builder
	sql.WriteString("SELECT ")
	for _, t := range soakTables {
		fmt.Fprintf(&sql, "(SELECT count(*) FROM %[1]s), pg_total_relation_size('%[1]s'), ", s.table(t.Name))
	}
	fmt.Fprintf(&sql, "(SELECT count(*) FROM %s WHERE finalized_at IS NULL), ", s.table("river_job"))
	sql.WriteString(`(SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::bigint FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relkind IN ('r', 'm'))`)
	dest := make([]any, 0, 2*len(soakTables)+2)
	for i := range sm.Tables {
		dest = append(dest, &sm.Tables[i].Rows, &sm.Tables[i].Bytes)
	}
	var schemaBytes int64
	dest = append(dest, &sm.JobsPending, &schemaBytes)
	if err := s.b.admin.QueryRow(ctx, sql.String(), s.schema).Scan(dest...); err != nil {
		s.b.progressf("soak: table sizes: %v", err)
	}
	tx++
	for i := range sm.Tables {
		sm.Tables[i].MB = round(float64(sm.Tables[i].Bytes)/(1<<20), 2)
	}
	sm.SchemaMB = round(float64(schemaBytes)/(1<<20), 1)
	rows, err := s.b.admin.Query(ctx, `
		SELECT c.relname, pg_relation_size(c.oid) + coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0)
		  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		 WHERE n.nspname = $1 AND c.relkind IN ('r', 'i', 'm')`, s.schema)
	tx++
	if err == nil {
		sm.Relations = map[string]int64{}
		for rows.Next() {
			var name string
			var n int64
			if rows.Scan(&name, &n) == nil {
				sm.Relations[name] = n
			}
		}
		rows.Close()
	}
	return sm, tx
}

// soakVacuumState reads pg_stat_user_tables for the sampled tables.
func (s *session) soakVacuumState(ctx context.Context) []soakVacuum {
	out := make([]soakVacuum, 0, len(soakTables))
	for _, t := range soakTables {
		v := soakVacuum{Table: t.Name}
		_ = s.b.admin.QueryRow(ctx, `SELECT n_live_tup, n_dead_tup, autovacuum_count, autoanalyze_count
			FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2`, s.schema, t.Name).
			Scan(&v.Live, &v.Dead, &v.Autovacuums, &v.Autoanalyze)
		out = append(out, v)
	}
	return out
}

// soakLevels judges every series over the samples taken under load after
// the warm-up (see soakLevel).
func soakLevels(fig *soakFigures) []soakLevel {
	var judged []soakSample
	for _, sm := range fig.Samples {
		if !sm.Draining && sm.AtS >= fig.WarmupS {
			judged = append(judged, sm)
		}
	}
	type series struct {
		name  string
		get   func(soakSample) float64
		bound float64 // > 0: judged against it
		note  string
	}
	all := []series{
		{"RSS MB", func(s soakSample) float64 { return s.RSSMB }, 0, ""},
		{"heap in use MB", func(s soakSample) float64 { return s.HeapInuseMB }, 0, ""},
		{"goroutines", func(s soakSample) float64 { return float64(s.Goroutines) }, 0, ""},
		// A pool opens connections as concurrency asks and keeps them
		// (idle ones close after 30 min): bounded by its size.
		{"DB connections", func(s soakSample) float64 { return float64(s.DBConns) }, float64(fig.ConnBound),
			fmt.Sprintf("bound %d (DISPATCHER_DB_MAX_CONNS and %d LISTEN connections)", fig.ConnBound, soakListenConns)},
		{"schema MB", func(s soakSample) float64 { return s.SchemaMB }, 0, ""},
	}
	for i, t := range soakTables {
		var bound float64
		note := ""
		if t.Name == "endpoint_stats" {
			// Bounded by the endpoints, not by the run.
			bound = float64(fig.StatsBound)
			note = fmt.Sprintf("grows by one minute row per endpoint per minute for 2 h, then levels off; bound %d rows (%d endpoints × (120 minute + 192 hour + 2) rows)",
				fig.StatsBound, soakEndpoints)
		}
		all = append(all, series{t.Name + " rows", func(s soakSample) float64 { return float64(s.Tables[i].Rows) }, bound, note})
		if bound == 0 {
			all = append(all, series{t.Name + " MB", func(s soakSample) float64 { return s.Tables[i].MB }, 0, note})
		}
	}
	out := make([]soakLevel, 0, len(all))
	for _, se := range all {
		l := soakLevel{Series: se.name, Note: se.note, Bound: se.bound, Bounded: se.bound > 0}
		if len(judged) < 4 {
			l.Note = fmt.Sprintf("not judged: %d samples after the %.0f s warm-up (run longer than about twice the retention)", len(judged), fig.WarmupS)
			out = append(out, l)
			continue
		}
		l.Judged = true
		values := make([]float64, len(judged))
		for i, sm := range judged {
			values[i] = se.get(sm)
			l.Max = math.Max(l.Max, values[i])
		}
		half := len(values) / 2
		l.FirstMedian, l.SecondMedian = median(values[:half]), median(values[half:])
		if l.FirstMedian > 0 {
			l.GrowthPct = round(100*(l.SecondMedian-l.FirstMedian)/l.FirstMedian, 1)
		} else if l.SecondMedian > 0 {
			l.GrowthPct = 100
		}
		if l.Bounded {
			l.Level = l.Max <= l.Bound
		} else {
			l.Level = l.GrowthPct <= soakGrowthPct
		}
		out = append(out, l)
	}
	return out
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else if n > 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return 0
}

// heapProfile saves the process's heap profile (after a GC) next to the
// logs (-logs) or in the temporary directory, and returns its path.
func (s *session) heapProfile(ctx context.Context, p *proc, label string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.opsAddr+"/debug/pprof/heap?gc=1", nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET /debug/pprof/heap: %s (is DISPATCHER_PPROF honoured?)", resp.Status)
	}
	dir := s.b.cfg.KeepLogs
	if dir == "" {
		dir = os.TempDir()
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-heap-%s.pb.gz", s.schema, label))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		_ = f.Close()
		return "", err
	}
	return path, f.Close()
}

// pprofTop is `go tool pprof -top` of a heap profile (in-use bytes), or of
// its growth over base: the first n lines of the table.
func pprofTop(ctx context.Context, path, base string, n int) []string {
	args := []string{"tool", "pprof", "-top", "-sample_index=inuse_space", "-nodecount=" + strconv.Itoa(n)}
	if base != "" {
		args = append(args, "-diff_base="+base)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", append(args, path)...).Output()
	if err != nil {
		return []string{"go tool pprof: " + err.Error()}
	}
	// The header before "Showing nodes" names the file, build and time.
	var lines []string
	table := false
	for line := range bytes.Lines(out) {
		l := strings.TrimRight(string(line), "\n")
		table = table || strings.HasPrefix(l, "Showing nodes")
		if table && l != "" {
			lines = append(lines, l)
		}
	}
	return lines
}

// writeSoak prints the soak's samples and verdicts.
func writeSoak(w io.Writer, fig *soakFigures) {
	fmt.Fprintf(w, "  retention %s (prune job every %s); samples every %.0f s; judged after the %.0f s warm-up, second half against first\n",
		fig.Retention, fig.PruneEvery, fig.SampleEveryS, fig.WarmupS)
	fmt.Fprintln(w, "  over time (rows / MB; river_job pending = unfinished jobs; * = after the load stopped):")
	fmt.Fprintf(w, "  %7s %9s %9s %7s %7s %6s %5s %17s %8s %15s %15s %15s %8s\n",
		"t", "published", "delivered", "RSS MB", "heap MB", "gorout", "conns", "river_job (pend)", "job MB", "events / MB", "attempts / MB", "stats / MB", "schemaMB")
	for _, sm := range fig.Samples {
		mark := ""
		if sm.Draining {
			mark = "*"
		}
		t := sm.Tables
		fmt.Fprintf(w, "  %6.0fs%1s %9d %9d %7.1f %7.1f %6d %5d %9d (%5d) %8.2f %8d/%6.2f %8d/%6.2f %8d/%6.2f %8.1f\n",
			sm.AtS, mark, sm.Published, sm.Delivered, sm.RSSMB, sm.HeapInuseMB, sm.Goroutines, sm.DBConns,
			t[0].Rows, sm.JobsPending, t[0].MB, t[1].Rows, t[1].MB, t[2].Rows, t[2].MB, t[3].Rows, t[3].MB, sm.SchemaMB)
	}
	for i, l := range fig.Levels {
		switch {
		case !l.Judged:
			if i == 0 {
				fmt.Fprintf(w, "  levels: %s\n", l.Note)
			}
		default:
			verdict := "levels off"
			switch {
			case l.Bounded && l.Level:
				verdict = "within its bound"
			case l.Bounded:
				verdict = "PAST ITS BOUND"
			case !l.Level:
				verdict = "GROWS"
			}
			fmt.Fprintf(w, "  %-24s %s: median %s → %s (%+.1f %%), max %s", l.Series, verdict, trimFloat(l.FirstMedian), trimFloat(l.SecondMedian), l.GrowthPct, trimFloat(l.Max))
			if l.Note != "" {
				fmt.Fprintf(w, "; %s", l.Note)
			}
			fmt.Fprintln(w)
		}
	}
	writeRelations(w, fig)
	for _, v := range fig.Vacuum {
		fmt.Fprintf(w, "  %-18s at the end: %d live, %d dead rows; %d autovacuums, %d autoanalyzes\n", v.Table, v.Live, v.Dead, v.Autovacuums, v.Autoanalyze)
	}
	if fig.HeapProfile != "" {
		fmt.Fprintf(w, "  heap profile at the end: %s (go tool pprof -top %s)\n", fig.HeapProfile, fig.HeapProfile)
		for _, l := range fig.HeapTop {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
	if len(fig.HeapGrowth) > 0 {
		fmt.Fprintln(w, "  heap growth since the warm-up (-diff_base):")
		for _, l := range fig.HeapGrowth {
			fmt.Fprintf(w, "    %s\n", l)
		}
	}
}

// writeRelations lists the schema's relations of 1 MB or more at the end:
// their size at the first judged sample (or the first) and at the end.
func writeRelations(w io.Writer, fig *soakFigures) {
	if len(fig.Samples) == 0 {
		return
	}
	first := fig.Samples[0]
	for _, sm := range fig.Samples {
		if sm.AtS >= fig.WarmupS {
			first = sm
			break
		}
	}
	last := fig.Samples[len(fig.Samples)-1]
	names := make([]string, 0, len(last.Relations))
	for name, n := range last.Relations {
		if n >= 1<<20 {
			names = append(names, name)
		}
	}
	slices.SortFunc(names, func(a, b string) int { return cmp.Compare(last.Relations[b], last.Relations[a]) })
	if len(names) == 0 {
		return
	}
	fmt.Fprintf(w, "  relations of 1 MB or more (MB at %.0f s → at the end):\n", first.AtS)
	for _, name := range names {
		fmt.Fprintf(w, "    %-48s %8.2f → %8.2f\n", name, float64(first.Relations[name])/(1<<20), float64(last.Relations[name])/(1<<20))
	}
}
