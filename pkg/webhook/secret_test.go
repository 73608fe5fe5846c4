package webhook_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

func TestGenerateSecret(t *testing.T) {
	t.Parallel()

	t.Run("ThirtyTwoPaddedBytes", func(t *testing.T) {
		t.Parallel()

		secret, err := webhook.GenerateSecret()
		require.NoError(t, err)
		require.True(t, strings.HasPrefix(secret, webhook.SecretPrefix))
		// 32 bytes encode to 44 padded characters ending in one '='; this is the form
		// every reference library can load.
		require.Len(t, strings.TrimPrefix(secret, webhook.SecretPrefix), 44)
		require.True(t, strings.HasSuffix(secret, "="))

		key, err := webhook.ParseSecret(secret)
		require.NoError(t, err)
		require.Len(t, key, 32)
	})

	t.Run("Unique", func(t *testing.T) {
		t.Parallel()

		a, err := webhook.GenerateSecret()
		require.NoError(t, err)
		b, err := webhook.GenerateSecret()
		require.NoError(t, err)
		require.NotEqual(t, a, b)
	})
}

func TestFormatSecret(t *testing.T) {
	t.Parallel()

	key := []byte("0123456789abcdef0123456789abcdef")
	secret := webhook.FormatSecret(key)
	require.Equal(t, "whsec_"+base64.StdEncoding.EncodeToString(key), secret)
	got, err := webhook.ParseSecret(secret)
	require.NoError(t, err)
	require.Equal(t, key, got)
}

func TestParseSecret(t *testing.T) {
	t.Parallel()

	b64 := func(n int) string { return base64.StdEncoding.EncodeToString(make([]byte, n)) }

	tests := []struct {
		name    string
		secret  string
		wantLen int // 0 = must fail with ErrInvalidSecret
	}{
		{name: "WithPrefix", secret: "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", wantLen: 24},
		{name: "WithoutPrefix", secret: "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", wantLen: 24},
		{name: "Padded32", secret: "whsec_" + b64(32), wantLen: 32},
		{name: "Minimum24", secret: "whsec_" + b64(24), wantLen: 24},
		{name: "Maximum64", secret: "whsec_" + b64(64), wantLen: 64},
		{name: "TooShort23", secret: "whsec_" + b64(23)},
		{name: "TooLong65", secret: "whsec_" + b64(65)},
		{name: "Unpadded", secret: "whsec_" + strings.TrimRight(b64(32), "=")},
		{name: "URLAlphabet", secret: "whsec_" + base64.URLEncoding.EncodeToString([]byte(strings.Repeat("\xfb\xff", 16)))},
		{name: "NotBase64", secret: "whsec_this is not base64 at all!!"},
		{name: "Empty", secret: ""},
		{name: "PrefixOnly", secret: "whsec_"},
		{name: "PublicKeyPrefix", secret: "whpk_" + b64(32)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			key, err := webhook.ParseSecret(tt.secret)
			if tt.wantLen > 0 {
				require.NoError(t, err)
				require.Len(t, key, tt.wantLen)
				return
			}
			require.ErrorIs(t, err, webhook.ErrInvalidSecret)
			require.Nil(t, key)
			if enc := strings.TrimPrefix(tt.secret, webhook.SecretPrefix); len(enc) > 4 {
				require.NotContains(t, err.Error(), enc, "errors must not echo the secret")
			}
		})
	}
}
