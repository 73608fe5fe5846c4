// Package testfactory inserts the rows tests need (events and endpoints) the
// way the dispatcher stores them, and reads back what it stored, so that each
// test states only what matters to it and the schema is written down once.
// Like River's testfactory, every insert takes an options struct whose zero
// value is a sensible row.
//
// It is for tests only (a depguard rule keeps it out of the binaries).
package testfactory

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	rivertestfactory "github.com/riverqueue/river/rivershared/testfactory"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/job"
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
	// Filter is the endpoint's filter as stored (canonical JSON); "" for
	// none. Stored as given, unchecked.
	Filter string
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
		                               previous_secret_expires_at, embed_id, enabled, failing_since, filter)
		SELECT id, $2, $3, $4, $5, $6, $7, $8, $9, $10, nullif($11, '') FROM unnest($1::uuid[]) AS id`,
		ids, or(opts.OwnerID, "owner-1"), or(opts.URL, "https://receiver.example/hook"), globs, secret,
		opts.PreviousSecretEnc, opts.PreviousSecretExpiresAt, opts.EmbedID, !opts.Disabled, opts.FailingSince, opts.Filter)
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

// JobOpts describes a River job row in any state, as River's own test
// factory writes it (rivershared/testfactory); zero fields take River's
// defaults (available, no attempt yet), except those named.
type JobOpts struct {
	Kind string // default: webhook.deliver
	// Args are encoded as the job's JSON args. Default: {}.
	Args        any
	State       rivertype.JobState
	Attempt     int
	MaxAttempts int    // default: job.DeliverMaxAttempts
	Queue       string // default: the first delivery partition's
	// Errors are the texts of the attempts' errors, the first attempt's
	// first, recorded at now.
	Errors []string
	// AttemptedBy names the clients that fetched it, the last one last.
	AttemptedBy []string
	// AttemptedAt defaults to now for a state an attempt leaves (running,
	// retryable, completed, discarded).
	AttemptedAt *time.Time
	// CreatedAt and ScheduledAt default to now.
	CreatedAt   *time.Time
	ScheduledAt *time.Time
	// FinalizedAt defaults to now for a finished state.
	FinalizedAt *time.Time
	Metadata    []byte
}

// Job inserts one River job row through River's driver and returns it.
// Tests that need a job River's client would insert (available, or
// scheduled) use an insert-only river.Client instead; this is for rows in
// the states only River's workers and maintenance reach.
func Job(ctx context.Context, tb testing.TB, db DBTX, opts *JobOpts) *rivertype.JobRow {
	tb.Helper()
	return rivertestfactory.Job(ctx, tb, executor(tb, db), riverJobOpts(tb, opts))
}

// executor is River's driver on db: a pool, or a transaction (dbtest.TestTx).
func executor(tb testing.TB, db DBTX) riverdriver.Executor {
	tb.Helper()
	if tx, ok := db.(pgx.Tx); ok {
		return riverpgxv5.New(nil).UnwrapExecutor(tx)
	}
	if pool, ok := db.(*pgxpool.Pool); ok {
		return riverpgxv5.New(pool).GetExecutor()
	}
	tb.Fatalf("testfactory: River's driver takes a *pgxpool.Pool or a pgx.Tx, not %T", db)
	return nil
}

func riverJobOpts(tb testing.TB, opts *JobOpts) *rivertestfactory.JobOpts {
	tb.Helper()
	if opts == nil {
		opts = &JobOpts{}
	}
	var args []byte
	if opts.Args != nil {
		var err error
		args, err = json.Marshal(opts.Args)
		require.NoError(tb, err, "testfactory: encode job args")
	}
	var errs [][]byte
	for i, e := range opts.Errors {
		b, err := json.Marshal(rivertype.AttemptError{At: time.Now(), Attempt: i + 1, Error: e})
		require.NoError(tb, err, "testfactory: encode job error")
		errs = append(errs, b)
	}
	row := &rivertestfactory.JobOpts{
		Kind:        new(or(opts.Kind, job.KindDeliver)),
		EncodedArgs: args,
		Attempt:     &opts.Attempt,
		MaxAttempts: new(cmp.Or(opts.MaxAttempts, job.DeliverMaxAttempts)),
		Queue:       new(or(opts.Queue, job.DeliverPartitionQueue(0))),
		Errors:      errs,
		AttemptedBy: opts.AttemptedBy,
		AttemptedAt: opts.AttemptedAt,
		CreatedAt:   opts.CreatedAt,
		ScheduledAt: opts.ScheduledAt,
		FinalizedAt: opts.FinalizedAt,
		Metadata:    opts.Metadata,
	}
	if opts.State != "" {
		row.State = &opts.State
	}
	return row
}

// UpdateJob moves an existing job row to what opts describes, as River's
// workers' attempts would leave it (through River's driver, as River's own
// tests do): its state, attempt and errors, attempted_at and finalized_at
// with Job's defaults for the state, and Metadata and MaxAttempts when set.
// Its kind, args, queue, created_at and scheduled_at stay.
func UpdateJob(ctx context.Context, tb testing.TB, db DBTX, id int64, opts *JobOpts) *rivertype.JobRow {
	tb.Helper()
	if opts == nil {
		opts = &JobOpts{}
	}
	row := rivertestfactory.Job_Build(tb, riverJobOpts(tb, opts))
	job, err := executor(tb, db).JobUpdateFull(ctx, &riverdriver.JobUpdateFullParams{
		ID:                  id,
		StateDoUpdate:       true,
		State:               row.State,
		AttemptDoUpdate:     true,
		Attempt:             row.Attempt,
		AttemptedAtDoUpdate: true,
		AttemptedAt:         row.AttemptedAt,
		FinalizedAtDoUpdate: true,
		FinalizedAt:         row.FinalizedAt,
		ErrorsDoUpdate:      true,
		Errors:              row.Errors,
		MetadataDoUpdate:    opts.Metadata != nil,
		Metadata:            opts.Metadata,
		MaxAttemptsDoUpdate: opts.MaxAttempts != 0,
		MaxAttempts:         opts.MaxAttempts,
	})
	require.NoError(tb, err, "testfactory: update job %d", id)
	return job
}

// FetchJobs fetches up to n available jobs of queue as a River client named
// clientID does when it starts working them (River's own fetch, through its
// driver: running, the attempt counted, the client appended to attempted_by),
// in River's order, and returns them.
func FetchJobs(ctx context.Context, tb testing.TB, db DBTX, queue, clientID string, n int) []*rivertype.JobRow {
	tb.Helper()
	res, err := executor(tb, db).JobGetAvailable(ctx, &riverdriver.JobGetAvailableParams{
		ClientID:       clientID,
		MaxAttemptedBy: 100, // as River's producer
		MaxToLock:      n,
		Queue:          queue,
	})
	require.NoError(tb, err, "testfactory: fetch jobs")
	require.Empty(tb, res.DecodeErrors, "testfactory: fetch jobs")
	return res.Jobs
}
