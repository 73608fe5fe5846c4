package main

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
	"github.com/standmeet/webhook-dispatcher/internal/auth"
	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/grpcapi"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

func TestAttemptsCLI(t *testing.T) {
	t.Parallel()

	type testBundle struct {
		args       []string
		endpointID uuid.UUID
		deliveryID int64
	}
	setup := func(t *testing.T) *testBundle {
		t.Helper()
		db := dbtest.New(t)
		kr, _ := testfactory.Keyring(t, 1)
		rc, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Schema: db.Schema})
		require.NoError(t, err)
		authn, err := auth.New(auth.Tokens{Admin: []string{cliTestAdminToken}}, nil)
		require.NoError(t, err)
		srv := grpc.NewServer(grpcapi.ServerOptions(authn)...)
		webhooksv1.RegisterEndpointServiceServer(srv, grpcapi.NewEndpointServer(endpoint.NewService(endpoint.ServiceConfig{}, db.Pool, rc, kr, nil, nil), nil))
		lis, err := new(net.ListenConfig).Listen(t.Context(), "tcp", "127.0.0.1:0")
		require.NoError(t, err)
		go func() { _ = srv.Serve(lis) }()
		t.Cleanup(srv.Stop)
		tokenFile := filepath.Join(t.TempDir(), "admin-token")
		require.NoError(t, os.WriteFile(tokenFile, []byte(cliTestAdminToken+"\n"), 0o600))

		ep := testfactory.Endpoint(t.Context(), t, db.Pool, &testfactory.EndpointOpts{OwnerID: "owner_cli"})
		res, err := rc.Insert(t.Context(), job.DeliverArgs{EndpointID: ep.String(), EventID: "ev-1"}, nil)
		require.NoError(t, err)
		rec := attempt.NewRecorder(attempt.RecorderConfig{}, db.Pool, nil)
		until := time.Now().Add(time.Hour)
		for _, a := range []attempt.Attempt{
			{Number: 1, Outcome: attempt.OutcomeHTTP5xx, Status: 502, Duration: 30 * time.Millisecond, Body: "bad \x1b[31mgateway", Error: "HTTP 502: bad gateway"},
			{Number: 2, Outcome: attempt.OutcomeRetryAfter, Status: 429, Duration: 2 * time.Millisecond, SnoozedUntil: &until},
		} {
			a.DeliveryID, a.OwnerID, a.EndpointID, a.EventID, a.StartedAt = res.Job.ID, "owner_cli", ep, "ev-1", time.Now()
			rec.Record(a)
		}
		require.NoError(t, rec.Flush(t.Context()))
		return &testBundle{
			args:       []string{"--addr", lis.Addr().String(), "--token-file", tokenFile, "--owner", "owner_cli"},
			endpointID: ep, deliveryID: res.Job.ID,
		}
	}
	run := func(t *testing.T, b *testBundle, args ...string) (string, error) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		err := runEndpointsCLI(t.Context(), append(args, b.args...), &stdout, &stderr)
		return stdout.String() + stderr.String(), err
	}

	t.Run("AttemptsTable", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		out, err := run(t, b, "attempts", strconv.FormatInt(b.deliveryID, 10))
		require.NoError(t, err, out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 3, out)
		require.Contains(t, lines[0], "OUTCOME")
		require.Contains(t, lines[1], "retry_after until ")
		require.Contains(t, lines[1], "429")
		require.Contains(t, lines[2], "http_5xx")
		require.Contains(t, lines[2], "502")
		require.Contains(t, lines[2], "HTTP 502: bad gateway")
		require.NotContains(t, out, "\x1b", "a receiver's escape sequences never reach the terminal")

		out, err = run(t, b, "attempts", strconv.FormatInt(b.deliveryID, 10), "--bodies")
		require.NoError(t, err, out)
		require.Contains(t, out, `"bad \x1b[31mgateway"`, "the full body, escaped")
		require.NotContains(t, out, "\x1b")

		out, err = run(t, b, "attempts", strconv.FormatInt(b.deliveryID, 10), "--json")
		require.NoError(t, err, out)
		require.Contains(t, out, `"ATTEMPT_OUTCOME_HTTP_5XX"`)
	})

	t.Run("StatsOfEveryEndpoint", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		out, err := run(t, b, "stats")
		require.NoError(t, err, out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 4, "a header and three windows: %s", out)
		for i, w := range []string{"1h", "24h", "7d"} {
			f := strings.Fields(lines[i+1])
			require.Equal(t, b.endpointID.String(), f[0])
			require.Equal(t, w, f[1])
			require.Equal(t, []string{"2", "0", "2", "0", "1"}, f[2:7], "attempts, ok, failed, 4xx, 5xx")
			require.Equal(t, "1", f[11], "retry-after")
		}

		out, err = run(t, b, "stats", "--ids", b.endpointID.String(), "--json")
		require.NoError(t, err, out)
		require.Contains(t, out, `"last_week"`)
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		_, err := run(t, b, "attempts", "x1")
		require.ErrorContains(t, err, "is not a delivery id")
		_, err = run(t, b, "attempts")
		require.ErrorContains(t, err, "exactly one delivery id")
		_, err = run(t, b, "attempts", "987654")
		require.ErrorContains(t, err, "delivery not found")
		_, err = run(t, b, "stats", "--ids", "nope")
		require.ErrorContains(t, err, "endpoint_ids[0]")
		_, err = run(t, b, "stats", "--ids", uuid.NewString())
		require.ErrorContains(t, err, "endpoint not found")
	})
}
