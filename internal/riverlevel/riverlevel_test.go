package riverlevel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

func TestHandler(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		buf    *bytes.Buffer
		logger *slog.Logger
	}
	setup := func(t *testing.T, level slog.Level) *testBundle {
		t.Helper()
		buf := &bytes.Buffer{}
		base := slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: level}))
		// As serve builds River's logger.
		return &testBundle{buf: buf, logger: slog.New(Handler(base.Handler())).With(slog.String("component", "river"))}
	}
	lines := func(t *testing.T, b *testBundle) []map[string]any {
		t.Helper()
		var out []map[string]any
		for line := range bytes.Lines(b.buf.Bytes()) {
			var m map[string]any
			require.NoError(t, json.Unmarshal(line, &m))
			out = append(out, m)
		}
		return out
	}
	const refused = "failed to connect to `user=postgres database=postgres`: 127.0.0.1:5432 (127.0.0.1): dial error: dial tcp 127.0.0.1:5432: connect: connection refused"

	t.Run("CompleterGivingUpIsAWarningThatSaysNothingIsLost", func(t *testing.T) {
		t.Parallel()
		b := setup(t, slog.LevelInfo)
		b.logger.Error("jobcompleter.BatchCompleter: Too many errors; giving up")
		got := lines(t, b)
		require.Len(t, got, 1)
		require.Equal(t, "WARN", got[0]["level"])
		require.Equal(t, CompleterRetrying, got[0]["msg"])
		require.Equal(t, "river", got[0]["component"])
	})

	t.Run("UnreachableDatabaseIsAWarning", func(t *testing.T) {
		t.Parallel()
		b := setup(t, slog.LevelInfo)
		// River's loops name the error "err" (a string, or an error
		// value) or "error".
		b.logger.Error("producer: Error fetching jobs", slog.String("err", refused), slog.String("queue", "fanout"))
		b.logger.Error("notifier.Notifier: Error connecting listener", "err", fmt.Errorf("x: %w", &pgconn.PgError{Severity: "FATAL", Code: "57P01"}))
		b.logger.Error("maintenance.JobScheduler: Error scheduling jobs", slog.String("error", "unexpected EOF"))
		got := lines(t, b)
		require.Len(t, got, 3)
		for _, l := range got {
			require.Equal(t, "WARN", l["level"], "%v", l)
			require.Equal(t, unreachableNote, l[NoteAttr])
			require.Equal(t, "river", l["component"])
		}
		require.Equal(t, "producer: Error fetching jobs", got[0]["msg"], "River's words are kept")
		require.Equal(t, refused, got[0]["err"])
		require.Equal(t, "fanout", got[0]["queue"])
	})

	t.Run("OtherErrorsStayErrors", func(t *testing.T) {
		t.Parallel()
		b := setup(t, slog.LevelInfo)
		b.logger.Error("producer: Error fetching jobs", slog.String("err", `ERROR: relation "river_job" does not exist (SQLSTATE 42P01)`))
		b.logger.Error("jobexecutor.JobExecutor: Unhandled job kind", slog.String("kind", "x"))
		b.logger.Error("jobcompleter.BatchCompleter: Error completing batch", "err", errors.New("context canceled"))
		got := lines(t, b)
		require.Len(t, got, 3)
		for _, l := range got {
			require.Equal(t, "ERROR", l["level"], "%v", l)
			require.NotContains(t, l, NoteAttr)
		}
	})

	t.Run("OtherLevelsPassThrough", func(t *testing.T) {
		t.Parallel()
		b := setup(t, slog.LevelDebug)
		b.logger.Warn("something", slog.String("err", refused))
		b.logger.Debug("jobcompleter.BatchCompleter: Too many errors; giving up")
		got := lines(t, b)
		require.Len(t, got, 2)
		require.Equal(t, "WARN", got[0]["level"])
		require.NotContains(t, got[0], NoteAttr)
		require.Equal(t, "DEBUG", got[1]["level"])
	})

	t.Run("ALoweredRecordRespectsTheLevel", func(t *testing.T) {
		t.Parallel()
		b := setup(t, slog.LevelError)
		b.logger.Error("producer: Error fetching jobs", slog.String("err", refused))
		b.logger.Error("jobcompleter.BatchCompleter: Too many errors; giving up")
		require.Empty(t, lines(t, b), "a logger at ERROR shows no warnings")
		require.True(t, b.logger.Enabled(context.Background(), slog.LevelError))
	})
}
