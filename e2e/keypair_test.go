package e2e

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// TestKeyPairSignatures: through the real binary, an endpoint created with
// the v1a scheme gets deliveries that verify with its public key alone (a
// receiver holds nothing that could forge one), and after a rotation with an
// overlap both the new and the previous public key verify.
func TestKeyPairSignatures(t *testing.T) {
	t.Parallel()
	d := start(t, options{db: dbtest.New(t)})
	rc := newReceiver(t)

	created, err := d.endpoints().CreateEndpoint(adminCtx(t), &webhooksv1.CreateEndpointRequest{
		OwnerId: "owner-k", Url: rc.URL, EventTypes: []string{"*"},
		SignatureScheme: webhooksv1.SignatureScheme_SIGNATURE_SCHEME_V1A,
	})
	require.NoError(t, err)
	require.Empty(t, created.GetSecret(), "no shared secret exists")
	first := created.GetEndpoint().GetPublicKey()
	require.True(t, strings.HasPrefix(first, "whpk_"))

	// The CLI shows the public key on get.
	cmd := exec.Command(binary, "endpoints", "get", created.GetEndpoint().GetId())
	cmd.Env = append(os.Environ(), "DISPATCHER_ADDR="+d.grpcAddr, "DISPATCHER_TOKEN="+adminToken, "DISPATCHER_OWNER=owner-k")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "public key:")
	require.Contains(t, string(out), first)

	publish(t, d, newEvent("owner-k", "code.issued", "code://k1", `{"code_id":"k1"}`))
	waitFor(t, 30*time.Second, "the first delivery", func() bool { return len(rc.requests()) == 1 })
	oldKey, err := webhook.NewVerifier(first)
	require.NoError(t, err)
	got := rc.requests()[0]
	require.True(t, strings.HasPrefix(got.header.Get("webhook-signature"), "v1a,"))
	require.NoError(t, oldKey.Verify(got.header, got.body))

	rot, err := d.endpoints().RotateSecret(adminCtx(t), &webhooksv1.RotateSecretRequest{
		OwnerId: "owner-k", EndpointId: created.GetEndpoint().GetId(), GracePeriod: durationpb.New(time.Hour),
	})
	require.NoError(t, err)
	newKey, err := webhook.NewVerifier(rot.GetPublicKey())
	require.NoError(t, err)

	publish(t, d, newEvent("owner-k", "code.revoked", "code://k1", `{"code_id":"k1"}`))
	waitFor(t, 30*time.Second, "the second delivery", func() bool { return len(rc.requests()) == 2 })
	got = rc.requests()[1]
	require.NoError(t, newKey.Verify(got.header, got.body))
	require.NoError(t, oldKey.Verify(got.header, got.body), "the previous key signs through the overlap")
	require.ErrorIs(t, newKey.Verify(rc.requests()[0].header, rc.requests()[0].body), webhook.ErrNoMatchingSignature)
}
