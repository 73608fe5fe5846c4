package ingest

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/database"
	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Bad input for the relay: malformed outbox rows. Each is set aside with its
// reason and never blocks the rows behind it.

// injections are hostile strings a form or a compromised publisher might
// send. Where they are refused, the refusal must not echo them; nowhere may
// they be executed.
var injections = []string{
	"'; DROP TABLE events; --",
	"<script>alert(1)</script>",
	"../../etc/passwd",
	"%00",
}

func TestRelayMalformedRows(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	db := dbtest.New(t)
	require.NoError(t, database.MigrateOutbox(ctx, db.Pool))
	store, m := newTestStore(t, db)

	type row struct {
		name       string
		eventID    string
		owner      string
		typ        string
		subject    string
		occurredAt string // a timestamptz literal
		data       string // a jsonb literal
		field      string // the field the error names; "" for a row that is relayed
	}
	okAt := testOccurredAt.Format(time.RFC3339Nano)
	good := func(name, id string) row {
		return row{name, id, "owner_1", event.TypeNoteChanged, "wiki://software/project/x", okAt, `{"op":"published","published":true}`, ""}
	}
	bad := func(name, field string, edit func(*row)) row {
		r := good(name, "evt_"+name)
		r.field = field
		edit(&r)
		return r
	}
	rows := []row{
		good("First", "evt_good_1"),
		bad("DataArray", "event.data", func(r *row) { r.data = `[1, 2]` }),
		bad("DataString", "event.data", func(r *row) { r.data = `"published"` }),
		bad("DataNumber", "event.data", func(r *row) { r.data = `42` }),
		bad("DataNull", "event.data", func(r *row) { r.data = `null` }),
		bad("DataBool", "event.data", func(r *row) { r.data = `true` }),
		bad("DataTooLarge", "event.data", func(r *row) { r.data = `{"k":"` + strings.Repeat("a", webhook.MaxDataBytes) + `"}` }),
		// Valid JSON that breaks the type's schema: named by its JSON path.
		bad("DataMissingRequired", "event.data.op", func(r *row) { r.data = `{"published":true}` }),
		bad("DataWrongType", "event.data.published", func(r *row) { r.data = `{"op":"updated","published":"yes"}` }),
		bad("DataUnknownProperty", "event.data.body", func(r *row) { r.data = `{"op":"updated","body":"` + injections[1] + `"}` }),
		bad("DataNotInEnum", "event.data.op", func(r *row) { r.data = `{"op":"` + injections[0] + `"}` }),
		good("Second", "evt_good_2"),
		bad("TypeEmpty", "event.type", func(r *row) { r.typ = "" }),
		bad("TypeUpperCase", "event.type", func(r *row) { r.typ = "Corpus.Note.Changed" }),
		bad("TypeOneSegment", "event.type", func(r *row) { r.typ = "corpus" }),
		bad("TypeTooLong", "event.type", func(r *row) { r.typ = "a." + strings.Repeat("b", webhook.MaxTypeLen) }),
		bad("TypeSQLInjection", "event.type", func(r *row) { r.typ = injections[0] }),
		// Only the dispatcher emits operational events; a main app cannot forge one.
		bad("TypeOperational", "event.type", func(r *row) {
			r.typ, r.data = event.TypeEndpointDisabled, string(event.Example(event.TypeEndpointDisabled))
		}),
		bad("IDEmpty", "event.id", func(r *row) { r.eventID = "" }),
		bad("IDWithDot", "event.id", func(r *row) { r.eventID = "evt.dot" }),
		bad("IDSQLInjection", "event.id", func(r *row) { r.eventID = injections[0] }),
		bad("IDPathTraversal", "event.id", func(r *row) { r.eventID = injections[2] }),
		bad("IDTooLong", "event.id", func(r *row) { r.eventID = strings.Repeat("i", webhook.MaxIDLen+1) }),
		good("Third", "evt_good_3"),
		bad("OwnerEmpty", "event.owner_id", func(r *row) { r.owner = "" }),
		bad("OwnerWithSpace", "event.owner_id", func(r *row) { r.owner = "owner 1" }),
		bad("OwnerNonASCII", "event.owner_id", func(r *row) { r.owner = "ownér" }),
		bad("SubjectEmpty", "event.subject", func(r *row) { r.subject = "" }),
		bad("SubjectNoScheme", "event.subject", func(r *row) { r.subject = injections[2] }),
		bad("SubjectControl", "event.subject", func(r *row) { r.subject = "wiki://a\x01b" }),
		bad("SubjectScript", "event.subject", func(r *row) { r.subject = injections[1] }),
		bad("SubjectTooLong", "event.subject", func(r *row) { r.subject = "wiki://" + strings.Repeat("s", webhook.MaxSubjectLen) }),
		bad("OccurredAtFuture", "event.occurred_at", func(r *row) { r.occurredAt = time.Now().Add(3 * time.Hour).Format(time.RFC3339Nano) }),
		bad("OccurredAtYear294276", "event.occurred_at", func(r *row) { r.occurredAt = "294276-12-31 23:59:59+00" }),
		bad("OccurredAtEpoch", "event.occurred_at", func(r *row) { r.occurredAt = "1970-01-01 00:00:00+00" }),
		// Postgres' infinities have no time.Time: the row must be set aside,
		// not fail the claim query and so every batch behind it.
		bad("OccurredAtInfinity", "event.occurred_at", func(r *row) { r.occurredAt = "infinity" }),
		bad("OccurredAtMinusInfinity", "event.occurred_at", func(r *row) { r.occurredAt = "-infinity" }),
		// Valid, but never delivered: relayed and counted, not set aside.
		func() row { r := good("RawSubject", "evt_raw"); r.subject = "raw://diary/secret"; return r }(),
		func() row { r := good("UnknownType", "evt_internal"); r.typ = "billing.invoice.computed"; return r }(),
		good("Last", "evt_good_4"),
	}

	for _, r := range rows {
		_, err := db.Pool.Exec(ctx, `
			INSERT INTO webhook_outbox (event_id, owner_id, type, subject, occurred_at, data)
			VALUES ($1, $2, $3, $4, $5::timestamptz, $6::jsonb)`,
			r.eventID, r.owner, r.typ, r.subject, r.occurredAt, r.data)
		require.NoError(t, err, r.name)
	}

	// Small batches: bad rows fill whole batches and must not hold back the
	// good ones behind them.
	relay := NewRelay(RelayConfig{BatchSize: 3}, db.Pool, store, m, testLogger())
	drainRelay := func() {
		for range 100 {
			n, err := relay.relayBatch(ctx)
			require.NoError(t, err)
			if n < relay.cfg.BatchSize {
				return
			}
		}
		require.FailNow(t, "outbox did not drain in 100 batches")
	}
	drainRelay()

	type state struct {
		relayed bool
		err     *string
	}
	read := func() map[string]state {
		got := map[string]state{}
		dbRows, err := db.Pool.Query(ctx, `SELECT event_id, relayed_at IS NOT NULL, error FROM webhook_outbox ORDER BY id`)
		require.NoError(t, err)
		defer dbRows.Close()
		for dbRows.Next() {
			var id string
			var s state
			require.NoError(t, dbRows.Scan(&id, &s.relayed, &s.err))
			got[id] = s
		}
		require.NoError(t, dbRows.Err())
		return got
	}

	states := read()
	nBad := 0
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			t.Parallel()
			s, ok := states[r.eventID]
			require.True(t, ok)
			if r.field == "" {
				require.True(t, s.relayed)
				require.Nil(t, s.err)
				return
			}
			require.False(t, s.relayed, "set aside, not relayed")
			require.NotNil(t, s.err, "set aside with its error")
			t.Logf("%s: %s", r.name, *s.err)
			require.Contains(t, *s.err, r.field)
			for _, inj := range injections {
				require.NotContains(t, *s.err, inj, "the error never echoes the value")
			}
			var stored int
			require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM events WHERE id = $1`, r.eventID).Scan(&stored))
			require.Zero(t, stored)
		})
		if r.field != "" {
			nBad++
		}
	}

	require.Equal(t, 4, countEvents(t, db), "the good rows, and only they, are stored")
	require.Equal(t, 4, countFanoutJobs(t, db, ""))
	require.InDelta(t, nBad, testutil.ToFloat64(m.RelayPoisonedTotal), 0)
	require.Equal(t, nBad, ingestCount(m, SourceOutbox, resultInvalid))
	require.Equal(t, 4, ingestCount(m, SourceOutbox, OutcomeStored.String()))
	require.Equal(t, 1, ingestCount(m, SourceOutbox, OutcomeDroppedRaw.String()))
	require.Equal(t, 1, ingestCount(m, SourceOutbox, OutcomeDroppedUnknown.String()))

	// Set aside for good, and a good row written later is still relayed.
	_, err := db.Pool.Exec(ctx, `
		INSERT INTO webhook_outbox (event_id, owner_id, type, subject, occurred_at, data)
		VALUES ('evt_good_later', 'owner_1', $1, 'wiki://later', $2, '{"op":"created"}')`, event.TypeNoteChanged, testOccurredAt)
	require.NoError(t, err)
	drainRelay()
	require.True(t, read()["evt_good_later"].relayed)
	require.Equal(t, 5, countEvents(t, db))
	require.InDelta(t, nBad, testutil.ToFloat64(m.RelayPoisonedTotal), 0, "nothing set aside twice")
}
