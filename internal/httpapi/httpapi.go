// Package httpapi is the dispatcher's HTTP/JSON API: webhooks.v1 over HTTP,
// transcoded by grpc-gateway (handlers generated from the rules in
// proto/webhooks/v1/http.yaml) into calls of the very gRPC server the port
// serves, through an in-process connection. So every HTTP request meets the
// same interceptors (bearer tokens and roles), the same handlers and limits,
// the same owner isolation and the same errors as a gRPC call: a gRPC status
// becomes its HTTP status (InvalidArgument 400, Unauthenticated 401,
// PermissionDenied 403, NotFound 404, AlreadyExists 409, ResourceExhausted
// 429, Unavailable 503) with a google.rpc.Status body whose BadRequest detail
// names each bad field as over gRPC.
//
// Before transcoding, a request with a body must be application/json (415
// otherwise) and at most MaxBodyBytes (413), and a JSON field the request
// message does not have is refused (400 naming it), never ignored.
package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// MaxBodyBytes bounds a request body: the gRPC server's own bound on a
// message (its default, 4 MiB), so a request too big for one is too big for
// the other.
const MaxBodyBytes = 4 << 20

// New returns the HTTP/JSON API calling the gRPC server at conn (an
// in-process connection to the port's own server).
func New(ctx context.Context, conn grpc.ClientConnInterface) (http.Handler, error) {
	mux := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
			// The proto field names, as the errors name them.
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}),
		// Only Authorization (which grpc-gateway always forwards) reaches
		// the gRPC server: no other header becomes metadata.
		runtime.WithIncomingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithOutgoingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithErrorHandler(errorHandler),
	)
	if err := webhooksv1.RegisterEventServiceHandlerClient(ctx, mux, webhooksv1.NewEventServiceClient(conn)); err != nil {
		return nil, fmt.Errorf("http api: %w", err)
	}
	if err := webhooksv1.RegisterEndpointServiceHandlerClient(ctx, mux, webhooksv1.NewEndpointServiceClient(conn)); err != nil {
		return nil, fmt.Errorf("http api: %w", err)
	}
	return guard(mux), nil
}

// errorHandler is grpc-gateway's, with the challenge a 401 owes (RFC 6750):
// grpc-gateway's own puts the bare message there.
func errorHandler(ctx context.Context, mux *runtime.ServeMux, m runtime.Marshaler, w http.ResponseWriter, r *http.Request, err error) {
	if st := status.Convert(err); st.Code() == codes.Unauthenticated {
		w = challenge{w, `Bearer realm="dispatcher", error="invalid_token", error_description=` + strconv.Quote(st.Message())}
	}
	runtime.DefaultHTTPErrorHandler(ctx, mux, m, w, r, err)
}

// challenge sets WWW-Authenticate as the header is written.
type challenge struct {
	http.ResponseWriter
	value string
}

func (c challenge) WriteHeader(code int) {
	c.Header().Set("WWW-Authenticate", c.value)
	c.ResponseWriter.WriteHeader(code)
}

// guard refuses what must not reach the transcoder: a body that is not JSON
// or too large.
func guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
				writeStatus(w, http.StatusUnsupportedMediaType,
					"the request body must be JSON: send Content-Type: application/json")
				return
			}
			if r.ContentLength > MaxBodyBytes {
				writeStatus(w, http.StatusRequestEntityTooLarge, tooLarge)
				return
			}
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
			if err != nil {
				if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
					writeStatus(w, http.StatusRequestEntityTooLarge, tooLarge)
					return
				}
				writeStatus(w, http.StatusBadRequest, "could not read the request body")
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		next.ServeHTTP(w, r)
	})
}

var tooLarge = "the request body must be at most " + strconv.Itoa(MaxBodyBytes>>20) + " MiB"

// writeStatus answers as grpc-gateway does, a google.rpc.Status as JSON:
// InvalidArgument, with httpStatus saying what was wrong with the request.
func writeStatus(w http.ResponseWriter, httpStatus int, msg string) {
	b, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(status.New(codes.InvalidArgument, msg).Proto())
	if err != nil {
		http.Error(w, msg, httpStatus)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(httpStatus)
	_, _ = w.Write(b)
}
