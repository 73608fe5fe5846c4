package webhook_test

import (
	"bytes"
	"crypto/ed25519"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// FuzzVerify feeds arbitrary headers and bodies to the verifier. It must never panic,
// a correct signature must always verify, and that signature must never verify a
// different body. Seeds live in testdata/fuzz/FuzzVerify.
func FuzzVerify(f *testing.F) {
	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	verifier, err := webhook.NewVerifier(secret)
	require.NoError(f, err)
	key, err := webhook.ParseSecret(secret)
	require.NoError(f, err)

	f.Add("msg_p5jXN8AQM9LWM0D4loKWxJek", int64(1614265330), []byte(`{"test": 2432232314}`), []byte(`{"test": 2432232315}`),
		"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")

	f.Fuzz(func(t *testing.T, msgID string, ts int64, body, mutated []byte, sigHeader string) {
		t.Parallel()

		now := time.Unix(ts, 0)

		// Attacker-controlled headers and body: any outcome but a panic is fine.
		h := http.Header{}
		h.Set(webhook.HeaderID, msgID)
		h.Set(webhook.HeaderTimestamp, string(body))
		h.Set(webhook.HeaderSignature, sigHeader)
		_ = verifier.VerifyAt(h, body, now)
		h.Set(webhook.HeaderTimestamp, "1614265330")
		_ = verifier.VerifyAt(h, mutated, now)
		_, _ = webhook.Decode(body)

		if msgID == "" {
			return // nothing can verify without an id
		}
		signed := http.Header{}
		webhook.SetHeaders(signed, [][]byte{key}, msgID, now, body)
		require.NoError(t, verifier.VerifyAt(signed, body, now))
		if !bytes.Equal(body, mutated) {
			require.ErrorIs(t, verifier.VerifyAt(signed, mutated, now), webhook.ErrNoMatchingSignature)
		}
	})
}

// FuzzVerifyAsymmetric is FuzzVerify for v1a: arbitrary headers never panic a
// public-key Verifier, an Ed25519 signature from the pair always verifies
// (also beside a v1 entry), and never verifies a different body.
func FuzzVerifyAsymmetric(f *testing.F) {
	const signingKey = "whsk_AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQGKiOPddAnxlf1S2y08ul1yymcJvx2UEhvzdIgBtA9vXA=="
	const publicKey = "whpk_iojj3XQJ8ZX9UtstPLpdcspnCb8dlBIb83SIAbQPb1w="
	verifier, err := webhook.NewVerifier(publicKey)
	require.NoError(f, err)
	priv, err := webhook.ParseSigningKey(signingKey)
	require.NoError(f, err)
	hmacKey, err := webhook.ParseSecret("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
	require.NoError(f, err)

	f.Add("msg_p5jXN8AQM9LWM0D4loKWxJek", int64(1614265330), []byte(`{"test": 2432232314}`), []byte(`{"test": 2432232315}`),
		"v1a,Ykcu7AtGZGmZxFEH1Gaa2Nd7feY/CTuruoL4fqgnKwfbHU4DhemoVHZdvGfIvKvn4BIgwktLGGPGIr/i9nK7AA==")
	f.Add("m", int64(0), []byte(`{}`), []byte(`{} `), "v1a,, v1a,AAAA v1a")

	f.Fuzz(func(t *testing.T, msgID string, ts int64, body, mutated []byte, sigHeader string) {
		t.Parallel()
		now := time.Unix(ts, 0)
		h := http.Header{}
		h.Set(webhook.HeaderID, msgID)
		h.Set(webhook.HeaderTimestamp, "1614265330")
		h.Set(webhook.HeaderSignature, sigHeader)
		_ = verifier.VerifyAt(h, body, time.Unix(1614265330, 0))

		if msgID == "" {
			return
		}
		signed := http.Header{}
		webhook.Keys{HMAC: [][]byte{hmacKey}, Ed25519: []ed25519.PrivateKey{priv}}.SetHeaders(signed, msgID, now, body)
		require.NoError(t, verifier.VerifyAt(signed, body, now))
		if !bytes.Equal(body, mutated) {
			require.ErrorIs(t, verifier.VerifyAt(signed, mutated, now), webhook.ErrNoMatchingSignature)
		}
	})
}
