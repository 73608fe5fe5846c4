package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/standmeet/webhook-dispatcher/internal/database"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
)

const resealUsage = `usage: dispatcher reseal-secrets [flags]

Re-seals every endpoint signing secret under the primary (first) master key
of DISPATCHER_MASTER_KEYS, the third step of a master-key rotation:

  1. add the new key, not first, to every replica's DISPATCHER_MASTER_KEYS;
  2. put it first everywhere (it becomes primary);
  3. run this command;
  4. remove the old key.

It also upgrades values sealed in format 1 (bound to the endpoint id alone)
to format 2 (bound to the endpoint id, its signing scheme and the column),
so after an upgrade it is worth running once with the keyring unchanged.

It talks to the database directly, works in small batches while the
dispatcher serves, and is safe to re-run: a second run re-seals nothing.

`

// runResealCLI implements `dispatcher reseal-secrets`.
func runResealCLI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var db dbConfig
	fs := newFlagSet("reseal-secrets", stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), resealUsage)
		fs.PrintDefaults()
	}
	env := osEnviron()
	db.bind(fs, env)
	keysFile := fs.String("master-keys-file", os.Getenv("DISPATCHER_MASTER_KEYS_FILE"),
		"file holding the master keyring (default: env DISPATCHER_MASTER_KEYS; env DISPATCHER_MASTER_KEYS_FILE)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := env.err(); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("reseal-secrets: unexpected argument %q", fs.Arg(0))
	}

	// An explicit file wins over the environment; otherwise the same
	// precedence as serve: DISPATCHER_MASTER_KEYS, then its _FILE.
	explicitFile := false
	fs.Visit(func(f *flag.Flag) { explicitFile = explicitFile || f.Name == "master-keys-file" })
	spec := os.Getenv("DISPATCHER_MASTER_KEYS")
	if explicitFile || spec == "" {
		if *keysFile == "" {
			return errors.New("reseal-secrets: no master keys: set DISPATCHER_MASTER_KEYS or --master-keys-file")
		}
		b, err := os.ReadFile(*keysFile)
		if err != nil {
			return fmt.Errorf("reseal-secrets: read master keys: %w", err)
		}
		spec = strings.TrimSpace(string(b))
	}
	kr, err := seal.ParseKeyring(spec)
	if err != nil {
		return fmt.Errorf("reseal-secrets: master keys: %w", err)
	}

	pool, err := database.Open(ctx, db.URL, db.Schema, 2)
	if err != nil {
		return fmt.Errorf("reseal-secrets: %w", err)
	}
	defer pool.Close()
	if err := database.CheckMigrated(ctx, pool, db.Schema); err != nil {
		return fmt.Errorf("reseal-secrets: %w", err)
	}
	n, err := endpoint.Reseal(ctx, pool, kr)
	if err != nil {
		return fmt.Errorf("reseal-secrets: %d endpoints re-sealed before the failure: %w", n, err)
	}
	fmt.Fprintf(stdout, "re-sealed %d endpoint(s) under master key id %d; nothing left sealed under another key\n", n, kr.PrimaryID())
	return nil
}
