package endpoint

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/egress"
)

func TestValidator(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		val *validator
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{val: &validator{}}
	}

	fields := func(v violations) []string {
		var out []string
		for _, x := range v {
			out = append(out, x.Field)
		}
		return out
	}

	t.Run("DescriptionInvalidUTF8", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var v violations
		b.val.description(&v, "a\xffb")
		require.Equal(t, []string{"description"}, fields(v))
	})

	t.Run("DescriptionAllowsLineBreaks", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var v violations
		b.val.description(&v, "line one\nline two\ttabbed")
		require.Empty(t, v)
	})

	t.Run("URLInvalidUTF8", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		require.NotEmpty(t, b.val.urlProblem("https://example.com/\xff"))
	})

	t.Run("URLProblemsNeverEchoInput", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, raw := range []string{"https://sekrit@example.com/", "https://example.com/%zz", "ftp://sekrit/", "https://10.0.0.1/sekrit"} {
			p := b.val.urlProblem(raw)
			require.NotEmpty(t, p, raw)
			require.NotContains(t, p, "sekrit")
			require.NotContains(t, p, raw)
		}
	})

	t.Run("URLNumericHostSpellings", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, raw := range []string{
			"http://2130706433/", "http://0x7f000001/", "http://0X7F000001/", "http://017700000001/", "http://127.1/",
			"http://127.0.1/", "http://127.0.0.01/", "http://0x7f.1/", "http://127.0.0.1./", "https://134744072/",
			"https://0x08080808/", "https://8.8.8.8./", "https://1.2.3.4.5/", "https://v1.example.123/", "https://a.0x/",
		} {
			// One fixed sentence: it never echoes the URL.
			require.Equal(t, b.val.urlProblem("http://2130706433/"), b.val.urlProblem(raw), raw)
			require.Contains(t, b.val.urlProblem(raw), "numeric address spelling", raw)
		}
		// Names that merely contain digits or hex letters are names.
		for _, raw := range []string{
			"https://8.8.8.8/", "https://[2606:4700::1111]/", "https://cafe.beef/", "https://0xdead.com/",
			"https://123.example.com/", "https://example.com1/", "https://1e100.net/", "https://x.0xg/",
		} {
			require.Empty(t, b.val.urlProblem(raw), raw)
		}
	})

	t.Run("AllowCIDRsFollowEgressPolicy", func(t *testing.T) {
		t.Parallel()
		val := &validator{policy: egress.Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("::1/128")}}}
		require.Empty(t, val.urlProblem("http://[::1]:8080/"))
		require.Empty(t, val.urlProblem("http://localhost:8080/"), "localhost resolves to an allowed loopback")
		require.NotEmpty(t, val.urlProblem("http://127.0.0.1:8080/"))
	})

	t.Run("OwnerIDBoundary", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var v violations
		b.val.ownerID(&v, strings.Repeat("o", 128))
		b.val.ownerID(&v, "tenant:42/eu")
		require.Empty(t, v)
	})

	t.Run("ValidationErrorMessage", func(t *testing.T) {
		t.Parallel()
		v := violations{{Field: "url", Description: "bad"}, {Field: "event_types[1]", Description: "worse"}}
		err := v.err()
		require.ErrorIs(t, err, ErrInvalid)
		require.Equal(t, "invalid url: bad; event_types[1]: worse", err.Error())
	})
}
