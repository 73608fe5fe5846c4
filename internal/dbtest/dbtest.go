// Package dbtest gives every storage test its own migrated Postgres schema,
// so tests run with t.Parallel() against a real server; a test that needs
// no River client and no pool of its own takes a transaction instead
// (TestTx), rolled back when it ends.
//
// Migrating a schema (River's migrations and the dispatcher's) costs far more
// than emptying one, so a schema whose test is over is truncated and handed
// to the next test of the same test binary, unless the test changed its
// tables (then it is dropped). Wrap testing.M with WithCleanup in TestMain so
// the kept schemas are dropped when the binary's tests are done; schemas a
// crashed run left behind are dropped by a later run once they are a few
// hours old.
//
// The server is found in this order: DATABASE_URL (or TEST_DATABASE_URL);
// the local server on 127.0.0.1:5432; a testcontainers-go Postgres when a
// Docker engine answers. When none is reachable the test fails and says what
// is missing: a storage test is never silently skipped.
package dbtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"go.uber.org/goleak"

	"github.com/standmeet/webhook-dispatcher/internal/database"
)

// LocalURL is the conventional local server (trust auth) tried when no URL is set.
const LocalURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

var (
	serverOnce sync.Once
	serverURL  string
	errServer  error

	adminOnce sync.Once
	adminPool *pgxpool.Pool
	errAdmin  error
)

// URL returns the connection string of the test server, starting a container
// when that is the only way to get one.
func URL(tb testing.TB) string {
	tb.Helper()
	serverOnce.Do(func() { serverURL, errServer = findServer() })
	if errServer != nil {
		tb.Fatalf("dbtest: no Postgres for storage tests: %v", errServer)
	}
	return serverURL
}

func findServer() (string, error) {
	for _, env := range []string{"TEST_DATABASE_URL", "DATABASE_URL"} {
		if u := os.Getenv(env); u != "" {
			return u, nil
		}
	}
	conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(context.Background(), "tcp", "127.0.0.1:5432")
	if err == nil {
		_ = conn.Close()
		return LocalURL, nil
	}
	localErr := err

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := testcontainers.NewDockerProvider(); err != nil {
		return "", fmt.Errorf("DATABASE_URL is unset, 127.0.0.1:5432 refused (%w), and no Docker engine for testcontainers (%w); start Postgres or set DATABASE_URL", localErr, err)
	}
	container, err := tcpostgres.Run(ctx, "postgres:15-alpine",
		tcpostgres.WithDatabase("dispatcher_test"),
		tcpostgres.BasicWaitStrategies(),
	)
	if err != nil {
		return "", fmt.Errorf("start Postgres container: %w", err)
	}
	// The container lives as long as the test binary; Ryuk reaps it after.
	return container.ConnectionString(ctx, "sslmode=disable")
}

func admin(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	url := URL(tb)
	adminOnce.Do(func() {
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			errAdmin = err
			return
		}
		cfg.MaxConns = adminConns
		idleBriefly(cfg)
		adminPool, errAdmin = pgxpool.NewWithConfig(context.Background(), cfg)
	})
	if errAdmin != nil {
		tb.Fatalf("dbtest: admin pool: %v", errAdmin)
	}
	return adminPool
}

// The suite shares one server with whatever else runs on it, so every test's
// pool is small: a test binary holds adminConns plus, per running test,
// PoolConns and the sessions its River clients and listeners take out of the
// pool for LISTEN (pgx hijacks those, so they are on top of MaxConns), and
// connections idle for a second are closed. The Makefile runs one test binary
// at a time with two tests each, which keeps `make test` at about 20
// connections (README).
const (
	adminConns = 2
	// PoolConns is the size of DB.Pool: enough for a River client, its
	// workers and the test's own queries, which wait their turn otherwise.
	PoolConns = 4
)

// idleBriefly makes a pool close connections idle for a second: a test that
// waits (on a dispatcher process, on a receiver) then holds none, which is
// most of the suite's time, rather than keeping what it once needed.
func idleBriefly(cfg *pgxpool.Config) {
	cfg.MaxConnIdleTime = time.Second
	cfg.HealthCheckPeriod = time.Second
}

// schemaPrefix starts every schema this package creates; the creation time
// follows, so a later run can sweep what a crashed one left behind.
const schemaPrefix = "t_"

// sweepAfter is how old a leftover schema must be before a run drops it: far
// longer than any test binary runs.
const sweepAfter = 3 * time.Hour

// reuse holds migrated schemas whose tests have ended, ready for the next.
var reuse struct {
	sync.Mutex
	free []string
	// tables is what a freshly migrated schema holds (relations and
	// functions); a schema that holds anything else is not reused.
	tables string
	swept  bool
}

// WithCleanup returns m wrapped so that Run drops the schemas kept for reuse
// once the tests are done. Use it in TestMain, alone or under goleak:
//
//	func TestMain(m *testing.M) { goleak.VerifyTestMain(dbtest.WithCleanup(m)) }
func WithCleanup(m interface{ Run() int }) interface{ Run() int } { return cleanupM{m} }

type cleanupM struct{ m interface{ Run() int } }

func (c cleanupM) Run() int {
	code := c.m.Run()
	reuse.Lock()
	free := reuse.free
	reuse.free = nil
	reuse.Unlock()
	if txShared.pool != nil {
		txShared.pool.Close()
		free = append(free, txShared.schema)
	}
	if adminPool != nil {
		for _, schema := range free {
			_, _ = adminPool.Exec(context.Background(), `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
		}
		adminPool.Close()
	}
	return code
}

// VerifyTestMain runs the tests of a package that uses this harness: it drops
// the kept schemas afterwards (WithCleanup) and then fails the binary if any
// goroutine is left running (goleak), apart from the pgx pools' own
// housekeeping, which may still be winding down, and the extra ignores given.
// m is the package's *testing.M, or a wrapper whose Run sets something up
// around it.
func VerifyTestMain(m interface{ Run() int }, extra ...goleak.Option) {
	goleak.VerifyTestMain(WithCleanup(m), append([]goleak.Option{
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"),
		goleak.IgnoreAnyFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).triggerHealthCheck.func1"),
		goleak.IgnoreAnyFunction("github.com/jackc/puddle/v2.(*Pool[...]).createIdleResources"),
	}, extra...)...)
}

// txShared is the migrated schema that the TestTx tests of a test binary
// share, each in a transaction of its own that is never committed: nothing
// is ever left in it to empty.
var txShared struct {
	once   sync.Once
	pool   *pgxpool.Pool
	schema string
	err    error
}

// TestTx begins a transaction in a migrated schema that the test binary's
// TestTx tests share, and rolls it back when the test ends: for a storage
// test that needs no River client and no pool of its own (what it tests
// takes a pgx.Tx, or it runs its own SQL), it costs a BEGIN and a ROLLBACK
// instead of a schema. The transactions of tests running in parallel do
// not see each other's rows; rows with one key in two of them wait for each
// other, so such tests insert random ids (testfactory does).
func TestTx(tb testing.TB) pgx.Tx {
	tb.Helper()
	ctx := context.Background()
	url := URL(tb)
	adm := admin(tb)
	txShared.once.Do(func() {
		sweep(ctx, adm)
		txShared.schema = newSchemaName()
		if _, err := adm.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{txShared.schema}.Sanitize()); err != nil {
			txShared.err = fmt.Errorf("create schema: %w", err)
			return
		}
		cfg, err := database.PoolConfig(url, txShared.schema)
		if err != nil {
			txShared.err = err
			return
		}
		cfg.MaxConns = PoolConns
		idleBriefly(cfg)
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			txShared.err = fmt.Errorf("pool: %w", err)
			return
		}
		txShared.pool = pool
		if err := database.Migrate(ctx, pool, txShared.schema, slog.New(slog.DiscardHandler)); err != nil {
			txShared.err = fmt.Errorf("migrate: %w", err)
		}
	})
	if txShared.err != nil {
		tb.Fatalf("dbtest: shared schema: %v", txShared.err)
	}
	tx, err := txShared.pool.Begin(ctx)
	if err != nil {
		tb.Fatalf("dbtest: begin: %v", err)
	}
	tb.Cleanup(func() { _ = tx.Rollback(context.WithoutCancel(ctx)) })
	return tx
}

func newSchemaName() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return schemaPrefix + strconv.FormatInt(time.Now().Unix(), 10) + "_" + hex.EncodeToString(b[:])
}

// DB is one test's isolated, migrated schema.
type DB struct {
	// Pool has search_path set to Schema.
	Pool *pgxpool.Pool
	// Schema is the schema's name; River must be configured with it.
	Schema string
	// URL is the server's connection string (without the schema).
	URL string
}

// InsertOnlyClient returns a River client on the schema that only inserts
// jobs (no queues; never started), as the code under test is handed one.
func (db *DB) InsertOnlyClient(tb testing.TB) *river.Client[pgx.Tx] {
	tb.Helper()
	client, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Logger: slog.New(slog.DiscardHandler), Schema: db.Schema})
	if err != nil {
		tb.Fatalf("dbtest: River client: %v", err)
	}
	return client
}

// New creates a fresh schema, migrates it (River and the dispatcher) and
// returns a pool bound to it. The schema is dropped when the test ends.
func New(tb testing.TB) *DB {
	tb.Helper()
	return newDB(tb, true, true)
}

// NewUnshared is like New, but the schema is migrated for this test alone:
// never one another test has emptied, nor handed on when this one ends. For
// tests of the planner's choices: TRUNCATE leaves a table's statistics
// behind, and autovacuum may analyze a table the earlier test filled and
// emptied, so an emptied schema is not a new one to the planner.
func NewUnshared(tb testing.TB) *DB {
	tb.Helper()
	return newDB(tb, true, false)
}

// NewEmpty is like New but leaves the schema unmigrated.
func NewEmpty(tb testing.TB) *DB {
	tb.Helper()
	return newDB(tb, false, false)
}

// newDB returns a schema, migrated if migrate; shared, it may be one an
// earlier test emptied, and is emptied for a later one.
func newDB(tb testing.TB, migrate, shared bool) *DB {
	tb.Helper()
	ctx := context.Background()
	url := URL(tb)
	adm := admin(tb)
	sweep(ctx, adm)

	schema, reused := "", false
	if shared {
		schema, reused = takeFree()
	}
	if !reused {
		schema = newSchemaName()
		if _, err := adm.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
			tb.Fatalf("dbtest: create schema: %v", err)
		}
	}

	cfg, err := database.PoolConfig(url, schema)
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	cfg.MaxConns = PoolConns
	idleBriefly(cfg)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatalf("dbtest: pool: %v", err)
	}
	// One cleanup, registered first so it runs last: the test's own
	// cleanups (River clients, workers) have let go of the schema by then.
	tb.Cleanup(func() {
		pool.Close()
		ctx := context.WithoutCancel(ctx)
		if shared && release(ctx, adm, schema) {
			return
		}
		_, _ = adm.Exec(ctx, `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	})

	if migrate && !reused {
		if err := database.Migrate(ctx, pool, schema, slog.New(slog.DiscardHandler)); err != nil {
			tb.Fatalf("dbtest: migrate: %v", err)
		}
		reuse.Lock()
		if reuse.tables == "" {
			reuse.tables, err = contents(ctx, adm, schema)
		}
		reuse.Unlock()
		if err != nil {
			tb.Fatalf("dbtest: %v", err)
		}
	}
	return &DB{Pool: pool, Schema: schema, URL: url}
}

func takeFree() (string, bool) {
	reuse.Lock()
	defer reuse.Unlock()
	if n := len(reuse.free); n > 0 {
		schema := reuse.free[n-1]
		reuse.free = reuse.free[:n-1]
		return schema, true
	}
	return "", false
}

// release empties schema and keeps it for the next test, if it holds
// exactly what a migration creates. It reports whether it did.
func release(ctx context.Context, adm *pgxpool.Pool, schema string) bool {
	got, err := contents(ctx, adm, schema)
	reuse.Lock()
	want := reuse.tables
	reuse.Unlock()
	if err != nil || want == "" || got != want {
		return false
	}
	// Every table but the migration bookkeeping, sequences restarted, in
	// one statement (so foreign keys between them are no obstacle).
	var tables string
	err = adm.QueryRow(ctx, `
		SELECT string_agg(format('%I.%I', schemaname, tablename), ', ')
		  FROM pg_tables
		 WHERE schemaname = $1 AND tablename NOT IN ('river_migration', 'dispatcher_migration')`, schema).Scan(&tables)
	if err != nil || tables == "" {
		return false
	}
	// A session the test leaked could hold a lock forever; then the schema
	// is dropped instead.
	err = pgx.BeginFunc(ctx, adm, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL lock_timeout = '5s'`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `TRUNCATE `+tables+` RESTART IDENTITY CASCADE`)
		return err
	})
	if err != nil {
		return false
	}
	reuse.Lock()
	reuse.free = append(reuse.free, schema)
	reuse.Unlock()
	return true
}

// contents lists schema's relations and functions: a fingerprint of what a
// test may have added.
func contents(ctx context.Context, adm *pgxpool.Pool, schema string) (string, error) {
	var out string
	err := adm.QueryRow(ctx, `
		SELECT coalesce(string_agg(name, ',' ORDER BY name), '') FROM (
		    SELECT c.relkind::text || ':' || c.relname AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
		    UNION ALL
		    SELECT 'f:' || p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname = $1
		) x`, schema).Scan(&out)
	if err != nil {
		return "", fmt.Errorf("list schema contents: %w", err)
	}
	return out, nil
}

// sweep drops, once per test binary, schemas that earlier runs left behind
// (a crash, a package without WithCleanup) and that are old enough not to
// belong to a run still going.
func sweep(ctx context.Context, adm *pgxpool.Pool) {
	reuse.Lock()
	defer reuse.Unlock()
	if reuse.swept {
		return
	}
	reuse.swept = true
	rows, err := adm.Query(ctx, `SELECT nspname FROM pg_namespace WHERE nspname LIKE $1`, schemaPrefix+"%")
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	cutoff := time.Now().Add(-sweepAfter).Unix()
	for _, name := range names {
		created, rest, ok := strings.Cut(strings.TrimPrefix(name, schemaPrefix), "_")
		at, err := strconv.ParseInt(created, 10, 64)
		if !ok || rest == "" || err != nil || at >= cutoff {
			continue
		}
		_, _ = adm.Exec(ctx, `DROP SCHEMA IF EXISTS `+pgx.Identifier{name}.Sanitize()+` CASCADE`)
	}
}
