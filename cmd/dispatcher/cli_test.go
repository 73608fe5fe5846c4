package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/standmeet/webhook-dispatcher/internal/auth"
	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/grpcapi"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

const (
	cliTestAdminToken     = "cli-admin-token-0123456789abcdef0123"
	cliTestPublisherToken = "cli-publisher-token-0123456789abcdef0123"
)

type cliFakePublisher struct {
	mu     sync.Mutex
	events []*webhook.Event
}

func (p *cliFakePublisher) Publish(_ context.Context, e *webhook.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, e)
	return nil
}

func TestEndpointsCLI(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		addr       string
		db         *dbtest.DB
		masterSpec string
		pub        *cliFakePublisher
		tokenFile  string
		pubToken   string
	}

	setup := func(t *testing.T) *testBundle {
		t.Helper()
		db := dbtest.New(t)
		master := make([]byte, 32)
		_, err := rand.Read(master)
		require.NoError(t, err)
		spec := "1:" + base64.StdEncoding.EncodeToString(master)
		kr, err := seal.ParseKeyring(spec)
		require.NoError(t, err)
		rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Schema: db.Schema})
		require.NoError(t, err)
		pub := &cliFakePublisher{}
		svc := grpcapi.NewEndpointServer(endpoint.NewService(endpoint.ServiceConfig{}, db.Pool, rc, kr, pub, nil), nil)

		authn, err := auth.New(auth.Tokens{Publisher: []string{cliTestPublisherToken}, Admin: []string{cliTestAdminToken}}, nil)
		require.NoError(t, err)
		srv := grpc.NewServer(grpcapi.ServerOptions(authn)...)
		webhooksv1.RegisterEndpointServiceServer(srv, svc)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)

		dir := t.TempDir()
		tokenFile := filepath.Join(dir, "admin-token")
		require.NoError(t, os.WriteFile(tokenFile, []byte("# admin\n"+cliTestAdminToken+"\n"), 0o600))
		pubToken := filepath.Join(dir, "publisher-token")
		require.NoError(t, os.WriteFile(pubToken, []byte(cliTestPublisherToken+"\n"), 0o600))
		return &testBundle{addr: lis.Addr().String(), db: db, masterSpec: spec, pub: pub, tokenFile: tokenFile, pubToken: pubToken}
	}

	// run invokes a CLI function and returns what it printed.
	run := func(t *testing.T, fn func(context.Context, []string, io.Writer, io.Writer) error, args ...string) (string, error) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		err := fn(t.Context(), args, &stdout, &stderr)
		return stdout.String() + stderr.String(), err
	}
	conn := func(b *testBundle) []string {
		return []string{"--addr", b.addr, "--token-file", b.tokenFile, "--owner", "owner_cli"}
	}
	endpoints := func(t *testing.T, b *testBundle, sub string, args ...string) (string, error) {
		t.Helper()
		return run(t, runEndpointsCLI, append(append([]string{sub}, conn(b)...), args...)...)
	}

	t.Run("CreateAndListJSON", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		out, err := endpoints(t, b, "create", "--json", "--url", "https://hooks.example.com/in",
			"--event-types", "corpus.*", "--event-types", "booking.created,booking.cancelled", "--description", "from the CLI")
		require.NoError(t, err, out)
		var created webhooksv1.CreateEndpointResponse
		require.NoError(t, protojson.Unmarshal([]byte(out), &created))
		require.True(t, strings.HasPrefix(created.GetSecret(), "whsec_"))
		require.Equal(t, []string{"corpus.*", "booking.created", "booking.cancelled"}, created.GetEndpoint().GetEventTypes())
		require.Contains(t, out, `"owner_id": "owner_cli"`, "proto field names")

		out, err = endpoints(t, b, "list", "--json")
		require.NoError(t, err, out)
		var list webhooksv1.ListEndpointsResponse
		require.NoError(t, protojson.Unmarshal([]byte(out), &list))
		require.Len(t, list.GetEndpoints(), 1)
		require.Equal(t, created.GetEndpoint().GetId(), list.GetEndpoints()[0].GetId())
	})

	t.Run("KeyPairScheme", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		out, err := endpoints(t, b, "create", "--url", "https://hooks.example.com/in", "--event-types", "*", "--signature-scheme", "v1a")
		require.NoError(t, err, out)
		require.Contains(t, out, "signature scheme:")
		require.Contains(t, out, "public key:")
		require.Contains(t, out, "whpk_")
		require.NotContains(t, out, "signing secret:", "no shared secret to show")
		id := strings.Fields(strings.SplitN(out, "\n", 2)[0])[1]

		out, err = endpoints(t, b, "rotate-secret", id)
		require.NoError(t, err, out)
		require.Contains(t, out, "new public key: whpk_")
		require.Contains(t, out, "keeps signing until")

		_, err = endpoints(t, b, "create", "--url", "https://hooks.example.com/in", "--event-types", "*", "--signature-scheme", "v2")
		require.ErrorContains(t, err, "--signature-scheme")
	})

	t.Run("CustomHeadersFromFile", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		dir := t.TempDir()
		file := filepath.Join(dir, "headers")
		require.NoError(t, os.WriteFile(file, []byte("# the gateway's key\nX-Api-Key: gw-key-cli-1\n\nX-Tenant: acme\n"), 0o600))
		out, err := endpoints(t, b, "create", "--url", "https://hooks.example.com/in", "--event-types", "*", "--headers-file", file)
		require.NoError(t, err, out)
		require.Contains(t, out, "custom headers:")
		require.Contains(t, out, "X-Api-Key, X-Tenant")
		require.NotContains(t, out, "gw-key-cli-1", "values are never shown")
		id := strings.Fields(strings.SplitN(out, "\n", 2)[0])[1]

		empty := filepath.Join(dir, "none")
		require.NoError(t, os.WriteFile(empty, nil, 0o600))
		out, err = endpoints(t, b, "update", id, "--json", "--headers-file", empty)
		require.NoError(t, err, out)
		var updated webhooksv1.UpdateEndpointResponse
		require.NoError(t, protojson.Unmarshal([]byte(out), &updated))
		require.Empty(t, updated.GetEndpoint().GetHeaderNames(), "an empty file removes them")

		bad := filepath.Join(dir, "bad")
		require.NoError(t, os.WriteFile(bad, []byte("Host: evil.example\n"), 0o600))
		_, err = endpoints(t, b, "update", id, "--headers-file", bad)
		require.ErrorContains(t, err, `headers["Host"]`)
		require.NoError(t, os.WriteFile(bad, []byte("no colon here\n"), 0o600))
		_, err = endpoints(t, b, "update", id, "--headers-file", bad)
		require.ErrorContains(t, err, "line 1")
	})

	t.Run("EveryCommandHumanReadable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		out, err := endpoints(t, b, "create", "--url", "https://hooks.example.com/in", "--event-types", "*")
		require.NoError(t, err, out)
		require.Contains(t, out, "signing secret: whsec_")
		require.Contains(t, out, "shown only this once")

		out, err = endpoints(t, b, "list")
		require.NoError(t, err, out)
		require.Contains(t, out, "URL")
		require.Contains(t, out, "https://hooks.example.com/in")
		id := strings.Fields(strings.Split(out, "\n")[1])[0]

		// Flags after the positional id work too.
		out, err = run(t, runEndpointsCLI, append([]string{"get", id}, conn(b)...)...)
		require.NoError(t, err, out)
		require.Contains(t, out, "status:")
		require.Contains(t, out, "enabled")

		out, err = endpoints(t, b, "update", id, "--disable", "--description", "paused")
		require.NoError(t, err, out)
		require.Contains(t, out, "disabled (disabled by owner)")
		require.Contains(t, out, "paused")

		_, err = endpoints(t, b, "send-test", id)
		require.Error(t, err)
		require.Contains(t, err.Error(), "FailedPrecondition")

		out, err = endpoints(t, b, "update", id, "--enable")
		require.NoError(t, err, out)
		require.Contains(t, out, "status:")
		require.NotContains(t, out, "disabled")

		out, err = endpoints(t, b, "rotate-secret", id, "--grace", "1h")
		require.NoError(t, err, out)
		require.Contains(t, out, "new signing secret: whsec_")
		require.Contains(t, out, "keeps signing until")

		out, err = endpoints(t, b, "send-test", id)
		require.NoError(t, err, out)
		require.Contains(t, out, "sent webhook.test event")
		b.pub.mu.Lock()
		require.Len(t, b.pub.events, 1)
		b.pub.mu.Unlock()

		out, err = endpoints(t, b, "deliveries", id)
		require.NoError(t, err, out)
		require.Contains(t, out, "(no deliveries)")

		out, err = endpoints(t, b, "redeliver", id)
		require.NoError(t, err, out)
		require.Contains(t, out, "re-queued 0 deliveries")

		out, err = endpoints(t, b, "delete", id)
		require.NoError(t, err, out)
		require.Contains(t, out, "deleted endpoint "+id)

		_, err = endpoints(t, b, "get", id)
		require.ErrorContains(t, err, "NotFound")
	})

	t.Run("NameAndLabels", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		out, err := endpoints(t, b, "create", "--url", "https://hooks.example.com/prod", "--event-types", "*",
			"--name", "Billing prod", "--label", "env=prod,team=billing")
		require.NoError(t, err, out)
		require.Contains(t, out, "Billing prod")
		require.Contains(t, out, "env=prod,team=billing")
		id := strings.Fields(strings.SplitN(out, "\n", 2)[0])[1]
		out, err = endpoints(t, b, "create", "--url", "https://hooks.example.com/dev", "--event-types", "*", "--label", "env=dev")
		require.NoError(t, err, out)

		out, err = endpoints(t, b, "list", "-q", "--label", "env=prod", "--label", "team=billing")
		require.NoError(t, err, out)
		require.Equal(t, id+"\n", out)

		out, err = endpoints(t, b, "update", id, "--label", "env=staging", "--name", "Billing staging")
		require.NoError(t, err, out)
		require.Contains(t, out, "env=staging")
		require.NotContains(t, out, "team=billing", "--label replaces the set")
		out, err = endpoints(t, b, "list", "-q", "--label", "env=prod")
		require.NoError(t, err, out)
		require.Empty(t, out)

		_, err = endpoints(t, b, "create", "--url", "https://hooks.example.com/x", "--event-types", "*", "--label", "Env=prod")
		require.ErrorContains(t, err, `labels["Env"]`)
		_, err = endpoints(t, b, "list", "--label", "novalue")
		require.ErrorContains(t, err, "want key=value")
	})

	t.Run("EventsListAndGet", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		out, err := endpoints(t, b, "create", "--url", "https://hooks.example.com/in", "--event-types", "*")
		require.NoError(t, err, out)
		id := strings.Fields(strings.SplitN(out, "\n", 2)[0])[1]
		note := testfactory.Event(t.Context(), t, b.db.Pool, &testfactory.EventOpts{OwnerID: "owner_cli", Type: "corpus.note.changed", Subject: "wiki://software/x"})
		testfactory.Event(t.Context(), t, b.db.Pool, &testfactory.EventOpts{OwnerID: "owner_cli", Type: "booking.created", Subject: "booking://1"})
		testfactory.Job(t.Context(), t, b.db.Pool, &testfactory.JobOpts{Args: job.DeliverArgs{EndpointID: id, EventID: note}})

		events := func(args ...string) (string, error) {
			return run(t, runEventsCLI, append(append([]string{args[0]}, conn(b)...), args[1:]...)...)
		}
		out, err = events("list", "--type", "corpus.*", "--subject-prefix", "wiki://", "--since", "1h")
		require.NoError(t, err, out)
		require.Contains(t, out, note)
		require.NotContains(t, out, "booking.created")
		out, err = events("get", note)
		require.NoError(t, err, out)
		require.Contains(t, out, "corpus.note.changed")
		require.Contains(t, out, id)
		require.Contains(t, out, "pending")
		_, err = events("get", "missing-event")
		require.ErrorContains(t, err, "NotFound")
		_, err = events("list", "--type", "corpus*")
		require.ErrorContains(t, err, "event_type")
	})

	t.Run("DeliveriesFilterGetAndRecover", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		out, err := endpoints(t, b, "create", "--url", "https://hooks.example.com/in", "--event-types", "*")
		require.NoError(t, err, out)
		id := strings.Fields(strings.SplitN(out, "\n", 2)[0])[1]
		// Two deliveries that failed an hour ago, one delivered.
		var jobs []int64
		for i, state := range []string{"discarded", "cancelled", "completed"} {
			ev := testfactory.Event(t.Context(), t, b.db.Pool, &testfactory.EventOpts{OwnerID: "owner_cli", Type: "booking.created", Subject: "booking://" + strconv.Itoa(i)})
			jobs = append(jobs, testfactory.Job(t.Context(), t, b.db.Pool, &testfactory.JobOpts{
				Args: job.DeliverArgs{EndpointID: id, EventID: ev}, State: rivertype.JobState(state), Attempt: 1,
				FinalizedAt: new(time.Now().Add(-time.Hour)), Errors: []string{"HTTP 503"},
			}).ID)
		}

		out, err = endpoints(t, b, "deliveries", id, "--state", "failed,cancelled", "--event-type", "booking.*", "--since", "48h")
		require.NoError(t, err, out)
		require.Contains(t, out, "failed")
		require.Contains(t, out, "cancelled")
		require.NotContains(t, out, "delivered")
		_, err = endpoints(t, b, "deliveries", id, "--state", "lost")
		require.ErrorContains(t, err, `unknown state "lost"`)
		_, err = endpoints(t, b, "deliveries", id, "--since", "yesterday")
		require.ErrorContains(t, err, "RFC 3339")

		out, err = endpoints(t, b, "delivery", strconv.FormatInt(jobs[0], 10))
		require.NoError(t, err, out)
		require.Contains(t, out, "endpoint:")
		require.Contains(t, out, id)
		require.Contains(t, out, "HTTP 503")
		_, err = endpoints(t, b, "delivery", "abc")
		require.ErrorContains(t, err, "want a delivery id")

		// Pages of one, followed to the end; a second run queues nothing.
		out, err = endpoints(t, b, "redeliver", id, "--since", "2h", "--limit", "1")
		require.NoError(t, err, out)
		require.Contains(t, out, "re-queued 2 deliveries")
		out, err = endpoints(t, b, "redeliver", id, "--since", "2h")
		require.NoError(t, err, out)
		require.Contains(t, out, "re-queued 0 deliveries")
	})

	t.Run("EventTypes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		out, err := run(t, runEventTypesCLI, "--addr", b.addr, "--token-file", b.tokenFile)
		require.NoError(t, err, out)
		require.Contains(t, out, "NAME")
		require.Contains(t, out, "corpus.note.changed")
		out, err = run(t, runEventTypesCLI, "--addr", b.addr, "--token-file", b.tokenFile, "--json")
		require.NoError(t, err, out)
		var resp webhooksv1.ListEventTypesResponse
		require.NoError(t, protojson.Unmarshal([]byte(out), &resp))
		require.Len(t, resp.GetEventTypes(), len(event.WebhookTypes()))
		for _, et := range resp.GetEventTypes() {
			require.Equal(t, "object", et.GetDataSchema().GetFields()["type"].GetStringValue(), et.GetName())
			example, err := protojson.Marshal(et.GetDataExample())
			require.NoError(t, err)
			require.NoError(t, event.ValidateData(et.GetName(), example), et.GetName())
		}
		require.Contains(t, out, `"data_schema"`, "--json prints each type's data schema")
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := endpoints(t, b, "create", "--url", "ftp://x", "--event-types", "*,nope")
		require.ErrorContains(t, err, "InvalidArgument")
		require.ErrorContains(t, err, "\n  url: ")
		require.ErrorContains(t, err, "\n  event_types[1]: ")

		_, err = run(t, runEndpointsCLI, "list", "--addr", b.addr, "--token-file", b.tokenFile)
		require.ErrorContains(t, err, "--owner")

		_, err = run(t, runEndpointsCLI, "list", "--addr", b.addr, "--token-file", b.pubToken, "--owner", "o")
		require.ErrorContains(t, err, "PermissionDenied")

		_, err = endpoints(t, b, "update", "0190c1a2-0000-7000-8000-000000000000")
		require.ErrorContains(t, err, "nothing to update")

		_, err = endpoints(t, b, "get")
		require.ErrorContains(t, err, "exactly one endpoint id")

		_, err = endpoints(t, b, "retry-delivery", "not-a-number")
		require.ErrorContains(t, err, "is not a delivery id")
		_, err = endpoints(t, b, "retry-delivery", "987654")
		require.ErrorContains(t, err, "NotFound")
		require.ErrorContains(t, err, "delivery not found")
		_, err = endpoints(t, b, "retry-delivery", "987654", "--resend")
		require.ErrorContains(t, err, "delivery not found", "--resend is a flag of retry-delivery")

		_, err = run(t, runEndpointsCLI, "frobnicate")
		require.ErrorContains(t, err, "unknown command")

		_, err = run(t, runEndpointsCLI)
		require.Error(t, err)
	})

	t.Run("ResealSecrets", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := endpoints(t, b, "create", "--url", "https://hooks.example.com/in", "--event-types", "*")
		require.NoError(t, err)

		// Rotate the master key: a new primary first, the old one kept.
		newMaster := make([]byte, 32)
		_, err = rand.Read(newMaster)
		require.NoError(t, err)
		keysFile := filepath.Join(t.TempDir(), "master-keys")
		require.NoError(t, os.WriteFile(keysFile, []byte("2:"+base64.StdEncoding.EncodeToString(newMaster)+","+b.masterSpec+"\n"), 0o600))
		args := []string{"--database-url", b.db.URL, "--schema", b.db.Schema, "--master-keys-file", keysFile}

		out, err := run(t, runResealCLI, args...)
		require.NoError(t, err, out)
		require.Contains(t, out, "re-sealed 1 endpoint(s) under master key id 2")
		out, err = run(t, runResealCLI, args...)
		require.NoError(t, err, out)
		require.Contains(t, out, "re-sealed 0 endpoint(s)")
	})
}
