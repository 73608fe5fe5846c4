package fanout

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/access/accesstest"
	"github.com/standmeet/webhook-dispatcher/internal/decision"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/scope"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// record reads and decodes eventID's decision record; nil when none is
// recorded.
func (b *testBundle) record(t *testing.T, eventID string) *decision.Record {
	t.Helper()
	var enc []byte
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT fanout FROM events WHERE id = $1`, eventID).Scan(&enc))
	if enc == nil {
		return nil
	}
	rec, err := decision.Decode(enc)
	require.NoError(t, err)
	return rec
}

// reasons is a record as reason → endpoint ids, for comparing with
// literals written in any order (endpoint ids are random here, and the
// order by id is ThousandsOfEndpointsAreCountedAndSampled's); each
// reason's ids are checked to be all of its count.
func reasons(t *testing.T, rec *decision.Record) map[decision.Reason][]string {
	t.Helper()
	require.NotNil(t, rec, "a decision is recorded")
	out := map[decision.Reason][]string{}
	for _, o := range rec.Outcomes {
		require.Len(t, o.EndpointIDs, o.Count, "%s: every endpoint sampled, so the test sees them all", o.Reason)
		out[o.Reason] = sorted(o.EndpointIDs...)
	}
	return out
}

func sorted(ids ...string) []string {
	return slices.Sorted(slices.Values(ids))
}

func (b *testBundle) pause(t *testing.T, endpointID string) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(), `UPDATE webhook_endpoints SET paused_until = now() + interval '1 minute', pause_reason = 'HTTP 429 with Retry-After' WHERE id = $1`, endpointID)
	require.NoError(t, err)
}

func TestDecisionRecord(t *testing.T) {
	t.Parallel()

	published := `{"op":"updated","published":true}`

	// fanOut runs the fanout of eventID the one way or the other.
	for name, fanOut := range map[string]func(t *testing.T, b *testBundle, eventID string){
		"Worker": func(t *testing.T, b *testBundle, eventID string) { t.Helper(); b.work(t, eventID) },
		"Inline": func(t *testing.T, b *testBundle, eventID string) {
			t.Helper()
			if b.inlineTx(t, eventID) > 0 {
				// Deferred: the fanout job decides and records.
				require.Nil(t, b.record(t, eventID), "nothing recorded until the access service has answered")
				b.work(t, eventID)
			}
		},
	} {
		t.Run(name+"EveryEndpointOfTheOwnerHasItsReason", func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			b.fake.SetEmbed("emb_2", accesstest.Embed{OwnerID: ownerID, CodeID: "code_2"})
			b.fake.SetCode("code_2", accesstest.Code{ExpiresAt: time.Now().Add(time.Hour), SubjectPrefixes: []string{"wiki://software/"}})
			b.fake.RevokeCode("code_2")
			var (
				subscribed = b.insertEndpoint(t, []string{"corpus.*"}, endpointOpts{})
				other      = b.insertEndpoint(t, []string{"booking.*"}, endpointOpts{})
				disabled   = b.insertEndpoint(t, []string{"*"}, endpointOpts{disabled: true})
				failing    = b.insertEndpoint(t, []string{"*"}, endpointOpts{failing: true})
				paused     = b.insertEndpoint(t, []string{"*"}, endpointOpts{})
				admitted   = b.insertEndpoint(t, []string{"*"}, endpointOpts{embedID: "emb_1"})
				revoked    = b.insertEndpoint(t, []string{"*"}, endpointOpts{embedID: "emb_2"})
				_          = b.insertEndpoint(t, []string{"*"}, endpointOpts{owner: otherOwnerID})
			)
			b.pause(t, paused)

			note := b.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, published)
			fanOut(t, b, note)
			require.Equal(t, map[decision.Reason][]string{
				decision.NotSubscribed: {other},
				decision.Disabled:      sorted(disabled),
				decision.EmbedDenied:   sorted(revoked),
				decision.Queued:        sorted(subscribed, admitted),
				decision.CoolingDown:   sorted(failing),
				decision.Paused:        sorted(paused),
			}, reasons(t, b.record(t, note)), "the owner's seven endpoints, never another owner's")
			require.ElementsMatch(t, []string{subscribed, failing, paused, admitted}, deliveredTo(t, b.db.Pool, note),
				"the record says what the fanout did")

			draft := b.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, `{"op":"updated","published":false}`)
			fanOut(t, b, draft)
			got := reasons(t, b.record(t, draft))
			require.Equal(t, sorted(subscribed, failing, paused), got[decision.NotPublished], "the published slice")
			require.Equal(t, sorted(admitted, revoked), got[decision.EmbedDenied], "the access service said no")

			test := b.insertEvent(t, ownerID, event.TypeWebhookTest, "webhook://test", fmt.Sprintf(`{"endpoint_id":%q}`, other))
			fanOut(t, b, test)
			require.Equal(t, map[decision.Reason][]string{
				decision.Disabled:      sorted(disabled),
				decision.NotTestTarget: sorted(subscribed, failing, paused, admitted, revoked),
				decision.Queued:        sorted(other),
			}, reasons(t, b.record(t, test)), "a test goes to the endpoint it names only, subscribed or not")
		})

		t.Run(name+"AnOwnerWithoutEndpointsIsDecidedToo", func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ev := b.insertEvent(t, ownerID, "code.issued", "code://1", "{}")
			fanOut(t, b, ev)
			rec := b.record(t, ev)
			require.NotNil(t, rec, "decided: there was nowhere to go")
			require.Empty(t, rec.Outcomes)
		})
	}

	t.Run("HandedOff", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ep := b.insertEndpoint(t, []string{"*"}, endpointOpts{})
		b.inline.WithHandoff(&handoff{accept: func(string) bool { return true }})
		ev := b.insertEvent(t, ownerID, "code.issued", "code://1", "{}")
		_, handed := b.inlineTxHanded(t, ev)
		require.Len(t, handed, 1)
		require.Equal(t, map[decision.Reason][]string{decision.HandedOff: {ep}}, reasons(t, b.record(t, ev)))
	})

	t.Run("EmbedWithoutAnAnswer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		embedded := b.insertEndpoint(t, []string{"*"}, endpointOpts{embedID: "emb_1"})
		ev := b.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, published)

		b.worker = NewWorker(b.db.Pool, scope.NewDecider(nil, b.metrics, b.logger).Func(), nil, b.metrics, b.logger)
		b.work(t, ev)
		require.Equal(t, map[decision.Reason][]string{decision.NoAccessService: {embedded}}, reasons(t, b.record(t, ev)),
			"no access service configured")

		b.worker = NewWorker(b.db.Pool, func(context.Context, *webhook.Event, scope.Endpoint) (scope.Decision, error) {
			return scope.Decision{Rule: scope.RuleEmbed, Reason: scope.ReasonAccessError}, nil
		}, nil, b.metrics, b.logger)
		b.work(t, ev)
		require.Equal(t, map[decision.Reason][]string{decision.AccessError: {embedded}}, reasons(t, b.record(t, ev)),
			"the access service refused the question")

		b.worker = NewWorker(b.db.Pool, func(context.Context, *webhook.Event, scope.Endpoint) (scope.Decision, error) {
			return scope.Decision{Rule: scope.RuleInternal, Reason: scope.ReasonInternalType}, nil
		}, nil, b.metrics, b.logger)
		b.work(t, ev)
		require.Equal(t, map[decision.Reason][]string{decision.Refused: {embedded}}, reasons(t, b.record(t, ev)),
			"any other rule")
	})

	t.Run("AccessDownRecordsNothingUntilDecided", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		embedded := b.insertEndpoint(t, []string{"*"}, endpointOpts{embedID: "emb_1"})
		ev := b.insertEvent(t, ownerID, event.TypeNoteChanged, noteSubject, published)
		b.fake.SetDown(true)
		require.ErrorIs(t, work(context.Background(), b.worker, b.client, ev), scope.ErrUnavailable)
		require.Nil(t, b.record(t, ev), "no guess")
		b.fake.SetDown(false)
		b.work(t, ev)
		require.Equal(t, map[decision.Reason][]string{decision.Queued: {embedded}}, reasons(t, b.record(t, ev)))
	})

	t.Run("ThousandsOfEndpointsAreCountedAndSampled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		subscribed := b.insertEndpoints(t, 30, []string{"code.*"}, endpointOpts{})
		others := b.insertEndpoints(t, 3000, []string{"booking.*"}, endpointOpts{})
		ev := b.insertEvent(t, ownerID, "code.issued", "code://1", "{}")
		require.Zero(t, b.inlineTx(t, ev))

		var size int
		require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT octet_length(fanout) FROM events WHERE id = $1`, ev).Scan(&size))
		require.LessOrEqual(t, size, 1+2*(1+3+1+decision.SampleSize*16), "two reasons: a count and %d ids each", decision.SampleSize)

		slices.Sort(subscribed)
		slices.Sort(others)
		rec := b.record(t, ev)
		require.Equal(t, []decision.Outcome{
			{Reason: decision.NotSubscribed, Count: 3000, EndpointIDs: others[:decision.SampleSize]},
			{Reason: decision.Queued, Count: 30, EndpointIDs: subscribed[:decision.SampleSize]},
		}, rec.Outcomes, "the first by id")
		require.Equal(t, 3030, rec.Endpoints())
	})
}
