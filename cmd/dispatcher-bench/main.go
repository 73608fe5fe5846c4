// Command dispatcher-bench is the dispatcher's load harness (`make bench`).
//
// It builds (or takes, -binary) the dispatcher, creates a fresh Postgres
// schema per scenario, starts one or more `dispatcher serve --migrate` child
// processes against it, runs fast HTTP receivers on loopback, creates
// endpoints and publishes events over gRPC (or writes outbox rows), and
// reports, per scenario: deliveries/s, end-to-end latency (occurred_at →
// received), Postgres commits and statements per delivery, snoozes per
// delivery, and the dispatcher's RSS and CPU. A baseline measured in the
// same run — single-row durable UPDATE commits at a fixed concurrency — turns
// every rate into a ratio, since absolute numbers drift on a shared machine.
//
//	go run ./cmd/dispatcher-bench                       # every scenario
//	go run ./cmd/dispatcher-bench -scenario S2,S3 -scale 0.2 -json out.json
//
// Scenarios (see docs/benchmarks.md): S1 sustained, S2 hot endpoint, S3
// fanout, S4 outbox relay (and S4d, relay with deliveries), S5 latency at a
// fixed offered rate of 200/s (and S5b, at 1,000/s), S6 scale-out (S1 with
// 1, 2 and 3 processes), S7 the peer table's scenario A (100 owners with one
// endpoint each, one Publish per event from 32 concurrent callers), S8 a
// rate-limited endpoint (10/s, 5,000 deliveries queued at once: 500 s at
// -scale 1; -scale 0.1 is a 50 s run), S9 event search (ListEvents and
// GetEvent over 10 million stored events), S10 a slow receiver (100 ms, 2,000
// deliveries queued at once) at max_in_flight 1 and 16, S11 hung receivers
// (20 of 100 endpoints never answer while the others get 500 events/s; run
// without them too, S11h0, for the healthy p99 to compare with), open (the
// open loop: Publish at 200, 500 and 1,000 events/s offered, each rate followed
// by its transport-inclusive floor: the same generator making a no-op gRPC
// call to the dispatcher, then one durable single-row INSERT and COMMIT per
// call over a pool of the dispatcher's size; Publish is held against the
// two added), S13 the fanout shape (200 events × 100 endpoints of one
// owner, every event to every endpoint). The soak
// (run only when named: -scenario soak) is a steady load for -soak-duration,
// sampling the dispatcher's RSS, heap, goroutines and connections and the
// size of every table the load writes, and judging whether each levels off;
// it ends with a heap profile. It runs alone, on a Postgres cluster of its
// own with autovacuum at Postgres's defaults (-soak-cluster).
//
// Receivers listen on one loopback port per endpoint, or, with -one-host, all
// on one port as distinct paths; every scenario reports how many TCP
// connections they accepted (the churn of the dispatcher's HTTP client pool).
// Each scenario is checked against its targets (MET / MISSED).
//
// All traffic stays on loopback; every loop is bounded in count and time;
// child processes are killed and schemas dropped on every exit path.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/standmeet/webhook-dispatcher/internal/retention"
)

// DefaultDatabaseURL is the local server, as for the dispatcher itself.
const DefaultDatabaseURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// allScenarios in run order.
var allScenarios = []string{"S1", "S2", "S3", "S4", "S4d", "S5", "S5b", "S6", "S7", "S8", "S9", "S10", "S11", "S12", "S13", "open", "soak"}

// defaultScenarios run when -scenario is not given: all but the soak, which
// takes as long as -soak-duration says.
var defaultScenarios = allScenarios[:len(allScenarios)-1]

type config struct {
	Binary        string
	DatabaseURL   string
	IsolatedDB    bool
	Scenarios     []string
	Scale         float64
	JSONPath      string
	BaselineConns int
	BaselineDur   time.Duration
	Timeout       time.Duration
	Env           []string
	S6Procs       []int
	// S10InFlight are the max_in_flight settings S10 runs at.
	S10InFlight []int32
	// OpenRates are the offered rates of the open loop, events/s.
	OpenRates  []int
	ConnBudget int
	Latency    time.Duration
	OneHost    bool
	// S8Live: S8 publishes while the endpoint delivers instead of queuing
	// the backlog behind a pause.
	S8Live bool
	// S10Live: S10 publishes its backlog while the endpoint delivers (so
	// the deliveries are handed off as they are fanned out) instead of
	// queuing it behind a pause.
	S10Live   bool
	Top       int
	KeepLogs  string
	SchemaSQL string
	Verbose   bool
	// The soak: how long it publishes, at what rate, with what retention,
	// and how often it samples (0: a thirtieth of the duration, 5 s to 1 min).
	SoakDuration  time.Duration
	SoakRate      int
	SoakRetention time.Duration
	SoakSample    time.Duration
	// SoakCluster: the soak runs on a Postgres cluster of its own.
	SoakCluster bool
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := flag.NewFlagSet("dispatcher-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenarios := fs.String("scenario", strings.Join(defaultScenarios, ","), "comma-separated scenarios to run: "+strings.Join(allScenarios, ",")+" (soak only when named)")
	s6 := fs.String("s6-procs", "1,2,3", "dispatcher process counts for S6")
	s10 := fs.String("s10-in-flight", "1,16", "max_in_flight settings S10 runs at")
	openRates := fs.String("open-rates", "200,500,1000", "offered rates (events/s) of the open loop (-scenario open)")
	var env stringList
	fs.StringVar(&c.Binary, "binary", "", "dispatcher binary to run; empty: go build ./cmd/dispatcher into a temporary directory")
	fs.StringVar(&c.DatabaseURL, "database-url", envOr("BENCH_DATABASE_URL", DefaultDatabaseURL), "Postgres server to measure against (env BENCH_DATABASE_URL); a URL, not a key=value DSN, when -isolated-db")
	fs.BoolVar(&c.IsolatedDB, "isolated-db", true, "create a temporary database on that server for the run (dropped afterwards), so pg_stat_database counts only this run's commits; false: schemas go into the URL's own database")
	fs.Float64Var(&c.Scale, "scale", 1, "multiply every scenario's counts and durations by this factor (e.g. 0.1 for a quick run)")
	fs.StringVar(&c.JSONPath, "json", "", "also write the results as JSON to this file")
	fs.IntVar(&c.BaselineConns, "baseline-conns", 32, "concurrency of the baseline commit loop")
	fs.DurationVar(&c.BaselineDur, "baseline-duration", 5*time.Second, "duration of each baseline measurement (one before, one after the scenarios)")
	fs.DurationVar(&c.Timeout, "timeout", 20*time.Minute, "upper bound on one scenario (set-up, load and drain)")
	fs.Var(&env, "env", "extra KEY=VALUE for every dispatcher process (repeatable), e.g. -env DISPATCHER_DELIVER_WORKERS=100")
	fs.IntVar(&c.ConnBudget, "conn-budget", 60, "total Postgres connections the dispatcher processes of one scenario may open; each process gets min(40, budget/processes) unless -env sets DISPATCHER_DB_MAX_CONNS")
	fs.DurationVar(&c.Latency, "receiver-latency", 0, "extra latency of every receiver response (S2 always uses 1ms)")
	fs.BoolVar(&c.S8Live, "s8-live", false, "S8: publish the deliveries while the rate-limited endpoint delivers, instead of queuing them behind a pause and releasing them at once")
	fs.BoolVar(&c.S10Live, "s10-live", false, "S10: publish the backlog while the endpoint delivers (handed off as it is fanned out), instead of queuing it behind a pause and releasing it at once")
	fs.BoolVar(&c.OneHost, "one-host", false, "put every endpoint on one receiver listener (one host, endpoint i at /e/i) instead of one listener per endpoint, so all deliveries share the dispatcher's per-host connection pool")
	fs.IntVar(&c.Top, "top", 12, "statements to list per scenario when pg_stat_statements is available (0: none)")
	fs.StringVar(&c.KeepLogs, "logs", "", "directory to write each dispatcher process's stderr to (default: kept in memory, tail shown on failure)")
	fs.StringVar(&c.SchemaSQL, "schema-sql", "", "experiments: SQL run in each scenario's schema (search_path set) once migrated, before any endpoint exists, e.g. \"DROP INDEX river_job_args_index\"")
	fs.BoolVar(&c.Verbose, "v", false, "progress output")
	fs.DurationVar(&c.SoakDuration, "soak-duration", 10*time.Minute, "soak: how long the steady load runs (an hour for the record); the tables can only be judged after about the retention plus its prune interval")
	fs.IntVar(&c.SoakRate, "soak-rate", 100, "soak: events/s offered, one Publish and one delivery each")
	fs.DurationVar(&c.SoakRetention, "soak-retention", retention.MinRetention, "soak: the dispatcher's DISPATCHER_RETENTION (at least "+retention.MinRetention.String()+")")
	fs.DurationVar(&c.SoakSample, "soak-sample", 0, "soak: time between samples (0: a thirtieth of -soak-duration, 5s..1m, shortened by a twelfth when it divides the prune interval or is a multiple of it)")
	fs.BoolVar(&c.SoakCluster, "soak-cluster", true, "soak: run on a Postgres cluster of its own (initdb and a server on a free loopback port, removed afterwards) with Postgres's default settings, autovacuum included, so that nothing else on a shared server shapes the table sizes; false: on -database-url")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	for s := range strings.SplitSeq(*scenarios, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		i := slices.IndexFunc(allScenarios, func(n string) bool { return strings.EqualFold(n, s) })
		if i < 0 {
			return nil, fmt.Errorf("unknown scenario %q: want some of %s", s, strings.Join(allScenarios, ","))
		}
		if !slices.Contains(c.Scenarios, allScenarios[i]) {
			c.Scenarios = append(c.Scenarios, allScenarios[i])
		}
	}
	slices.SortFunc(c.Scenarios, func(a, b string) int {
		return slices.Index(allScenarios, a) - slices.Index(allScenarios, b)
	})
	for s := range strings.SplitSeq(*s6, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 8 {
			return nil, fmt.Errorf("invalid -s6-procs entry %q: want 1..8", s)
		}
		c.S6Procs = append(c.S6Procs, n)
	}
	for s := range strings.SplitSeq(*s10, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 1000 {
			return nil, fmt.Errorf("invalid -s10-in-flight entry %q: want 1..1000", s)
		}
		c.S10InFlight = append(c.S10InFlight, int32(n))
	}
	for s := range strings.SplitSeq(*openRates, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 || n > 20000 {
			return nil, fmt.Errorf("invalid -open-rates entry %q: want 1..20000", s)
		}
		c.OpenRates = append(c.OpenRates, n)
	}
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); !ok || !strings.HasPrefix(k, "DISPATCHER_") {
			return nil, fmt.Errorf("invalid -env %q: want DISPATCHER_NAME=value", kv)
		}
	}
	c.Env = env
	if c.SoakCluster && slices.Contains(c.Scenarios, "soak") && len(c.Scenarios) > 1 {
		return nil, errors.New("the soak runs on a cluster of its own: run it alone (-scenario soak), or pass -soak-cluster=false to run it beside the others on -database-url")
	}
	switch {
	case c.Scale <= 0 || c.Scale > 10:
		return nil, fmt.Errorf("invalid -scale %v: want (0, 10]", c.Scale)
	case c.BaselineConns < 1 || c.BaselineConns > 200:
		return nil, fmt.Errorf("invalid -baseline-conns %d: want 1..200", c.BaselineConns)
	case c.BaselineDur < 500*time.Millisecond || c.BaselineDur > 5*time.Minute:
		return nil, fmt.Errorf("invalid -baseline-duration %s: want 500ms..5m", c.BaselineDur)
	case c.Timeout < 10*time.Second || c.Timeout > 2*time.Hour:
		return nil, fmt.Errorf("invalid -timeout %s: want 10s..2h", c.Timeout)
	case c.ConnBudget < 6:
		return nil, fmt.Errorf("invalid -conn-budget %d: want at least 6", c.ConnBudget)
	case c.Latency < 0 || c.Latency > 5*time.Second:
		return nil, fmt.Errorf("invalid -receiver-latency %s: want 0..5s", c.Latency)
	case c.SoakDuration < 30*time.Second || c.SoakDuration > 12*time.Hour:
		return nil, fmt.Errorf("invalid -soak-duration %s: want 30s..12h", c.SoakDuration)
	case c.SoakRate < 1 || c.SoakRate > 5000:
		return nil, fmt.Errorf("invalid -soak-rate %d: want 1..5000", c.SoakRate)
	case c.SoakRetention < retention.MinRetention:
		return nil, fmt.Errorf("invalid -soak-retention %s: the dispatcher takes at least %s", c.SoakRetention, retention.MinRetention)
	case c.SoakSample < 0 || c.SoakSample > 10*time.Minute:
		return nil, fmt.Errorf("invalid -soak-sample %s: want 0..10m", c.SoakSample)
	}
	return c, nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func main() { os.Exit(mainCode()) }

func mainCode() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(os.Stderr, "dispatcher-bench:", err)
		return 1
	}
	return 0
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	b := &bench{cfg: cfg, out: stdout, log: stderr}
	defer b.cleanup()

	if cfg.Binary == "" {
		dir, err := os.MkdirTemp("", "dispatcher-bench")
		if err != nil {
			return err
		}
		b.defers = append(b.defers, func() { _ = os.RemoveAll(dir) })
		cfg.Binary = filepath.Join(dir, "dispatcher")
		b.progressf("building the dispatcher")
		if err := buildDispatcher(ctx, cfg.Binary, stderr); err != nil {
			return err
		}
	}
	if cfg.KeepLogs != "" {
		if err := os.MkdirAll(cfg.KeepLogs, 0o755); err != nil {
			return err
		}
	}
	if cfg.SoakCluster && slices.Contains(cfg.Scenarios, "soak") {
		b.progressf("soak: starting a Postgres cluster of its own (autovacuum at Postgres's defaults)")
		cluster, err := startOwnCluster(ctx)
		if err != nil {
			return fmt.Errorf("soak: own cluster: %w", err)
		}
		b.defers = append(b.defers, cluster.stop)
		cfg.DatabaseURL = cluster.URL()
		fmt.Fprintf(stdout, "soak: on a Postgres cluster of its own (%s, initdb defaults but %s)\n", cluster.bindir, cluster.settings())
	}
	if err := b.openDatabase(ctx); err != nil {
		return err
	}
	b.report.Machine = b.machineInfo(ctx)
	b.report.Scale = cfg.Scale
	b.report.Env = cfg.Env
	b.report.StartedAt = time.Now().UTC()

	b.progressf("baseline (before): %d connections × %s of single-row UPDATE commits", cfg.BaselineConns, cfg.BaselineDur)
	before, err := b.baseline(ctx)
	if err != nil {
		return fmt.Errorf("baseline: %w", err)
	}
	b.report.Baseline = append(b.report.Baseline, before)

	for _, name := range cfg.Scenarios {
		if ctx.Err() != nil {
			break
		}
		results := b.runScenario(ctx, name)
		b.report.Results = append(b.report.Results, results...)
	}

	if ctx.Err() == nil {
		b.progressf("baseline (after)")
		after, err := b.baseline(ctx)
		if err != nil {
			fmt.Fprintln(stderr, "baseline (after):", err)
		} else {
			b.report.Baseline = append(b.report.Baseline, after)
		}
	}
	b.report.finish()
	b.report.writeTable(stdout)
	b.report.writeTargetSummary(stdout)
	if cfg.JSONPath != "" {
		if err := b.report.writeJSON(cfg.JSONPath); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nJSON written to %s\n", cfg.JSONPath)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return nil
}

func (b *bench) progressf(format string, args ...any) {
	fmt.Fprintf(b.log, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (b *bench) debugf(format string, args ...any) {
	if b.cfg.Verbose {
		b.progressf(format, args...)
	}
}
