package seal

import (
	"bytes"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func b64(key []byte) string { return base64.StdEncoding.EncodeToString(key) }

// requireNoKeyMaterial asserts that s reveals none of the master keys (nor
// the keys derived from them) in any usual encoding.
func requireNoKeyMaterial(t *testing.T, s string, masters ...[]byte) {
	t.Helper()

	for _, master := range masters {
		derived, err := hkdf.Key(sha256.New, master, nil, hkdfInfo, 32)
		require.NoError(t, err)
		for _, key := range [][]byte{master, derived} {
			for _, form := range []string{
				string(key),
				hex.EncodeToString(key),
				strings.ToUpper(hex.EncodeToString(key)),
				base64.StdEncoding.EncodeToString(key),
				base64.RawStdEncoding.EncodeToString(key),
				base64.URLEncoding.EncodeToString(key),
				fmt.Sprint(key), //nolint:staticcheck // the "[0 1 2 ...]" form is the point
			} {
				// A quarter of the key is already too much.
				require.NotContains(t, s, form[:len(form)/4], "leaked key material")
			}
		}
	}
}

func TestParseKeyring(t *testing.T) {
	t.Parallel()

	t.Run("ParsesSingleEntry", func(t *testing.T) {
		t.Parallel()
		keyring, err := ParseKeyring("1:" + b64(testMasterKey(1)))
		require.NoError(t, err)
		require.Equal(t, uint32(1), keyring.PrimaryID())

		got, err := keyring.Open(mustHex(t, vectorKey1Hex), []byte(vectorKey1AD))
		require.NoError(t, err)
		require.Equal(t, vectorKey1PT, string(got))
	})

	t.Run("FirstEntryIsPrimary", func(t *testing.T) {
		t.Parallel()
		keyring, err := ParseKeyring("2:" + b64(testMasterKey(2)) + ",1:" + b64(testMasterKey(1)))
		require.NoError(t, err)
		require.Equal(t, uint32(2), keyring.PrimaryID())

		// Both keys are usable for opening.
		_, err = keyring.Open(mustHex(t, vectorKey1Hex), []byte(vectorKey1AD))
		require.NoError(t, err)
		_, err = keyring.Open(mustHex(t, vectorKey2Hex), nil)
		require.NoError(t, err)
	})

	t.Run("AcceptsUnpaddedBase64", func(t *testing.T) {
		t.Parallel()
		keyring, err := ParseKeyring("1:" + base64.RawStdEncoding.EncodeToString(testMasterKey(1)))
		require.NoError(t, err)
		_, err = keyring.Open(mustHex(t, vectorKey1Hex), []byte(vectorKey1AD))
		require.NoError(t, err)
	})

	t.Run("IgnoresSurroundingWhitespace", func(t *testing.T) {
		t.Parallel()
		keyring, err := ParseKeyring(" 2 : " + b64(testMasterKey(2)) + " ,\n1:" + b64(testMasterKey(1)) + "\n")
		require.NoError(t, err)
		require.Equal(t, uint32(2), keyring.PrimaryID())
	})

	t.Run("AcceptsLargestID", func(t *testing.T) {
		t.Parallel()
		keyring, err := ParseKeyring("4294967295:" + b64(testMasterKey(1)))
		require.NoError(t, err)
		require.Equal(t, uint32(4294967295), keyring.PrimaryID())
	})

	t.Run("RejectsBadSpecs", func(t *testing.T) {
		t.Parallel()
		key1, key2 := b64(testMasterKey(1)), b64(testMasterKey(2))
		short := b64(testMasterKey(1)[:MinMasterKeyLen-1])
		for _, tc := range []struct {
			name, spec, want string
		}{
			{"Empty", "", "spec is empty"},
			{"Blank", " \n\t", "spec is empty"},
			{"MissingSeparator", key1, "entry 1: want id:base64key"},
			{"EmptyEntry", "1:" + key1 + ",", "entry 2: want id:base64key"},
			{"LeadingComma", ",1:" + key1, "entry 1: want id:base64key"},
			{"NonNumericID", "one:" + key1, "entry 1: id must be"},
			{"ZeroID", "0:" + key1, "entry 1: id must be"},
			{"NegativeID", "-1:" + key1, "entry 1: id must be"},
			{"IDTooLarge", "4294967296:" + key1, "entry 1: id must be"},
			{"KeyWhereIDBelongs", key1 + ":1", "entry 1: id must be"},
			{"BadBase64", "1:" + key1[:10] + "!!" + key1[12:], "entry 1 (key id 1): key is not valid standard base64"},
			{"URLSafeBase64", "1:" + strings.NewReplacer("+", "-", "/", "_").Replace(b64(bytes.Repeat([]byte{0xfb}, 32))), "not valid standard base64"},
			{"ShortKey", "1:" + short, "entry 1 (key id 1): master key must be at least 32 bytes"},
			{"EmptyKey", "1:", "entry 1 (key id 1): master key must be at least 32 bytes"},
			{"DuplicateID", "1:" + key1 + ",2:" + key2 + ",1:" + key2, "entry 3: key id 1 already used by entry 1"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				keyring, err := ParseKeyring(tc.spec)
				require.Nil(t, keyring)
				require.ErrorIs(t, err, ErrInvalidKeyring)
				require.ErrorContains(t, err, tc.want)
				requireNoKeyMaterial(t, err.Error(), testMasterKey(1), testMasterKey(2))
				// Anything 16+ characters long in a spec is key material (ids
				// have at most 10 digits); not even a prefix may be echoed.
				for _, part := range strings.FieldsFunc(tc.spec, func(r rune) bool { return r == ',' || r == ':' }) {
					if len(part) >= 16 {
						require.NotContains(t, err.Error(), part[:8])
					}
				}
			})
		}
	})
}

func TestGenerateMasterKey(t *testing.T) {
	t.Parallel()

	t.Run("ProducesUsableSpecEntry", func(t *testing.T) {
		t.Parallel()
		entry, err := GenerateMasterKey()
		require.NoError(t, err)

		idText, keyText, ok := strings.Cut(entry, ":")
		require.True(t, ok)
		key, err := base64.StdEncoding.DecodeString(keyText)
		require.NoError(t, err)
		require.Len(t, key, 32)

		keyring, err := ParseKeyring(entry)
		require.NoError(t, err)
		require.Equal(t, idText, fmt.Sprint(keyring.PrimaryID()))
		require.NotZero(t, keyring.PrimaryID())
		require.Less(t, keyring.PrimaryID(), uint32(1<<31))

		sealed, err := keyring.Seal([]byte("s"), []byte("ep"))
		require.NoError(t, err)
		got, err := keyring.Open(sealed, []byte("ep"))
		require.NoError(t, err)
		require.Equal(t, []byte("s"), got)
	})

	t.Run("GeneratesDistinctKeys", func(t *testing.T) {
		t.Parallel()
		a, err := GenerateMasterKey()
		require.NoError(t, err)
		b, err := GenerateMasterKey()
		require.NoError(t, err)
		require.NotEqual(t, a, b)

		// A fresh key can be prepended to an existing spec as a rotation.
		keyring, err := ParseKeyring(a + "," + b)
		require.NoError(t, err)
		require.NotNil(t, keyring)
	})
}

func TestKeyringNeverRevealsKeys(t *testing.T) {
	t.Parallel()

	t.Run("Fmt", func(t *testing.T) {
		t.Parallel()
		keyring := newKeyring(t, 2, 1, 2)
		want := "seal.Keyring{primary: 2, keys: [1 2]}"
		require.Equal(t, want, keyring.String())

		for _, verb := range []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10.3v"} {
			require.Equal(t, want, fmt.Sprintf(verb, keyring), "verb %s", verb)
			// A dereferenced copy has no methods; it must still only reach an
			// address through reflection.
			requireNoKeyMaterial(t, fmt.Sprintf(verb, *keyring), testMasterKey(1), testMasterKey(2))
		}
		nested := fmt.Sprintf("%+v %#v", struct{ K *Keyring }{keyring}, []*Keyring{keyring})
		require.Contains(t, nested, want)
		requireNoKeyMaterial(t, nested, testMasterKey(1), testMasterKey(2))
	})

	t.Run("Slog", func(t *testing.T) {
		t.Parallel()
		keyring := newKeyring(t, 2, 1, 2)
		var buf bytes.Buffer
		text := slog.New(slog.NewTextHandler(&buf, nil))
		text.Info("loaded", "keyring", keyring, "value", *keyring)
		jsonLog := slog.New(slog.NewJSONHandler(&buf, nil))
		jsonLog.Info("loaded", slog.Any("keyring", keyring), slog.Any("value", *keyring))

		out := buf.String()
		require.Contains(t, out, "keyring.primary=2 keyring.key_ids=\"[1 2]\"")
		require.Contains(t, out, `"keyring":{"primary":2,"key_ids":[1,2]}`)
		requireNoKeyMaterial(t, out, testMasterKey(1), testMasterKey(2))
	})

	t.Run("NilKeyring", func(t *testing.T) {
		t.Parallel()
		var keyring *Keyring
		require.Equal(t, "seal.Keyring(nil)", fmt.Sprintf("%v", keyring))
		require.Equal(t, "seal.Keyring{primary: 0, keys: []}", fmt.Sprintf("%v", &Keyring{}))

		var buf bytes.Buffer
		slog.New(slog.NewTextHandler(&buf, nil)).Info("loaded", "keyring", keyring)
		require.Contains(t, buf.String(), "keyring.primary=0 keyring.key_ids=[]")
		require.NotContains(t, buf.String(), "panic")
	})

	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		out, err := json.Marshal(newKeyring(t, 1, 1)) //nolint:staticcheck // marshalling it must reveal nothing
		require.NoError(t, err)
		requireNoKeyMaterial(t, string(out), testMasterKey(1))
	})
}
