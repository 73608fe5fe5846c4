// Package metrics declares every Prometheus series the dispatcher exports, in
// one place, so names, labels and buckets stay consistent and bounded: no
// label ever carries an endpoint URL, an endpoint id or an event id.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Labels are the values of each bounded label, as the packages that emit
// them export them (internal/delivery, internal/job, internal/scope,
// internal/ingest, internal/partition); the composition root gathers them. New creates every
// series of them at 0, so that a dashboard or an alert finds 0 from the
// start instead of nothing until the first event (rate() over a series that
// appears mid-window misses its first increase, and absent series make
// ratios vanish). A value left out still counts when emitted; it just
// appears late.
type Labels struct {
	DeliveryOutcomes []string // "outcome" of dispatcher_deliveries_total
	StatusClasses    []string // "status_class" of the deliveries and the attempt durations
	SnoozeReasons    []string // "reason" of dispatcher_delivery_snoozes_total
	PauseReasons     []string // "reason" of dispatcher_endpoint_pauses_total
	ScopeRules       []string // "rule" of dispatcher_scope_decisions_total
	ScopeResults     []string // "result" of dispatcher_scope_decisions_total
	IngestPaths      []string // "path" of dispatcher_ingest_events_total and dispatcher_ingest_wait_seconds
	IngestResults    []string // "result" of dispatcher_ingest_events_total
	RescueKinds      []string // "kind" of dispatcher_jobs_rescued_total
	RefusalPorts     []string // "port" of dispatcher_refusals_total
	RefusalReasons   []string // "reason" of dispatcher_refusals_total
}

// Metrics holds the dispatcher's collectors. Construct it once per process
// (or per test) with New.
type Metrics struct {
	DeliveriesTotal        *prometheus.CounterVec
	AttemptDuration        *prometheus.HistogramVec
	DeliveryLag            prometheus.Histogram
	FirstAttemptDelay      prometheus.Histogram
	SnoozesTotal           *prometheus.CounterVec
	EndpointPausesTotal    *prometheus.CounterVec
	EgressBlockedTotal     prometheus.Counter
	EndpointsDisabledTotal prometheus.Counter
	// EndpointProbesTotal counts recovery probes: a failing endpoint's
	// waiting delivery sent ahead of its time to learn whether the receiver
	// is back; HeldReleasedTotal the waiting deliveries released when it
	// was (internal/delivery's probe.go).
	EndpointProbesTotal prometheus.Counter
	HeldReleasedTotal   prometheus.Counter
	// WorkersWaiting samples the deliver workers held by deliveries that
	// wait for their endpoint's turn (internal/delivery's lanes).
	WorkersWaiting      prometheus.Gauge
	FanoutEnqueuedTotal prometheus.Counter
	// FanoutHandedOffTotal counts the enqueued deliveries that went to this
	// process's deliver worker at once instead of waiting for River's fetch.
	FanoutHandedOffTotal prometheus.Counter
	// JobsRescuedTotal counts the jobs of dead replicas this process gave
	// back (internal/partition), by what they were: "running" (fetched and
	// running) or "handed_off" (a direct delivery not yet finished).
	JobsRescuedTotal    *prometheus.CounterVec
	FanoutDuration      prometheus.Histogram
	ScopeDecisionsTotal *prometheus.CounterVec
	IngestEventsTotal   *prometheus.CounterVec
	// The ingest path's group commit (internal/ingest): IngestWait is how
	// long an ingest call (a Publish, a PublishBatch, a relay batch) waited
	// for its group transaction to start, by path; IngestTransaction how
	// long one group transaction took; IngestGroupCalls how many calls
	// shared it. A call's time in the store is its wait plus its group's
	// transaction.
	IngestWait        *prometheus.HistogramVec
	IngestTransaction prometheus.Histogram
	IngestGroupCalls  prometheus.Histogram
	// CatalogInfo is 1 series per process: its catalog's digest, valued
	// with the number of types; CatalogReplicaCatalogs the distinct
	// catalogs among the live replicas (internal/catalogwatch).
	CatalogInfo            *prometheus.GaugeVec
	CatalogReplicaCatalogs prometheus.Gauge
	// IngestUnknownTypesTotal counts events of types in no catalog by type;
	// internal/ingest bounds the label's values (the rest count as "other").
	IngestUnknownTypesTotal *prometheus.CounterVec
	RelayBatchRows          prometheus.Histogram
	RelayLag                prometheus.Histogram
	RelayPoisonedTotal      prometheus.Counter
	RelayErrorsTotal        prometheus.Counter
	// The attempt history's writer (internal/attempt).
	AttemptHistoryWriteErrorsTotal prometheus.Counter
	AttemptHistoryDroppedTotal     prometheus.Counter
	// RefusalsTotal counts what the API and ops ports refused or cut off to
	// keep any one client from holding what others need (internal/connlimit
	// lists the reasons), by port (api, ops) and reason.
	RefusalsTotal *prometheus.CounterVec
}

// New creates the collectors, each series of known's values at 0, and
// registers them with reg.
func New(reg prometheus.Registerer, known Labels) *Metrics {
	latency := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 15}
	// The ingest path's waits are milliseconds or less when all is well.
	short := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}
	lag := []float64{.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 1800, 7200, 36000}
	m := &Metrics{
		DeliveriesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dispatcher_deliveries_total",
			Help: "Delivery attempts by outcome (completed, retryable, snoozed, cancelled, discarded) and HTTP status class (none when no response).",
		}, []string{"outcome", "status_class"}),
		AttemptDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dispatcher_delivery_attempt_duration_seconds",
			Help:    "Duration of one HTTP delivery attempt, by status class.",
			Buckets: latency,
		}, []string{"status_class"}),
		DeliveryLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dispatcher_delivery_lag_seconds",
			Help:    "End-to-end lag from an event's occurred_at to its 2xx delivery.",
			Buckets: lag,
		}),
		FirstAttemptDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dispatcher_delivery_first_attempt_delay_seconds",
			Help:    "Time from storing an event to the first delivery attempt.",
			Buckets: lag,
		}),
		SnoozesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dispatcher_delivery_snoozes_total",
			Help: "Deliveries put back without spending an attempt, by reason (lease_busy, retry_after, throttled, endpoint_paused, rate_limit, ordered).",
		}, []string{"reason"}),
		EndpointPausesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dispatcher_endpoint_pauses_total",
			Help: "Endpoint-wide pauses set because the receiver asked: retry_after (429/503 with Retry-After) or throttled (429s in a row without it).",
		}, []string{"reason"}),
		EgressBlockedTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dispatcher_egress_blocked_total",
			Help: "Deliveries refused because the destination address is internal (SSRF guard).",
		}),
		EndpointsDisabledTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dispatcher_endpoints_disabled_total",
			Help: "Endpoints disabled automatically after continuous failure.",
		}),
		EndpointProbesTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dispatcher_endpoint_probes_total",
			Help: "Recovery probes: a failing endpoint's waiting delivery sent ahead of its time to learn whether the receiver is back.",
		}),
		WorkersWaiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dispatcher_deliver_workers_waiting",
			Help: "Deliver workers held by deliveries waiting for their endpoint's turn (another delivery to it is in flight), sampled twice a second.",
		}),
		HeldReleasedTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dispatcher_endpoint_held_deliveries_released_total",
			Help: "Deliveries held by a failing endpoint (cool-down, retry steps) released at once because the endpoint recovered.",
		}),
		FanoutEnqueuedTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dispatcher_fanout_deliveries_enqueued_total",
			Help: "webhook.deliver jobs inserted by fanout.",
		}),
		FanoutHandedOffTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dispatcher_fanout_deliveries_handed_off_total",
			Help: "webhook.deliver jobs the inline fanout handed to this process's deliver worker at once, without River's fetch.",
		}),
		JobsRescuedTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dispatcher_jobs_rescued_total",
			Help: "Jobs of dead replicas this process made available again at once, by what they were (running, handed_off).",
		}, []string{"kind"}),
		FanoutDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dispatcher_fanout_duration_seconds",
			Help:    "Duration of one webhook.fanout job.",
			Buckets: latency,
		}),
		ScopeDecisionsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dispatcher_scope_decisions_total",
			Help: "Scope decisions per (event, endpoint), by rule and result.",
		}, []string{"rule", "result"}),
		IngestEventsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dispatcher_ingest_events_total",
			Help: "Events received, by path (where they came from: grpc, outbox, test) and result (stored, duplicate, dropped_internal, dropped_unknown, dropped_raw, invalid, conflict).",
		}, []string{"path", "result"}),
		IngestWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "dispatcher_ingest_wait_seconds",
			Help:    "Time an ingest call (Publish, PublishBatch, a relay batch) waited for its group transaction to start, by path (grpc, outbox, test, operational).",
			Buckets: short,
		}, []string{"path"}),
		IngestTransaction: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dispatcher_ingest_transaction_seconds",
			Help:    "Duration of one ingest group transaction, from taking a connection to its durable commit (with a conflict in the group, its calls' own transactions too).",
			Buckets: short,
		}),
		IngestGroupCalls: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dispatcher_ingest_group_calls",
			Help:    "Ingest calls stored together in one group transaction.",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024},
		}),
		CatalogInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dispatcher_catalog_types",
			Help: "Event types of this process's catalog (built-in ones included), labelled with the catalog's digest.",
		}, []string{"digest"}),
		CatalogReplicaCatalogs: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dispatcher_catalog_replica_catalogs",
			Help: "Distinct event catalogs among the live replicas, as this process last saw them: above 1, replicas may decide one event differently.",
		}),
		IngestUnknownTypesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dispatcher_ingest_unknown_types_total",
			Help: "Events whose type is in no catalog (dropped, or refused with -unknown-types=refuse), by type: the first 100 type names a process sees, then \"other\".",
		}, []string{"type"}),
		RelayBatchRows: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dispatcher_relay_batch_rows",
			Help:    "Outbox rows claimed per relay batch.",
			Buckets: []float64{0, 1, 5, 10, 25, 50, 100, 250, 500, 1000},
		}),
		RelayLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dispatcher_relay_lag_seconds",
			Help:    "Time from an outbox row's creation to its relay.",
			Buckets: lag,
		}),
		RelayPoisonedTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dispatcher_relay_poisoned_rows_total",
			Help: "Outbox rows set aside because they can never be valid.",
		}),
		RelayErrorsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dispatcher_relay_errors_total",
			Help: "Relay batches that failed (database errors); the rows are retried.",
		}),
		AttemptHistoryWriteErrorsTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dispatcher_attempt_history_write_errors_total",
			Help: "Attempt-history batches Postgres refused; they are kept and written with the next batch.",
		}),
		AttemptHistoryDroppedTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dispatcher_attempt_history_dropped_total",
			Help: "Attempts left out of the attempt history because too many were waiting for a database that could not take them (deliveries are unaffected).",
		}),
		RefusalsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dispatcher_refusals_total",
			Help: "Connections and requests the API and ops ports refused or cut off, by port (api, ops) and reason: address_connections, max_connections, unauthenticated_timeout, throttled, read_budget, too_large, open_calls, first_message_timeout.",
		}, []string{"port", "reason"}),
	}
	reg.MustRegister(
		m.DeliveriesTotal, m.AttemptDuration, m.DeliveryLag, m.FirstAttemptDelay,
		m.SnoozesTotal, m.EndpointPausesTotal, m.EgressBlockedTotal, m.EndpointsDisabledTotal,
		m.EndpointProbesTotal, m.HeldReleasedTotal, m.WorkersWaiting,
		m.FanoutEnqueuedTotal, m.FanoutHandedOffTotal, m.JobsRescuedTotal, m.FanoutDuration, m.ScopeDecisionsTotal,
		m.IngestEventsTotal, m.IngestWait, m.IngestTransaction, m.IngestGroupCalls, m.IngestUnknownTypesTotal, m.CatalogInfo, m.CatalogReplicaCatalogs, m.RelayBatchRows, m.RelayLag, m.RelayPoisonedTotal, m.RelayErrorsTotal,
		m.AttemptHistoryWriteErrorsTotal, m.AttemptHistoryDroppedTotal, m.RefusalsTotal,
	)
	for _, port := range known.RefusalPorts {
		for _, reason := range known.RefusalReasons {
			m.RefusalsTotal.WithLabelValues(port, reason)
		}
	}
	for _, class := range known.StatusClasses {
		m.AttemptDuration.WithLabelValues(class)
		for _, outcome := range known.DeliveryOutcomes {
			m.DeliveriesTotal.WithLabelValues(outcome, class)
		}
	}
	for _, reason := range known.SnoozeReasons {
		m.SnoozesTotal.WithLabelValues(reason)
	}
	for _, reason := range known.PauseReasons {
		m.EndpointPausesTotal.WithLabelValues(reason)
	}
	for _, kind := range known.RescueKinds {
		m.JobsRescuedTotal.WithLabelValues(kind)
	}
	for _, rule := range known.ScopeRules {
		for _, result := range known.ScopeResults {
			m.ScopeDecisionsTotal.WithLabelValues(rule, result)
		}
	}
	for _, path := range known.IngestPaths {
		m.IngestWait.WithLabelValues(path)
		for _, result := range known.IngestResults {
			m.IngestEventsTotal.WithLabelValues(path, result)
		}
	}
	return m
}

// RegisterRuntime adds the Go and process collectors.
func RegisterRuntime(reg prometheus.Registerer) {
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
}

// Sum adds up the values of every series c collects (counters and gauges):
// how many, whatever the labels. Since every known label value exists from
// the start, counting series says nothing; tests use this instead.
func Sum(c prometheus.Collector) float64 {
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(c); err != nil {
		return -1
	}
	mfs, err := reg.Gather()
	if err != nil {
		return -1
	}
	var sum float64
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}
