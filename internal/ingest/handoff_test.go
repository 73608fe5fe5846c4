package ingest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/decision"
	"github.com/standmeet/webhook-dispatcher/internal/fanout"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/scope"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// committedHandoff accepts every delivery and records, for each it is asked
// to start, whether another connection already sees its job: whether it was
// started only after its transaction committed.
type committedHandoff struct {
	db *dbtest.DB

	mu          sync.Mutex
	started     int
	uncommitted int
	mismatched  int
	events      []*webhook.Event
	// givenBack: the jobs given back after a failed commit (GiveBack).
	givenBack []int64
}

func (h *committedHandoff) GiveBack(jobs []*rivertype.JobRow) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, j := range jobs {
		h.givenBack = append(h.givenBack, j.ID)
	}
}

func (h *committedHandoff) Hold() time.Duration                                        { return time.Hour }
func (h *committedHandoff) Member() string                                             { return "test-member" }
func (h *committedHandoff) Accepts(string, string, *webhook.Event, int, int, int) bool { return true }
func (h *committedHandoff) Start(jobs []*rivertype.JobRow, args []job.DeliverArgs, events []*webhook.Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, j := range jobs {
		if events[i] == nil || !strings.Contains(string(j.EncodedArgs), events[i].ID) {
			h.uncommitted++ // and without its event
		}
		var stored job.DeliverArgs
		if err := json.Unmarshal(j.EncodedArgs, &stored); err != nil || args[i] != stored {
			h.mismatched++ // the arguments handed over are not the row's
		}
		var n int
		if err := h.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE id = $1`, j.ID).Scan(&n); err != nil || n != 1 {
			h.uncommitted++
		}
		h.started++
	}
	h.events = append(h.events, events...)
}

func TestStoreHandoff(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) (*Store, *committedHandoff, *dbtest.DB) {
		t.Helper()
		db := dbtest.New(t)
		client, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Logger: testLogger(), Schema: db.Schema})
		require.NoError(t, err)
		m := metrics.New(prometheus.NewRegistry(), metrics.Labels{})
		h := &committedHandoff{db: db}
		inline := fanout.NewInline(scope.NewDecider(nil, m, testLogger()).Func(), nil, m).WithHandoff(h)
		for i := range 3 {
			testfactory.Endpoint(context.Background(), t, db.Pool, &testfactory.EndpointOpts{OwnerID: "owner_1", URL: fmt.Sprintf("https://r%d.example.com/", i)})
		}
		return NewStore(StoreConfig{Fanout: inline}, db.Pool, client, m, testLogger()), h, db
	}

	t.Run("StartsDeliveriesOnlyOnceCommitted", func(t *testing.T) {
		t.Parallel()
		store, h, _ := setup(t)
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				_, err := store.Ingest(context.Background(), SourceTest, []*webhook.Event{testEvent(fmt.Sprintf("evt_%d", i))})
				require.NoError(t, err)
			})
		}
		wg.Wait()
		h.mu.Lock()
		defer h.mu.Unlock()
		require.Equal(t, 8*3, h.started, "every delivery of every event, once")
		require.Zero(t, h.uncommitted, "never before its transaction committed")
		require.Zero(t, h.mismatched, "each with its own job's arguments")
	})

	t.Run("GivesBackWhatAFailedCommitHandedOff", func(t *testing.T) {
		t.Parallel()
		store, h, db := setup(t)
		// The commit fails (a deferred trigger refuses it), as a commit
		// whose connection is cut does; whether such a one committed is
		// not known, so its deliveries are given back, never started.
		_, err := db.Pool.Exec(context.Background(), `
CREATE FUNCTION refuse_commit() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'commit refused'; END $$;
CREATE CONSTRAINT TRIGGER refuse_commit AFTER INSERT ON events DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION refuse_commit()`)
		require.NoError(t, err)
		_, err = store.Ingest(context.Background(), SourceTest, []*webhook.Event{testEvent("evt_refused")})
		require.ErrorContains(t, err, "commit refused")
		h.mu.Lock()
		defer h.mu.Unlock()
		require.Zero(t, h.started)
		require.Len(t, h.givenBack, 3, "one delivery per endpoint, each given back")
	})

	t.Run("AGroupTransactionTakesThreeRoundTrips", func(t *testing.T) {
		t.Parallel()
		_, h, db := setup(t)
		// The same store on a pool of one connection that counts what it
		// sends: each statement sent alone, and each batch, is a round trip.
		cfg := db.Pool.Config()
		cfg.MaxConns, cfg.MinConns = 1, 0
		rt := &roundTrips{}
		cfg.ConnConfig.Tracer = rt
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: testLogger(), Schema: db.Schema})
		require.NoError(t, err)
		m := metrics.New(prometheus.NewRegistry(), metrics.Labels{})
		inline := fanout.NewInline(scope.NewDecider(nil, m, testLogger()).Func(), nil, m).WithHandoff(h)
		store := NewStore(StoreConfig{Fanout: inline}, pool, client, m, testLogger())

		// The first call prepares the connection's statements.
		_, err = store.Ingest(context.Background(), SourceTest, []*webhook.Event{testEvent("evt_warm")})
		require.NoError(t, err)
		rt.reset()
		_, err = store.Ingest(context.Background(), SourceTest, []*webhook.Event{testEvent("evt_1")})
		require.NoError(t, err)
		require.Equal(t, []string{"batch", "batch", "batch"}, rt.sent(),
			"BEGIN with the endpoints' read, the events' INSERT, River's insert of the jobs with the COMMIT")
		h.mu.Lock()
		defer h.mu.Unlock()
		require.Equal(t, 2*3, h.started)
		require.Zero(t, h.uncommitted, "started once committed")
	})

	t.Run("HandsEachJobItsOwnArgumentsAroundADuplicateJob", func(t *testing.T) {
		t.Parallel()
		store, h, db := setup(t)
		// A delivery job that already exists for one of the new events (as
		// when an event was pruned before its job and published again):
		// River skips it in the middle of the insert, and the jobs on either
		// side must still be handed over with their own arguments.
		var ep string
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT id::text FROM webhook_endpoints ORDER BY id OFFSET 1 LIMIT 1`).Scan(&ep))
		client, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Logger: testLogger(), Schema: db.Schema})
		require.NoError(t, err)
		_, err = client.Insert(context.Background(), job.DeliverArgs{EndpointID: ep, EventID: "evt_b"}, &river.InsertOpts{Queue: job.DeliverQueue(ep, 1)})
		require.NoError(t, err)

		_, err = store.Ingest(context.Background(), SourceTest, []*webhook.Event{testEvent("evt_a"), testEvent("evt_b"), testEvent("evt_c")})
		require.NoError(t, err)
		h.mu.Lock()
		defer h.mu.Unlock()
		require.Equal(t, 3*3-1, h.started, "every new delivery, not the one that existed")
		require.Zero(t, h.mismatched, "each with its own job's arguments")
		require.Zero(t, h.uncommitted)
	})

	t.Run("HandsOverTheEventAsStored", func(t *testing.T) {
		t.Parallel()
		store, h, db := setup(t)
		// Keys out of jsonb's order, spaces, and nanoseconds: what a later
		// attempt reads back differs from what was published, and a direct
		// delivery must send what that attempt will.
		e := testEvent("evt_1")
		e.Data = json.RawMessage(`{"was_published":true,  "published":true,"op":"updated","note_id":"n1"}`)
		e.OccurredAt = time.Date(2026, 11, 30, 12, 0, 0, 123456789, time.UTC)
		_, err := store.Ingest(context.Background(), SourceTest, []*webhook.Event{e})
		require.NoError(t, err)

		var (
			data []byte
			at   time.Time
		)
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT data, occurred_at FROM events WHERE id = 'evt_1'`).Scan(&data, &at))
		h.mu.Lock()
		defer h.mu.Unlock()
		require.Len(t, h.events, 3)
		for _, got := range h.events {
			require.Equal(t, string(data), string(got.Data), "data as stored")
			require.True(t, at.Equal(got.OccurredAt), "occurred_at as stored: %s, not %s", at, got.OccurredAt)
			require.Equal(t, e.Subject, got.Subject)
		}
		require.Equal(t, 123456789, e.OccurredAt.Nanosecond(), "the caller's event is left as it was")
	})

	t.Run("NothingStartedForAConflictOrADuplicate", func(t *testing.T) {
		t.Parallel()
		store, h, _ := setup(t)
		_, err := store.Ingest(context.Background(), SourceTest, []*webhook.Event{testEvent("evt_1")})
		require.NoError(t, err)
		_, err = store.Ingest(context.Background(), SourceTest, []*webhook.Event{testEvent("evt_1")})
		require.NoError(t, err, "a duplicate")
		changed := testEvent("evt_1")
		changed.Subject = "wiki://software/project/other"
		_, err = store.Ingest(context.Background(), SourceTest, []*webhook.Event{changed})
		require.Error(t, err, "a conflict")
		h.mu.Lock()
		defer h.mu.Unlock()
		require.Equal(t, 3, h.started, "only the first ingest's deliveries")
	})
}

// The inline fanout's decision goes into the INSERT that stores the event;
// an event left to a fanout job is stored without one, for the job to
// record.
func TestStoreRecordsTheDecision(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	readRecord := func(t *testing.T, db *dbtest.DB, id string) *decision.Record {
		t.Helper()
		var enc []byte
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT fanout FROM events WHERE id = $1`, id).Scan(&enc))
		if enc == nil {
			return nil
		}
		rec, err := decision.Decode(enc)
		require.NoError(t, err)
		return rec
	}

	t.Run("InTheInsert", func(t *testing.T) {
		t.Parallel()
		db := dbtest.New(t)
		client, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Logger: testLogger(), Schema: db.Schema})
		require.NoError(t, err)
		m := metrics.New(prometheus.NewRegistry(), metrics.Labels{})
		store := NewStore(StoreConfig{Fanout: fanout.NewInline(scope.NewDecider(nil, m, testLogger()).Func(), nil, m)}, db.Pool, client, m, testLogger())
		standalone := testfactory.Endpoint(ctx, t, db.Pool, &testfactory.EndpointOpts{OwnerID: "owner_1"}).String()
		booking := testfactory.Endpoint(ctx, t, db.Pool, &testfactory.EndpointOpts{OwnerID: "owner_1", EventTypes: []string{"booking.*"}}).String()

		draft := testEvent("evt_draft")
		draft.Data = json.RawMessage(`{"op":"updated","note_id":"n1","published":false,"was_published":false}`)
		lone := testEvent("evt_lone")
		lone.OwnerID = "owner_2"
		_, err = store.Ingest(ctx, SourceTest, []*webhook.Event{testEvent("evt_1"), draft, lone})
		require.NoError(t, err)

		require.Equal(t, []decision.Outcome{
			{Reason: decision.NotSubscribed, Count: 1, EndpointIDs: []string{booking}},
			{Reason: decision.Queued, Count: 1, EndpointIDs: []string{standalone}},
		}, readRecord(t, db, "evt_1").Outcomes)
		require.Equal(t, []decision.Outcome{
			{Reason: decision.NotSubscribed, Count: 1, EndpointIDs: []string{booking}},
			{Reason: decision.NotPublished, Count: 1, EndpointIDs: []string{standalone}},
		}, readRecord(t, db, "evt_draft").Outcomes)
		require.Empty(t, readRecord(t, db, "evt_lone").Outcomes, "an owner without endpoints: decided, nowhere to go")

		// A duplicate leaves the first decision as it was.
		_, err = db.Pool.Exec(ctx, `UPDATE webhook_endpoints SET enabled = false WHERE id = $1`, standalone)
		require.NoError(t, err)
		results, err := store.Ingest(ctx, SourceTest, []*webhook.Event{testEvent("evt_1")})
		require.NoError(t, err)
		require.Equal(t, OutcomeDuplicate, results[0].Outcome)
		require.Equal(t, decision.Queued, readRecord(t, db, "evt_1").Outcomes[1].Reason)
	})

	t.Run("NotForAnEventLeftToAFanoutJob", func(t *testing.T) {
		t.Parallel()
		db := dbtest.New(t)
		store, _ := newTestStore(t, db)
		_, err := store.Ingest(ctx, SourceTest, []*webhook.Event{testEvent("evt_1")})
		require.NoError(t, err)
		require.Equal(t, 1, countFanoutJobs(t, db, "evt_1"), "the access service must be asked")
		require.Nil(t, readRecord(t, db, "evt_1"), "the fanout job records it")
	})
}

// roundTrips is a pgx tracer that records what a connection sends: a
// statement alone ("query") or a batch, each one round trip.
type roundTrips struct {
	mu   sync.Mutex
	what []string
}

func (r *roundTrips) add(what string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.what = append(r.what, what)
}

func (r *roundTrips) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.what = nil
}

func (r *roundTrips) sent() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.what)
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	r.add("query")
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	r.add("batch")
	return ctx
}

func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}
