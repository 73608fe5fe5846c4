package scope

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// stubAdmitter answers EmbedAdmits from fields and records the questions.
type stubAdmitter struct {
	mu     sync.Mutex
	admits bool
	reason string
	err    error
	asked  []string // embed ids, in order
}

func (s *stubAdmitter) EmbedAdmits(_ context.Context, ownerID, embedID string, e *webhook.Event) (bool, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked = append(s.asked, ownerID+"/"+embedID+"/"+e.ID)
	return s.admits, s.reason, s.err
}

func (s *stubAdmitter) calls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.asked)
}

func TestDecider(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		admitter *stubAdmitter
		decider  *Decider
		endpoint Endpoint
		logs     *bytes.Buffer
		metrics  *metrics.Metrics
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		var (
			admitter = &stubAdmitter{admits: true, reason: "admitted"}
			logs     = &bytes.Buffer{}
			m        = metrics.New(prometheus.NewRegistry(), metrics.Labels{})
		)
		logger := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		return &testBundle{
			admitter: admitter,
			decider:  NewDecider(admitter, m, logger),
			endpoint: Endpoint{ID: "8c7f4a4e-0000-4000-8000-000000000001", OwnerID: "owner_1"},
			logs:     logs,
			metrics:  m,
		}
	}

	newEvent := func(typ, data string) *webhook.Event {
		return &webhook.Event{
			ID:         "evt_1",
			OwnerID:    "owner_1",
			Type:       typ,
			Subject:    "wiki://software/project/standmeet/architecture",
			OccurredAt: time.Date(2026, 9, 1, 0, 0, 0, 0, time.UTC),
			Data:       json.RawMessage(data),
		}
	}

	requireDecision := func(t *testing.T, bundle *testBundle, e *webhook.Event, admit bool, rule string) Decision {
		t.Helper()
		dec, err := bundle.decider.Decide(context.Background(), e, bundle.endpoint)
		require.NoError(t, err)
		require.Equal(t, admit, dec.Admit, "decision %+v", dec)
		require.Equal(t, rule, dec.Rule)
		require.NotEmpty(t, dec.Reason)

		result := ResultDeny
		if admit {
			result = ResultAdmit
		}
		require.InDelta(t, 1, testutil.ToFloat64(bundle.metrics.ScopeDecisionsTotal.WithLabelValues(rule, result)), 0)
		return dec
	}

	t.Run("RawSubjectNeverLeaves", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		for i, subject := range []string{"raw://upload/1", "RAW://x", " raw://x"} {
			e := newEvent("code.issued", `{}`)
			e.Subject = subject
			dec, err := bundle.decider.Decide(context.Background(), e, bundle.endpoint)
			require.NoError(t, err)
			require.Equal(t, Decision{Rule: RuleRaw, Reason: ReasonRawSubject}, dec)
			require.InDelta(t, i+1, testutil.ToFloat64(bundle.metrics.ScopeDecisionsTotal.WithLabelValues(RuleRaw, ResultDeny)), 0)
		}
	})

	t.Run("RawSubjectNeverLeavesEvenPublishedToEmbed", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.endpoint.EmbedID = "emb_1"
		e := newEvent(event.TypeNoteChanged, `{"published":true}`)
		e.Subject = "raw://notes/1"
		requireDecision(t, bundle, e, false, RuleRaw)
		require.Zero(t, bundle.admitter.calls())
	})

	t.Run("InternalTypeNeverLeaves", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		requireDecision(t, bundle, newEvent("internal.audit.logged", `{}`), false, RuleInternal)
	})

	t.Run("OtherOwnersEndpointDenied", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.endpoint.OwnerID = "owner_2"
		requireDecision(t, bundle, newEvent("code.issued", `{}`), false, RuleOwner)
	})

	t.Run("UnscopedTypeAdmitted", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		requireDecision(t, bundle, newEvent("booking.created", `{}`), true, RuleUnscoped)
	})

	t.Run("UnscopedTypeAdmittedToEmbedWithoutAsking", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.endpoint.EmbedID = "emb_1"
		bundle.admitter.admits = false
		requireDecision(t, bundle, newEvent("code.revoked", `{}`), true, RuleUnscoped)
		require.Zero(t, bundle.admitter.calls())
	})

	t.Run("TestEventOnlyToNamedEndpoint", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		e := newEvent(event.TypeWebhookTest, fmt.Sprintf(`{"endpoint_id":%q}`, bundle.endpoint.ID))
		require.Equal(t, ReasonTargeted, requireDecision(t, bundle, e, true, RuleTestTarget).Reason)
	})

	t.Run("TestEventMatchesUUIDCaseInsensitively", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		e := newEvent(event.TypeWebhookTest, `{"endpoint_id":"8C7F4A4E-0000-4000-8000-000000000001"}`)
		requireDecision(t, bundle, e, true, RuleTestTarget)
	})

	t.Run("TestEventDeniedToOtherEndpoints", func(t *testing.T) {
		t.Parallel()
		for _, data := range []string{
			`{"endpoint_id":"8c7f4a4e-0000-4000-8000-000000000002"}`,
			`{"endpoint_id":""}`,
			`{"endpoint_id":42}`,
			`{"Endpoint_ID":"8c7f4a4e-0000-4000-8000-000000000001"}`,
			`{}`,
		} {
			bundle := setup(t)
			bundle.endpoint.EmbedID = "emb_1" // a test never consults embeds
			require.Equal(t, ReasonNotTargeted, requireDecision(t, bundle, newEvent(event.TypeWebhookTest, data), false, RuleTestTarget).Reason, data)
			require.Zero(t, bundle.admitter.calls())
		}
	})

	t.Run("StandalonePublishedAdmitted", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		dec := requireDecision(t, bundle, newEvent(event.TypeNoteChanged, `{"op":"updated","published":true,"was_published":true}`), true, RulePublishedSlice)
		require.Equal(t, ReasonPublished, dec.Reason)
	})

	t.Run("StandaloneWasPublishedAdmitted", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		// Un-publishing is heard: the note is no longer published but was.
		dec := requireDecision(t, bundle, newEvent(event.TypeNoteChanged, `{"op":"updated","published":false,"was_published":true}`), true, RulePublishedSlice)
		require.Equal(t, ReasonWasPublished, dec.Reason)
	})

	t.Run("StandaloneUnpublishedDenied", func(t *testing.T) {
		t.Parallel()
		for _, data := range []string{
			`{"op":"updated","published":false,"was_published":false}`,
			`{"op":"created"}`,
			`{"published":"true"}`,
			`{"published":1}`,
			`{"published":null,"was_published":null}`,
			`{"Published":true}`,
			`{"note":{"published":true}}`,
			`not json`,
		} {
			bundle := setup(t)
			dec := requireDecision(t, bundle, newEvent(event.TypeNoteChanged, data), false, RulePublishedSlice)
			require.Equal(t, ReasonUnpublished, dec.Reason, data)
		}
	})

	t.Run("StandaloneNeverAsksAccessService", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		requireDecision(t, bundle, newEvent(event.TypeNoteChanged, `{"published":true}`), true, RulePublishedSlice)
		require.Zero(t, bundle.admitter.calls())
	})

	t.Run("EmbedAdmitted", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.endpoint.EmbedID = "emb_1"
		// Even unpublished: what the embed's code admits is the access service's call.
		requireDecision(t, bundle, newEvent(event.TypeNoteChanged, `{"published":false}`), true, RuleEmbed)
		require.Equal(t, []string{"owner_1/emb_1/evt_1"}, bundle.admitter.asked)
	})

	t.Run("EmbedDenied", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.endpoint.EmbedID = "emb_1"
		bundle.admitter.admits, bundle.admitter.reason = false, "revoked"
		dec := requireDecision(t, bundle, newEvent(event.TypeNoteChanged, `{"published":true}`), false, RuleEmbed)
		require.Equal(t, "revoked", dec.Reason)
	})

	t.Run("EmbedAskedForEveryEvent", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.endpoint.EmbedID = "emb_1"
		e := newEvent(event.TypeNoteChanged, `{"published":true}`)

		dec, err := bundle.decider.Decide(context.Background(), e, bundle.endpoint)
		require.NoError(t, err)
		require.True(t, dec.Admit)

		// The code is revoked between two events: no cached yes.
		bundle.admitter.admits, bundle.admitter.reason = false, "revoked"
		dec, err = bundle.decider.Decide(context.Background(), e, bundle.endpoint)
		require.NoError(t, err)
		require.False(t, dec.Admit)
		require.Equal(t, 2, bundle.admitter.calls())
	})

	t.Run("EmbedUnavailableIsAnError", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.endpoint.EmbedID = "emb_1"
		bundle.admitter.admits = true // must not be trusted alongside an error
		bundle.admitter.err = fmt.Errorf("dial: %w", ErrUnavailable)

		dec, err := bundle.decider.Decide(context.Background(), newEvent(event.TypeNoteChanged, `{"published":true}`), bundle.endpoint)
		require.ErrorIs(t, err, ErrUnavailable)
		require.False(t, dec.Admit)
		require.Equal(t, RuleEmbed, dec.Rule)
		require.InDelta(t, 1, testutil.ToFloat64(bundle.metrics.ScopeDecisionsTotal.WithLabelValues(RuleEmbed, ResultError)), 0)
	})

	t.Run("EmbedPermanentErrorDenies", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.endpoint.EmbedID = "emb_1"
		bundle.admitter.admits = true
		bundle.admitter.err = errors.New("InvalidArgument: data is not JSON")

		dec, err := bundle.decider.Decide(context.Background(), newEvent(event.TypeNoteChanged, `{"published":true}`), bundle.endpoint)
		require.NoError(t, err)
		require.Equal(t, Decision{Rule: RuleEmbed, Reason: ReasonAccessError}, dec)
		require.InDelta(t, 1, testutil.ToFloat64(bundle.metrics.ScopeDecisionsTotal.WithLabelValues(RuleEmbed, ResultError)), 0)
		require.Contains(t, bundle.logs.String(), `"level":"ERROR"`)
	})

	t.Run("WithoutAccessNeverAsksTheAccessService", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		ctx := WithoutAccess(context.Background())
		bundle.endpoint.EmbedID = "emb_1"
		_, err := bundle.decider.Decide(ctx, newEvent(event.TypeNoteChanged, `{"published":true}`), bundle.endpoint)
		require.ErrorIs(t, err, ErrNeedsAccess)
		require.Zero(t, bundle.admitter.calls())
		require.Zero(t, metrics.Sum(bundle.metrics.ScopeDecisionsTotal), "not a decision: not counted")

		// Everything that needs no access service is decided as usual.
		dec, err := bundle.decider.Decide(ctx, newEvent("code.issued", `{}`), bundle.endpoint)
		require.NoError(t, err)
		require.True(t, dec.Admit)
		bundle.endpoint.EmbedID = ""
		dec, err = bundle.decider.Decide(ctx, newEvent(event.TypeNoteChanged, `{"published":false}`), bundle.endpoint)
		require.NoError(t, err)
		require.False(t, dec.Admit)
		require.Zero(t, bundle.admitter.calls())
	})

	t.Run("WithoutAccessAndNoAccessServiceStillDecides", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.decider = NewDecider(nil, bundle.metrics, slog.New(slog.DiscardHandler))
		bundle.endpoint.EmbedID = "emb_1"
		dec, err := bundle.decider.Decide(WithoutAccess(context.Background()), newEvent(event.TypeNoteChanged, `{"published":true}`), bundle.endpoint)
		require.NoError(t, err, "nothing to ask: the embed-bound endpoint admits nothing, decided here")
		require.Equal(t, ReasonNoAccessService, dec.Reason)
	})

	t.Run("NilAdmitterDeniesEmbedBound", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		bundle.decider = NewDecider(nil, bundle.metrics, slog.New(slog.DiscardHandler))

		bundle.endpoint.EmbedID = "emb_1"
		dec := requireDecision(t, bundle, newEvent(event.TypeNoteChanged, `{"published":true}`), false, RuleEmbed)
		require.Equal(t, ReasonNoAccessService, dec.Reason)

		// Standalone endpoints still see the published slice.
		bundle.endpoint.EmbedID = ""
		dec, err := bundle.decider.Decide(context.Background(), newEvent(event.TypeNoteChanged, `{"published":true}`), bundle.endpoint)
		require.NoError(t, err)
		require.True(t, dec.Admit)
	})

	t.Run("LogsEachDecisionAtDebug", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		requireDecision(t, bundle, newEvent("booking.created", `{}`), true, RuleUnscoped)

		var line map[string]any
		require.NoError(t, json.Unmarshal(bundle.logs.Bytes(), &line))
		require.Equal(t, "DEBUG", line["level"])
		require.Equal(t, "evt_1", line["event_id"])
		require.Equal(t, bundle.endpoint.ID, line["endpoint_id"])
		require.Equal(t, RuleUnscoped, line["rule"])
		require.Equal(t, ResultAdmit, line["result"])
	})

	t.Run("FuncIsDecide", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		dec, err := bundle.decider.Func()(context.Background(), newEvent("booking.created", `{}`), bundle.endpoint)
		require.NoError(t, err)
		require.Equal(t, Decision{Admit: true, Rule: RuleUnscoped, Reason: ReasonUnscoped}, dec)
	})

	t.Run("ForEventDecidesTheSame", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		other := Endpoint{ID: "8c7f4a4e-0000-4000-8000-000000000002", OwnerID: "owner_1"}
		for _, e := range []*webhook.Event{
			newEvent(event.TypeNoteChanged, `{"op":"updated","published":true}`),
			newEvent(event.TypeNoteChanged, `{"published":false,"was_published":true}`),
			newEvent(event.TypeNoteChanged, `{"Published":true}`),
			newEvent(event.TypeNoteChanged, `not json`),
			newEvent(event.TypeWebhookTest, fmt.Sprintf(`{"endpoint_id":%q}`, bundle.endpoint.ID)),
			newEvent(event.TypeWebhookTest, `{"endpoint_id":42}`),
		} {
			ctx := ForEvent(context.Background(), e)
			for _, ep := range []Endpoint{bundle.endpoint, other, bundle.endpoint} {
				want, err := bundle.decider.Decide(context.Background(), e, ep)
				require.NoError(t, err)
				got, err := bundle.decider.Decide(ctx, e, ep)
				require.NoError(t, err)
				require.Equal(t, want, got, "%s to %s", e.Data, ep.ID)
			}
		}

		// Another event under the context is decided by its own data, not
		// by the data decoded for the context's event.
		published := newEvent(event.TypeNoteChanged, `{"published":true}`)
		ctx := ForEvent(context.Background(), published)
		_, err := bundle.decider.Decide(ctx, published, bundle.endpoint)
		require.NoError(t, err)
		dec, err := bundle.decider.Decide(ctx, newEvent(event.TypeNoteChanged, `{"published":false}`), bundle.endpoint)
		require.NoError(t, err)
		require.Equal(t, Decision{Rule: RulePublishedSlice, Reason: ReasonUnpublished}, dec)
	})
}
