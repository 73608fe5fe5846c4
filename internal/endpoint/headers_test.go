package endpoint

import (
	"bytes"
	"crypto/rand"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
)

func TestValidateHeaders(t *testing.T) {
	t.Parallel()

	check := func(h map[string]string) violations {
		var v violations
		(&validator{}).headers(&v, h)
		return v
	}
	requireRefused := func(t *testing.T, h map[string]string, field string) {
		t.Helper()
		v := check(h)
		require.NotEmpty(t, v, "%v", h)
		require.Equal(t, field, v[0].Field)
		require.NotEmpty(t, v[0].Description)
		for _, value := range h {
			if len(value) > 3 {
				require.NotContains(t, v[0].Description, value, "a value is never echoed")
			}
		}
	}

	t.Run("Accepts", func(t *testing.T) {
		t.Parallel()
		require.Empty(t, check(nil))
		require.Empty(t, check(map[string]string{"X-Api-Key": "k3y-with spaces\tand tabs", "X-Gateway-Tenant": "acme"}))
	})

	t.Run("ReservedNames", func(t *testing.T) {
		t.Parallel()
		for _, name := range []string{
			"Host", "host", "Authorization", "AUTHORIZATION", "Cookie", "Set-Cookie",
			"Proxy-Authorization", "proxy-anything", "Webhook-Id", "webhook-signature", "webhook-custom",
			"Content-Type", "content-length", "Content-Encoding", "Connection", "Keep-Alive", "TE",
			"Trailer", "Transfer-Encoding", "Upgrade", "Expect", "User-Agent",
		} {
			requireRefused(t, map[string]string{name: "v"}, `headers["`+name+`"]`)
		}
	})

	t.Run("MalformedNames", func(t *testing.T) {
		t.Parallel()
		requireRefused(t, map[string]string{"": "v"}, `headers[""]`)
		requireRefused(t, map[string]string{"X Key": "v"}, `headers["X Key"]`)
		requireRefused(t, map[string]string{"X-Key:": "v"}, `headers["X-Key:"]`)
		requireRefused(t, map[string]string{"X-Key\r\nInjected": "v"}, `headers["X-Key\r\nInjected"]`)
		requireRefused(t, map[string]string{"X-Ключ": "v"}, `headers["X-Ключ"]`)
		long := "X-" + strings.Repeat("a", 4*MaxHeaderNameLen)
		v := check(map[string]string{long: "v"})
		require.Len(t, v, 1)
		require.Less(t, len(v[0].Field), len(long), "a long name is cut short in the field")
	})

	t.Run("BadValues", func(t *testing.T) {
		t.Parallel()
		for _, value := range []string{
			"", " leading", "trailing ", "line\r\nX-Injected: 1", "nul\x00byte", "bell\x07", "del\x7f", "utf8-é",
			strings.Repeat("v", MaxHeaderValueLen+1),
		} {
			requireRefused(t, map[string]string{"X-Api-Key": value}, `headers["X-Api-Key"]`)
		}
	})

	t.Run("CaseInsensitiveDuplicate", func(t *testing.T) {
		t.Parallel()
		v := check(map[string]string{"X-Api-Key": "a", "x-api-key": "b"})
		require.Len(t, v, 1)
		require.Contains(t, v[0].Description, "duplicates")
	})

	t.Run("Bounds", func(t *testing.T) {
		t.Parallel()
		many := map[string]string{}
		for i := range MaxHeaders + 1 {
			many["X-H"+strings.Repeat("i", i+1)] = "v"
		}
		requireRefused(t, many, "headers")

		big := map[string]string{}
		for i := range 5 {
			big["X-Big-"+string(rune('a'+i))] = strings.Repeat("v", MaxHeaderValueLen)
		}
		requireRefused(t, big, "headers")
	})

	t.Run("SortedCaseInsensitively", func(t *testing.T) {
		t.Parallel()
		var v violations
		hs := (&validator{}).headers(&v, map[string]string{"x-b": "2", "X-A": "1", "X-c": "3"})
		require.Empty(t, v)
		require.Equal(t, []string{"X-A", "x-b", "X-c"}, headerNames(hs))
	})
}

func TestHeadersSealed(t *testing.T) {
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
	const secretValue = "gateway-key-4f1c9a"
	create := func(t *testing.T, b *testBundle, h map[string]string) *Endpoint {
		t.Helper()
		e, _, err := b.store.Create(t.Context(), CreateParams{
			OwnerID: "owner_a", URL: "https://x.example.com/", EventTypes: []string{"*"}, Headers: h,
		}, 0)
		require.NoError(t, err)
		return e
	}
	readSealed := func(t *testing.T, b *testBundle, id uuid.UUID) []byte {
		t.Helper()
		var sealed []byte
		require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT headers_enc FROM webhook_endpoints WHERE id = $1`, id).Scan(&sealed))
		return sealed
	}

	t.Run("NamesPlainValuesSealed", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e := create(t, b, map[string]string{"X-Api-Key": secretValue, "X-Tenant": "acme"})
		require.Equal(t, []string{"X-Api-Key", "X-Tenant"}, e.HeaderNames)

		got, err := b.store.Get(t.Context(), "owner_a", e.ID)
		require.NoError(t, err)
		require.Equal(t, []string{"X-Api-Key", "X-Tenant"}, got.HeaderNames)

		sealed := readSealed(t, b, e.ID)
		require.NotNil(t, sealed)
		require.False(t, bytes.Contains(sealed, []byte(secretValue)), "the value is not stored in plaintext")
		var row string
		require.NoError(t, b.db.Pool.QueryRow(t.Context(), `SELECT row_to_json(w)::text FROM webhook_endpoints w WHERE id = $1`, e.ID).Scan(&row))
		require.NotContains(t, row, secretValue)

		h, err := OpenHeaders(b.keyring, e.ID, sealed)
		require.NoError(t, err)
		require.Equal(t, secretValue, h.Get("X-Api-Key"))
		require.Equal(t, "acme", h.Get("X-Tenant"))
	})

	t.Run("BoundToItsEndpoint", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e := create(t, b, map[string]string{"X-Api-Key": secretValue})
		sealed := readSealed(t, b, e.ID)
		_, err := OpenHeaders(b.keyring, uuid.New(), sealed)
		require.ErrorIs(t, err, seal.ErrAuth)
		require.NotContains(t, err.Error(), secretValue)
		// Nor does a header set open as the endpoint's signing secret.
		_, err = OpenKeys(b.keyring, e.ID, seal.SigningKeys{Current: sealed}, e.CreatedAt)
		require.ErrorIs(t, err, seal.ErrAuth)
	})

	t.Run("NoneIsNil", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e := create(t, b, nil)
		require.Empty(t, e.HeaderNames)
		require.Nil(t, readSealed(t, b, e.ID))
		h, err := OpenHeaders(b.keyring, e.ID, nil)
		require.NoError(t, err)
		require.Empty(t, h)
	})

	t.Run("UpdateReplacesAndClears", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		e := create(t, b, map[string]string{"X-Api-Key": secretValue})

		got, err := b.store.Update(t.Context(), "owner_a", e.ID, UpdateParams{Headers: []Header{{Name: "X-Other", Value: "o"}}})
		require.NoError(t, err)
		require.Equal(t, []string{"X-Other"}, got.HeaderNames)
		h, err := OpenHeaders(b.keyring, e.ID, readSealed(t, b, e.ID))
		require.NoError(t, err)
		require.Empty(t, h.Get("X-Api-Key"))
		require.Equal(t, "o", h.Get("X-Other"))

		got, err = b.store.Update(t.Context(), "owner_a", e.ID, UpdateParams{Description: new("kept headers")})
		require.NoError(t, err)
		require.Equal(t, []string{"X-Other"}, got.HeaderNames, "a mask without headers leaves them alone")

		got, err = b.store.Update(t.Context(), "owner_a", e.ID, UpdateParams{Headers: []Header{}})
		require.NoError(t, err)
		require.Empty(t, got.HeaderNames)
		require.Nil(t, readSealed(t, b, e.ID))
	})

	t.Run("Resealed", func(t *testing.T) {
		t.Parallel()
		db := dbtest.New(t)
		oldRing, oldMaster := testfactory.Keyring(t, 1)
		b := &testBundle{db: db, keyring: oldRing, store: NewStore(db.Pool, oldRing)}
		e := create(t, b, map[string]string{"X-Api-Key": secretValue})

		newMaster := make([]byte, 32)
		_, err := rand.Read(newMaster)
		require.NoError(t, err)
		both, err := seal.NewKeyring(2, map[uint32][]byte{1: oldMaster, 2: newMaster})
		require.NoError(t, err)
		onlyNew, err := seal.NewKeyring(2, map[uint32][]byte{2: newMaster})
		require.NoError(t, err)

		n, err := Reseal(t.Context(), db.Pool, both)
		require.NoError(t, err)
		require.Equal(t, 1, n)
		h, err := OpenHeaders(onlyNew, e.ID, readSealed(t, b, e.ID))
		require.NoError(t, err, "opens without the old master key")
		require.Equal(t, secretValue, h.Get("X-Api-Key"))
	})
}
