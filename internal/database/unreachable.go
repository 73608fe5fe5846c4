package database

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
)

// Unreachable reports whether err says that Postgres could not be reached or
// dropped the connection: the server is stopping, restarting, recovering
// from a crash, failing over, refusing connections for now, or the network
// to it is broken. Nothing about the work that failed was wrong, and it
// succeeds once the server answers again, so callers answer "try again"
// (gRPC Unavailable) and log a warning rather than an error.
//
// An error the server sent about the work itself (a constraint, a missing
// table, a refused login) is not unreachable, even when it came while
// connecting.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	if pgErr, ok := errors.AsType[*pgconn.PgError](err); ok {
		return unreachableCode(pgErr.Code)
	}
	if _, ok := errors.AsType[*pgconn.ConnectError](err); ok {
		// No PgError inside (caught above): the dial failed, timed out,
		// or the server hung up before answering.
		return true
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		// A statement that ran out of time (a net.Error too, for the
		// context's deadline) is not by itself a server gone.
		return false
	}
	if _, ok := errors.AsType[net.Error](err); ok {
		return true
	}
	return errors.Is(err, pgconn.ErrConnClosed) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

// unreachableCode reports whether a SQLSTATE says the server cannot serve
// for now: class 08 (connection exception), admin_shutdown and crash_shutdown
// (the server ended the session: a fast or immediate stop, a crash of another
// backend), cannot_connect_now (starting up, shutting down, recovering) and
// too_many_connections.
func unreachableCode(code string) bool {
	switch code {
	case "57P01", "57P02", "57P03", "53300":
		return true
	}
	return strings.HasPrefix(code, "08")
}

// UnreachableText is Unreachable for an error that only its text is left of
// (a library that logs err.Error()). It recognises pgx's words for the same
// failures.
func UnreachableText(msg string) bool {
	if i := strings.LastIndex(msg, "(SQLSTATE "); i >= 0 {
		code, _, _ := strings.Cut(msg[i+len("(SQLSTATE "):], ")")
		return unreachableCode(code)
	}
	for _, s := range []string{
		"failed to connect to `", // pgconn.ConnectError without a server error
		"connection refused",
		"connection reset by peer",
		"broken pipe",
		"unexpected EOF",
		"conn closed",
		"i/o timeout",
		"no route to host",
		"network is unreachable",
	} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}
