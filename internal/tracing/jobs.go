package tracing

import (
	"bytes"
	"context"
	"encoding/json"
	"maps"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"github.com/riverqueue/rivercontrib/otelriver"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Metadata keys of a job's trace context: W3C trace context, as otelriver
// writes them.
const (
	keyTraceparent = "traceparent"
	keyTracestate  = "tracestate"
)

// RiverMiddleware returns River's middleware for p: nil when tracing is off,
// so that River runs exactly as without tracing. When on, a river.work span
// per job run (rivercontrib's otelriver, kind-suffixed, e.g.
// river.work/webhook.deliver) and a river.insert_many span per insert, inside
// JobContext, which makes each run's span a child of the trace the job was
// enqueued in.
func (p *Provider) RiverMiddleware() []rivertype.Middleware {
	if !p.Enabled() {
		return nil
	}
	return []rivertype.Middleware{
		&JobContext{},
		otelriver.NewMiddleware(&otelriver.MiddlewareConfig{
			TracerProvider:              p.tp,
			EnableWorkSpanJobKindSuffix: true,
			// JobContext carries the trace instead: otelriver's would stamp
			// every job of a statement with that statement's span, and links
			// its runs to it rather than making them children.
			EnableTracePropagation: false,
		}),
	}
}

// JobContext is the River middleware that carries traces across jobs. On
// insert it writes the inserting context's trace into the metadata of every
// job that has none of its own (JobMetadata); on work it makes the job's
// trace the parent of everything the run does. It must come before otelriver
// so that the river.work span is that child.
//
// A job keeps its trace over all its attempts, so a retry days later is still
// in the trace of the Publish that caused it: the point is to follow one
// event to each of its delivery attempts.
type JobContext struct {
	river.MiddlewareDefaults
}

// InsertMany implements rivertype.JobInsertMiddleware.
func (*JobContext) InsertMany(ctx context.Context, params []*rivertype.JobInsertParams, doInner func(context.Context) ([]*rivertype.JobInsertResult, error)) ([]*rivertype.JobInsertResult, error) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return doInner(ctx)
	}
	var md []byte
	for _, p := range params {
		if bytes.Contains(p.Metadata, []byte(`"`+keyTraceparent+`"`)) {
			continue
		}
		if md == nil {
			md = JobMetadata(sc)
		}
		p.Metadata = mergeMetadata(p.Metadata, md)
	}
	return doInner(ctx)
}

// Work implements rivertype.WorkerMiddleware.
func (*JobContext) Work(ctx context.Context, job *rivertype.JobRow, doInner func(context.Context) error) error {
	if sc := jobSpanContext(job.Metadata); sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return doInner(ctx)
}

// JobMetadata is the job metadata that puts a job in sc's trace, for
// river.InsertOpts.Metadata; nil when sc is not valid (tracing off, or not
// sampled into a trace).
func JobMetadata(sc trace.SpanContext) []byte {
	if !sc.IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
	b, err := json.Marshal(carrier)
	if err != nil {
		return nil
	}
	return b
}

// mergeMetadata adds the keys of md (a JSON object) to metadata (a JSON
// object, possibly empty).
func mergeMetadata(metadata, md []byte) []byte {
	if len(bytes.TrimSpace(metadata)) == 0 || bytes.Equal(bytes.TrimSpace(metadata), []byte("{}")) {
		return md
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(metadata, &m); err != nil {
		return metadata
	}
	var add map[string]json.RawMessage
	if err := json.Unmarshal(md, &add); err != nil {
		return metadata
	}
	maps.Copy(m, add)
	b, err := json.Marshal(m)
	if err != nil {
		return metadata
	}
	return b
}

// jobSpanContext reads the trace context from a job's metadata.
func jobSpanContext(metadata []byte) trace.SpanContext {
	if !bytes.Contains(metadata, []byte(`"`+keyTraceparent+`"`)) {
		return trace.SpanContext{}
	}
	var m struct {
		Traceparent string `json:"traceparent"`
		Tracestate  string `json:"tracestate"`
	}
	if err := json.Unmarshal(metadata, &m); err != nil {
		return trace.SpanContext{}
	}
	carrier := propagation.MapCarrier{keyTraceparent: m.Traceparent}
	if m.Tracestate != "" {
		carrier[keyTracestate] = m.Tracestate
	}
	return trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
}
