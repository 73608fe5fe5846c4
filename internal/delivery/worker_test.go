package delivery

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertest"
	"github.com/riverqueue/river/rivertype"
	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	"github.com/standmeet/webhook-dispatcher/internal/egress"
	"github.com/standmeet/webhook-dispatcher/internal/endpoint"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
	"github.com/standmeet/webhook-dispatcher/internal/testfactory"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

var loopback = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}

type testBundle struct {
	db      *dbtest.DB
	keyring *seal.Keyring
	metrics *metrics.Metrics
	client  *river.Client[pgx.Tx]
	worker  *Worker
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	db := dbtest.New(t)
	kr, err := seal.NewKeyring(1, map[uint32][]byte{1: make([]byte, 32)})
	require.NoError(t, err)
	client, err := river.NewClient(riverpgxv5.New(db.Pool), &river.Config{Schema: db.Schema})
	require.NoError(t, err)
	m := metrics.New(prometheus.NewRegistry(), metrics.Labels{})
	// The production client timeout: a receiver that answers at once must
	// not time out because a busy machine runs the exchange slowly. Tests
	// of timeouts set their own. Likewise no lane stalls unless a test
	// says so: on a busy machine a request to an answering receiver can
	// take long enough (TestStalledEndpointHoldsNoWorkers sets it).
	w := NewWorker(Config{StallAfter: time.Hour}, db.Pool,
		egress.NewClient(egress.Config{AllowCIDRs: loopback}), endpoint.NewKeyOpener(kr), m, slog.New(slog.DiscardHandler))
	return &testBundle{db: db, keyring: kr, metrics: m, client: client, worker: w}
}

type endpointOpts struct {
	ownerID        string
	enabled        bool
	failingSince   *time.Time
	previousSecret string
}

// createEndpoint inserts an endpoint with a sealed secret and returns its id
// and the secret.
func (b *testBundle) createEndpoint(t *testing.T, url string, opts endpointOpts) (uuid.UUID, string) {
	t.Helper()
	id := uuid.New()
	secret, err := webhook.GenerateSecret()
	require.NoError(t, err)
	sealKey := func(s, column string) []byte {
		key, err := webhook.ParseSecret(s)
		require.NoError(t, err)
		sealed, err := endpoint.SealSigningKey(b.keyring, id, endpoint.SchemeV1, column, key)
		require.NoError(t, err)
		return sealed
	}
	var prev []byte
	var prevExp *time.Time
	if opts.previousSecret != "" {
		prev = sealKey(opts.previousSecret, endpoint.ColumnPreviousSecret)
		prevExp = new(time.Now().Add(time.Hour))
	}
	testfactory.Endpoint(context.Background(), t, b.db.Pool, &testfactory.EndpointOpts{
		ID: &id, OwnerID: opts.ownerID, URL: url, SecretEnc: sealKey(secret, endpoint.ColumnSecret),
		PreviousSecretEnc: prev, PreviousSecretExpiresAt: prevExp, Disabled: !opts.enabled, FailingSince: opts.failingSince,
	})
	return id, secret
}

func (b *testBundle) insertEvent(t *testing.T, ownerID, typ, subject string) string {
	t.Helper()
	return testfactory.Event(context.Background(), t, b.db.Pool, &testfactory.EventOpts{
		OwnerID: ownerID, Type: typ, Subject: subject, Data: `{"op":"updated","published":true}`,
	})
}

// runningJob inserts a deliver job and moves it to running with one attempt
// spent, as River's fetch would, so Work can be called directly.
func (b *testBundle) runningJob(t *testing.T, endpointID uuid.UUID, eventID string) *river.Job[job.DeliverArgs] {
	t.Helper()
	ctx := context.Background()
	res, err := b.client.Insert(ctx, job.DeliverArgs{EndpointID: endpointID.String(), EventID: eventID}, nil)
	require.NoError(t, err)
	row := res.Job
	_, err = b.db.Pool.Exec(ctx, `UPDATE river_job SET state = 'running', attempt = 1, attempted_at = now() WHERE id = $1`, row.ID)
	require.NoError(t, err)
	row.State = rivertype.JobStateRunning
	row.Attempt = 1
	var args job.DeliverArgs
	require.NoError(t, json.Unmarshal(row.EncodedArgs, &args))
	return &river.Job[job.DeliverArgs]{JobRow: row, Args: args}
}

// asProbe gives j its endpoint's probe slot, as recovery probing does for
// the delivery it makes its probe (probe.go): a delivery to an endpoint
// failing for a while is held without it (failing.go). Tests that send to a
// failing endpoint again, as a probe would, use it; a job to an endpoint
// that is not failing is left as it is.
func (b *testBundle) asProbe(t *testing.T, j *river.Job[job.DeliverArgs]) *river.Job[job.DeliverArgs] {
	t.Helper()
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `
WITH ep AS (
    UPDATE webhook_endpoints SET probe_at = coalesce(probe_at, now() + interval '15 seconds')
     WHERE id::text = $2 AND failing_since IS NOT NULL
 RETURNING probe_at
)
UPDATE river_job j
   SET metadata = j.metadata || coalesce((SELECT jsonb_build_object($3::text, (extract(epoch FROM probe_at) * 1000000)::bigint) FROM ep), '{}')
 WHERE j.id = $1
RETURNING j.metadata`, j.ID, j.Args.EndpointID, job.ProbeSlotKey).Scan(&j.Metadata))
	return j
}

func (b *testBundle) work(t *testing.T, j *river.Job[job.DeliverArgs]) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(rivertest.WorkContext(context.Background(), b.client), 30*time.Second)
	defer cancel()
	return b.worker.Work(ctx, j)
}

type endpointRow struct {
	enabled        bool
	failingSince   *time.Time
	disabledReason *string
	busyUntil      *time.Time
}

func (b *testBundle) endpoint(t *testing.T, id uuid.UUID) endpointRow {
	t.Helper()
	var r endpointRow
	require.NoError(t, b.db.Pool.QueryRow(context.Background(),
		`SELECT enabled, failing_since, disabled_reason, busy_until FROM webhook_endpoints WHERE id = $1`, id).
		Scan(&r.enabled, &r.failingSince, &r.disabledReason, &r.busyUntil))
	return r
}

func (b *testBundle) jobState(t *testing.T, id int64) rivertype.JobState {
	t.Helper()
	var s string
	require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT state FROM river_job WHERE id = $1`, id).Scan(&s))
	return rivertype.JobState(s)
}

// receiver is a scripted httptest server that records what it got.
type receiver struct {
	*httptest.Server
	hits     atomic.Int64
	mu       sync.Mutex
	requests []*recorded
}

type recorded struct {
	header http.Header
	body   []byte
}

func newReceiver(t *testing.T, handler func(w http.ResponseWriter, r *http.Request)) *receiver {
	t.Helper()
	rc := &receiver{}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		rc.requests = append(rc.requests, &recorded{header: r.Header.Clone(), body: body})
		rc.mu.Unlock()
		rc.hits.Add(1)
		handler(w, r)
	}))
	t.Cleanup(rc.Close)
	return rc
}

func status(code int, header ...string) func(http.ResponseWriter, *http.Request) {
	return func(w http.ResponseWriter, _ *http.Request) {
		for i := 0; i+1 < len(header); i += 2 {
			w.Header().Set(header[i], header[i+1])
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, http.StatusText(code))
	}
}

func requireSnooze(t *testing.T, err error) time.Duration {
	t.Helper()
	var snooze *river.JobSnoozeError
	require.ErrorAs(t, err, &snooze)
	return snooze.Duration
}

func requireCancel(t *testing.T, err error) {
	t.Helper()
	var cancel *river.JobCancelError
	require.ErrorAs(t, err, &cancel)
}

// requireRetryable: a plain error, which River turns into retryable (or
// discarded on the last attempt).
func requireRetryable(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	var snooze *river.JobSnoozeError
	var cancel *river.JobCancelError
	require.NotErrorAs(t, err, &snooze)
	require.NotErrorAs(t, err, &cancel)
}

func TestWorkerDelivery(t *testing.T) {
	t.Parallel()

	ctx := context.Background()

	t.Run("CompletesOn2xxSignedAndThin", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusNoContent))
		epID, secret := b.createEndpoint(t, rc.URL+"/hook", endpointOpts{enabled: true, failingSince: new(time.Now().Add(-time.Hour))})
		evID := b.insertEvent(t, "owner-1", "corpus.note.changed", "wiki://software/project/x")
		j := b.runningJob(t, epID, evID)

		require.NoError(t, b.work(t, j))
		ep := b.endpoint(t, epID)
		require.Nil(t, ep.failingSince, "a success clears failing_since")
		require.Nil(t, ep.busyUntil, "the lease is released")

		require.Len(t, rc.requests, 1)
		req := rc.requests[0]
		require.Equal(t, evID, req.header.Get("webhook-id"))
		require.Equal(t, "application/json", req.header.Get("Content-Type"))
		v, err := webhook.NewVerifier(secret)
		require.NoError(t, err)
		require.NoError(t, v.Verify(req.header, req.body))
		ev, err := webhook.Decode(req.body)
		require.NoError(t, err)
		require.Equal(t, evID, ev.ID)
		require.Equal(t, "corpus.note.changed", ev.Type)
		require.JSONEq(t, `{"op":"updated","published":true}`, string(ev.Data))
		require.NotContains(t, string(req.body), "owner-1", "the owner travels beside the event, never in it")
		require.InDelta(t, 1, testutil.ToFloat64(b.metrics.DeliveriesTotal.WithLabelValues(outcomeCompleted.String(), "2xx")), 0)
	})

	t.Run("SignsWithBothSecretsDuringRotation", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusOK))
		old, err := webhook.GenerateSecret()
		require.NoError(t, err)
		epID, current := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true, previousSecret: old})
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		require.NoError(t, b.work(t, j))
		req := rc.requests[0]
		for _, s := range []string{old, current} {
			v, err := webhook.NewVerifier(s)
			require.NoError(t, err)
			require.NoError(t, v.Verify(req.header, req.body))
		}
	})

	retryable := map[string]func(http.ResponseWriter, *http.Request){
		"Status500":              status(http.StatusInternalServerError),
		"Status502":              status(http.StatusBadGateway),
		"Status408":              status(http.StatusRequestTimeout),
		"Status429NoRetryAfter":  status(http.StatusTooManyRequests),
		"Status503BadRetryAfter": status(http.StatusServiceUnavailable, "Retry-After", "soon"),
		"Status302NotFollowed":   status(http.StatusFound, "Location", "http://127.0.0.1:1/elsewhere"),
	}
	for name, handler := range retryable {
		t.Run("RetryableOn"+name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rc := newReceiver(t, handler)
			epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
			j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
			err := b.work(t, j)
			requireRetryable(t, err)
			require.Contains(t, err.Error(), "HTTP ")
			require.EqualValues(t, 1, rc.hits.Load(), "no client-side retries, no redirect following")
			ep := b.endpoint(t, epID)
			require.NotNil(t, ep.failingSince, "any non-success sets failing_since")
			require.Nil(t, ep.busyUntil)
		})
	}

	t.Run("RetryableOnTimeout", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.worker.client = egress.NewClient(egress.Config{AllowCIDRs: loopback, Timeout: 200 * time.Millisecond})
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-release:
			case <-r.Context().Done():
			}
		})
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		err := b.work(t, j)
		requireRetryable(t, err)
		require.NotContains(t, err.Error(), rc.URL, "errors never carry the endpoint URL")
		require.NotNil(t, b.endpoint(t, epID).failingSince)
	})

	t.Run("RetryableOnConnectionRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := lis.Addr().String()
		require.NoError(t, lis.Close())
		epID, _ := b.createEndpoint(t, "http://"+addr+"/hook", endpointOpts{enabled: true})
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		requireRetryable(t, b.work(t, j))
		require.NotNil(t, b.endpoint(t, epID).failingSince)
	})

	t.Run("SnoozesOnRetryAfterSeconds", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusTooManyRequests, "Retry-After", "120"))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		require.Equal(t, 120*time.Second, requireSnooze(t, b.work(t, j)))
		require.NotNil(t, b.endpoint(t, epID).failingSince, "429 counts as a failure for health")
		require.InDelta(t, 1, testutil.ToFloat64(b.metrics.SnoozesTotal.WithLabelValues(job.SnoozeRetryAfter)), 0)
	})

	t.Run("SnoozesOnRetryAfterDateCapped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		when := time.Now().Add(72 * time.Hour).UTC().Format(http.TimeFormat)
		rc := newReceiver(t, status(http.StatusServiceUnavailable, "Retry-After", when))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		require.Equal(t, time.Hour, requireSnooze(t, b.work(t, j)), "capped at MaxRetryAfter")
	})

	t.Run("SnoozeHasAFloor", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusServiceUnavailable, "Retry-After", "0"))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		require.Equal(t, minSnooze, requireSnooze(t, b.work(t, j)))
	})

	cancelled := map[string]int{"Status400": 400, "Status401": 401, "Status404": 404, "Status410": 410, "Status422": 422}
	for name, code := range cancelled {
		t.Run("CancelledOn"+name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			rc := newReceiver(t, status(code))
			epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
			j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
			err := b.work(t, j)
			requireCancel(t, err)
			require.Contains(t, err.Error(), fmt.Sprintf("HTTP %d", code))
			require.NotNil(t, b.endpoint(t, epID).failingSince, "410 included: any non-success sets failing_since")
		})
	}

	t.Run("CancelledWhenSSRFBlocked", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.worker.client = egress.NewClient(egress.Config{}) // production policy: loopback denied
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		err := b.work(t, j)
		requireCancel(t, err)
		require.ErrorIs(t, err, egress.ErrBlocked)
		require.Zero(t, rc.hits.Load(), "never connected")
		require.InDelta(t, 1, testutil.ToFloat64(b.metrics.EgressBlockedTotal), 0)
	})

	t.Run("CancelledWhenEndpointDisabled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: false})
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		err := b.work(t, j)
		requireCancel(t, err)
		require.ErrorIs(t, err, errEndpointDisabled)
		require.Zero(t, rc.hits.Load())
	})

	t.Run("CancelledWhenEndpointGone", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		j := b.runningJob(t, uuid.New(), b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		err := b.work(t, j)
		requireCancel(t, err)
		require.ErrorIs(t, err, errEndpointGone)
	})

	t.Run("CancelledWhenEventPruned", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		j := b.runningJob(t, epID, uuid.NewString())
		requireCancel(t, b.work(t, j))
		require.Zero(t, rc.hits.Load())
		require.Nil(t, b.endpoint(t, epID).busyUntil, "lease released")
	})

	t.Run("CancelledWhenSubjectIsRaw", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "raw://secret/thing"))
		requireCancel(t, b.work(t, j))
		require.Zero(t, rc.hits.Load(), "raw:// never leaves, even if a delivery exists")
	})

	t.Run("CancelledWhenEventBelongsToAnotherOwner", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-2", "code.issued", "code://x"))
		requireCancel(t, b.work(t, j))
		require.Zero(t, rc.hits.Load())
	})

	t.Run("CancelledAfterRetryWindow", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		j.CreatedAt = time.Now().Add(-RetryWindow() - time.Minute)
		requireCancel(t, b.work(t, j))
		require.Zero(t, rc.hits.Load())
	})

	t.Run("SnoozesWhenLeaseBusy", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		_, err := b.db.Pool.Exec(ctx, `UPDATE webhook_endpoints SET busy_until = now() + interval '30 seconds', lease_token = $2 WHERE id = $1`, epID, uuid.New())
		require.NoError(t, err)
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		b.worker.cfg.LocalWait = 300 * time.Millisecond
		start := time.Now()
		snooze := requireSnooze(t, b.work(t, j))
		require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "waited for a release first")
		require.Equal(t, 10*time.Second, snooze, "until the holder's lease would expire (25 s), capped at a third of the TTL")
		require.Zero(t, rc.hits.Load())
		require.InDelta(t, 1, testutil.ToFloat64(b.metrics.SnoozesTotal.WithLabelValues(job.SnoozeLeaseBusy)), 0)
	})

	t.Run("TakesAnExpiredLease", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		_, err := b.db.Pool.Exec(ctx, `UPDATE webhook_endpoints SET busy_until = now() - interval '1 second', lease_token = $2 WHERE id = $1`, epID, uuid.New())
		require.NoError(t, err)
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		require.NoError(t, b.work(t, j), "a dead worker's lease expires by itself")
		require.EqualValues(t, 1, rc.hits.Load())
	})

	t.Run("InterruptedByShutdownSpendsNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		started := make(chan struct{})
		rc := newReceiver(t, func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-r.Context().Done()
		})
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		wctx, cancel := context.WithCancel(rivertest.WorkContext(ctx, b.client))
		go func() { <-started; cancel() }()
		err := b.worker.Work(wctx, j)
		require.ErrorIs(t, err, context.Canceled, "River re-queues a job that returns context.Canceled on shutdown")
		ep := b.endpoint(t, epID)
		require.Nil(t, ep.failingSince, "not the receiver's fault")
		require.Nil(t, ep.busyUntil, "lease released")
	})
}

func TestEndpointHealth(t *testing.T) {
	t.Parallel()

	t.Run("DisabledAfterFiveDaysOfFailure", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusInternalServerError))
		since := time.Now().Add(-5*24*time.Hour - time.Minute)
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true, failingSince: &since})
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		requireRetryable(t, b.work(t, j))
		ep := b.endpoint(t, epID)
		require.False(t, ep.enabled)
		require.NotNil(t, ep.disabledReason)
		require.Contains(t, *ep.disabledReason, "failing continuously since")
		require.Contains(t, *ep.disabledReason, "HTTP 500")
		require.InDelta(t, 1, testutil.ToFloat64(b.metrics.EndpointsDisabledTotal), 0)

		// Its pending deliveries are discarded (cancelled) when they run.
		j2 := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://y"))
		requireCancel(t, b.work(t, j2))
	})

	t.Run("StaysFailingWithinFiveDays", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusInternalServerError))
		since := time.Now().Add(-4 * 24 * time.Hour)
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true, failingSince: &since})
		j := b.runningJob(t, epID, b.insertEvent(t, "owner-1", "code.issued", "code://x"))
		requireRetryable(t, b.work(t, j))
		ep := b.endpoint(t, epID)
		require.True(t, ep.enabled)
		require.WithinDuration(t, since, *ep.failingSince, time.Second, "the first failure's time is kept")
	})
}

func TestRetrySchedule(t *testing.T) {
	t.Parallel()

	t.Run("Backoff", func(t *testing.T) {
		t.Parallel()
		want := []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour, 5 * time.Hour, 10 * time.Hour, 10 * time.Hour, 10 * time.Hour}
		for i, w := range want {
			require.Equal(t, w, Backoff(i+1), "after failure %d", i+1)
		}
		require.Equal(t, 10*time.Hour, Backoff(500), "clamped after manual retries")
	})

	t.Run("WindowIsAboutFivePointThreeDays", func(t *testing.T) {
		t.Parallel()
		days := RetryWindow().Hours() / 24
		require.InDelta(t, 5.3, days, 0.05)
		require.Equal(t, 18, job.DeliverMaxAttempts)
	})

	t.Run("NextRetryHasSmallJitter", func(t *testing.T) {
		t.Parallel()
		now := time.Now()
		for failures := range 20 {
			j := &river.Job[job.DeliverArgs]{JobRow: &rivertype.JobRow{Errors: make([]rivertype.AttemptError, failures)}}
			got := nextRetry(j, now).Sub(now)
			base := Backoff(failures + 1)
			require.InDelta(t, float64(base), float64(got), float64(base)*jitter+1)
		}
	})

	t.Run("InsertedWithEighteenAttempts", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		j := b.runningJob(t, uuid.New(), uuid.NewString())
		require.Equal(t, 18, j.MaxAttempts)
		require.Equal(t, job.DeliverPartitionQueue(0), j.Queue)
	})
}

// TestWithRiver runs the worker under real River clients.
func TestWithRiver(t *testing.T) {
	t.Parallel()

	startClient := func(t *testing.T, b *testBundle, w *Worker, workers int) {
		t.Helper()
		ws := river.NewWorkers()
		river.AddWorker(ws, w)
		queues := map[string]river.QueueConfig{}
		for _, q := range job.DeliverQueues(job.DeliverPartitionsMin) {
			queues[q] = river.QueueConfig{MaxWorkers: workers}
		}
		c, err := river.NewClient(riverpgxv5.New(b.db.Pool), &river.Config{
			Schema:            b.db.Schema,
			Queues:            queues,
			Workers:           ws,
			FetchCooldown:     5 * time.Millisecond,
			FetchPollInterval: 50 * time.Millisecond,
			Logger:            slog.New(slog.DiscardHandler),
		})
		require.NoError(t, err)
		require.NoError(t, c.Start(context.Background()))
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, c.Stop(ctx))
		})
	}

	insertMany := func(t *testing.T, b *testBundle, epID uuid.UUID, n int) {
		t.Helper()
		params := make([]river.InsertManyParams, n)
		for i := range params {
			params[i] = river.InsertManyParams{Args: job.DeliverArgs{EndpointID: epID.String(), EventID: b.insertEvent(t, "owner-1", "code.issued", "code://x")}}
		}
		_, err := b.client.InsertMany(context.Background(), params)
		require.NoError(t, err)
	}

	// waitCompleted waits until n deliveries have completed. Its liveness
	// bound is on progress, not on the whole run: a loaded machine makes
	// every delivery slower (one endpoint's go one at a time), and only a
	// minute without a single completion is a stall.
	waitCompleted := func(t *testing.T, b *testBundle, n int) {
		t.Helper()
		const stall = 60 * time.Second
		deadline, last := time.Now().Add(stall), -1
		for {
			var done int
			require.NoError(t, b.db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job WHERE state = 'completed'`).Scan(&done))
			if done == n {
				return
			}
			if done > last {
				deadline, last = time.Now().Add(stall), done
			}
			if time.Now().After(deadline) {
				rows, err := b.db.Pool.Query(context.Background(), `SELECT state::text, count(*), max(attempt), max(errors::text) FROM river_job GROUP BY 1`)
				require.NoError(t, err)
				for rows.Next() {
					var st string
					var c, a int
					var e *string
					require.NoError(t, rows.Scan(&st, &c, &a, &e))
					t.Logf("state %s: %d (max attempt %d) %v", st, c, a, e)
				}
				t.Fatalf("only %d of %d deliveries completed, none for %s", done, n, stall)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	// concurrency tracks in-flight requests at the receiver.
	type concurrency struct{ now, peak atomic.Int64 }
	serialHandler := func(c *concurrency, delay time.Duration) func(http.ResponseWriter, *http.Request) {
		return func(w http.ResponseWriter, _ *http.Request) {
			n := c.now.Add(1)
			for {
				p := c.peak.Load()
				if n <= p || c.peak.CompareAndSwap(p, n) {
					break
				}
			}
			time.Sleep(delay)
			c.now.Add(-1)
			w.WriteHeader(http.StatusOK)
		}
	}

	t.Run("HotEndpointDrainsWithoutSnoozeStorm", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var c concurrency
		rc := newReceiver(t, serialHandler(&c, time.Millisecond))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		const n = 300
		insertMany(t, b, epID, n)
		// Up to 49 deliveries queue in the lane behind the one sending; a
		// queued one snoozes only if its turn takes longer than LocalWait.
		// Long, so that a slow machine (every turn slower) cannot make
		// them: snoozes here can only come from deliveries not queuing.
		b.worker.cfg.LocalWait = 30 * time.Second
		start := time.Now()
		startClient(t, b, b.worker, 50)
		waitCompleted(t, b, n)
		t.Logf("%d deliveries to one endpoint in %s", n, time.Since(start))
		require.EqualValues(t, n, rc.hits.Load())
		require.EqualValues(t, 1, c.peak.Load(), "one delivery in flight per endpoint")
		snoozes := testutil.ToFloat64(b.metrics.SnoozesTotal.WithLabelValues(job.SnoozeLeaseBusy))
		t.Logf("snoozes per delivery: %.3f", snoozes/n)
		require.LessOrEqual(t, snoozes/n, 0.2, "snoozes per delivery")
	})

	t.Run("TwoInstancesNeverPostConcurrently", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var c concurrency
		rc := newReceiver(t, serialHandler(&c, 2*time.Millisecond))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		const n = 60
		insertMany(t, b, epID, n)
		// A second process: its own worker (own lanes), same database.
		other := b.otherProcess(Config{})
		runWorker(t, b.worker)
		runWorker(t, other)
		startClient(t, b, b.worker, 10)
		startClient(t, b, other, 10)
		waitCompleted(t, b, n)
		require.EqualValues(t, 1, c.peak.Load(), "never two concurrent POSTs to one endpoint across instances")
		require.GreaterOrEqual(t, rc.hits.Load(), int64(n))
	})

	t.Run("ThreeInstancesShareEndpointsWithFewSnoozes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		const endpoints, perEndpoint = 4, 40
		var peaks [endpoints]concurrency
		ids := make([]uuid.UUID, endpoints)
		for i := range ids {
			rc := newReceiver(t, serialHandler(&peaks[i], time.Millisecond))
			ids[i], _ = b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		}
		// Interleaved, as fanouts of many events enqueue them, so every
		// instance fetches deliveries of every endpoint.
		params := make([]river.InsertManyParams, 0, endpoints*perEndpoint)
		for range perEndpoint {
			for _, id := range ids {
				params = append(params, river.InsertManyParams{Args: job.DeliverArgs{EndpointID: id.String(), EventID: b.insertEvent(t, "owner-1", "code.issued", "code://x")}})
			}
		}
		_, err := b.client.InsertMany(context.Background(), params)
		require.NoError(t, err)
		// Idle leases linger for an hour: only a hand-over on request can
		// move one, and a delivery waiting for one would snooze after
		// LocalWait, long enough that a slow machine cannot make it.
		cfg := Config{LeaseLinger: time.Hour, LocalWait: 30 * time.Second}
		b.worker.cfg.LeaseLinger, b.worker.cfg.LocalWait = cfg.LeaseLinger, cfg.LocalWait
		workers := []*Worker{b.worker, b.otherProcess(cfg), b.otherProcess(cfg)}
		for _, w := range workers {
			runWorker(t, w)
		}
		for _, w := range workers {
			startClient(t, b, w, 8)
		}
		waitCompleted(t, b, endpoints*perEndpoint)
		for i := range peaks {
			require.EqualValues(t, 1, peaks[i].peak.Load(), "endpoint %d: one POST at a time across instances", i)
		}
		snoozes := testutil.ToFloat64(b.metrics.SnoozesTotal.WithLabelValues(job.SnoozeLeaseBusy))
		t.Logf("snoozes per delivery: %.3f", snoozes/(endpoints*perEndpoint))
		require.LessOrEqual(t, snoozes/(endpoints*perEndpoint), 0.1, "instances hand leases over instead of snoozing")
	})

	t.Run("CrashBeforeCompletionResendsWithTheSameWebhookID", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rc := newReceiver(t, status(http.StatusOK))
		epID, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
		evID := b.insertEvent(t, "owner-1", "code.issued", "code://x")
		j := b.runningJob(t, epID, evID)

		// The attempt succeeds and writes nothing of its own: the job stays
		// running until River's batch completer writes it.
		require.NoError(t, b.work(t, j))
		require.Equal(t, rivertype.JobStateRunning, b.jobState(t, j.ID))
		require.Nil(t, b.endpoint(t, epID).busyUntil, "the lease is released all the same")

		// The process dies before the completer's flush. River's rescuer
		// finds the job running past RescueStuckJobsAfter and makes it
		// retryable, as this UPDATE does; a live worker then delivers again.
		_, err := b.db.Pool.Exec(context.Background(),
			`UPDATE river_job SET state = 'retryable', scheduled_at = now() WHERE id = $1`, j.ID)
		require.NoError(t, err)
		startClient(t, b, b.worker, 2)
		waitCompleted(t, b, 1)

		require.EqualValues(t, 2, rc.hits.Load(), "delivered once more after the crash")
		rc.mu.Lock()
		defer rc.mu.Unlock()
		require.Equal(t, evID, rc.requests[0].header.Get("webhook-id"))
		require.Equal(t, evID, rc.requests[1].header.Get("webhook-id"), "the re-send carries the same webhook-id, for the receiver to dedupe")
		require.Equal(t, rivertype.JobStateCompleted, b.jobState(t, j.ID))
	})

	t.Run("SeveralEndpointsInParallel", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var hits [3]atomic.Int64
		var eps []uuid.UUID
		for i := range hits {
			rc := newReceiver(t, func(w http.ResponseWriter, _ *http.Request) { hits[i].Add(1); w.WriteHeader(http.StatusOK) })
			id, _ := b.createEndpoint(t, rc.URL, endpointOpts{enabled: true})
			eps = append(eps, id)
		}
		for _, id := range eps {
			insertMany(t, b, id, 20)
		}
		startClient(t, b, b.worker, 20)
		waitCompleted(t, b, 60)
		for i := range hits {
			require.EqualValues(t, 20, hits[i].Load())
		}
	})
}
