package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

// configReferenceCommand is the hidden command that writes
// docs/configuration.md (make generate). It is not in commands: it is for
// the repository, not for operators, so neither --help nor README lists it.
const configReferenceCommand = "config-reference"

// flagRecorder is the stderr a command runs with when the configuration
// reference walks it: newFlagSet hands it every flag set it builds, and the
// usage printed for -h is dropped. Walking the real commands, instead of a
// list of their flags, is what keeps the reference complete as flags are
// added.
type flagRecorder struct{ sets []*flag.FlagSet }

func (r *flagRecorder) Write(p []byte) (int, error) { return len(p), nil }

// recordFlagSet registers fs with output when output is a flagRecorder.
func recordFlagSet(fs *flag.FlagSet, output io.Writer) {
	if r, ok := output.(*flagRecorder); ok {
		r.sets = append(r.sets, fs)
	}
}

// serveEnvOnly are serve's settings that are read only from the
// environment: secrets never come from flags, which show in ps and shell
// history. TestConfigReference checks that every DISPATCHER_* variable the
// code names is in the reference, so one added without a flag and left out
// here fails it.
var serveEnvOnly = []struct{ name, desc string }{
	{"DISPATCHER_MASTER_KEYS", "master keys that seal endpoint secrets: `id:base64key[,id:base64key…]`, the first is the primary; required (`dispatcher gen-master-key` prints one)"},
	{"DISPATCHER_MASTER_KEYS_FILE", "file holding the master keys, read when DISPATCHER_MASTER_KEYS is empty"},
	{"DISPATCHER_PUBLISHER_TOKENS", "comma-separated publisher tokens (publish only); with -publisher-token-file"},
	{"DISPATCHER_ADMIN_TOKENS", "comma-separated admin tokens (endpoints, events, portal links); with -admin-token-file"},
	{"DISPATCHER_OPERATOR_TOKENS", "comma-separated operator tokens (River UI login on the ops port); with -operator-token-file"},
	{"DISPATCHER_ACCESS_TOKEN", "bearer token sent to the access service (-access-addr)"},
	{"OTEL_*", "tracing: the standard OpenTelemetry variables (OTEL_TRACES_EXPORTER, OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_SERVICE_NAME, …); off unless an exporter or endpoint is set"},
}

// clientEnvOnly are the client commands' settings read only from the
// environment.
var clientEnvOnly = []struct{ name, desc string }{
	{"DISPATCHER_TOKEN", "the API token when -token-file is not given (a comma list means its first token)"},
}

func runConfigReference(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(configReferenceCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "file to write the reference to (default: standard output)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// Defaults read from the environment (DISPATCHER_* and DATABASE_URL set
	// in the shell that runs make generate) would otherwise end up in the
	// document: it shows what a process with nothing set gets. This command
	// is its own process and exits next.
	os.Clearenv()
	doc, err := configReference(ctx)
	if err != nil {
		return err
	}
	if *out == "" {
		_, err = stdout.Write(doc)
		return err
	}
	if err := os.WriteFile(*out, doc, 0o644); err != nil { //nolint:gosec // a document of the repository, readable like the others
		return fmt.Errorf("write %s: %w", *out, err)
	}
	return nil
}

// refSection is one command's flags in the reference.
type refSection struct {
	name    string // "serve", "events get"
	line    string // as typed, with its arguments: "events get <event id>"
	summary string
	flags   []*flag.Flag
	client  bool // it also takes the client flags
}

// configReference renders docs/configuration.md from the flag sets the
// commands build for -h, in the order of the commands table.
func configReference(ctx context.Context) ([]byte, error) {
	// The client flags, from the code every API-calling command binds them
	// with; they are listed once and left out of each command's table.
	clientFS := flag.NewFlagSet("client", flag.ContinueOnError)
	new(cliConn).bind(clientFS, true)
	clientFlags := map[string]string{}
	var client []*flag.Flag
	clientFS.VisitAll(func(f *flag.Flag) {
		clientFlags[f.Name] = f.Usage
		client = append(client, f)
	})

	var sections []refSection
	for _, c := range commands {
		var lines [][]string
		if c.subs == nil {
			lines = [][]string{{c.name}}
		} else {
			for _, s := range c.subs() {
				name, _, _ := strings.Cut(s.cmd, " ")
				lines = append(lines, []string{c.name, name})
			}
		}
		for _, line := range lines {
			rec := &flagRecorder{}
			// -h stops a command at its flags (dev-access answers it with nil).
			if err := run(ctx, append(slices.Clone(line), "-h"), io.Discard, rec); err != nil && !errors.Is(err, flag.ErrHelp) {
				return nil, fmt.Errorf("%s -h: want its usage, got %w", strings.Join(line, " "), err)
			}
			typed, summary := usageOf(strings.Join(line, " "))
			sec := refSection{name: strings.Join(line, " "), line: typed, summary: summary}
			seen := map[string]bool{}
			for _, fs := range rec.sets {
				fs.VisitAll(func(f *flag.Flag) {
					if seen[f.Name] {
						return
					}
					seen[f.Name] = true
					if u, ok := clientFlags[f.Name]; ok && u == f.Usage {
						sec.client = true
						return
					}
					sec.flags = append(sec.flags, f)
				})
			}
			if len(sec.flags) > 0 || sec.client {
				sections = append(sections, sec)
			}
		}
	}

	var b bytes.Buffer
	b.WriteString(`# Configuration reference

<!-- Generated by ` + "`go run ./cmd/dispatcher " + configReferenceCommand + " -o docs/configuration.md`" + ` (make generate) from the
flags the commands define; do not edit. make check/generated fails when it is out of date. -->

Every flag of every command, with the environment variable it reads and its default (as a
process with no variable set has it). A flag given on the command line wins over its variable.
Secrets (master keys, API tokens) are read only from the environment or from files, never from
flags. A malformed value (a non-number for a number, a bad duration) stops the command with an
error naming the variable. Flags take one dash or two (` + "`-grpc-addr` or `--grpc-addr`" + `).

Commands: `)
	for i, s := range sections {
		if i > 0 {
			b.WriteString(" · ")
		}
		fmt.Fprintf(&b, "[%s](#%s)", s.name, refAnchor(s.name))
	}
	b.WriteString(" · [client flags](#client-flags)\n")

	for _, s := range sections {
		fmt.Fprintf(&b, "\n## `dispatcher %s`\n\n`dispatcher %s`: %s.", s.name, s.line, refText(s.summary))
		if s.client {
			b.WriteString(" Also takes the [client flags](#client-flags).")
		}
		b.WriteString("\n")
		if len(s.flags) > 0 {
			b.WriteString("\n")
			writeFlagTable(&b, s.flags)
		}
		if s.name == "serve" {
			b.WriteString("\nRead from the environment only:\n\n")
			writeEnvTable(&b, serveEnvOnly)
		}
	}
	b.WriteString("\n## Client flags\n\nThe flags of every command that calls the API " +
		"(`endpoints`, `events`, `event-types`, `listen`, `portal-link`, …).\n\n")
	writeFlagTable(&b, client)
	b.WriteString("\nRead from the environment only:\n\n")
	writeEnvTable(&b, clientEnvOnly)
	return b.Bytes(), nil
}

// envVars is one variable, or several a flag reads in turn ("DATABASE_URL
// or DISPATCHER_DATABASE_URL").
const envVars = `[A-Z][A-Z0-9_]*(?: or [A-Z][A-Z0-9_]*)*`

// envInHelp finds the variables a flag's help names: "(env X)", or "env X"
// inside a parenthesis with other notes ("default: system roots; env X").
var envInHelp = regexp.MustCompile(`\benv (` + envVars + `)`)

// flagEnv is the variable a flag reads, as its help names it (the last one:
// "default: env DISPATCHER_TOKEN; env DISPATCHER_TOKEN_FILE"), or "".
func flagEnv(usage string) string {
	m := envInHelp.FindAllStringSubmatch(usage, -1)
	if len(m) == 0 {
		return ""
	}
	return m[len(m)-1][1]
}

var (
	envParen     = regexp.MustCompile(`\s*\(env ` + envVars + `\)`)
	envParenTail = regexp.MustCompile(`;\s*env ` + envVars + `\)`)
)

// flagDescription is a flag's help without the variable, which has a
// column of its own.
func flagDescription(usage string) string {
	usage = envParen.ReplaceAllString(usage, "")
	return envParenTail.ReplaceAllString(usage, ")")
}

func writeFlagTable(b *bytes.Buffer, flags []*flag.Flag) {
	b.WriteString("| flag | environment | default | description |\n|---|---|---|---|\n")
	for _, f := range flags {
		env := "—"
		if e := flagEnv(f.Usage); e != "" {
			env = "`" + strings.ReplaceAll(e, " or ", "` or `") + "`"
		}
		def := "—"
		if f.DefValue != "" {
			def = "`" + f.DefValue + "`"
		}
		fmt.Fprintf(b, "| `-%s` | %s | %s | %s |\n", f.Name, env, def, refText(flagDescription(f.Usage)))
	}
}

func writeEnvTable(b *bytes.Buffer, vars []struct{ name, desc string }) {
	b.WriteString("| environment | description |\n|---|---|\n")
	for _, v := range vars {
		fmt.Fprintf(b, "| `%s` | %s |\n", v.name, refText(v.desc))
	}
}

// refText escapes what Markdown would take as a table border, an HTML tag
// ("<type>.json") or emphasis, outside code spans.
func refText(s string) string {
	var b strings.Builder
	for i, part := range strings.Split(s, "`") {
		if i%2 == 1 {
			b.WriteString("`" + part + "`")
			continue
		}
		b.WriteString(strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;", "*", `\*`).Replace(part))
	}
	return b.String()
}

// refAnchor is the id GitHub gives the heading of a command: lower case,
// spaces to dashes, punctuation dropped.
func refAnchor(name string) string {
	var b strings.Builder
	for _, r := range strings.ToLower("dispatcher " + name) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}
