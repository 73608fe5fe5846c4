// Package dbtest gives every storage test its own freshly migrated Postgres
// schema, so tests run with t.Parallel() against a real server.
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
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/standmeet/webhook-dispatcher/internal/database"
)

// LocalURL is the conventional local server (trust auth) tried when no URL is set.
const LocalURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

var (
	serverOnce sync.Once
	serverURL  string
	serverErr  error

	adminOnce sync.Once
	adminPool *pgxpool.Pool
	adminErr  error
)

// URL returns the connection string of the test server, starting a container
// when that is the only way to get one.
func URL(tb testing.TB) string {
	tb.Helper()
	serverOnce.Do(func() { serverURL, serverErr = findServer() })
	if serverErr != nil {
		tb.Fatalf("dbtest: no Postgres for storage tests: %v", serverErr)
	}
	return serverURL
}

func findServer() (string, error) {
	for _, env := range []string{"TEST_DATABASE_URL", "DATABASE_URL"} {
		if u := os.Getenv(env); u != "" {
			return u, nil
		}
	}
	conn, err := net.DialTimeout("tcp", "127.0.0.1:5432", time.Second)
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
			adminErr = err
			return
		}
		cfg.MaxConns = 4
		adminPool, adminErr = pgxpool.NewWithConfig(context.Background(), cfg)
	})
	if adminErr != nil {
		tb.Fatalf("dbtest: admin pool: %v", adminErr)
	}
	return adminPool
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

// New creates a fresh schema, migrates it (River and the dispatcher) and
// returns a pool bound to it. The schema is dropped when the test ends.
func New(tb testing.TB) *DB {
	tb.Helper()
	return newDB(tb, true)
}

// NewEmpty is like New but leaves the schema unmigrated.
func NewEmpty(tb testing.TB) *DB {
	tb.Helper()
	return newDB(tb, false)
}

func newDB(tb testing.TB, migrate bool) *DB {
	tb.Helper()
	ctx := context.Background()
	url := URL(tb)
	adm := admin(tb)

	var b [6]byte
	_, _ = rand.Read(b[:])
	schema := "t_" + hex.EncodeToString(b[:])
	if _, err := adm.Exec(ctx, `CREATE SCHEMA `+pgx.Identifier{schema}.Sanitize()); err != nil {
		tb.Fatalf("dbtest: create schema: %v", err)
	}
	tb.Cleanup(func() {
		_, _ = adm.Exec(context.WithoutCancel(ctx), `DROP SCHEMA `+pgx.Identifier{schema}.Sanitize()+` CASCADE`)
	})

	cfg, err := database.PoolConfig(url, schema)
	if err != nil {
		tb.Fatalf("dbtest: %v", err)
	}
	cfg.MaxConns = 12
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatalf("dbtest: pool: %v", err)
	}
	tb.Cleanup(pool.Close)

	if migrate {
		if err := database.Migrate(ctx, pool, schema, slog.New(slog.DiscardHandler)); err != nil {
			tb.Fatalf("dbtest: migrate: %v", err)
		}
	}
	return &DB{Pool: pool, Schema: schema, URL: url}
}
