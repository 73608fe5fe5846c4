package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// bench is one run: its database, report and cleanup.
type bench struct {
	cfg *config
	out interface{ Write([]byte) (int, error) }
	log interface{ Write([]byte) (int, error) }

	// admin is a pool on the measured database (the isolated one when
	// -isolated-db): schema set-up, counters, the baseline.
	admin *pgxpool.Pool
	// dbURL is the URL the dispatcher processes get.
	dbURL string
	// dbName is the measured database.
	dbName string
	// statements: pg_stat_statements is loaded and queryable in dbName.
	statements   bool
	statementsNo string

	report report

	mu     sync.Mutex
	defers []func()
	procs  map[*proc]struct{}
}

func randomSuffix() string {
	var b [5]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// cleanup kills every child still running and drops what the run created,
// most recent first. It runs on every exit path.
func (b *bench) cleanup() {
	b.mu.Lock()
	procs := b.procs
	b.procs = nil
	defers := b.defers
	b.defers = nil
	b.mu.Unlock()
	for p := range procs {
		p.kill()
	}
	for _, f := range slices.Backward(defers) {
		f()
	}
}

func (b *bench) addDefer(f func()) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.defers = append(b.defers, f)
}

// openDatabase connects to the server and, with -isolated-db, creates the
// run's own database there.
func (b *bench) openDatabase(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	server, err := pgx.Connect(cctx, b.cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", redact(b.cfg.DatabaseURL), err)
	}
	defer server.Close(context.WithoutCancel(ctx))

	b.dbURL = b.cfg.DatabaseURL
	if b.cfg.IsolatedDB {
		u, err := url.Parse(b.cfg.DatabaseURL)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return errors.New("-isolated-db needs -database-url as a postgres:// URL (or pass -isolated-db=false)")
		}
		name := "bench_" + randomSuffix()
		if _, err := server.Exec(cctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
			return fmt.Errorf("create database %s (pass -isolated-db=false to use the URL's database): %w", name, err)
		}
		serverURL := b.cfg.DatabaseURL
		b.addDefer(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			conn, err := pgx.Connect(ctx, serverURL)
			if err != nil {
				fmt.Fprintf(b.log, "drop database %s: %v\n", name, err)
				return
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
				fmt.Fprintf(b.log, "drop database %s: %v\n", name, err)
			}
		})
		u.Path = "/" + name
		b.dbURL = u.String()
	}
	pcfg, err := pgxpool.ParseConfig(b.dbURL)
	if err != nil {
		return errors.New("invalid -database-url")
	}
	// Few connections: the dispatcher processes need the server's slots.
	pcfg.MaxConns = 4
	pcfg.MaxConnIdleTime = time.Minute
	pcfg.ConnConfig.RuntimeParams["application_name"] = benchAppName
	b.admin, err = pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	b.addDefer(b.admin.Close)
	if err := b.admin.QueryRow(cctx, `SELECT current_database()`).Scan(&b.dbName); err != nil {
		return err
	}

	// pg_stat_statements: loaded (shared_preload_libraries) and installed in
	// this database, or installable here (only in the isolated database: the
	// bench does not install extensions in someone else's).
	var preload string
	_ = b.admin.QueryRow(cctx, `SELECT current_setting('shared_preload_libraries')`).Scan(&preload)
	var installed bool
	_ = b.admin.QueryRow(cctx, `SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements')`).Scan(&installed)
	switch {
	case !strings.Contains(preload, "pg_stat_statements"):
		b.statementsNo = "pg_stat_statements is not in shared_preload_libraries on this server"
	case !installed && !b.cfg.IsolatedDB:
		b.statementsNo = "pg_stat_statements is loaded but not installed in database " + b.dbName
	default:
		if !installed {
			if _, err := b.admin.Exec(cctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
				b.statementsNo = "CREATE EXTENSION pg_stat_statements failed: " + err.Error()
				break
			}
		}
		var n int64
		if err := b.admin.QueryRow(cctx, `SELECT count(*) FROM pg_stat_statements`).Scan(&n); err != nil {
			b.statementsNo = "pg_stat_statements is not readable: " + err.Error()
			break
		}
		b.statements = true
	}
	if !b.statements {
		b.progressf("statements per delivery: n/a (%s)", b.statementsNo)
	}
	return nil
}

func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(the database URL)"
	}
	if p.User != nil {
		if _, ok := p.User.Password(); ok {
			p.User = url.UserPassword(p.User.Username(), "xxx")
		}
	}
	return p.String()
}

// machine describes where the figures were taken.
type machine struct {
	NumCPU     int               `json:"num_cpu"`
	MemTotalMB int64             `json:"mem_total_mb"`
	CPUModel   string            `json:"cpu_model,omitempty"`
	LoadAvg    string            `json:"load_avg_at_start,omitempty"`
	GoVersion  string            `json:"go_version"`
	Postgres   string            `json:"postgres"`
	Settings   map[string]string `json:"postgres_settings"`
	Statements string            `json:"pg_stat_statements"`
	Database   string            `json:"database"`
}

func (b *bench) machineInfo(ctx context.Context) machine {
	m := machine{NumCPU: runtime.NumCPU(), GoVersion: runtime.Version(), Settings: map[string]string{}, Database: b.dbName}
	if raw, err := os.ReadFile("/proc/meminfo"); err == nil {
		for line := range strings.SplitSeq(string(raw), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemTotal:" {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				m.MemTotalMB = kb / 1024
			}
		}
	}
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(raw), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if raw, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(raw)); len(f) >= 3 {
			m.LoadAvg = strings.Join(f[:3], " ")
		}
	}
	_ = b.admin.QueryRow(ctx, `SHOW server_version`).Scan(&m.Postgres)
	for _, s := range []string{"synchronous_commit", "fsync", "wal_sync_method", "shared_buffers", "max_connections",
		"commit_delay", "full_page_writes", "wal_level", "max_wal_size", "checkpoint_timeout", "shared_preload_libraries"} {
		var v string
		if err := b.admin.QueryRow(ctx, `SELECT current_setting($1)`, s).Scan(&v); err == nil {
			m.Settings[s] = v
		}
	}
	if b.statements {
		m.Statements = "available"
	} else {
		m.Statements = "n/a: " + b.statementsNo
	}
	return m
}

// baselineResult is the box's durable commit ceiling at one moment.
type baselineResult struct {
	At         time.Time `json:"at"`
	Conns      int       `json:"conns"`
	Seconds    float64   `json:"seconds"`
	Commits    int64     `json:"commits"`
	CommitsPS  float64   `json:"commits_per_s"`
	MeanMillis float64   `json:"mean_commit_ms"`
}

// baseline runs single-row durable UPDATE commits (autocommit, one row per
// connection so they never wait on each other's locks) for the configured
// duration and concurrency: what this box's Postgres can commit.
func (b *bench) baseline(ctx context.Context) (baselineResult, error) {
	schema := "bench_" + randomSuffix() + "_base"
	q := pgx.Identifier{schema}.Sanitize()
	if _, err := b.admin.Exec(ctx, `CREATE SCHEMA `+q+`;
		CREATE TABLE `+q+`.counter (id int PRIMARY KEY, n bigint NOT NULL) WITH (fillfactor = 50);
		INSERT INTO `+q+`.counter SELECT g, 0 FROM generate_series(1, `+strconv.Itoa(b.cfg.BaselineConns)+`) g`); err != nil {
		return baselineResult{}, err
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_, _ = b.admin.Exec(ctx, `DROP SCHEMA IF EXISTS `+q+` CASCADE`)
	}()
	// A pool of its own, closed afterwards so its connections do not count
	// against max_connections during the scenarios.
	pcfg, err := pgxpool.ParseConfig(b.dbURL)
	if err != nil {
		return baselineResult{}, err
	}
	pcfg.MaxConns = int32(b.cfg.BaselineConns)
	pcfg.ConnConfig.RuntimeParams["application_name"] = benchAppName
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return baselineResult{}, err
	}
	defer pool.Close()
	// Warm the pool so connection set-up is not measured.
	var conns []*pgxpool.Conn
	for range b.cfg.BaselineConns {
		c, err := pool.Acquire(ctx)
		if err != nil {
			for _, c := range conns {
				c.Release()
			}
			return baselineResult{}, err
		}
		conns = append(conns, c)
	}
	sql := `UPDATE ` + q + `.counter SET n = n + 1 WHERE id = $1`
	var (
		total  atomic.Int64
		nanos  atomic.Int64
		wg     sync.WaitGroup
		errMu  sync.Mutex
		errOne error
	)
	start := time.Now()
	deadline := start.Add(b.cfg.BaselineDur)
	for i, c := range conns {
		wg.Go(func() {
			defer c.Release()
			for time.Now().Before(deadline) && ctx.Err() == nil {
				t := time.Now()
				if _, err := c.Exec(ctx, sql, i+1); err != nil {
					errMu.Lock()
					errOne = err
					errMu.Unlock()
					return
				}
				nanos.Add(int64(time.Since(t)))
				total.Add(1)
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start).Seconds()
	if errOne != nil {
		return baselineResult{}, errOne
	}
	n := total.Load()
	r := baselineResult{At: start.UTC(), Conns: b.cfg.BaselineConns, Seconds: elapsed, Commits: n, CommitsPS: float64(n) / elapsed}
	if n > 0 {
		r.MeanMillis = float64(nanos.Load()) / float64(n) / 1e6
	}
	b.progressf("baseline: %.0f commits/s (%d connections, mean %.2f ms per commit)", r.CommitsPS, r.Conns, r.MeanMillis)
	return r, nil
}

// benchAppName marks the bench's own connections (left out of backend CPU).
const benchAppName = "dispatcher-bench"

// pgCounters is one snapshot of the measured database's activity.
type pgCounters struct {
	at         time.Time
	commits    int64
	rollbacks  int64
	walBytes   int64
	walRecords int64
	backends   int64
	statements map[int64]stmtCounter // by queryid; nil without pg_stat_statements
	// backendCPU is the CPU seconds of each server process serving the
	// dispatcher in this database (empty when the server is not local).
	backendCPU map[int]float64
}

type stmtCounter struct {
	query    string
	calls    int64
	millis   float64
	rows     int64
	walBytes int64
}

// snapshot reads the counters in one transaction (which itself counts as one
// commit and, with pg_stat_statements, a handful of statements: the caller
// accounts for them). pg_stat_* are updated by backends at most once a
// second, so callers wait statsFlush after activity before a snapshot.
func (b *bench) snapshot(ctx context.Context) (pgCounters, error) {
	c := pgCounters{at: time.Now()}
	err := pgx.BeginFunc(ctx, b.admin, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `SELECT xact_commit, xact_rollback, numbackends FROM pg_stat_database WHERE datname = current_database()`).
			Scan(&c.commits, &c.rollbacks, &c.backends); err != nil {
			return fmt.Errorf("pg_stat_database: %w", err)
		}
		// Cluster-wide: other databases' writes count too (noted in the report).
		if err := tx.QueryRow(ctx, `SELECT wal_bytes::bigint, wal_records FROM pg_stat_wal`).Scan(&c.walBytes, &c.walRecords); err != nil {
			return fmt.Errorf("pg_stat_wal: %w", err)
		}
		pids, err := backendPIDs(ctx, tx)
		if err != nil {
			return err
		}
		c.backendCPU = map[int]float64{}
		for _, pid := range pids {
			if s, err := sampleProc(pid); err == nil {
				c.backendCPU[pid] = s.cpuSecs
			}
		}
		if !b.statements {
			return nil
		}
		rows, err := tx.Query(ctx, `
			SELECT queryid, sum(calls)::bigint, sum(total_exec_time), sum(rows)::bigint, sum(wal_bytes)::bigint, min(query)
			  FROM pg_stat_statements
			 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
			 GROUP BY queryid`)
		if err != nil {
			return fmt.Errorf("pg_stat_statements: %w", err)
		}
		c.statements = map[int64]stmtCounter{}
		for rows.Next() {
			var id int64
			var s stmtCounter
			if err := rows.Scan(&id, &s.calls, &s.millis, &s.rows, &s.walBytes, &s.query); err != nil {
				rows.Close()
				return err
			}
			c.statements[id] = s
		}
		return rows.Err()
	})
	return c, err
}

// backendPIDs lists the server processes serving this database, except the
// bench's own: the dispatcher's (and, for S4, the relay's) connections.
// Their CPU is read from /proc, so it is only known for a local server.
func backendPIDs(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) ([]int, error) {
	rows, err := q.Query(ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND coalesce(application_name, '') <> $1 AND pid <> pg_backend_pid()`, benchAppName)
	if err != nil {
		return nil, fmt.Errorf("pg_stat_activity: %w", err)
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, fmt.Errorf("pg_stat_activity: %w", err)
	}
	out := make([]int, len(pids))
	for i, p := range pids {
		out[i] = int(p)
	}
	return out, nil
}

func (b *bench) backendPIDs(ctx context.Context) ([]int, error) { return backendPIDs(ctx, b.admin) }

// statsFlush is how long to wait for backends to publish their counters.
const statsFlush = 1100 * time.Millisecond

// stmtDelta is one statement's share of a scenario.
type stmtDelta struct {
	Query       string  `json:"query"`
	Calls       int64   `json:"calls"`
	PerDelivery float64 `json:"calls_per_delivery"`
	TotalMillis float64 `json:"total_ms"`
	MeanMillis  float64 `json:"mean_ms"`
	Rows        int64   `json:"rows"`
	WALBytes    int64   `json:"wal_bytes"`
}

func statementDeltas(a, b pgCounters) (int64, []stmtDelta) {
	if a.statements == nil || b.statements == nil {
		return -1, nil
	}
	var total int64
	var out []stmtDelta
	for id, s := range b.statements {
		prev := a.statements[id]
		d := stmtDelta{Query: compactSQL(s.query), Calls: s.calls - prev.calls, TotalMillis: s.millis - prev.millis, Rows: s.rows - prev.rows,
			WALBytes: s.walBytes - prev.walBytes}
		if d.Calls <= 0 {
			continue
		}
		d.MeanMillis = d.TotalMillis / float64(d.Calls)
		total += d.Calls
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Calls != out[j].Calls {
			return out[i].Calls > out[j].Calls
		}
		return out[i].TotalMillis > out[j].TotalMillis
	})
	return total, out
}

func compactSQL(q string) string {
	q = strings.Join(strings.Fields(q), " ")
	if len(q) > 160 {
		q = q[:157] + "..."
	}
	return q
}

// createSchema returns a fresh schema name (the dispatcher's --migrate
// creates it) and registers its drop.
func (b *bench) newSchema() (string, func()) {
	schema := "bench_" + randomSuffix()
	var once sync.Once
	drop := func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			if _, err := b.admin.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{schema}.Sanitize()+` CASCADE`); err != nil {
				fmt.Fprintf(b.log, "drop schema %s: %v\n", schema, err)
			}
		})
	}
	b.addDefer(drop)
	return schema, drop
}

// schemaURL is the database URL with search_path pointing at schema (pgx
// passes unknown URL parameters as run-time parameters), for the outbox.
func schemaURL(dbURL, schema string) string {
	u, err := url.Parse(dbURL)
	if err != nil {
		return dbURL
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// attemptHistorySQL starts the one statement that records a batch of
// attempts (internal/attempt), as pg_stat_statements shows it.
const attemptHistorySQL = "WITH a AS ( INSERT INTO delivery_attempts"

// historyCost is what recording the attempt history cost in one scenario,
// from that statement's pg_stat_statements counters. Each call is one
// statement in its own transaction: calls are its commits.
type historyCost struct {
	Calls           int64   `json:"statements"`
	CallsPerUnit    float64 `json:"commits_per_unit"`
	Attempts        int64   `json:"stats_rows"`
	WALBytes        int64   `json:"wal_bytes"`
	WALBytesPerUnit float64 `json:"wal_bytes_per_unit"`
	MillisPerUnit   float64 `json:"ms_per_unit"`
}

func attemptHistoryCost(stmts []stmtDelta, units int64) *historyCost {
	var h historyCost
	for _, s := range stmts {
		if strings.HasPrefix(s.Query, attemptHistorySQL) {
			h.Calls += s.Calls
			h.Attempts += s.Rows
			h.WALBytes += s.WALBytes
			h.MillisPerUnit += s.TotalMillis
		}
	}
	if h.Calls == 0 {
		return nil
	}
	u := float64(max(units, 1))
	h.CallsPerUnit = round(float64(h.Calls)/u, 4)
	h.WALBytesPerUnit = round(float64(h.WALBytes)/u, 0)
	h.MillisPerUnit = round(h.MillisPerUnit/u, 4)
	return &h
}
