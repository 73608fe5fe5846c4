package delivery

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A pause that is over still says what the receiver's latest answer was
// (fanout lets new deliveries go at once instead of cooling down); another
// failure after it ends that.
func TestPauseOverIsForgottenAtTheNextOtherFailure(t *testing.T) {
	t.Parallel()

	for name, tc := range map[string]struct {
		handler   func(http.ResponseWriter, *http.Request)
		forgotten bool
	}{
		"ServerError":      {status(http.StatusBadGateway), true},
		"AnotherPause":     {status(http.StatusTooManyRequests, "Retry-After", "60"), false},
		"SuccessKeepsIt":   {status(http.StatusOK), false},
		"PauseStillActive": {nil, false},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			handler := tc.handler
			if handler == nil {
				handler = status(http.StatusBadGateway)
			}
			rc := newReceiver(t, handler)
			failing := time.Now().Add(-time.Minute)
			epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true, failingSince: &failing})
			pausedUntil := "now() - interval '1 second'"
			if tc.handler == nil {
				pausedUntil = "now() + interval '1 hour'"
			}
			_, err := b.db.Pool.Exec(context.Background(),
				`UPDATE webhook_endpoints SET paused_until = `+pausedUntil+`, pause_reason = 'HTTP 429 Too Many Requests with Retry-After' WHERE id = $1`, epID)
			require.NoError(t, err)

			_ = b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x")))
			var recorded bool
			require.NoError(t, b.db.Pool.QueryRow(context.Background(),
				`SELECT paused_until IS NOT NULL FROM webhook_endpoints WHERE id = $1`, epID).Scan(&recorded))
			require.Equal(t, !tc.forgotten, recorded)
		})
	}
}
