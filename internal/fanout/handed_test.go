package fanout

import (
	"encoding/json"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// handedOff matches River's insert results to the planned deliveries by
// position, checking each, and falls back to decoding every row when they
// do not line up.
func TestHandedOff(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		params  []river.InsertManyParams
		results []*rivertype.JobInsertResult
		mine    []handedParam
		stored  []Stored
	}

	// setup plans three deliveries of two events, the first two handed off,
	// and the rows River would answer, in order.
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		evA := &webhook.Event{ID: "evt_a"}
		evB := &webhook.Event{ID: "evt_b"}
		b := &testBundle{stored: []Stored{{Index: 0, Event: evA}, {Index: 1, Event: evB}}}
		for i, a := range []job.DeliverArgs{
			{EndpointID: "0b7c2f1e-0000-4a8e-9a53-000000000001", EventID: "evt_a"},
			{EndpointID: "0b7c2f1e-0000-4a8e-9a53-000000000002", EventID: "evt_b"},
			{EndpointID: "0b7c2f1e-0000-4a8e-9a53-000000000003", EventID: "evt_b"},
		} {
			b.params = append(b.params, river.InsertManyParams{Args: a})
			// As Postgres returns jsonb: its own key order and spacing.
			row := &rivertype.JobRow{ID: int64(i + 1), Kind: job.KindDeliver, State: rivertype.JobStateAvailable,
				EncodedArgs: []byte(`{"event_id": "` + a.EventID + `", "endpoint_id": "` + a.EndpointID + `"}`), Metadata: []byte(`{}`)}
			if i < 2 {
				row.State = rivertype.JobStateScheduled
				row.Metadata = []byte(`{"output": {"snooze_reason": "direct"}}`)
				b.mine = append(b.mine, handedParam{index: i, event: []*webhook.Event{evA, evB}[i]})
			}
			b.results = append(b.results, &rivertype.JobInsertResult{Job: row})
		}
		return b
	}

	requireHanded := func(t *testing.T, h *Handed, ids ...int64) {
		t.Helper()
		require.Equal(t, len(ids), h.Len())
		for i, id := range ids {
			require.Equal(t, id, h.jobs[i].ID)
			var stored job.DeliverArgs
			require.NoError(t, json.Unmarshal(h.jobs[i].EncodedArgs, &stored))
			require.Equal(t, stored, h.args[i], "the job's own arguments")
			require.Equal(t, stored.EventID, h.events[i].ID, "the job's own event")
		}
	}

	t.Run("ByPosition", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		requireHanded(t, handedOff(b.params, b.results, b.mine, b.stored), 1, 2)
	})

	t.Run("NotADuplicate", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.results[0].UniqueSkippedAsDuplicate = true
		requireHanded(t, handedOff(b.params, b.results, b.mine, b.stored), 2)

		b.results[1].UniqueSkippedAsDuplicate = true
		require.Nil(t, handedOff(b.params, b.results, b.mine, b.stored), "nothing to start")
	})

	t.Run("DecodesWhenOutOfOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.results[0], b.results[2] = b.results[2], b.results[0]
		requireHanded(t, handedOff(b.params, b.results, b.mine, b.stored), 2, 1)
	})

	t.Run("DecodesWhenCountsDiffer", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		requireHanded(t, handedOff(b.params, b.results[:2], b.mine, b.stored), 1, 2)
	})
}
