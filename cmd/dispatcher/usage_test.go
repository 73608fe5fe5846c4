package main

import (
	"bytes"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUsage runs the command line as main does, through exitCode.
func TestUsage(t *testing.T) {
	t.Parallel()

	type testBundle struct{ stdout, stderr bytes.Buffer }

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{}
	}
	// commandLines are every command and subcommand, as typed, from the
	// tables the help is generated from.
	var commandLines [][]string
	for _, c := range commands {
		if c.subs == nil {
			commandLines = append(commandLines, []string{c.name})
			continue
		}
		for _, s := range c.subs() {
			name, _, _ := strings.Cut(s.cmd, " ")
			commandLines = append(commandLines, []string{c.name, name})
		}
	}
	// Commands without flags list none.
	noFlags := map[string]bool{"gen-master-key": true, "version": true, "catalog": true}
	flagList := regexp.MustCompile(`(?m)^  -\w`)
	exit := func(t *testing.T, b *testBundle, args ...string) int {
		t.Helper()
		return exitCode(run(t.Context(), args, &b.stdout, &b.stderr), &b.stderr)
	}

	t.Run("HelpExitsZero", func(t *testing.T) {
		t.Parallel()
		for _, line := range commandLines {
			for _, h := range []string{"-h", "--help"} {
				b := setup(t)
				require.Zero(t, exit(t, b, append(line, h)...), "%v %s: %s", line, h, b.stderr.String())
				require.Contains(t, b.stderr.String(), "usage: dispatcher "+strings.Join(line, " "), "%v %s: its own usage", line, h)
				if !noFlags[line[0]] {
					require.Regexp(t, flagList, b.stderr.String(), "%v %s: the flags are listed", line, h)
				}
				require.NotContains(t, b.stderr.String(), "dispatcher:", "help is no error")
			}
		}
		for _, line := range [][]string{{"-h"}, {"help"}, {"endpoints", "-h"}, {"events", "-h"}} {
			b := setup(t)
			require.Zero(t, exit(t, b, line...), "%v", line)
			require.Contains(t, b.stdout.String(), "usage: dispatcher")
		}
	})

	t.Run("HelpListsEveryCommand", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Zero(t, exit(t, b, "--help"))
		help := b.stdout.String()
		require.GreaterOrEqual(t, len(commandLines), 24)
		for _, line := range commandLines {
			require.Regexp(t, `(?m)^  `+regexp.QuoteMeta(strings.Join(line, " "))+`( |$)`, help, "%v is missing from dispatcher --help", line)
		}
		// The ones once missing, by name.
		for _, want := range []string{"events list", "events get <event id>", "endpoints delivery <delivery id>", "endpoints retry-delivery <delivery id>"} {
			require.Contains(t, help, "  "+want)
		}
	})

	t.Run("ReadmeListsEveryCommand", func(t *testing.T) {
		t.Parallel()
		readme, err := os.ReadFile("../../README.md")
		require.NoError(t, err)
		var listed []string
		for _, m := range regexp.MustCompile("(?m)^\\| `dispatcher ([a-z-]+)").FindAllStringSubmatch(string(readme), -1) {
			if !slices.Contains(listed, m[1]) {
				listed = append(listed, m[1])
			}
		}
		var names []string
		for _, c := range commands {
			names = append(names, c.name)
		}
		require.ElementsMatch(t, names, listed, "README's Commands table and the commands table differ")
	})

	t.Run("SubcommandHelpShowsItsOwnFlags", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Zero(t, exit(t, b, "events", "get", "-h"))
		require.Contains(t, b.stderr.String(), "usage: dispatcher events get <event id> [flags]")
		require.Contains(t, b.stderr.String(), "  -owner")
		require.NotContains(t, b.stderr.String(), "-page-size", "a list flag")
		require.NotContains(t, b.stderr.String(), "-subject-prefix", "a list flag")

		b = setup(t)
		require.Zero(t, exit(t, b, "events", "list", "-h"))
		require.Contains(t, b.stderr.String(), "  -subject-prefix")
	})

	t.Run("WrongFlagReportedOnce", func(t *testing.T) {
		t.Parallel()
		for _, line := range commandLines {
			b := setup(t)
			require.Equal(t, 2, exit(t, b, append(line, "--no-such-flag")...), "%v", line)
			require.Equal(t, 1, strings.Count(b.stderr.String(), "no-such-flag"), "%v: %s", line, b.stderr.String())
			if !noFlags[line[0]] {
				require.Regexp(t, flagList, b.stderr.String(), "%v: the flags are listed with it", line)
			}
		}
	})

	t.Run("OtherErrorsExitOne", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Equal(t, 1, exit(t, b, "frobnicate"))
		require.Equal(t, 1, strings.Count(b.stderr.String(), `unknown command "frobnicate"`))
		require.NotContains(t, b.stderr.String(), "did you mean", "nothing is near")
	})

	t.Run("UnknownCommandSaysWhatWasMeant", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"endpionts"}, `unknown command "endpionts"; did you mean "endpoints"?`},
			{[]string{"endpoints", "lsit"}, `endpoints: unknown command "lsit"; did you mean "list"?`},
			{[]string{"events", "pubish"}, `events: unknown command "pubish"; did you mean "publish"?`},
			{[]string{"catalog", "chek"}, `catalog: unknown command "chek"; did you mean "check"?`},
		} {
			b := setup(t)
			require.Equal(t, 1, exit(t, b, tc.args...), "%v", tc.args)
			require.Contains(t, b.stderr.String(), tc.want, "%v", tc.args)
		}
	})

	t.Run("Version", func(t *testing.T) {
		t.Parallel()
		for _, arg := range []string{"--version", "-version", "version"} {
			b := setup(t)
			require.Zero(t, exit(t, b, arg))
			require.Regexp(t, `^dispatcher \S+ \(go1\.\d+\S* \w+/\w+\)\n$`, b.stdout.String())
		}
	})
}
