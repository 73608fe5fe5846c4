package seal

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzOpen feeds arbitrary values and associated data to Open. It must never
// panic, must fail with one of the documented sentinels, and must only ever
// return plaintext for one of the known-answer vectors with the ad it was
// sealed with: anything else would be a forgery. (Only fixed vectors count as
// known: values sealed at run time differ in every fuzzing worker process.)
func FuzzOpen(f *testing.F) {
	keyring := newKeyring(f, 1, 1, 2)

	type sealedValue struct{ sealed, ad, plaintext []byte }
	known := []sealedValue{
		{mustHex(f, vectorKey1Hex), []byte(vectorKey1AD), []byte(vectorKey1PT)},
		{mustHex(f, vectorKey2Hex), nil, nil},
	}
	for _, v := range known {
		f.Add(v.sealed, v.ad)
	}
	f.Add([]byte{}, []byte{})
	f.Add([]byte{0x01, 0, 0, 0, 1}, []byte("ep"))

	f.Fuzz(func(t *testing.T, sealed, ad []byte) {
		_ = keyring.NeedsReseal(sealed) // must not panic

		got, err := keyring.Open(sealed, ad)
		if err != nil {
			require.Nil(t, got)
			require.True(t,
				errors.Is(err, ErrMalformed) || errors.Is(err, ErrUnknownKey) || errors.Is(err, ErrAuth),
				"undocumented error: %v", err)
		} else {
			found := false
			for _, v := range known {
				if bytes.Equal(v.sealed, sealed) && bytes.Equal(v.ad, ad) {
					require.True(t, bytes.Equal(v.plaintext, got))
					found = true
				}
			}
			require.True(t, found, "Open accepted a value it never sealed: %x (ad %x)", sealed, ad)
		}

		// Whatever the bytes, sealing them as plaintext round-trips.
		resealed, err := keyring.Seal(sealed, ad)
		require.NoError(t, err)
		opened, err := keyring.Open(resealed, ad)
		require.NoError(t, err)
		require.True(t, bytes.Equal(sealed, opened))
	})
}
