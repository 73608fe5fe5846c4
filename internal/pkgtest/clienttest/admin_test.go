package clienttest_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/client"
)

type adminBundle struct {
	fault *fault
	admin *client.Admin
	addr  string
	db    *dbtest.DB
}

// setupAdmin runs the dispatcher's EndpointService (grpcapi over the real
// endpoint service, a fresh schema) with fault injection in front, and an
// Admin of it.
func setupAdmin(t *testing.T) *adminBundle {
	t.Helper()
	db := dbtest.New(t)
	f := &fault{}
	srv, lis, err := newServer(db.Pool, db.Schema, serverOpts{interceptors: []grpc.UnaryServerInterceptor{f.intercept}, portalURL: "https://dispatcher.example.com/portal/"})
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	a, err := client.DialAdmin(lis.Addr().String(), client.WithInsecure(), client.WithToken(adminToken), client.WithRetry(fastRetry))
	require.NoError(t, err)
	t.Cleanup(func() { _ = a.Close() })
	return &adminBundle{fault: f, admin: a, addr: lis.Addr().String(), db: db}
}

func createReq(owner string) *webhooksv1.CreateEndpointRequest {
	return &webhooksv1.CreateEndpointRequest{OwnerId: owner, Url: "https://hooks.example.com/in", EventTypes: []string{"corpus.*"}}
}

func TestAdmin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("CreateUpdateRotateGetDelete", func(t *testing.T) {
		t.Parallel()
		b := setupAdmin(t)
		created, err := b.admin.CreateEndpoint(ctx, createReq("owner_1"))
		require.NoError(t, err)
		require.NotEmpty(t, created.GetSecret())
		id := created.GetEndpoint().GetId()

		ep, err := b.admin.UpdateEndpoint(ctx, &webhooksv1.UpdateEndpointRequest{
			OwnerId: "owner_1", EndpointId: id, Description: "billing", UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"description"}},
		})
		require.NoError(t, err)
		require.Equal(t, "billing", ep.GetDescription())

		rot, err := b.admin.RotateSecret(ctx, &webhooksv1.RotateSecretRequest{OwnerId: "owner_1", EndpointId: id})
		require.NoError(t, err)
		require.NotEqual(t, created.GetSecret(), rot.GetSecret())
		require.NotNil(t, rot.GetPreviousSecretExpiresAt())

		got, err := b.admin.GetEndpoint(ctx, "owner_1", id)
		require.NoError(t, err)
		require.Equal(t, "billing", got.GetDescription())

		eventID, err := b.admin.SendTest(ctx, "owner_1", id)
		require.NoError(t, err)
		require.NotEmpty(t, eventID)

		types, err := b.admin.EventTypes(ctx)
		require.NoError(t, err)
		require.NotEmpty(t, types)

		require.NoError(t, b.admin.DeleteEndpoint(ctx, "owner_1", id))
		_, err = b.admin.GetEndpoint(ctx, "owner_1", id)
		require.ErrorIs(t, err, client.ErrNotFound)
	})

	t.Run("PortalLink", func(t *testing.T) {
		t.Parallel()
		b := setupAdmin(t)
		link, err := b.admin.PortalLink(ctx, &webhooksv1.CreatePortalSessionRequest{
			OwnerId: "owner_1", Access: webhooksv1.PortalAccess_PORTAL_ACCESS_READ, Ttl: durationpb.New(30 * time.Minute),
		})
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(link.GetUrl(), "https://dispatcher.example.com/portal/"), link.GetUrl())
		require.WithinDuration(t, time.Now().Add(30*time.Minute), link.GetExpiresAt().AsTime(), time.Minute)

		_, err = b.admin.PortalLink(ctx, &webhooksv1.CreatePortalSessionRequest{OwnerId: "owner_1", Ttl: durationpb.New(48 * time.Hour)})
		require.ErrorIs(t, err, client.ErrInvalidArgument)
		require.Contains(t, err.Error(), "ttl")
	})

	t.Run("OwnerWeight", func(t *testing.T) {
		t.Parallel()
		b := setupAdmin(t)
		got, err := b.admin.OwnerSettings(ctx, "owner_1")
		require.NoError(t, err)
		require.InDelta(t, 1.0, got.GetWeight(), 0)
		set, err := b.admin.SetOwnerWeight(ctx, "owner_1", 4)
		require.NoError(t, err)
		require.InDelta(t, 4.0, set.GetWeight(), 0)
		got, err = b.admin.OwnerSettings(ctx, "owner_1")
		require.NoError(t, err)
		require.InDelta(t, 4.0, got.GetWeight(), 0)
		_, err = b.admin.SetOwnerWeight(ctx, "owner_1", 0)
		require.ErrorIs(t, err, client.ErrInvalidArgument)
	})

	t.Run("CreateRetriedAfterLostAnswerMakesOne", func(t *testing.T) {
		t.Parallel()
		b := setupAdmin(t)
		b.fault.after.Store(1) // created, but the answer is lost
		created, err := b.admin.CreateEndpoint(ctx, createReq("owner_1"))
		require.NoError(t, err)
		require.True(t, created.GetReplayed(), "the retry carried the first call's request_id")
		require.NotEmpty(t, created.GetSecret(), "and shows the same secret")
		require.Equal(t, int32(2), b.fault.calls.Load())

		var n int
		for _, err := range b.admin.Endpoints(ctx, &webhooksv1.ListEndpointsRequest{OwnerId: "owner_1"}) {
			require.NoError(t, err)
			n++
		}
		require.Equal(t, 1, n, "one endpoint, not two")
	})

	t.Run("EndpointsPagesThrough", func(t *testing.T) {
		t.Parallel()
		b := setupAdmin(t)
		want := map[string]bool{}
		for range 5 {
			c, err := b.admin.CreateEndpoint(ctx, createReq("owner_1"))
			require.NoError(t, err)
			want[c.GetEndpoint().GetId()] = true
		}
		_, err := b.admin.CreateEndpoint(ctx, createReq("owner_2"))
		require.NoError(t, err)

		before := b.fault.calls.Load()
		got := map[string]bool{}
		for ep, err := range b.admin.Endpoints(ctx, &webhooksv1.ListEndpointsRequest{OwnerId: "owner_1", PageSize: 2}) {
			require.NoError(t, err)
			require.Equal(t, "owner_1", ep.GetOwnerId())
			got[ep.GetId()] = true
		}
		require.Equal(t, want, got)
		require.Equal(t, int32(3), b.fault.calls.Load()-before, "pages of 2: three calls for five")

		// Breaking out early fetches no further page.
		before = b.fault.calls.Load()
		for _, err := range b.admin.Endpoints(ctx, &webhooksv1.ListEndpointsRequest{OwnerId: "owner_1", PageSize: 2}) {
			require.NoError(t, err)
			break
		}
		require.Equal(t, int32(1), b.fault.calls.Load()-before)
	})

	t.Run("ErrorsAreTyped", func(t *testing.T) {
		t.Parallel()
		b := setupAdmin(t)
		req := createReq("owner_1")
		req.Url = "ftp://x"
		req.EventTypes = []string{"corpus.*", "nope*"}
		_, err := b.admin.CreateEndpoint(ctx, req)
		require.ErrorIs(t, err, client.ErrInvalidArgument)
		var ce *client.Error
		require.ErrorAs(t, err, &ce)
		require.Equal(t, codes.InvalidArgument, ce.Code)
		var fields []string
		for _, v := range ce.Violations {
			fields = append(fields, v.Field)
		}
		require.Contains(t, fields, "url")
		require.Contains(t, fields, "event_types[1]")
		require.Equal(t, codes.InvalidArgument, status.Code(err), "the gRPC status is kept")
		require.Equal(t, int32(1), b.fault.calls.Load(), "not retried")

		_, err = b.admin.GetEndpoint(ctx, "owner_1", "0192f1c4-3b7a-7c1e-9a51-6f0f3c2d8e11")
		require.ErrorIs(t, err, client.ErrNotFound)
		require.NotErrorIs(t, err, client.ErrInvalidArgument)

		pub, err := client.DialAdmin(b.addr, client.WithInsecure(), client.WithToken(publisherToken))
		require.NoError(t, err)
		t.Cleanup(func() { _ = pub.Close() })
		_, err = pub.CreateEndpoint(ctx, createReq("owner_1"))
		require.ErrorIs(t, err, client.ErrPermissionDenied, "the publisher token cannot manage endpoints")

		for ep, err := range b.admin.Endpoints(ctx, &webhooksv1.ListEndpointsRequest{OwnerId: "owner_1", PageSize: 500}) {
			require.Nil(t, ep)
			require.ErrorIs(t, err, client.ErrInvalidArgument, "page_size above the maximum")
		}
	})

	t.Run("Filters", func(t *testing.T) {
		t.Parallel()
		b := setupAdmin(t)
		flt, err := client.Filter(`{"data.op": {"$in": ["published", "unpublished"]}}`)
		require.NoError(t, err)
		req := createReq("owner_1")
		req.Filter = flt
		created, err := b.admin.CreateEndpoint(ctx, req)
		require.NoError(t, err)
		require.Equal(t, []any{"published", "unpublished"}, created.GetEndpoint().GetFilter().AsMap()["data.op"].(map[string]any)["$in"])

		resp, err := b.admin.TestFilter(ctx, &webhooksv1.TestFilterRequest{
			OwnerId: "owner_1", EndpointId: created.GetEndpoint().GetId(),
			Target: &webhooksv1.TestFilterRequest_Sample{Sample: &webhooksv1.Event{
				Type: "corpus.note.changed", Subject: "wiki://x", Data: mustData(t, `{"op":"updated"}`),
			}},
		})
		require.NoError(t, err)
		require.False(t, resp.GetMatched())
		require.Equal(t, `filter: data.op was "updated", wanted one of ["published", "unpublished"]`, resp.GetExplanation())

		bad, err := client.Filter(`{"data.opp": "published"}`)
		require.NoError(t, err, "the client checks only that it is an object")
		req = createReq("owner_1")
		req.Filter = bad
		_, err = b.admin.CreateEndpoint(ctx, req)
		var ce *client.Error
		require.ErrorAs(t, err, &ce)
		require.Equal(t, "filter.data.opp", ce.Violations[0].Field)
		require.Contains(t, ce.Violations[0].Description, `did you mean "data.op"?`)

		_, err = client.Filter(`["not", "an object"]`)
		require.ErrorContains(t, err, "filter: must be a JSON object")
	})

	t.Run("RetriesUnavailableOnly", func(t *testing.T) {
		t.Parallel()
		b := setupAdmin(t)
		b.fault.before.Store(2)
		_, err := b.admin.CreateEndpoint(ctx, createReq("owner_1"))
		require.NoError(t, err)
		require.Equal(t, int32(3), b.fault.calls.Load())

		b.fault.before.Store(-1)
		_, err = b.admin.GetEndpoint(ctx, "owner_1", "0192f1c4-3b7a-7c1e-9a51-6f0f3c2d8e11")
		require.ErrorIs(t, err, client.ErrUnavailable)
		require.Contains(t, err.Error(), "after "+strconv.Itoa(fastRetry.MaxAttempts)+" attempts")
		b.fault.before.Store(0)

		// The context bounds it all.
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err = b.admin.GetEndpoint(cctx, "owner_1", "0192f1c4-3b7a-7c1e-9a51-6f0f3c2d8e11")
		require.True(t, errors.Is(err, context.Canceled) || status.Code(err) == codes.Canceled, "%v", err)
	})
}

func mustData(t *testing.T, text string) *structpb.Struct {
	t.Helper()
	st := &structpb.Struct{}
	require.NoError(t, protojson.Unmarshal([]byte(text), st))
	return st
}
