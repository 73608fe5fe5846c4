package main

import (
	"context"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// configReferenceOut, set in the environment of a child test binary, makes
// TestConfigReference write the reference there instead of testing: the
// child has no other variable set, as make generate's process has none
// after clearing them, so defaults read from the environment come out the
// same.
const configReferenceOut = "CONFIG_REFERENCE_OUT"

func TestConfigReference(t *testing.T) {
	t.Parallel()
	if out := os.Getenv(configReferenceOut); out != "" {
		doc, err := configReference(context.Background())
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(out, doc, 0o600))
		return
	}

	type testBundle struct{ doc string }
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		b, err := os.ReadFile("../../docs/configuration.md")
		require.NoError(t, err)
		return &testBundle{doc: string(b)}
	}
	// flagsOf runs a command with -h and returns the flags it defines.
	flagsOf := func(t *testing.T, line ...string) []*flag.Flag {
		t.Helper()
		rec := &flagRecorder{}
		err := run(t.Context(), append(slices.Clone(line), "-h"), io.Discard, rec)
		require.ErrorIs(t, err, flag.ErrHelp, "%v", line)
		var flags []*flag.Flag
		for _, fs := range rec.sets {
			fs.VisitAll(func(f *flag.Flag) { flags = append(flags, f) })
		}
		require.NotEmpty(t, flags, "%v", line)
		return flags
	}

	// Current also runs the generator on one core and on three: a default
	// computed from the machine would make the document differ between the
	// machine that generated it and CI's. Such a default belongs in words
	// in its help ("4 per core"), with the flag's zero meaning it.
	t.Run("Current", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, procs := range []string{"1", "3"} {
			out := filepath.Join(t.TempDir(), "configuration.md")
			cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^TestConfigReference$", "-test.count=1")
			cmd.Env = []string{configReferenceOut + "=" + out, "GOMAXPROCS=" + procs}
			msg, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", msg)
			got, err := os.ReadFile(out)
			require.NoError(t, err)
			require.Equal(t, b.doc, string(got), "GOMAXPROCS=%s: docs/configuration.md is out of date (run make generate and commit), or a default depends on the machine", procs)
		}
	})

	t.Run("EveryVariableTheCodeReadsIsListed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		files, err := filepath.Glob("*.go")
		require.NoError(t, err)
		name := regexp.MustCompile(`"((?:DISPATCHER_|DATABASE_URL)[A-Z0-9_]*)"`)
		var seen int
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			require.NoError(t, err)
			for _, m := range name.FindAllStringSubmatch(string(src), -1) {
				seen++
				require.Contains(t, b.doc, "`"+m[1]+"`", "%s reads %s: name it in its flag's help (env %s), or list it in serveEnvOnly or clientEnvOnly", f, m[1], m[1])
			}
		}
		require.Greater(t, seen, 80, "the variables are found in the code")
	})

	t.Run("ServerFlagsNameTheirVariable", func(t *testing.T) {
		t.Parallel()
		for _, line := range [][]string{{"serve"}, {"migrate"}, {"reseal-secrets"}, {"openapi"}, {"catalog", "check"}} {
			byEnv := map[string]string{}
			for _, f := range flagsOf(t, line...) {
				env := flagEnv(f.Usage)
				require.NotEmpty(t, env, "%v -%s: its help must end with (env DISPATCHER_…)", line, f.Name)
				require.Empty(t, byEnv[env], "%v: -%s and -%s both read %s", line, byEnv[env], f.Name, env)
				byEnv[env] = f.Name
			}
		}
	})

	t.Run("ClientFlagsListedOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Equal(t, 1, strings.Count(b.doc, "| `-token-file` |"))
		require.Contains(t, b.doc, "## `dispatcher endpoints create`")
		require.Contains(t, b.doc, "| `-grpc-addr` | `DISPATCHER_GRPC_ADDR` | `127.0.0.1:7070` | ")
	})

	t.Run("Description", func(t *testing.T) {
		t.Parallel()
		for _, tt := range []struct{ usage, env, desc string }{
			{"gRPC API address (env DISPATCHER_ADDR)", "DISPATCHER_ADDR", "gRPC API address"},
			{"a file (default: env DISPATCHER_TOKEN; env DISPATCHER_TOKEN_FILE)", "DISPATCHER_TOKEN_FILE", "a file (default: env DISPATCHER_TOKEN)"},
			{"the catalog (env DISPATCHER_CATALOG); empty: the default", "DISPATCHER_CATALOG", "the catalog; empty: the default"},
			{"deadline of the call", "", "deadline of the call"},
			{"the database (env DATABASE_URL or DISPATCHER_DATABASE_URL)", "DATABASE_URL or DISPATCHER_DATABASE_URL", "the database"},
		} {
			require.Equal(t, tt.env, flagEnv(tt.usage), tt.usage)
			require.Equal(t, tt.desc, flagDescription(tt.usage), tt.usage)
		}
		require.Equal(t, "a &lt;type&gt;.json \\| `a|*` \\*", refText("a <type>.json | `a|*` *"))
	})
}
