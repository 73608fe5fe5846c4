package webhook

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// The rules of a thin event, in one place: the main application's outbox
// writer (pkg/outbox), the dispatcher's ingest (gRPC and outbox relay) and its
// deliver worker all use them, so a limit or a message can never differ
// between the side that writes an event and the side that carries it.

// Limits enforced by Validate. They bound what an untrusted publisher can make
// the dispatcher store, sign and send, and keep every value safe to put in an
// HTTP header, a log line or a database index.
const (
	// MaxIDLen bounds Event.ID. The id is sent as the webhook-id header and is
	// the receivers' dedupe key.
	MaxIDLen = 128
	// MaxOwnerIDLen bounds Event.OwnerID.
	MaxOwnerIDLen = 128
	// MaxTypeLen bounds Event.Type (and a glob, see MaxGlobLen).
	MaxTypeLen = 128
	// MaxSubjectLen bounds Event.Subject, in bytes.
	MaxSubjectLen = 1024
	// MaxDataBytes bounds Event.Data, in bytes as given: thin means small.
	MaxDataBytes = 4096
	// MaxFutureSkew is how far past the validator's clock OccurredAt may be,
	// to tolerate clock skew between the publisher and the dispatcher without
	// accepting timestamps that are plainly wrong.
	MaxFutureSkew = time.Hour
	// MinOccurredAtUnix (2000-01-01T00:00:00Z) is the earliest OccurredAt
	// accepted. Anything older is a zero-ish or unit-confused timestamp
	// (seconds read as milliseconds and the like), not a real event.
	MinOccurredAtUnix int64 = 946684800
)

// Field names as used in FieldError.Field. They match the JSON keys of the
// payload (and owner_id as the ingest APIs spell it), so an error can be shown
// to a publisher verbatim.
const (
	FieldID         = "id"
	FieldOwnerID    = "owner_id"
	FieldType       = "type"
	FieldSubject    = "subject"
	FieldOccurredAt = "occurred_at"
	FieldData       = "data"
)

// FieldError reports the first field of an Event that breaks a rule. Reason is
// written for the publisher and never echoes the offending value, which may be
// large or hostile.
type FieldError struct {
	Field  string
	Reason string
}

func (e *FieldError) Error() string {
	return "invalid event." + e.Field + ": " + e.Reason
}

// Unwrap lets errors.Is(err, ErrInvalidEvent) match any field error.
func (e *FieldError) Unwrap() error { return ErrInvalidEvent }

// FieldErrors is every bad field of one event, in a stable order (by
// field): what a data object that breaks its schema in several places
// answers (catalog.ValidateData), so that a publisher fixes them all at
// once. errors.As finds the first *FieldError, and errors.Is
// ErrInvalidEvent matches, as for one FieldError.
type FieldErrors []*FieldError

func (e FieldErrors) Error() string {
	if len(e) == 0 {
		return "invalid event"
	}
	msg := e[0].Error()
	if n := len(e) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more invalid fields)", n)
	}
	return msg
}

// Unwrap returns each field error.
func (e FieldErrors) Unwrap() []error {
	out := make([]error, len(e))
	for i, fe := range e {
		out[i] = fe
	}
	return out
}

// Fields returns err's bad fields: each of a FieldErrors, the one of a
// FieldError, nil for any other error.
func Fields(err error) []*FieldError {
	if fes, ok := errors.AsType[FieldErrors](err); ok {
		return fes
	}
	if fe, ok := errors.AsType[*FieldError](err); ok {
		return []*FieldError{fe}
	}
	return nil
}

func fieldErr(field, reason string) *FieldError {
	return &FieldError{Field: field, Reason: reason}
}

// Validate checks every field against the documented limits and returns the
// first violation as a *FieldError, checking id, owner_id, type, subject,
// occurred_at, data in that order. now is the validator's clock, passed in so
// tests and replays are deterministic.
//
// Validate does not require Type to be in the dispatcher's catalog: an
// unclassified type is a valid event that is simply never delivered.
func (e *Event) Validate(now time.Time) error {
	if err := validateID(e.ID); err != nil {
		return err
	}
	if err := validateOwnerID(e.OwnerID); err != nil {
		return err
	}
	if err := validateType(e.Type); err != nil {
		return err
	}
	if err := validateSubject(e.Subject); err != nil {
		return err
	}
	if err := validateOccurredAt(e.OccurredAt, now); err != nil {
		return err
	}
	return validateData(e.Data)
}

// ValidateID applies Event.ID's rule (a UUID or an opaque id of
// [A-Za-z0-9_-], at most MaxIDLen); the error is a *FieldError.
func ValidateID(id string) error { return validateID(id) }

func validateID(id string) error {
	if id == "" {
		return fieldErr(FieldID, "must not be empty")
	}
	if len(id) > MaxIDLen {
		return fieldErr(FieldID, "must be at most "+strconv.Itoa(MaxIDLen)+" characters")
	}
	// A canonical UUID is already within this alphabet. Braced or urn: forms
	// are not accepted: the id goes verbatim into the webhook-id header, and
	// Standard Webhooks signs "<id>.<timestamp>.<body>", so a '.' (or anything
	// outside a header-safe token) would make the signed content ambiguous.
	for i := range len(id) {
		if !isIDByte(id[i]) {
			return fieldErr(FieldID, "must be a UUID or an opaque id of characters [A-Za-z0-9_-]")
		}
	}
	return nil
}

func isIDByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}

// ValidateOwnerID checks an owner id, the scope of every event and endpoint:
// 1..MaxOwnerIDLen printable ASCII characters without spaces. The endpoint
// service applies the same rule, so an endpoint can only be created for an
// owner whose events could exist.
func ValidateOwnerID(owner string) error { return validateOwnerID(owner) }

func validateOwnerID(owner string) error {
	if owner == "" {
		return fieldErr(FieldOwnerID, "must not be empty")
	}
	if len(owner) > MaxOwnerIDLen {
		return fieldErr(FieldOwnerID, "must be at most "+strconv.Itoa(MaxOwnerIDLen)+" characters")
	}
	for i := range len(owner) {
		if c := owner[i]; c <= ' ' || c > '~' {
			return fieldErr(FieldOwnerID, "must be printable ASCII without spaces")
		}
	}
	return nil
}

func validateType(typ string) error {
	if typ == "" {
		return fieldErr(FieldType, "must not be empty")
	}
	if len(typ) > MaxTypeLen {
		return fieldErr(FieldType, "must be at most "+strconv.Itoa(MaxTypeLen)+" bytes")
	}
	if !IsTypeName(typ) {
		return fieldErr(FieldType, `must be dotted lower-case segments like "corpus.note.changed"`)
	}
	return nil
}

// IsTypeName reports whether s is a well-formed event type name, i.e. matches
// ^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$: at least two dotted segments, each
// starting with a lower-case letter. Hand-written rather than a regexp because
// the dispatcher's fanout runs it for every glob of every endpoint.
func IsTypeName(s string) bool {
	return IsTypePrefix(s) && strings.IndexByte(s, '.') >= 0
}

// IsTypePrefix reports whether s is one or more leading segments of a type
// name ("corpus", "corpus.note"): IsTypeName without the two-segment minimum.
// It is what may stand before ".*" in a subscription glob.
func IsTypePrefix(s string) bool {
	if s == "" {
		return false
	}
	segStart := true
	for i := range len(s) {
		c := s[i]
		switch {
		case segStart:
			if c < 'a' || c > 'z' {
				return false
			}
			segStart = false
		case c == '.':
			segStart = true
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_':
		default:
			return false
		}
	}
	return !segStart // no trailing dot
}

func validateSubject(subject string) error {
	if subject == "" {
		return fieldErr(FieldSubject, "must not be empty")
	}
	if len(subject) > MaxSubjectLen {
		return fieldErr(FieldSubject, "must be at most "+strconv.Itoa(MaxSubjectLen)+" bytes")
	}
	if !utf8.ValidString(subject) {
		return fieldErr(FieldSubject, "must be valid UTF-8")
	}
	// Control characters (C0, DEL, C1) could split log lines or confuse a
	// receiver's parser; nothing legitimate in an identifier needs them.
	for _, r := range subject {
		if unicode.IsControl(r) {
			return fieldErr(FieldSubject, "must not contain control characters")
		}
	}
	if !hasURIScheme(subject) {
		return fieldErr(FieldSubject, `must be a URI with a scheme, like "wiki://path"`)
	}
	return nil
}

// hasURIScheme reports whether s is "scheme://rest" with an RFC 3986 scheme
// (ALPHA *( ALPHA / DIGIT / "+" / "-" / "." )) and a non-empty rest. The
// scheme is what scoping keys on (raw:// never leaves), so it must be
// unambiguous; the rest is the application's business.
func hasURIScheme(s string) bool {
	i := strings.Index(s, "://")
	if i <= 0 || i+3 == len(s) {
		return false
	}
	for j := range i {
		c := s[j]
		isAlpha := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
		if j == 0 && !isAlpha {
			return false
		}
		if !isAlpha && (c < '0' || c > '9') && c != '+' && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

func validateOccurredAt(t, now time.Time) error {
	if t.IsZero() {
		return fieldErr(FieldOccurredAt, "must be set")
	}
	if t.Before(time.Unix(MinOccurredAtUnix, 0)) {
		return fieldErr(FieldOccurredAt, "must not be before 2000-01-01T00:00:00Z")
	}
	if t.After(now.Add(MaxFutureSkew)) {
		return fieldErr(FieldOccurredAt, "must not be more than "+MaxFutureSkew.String()+" in the future")
	}
	return nil
}

func validateData(data json.RawMessage) error {
	if len(data) > MaxDataBytes {
		return fieldErr(FieldData, "must be at most "+strconv.Itoa(MaxDataBytes)+" bytes")
	}
	if err := checkDataObject(data); err != nil {
		return err
	}
	return checkStorableEscapes(data)
}

// checkStorableEscapes refuses the two \u escapes that are valid JSON but that
// Postgres' jsonb (where events are stored) rejects: \u0000, and a surrogate
// not part of a pair. Accepted, they would fail the insert, which a publisher
// is told to retry, forever. data must already be valid JSON, so a backslash
// only ever starts an escape inside a string.
func checkStorableEscapes(data []byte) error {
	bad := fieldErr(FieldData, `must not contain \u0000 or an unpaired surrogate escape`)
	highPending := false
	for i := 0; i < len(data); i++ {
		if data[i] != '\\' {
			if highPending {
				return bad
			}
			continue
		}
		if data[i+1] != 'u' {
			if highPending {
				return bad
			}
			i++ // skip the escaped character: "\\u0000" is a backslash and "u0000"
			continue
		}
		r, err := strconv.ParseUint(string(data[i+2:i+6]), 16, 16)
		if err != nil {
			return bad // unreachable for valid JSON
		}
		i += 5
		switch {
		case r == 0:
			return bad
		case r >= 0xd800 && r <= 0xdbff:
			if highPending {
				return bad
			}
			highPending = true
		case r >= 0xdc00 && r <= 0xdfff:
			if !highPending {
				return bad
			}
			highPending = false
		default:
			if highPending {
				return bad
			}
		}
	}
	if highPending {
		return bad
	}
	return nil
}

// checkDataObject is the part of data validation that Payload needs too: a
// single JSON object, valid UTF-8, no duplicate keys.
func checkDataObject(data json.RawMessage) error {
	// encoding/json accepts invalid UTF-8 inside strings (and would rewrite it
	// to U+FFFD on the way out), so check it first: the body we sign must be
	// the body the publisher meant.
	if !utf8.Valid(data) {
		return fieldErr(FieldData, "must be valid UTF-8")
	}
	trimmed := bytes.TrimLeft(data, " \t\r\n")
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return fieldErr(FieldData, "must be a JSON object")
	}
	if err := checkJSON(data); err != nil {
		return err
	}
	return nil
}

// checkJSON verifies data is exactly one well-formed JSON value and that no
// object in it repeats a key. Duplicate keys are rejected because parsers
// disagree on which one wins: the dispatcher's scope decision (which reads
// data.published) and a receiver must never read different values.
//
// Valid data, the common case, is passed by json.Valid and a scan for
// repeated keys, neither of which allocates for an event's usual data (a
// few objects of a few keys); anything else goes through checkJSONTokens for
// the reason. The token walk alone allocated a decoder, its buffer and every
// token: the largest single allocation of a Publish call.
func checkJSON(data []byte) error {
	if utf8.Valid(data) && json.Valid(data) && !repeatsKey(data) {
		return nil
	}
	return checkJSONTokens(data)
}

// repeatsKey reports whether an object in data, which must be valid JSON
// and valid UTF-8, repeats a key, comparing keys as decoded (`"a"` and `"\u0061"` are one
// key). It may err towards true only when unsure, never towards false:
// checkJSON then asks checkJSONTokens, which decides.
func repeatsKey(data []byte) bool {
	type frame struct {
		object  bool
		wantKey bool
		from    int                 // the object's first key in keys
		many    map[string]struct{} // the object's keys once there are many
	}
	const manyKeys = 16
	var (
		stackBuf [8]frame
		keysBuf  [32][]byte
		stack    = stackBuf[:0]
		// keys holds the keys of every open object, each object's after
		// its parent's: an object's are dropped when it closes.
		keys = keysBuf[:0]
	)
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case '{', '[':
			stack = append(stack, frame{object: c == '{', wantKey: c == '{', from: len(keys)})
		case '}', ']':
			keys = keys[:stack[len(stack)-1].from]
			stack = stack[:len(stack)-1]
		case ',':
			if top := len(stack) - 1; top >= 0 && stack[top].object {
				stack[top].wantKey = true
			}
		case '"':
			start, escaped := i, false
			for i++; data[i] != '"'; i++ {
				if data[i] == '\\' {
					escaped = true
					i++
				}
			}
			top := len(stack) - 1
			if top < 0 || !stack[top].wantKey {
				continue // a string value
			}
			f := &stack[top]
			f.wantKey = false
			key := data[start+1 : i]
			if escaped {
				var s string
				if json.Unmarshal(data[start:i+1], &s) != nil {
					return true // cannot be, for valid JSON; let the tokens decide
				}
				key = []byte(s)
			}
			if f.many != nil {
				if _, dup := f.many[string(key)]; dup {
					return true
				}
				f.many[string(key)] = struct{}{}
				continue
			}
			for _, k := range keys[f.from:] {
				if bytes.Equal(k, key) {
					return true
				}
			}
			keys = append(keys, key)
			if len(keys)-f.from > manyKeys {
				// The top object's keys are last: move them to a map.
				f.many = make(map[string]struct{}, 2*(len(keys)-f.from))
				for _, k := range keys[f.from:] {
					f.many[string(k)] = struct{}{}
				}
				keys = keys[:f.from]
			}
		}
	}
	return false
}

// checkJSONTokens is checkJSON walking data token by token: the reason for
// invalid data (a syntax error's offset, a repeated key, more than one
// value).
func checkJSONTokens(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber() // numbers are only skipped; don't parse them as floats

	// One frame per open object or array; for objects, the keys seen so far
	// and whether the next token is a key.
	type frame struct {
		keys    map[string]struct{}
		wantKey bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF // EOF before the top-level value closed
			}
			return fieldErr(FieldData, "must be valid JSON ("+syntaxReason(err, dec)+")")
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		d, isDelim := tok.(json.Delim)
		switch {
		case isDelim && (d == '}' || d == ']'):
			stack = stack[:len(stack)-1]
		case top != nil && top.keys != nil && top.wantKey:
			key, _ := tok.(string) // Token only yields strings in key position
			if _, dup := top.keys[key]; dup {
				return fieldErr(FieldData, "must not repeat an object key")
			}
			top.keys[key] = struct{}{}
			top.wantKey = false
		default:
			// A value (or the start of one): in an object, a key comes next.
			if top != nil && top.keys != nil {
				top.wantKey = true
			}
			if isDelim && d == '{' {
				stack = append(stack, &frame{keys: map[string]struct{}{}, wantKey: true})
			} else if isDelim && d == '[' {
				stack = append(stack, &frame{})
			}
		}
		if len(stack) == 0 {
			// The top-level value is complete; anything after it is junk.
			if _, err := dec.Token(); err != io.EOF {
				return fieldErr(FieldData, "must be a single JSON value")
			}
			return nil
		}
	}
}

// syntaxReason describes a decoding error by position only, so the reason never
// echoes publisher data.
func syntaxReason(err error, dec *json.Decoder) string {
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return "syntax error at offset " + strconv.FormatInt(se.Offset, 10)
	}
	if errors.Is(err, io.ErrUnexpectedEOF) {
		return "unexpected end of input"
	}
	return "syntax error at offset " + strconv.FormatInt(dec.InputOffset(), 10)
}

// payload is the thin body exactly as receivers see it. Field order is the
// key order on the wire; OwnerID is deliberately absent.
type payload struct {
	ID         string          `json:"id"`
	Type       string          `json:"type"`
	Subject    string          `json:"subject"`
	OccurredAt string          `json:"occurred_at"`
	Data       json.RawMessage `json:"data"`
}

// Payload returns the JSON body sent to receivers:
// {"id","type","subject","occurred_at","data"} in that order, with occurred_at
// in RFC 3339 (nanosecond precision, UTC) and data compacted. The same event
// always yields the same bytes, which matters because the body is signed and
// every retry must carry an identical, re-verifiable body.
//
// Payload only refuses what would make the body malformed (data that is not a
// JSON object); it does not re-apply Validate's limits, so an event stored
// under older limits can still be delivered.
func (e *Event) Payload() ([]byte, error) {
	if err := checkDataObject(e.Data); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	// HTML escaping would turn '&' in a subject into \u0026: valid JSON, but a
	// needless surprise for receivers reading the body by eye.
	enc.SetEscapeHTML(false)
	err := enc.Encode(payload{
		ID:         e.ID,
		Type:       e.Type,
		Subject:    e.Subject,
		OccurredAt: e.OccurredAt.UTC().Format(time.RFC3339Nano),
		Data:       e.Data,
	})
	if err != nil {
		return nil, fmt.Errorf("encode event payload: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
