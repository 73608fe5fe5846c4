package database

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

func TestUnreachable(t *testing.T) {
	t.Parallel()

	// A server that was never there: a real ConnectError from pgx.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	_, refused := pgx.Connect(ctx, "postgres://postgres@"+addr+"/postgres?sslmode=disable&connect_timeout=10")
	require.Error(t, refused)

	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"ConnectionRefused", refused, true},
		{"WrappedConnectionRefused", fmt.Errorf("ingest: %w", refused), true},
		{"AdminShutdown", &pgconn.PgError{Severity: "FATAL", Code: "57P01"}, true},
		{"CrashShutdown", &pgconn.PgError{Severity: "FATAL", Code: "57P02"}, true},
		{"StartingUp", &pgconn.PgError{Severity: "FATAL", Code: "57P03"}, true},
		{"TooManyConnections", &pgconn.PgError{Severity: "FATAL", Code: "53300"}, true},
		{"ConnectionFailure", &pgconn.PgError{Severity: "FATAL", Code: "08006"}, true},
		{"ConnClosed", fmt.Errorf("x: %w", pgconn.ErrConnClosed), true},
		{"UnexpectedEOF", io.ErrUnexpectedEOF, true},
		{"Reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{"UniqueViolation", &pgconn.PgError{Severity: "ERROR", Code: "23505"}, false},
		{"UndefinedTable", fmt.Errorf("x: %w", &pgconn.PgError{Severity: "ERROR", Code: "42P01"}), false},
		{"LoginRefused", &pgconn.PgError{Severity: "FATAL", Code: "28P01"}, false},
		{"StatementTimedOut", fmt.Errorf("x: %w", context.DeadlineExceeded), false},
		{"Cancelled", context.Canceled, false},
		{"Other", errors.New("database is down"), false},
		{"Nil", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tc.want, Unreachable(tc.err), "%v", tc.err)
			if tc.err != nil && tc.name != "Other" {
				// The same error, as a library that logs only its text
				// leaves it.
				require.Equal(t, tc.want, UnreachableText(tc.err.Error()), "%q", tc.err.Error())
			}
		})
	}
}

func TestUnreachableText(t *testing.T) {
	t.Parallel()
	for msg, want := range map[string]bool{
		// What River logged during a restart of the server.
		"failed to connect to `user=postgres database=postgres`: 127.0.0.1:39117 (127.0.0.1): dial error: dial tcp 127.0.0.1:39117: connect: connection refused":        true,
		"failed to connect to `user=postgres database=postgres`: 127.0.0.1:39117 (127.0.0.1): server error: FATAL: the database system is starting up (SQLSTATE 57P03)": true,
		"FATAL: terminating connection due to administrator command (SQLSTATE 57P01)":                                                                                   true,
		"unexpected EOF": true,
		"read tcp 127.0.0.1:59962->127.0.0.1:39117: read: connection reset by peer": true,
		// Not the server's absence.
		"failed to connect to `user=app database=app`: 10.0.0.5:5432 (db): server error: FATAL: password authentication failed for user \"app\" (SQLSTATE 28P01)": false,
		"ERROR: relation \"river_job\" does not exist (SQLSTATE 42P01)":                                                                                           false,
		"context deadline exceeded": false,
	} {
		require.Equal(t, want, UnreachableText(msg), "%q", msg)
	}
}
