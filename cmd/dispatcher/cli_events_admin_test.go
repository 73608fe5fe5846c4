package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

func TestPrintFanout(t *testing.T) {
	t.Parallel()

	show := func(t *testing.T, f *webhooksv1.FanoutDecision) string {
		t.Helper()
		var out bytes.Buffer
		require.NoError(t, printFanout(&out, f))
		return out.String()
	}

	t.Run("NotRecorded", func(t *testing.T) {
		t.Parallel()
		require.Contains(t, show(t, &webhooksv1.FanoutDecision{}), "where it went: not recorded")
		require.Contains(t, show(t, nil), "where it went: not recorded", "an older server sends none")
	})

	t.Run("NoEndpoints", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "where it went: nowhere; the owner had no endpoints\n", show(t, &webhooksv1.FanoutDecision{Recorded: true}))
	})

	t.Run("EveryNamedEndpointThenHowManyMore", func(t *testing.T) {
		t.Parallel()
		got := show(t, &webhooksv1.FanoutDecision{Recorded: true, Endpoints: 21, Outcomes: []*webhooksv1.FanoutOutcome{
			{Reason: webhooksv1.FanoutReason_FANOUT_REASON_DELIVERY_HANDED_OFF, Delivered: true, Count: 1, EndpointIds: []string{"ep-a"}},
			{Reason: webhooksv1.FanoutReason_FANOUT_REASON_NOT_SUBSCRIBED, Count: 18, EndpointIds: []string{"ep-b", "ep-c"}, Description: "Not subscribed."},
			{Reason: webhooksv1.FanoutReason_FANOUT_REASON_UNSPECIFIED, Count: 2, Description: "Recorded by a newer dispatcher: Reason(40)."},
		}})
		require.Equal(t, `where it went (the owner's 21 endpoints when it was fanned out):
OUTCOME              ENDPOINT
delivery handed off  ep-a
not subscribed       ep-b
not subscribed       ep-c
not subscribed       (and 16 more)
unknown              (and 2 more)
  not subscribed: Not subscribed.
  unknown: Recorded by a newer dispatcher: Reason(40).
`, got)
	})

	t.Run("FilterRefusalsSayWhy", func(t *testing.T) {
		t.Parallel()
		const a, b, c = "0193a0c4-0000-7000-8000-00000000000a", "0193a0c4-0000-7000-8000-00000000000b", "0193a0c4-0000-7000-8000-00000000000c"
		got := show(t, &webhooksv1.FanoutDecision{Recorded: true, Endpoints: 3, Outcomes: []*webhooksv1.FanoutOutcome{
			{Reason: webhooksv1.FanoutReason_FANOUT_REASON_DELIVERY_QUEUED, Delivered: true, Count: 1, EndpointIds: []string{a}},
			{Reason: webhooksv1.FanoutReason_FANOUT_REASON_FILTERED, Count: 2, EndpointIds: []string{b, c}, Description: "The endpoint's filter refused the event.",
				Details: map[string]string{b: `filter: data.op was "updated", wanted one of ["published"]`, c: "filter: data.x was \x1b[31m"}},
		}})
		require.Equal(t, `where it went (the owner's 3 endpoints when it was fanned out):
OUTCOME          ENDPOINT                              WHY
delivery queued  `+a+`
filtered         `+b+`  filter: data.op was "updated", wanted one of ["published"]
filtered         `+c+`  filter: data.x was `+"\uFFFD"+`[31m
  filtered: The endpoint's filter refused the event.
`, got, "the event's values are quoted, never driving the terminal")
	})
}
