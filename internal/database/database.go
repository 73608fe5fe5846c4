// Package database opens the dispatcher's Postgres pool and owns its schema:
// River's migrations and the dispatcher's own (migrations/), applied under one
// advisory lock so replicas and a migrate Job never race.
package database

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/standmeet/webhook-dispatcher/migrations"
)

// DefaultSchema is where the dispatcher keeps its tables and River's.
const DefaultSchema = "dispatcher"

// ErrNotMigrated is returned by CheckMigrated when the schema lags the binary.
var ErrNotMigrated = errors.New("database is not migrated: run `dispatcher migrate` (or serve with --migrate)")

var schemaRE = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]{0,45}$`)

// ValidateSchema checks a schema name against River's rules (it prefixes its
// NOTIFY topics with it, which bounds the length).
func ValidateSchema(schema string) error {
	if !schemaRE.MatchString(schema) {
		return fmt.Errorf("invalid schema %q: must match %s", schema, schemaRE)
	}
	return nil
}

// PoolConfig parses url and points every connection's search_path at schema,
// so the dispatcher's SQL stays unqualified.
func PoolConfig(url, schema string) (*pgxpool.Config, error) {
	cfg, _, err := poolConfig(url, schema, "")
	return cfg, err
}

// poolConfig is PoolConfig with the sessions' application_name set to name
// ("dispatcher" if empty) unless url sets one; named reports whether name
// was set.
func poolConfig(url, schema, name string) (cfg *pgxpool.Config, named bool, err error) {
	if err := ValidateSchema(schema); err != nil {
		return nil, false, err
	}
	cfg, err = pgxpool.ParseConfig(url)
	if err != nil {
		// pgx's message may echo the URL, password included; keep it out.
		return nil, false, errors.New("invalid database URL: cannot be parsed as a Postgres connection string")
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = cmp.Or(name, "dispatcher")
		named = name != ""
	}
	return cfg, named, nil
}

// Open connects a pool and checks the server answers.
func Open(ctx context.Context, url, schema string, maxConns int32) (*pgxpool.Pool, error) {
	pool, _, err := OpenAs(ctx, url, schema, maxConns, "")
	return pool, err
}

// OpenAs is Open with every session's application_name set to name, unless
// url sets one; named reports whether the sessions carry name.
func OpenAs(ctx context.Context, url, schema string, maxConns int32, name string) (pool *pgxpool.Pool, named bool, err error) {
	cfg, named, err := poolConfig(url, schema, name)
	if err != nil {
		return nil, false, err
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	pool, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, false, fmt.Errorf("open database pool: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, false, fmt.Errorf("connect to database %s:%d: %w", cfg.ConnConfig.Host, cfg.ConnConfig.Port, err)
	}
	return pool, named, nil
}

type migration struct {
	version int
	name    string
	sql     string
}

func dispatcherMigrations() ([]migration, error) {
	entries, err := fs.ReadDir(migrations.Dispatcher, ".")
	if err != nil {
		return nil, err
	}
	var out []migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		if !ok {
			return nil, fmt.Errorf("migration %q: name must be NNN_name.up.sql", name)
		}
		v, err := strconv.Atoi(num)
		if err != nil {
			return nil, fmt.Errorf("migration %q: %w", name, err)
		}
		b, err := fs.ReadFile(migrations.Dispatcher, name)
		if err != nil {
			return nil, err
		}
		out = append(out, migration{version: v, name: name, sql: string(b)})
	}
	slices.SortFunc(out, func(a, b migration) int { return a.version - b.version })
	for i := 1; i < len(out); i++ {
		if out[i].version == out[i-1].version {
			// Two branches took one number: the second would never run.
			return nil, fmt.Errorf("migrations %q and %q share the number %d: give the newer one the next free number", out[i-1].name, out[i].name, out[i].version)
		}
	}
	return out, nil
}

// Migrate brings schema up to date: River's migrations, then the dispatcher's.
// It is idempotent and safe to run from several processes at once.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string, logger *slog.Logger) error {
	if err := ValidateSchema(schema); err != nil {
		return err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrate: acquire connection: %w", err)
	}
	defer conn.Release()
	// rivermigrate takes no lock of its own; one per schema serialises
	// replicas and a migrate Job.
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock(hashtext('dispatcher.migrate.' || $1))`, schema); err != nil {
		return fmt.Errorf("migrate: take lock: %w", err)
	}
	defer func() {
		// A fresh context: the unlock must happen even when ctx is done.
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock(hashtext('dispatcher.migrate.' || $1))`, schema)
	}()

	if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize()); err != nil {
		return fmt.Errorf("migrate: create schema: %w", err)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: logger})
	if err != nil {
		return fmt.Errorf("migrate: river: %w", err)
	}
	res, err := migrator.Migrate(ctx, rivermigrate.DirectionUp, nil)
	if err != nil {
		return fmt.Errorf("migrate: river: %w", err)
	}
	for _, v := range res.Versions {
		logger.InfoContext(ctx, "applied river migration", slog.Int("version", v.Version), slog.String("name", v.Name))
	}

	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS dispatcher_migration (
		version    integer     PRIMARY KEY,
		name       text        NOT NULL,
		applied_at timestamptz NOT NULL DEFAULT now())`); err != nil {
		return fmt.Errorf("migrate: create version table: %w", err)
	}
	all, err := dispatcherMigrations()
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	for _, m := range all {
		var appliedAs string
		err := conn.QueryRow(ctx, `SELECT name FROM dispatcher_migration WHERE version = $1`, m.version).Scan(&appliedAs)
		switch {
		case err == nil:
			if appliedAs != m.name {
				return renumbered(m, appliedAs)
			}
			continue
		case !errors.Is(err, pgx.ErrNoRows):
			return fmt.Errorf("migrate: read version table: %w", err)
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, m.sql); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO dispatcher_migration (version, name) VALUES ($1, $2)`, m.version, m.name)
			return err
		})
		if err != nil {
			return fmt.Errorf("migrate: apply %s: %w", m.name, err)
		}
		logger.InfoContext(ctx, "applied dispatcher migration", slog.Int("version", m.version), slog.String("name", m.name))
	}
	if unused := unusedVersions(all); len(unused) > 0 {
		logger.InfoContext(ctx, "dispatcher migrations are numbered when their work starts: numbers of work that never shipped stay unused, and no number is ever reused",
			slog.Any("unused", unused))
	}
	return nil
}

// renumbered is the error for a schema that recorded a version under
// another file's name: a migration was renumbered, or two branches took one
// number. Applying either way could skip a migration, so neither is done.
func renumbered(m migration, appliedAs string) error {
	return fmt.Errorf("migrate: version %d was applied as %s, but this build's migration %d is %s: "+
		"migration numbers are never reused or renumbered, so this schema and this build disagree", m.version, appliedAs, m.version, m.name)
}

// unusedVersions lists the numbers below the newest migration that no
// migration has.
func unusedVersions(all []migration) []int {
	var out []int
	next := 1
	for _, m := range all {
		for ; next < m.version; next++ {
			out = append(out, next)
		}
		next = m.version + 1
	}
	return out
}

// CheckMigrated returns ErrNotMigrated (wrapped with what is missing) when
// River's or the dispatcher's migrations are not all applied.
func CheckMigrated(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Schema: schema, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return fmt.Errorf("check migrations: %w", err)
	}
	res, err := migrator.Validate(ctx, nil)
	if err != nil || !res.OK {
		return fmt.Errorf("%w (schema %q lacks River's migrations)", ErrNotMigrated, schema)
	}
	all, err := dispatcherMigrations()
	if err != nil {
		return err
	}
	// Every version, not only the latest: migrations are numbered by
	// whoever wrote them and may land out of order, so a schema can hold a
	// later one without an earlier one.
	versions := make([]int32, len(all))
	for i, m := range all {
		versions[i] = int32(m.version)
	}
	rows, err := pool.Query(ctx, `SELECT version, name FROM dispatcher_migration WHERE version = ANY($1::int[])`, versions)
	if err != nil {
		return fmt.Errorf("%w (schema %q has no dispatcher migrations)", ErrNotMigrated, schema)
	}
	applied := map[int]string{}
	var (
		version int
		name    string
	)
	_, err = pgx.ForEachRow(rows, []any{&version, &name}, func() error {
		applied[version] = name
		return nil
	})
	if err != nil {
		return fmt.Errorf("%w (schema %q has no dispatcher migrations)", ErrNotMigrated, schema)
	}
	var missing []int
	for _, m := range all {
		switch as, ok := applied[m.version]; {
		case !ok:
			missing = append(missing, m.version)
		case as != m.name:
			return renumbered(m, as)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w (schema %q lacks dispatcher migrations %v)", ErrNotMigrated, schema, missing)
	}
	return nil
}

// MigrateOutbox applies the outbox contract (migrations/outbox) to the main
// application's database. Production main apps apply it themselves; the
// dispatcher offers it for development and tests.
func MigrateOutbox(ctx context.Context, pool *pgxpool.Pool) error {
	entries, err := fs.Glob(migrations.Outbox, "outbox/*.up.sql")
	if err != nil {
		return err
	}
	slices.Sort(entries)
	for _, name := range entries {
		b, err := fs.ReadFile(migrations.Outbox, name)
		if err != nil {
			return err
		}
		if _, err := pool.Exec(ctx, string(b)); err != nil {
			return fmt.Errorf("apply outbox contract %s: %w", name, err)
		}
	}
	return nil
}
