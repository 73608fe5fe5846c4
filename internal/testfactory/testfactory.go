// Package testfactory inserts the rows tests need (events and endpoints) the
// way the dispatcher stores them, and reads back what it stored, so that each
// test states only what matters to it and the schema is written down once.
// Like River's testfactory, every insert takes an options struct whose zero
// value is a sensible row.
//
// It is for tests only (a depguard rule keeps it out of the binaries).
package testfactory

import (
	"context"
	"crypto/rand"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/seal"
)

// DBTX is a pool, a connection or a transaction whose search_path is a
// migrated dispatcher schema (internal/dbtest).
type DBTX interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// EventOpts describes an event row; zero fields take the defaults named.
type EventOpts struct {
	ID      string // default: a new UUID
	OwnerID string // default: "owner-1"
	Type    string // default: "code.issued"
	Subject string // default: "code://x"
	// Data is the JSON object as text. Default: {}.
	Data string
	// OccurredAt defaults to now; CreatedAt (when it was stored) too.
	OccurredAt *time.Time
	CreatedAt  *time.Time
	// Source is the events.source column. Default: "test".
	Source string
}

// Event inserts one event and returns its id.
func Event(ctx context.Context, tb testing.TB, db DBTX, opts *EventOpts) string {
	tb.Helper()
	return Events(ctx, tb, db, 1, opts)[0]
}

// Events inserts n events that differ only in their ids (new UUIDs; opts.ID
// is used for the first) and returns the ids in order.
func Events(ctx context.Context, tb testing.TB, db DBTX, n int, opts *EventOpts) []string {
	tb.Helper()
	if opts == nil {
		opts = &EventOpts{}
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = uuid.NewString()
	}
	if opts.ID != "" && n > 0 {
		ids[0] = opts.ID
	}
	_, err := db.Exec(ctx, `
		INSERT INTO events (id, owner_id, type, subject, occurred_at, data, source, created_at)
		SELECT id, $2, $3, $4, coalesce($5, now()), $6::jsonb, $7, coalesce($8, now())
		  FROM unnest($1::text[]) AS id`,
		ids, or(opts.OwnerID, "owner-1"), or(opts.Type, "code.issued"), or(opts.Subject, "code://x"),
		opts.OccurredAt, or(opts.Data, "{}"), or(opts.Source, "test"), opts.CreatedAt)
	require.NoError(tb, err, "testfactory: insert events")
	return ids
}

// EndpointOpts describes an endpoint row; zero fields take the defaults
// named.
type EndpointOpts struct {
	ID         *uuid.UUID // default: a new UUID
	OwnerID    string     // default: "owner-1"
	URL        string     // default: "https://receiver.example/hook"
	EventTypes []string   // default: {*}
	// SecretEnc is the sealed secret as stored. Default: one placeholder
	// byte, for tests that never sign.
	SecretEnc               []byte
	PreviousSecretEnc       []byte
	PreviousSecretExpiresAt *time.Time
	EmbedID                 *string
	// Disabled makes the endpoint disabled; the default is enabled.
	Disabled     bool
	FailingSince *time.Time
}

// Endpoint inserts one endpoint and returns its id.
func Endpoint(ctx context.Context, tb testing.TB, db DBTX, opts *EndpointOpts) uuid.UUID {
	tb.Helper()
	return Endpoints(ctx, tb, db, 1, opts)[0]
}

// Endpoints inserts n endpoints that differ only in their ids (new UUIDs;
// opts.ID is used for the first), in one statement, and returns the ids in
// order.
func Endpoints(ctx context.Context, tb testing.TB, db DBTX, n int, opts *EndpointOpts) []uuid.UUID {
	tb.Helper()
	if opts == nil {
		opts = &EndpointOpts{}
	}
	ids := make([]uuid.UUID, n)
	for i := range ids {
		ids[i] = uuid.New()
	}
	if opts.ID != nil && n > 0 {
		ids[0] = *opts.ID
	}
	globs := opts.EventTypes
	if globs == nil {
		globs = []string{"*"}
	}
	secret := opts.SecretEnc
	if secret == nil {
		secret = []byte{0}
	}
	_, err := db.Exec(ctx, `
		INSERT INTO webhook_endpoints (id, owner_id, url, event_types, secret_enc, previous_secret_enc,
		                               previous_secret_expires_at, embed_id, enabled, failing_since)
		SELECT id, $2, $3, $4, $5, $6, $7, $8, $9, $10 FROM unnest($1::uuid[]) AS id`,
		ids, or(opts.OwnerID, "owner-1"), or(opts.URL, "https://receiver.example/hook"), globs, secret,
		opts.PreviousSecretEnc, opts.PreviousSecretExpiresAt, opts.EmbedID, !opts.Disabled, opts.FailingSince)
	require.NoError(tb, err, "testfactory: insert endpoints")
	return ids
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Keyring returns a master keyring with one fresh random key under id, and
// that key.
func Keyring(tb testing.TB, id uint32) (*seal.Keyring, []byte) {
	tb.Helper()
	master := make([]byte, 32)
	_, err := rand.Read(master)
	require.NoError(tb, err)
	kr, err := seal.NewKeyring(id, map[uint32][]byte{id: master})
	require.NoError(tb, err)
	return kr, master
}

// StoredEvent is an events row as stored.
type StoredEvent struct {
	ID         string
	OwnerID    string
	Type       string
	Subject    string
	OccurredAt time.Time
	Data       string // as jsonb renders it
	Source     string
}

// ReadEvent returns the stored event id.
func ReadEvent(ctx context.Context, tb testing.TB, db DBTX, id string) StoredEvent {
	tb.Helper()
	var e StoredEvent
	require.NoError(tb, db.QueryRow(ctx,
		`SELECT id, owner_id, type, subject, occurred_at, data::text, source FROM events WHERE id = $1`, id).
		Scan(&e.ID, &e.OwnerID, &e.Type, &e.Subject, &e.OccurredAt, &e.Data, &e.Source), "testfactory: read event %s", id)
	return e
}

// CountEvents counts the stored events.
func CountEvents(ctx context.Context, tb testing.TB, db DBTX) int {
	tb.Helper()
	var n int
	require.NoError(tb, db.QueryRow(ctx, `SELECT count(*) FROM events`).Scan(&n))
	return n
}

// CountFanoutJobs counts webhook.fanout jobs for eventID, or all of them
// when eventID is empty.
func CountFanoutJobs(ctx context.Context, tb testing.TB, db DBTX, eventID string) int {
	tb.Helper()
	var n int
	require.NoError(tb, db.QueryRow(ctx, `
		SELECT count(*) FROM river_job
		WHERE kind = 'webhook.fanout' AND ($1 = '' OR args->>'event_id' = $1)`, eventID).Scan(&n))
	return n
}
