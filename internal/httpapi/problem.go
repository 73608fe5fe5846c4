package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ProblemContentType is the media type of every error answer (RFC 9457).
const ProblemContentType = "application/problem+json"

// Problem is the one shape of every error the HTTP/JSON API answers: RFC
// 9457 problem details, with two extension members. Code is the gRPC status
// code's name ("INVALID_ARGUMENT", "NOT_FOUND"), the same reason a gRPC
// caller sees, so one switch serves both faces; FieldViolations names every
// bad field (a JSON field path, a query parameter or a header) with what is
// wrong with it.
//
// RFC 9457 rather than google.rpc.Status (grpc-gateway's default): it is the
// IETF standard HTTP clients and API tooling recognise by its media type,
// it carries the HTTP status in the body, and its members are plain JSON
// rather than protobuf Any values with type URLs.
type Problem struct {
	// Type is "about:blank": the HTTP status and Code say what happened.
	Type string `json:"type"`
	// Title is the HTTP status's reason phrase.
	Title  string `json:"title"`
	Status int    `json:"status"`
	// Detail is the message, for people.
	Detail          string           `json:"detail"`
	Code            string           `json:"code"`
	FieldViolations []FieldViolation `json:"field_violations,omitempty"`
}

// FieldViolation is one bad input.
type FieldViolation struct {
	// Field is a JSON field path ("event.data.op", "event_types[0]"), a
	// query parameter ("page_size") or a header ("Idempotency-Key").
	Field       string `json:"field"`
	Description string `json:"description"`
}

// writeProblem answers p.
func writeProblem(w http.ResponseWriter, p Problem) {
	if p.Type == "" {
		p.Type = "about:blank"
	}
	if p.Title == "" {
		p.Title = http.StatusText(p.Status)
	}
	b, err := json.Marshal(p)
	if err != nil { // not reached: Problem always encodes
		http.Error(w, p.Detail, p.Status)
		return
	}
	w.Header().Set("Content-Type", ProblemContentType)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(p.Status)
	_, _ = w.Write(b)
}

// badRequest answers 400 INVALID_ARGUMENT naming each violation.
func badRequest(w http.ResponseWriter, violations []FieldViolation) {
	detail := "invalid " + violations[0].Field + ": " + violations[0].Description
	if n := len(violations) - 1; n > 0 {
		detail += " (and " + strconv.Itoa(n) + " more)"
	}
	writeProblem(w, Problem{Status: http.StatusBadRequest, Code: codeName(codes.InvalidArgument), Detail: detail, FieldViolations: violations})
}

// codeName is a gRPC code as a string constant ("INVALID_ARGUMENT"), the
// form google.rpc.Code's JSON mapping uses.
func codeName(c codes.Code) string {
	if name, ok := codeNames[c]; ok {
		return name
	}
	return "UNKNOWN"
}

var codeNames = map[codes.Code]string{
	codes.OK: "OK", codes.Canceled: "CANCELLED", codes.Unknown: "UNKNOWN",
	codes.InvalidArgument: "INVALID_ARGUMENT", codes.DeadlineExceeded: "DEADLINE_EXCEEDED",
	codes.NotFound: "NOT_FOUND", codes.AlreadyExists: "ALREADY_EXISTS",
	codes.PermissionDenied: "PERMISSION_DENIED", codes.ResourceExhausted: "RESOURCE_EXHAUSTED",
	codes.FailedPrecondition: "FAILED_PRECONDITION", codes.Aborted: "ABORTED",
	codes.OutOfRange: "OUT_OF_RANGE", codes.Unimplemented: "UNIMPLEMENTED",
	codes.Internal: "INTERNAL", codes.Unavailable: "UNAVAILABLE", codes.DataLoss: "DATA_LOSS",
	codes.Unauthenticated: "UNAUTHENTICATED",
}

// errorHandler answers a gRPC status (the server's, or the transcoder's own)
// as a Problem, with the challenge a 401 owes (RFC 6750).
func errorHandler(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, _ *http.Request, err error) {
	st := status.Convert(err)
	p := Problem{Status: runtime.HTTPStatusFromCode(st.Code()), Code: codeName(st.Code()), Detail: st.Message()}
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			for _, v := range br.GetFieldViolations() {
				p.FieldViolations = append(p.FieldViolations, FieldViolation{Field: v.GetField(), Description: v.GetDescription()})
			}
		}
	}
	if st.Code() == codes.Unauthenticated {
		w.Header().Set("WWW-Authenticate", `Bearer realm="dispatcher", error="invalid_token", error_description=`+strconv.Quote(st.Message()))
	}
	writeProblem(w, p)
}

// routingErrorHandler answers a request no route takes.
func routingErrorHandler(_ context.Context, _ *runtime.ServeMux, _ runtime.Marshaler, w http.ResponseWriter, r *http.Request, httpStatus int) {
	p := Problem{Status: httpStatus}
	switch httpStatus {
	case http.StatusMethodNotAllowed:
		p.Code, p.Detail = codeName(codes.Unimplemented), r.Method+" is not allowed on "+r.URL.Path
	case http.StatusNotFound:
		p.Code, p.Detail = codeName(codes.NotFound), "no such route: "+r.Method+" "+r.URL.Path
	default:
		p.Code, p.Detail = codeName(codes.InvalidArgument), http.StatusText(httpStatus)
	}
	writeProblem(w, p)
}
