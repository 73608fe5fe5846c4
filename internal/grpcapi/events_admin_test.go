package grpcapi

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

func TestListEvents(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		env *testEnv
		ids map[string]string // by name
	}
	base := time.Now().Add(-10 * time.Hour).UTC().Truncate(time.Second)
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		b := &testBundle{env: newTestEnv(t, endpoint.ServiceConfig{}), ids: map[string]string{}}
		add := func(name, owner, typ, subject string, hours int) {
			at := base.Add(time.Duration(hours) * time.Hour)
			b.ids[name] = testfactory.Event(t.Context(), t, b.env.db.Pool, &testfactory.EventOpts{
				OwnerID: owner, Type: typ, Subject: subject, OccurredAt: &at, Data: `{"op": "updated"}`,
			})
		}
		add("note1", ownerA, "corpus.note.changed", "wiki://software/a", 0)
		add("booking1", ownerA, "booking.created", "booking://1", 1)
		add("note2", ownerA, "corpus.note.changed", "wiki://software/b", 2)
		add("booking2", ownerA, "booking.cancelled", "booking://2", 3)
		add("other", ownerB, "corpus.note.changed", "wiki://software/a", 4)
		return b
	}
	list := func(t *testing.T, b *testBundle, req *webhooksv1.ListEventsRequest) ([]string, string) {
		t.Helper()
		if req.OwnerId == "" {
			req.OwnerId = ownerA
		}
		resp, err := b.env.client.ListEvents(t.Context(), req)
		require.NoError(t, err)
		var names []string
		for _, e := range resp.GetEvents() {
			for n, id := range b.ids {
				if id == e.GetId() {
					names = append(names, n)
				}
			}
		}
		return names, resp.GetNextPageToken()
	}

	t.Run("NewestFirstOwnEventsOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		names, next := list(t, b, &webhooksv1.ListEventsRequest{})
		require.Equal(t, []string{"booking2", "note2", "booking1", "note1"}, names)
		require.Empty(t, next)
		resp, err := b.env.client.ListEvents(t.Context(), &webhooksv1.ListEventsRequest{OwnerId: ownerA, PageSize: 1})
		require.NoError(t, err)
		e := resp.GetEvents()[0]
		require.Equal(t, ownerA, e.GetOwnerId())
		require.Equal(t, "booking.cancelled", e.GetType())
		require.Equal(t, "booking://2", e.GetSubject())
		require.Equal(t, "updated", e.GetData().GetFields()["op"].GetStringValue())
		require.Equal(t, base.Add(3*time.Hour), e.GetOccurredAt().AsTime())
	})

	t.Run("Filters", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		names, _ := list(t, b, &webhooksv1.ListEventsRequest{EventType: "booking.*"})
		require.Equal(t, []string{"booking2", "booking1"}, names)
		names, _ = list(t, b, &webhooksv1.ListEventsRequest{EventType: "corpus.note.changed"})
		require.Equal(t, []string{"note2", "note1"}, names)
		names, _ = list(t, b, &webhooksv1.ListEventsRequest{EventType: "*"})
		require.Len(t, names, 4)
		names, _ = list(t, b, &webhooksv1.ListEventsRequest{SubjectPrefix: "wiki://software/"})
		require.Equal(t, []string{"note2", "note1"}, names)
		names, _ = list(t, b, &webhooksv1.ListEventsRequest{SubjectPrefix: "wiki://software/a"})
		require.Equal(t, []string{"note1"}, names)
		names, _ = list(t, b, &webhooksv1.ListEventsRequest{
			OccurredAfter: timestamppb.New(base.Add(time.Hour)), OccurredBefore: timestamppb.New(base.Add(3 * time.Hour)),
		})
		require.Equal(t, []string{"note2", "booking1"}, names, "after inclusive, before exclusive")
		names, _ = list(t, b, &webhooksv1.ListEventsRequest{SubjectPrefix: "%"})
		require.Empty(t, names, "the prefix is text, not a pattern")
	})

	t.Run("Pages", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var all []string
		req := &webhooksv1.ListEventsRequest{PageSize: 3}
		for range 5 {
			names, next := list(t, b, req)
			all = append(all, names...)
			if next == "" {
				break
			}
			req.PageToken = next
		}
		require.Equal(t, []string{"booking2", "note2", "booking1", "note1"}, all)
	})
}

func TestGetEvent(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		env *testEnv
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{env: newTestEnv(t, endpoint.ServiceConfig{})}
	}

	t.Run("DeliveriesAcrossEndpoints", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ep1 := b.env.create(t, ownerA).GetEndpoint().GetId()
		ep2 := b.env.create(t, ownerA).GetEndpoint().GetId()
		ev := b.env.insertEvent(t, ownerA, "booking.created")
		j1 := b.env.insertDelivery(t, ep1, ev)
		b.env.finalize(t, j1, "completed", "")
		j2 := b.env.insertDelivery(t, ep2, ev)
		b.env.finalize(t, j2, "discarded", "HTTP 500: down")
		// Another event's delivery is not listed.
		b.env.insertDelivery(t, ep1, b.env.insertEvent(t, ownerA, "booking.created"))

		resp, err := b.env.client.GetEvent(t.Context(), &webhooksv1.GetEventRequest{OwnerId: ownerA, EventId: ev})
		require.NoError(t, err)
		require.Equal(t, ev, resp.GetEvent().GetId())
		require.Equal(t, "booking.created", resp.GetEvent().GetType())
		require.Len(t, resp.GetDeliveries(), 2)
		require.Equal(t, ep1, resp.GetDeliveries()[0].GetEndpointId())
		require.Equal(t, webhooksv1.DeliveryState_DELIVERY_STATE_DELIVERED, resp.GetDeliveries()[0].GetState())
		require.Equal(t, ep2, resp.GetDeliveries()[1].GetEndpointId())
		require.Equal(t, webhooksv1.DeliveryState_DELIVERY_STATE_FAILED, resp.GetDeliveries()[1].GetState())
		require.Equal(t, "HTTP 500: down", resp.GetDeliveries()[1].GetLastError())
	})

	t.Run("OnlyTheOwnersEndpointsDeliveries", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		own := b.env.create(t, ownerA).GetEndpoint().GetId()
		foreign := b.env.create(t, ownerB).GetEndpoint().GetId()
		ev := b.env.insertEvent(t, ownerA, "booking.created")
		b.env.insertDelivery(t, own, ev)
		// A delivery of this event id to another owner's endpoint (the
		// fanout never makes one; a row written by anything else could) is
		// not the owner's to see.
		b.env.insertDelivery(t, foreign, ev)

		resp, err := b.env.client.GetEvent(t.Context(), &webhooksv1.GetEventRequest{OwnerId: ownerA, EventId: ev})
		require.NoError(t, err)
		require.Len(t, resp.GetDeliveries(), 1)
		require.Equal(t, own, resp.GetDeliveries()[0].GetEndpointId())
	})

	t.Run("NoDeliveries", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ev := b.env.insertEvent(t, ownerA, "booking.created")
		resp, err := b.env.client.GetEvent(t.Context(), &webhooksv1.GetEventRequest{OwnerId: ownerA, EventId: ev})
		require.NoError(t, err)
		require.Empty(t, resp.GetDeliveries())
	})

	t.Run("ForeignOrMissingIsNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ev := b.env.insertEvent(t, ownerA, "booking.created")
		for _, req := range []*webhooksv1.GetEventRequest{{OwnerId: ownerB, EventId: ev}, {OwnerId: ownerA, EventId: "no-such-event"}} {
			_, err := b.env.client.GetEvent(t.Context(), req)
			st := requireCode(t, err, codes.NotFound)
			require.Equal(t, EventNotFoundMessage, st.Message())
			require.Empty(t, st.Details())
		}
	})
}
