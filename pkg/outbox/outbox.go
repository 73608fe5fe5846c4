// Package outbox is the main application's side of the dispatcher's
// transactional outbox: Write inserts one event into the webhook_outbox table
// inside the caller's own transaction, so the event exists if and only if the
// change it describes was committed. The dispatcher's relay then copies the row
// into the dispatcher and delivers it to the owner's endpoints.
//
// The table is created by the contract DDL the dispatcher ships
// (migrations/outbox/001_outbox.up.sql in this module), which the main
// application applies to its own database.
//
// # Validation
//
// Write checks the event up front so that a mistake fails the caller's
// transaction with an error naming the field, instead of surfacing later as a
// row the relay sets aside. The rules duplicate the dispatcher's (this package
// must not import the dispatcher's internals), and the dispatcher re-validates
// every row it relays, so the dispatcher remains the authority:
//
//   - ID: a UUID or an opaque id of 1–128 characters [A-Za-z0-9_-]. It is the
//     webhook-id receivers deduplicate on, so reuse it only for the same event.
//   - OwnerID: 1–128 printable ASCII characters, no spaces.
//   - Type: dotted lower-case segments such as "corpus.note.changed", at most
//     128 bytes. Types outside the dispatcher's catalog are accepted but are
//     Internal: they are never delivered.
//   - Subject: a URI with a scheme ("wiki://software/project/x"), at most 1024
//     bytes of valid UTF-8 without control characters. raw:// subjects are
//     accepted but never leave the instance.
//   - OccurredAt: not before 2000-01-01 and at most an hour ahead of the
//     clock; the zero time means "now" (the database's clock).
//   - Data: a JSON object of at most 4096 bytes in compact form, without
//     repeated keys.
package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Limits, the same as the dispatcher's.
const (
	MaxIDLen      = 128
	MaxOwnerIDLen = 128
	MaxTypeLen    = 128
	MaxSubjectLen = 1024
	MaxDataBytes  = 4096
	MaxFutureSkew = time.Hour
)

// DefaultTable is the outbox table of the contract DDL.
const DefaultTable = "webhook_outbox"

var minOccurredAt = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Querier is what Write needs: pgx.Tx satisfies it, and so do *pgx.Conn and
// *pgxpool.Pool (but those write outside any transaction of yours).
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Event is one thin event: what happened (Type), to what (Subject), when, and
// a small Data object. Never put a document body in it: receivers call the
// application's API back for content.
type Event struct {
	// ID is unique per event.
	ID string
	// OwnerID is the owner whose endpoints may receive the event.
	OwnerID string
	// Type is the event type, e.g. "corpus.note.changed".
	Type string
	// Subject is what the event is about, e.g. "wiki://software/project/x".
	Subject string
	// OccurredAt is when it happened; the zero time means now.
	OccurredAt time.Time
	// Data is marshalled with encoding/json and must yield a JSON object; a
	// json.RawMessage (or []byte) is taken as JSON text verbatim. nil means {}.
	Data any
}

// ErrInvalid is matched (errors.Is) by every *FieldError.
var ErrInvalid = errors.New("outbox: invalid event")

// FieldError names the first field of an Event that breaks a rule. Reason
// never echoes the value.
type FieldError struct {
	Field  string // "id", "owner_id", "type", "subject", "occurred_at" or "data"
	Reason string
}

func (e *FieldError) Error() string { return "outbox: invalid event." + e.Field + ": " + e.Reason }

// Unwrap lets errors.Is(err, ErrInvalid) match.
func (e *FieldError) Unwrap() error { return ErrInvalid }

// Option configures Write.
type Option func(*options)

type options struct {
	table string
}

// Table sets the outbox table, optionally schema-qualified ("app.webhook_outbox").
// The default is DefaultTable.
func Table(name string) Option {
	return func(o *options) { o.table = name }
}

var tableNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// Write validates e and inserts it into the outbox through q, which should be
// the transaction that makes the change e describes: the row then commits or
// rolls back with it. A *FieldError reports invalid input; nothing is written.
func Write(ctx context.Context, q Querier, e Event, opts ...Option) error {
	o := options{table: DefaultTable}
	for _, opt := range opts {
		opt(&o)
	}
	if !tableNameRE.MatchString(o.table) {
		return fmt.Errorf("outbox: invalid table name %q", o.table)
	}
	data, err := validate(&e, time.Now())
	if err != nil {
		return err
	}
	// NULL lets the database pick now() for a zero OccurredAt, so "now" is one
	// clock: the one created_at uses.
	var occurredAt *time.Time
	if !e.OccurredAt.IsZero() {
		occurredAt = &e.OccurredAt
	}
	table := pgx.Identifier(strings.Split(o.table, ".")).Sanitize()
	_, err = q.Exec(ctx, `
		INSERT INTO `+table+` (event_id, owner_id, type, subject, occurred_at, data)
		VALUES ($1, $2, $3, $4, coalesce($5::timestamptz, now()), $6::jsonb)`,
		e.ID, e.OwnerID, e.Type, e.Subject, occurredAt, string(data))
	if err != nil {
		return fmt.Errorf("outbox: insert event %q: %w", e.ID, err)
	}
	return nil
}

// validate checks e and returns its data as compact JSON.
func validate(e *Event, now time.Time) ([]byte, error) {
	if err := validateID(e.ID); err != nil {
		return nil, err
	}
	if err := validateOwnerID(e.OwnerID); err != nil {
		return nil, err
	}
	if err := validateType(e.Type); err != nil {
		return nil, err
	}
	if err := validateSubject(e.Subject); err != nil {
		return nil, err
	}
	if !e.OccurredAt.IsZero() {
		if e.OccurredAt.Before(minOccurredAt) {
			return nil, fieldErr("occurred_at", "must not be before 2000-01-01T00:00:00Z")
		}
		if e.OccurredAt.After(now.Add(MaxFutureSkew)) {
			return nil, fieldErr("occurred_at", "must not be more than "+MaxFutureSkew.String()+" in the future")
		}
	}
	return marshalData(e.Data)
}

func fieldErr(field, reason string) *FieldError { return &FieldError{Field: field, Reason: reason} }

func validateID(id string) error {
	if id == "" {
		return fieldErr("id", "must not be empty")
	}
	if len(id) > MaxIDLen {
		return fieldErr("id", "must be at most "+strconv.Itoa(MaxIDLen)+" characters")
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			// No '.': Standard Webhooks signs "<id>.<timestamp>.<body>".
			return fieldErr("id", "must be a UUID or an opaque id of characters [A-Za-z0-9_-]")
		}
	}
	return nil
}

func validateOwnerID(owner string) error {
	if owner == "" {
		return fieldErr("owner_id", "must not be empty")
	}
	if len(owner) > MaxOwnerIDLen {
		return fieldErr("owner_id", "must be at most "+strconv.Itoa(MaxOwnerIDLen)+" characters")
	}
	for i := 0; i < len(owner); i++ {
		if c := owner[i]; c <= ' ' || c > '~' {
			return fieldErr("owner_id", "must be printable ASCII without spaces")
		}
	}
	return nil
}

var typeRE = regexp.MustCompile(`^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)+$`)

func validateType(typ string) error {
	if typ == "" {
		return fieldErr("type", "must not be empty")
	}
	if len(typ) > MaxTypeLen {
		return fieldErr("type", "must be at most "+strconv.Itoa(MaxTypeLen)+" bytes")
	}
	if !typeRE.MatchString(typ) {
		return fieldErr("type", `must be dotted lower-case segments like "corpus.note.changed"`)
	}
	return nil
}

var schemeRE = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*://.`)

func validateSubject(subject string) error {
	if subject == "" {
		return fieldErr("subject", "must not be empty")
	}
	if len(subject) > MaxSubjectLen {
		return fieldErr("subject", "must be at most "+strconv.Itoa(MaxSubjectLen)+" bytes")
	}
	if !utf8.ValidString(subject) {
		return fieldErr("subject", "must be valid UTF-8")
	}
	for _, r := range subject {
		if unicode.IsControl(r) {
			return fieldErr("subject", "must not contain control characters")
		}
	}
	if !schemeRE.MatchString(subject) {
		return fieldErr("subject", `must be a URI with a scheme, like "wiki://path"`)
	}
	return nil
}

func marshalData(v any) ([]byte, error) {
	var raw []byte
	switch d := v.(type) {
	case nil:
		return []byte("{}"), nil
	case json.RawMessage:
		raw = d
	case []byte:
		raw = d
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fieldErr("data", "must marshal to JSON: "+err.Error())
		}
		raw = b
	}
	if !utf8.Valid(raw) {
		return nil, fieldErr("data", "must be valid UTF-8")
	}
	if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return nil, fieldErr("data", "must be a JSON object")
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return nil, fieldErr("data", "must be valid JSON")
	}
	// Measured compact because that is how the relay measures it: Postgres
	// stores jsonb and renders it with spaces the publisher never wrote.
	if buf.Len() > MaxDataBytes {
		return nil, fieldErr("data", "must be at most "+strconv.Itoa(MaxDataBytes)+" bytes of compact JSON")
	}
	if err := checkObject(buf.Bytes()); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// checkObject rejects a repeated key in any object: jsonb would silently keep
// the last one, which may not be the one the caller meant.
func checkObject(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type frame struct {
		keys    map[string]bool // nil for arrays
		wantKey bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fieldErr("data", "must be valid JSON")
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
			key, _ := tok.(string)
			if top.keys[key] {
				return fieldErr("data", "must not repeat an object key")
			}
			top.keys[key] = true
			top.wantKey = false
		default:
			if top != nil && top.keys != nil {
				top.wantKey = true
			}
			if isDelim && d == '{' {
				stack = append(stack, &frame{keys: map[string]bool{}, wantKey: true})
			} else if isDelim && d == '[' {
				stack = append(stack, &frame{})
			}
		}
	}
}
