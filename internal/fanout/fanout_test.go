package fanout

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/standmeet/webhook-dispatcher/internal/access"
	"github.com/standmeet/webhook-dispatcher/internal/access/accesstest"
	"github.com/standmeet/webhook-dispatcher/internal/database"
	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/fair"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/scope"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
	"github.com/standmeet/webhook-dispatcher/internal/testtime"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

func TestMain(m *testing.M) { dbtest.VerifyTestMain(m) }

const (
	ownerID      = "owner_1"
	otherOwnerID = "owner_2"
	noteSubject  = "wiki://software/project/standmeet/architecture"
)

type testBundle struct {
	client  *river.Client[pgx.Tx] // insert-only: puts a client in Work's context
	db      *dbtest.DB
	fake    *accesstest.Server
	logger  *slog.Logger
	metrics *metrics.Metrics
	worker  *Worker
	inline  *Inline
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	db := dbtest.New(t)
	logger := testLogger(t)

	fake := accesstest.NewServer()
	fake.SetEmbed("emb_1", accesstest.Embed{OwnerID: ownerID, CodeID: "code_1"})
	fake.SetCode("code_1", accesstest.Code{
		ExpiresAt:       time.Now().Add(time.Hour),
		SubjectPrefixes: []string{"wiki://software/"},
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	served := make(chan error, 1)
	go func() { served <- fake.Serve(lis) }()
	t.Cleanup(func() {
		fake.Stop()
		require.NoError(t, <-served)
	})

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })

	m := metrics.New(prometheus.NewRegistry(), metrics.Labels{})
	decider := scope.NewDecider(access.NewClient(conn, 5*time.Second), m, logger)
	return &testBundle{
		client:  newInsertOnlyClient(t, db.Pool, db.Schema),
		db:      db,
		fake:    fake,
		logger:  logger,
		metrics: m,
		worker:  NewWorker(db.Pool, decider.Func(), nil, m, logger),
		inline:  NewInline(decider.Func(), nil, m),
	}
}

func testLogger(t *testing.T) *slog.Logger {
	t.Helper()
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func newInsertOnlyClient(t *testing.T, pool *pgxpool.Pool, schema string) *river.Client[pgx.Tx] {
	t.Helper()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Schema: schema, Logger: testLogger(t), TestOnly: true})
	require.NoError(t, err)
	return client
}

// work runs the fanout of eventID the way River would, with client in the
// context.
func work(ctx context.Context, w *Worker, client *river.Client[pgx.Tx], eventID string) error {
	return w.Work(rivertest.WorkContext(ctx, client), &river.Job[job.FanoutArgs]{
		JobRow: &rivertype.JobRow{ID: 1, Attempt: 1, Kind: job.KindFanout},
		Args:   job.FanoutArgs{EventID: eventID},
	})
}

func (b *testBundle) work(t *testing.T, eventID string) {
	t.Helper()
	require.NoError(t, work(context.Background(), b.worker, b.client, eventID))
}

func (b *testBundle) insertEvent(t *testing.T, owner, typ, subject, data string) string {
	t.Helper()
	return testfactory.Event(context.Background(), t, b.db.Pool, &testfactory.EventOpts{
		ID: fmt.Sprintf("evt_%d", eventSeq.Add(1)), OwnerID: owner, Type: typ, Subject: subject, Data: data,
	})
}

var eventSeq atomic.Int64

type endpointOpts struct {
	owner    string // ownerID when empty
	embedID  string
	disabled bool
	failing  bool
	filter   string
}

// insertEndpoints inserts n identical endpoints and returns their ids.
func (b *testBundle) insertEndpoints(t *testing.T, n int, globs []string, opts endpointOpts) []string {
	t.Helper()
	owner := opts.owner
	if owner == "" {
		owner = ownerID
	}
	var embedID *string
	if opts.embedID != "" {
		embedID = &opts.embedID
	}
	var failingSince *time.Time
	if opts.failing {
		failingSince = new(time.Now().Add(-time.Hour))
	}
	ids := testfactory.Endpoints(context.Background(), t, b.db.Pool, n, &testfactory.EndpointOpts{
		OwnerID: owner, EventTypes: globs, EmbedID: embedID, Disabled: opts.disabled, FailingSince: failingSince,
		Filter: opts.filter,
	})
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

func (b *testBundle) insertEndpoint(t *testing.T, globs []string, opts endpointOpts) string {
	t.Helper()
	return b.insertEndpoints(t, 1, globs, opts)[0]
}

type delivery struct {
	EndpointID  string
	EventID     string
	Queue       string
	State       string
	MaxAttempts int
	ScheduledAt time.Time
	Priority    int
}

// deliveries returns every webhook.deliver job, oldest first.
func deliveries(t *testing.T, pool *pgxpool.Pool) []delivery {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT args->>'endpoint_id', args->>'event_id', queue, state::text, max_attempts, scheduled_at, priority
		   FROM river_job WHERE kind = $1 ORDER BY id`, job.KindDeliver)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (delivery, error) {
		var d delivery
		err := row.Scan(&d.EndpointID, &d.EventID, &d.Queue, &d.State, &d.MaxAttempts, &d.ScheduledAt, &d.Priority)
		return d, err
	})
	require.NoError(t, err)
	return out
}

// deliveredTo returns the endpoint ids with a delivery of eventID.
func deliveredTo(t *testing.T, pool *pgxpool.Pool, eventID string) []string {
	t.Helper()
	ids := []string{}
	for _, d := range deliveries(t, pool) {
		if d.EventID == eventID {
			ids = append(ids, d.EndpointID)
		}
	}
	return ids
}

func TestWorker(t *testing.T) {
	t.Parallel()

	t.Run("EnqueuesDeliveryPerAdmittedEndpoint", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		ep := bundle.insertEndpoint(t, []string{"*"}, endpointOpts{})
		eventID := bundle.insertEvent(t, ownerID, "booking.created", "booking://1", `{}`)

		bundle.work(t, eventID)

		rows := rivertest.RequireManyInserted(context.Background(), t, riverpgxv5.New(bundle.db.Pool), []rivertest.ExpectedJob{{
			Args: job.DeliverArgs{EndpointID: ep, EventID: eventID},
			Opts: &rivertest.RequireInsertedOpts{
				Queue:       job.DeliverPartitionQueue(0), // one process: the first partition
				MaxAttempts: job.DeliverMaxAttempts,
				State:       rivertype.JobStateAvailable,
			},
		}})
		require.WithinDuration(t, time.Now(), rows[0].ScheduledAt, time.Minute)
		require.InDelta(t, 1, testutil.ToFloat64(bundle.metrics.FanoutEnqueuedTotal), 0)
		require.Equal(t, 1, testutil.CollectAndCount(bundle.metrics.FanoutDuration))
	})

	t.Run("GlobRouting", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		var (
			star    = bundle.insertEndpoint(t, []string{"*"}, endpointOpts{})
			corpus  = bundle.insertEndpoint(t, []string{"corpus.*"}, endpointOpts{})
			exact   = bundle.insertEndpoint(t, []string{"booking.created"}, endpointOpts{})
			several = bundle.insertEndpoint(t, []string{"code.*", "booking.cancelled"}, endpointOpts{})
		)
		tests := []struct {
			typ, subject, data string
			want               []string
		}{
			{typ: "booking.created", subject: "booking://1", data: `{}`, want: []string{star, exact}},
			{typ: "booking.cancelled", subject: "booking://1", data: `{}`, want: []string{star, several}},
			{typ: event.TypeNoteChanged, subject: noteSubject, data: `{"published":true}`, want: []string{star, corpus}},
			{typ: "code.revoked", subject: "code://1", data: `{}`, want: []string{star, several}},
			{typ: "owner.login", subject: "owner://1", data: `{}`, want: []string{star}},
		}
		for _, tt := range tests {
			eventID := bundle.insertEvent(t, ownerID, tt.typ, tt.subject, tt.data)
			bundle.work(t, eventID)
			require.ElementsMatch(t, tt.want, deliveredTo(t, bundle.db.Pool, eventID), tt.typ)
		}
	})

	t.Run("NonMatchingEndpointGetsNothing", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.insertEndpoint(t, []string{"booking.created", "corpus.*"}, endpointOpts{})
		eventID := bundle.insertEvent(t, ownerID, "booking.cancelled", "booking://1", `{}`)

		bundle.work(t, eventID)

		require.Empty(t, deliveries(t, bundle.db.Pool))
		require.Zero(t, metrics.Sum(bundle.metrics.ScopeDecisionsTotal))
	})

	t.Run("DisabledEndpointsSkipped", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		enabled := bundle.insertEndpoint(t, []string{"*"}, endpointOpts{})
		bundle.insertEndpoint(t, []string{"*"}, endpointOpts{disabled: true})
		eventID := bundle.insertEvent(t, ownerID, "booking.created", "booking://1", `{}`)

		bundle.work(t, eventID)

		require.Equal(t, []string{enabled}, deliveredTo(t, bundle.db.Pool, eventID))
	})

	t.Run("OtherOwnersEndpointsNeverConsidered", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		mine := bundle.insertEndpoint(t, []string{"*"}, endpointOpts{})
		bundle.insertEndpoint(t, []string{"*"}, endpointOpts{owner: otherOwnerID})
		bundle.insertEndpoint(t, []string{"*"}, endpointOpts{owner: otherOwnerID, embedID: "emb_1"})
		booking := bundle.insertEvent(t, ownerID, "booking.created", "booking://1", `{}`)
		note := bundle.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, `{"published":true}`)

		bundle.work(t, booking)
		bundle.work(t, note)

		require.Equal(t, []string{mine}, deliveredTo(t, bundle.db.Pool, booking))
		require.Equal(t, []string{mine}, deliveredTo(t, bundle.db.Pool, note))
		require.Zero(t, bundle.fake.Calls())
		// Only the owner's one endpoint was ever decided on, once per event.
		require.InDelta(t, 2, metrics.Sum(bundle.metrics.ScopeDecisionsTotal), 0)
	})

	t.Run("RawSubjectReachesNobody", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.insertEndpoint(t, []string{"*"}, endpointOpts{})
		bundle.insertEndpoint(t, []string{"*"}, endpointOpts{embedID: "emb_1"})
		eventID := bundle.insertEvent(t, ownerID, event.TypeNoteChanged, "raw://notes/1", `{"published":true}`)

		bundle.work(t, eventID)

		require.Empty(t, deliveries(t, bundle.db.Pool))
		require.Zero(t, bundle.fake.Calls())
	})

	t.Run("UnclassifiedTypeReachesNobody", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.insertEndpoint(t, []string{"*"}, endpointOpts{})
		eventID := bundle.insertEvent(t, ownerID, "internal.audit.logged", "audit://1", `{}`)

		bundle.work(t, eventID)

		require.Empty(t, deliveries(t, bundle.db.Pool))
	})

	t.Run("EventGoneIsNothingToDo", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.insertEndpoint(t, []string{"*"}, endpointOpts{})

		bundle.work(t, "evt_pruned")

		require.Empty(t, deliveries(t, bundle.db.Pool))
	})

	t.Run("PublishedSliceForStandaloneEndpoints", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		ep := bundle.insertEndpoint(t, []string{"corpus.note.changed"}, endpointOpts{})
		var (
			published    = bundle.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, `{"op":"updated","published":true,"was_published":false}`)
			unpublishing = bundle.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, `{"op":"updated","published":false,"was_published":true}`)
			draft        = bundle.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, `{"op":"updated","published":false,"was_published":false}`)
		)
		for _, id := range []string{published, unpublishing, draft} {
			bundle.work(t, id)
		}

		require.Equal(t, []string{ep}, deliveredTo(t, bundle.db.Pool, published))
		require.Equal(t, []string{ep}, deliveredTo(t, bundle.db.Pool, unpublishing))
		require.Empty(t, deliveredTo(t, bundle.db.Pool, draft))
		require.InDelta(t, 2, testutil.ToFloat64(bundle.metrics.ScopeDecisionsTotal.WithLabelValues(scope.RulePublishedSlice, scope.ResultAdmit)), 0)
		require.InDelta(t, 1, testutil.ToFloat64(bundle.metrics.ScopeDecisionsTotal.WithLabelValues(scope.RulePublishedSlice, scope.ResultDeny)), 0)
		require.Zero(t, bundle.fake.Calls())
	})

	t.Run("EmbedAdmits", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		ep := bundle.insertEndpoint(t, []string{"*"}, endpointOpts{embedID: "emb_1"})
		eventID := bundle.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, `{"published":true}`)

		bundle.work(t, eventID)

		require.Equal(t, []string{ep}, deliveredTo(t, bundle.db.Pool, eventID))
		require.Equal(t, 1, bundle.fake.Calls())
		require.InDelta(t, 1, testutil.ToFloat64(bundle.metrics.ScopeDecisionsTotal.WithLabelValues(scope.RuleEmbed, scope.ResultAdmit)), 0)
	})

	t.Run("EmbedDenials", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name    string
			subject string
			data    string
			change  func(f *accesstest.Server)
		}{
			{name: "OutOfScope", subject: "wiki://private/diary", data: `{"published":true}`},
			{name: "Unpublished", subject: noteSubject, data: `{"published":false,"was_published":false}`},
			{name: "Revoked", subject: noteSubject, data: `{"published":true}`, change: func(f *accesstest.Server) { f.RevokeCode("code_1") }},
			{name: "Expired", subject: noteSubject, data: `{"published":true}`, change: func(f *accesstest.Server) {
				f.SetCode("code_1", accesstest.Code{ExpiresAt: time.Now().Add(-time.Minute), SubjectPrefixes: []string{"wiki://"}})
			}},
			{name: "EmbedDeleted", subject: noteSubject, data: `{"published":true}`, change: func(f *accesstest.Server) { f.DeleteEmbed("emb_1") }},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				bundle := setup(t)
				standalone := bundle.insertEndpoint(t, []string{"*"}, endpointOpts{})
				bundle.insertEndpoint(t, []string{"*"}, endpointOpts{embedID: "emb_1"})
				if tt.change != nil {
					tt.change(bundle.fake)
				}
				eventID := bundle.insertEvent(t, ownerID, event.TypeNoteChanged, tt.subject, tt.data)

				bundle.work(t, eventID)

				got := deliveredTo(t, bundle.db.Pool, eventID)
				if tt.name == "Unpublished" {
					require.Empty(t, got)
				} else {
					require.Equal(t, []string{standalone}, got)
				}
				require.Equal(t, 1, bundle.fake.Calls())
				require.InDelta(t, 1, testutil.ToFloat64(bundle.metrics.ScopeDecisionsTotal.WithLabelValues(scope.RuleEmbed, scope.ResultDeny)), 0)
			})
		}
	})

	t.Run("CodeRevokedBetweenTwoEventsOnSameSubject", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		ep := bundle.insertEndpoint(t, []string{"corpus.*"}, endpointOpts{embedID: "emb_1"})

		first := bundle.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, `{"op":"updated","published":true}`)
		bundle.work(t, first)
		bundle.fake.RevokeCode("code_1")
		second := bundle.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, `{"op":"updated","published":true}`)
		bundle.work(t, second)

		require.Equal(t, []string{ep}, deliveredTo(t, bundle.db.Pool, first))
		require.Empty(t, deliveredTo(t, bundle.db.Pool, second))
		require.Equal(t, 2, bundle.fake.Calls())
	})

	t.Run("EmbedBoundUnscopedTypesNeedNoAccessService", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		ep := bundle.insertEndpoint(t, []string{"*"}, endpointOpts{embedID: "emb_1"})
		bundle.fake.SetDown(true)
		eventID := bundle.insertEvent(t, ownerID, "booking.created", "booking://1", `{}`)

		bundle.work(t, eventID)

		require.Equal(t, []string{ep}, deliveredTo(t, bundle.db.Pool, eventID))
		require.Zero(t, bundle.fake.Calls())
	})

	t.Run("NoAccessServiceDeniesEmbedBound", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		decider := scope.NewDecider(nil, bundle.metrics, bundle.logger)
		bundle.worker = NewWorker(bundle.db.Pool, decider.Func(), nil, bundle.metrics, bundle.logger)
		standalone := bundle.insertEndpoint(t, []string{"*"}, endpointOpts{})
		bundle.insertEndpoint(t, []string{"*"}, endpointOpts{embedID: "emb_1"})
		eventID := bundle.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, `{"published":true}`)

		bundle.work(t, eventID)

		require.Equal(t, []string{standalone}, deliveredTo(t, bundle.db.Pool, eventID))
	})

	t.Run("AccessDownFailsWholeFanoutThenSucceeds", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		standalone := bundle.insertEndpoint(t, []string{"*"}, endpointOpts{})
		embedded := bundle.insertEndpoint(t, []string{"*"}, endpointOpts{embedID: "emb_1"})
		eventID := bundle.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, `{"published":true}`)
		bundle.fake.SetDown(true)

		err := work(context.Background(), bundle.worker, bundle.client, eventID)
		require.ErrorIs(t, err, scope.ErrUnavailable)
		// Not even the standalone endpoint: the fanout is all or nothing, so
		// the retry is a plain re-run.
		require.Empty(t, deliveries(t, bundle.db.Pool))
		require.Zero(t, testutil.ToFloat64(bundle.metrics.FanoutEnqueuedTotal))
		require.InDelta(t, 1, testutil.ToFloat64(bundle.metrics.ScopeDecisionsTotal.WithLabelValues(scope.RuleEmbed, scope.ResultError)), 0)

		bundle.fake.SetDown(false)
		bundle.work(t, eventID)
		require.ElementsMatch(t, []string{standalone, embedded}, deliveredTo(t, bundle.db.Pool, eventID))
	})

	t.Run("FailingEndpointScheduledAfterCooldown", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		healthy := bundle.insertEndpoint(t, []string{"*"}, endpointOpts{})
		failing := bundle.insertEndpoint(t, []string{"*"}, endpointOpts{failing: true})
		eventID := bundle.insertEvent(t, ownerID, "booking.created", "booking://1", `{}`)

		before := time.Now()
		bundle.work(t, eventID)

		byEndpoint := map[string]delivery{}
		for _, d := range deliveries(t, bundle.db.Pool) {
			byEndpoint[d.EndpointID] = d
		}
		require.Len(t, byEndpoint, 2)
		require.Equal(t, string(rivertype.JobStateAvailable), byEndpoint[healthy].State)
		require.WithinDuration(t, before, byEndpoint[healthy].ScheduledAt, 30*time.Second)

		require.Equal(t, string(rivertype.JobStateScheduled), byEndpoint[failing].State)
		require.WithinDuration(t, before.Add(job.FailingCooldown), byEndpoint[failing].ScheduledAt, 30*time.Second)
		// The cool-down changes only the schedule: queue and attempts are the delivery's.
		require.Equal(t, job.DeliverPartitionQueue(0), byEndpoint[failing].Queue)
		require.Equal(t, job.DeliverMaxAttempts, byEndpoint[failing].MaxAttempts)
	})

	t.Run("TestEventSkipsTheCooldown", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		failing := bundle.insertEndpoint(t, []string{"*"}, endpointOpts{failing: true})
		eventID := bundle.insertEvent(t, ownerID, event.TypeWebhookTest, "webhook://test", fmt.Sprintf(`{"endpoint_id":%q}`, failing))

		before := time.Now()
		bundle.work(t, eventID)

		ds := deliveries(t, bundle.db.Pool)
		require.Len(t, ds, 1)
		require.Equal(t, string(rivertype.JobStateAvailable), ds[0].State, "an admin's test goes now")
		require.WithinDuration(t, before, ds[0].ScheduledAt, 30*time.Second)
	})

	t.Run("WebhookTestOnlyToNamedEndpoint", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		target := bundle.insertEndpoint(t, []string{"booking.created"}, endpointOpts{})
		bundle.insertEndpoint(t, []string{"*"}, endpointOpts{})
		bundle.insertEndpoint(t, []string{"webhook.test"}, endpointOpts{})
		eventID := bundle.insertEvent(t, ownerID, event.TypeWebhookTest, "webhook://test", fmt.Sprintf(`{"endpoint_id":%q}`, target))

		bundle.work(t, eventID)

		// Delivered although the target subscribes to other types only.
		require.Equal(t, []string{target}, deliveredTo(t, bundle.db.Pool, eventID))
	})

	t.Run("WebhookTestToDisabledOrOtherOwnersEndpointGoesNowhere", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		disabled := bundle.insertEndpoint(t, []string{"*"}, endpointOpts{disabled: true})
		foreign := bundle.insertEndpoint(t, []string{"*"}, endpointOpts{owner: otherOwnerID})
		bundle.insertEndpoint(t, []string{"*"}, endpointOpts{})
		for _, target := range []string{disabled, foreign} {
			eventID := bundle.insertEvent(t, ownerID, event.TypeWebhookTest, "webhook://test", fmt.Sprintf(`{"endpoint_id":%q}`, target))
			bundle.work(t, eventID)
		}

		require.Empty(t, deliveries(t, bundle.db.Pool))
	})

	t.Run("RunTwiceEnqueuesOnce", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		eps := bundle.insertEndpoints(t, 3, []string{"*"}, endpointOpts{})
		eventID := bundle.insertEvent(t, ownerID, "booking.created", "booking://1", `{}`)

		bundle.work(t, eventID)
		bundle.work(t, eventID)

		require.ElementsMatch(t, eps, deliveredTo(t, bundle.db.Pool, eventID))
		require.InDelta(t, 3, testutil.ToFloat64(bundle.metrics.FanoutEnqueuedTotal), 0)
	})

	t.Run("ConcurrentReplicasEnqueueOnce", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		eps := bundle.insertEndpoints(t, 40, []string{"*"}, endpointOpts{})
		eps = append(eps, bundle.insertEndpoints(t, 10, []string{"*"}, endpointOpts{embedID: "emb_1"})...)
		eventID := bundle.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, `{"published":true}`)

		// A second replica: its own pool, River client and worker, on the same schema.
		pool2, err := database.Open(context.Background(), bundle.db.URL, bundle.db.Schema, 4)
		require.NoError(t, err)
		t.Cleanup(pool2.Close)
		worker2 := NewWorker(pool2, bundle.worker.decide, nil, bundle.metrics, bundle.logger)
		client2 := newInsertOnlyClient(t, pool2, bundle.db.Schema)

		var wg sync.WaitGroup
		errs := make(chan error, 6)
		for range 3 {
			wg.Go(func() { errs <- work(context.Background(), bundle.worker, bundle.client, eventID) })
			wg.Go(func() { errs <- work(context.Background(), worker2, client2, eventID) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}

		require.ElementsMatch(t, eps, deliveredTo(t, bundle.db.Pool, eventID))
		require.InDelta(t, 50, testutil.ToFloat64(bundle.metrics.FanoutEnqueuedTotal), 0)
	})

	t.Run("ThousandsOfEndpointsInOneFanout", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		// More than one insert chunk, plus enough embed-bound endpoints to
		// exercise the bounded concurrent decisions.
		eps := bundle.insertEndpoints(t, 2*insertChunk+50, []string{"*"}, endpointOpts{})
		eps = append(eps, bundle.insertEndpoints(t, 40, []string{"corpus.*"}, endpointOpts{embedID: "emb_1"})...)
		bundle.insertEndpoints(t, 100, []string{"booking.*"}, endpointOpts{})
		eventID := bundle.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, `{"published":true}`)

		bundle.work(t, eventID)

		got := deliveredTo(t, bundle.db.Pool, eventID)
		require.Len(t, got, len(eps))
		require.ElementsMatch(t, eps, got)
		require.Equal(t, 40, bundle.fake.Calls())
		require.InDelta(t, len(eps), testutil.ToFloat64(bundle.metrics.FanoutEnqueuedTotal), 0)
	})
}

// fastRetry retries failed jobs almost at once, so a test can watch River
// retry a fanout without waiting for the real backoff.
type fastRetry struct{}

func (fastRetry) NextRetry(*rivertype.JobRow) time.Time { return time.Now().Add(50 * time.Millisecond) }

// startClient starts a River client working the fanout queue with w.
func startClient(t *testing.T, pool *pgxpool.Pool, schema string, w *Worker) *river.Client[pgx.Tx] {
	t.Helper()
	workers := river.NewWorkers()
	river.AddWorker(workers, w)
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown:     10 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
		Logger:            testLogger(t),
		Queues:            map[string]river.QueueConfig{job.QueueFanout: {MaxWorkers: 2}},
		RetryPolicy:       fastRetry{},
		Schema:            schema,
		// The deliver worker is another package's; its jobs only need to be
		// inserted here, never worked.
		SkipUnknownJobCheck: true,
		TestOnly:            true,
		Workers:             workers,
	})
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, client.Start(ctx))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		require.NoError(t, client.Stop(ctx))
	})
	return client
}

// waitForEvents collects n events from ch or fails after a while.
func waitForEvents(t *testing.T, ch <-chan *river.Event, n int) []*river.Event {
	t.Helper()
	timeout := time.After(20 * time.Second)
	var out []*river.Event
	for len(out) < n {
		select {
		case ev := <-ch:
			out = append(out, ev)
		case <-timeout:
			require.FailNow(t, "timed out waiting for River events", "got %d of %d", len(out), n)
		}
	}
	return out
}

func TestWorkerWithRiver(t *testing.T) {
	t.Parallel()

	t.Run("AccessDownRetriedUntilItAnswers", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		standalone := bundle.insertEndpoint(t, []string{"*"}, endpointOpts{})
		embedded := bundle.insertEndpoint(t, []string{"*"}, endpointOpts{embedID: "emb_1"})
		eventID := bundle.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, `{"published":true}`)
		bundle.fake.SetDown(true)

		client := startClient(t, bundle.db.Pool, bundle.db.Schema, bundle.worker)
		events, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
		defer cancel()

		_, err := client.Insert(context.Background(), job.FanoutArgs{EventID: eventID}, nil)
		require.NoError(t, err)

		// Two failed attempts: River is retrying, and nothing was enqueued.
		for _, ev := range waitForEvents(t, events, 2) {
			require.Equal(t, river.EventKindJobFailed, ev.Kind)
			// A retry due within seconds skips the retryable state.
			require.Contains(t, []rivertype.JobState{rivertype.JobStateRetryable, rivertype.JobStateAvailable}, ev.Job.State)
			require.Contains(t, ev.Job.Errors[len(ev.Job.Errors)-1].Error, "access service unavailable")
		}
		require.Empty(t, deliveries(t, bundle.db.Pool))

		bundle.fake.SetDown(false)
		for {
			ev := waitForEvents(t, events, 1)[0]
			if ev.Kind == river.EventKindJobCompleted {
				break
			}
		}
		require.ElementsMatch(t, []string{standalone, embedded}, deliveredTo(t, bundle.db.Pool, eventID))
	})

	t.Run("TwoClientsOneSchemaEnqueueOnce", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		eps := bundle.insertEndpoints(t, 20, []string{"*"}, endpointOpts{})
		eps = append(eps, bundle.insertEndpoints(t, 5, []string{"*"}, endpointOpts{embedID: "emb_1"})...)

		pool2, err := database.Open(context.Background(), bundle.db.URL, bundle.db.Schema, 4)
		require.NoError(t, err)
		t.Cleanup(pool2.Close)
		worker2 := NewWorker(pool2, bundle.worker.decide, nil, bundle.metrics, bundle.logger)

		clientA := startClient(t, bundle.db.Pool, bundle.db.Schema, bundle.worker)
		clientB := startClient(t, pool2, bundle.db.Schema, worker2)
		eventsA, cancelA := clientA.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
		defer cancelA()
		eventsB, cancelB := clientB.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
		defer cancelB()
		merged := make(chan *river.Event)
		done := make(chan struct{})
		defer close(done)
		for _, ch := range []<-chan *river.Event{eventsA, eventsB} {
			go func() {
				for {
					select {
					case ev, ok := <-ch:
						if !ok {
							return
						}
						select {
						case merged <- ev:
						case <-done:
							return
						}
					case <-done:
						return
					}
				}
			}()
		}

		const numEvents = 6
		var jobIDs []int64
		var ids []string
		for range numEvents {
			id := bundle.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, `{"published":true}`)
			ids = append(ids, id)
			res, err := clientA.Insert(context.Background(), job.FanoutArgs{EventID: id}, nil)
			require.NoError(t, err)
			jobIDs = append(jobIDs, res.Job.ID)
		}
		for _, ev := range waitForEvents(t, merged, numEvents) {
			require.Equal(t, river.EventKindJobCompleted, ev.Kind, "%+v", ev.Job.Errors)
		}

		// Re-run every fanout, from both replicas at once.
		for i, id := range jobIDs {
			client := clientA
			if i%2 == 1 {
				client = clientB
			}
			_, err := client.JobRetry(context.Background(), id)
			require.NoError(t, err)
		}
		for _, ev := range waitForEvents(t, merged, numEvents) {
			require.Equal(t, river.EventKindJobCompleted, ev.Kind, "%+v", ev.Job.Errors)
		}

		got := deliveries(t, bundle.db.Pool)
		require.Len(t, got, numEvents*len(eps))
		for _, id := range ids {
			require.ElementsMatch(t, eps, deliveredTo(t, bundle.db.Pool, id))
		}
		require.InDelta(t, numEvents*len(eps), testutil.ToFloat64(bundle.metrics.FanoutEnqueuedTotal), 0)
	})
}

// inlineTx runs the inline fanout of the given events in a transaction, as
// ingest does, and commits it.
func (b *testBundle) inlineTx(t *testing.T, eventIDs ...string) int {
	t.Helper()
	deferred, _ := b.inlineTxHanded(t, eventIDs...)
	return deferred
}

// inlineTxHanded is inlineTx, also returning the deliveries handed off. The
// events are stored already, so their records are written as ingest's
// INSERT would have.
func (b *testBundle) inlineTxHanded(t *testing.T, eventIDs ...string) (int, []*rivertype.JobRow) {
	t.Helper()
	ctx := context.Background()
	var (
		events []*webhook.Event
		stored []Stored
	)
	for i, id := range eventIDs {
		e := &webhook.Event{ID: id}
		var (
			data []byte
			seq  int64
		)
		require.NoError(t, b.db.Pool.QueryRow(ctx, `SELECT owner_id, type, subject, occurred_at, data, seq FROM events WHERE id = $1`, id).
			Scan(&e.OwnerID, &e.Type, &e.Subject, &e.OccurredAt, &data, &seq))
		e.Data = data
		events = append(events, e)
		stored = append(stored, Stored{Index: i, Event: e, Seq: seq})
	}
	var (
		deferred int
		handed   *Handed
	)
	require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
		plan, err := b.inline.Plan(ctx, tx, events, nil)
		if err != nil {
			return err
		}
		for i, e := range events {
			if _, err := tx.Exec(ctx, `UPDATE events SET fanout = $2 WHERE id = $1`, e.ID, plan.Record(i)); err != nil {
				return err
			}
		}
		deferred, handed, err = b.inline.EnqueueTx(ctx, tx, b.client, plan, stored)
		return err
	}))
	if handed == nil {
		return deferred, nil
	}
	for i, j := range handed.jobs {
		require.Equal(t, gjsonString(t, j.EncodedArgs, "event_id"), handed.events[i].ID, "each job with its event")
	}
	return deferred, handed.jobs
}

// handoff is a fanout.Handoff that accepts the queues it is told to.
type handoff struct {
	accept func(queue string) bool
	mu     sync.Mutex
	asked  []string
	// planned holds each offer's endpoint and planned count.
	planned []string
	// totals holds each offer's count of the plan's earlier hand-offs.
	totals []int
}

func (h *handoff) Hold() time.Duration { return time.Hour }

func (h *handoff) Member() string { return "test-member" }

func (h *handoff) Accepts(queue, endpointID string, _ *webhook.Event, toEndpoint, _, total int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.asked = append(h.asked, queue)
	h.planned = append(h.planned, fmt.Sprintf("%s:%d", endpointID, toEndpoint))
	h.totals = append(h.totals, total)
	return h.accept(queue)
}

func (h *handoff) Start([]*rivertype.JobRow, []job.DeliverArgs, []*webhook.Event) {}

// preparingHandoff is a handoff that reads in the transaction
// (TxPreparer): it queues a count of the endpoints it is given that exist.
type preparingHandoff struct {
	handoff
	asked    []string // the endpoint ids QueueRead was given
	found    int      // how many of them its read found
	prepared any      // what StartPrepared got
	started  int      // Start calls (there should be none)
}

func (h *preparingHandoff) QueueRead(b *pgx.Batch, endpointIDs []string) any {
	h.asked = append(h.asked, endpointIDs...)
	b.Queue(`SELECT count(*) FROM webhook_endpoints WHERE id::text = ANY($1)`, endpointIDs).QueryRow(func(row pgx.Row) error {
		return row.Scan(&h.found)
	})
	return "prepared"
}

// lastStatementTx is a transaction that records whether EnqueueTx asked it
// to commit with its next statement (fanout.LastStatementCommitter).
type lastStatementTx struct {
	pgx.Tx
	armed bool
}

func (tx *lastStatementTx) CommitWithNextQuery() { tx.armed = true }

func (h *preparingHandoff) StartPrepared(_ []*rivertype.JobRow, _ []job.DeliverArgs, _ []*webhook.Event, prepared any) {
	h.prepared = prepared
}

func (h *preparingHandoff) Start([]*rivertype.JobRow, []job.DeliverArgs, []*webhook.Event) {
	h.started++
}

func TestInline(t *testing.T) {
	t.Parallel()

	published := `{"op":"updated","published":true}`

	t.Run("DecidesLocallyAndEnqueuesDeliveries", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ep1 := b.insertEndpoint(t, []string{"*"}, endpointOpts{})
		ep2 := b.insertEndpoint(t, []string{"code.*"}, endpointOpts{owner: otherOwnerID})
		_ = b.insertEndpoint(t, []string{"booking.*"}, endpointOpts{})
		failing := b.insertEndpoint(t, []string{"code.issued"}, endpointOpts{failing: true})
		ev1 := b.insertEvent(t, ownerID, "code.issued", "code://1", "{}")
		ev2 := b.insertEvent(t, otherOwnerID, "code.revoked", "code://2", "{}")

		require.Zero(t, b.inlineTx(t, ev1, ev2))

		got := map[[2]string]delivery{}
		for _, d := range deliveries(t, b.db.Pool) {
			got[[2]string{d.EndpointID, d.EventID}] = d
		}
		require.Len(t, got, 3, "owner 1's matching endpoints for ev1, owner 2's for ev2; never across owners")
		require.Contains(t, got, [2]string{ep1, ev1})
		require.Contains(t, got, [2]string{ep2, ev2})
		require.Contains(t, got, [2]string{failing, ev1})
		require.WithinDuration(t, time.Now().Add(job.FailingCooldown), got[[2]string{failing, ev1}].ScheduledAt, time.Minute,
			"a failing endpoint's delivery cools down, as in the fanout job")
		require.Zero(t, countFanoutJobs(t, b.db.Pool), "nothing left for a fanout job")
		require.Zero(t, b.fake.Calls())
	})

	t.Run("SpreadsEndpointsOverTheActivePartitions", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.inline.partitions = func() int { return 3 }
		eps := b.insertEndpoints(t, 30, []string{"*"}, endpointOpts{})
		require.Zero(t, b.inlineTx(t, b.insertEvent(t, ownerID, "code.issued", "code://1", "{}")))
		queues := map[string]bool{}
		for _, d := range deliveries(t, b.db.Pool) {
			require.Equal(t, job.DeliverQueue(d.EndpointID, 3), d.Queue)
			queues[d.Queue] = true
		}
		require.Len(t, eps, 30)
		require.Len(t, queues, 3, "30 endpoints land in all three active partitions")
	})

	t.Run("AppliesTheScopeRules", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ep := b.insertEndpoint(t, []string{"corpus.*"}, endpointOpts{})
		pub := b.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, published)
		unpub := b.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, `{"op":"updated","published":false}`)
		require.Zero(t, b.inlineTx(t, pub, unpub))
		got := deliveries(t, b.db.Pool)
		require.Len(t, got, 1)
		require.Equal(t, ep, got[0].EndpointID)
		require.Equal(t, pub, got[0].EventID, "the published slice: an unpublished note stays in")
	})

	t.Run("DefersToAFanoutJobWhenTheAccessServiceMustBeAsked", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_ = b.insertEndpoint(t, []string{"*"}, endpointOpts{})
		_ = b.insertEndpoint(t, []string{"*"}, endpointOpts{embedID: "emb_1"})
		note := b.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, published)
		other := b.insertEvent(t, ownerID, "code.issued", "code://1", "{}")

		require.Equal(t, 1, b.inlineTx(t, note, other))
		require.Zero(t, b.fake.Calls(), "never called with the ingest transaction open")
		require.Equal(t, 1, countFanoutJobs(t, b.db.Pool), "the scoped event goes to a fanout job, whole")
		for _, d := range deliveries(t, b.db.Pool) {
			require.Equal(t, other, d.EventID, "only the unscoped event is delivered inline")
		}
		require.Len(t, deliveries(t, b.db.Pool), 2, "an unscoped type reaches the embed-bound endpoint too")

		// The job then decides with the access service, as before.
		b.work(t, note)
		require.Equal(t, 1, b.fake.Calls())
		require.Len(t, deliveries(t, b.db.Pool), 4)
	})
}

// A receiver that answered Retry-After said when it would take more; once
// that time has passed its endpoint, still failing (no success yet), must
// not put new deliveries behind the failing cool-down.
func TestInlineAfterAPause(t *testing.T) {
	t.Parallel()

	for name, tc := range map[string]struct {
		pausedUntil string // SQL, or "" for none
		wantIn      time.Duration
	}{
		"PauseOverGoesNow":             {"now() - interval '1 second'", 0},
		"PauseOnWaitsForItsEnd":        {"now() + interval '30 seconds'", 30*time.Second + job.PauseProbeGap},
		"OtherFailureKeepsCoolingDown": {"", job.FailingCooldown},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ep := b.insertEndpoint(t, []string{"*"}, endpointOpts{failing: true})
			set := time.Now()
			if tc.pausedUntil != "" {
				_, err := b.db.Pool.Exec(context.Background(), `UPDATE webhook_endpoints SET paused_until = `+tc.pausedUntil+`, pause_reason = 'HTTP 429 with Retry-After' WHERE id = $1`, ep)
				require.NoError(t, err)
			}
			ev := b.insertEvent(t, ownerID, "code.issued", "code://1", "{}")
			// Bracketed: the pause was set (by the database's clock) before
			// `before`, and the fanout ran before `after`.
			before := time.Now()
			require.Zero(t, b.inlineTx(t, ev))
			after := time.Now()
			got := deliveries(t, b.db.Pool)
			require.Len(t, got, 1)
			if tc.pausedUntil == "" || tc.wantIn == 0 {
				testtime.RequireBetween(t, before.Add(tc.wantIn), after.Add(tc.wantIn), got[0].ScheduledAt)
			} else {
				// From the pause's end, set (by the database) after `set`.
				testtime.RequireBetween(t, set.Add(tc.wantIn), after.Add(tc.wantIn), got[0].ScheduledAt)
			}
		})
	}
}

func TestFairPriorities(t *testing.T) {
	t.Parallel()

	t.Run("ABurstOwnersBacklogIsFetchedAfterAQuietOwner", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		clock := fair.New(fair.Config{Rate: 10})
		b.inline.WithFairness(clock)
		b.worker.WithFairness(clock)
		burstEps := b.insertEndpoints(t, 10, []string{"*"}, endpointOpts{})
		quietEp := b.insertEndpoint(t, []string{"*"}, endpointOpts{owner: otherOwnerID})
		var burst []string
		for i := range 5 {
			burst = append(burst, b.insertEvent(t, ownerID, "code.issued", fmt.Sprintf("code://%d", i), "{}"))
		}
		b.inlineTx(t, burst...)
		quiet := b.insertEvent(t, otherOwnerID, "code.issued", "code://q", "{}")
		b.inlineTx(t, quiet)
		// The fanout job's path takes its priority from the same clock.
		late := b.insertEvent(t, ownerID, "code.issued", "code://late", "{}")
		b.work(t, late)

		byTier := map[int]int{}
		for _, d := range deliveries(t, b.db.Pool) {
			switch {
			case d.EndpointID == quietEp:
				require.Equal(t, fair.Prompt, d.Priority, "the quiet owner has no backlog: prompt")
			case slices.Contains(burstEps, d.EndpointID):
				byTier[d.Priority]++
			}
		}
		// 10 a second: the first 10 prompt, the next 90 in tier 2 (60 here).
		require.Equal(t, map[int]int{fair.Prompt: 10, 2: 50}, byTier)
	})

	t.Run("AnOwnersWeightMovesItsTiers", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.inline.WithFairness(fair.New(fair.Config{Rate: 10}))
		_, err := b.db.Pool.Exec(t.Context(), `INSERT INTO owner_settings (owner_id, weight) VALUES ($1, 10)`, ownerID)
		require.NoError(t, err)
		b.insertEndpoints(t, 10, []string{"*"}, endpointOpts{})
		var burst []string
		for i := range 5 {
			burst = append(burst, b.insertEvent(t, ownerID, "code.issued", fmt.Sprintf("code://%d", i), "{}"))
		}
		b.inlineTx(t, burst...)
		for _, d := range deliveries(t, b.db.Pool) {
			require.Equal(t, fair.Prompt, d.Priority, "weight 10: 50 deliveries are half a second of its share")
		}
	})

	t.Run("WithoutAClockEverythingIsPrompt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.insertEndpoints(t, 3, []string{"*"}, endpointOpts{})
		b.inlineTx(t, b.insertEvent(t, ownerID, "code.issued", "code://1", "{}"))
		for _, d := range deliveries(t, b.db.Pool) {
			require.Equal(t, fair.Prompt, d.Priority)
		}
	})
}

func TestInlineHandoff(t *testing.T) {
	t.Parallel()

	t.Run("HandsOffWhatGoesNowToAcceptedQueues", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.inline.partitions = func() int { return 12 }
		eps := b.insertEndpoints(t, 24, []string{"*"}, endpointOpts{})
		mine := job.DeliverQueue(eps[0], 12)
		h := &handoff{accept: func(q string) bool { return q == mine }}
		b.inline.WithHandoff(h)
		ev := b.insertEvent(t, ownerID, "code.issued", "code://1", "{}")

		_, handed := b.inlineTxHanded(t, ev)
		require.NotEmpty(t, handed)
		for _, d := range deliveries(t, b.db.Pool) {
			if d.Queue != mine {
				require.Equal(t, "available", d.State, "another process's queue: River's, due now")
				continue
			}
			require.Equal(t, "scheduled", d.State, "handed off: scheduled as a net, an hour out")
			require.WithinDuration(t, time.Now().Add(time.Hour), d.ScheduledAt, time.Minute)
		}
		for _, j := range handed {
			require.Equal(t, mine, j.Queue)
			require.Equal(t, ev, gjsonString(t, j.EncodedArgs, "event_id"))
			require.Equal(t, job.SnoozeDirect, gjsonString(t, j.Metadata, "output", "snooze_reason"), "the note says so, for ListDeliveries and the outcome")
		}

		// The same event again: nothing new, nothing handed off.
		_, again := b.inlineTxHanded(t, ev)
		require.Empty(t, again, "a duplicate is never handed off")
	})

	t.Run("APreparerReadsInTheTransactionAndStartsWithWhatItRead", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ep := b.insertEndpoint(t, []string{"*"}, endpointOpts{})
		h := &preparingHandoff{handoff: handoff{accept: func(string) bool { return true }}}
		b.inline.WithHandoff(h)
		ev := b.insertEvent(t, ownerID, "code.issued", "code://1", "{}")
		ctx := context.Background()
		var handed *Handed
		require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
			e := &webhook.Event{ID: ev, OwnerID: ownerID, Type: "code.issued", Subject: "code://1", Data: []byte("{}")}
			plan, err := b.inline.Plan(ctx, tx, []*webhook.Event{e}, nil)
			if err != nil {
				return err
			}
			// The caller sends the read with its next statement.
			batch := &pgx.Batch{}
			b.inline.QueueHandoffRead(batch, plan)
			if err := tx.SendBatch(ctx, batch).Close(); err != nil {
				return err
			}
			_, handed, err = b.inline.EnqueueTx(ctx, tx, b.client, plan, []Stored{{Index: 0, Event: e}})
			return err
		}))
		require.Equal(t, 1, handed.Len())
		require.Equal(t, []string{ep}, h.asked, "asked for the endpoint the plan hands off to")
		require.Equal(t, 1, h.found, "read in the transaction")
		b.inline.Start(handed)
		require.Equal(t, "prepared", h.prepared, "started with what it read")
		require.Zero(t, h.started)
	})

	t.Run("APreparerLeavesManyEndpointsToStart", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.insertEndpoints(t, prepareInTxMax+1, []string{"*"}, endpointOpts{})
		h := &preparingHandoff{handoff: handoff{accept: func(string) bool { return true }}}
		b.inline.WithHandoff(h)
		_, handed := b.inlineTxHanded(t, b.insertEvent(t, ownerID, "code.issued", "code://1", "{}"))
		require.Len(t, handed, prepareInTxMax+1)
		require.Empty(t, h.asked, "not read in the transaction: the read after it is shared by many")
	})

	t.Run("CommitsWithRiversInsertOnlyWhenNothingIsDueAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.insertEndpoint(t, []string{"*"}, endpointOpts{})
		ctx := context.Background()
		enqueue := func(t *testing.T, accept bool) bool {
			t.Helper()
			b.inline.WithHandoff(&handoff{accept: func(string) bool { return accept }})
			e := &webhook.Event{ID: b.insertEvent(t, ownerID, "code.issued", "code://1", "{}"), OwnerID: ownerID, Type: "code.issued", Subject: "code://1", Data: []byte("{}")}
			var armed *lastStatementTx
			require.NoError(t, pgx.BeginFunc(ctx, b.db.Pool, func(tx pgx.Tx) error {
				armed = &lastStatementTx{Tx: tx}
				plan, err := b.inline.Plan(ctx, tx, []*webhook.Event{e}, nil)
				if err != nil {
					return err
				}
				_, _, err = b.inline.EnqueueTx(ctx, armed, b.client, plan, []Stored{{Index: 0, Event: e}})
				return err
			}))
			return armed.armed
		}
		require.True(t, enqueue(t, true), "handed off, scheduled an hour out: River's insert is the last statement")
		require.False(t, enqueue(t, false), "due now: River notifies the queue after its insert")
	})

	t.Run("TellsTheHandoffWhatItsPlanHandsOffPerEndpoint", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ep1 := b.insertEndpoint(t, []string{"*"}, endpointOpts{})
		ep2 := b.insertEndpoint(t, []string{"code.*"}, endpointOpts{})
		// Accepts two per endpoint per plan, whatever the queue: the third
		// delivery to ep1 is left to River.
		h := &handoff{accept: func(string) bool { return true }}
		h.accept = func(string) bool {
			last := h.planned[len(h.planned)-1]
			return !strings.HasSuffix(last, ":2")
		}
		b.inline.WithHandoff(h)
		ev1 := b.insertEvent(t, ownerID, "code.issued", "code://1", "{}")
		ev2 := b.insertEvent(t, ownerID, "booking.created", "booking://2", "{}")
		ev3 := b.insertEvent(t, ownerID, "code.issued", "code://3", "{}")

		_, handed := b.inlineTxHanded(t, ev1, ev2, ev3)
		// Endpoints are read in id order; each endpoint's offers count up.
		require.ElementsMatch(t, []string{ep1 + ":0", ep2 + ":0", ep1 + ":1", ep1 + ":2", ep2 + ":1"}, h.planned,
			"each offer counts the plan's earlier hand-offs to its endpoint")
		require.Len(t, handed, 4, "the third to ep1 went to River")
		require.Equal(t, []int{0, 1, 2, 3}, h.totals[:4], "and every earlier hand-off of the plan, to any endpoint")
	})

	t.Run("LeavesWaitingAndOrderedDeliveriesToRiver", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		failing := b.insertEndpoint(t, []string{"*"}, endpointOpts{failing: true})
		ordered := b.insertEndpoint(t, []string{"*"}, endpointOpts{})
		paused := b.insertEndpoint(t, []string{"*"}, endpointOpts{})
		_, err := b.db.Pool.Exec(context.Background(), `UPDATE webhook_endpoints SET ordered = true WHERE id = $1`, ordered)
		require.NoError(t, err)
		_, err = b.db.Pool.Exec(context.Background(), `UPDATE webhook_endpoints SET paused_until = now() + interval '1 minute' WHERE id = $1`, paused)
		require.NoError(t, err)
		b.inline.WithHandoff(&handoff{accept: func(string) bool { return true }})

		_, handed := b.inlineTxHanded(t, b.insertEvent(t, ownerID, "code.issued", "code://1", "{}"))
		require.Empty(t, handed, "the cool-down, the order and the pause decide when these go")
		got := deliveries(t, b.db.Pool)
		require.Len(t, got, 3)
		for _, d := range got {
			if d.EndpointID == failing {
				require.WithinDuration(t, time.Now().Add(job.FailingCooldown), d.ScheduledAt, time.Minute, "the cool-down, not the hold")
			}
		}
	})
}

// gjsonString reads the string at path in a JSON document.
func gjsonString(t *testing.T, doc []byte, path ...string) string {
	t.Helper()
	var v any
	require.NoError(t, json.Unmarshal(doc, &v))
	for _, k := range path {
		m, ok := v.(map[string]any)
		require.True(t, ok, "%s in %s", k, doc)
		v = m[k]
	}
	s, _ := v.(string)
	return s
}

func countFanoutJobs(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE kind = $1`, job.KindFanout).Scan(&n))
	return n
}
