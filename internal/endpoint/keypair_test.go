package endpoint

import (
	"bytes"
	"crypto/ed25519"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

func TestKeyPairEndpoints(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		db      *dbtest.DB
		keyring *seal.Keyring
		store   *Store
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		db := dbtest.New(t)
		kr, _ := testfactory.Keyring(t, 1)
		return &testBundle{db: db, keyring: kr, store: NewStore(db.Pool, kr)}
	}
	create := func(t *testing.T, b *testBundle) *Endpoint {
		t.Helper()
		e, secret, err := b.store.Create(t.Context(), CreateParams{
			OwnerID: "owner_a", URL: "https://x.example.com/", EventTypes: []string{"*"}, SigningScheme: SchemeV1a,
		}, 0)
		require.NoError(t, err)
		require.Empty(t, secret, "a key pair endpoint has no shared secret to show")
		return e
	}
	open := func(t *testing.T, b *testBundle, e *Endpoint, now time.Time) webhook.Keys {
		t.Helper()
		var cur, prev []byte
		var exp *time.Time
		require.NoError(t, b.db.Pool.QueryRow(t.Context(),
			`SELECT secret_enc, previous_secret_enc, previous_secret_expires_at FROM webhook_endpoints WHERE id = $1`, e.ID).
			Scan(&cur, &prev, &exp))
		keys, err := OpenSigningKeys(b.keyring, e.ID, seal.SigningKeys{Scheme: e.SigningScheme, Current: cur, Previous: prev, PreviousExpiresAt: exp}, now)
		require.NoError(t, err)
		require.Empty(t, keys.HMAC)
		return keys
	}
	publicOf := func(k ed25519.PrivateKey) string { return webhook.EncodePublicKey(k.Public().(ed25519.PublicKey)) }

	t.Run("CreateSealsThePrivateKeyShowsThePublic", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e := create(t, b)
		require.Equal(t, SchemeV1a, e.SigningScheme)
		require.True(t, strings.HasPrefix(e.PublicKey, webhook.PublicKeyPrefix))
		_, err := webhook.ParsePublicKey(e.PublicKey)
		require.NoError(t, err)

		keys := open(t, b, e, time.Now())
		require.Len(t, keys.Ed25519, 1)
		require.Equal(t, e.PublicKey, publicOf(keys.Ed25519[0]), "the sealed key is the public key's pair")

		var sealed []byte
		require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT secret_enc FROM webhook_endpoints WHERE id = $1`, e.ID).Scan(&sealed))
		require.False(t, bytes.Contains(sealed, keys.Ed25519[0].Seed()), "the seed is not stored in plaintext")

		got, err := b.store.Get(t.Context(), "owner_a", e.ID)
		require.NoError(t, err)
		require.Equal(t, e.PublicKey, got.PublicKey, "readable at any time")
	})

	t.Run("RotationOverlap", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e := create(t, b)
		r, err := b.store.RotateSecret(t.Context(), "owner_a", e.ID, time.Hour)
		require.NoError(t, err)
		require.Empty(t, r.Secret)
		require.NotEqual(t, e.PublicKey, r.PublicKey)
		require.NotNil(t, r.PreviousExpiresAt)

		got, err := b.store.Get(t.Context(), "owner_a", e.ID)
		require.NoError(t, err)
		require.Equal(t, r.PublicKey, got.PublicKey)
		require.Equal(t, e.PublicKey, got.PreviousPublicKey)

		keys := open(t, b, got, time.Now())
		require.Len(t, keys.Ed25519, 2, "both sign during the overlap, the new one first")
		require.Equal(t, r.PublicKey, publicOf(keys.Ed25519[0]))
		require.Equal(t, e.PublicKey, publicOf(keys.Ed25519[1]))
		require.Len(t, open(t, b, got, r.PreviousExpiresAt.Add(time.Second)).Ed25519, 1, "only the new one after it")

		// Grace 0 ends the overlap at once.
		r2, err := b.store.RotateSecret(t.Context(), "owner_a", e.ID, 0)
		require.NoError(t, err)
		require.Nil(t, r2.PreviousExpiresAt)
		got, err = b.store.Get(t.Context(), "owner_a", e.ID)
		require.NoError(t, err)
		require.Empty(t, got.PreviousPublicKey)
		require.Len(t, open(t, b, got, time.Now()).Ed25519, 1)
	})

	t.Run("SharedSecretEndpointsUnchanged", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e, secret, err := b.store.Create(t.Context(), CreateParams{OwnerID: "owner_a", URL: "https://x.example.com/", EventTypes: []string{"*"}}, 0)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(secret, webhook.SecretPrefix))
		require.Equal(t, SchemeV1, e.SigningScheme)
		require.Empty(t, e.PublicKey)
		r, err := b.store.RotateSecret(t.Context(), "owner_a", e.ID, time.Hour)
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(r.Secret, webhook.SecretPrefix))
		require.Empty(t, r.PublicKey)
	})

	t.Run("UnknownSchemeFailsClosed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e := create(t, b)
		_, err := OpenSigningKeys(b.keyring, e.ID, seal.SigningKeys{Scheme: "v2"}, time.Now())
		require.Error(t, err)
	})
}
