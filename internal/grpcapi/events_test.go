package grpcapi

import (
	"context"
	"math"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/ingest"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// testProtoEvent returns a valid, deliverable event as a publisher sends it.
func testProtoEvent(id string) *webhooksv1.Event {
	return &webhooksv1.Event{
		Id:         id,
		OwnerId:    "owner_1",
		Type:       event.TypeNoteChanged,
		Subject:    "wiki://software/project/standmeet/architecture",
		OccurredAt: timestamppb.New(testOccurredAt),
		Data:       jsonStruct(`{"op":"updated","note_id":"n1","published":true,"was_published":true}`),
	}
}

// jsonStruct is a JSON object as a JSON client (grpcurl) sends Event.data.
func jsonStruct(data string) *structpb.Struct {
	s := &structpb.Struct{}
	if err := protojson.Unmarshal([]byte(data), s); err != nil {
		panic("jsonStruct: " + err.Error())
	}
	return s
}

func TestDataJSON(t *testing.T) {
	t.Parallel()

	t.Run("CompactSortedStable", func(t *testing.T) {
		t.Parallel()
		s := jsonStruct(`{"z": 1, "plan": "pro", "n": {"b": [1.5, true, null], "a": "<&>"}, "big": 1e21}`)
		for range 20 {
			got, err := dataJSON(s)
			require.NoError(t, err)
			//nolint:testifylint // the exact bytes are the point, not JSON equality
			require.Equal(t, `{"big":1e+21,"n":{"a":"<&>","b":[1.5,true,null]},"plan":"pro","z":1}`, string(got))
		}
	})

	t.Run("UnsetIsEmptyObject", func(t *testing.T) {
		t.Parallel()
		got, err := dataJSON(nil)
		require.NoError(t, err)
		require.JSONEq(t, `{}`, string(got))
	})
}

// requireInvalidField asserts err is InvalidArgument naming field in its
// message and as the first violation of its BadRequest detail.
func requireInvalidField(t *testing.T, err error, field string) *errdetails.BadRequest {
	t.Helper()

	st, ok := status.FromError(err)
	require.True(t, ok, "not a status: %v", err)
	require.Equal(t, codes.InvalidArgument, st.Code(), "status: %v", st)
	require.Contains(t, st.Message(), field)
	var badRequest *errdetails.BadRequest
	for _, d := range st.Details() {
		if br, ok := d.(*errdetails.BadRequest); ok {
			badRequest = br
		}
	}
	require.NotNil(t, badRequest, "no BadRequest detail in %v", st)
	require.NotEmpty(t, badRequest.GetFieldViolations())
	require.Equal(t, field, badRequest.GetFieldViolations()[0].GetField())
	require.NotEmpty(t, badRequest.GetFieldViolations()[0].GetDescription())
	return badRequest
}

func TestEventServer_Publish(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	type testBundle struct {
		db      *dbtest.DB
		metrics *metrics.Metrics
		server  webhooksv1.EventServiceServer
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()

		db := dbtest.New(t)
		store, m := newTestStore(t, db)
		return &testBundle{db: db, metrics: m, server: NewEventServer(store, testLogger())}
	}

	t.Run("StoresEventAndOneFanoutJob", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		resp, err := bundle.server.Publish(ctx, &webhooksv1.PublishRequest{Event: testProtoEvent("evt_1")})
		require.NoError(t, err)
		require.Equal(t, "evt_1", resp.GetEventId())
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED, resp.GetOutcome())

		stored := testfactory.ReadEvent(t.Context(), t, bundle.db.Pool, "evt_1")
		require.Equal(t, "owner_1", stored.OwnerID)
		require.EqualValues(t, ingest.SourceGRPC, stored.Source)
		require.True(t, testOccurredAt.Equal(stored.OccurredAt))
		require.JSONEq(t, `{"op":"updated","note_id":"n1","published":true,"was_published":true}`, stored.Data)
		require.Equal(t, 1, testfactory.CountFanoutJobs(t.Context(), t, bundle.db.Pool, ""))
		require.Equal(t, 1, testfactory.CountFanoutJobs(t.Context(), t, bundle.db.Pool, "evt_1"))
		require.Equal(t, 1, ingestCount(bundle.metrics, ingest.OutcomeStored.String()))
	})

	t.Run("AWeightOutOfRangeIsInvalid", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.server.Publish(ctx, &webhooksv1.PublishRequest{Event: testProtoEvent("evt_w"), Weight: 1000})
		requireInvalidField(t, err, "weight")
		resp, err := bundle.server.Publish(ctx, &webhooksv1.PublishRequest{Event: testProtoEvent("evt_w"), Weight: 0.1})
		require.NoError(t, err)
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED, resp.GetOutcome())
		_, err = bundle.server.PublishBatch(ctx, &webhooksv1.PublishBatchRequest{Events: []*webhooksv1.Event{testProtoEvent("evt_w2")}, Weight: -1})
		requireInvalidField(t, err, "weight")
	})

	t.Run("MissingIDAndTimeFilledIn", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		e := testProtoEvent("")
		e.OccurredAt = nil
		before := time.Now().Truncate(time.Microsecond)
		resp, err := bundle.server.Publish(ctx, &webhooksv1.PublishRequest{Event: e})
		require.NoError(t, err)
		after := time.Now()
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED, resp.GetOutcome())
		id, err := uuid.Parse(resp.GetEventId())
		require.NoError(t, err)
		require.Equal(t, uuid.Version(7), id.Version())
		at := resp.GetOccurredAt().AsTime()
		require.False(t, at.Before(before) || at.After(after), "%v not within [%v, %v]", at, before, after)

		stored := testfactory.ReadEvent(t.Context(), t, bundle.db.Pool, resp.GetEventId())
		require.True(t, at.Equal(stored.OccurredAt), "the response's time is the stored one")

		// Two calls without an id are two events.
		e2 := testProtoEvent("")
		resp2, err := bundle.server.Publish(ctx, &webhooksv1.PublishRequest{Event: e2})
		require.NoError(t, err)
		require.NotEqual(t, resp.GetEventId(), resp2.GetEventId())
		require.True(t, testOccurredAt.Equal(resp2.GetOccurredAt().AsTime()), "a given time comes back as given")
	})

	t.Run("RetryWithIDButNoTimeIsADuplicate", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		e := testProtoEvent("evt_1")
		e.OccurredAt = nil
		first, err := bundle.server.Publish(ctx, &webhooksv1.PublishRequest{Event: e})
		require.NoError(t, err)
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED, first.GetOutcome())
		again, err := bundle.server.Publish(ctx, &webhooksv1.PublishRequest{Event: e})
		require.NoError(t, err)
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DUPLICATE, again.GetOutcome())
		require.Equal(t, "evt_1", again.GetEventId())
		require.True(t, first.GetOccurredAt().AsTime().Equal(again.GetOccurredAt().AsTime()), "the first call's time")
		require.Equal(t, 1, testfactory.CountFanoutJobs(t.Context(), t, bundle.db.Pool, "evt_1"))

		// With a time of its own, the id's stored time must match.
		e.OccurredAt = timestamppb.New(first.GetOccurredAt().AsTime().Add(time.Minute))
		_, err = bundle.server.Publish(ctx, &webhooksv1.PublishRequest{Event: e})
		require.Equal(t, codes.AlreadyExists, status.Code(err))
	})

	t.Run("DataStructIsStoredAsJSON", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		e := testProtoEvent("evt_1")
		// Nested values cannot reach the store: every type's data schema is
		// flat and closed (docs/events.md).
		e.Data = jsonStruct(`{"was_published": false, "op": "updated", "note_id": "<&>é", "published": true}`)
		_, err := bundle.server.Publish(ctx, &webhooksv1.PublishRequest{Event: e})
		require.NoError(t, err)
		require.JSONEq(t, `{"note_id":"<&>é","op":"updated","published":true,"was_published":false}`, testfactory.ReadEvent(t.Context(), t, bundle.db.Pool, "evt_1").Data)
		// The same Struct again is the same event, not a conflict.
		resp, err := bundle.server.Publish(ctx, &webhooksv1.PublishRequest{Event: e})
		require.NoError(t, err)
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DUPLICATE, resp.GetOutcome())
	})

	t.Run("JSONClientSendsDataAsObject", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		// What grpcurl sends, decoded the way it decodes it.
		req := &webhooksv1.PublishRequest{}
		require.NoError(t, protojson.Unmarshal([]byte(`{"event":{"id":"evt_json","owner_id":"owner_1",
			"type":"gas.refilled","subject":"gas://x","occurred_at":"2026-11-30T10:00:00Z",
			"data":{"amount":5000,"balance":3}}}`), req))
		req.Event.OccurredAt = timestamppb.New(testOccurredAt)
		_, err := bundle.server.Publish(ctx, req)
		require.NoError(t, err)
		// A Struct holds numbers as doubles; whole ones still pass the schema's
		// "integer".
		require.JSONEq(t, `{"amount":5000,"balance":3}`, testfactory.ReadEvent(t.Context(), t, bundle.db.Pool, "evt_json").Data)
	})

	t.Run("EmptyDataIsEmptyObject", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		e := testProtoEvent("evt_1")
		e.Type = "code.issued" // a type whose data has no required property
		e.Data = nil
		_, err := bundle.server.Publish(ctx, &webhooksv1.PublishRequest{Event: e})
		require.NoError(t, err)
		require.JSONEq(t, `{}`, testfactory.ReadEvent(t.Context(), t, bundle.db.Pool, "evt_1").Data)
	})

	t.Run("RepublishIsIdempotent", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.server.Publish(ctx, &webhooksv1.PublishRequest{Event: testProtoEvent("evt_1")})
		require.NoError(t, err)
		resp, err := bundle.server.Publish(ctx, &webhooksv1.PublishRequest{Event: testProtoEvent("evt_1")})
		require.NoError(t, err)
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DUPLICATE, resp.GetOutcome())

		require.Equal(t, 1, testfactory.CountEvents(t.Context(), t, bundle.db.Pool))
		require.Equal(t, 1, testfactory.CountFanoutJobs(t.Context(), t, bundle.db.Pool, "evt_1"))
	})

	t.Run("ConflictingDuplicateIsAlreadyExists", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.server.Publish(ctx, &webhooksv1.PublishRequest{Event: testProtoEvent("evt_1")})
		require.NoError(t, err)

		changed := testProtoEvent("evt_1")
		changed.Data = jsonStruct(`{"op":"deleted"}`)
		_, err = bundle.server.Publish(ctx, &webhooksv1.PublishRequest{Event: changed})
		require.Equal(t, codes.AlreadyExists, status.Code(err), "error: %v", err)
		require.Contains(t, status.Convert(err).Message(), `"evt_1"`)
		require.JSONEq(t, `{"op":"updated","note_id":"n1","published":true,"was_published":true}`, testfactory.ReadEvent(t.Context(), t, bundle.db.Pool, "evt_1").Data)
		require.Equal(t, 1, testfactory.CountFanoutJobs(t.Context(), t, bundle.db.Pool, ""))
	})

	t.Run("UnknownTypeAcceptedNotStored", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		e := testProtoEvent("evt_1")
		e.Type = "billing.invoice.computed"
		resp, err := bundle.server.Publish(ctx, &webhooksv1.PublishRequest{Event: e})
		require.NoError(t, err)
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DROPPED_UNKNOWN, resp.GetOutcome())
		require.Equal(t, 0, testfactory.CountEvents(t.Context(), t, bundle.db.Pool))
		require.Equal(t, 0, testfactory.CountFanoutJobs(t.Context(), t, bundle.db.Pool, ""))
		require.Equal(t, 1, ingestCount(bundle.metrics, ingest.OutcomeDroppedUnknown.String()))
	})

	t.Run("UnknownTypeRefusedWhenStrict", func(t *testing.T) {
		t.Parallel()
		db := dbtest.New(t)
		store, _ := newTestStoreConfig(t, db, ingest.StoreConfig{UnknownTypes: ingest.UnknownTypesRefuse})
		server := NewEventServer(store, testLogger())

		e := testProtoEvent("evt_1")
		e.Type = "corpus.note.chnaged"
		_, err := server.Publish(ctx, &webhooksv1.PublishRequest{Event: e})
		br := requireInvalidField(t, err, "event.type")
		require.Contains(t, br.GetFieldViolations()[0].GetDescription(), "no event catalog")
		require.Equal(t, 0, testfactory.CountEvents(t.Context(), t, db.Pool))
	})

	t.Run("RawSubjectAcceptedNotStored", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		e := testProtoEvent("evt_1")
		e.Subject = "raw://private/diary"
		resp, err := bundle.server.Publish(ctx, &webhooksv1.PublishRequest{Event: e})
		require.NoError(t, err)
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DROPPED_RAW, resp.GetOutcome())
		require.Equal(t, 0, testfactory.CountEvents(t.Context(), t, bundle.db.Pool))
		require.Equal(t, 0, testfactory.CountFanoutJobs(t.Context(), t, bundle.db.Pool, ""))
		require.Equal(t, 1, ingestCount(bundle.metrics, ingest.OutcomeDroppedRaw.String()))
	})

	t.Run("DetailsSurviveTheWire", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		lis := bufconn.Listen(1 << 20)
		srv := grpc.NewServer()
		webhooksv1.RegisterEventServiceServer(srv, bundle.server)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = srv.Serve(lis)
		}()
		t.Cleanup(func() {
			srv.Stop()
			<-done
		})
		conn, err := grpc.NewClient("passthrough:///bufnet",
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		client := webhooksv1.NewEventServiceClient(conn)

		e := testProtoEvent("evt_1")
		e.Subject = "no-scheme"
		_, err = client.Publish(ctx, &webhooksv1.PublishRequest{Event: e})
		requireInvalidField(t, err, "event.subject")

		resp, err := client.Publish(ctx, &webhooksv1.PublishRequest{Event: testProtoEvent("evt_1")})
		require.NoError(t, err)
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED, resp.GetOutcome())
	})
}

func TestEventServer_PublishBatch(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	type testBundle struct {
		db      *dbtest.DB
		metrics *metrics.Metrics
		server  webhooksv1.EventServiceServer
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()

		db := dbtest.New(t)
		store, m := newTestStore(t, db)
		return &testBundle{db: db, metrics: m, server: NewEventServer(store, testLogger())}
	}

	t.Run("MissingIDsAndTimesFilledIn", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		a, b, c := testProtoEvent(""), testProtoEvent(""), testProtoEvent("evt_given")
		a.OccurredAt, c.OccurredAt = nil, nil
		resp, err := bundle.server.PublishBatch(ctx, &webhooksv1.PublishBatchRequest{Events: []*webhooksv1.Event{a, b, c}})
		require.NoError(t, err)
		require.Len(t, resp.GetResults(), 3)
		require.NotEqual(t, resp.GetResults()[0].GetEventId(), resp.GetResults()[1].GetEventId(), "one new id each")
		require.Equal(t, "evt_given", resp.GetResults()[2].GetEventId())
		for i, r := range resp.GetResults() {
			require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED, r.GetOutcome(), i)
			require.NotNil(t, r.GetOccurredAt(), i)
			stored := testfactory.ReadEvent(t.Context(), t, bundle.db.Pool, r.GetEventId())
			require.True(t, r.GetOccurredAt().AsTime().Equal(stored.OccurredAt), i)
		}
		require.True(t, testOccurredAt.Equal(resp.GetResults()[1].GetOccurredAt().AsTime()), "a given time as given")

		// The batch again: the event with a given id is a duplicate (its
		// time was filled in both times), the id-less ones new events.
		a2, b2, c2 := testProtoEvent(""), testProtoEvent(""), testProtoEvent("evt_given")
		a2.OccurredAt, c2.OccurredAt = nil, nil
		again, err := bundle.server.PublishBatch(ctx, &webhooksv1.PublishBatchRequest{Events: []*webhooksv1.Event{a2, b2, c2}})
		require.NoError(t, err)
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DUPLICATE, again.GetResults()[2].GetOutcome())
		require.True(t, resp.GetResults()[2].GetOccurredAt().AsTime().Equal(again.GetResults()[2].GetOccurredAt().AsTime()))
		require.Equal(t, 5, testfactory.CountEvents(t.Context(), t, bundle.db.Pool))
	})

	t.Run("ResultsInRequestOrder", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		internal := testProtoEvent("evt_2")
		internal.Type = "billing.invoice.computed"
		raw := testProtoEvent("evt_4")
		raw.Subject = "raw://x"
		resp, err := bundle.server.PublishBatch(ctx, &webhooksv1.PublishBatchRequest{Events: []*webhooksv1.Event{
			testProtoEvent("evt_3"), internal, testProtoEvent("evt_1"), raw, testProtoEvent("evt_3"),
		}})
		require.NoError(t, err)

		var got []string
		for _, r := range resp.GetResults() {
			got = append(got, r.GetEventId()+":"+r.GetOutcome().String())
		}
		require.Equal(t, []string{
			"evt_3:PUBLISH_OUTCOME_STORED",
			"evt_2:PUBLISH_OUTCOME_DROPPED_UNKNOWN",
			"evt_1:PUBLISH_OUTCOME_STORED",
			"evt_4:PUBLISH_OUTCOME_DROPPED_RAW",
			"evt_3:PUBLISH_OUTCOME_DUPLICATE",
		}, got)
		require.Equal(t, 2, testfactory.CountEvents(t.Context(), t, bundle.db.Pool))
		require.Equal(t, 1, testfactory.CountFanoutJobs(t.Context(), t, bundle.db.Pool, "evt_1"))
		require.Equal(t, 1, testfactory.CountFanoutJobs(t.Context(), t, bundle.db.Pool, "evt_3"))
		require.Equal(t, 2, testfactory.CountFanoutJobs(t.Context(), t, bundle.db.Pool, ""))
	})

	t.Run("EmptyBatchIsNoOp", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		resp, err := bundle.server.PublishBatch(ctx, &webhooksv1.PublishBatchRequest{})
		require.NoError(t, err)
		require.Empty(t, resp.GetResults())
	})

	t.Run("ConflictNamesIndexAndStoresNothing", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.server.Publish(ctx, &webhooksv1.PublishRequest{Event: testProtoEvent("evt_1")})
		require.NoError(t, err)

		changed := testProtoEvent("evt_1")
		changed.OwnerId = "owner_2"
		_, err = bundle.server.PublishBatch(ctx, &webhooksv1.PublishBatchRequest{Events: []*webhooksv1.Event{
			testProtoEvent("evt_2"), changed,
		}})
		require.Equal(t, codes.AlreadyExists, status.Code(err), "error: %v", err)
		msg := status.Convert(err).Message()
		require.Contains(t, msg, "events[1].id")
		require.Contains(t, msg, `"evt_1"`)
		require.Equal(t, 1, testfactory.CountEvents(t.Context(), t, bundle.db.Pool))
		require.Equal(t, 0, testfactory.CountFanoutJobs(t.Context(), t, bundle.db.Pool, "evt_2"))
	})

	t.Run("TooManyEvents", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		events := make([]*webhooksv1.Event, MaxBatchSize+1)
		for i := range events {
			events[i] = testProtoEvent("evt_" + strconv.Itoa(i))
		}
		_, err := bundle.server.PublishBatch(ctx, &webhooksv1.PublishBatchRequest{Events: events})
		requireInvalidField(t, err, "events")
		require.Equal(t, 0, testfactory.CountEvents(t.Context(), t, bundle.db.Pool))
	})

	t.Run("MaxEventsAccepted", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		events := make([]*webhooksv1.Event, MaxBatchSize)
		for i := range events {
			events[i] = testProtoEvent("evt_" + strconv.Itoa(i))
		}
		resp, err := bundle.server.PublishBatch(ctx, &webhooksv1.PublishBatchRequest{Events: events})
		require.NoError(t, err)
		require.Len(t, resp.GetResults(), MaxBatchSize)
		require.Equal(t, MaxBatchSize, testfactory.CountEvents(t.Context(), t, bundle.db.Pool))
		require.Equal(t, MaxBatchSize, testfactory.CountFanoutJobs(t.Context(), t, bundle.db.Pool, ""))
	})

	t.Run("OneBadItemStoresNothing", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		events := []*webhooksv1.Event{testProtoEvent("evt_0"), testProtoEvent("evt_1"), testProtoEvent("evt_2"), testProtoEvent("evt_3"), testProtoEvent("evt_4")}
		events[3].Subject = ""
		_, err := bundle.server.PublishBatch(ctx, &webhooksv1.PublishBatchRequest{Events: events})
		requireInvalidField(t, err, "events[3].subject")
		require.Equal(t, 0, testfactory.CountEvents(t.Context(), t, bundle.db.Pool))
		require.Equal(t, 0, testfactory.CountFanoutJobs(t.Context(), t, bundle.db.Pool, ""))
		require.Equal(t, 1, ingestCount(bundle.metrics, "invalid"))
	})

	t.Run("EveryBadItemReported", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		events := []*webhooksv1.Event{testProtoEvent("evt_0"), testProtoEvent("evt.1"), testProtoEvent("evt_2"), testProtoEvent("evt_3")}
		events[3].Data = jsonStruct(`{"k":"` + strings.Repeat("a", webhook.MaxDataBytes) + `"}`)
		_, err := bundle.server.PublishBatch(ctx, &webhooksv1.PublishBatchRequest{Events: events})
		badRequest := requireInvalidField(t, err, "events[1].id")
		require.Len(t, badRequest.GetFieldViolations(), 2)
		require.Equal(t, "events[3].data", badRequest.GetFieldViolations()[1].GetField())
		require.Contains(t, status.Convert(err).Message(), "and 1 more")
		require.Equal(t, 0, testfactory.CountEvents(t.Context(), t, bundle.db.Pool))
	})

	t.Run("NilItem", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.server.PublishBatch(ctx, &webhooksv1.PublishBatchRequest{Events: []*webhooksv1.Event{testProtoEvent("evt_0"), nil}})
		requireInvalidField(t, err, "events[1]")
	})
}

// TestEventServer_BadInput checks every rule of the thin event over Publish:
// the exact code, the field named in the message and in the BadRequest detail,
// and nothing stored.
func TestEventServer_BadInput(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	// Invalid input never reaches the database, so the cases share one schema
	// (which also proves none of them stored anything).
	db := dbtest.New(t)

	type testBundle struct {
		metrics *metrics.Metrics
		server  webhooksv1.EventServiceServer
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()

		store, m := newTestStore(t, db)
		return &testBundle{metrics: m, server: NewEventServer(store, testLogger())}
	}

	requireRejected := func(t *testing.T, mutate func(e *webhooksv1.Event), field string) {
		t.Helper()
		bundle := setup(t)

		e := testProtoEvent("evt_bad")
		mutate(e)
		_, err := bundle.server.Publish(ctx, &webhooksv1.PublishRequest{Event: e})
		requireInvalidField(t, err, field)
		require.Equal(t, 1, ingestCount(bundle.metrics, "invalid"))
		require.Equal(t, 0, testfactory.CountEvents(t.Context(), t, db.Pool))
		require.Equal(t, 0, testfactory.CountFanoutJobs(t.Context(), t, db.Pool, ""))
	}

	t.Run("MissingEvent", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		_, err := bundle.server.Publish(ctx, &webhooksv1.PublishRequest{})
		requireInvalidField(t, err, "event")
	})

	t.Run("IDWithDot", func(t *testing.T) {
		t.Parallel()
		requireRejected(t, func(e *webhooksv1.Event) { e.Id = "evt.1" }, "event.id")
	})

	t.Run("IDTooLong", func(t *testing.T) {
		t.Parallel()
		requireRejected(t, func(e *webhooksv1.Event) { e.Id = strings.Repeat("a", webhook.MaxIDLen+1) }, "event.id")
	})

	t.Run("EmptyOwnerID", func(t *testing.T) {
		t.Parallel()
		requireRejected(t, func(e *webhooksv1.Event) { e.OwnerId = "" }, "event.owner_id")
	})

	t.Run("BadType", func(t *testing.T) {
		t.Parallel()
		requireRejected(t, func(e *webhooksv1.Event) { e.Type = "Corpus.Note" }, "event.type")
	})

	t.Run("EmptyType", func(t *testing.T) {
		t.Parallel()
		requireRejected(t, func(e *webhooksv1.Event) { e.Type = "" }, "event.type")
	})

	t.Run("EmptySubject", func(t *testing.T) {
		t.Parallel()
		requireRejected(t, func(e *webhooksv1.Event) { e.Subject = "" }, "event.subject")
	})

	t.Run("SubjectWithoutScheme", func(t *testing.T) {
		t.Parallel()
		requireRejected(t, func(e *webhooksv1.Event) { e.Subject = "software/project/x" }, "event.subject")
	})

	t.Run("SubjectInvalidUTF8", func(t *testing.T) {
		t.Parallel()
		// Only reachable in process: protobuf refuses to marshal it.
		requireRejected(t, func(e *webhooksv1.Event) { e.Subject = "wiki://\xff\xfe" }, "event.subject")
	})

	t.Run("SubjectTooLong", func(t *testing.T) {
		t.Parallel()
		requireRejected(t, func(e *webhooksv1.Event) { e.Subject = "wiki://" + strings.Repeat("a", webhook.MaxSubjectLen) }, "event.subject")
	})

	t.Run("FarFutureOccurredAt", func(t *testing.T) {
		t.Parallel()
		requireRejected(t, func(e *webhooksv1.Event) { e.OccurredAt = timestamppb.New(time.Now().Add(2 * time.Hour)) }, "event.occurred_at")
	})

	t.Run("AncientOccurredAt", func(t *testing.T) {
		t.Parallel()
		requireRejected(t, func(e *webhooksv1.Event) { e.OccurredAt = timestamppb.New(time.Unix(0, 0)) }, "event.occurred_at")
	})

	t.Run("OutOfRangeOccurredAt", func(t *testing.T) {
		t.Parallel()
		requireRejected(t, func(e *webhooksv1.Event) { e.OccurredAt = &timestamppb.Timestamp{Seconds: 1e12} }, "event.occurred_at")
	})

	t.Run("DataNaN", func(t *testing.T) {
		t.Parallel()
		requireRejected(t, func(e *webhooksv1.Event) {
			e.Data = &structpb.Struct{Fields: map[string]*structpb.Value{"k": structpb.NewNumberValue(math.NaN())}}
		}, "event.data")
	})

	t.Run("DataTooBig", func(t *testing.T) {
		t.Parallel()
		requireRejected(t, func(e *webhooksv1.Event) {
			e.Data = jsonStruct(`{"k":"` + strings.Repeat("a", webhook.MaxDataBytes) + `"}`)
		}, "event.data")
	})

	t.Run("DataBreaksSchema", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)

		e := testProtoEvent("evt_bad")
		e.Data = jsonStruct(`{"op":"updated","published":"yes"}`)
		_, err := bundle.server.Publish(ctx, &webhooksv1.PublishRequest{Event: e})
		br := requireInvalidField(t, err, "event.data.published")
		require.Equal(t, "expected boolean", br.GetFieldViolations()[0].GetDescription())
		require.Contains(t, status.Convert(err).Message(), "invalid event.data.published: expected boolean")
		require.Equal(t, 1, ingestCount(bundle.metrics, "invalid"))
	})
}
