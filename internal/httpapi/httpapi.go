// Package httpapi is the dispatcher's HTTP/JSON API: webhooks.v1 over HTTP,
// transcoded by grpc-gateway (handlers generated from the rules in
// proto/webhooks/v1/http.yaml) into calls of the very gRPC server the port
// serves, through an in-process connection. So every HTTP request meets the
// same interceptors (bearer tokens and roles), the same handlers and limits,
// the same owner isolation and the same errors as a gRPC call.
//
// Before anything of a request's body is read, its guard checks what costs
// nothing to check: the bearer token is known (401; a wrong one from a
// client address throttled for failed tokens gets 429, a right one always
// passes) and holds the role the route needs (403), a body is
// application/json (415) and within its route's limit (413
// RESOURCE_EXHAUSTED, as gRPC answers: PublishBatch takes more than the
// rest), and the bytes of the requests
// being read fit the process's budget (503 with Retry-After, after a short
// wait). Only then is the body read; JSON nested deeper than MaxJSONDepth,
// or not UTF-8, is refused (400). The gRPC server checks the token again.
//
// What is HTTP's own lives here, in front of the transcoder and in its
// hooks, and changes nothing for gRPC callers:
//
//   - the dialect (see dialect.go): snake_case names in and out, update_mask
//     in snake_case, Go-style durations, unknown fields and query parameters
//     refused (400 naming them), owner_id in the query or the body,
//     Idempotency-Key;
//   - statuses: create answers 201 with Location, delete 204, an error its
//     HTTP status with an RFC 9457 problem (Problem) -- the guard's own
//     refusals included -- a gRPC status mapped as grpc-gateway does
//     (InvalidArgument 400, Unauthenticated 401, PermissionDenied 403,
//     NotFound 404, AlreadyExists 409, ResourceExhausted 429, Unavailable
//     503);
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
	"strings"
	"time"
	"unicode/utf8"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/standmeet/webhook-dispatcher/internal/auth"
	"github.com/standmeet/webhook-dispatcher/internal/connlimit"
	"github.com/standmeet/webhook-dispatcher/internal/grpcapi"
	"github.com/standmeet/webhook-dispatcher/internal/inflight"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// MaxJSONDepth bounds how deeply a request body's JSON may nest: a thin
// event's data needs a handful of levels, and a deeper document is refused
// with 400 before it reaches the decoder.
const MaxJSONDepth = 32

// DefaultBudgetWait is how long a request waits for room in the budget
// before it is answered 503.
const DefaultBudgetWait = time.Second

// Config configures the HTTP/JSON API.
type Config struct {
	// Auth checks bearer tokens; required.
	Auth *auth.Authenticator
	// Throttle limits failed tokens per client address; nil: no limit.
	Throttle *auth.Throttle
	// Proxies are the reverse proxies whose forwarding headers name the
	// client address the throttle counts; zero: none.
	Proxies auth.Proxies
	// Budget bounds the bytes of request bodies being read at once, shared
	// with the gRPC API; nil: no bound.
	Budget *inflight.Budget
	// BudgetWait is how long a request waits for room in Budget (0:
	// DefaultBudgetWait).
	BudgetWait time.Duration
	// Limits bounds one request body per route, as over gRPC.
	Limits grpcapi.Limits
	// Refused is told each request refused to bound what clients hold, by
	// reason (internal/connlimit's); nil: nobody is.
	Refused func(reason string)
	// OpenAPI returns the OpenAPI document served at /openapi.json: the
	// one of the running catalog (internal/openapidoc), asked per request
	// so that a catalog swap shows at once. nil serves none, nor /docs.
	OpenAPI func() []byte
}

// New returns the HTTP/JSON API calling the gRPC server at conn (an
// in-process connection to the port's own server).
func New(ctx context.Context, conn grpc.ClientConnInterface, cfg Config) (http.Handler, error) {
	if cfg.Auth == nil {
		return nil, errors.New("http api: no authenticator")
	}
	if cfg.BudgetWait <= 0 {
		cfg.BudgetWait = DefaultBudgetWait
	}
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
	mux.Handle("/", &guard{cfg: cfg, routes: routes, next: gw})
	if cfg.OpenAPI != nil {
		if err := mountDocs(mux, cfg.OpenAPI); err != nil {
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

// guard checks a request before its body is read, and refuses what must not
// reach the transcoder (see the package doc); it rewrites the rest into what
// the transcoder reads.
type guard struct {
	cfg    Config
	routes []route
	next   http.Handler
}

// access is what the guard needs to know of a request's RPC before its body
// is read: the role it takes and the gRPC method whose size limit applies.
func access(r *http.Request) (need auth.Role, method string) {
	switch r.URL.Path {
	case "/v1/events:publishBatch":
		return auth.RolePublisher, webhooksv1.EventService_PublishBatch_FullMethodName
	case "/v1/events:publish":
		return auth.RolePublisher, webhooksv1.EventService_Publish_FullMethodName
	default:
		// Every other route is an EndpointService RPC (see http.yaml).
		return auth.RoleAdmin, ""
	}
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	need, method := access(r)
	if code, msg := g.authorize(r, need); code != 0 {
		if code == http.StatusUnauthorized {
			// Only a token presented and wrong is a guess, and only a guess
			// is throttled: a right token passes whatever its address did,
			// and a missing one (a misconfigured client) is not counted.
			if g.cfg.Throttle != nil && msg == msgUnknownToken {
				client := g.cfg.Proxies.ClientAddrHTTP(r)
				if wait, throttled := g.cfg.Throttle.Failure(client); throttled {
					g.refused(connlimit.ReasonThrottled)
					g.cfg.Auth.Denied(r.Context(), "http", r.Method+" "+r.URL.Path, "throttled after failed tokens", client)
					w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)))
					writeProblem(w, Problem{Status: http.StatusTooManyRequests, Code: codeName(codes.ResourceExhausted),
						Detail: "too many failed authentications from this address: retry in " + wait.String()})
					return
				}
			}
			w.Header().Set("WWW-Authenticate", `Bearer realm="dispatcher", error="invalid_token", error_description=`+strconv.Quote(msg))
			writeProblem(w, Problem{Status: code, Code: codeName(codes.Unauthenticated), Detail: msg})
			return
		}
		writeProblem(w, Problem{Status: code, Code: codeName(codes.PermissionDenied), Detail: msg})
		return
	}
	// From now on the connection's own deadlines apply, not the short ones
	// of a connection nobody has authenticated on.
	connlimit.MarkAuthenticated(r.Context())
	if r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody {
		release, ok := g.readBody(w, r, g.cfg.Limits.For(method))
		if !ok {
			return
		}
		defer release()
	} else {
		r.Body = http.NoBody
	}
	if violations := queryViolations(r.URL.RawQuery); len(violations) > 0 {
		badRequest(w, violations)
		return
	}
	if rt, params := match(g.routes, r.Method, r.URL.Path); rt != nil {
		if violations := prepare(r, rt, params); len(violations) > 0 {
			badRequest(w, violations)
			return
		}
	}
	g.next.ServeHTTP(&noBody{ResponseWriter: w}, r)
}

const msgUnknownToken = "invalid bearer token"

// refused reports a refusal.
func (g *guard) refused(reason string) {
	if g.cfg.Refused != nil {
		g.cfg.Refused(reason)
	}
}

// authorize checks the bearer token against the role need: a zero code
// passes, 401 or 403 do not (msg says why, and never holds the token).
func (g *guard) authorize(r *http.Request, need auth.Role) (code int, msg string) {
	vals := r.Header.Values("Authorization")
	if len(vals) != 1 {
		g.cfg.Auth.Denied(r.Context(), "http", r.Method+" "+r.URL.Path, "missing bearer token", r.RemoteAddr)
		return http.StatusUnauthorized, "missing bearer token: send the header \"Authorization: Bearer <token>\""
	}
	scheme, tok, found := strings.Cut(strings.TrimSpace(vals[0]), " ")
	if tok = strings.TrimSpace(tok); !found || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		g.cfg.Auth.Denied(r.Context(), "http", r.Method+" "+r.URL.Path, "missing bearer token", r.RemoteAddr)
		return http.StatusUnauthorized, "missing bearer token: send the header \"Authorization: Bearer <token>\""
	}
	role := g.cfg.Auth.RoleOf(tok)
	switch {
	case role == 0:
		g.cfg.Auth.Denied(r.Context(), "http", r.Method+" "+r.URL.Path, "unknown token", r.RemoteAddr)
		return http.StatusUnauthorized, msgUnknownToken
	case role&need == 0:
		g.cfg.Auth.Denied(r.Context(), "http", r.Method+" "+r.URL.Path, "role "+role.String()+" not allowed", r.RemoteAddr)
		service := webhooksv1.EndpointService_ServiceDesc.ServiceName
		if need == auth.RolePublisher {
			service = webhooksv1.EventService_ServiceDesc.ServiceName
		}
		return http.StatusForbidden, "token role " + role.String() + " may not call " + service
	}
	return 0, ""
}

// readBody reserves the body's size in the budget, reads it whole (at most
// limit bytes) and checks its nesting and encoding. On failure it has
// answered, and ok is false; otherwise release gives the reservation back.
func (g *guard) readBody(w http.ResponseWriter, r *http.Request, limit int) (release func(), ok bool) {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeProblem(w, Problem{Status: http.StatusUnsupportedMediaType, Code: codeName(codes.InvalidArgument),
			Detail: "the request body must be JSON: send Content-Type: application/json"})
		return nil, false
	}
	if r.ContentLength > int64(limit) {
		g.refused(connlimit.ReasonTooLarge)
		writeProblem(w, Problem{Status: http.StatusRequestEntityTooLarge, Code: codeName(codes.ResourceExhausted), Detail: tooLarge(limit)})
		return nil, false
	}
	release = func() {}
	if g.cfg.Budget != nil {
		n := r.ContentLength
		if n < 0 { // not known up front (chunked): the most it may be
			n = int64(limit)
		}
		var err error
		if release, err = g.cfg.Budget.Acquire(r.Context(), n, g.cfg.BudgetWait); err != nil {
			g.refused(connlimit.ReasonReadBudget)
			w.Header().Set("Retry-After", "1")
			writeProblem(w, Problem{Status: http.StatusServiceUnavailable, Code: codeName(codes.Unavailable),
				Detail: "the server is reading as many requests as its memory budget allows: retry shortly"})
			return nil, false
		}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, int64(limit)))
	if err != nil {
		release()
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			g.refused(connlimit.ReasonTooLarge)
			writeProblem(w, Problem{Status: http.StatusRequestEntityTooLarge, Code: codeName(codes.ResourceExhausted), Detail: tooLarge(limit)})
			return nil, false
		}
		writeProblem(w, Problem{Status: http.StatusBadRequest, Code: codeName(codes.InvalidArgument), Detail: "could not read the request body"})
		return nil, false
	}
	msg, elements := checkJSON(body)
	if msg != "" {
		release()
		// Named as the dialect names a body it cannot read, so a client
		// finds every bad body under field_violations "body".
		writeProblem(w, Problem{Status: http.StatusBadRequest, Code: codeName(codes.InvalidArgument), Detail: msg,
			FieldViolations: []FieldViolation{{Field: "body", Description: msg}}})
		return nil, false
	}
	if g.cfg.Budget != nil {
		// Decoding multiplies: the JSON decoder builds a value per element,
		// and the call it becomes is encoded and decoded again behind the
		// pipe. Reserve what that costs before it is spent (the bytes read
		// are reserved already), and refuse a body whose decoded form would
		// not fit the whole budget.
		cost := grpcapi.JSONDecodedCost(len(body), elements)
		if cost > g.cfg.Budget.Size() {
			release()
			g.refused(connlimit.ReasonTooLarge)
			writeProblem(w, Problem{Status: http.StatusRequestEntityTooLarge, Code: codeName(codes.InvalidArgument),
				Detail: fmt.Sprintf("the request body holds %d JSON values: decoded, it would take about %d MiB, more than the server reads at once (%d MiB); send fewer events, or fewer values in each",
					elements, cost>>20, g.cfg.Budget.Size()>>20)})
			return nil, false
		}
		n := r.ContentLength
		if n < 0 {
			n = int64(limit)
		}
		if extra := cost - n; extra > 0 {
			more, err := g.cfg.Budget.Acquire(r.Context(), extra, g.cfg.BudgetWait)
			if err != nil {
				release()
				g.refused(connlimit.ReasonReadBudget)
				w.Header().Set("Retry-After", "1")
				writeProblem(w, Problem{Status: http.StatusServiceUnavailable, Code: codeName(codes.Unavailable),
					Detail: "the server is decoding as many requests as its memory budget allows: retry shortly"})
				return nil, false
			}
			first := release
			release = func() { more(); first() }
		}
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return release, true
}

// checkJSON refuses, before the decoder sees them, a body that nests deeper
// than MaxJSONDepth or that is not UTF-8: the message says which, and where.
// It counts the body's elements (its objects, arrays and commas outside
// strings: one per value, member or element, give or take one), which is
// what decoding it costs.
func checkJSON(body []byte) (msg string, elements int) {
	if !utf8.Valid(body) {
		i := 0
		for i < len(body) {
			r, n := utf8.DecodeRune(body[i:])
			if r == utf8.RuneError && n <= 1 {
				break
			}
			i += n
		}
		return "the request body is not valid UTF-8 (at byte " + strconv.Itoa(i) + ")", 0
	}
	depth := 0
	inString, escaped := false, false
	for i, c := range body {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			elements++
			if depth++; depth > MaxJSONDepth {
				return "the request body's JSON nests deeper than " + strconv.Itoa(MaxJSONDepth) + " levels (at byte " + strconv.Itoa(i) + ")", elements
			}
		case c == '}' || c == ']':
			depth--
		case c == ',':
			elements++
		}
	}
	return "", elements + 1
}

func tooLarge(limit int) string {
	if limit >= 1<<20 && limit%(1<<20) == 0 {
		return "the request body must be at most " + strconv.Itoa(limit>>20) + " MiB"
	}
	return "the request body must be at most " + strconv.Itoa(limit>>10) + " KiB"
}

// queryViolations checks that every query parameter's name and value are
// valid percent-encoding of UTF-8: the transcoder would put them into
// proto strings, which must be UTF-8, and fail as a server error (500)
// naming its own step. Each violation names the parameter (its invalid
// bytes replaced) and the byte of the decoded value at fault.
func queryViolations(raw string) []FieldViolation {
	var out []FieldViolation
	for pair := range strings.SplitSeq(raw, "&") {
		if pair == "" {
			continue
		}
		rawKey, rawVal, _ := strings.Cut(pair, "=")
		key, kerr := url.QueryUnescape(rawKey)
		if kerr != nil {
			key = rawKey
		}
		name := strings.ToValidUTF8(key, "\uFFFD")
		switch val, verr := url.QueryUnescape(rawVal); {
		case kerr != nil || verr != nil:
			out = append(out, FieldViolation{Field: name, Description: "the query parameter is not valid percent-encoding"})
		case !utf8.ValidString(key):
			out = append(out, FieldViolation{Field: name, Description: fmt.Sprintf("the query parameter's name is not valid UTF-8 (at byte %d)", invalidAt(key))})
		case !utf8.ValidString(val):
			out = append(out, FieldViolation{Field: name, Description: fmt.Sprintf("the query parameter's value is not valid UTF-8 (at byte %d)", invalidAt(val))})
		}
	}
	return out
}

// invalidAt is the offset of s's first byte that is not valid UTF-8.
func invalidAt(s string) int {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return len(s)
}
