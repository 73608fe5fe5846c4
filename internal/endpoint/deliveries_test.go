package endpoint

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/job"
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
