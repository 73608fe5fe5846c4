package e2e

import (
	"context"
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// TestSecretsNeverLeak runs a full create → deliver → rotate → deliver cycle
// and then scans everything the dispatcher writes or exposes — its logs, its
// metrics, River's job rows, the events table and the endpoint row — for the
// endpoint secrets (in any encoding) and the master key.
func TestSecretsNeverLeak(t *testing.T) {
	t.Parallel()

	ctx := context.Background()
	db := dbtest.NewEmpty(t)
	mk := masterKey(t)
	d := start(t, options{db: db, masterKey: mk, args: []string{"--migrate"}})
	rc := newReceiver(t)

	created := createEndpoint(t, d, "owner-s", rc.URL, "*")
	publish(t, d, newEvent("owner-s", "code.issued", "code://1", `{}`))
	waitFor(t, 30*time.Second, "the first delivery", func() bool { return len(rc.requests()) == 1 })

	rotated, err := d.endpoints().RotateSecret(adminCtx(t), &webhooksv1.RotateSecretRequest{
		OwnerId: "owner-s", EndpointId: created.GetEndpoint().GetId(), GracePeriod: durationpb.New(time.Hour),
	})
	require.NoError(t, err)
	publish(t, d, newEvent("owner-s", "code.revoked", "code://1", `{}`))
	waitFor(t, 30*time.Second, "the second delivery", func() bool { return len(rc.requests()) == 2 })
	// A failing attempt too, so error paths are covered.
	rc.setHandler(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	publish(t, d, newEvent("owner-s", "code.redeemed", "code://1", `{}`))
	waitFor(t, 30*time.Second, "the failing delivery", func() bool { return len(rc.requests()) == 3 })

	// The last delivery during the grace period verifies with either secret.
	last := rc.requests()[1]
	for _, s := range []string{created.GetSecret(), rotated.GetSecret()} {
		v, err := webhook.NewVerifier(s)
		require.NoError(t, err)
		require.NoError(t, v.Verify(last.header, last.body))
	}

	var needles []string
	for _, s := range []string{created.GetSecret(), rotated.GetSecret()} {
		key, err := webhook.ParseSecret(s)
		require.NoError(t, err)
		needles = append(needles, s, strings.TrimPrefix(s, "whsec_"),
			base64.RawStdEncoding.EncodeToString(key), base64.URLEncoding.EncodeToString(key), hexString(key))
	}
	_, mkB64, _ := strings.Cut(mk, ":")
	needles = append(needles, mkB64)

	// River records the failed attempt's error asynchronously.
	waitFor(t, 30*time.Second, "the recorded error", func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE errors::text LIKE '%HTTP 500%'`).Scan(&n))
		return n == 1
	})
	_, metricsBody := d.get(t, "/metrics")
	var jobs, events, endpoints string
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT coalesce(string_agg(args::text || errors::text || metadata::text, ' '), '') FROM river_job`).Scan(&jobs))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT coalesce(string_agg(e::text, ' '), '') FROM events e`).Scan(&events))
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT coalesce(string_agg(w::text, ' '), '') FROM webhook_endpoints w`).Scan(&endpoints))
	require.Contains(t, jobs, "HTTP 500", "the scan sees the error texts")

	haystacks := map[string]string{"logs": d.logs.String(), "metrics": metricsBody, "river jobs": jobs, "events": events, "endpoint row": endpoints}
	for where, hay := range haystacks {
		require.NotEmpty(t, hay, where)
		for _, n := range needles {
			require.NotContains(t, hay, n, "a secret leaked into %s", where)
		}
	}
}

func hexString(b []byte) string {
	const digits = "0123456789abcdef"
	out := make([]byte, 0, len(b)*2)
	for _, c := range b {
		out = append(out, digits[c>>4], digits[c&0x0f])
	}
	return string(out)
}

// TestPlaintextCredentialsWarned: a dispatcher configured to send the
// access service token without TLS, and proxy credentials to a proxy, both
// to addresses off the host, says so at start-up (a warning for each,
// naming the address, never the credential); on loopback it says nothing.
func TestPlaintextCredentialsWarned(t *testing.T) {
	t.Parallel()
	const (
		token    = "e2e-access-token-plaintext-0123"
		password = "e2e-proxy-password-0123"
	)
	creds := filepath.Join(t.TempDir(), "proxy-credentials")
	require.NoError(t, os.WriteFile(creds, []byte("dispatcher:"+password+"\n"), 0o600))
	warned := func(d *dispatcher) string {
		var line string // start returned: the process serves, so start-up is logged
		for l := range strings.Lines(d.logs.String()) {
			if strings.Contains(l, "credentials go over plaintext") {
				line += l
			}
		}
		require.NotContains(t, d.logs.String(), token)
		require.NotContains(t, d.logs.String(), password)
		return line
	}

	t.Run("OffTheHost", func(t *testing.T) {
		t.Parallel()
		// TEST-NET addresses: nothing is dialled at start-up.
		d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}, env: []string{
			"DISPATCHER_ACCESS_ADDR=192.0.2.1:9000", "DISPATCHER_ACCESS_TOKEN=" + token,
			"DISPATCHER_EGRESS_PROXY=http://192.0.2.2:3128", "DISPATCHER_EGRESS_PROXY_CREDENTIALS_FILE=" + creds,
		}})
		lines := warned(d)
		require.Contains(t, lines, "access service token")
		require.Contains(t, lines, "192.0.2.1:9000")
		require.Contains(t, lines, "egress proxy credentials")
		require.Contains(t, lines, "192.0.2.2:3128")
		require.Contains(t, lines, `"level":"WARN"`)
	})

	t.Run("Loopback", func(t *testing.T) {
		t.Parallel()
		d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}, env: []string{
			"DISPATCHER_ACCESS_ADDR=127.0.0.1:9", "DISPATCHER_ACCESS_TOKEN=" + token,
			"DISPATCHER_EGRESS_PROXY=http://127.0.0.1:3128", "DISPATCHER_EGRESS_PROXY_CREDENTIALS_FILE=" + creds,
		}})
		require.Empty(t, warned(d))
	})
}

// TestSecretsFromFiles: the layout the Helm chart and the overlays mount
// (the master keys and every role's tokens as files, named by the *_FILE
// variables, nothing of them in the environment) runs the dispatcher: an
// endpoint created with the second admin token of a comma-separated file
// (a Secret key written for the variable), an event published with the
// file's publisher token, delivered signed with a secret sealed under the
// file's master key.
func TestSecretsFromFiles(t *testing.T) {
	t.Parallel()
	const (
		admin2    = "e2e-admin-token-from-file-2-0123"
		publisher = "e2e-publisher-token-from-file-0123"
	)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o400))
		return p
	}
	d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}, env: []string{
		// The harness's variables, emptied: only the files count.
		"DISPATCHER_MASTER_KEYS=", "DISPATCHER_ADMIN_TOKENS=", "DISPATCHER_PUBLISHER_TOKENS=", "DISPATCHER_OPERATOR_TOKENS=",
		"DISPATCHER_MASTER_KEYS_FILE=" + write("master-keys", masterKey(t)+"\n"),
		"DISPATCHER_ADMIN_TOKEN_FILE=" + write("admin-tokens", "e2e-admin-token-from-file-1-0123,"+admin2),
		"DISPATCHER_PUBLISHER_TOKEN_FILE=" + write("publisher-tokens", publisher+"\n"),
	}})
	rc := newReceiver(t)
	ctx, cancel := context.WithTimeout(withToken(context.Background(), admin2), 30*time.Second)
	defer cancel()
	created, err := d.endpoints().CreateEndpoint(ctx, &webhooksv1.CreateEndpointRequest{
		OwnerId: "files-owner", Url: rc.URL, EventTypes: []string{"code.*"},
	})
	require.NoError(t, err)

	// The environment's tokens are gone: the harness's admin token is refused.
	_, err = d.endpoints().ListEndpoints(adminCtx(t), &webhooksv1.ListEndpointsRequest{OwnerId: "files-owner"})
	require.Error(t, err)

	e := newEvent("files-owner", "code.issued", "code://files/1", `{}`)
	pctx, pcancel := context.WithTimeout(withToken(context.Background(), publisher), 30*time.Second)
	defer pcancel()
	_, err = d.events().Publish(pctx, &webhooksv1.PublishRequest{Event: e})
	require.NoError(t, err)
	waitFor(t, 30*time.Second, "the delivery", func() bool { return len(rc.requests()) > 0 })
	got := rc.requests()[0]
	wh, err := webhook.NewVerifier(created.GetSecret())
	require.NoError(t, err)
	require.NoError(t, wh.Verify(got.header, got.body), "signed with the secret sealed under the file's master key")
}
