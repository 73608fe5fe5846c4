package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/standmeet/webhook-dispatcher/internal/database"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
)

func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var db dbConfig
	env := osEnviron()
	fs := newFlagSet("migrate", stderr)
	db.bind(fs, env)
	outbox := fs.String("outbox-database-url", env.get("DISPATCHER_OUTBOX_DATABASE_URL"),
		"also apply the outbox contract (migrations/outbox) to this database; for development and tests, production main apps apply it themselves (env DISPATCHER_OUTBOX_DATABASE_URL)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := env.err(); err != nil {
		return err
	}
	logger := slog.New(slog.NewTextHandler(stderr, nil))
	pool, err := database.Open(ctx, db.URL, db.Schema, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := database.Migrate(ctx, pool, db.Schema, logger); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "schema %q is up to date\n", db.Schema)
	if *outbox != "" {
		opool, err := pgxpool.New(ctx, *outbox)
		if err != nil {
			return errors.New("invalid -outbox-database-url: cannot be parsed as a Postgres connection string")
		}
		defer opool.Close()
		if err := database.MigrateOutbox(ctx, opool); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "outbox contract applied")
	}
	return nil
}

func runGenMasterKey(stdout io.Writer) error {
	k, err := seal.GenerateMasterKey()
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, k)
	return nil
}
