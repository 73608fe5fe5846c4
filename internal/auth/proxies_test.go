package auth

import (
	"net/http"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestProxies(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		proxies Proxies
	}
	setup := func(t *testing.T, list string) *testBundle {
		t.Helper()
		p, err := ParseProxies(list)
		require.NoError(t, err)
		return &testBundle{proxies: p}
	}
	headers := func(kv ...string) func(string) []string {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h.Values
	}

	t.Run("Parse", func(t *testing.T) {
		t.Parallel()
		b := setup(t, " 10.0.0.0/8, 192.0.2.7 ,2001:db8::/32,::ffff:198.51.100.0/120")
		require.Equal(t, "10.0.0.0/8,192.0.2.7/32,2001:db8::/32,198.51.100.0/24", b.proxies.String())
		require.True(t, b.proxies.Trusted(netip.MustParseAddr("::ffff:10.1.2.3")))
		require.False(t, b.proxies.Trusted(netip.MustParseAddr("192.0.2.8")))
		require.Zero(t, setup(t, "").proxies.Len())
		for _, bad := range []string{"10.0.0.0/33", "proxy.example.com", "10.0.0/8"} {
			_, err := ParseProxies(bad)
			require.Error(t, err, bad)
		}
	})

	t.Run("UntrustedPeerIsTheClient", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "10.0.0.0/8")
		require.Equal(t, "203.0.113.5:4000", b.proxies.ClientAddr("203.0.113.5:4000", headers("X-Forwarded-For", "198.51.100.1")))
		require.Equal(t, "203.0.113.5:4000", setup(t, "").proxies.ClientAddr("203.0.113.5:4000", headers("X-Forwarded-For", "198.51.100.1")))
	})

	t.Run("RightmostUntrustedHop", func(t *testing.T) {
		t.Parallel()
		b := setup(t, "10.0.0.0/8")
		for name, tc := range map[string]struct {
			h    func(string) []string
			want string
		}{
			"OneHop":             {headers("X-Forwarded-For", "203.0.113.9"), "203.0.113.9"},
			"ForgedLeftHops":     {headers("X-Forwarded-For", "1.2.3.4, 5.6.7.8, 203.0.113.9"), "203.0.113.9"},
			"ThroughTwoProxies":  {headers("X-Forwarded-For", "1.2.3.4, 203.0.113.9, 10.0.0.2"), "203.0.113.9"},
			"SeveralLines":       {headers("X-Forwarded-For", "1.2.3.4", "X-Forwarded-For", "203.0.113.9"), "203.0.113.9"},
			"WithPort":           {headers("X-Forwarded-For", "203.0.113.9:5555"), "203.0.113.9"},
			"IPv6":               {headers("X-Forwarded-For", "[2001:db8::1]:5555"), "2001:db8::1"},
			"Forwarded":          {headers("Forwarded", `for=1.2.3.4, for="[2001:db8::1]:80";proto=https`), "2001:db8::1"},
			"XFFBeforeForwarded": {headers("Forwarded", "for=1.2.3.4", "X-Forwarded-For", "203.0.113.9"), "203.0.113.9"},
			"UnknownHop":         {headers("X-Forwarded-For", "203.0.113.9, unknown, 10.0.0.2"), "10.0.0.2"},
			"AllTrusted":         {headers("X-Forwarded-For", "10.0.0.3, 10.0.0.2"), "10.0.0.3"},
			"NoHeader":           {headers(), "10.0.0.1"},
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				require.Equal(t, tc.want, b.proxies.ClientAddr("10.0.0.1:443", tc.h))
			})
		}
	})
}
