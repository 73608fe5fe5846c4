package main

import (
	"bytes"
	"regexp"
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
	// commandLines are every subcommand, as typed.
	commandLines := [][]string{
		{"serve"}, {"migrate"}, {"event-types"}, {"reseal-secrets"}, {"dev-access"},
		{"endpoints", "list"}, {"endpoints", "get"}, {"endpoints", "create"}, {"endpoints", "update"},
		{"endpoints", "delete"}, {"endpoints", "rotate-secret"}, {"endpoints", "send-test"},
		{"endpoints", "deliveries"}, {"endpoints", "redeliver"}, {"events", "publish"}, {"listen"},
	}
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
				require.Regexp(t, flagList, b.stderr.String(), "%v %s: the flags are listed", line, h)
				require.NotContains(t, b.stderr.String(), "dispatcher:", "help is no error")
			}
		}
		for _, line := range [][]string{{"-h"}, {"help"}, {"endpoints", "-h"}, {"events", "-h"}} {
			b := setup(t)
			require.Zero(t, exit(t, b, line...), "%v", line)
			require.Contains(t, b.stdout.String(), "usage: dispatcher")
		}
	})

	t.Run("WrongFlagReportedOnce", func(t *testing.T) {
		t.Parallel()
		for _, line := range commandLines {
			b := setup(t)
			require.Equal(t, 2, exit(t, b, append(line, "--no-such-flag")...), "%v", line)
			require.Equal(t, 1, strings.Count(b.stderr.String(), "no-such-flag"), "%v: %s", line, b.stderr.String())
			require.Regexp(t, flagList, b.stderr.String(), "%v: the flags are listed with it", line)
		}
	})

	t.Run("OtherErrorsExitOne", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.Equal(t, 1, exit(t, b, "frobnicate"))
		require.Equal(t, 1, strings.Count(b.stderr.String(), `unknown command "frobnicate"`))
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
