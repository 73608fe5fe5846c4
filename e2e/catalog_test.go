package e2e

import (
	"context"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// TestUnknownTypes: through the real binary, a type in no catalog is not
// silently taken for an internal one. By default it is accepted and dropped
// with its own outcome, the CLI exits non-zero, the server counts it by type
// and logs it; with -unknown-types=refuse it is InvalidArgument naming
// event.type.
func TestUnknownTypes(t *testing.T) {
	t.Parallel()

	t.Run("AcceptedDroppedAndReported", func(t *testing.T) {
		t.Parallel()
		d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}})

		out, err := cli(t, d, publisherToken, "events", "publish", "--owner", "owner-u",
			"--type", "corpus.note.chnaged", "--subject", "wiki://x", "--data", `{"op":"updated"}`)
		var exit *exec.ExitError
		require.ErrorAs(t, err, &exit, out)
		require.Equal(t, 1, exit.ExitCode(), out)
		require.Contains(t, out, "dropped: the type is in no event catalog")
		require.Contains(t, out, `type "corpus.note.chnaged" is in no event catalog`)

		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_DROPPED_UNKNOWN,
			publish(t, d, newEvent("owner-u", "corpus.note.chnaged", "wiki://x", `{}`)).GetOutcome())
		require.InDelta(t, 2, metric(t, d, `dispatcher_ingest_unknown_types_total{type="corpus.note.chnaged"}`), 0)
		require.InDelta(t, 2, metric(t, d, `dispatcher_ingest_events_total{path="grpc",result="dropped_unknown"}`), 0)
		require.Contains(t, d.logs.String(), `"type":"corpus.note.chnaged"`)

		// A catalog type still publishes, and the CLI exits 0.
		out, err = cli(t, d, publisherToken, "events", "publish", "--owner", "owner-u",
			"--type", "corpus.note.changed", "--subject", "wiki://x", "--data", `{"op":"updated"}`)
		require.NoError(t, err, out)
		require.Contains(t, out, "(stored")
	})

	t.Run("RefusedWhenStrict", func(t *testing.T) {
		t.Parallel()
		d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate", "--unknown-types", "refuse"}})

		ctx, cancel := context.WithTimeout(publisherCtx(t), 10*time.Second)
		defer cancel()
		_, err := d.events().Publish(ctx, &webhooksv1.PublishRequest{Event: newEvent("owner-u", "corpus.note.chnaged", "wiki://x", `{}`)})
		st := status.Convert(err)
		require.Equal(t, codes.InvalidArgument, st.Code(), "%v", err)
		require.Contains(t, st.Message(), "event.type: is in no event catalog")
		require.InDelta(t, 1, metric(t, d, `dispatcher_ingest_unknown_types_total{type="corpus.note.chnaged"}`), 0)
	})
}
