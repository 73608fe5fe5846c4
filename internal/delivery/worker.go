package delivery

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/standmeet/webhook-dispatcher/internal/attempt"
	"github.com/standmeet/webhook-dispatcher/internal/batch"
	"github.com/standmeet/webhook-dispatcher/internal/event"
	"github.com/standmeet/webhook-dispatcher/internal/job"
	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/pglisten"
	"github.com/standmeet/webhook-dispatcher/internal/seal"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Config tunes the deliver worker. Zero values take the defaults.
type Config struct {
	// Catalog is the running catalog: what may leave, and which types are
	// test events (which no failing hold keeps). nil: the default catalog.
	Catalog *event.Running
	// AttemptTimeout bounds one attempt after the lease is held: reading,
	// signing, the POST (whose own timeout is the HTTP client's, 10 s) and
	// settling. Default 15 s.
	AttemptTimeout time.Duration
	// LeaseTTL is how long a lease lives if its holder dies; longer than
	// AttemptTimeout so a live holder never loses it. A holder extends it
	// before an attempt that might outlive it. Default 30 s.
	LeaseTTL time.Duration
	// LeaseLinger is how long a process keeps an endpoint's lease after its
	// last local delivery to that endpoint, so that the next one (often
	// milliseconds later) costs no write. Another process that wants the
	// lease meanwhile gets it at once. It needs the worker's Run (which
	// listens for those requests); without it leases are released as soon
	// as a lane goes idle. Default 2 s.
	LeaseLinger time.Duration
	// BusySnooze is the shortest snooze of a delivery that could not get
	// the lease from another process within LocalWait; the snooze lasts
	// until the holder's lease would expire, capped at LeaseTTL/3.
	// Default 2 s.
	BusySnooze time.Duration
	// LocalWait bounds how long a delivery waits for its turn: behind other
	// local deliveries to the same endpoint, then for another process to
	// release the lease. Default 5 s.
	LocalWait time.Duration
	// StallAfter is the shortest time every slot of an endpoint must be
	// held by requests in flight, none begun or ended, before its lane
	// counts as stalled (3 times its usual request, at most LocalWait): a
	// new delivery to it then snoozes (job.SnoozeStalled) for about as long
	// as the lane has stalled, instead of waiting for a turn in a deliver
	// worker, and so do those already waiting. So a few receivers that
	// hang cannot take every worker before their first attempt times out
	// and the endpoint counts as failing. Default 1 s.
	StallAfter time.Duration
	// LocalWaiters, if positive, bounds the in-process queue per endpoint:
	// a delivery that finds it full snoozes. Default 0: no bound but River's
	// worker count, since a smaller bound makes the overflow of a hot
	// endpoint snooze, get fetched again at once and snooze again.
	LocalWaiters int
	// RescueAfter is River's RescueStuckJobsAfter: how long a job whose
	// worker died stays running. Deliveries behind such a job on an ordered
	// endpoint wait about that long. Default 1 min.
	RescueAfter time.Duration
	// MaxRetryAfter caps one Retry-After snooze. Default 1 h.
	MaxRetryAfter time.Duration
	// DisableAfter is how long an endpoint may fail continuously before it
	// is disabled. Default DefaultDisableAfter.
	DisableAfter time.Duration
	// ErrorBodyBytes bounds the response body kept as an error summary.
	// Default 256.
	ErrorBodyBytes int64
	// Attempts, if set, records every attempt in the attempt history
	// (internal/attempt); it also says how much of each response body to
	// keep there.
	Attempts *attempt.Recorder
	// Channel is the NOTIFY channel for lease releases and requests. It must
	// be the same for every process on one schema and differ between
	// schemas. Default: LeaseChannel(the pool's search_path).
	Channel string
	// OperationalOwner, if set, is the owner id that every health transition
	// of another owner's endpoint is announced to, as an operational event
	// (endpoint.failing, endpoint.disabled, endpoint.recovered) written to
	// OperationalTable by the statement that records the transition; a relay
	// (internal/ingest) publishes it from there. "" announces nothing.
	OperationalOwner string
	// OperationalChannel is the NOTIFY channel that wakes that relay.
	// Default: OperationalChannel(the pool's search_path).
	OperationalChannel string
	// Member is this process's member id (internal/partition): every lease
	// token it takes begins with LeasePrefix(Member), so that when it dies
	// the others can release its leases (ReleaseLeasesOf) instead of
	// waiting for them to expire.
	Member string
}

// OperationalTable is the dispatcher's own outbox of operational events
// (migration 013), in the dispatcher's schema.
const OperationalTable = "operational_outbox"

// OperationalChannel is the NOTIFY channel announcing new rows of
// OperationalTable in schema.
func OperationalChannel(schema string) string {
	if schema == "" {
		return "webhook_operational"
	}
	return schema + ".webhook_operational"
}

func (c *Config) setDefaults(pool *pgxpool.Pool) {
	setDefault := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	setDefault(&c.AttemptTimeout, 15*time.Second)
	setDefault(&c.LeaseTTL, 30*time.Second)
	setDefault(&c.LeaseLinger, 2*time.Second)
	setDefault(&c.BusySnooze, 2*time.Second)
	setDefault(&c.LocalWait, 5*time.Second)
	setDefault(&c.StallAfter, time.Second)
	setDefault(&c.MaxRetryAfter, time.Hour)
	setDefault(&c.RescueAfter, time.Minute)
	setDefault(&c.DisableAfter, DefaultDisableAfter)
	if c.ErrorBodyBytes <= 0 {
		c.ErrorBodyBytes = 256
	}
	var schema string
	if pool != nil {
		schema = pool.Config().ConnConfig.RuntimeParams["search_path"]
		if c.Channel == "" {
			c.Channel = LeaseChannel(schema)
		}
	}
	// Never empty: pg_notify refuses an empty channel, which would fail
	// the settle statement of every transition.
	if c.OperationalChannel == "" {
		c.OperationalChannel = OperationalChannel(schema)
	}
}

// LeaseChannel is the NOTIFY channel of the endpoint leases in schema.
func LeaseChannel(schema string) string {
	if schema == "" {
		return "webhook_lease"
	}
	return schema + ".webhook_lease"
}

// minSnooze keeps a receiver answering "Retry-After: 0" from spinning a job.
const minSnooze = time.Second

// renewMargin: a lease is extended before an attempt unless it will outlive
// the attempt by at least this much.
const renewMargin = 5 * time.Second

// Worker is the webhook.deliver worker: lease → sign → POST → classify →
// settle. It never retries by itself: every retry is River's. Work is the
// route of one delivery (route.go); the stages along it are the types named
// there, each in its own file.
type Worker struct {
	river.WorkerDefaults[job.DeliverArgs]
	*shared

	client  *http.Client
	keys    KeyOpener
	loads   *batch.Batcher[loadReq, loadRes]
	settles *batch.Batcher[settleReq, settleRes]
	// endpoints reads endpoints for direct deliveries (direct.go).
	endpoints *batch.Batcher[[]uuid.UUID, []*target]
	// recovered wakes the prober (probe.go) when a settlement here ended
	// an endpoint's failing state, so its held deliveries go at once.
	recovered chan struct{}

	// The stages of the route (route.go), each in the file named for it.
	rate    rateLimit   // ratelimit.go
	failing failingHold // failing.go
	pauses  pauses      // pause.go
	order   ordering    // ordered.go
	history history     // attempts.go
}

// shared is what the worker and its stages share. The configuration is read
// at each use, never copied into a stage.
type shared struct {
	cfg     Config
	pool    *pgxpool.Pool
	lanes   *lanes
	metrics *metrics.Metrics
	logger  *slog.Logger
	now     func() time.Time
}

// newStages returns a worker whose stages share sh, without the batchers a
// delivery's statements go through (NewWorker adds them).
func newStages(sh *shared) *Worker {
	return &Worker{
		shared:  sh,
		rate:    rateLimit{sh},
		failing: failingHold{sh},
		pauses:  pauses{sh},
		order:   ordering{shared: sh},
		history: history{sh},
	}
}

// KeyOpener opens an endpoint's sealed signing keys as read with the lease,
// for its scheme (HMAC secrets for v1, Ed25519 keys for v1a): the current key
// first, then the previous one during a rotation's grace period.
// endpoint.KeyOpener is the one implementation.
type KeyOpener interface {
	OpenSigningKeys(endpointID uuid.UUID, sealed seal.SigningKeys, now time.Time) (webhook.Keys, error)
	// OpenHeaders opens the endpoint's sealed custom headers (nil: none).
	OpenHeaders(endpointID uuid.UUID, sealed []byte) (http.Header, error)
}

// NewWorker builds the deliver worker. client must be the guarded egress
// client (internal/egress).
func NewWorker(cfg Config, pool *pgxpool.Pool, client *http.Client, keys KeyOpener, m *metrics.Metrics, logger *slog.Logger) *Worker {
	cfg.setDefaults(pool)
	w := newStages(&shared{
		cfg:     cfg,
		pool:    pool,
		lanes:   newLanes(cfg.LocalWaiters, LeasePrefix(cfg.Member)),
		metrics: m,
		logger:  logger,
		now:     time.Now,
	})
	w.client, w.keys, w.recovered = client, keys, make(chan struct{}, 1)
	w.lanes.stall = stallLimits{min: cfg.StallAfter, max: max(cfg.LocalWait, cfg.StallAfter), awayMin: cfg.BusySnooze, awayMax: cfg.AttemptTimeout}
	// A few statements in flight at once keep latency low when the pool is
	// busy; everything that arrives meanwhile waits for the next one.
	w.loads = batch.New(batch.Config{MaxSize: 500, MaxInFlight: 4}, func(ctx context.Context, reqs []loadReq) ([]loadRes, error) {
		return load(ctx, pool, cfg.LeaseTTL, cfg.Channel, reqs)
	})
	w.endpoints = batch.NewWeighted(batch.Config{MaxSize: 2000, MaxInFlight: 2}, func(ids []uuid.UUID) int { return len(ids) },
		func(ctx context.Context, reqs [][]uuid.UUID) ([][]*target, error) {
			return readEndpoints(ctx, pool, reqs)
		})
	w.settles = batch.New(batch.Config{MaxSize: 500, MaxInFlight: 2}, func(ctx context.Context, reqs []settleReq) ([]settleRes, error) {
		return settle(ctx, pool, cfg.DisableAfter, cfg.Channel, operational{owner: cfg.OperationalOwner, channel: cfg.OperationalChannel}, reqs)
	})
	return w
}

// Timeout covers the wait for the endpoint's turn plus one attempt.
func (w *Worker) Timeout(*river.Job[job.DeliverArgs]) time.Duration { return w.timeout() }

func (s *shared) timeout() time.Duration { return s.cfg.LocalWait + s.cfg.AttemptTimeout }

// NextRetry is the delivery retry schedule (see Schedule). A retry the
// attempt already planned (an ordered endpoint's head, whose followers are
// held until then) is the one returned.
func (w *Worker) NextRetry(j *river.Job[job.DeliverArgs]) time.Time {
	if at, ok := w.order.planned.LoadAndDelete(j.ID); ok {
		if t, ok := at.(time.Time); ok {
			return t
		}
	}
	return nextRetry(j, w.now())
}

// Run listens for lease announcements from other processes, releases
// leases that have lingered idle and runs recovery probing (probe.go), until
// ctx is done; then it releases every
// lease this process still holds idle. While it runs, idle lanes keep their
// lease for LeaseLinger. The composition root runs it beside River and
// cancels it once River has stopped.
func (w *Worker) Run(ctx context.Context) {
	var (
		wg        sync.WaitGroup
		listening atomic.Bool
	)
	defer func() {
		wg.Wait()
		w.lanes.setLinger(false)
		w.release(ctx, w.lanes.idle(time.Time{}))
	}()
	releaseAsync := func(leases map[uuid.UUID]uuid.UUID) {
		if len(leases) > 0 {
			wg.Go(func() { w.release(ctx, leases) })
		}
	}
	l := &pglisten.Listener{
		Pool:    w.pool,
		Channel: w.cfg.Channel,
		OnNotify: func(payload string) {
			kind, id, ok := strings.Cut(payload, ":")
			ep, err := uuid.Parse(id)
			if !ok || err != nil {
				return
			}
			switch kind {
			case "r":
				w.lanes.released(ep)
			case "w":
				if tok := w.lanes.wanted(ep); tok != uuid.Nil {
					releaseAsync(map[uuid.UUID]uuid.UUID{ep: tok})
				}
			}
		},
		// Lingering needs the announcements: without them another process
		// would wait out the linger for nothing.
		OnListen: func() { listening.Store(true); w.lanes.setLinger(true) },
		OnLost: func(error) {
			listening.Store(false)
			w.lanes.setLinger(false)
			releaseAsync(w.lanes.idle(time.Time{}))
		},
		Logger: w.logger.With(slog.String("component", "lease listener")),
	}
	wg.Go(func() { l.Run(ctx) })
	wg.Go(func() { w.probe(ctx) })

	ticker := time.NewTicker(max(w.cfg.LeaseLinger/4, 10*time.Millisecond))
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			if listening.Load() {
				releaseAsync(w.lanes.idle(time.Now().Add(-w.cfg.LeaseLinger)))
			}
			w.metrics.WorkersWaiting.Set(float64(w.lanes.waiting()))
		}
	}
}
