package delivery

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/egress"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// opsOwner is the operator's owner id in these tests.
const opsOwner = "operator"

// announcing replaces the bundle's worker with one that announces health
// transitions to opsOwner.
func (b *testBundle) announcing() {
	b.worker = NewWorker(Config{OperationalOwner: opsOwner}, b.db.Pool,
		egress.NewClient(egress.Config{AllowCIDRs: loopback}), endpoint.NewKeyOpener(b.keyring), b.metrics, slog.New(slog.DiscardHandler))
}

// announced reads operational_outbox in insertion order, as the relay's
// events.
func (b *testBundle) announced(t *testing.T) []*webhook.Event {
	t.Helper()
	rows, err := b.db.Pool.Query(context.Background(),
		`SELECT event_id, owner_id, type, subject, occurred_at, data::text FROM operational_outbox ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var out []*webhook.Event
	for rows.Next() {
		var (
			e    webhook.Event
			data string
		)
		require.NoError(t, rows.Scan(&e.ID, &e.OwnerID, &e.Type, &e.Subject, &e.OccurredAt, &data))
		e.Data = json.RawMessage(data)
		out = append(out, &e)
	}
	require.NoError(t, rows.Err())
	return out
}

// requireWellFormed checks what the relay will check of an announced event:
// the thin-event rules and its type's schema.
func requireWellFormed(t *testing.T, e *webhook.Event) map[string]string {
	t.Helper()
	require.NoError(t, e.Validate(time.Now()))
	require.NoError(t, event.ValidateData(e.Type, e.Data))
	require.True(t, event.Leaves(e))
	var data map[string]string
	require.NoError(t, json.Unmarshal(e.Data, &data))
	return data
}

func TestOperationalEvents(t *testing.T) {
	t.Parallel()

	t.Run("FailingThenRecovered", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.announcing()
		var code atomic.Int64
		code.Store(http.StatusServiceUnavailable)
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) { status(int(code.Load()))(w, r) })
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{ownerID: "owner-1", enabled: true})

		requireRetryable(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://1"))))
		since := b.endpoint(t, epID).failingSince
		require.NotNil(t, since)
		got := b.announced(t)
		require.Len(t, got, 1)
		failing := got[0]
		require.Equal(t, event.TypeEndpointFailing, failing.Type)
		require.Equal(t, opsOwner, failing.OwnerID, "announced to the operator, never to the endpoint's owner")
		require.Equal(t, "dispatcher://endpoints/"+epID.String(), failing.Subject)
		data := requireWellFormed(t, failing)
		require.Equal(t, epID.String(), data["endpoint_id"])
		require.Equal(t, "owner-1", data["owner_id"])
		require.Equal(t, since.UTC().Format("2006-01-02T15:04:05.000000Z"), data["failing_since"])
		require.Contains(t, data["error"], "HTTP 503")

		// Still failing: no transition, nothing more.
		requireRetryable(t, b.work(t, b.asProbe(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://2")))))
		require.Len(t, b.announced(t), 1)

		code.Store(http.StatusNoContent)
		require.NoError(t, b.work(t, b.asProbe(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://3")))))
		require.Nil(t, b.endpoint(t, epID).failingSince)
		got = b.announced(t)
		require.Len(t, got, 2)
		recovered := got[1]
		require.Equal(t, event.TypeEndpointRecovered, recovered.Type)
		data = requireWellFormed(t, recovered)
		require.Equal(t, since.UTC().Format("2006-01-02T15:04:05.000000Z"), data["failing_since"], "names the failure it ends")
		require.NotEmpty(t, data["recovered_at"])
		require.Equal(t, opID(epID, "failing", *since), failing.ID)
		require.Equal(t, opID(epID, "recovered", *since), recovered.ID)

		// Healthy again: a success writes nothing, announces nothing.
		require.NoError(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://4"))))
		require.Len(t, b.announced(t), 2)
	})

	t.Run("DisabledAfterContinuousFailure", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.announcing()
		rc := newReceiver(t, status(http.StatusInternalServerError))
		since := time.Now().Add(-6 * 24 * time.Hour).Truncate(time.Microsecond)
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{ownerID: "owner-1", enabled: true, failingSince: &since})

		require.Error(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://1"))))
		ep := b.endpoint(t, epID)
		require.False(t, ep.enabled)
		got := b.announced(t)
		require.Len(t, got, 1)
		require.Equal(t, event.TypeEndpointDisabled, got[0].Type)
		data := requireWellFormed(t, got[0])
		require.Equal(t, *ep.disabledReason, data["disabled_reason"])
		require.Equal(t, since.UTC().Format("2006-01-02T15:04:05.000000Z"), data["failing_since"])
		require.NotEmpty(t, data["disabled_at"])
		require.Equal(t, opID(epID, "disabled", since), got[0].ID, "derived from the transition, so a replay is a duplicate")
	})

	t.Run("NothingWithoutAnOperationalOwner", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusInternalServerError))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{ownerID: "owner-1", enabled: true})
		requireRetryable(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://1"))))
		require.NotNil(t, b.endpoint(t, epID).failingSince)
		require.Empty(t, b.announced(t))
	})

	t.Run("OperatorsOwnEndpointsAreNotAnnounced", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.announcing()
		rc := newReceiver(t, status(http.StatusInternalServerError))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{ownerID: opsOwner, enabled: true})
		requireRetryable(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, opsOwner, "code.issued", "code://1"))))
		require.NotNil(t, b.endpoint(t, epID).failingSince)
		require.Empty(t, b.announced(t), "the operator's receiver failing cannot be told through itself")
	})

	t.Run("WakesTheRelay", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.announcing()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		conn, err := b.db.Pool.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		_, err = conn.Exec(ctx, `LISTEN "`+b.worker.cfg.OperationalChannel+`"`)
		require.NoError(t, err)

		rc := newReceiver(t, status(http.StatusInternalServerError))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{ownerID: "owner-1", enabled: true})
		requireRetryable(t, b.work(t, b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://1"))))
		n, err := conn.Conn().WaitForNotification(ctx)
		require.NoError(t, err)
		require.Equal(t, b.worker.cfg.OperationalChannel, n.Channel)
		_, err = conn.Exec(ctx, `UNLISTEN *`)
		require.NoError(t, err)
	})
}

// opID is the id settleSQL gives an operational event.
func opID(endpointID uuid.UUID, kind string, since time.Time) string {
	return "op_" + strings.ReplaceAll(endpointID.String(), "-", "") + "_" + kind + "_" + strconv.FormatInt(since.UnixMicro(), 10)
}
