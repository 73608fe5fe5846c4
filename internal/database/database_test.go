package database_test

import (
	"bytes"
	"context"
	"io/fs"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/database"
	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/migrations"
)

func TestMigrate(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	logger := slog.New(slog.DiscardHandler)

	t.Run("UnmigratedSchemaIsRefused", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewEmpty(t)
		err := database.CheckMigrated(ctx, db.Pool, db.Schema)
		require.ErrorIs(t, err, database.ErrNotMigrated)
		require.Contains(t, err.Error(), "dispatcher migrate")
	})

	t.Run("IsIdempotentAndThenChecksClean", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewEmpty(t)
		require.NoError(t, database.Migrate(ctx, db.Pool, db.Schema, logger))
		require.NoError(t, database.Migrate(ctx, db.Pool, db.Schema, logger))
		require.NoError(t, database.CheckMigrated(ctx, db.Pool, db.Schema))
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM dispatcher_migration`).Scan(&n))
		files, err := fs.Glob(migrations.Dispatcher, "*.up.sql")
		require.NoError(t, err)
		require.Len(t, files, n, "each migration recorded once")
	})

	t.Run("AMissingLowerVersionIsRefusedAndApplied", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewEmpty(t)
		require.NoError(t, database.Migrate(ctx, db.Pool, db.Schema, logger))
		// As if 003 landed after 005 had been applied: undo 003 alone.
		_, err := db.Pool.Exec(ctx, `DROP TABLE webhook_endpoint_requests; DELETE FROM dispatcher_migration WHERE version = 3`)
		require.NoError(t, err)
		err = database.CheckMigrated(ctx, db.Pool, db.Schema)
		require.ErrorIs(t, err, database.ErrNotMigrated)
		require.ErrorContains(t, err, "[3]")
		require.NoError(t, database.Migrate(ctx, db.Pool, db.Schema, logger))
		require.NoError(t, database.CheckMigrated(ctx, db.Pool, db.Schema))
	})

	t.Run("ARenumberedMigrationIsRefused", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewEmpty(t)
		require.NoError(t, database.Migrate(ctx, db.Pool, db.Schema, logger))
		// As if the schema had been migrated by a build whose migration 9
		// was another file (renumbered, or one number taken twice).
		_, err := db.Pool.Exec(ctx, `UPDATE dispatcher_migration SET name = '009_something_else.up.sql' WHERE version = 9`)
		require.NoError(t, err)
		for _, err := range []error{
			database.CheckMigrated(ctx, db.Pool, db.Schema),
			database.Migrate(ctx, db.Pool, db.Schema, logger),
		} {
			require.ErrorContains(t, err, "version 9 was applied as 009_something_else.up.sql, but this build's migration 9 is 009_delivery_attempts.up.sql")
			require.ErrorContains(t, err, "never reused or renumbered")
		}
	})

	t.Run("UnusedNumbersAreLogged", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewEmpty(t)
		var logs bytes.Buffer
		require.NoError(t, database.Migrate(ctx, db.Pool, db.Schema, slog.New(slog.NewTextHandler(&logs, nil))))
		require.Contains(t, logs.String(), "numbers of work that never shipped stay unused")
		// Numbers above 11 may be unused for a while too: work that took a
		// number can land after work that took a later one.
		require.Regexp(t, `unused="\[6 7 8 11( \d+)*\]"`, logs.String())
	})

	t.Run("ConcurrentMigrationsDoNotRace", func(t *testing.T) {
		t.Parallel()
		db := dbtest.NewEmpty(t)
		errs := make(chan error, 3)
		for range 3 {
			go func() { errs <- database.Migrate(ctx, db.Pool, db.Schema, logger) }()
		}
		for range 3 {
			require.NoError(t, <-errs)
		}
		require.NoError(t, database.CheckMigrated(ctx, db.Pool, db.Schema))
	})

	t.Run("OutboxContractIsIdempotent", func(t *testing.T) {
		t.Parallel()
		db := dbtest.New(t)
		require.NoError(t, database.MigrateOutbox(ctx, db.Pool))
		require.NoError(t, database.MigrateOutbox(ctx, db.Pool))
		_, err := db.Pool.Exec(ctx, `INSERT INTO webhook_outbox (event_id, owner_id, type, subject) VALUES ('e1', 'o', 'code.issued', 'code://1')`)
		require.NoError(t, err)
	})
}

func TestValidateSchema(t *testing.T) {
	t.Parallel()

	require.NoError(t, database.ValidateSchema("dispatcher"))
	require.NoError(t, database.ValidateSchema("_x1"))
	for _, bad := range []string{"", "1abc", "a-b", "a b", `x"; DROP`, "this_schema_name_is_far_too_long_for_river_topics_x"} {
		require.Error(t, database.ValidateSchema(bad), bad)
	}
}

func TestPoolConfig(t *testing.T) {
	t.Parallel()

	t.Run("SetsSearchPath", func(t *testing.T) {
		t.Parallel()
		cfg, err := database.PoolConfig("postgres://u@127.0.0.1:5432/db", "dispatcher")
		require.NoError(t, err)
		require.Equal(t, "dispatcher", cfg.ConnConfig.RuntimeParams["search_path"])
	})

	t.Run("BadURLDoesNotEchoThePassword", func(t *testing.T) {
		t.Parallel()
		_, err := database.PoolConfig("postgres://u:hunter2@127.0.0.1:notaport/db", "dispatcher")
		require.Error(t, err)
		require.NotContains(t, err.Error(), "hunter2")
	})
}
