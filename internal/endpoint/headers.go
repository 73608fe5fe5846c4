package endpoint

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"

	"github.com/standmeet/webhook-dispatcher/internal/seal"
)

// Custom headers: static headers an owner asks to be sent on every delivery
// to an endpoint, for receivers behind a gateway that wants a key of its own
// (X-Api-Key: …).
//
// Their values are treated as secrets, because that is what a gateway key
// is: they are sealed at rest with the master keyring like signing secrets
// (associated data: the endpoint id and "headers", so a sealed header set
// cannot be moved onto another endpoint or into a secret column), never
// returned by the API (an endpoint shows only the names), never logged and
// never part of an error. Only the names are stored in plaintext.

// Limits on custom headers: a few short ones are what a gateway key needs.
const (
	MaxHeaders        = 10
	MaxHeaderNameLen  = 64
	MaxHeaderValueLen = 1024
	// MaxHeadersBytes bounds the names and values together.
	MaxHeadersBytes = 4096
)

// FieldHeaders is the field custom headers are named under:
// headers["X-Api-Key"].
const FieldHeaders = "headers"

// PathHeaders is the update mask path that replaces the custom headers.
const PathHeaders = "headers"

// refusedHeaders are names a custom header may not take, lower-case. The
// dispatcher owns the request's framing and its signature, and the
// credentials of a hop are not static per endpoint:
//   - host and content-*: the request's target and body;
//   - hop-by-hop headers (RFC 9110 §7.6.1), which change how the request
//     travels rather than what it says;
//   - authorization, cookie and proxy-*: credentials that proxies, logs and
//     HTTP libraries treat specially. A gateway's static key belongs in a
//     header of its own;
//   - dispatcher-attempt: where the delivery stands, set on every attempt.
//
// webhook-* (the Standard Webhooks headers), content-* and proxy-* are
// refused by prefix, see headerNameProblem.
var refusedHeaders = map[string]bool{
	"host":              true,
	"authorization":     true,
	"cookie":            true,
	"set-cookie":        true,
	"connection":        true,
	"keep-alive":        true,
	"te":                true,
	"trailer":           true,
	"transfer-encoding": true,
	"upgrade":           true,
	"expect":            true,
	"http2-settings":    true,
	"user-agent":        true,
	// job.AttemptHeader, lower-case.
	"dispatcher-attempt": true,
}

var refusedPrefixes = []string{"webhook-", "content-", "proxy-"}

// headerField names one header in a violation. The name is quoted (so a
// control character shows as an escape) and cut short; it is a name the
// owner typed, never a value.
func headerField(name string) string {
	if len(name) > MaxHeaderNameLen {
		name = name[:MaxHeaderNameLen] + "…"
	}
	return FieldHeaders + "[" + strconv.Quote(name) + "]"
}

// headers validates a set of custom headers and returns them in a stable
// order (sortedHeaders'). Names are case-insensitive, so two spellings of one
// name are a duplicate.
func (val *validator) headers(v *violations, h map[string]string) []Header {
	if len(h) > MaxHeaders {
		v.add(FieldHeaders, "must hold at most "+strconv.Itoa(MaxHeaders)+" headers")
		return nil
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for k := range h {
			if !yield(k) {
				return
			}
		}
	})
	out := make([]Header, 0, len(h))
	seen := make(map[string]string, len(h))
	total := 0
	for _, name := range names {
		value := h[name]
		field := headerField(name)
		total += len(name) + len(value)
		if desc := headerNameProblem(name); desc != "" {
			v.add(field, desc)
			continue
		}
		lower := strings.ToLower(name)
		if other, dup := seen[lower]; dup {
			v.add(field, "duplicates "+headerField(other)+" (header names are case-insensitive)")
			continue
		}
		seen[lower] = name
		if desc := headerValueProblem(value); desc != "" {
			v.add(field, desc)
			continue
		}
		out = append(out, Header{Name: name, Value: value})
	}
	if total > MaxHeadersBytes {
		v.add(FieldHeaders, "names and values together must be at most "+strconv.Itoa(MaxHeadersBytes)+" bytes")
	}
	return sortedHeaders(headerMap(out))
}

// sortedHeaders orders h by lower-case name, then name.
func sortedHeaders(h map[string]string) []Header {
	out := make([]Header, 0, len(h))
	for name, value := range h {
		out = append(out, Header{Name: name, Value: value})
	}
	slices.SortFunc(out, func(a, b Header) int {
		return cmp.Or(strings.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name)), strings.Compare(a.Name, b.Name))
	})
	return out
}

func headerMap(hs []Header) map[string]string {
	m := make(map[string]string, len(hs))
	for _, h := range hs {
		m[h.Name] = h.Value
	}
	return m
}

func headerNameProblem(name string) string {
	if name == "" {
		return "header name must not be empty"
	}
	if len(name) > MaxHeaderNameLen {
		return "header name must be at most " + strconv.Itoa(MaxHeaderNameLen) + " characters"
	}
	for i := range len(name) {
		if !isTokenByte(name[i]) {
			return "header name must be an HTTP token (letters, digits and !#$%&'*+-.^_`|~)"
		}
	}
	lower := strings.ToLower(name)
	if refusedHeaders[lower] {
		return "header " + strconv.Quote(lower) + " is set by the dispatcher or carries per-hop credentials; it cannot be a custom header"
	}
	for _, p := range refusedPrefixes {
		if strings.HasPrefix(lower, p) {
			return "headers starting with " + strconv.Quote(p) + " are set by the dispatcher; they cannot be custom headers"
		}
	}
	return ""
}

// headerValueProblem checks a value without ever quoting it: it may be a key.
func headerValueProblem(value string) string {
	if value == "" {
		return "header value must not be empty"
	}
	if len(value) > MaxHeaderValueLen {
		return "header value must be at most " + strconv.Itoa(MaxHeaderValueLen) + " bytes"
	}
	if value[0] == ' ' || value[0] == '\t' || value[len(value)-1] == ' ' || value[len(value)-1] == '\t' {
		return "header value must not start or end with whitespace"
	}
	for i := range len(value) {
		// Visible ASCII, space and tab (RFC 9110 field-value without
		// obs-text): no CR or LF to split the request, no NUL.
		if c := value[i]; (c < ' ' && c != '\t') || c >= 0x7f {
			return "header value must be printable ASCII (no control characters, CR, LF or non-ASCII bytes)"
		}
	}
	return ""
}

// isTokenByte reports whether c is an RFC 9110 tchar.
func isTokenByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// Header is one custom header.
type Header struct {
	Name  string `json:"n"`
	Value string `json:"v"`
}

// sealHeaders seals hs for endpoint id; nil for no headers.
func sealHeaders(kr *seal.Keyring, id uuid.UUID, hs []Header) ([]byte, error) {
	if len(hs) == 0 {
		return nil, nil
	}
	plain, err := json.Marshal(hs)
	if err != nil {
		return nil, fmt.Errorf("encode headers: %w", err)
	}
	defer clear(plain)
	sealed, err := sealFor(kr, plain, headersBinding(id))
	if err != nil {
		return nil, fmt.Errorf("seal headers: %w", err)
	}
	return sealed, nil
}

// OpenHeaders unseals endpoint id's custom headers (its headers_enc column
// as stored; nil for none, which opens to an empty set) into a header set to
// add to each delivery. Errors name the endpoint and the seal failure, never
// a name or a value.
func OpenHeaders(kr *seal.Keyring, id uuid.UUID, sealed []byte) (http.Header, error) {
	if sealed == nil {
		return http.Header{}, nil
	}
	plain, err := openFor(kr, sealed, headersBinding(id))
	if err != nil {
		return nil, fmt.Errorf("endpoint %s: open custom headers: %w", id, err)
	}
	defer clear(plain)
	var hs []Header
	if err := json.Unmarshal(plain, &hs); err != nil {
		return nil, fmt.Errorf("endpoint %s: decode custom headers: malformed", id)
	}
	out := make(http.Header, len(hs))
	for _, h := range hs {
		out.Set(h.Name, h.Value)
	}
	return out, nil
}

// OpenHeaders is the package's OpenHeaders with the opener's keyring.
func (o KeyOpener) OpenHeaders(id uuid.UUID, sealed []byte) (http.Header, error) {
	return OpenHeaders(o.kr, id, sealed)
}

func headerNames(hs []Header) []string {
	names := make([]string, len(hs))
	for i, h := range hs {
		names[i] = h.Name
	}
	return names
}
