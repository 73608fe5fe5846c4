package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/standmeet/webhook-dispatcher/internal/access/accesstest"
)

// devAccessUsage is printed by `dispatcher dev-access -h`.
const devAccessUsage = `usage: dispatcher dev-access [--listen addr] [--config table.json] [--reload interval]

Runs a fake access service (access.v1.AccessService) for local development
and end-to-end tests, answering EmbedAdmits from a JSON table:

  {
    "embeds": {"emb_1": {"owner_id": "owner_1", "code_id": "code_1"}},
    "codes":  {"code_1": {"subject_prefixes": ["wiki://software/"],
                          "expires_at": "2030-01-01T00:00:00Z",
                          "revoked": false, "allow_unpublished": false}}
  }

The file is re-read when its contents change, so a test can revoke a code or
delete an embed while the dispatcher runs. Never use it in production: it
admits whatever the file says.

`

// runDevAccess implements `dispatcher dev-access`. It serves until ctx is done.
func runDevAccess(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("dev-access", stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), devAccessUsage)
		fs.PrintDefaults()
	}
	listen := fs.String("listen", "127.0.0.1:7071", "address to serve gRPC on")
	configPath := fs.String("config", "", "JSON table of embeds and codes (empty: an empty table, which admits nothing)")
	reload := fs.Duration("reload", time.Second, "how often to check the config file for changes (0: never)")
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("dev-access: unexpected arguments: %q", fs.Args())
	}

	fake := accesstest.NewServer()
	var loaded []byte
	if *configPath != "" {
		raw, err := os.ReadFile(*configPath)
		if err != nil {
			return fmt.Errorf("dev-access: %w", err)
		}
		if err := loadDevAccessTable(fake, *configPath, raw); err != nil {
			return fmt.Errorf("dev-access: %w", err)
		}
		loaded = raw
	}

	lis, err := new(net.ListenConfig).Listen(ctx, "tcp", *listen)
	if err != nil {
		return fmt.Errorf("dev-access: listen: %w", err)
	}
	fmt.Fprintf(stdout, "dev-access: fake access service listening on %s\n", lis.Addr())

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- fake.Serve(lis) }()

	var tick <-chan time.Time
	if *configPath != "" && *reload > 0 {
		ticker := time.NewTicker(*reload)
		defer ticker.Stop()
		tick = ticker.C
	}
	for {
		select {
		case <-ctx.Done():
			fake.Stop()
			// Serve returns nil after Stop; anything else is worth reporting.
			if err := <-served; err != nil {
				return fmt.Errorf("dev-access: %w", err)
			}
			return nil
		case err := <-served:
			return fmt.Errorf("dev-access: %w", err)
		case <-tick:
			raw, err := os.ReadFile(*configPath)
			if err != nil || bytes.Equal(raw, loaded) {
				// A file caught mid-rewrite is retried on the next tick.
				continue
			}
			if err := loadDevAccessTable(fake, *configPath, raw); err != nil {
				fmt.Fprintf(stderr, "dev-access: keeping the previous table: %v\n", err)
				loaded = raw // don't repeat the complaint until the file changes again
				continue
			}
			loaded = raw
			fmt.Fprintf(stdout, "dev-access: reloaded %s\n", *configPath)
		}
	}
}

// loadDevAccessTable parses raw, the contents of path, into fake's table.
func loadDevAccessTable(fake *accesstest.Server, path string, raw []byte) error {
	table, err := accesstest.ReadTable(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	fake.Load(table)
	return nil
}
