package endpoint

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
)

// TestStateConditionMatchesMapping checks that the SQL filter and the row
// mapping read stateRules alike: for every River state, due or ahead, the
// filter of each delivery state selects exactly the rows productState puts
// in it.
func TestStateConditionMatchesMapping(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ctx := t.Context()

	now := time.Now().UTC().Truncate(time.Microsecond)
	riverStates := []string{"available", "cancelled", "completed", "discarded", "pending", "retryable", "running", "scheduled"}
	want := map[DeliveryState][]int64{}
	// Each with no note, another job's note, and the note of a delivery
	// handed off to a process directly.
	notes := []string{`{}`, `{"output": {"snooze_reason": "rate_limit"}}`, `{"output": {"snooze_reason": "direct"}}`}
	for _, st := range riverStates {
		for _, at := range []time.Time{now.Add(-time.Minute), now, now.Add(time.Minute)} {
			for _, md := range notes {
				j := testfactory.Job(ctx, t, db.Pool, &testfactory.JobOpts{State: rivertype.JobState(st), ScheduledAt: &at, Metadata: []byte(md)})
				var note struct {
					Output json.RawMessage `json:"output"`
				}
				require.NoError(t, json.Unmarshal(j.Metadata, &note))
				id, output := j.ID, []byte(note.Output)
				ps := productState(st, at, output, now)
				require.NotZero(t, ps, "River state %s has no rule", st)
				want[ps] = append(want[ps], id)
			}
		}
	}
	all := []DeliveryState{DeliveryPending, DeliveryScheduled, DeliveryDelivering, DeliveryDelivered, DeliveryFailed, DeliveryCancelled}
	for _, st := range all {
		rows, err := db.Pool.Query(ctx, `SELECT j.id FROM river_job j WHERE `+stateCondition([]DeliveryState{st})+` ORDER BY j.id`,
			pgx.NamedArgs{"now": now})
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		require.Equal(t, want[st], got, "state %d", st)
	}
	var n int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job j WHERE `+stateCondition(all), pgx.NamedArgs{"now": now}).Scan(&n))
	require.Equal(t, len(riverStates)*3*len(notes), n, "every row is in some state")
	require.Len(t, want[DeliveryDelivering], 3*len(notes)+1, "running, and scheduled ahead when handed off")
}

// TestGlobLikePatternMatchesMatchGlob checks event.GlobLikePattern in
// Postgres against event.MatchGlob, '_' included.
func TestGlobLikePatternMatchesMatchGlob(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)

	types := []string{"corpus.note.changed", "corpus.notes.changed", "corpusx.note", "ip_ban.created", "ipxban.created", "booking.created", "webhook.test"}
	globs := []string{"*", "corpus.*", "corpus.note.*", "ip_ban.*", "ip_ban.created", "booking.created"}
	for _, g := range globs {
		pattern, ok := event.GlobLikePattern(g)
		require.True(t, ok, g)
		for _, typ := range types {
			var match bool
			require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT $1::text LIKE $2::text`, typ, pattern).Scan(&match))
			require.Equal(t, event.MatchGlob(g, typ), match, "glob %q, type %q", g, typ)
		}
	}
	_, ok := event.GlobLikePattern("corpus*")
	require.False(t, ok)
}
