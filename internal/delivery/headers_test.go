package delivery

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

func TestWorkerCustomHeaders(t *testing.T) {
	t.Parallel()

	t.Run("SentOnEveryAttemptBesideTheSignature", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var rc *receiver
		rc = newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			if rc.hits.Load() == 1 {
				status(http.StatusServiceUnavailable)(w, r)
				return
			}
			status(http.StatusNoContent)(w, r)
		})
		epID, secret := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		// Saved the way the endpoint service saves them: sealed.
		_, err := endpoint.NewStore(b.db.Pool, b.keyring).Update(t.Context(), "owner-1", epID, endpoint.UpdateParams{
			Headers: []endpoint.Header{{Name: "X-Api-Key", Value: "gw-key-1"}, {Name: "x-tenant", Value: "acme"}},
		})
		require.NoError(t, err)
		evID := b.insertEvent(t, "owner-1", "code.issued", "code://x")

		requireRetryable(t, b.work(t, b.runningJob(t, epID, evID)))
		require.NoError(t, b.work(t, b.asProbe(t, b.runningJob(t, epID, evID))))

		require.Len(t, rc.requests, 2)
		for _, req := range rc.requests {
			require.Equal(t, "gw-key-1", req.header.Get("X-Api-Key"))
			require.Equal(t, "acme", req.header.Get("X-Tenant"))
			require.Equal(t, "application/json", req.header.Get("Content-Type"))
			v, err := webhook.NewVerifier(secret)
			require.NoError(t, err)
			require.NoError(t, v.Verify(req.header, req.body), "still signed")
		}
	})
}
