package grpcapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

func TestCreateEndpoint(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		env *testEnv
	}

	setup := func(t *testing.T, cfg endpoint.ServiceConfig) *testBundle {
		t.Helper()
		return &testBundle{env: newTestEnv(t, cfg)}
	}

	valid := func() *webhooksv1.CreateEndpointRequest {
		return &webhooksv1.CreateEndpointRequest{
			OwnerId:     ownerA,
			Url:         "https://receiver.example.com/hooks?tenant=1",
			Description: "Zapier bridge",
			EventTypes:  []string{"corpus.*", "booking.created"},
			EmbedId:     "emb_1",
		}
	}

	t.Run("HappyPath", func(t *testing.T) {
		t.Parallel()
		b := setup(t, endpoint.ServiceConfig{})
		resp, err := b.env.client.CreateEndpoint(t.Context(), valid())
		require.NoError(t, err)

		ep := resp.GetEndpoint()
		_, err = uuid.Parse(ep.GetId())
		require.NoError(t, err)
		require.Equal(t, ownerA, ep.GetOwnerId())
		require.Equal(t, "https://receiver.example.com/hooks?tenant=1", ep.GetUrl())
		require.Equal(t, "Zapier bridge", ep.GetDescription())
		require.Equal(t, []string{"corpus.*", "booking.created"}, ep.GetEventTypes())
		require.Equal(t, "emb_1", ep.GetEmbedId())
		require.True(t, ep.GetEnabled())
		require.Empty(t, ep.GetDisabledReason())
		require.Nil(t, ep.GetFailingSince())
		require.Nil(t, ep.GetPreviousSecretExpiresAt())
		require.NotNil(t, ep.GetCreatedAt())

		require.True(t, strings.HasPrefix(resp.GetSecret(), "whsec_"))
		key, err := webhook.ParseSecret(resp.GetSecret())
		require.NoError(t, err)
		require.Len(t, key, 32)

		got, err := b.env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: ownerA, EndpointId: ep.GetId()})
		require.NoError(t, err)
		require.Equal(t, ep.GetUrl(), got.GetEndpoint().GetUrl())
		require.Equal(t, ep.GetEventTypes(), got.GetEndpoint().GetEventTypes())
	})

	t.Run("SecretSealedAtRest", func(t *testing.T) {
		t.Parallel()
		b := setup(t, endpoint.ServiceConfig{})
		resp, err := b.env.client.CreateEndpoint(t.Context(), valid())
		require.NoError(t, err)
		key, err := webhook.ParseSecret(resp.GetSecret())
		require.NoError(t, err)
		id := uuid.MustParse(resp.GetEndpoint().GetId())

		var sealed []byte
		var row string
		require.NoError(t, b.env.db.Pool.QueryRow(t.Context(),
			`SELECT secret_enc, to_jsonb(e)::text FROM webhook_endpoints e WHERE id = $1`, id).Scan(&sealed, &row))
		require.NotContains(t, string(sealed), string(key))
		require.NotContains(t, string(sealed), resp.GetSecret())
		noSecretIn(t, row, resp.GetSecret(), key)
		require.False(t, b.env.keyring.NeedsReseal(sealed))

		// The one place that unseals gives the key back, bound to this id.
		keys, err := endpoint.OpenKeys(b.env.keyring, id, seal.SigningKeys{Current: sealed}, time.Now())
		require.NoError(t, err)
		require.Equal(t, [][]byte{key}, keys)
		_, err = endpoint.OpenKeys(b.env.keyring, uuid.New(), seal.SigningKeys{Current: sealed}, time.Now())
		require.Error(t, err)
	})

	t.Run("DistinctSecrets", func(t *testing.T) {
		t.Parallel()
		b := setup(t, endpoint.ServiceConfig{})
		r1 := b.env.create(t, ownerA)
		r2 := b.env.create(t, ownerA)
		require.NotEqual(t, r1.GetSecret(), r2.GetSecret())
		require.NotEqual(t, r1.GetEndpoint().GetId(), r2.GetEndpoint().GetId())
	})

	t.Run("NoEmbedIsStandalone", func(t *testing.T) {
		t.Parallel()
		b := setup(t, endpoint.ServiceConfig{})
		req := valid()
		req.EmbedId = ""
		resp, err := b.env.client.CreateEndpoint(t.Context(), req)
		require.NoError(t, err)
		var embed *string
		require.NoError(t, b.env.db.Pool.QueryRow(t.Context(), `SELECT embed_id FROM webhook_endpoints WHERE id = $1`,
			resp.GetEndpoint().GetId()).Scan(&embed))
		require.Nil(t, embed)
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t, endpoint.ServiceConfig{})
		cases := []struct {
			name  string
			field string
			edit  func(*webhooksv1.CreateEndpointRequest)
		}{
			{"EmptyOwner", "owner_id", func(r *webhooksv1.CreateEndpointRequest) { r.OwnerId = "" }},
			{"OwnerWithSpace", "owner_id", func(r *webhooksv1.CreateEndpointRequest) { r.OwnerId = "owner a" }},
			{"OwnerNonASCII", "owner_id", func(r *webhooksv1.CreateEndpointRequest) { r.OwnerId = "ownér" }},
			{"OwnerTooLong", "owner_id", func(r *webhooksv1.CreateEndpointRequest) { r.OwnerId = strings.Repeat("o", 129) }},
			{"EmptyURL", "url", func(r *webhooksv1.CreateEndpointRequest) { r.Url = "" }},
			{"NotAURL", "url", func(r *webhooksv1.CreateEndpointRequest) { r.Url = "not a url" }},
			{"RelativeURL", "url", func(r *webhooksv1.CreateEndpointRequest) { r.Url = "/hooks" }},
			{"FTPScheme", "url", func(r *webhooksv1.CreateEndpointRequest) { r.Url = "ftp://example.com/x" }},
			{"JavascriptScheme", "url", func(r *webhooksv1.CreateEndpointRequest) { r.Url = "javascript:alert(1)" }},
			{"NoHost", "url", func(r *webhooksv1.CreateEndpointRequest) { r.Url = "https:///path" }},
			{"OpaqueURL", "url", func(r *webhooksv1.CreateEndpointRequest) { r.Url = "https:example.com" }},
			{"UserInfo", "url", func(r *webhooksv1.CreateEndpointRequest) { r.Url = "https://user:pass@example.com/" }},
			{"Fragment", "url", func(r *webhooksv1.CreateEndpointRequest) { r.Url = "https://example.com/#frag" }},
			{"EmptyFragment", "url", func(r *webhooksv1.CreateEndpointRequest) { r.Url = "https://example.com/#" }},
			{"BadPort", "url", func(r *webhooksv1.CreateEndpointRequest) { r.Url = "https://example.com:70000/" }},
			{"ZeroPort", "url", func(r *webhooksv1.CreateEndpointRequest) { r.Url = "https://example.com:0/" }},
			{"URLTooLong", "url", func(r *webhooksv1.CreateEndpointRequest) {
				r.Url = "https://example.com/" + strings.Repeat("a", 2048)
			}},
			{"URLWithSpace", "url", func(r *webhooksv1.CreateEndpointRequest) { r.Url = "https://example.com/a b" }},
			{"Loopback", "url", func(r *webhooksv1.CreateEndpointRequest) { r.Url = "http://127.0.0.1:8080/hook" }},
			{"Localhost", "url", func(r *webhooksv1.CreateEndpointRequest) { r.Url = "http://localhost:8080/hook" }},
			{"Metadata", "url", func(r *webhooksv1.CreateEndpointRequest) { r.Url = "http://169.254.169.254/latest" }},
			{"PrivateV4", "url", func(r *webhooksv1.CreateEndpointRequest) { r.Url = "https://10.1.2.3/" }},
			{"LoopbackV6", "url", func(r *webhooksv1.CreateEndpointRequest) { r.Url = "https://[::1]/" }},
			{"MappedV6", "url", func(r *webhooksv1.CreateEndpointRequest) { r.Url = "https://[::ffff:127.0.0.1]/" }},
			{"NoEventTypes", "event_types", func(r *webhooksv1.CreateEndpointRequest) { r.EventTypes = nil }},
			{"TooManyEventTypes", "event_types", func(r *webhooksv1.CreateEndpointRequest) {
				r.EventTypes = make([]string, 65)
				for i := range r.EventTypes {
					r.EventTypes[i] = "*"
				}
			}},
			{"EmptyGlob", "event_types[1]", func(r *webhooksv1.CreateEndpointRequest) { r.EventTypes = []string{"*", ""} }},
			{"MalformedGlob", "event_types[0]", func(r *webhooksv1.CreateEndpointRequest) { r.EventTypes = []string{"corpus*"} }},
			{"UnknownType", "event_types[1]", func(r *webhooksv1.CreateEndpointRequest) {
				r.EventTypes = []string{"corpus.*", "corpus.note.deleted"}
			}},
			{"PrefixMatchingNothing", "event_types[0]", func(r *webhooksv1.CreateEndpointRequest) { r.EventTypes = []string{"nope.*"} }},
			{"DuplicateGlob", "event_types[2]", func(r *webhooksv1.CreateEndpointRequest) {
				r.EventTypes = []string{"corpus.*", "booking.created", "corpus.*"}
			}},
			{"DescriptionTooLong", "description", func(r *webhooksv1.CreateEndpointRequest) { r.Description = strings.Repeat("é", 513) }},
			{"DescriptionNUL", "description", func(r *webhooksv1.CreateEndpointRequest) { r.Description = "a\x00b" }},
			{"EmbedIDBadChars", "embed_id", func(r *webhooksv1.CreateEndpointRequest) { r.EmbedId = "emb/1" }},
			{"EmbedIDTooLong", "embed_id", func(r *webhooksv1.CreateEndpointRequest) { r.EmbedId = strings.Repeat("e", 129) }},
		}
		for _, tc := range cases {
			req := valid()
			tc.edit(req)
			_, err := b.env.client.CreateEndpoint(t.Context(), req)
			t.Logf("%s: %v", tc.name, err)
			requireField(t, err, tc.field)
		}
		// Nothing half-written.
		require.Zero(t, b.env.countEndpoints(t))
	})

	t.Run("DescriptionAtLimit", func(t *testing.T) {
		t.Parallel()
		b := setup(t, endpoint.ServiceConfig{})
		req := valid()
		req.Description = strings.Repeat("é", 512) + ""
		_, err := b.env.client.CreateEndpoint(t.Context(), req)
		require.NoError(t, err)
	})

	t.Run("SeveralViolationsAllNamed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, endpoint.ServiceConfig{})
		_, err := b.env.client.CreateEndpoint(t.Context(), &webhooksv1.CreateEndpointRequest{
			OwnerId: ownerA, Url: "ftp://x", EventTypes: []string{"*", "bad glob"},
		})
		requireField(t, err, "url")
		requireField(t, err, "event_types[1]")
	})

	t.Run("RequireHTTPS", func(t *testing.T) {
		t.Parallel()
		b := setup(t, endpoint.ServiceConfig{RequireHTTPS: true})
		req := valid()
		req.Url = "http://receiver.example.com/hooks"
		_, err := b.env.client.CreateEndpoint(t.Context(), req)
		requireField(t, err, "url")
		req.Url = "https://receiver.example.com/hooks"
		_, err = b.env.client.CreateEndpoint(t.Context(), req)
		require.NoError(t, err)
	})

	t.Run("HTTPAllowedByDefault", func(t *testing.T) {
		t.Parallel()
		b := setup(t, endpoint.ServiceConfig{})
		req := valid()
		req.Url = "http://receiver.example.com/hooks"
		_, err := b.env.client.CreateEndpoint(t.Context(), req)
		require.NoError(t, err)
	})

	t.Run("LoopbackWhenAllowed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, endpoint.ServiceConfig{AllowCIDRs: loopback})
		for _, u := range []string{"http://127.0.0.1:8080/hook", "http://localhost:9999/"} {
			req := valid()
			req.Url = u
			_, err := b.env.client.CreateEndpoint(t.Context(), req)
			require.NoError(t, err, u)
		}
		// The allow-list opens exactly what it names.
		req := valid()
		req.Url = "http://10.0.0.1/"
		_, err := b.env.client.CreateEndpoint(t.Context(), req)
		requireField(t, err, "url")
	})

	t.Run("PublicIPAllowed", func(t *testing.T) {
		t.Parallel()
		b := setup(t, endpoint.ServiceConfig{})
		req := valid()
		req.Url = "https://93.184.215.14:8443/hook"
		_, err := b.env.client.CreateEndpoint(t.Context(), req)
		require.NoError(t, err)
	})

	t.Run("PerOwnerCap", func(t *testing.T) {
		t.Parallel()
		b := setup(t, endpoint.ServiceConfig{MaxEndpointsPerOwner: 2})
		b.env.create(t, ownerA)
		b.env.create(t, ownerA)
		_, err := b.env.client.CreateEndpoint(t.Context(), valid())
		requireCode(t, err, codes.ResourceExhausted)
		// Another owner has its own budget.
		b.env.create(t, ownerB)
		require.Equal(t, 3, b.env.countEndpoints(t))
	})
}

func TestListEndpoints(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		env *testEnv
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{env: newTestEnv(t, endpoint.ServiceConfig{})}
	}

	t.Run("PaginatesInCreationOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var want []string
		for range 5 {
			want = append(want, b.env.create(t, ownerA).GetEndpoint().GetId())
		}
		b.env.create(t, ownerB)

		var got []string
		token := ""
		pages := 0
		for {
			resp, err := b.env.client.ListEndpoints(t.Context(), &webhooksv1.ListEndpointsRequest{
				OwnerId: ownerA, PageSize: 2, PageToken: token,
			})
			require.NoError(t, err)
			pages++
			for _, ep := range resp.GetEndpoints() {
				require.Equal(t, ownerA, ep.GetOwnerId())
				got = append(got, ep.GetId())
			}
			if resp.GetNextPageToken() == "" {
				break
			}
			token = resp.GetNextPageToken()
		}
		require.Equal(t, want, got)
		require.Equal(t, 3, pages)
	})

	t.Run("ExactPageHasNoNextToken", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.env.create(t, ownerA)
		b.env.create(t, ownerA)
		resp, err := b.env.client.ListEndpoints(t.Context(), &webhooksv1.ListEndpointsRequest{OwnerId: ownerA, PageSize: 2})
		require.NoError(t, err)
		require.Len(t, resp.GetEndpoints(), 2)
		require.Empty(t, resp.GetNextPageToken())
	})

	t.Run("OtherOwnerSeesNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.env.create(t, ownerA)
		resp, err := b.env.client.ListEndpoints(t.Context(), &webhooksv1.ListEndpointsRequest{OwnerId: ownerB})
		require.NoError(t, err)
		require.Empty(t, resp.GetEndpoints())
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.env.client.ListEndpoints(t.Context(), &webhooksv1.ListEndpointsRequest{})
		requireField(t, err, "owner_id")
		_, err = b.env.client.ListEndpoints(t.Context(), &webhooksv1.ListEndpointsRequest{OwnerId: ownerA, PageSize: -1})
		requireField(t, err, "page_size")
		// Above the maximum is refused, not silently shortened.
		_, err = b.env.client.ListEndpoints(t.Context(), &webhooksv1.ListEndpointsRequest{OwnerId: ownerA, PageSize: 201})
		requireField(t, err, "page_size")
		resp, err := b.env.client.ListEndpoints(t.Context(), &webhooksv1.ListEndpointsRequest{OwnerId: ownerA, PageSize: 200})
		require.NoError(t, err, "the maximum itself is fine")
		require.Empty(t, resp.GetNextPageToken())
		_, err = b.env.client.ListEndpoints(t.Context(), &webhooksv1.ListEndpointsRequest{OwnerId: ownerA, PageToken: "garbage!"})
		requireField(t, err, "page_token")
		// A deliveries token is not an endpoints token.
		_, err = b.env.client.ListEndpoints(t.Context(), &webhooksv1.ListEndpointsRequest{OwnerId: ownerA, PageToken: encodeDeliveriesToken(5)})
		requireField(t, err, "page_token")
	})
}

func TestGetEndpoint(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		env *testEnv
		id  string
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		env := newTestEnv(t, endpoint.ServiceConfig{})
		return &testBundle{env: env, id: env.create(t, ownerA).GetEndpoint().GetId()}
	}

	t.Run("CrossOwnerAndMissingLookAlike", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, foreign := b.env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: ownerB, EndpointId: b.id})
		requireNotFound(t, foreign)
		_, missing := b.env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: ownerA, EndpointId: uuid.NewString()})
		requireNotFound(t, missing)
		require.True(t, proto.Equal(status.Convert(foreign).Proto(), status.Convert(missing).Proto()))
	})

	t.Run("MalformedIDIsInvalidArgument", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: ownerA, EndpointId: "not-a-uuid"})
		requireField(t, err, "endpoint_id")
		_, err = b.env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: ownerA, EndpointId: "{" + b.id + "}"})
		requireField(t, err, "endpoint_id")
	})

	t.Run("EmptyID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: ownerA})
		requireField(t, err, "endpoint_id")
	})
}

func TestUpdateEndpoint(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		env *testEnv
		ep  *webhooksv1.Endpoint
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		env := newTestEnv(t, endpoint.ServiceConfig{})
		return &testBundle{env: env, ep: env.create(t, ownerA, "corpus.*").GetEndpoint()}
	}

	mask := func(paths ...string) *fieldmaskpb.FieldMask { return &fieldmaskpb.FieldMask{Paths: paths} }

	t.Run("MistypedPathNamesTheOneMeant", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: ownerA, EndpointId: b.ep.GetId(), UpdateMask: mask("descripton"), Description: "x", //nolint:misspell // misspelt on purpose
		})
		require.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)
		require.Contains(t, status.Convert(err).Message(), `update_mask.paths[0]: unknown path; did you mean "description"?`)
	})

	t.Run("ChangesOnlyMaskedFields", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp, err := b.env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: ownerA, EndpointId: b.ep.GetId(),
			UpdateMask:  mask("url", "event_types"),
			Url:         "https://new.example.com/hook",
			EventTypes:  []string{"booking.*", "webhook.test"},
			Description: "ignored: not in the mask",
			EmbedId:     "ignored",
		})
		require.NoError(t, err)
		ep := resp.GetEndpoint()
		require.Equal(t, "https://new.example.com/hook", ep.GetUrl())
		require.Equal(t, []string{"booking.*", "webhook.test"}, ep.GetEventTypes())
		require.Equal(t, b.ep.GetDescription(), ep.GetDescription())
		require.Empty(t, ep.GetEmbedId())
		require.True(t, ep.GetEnabled())
		require.True(t, ep.GetUpdatedAt().AsTime().After(b.ep.GetUpdatedAt().AsTime()))
	})

	t.Run("SetAndClearEmbedAndDescription", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp, err := b.env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: ownerA, EndpointId: b.ep.GetId(), UpdateMask: mask("embed_id", "description"),
			EmbedId: "emb_9", Description: "",
		})
		require.NoError(t, err)
		require.Equal(t, "emb_9", resp.GetEndpoint().GetEmbedId())
		require.Empty(t, resp.GetEndpoint().GetDescription())
		resp, err = b.env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: ownerA, EndpointId: b.ep.GetId(), UpdateMask: mask("embed_id"),
		})
		require.NoError(t, err)
		require.Empty(t, resp.GetEndpoint().GetEmbedId())
	})

	t.Run("DisableRecordsReason", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp, err := b.env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: ownerA, EndpointId: b.ep.GetId(), UpdateMask: mask("enabled"), Enabled: false,
		})
		require.NoError(t, err)
		require.False(t, resp.GetEndpoint().GetEnabled())
		require.Equal(t, endpoint.DisabledByOwner, resp.GetEndpoint().GetDisabledReason())
	})

	t.Run("DisableKeepsAutomaticReason", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.env.db.Pool.Exec(t.Context(),
			`UPDATE webhook_endpoints SET enabled = false, disabled_reason = 'failing for 5 days' WHERE id = $1`, b.ep.GetId())
		require.NoError(t, err)
		resp, err := b.env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: ownerA, EndpointId: b.ep.GetId(), UpdateMask: mask("enabled"), Enabled: false,
		})
		require.NoError(t, err)
		require.Equal(t, "failing for 5 days", resp.GetEndpoint().GetDisabledReason())
	})

	t.Run("EnableClearsFailingState", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.env.db.Pool.Exec(t.Context(), `
UPDATE webhook_endpoints
   SET enabled = false, disabled_reason = 'failing for 5 days', failing_since = now() - interval '5 days'
 WHERE id = $1`, b.ep.GetId())
		require.NoError(t, err)
		got, err := b.env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: ownerA, EndpointId: b.ep.GetId()})
		require.NoError(t, err)
		require.NotNil(t, got.GetEndpoint().GetFailingSince())

		resp, err := b.env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: ownerA, EndpointId: b.ep.GetId(), UpdateMask: mask("enabled"), Enabled: true,
		})
		require.NoError(t, err)
		ep := resp.GetEndpoint()
		require.True(t, ep.GetEnabled())
		require.Empty(t, ep.GetDisabledReason())
		require.Nil(t, ep.GetFailingSince())

		var failing, reason *string
		require.NoError(t, b.env.db.Pool.QueryRow(t.Context(),
			`SELECT failing_since::text, disabled_reason FROM webhook_endpoints WHERE id = $1`, b.ep.GetId()).Scan(&failing, &reason))
		require.Nil(t, failing)
		require.Nil(t, reason)
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		base := func() *webhooksv1.UpdateEndpointRequest {
			return &webhooksv1.UpdateEndpointRequest{OwnerId: ownerA, EndpointId: b.ep.GetId()}
		}
		cases := []struct {
			name  string
			field string
			edit  func(*webhooksv1.UpdateEndpointRequest)
		}{
			{"NoMask", "update_mask", func(*webhooksv1.UpdateEndpointRequest) {}},
			{"EmptyMask", "update_mask", func(r *webhooksv1.UpdateEndpointRequest) { r.UpdateMask = mask() }},
			{"UnknownPath", "update_mask.paths[1]", func(r *webhooksv1.UpdateEndpointRequest) {
				r.UpdateMask = mask("url", "secret_enc")
				r.Url = "https://ok.example.com/"
			}},
			{"BadURL", "url", func(r *webhooksv1.UpdateEndpointRequest) { r.UpdateMask = mask("url"); r.Url = "gopher://x" }},
			{"EmptyEventTypes", "event_types", func(r *webhooksv1.UpdateEndpointRequest) { r.UpdateMask = mask("event_types") }},
			{"BadGlob", "event_types[0]", func(r *webhooksv1.UpdateEndpointRequest) {
				r.UpdateMask = mask("event_types")
				r.EventTypes = []string{"*.*"}
			}},
			{"BadEmbed", "embed_id", func(r *webhooksv1.UpdateEndpointRequest) { r.UpdateMask = mask("embed_id"); r.EmbedId = "a b" }},
			{"BadDescription", "description", func(r *webhooksv1.UpdateEndpointRequest) {
				r.UpdateMask = mask("description")
				r.Description = strings.Repeat("x", 513)
			}},
			{"BadOwner", "owner_id", func(r *webhooksv1.UpdateEndpointRequest) { r.OwnerId = ""; r.UpdateMask = mask("enabled") }},
		}
		for _, tc := range cases {
			req := base()
			tc.edit(req)
			_, err := b.env.client.UpdateEndpoint(t.Context(), req)
			t.Logf("%s: %v", tc.name, err)
			requireField(t, err, tc.field)
		}
		// Nothing half-written: the endpoint is as created.
		got, err := b.env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: ownerA, EndpointId: b.ep.GetId()})
		require.NoError(t, err)
		require.Equal(t, b.ep.GetUrl(), got.GetEndpoint().GetUrl())
		require.Equal(t, b.ep.GetEventTypes(), got.GetEndpoint().GetEventTypes())
		require.Equal(t, b.ep.GetUpdatedAt().AsTime(), got.GetEndpoint().GetUpdatedAt().AsTime())
	})

	t.Run("CrossOwnerNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: ownerB, EndpointId: b.ep.GetId(), UpdateMask: mask("enabled"), Enabled: false,
		})
		requireNotFound(t, err)
		_, err = b.env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: ownerA, EndpointId: "nope", UpdateMask: mask("enabled"),
		})
		requireField(t, err, "endpoint_id")
		got, err := b.env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: ownerA, EndpointId: b.ep.GetId()})
		require.NoError(t, err)
		require.True(t, got.GetEndpoint().GetEnabled())
	})
}

func TestDeleteEndpoint(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		env *testEnv
		id  string
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		env := newTestEnv(t, endpoint.ServiceConfig{})
		return &testBundle{env: env, id: env.create(t, ownerA).GetEndpoint().GetId()}
	}

	t.Run("Deletes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.env.client.DeleteEndpoint(t.Context(), &webhooksv1.DeleteEndpointRequest{OwnerId: ownerA, EndpointId: b.id})
		require.NoError(t, err)
		_, err = b.env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: ownerA, EndpointId: b.id})
		requireNotFound(t, err)
		_, err = b.env.client.DeleteEndpoint(t.Context(), &webhooksv1.DeleteEndpointRequest{OwnerId: ownerA, EndpointId: b.id})
		requireNotFound(t, err)
	})

	t.Run("CrossOwnerNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.env.client.DeleteEndpoint(t.Context(), &webhooksv1.DeleteEndpointRequest{OwnerId: ownerB, EndpointId: b.id})
		requireNotFound(t, err)
		require.Equal(t, 1, b.env.countEndpoints(t))
	})

	t.Run("BadInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.env.client.DeleteEndpoint(t.Context(), &webhooksv1.DeleteEndpointRequest{OwnerId: "a b", EndpointId: b.id})
		requireField(t, err, "owner_id")
		_, err = b.env.client.DeleteEndpoint(t.Context(), &webhooksv1.DeleteEndpointRequest{OwnerId: ownerA})
		requireField(t, err, "endpoint_id")
	})
}

// secretColumns reads an endpoint's sealed secrets as the delivery worker does.
func secretColumns(t *testing.T, env *testEnv, id uuid.UUID) (cur, prev []byte, expires *time.Time) {
	t.Helper()
	require.NoError(t, env.db.Pool.QueryRow(t.Context(),
		`SELECT secret_enc, previous_secret_enc, previous_secret_expires_at FROM webhook_endpoints WHERE id = $1`, id).
		Scan(&cur, &prev, &expires))
	return cur, prev, expires
}

func TestRotateSecret(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		env    *testEnv
		id     uuid.UUID
		secret string
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		env := newTestEnv(t, endpoint.ServiceConfig{})
		resp := env.create(t, ownerA)
		return &testBundle{env: env, id: uuid.MustParse(resp.GetEndpoint().GetId()), secret: resp.GetSecret()}
	}

	rotate := func(t *testing.T, b *testBundle, grace *durationpb.Duration) *webhooksv1.RotateSecretResponse {
		t.Helper()
		resp, err := b.env.client.RotateSecret(t.Context(), &webhooksv1.RotateSecretRequest{
			OwnerId: ownerA, EndpointId: b.id.String(), GracePeriod: grace,
		})
		require.NoError(t, err)
		return resp
	}

	// verifies reports whether a receiver holding only secret accepts a
	// delivery signed with keys.
	verifies := func(t *testing.T, keys [][]byte, secret string) bool {
		t.Helper()
		body := []byte(`{"id":"evt_1","type":"webhook.test"}`)
		ts := time.Now()
		h := make(map[string][]string)
		webhook.SetHeaders(h, keys, "evt_1", ts, body)
		v, err := webhook.NewVerifier(secret)
		require.NoError(t, err)
		return v.VerifyAt(h, body, ts) == nil
	}

	t.Run("DefaultGraceSignsWithBoth", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		before := time.Now()
		resp := rotate(t, b, nil)
		require.NotEqual(t, b.secret, resp.GetSecret())
		until := resp.GetPreviousSecretExpiresAt().AsTime()
		require.WithinDuration(t, before.Add(24*time.Hour), until, time.Minute)

		cur, prev, expires := secretColumns(t, b.env, b.id)
		require.NotNil(t, prev)
		require.True(t, until.Equal(*expires))

		newKey, err := webhook.ParseSecret(resp.GetSecret())
		require.NoError(t, err)
		oldKey, err := webhook.ParseSecret(b.secret)
		require.NoError(t, err)

		// Inside the grace period: current first, previous second; a
		// receiver holding either secret verifies the same delivery.
		keys, err := endpoint.OpenKeys(b.env.keyring, b.id, seal.SigningKeys{Current: cur, Previous: prev, PreviousExpiresAt: expires}, expires.Add(-time.Second))
		require.NoError(t, err)
		require.Equal(t, [][]byte{newKey, oldKey}, keys)
		require.True(t, verifies(t, keys, resp.GetSecret()))
		require.True(t, verifies(t, keys, b.secret))

		// After it: only the new one.
		keys, err = endpoint.OpenKeys(b.env.keyring, b.id, seal.SigningKeys{Current: cur, Previous: prev, PreviousExpiresAt: expires}, *expires)
		require.NoError(t, err)
		require.Equal(t, [][]byte{newKey}, keys)
		require.True(t, verifies(t, keys, resp.GetSecret()))
		require.False(t, verifies(t, keys, b.secret))

		got, err := b.env.client.GetEndpoint(t.Context(), &webhooksv1.GetEndpointRequest{OwnerId: ownerA, EndpointId: b.id.String()})
		require.NoError(t, err)
		require.True(t, until.Equal(got.GetEndpoint().GetPreviousSecretExpiresAt().AsTime()))
	})

	t.Run("ZeroGraceDropsPrevious", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp := rotate(t, b, durationpb.New(0))
		require.Nil(t, resp.GetPreviousSecretExpiresAt())
		cur, prev, expires := secretColumns(t, b.env, b.id)
		require.Nil(t, prev)
		require.Nil(t, expires)
		keys, err := endpoint.OpenKeys(b.env.keyring, b.id, seal.SigningKeys{Current: cur, Previous: prev, PreviousExpiresAt: expires}, time.Now())
		require.NoError(t, err)
		require.Len(t, keys, 1)
		require.True(t, verifies(t, keys, resp.GetSecret()))
		require.False(t, verifies(t, keys, b.secret))
	})

	t.Run("CustomGrace", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		before := time.Now()
		resp := rotate(t, b, durationpb.New(90*time.Minute))
		require.WithinDuration(t, before.Add(90*time.Minute), resp.GetPreviousSecretExpiresAt().AsTime(), time.Minute)
	})

	t.Run("RotateTwiceKeepsOnlyLastPrevious", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r1 := rotate(t, b, nil)
		r2 := rotate(t, b, nil)
		cur, prev, expires := secretColumns(t, b.env, b.id)
		keys, err := endpoint.OpenKeys(b.env.keyring, b.id, seal.SigningKeys{Current: cur, Previous: prev, PreviousExpiresAt: expires}, time.Now())
		require.NoError(t, err)
		require.Len(t, keys, 2)
		require.True(t, verifies(t, keys, r2.GetSecret()))
		require.True(t, verifies(t, keys, r1.GetSecret()))
		require.False(t, verifies(t, keys, b.secret))
	})

	t.Run("BadGrace", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, d := range []*durationpb.Duration{
			durationpb.New(-time.Second),
			durationpb.New(7*24*time.Hour + time.Second),
			{Seconds: 1, Nanos: -5}, // invalid: signs disagree
		} {
			_, err := b.env.client.RotateSecret(t.Context(), &webhooksv1.RotateSecretRequest{
				OwnerId: ownerA, EndpointId: b.id.String(), GracePeriod: d,
			})
			requireField(t, err, "grace_period")
		}
		// Seven days exactly is the maximum.
		rotate(t, b, durationpb.New(7*24*time.Hour))
	})

	t.Run("CrossOwnerNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		cur, _, _ := secretColumns(t, b.env, b.id)
		_, err := b.env.client.RotateSecret(t.Context(), &webhooksv1.RotateSecretRequest{OwnerId: ownerB, EndpointId: b.id.String()})
		requireNotFound(t, err)
		after, prev, _ := secretColumns(t, b.env, b.id)
		require.Equal(t, cur, after)
		require.Nil(t, prev)
	})
}

func TestSendTest(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		env *testEnv
		id  string
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		env := newTestEnv(t, endpoint.ServiceConfig{})
		return &testBundle{env: env, id: env.create(t, ownerA, "webhook.test").GetEndpoint().GetId()}
	}

	t.Run("PublishesTestEventForThisEndpoint", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		resp, err := b.env.client.SendTest(t.Context(), &webhooksv1.SendTestRequest{OwnerId: ownerA, EndpointId: b.id})
		require.NoError(t, err)
		evs := b.env.publisher.published()
		require.Len(t, evs, 1)
		ev := evs[0]
		require.Equal(t, resp.GetEventId(), ev.ID)
		_, err = uuid.Parse(ev.ID)
		require.NoError(t, err)
		require.Equal(t, ownerA, ev.OwnerID)
		require.Equal(t, event.TypeWebhookTest, ev.Type)
		require.JSONEq(t, fmt.Sprintf(`{"endpoint_id":%q}`, b.id), string(ev.Data))
		// What ingest will check, it passes.
		require.NoError(t, ev.Validate(time.Now()))
		require.True(t, event.Leaves(ev))
	})

	t.Run("DisabledEndpoint", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.env.client.UpdateEndpoint(t.Context(), &webhooksv1.UpdateEndpointRequest{
			OwnerId: ownerA, EndpointId: b.id, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"enabled"}},
		})
		require.NoError(t, err)
		_, err = b.env.client.SendTest(t.Context(), &webhooksv1.SendTestRequest{OwnerId: ownerA, EndpointId: b.id})
		requireCode(t, err, codes.FailedPrecondition)
		require.Empty(t, b.env.publisher.published())
	})

	t.Run("CrossOwnerNotFound", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.env.client.SendTest(t.Context(), &webhooksv1.SendTestRequest{OwnerId: ownerB, EndpointId: b.id})
		requireNotFound(t, err)
		require.Empty(t, b.env.publisher.published())
	})

	t.Run("PublishFailureIsInternal", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.env.publisher.mu.Lock()
		b.env.publisher.err = errors.New("database is down")
		b.env.publisher.mu.Unlock()
		_, err := b.env.client.SendTest(t.Context(), &webhooksv1.SendTestRequest{OwnerId: ownerA, EndpointId: b.id})
		st := requireCode(t, err, codes.Internal)
		require.NotContains(t, st.Message(), "database is down")
		require.Contains(t, b.env.logs.String(), "database is down")
	})
}

func TestLogsHoldNoSecrets(t *testing.T) {
	t.Parallel()

	env := newTestEnv(t, endpoint.ServiceConfig{})
	created := env.create(t, ownerA)
	id := created.GetEndpoint().GetId()
	rotated, err := env.client.RotateSecret(t.Context(), &webhooksv1.RotateSecretRequest{OwnerId: ownerA, EndpointId: id})
	require.NoError(t, err)
	_, err = env.client.SendTest(t.Context(), &webhooksv1.SendTestRequest{OwnerId: ownerA, EndpointId: id})
	require.NoError(t, err)
	_, err = env.client.DeleteEndpoint(t.Context(), &webhooksv1.DeleteEndpointRequest{OwnerId: ownerA, EndpointId: id})
	require.NoError(t, err)

	logs := env.logs.String()
	require.Contains(t, logs, "endpoint created")
	require.Contains(t, logs, "endpoint secret rotated")
	require.Contains(t, logs, id)
	for _, secret := range []string{created.GetSecret(), rotated.GetSecret()} {
		key, err := webhook.ParseSecret(secret)
		require.NoError(t, err)
		noSecretIn(t, logs, secret, key)
	}
	// Every log line is JSON carrying ids, and none carries the URL.
	for line := range strings.SplitSeq(strings.TrimSpace(logs), "\n") {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		require.NotContains(t, line, "receiver.example.com")
	}
}

func TestCreateEndpointIdempotent(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		env *testEnv
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{env: newTestEnv(t, endpoint.ServiceConfig{})}
	}

	req := func(requestID string) *webhooksv1.CreateEndpointRequest {
		return &webhooksv1.CreateEndpointRequest{
			OwnerId: ownerA, Url: "https://receiver.example.com/hooks", EventTypes: []string{"corpus.*"},
			Headers: map[string]string{"X-Api-Key": "k1"}, RequestId: requestID,
		}
	}

	count := func(t *testing.T, b *testBundle) int {
		t.Helper()
		var n int
		require.NoError(t, b.env.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM webhook_endpoints`).Scan(&n))
		return n
	}

	t.Run("RetryReturnsTheSameEndpointAndSecret", func(t *testing.T) {
		t.Parallel()
		for _, id := range []string{uuid.NewString(), uuid.Must(uuid.NewV7()).String()} {
			b := setup(t)
			first, err := b.env.client.CreateEndpoint(t.Context(), req(id))
			require.NoError(t, err)
			require.False(t, first.GetReplayed())
			again, err := b.env.client.CreateEndpoint(t.Context(), req(id))
			require.NoError(t, err)
			require.True(t, again.GetReplayed())
			require.Equal(t, first.GetEndpoint().GetId(), again.GetEndpoint().GetId())
			require.Equal(t, first.GetSecret(), again.GetSecret(), "the first reply's secret, for a client that lost it")
			require.Equal(t, 1, count(t, b))
		}
	})

	t.Run("PredictableRequestIDReplaysNoSecret", func(t *testing.T) {
		t.Parallel()
		// Not a random UUID (an opaque id, a UUID of version 1, 3 or 5, a
		// UUID in another spelling): whoever read it in a log could replay
		// it, so the replay is the endpoint without the secret.
		for _, id := range []string{"req-1", "6ba7b810-9dad-11d1-80b4-00c04fd430c8", uuid.NewSHA1(uuid.NameSpaceURL, []byte("x")).String(),
			"urn-" + strings.ReplaceAll(uuid.NewString(), "-", "")} {
			b := setup(t)
			first, err := b.env.client.CreateEndpoint(t.Context(), req(id))
			require.NoError(t, err)
			require.NotEmpty(t, first.GetSecret())
			again, err := b.env.client.CreateEndpoint(t.Context(), req(id))
			require.NoError(t, err)
			require.True(t, again.GetReplayed(), id)
			require.Equal(t, first.GetEndpoint().GetId(), again.GetEndpoint().GetId(), id)
			require.Empty(t, again.GetSecret(), id)
			require.Equal(t, 1, count(t, b))
		}
	})

	t.Run("LateReplayHasNoSecret", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := uuid.NewString()
		first, err := b.env.client.CreateEndpoint(t.Context(), req(id))
		require.NoError(t, err)
		_, err = b.env.db.Pool.Exec(t.Context(), `UPDATE webhook_endpoint_requests SET created_at = now() - $1::interval`,
			(endpoint.SecretReplayWindow + time.Second).String())
		require.NoError(t, err)
		again, err := b.env.client.CreateEndpoint(t.Context(), req(id))
		require.NoError(t, err)
		require.True(t, again.GetReplayed(), "still nothing created twice")
		require.Equal(t, first.GetEndpoint().GetId(), again.GetEndpoint().GetId())
		require.Empty(t, again.GetSecret(), "past the replay window")
	})

	t.Run("ConcurrentCreatesMakeOne", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const n = 8
		type reply struct {
			resp *webhooksv1.CreateEndpointResponse
			err  error
		}
		replies := make(chan reply, n)
		raceID := uuid.NewString()
		startGun := make(chan struct{})
		for range n {
			go func() {
				<-startGun
				resp, err := b.env.client.CreateEndpoint(t.Context(), req(raceID))
				replies <- reply{resp, err}
			}()
		}
		close(startGun)
		ids, secrets, fresh := map[string]bool{}, map[string]bool{}, 0
		for range n {
			r := <-replies
			require.NoError(t, r.err)
			ids[r.resp.GetEndpoint().GetId()] = true
			secrets[r.resp.GetSecret()] = true
			if !r.resp.GetReplayed() {
				fresh++
			}
		}
		require.Len(t, ids, 1, "one endpoint")
		require.Len(t, secrets, 1, "one secret")
		require.Equal(t, 1, fresh, "exactly one call created it")
		require.Equal(t, 1, count(t, b))
	})

	t.Run("OtherParametersAreAlreadyExists", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := b.env.client.CreateEndpoint(t.Context(), req("req-1"))
		require.NoError(t, err)
		for name, change := range map[string]func(*webhooksv1.CreateEndpointRequest){
			"URL":    func(r *webhooksv1.CreateEndpointRequest) { r.Url = "https://other.example.com/" },
			"Types":  func(r *webhooksv1.CreateEndpointRequest) { r.EventTypes = []string{"*"} },
			"Header": func(r *webhooksv1.CreateEndpointRequest) { r.Headers = map[string]string{"X-Api-Key": "k2"} },
			"Scheme": func(r *webhooksv1.CreateEndpointRequest) {
				r.SignatureScheme = webhooksv1.SignatureScheme_SIGNATURE_SCHEME_V1A
			},
			"Embed":    func(r *webhooksv1.CreateEndpointRequest) { r.EmbedId = "emb_1" },
			"Comment":  func(r *webhooksv1.CreateEndpointRequest) { r.Description = "x" },
			"Rate":     func(r *webhooksv1.CreateEndpointRequest) { r.MaxPerSecond = 5 },
			"Ordered":  func(r *webhooksv1.CreateEndpointRequest) { r.Ordered = true },
			"InFlight": func(r *webhooksv1.CreateEndpointRequest) { r.MaxInFlight = 4 },
		} {
			r := req("req-1")
			change(r)
			_, err := b.env.client.CreateEndpoint(t.Context(), r)
			st := requireCode(t, err, codes.AlreadyExists)
			require.Contains(t, st.Message(), "request_id", name)
			require.NotContains(t, st.Message(), "k2", "no header value echoed")
		}
		require.Equal(t, 1, count(t, b))
	})

	t.Run("ScopedToTheOwner", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		a, err := b.env.client.CreateEndpoint(t.Context(), req("req-1"))
		require.NoError(t, err)
		other := req("req-1")
		other.OwnerId = ownerB
		o, err := b.env.client.CreateEndpoint(t.Context(), other)
		require.NoError(t, err)
		require.False(t, o.GetReplayed())
		require.NotEqual(t, a.GetEndpoint().GetId(), o.GetEndpoint().GetId())
	})

	t.Run("RotatedSecretIsNotShownAgain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first, err := b.env.client.CreateEndpoint(t.Context(), req("req-1"))
		require.NoError(t, err)
		_, err = b.env.client.RotateSecret(t.Context(), &webhooksv1.RotateSecretRequest{OwnerId: ownerA, EndpointId: first.GetEndpoint().GetId()})
		require.NoError(t, err)
		again, err := b.env.client.CreateEndpoint(t.Context(), req("req-1"))
		require.NoError(t, err)
		require.True(t, again.GetReplayed())
		require.Equal(t, first.GetEndpoint().GetId(), again.GetEndpoint().GetId())
		require.Empty(t, again.GetSecret(), "the first secret is no longer current; nor is the new one this call's to show")
	})

	t.Run("ExpiredOrDeletedCreatesAnew", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first, err := b.env.client.CreateEndpoint(t.Context(), req("req-old"))
		require.NoError(t, err)
		_, err = b.env.db.Pool.Exec(t.Context(), `UPDATE webhook_endpoint_requests SET created_at = now() - interval '25 hours'`)
		require.NoError(t, err)
		second, err := b.env.client.CreateEndpoint(t.Context(), req("req-old"))
		require.NoError(t, err)
		require.False(t, second.GetReplayed(), "after 24 h the request id is forgotten")
		require.NotEqual(t, first.GetEndpoint().GetId(), second.GetEndpoint().GetId())
		var rows int
		require.NoError(t, b.env.db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM webhook_endpoint_requests`).Scan(&rows))
		require.Equal(t, 1, rows, "the expired one was pruned")

		_, err = b.env.client.DeleteEndpoint(t.Context(), &webhooksv1.DeleteEndpointRequest{OwnerId: ownerA, EndpointId: second.GetEndpoint().GetId()})
		require.NoError(t, err)
		third, err := b.env.client.CreateEndpoint(t.Context(), req("req-old"))
		require.NoError(t, err)
		require.False(t, third.GetReplayed(), "a deleted endpoint is not resurrected by a replay")
	})

	t.Run("KeyPairReplayHasNoSecret", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := req("req-v1a")
		r.SignatureScheme = webhooksv1.SignatureScheme_SIGNATURE_SCHEME_V1A
		first, err := b.env.client.CreateEndpoint(t.Context(), r)
		require.NoError(t, err)
		again, err := b.env.client.CreateEndpoint(t.Context(), r)
		require.NoError(t, err)
		require.True(t, again.GetReplayed())
		require.Empty(t, again.GetSecret())
		require.Equal(t, first.GetEndpoint().GetPublicKey(), again.GetEndpoint().GetPublicKey())
	})

	t.Run("BadRequestID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, id := range []string{strings.Repeat("r", endpoint.MaxRequestIDLen+1), "req 1", "req/1", "req\x00", injectionValues[0]} {
			_, err := b.env.client.CreateEndpoint(t.Context(), req(id))
			requireField(t, err, "request_id")
		}
		require.Zero(t, count(t, b))
	})
}
