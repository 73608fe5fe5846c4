package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/egress"
)

func TestPlaintextCredentials(t *testing.T) {
	t.Parallel()

	proxy := func(addr, user string) *egress.Proxy {
		return &egress.Proxy{Addr: addr, Username: user, Password: "pr0xy-pw"}
	}
	for name, tc := range map[string]struct {
		cfg  serveConfig
		want []string // the addresses warned about, in order
	}{
		"AccessTokenOffHost": {
			cfg:  serveConfig{AccessAddr: "access.internal:9000", AccessToken: "s3cr3t-tkn"},
			want: []string{"access.internal:9000"},
		},
		"AccessTokenOffHostGRPCTarget": {
			cfg:  serveConfig{AccessAddr: "dns:///10.0.0.5:9000", AccessToken: "s3cr3t-tkn"},
			want: []string{"dns:///10.0.0.5:9000"},
		},
		"AccessTokenOverTLS":       {cfg: serveConfig{AccessAddr: "access.internal:9000", AccessToken: "s3cr3t-tkn", AccessTLS: true}},
		"AccessWithoutToken":       {cfg: serveConfig{AccessAddr: "access.internal:9000"}},
		"AccessTokenLoopbackIPv4":  {cfg: serveConfig{AccessAddr: "127.0.0.1:9000", AccessToken: "s3cr3t-tkn"}},
		"AccessTokenLoopbackIPv6":  {cfg: serveConfig{AccessAddr: "[::1]:9000", AccessToken: "s3cr3t-tkn"}},
		"AccessTokenLocalhost":     {cfg: serveConfig{AccessAddr: "passthrough:///localhost:9000", AccessToken: "s3cr3t-tkn"}},
		"AccessTokenMappedV4Local": {cfg: serveConfig{AccessAddr: "[::ffff:127.0.0.1]:9000", AccessToken: "s3cr3t-tkn"}},
		"ProxyCredentialsOffHost": {
			cfg:  serveConfig{EgressProxy: proxy("proxy.corp:3128", "u")},
			want: []string{"proxy.corp:3128"},
		},
		"ProxyCredentialsLoopback": {cfg: serveConfig{EgressProxy: proxy("127.0.0.1:3128", "u")}},
		"ProxyWithoutCredentials":  {cfg: serveConfig{EgressProxy: proxy("proxy.corp:3128", "")}},
		"Both": {
			cfg:  serveConfig{AccessAddr: "192.0.2.1:9000", AccessToken: "s3cr3t-tkn", EgressProxy: proxy("192.0.2.2:3128", "u")},
			want: []string{"192.0.2.1:9000", "192.0.2.2:3128"},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, c := range plaintextCredentials(&tc.cfg) {
				require.NotContains(t, c.what+c.fix+c.addr, "s3cr3t-tkn", "never the credential itself")
				require.NotContains(t, c.what+c.fix+c.addr, "pr0xy-pw")
				got = append(got, c.addr)
			}
			require.Equal(t, tc.want, got)
		})
	}
}
