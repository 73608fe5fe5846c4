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
func unexpected(ctx context.Context, logger *slog.Logger, method, owner string, code codes.Code, err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "request cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "request deadline exceeded")
	}
	logger.ErrorContext(ctx, "grpc call failed", slog.String("method", method), slog.String("owner_id", owner), slog.Any("error", err))
	if code == codes.Unavailable {
		return status.Error(codes.Unavailable, "could not complete the call for now; retrying is safe")
	}
	return status.Error(codes.Internal, "internal error")
}
