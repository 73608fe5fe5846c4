// Command dispatcher delivers an application's events to webhook receivers:
// thin, signed (Standard Webhooks) and scoped. `dispatcher serve` runs it;
// the other commands manage it. `dispatcher --help` lists them all, from the
// one table of them (commands, below), which README's table is checked
// against.
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
	"strings"
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

// command is one entry of the command line. Every command is in commands,
// and the help is generated from it, so a command cannot be left out of
// `dispatcher --help` (TestUsage checks every one, subcommands included).
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
	// subs lists a group's subcommands (endpoints, events), each with its
	// arguments, for the help.
	subs func() []usageLine
}

// usageLine is one line of a help text: a command as typed and what it does.
type usageLine struct{ cmd, summary string }

// commands are dispatcher's commands, in the order the help lists them. They
// are set in init: the commands' own help reads this table.
var commands []command

func init() {
	commands = []command{
		{name: "serve", summary: "run the dispatcher (gRPC API, outbox relay, workers, metrics)", run: runServe},
		{name: "migrate", summary: "apply database migrations (idempotent)", run: runMigrate},
		{name: "endpoints", summary: "manage webhook endpoints (admin token)", run: runEndpointsCLI, subs: endpointsUsageLines},
		{name: "events", summary: "publish events (publisher token), list and show them (admin token)", run: runEventsCLI, subs: eventsUsageLines},
		{name: "listen", summary: "run a local receiver: an endpoint pointing here, each delivery verified and printed", run: runListenCLI},
		{name: "event-types", summary: "list the event types that may leave", run: runEventTypesCLI},
		{name: "portal-link", summary: "print a one-time link into the owners' portal for one owner (admin token)", run: runPortalLinkCLI},
		{name: "catalog", summary: "check an event catalog, or export the default one", run: runCatalogCLI, subs: catalogUsageLines},
		{name: "openapi", summary: "print the HTTP API's OpenAPI document as a dispatcher running a catalog serves it (--catalog PATH)", run: runOpenAPI},
		{name: "reseal-secrets", summary: "re-seal every endpoint secret under the primary master key", run: runResealCLI},
		{name: "gen-master-key", summary: "print a new master key entry for DISPATCHER_MASTER_KEYS",
			run: withoutFlags("gen-master-key", runGenMasterKey)},
		{name: "dev-access", summary: "run a fake access service (local development)", run: runDevAccess},
		{name: "version", summary: "print the build's version (also --version)",
			run: withoutFlags("version", runVersion)},
	}
}

// usage is the top-level help: every command, and every subcommand of a
// group on a line of its own.
func usage() string {
	var lines []usageLine
	for _, c := range commands {
		if c.subs == nil {
			lines = append(lines, usageLine{c.name, c.summary})
			continue
		}
		for _, s := range c.subs() {
			lines = append(lines, usageLine{c.name + " " + s.cmd, s.summary})
		}
	}
	return "usage: dispatcher <command> [flags]\n\ncommands:\n" + formatUsageLines(lines) +
		"\nRun 'dispatcher <command> -h' for a command's flags.\n"
}

// formatUsageLines aligns lines in two columns, a long command on a line of
// its own.
func formatUsageLines(lines []usageLine) string {
	const width = 30
	var b strings.Builder
	for _, l := range lines {
		if len(l.cmd) > width-2 {
			fmt.Fprintf(&b, "  %s\n  %-*s%s\n", l.cmd, width, "", l.summary)
			continue
		}
		fmt.Fprintf(&b, "  %-*s%s\n", width, l.cmd, l.summary)
	}
	return b.String()
}

// withoutFlags runs a command that takes no flags and no arguments, after
// refusing any (-h prints its usage).
func withoutFlags(name string, run func(stdout io.Writer) error) func(context.Context, []string, io.Writer, io.Writer) error {
	return func(_ context.Context, args []string, stdout, stderr io.Writer) error {
		fs := newFlagSet(name, stderr)
		if err := parseFlags(fs, args); err != nil {
			return err
		}
		if fs.NArg() > 0 {
			return fmt.Errorf("%s: unexpected argument %q", name, fs.Arg(0))
		}
		return run(stdout)
	}
}

// newFlagSet returns the flag set of the command named as typed ("serve",
// "events get"): errors are returned, not fatal, and -h prints how to call
// it and what it does, from the command tables, then its flags.
func newFlagSet(name string, output io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(output)
	recordFlagSet(fs, output)
	fs.Usage = func() {
		line, summary := usageOf(name)
		fmt.Fprintf(fs.Output(), "usage: dispatcher %s [flags]\n\n%s\n\nflags:\n", line, summary)
		var hasFlags bool
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if !hasFlags {
			fmt.Fprintln(fs.Output(), "  none")
		}
		fs.PrintDefaults()
	}
	return fs
}

// usageOf finds a command as typed in the tables: the command with its
// arguments ("events get <event id>") and its summary.
func usageOf(name string) (string, string) {
	group, sub, _ := strings.Cut(name, " ")
	for _, c := range commands {
		if c.name != group {
			continue
		}
		if c.subs == nil || sub == "" {
			return c.name, c.summary
		}
		for _, s := range c.subs() {
			if n, _, _ := strings.Cut(s.cmd, " "); n == sub {
				return c.name + " " + s.cmd, s.summary
			}
		}
	}
	return name, ""
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage())
		return errors.New("no command given")
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-version", "--version":
		return runVersion(stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage())
		return nil
	case configReferenceCommand:
		return runConfigReference(ctx, rest, stdout, stderr)
	}
	for _, c := range commands {
		if c.name == name {
			return c.run(ctx, rest, stdout, stderr)
		}
	}
	fmt.Fprint(stderr, usage())
	names := make([]string, len(commands))
	for i, c := range commands {
		names[i] = c.name
	}
	return unknownCommand("", name, names)
}
