package grpcapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestUnexpected(t *testing.T) {
	t.Parallel()

	down := fmt.Errorf("ingest: %w", &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"})
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithTimeout(context.Background(), 0)
	t.Cleanup(cancel2)

	for _, tc := range []struct {
		name    string
		ctx     context.Context //nolint:containedctx // a case's input
		promise codes.Code
		err     error
		want    codes.Code
		level   string // what the log says, "" for nothing
	}{
		// The database restarting, failing over: try again, whatever the
		// method; a warning, not an error.
		{"DatabaseDownPublish", context.Background(), codes.Unavailable, down, codes.Unavailable, "WARN"},
		{"DatabaseDownElsewhere", context.Background(), codes.Internal, down, codes.Unavailable, "WARN"},
		// A timeout of the server's own (the batch's): not the caller's
		// deadline.
		{"ServerTimeout", context.Background(), codes.Internal, fmt.Errorf("ingest: %w", context.DeadlineExceeded), codes.Unavailable, "WARN"},
		// The caller's own end.
		{"CallerCancelled", cancelled, codes.Unavailable, fmt.Errorf("x: %w", context.Canceled), codes.Canceled, ""},
		{"CallerDeadline", expired, codes.Internal, down, codes.DeadlineExceeded, ""},
		// Anything else: what the service promises, logged as an error.
		{"OtherPublish", context.Background(), codes.Unavailable, errors.New("boom"), codes.Unavailable, "ERROR"},
		{"OtherElsewhere", context.Background(), codes.Internal, &pgconn.PgError{Severity: "ERROR", Code: "42P01"}, codes.Internal, "ERROR"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var logs bytes.Buffer
			logger := slog.New(slog.NewTextHandler(&logs, nil))
			err := unexpected(tc.ctx, logger, "publish", "owner-1", tc.promise, tc.err)
			st, ok := status.FromError(err)
			require.True(t, ok)
			require.Equal(t, tc.want, st.Code(), "%v", err)
			require.NotContains(t, st.Message(), "administrator command", "the database's words stay in the log")
			if tc.level == "" {
				require.Empty(t, logs.String())
				return
			}
			require.Contains(t, logs.String(), "level="+tc.level)
		})
	}
}
