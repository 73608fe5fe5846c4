// Package httpapi is the dispatcher's HTTP/JSON API: webhooks.v1 over HTTP,
// transcoded by grpc-gateway (handlers generated from the rules in
// proto/webhooks/v1/http.yaml) into calls of the very gRPC server the port
// serves, through an in-process connection. So every HTTP request meets the
// same interceptors (bearer tokens and roles), the same handlers and limits,
// the same owner isolation and the same errors as a gRPC call.
//
// What is HTTP's own lives here, in front of the transcoder and in its
// hooks, and changes nothing for gRPC callers:
//
//   - the dialect (see dialect.go): snake_case names in and out, update_mask
//     in snake_case, Go-style durations, unknown fields and query parameters
//     refused, owner_id in the query or the body, Idempotency-Key;
//   - statuses: create answers 201 with Location, delete 204, an error its
//     HTTP status with an RFC 9457 problem (Problem), a gRPC status mapped
//     as grpc-gateway does (InvalidArgument 400, Unauthenticated 401,
//     PermissionDenied 403, NotFound 404, AlreadyExists 409,
//     ResourceExhausted 429, Unavailable 503);
//   - a request with a body must be application/json (415 otherwise) and
//     at most MaxBodyBytes (413);
//   - the OpenAPI document at /openapi.json and its reference page at /docs.
package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// MaxBodyBytes bounds a request body: the gRPC server's own bound on a
// message (its default, 4 MiB), so a request too big for one is too big for
// the other.
const MaxBodyBytes = 4 << 20

// Options configures New.
type Options struct {
	// OpenAPI is the OpenAPI document served at /openapi.json (the
	// committed docs/openapi/openapi.json); nil serves none, nor /docs.
	OpenAPI []byte
}

// New returns the HTTP/JSON API calling the gRPC server at conn (an
// in-process connection to the port's own server).
func New(ctx context.Context, conn grpc.ClientConnInterface, opts Options) (http.Handler, error) {
	routes, err := resolve(Rules)
	if err != nil {
		return nil, err
	}
	gw := runtime.NewServeMux(
		runtime.WithMarshalerOption(runtime.MIMEWildcard, &runtime.JSONPb{
			// The proto field names (snake_case), as the errors name them.
			MarshalOptions:   protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true},
			UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
		}),
		// Only Authorization (which grpc-gateway always forwards) reaches
		// the gRPC server: no other header becomes metadata.
		runtime.WithIncomingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithOutgoingHeaderMatcher(func(string) (string, bool) { return "", false }),
		runtime.WithErrorHandler(errorHandler),
		runtime.WithRoutingErrorHandler(routingErrorHandler),
		runtime.WithForwardResponseOption(successStatus),
	)
	if err := webhooksv1.RegisterEventServiceHandlerClient(ctx, gw, webhooksv1.NewEventServiceClient(conn)); err != nil {
		return nil, fmt.Errorf("http api: %w", err)
	}
	if err := webhooksv1.RegisterEndpointServiceHandlerClient(ctx, gw, webhooksv1.NewEndpointServiceClient(conn)); err != nil {
		return nil, fmt.Errorf("http api: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", guard(routes, gw))
	if opts.OpenAPI != nil {
		if err := mountDocs(mux, opts.OpenAPI); err != nil {
			return nil, err
		}
	}
	return mux, nil
}

// successStatus gives a create 201 with Location and a delete 204 (its
// empty body is dropped by noBody).
func successStatus(_ context.Context, w http.ResponseWriter, m proto.Message) error {
	switch resp := m.(type) {
	case *webhooksv1.CreateEndpointResponse:
		ep := resp.GetEndpoint()
		w.Header().Set("Location", "/v1/endpoints/"+url.PathEscape(ep.GetId())+"?owner_id="+url.QueryEscape(ep.GetOwnerId()))
		w.WriteHeader(http.StatusCreated)
	case *webhooksv1.DeleteEndpointResponse:
		w.WriteHeader(http.StatusNoContent)
	}
	return nil
}

// noBody drops what is written after a 204, which has no body.
type noBody struct {
	http.ResponseWriter
	empty bool
}

func (n *noBody) WriteHeader(code int) {
	if code == http.StatusNoContent {
		n.empty = true
		n.Header().Del("Content-Type")
		n.Header().Del("Content-Length")
	}
	n.ResponseWriter.WriteHeader(code)
}

func (n *noBody) Write(b []byte) (int, error) {
	if n.empty {
		return len(b), nil
	}
	return n.ResponseWriter.Write(b)
}

// guard refuses what must not reach the transcoder (a body that is not
// JSON or too large, and whatever the dialect refuses) and rewrites the
// rest into what it reads.
func guard(routes []route, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
			if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
				writeProblem(w, Problem{Status: http.StatusUnsupportedMediaType, Code: codeName(codes.InvalidArgument),
					Detail: "the request body must be JSON: send Content-Type: application/json"})
				return
			}
			if r.ContentLength > MaxBodyBytes {
				writeProblem(w, Problem{Status: http.StatusRequestEntityTooLarge, Code: codeName(codes.InvalidArgument), Detail: tooLarge})
				return
			}
			body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
			if err != nil {
				if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
					writeProblem(w, Problem{Status: http.StatusRequestEntityTooLarge, Code: codeName(codes.InvalidArgument), Detail: tooLarge})
					return
				}
				writeProblem(w, Problem{Status: http.StatusBadRequest, Code: codeName(codes.InvalidArgument), Detail: "could not read the request body"})
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		} else {
			r.Body = http.NoBody
		}
		if rt, params := match(routes, r.Method, r.URL.Path); rt != nil {
			if violations := prepare(r, rt, params); len(violations) > 0 {
				badRequest(w, violations)
				return
			}
		}
		next.ServeHTTP(&noBody{ResponseWriter: w}, r)
	})
}

var tooLarge = "the request body must be at most " + strconv.Itoa(MaxBodyBytes>>20) + " MiB"
