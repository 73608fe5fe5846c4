package main

import (
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/auth"
	"github.com/standmeet/webhook-dispatcher/internal/egress"
	"github.com/standmeet/webhook-dispatcher/internal/ingest"
)

func TestParseServeConfig(t *testing.T) {
	t.Parallel()

	const key = "1:AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="

	type testBundle struct{ env map[string]string }
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		return &testBundle{env: map[string]string{"DISPATCHER_MASTER_KEYS": key}}
	}
	parse := func(b *testBundle, args ...string) (*serveConfig, error) {
		return parseServeConfig(args, newEnviron(func(k string) (string, bool) {
			v, ok := b.env[k]
			return v, ok
		}), io.Discard)
	}

	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		c, err := parse(setup(t))
		require.NoError(t, err)
		require.Equal(t, DefaultDatabaseURL, c.DB.URL)
		require.Equal(t, "dispatcher", c.DB.Schema)
		require.Equal(t, "127.0.0.1:7070", c.GRPCAddr)
		require.Equal(t, 200, c.DeliverWorkers)
		require.Equal(t, ingest.DefaultGroupInFlight, c.IngestTxs)
		require.Equal(t, 30*24*time.Hour, c.Retention)
		require.Empty(t, c.EgressAllowCIDRs, "no loopback receivers unless configured")
		require.Empty(t, c.OutboxURL)
		require.Equal(t, "webhook_outbox", c.OutboxTable)
		require.Equal(t, 5*24*time.Hour, c.DisableAfter)
		require.Empty(t, c.OperationalOwner, "no operational events unless configured")
		require.Equal(t, ingest.UnknownTypesRefuse, c.UnknownTypes, "a type in no catalog is refused, not silently dropped")
	})

	t.Run("ConnectionAndRequestLimits", func(t *testing.T) {
		t.Parallel()
		c, err := parse(setup(t))
		require.NoError(t, err)
		require.Equal(t, 1000, c.APIMaxConns)
		require.Equal(t, 100, c.GRPCMaxStreams)
		require.Equal(t, 5*time.Minute, c.APIIdleTimeout)
		require.Equal(t, 30*time.Minute, c.GRPCMaxConnAge)
		require.Equal(t, 4<<20, c.APIMaxBatchBytes)
		require.Equal(t, 64<<10, c.APIMaxRequestBytes)
		require.Equal(t, int64(64<<20), c.APIReadBudget)
		require.Equal(t, 30*time.Second, c.OpsReadTimeout)
		require.Equal(t, 2*time.Minute, c.OpsIdleTimeout)
		require.Equal(t, 64<<10, c.OpsMaxHeaderBytes)
		require.Equal(t, time.Second, c.HealthzCache)
		require.Equal(t, 10, c.AuthFailures)
		require.Equal(t, time.Minute, c.AuthFailuresPer)
		require.False(t, c.CookieSecure)
		require.Equal(t, 64, c.APIMaxConnsPerAddr)
		require.Equal(t, 256, c.OpsMaxConns)
		require.Equal(t, 16, c.OpsMaxConnsPerAddr)
		require.Equal(t, 10*time.Second, c.UnauthenticatedTimeout)

		b := setup(t)
		b.env["DISPATCHER_API_MAX_CONNECTIONS"] = "50"
		b.env["DISPATCHER_GRPC_MAX_CONCURRENT_STREAMS"] = "8"
		b.env["DISPATCHER_HEALTHZ_CACHE"] = "0s"
		b.env["DISPATCHER_COOKIE_SECURE"] = "true"
		c, err = parse(b, "--api-read-budget-bytes", "8388608")
		require.NoError(t, err)
		require.Equal(t, 50, c.APIMaxConns)
		require.Equal(t, 8, c.GRPCMaxStreams)
		require.Zero(t, c.HealthzCache)
		require.True(t, c.CookieSecure)
		require.Equal(t, int64(8<<20), c.APIReadBudget)
		require.Len(t, c.grpcConnOptions(), 4, "streams, keepalive, its enforcement, stream workers")
		require.Equal(t, 50, c.APIMaxConnsPerAddr, "a per-address cap left at its default follows a smaller port cap")

		b = setup(t)
		b.env["DISPATCHER_API_MAX_CONNECTIONS_PER_ADDRESS"] = "5"
		b.env["DISPATCHER_OPS_MAX_CONNECTIONS"] = "20"
		b.env["DISPATCHER_UNAUTHENTICATED_TIMEOUT"] = "3s"
		c, err = parse(b, "--ops-max-connections-per-address", "4")
		require.NoError(t, err)
		require.Equal(t, 5, c.APIMaxConnsPerAddr)
		require.Equal(t, 20, c.OpsMaxConns)
		require.Equal(t, 4, c.OpsMaxConnsPerAddr)
		require.Equal(t, 3*time.Second, c.UnauthenticatedTimeout)

		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"--api-max-connections", "0"}, "-api-max-connections (DISPATCHER_API_MAX_CONNECTIONS) 0"},
			{[]string{"--grpc-max-concurrent-streams", "0"}, "-grpc-max-concurrent-streams"},
			{[]string{"--api-read-budget-bytes", "2000000"}, "want at least the largest request"},
			{[]string{"--api-max-request-bytes", "10"}, "-api-max-request-bytes"},
			{[]string{"--ops-read-timeout", "0s"}, "-ops-read-timeout"},
			{[]string{"--api-idle-timeout", "1ms"}, "-api-idle-timeout"},
			{[]string{"--auth-failures", "0"}, "-auth-failures (DISPATCHER_AUTH_FAILURES)"},
			{[]string{"--api-max-connections-per-address", "0"}, "-api-max-connections-per-address (DISPATCHER_API_MAX_CONNECTIONS_PER_ADDRESS) 0: want 1..1000"},
			{[]string{"--api-max-connections", "10", "--api-max-connections-per-address", "11"}, "-api-max-connections-per-address (DISPATCHER_API_MAX_CONNECTIONS_PER_ADDRESS) 11: want 1..10"},
			{[]string{"--ops-max-connections", "0"}, "-ops-max-connections (DISPATCHER_OPS_MAX_CONNECTIONS) 0"},
			{[]string{"--ops-max-connections-per-address", "300"}, "-ops-max-connections-per-address (DISPATCHER_OPS_MAX_CONNECTIONS_PER_ADDRESS) 300: want 1..256"},
			{[]string{"--unauthenticated-timeout", "0s"}, "-unauthenticated-timeout (DISPATCHER_UNAUTHENTICATED_TIMEOUT)"},
		} {
			_, err := parse(setup(t), tc.args...)
			require.ErrorContains(t, err, tc.want, "%v", tc.args)
		}
	})

	t.Run("UnknownTypes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.env["DISPATCHER_UNKNOWN_TYPES"] = "accept"
		c, err := parse(b)
		require.NoError(t, err)
		require.Equal(t, ingest.UnknownTypesAccept, c.UnknownTypes)
		c, err = parse(b, "--unknown-types", "refuse")
		require.NoError(t, err)
		require.Equal(t, ingest.UnknownTypesRefuse, c.UnknownTypes, "the flag wins")
		_, err = parse(setup(t), "--unknown-types", "drop")
		require.ErrorContains(t, err, `invalid -unknown-types "drop": want accept or refuse`)
	})

	t.Run("Retention", func(t *testing.T) {
		t.Parallel()
		c, err := parse(setup(t), "--retention", "5m")
		require.NoError(t, err, "minutes: short enough for a test or a soak")
		require.Equal(t, 5*time.Minute, c.Retention)

		_, err = parse(setup(t), "--retention", "4m59s")
		require.ErrorContains(t, err, "invalid -retention 4m59s: want at least 5m0s (5m0s, and twice -rescue-stuck-after)")
		require.ErrorContains(t, err, "a publisher's retry or a fanout re-run after a crash that comes later would deliver it again", "it says why")
		_, err = parse(setup(t), "--rescue-stuck-after", "10m", "--retention", "15m")
		require.ErrorContains(t, err, "invalid -retention 15m0s: want at least 20m0s", "a fanout re-run comes after -rescue-stuck-after")
	})

	t.Run("OperationalEvents", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.env["DISPATCHER_OPERATIONAL_EVENTS_OWNER"] = "ops-team"
		b.env["DISPATCHER_DISABLE_AFTER"] = "48h"
		c, err := parse(b)
		require.NoError(t, err)
		require.Equal(t, "ops-team", c.OperationalOwner)
		require.Equal(t, 48*time.Hour, c.DisableAfter)

		_, err = parse(setup(t), "--operational-events-owner", "ops team")
		require.ErrorContains(t, err, `invalid -operational-events-owner "ops team": must be printable ASCII without spaces`)
		_, err = parse(setup(t), "--disable-after", "0s")
		require.ErrorContains(t, err, "invalid -disable-after 0s")
		_, err = parse(setup(t), "--disable-after", "1000h")
		require.ErrorContains(t, err, "want 1s..720h")
	})

	t.Run("PortalBranding", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.env["DISPATCHER_PORTAL_PRODUCT_NAME"] = "Acme Webhooks"
		b.env["DISPATCHER_PORTAL_ACCENT_COLOR"] = "#0e9f6e"
		b.env["DISPATCHER_PORTAL_LOGO"] = "/etc/dispatcher/logo.svg"
		b.env["DISPATCHER_PORTAL_RETURN_URL"] = "https://app.example.com/"
		c, err := parse(b)
		require.NoError(t, err)
		require.Equal(t, "Acme Webhooks", c.PortalProductName)
		require.Equal(t, "#0e9f6e", c.PortalAccentColor)
		require.Equal(t, "/etc/dispatcher/logo.svg", c.PortalLogo)
		require.Equal(t, "https://app.example.com/", c.PortalReturnURL)

		_, err = parse(setup(t), "--portal-accent-color", "green")
		require.ErrorContains(t, err, "invalid -portal-accent-color (DISPATCHER_PORTAL_ACCENT_COLOR): accent_color must be a colour as #rrggbb")
		_, err = parse(setup(t), "--portal-product-name", strings.Repeat("x", 61))
		require.ErrorContains(t, err, "invalid -portal-product-name (DISPATCHER_PORTAL_PRODUCT_NAME): product_name must be at most 60 bytes")
		_, err = parse(setup(t), "--portal-return-url", "javascript:alert(1)")
		require.ErrorContains(t, err, `invalid -portal-return-url (DISPATCHER_PORTAL_RETURN_URL) "javascript:alert(1)": must be an absolute http(s) URL`)
	})

	t.Run("OutboxTableNamesTheFlag", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.env["DISPATCHER_OUTBOX_TABLE"] = "app.outbox"
		c, err := parse(b)
		require.NoError(t, err)
		require.Equal(t, "app.outbox", c.OutboxTable)
		_, err = parse(setup(t), "--outbox-table", "app.out-box")
		require.ErrorContains(t, err, "-outbox-table")
	})

	t.Run("EnvironmentAndFlags", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.env["DATABASE_URL"] = "postgres://db.internal/app"
		b.env["DISPATCHER_DELIVER_WORKERS"] = "50"
		b.env["DISPATCHER_EGRESS_ALLOW_CIDRS"] = "127.0.0.1/8, ::1/128"
		c, err := parse(b, "--deliver-workers", "70", "--schema", "hooks")
		require.NoError(t, err)
		require.Equal(t, "postgres://db.internal/app", c.DB.URL)
		require.Equal(t, 70, c.DeliverWorkers, "a flag beats the environment")
		require.Equal(t, "hooks", c.DB.Schema)
		require.Equal(t, []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}, c.EgressAllowCIDRs)
	})

	t.Run("EgressProxy", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		creds := filepath.Join(t.TempDir(), "proxy-credentials")
		require.NoError(t, os.WriteFile(creds, []byte("relay:secret\n"), 0o600))
		b.env["DISPATCHER_EGRESS_PROXY"] = "http://proxy.internal:3128"
		b.env["DISPATCHER_EGRESS_PROXY_CREDENTIALS_FILE"] = creds
		c, err := parse(b)
		require.NoError(t, err)
		require.Equal(t, &egress.Proxy{Addr: "proxy.internal:3128", Username: "relay", Password: "secret"}, c.EgressProxy)

		_, err = parse(setup(t), "--egress-proxy", "http://relay:secret@proxy.internal:3128")
		require.ErrorContains(t, err, "invalid -egress-proxy: credentials do not belong in the URL")
		require.NotContains(t, err.Error(), "secret")
	})

	t.Run("MalformedEnvironmentNamesTheVariable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.env["DISPATCHER_DELIVER_WORKERS"] = "many"
		b.env["DISPATCHER_SHUTDOWN_TIMEOUT"] = "soon"
		_, err := parse(b)
		require.ErrorContains(t, err, "DISPATCHER_DELIVER_WORKERS")
		require.ErrorContains(t, err, "DISPATCHER_SHUTDOWN_TIMEOUT")
	})

	t.Run("HandoffLimit", func(t *testing.T) {
		t.Parallel()
		c, err := parse(setup(t))
		require.NoError(t, err)
		require.Equal(t, DefaultHandoffLimit, c.HandoffLimit, "a burst's worth, not the deliver workers' 200")
		require.Equal(t, 200, c.DeliverWorkers, "a separate setting")
		b := setup(t)
		b.env["DISPATCHER_HANDOFF_LIMIT"] = "500"
		c, err = parse(b)
		require.NoError(t, err)
		require.Equal(t, 500, c.HandoffLimit)
		for _, bad := range []string{"0", "-1", "20001"} {
			_, err = parse(setup(t), "--handoff-limit", bad)
			require.ErrorContains(t, err, "invalid -handoff-limit "+bad+" (DISPATCHER_HANDOFF_LIMIT)")
		}
		b.env["DISPATCHER_HANDOFF_LIMIT"] = "lots"
		_, err = parse(b)
		require.ErrorContains(t, err, "DISPATCHER_HANDOFF_LIMIT")
	})

	t.Run("IngestLinger", func(t *testing.T) {
		t.Parallel()
		c, err := parse(setup(t))
		require.NoError(t, err)
		require.Zero(t, c.IngestLinger, "no wait by default: no latency traded below saturation")
		b := setup(t)
		b.env["DISPATCHER_INGEST_LINGER"] = "5ms"
		c, err = parse(b)
		require.NoError(t, err)
		require.Equal(t, 5*time.Millisecond, c.IngestLinger)
		for _, bad := range []string{"-1ms", "101ms"} {
			_, err = parse(setup(t), "--ingest-linger", bad)
			require.ErrorContains(t, err, "invalid -ingest-linger "+bad+" (DISPATCHER_INGEST_LINGER)")
		}
	})

	t.Run("HandoffMemory", func(t *testing.T) {
		t.Parallel()
		c, err := parse(setup(t))
		require.NoError(t, err)
		require.Equal(t, 16, c.HandoffMemoryMB)
		b := setup(t)
		b.env["DISPATCHER_HANDOFF_MEMORY_MB"] = "64"
		c, err = parse(b)
		require.NoError(t, err)
		require.Equal(t, 64, c.HandoffMemoryMB)
		for _, bad := range []string{"0", "-1", "4097"} {
			_, err = parse(setup(t), "--handoff-memory-mb", bad)
			require.ErrorContains(t, err, "invalid -handoff-memory-mb "+bad+" (DISPATCHER_HANDOFF_MEMORY_MB)")
		}
	})

	t.Run("AttemptBodyBytes", func(t *testing.T) {
		t.Parallel()
		c, err := parse(setup(t))
		require.NoError(t, err)
		require.Equal(t, 1024, c.AttemptBodyBytes, "the first KiB by default")
		b := setup(t)
		b.env["DISPATCHER_ATTEMPT_BODY_BYTES"] = "0"
		c, err = parse(b)
		require.NoError(t, err)
		require.Zero(t, c.AttemptBodyBytes, "0 turns bodies off")
		_, err = parse(setup(t), "--attempt-body-bytes", "4096")
		require.ErrorContains(t, err, "-attempt-body-bytes")
		_, err = parse(setup(t), "--attempt-body-bytes", "-1")
		require.ErrorContains(t, err, "-attempt-body-bytes")
		b.env["DISPATCHER_ATTEMPT_BODY_BYTES"] = "lots"
		_, err = parse(b)
		require.ErrorContains(t, err, "DISPATCHER_ATTEMPT_BODY_BYTES")
	})

	t.Run("Tracing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		c, err := parse(b)
		require.NoError(t, err)
		require.False(t, c.Tracing.Enabled, "off by default")

		b.env["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://collector:4318"
		c, err = parse(b)
		require.NoError(t, err)
		require.True(t, c.Tracing.Enabled)

		b.env["OTEL_TRACES_SAMPLER"] = "sometimes"
		_, err = parse(b)
		require.ErrorContains(t, err, "OTEL_TRACES_SAMPLER")
	})

	t.Run("MissingMasterKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		delete(b.env, "DISPATCHER_MASTER_KEYS")
		_, err := parse(b)
		require.ErrorContains(t, err, "DISPATCHER_MASTER_KEYS")
		require.ErrorContains(t, err, "gen-master-key")
	})

	t.Run("MasterKeyIsNeverAFlag", func(t *testing.T) {
		t.Parallel()
		_, err := parse(setup(t), "--master-keys", key)
		require.Error(t, err)
	})

	t.Run("TokensPerRole", func(t *testing.T) {
		t.Parallel()
		const (
			pub   = "publisher-token-0123456789abcdef0123"
			admin = "admin-token-0123456789abcdef0123"
			op    = "operator-token-0123456789abcdef0123"
		)
		b := setup(t)
		b.env["DISPATCHER_PUBLISHER_TOKENS"] = pub
		b.env["DISPATCHER_ADMIN_TOKENS"] = admin
		opFile := filepath.Join(t.TempDir(), "operator-tokens")
		require.NoError(t, os.WriteFile(opFile, []byte(op+"\n"), 0o600))
		c, err := parse(b, "--operator-token-file", opFile)
		require.NoError(t, err)
		a, err := c.authenticator(nil)
		require.NoError(t, err)
		require.Equal(t, auth.RoleOperator, a.RoleOf(op))
		require.Equal(t, auth.RoleAdmin, a.RoleOf(admin))
		require.Equal(t, auth.RolePublisher, a.RoleOf(pub))

		// The admin UI's token reused as River UI's: refused, naming both places.
		b.env["DISPATCHER_OPERATOR_TOKENS"] = admin
		c, err = parse(b)
		require.NoError(t, err)
		_, err = c.authenticator(nil)
		require.ErrorContains(t, err, "invalid DISPATCHER_OPERATOR_TOKENS/-operator-token-file")
		require.ErrorContains(t, err, "DISPATCHER_ADMIN_TOKENS")
		require.NotContains(t, err.Error(), admin)

		b.env["DISPATCHER_OPERATOR_TOKENS"] = "short"
		c, err = parse(b)
		require.NoError(t, err)
		_, err = c.authenticator(nil)
		require.ErrorContains(t, err, "DISPATCHER_OPERATOR_TOKENS")

		c, err = parse(setup(t))
		require.NoError(t, err)
		_, err = c.authenticator(nil)
		require.ErrorIs(t, err, auth.ErrNoTokens)
		require.ErrorContains(t, err, "DISPATCHER_PUBLISHER_TOKENS")
	})

	t.Run("BadValues", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"--deliver-workers", "0"},
			{"--fanout-workers", "10001"},
			{"--ingest-transactions", "0"},
			{"--ingest-transactions", "1001"},
			{"--outbox-batch", "0"},
			{"--retention", "1m"},
			{"--log-format", "xml"},
			{"--log-level", "loud"},
			{"--egress-allow-cidrs", "10.0.0.0/33"},
			{"--egress-proxy", "https://proxy:3128"},
			{"--egress-proxy-credentials-file", "creds"},
			{"--grpc-tls-cert", "cert.pem"},
			{"--grpc-tls-client-ca", "ca.pem"},
			{"--ops-tls-cert", "cert.pem"},
			{"--ops-tls-key", "key.pem"},
			{"--schema", "bad-name"},
			{"--outbox-table", "outbox; DROP TABLE x"},
			{"stray"},
		} {
			_, err := parse(setup(t), args...)
			require.Error(t, err, "%v", args)
		}
	})
}
