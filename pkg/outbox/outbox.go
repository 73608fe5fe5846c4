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
// Write takes a pgx transaction (or anything with pgx's Exec); WriteSQL takes
// a database/sql one (*sql.Tx, sqlx, or GORM's tx.Statement.ConnPool), for an
// application on another Postgres driver.
//
// # Validation
//
// Write checks the event up front, with the same rules the dispatcher applies
// (pkg/catalog's Catalog.Validate: one implementation for both sides), so that
// a mistake fails the caller's transaction with an error naming the field
// instead of surfacing later as a row the relay sets aside:
//
//   - ID: a UUID or an opaque id of 1–128 characters [A-Za-z0-9_-]. It is the
//     webhook-id receivers deduplicate on, so reuse it only for the same event.
//   - OwnerID: 1–128 printable ASCII characters, no spaces.
//   - Type: dotted lower-case segments such as "corpus.note.changed", at most
//     128 bytes. Types outside the dispatcher's catalog are Internal: never
//     delivered. They are refused, with a "did you mean", when WithCatalog
//     gives the dispatcher's catalog (AllowUnknownTypes writes them anyway),
//     and accepted otherwise.
//   - Subject: a URI with a scheme ("wiki://software/project/x"), at most 1024
//     bytes of valid UTF-8 without control characters. raw:// subjects are
//     accepted but never leave the instance.
//   - OccurredAt: not before 2000-01-01 and at most an hour ahead of the
//     clock; the zero time means "now" (the database's clock).
//   - Data: a JSON object of at most 4096 bytes in compact form, without
//     repeated keys, that its type's JSON Schema accepts (the error names the
//     JSON path: "data.op"). The catalog is the dispatcher's default one
//     unless WithCatalog gives the one the dispatcher runs with (-catalog):
//     load it with catalog.Load, or embed its files.
//   - Type may not be one of the dispatcher's own operational types.
package outbox

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Limits, the dispatcher's own (pkg/webhook).
const (
	MaxIDLen      = webhook.MaxIDLen
	MaxOwnerIDLen = webhook.MaxOwnerIDLen
	MaxTypeLen    = webhook.MaxTypeLen
	MaxSubjectLen = webhook.MaxSubjectLen
	MaxDataBytes  = webhook.MaxDataBytes
	MaxFutureSkew = webhook.MaxFutureSkew
)

// DefaultTable is the outbox table of the contract DDL.
const DefaultTable = "webhook_outbox"

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
var ErrInvalid = webhook.ErrInvalidEvent

// FieldError names the first field of an Event that breaks a rule: "id",
// "owner_id", "type", "subject", "occurred_at" or "data". Reason never echoes
// the value.
type FieldError = webhook.FieldError

// Option configures Write.
type Option func(*options)

type options struct {
	table     string
	catalog   *catalog.Catalog
	noCatalog bool
	// strictTypes: a catalog was given (WithCatalog), so a type in no
	// catalog is a mistake, unless AllowUnknownTypes.
	strictTypes  bool
	allowUnknown bool
}

// Table sets the outbox table, optionally schema-qualified ("app.webhook_outbox").
// The default is DefaultTable.
func Table(name string) Option {
	return func(o *options) { o.table = name }
}

// WithCatalog checks events against c, the catalog the dispatcher runs with,
// instead of the default one. Given the dispatcher's catalog, an event whose
// type is in none of it is refused before it is written (a *FieldError
// naming type, with the nearest type: "did you mean \"booking.created\"?"):
// the dispatcher would drop it, never delivered, so it is most often a
// misspelling. AllowUnknownTypes writes such events all the same. nil checks
// only the thin-event rules, no schema: for a main app that cannot know the
// dispatcher's catalog.
func WithCatalog(c *catalog.Catalog) Option {
	return func(o *options) { o.catalog = c; o.noCatalog = c == nil; o.strictTypes = c != nil }
}

// AllowUnknownTypes lets events of types in no catalog through the
// WithCatalog check, for an application that writes types it has not
// declared on purpose to a dispatcher running with -unknown-types=accept,
// which drops them as Internal (by default a dispatcher refuses them, setting the outbox row aside).
// Declaring them "internal" in the catalog drops them either way and keeps
// the check.
func AllowUnknownTypes() Option { return func(o *options) { o.allowUnknown = true } }

var tableNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$`)

// QuoteTable checks name as Table does (a table name, optionally
// schema-qualified, of letters, digits and underscores) and returns it
// quoted, ready to splice into SQL. The dispatcher's relay reads the table by
// the same rule, so whatever name the writer accepts, the relay does too.
func QuoteTable(name string) (string, error) {
	if !tableNameRE.MatchString(name) {
		return "", fmt.Errorf("invalid table name %q: must be [schema.]name of letters, digits and underscores", name)
	}
	return pgx.Identifier(strings.Split(name, ".")).Sanitize(), nil
}

// Write validates e and inserts it into the outbox through q, which should be
// the transaction that makes the change e describes: the row then commits or
// rolls back with it. A *FieldError reports invalid input; nothing is written.
func Write(ctx context.Context, q Querier, e Event, opts ...Option) error {
	ins, err := prepare(e, opts)
	if err != nil {
		return err
	}
	if _, err := q.Exec(ctx, ins.sql, ins.args...); err != nil {
		return fmt.Errorf("outbox: insert event %q: %w", e.ID, err)
	}
	return nil
}

// SQLExecer is what WriteSQL needs: *sql.Tx satisfies it, and so do *sql.DB
// and *sql.Conn (but those write outside any transaction of yours), sqlx's
// Tx, and GORM's tx.Statement.ConnPool inside a GORM transaction.
type SQLExecer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// WriteSQL is Write for database/sql: it validates e and inserts it through
// tx, the database/sql transaction that makes the change e describes, with
// any Postgres driver (pgx's stdlib, lib/pq). The rules and errors are
// Write's.
func WriteSQL(ctx context.Context, tx SQLExecer, e Event, opts ...Option) error {
	ins, err := prepare(e, opts)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, ins.sql, ins.args...); err != nil {
		return fmt.Errorf("outbox: insert event %q: %w", e.ID, err)
	}
	return nil
}

// insert is one validated event's statement.
type insert struct {
	sql  string
	args []any
}

// prepare validates e and builds its insert: everything Write and WriteSQL
// share, so the two cannot drift.
func prepare(e Event, opts []Option) (*insert, error) {
	o := options{table: DefaultTable}
	for _, opt := range opts {
		opt(&o)
	}
	table, err := QuoteTable(o.table)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	cat := o.catalog
	if cat == nil && !o.noCatalog {
		cat = catalog.Default()
	}
	data, err := validate(&e, cat, time.Now())
	if err == nil && o.strictTypes && !o.allowUnknown {
		err = cat.RequireKnown(e.Type)
	}
	if err != nil {
		return nil, err
	}
	// NULL lets the database pick now() for a zero OccurredAt, so "now" is one
	// clock: the one created_at uses.
	var occurredAt *time.Time
	if !e.OccurredAt.IsZero() {
		occurredAt = &e.OccurredAt
	}
	return &insert{
		sql: `INSERT INTO ` + table + ` (event_id, owner_id, type, subject, occurred_at, data)
		VALUES ($1, $2, $3, $4, coalesce($5::timestamptz, now()), $6::jsonb)`,
		args: []any{e.ID, e.OwnerID, e.Type, e.Subject, occurredAt, string(data)},
	}, nil
}

// validate checks e (with cat, unless nil) and returns its data as compact
// JSON. The checks are the dispatcher's; what is added here is only what
// Write does differently: data may be any value to marshal, and a zero
// OccurredAt means "now".
func validate(e *Event, cat *catalog.Catalog, now time.Time) ([]byte, error) {
	data, dataErr := marshalData(e.Data)
	ev := webhook.Event{ID: e.ID, OwnerID: e.OwnerID, Type: e.Type, Subject: e.Subject, OccurredAt: e.OccurredAt, Data: data}
	if ev.OccurredAt.IsZero() {
		ev.OccurredAt = now
	}
	if dataErr != nil {
		// Reported after the other fields, in the order Validate checks them.
		ev.Data = json.RawMessage("{}")
	}
	if err := ev.Validate(now); err != nil {
		return nil, err
	}
	if dataErr != nil {
		return nil, dataErr
	}
	if cat != nil {
		if err := cat.Validate(&ev, now); err != nil {
			return nil, err
		}
	}
	return data, nil
}

// marshalData turns Event.Data into compact JSON text. Size and shape are
// Validate's business; compacting first means the limit applies to what the
// publisher wrote, not to whitespace (and jsonb renders with spaces the relay
// compacts away again).
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
			return nil, &FieldError{Field: webhook.FieldData, Reason: "must marshal to JSON: " + err.Error()}
		}
		raw = b
	}
	if !json.Valid(raw) {
		// Not JSON at all: Validate says why, by position.
		return raw, nil
	}
	var buf bytes.Buffer
	_ = json.Compact(&buf, raw) // cannot fail on valid JSON
	return buf.Bytes(), nil
}
