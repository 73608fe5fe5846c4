package grpcapi

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"

	"github.com/standmeet/webhook-dispatcher/internal/database"
)

// maxNamedFields bounds the field names an InvalidArgument message lists; the
// BadRequest detail carries all of them.
const maxNamedFields = 10

// invalidArgument builds an InvalidArgument status whose message names the
// first bad field (and the others' names), and whose BadRequest detail names
// them all with what is wrong.
func invalidArgument(violations []*errdetails.BadRequest_FieldViolation) error {
	first := violations[0]
	var b strings.Builder
	b.WriteString("invalid " + first.GetField() + ": " + first.GetDescription())
	if rest := violations[1:]; len(rest) > 0 {
		b.WriteString(" (and " + strconv.Itoa(len(rest)) + " more invalid field")
		if len(rest) > 1 {
			b.WriteString("s")
		}
		for i, v := range rest {
			switch {
			case i == maxNamedFields:
				b.WriteString(", …")
			case i > maxNamedFields:
				continue
			case i == 0:
				b.WriteString(": " + v.GetField())
			default:
				b.WriteString(", " + v.GetField())
			}
		}
		b.WriteString(")")
	}
	return withDetails(status.New(codes.InvalidArgument, b.String()), &errdetails.BadRequest{FieldViolations: violations})
}

// withDetails attaches details to st; they are a courtesy, so a failure to
// attach them leaves the code and message standing alone.
func withDetails(st *status.Status, details ...protoadapt.MessageV1) error {
	with, err := st.WithDetails(details...)
	if err != nil {
		return st.Err()
	}
	return with.Err()
}

// unexpected answers an error no rule covers. The error is logged with the
// method and the owner, never sent: a database message is not the caller's
// business. code is what the service promises for such errors: Unavailable
// where retrying is always safe (publishing is idempotent), Internal
// elsewhere.
//
// Two kinds of error are not the service's to judge. One that ends the
// caller's own call (its deadline, its cancellation) is answered as such,
// but only when the caller's context says so: a timeout of the server's own
// (a statement's, a batch's) is the database being slow or away. That, and
// an error that says the database cannot be reached (it restarts, fails
// over), is Unavailable whatever the method, logged as a warning: nothing is
// wrong with the call, and the same call succeeds once the database answers.
func unexpected(ctx context.Context, logger *slog.Logger, method, owner string, code codes.Code, err error) error {
	switch ctxErr := ctx.Err(); {
	case errors.Is(ctxErr, context.Canceled):
		return status.Error(codes.Canceled, "request cancelled")
	case errors.Is(ctxErr, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "request deadline exceeded")
	}
	if database.Unreachable(err) || errors.Is(err, context.DeadlineExceeded) {
		logger.WarnContext(ctx, "grpc call failed: database unreachable or not answering in time; the caller may retry",
			slog.String("method", method), slog.String("owner_id", owner), slog.Any("error", err))
		return status.Error(codes.Unavailable, "the database is unreachable for now; retry later")
	}
	logger.ErrorContext(ctx, "grpc call failed", slog.String("method", method), slog.String("owner_id", owner), slog.Any("error", err))
	if code == codes.Unavailable {
		return status.Error(codes.Unavailable, "could not complete the call for now; retrying is safe")
	}
	return status.Error(codes.Internal, "internal error")
}
