package e2e

import (
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	be "encoding/binary"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
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

// TestResealUpgradesFormatOne: an endpoint whose secret an earlier release
// sealed (format 1, bound to the endpoint id alone) still signs, and
// `dispatcher reseal-secrets` re-seals it in format 2 (bound to the id, the
// scheme and the column), after which it signs the same way; a second run
// has nothing to do.
func TestResealUpgradesFormatOne(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	mk := masterKey(t)
	d := start(t, options{db: db, masterKey: mk, args: []string{"--migrate"}})
	rc := newReceiver(t)
	created := createEndpoint(t, d, "reseal-owner", rc.URL, "code.*")
	id := uuid.MustParse(created.GetEndpoint().GetId())
	key, err := webhook.ParseSecret(created.GetSecret())
	require.NoError(t, err)

	format := func() byte {
		var sealed []byte
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT secret_enc FROM webhook_endpoints WHERE id = $1`, id).Scan(&sealed))
		return sealed[0]
	}
	require.Equal(t, byte(2), format(), "a new endpoint's secret is sealed in format 2")

	// The row as an earlier release wrote it.
	idText, keyB64, ok := strings.Cut(mk, ":")
	require.True(t, ok)
	keyID, err := strconv.ParseUint(idText, 10, 32)
	require.NoError(t, err)
	master, err := base64.StdEncoding.DecodeString(keyB64)
	require.NoError(t, err)
	_, err = db.Pool.Exec(context.Background(), `UPDATE webhook_endpoints SET secret_enc = $2 WHERE id = $1`,
		id, sealFormatOne(t, master, uint32(keyID), key, id[:]))
	require.NoError(t, err)
	require.Equal(t, byte(1), format())

	wh, err := webhook.NewVerifier(created.GetSecret())
	require.NoError(t, err)
	deliver := func(n int) {
		t.Helper()
		publish(t, d, newEvent("reseal-owner", "code.issued", fmt.Sprintf("code://reseal/%d", n), `{}`))
		waitFor(t, 30*time.Second, "the delivery", func() bool { return len(rc.requests()) >= n })
		got := rc.requests()[n-1]
		require.NoError(t, wh.Verify(got.header, got.body), "signed with the endpoint's secret")
	}
	deliver(1)

	reseal := func() string {
		t.Helper()
		cmd := exec.Command(binary, "reseal-secrets")
		cmd.Env = append(os.Environ(), "DATABASE_URL="+db.URL, "DISPATCHER_SCHEMA="+db.Schema, "DISPATCHER_MASTER_KEYS="+mk)
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.NotContains(t, string(out), keyB64)
		return string(out)
	}
	require.Contains(t, reseal(), "re-sealed 1 endpoint(s)")
	require.Equal(t, byte(2), format(), "upgraded")
	deliver(2)
	require.Contains(t, reseal(), "re-sealed 0 endpoint(s)")
}

// sealFormatOne seals plain as format 1 did, built from the documented
// construction (HKDF-SHA256 data key, AES-256-GCM, header 0x01 ‖ key id,
// associated data header ‖ ad) independently of internal/seal.
func sealFormatOne(t *testing.T, master []byte, keyID uint32, plain, ad []byte) []byte {
	t.Helper()
	dataKey, err := hkdf.Key(sha256.New, master, nil, "dispatcher/webhook-secret/aes-256-gcm/v1", 32)
	require.NoError(t, err)
	block, err := aes.NewCipher(dataKey)
	require.NoError(t, err)
	gcm, err := cipher.NewGCM(block)
	require.NoError(t, err)
	header := be.BigEndian.AppendUint32([]byte{0x01}, keyID)
	nonce := make([]byte, gcm.NonceSize())
	_, err = rand.Read(nonce)
	require.NoError(t, err)
	out := append(append([]byte(nil), header...), nonce...)
	return gcm.Seal(out, nonce, plain, append(append([]byte(nil), header...), ad...))
}

// TestCreateReplayShowsSecretOnlyForRandomRequestIDs: a CreateEndpoint
// retried with the same request id creates nothing twice; its reply shows
// the secret again only when the request id is a random UUID and the retry
// comes within the replay window, never for a predictable request id (one
// that may sit in a log), nor later.
func TestCreateReplayShowsSecretOnlyForRandomRequestIDs(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	d := start(t, options{db: db, args: []string{"--migrate"}})
	create := func(requestID string) *webhooksv1.CreateEndpointResponse {
		t.Helper()
		res, err := d.endpoints().CreateEndpoint(adminCtx(t), &webhooksv1.CreateEndpointRequest{
			OwnerId: "replay-owner", Url: "http://127.0.0.1:1/hooks", EventTypes: []string{"code.*"}, RequestId: requestID,
		})
		require.NoError(t, err)
		return res
	}

	random := uuid.NewString()
	first := create(random)
	again := create(random)
	require.True(t, again.GetReplayed())
	require.Equal(t, first.GetEndpoint().GetId(), again.GetEndpoint().GetId())
	require.Equal(t, first.GetSecret(), again.GetSecret(), "a random request id, retried at once: the secret again")

	_, err := db.Pool.Exec(context.Background(), `UPDATE webhook_endpoint_requests SET created_at = now() - interval '11 minutes' WHERE request_id = $1`, random)
	require.NoError(t, err)
	late := create(random)
	require.True(t, late.GetReplayed())
	require.Empty(t, late.GetSecret(), "past the replay window")

	predictable := create("create-endpoint-42")
	require.NotEmpty(t, predictable.GetSecret())
	replay := create("create-endpoint-42")
	require.True(t, replay.GetReplayed())
	require.Equal(t, predictable.GetEndpoint().GetId(), replay.GetEndpoint().GetId())
	require.Empty(t, replay.GetSecret(), "a predictable request id never replays the secret")
}

// TestGetEventListsOnlyTheOwnersDeliveries: GetEvent reads an event's
// deliveries joined on their endpoint's owner, so a delivery row of the
// event id that belongs to another owner's endpoint (the fanout never makes
// one; a row written by anything else could) is not shown.
func TestGetEventListsOnlyTheOwnersDeliveries(t *testing.T) {
	t.Parallel()
	db := dbtest.NewEmpty(t)
	d := start(t, options{db: db, args: []string{"--migrate"}})
	rc := newReceiver(t)
	own1 := createEndpoint(t, d, "event-owner-a", rc.URL, "code.*").GetEndpoint().GetId()
	own2 := createEndpoint(t, d, "event-owner-a", rc.URL, "code.*").GetEndpoint().GetId()
	foreign := createEndpoint(t, d, "event-owner-b", rc.URL, "booking.*").GetEndpoint().GetId()
	e := newEvent("event-owner-a", "code.issued", "code://owner/1", `{}`)
	publish(t, d, e)
	get := func() []*webhooksv1.Delivery {
		res, err := d.endpoints().GetEvent(adminCtx(t), &webhooksv1.GetEventRequest{OwnerId: "event-owner-a", EventId: e.GetId()})
		require.NoError(t, err)
		return res.GetDeliveries()
	}
	waitFor(t, 30*time.Second, "both deliveries", func() bool { return len(get()) == 2 })

	_, err := db.Pool.Exec(context.Background(), `
UPDATE river_job SET args = jsonb_set(args, '{endpoint_id}', to_jsonb($2::text))
 WHERE kind = 'webhook.deliver' AND args->>'event_id' = $1 AND args->>'endpoint_id' = $3`, e.GetId(), foreign, own2)
	require.NoError(t, err)
	ds := get()
	require.Len(t, ds, 1, "the row now pointing at another owner's endpoint is not this owner's")
	require.Equal(t, own1, ds[0].GetEndpointId())
}
