package webhook_test

import (
	"net/http"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// These tests prove interoperability with the official Go library: a receiver using it
// must accept what the dispatcher sends, including during a secret rotation.

func TestOfficialLibraryVerifiesOurSignatures(t *testing.T) {
	t.Parallel()

	t.Run("SingleSignature", func(t *testing.T) {
		t.Parallel()

		bundle := setup(t)
		// The official Verify reads the wall clock, so sign with it.
		h := bundle.signed(time.Now())

		official, err := standardwebhooks.NewWebhook(bundle.secret)
		require.NoError(t, err)
		require.NoError(t, official.Verify(bundle.body, h))
		require.Error(t, official.Verify(append(bundle.body, ' '), h))
	})

	t.Run("MultiSignatureRotation", func(t *testing.T) {
		t.Parallel()

		oldKey, newKey, stranger := setup(t), setup(t), setup(t)
		h := oldKey.signed(time.Now(), newKey.key, oldKey.key)

		for _, secret := range []string{oldKey.secret, newKey.secret} {
			official, err := standardwebhooks.NewWebhook(secret)
			require.NoError(t, err)
			require.NoError(t, official.Verify(oldKey.body, h))
		}
		official, err := standardwebhooks.NewWebhook(stranger.secret)
		require.NoError(t, err)
		require.ErrorIs(t, official.Verify(oldKey.body, h), standardwebhooks.ErrNoMatchingSignature)
	})

	t.Run("ReferenceSecretsOnTheWire", func(t *testing.T) {
		t.Parallel()

		// 24-byte secrets from the reference tests, sent over a real request so header
		// canonicalisation by net/http is part of the check.
		for _, secret := range []string{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"} {
			key, err := webhook.ParseSecret(secret)
			require.NoError(t, err)
			body := []byte(testBody)
			req, err := http.NewRequest(http.MethodPost, "http://receiver.invalid/hook", nil)
			require.NoError(t, err)
			webhook.SetHeaders(req.Header, [][]byte{key}, testMsgID, time.Now(), body)

			official, err := standardwebhooks.NewWebhook(secret)
			require.NoError(t, err)
			require.NoError(t, official.Verify(body, req.Header))
		}
	})
}

func TestWeVerifyOfficialSignatures(t *testing.T) {
	t.Parallel()

	bundle := setup(t)
	official, err := standardwebhooks.NewWebhook(bundle.secret)
	require.NoError(t, err)

	ts := bundle.now
	sig, err := official.Sign(testMsgID, ts, bundle.body)
	require.NoError(t, err)
	require.Equal(t, sig, webhook.Sign(bundle.key, testMsgID, ts, bundle.body))

	h := http.Header{}
	h.Set(webhook.HeaderID, testMsgID)
	h.Set(webhook.HeaderTimestamp, "1780000000")
	h.Set(webhook.HeaderSignature, sig)
	require.NoError(t, bundle.verifier.VerifyAt(h, bundle.body, ts))
}
