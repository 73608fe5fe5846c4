package endpoint

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
)

func TestJobRowDelivery(t *testing.T) {
	t.Parallel()

	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	later := now.Add(time.Hour)
	note := func(reason string, until time.Time, status int) []byte {
		b, err := json.Marshal(job.DeliverSnooze{Reason: reason, Until: until, Status: status})
		require.NoError(t, err)
		return b
	}
	row := func(state string, attempt int, lastError string, scheduledAt time.Time, output []byte) jobRow {
		return jobRow{ID: 7, State: state, Attempt: attempt, MaxAttempts: 18, LastError: lastError, ScheduledAt: scheduledAt, Output: output}
	}

	// probed is a row whose River counts include probes: River's attempt
	// runs as probeAttempts' last when it is one, max_attempts grew by one
	// for each.
	probed := func(r jobRow, probeAttempts ...int) jobRow {
		b, err := json.Marshal(map[string]any{"probes": len(probeAttempts), "probe_attempts": probeAttempts})
		require.NoError(t, err)
		r.Probes, r.MaxAttempts = b, r.MaxAttempts+len(probeAttempts)
		return r
	}

	tests := []struct {
		name      string
		row       jobRow
		state     DeliveryState
		wait      WaitReason
		lastError string
		reason    string // a substring of StateReason
	}{
		{"AvailableIsPending", row("available", 0, "", now, nil), DeliveryPending, WaitNone, "", "Queued"},
		{"RiverPendingIsPending", row("pending", 0, "", now, nil), DeliveryPending, WaitNone, "", "not yet queued"},
		{"DueRetryIsPending", row("retryable", 2, "HTTP 500: down", now.Add(-time.Second), nil), DeliveryPending, WaitNone, "HTTP 500: down", "Queued"},
		{"RetryableIsScheduledForRetry", row("retryable", 3, "HTTP 500: down", later, nil), DeliveryScheduled, WaitRetry, "HTTP 500: down", "Attempt 3 of 18 failed; the next is at 2026-12-01T11:00:00Z."},
		{"ShortRetryIsScheduledForRetry", row("available", 1, "HTTP 502", now.Add(5*time.Second), nil), DeliveryScheduled, WaitRetry, "HTTP 502", "Attempt 1 of 18 failed"},
		{"RetryAfterSnooze", row("scheduled", 0, "", later, note(job.SnoozeRetryAfter, later.Add(-time.Millisecond), 429)), DeliveryScheduled, WaitRetryAfter, "",
			"The receiver asked to wait (HTTP 429, Retry-After) until 2026-12-01T11:00:00Z."},
		{"LeaseBusySnooze", row("available", 0, "", now.Add(2*time.Second), note(job.SnoozeLeaseBusy, now.Add(2*time.Second), 0)), DeliveryScheduled, WaitLeaseBusy, "",
			"another delivery to this endpoint was in flight"},
		{"SnoozeAfterFailureKeepsLastError", row("scheduled", 2, "HTTP 500: down", later, note(job.SnoozeRetryAfter, later, 503)), DeliveryScheduled, WaitRetryAfter, "HTTP 500: down", "HTTP 503, Retry-After"},
		{"StaleSnoozeNoteIgnored", row("retryable", 1, "HTTP 500: down", later, note(job.SnoozeRetryAfter, now.Add(-time.Hour), 429)), DeliveryScheduled, WaitRetry, "HTTP 500: down", "Attempt 1 of 18"},
		{"StaleSnoozeNoteOnScheduled", row("scheduled", 1, "HTTP 500: down", later, note(job.SnoozeLeaseBusy, now, 0)), DeliveryScheduled, WaitRetry, "HTTP 500: down", "Attempt 1 of 18"},
		{"FailingEndpointCooldown", row("scheduled", 0, "", now.Add(5*time.Minute), nil), DeliveryScheduled, WaitEndpointFailing, "", "cool-down, until 2026-12-01T10:05:00Z"},
		{"RunningIsDelivering", row("running", 4, "HTTP 500: down", now, nil), DeliveryDelivering, WaitNone, "HTTP 500: down", "Attempt 4 of 18 is in flight."},
		{"CompletedHidesOldFailure", row("completed", 3, "HTTP 500: down", now, nil), DeliveryDelivered, WaitNone, "", "Delivered"},
		{"DiscardedIsFailed", row("discarded", 18, "HTTP 500: down", now, nil), DeliveryFailed, WaitNone, "HTTP 500: down", "all 18 attempts failed"},
		{"CancelledFourXX", row("cancelled", 1, "JobCancelError: HTTP 410: gone", now, nil), DeliveryCancelled, WaitNone, "HTTP 410: gone", "Cancelled, not retried: HTTP 410: gone"},
		{"CancelledBlocked", row("cancelled", 1, "JobCancelError: destination not allowed: blocked address", now, nil), DeliveryCancelled, WaitNone,
			"destination not allowed: blocked address", "not retried"},
		{"CancelledEndpointGone", row("cancelled", 0, "JobCancelError: endpoint deleted", now, nil), DeliveryCancelled, WaitNone, "The endpoint was deleted.", "The endpoint was deleted."},
		{"CancelledByOperator", row("cancelled", 1, "JobCancelError: job cancelled remotely", now, nil), DeliveryCancelled, WaitNone, "Cancelled by an operator.", "Cancelled by an operator."},
		{"RescuedIsExplained", row("retryable", 1, "Stuck job rescued by JobRescuer", later, nil), DeliveryScheduled, WaitRetry, "The attempt did not finish: the process running it stopped or hung.", "Attempt 1"},
		{"ProbesCountedApartWhileWaiting", probed(row("retryable", 6, "HTTP 503", later, nil), 3, 5), DeliveryScheduled, WaitRetry, "HTTP 503",
			"Attempt 4 of 18, 2 probes failed; the next is at 2026-12-01T11:00:00Z."},
		{"ProbeInFlight", probed(row("running", 3, "HTTP 503", now, nil), 3), DeliveryDelivering, WaitNone, "HTTP 503", "Probe 1, after attempt 2 of 18 is in flight."},
		{"AttemptAfterProbeInFlight", probed(row("running", 4, "HTTP 503", now, nil), 3), DeliveryDelivering, WaitNone, "HTTP 503", "Attempt 3 of 18, 1 probe is in flight."},
		{"ProbedAndFailed", probed(row("discarded", 20, "HTTP 503", now, nil), 4, 9), DeliveryFailed, WaitNone, "HTTP 503", "all 18 attempts (and 2 probes) failed"},
		{"ProbesWithoutTheirAttemptsRecorded", func() jobRow {
			r := row("retryable", 5, "HTTP 503", later, nil)
			r.MaxAttempts = 19
			r.Probes = []byte(`{"probes": 1, "probe_attempts": null}`)
			return r
		}(),
			DeliveryScheduled, WaitRetry, "HTTP 503", "Attempt 4 of 18, 1 probe failed"},
		{"NestedPrefixes", row("cancelled", 1, "JobCancelError: JobCancelError: HTTP 404", now, nil), DeliveryCancelled, WaitNone, "HTTP 404", "HTTP 404"}, //nolint:dupword // the repeated prefix is the case
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d := tt.row.delivery(now)
			require.Equal(t, tt.state, d.State)
			require.Equal(t, tt.wait, d.Wait)
			require.Equal(t, tt.lastError, d.LastError)
			require.Contains(t, d.StateReason, tt.reason)
			require.NotContains(t, d.StateReason, "JobCancelError")
			require.EqualValues(t, 7, d.JobID)
		})
	}
}

// TestStateConditionMatchesMapping checks that the SQL filter and the row
// mapping read stateRules alike: for every River state, due or ahead, the
// filter of each delivery state selects exactly the rows productState puts
// in it.
func TestStateConditionMatchesMapping(t *testing.T) {
	t.Parallel()
	tx := dbtest.TestTx(t)
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
				j := testfactory.Job(ctx, t, tx, &testfactory.JobOpts{State: rivertype.JobState(st), ScheduledAt: &at, Metadata: []byte(md)})
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
		rows, err := tx.Query(ctx, `SELECT j.id FROM river_job j WHERE `+stateCondition([]DeliveryState{st})+` ORDER BY j.id`,
			pgx.NamedArgs{"now": now})
		require.NoError(t, err)
		got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		require.NoError(t, err)
		require.Equal(t, want[st], got, "state %d", st)
	}
	var n int
	require.NoError(t, tx.QueryRow(ctx, `SELECT count(*) FROM river_job j WHERE `+stateCondition(all), pgx.NamedArgs{"now": now}).Scan(&n))
	require.Equal(t, len(riverStates)*3*len(notes), n, "every row is in some state")
	require.Len(t, want[DeliveryDelivering], 3*len(notes)+1, "running, and scheduled ahead when handed off")
}
