// Command dispatcher delivers an application's events to webhook receivers:
// thin, signed (Standard Webhooks) and scoped.
//
//	dispatcher serve              run the gRPC API, outbox relay, River workers and metrics
//	dispatcher migrate            apply River's and the dispatcher's migrations (idempotent)
//	dispatcher endpoints …        manage endpoints over the gRPC API
//	dispatcher events publish     publish an event over the gRPC API
//	dispatcher listen             a local receiver that verifies and prints each delivery
//	dispatcher event-types        list the event types that may leave
//	dispatcher catalog …          check or export an event catalog
//	dispatcher reseal-secrets     re-seal endpoint secrets under the primary master key
//	dispatcher gen-master-key     print a new master key entry
//	dispatcher dev-access         run a fake access service for local development
//	dispatcher version            print the build's version (also --version)
//
// Configuration comes from flags and DISPATCHER_* environment variables;
// secrets (master keys, API tokens) only from the environment or files.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() { os.Exit(mainCode()) }

func mainCode() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return exitCode(run(ctx, os.Args[1:], os.Stdout, os.Stderr), os.Stderr)
}

// exitCode reports err and turns it into the process's exit status: 0 for
// none and for -h (the flag package printed the usage asked for), 2 for a
// bad flag (the flag package printed it with the usage already, so it is not
// repeated), 1 for everything else.
func exitCode(err error, stderr io.Writer) int {
	var usage usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &usage):
		return 2
	default:
		fmt.Fprintln(stderr, "dispatcher:", err)
		return 1
	}
}

// usageError is a command line the flag package rejected and has already
// explained on stderr.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// parseFlags parses args into fs (which must use flag.ContinueOnError),
// marking a rejection as already reported.
func parseFlags(fs *flag.FlagSet, args []string) error {
	err := fs.Parse(args)
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		return usageError{err}
	}
	return err
}

const usage = `usage: dispatcher <command> [flags]

commands:
  serve            run the dispatcher (gRPC API, outbox relay, workers, metrics)
  migrate          apply database migrations (idempotent)
  endpoints        manage webhook endpoints (list|get|create|update|delete|rotate-secret|send-test|deliveries|redeliver|attempts|stats)
  events publish   publish an event (what the main app does over gRPC)
  listen           run a local receiver: an endpoint pointing here, each delivery verified and printed
  event-types      list the event types that may leave
  catalog          check an event catalog, or export the default one (check|export)
  reseal-secrets   re-seal every endpoint secret under the primary master key
  gen-master-key   print a new master key entry for DISPATCHER_MASTER_KEYS
  dev-access       run a fake access service (local development)
  version          print the build's version (also --version)

Run 'dispatcher <command> -h' for a command's flags.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return errors.New("no command given")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "serve":
		return runServe(ctx, rest, stdout, stderr)
	case "migrate":
		return runMigrate(ctx, rest, stdout, stderr)
	case "endpoints":
		return runEndpointsCLI(ctx, rest, stdout, stderr)
	case "events":
		return runEventsCLI(ctx, rest, stdout, stderr)
	case "listen":
		return runListenCLI(ctx, rest, stdout, stderr)
	case "event-types":
		return runEventTypesCLI(ctx, rest, stdout, stderr)
	case "catalog":
		return runCatalogCLI(ctx, rest, stdout, stderr)
	case "reseal-secrets":
		return runResealCLI(ctx, rest, stdout, stderr)
	case "gen-master-key":
		return runGenMasterKey(stdout)
	case "dev-access":
		return runDevAccess(ctx, rest, stdout, stderr)
	case "version", "-version", "--version":
		return runVersion(stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	default:
		fmt.Fprint(stderr, usage)
		return fmt.Errorf("unknown command %q", cmd)
	}
}
