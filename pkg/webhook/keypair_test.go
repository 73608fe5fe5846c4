package webhook_test

import (
	"crypto/ed25519"
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

func TestKeyPair(t *testing.T) {
	t.Parallel()

	t.Run("GeneratedPairRoundTrips", func(t *testing.T) {
		t.Parallel()
		sk, pk, err := webhook.GenerateKeyPair()
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(sk, webhook.SigningKeyPrefix))
		require.True(t, strings.HasPrefix(pk, webhook.PublicKeyPrefix))
		priv, err := webhook.ParseSigningKey(sk)
		require.NoError(t, err)
		pub, err := webhook.ParsePublicKey(pk)
		require.NoError(t, err)
		require.Equal(t, pub, priv.Public())
		require.Equal(t, pk, webhook.EncodePublicKey(pub))
		// 32 bytes encode to 44 padded characters.
		require.Len(t, strings.TrimPrefix(pk, webhook.PublicKeyPrefix), 44)
	})

	t.Run("SeedAndFullFormsAgree", func(t *testing.T) {
		t.Parallel()
		seed := make([]byte, ed25519.SeedSize)
		for i := range seed {
			seed[i] = 7
		}
		full := ed25519.NewKeyFromSeed(seed)
		a, err := webhook.ParseSigningKey(base64.StdEncoding.EncodeToString(seed))
		require.NoError(t, err)
		b, err := webhook.ParseSigningKey(webhook.SigningKeyPrefix + base64.StdEncoding.EncodeToString(full))
		require.NoError(t, err)
		require.Equal(t, a, b)
	})

	t.Run("Refused", func(t *testing.T) {
		t.Parallel()
		seed := make([]byte, ed25519.SeedSize)
		mismatched := make([]byte, 0, ed25519.PrivateKeySize)
		mismatched = append(mismatched, seed...)
		mismatched = append(mismatched, make([]byte, ed25519.PublicKeySize)...) // not seed's public key
		for name, s := range map[string]string{
			"Empty":            webhook.SigningKeyPrefix,
			"NotBase64":        webhook.SigningKeyPrefix + "!!!!",
			"Unpadded":         webhook.SigningKeyPrefix + base64.RawStdEncoding.EncodeToString(seed[:31]),
			"WrongLength":      webhook.SigningKeyPrefix + base64.StdEncoding.EncodeToString(make([]byte, 48)),
			"PublicHalfIsNot":  webhook.SigningKeyPrefix + base64.StdEncoding.EncodeToString(mismatched),
			"ThirtyThreeBytes": webhook.SigningKeyPrefix + base64.StdEncoding.EncodeToString(make([]byte, 33)),
		} {
			_, err := webhook.ParseSigningKey(s)
			require.ErrorIs(t, err, webhook.ErrInvalidKey, name)
			if enc := strings.TrimPrefix(s, webhook.SigningKeyPrefix); enc != "" {
				require.NotContains(t, err.Error(), enc, name)
			}
		}
		for name, s := range map[string]string{
			"Empty":       webhook.PublicKeyPrefix,
			"WrongLength": webhook.PublicKeyPrefix + base64.StdEncoding.EncodeToString(make([]byte, 31)),
			"NotBase64":   webhook.PublicKeyPrefix + "%%%%",
		} {
			_, err := webhook.ParsePublicKey(s)
			require.ErrorIs(t, err, webhook.ErrInvalidKey, name)
		}
		_, err := webhook.NewVerifier(webhook.PublicKeyPrefix + "AAAA")
		require.ErrorIs(t, err, webhook.ErrInvalidKey)
	})
}

func TestAsymmetricSignatures(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		priv     ed25519.PrivateKey
		pub      string
		verifier *webhook.Verifier
		ts       time.Time
		body     []byte
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		sk, pk, err := webhook.GenerateKeyPair()
		require.NoError(t, err)
		priv, err := webhook.ParseSigningKey(sk)
		require.NoError(t, err)
		v, err := webhook.NewVerifier(pk)
		require.NoError(t, err)
		return &testBundle{priv: priv, pub: pk, verifier: v, ts: time.Unix(1_790_000_000, 0), body: []byte(`{"id":"evt_1"}`)}
	}
	headers := func(sig string) http.Header {
		h := http.Header{}
		h.Set(webhook.HeaderID, "evt_1")
		h.Set(webhook.HeaderTimestamp, "1790000000")
		h.Set(webhook.HeaderSignature, sig)
		return h
	}

	t.Run("SignedVerifiesWithPublicKeyOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		h := http.Header{}
		webhook.Keys{Ed25519: []ed25519.PrivateKey{b.priv}}.SetHeaders(h, "evt_1", b.ts, b.body)
		require.True(t, strings.HasPrefix(h.Get(webhook.HeaderSignature), "v1a,"))
		require.NoError(t, b.verifier.VerifyAt(h, b.body, b.ts))
		require.ErrorIs(t, b.verifier.VerifyAt(h, []byte(`{"id":"evt_2"}`), b.ts), webhook.ErrNoMatchingSignature)
	})

	t.Run("MixedHeaderEitherVerifier", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		secret, err := webhook.GenerateSecret()
		require.NoError(t, err)
		key, err := webhook.ParseSecret(secret)
		require.NoError(t, err)
		keys := webhook.Keys{HMAC: [][]byte{key}, Ed25519: []ed25519.PrivateKey{b.priv}}
		sig := keys.SignatureHeader("evt_1", b.ts, b.body)
		entries := strings.Fields(sig)
		require.Len(t, entries, 2)
		require.True(t, strings.HasPrefix(entries[0], "v1,"), "v1 entries first")
		require.True(t, strings.HasPrefix(entries[1], "v1a,"))

		sym, err := webhook.NewVerifier(secret)
		require.NoError(t, err)
		require.NoError(t, sym.VerifyAt(headers(sig), b.body, b.ts))
		require.NoError(t, b.verifier.VerifyAt(headers(sig), b.body, b.ts))
	})

	t.Run("RotationOverlapOldKeyStillVerifies", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		old := setup(t)
		sig := webhook.Keys{Ed25519: []ed25519.PrivateKey{b.priv, old.priv}}.SignatureHeader("evt_1", b.ts, b.body)
		require.NoError(t, old.verifier.VerifyAt(headers(sig), b.body, b.ts), "a receiver still holding the old whpk_")
		require.NoError(t, b.verifier.VerifyAt(headers(sig), b.body, b.ts))
	})

	t.Run("ForgedOrMalformedEntriesRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		good := webhook.SignEd25519(b.priv, "evt_1", b.ts, b.body)
		other := setup(t)
		for name, sig := range map[string]string{
			"OtherKey":     webhook.SignEd25519(other.priv, "evt_1", b.ts, b.body),
			"Truncated":    good[:len(good)-4],
			"NotBase64":    "v1a,@@@@",
			"WrongVersion": "v1," + strings.TrimPrefix(good, "v1a,"),
			"Empty":        "v1a,",
			"OtherTime":    webhook.SignEd25519(b.priv, "evt_1", b.ts.Add(time.Second), b.body),
		} {
			require.ErrorIs(t, b.verifier.VerifyAt(headers(sig), b.body, b.ts), webhook.ErrNoMatchingSignature, name)
		}
	})

	t.Run("BoundedEntriesChecked", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		other := setup(t)
		junk := webhook.SignEd25519(other.priv, "evt_1", b.ts, b.body)
		good := webhook.SignEd25519(b.priv, "evt_1", b.ts, b.body)
		// A valid entry behind many well-formed wrong ones is not looked at:
		// each costs a verification, and no sender signs with that many keys.
		sig := strings.Repeat(junk+" ", 8) + good
		require.ErrorIs(t, b.verifier.VerifyAt(headers(sig), b.body, b.ts), webhook.ErrNoMatchingSignature)
		require.NoError(t, b.verifier.VerifyAt(headers(junk+" "+good), b.body, b.ts))
	})
}
