package ingest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/standmeet/webhook-dispatcher/internal/metrics"
	"github.com/standmeet/webhook-dispatcher/internal/pglisten"
	"github.com/standmeet/webhook-dispatcher/pkg/outbox"
	"github.com/standmeet/webhook-dispatcher/pkg/webhook"
)

// Relay defaults.
const (
	DefaultRelayBatchSize    = 500
	DefaultRelayPollInterval = time.Second
	DefaultOutboxTable       = outbox.DefaultTable

	// OutboxChannel is the NOTIFY channel of the outbox contract's trigger
	// (migrations/outbox).
	OutboxChannel = "webhook_outbox"
)

// RelayConfig configures a Relay. Zero values take the defaults.
type RelayConfig struct {
	// BatchSize is the most rows claimed per transaction (default 500).
	BatchSize int
	// PollInterval is the fallback wait when the outbox is drained and no
	// notification arrives (default 1s).
	PollInterval time.Duration
	// DeleteRelayed deletes relayed rows instead of setting relayed_at. Rows set
	// aside as invalid are kept either way, so an operator can inspect them.
	DeleteRelayed bool
	// Table is the outbox table, optionally schema-qualified
	// (default "webhook_outbox").
	Table string
	// Channel is the NOTIFY channel that announces new rows (default
	// OutboxChannel, the outbox contract's trigger).
	Channel string
	// Source is what the relayed events are stored and counted as (default
	// SourceOutbox). Only the main application's outbox relay, SourceOutbox,
	// records the dispatcher_outbox_* series, so they describe that outbox
	// alone; a relay of another source is seen through its ingest counts and
	// its log lines.
	Source Source
}

// Relay copies the main application's outbox rows into the dispatcher.
type Relay struct {
	cfg       RelayConfig
	configErr error
	logger    *slog.Logger
	metrics   *metrics.Metrics
	pool      *pgxpool.Pool
	store     *Store
	table     string // sanitised, ready to splice into SQL

	// Test hooks. beforeOutboxCommit runs after the dispatcher commit and
	// before the outbox commit; an error from it abandons the outbox
	// transaction, which is a crash between the two commits. listening
	// receives (without blocking) each time the listener is (re)subscribed.
	beforeOutboxCommit func() error
	listening          chan struct{}
}

// NewRelay returns a relay claiming rows from the outbox table in outboxPool
// (the main application's database, which may be the dispatcher's) and
// ingesting them through store. An invalid cfg is reported by Run.
func NewRelay(cfg RelayConfig, outboxPool *pgxpool.Pool, store *Store, m *metrics.Metrics, logger *slog.Logger) *Relay {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultRelayBatchSize
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultRelayPollInterval
	}
	if cfg.Table == "" {
		cfg.Table = DefaultOutboxTable
	}
	if cfg.Channel == "" {
		cfg.Channel = OutboxChannel
	}
	if cfg.Source == "" {
		cfg.Source = SourceOutbox
	}
	r := &Relay{
		cfg:     cfg,
		logger:  logger,
		metrics: m,
		pool:    outboxPool,
		store:   store,
	}
	table, err := outbox.QuoteTable(cfg.Table)
	if err != nil {
		r.configErr = fmt.Errorf("outbox relay: %w", err)
	}
	r.table = table
	return r
}

// ValidateOutboxTable reports whether name can be RelayConfig.Table: the
// rule pkg/outbox's writer applies (outbox.QuoteTable).
func ValidateOutboxTable(name string) error {
	_, err := outbox.QuoteTable(name)
	return err
}

// Run relays until ctx is done, then returns nil. Database errors, on either
// side, are logged, counted and retried after a bounded backoff: Run survives
// Postgres restarts. It returns an error only for an invalid configuration.
func (r *Relay) Run(ctx context.Context) error {
	if r.configErr != nil {
		return r.configErr
	}

	wake := make(chan struct{}, 1)
	var wg sync.WaitGroup
	wg.Go(func() { r.listen(ctx, wake) })
	defer wg.Wait()

	failures := 0
	for {
		claimed, err := r.relayBatch(ctx)
		if ctx.Err() != nil {
			return nil
		}

		wait, wakeCh := r.cfg.PollInterval, (<-chan struct{})(wake)
		switch {
		case err != nil:
			failures++
			if r.outboxMetrics() {
				r.metrics.RelayErrorsTotal.Inc()
			}
			wait = pglisten.Backoff(failures)
			// A notification must not cut the backoff short, or a flapping
			// database and a busy outbox would make a hot loop.
			wakeCh = nil
			r.logger.WarnContext(ctx, "outbox relay: batch failed; will retry",
				slog.Any("error", err), slog.Duration("retry_in", wait))
		case claimed >= r.cfg.BatchSize:
			// A full batch: more rows are likely waiting, drain before waiting.
			failures = 0
			continue
		default:
			failures = 0
		}

		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-wakeCh:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// outboxMetrics reports whether this relay records the dispatcher_outbox_*
// series (see RelayConfig.Source).
func (r *Relay) outboxMetrics() bool { return r.cfg.Source == SourceOutbox }

// outboxRow is one claimed row of the outbox table.
type outboxRow struct {
	id         int64
	eventID    string
	ownerID    string
	typ        string
	subject    string
	occurredAt time.Time
	data       string
	lagSeconds float64
	// span is the row's trace, from its claim to the commit.
	span trace.Span
}

func (row *outboxRow) event() *webhook.Event {
	// jsonb renders with spaces after ':' and ','; the size limit is about
	// what the publisher wrote, so measure (and later sign) the compact form,
	// which is what pkg/outbox checks too.
	data := []byte(row.data)
	var buf bytes.Buffer
	if err := json.Compact(&buf, data); err == nil {
		data = buf.Bytes()
	}
	return &webhook.Event{
		ID:         row.eventID,
		OwnerID:    row.ownerID,
		Type:       row.typ,
		Subject:    row.subject,
		OccurredAt: row.occurredAt,
		Data:       data,
	}
}

// setAside is a claimed row that can never be relayed, and why.
type setAside struct {
	rowID   int64
	eventID string
	reason  string
}

// relayBatch claims one batch of rows and relays it, returning how many rows
// it claimed. Nothing is marked unless the dispatcher side committed first.
func (r *Relay) relayBatch(ctx context.Context) (_ int, err error) {
	tx, err := r.pool.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin outbox transaction: %w", err)
	}
	// A no-op after Commit. With ctx done pgx closes the connection instead,
	// which rolls back just the same.
	defer func() { _ = tx.Rollback(ctx) }()

	// SKIP LOCKED, not a cursor: concurrent relays (replicas) each take rows
	// nobody else holds, and a row whose relay died is simply claimed again.
	// The lag is computed by the outbox's own clock, so skew between hosts
	// doesn't distort it.
	rows, err := tx.Query(ctx, `
		SELECT id, event_id, owner_id, type, subject,
		       -- Clamped so that 'infinity' (which time.Time cannot hold) scans
		       -- and fails validation instead of failing every batch.
		       least(greatest(occurred_at, '1000-01-01 00:00:00+00'), '9999-12-31 23:59:59+00'),
		       data::text,
		       extract(epoch FROM clock_timestamp() - created_at)::float8
		FROM `+r.table+`
		WHERE relayed_at IS NULL AND error IS NULL
		ORDER BY id
		LIMIT $1
		FOR UPDATE SKIP LOCKED`, r.cfg.BatchSize)
	if err != nil {
		return 0, fmt.Errorf("claim outbox rows: %w", err)
	}
	claimed, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outboxRow, error) {
		var o outboxRow
		err := row.Scan(&o.id, &o.eventID, &o.ownerID, &o.typ, &o.subject, &o.occurredAt, &o.data, &o.lagSeconds)
		return o, err
	})
	if err != nil {
		return 0, fmt.Errorf("claim outbox rows: %w", err)
	}
	if r.outboxMetrics() {
		r.metrics.RelayBatchRows.Observe(float64(len(claimed)))
	}
	if len(claimed) == 0 {
		return 0, nil
	}

	// Commits the dispatcher side. An invalid row, or one whose id is reused
	// with different content, is set aside, never allowed to fail the batch
	// (so it cannot block the rows behind it), and the rest is tried again;
	// each retry removes at least one row, so this ends.
	pending := make([]*outboxRow, len(claimed))
	events := make([]*webhook.Event, len(claimed))
	for i := range claimed {
		pending[i], events[i] = &claimed[i], claimed[i].event()
	}
	traced := r.startRowSpans(ctx, claimed)
	defer func() {
		for i := range claimed {
			failSpan(claimed[i].span, err)
			claimed[i].span.End()
		}
	}()
	var aside []setAside
	for len(events) > 0 {
		var traces []trace.SpanContext
		if traced {
			traces = make([]trace.SpanContext, len(pending))
			for i, row := range pending {
				traces[i] = row.span.SpanContext()
			}
		}
		_, err := r.store.ingest(ctx, r.cfg.Source, events, traces, nil)
		if err == nil {
			break
		}
		var (
			conflict *ConflictError
			invalid  *InvalidEventsError
			drop     []int
		)
		switch {
		case errors.As(err, &invalid):
			for _, iv := range invalid.Invalid {
				drop = append(drop, iv.Index)
				pending[iv.Index].span.SetStatus(codes.Error, "set aside: invalid")
				aside = append(aside, setAside{rowID: pending[iv.Index].id, eventID: pending[iv.Index].eventID, reason: iv.Err.Error()})
			}
		case errors.As(err, &conflict):
			for _, c := range conflict.Conflicts {
				drop = append(drop, c.Index)
				pending[c.Index].span.SetStatus(codes.Error, "set aside: event id reused")
				aside = append(aside, setAside{rowID: pending[c.Index].id, eventID: c.EventID,
					reason: fmt.Sprintf("event id %q already stored with different content; an event id must not be reused", c.EventID)})
			}
		default:
			return len(claimed), err
		}
		slices.Sort(drop)
		for _, idx := range slices.Backward(drop) {
			pending = slices.Delete(pending, idx, idx+1)
			events = slices.Delete(events, idx, idx+1)
		}
	}

	if len(pending) > 0 {
		ids := make([]int64, len(pending))
		for i, row := range pending {
			ids[i] = row.id
		}
		sql := `UPDATE ` + r.table + ` SET relayed_at = now() WHERE id = ANY($1)`
		if r.cfg.DeleteRelayed {
			sql = `DELETE FROM ` + r.table + ` WHERE id = ANY($1)`
		}
		if _, err := tx.Exec(ctx, sql, ids); err != nil {
			return len(claimed), fmt.Errorf("mark outbox rows relayed: %w", err)
		}
	}
	if len(aside) > 0 {
		ids := make([]int64, len(aside))
		reasons := make([]string, len(aside))
		for i, a := range aside {
			ids[i], reasons[i] = a.rowID, a.reason
		}
		_, err := tx.Exec(ctx, `
			UPDATE `+r.table+` AS o SET error = a.reason
			FROM unnest($1::bigint[], $2::text[]) AS a(id, reason)
			WHERE o.id = a.id`, ids, reasons)
		if err != nil {
			return len(claimed), fmt.Errorf("mark outbox rows invalid: %w", err)
		}
	}

	if r.beforeOutboxCommit != nil {
		if err := r.beforeOutboxCommit(); err != nil {
			return len(claimed), err
		}
	}
	// If this commit fails the rows are claimed again later and re-ingested,
	// which the idempotent insert turns into duplicates.
	if err := tx.Commit(ctx); err != nil {
		return len(claimed), fmt.Errorf("commit outbox transaction: %w", err)
	}

	for _, row := range pending {
		if r.outboxMetrics() {
			r.metrics.RelayLag.Observe(max(row.lagSeconds, 0))
		}
	}
	for _, a := range aside {
		// Counted as invalid or conflicting ingests by the store already.
		if r.outboxMetrics() {
			r.metrics.RelayPoisonedTotal.Inc()
		}
		r.logger.WarnContext(ctx, "outbox relay: row set aside",
			slog.Int64("outbox_id", a.rowID), slog.String("event_id", a.eventID), slog.String("reason", a.reason))
	}
	return len(claimed), nil
}

// startRowSpans starts one root span per claimed row and reports whether
// they are traced. A row is an event of its own, relayed with the others only
// because they were committed at about the same time, so each starts its own
// trace, which its fanout and deliveries carry on.
func (r *Relay) startRowSpans(ctx context.Context, rows []outboxRow) bool {
	for i := range rows {
		//nolint:spancheck // relayBatch ends every row's span
		_, rows[i].span = tracer.Start(ctx, "outbox.relay", trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindConsumer),
			trace.WithAttributes(attribute.String("dispatcher.event_id", rows[i].eventID), attribute.Int64("dispatcher.outbox.row_id", rows[i].id)))
	}
	return len(rows) > 0 && rows[0].span.SpanContext().IsValid()
}

// listen keeps a LISTEN subscription and signals wake on each notification,
// and after each (re)subscription: rows committed while nobody listened sent
// their notification to no one.
func (r *Relay) listen(ctx context.Context, wake chan<- struct{}) {
	l := &pglisten.Listener{
		Pool:     r.pool,
		Channel:  r.cfg.Channel,
		OnNotify: func(string) { signal(wake) },
		OnListen: func() {
			signal(wake)
			if r.listening != nil {
				signal(r.listening)
			}
		},
		Logger: r.logger.With(slog.String("component", string(r.cfg.Source)+" relay")),
	}
	l.Run(ctx)
}

// signal sends on ch unless a signal is already pending: any number of
// notifications while the relay is busy collapse into one more pass.
func signal(ch chan<- struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
