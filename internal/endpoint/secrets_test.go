package endpoint

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

func TestOpenKeys(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		id      uuid.UUID
		keyring *seal.Keyring
		cur     []byte
		curKey  []byte
		prev    []byte
		prevKey []byte
		expires time.Time
		now     time.Time
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		kr, _ := testfactory.Keyring(t, 7)
		id := uuid.Must(uuid.NewV7())
		mk := func() ([]byte, []byte) {
			secret, sealed, err := newSecret(kr, id)
			require.NoError(t, err)
			key, err := webhook.ParseSecret(secret)
			require.NoError(t, err)
			return sealed, key
		}
		cur, curKey := mk()
		prevSealed, prevKey := mk()
		prev, err := moveSealed(kr, prevSealed, keyBinding(id, SchemeV1, ColumnSecret), keyBinding(id, SchemeV1, ColumnPreviousSecret))
		require.NoError(t, err)
		now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
		return &testBundle{
			id: id, keyring: kr, cur: cur, curKey: curKey, prev: prev, prevKey: prevKey,
			expires: now.Add(24 * time.Hour), now: now,
		}
	}

	t.Run("BothInsideGrace", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		keys, err := OpenKeys(b.keyring, b.id, seal.SigningKeys{Current: b.cur, Previous: b.prev, PreviousExpiresAt: &b.expires}, b.now.Add(time.Hour))
		require.NoError(t, err)
		require.Equal(t, [][]byte{b.curKey, b.prevKey}, keys)
	})

	t.Run("OnlyCurrentAfterGrace", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		keys, err := OpenKeys(b.keyring, b.id, seal.SigningKeys{Current: b.cur, Previous: b.prev, PreviousExpiresAt: &b.expires}, b.expires.Add(time.Nanosecond))
		require.NoError(t, err)
		require.Equal(t, [][]byte{b.curKey}, keys)
	})

	t.Run("ExpiryInstantIsAfterGrace", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		keys, err := OpenKeys(b.keyring, b.id, seal.SigningKeys{Current: b.cur, Previous: b.prev, PreviousExpiresAt: &b.expires}, b.expires)
		require.NoError(t, err)
		require.Len(t, keys, 1)
	})

	t.Run("NoPrevious", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		keys, err := OpenKeys(b.keyring, b.id, seal.SigningKeys{Current: b.cur}, b.now)
		require.NoError(t, err)
		require.Equal(t, [][]byte{b.curKey}, keys)
		// A previous secret without an expiry never signs.
		keys, err = OpenKeys(b.keyring, b.id, seal.SigningKeys{Current: b.cur, Previous: b.prev}, b.now)
		require.NoError(t, err)
		require.Len(t, keys, 1)
	})

	t.Run("BoundToEndpointID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		other := uuid.Must(uuid.NewV7())
		_, err := OpenKeys(b.keyring, other, seal.SigningKeys{Current: b.cur}, b.now)
		require.ErrorIs(t, err, seal.ErrAuth)
		require.Contains(t, err.Error(), other.String())
		require.NotContains(t, err.Error(), string(b.curKey))
	})

	t.Run("BoundToColumnAndScheme", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// The previous key copied over the current one, or the current
		// one into the previous column: neither opens.
		_, err := OpenKeys(b.keyring, b.id, seal.SigningKeys{Current: b.prev}, b.now)
		require.ErrorIs(t, err, seal.ErrAuth)
		_, err = OpenKeys(b.keyring, b.id, seal.SigningKeys{Current: b.cur, Previous: b.cur, PreviousExpiresAt: &b.expires}, b.now)
		require.ErrorIs(t, err, seal.ErrAuth)
		// A shared secret read as a v1a seed (the scheme changed in the
		// row) does not open either.
		_, err = OpenSigningKeys(b.keyring, b.id, seal.SigningKeys{Scheme: SchemeV1a, Current: b.cur}, b.now)
		require.ErrorIs(t, err, seal.ErrAuth)
		_, err = OpenSigningKeys(b.keyring, b.id, seal.SigningKeys{Scheme: SchemeV1, Current: b.cur}, b.now)
		require.NoError(t, err)
	})

	t.Run("CorruptPreviousIsAnError", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		bad := append([]byte(nil), b.prev...)
		bad[len(bad)-1] ^= 1
		_, err := OpenKeys(b.keyring, b.id, seal.SigningKeys{Current: b.cur, Previous: bad, PreviousExpiresAt: &b.expires}, b.now)
		require.ErrorIs(t, err, seal.ErrAuth)
	})

	t.Run("UnknownMasterKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		other, _ := testfactory.Keyring(t, 8)
		_, err := OpenKeys(other, b.id, seal.SigningKeys{Current: b.cur}, b.now)
		require.ErrorIs(t, err, seal.ErrUnknownKey)
	})
}

func TestReseal(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		db        *dbtest.DB
		oldMaster []byte
		oldRing   *seal.Keyring
		store     *Store
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		db := dbtest.New(t)
		kr, master := testfactory.Keyring(t, 1)
		return &testBundle{db: db, oldMaster: master, oldRing: kr, store: NewStore(db.Pool, kr)}
	}

	create := func(t *testing.T, b *testBundle) uuid.UUID {
		t.Helper()
		e, _, err := b.store.Create(t.Context(), CreateParams{
			OwnerID: "owner_a", URL: "https://x.example.com/", EventTypes: []string{"*"},
		}, 0)
		require.NoError(t, err)
		return e.ID
	}

	rotatedRing := func(t *testing.T, b *testBundle) (*seal.Keyring, *seal.Keyring) {
		t.Helper()
		newMaster := make([]byte, 32)
		_, err := rand.Read(newMaster)
		require.NoError(t, err)
		both, err := seal.NewKeyring(2, map[uint32][]byte{1: b.oldMaster, 2: newMaster})
		require.NoError(t, err)
		onlyNew, err := seal.NewKeyring(2, map[uint32][]byte{2: newMaster})
		require.NoError(t, err)
		return both, onlyNew
	}

	readKeys := func(t *testing.T, b *testBundle, kr *seal.Keyring, id uuid.UUID, now time.Time) [][]byte {
		t.Helper()
		var cur, prev []byte
		var exp *time.Time
		require.NoError(t, b.db.Pool.QueryRow(t.Context(),
			`SELECT secret_enc, previous_secret_enc, previous_secret_expires_at FROM webhook_endpoints WHERE id = $1`, id).
			Scan(&cur, &prev, &exp))
		keys, err := OpenKeys(kr, id, seal.SigningKeys{Current: cur, Previous: prev, PreviousExpiresAt: exp}, now)
		require.NoError(t, err)
		return keys
	}

	t.Run("ResealsUnderNewPrimaryIdempotently", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		plain := create(t, b)
		inGrace := create(t, b)
		_, err := b.store.RotateSecret(t.Context(), "owner_a", inGrace, time.Hour)
		require.NoError(t, err)
		expired := create(t, b)
		_, err = b.store.RotateSecret(t.Context(), "owner_a", expired, time.Hour)
		require.NoError(t, err)
		_, err = b.db.Pool.Exec(t.Context(),
			`UPDATE webhook_endpoints SET previous_secret_expires_at = now() - interval '1 minute' WHERE id = $1`, expired)
		require.NoError(t, err)

		now := time.Now()
		before := map[uuid.UUID][][]byte{}
		for _, id := range []uuid.UUID{plain, inGrace, expired} {
			before[id] = readKeys(t, b, b.oldRing, id, now)
		}

		both, onlyNew := rotatedRing(t, b)
		n, err := Reseal(t.Context(), b.db.Pool, both)
		require.NoError(t, err)
		require.Equal(t, 3, n)

		// Everything opens without the old master key, to the same keys.
		for id, keys := range before {
			require.Equal(t, keys, readKeys(t, b, onlyNew, id, now), id)
		}
		var prevLeft *[]byte
		require.NoError(t, b.db.Pool.QueryRow(t.Context(),
			`SELECT previous_secret_enc FROM webhook_endpoints WHERE id = $1`, expired).Scan(&prevLeft))
		require.Nil(t, prevLeft, "an expired previous secret is dropped, not re-sealed")

		n, err = Reseal(t.Context(), b.db.Pool, both)
		require.NoError(t, err)
		require.Zero(t, n)
	})

	t.Run("MigratesFormatOne", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		id := create(t, b)
		// The row as a release before format 2 wrote it: every value sealed
		// in format 1, bound to the endpoint id alone (headers: the id and
		// "headers").
		curKey, prevKey := make([]byte, 32), make([]byte, 32)
		_, _ = rand.Read(curKey)
		_, _ = rand.Read(prevKey)
		headers := []byte(`[{"n":"X-Api-Key","v":"k1"}]`)
		_, err := b.db.Pool.Exec(t.Context(), `
UPDATE webhook_endpoints SET secret_enc = $2, previous_secret_enc = $3, previous_secret_expires_at = now() + interval '1 hour',
       headers_enc = $4, header_names = ARRAY['X-Api-Key'] WHERE id = $1`, id,
			sealFormatOne(t, b.oldMaster, 1, curKey, id[:]), sealFormatOne(t, b.oldMaster, 1, prevKey, id[:]),
			sealFormatOne(t, b.oldMaster, 1, headers, append(id[:len(id):len(id)], "headers"...)))
		require.NoError(t, err)
		now := time.Now()
		require.Equal(t, [][]byte{curKey, prevKey}, readKeys(t, b, b.oldRing, id, now), "format 1 still opens")

		// reseal-secrets with the same keyring upgrades them.
		n, err := Reseal(t.Context(), b.db.Pool, b.oldRing)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		var cur, prev, hs []byte
		require.NoError(t, b.db.Pool.QueryRow(t.Context(),
			`SELECT secret_enc, previous_secret_enc, headers_enc FROM webhook_endpoints WHERE id = $1`, id).Scan(&cur, &prev, &hs))
		for _, v := range [][]byte{cur, prev, hs} {
			f, err := seal.FormatOf(v)
			require.NoError(t, err)
			require.Equal(t, 2, f)
		}
		require.Equal(t, [][]byte{curKey, prevKey}, readKeys(t, b, b.oldRing, id, now), "the same keys")
		got, err := OpenHeaders(b.oldRing, id, hs)
		require.NoError(t, err)
		require.Equal(t, "k1", got.Get("X-Api-Key"))

		n, err = Reseal(t.Context(), b.db.Pool, b.oldRing)
		require.NoError(t, err)
		require.Zero(t, n, "nothing left in format 1")
	})

	t.Run("MissingOldKeyFails", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		create(t, b)
		_, onlyNew := rotatedRing(t, b)
		_, err := Reseal(t.Context(), b.db.Pool, onlyNew)
		require.ErrorIs(t, err, seal.ErrUnknownKey)
	})

	t.Run("EmptyTable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		n, err := Reseal(t.Context(), b.db.Pool, b.oldRing)
		require.NoError(t, err)
		require.Zero(t, n)
	})
}

// sealFormatOne seals plain as format 1 did (the documented construction,
// built here independently of internal/seal): header 0x01 ‖ key id, then
// AES-256-GCM under the HKDF-derived data key with a random nonce, the
// associated data being the header ‖ ad.
func sealFormatOne(t *testing.T, master []byte, keyID uint32, plain, ad []byte) []byte {
	t.Helper()
	dataKey, err := hkdf.Key(sha256.New, master, nil, "dispatcher/webhook-secret/aes-256-gcm/v1", 32)
	require.NoError(t, err)
	block, err := aes.NewCipher(dataKey)
	require.NoError(t, err)
	gcm, err := cipher.NewGCM(block)
	require.NoError(t, err)
	header := binary.BigEndian.AppendUint32([]byte{0x01}, keyID)
	nonce := make([]byte, gcm.NonceSize())
	_, err = rand.Read(nonce)
	require.NoError(t, err)
	out := append(append([]byte(nil), header...), nonce...)
	return gcm.Seal(out, nonce, plain, append(append([]byte(nil), header...), ad...))
}
