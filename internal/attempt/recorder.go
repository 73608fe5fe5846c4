package attempt

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/standmeet/webhook-dispatcher/internal/metrics"
)

// DefaultBodyBytes is how much of a response body is kept by default.
const DefaultBodyBytes = 1024

// RecorderConfig tunes a Recorder. Zero values take the defaults, except
// BodyBytes.
type RecorderConfig struct {
	// BodyBytes is how much of each response body is kept (at most
	// DefaultBodyBytes is sensible); 0 keeps none.
	BodyBytes int
	// FlushInterval is how often buffered attempts are written. Default 2 s:
	// the longest an attempt takes to show up, and what a crash can lose.
	// Each batch updates two bucket rows per endpoint it touched, so fewer,
	// larger batches cost less per attempt (BenchmarkWrite: 16 µs of
	// statement time and 400 WAL bytes per attempt in batches of 400 over
	// 100 endpoints, 9 µs and 300 bytes in batches of 2,000).
	FlushInterval time.Duration
	// MaxBatch is the most attempts one statement writes; a buffer this full
	// is written at once. Default 2,000.
	MaxBatch int
	// MaxBuffered bounds the attempts held while the database cannot take
	// them; beyond it the oldest are dropped (and counted in the log).
	// Default 100,000.
	MaxBuffered int
	// MaxBufferedBytes bounds the same attempts by their size in memory
	// (Size: a fixed cost plus the body, error and ids they carry); beyond
	// it the oldest are dropped too. Default DefaultMaxBufferedBytes: the
	// count alone would let 100,000 attempts with 1 KiB bodies hold about
	// 130 MB.
	MaxBufferedBytes int
	// Metrics, if set, counts refused batches and dropped attempts
	// (dispatcher_attempt_history_*), so that an alert, not only a log
	// line, says the history has gaps.
	Metrics *metrics.Metrics
}

// Recorder buffers attempts and writes them in batches (see the package
// doc). Record never blocks on the database. Run writes; without it nothing
// is written but what Flush writes.
type Recorder struct {
	cfg    RecorderConfig
	pool   *pgxpool.Pool
	logger *slog.Logger

	mu  sync.Mutex
	buf []Attempt
	// filtered counts the events filters kept from endpoints, per bucket,
	// until they are written with the next batch (CountFiltered).
	filtered map[bucketKey]int64
	// bytes is the Size of the attempts in buf.
	bytes   int
	dropped int
	full    chan struct{}
	// flushing serializes writers, so batches go out in order.
	flushing sync.Mutex
}

// NewRecorder returns a Recorder writing to pool.
func NewRecorder(cfg RecorderConfig, pool *pgxpool.Pool, logger *slog.Logger) *Recorder {
	if cfg.FlushInterval <= 0 {
		cfg.FlushInterval = 2 * time.Second
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = 2000
	}
	if cfg.MaxBuffered <= 0 {
		cfg.MaxBuffered = 100_000
	}
	if cfg.MaxBufferedBytes <= 0 {
		cfg.MaxBufferedBytes = DefaultMaxBufferedBytes
	}
	cfg.BodyBytes = max(cfg.BodyBytes, 0)
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Recorder{cfg: cfg, pool: pool, logger: logger, full: make(chan struct{}, 1)}
}

// BodyBytes is how much of a response body an attempt should carry.
func (r *Recorder) BodyBytes() int { return r.cfg.BodyBytes }

// Record queues one attempt for the next batch.
func (r *Recorder) Record(a Attempt) {
	// Error texts quote what the receiver sent; text columns take neither
	// NUL nor invalid UTF-8.
	a.Body, a.Error = safeText(a.Body), safeText(a.Error)
	size := Size(&a)
	r.mu.Lock()
	if len(r.buf) >= r.cfg.MaxBuffered || r.bytes+size > r.cfg.MaxBufferedBytes {
		// The oldest tenth at once (by count, or by bytes), so that a long
		// outage does not move the whole buffer on every attempt.
		n, freed := 0, 0
		for n < len(r.buf) && (n < max(r.cfg.MaxBuffered/10, 1) || r.bytes-freed+size > r.cfg.MaxBufferedBytes*9/10) {
			freed += Size(&r.buf[n])
			n++
		}
		r.buf = slices.Delete(r.buf, 0, n)
		r.bytes -= freed
		r.drop(n)
	}
	r.buf = append(r.buf, a)
	r.bytes += size
	full := len(r.buf) >= r.cfg.MaxBatch
	r.mu.Unlock()
	if full {
		select {
		case r.full <- struct{}{}:
		default:
		}
	}
}

// MaxFilteredBuckets bounds the buckets of filtered counts held while the
// database cannot take them (two per endpoint and minute); beyond it new
// counts are dropped, like attempts beyond MaxBuffered.
const MaxFilteredBuckets = 100_000

// CountFiltered counts one event that the filters of endpointIDs (canonical
// UUIDs; others are ignored) kept from them, at time at, in their
// endpoint_stats buckets: written with the next batch of attempts, as the
// attempts are, and never blocking on the database.
func (r *Recorder) CountFiltered(endpointIDs []string, at time.Time) {
	if len(endpointIDs) == 0 {
		return
	}
	at = at.UTC()
	minute, hour := at.Truncate(time.Minute), at.Truncate(time.Hour)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.filtered == nil {
		r.filtered = make(map[bucketKey]int64)
	}
	for _, s := range endpointIDs {
		id, err := uuid.Parse(s)
		if err != nil {
			continue
		}
		for _, k := range []bucketKey{{endpoint: id, span: SpanMinute, start: minute}, {endpoint: id, span: SpanHour, start: hour}} {
			if _, ok := r.filtered[k]; !ok && len(r.filtered) >= MaxFilteredBuckets {
				continue
			}
			r.filtered[k]++
		}
	}
}

// Run writes buffered attempts every FlushInterval, and a full batch as soon
// as MaxBatch are waiting, until ctx ends, then writes what is left, for at
// most 10 s. The composition root cancels ctx once River has stopped, so
// the last attempts are written too.
func (r *Recorder) Run(ctx context.Context) {
	ticker := time.NewTicker(r.cfg.FlushInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := r.Flush(fctx); err != nil {
				r.logger.WarnContext(fctx, "attempt history: last batch not written", slog.Any("error", err))
			}
			return
		case <-ticker.C:
			err := r.flush(ctx, false)
			if err != nil && ctx.Err() == nil {
				r.logger.WarnContext(ctx, "attempt history: batch not written, kept for the next try", slog.Any("error", err))
			}
			continue
		case <-r.full:
		}
		// Only full batches: the attempts that arrived while one was written
		// wait for the next full batch or tick instead of going out as a
		// small batch of their own, which would update as many bucket rows
		// as a full one (at 2,600 attempts/s that halved the average batch).
		if err := r.flush(ctx, true); err != nil && ctx.Err() == nil {
			r.logger.WarnContext(ctx, "attempt history: batch not written, kept for the next try", slog.Any("error", err))
		}
	}
}

// Flush writes every buffered attempt, MaxBatch per statement. A batch that
// fails goes back to the front of the buffer for the next try.
func (r *Recorder) Flush(ctx context.Context) error { return r.flush(ctx, false) }

// flush writes the attempts buffered when it is called, MaxBatch per
// statement: all of them, or with fullOnly only the full batches. Attempts
// recorded meanwhile wait for the next call, so a flush is bounded even
// while they arrive faster than they are written; a failed batch ends it.
func (r *Recorder) flush(ctx context.Context, fullOnly bool) error {
	r.flushing.Lock()
	defer r.flushing.Unlock()
	r.mu.Lock()
	rounds := len(r.buf)/r.cfg.MaxBatch + 1
	r.mu.Unlock()
	for range rounds {
		r.mu.Lock()
		n := min(len(r.buf), r.cfg.MaxBatch)
		if fullOnly && n < r.cfg.MaxBatch {
			n = 0
		}
		batch := slices.Clone(r.buf[:n])
		r.buf = slices.Delete(r.buf, 0, n)
		r.bytes -= sizeOf(batch)
		dropped := r.dropped
		r.dropped = 0
		// Filtered counts go with a batch of attempts, or alone at a tick.
		var filtered map[bucketKey]int64
		if n > 0 || !fullOnly {
			filtered, r.filtered = r.filtered, nil
		}
		r.mu.Unlock()
		if dropped > 0 {
			r.logger.WarnContext(ctx, "attempt history: dropped attempts the database could not take in time", slog.Int("count", dropped))
		}
		if n == 0 && len(filtered) == 0 {
			return nil
		}
		if err := write(ctx, r.pool, batch, filtered); err != nil {
			r.mu.Lock()
			r.restoreFiltered(filtered)
			r.buf = append(batch, r.buf...)
			r.bytes += sizeOf(batch)
			over := max(len(r.buf)-r.cfg.MaxBuffered, 0)
			for over < len(r.buf) && r.bytes-sizeOf(r.buf[:over]) > r.cfg.MaxBufferedBytes {
				over++
			}
			if over > 0 {
				r.bytes -= sizeOf(r.buf[:over])
				r.buf = slices.Delete(r.buf, 0, over)
				r.drop(over)
			}
			r.mu.Unlock()
			if r.cfg.Metrics != nil {
				r.cfg.Metrics.AttemptHistoryWriteErrorsTotal.Inc()
			}
			return err
		}
		if n < r.cfg.MaxBatch {
			return nil
		}
	}
	return nil
}

// restoreFiltered puts back counts a failed write took; r.mu is held.
func (r *Recorder) restoreFiltered(filtered map[bucketKey]int64) {
	if len(filtered) == 0 {
		return
	}
	if r.filtered == nil {
		r.filtered = make(map[bucketKey]int64, len(filtered))
	}
	for k, n := range filtered {
		if _, ok := r.filtered[k]; ok || len(r.filtered) < MaxFilteredBuckets {
			r.filtered[k] += n
		}
	}
}

// DefaultMaxBufferedBytes is RecorderConfig.MaxBufferedBytes's default.
const DefaultMaxBufferedBytes = 16 << 20

// attemptFixedBytes is what an Attempt holds besides its strings' bytes:
// the struct (its fields and string headers, about 200 bytes) in the
// buffer's backing array, and the array's spare capacity.
const attemptFixedBytes = 256

// Size is the memory a buffered attempt is counted for.
func Size(a *Attempt) int {
	return attemptFixedBytes + len(a.OwnerID) + len(a.EventID) + len(a.Body) + len(a.Error) + len(a.SnoozeReason)
}

func sizeOf(as []Attempt) int {
	n := 0
	for i := range as {
		n += Size(&as[i])
	}
	return n
}

// drop counts n attempts dropped from the buffer; r.mu is held.
func (r *Recorder) drop(n int) {
	r.dropped += n
	if r.cfg.Metrics != nil {
		r.cfg.Metrics.AttemptHistoryDroppedTotal.Add(float64(n))
	}
}

// Bucket spans of endpoint_stats, in seconds.
const (
	SpanMinute = 60
	SpanHour   = 3600
)

// counters is one bucket's row: the counts in column order, then the
// latency histogram.
type counters [counterColumns]int64

// counterNames are endpoint_stats' count columns, in counters order (the
// latency columns follow).
var counterNames = []string{"attempts", "successes", "http_4xx", "http_5xx", "http_other", "timeouts", "connection", "blocked", "retry_after"}

const counterColumns = 9 + LatencyBuckets

// outcomeColumn is the counters index an outcome counts in.
func outcomeColumn(o Outcome) int {
	if o < OutcomeSuccess || o > OutcomeRetryAfter {
		return -1
	}
	return int(o)
}

func (c *counters) add(a *Attempt) {
	c[0]++
	if i := outcomeColumn(a.Outcome); i > 0 {
		c[i]++
	}
	// A refused destination was never asked, so it has no latency.
	if a.Outcome != OutcomeBlocked {
		c[len(counterNames)+latencyBucket(a.Duration)]++
	}
}

type bucketKey struct {
	endpoint uuid.UUID
	span     int32
	start    time.Time
}

// statsColumns lists the columns of endpoint_stats after the key.
func statsColumns() []string {
	cols := slices.Clone(counterNames)
	for i := range LatencyBuckets {
		cols = append(cols, "lat_"+strconv.Itoa(i))
	}
	return cols
}

// writeSQL inserts a batch of attempts and adds them to their endpoints'
// buckets in one statement (one commit). The buckets are added in key order
// so concurrent writers lock shared rows in the same order.
var writeSQL = func() string {
	cols := statsColumns()
	var sel, set []string
	for i, c := range cols {
		sel = append(sel, fmt.Sprintf("($16::bigint[])[(g.n - 1) * %d + %d]", len(cols), i+1))
		set = append(set, fmt.Sprintf("%s = endpoint_stats.%s + excluded.%s", c, c, c))
	}
	return `
WITH a AS (
    INSERT INTO delivery_attempts (delivery_id, attempt, owner_id, endpoint_id, event_id, started_at, duration_us,
                                   outcome, http_status, response_body, error, snooze_reason, snoozed_until, probes, probe)
    SELECT * FROM unnest($1::bigint[], $2::int[], $3::text[], $4::uuid[], $5::text[], $6::timestamptz[], $7::bigint[],
                         $8::text[], $9::int[], $10::text[], $11::text[], $17::text[], $12::timestamptz[], $18::int[], $19::bool[])
)
INSERT INTO endpoint_stats (endpoint_id, span, bucket, ` + strings.Join(cols, ", ") + `, filtered)
SELECT g.endpoint_id, g.span, g.bucket, ` + strings.Join(sel, ", ") + `, ($20::bigint[])[g.n]
  FROM unnest($13::uuid[], $14::int[], $15::timestamptz[]) WITH ORDINALITY AS g(endpoint_id, span, bucket, n)
 ORDER BY g.n
    ON CONFLICT (endpoint_id, span, bucket) DO UPDATE SET ` + strings.Join(set, ", ") + `, filtered = endpoint_stats.filtered + excluded.filtered`
}()

// execer is a pool or one of its connections.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// write records one batch, and the filtered counts given (nil for none).
func write(ctx context.Context, db execer, batch []Attempt, filtered map[bucketKey]int64) error {
	if _, err := db.Exec(ctx, writeSQL, writeArgs(batch, filtered)...); err != nil {
		return fmt.Errorf("record %d attempts: %w", len(batch), err)
	}
	return nil
}

// writeArgs are writeSQL's arguments for batch and filtered.
func writeArgs(batch []Attempt, filtered map[bucketKey]int64) []any {
	n := len(batch)
	var (
		deliveries = make([]int64, n)
		numbers    = make([]int32, n)
		owners     = make([]string, n)
		endpoints  = make([]uuid.UUID, n)
		events     = make([]string, n)
		starts     = make([]time.Time, n)
		durations  = make([]int64, n)
		outcomes   = make([]string, n)
		statuses   = make([]int32, n)
		bodies     = make([]string, n)
		errs       = make([]string, n)
		until      = make([]*time.Time, n)
		reasons    = make([]*string, n)
		probes     = make([]int32, n)
		probe      = make([]bool, n)
		buckets    = make(map[bucketKey]*counters)
	)
	for i := range batch {
		a := &batch[i]
		deliveries[i], numbers[i], owners[i], endpoints[i], events[i] = a.DeliveryID, int32(a.Number), a.OwnerID, a.EndpointID, a.EventID
		starts[i], durations[i], outcomes[i], statuses[i] = a.StartedAt, a.Duration.Microseconds(), a.Outcome.String(), int32(a.Status)
		bodies[i], errs[i], until[i] = a.Body, a.Error, a.SnoozedUntil
		probes[i], probe[i] = int32(a.Probes), a.Probe
		if a.SnoozeReason != "" {
			reasons[i] = &a.SnoozeReason
		}
		for _, span := range []int32{SpanMinute, SpanHour} {
			k := bucketKey{endpoint: a.EndpointID, span: span, start: a.StartedAt.UTC().Truncate(time.Duration(span) * time.Second)}
			c := buckets[k]
			if c == nil {
				c = new(counters)
				buckets[k] = c
			}
			c.add(a)
		}
	}
	for k := range filtered {
		if buckets[k] == nil {
			buckets[k] = new(counters)
		}
	}
	keys := make([]bucketKey, 0, len(buckets))
	for k := range buckets {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(x, y bucketKey) int {
		return cmp.Or(bytes.Compare(x.endpoint[:], y.endpoint[:]), cmp.Compare(x.span, y.span), x.start.Compare(y.start))
	})
	var (
		bEndpoints = make([]uuid.UUID, len(keys))
		bSpans     = make([]int32, len(keys))
		bStarts    = make([]time.Time, len(keys))
		bCounts    = make([]int64, 0, len(keys)*counterColumns)
		bFiltered  = make([]int64, len(keys))
	)
	for i, k := range keys {
		bEndpoints[i], bSpans[i], bStarts[i] = k.endpoint, k.span, k.start
		bCounts = append(bCounts, buckets[k][:]...)
		bFiltered[i] = filtered[k]
	}
	return []any{deliveries, numbers, owners, endpoints, events, starts, durations,
		outcomes, statuses, bodies, errs, until, bEndpoints, bSpans, bStarts, bCounts, reasons, probes, probe, bFiltered}
}
