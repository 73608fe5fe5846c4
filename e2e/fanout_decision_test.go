package e2e

import (
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/fieldmaskpb"

	"github.com/standmeet/webhook-dispatcher/internal/access/accesstest"
	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// TestWhereItWent: an event says where it went and why not, endpoint by
// endpoint of its owner, in `dispatcher events get`, over gRPC and over the
// HTTP/JSON API, and never names another owner's endpoint.
func TestWhereItWent(t *testing.T) {
	t.Parallel()

	fake := accesstest.NewServer()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = fake.Serve(lis) }()
	t.Cleanup(fake.Stop)
	const owner = "owner-why"
	fake.Load(accesstest.Table{
		Embeds: map[string]accesstest.Embed{
			"embed-ok":      {OwnerID: owner, CodeID: "code-ok"},
			"embed-revoked": {OwnerID: owner, CodeID: "code-revoked"},
		},
		Codes: map[string]accesstest.Code{
			"code-ok":      {SubjectPrefixes: []string{"wiki://public/"}},
			"code-revoked": {SubjectPrefixes: []string{"wiki://public/"}, Revoked: true},
		},
	})
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"},
		env: []string{"DISPATCHER_ACCESS_ADDR=" + lis.Addr().String()}})

	ok := newReceiver(t)
	failing := newReceiver(t)
	failing.setHandler(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	pausing := newReceiver(t)
	pausing.setHandler(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "3600")
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	createEmbedded := func(embedID string) string {
		t.Helper()
		res, err := d.endpoints().CreateEndpoint(adminCtx(t), &webhooksv1.CreateEndpointRequest{
			OwnerId: owner, Url: ok.URL, EventTypes: []string{"corpus.*"}, EmbedId: embedID,
		})
		require.NoError(t, err)
		return res.GetEndpoint().GetId()
	}
	ep := map[string]string{
		"subscribed":   createEndpoint(t, d, owner, ok.URL, "corpus.*").GetEndpoint().GetId(),
		"other":        createEndpoint(t, d, owner, ok.URL, "booking.*").GetEndpoint().GetId(),
		"disabled":     createEndpoint(t, d, owner, ok.URL, "*").GetEndpoint().GetId(),
		"failing":      createEndpoint(t, d, owner, failing.URL, "*").GetEndpoint().GetId(),
		"paused":       createEndpoint(t, d, owner, pausing.URL, "*").GetEndpoint().GetId(),
		"embedOK":      createEmbedded("embed-ok"),
		"embedRevoked": createEmbedded("embed-revoked"),
	}
	foreign := createEndpoint(t, d, "someone-else", ok.URL, "*").GetEndpoint().GetId()
	_, err = d.endpoints().UpdateEndpoint(adminCtx(t), &webhooksv1.UpdateEndpointRequest{
		OwnerId: owner, EndpointId: ep["disabled"], Enabled: false, UpdateMask: &fieldmaskpb.FieldMask{Paths: []string{"enabled"}},
	})
	require.NoError(t, err)

	// One event makes the failing endpoint fail and the pausing one pause.
	publish(t, d, newEvent(owner, "code.issued", "code://why/1", `{}`))
	waitFor(t, 60*time.Second, "one endpoint failing, one paused", func() bool {
		f, err := d.endpoints().GetEndpoint(adminCtx(t), &webhooksv1.GetEndpointRequest{OwnerId: owner, EndpointId: ep["failing"]})
		require.NoError(t, err)
		p, err := d.endpoints().GetEndpoint(adminCtx(t), &webhooksv1.GetEndpointRequest{OwnerId: owner, EndpointId: ep["paused"]})
		require.NoError(t, err)
		return f.GetEndpoint().GetFailingSince() != nil && p.GetEndpoint().GetPausedUntil() != nil
	})

	// getEvent waits until the event's decision is recorded (an event for
	// embed-bound endpoints is decided by a fanout job, after the publish).
	getEvent := func(t *testing.T, id string) *webhooksv1.GetEventResponse {
		t.Helper()
		var got *webhooksv1.GetEventResponse
		waitFor(t, 60*time.Second, "the decision recorded", func() bool {
			got, err = d.endpoints().GetEvent(adminCtx(t), &webhooksv1.GetEventRequest{OwnerId: owner, EventId: id})
			require.NoError(t, err)
			return got.GetFanout().GetRecorded()
		})
		return got
	}
	// reasons is a decision as reason → endpoint names.
	names := map[string]string{}
	for name, id := range ep {
		names[id] = name
	}
	reasons := func(t *testing.T, f *webhooksv1.FanoutDecision) map[string][]string {
		t.Helper()
		out := map[string][]string{}
		for _, o := range f.GetOutcomes() {
			require.Len(t, o.GetEndpointIds(), int(o.GetCount()))
			require.Equal(t, strings.HasPrefix(o.GetReason().String(), "FANOUT_REASON_DELIVERY_"), o.GetDelivered())
			require.NotEmpty(t, o.GetDescription())
			for _, id := range o.GetEndpointIds() {
				require.NotEqual(t, foreign, id, "never another owner's endpoint")
				out[o.GetReason().String()] = append(out[o.GetReason().String()], names[id])
			}
			sort.Strings(out[o.GetReason().String()])
		}
		return out
	}

	published := newEvent(owner, event.TypeNoteChanged, "wiki://public/notes/1", `{"op":"updated","published":true}`)
	publish(t, d, published)
	got := getEvent(t, published.GetId())
	require.EqualValues(t, len(ep), got.GetFanout().GetEndpoints())
	require.Equal(t, map[string][]string{
		"FANOUT_REASON_DELIVERY_QUEUED":       {"embedOK", "subscribed"},
		"FANOUT_REASON_DELIVERY_COOLING_DOWN": {"failing"},
		"FANOUT_REASON_DELIVERY_PAUSED":       {"paused"},
		"FANOUT_REASON_NOT_SUBSCRIBED":        {"other"},
		"FANOUT_REASON_DISABLED":              {"disabled"},
		"FANOUT_REASON_EMBED_DENIED":          {"embedRevoked"},
	}, reasons(t, got.GetFanout()))
	require.True(t, got.GetFanout().GetOutcomes()[0].GetDelivered(), "what was delivered first")

	draft := newEvent(owner, event.TypeNoteChanged, "wiki://public/notes/2", `{"op":"updated","published":false}`)
	publish(t, d, draft)
	require.Equal(t, map[string][]string{
		"FANOUT_REASON_NOT_PUBLISHED":  {"failing", "paused", "subscribed"},
		"FANOUT_REASON_EMBED_DENIED":   {"embedOK", "embedRevoked"},
		"FANOUT_REASON_NOT_SUBSCRIBED": {"other"},
		"FANOUT_REASON_DISABLED":       {"disabled"},
	}, reasons(t, getEvent(t, draft.GetId()).GetFanout()))

	test, err := d.endpoints().SendTest(adminCtx(t), &webhooksv1.SendTestRequest{OwnerId: owner, EndpointId: ep["other"]})
	require.NoError(t, err)
	require.Equal(t, map[string][]string{
		"FANOUT_REASON_DELIVERY_HANDED_OFF": {"other"},
		"FANOUT_REASON_NOT_TEST_TARGET":     {"embedOK", "embedRevoked", "failing", "paused", "subscribed"},
		"FANOUT_REASON_DISABLED":            {"disabled"},
	}, reasons(t, getEvent(t, test.GetEventId()).GetFanout()))

	t.Run("CLI", func(t *testing.T) {
		t.Parallel()
		for id, want := range map[string][]string{
			published.GetId(): {"delivery queued", "delivery cooling down", "delivery paused", "not subscribed", "disabled", "embed denied"},
			draft.GetId():     {"not published", "embed denied"},
			test.GetEventId(): {"delivery handed off", "not test target"},
		} {
			out, err := cli(t, d, adminToken, "events", "get", "--owner", owner, id)
			require.NoError(t, err, out)
			require.Contains(t, out, "where it went (the owner's 7 endpoints when it was fanned out):")
			for _, label := range want {
				require.Regexp(t, `(?m)^`+label+` +[0-9a-f-]{36}$`, out, "%s names its endpoints", label)
			}
			require.NotContains(t, out, foreign)
		}
		// Another owner's event looks like a missing one, as before.
		out, err := cli(t, d, adminToken, "events", "get", "--owner", "someone-else", published.GetId())
		require.Error(t, err)
		require.Contains(t, out, "NotFound")
	})

	t.Run("HTTP", func(t *testing.T) {
		t.Parallel()
		code, _, body := httpCall(t, d, http.MethodGet, "/v1/events/"+published.GetId()+"?owner_id="+owner, adminToken, "", nil)
		require.Equal(t, http.StatusOK, code, "%v", body)
		fanout := body["fanout"].(map[string]any)
		require.Equal(t, true, fanout["recorded"])
		require.InDelta(t, len(ep), fanout["endpoints"], 0)
		seen := map[string]bool{}
		for _, o := range fanout["outcomes"].([]any) {
			o := o.(map[string]any)
			seen[o["reason"].(string)] = true
			require.NotEmpty(t, o["endpoint_ids"])
		}
		require.Equal(t, map[string]bool{
			"FANOUT_REASON_DELIVERY_QUEUED": true, "FANOUT_REASON_DELIVERY_COOLING_DOWN": true, "FANOUT_REASON_DELIVERY_PAUSED": true,
			"FANOUT_REASON_NOT_SUBSCRIBED": true, "FANOUT_REASON_DISABLED": true, "FANOUT_REASON_EMBED_DENIED": true,
		}, seen, "proto field and enum names, as over gRPC")

		code, _, _ = httpCall(t, d, http.MethodGet, "/v1/events/"+published.GetId()+"?owner_id=someone-else", adminToken, "", nil)
		require.Equal(t, http.StatusNotFound, code, "another owner's event, decision and all")
		code, _, body = httpCall(t, d, http.MethodGet, "/v1/events/"+strings.Repeat("e", 129)+"?owner_id="+owner, adminToken, "", nil)
		require.Equal(t, http.StatusBadRequest, code)
		require.Equal(t, []string{"event_id"}, fieldViolations(body))
		code, _, body = httpCall(t, d, http.MethodGet, "/v1/events/"+published.GetId(), adminToken, "", nil)
		require.Equal(t, http.StatusBadRequest, code)
		require.Equal(t, []string{"owner_id"}, fieldViolations(body))
		code, _, _ = httpCall(t, d, http.MethodGet, "/v1/events/"+published.GetId()+"?owner_id="+owner, publisherToken, "", nil)
		require.Equal(t, http.StatusForbidden, code, "the publisher token reads no events")
	})
}
