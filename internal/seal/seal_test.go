package seal

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// Known-answer vectors sealed once with testMasterKey(1)/(2). They pin the
// format: if they stop opening, every secret stored in production would too.
const (
	// key id 1, ad "endpoint-0001".
	vectorKey1Hex = "010000000198b99293bd830b41f34556db6aae2b664b95fe488361c4bd9842624ff9142d6f95647067c004c97d811c16b2d63644b25e8259af18aebf382cf79f523eb07f76a057"
	vectorKey1AD  = "endpoint-0001"
	vectorKey1PT  = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	// key id 2, empty ad, empty plaintext.
	vectorKey2Hex = "010000000232e15c960fb9acc5da32ae9c858e288da05cfd2bde9b4d79eb795a02"
)

// testMasterKey returns a fixed, obviously-not-secret 32-byte master key:
// bytes 0x00..0x1f for id 1, 0x20..0x3f for id 2, and so on (ids 1..8 are
// distinct).
func testMasterKey(id uint32) []byte {
	key := make([]byte, 32)
	for i := range key {
		key[i] = byte(int(id-1)*0x20 + i)
	}
	return key
}

func mustHex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(s)
	require.NoError(tb, err)
	return b
}

type testBundle struct {
	keyring *Keyring // primary 1; holds key 1 only
	ad      []byte
	secret  []byte
}

func setup(t *testing.T) *testBundle {
	t.Helper()

	keyring, err := NewKeyring(1, map[uint32][]byte{1: testMasterKey(1)})
	require.NoError(t, err)
	return &testBundle{
		keyring: keyring,
		ad:      []byte("endpoint-0001"),
		secret:  []byte("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"),
	}
}

func newKeyring(tb testing.TB, primary uint32, ids ...uint32) *Keyring {
	tb.Helper()

	keys := make(map[uint32][]byte, len(ids))
	for _, id := range ids {
		keys[id] = testMasterKey(id)
	}
	k, err := NewKeyring(primary, keys)
	require.NoError(tb, err)
	return k
}

func TestSealOpen(t *testing.T) {
	t.Parallel()

	t.Run("RoundTrips", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		for _, pt := range [][]byte{nil, {}, bundle.secret, bytes.Repeat([]byte{0xAB}, 4096)} {
			sealed, err := bundle.keyring.Seal(pt, bundle.ad)
			require.NoError(t, err)
			got, err := bundle.keyring.Open(sealed, bundle.ad)
			require.NoError(t, err)
			require.Len(t, got, len(pt))
			require.True(t, bytes.Equal(pt, got))
		}
	})

	t.Run("HasDocumentedFraming", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		sealed, err := bundle.keyring.Seal(bundle.secret, bundle.ad)
		require.NoError(t, err)
		require.Equal(t, byte(0x02), sealed[0], "format 2")
		f, err := FormatOf(sealed)
		require.NoError(t, err)
		require.Equal(t, CurrentFormat, f)
		require.Equal(t, uint32(1), binary.BigEndian.Uint32(sealed[1:5]))
		require.Len(t, sealed, 1+4+12+len(bundle.secret)+16)
	})

	t.Run("DoesNotContainPlaintext", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		sealed, err := bundle.keyring.Seal(bundle.secret, bundle.ad)
		require.NoError(t, err)
		require.False(t, bytes.Contains(sealed, bundle.secret[:8]))
	})

	t.Run("UsesFreshNonces", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		a, err := bundle.keyring.Seal(bundle.secret, bundle.ad)
		require.NoError(t, err)
		b, err := bundle.keyring.Seal(bundle.secret, bundle.ad)
		require.NoError(t, err)
		require.NotEqual(t, a, b)
	})

	t.Run("OpensKnownAnswerVectors", func(t *testing.T) {
		t.Parallel()
		keyring := newKeyring(t, 1, 1, 2)

		got, err := keyring.Open(mustHex(t, vectorKey1Hex), []byte(vectorKey1AD))
		require.NoError(t, err)
		require.Equal(t, vectorKey1PT, string(got))

		got, err = keyring.Open(mustHex(t, vectorKey2Hex), nil)
		require.NoError(t, err)
		require.Empty(t, got)
	})

	t.Run("DerivesDataKeyWithHKDF", func(t *testing.T) {
		t.Parallel()
		// Open a value with an independent implementation of the documented
		// construction, so the format is specified by more than this code.
		bundle := setup(t)
		sealed, err := bundle.keyring.Seal(bundle.secret, bundle.ad)
		require.NoError(t, err)

		dataKey, err := hkdf.Key(sha256.New, testMasterKey(1), nil, "dispatcher/webhook-secret/aes-256-gcm/v1", 32)
		require.NoError(t, err)
		block, err := aes.NewCipher(dataKey)
		require.NoError(t, err)
		gcm, err := cipher.NewGCM(block)
		require.NoError(t, err)
		aad := append(append([]byte{}, sealed[:5]...), bundle.ad...)
		got, err := gcm.Open(nil, sealed[5:17], sealed[17:], aad)
		require.NoError(t, err)
		require.Equal(t, bundle.secret, got)
	})

	t.Run("NilAndEmptyADAreTheSame", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		sealed, err := bundle.keyring.Seal(bundle.secret, nil)
		require.NoError(t, err)
		_, err = bundle.keyring.Open(sealed, []byte{})
		require.NoError(t, err)
	})

	t.Run("WrongADFails", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		sealed, err := bundle.keyring.Seal(bundle.secret, bundle.ad)
		require.NoError(t, err)
		for _, ad := range [][]byte{nil, []byte("endpoint-0002"), []byte("endpoint-000"), []byte("endpoint-00011")} {
			got, err := bundle.keyring.Open(sealed, ad)
			require.ErrorIs(t, err, ErrAuth)
			require.Nil(t, got)
		}
	})

	t.Run("TamperedByteFailsAtEveryPosition", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		sealed, err := bundle.keyring.Seal(bundle.secret, bundle.ad)
		require.NoError(t, err)
		for i := range sealed {
			for _, mask := range []byte{0x01, 0x80, 0xFF} {
				tampered := bytes.Clone(sealed)
				tampered[i] ^= mask
				got, err := bundle.keyring.Open(tampered, bundle.ad)
				require.Nil(t, got, "position %d mask %#x", i, mask)
				switch {
				case i == 0:
					require.ErrorIs(t, err, ErrMalformed, "position %d", i)
				case i < 5: // key id: the keyring only holds id 1
					require.ErrorIs(t, err, ErrUnknownKey, "position %d", i)
				default:
					require.ErrorIs(t, err, ErrAuth, "position %d", i)
				}
			}
		}
	})

	t.Run("TruncatedOrExtendedFails", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		sealed, err := bundle.keyring.Seal(bundle.secret, bundle.ad)
		require.NoError(t, err)
		for n := range sealed {
			_, err := bundle.keyring.Open(sealed[:n], bundle.ad)
			if n < 5+12+16 {
				require.ErrorIs(t, err, ErrMalformed, "length %d", n)
			} else {
				require.ErrorIs(t, err, ErrAuth, "length %d", n)
			}
		}
		_, err = bundle.keyring.Open(append(bytes.Clone(sealed), 0), bundle.ad)
		require.ErrorIs(t, err, ErrAuth)
	})

	t.Run("RelabelledKeyIDFails", func(t *testing.T) {
		t.Parallel()
		// Even when both ids hold the same master key, the id is
		// authenticated, so a relabelled value does not open.
		same, err := NewKeyring(1, map[uint32][]byte{1: testMasterKey(1), 2: testMasterKey(1)})
		require.NoError(t, err)
		for _, keyring := range []*Keyring{same, newKeyring(t, 1, 1, 2)} {
			sealed, err := keyring.Seal([]byte("secret"), []byte("ep"))
			require.NoError(t, err)
			binary.BigEndian.PutUint32(sealed[1:5], 2)
			_, err = keyring.Open(sealed, []byte("ep"))
			require.ErrorIs(t, err, ErrAuth)
		}
	})

	t.Run("UnknownKeyIDFails", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		sealed, err := bundle.keyring.Seal(bundle.secret, bundle.ad)
		require.NoError(t, err)
		_, err = newKeyring(t, 2, 2).Open(sealed, bundle.ad)
		require.ErrorIs(t, err, ErrUnknownKey)
		require.ErrorContains(t, err, "1")
	})

	t.Run("SameIDOtherKeyFails", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		sealed, err := bundle.keyring.Seal(bundle.secret, bundle.ad)
		require.NoError(t, err)
		other, err := NewKeyring(1, map[uint32][]byte{1: bytes.Repeat([]byte{0x99}, 32)})
		require.NoError(t, err)
		_, err = other.Open(sealed, bundle.ad)
		require.ErrorIs(t, err, ErrAuth)
	})

	t.Run("UnknownFormatFails", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		sealed, err := bundle.keyring.Seal(bundle.secret, bundle.ad)
		require.NoError(t, err)
		for _, format := range []byte{0x00, 0x03, 0xFF} {
			sealed[0] = format
			_, err = bundle.keyring.Open(sealed, bundle.ad)
			require.ErrorIs(t, err, ErrMalformed)
			_, err = FormatOf(sealed)
			require.ErrorIs(t, err, ErrMalformed)
		}
	})

	t.Run("FormatIsBound", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		// A format 2 value relabelled as format 1 (whose callers bind less)
		// fails to open: the format byte is authenticated.
		sealed, err := bundle.keyring.Seal(bundle.secret, bundle.ad)
		require.NoError(t, err)
		sealed[0] = 0x01
		_, err = bundle.keyring.Open(sealed, bundle.ad)
		require.ErrorIs(t, err, ErrAuth)
	})

	t.Run("FormatOneStillOpensAndNeedsReseal", func(t *testing.T) {
		t.Parallel()
		keyring := newKeyring(t, 1, 1, 2)
		v1 := mustHex(t, vectorKey1Hex)
		f, err := FormatOf(v1)
		require.NoError(t, err)
		require.Equal(t, 1, f)
		_, err = keyring.Open(v1, []byte(vectorKey1AD))
		require.NoError(t, err)
		require.True(t, keyring.NeedsReseal(v1), "format 1 under the primary key is re-sealed to format 2")
	})

	t.Run("FormatOneRefusedWhenAsked", func(t *testing.T) {
		t.Parallel()
		keyring := newKeyring(t, 1, 1, 2).RefusingFormat1()
		_, err := keyring.Open(mustHex(t, vectorKey1Hex), []byte(vectorKey1AD))
		require.ErrorIs(t, err, ErrFormat1Refused)
		require.Contains(t, err.Error(), "reseal-secrets")
		// Format 2 values still open.
		sealed, err := keyring.Seal([]byte("secret"), []byte("ep"))
		require.NoError(t, err)
		plain, err := keyring.Open(sealed, []byte("ep"))
		require.NoError(t, err)
		require.Equal(t, "secret", string(plain))
	})

	t.Run("SafeForConcurrentUse", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for range 16 {
			wg.Go(func() {
				for range 50 {
					sealed, err := bundle.keyring.Seal(bundle.secret, bundle.ad)
					if err == nil {
						_, err = bundle.keyring.Open(sealed, bundle.ad)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			require.NoError(t, err)
		}
	})

	t.Run("NilOrZeroKeyringFails", func(t *testing.T) {
		t.Parallel()
		var nilKeyring *Keyring
		for _, keyring := range []*Keyring{nilKeyring, {}} {
			_, err := keyring.Seal([]byte("x"), nil)
			require.ErrorIs(t, err, ErrNoKeyring)
			_, err = keyring.Open(mustHex(t, vectorKey2Hex), nil)
			require.ErrorIs(t, err, ErrNoKeyring)
			require.Zero(t, keyring.PrimaryID())
			require.True(t, keyring.NeedsReseal(mustHex(t, vectorKey2Hex)))
		}
	})
}

func TestRotation(t *testing.T) {
	t.Parallel()

	t.Run("OldValuesOpenAndNeedReseal", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		oldSealed, err := bundle.keyring.Seal(bundle.secret, bundle.ad)
		require.NoError(t, err)
		require.False(t, bundle.keyring.NeedsReseal(oldSealed))

		// Step 2 of the rotation: key 2 is primary, key 1 still present.
		rotated := newKeyring(t, 2, 1, 2)
		require.Equal(t, uint32(2), rotated.PrimaryID())
		require.True(t, rotated.NeedsReseal(oldSealed))

		got, err := rotated.Open(oldSealed, bundle.ad)
		require.NoError(t, err)
		require.Equal(t, bundle.secret, got)

		resealed, err := rotated.Seal(got, bundle.ad)
		require.NoError(t, err)
		require.Equal(t, uint32(2), binary.BigEndian.Uint32(resealed[1:5]))
		require.False(t, rotated.NeedsReseal(resealed))

		// Step 4: key 1 removed; resealed values still open, old ones do not.
		retired := newKeyring(t, 2, 2)
		got, err = retired.Open(resealed, bundle.ad)
		require.NoError(t, err)
		require.Equal(t, bundle.secret, got)
		_, err = retired.Open(oldSealed, bundle.ad)
		require.ErrorIs(t, err, ErrUnknownKey)
	})

	t.Run("ReplicaWithoutNewKeyCannotOpen", func(t *testing.T) {
		t.Parallel()
		// Why step 1 precedes step 2: a replica still on the old keyring.
		bundle := setup(t)
		sealed, err := newKeyring(t, 2, 1, 2).Seal(bundle.secret, bundle.ad)
		require.NoError(t, err)
		_, err = bundle.keyring.Open(sealed, bundle.ad)
		require.ErrorIs(t, err, ErrUnknownKey)
	})

	t.Run("NeedsResealForUnreadableValues", func(t *testing.T) {
		t.Parallel()
		bundle := setup(t)
		require.True(t, bundle.keyring.NeedsReseal(nil))
		require.True(t, bundle.keyring.NeedsReseal([]byte{0x01, 0, 0, 0, 1}))
		sealed, err := bundle.keyring.Seal(bundle.secret, bundle.ad)
		require.NoError(t, err)
		sealed[0] = 0x03
		require.True(t, bundle.keyring.NeedsReseal(sealed))
	})
}

func TestNewKeyring(t *testing.T) {
	t.Parallel()

	t.Run("AcceptsMinimumKeyLength", func(t *testing.T) {
		t.Parallel()
		_, err := NewKeyring(1, map[uint32][]byte{1: make([]byte, MinMasterKeyLen)})
		require.NoError(t, err)
	})

	t.Run("AcceptsLongerKeys", func(t *testing.T) {
		t.Parallel()
		_, err := NewKeyring(1, map[uint32][]byte{1: bytes.Repeat([]byte{7}, 64)})
		require.NoError(t, err)
	})

	t.Run("RejectsShortKey", func(t *testing.T) {
		t.Parallel()
		_, err := NewKeyring(1, map[uint32][]byte{1: make([]byte, MinMasterKeyLen-1)})
		require.ErrorIs(t, err, ErrInvalidKeyring)
		require.ErrorContains(t, err, "at least 32 bytes")
	})

	t.Run("RejectsNoKeys", func(t *testing.T) {
		t.Parallel()
		_, err := NewKeyring(1, nil)
		require.ErrorIs(t, err, ErrInvalidKeyring)
	})

	t.Run("RejectsMissingPrimary", func(t *testing.T) {
		t.Parallel()
		_, err := NewKeyring(2, map[uint32][]byte{1: testMasterKey(1)})
		require.ErrorIs(t, err, ErrInvalidKeyring)
		require.ErrorContains(t, err, "primary key id 2")
	})

	t.Run("RejectsReservedIDZero", func(t *testing.T) {
		t.Parallel()
		_, err := NewKeyring(0, map[uint32][]byte{0: testMasterKey(1)})
		require.ErrorIs(t, err, ErrInvalidKeyring)
	})

	t.Run("DoesNotRetainCallerKeys", func(t *testing.T) {
		t.Parallel()
		master := testMasterKey(1)
		keys := map[uint32][]byte{1: master}
		keyring, err := NewKeyring(1, keys)
		require.NoError(t, err)
		clear(master)
		delete(keys, 1)

		got, err := keyring.Open(mustHex(t, vectorKey1Hex), []byte(vectorKey1AD))
		require.NoError(t, err)
		require.Equal(t, vectorKey1PT, string(got))
	})
}
