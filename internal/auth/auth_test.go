package auth

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

const (
	publisherToken = "pub-token-0123456789abcdef012345"
	adminToken     = "admin-token-0123456789abcdef0123"
	adminToken2    = "admin-token-rotated-9876543210fedcba"
	operatorToken  = "operator-token-0123456789abcdef0123"
)

func TestNew(t *testing.T) {
	t.Parallel()

	t.Run("RejectsShortToken", func(t *testing.T) {
		t.Parallel()
		_, err := New(Tokens{Admin: []string{adminToken, "short-secret"}}, nil)
		require.ErrorContains(t, err, "admin token #2")
		require.NotContains(t, err.Error(), "short-secret")
	})

	t.Run("RejectsNoTokens", func(t *testing.T) {
		t.Parallel()
		_, err := New(Tokens{}, nil)
		require.ErrorIs(t, err, ErrNoTokens)
	})

	t.Run("RolesAreDisjoint", func(t *testing.T) {
		t.Parallel()
		a, err := New(Tokens{Publisher: []string{publisherToken}, Admin: []string{adminToken, adminToken2}, Operator: []string{operatorToken}}, nil)
		require.NoError(t, err)
		require.Equal(t, RolePublisher, a.RoleOf(publisherToken))
		require.Equal(t, RoleAdmin, a.RoleOf(adminToken))
		require.Equal(t, RoleAdmin, a.RoleOf(adminToken2))
		require.Equal(t, RoleOperator, a.RoleOf(operatorToken))
		require.Equal(t, Role(0), a.RoleOf(operatorToken+"x"))
		require.Equal(t, 2, a.Count(RoleAdmin))
		require.Equal(t, 1, a.Count(RoleOperator))
	})

	t.Run("TokenSharedByTwoRolesRefused", func(t *testing.T) {
		t.Parallel()
		_, err := New(Tokens{Publisher: []string{publisherToken}, Admin: []string{adminToken, publisherToken}}, nil)
		var shared *SharedTokenError
		require.ErrorAs(t, err, &shared)
		require.Equal(t, SharedTokenError{First: RolePublisher, FirstIndex: 1, Second: RoleAdmin, SecondIndex: 2}, *shared)
		require.EqualError(t, err, "auth: admin token #2 is also publisher token #1: roles are disjoint, give each role its own tokens")

		_, err = New(Tokens{Admin: []string{adminToken}, Operator: []string{adminToken}}, nil)
		require.ErrorAs(t, err, &shared)
		require.Equal(t, RoleOperator, shared.Second)
		require.NotContains(t, err.Error(), adminToken)
	})

	t.Run("OperatorTokensAloneAreNotEnough", func(t *testing.T) {
		t.Parallel()
		_, err := New(Tokens{Operator: []string{operatorToken}}, nil)
		require.ErrorIs(t, err, ErrNoTokens)
	})

	t.Run("PublisherOnly", func(t *testing.T) {
		t.Parallel()
		a, err := New(Tokens{Publisher: []string{publisherToken}}, nil)
		require.NoError(t, err)
		require.Equal(t, RolePublisher, a.RoleOf(publisherToken))
	})
}

func TestLoadTokens(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		dir string
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{dir: t.TempDir()}
	}

	writeFile := func(t *testing.T, b *testBundle, content string) string {
		t.Helper()
		p := filepath.Join(b.dir, "tokens")
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}

	t.Run("FromEnv", func(t *testing.T) {
		t.Parallel()
		toks, err := LoadTokens(" "+adminToken+" , ,"+adminToken2+",", "")
		require.NoError(t, err)
		require.Equal(t, []string{adminToken, adminToken2}, toks)
	})

	t.Run("FromFileWithComments", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := writeFile(t, b, "# current\n"+adminToken+"\n\n  # next, rolled out first\n  "+adminToken2+"  \r\n")
		toks, err := LoadTokens("", p)
		require.NoError(t, err)
		require.Equal(t, []string{adminToken, adminToken2}, toks)
	})

	t.Run("FromFileCommaSeparated", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// A Secret key written for the variable ("old,new"), mounted as a
		// file: the same two tokens, not one token with a comma in it.
		p := writeFile(t, b, adminToken+", "+adminToken2)
		toks, err := LoadTokens("", p)
		require.NoError(t, err)
		require.Equal(t, []string{adminToken, adminToken2}, toks)
	})

	t.Run("BothSourcesCombinedAndDeduplicated", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := writeFile(t, b, adminToken2+"\n"+adminToken+"\n")
		toks, err := LoadTokens(adminToken, p)
		require.NoError(t, err)
		require.Equal(t, []string{adminToken, adminToken2}, toks)
	})

	t.Run("NeitherSource", func(t *testing.T) {
		t.Parallel()
		toks, err := LoadTokens("", "")
		require.NoError(t, err)
		require.Empty(t, toks)
	})

	t.Run("ShortTokenInEnvRefused", func(t *testing.T) {
		t.Parallel()
		_, err := LoadTokens(adminToken+",tooshort", "")
		require.ErrorContains(t, err, "item 2")
		require.NotContains(t, err.Error(), "tooshort")
	})

	t.Run("ShortTokenInFileRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := writeFile(t, b, "# c\n"+adminToken+"\nabc\n")
		_, err := LoadTokens("", p)
		require.ErrorContains(t, err, "line 3")
		require.False(t, strings.Contains(err.Error(), "abc\n") || strings.HasSuffix(err.Error(), "abc"))
	})

	t.Run("TokenWithInnerSpaceRefused", func(t *testing.T) {
		t.Parallel()
		_, err := LoadTokens("abcdefgh ijklmnopqrst", "")
		require.ErrorContains(t, err, "whitespace")
	})

	t.Run("MissingFile", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := LoadTokens("", filepath.Join(b.dir, "nope"))
		require.ErrorIs(t, err, os.ErrNotExist)
	})
}

func TestCheckStrength(t *testing.T) {
	t.Parallel()

	t.Run("WeakRefused", func(t *testing.T) {
		t.Parallel()
		for _, tok := range []string{
			"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
			"abcdefghijklmnopqrstuvwxyzabcdefgh",
			"12345678901234567890123456789012345",
			"passwordpasswordpasswordpassword",
			"changemechangemechangemechangeme",
			"qwertyqwertyqwertyqwertyqwertyqwerty",
		} {
			err := CheckStrength(tok)
			var weak *WeakTokenError
			require.ErrorAs(t, err, &weak, tok)
			require.NotContains(t, err.Error(), tok, "the error never holds the token")
		}
	})

	t.Run("RandomAccepted", func(t *testing.T) {
		t.Parallel()
		for range 200 {
			b := make([]byte, 32)
			_, _ = rand.Read(b)
			require.NoError(t, CheckStrength(base64.RawURLEncoding.EncodeToString(b)))
			require.NoError(t, CheckStrength(hex.EncodeToString(b[:16])))
		}
		require.NoError(t, CheckStrength("e2e-publisher-token-0123456789abcdef0123"), "a long made-up token of mixed parts")
	})

	t.Run("NewAndLoadTokensRefuseWeak", func(t *testing.T) {
		t.Parallel()
		_, err := New(Tokens{Admin: []string{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}}, nil)
		require.ErrorContains(t, err, "admin token #1: token is too weak")
		require.ErrorContains(t, err, "openssl rand", "the refusal says how to make one")
		_, err = LoadTokens("good_Zq81xPw0Lm3vT7yQ2nR5kJ, passwordpasswordpasswordpassword", "")
		require.ErrorContains(t, err, "environment list item 2: token is too weak")
		require.NotContains(t, err.Error(), "passwordpassword")
	})

	t.Run("ShortOrMadeUpRefused", func(t *testing.T) {
		t.Parallel()
		for _, tok := range []string{
			"dispatcher-admin-token",
			"e2e-admin-token-0123456789",
			"dev-admin-token-not-secret",
			"whk_admin-token-0123456789", // a prefix, but no random part
			"whk_0123456789abcdef0123",   // too short a random part
		} {
			err := CheckStrength(tok)
			var weak *WeakTokenError
			require.ErrorAs(t, err, &weak, tok)
			require.Contains(t, err.Error(), HowToMakeToken)
		}
	})

	t.Run("PrefixAndSixteenRandomBytesAccepted", func(t *testing.T) {
		t.Parallel()
		for range 200 {
			b := make([]byte, 16)
			_, _ = rand.Read(b)
			require.NoError(t, CheckStrength("dsp_"+hex.EncodeToString(b)))
		}
		for _, tok := range []string{"whk_Zq81xPw0Lm3vT7yQ2nR5kJ", "dsp_live_Zq81xPw0Lm3vT7yQ2nR5kJ", "a.k-9R_2bQxW7mZ3pL0vY8tN1"} {
			require.NoError(t, CheckStrength(tok), tok)
		}
	})
}

func TestDeniedSampled(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	a, err := New(Tokens{Publisher: []string{"pub-token-0123456789abcdef012345"}}, slog.New(slog.NewTextHandler(&logs, nil)))
	require.NoError(t, err)
	clock := newFakeClock()
	a.denials.now = clock.Now
	for range 100 {
		a.Denied(t.Context(), "grpc", "/x", "unknown token", "192.0.2.1:1")
	}
	require.Equal(t, denialBurst, strings.Count(logs.String(), "call denied"), "a burst of 100: the first few only")
	clock.Add(denialWindow)
	a.Denied(t.Context(), "grpc", "/x", "unknown token", "192.0.2.1:1")
	require.Equal(t, denialBurst+1, strings.Count(logs.String(), "call denied"))
	require.Contains(t, logs.String(), "suppressed=95", "the next line counts those dropped")
}
