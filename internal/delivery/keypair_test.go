package delivery

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

func TestWorkerKeyPairSigning(t *testing.T) {
	t.Parallel()

	t.Run("V1aVerifiesWithThePublicKeyAcrossARotation", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusNoContent))
		store := endpoint.NewStore(b.db.Pool, b.keyring)
		e, secret, err := store.Create(t.Context(), endpoint.CreateParams{
			OwnerID: "owner-1", URL: rc.URL, EventTypes: []string{"*"}, SigningScheme: endpoint.SchemeV1a,
		}, 0)
		require.NoError(t, err)
		require.Empty(t, secret)

		require.NoError(t, b.work(t, b.runningJob(t, e.ID, b.insertEvent(t, "owner-1", "code.issued", "code://1"))))
		r, err := store.RotateSecret(t.Context(), "owner-1", e.ID, time.Hour)
		require.NoError(t, err)
		require.NoError(t, b.work(t, b.runningJob(t, e.ID, b.insertEvent(t, "owner-1", "code.issued", "code://2"))))

		require.Len(t, rc.requests, 2)
		oldKey, err := webhook.NewVerifier(e.PublicKey)
		require.NoError(t, err)
		newKey, err := webhook.NewVerifier(r.PublicKey)
		require.NoError(t, err)

		first, second := rc.requests[0], rc.requests[1]
		require.True(t, strings.HasPrefix(first.header.Get(webhook.HeaderSignature), "v1a,"))
		require.NotContains(t, first.header.Get(webhook.HeaderSignature), "v1,", "no shared-secret entry")
		require.NoError(t, oldKey.Verify(first.header, first.body))
		require.ErrorIs(t, newKey.Verify(first.header, first.body), webhook.ErrNoMatchingSignature)

		require.Len(t, strings.Fields(second.header.Get(webhook.HeaderSignature)), 2, "new and previous key sign during the overlap")
		require.NoError(t, newKey.Verify(second.header, second.body))
		require.NoError(t, oldKey.Verify(second.header, second.body), "a receiver still holding the old whpk_ keeps verifying")
	})
}
