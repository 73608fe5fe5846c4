package grpcapi

import (
	"context"
	"math"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/auth"
	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Bad input for the ingest side: every field of Publish and
// PublishBatch with each class of wrong value, the tokens, and malformed
// outbox rows. Each case gets one exact status naming the field, and leaves
// nothing behind: no event, no fanout job.

const (
	badInputPublisherToken = "badinput-publisher-token-0123456789abcdef0123"
	badInputAdminToken     = "badinput-admin-token-0123456789abcdef0123"
)

// injections are hostile strings a form or a compromised publisher might
// send. Where they are refused, the refusal must not echo them; nowhere may
// they be executed.
var injections = []string{
	"'; DROP TABLE events; --",
	"<script>alert(1)</script>",
	"../../etc/passwd",
	"%00",
}

// structData is the data object {key: v}.
func structData(key string, v *structpb.Value) *structpb.Struct {
	return &structpb.Struct{Fields: map[string]*structpb.Value{key: v}}
}

// publishWire is the EventService behind the real auth interceptors, over
// bufconn, on db.
type publishWire struct {
	metrics *metrics.Metrics
	server  webhooksv1.EventServiceServer // in process, for what protobuf cannot marshal
	client  webhooksv1.EventServiceClient // presents the publisher token
	raw     webhooksv1.EventServiceClient // presents no token of its own
}

func newPublishWire(t *testing.T, db *dbtest.DB) *publishWire {
	t.Helper()
	store, m := newTestStore(t, db)
	server := NewEventServer(store, testLogger())
	authn, err := auth.New(auth.Tokens{Publisher: []string{badInputPublisherToken}, Admin: []string{badInputAdminToken}}, testLogger())
	require.NoError(t, err)

	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(ServerOptions(authn)...)
	webhooksv1.RegisterEventServiceServer(srv, server)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	dial := func(opts ...grpc.DialOption) webhooksv1.EventServiceClient {
		opts = append(opts,
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
			grpc.WithTransportCredentials(insecure.NewCredentials()))
		conn, err := grpc.NewClient("passthrough:///bufnet", opts...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = conn.Close() })
		return webhooksv1.NewEventServiceClient(conn)
	}
	withPublisher := grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+badInputPublisherToken), method, req, reply, cc, opts...)
	})
	return &publishWire{metrics: m, server: server, client: dial(withPublisher), raw: dial()}
}

// requireNothingStored: no event and no fanout job in db.
func requireNothingStored(t *testing.T, db *dbtest.DB) {
	t.Helper()
	require.Zero(t, testfactory.CountEvents(t.Context(), t, db.Pool), "no event stored")
	require.Zero(t, testfactory.CountFanoutJobs(t.Context(), t, db.Pool, ""), "no fanout enqueued")
}

func TestPublishBadInput(t *testing.T) {
	t.Parallel()

	// Nothing valid is ever published here, so every case shares one schema:
	// that also proves no case left anything behind for another to see.
	db := dbtest.New(t)

	type testCase struct {
		name   string
		mutate func(*webhooksv1.Event)
		field  string
		// inProcess: protobuf refuses to marshal the value (invalid UTF-8 in a
		// string field), so only a call in process can carry it.
		inProcess bool
	}
	long := func(n int) string { return strings.Repeat("a", n) }
	cases := []testCase{
		// id
		{"IDTooLong", func(e *webhooksv1.Event) { e.Id = long(webhook.MaxIDLen + 1) }, "event.id", false},
		{"IDWithDot", func(e *webhooksv1.Event) { e.Id = "evt.1" }, "event.id", false},
		{"IDWithSpace", func(e *webhooksv1.Event) { e.Id = "evt 1" }, "event.id", false},
		{"IDBracedUUID", func(e *webhooksv1.Event) { e.Id = "{0190f3a4-6b7c-7d8e-9f00-112233445566}" }, "event.id", false},
		{"IDNonASCII", func(e *webhooksv1.Event) { e.Id = "évt_1" }, "event.id", false},
		{"IDInvalidUTF8", func(e *webhooksv1.Event) { e.Id = "evt_\xff" }, "event.id", true},
		{"IDSQLInjection", func(e *webhooksv1.Event) { e.Id = injections[0] }, "event.id", false},
		{"IDScript", func(e *webhooksv1.Event) { e.Id = injections[1] }, "event.id", false},
		{"IDPathTraversal", func(e *webhooksv1.Event) { e.Id = injections[2] }, "event.id", false},
		{"IDPercentNUL", func(e *webhooksv1.Event) { e.Id = injections[3] }, "event.id", false},
		{"IDNUL", func(e *webhooksv1.Event) { e.Id = "evt\x00" }, "event.id", false},
		// owner_id
		{"OwnerEmpty", func(e *webhooksv1.Event) { e.OwnerId = "" }, "event.owner_id", false},
		{"OwnerTooLong", func(e *webhooksv1.Event) { e.OwnerId = long(webhook.MaxOwnerIDLen + 1) }, "event.owner_id", false},
		{"OwnerWithSpace", func(e *webhooksv1.Event) { e.OwnerId = "owner 1" }, "event.owner_id", false},
		{"OwnerNonASCII", func(e *webhooksv1.Event) { e.OwnerId = "ownér" }, "event.owner_id", false},
		{"OwnerControl", func(e *webhooksv1.Event) { e.OwnerId = "owner\x7f" }, "event.owner_id", false},
		{"OwnerInvalidUTF8", func(e *webhooksv1.Event) { e.OwnerId = "owner\xc3" }, "event.owner_id", true},
		{"OwnerSQLInjection", func(e *webhooksv1.Event) { e.OwnerId = injections[0] }, "event.owner_id", false},
		// type
		{"TypeEmpty", func(e *webhooksv1.Event) { e.Type = "" }, "event.type", false},
		{"TypeTooLong", func(e *webhooksv1.Event) { e.Type = "a." + long(webhook.MaxTypeLen) }, "event.type", false},
		{"TypeUpperCase", func(e *webhooksv1.Event) { e.Type = "Corpus.Note.Changed" }, "event.type", false},
		{"TypeOneSegment", func(e *webhooksv1.Event) { e.Type = "corpus" }, "event.type", false},
		{"TypeTrailingDot", func(e *webhooksv1.Event) { e.Type = "corpus.note." }, "event.type", false},
		{"TypeGlob", func(e *webhooksv1.Event) { e.Type = "corpus.*" }, "event.type", false},
		{"TypeInvalidUTF8", func(e *webhooksv1.Event) { e.Type = "corpus.\xff" }, "event.type", true},
		{"TypeSQLInjection", func(e *webhooksv1.Event) { e.Type = event.TypeNoteChanged + injections[0] }, "event.type", false},
		{"TypeScript", func(e *webhooksv1.Event) { e.Type = injections[1] }, "event.type", false},
		// Only the dispatcher emits operational events: a publisher cannot forge one.
		{"TypeOperational", func(e *webhooksv1.Event) {
			e.Type, e.Data = event.TypeEndpointDisabled, jsonStruct(string(event.Example(event.TypeEndpointDisabled)))
		}, "event.type", false},
		// subject
		{"SubjectEmpty", func(e *webhooksv1.Event) { e.Subject = "" }, "event.subject", false},
		{"SubjectTooLong", func(e *webhooksv1.Event) { e.Subject = "wiki://" + long(webhook.MaxSubjectLen) }, "event.subject", false},
		{"SubjectNoScheme", func(e *webhooksv1.Event) { e.Subject = "software/project/x" }, "event.subject", false},
		{"SubjectSchemeOnly", func(e *webhooksv1.Event) { e.Subject = "wiki://" }, "event.subject", false},
		{"SubjectJavascript", func(e *webhooksv1.Event) { e.Subject = "javascript:alert(1)" }, "event.subject", false},
		{"SubjectPathTraversal", func(e *webhooksv1.Event) { e.Subject = injections[2] }, "event.subject", false},
		{"SubjectNewline", func(e *webhooksv1.Event) { e.Subject = "wiki://a\r\nX-Injected: 1" }, "event.subject", false},
		{"SubjectNUL", func(e *webhooksv1.Event) { e.Subject = "wiki://a\x00b" }, "event.subject", false},
		{"SubjectC1Control", func(e *webhooksv1.Event) { e.Subject = "wiki://a\u0085b" }, "event.subject", false},
		{"SubjectInvalidUTF8", func(e *webhooksv1.Event) { e.Subject = "wiki://\xff\xfe" }, "event.subject", true},
		// occurred_at
		{"OccurredAtFarFuture", func(e *webhooksv1.Event) { e.OccurredAt = timestamppb.New(time.Now().AddDate(10, 0, 0)) }, "event.occurred_at", false},
		{"OccurredAtEpoch", func(e *webhooksv1.Event) { e.OccurredAt = timestamppb.New(time.Unix(0, 0)) }, "event.occurred_at", false},
		{"OccurredAtBeyondYear9999", func(e *webhooksv1.Event) { e.OccurredAt = &timestamppb.Timestamp{Seconds: 1e12} }, "event.occurred_at", false},
		{"OccurredAtNegativeNanos", func(e *webhooksv1.Event) { e.OccurredAt = &timestamppb.Timestamp{Seconds: 1.7e9, Nanos: -1} }, "event.occurred_at", false},
		{"OccurredAtNanosOverflow", func(e *webhooksv1.Event) { e.OccurredAt = &timestamppb.Timestamp{Seconds: 1.7e9, Nanos: 1e9} }, "event.occurred_at", false},
		// data. It is a Struct, so what is not a JSON object (an array, a
		// string, malformed or truncated JSON, duplicate keys, a lone
		// surrogate) cannot even be sent; what can is held to the same rules.
		{"DataTooLarge", func(e *webhooksv1.Event) { e.Data = jsonStruct(`{"k":"` + long(webhook.MaxDataBytes) + `"}`) }, "event.data", false},
		{"DataTooLargeNested", func(e *webhooksv1.Event) {
			e.Data = jsonStruct(`{"a":{"b":[` + strings.Repeat(`"x",`, webhook.MaxDataBytes/4) + `"x"]}}`)
		}, "event.data", false},
		{"DataNaN", func(e *webhooksv1.Event) { e.Data = structData("k", structpb.NewNumberValue(math.NaN())) }, "event.data", false},
		{"DataInfinity", func(e *webhooksv1.Event) { e.Data = structData("k", structpb.NewNumberValue(math.Inf(1))) }, "event.data", false},
		{"DataInvalidUTF8", func(e *webhooksv1.Event) { e.Data = structData("k", structpb.NewStringValue("\xff")) }, "event.data", true},
		{"DataInvalidUTF8Key", func(e *webhooksv1.Event) { e.Data = structData("k\xff", structpb.NewBoolValue(true)) }, "event.data", true},
		// Valid JSON that Postgres' jsonb cannot hold: it must be refused as
		// bad input, not surface as a storage failure the publisher retries.
		{"DataNUL", func(e *webhooksv1.Event) { e.Data = structData("k", structpb.NewStringValue("a\x00b")) }, "event.data", false},
		{"DataNULKey", func(e *webhooksv1.Event) { e.Data = structData("k\x00", structpb.NewBoolValue(true)) }, "event.data", false},
		// Well-formed data that breaks the type's schema: named by its JSON path.
		{"DataSchemaMissingRequired", func(e *webhooksv1.Event) { e.Data = jsonStruct(`{"published":true}`) }, "event.data.op", false},
		{"DataSchemaWrongType", func(e *webhooksv1.Event) { e.Data = jsonStruct(`{"op":"updated","note_id":7}`) }, "event.data.note_id", false},
		{"DataSchemaUnknownProperty", func(e *webhooksv1.Event) {
			e.Data = jsonStruct(`{"op":"updated","html":"` + injections[1] + `"}`)
		}, "event.data.html", false},
		{"DataSchemaNotInEnum", func(e *webhooksv1.Event) { e.Data = structData("op", structpb.NewStringValue(injections[0])) }, "event.data.op", false},
		{"DataSchemaOtherType", func(e *webhooksv1.Event) {
			e.Type, e.Data = "booking.created", jsonStruct(`{"booking_id":"b1","starts_at":"next tuesday"}`)
		}, "event.data.starts_at", false},
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			w := newPublishWire(t, db)
			e := testProtoEvent("evt_bad")
			tc.mutate(e)

			var err error
			if tc.inProcess {
				// Over the wire the client refuses to marshal it at all.
				_, wireErr := w.client.Publish(t.Context(), &webhooksv1.PublishRequest{Event: e})
				require.Equal(t, codes.Internal, status.Code(wireErr), "%v", wireErr)
				require.Contains(t, wireErr.Error(), "invalid UTF-8")
				_, err = w.server.Publish(t.Context(), &webhooksv1.PublishRequest{Event: e})
			} else {
				_, err = w.client.Publish(t.Context(), &webhooksv1.PublishRequest{Event: e})
			}
			t.Logf("%s: %v", tc.name, err)
			requireInvalidField(t, err, tc.field)
			for _, inj := range injections {
				require.NotContains(t, status.Convert(err).Message(), inj, "the refusal never echoes the value")
			}
			require.Equal(t, 1, ingestCount(w.metrics, "invalid"))

			// The same event inside a batch, between two good ones: named by
			// its index, and the good ones are not stored either.
			batch := []*webhooksv1.Event{testProtoEvent("evt_ok_1"), e, testProtoEvent("evt_ok_2")}
			if tc.inProcess {
				_, err = w.server.PublishBatch(t.Context(), &webhooksv1.PublishBatchRequest{Events: batch})
			} else {
				_, err = w.client.PublishBatch(t.Context(), &webhooksv1.PublishBatchRequest{Events: batch})
			}
			requireInvalidField(t, err, strings.Replace(tc.field, "event.", "events[1].", 1))
			requireNothingStored(t, db)
		})
	}

	t.Run("MissingEvent", func(t *testing.T) {
		t.Parallel()
		w := newPublishWire(t, db)
		_, err := w.client.Publish(t.Context(), &webhooksv1.PublishRequest{})
		requireInvalidField(t, err, "event")
		requireNothingStored(t, db)
	})

	t.Run("BatchNilItem", func(t *testing.T) {
		t.Parallel()
		w := newPublishWire(t, db)
		_, err := w.server.PublishBatch(t.Context(), &webhooksv1.PublishBatchRequest{Events: []*webhooksv1.Event{testProtoEvent("evt_ok"), nil}})
		requireInvalidField(t, err, "events[1]")
		requireNothingStored(t, db)
	})

	t.Run("BatchTooLarge", func(t *testing.T) {
		t.Parallel()
		w := newPublishWire(t, db)
		events := make([]*webhooksv1.Event, MaxBatchSize+1)
		for i := range events {
			events[i] = testProtoEvent("evt_" + strings.Repeat("x", i%50))
		}
		_, err := w.client.PublishBatch(t.Context(), &webhooksv1.PublishBatchRequest{Events: events})
		requireInvalidField(t, err, "events")
		requireNothingStored(t, db)
	})

	t.Run("BatchEveryBadItemNamed", func(t *testing.T) {
		t.Parallel()
		w := newPublishWire(t, db)
		bad := func(id string, f func(*webhooksv1.Event)) *webhooksv1.Event {
			e := testProtoEvent(id)
			f(e)
			return e
		}
		_, err := w.client.PublishBatch(t.Context(), &webhooksv1.PublishBatchRequest{Events: []*webhooksv1.Event{
			bad("evt.0", func(*webhooksv1.Event) {}),
			testProtoEvent("evt_ok"),
			bad("evt_2", func(e *webhooksv1.Event) { e.OwnerId = "" }),
			bad("evt_3", func(e *webhooksv1.Event) { e.Data = structData("k", structpb.NewNumberValue(math.Inf(-1))) }),
			bad("evt_4", func(e *webhooksv1.Event) { e.Data = jsonStruct(`{"op":"moved"}`) }),
		}})
		br := requireInvalidField(t, err, "events[0].id")
		var fields []string
		for _, v := range br.GetFieldViolations() {
			fields = append(fields, v.GetField())
		}
		require.Equal(t, []string{"events[0].id", "events[2].owner_id", "events[3].data", "events[4].data.op"}, fields)
		requireNothingStored(t, db)
	})

	t.Run("EveryDataViolationNamed", func(t *testing.T) {
		t.Parallel()
		w := newPublishWire(t, db)
		e := testProtoEvent("evt_data")
		e.Type, e.Subject = "booking.created", "booking://1"
		e.Data = jsonStruct(`{"booking_id": 5, "starts_at": "soon", "colour": "red"}`)
		_, err := w.client.Publish(t.Context(), &webhooksv1.PublishRequest{Event: e})
		br := requireInvalidField(t, err, "event.data.booking_id")
		var fields []string
		for _, v := range br.GetFieldViolations() {
			fields = append(fields, v.GetField())
		}
		require.Equal(t, []string{"event.data.booking_id", "event.data.colour", "event.data.starts_at"}, fields)
		require.Contains(t, status.Convert(err).Message(), "(and 2 more invalid fields: event.data.colour, event.data.starts_at)")
		requireNothingStored(t, db)
	})

	t.Run("BatchReusedIDWithOtherContent", func(t *testing.T) {
		t.Parallel()
		w := newPublishWire(t, db)
		other := testProtoEvent("evt_twice")
		other.Subject = "wiki://other"
		_, err := w.client.PublishBatch(t.Context(), &webhooksv1.PublishBatchRequest{Events: []*webhooksv1.Event{testProtoEvent("evt_twice"), other}})
		require.Equal(t, codes.AlreadyExists, status.Code(err), "%v", err)
		require.Contains(t, status.Convert(err).Message(), "events[1].id")
		requireNothingStored(t, db)
	})

	type authCase struct {
		name  string
		token string // "" sends no authorization header at all
		raw   string // a raw authorization header instead of "Bearer <token>"
		code  codes.Code
	}
	for _, ac := range []authCase{
		{"NoToken", "", "", codes.Unauthenticated},
		{"WrongToken", "wrong-token-wrong-token-wrong", "", codes.Unauthenticated},
		{"EmptyBearer", "", "Bearer ", codes.Unauthenticated},
		{"BasicScheme", "", "Basic " + badInputPublisherToken, codes.Unauthenticated},
		{"TokenWithoutScheme", "", badInputPublisherToken, codes.Unauthenticated},
		{"TokenPrefix", badInputPublisherToken[:len(badInputPublisherToken)-1], "", codes.Unauthenticated},
		{"SQLInjectionToken", "", "Bearer " + injections[0], codes.Unauthenticated},
	} {
		t.Run("Auth"+ac.name, func(t *testing.T) {
			t.Parallel()
			w := newPublishWire(t, db)
			ctx := t.Context()
			switch {
			case ac.raw != "":
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", ac.raw)
			case ac.token != "":
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+ac.token)
			}
			_, err := w.raw.Publish(ctx, &webhooksv1.PublishRequest{Event: testProtoEvent("evt_auth")})
			require.Equal(t, ac.code, status.Code(err), "%v", err)
			_, err = w.raw.PublishBatch(ctx, &webhooksv1.PublishBatchRequest{Events: []*webhooksv1.Event{testProtoEvent("evt_auth")}})
			require.Equal(t, ac.code, status.Code(err), "%v", err)
			require.NotContains(t, status.Convert(err).Message(), badInputPublisherToken)
			requireNothingStored(t, db)
			require.Zero(t, ingestCount(w.metrics, "invalid"), "refused before the service ran")
		})
	}
}

// TestPublishAdminTokenMayNotPublish: roles are disjoint, so the admin UI's
// token cannot forge domain events; the same request with the publisher
// token, the control, is stored.
func TestPublishAdminTokenMayNotPublish(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	w := newPublishWire(t, db)
	ctx := metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+badInputAdminToken)
	_, err := w.raw.Publish(ctx, &webhooksv1.PublishRequest{Event: testProtoEvent("evt_admin")})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	_, err = w.raw.PublishBatch(ctx, &webhooksv1.PublishBatchRequest{Events: []*webhooksv1.Event{testProtoEvent("evt_admin")}})
	require.Equal(t, codes.PermissionDenied, status.Code(err), "%v", err)
	require.Zero(t, testfactory.CountEvents(t.Context(), t, db.Pool), "nothing stored")

	ctx = metadata.AppendToOutgoingContext(t.Context(), "authorization", "Bearer "+badInputPublisherToken)
	resp, err := w.raw.Publish(ctx, &webhooksv1.PublishRequest{Event: testProtoEvent("evt_admin")})
	require.NoError(t, err)
	require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED, resp.GetOutcome())
	require.Equal(t, 1, testfactory.CountEvents(t.Context(), t, db.Pool))
}

// TestRelayMalformedRows writes every kind of row a main app writing its own
// SQL could produce, between good rows: each bad row is set aside with an
// error naming its field (never echoing the value) and counted; every good
// row is relayed, including good rows written afterwards.
