package fanout

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/job"
)

// setControl pauses an endpoint until pausedUntil (nil: not paused) and
// makes it ordered or not.
func (b *testBundle) setControl(t *testing.T, id string, pausedUntil *time.Time, ordered bool) {
	t.Helper()
	_, err := b.db.Pool.Exec(context.Background(),
		`UPDATE webhook_endpoints SET paused_until = $2, pause_reason = 'test', ordered = $3 WHERE id = $1`, id, pausedUntil, ordered)
	require.NoError(t, err)
}

// seqs returns each delivery's args.seq (0 when absent) by endpoint id.
func (b *testBundle) seqs(t *testing.T, eventID string) map[string]int64 {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(),
		`SELECT args->>'endpoint_id', coalesce((args->>'seq')::bigint, 0) FROM river_job WHERE args->>'event_id' = $1`, eventID)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var (
			ep  string
			seq int64
		)
		require.NoError(t, rows.Scan(&ep, &seq))
		out[ep] = seq
	}
	require.NoError(t, rows.Err())
	return out
}

func (b *testBundle) eventSeq(t *testing.T, eventID string) int64 {
	t.Helper()
	var seq int64
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT seq FROM events WHERE id = $1`, eventID).Scan(&seq))
	return seq
}

func TestReceiverControls(t *testing.T) {
	t.Parallel()

	// Both ways in: the fanout job and the inline fanout of ingest.
	paths := map[string]func(t *testing.T, b *testBundle, eventID string){
		"Job":    func(t *testing.T, b *testBundle, eventID string) { t.Helper(); b.work(t, eventID) },
		"Inline": func(t *testing.T, b *testBundle, eventID string) { t.Helper(); require.Zero(t, b.inlineTx(t, eventID)) },
	}
	for name, fanout := range paths {
		t.Run(name+"PausedEndpointGetsItsDeliveryAtThePauseEnd", func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			// Failing too (the 429 that paused it counts as a failure): the
			// pause's end replaces the failing cool-down.
			paused := b.insertEndpoint(t, []string{"*"}, endpointOpts{failing: true})
			over := b.insertEndpoint(t, []string{"*"}, endpointOpts{})
			until := time.Now().Add(10 * time.Minute)
			b.setControl(t, paused, &until, false)
			b.setControl(t, over, new(time.Now().Add(-time.Minute)), false)
			before := time.Now()

			fanout(t, b, b.insertEvent(t, ownerID, "code.issued", "code://1", "{}"))

			byEndpoint := map[string]delivery{}
			for _, d := range deliveries(t, b.db.Pool) {
				byEndpoint[d.EndpointID] = d
			}
			require.Equal(t, "scheduled", byEndpoint[paused].State)
			require.WithinDuration(t, until.Add(job.PauseProbeGap), byEndpoint[paused].ScheduledAt, time.Millisecond,
				"not fetched (and snoozed) before the receiver asked for more, and after the pause's probe")
			require.Equal(t, "available", byEndpoint[over].State, "a pause in the past is over")
			require.WithinDuration(t, before, byEndpoint[over].ScheduledAt, 30*time.Second)
		})

		t.Run(name+"OrderedEndpointsDeliveriesCarryTheIngestSequence", func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			ordered := b.insertEndpoint(t, []string{"*"}, endpointOpts{})
			plain := b.insertEndpoint(t, []string{"*"}, endpointOpts{})
			b.setControl(t, ordered, nil, true)
			ev := b.insertEvent(t, ownerID, "code.issued", "code://1", "{}")

			fanout(t, b, ev)

			seqs := b.seqs(t, ev)
			require.Equal(t, b.eventSeq(t, ev), seqs[ordered], "the order key travels with the delivery")
			require.Positive(t, seqs[ordered])
			require.Zero(t, seqs[plain], "unordered endpoints' deliveries carry none")
		})
	}
}
