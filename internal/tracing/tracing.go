// Package tracing turns OpenTelemetry tracing on from the standard OTEL_*
// environment variables, and carries a trace through the pipeline: from
// Publish (or an outbox row) through fanout to every delivery attempt, across
// the River jobs in between.
//
// Tracing is off unless asked for. When it is off nothing here is installed:
// the global tracer stays OpenTelemetry's no-op, and the spans the pipeline
// starts cost a context allocation each and are never recorded.
//
// A job carries the trace it belongs to in its metadata, as W3C trace
// context under "traceparent" (and "tracestate"), the keys otelriver uses.
// Where one statement inserts the jobs of many traces (the group-committed
// ingest, internal/batch), each job is given its own event's trace context
// (JobMetadata) rather than the statement's; jobs inserted without one take
// the trace of the context they were inserted in (Middleware).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// ServiceName is the service.name of the dispatcher's spans unless
// OTEL_SERVICE_NAME (or service.name in OTEL_RESOURCE_ATTRIBUTES) says
// otherwise.
const ServiceName = "dispatcher"

// Protocols of the OTLP exporter (OTEL_EXPORTER_OTLP_PROTOCOL).
const (
	ProtocolGRPC         = "grpc"
	ProtocolHTTPProtobuf = "http/protobuf"
)

// Config is what the OTEL_* variables ask for.
type Config struct {
	// Enabled: export traces with OTLP.
	Enabled bool
	// Protocol is ProtocolGRPC or ProtocolHTTPProtobuf (the default, as the
	// OpenTelemetry specification says).
	Protocol string
	// Sampler is the sampler OTEL_TRACES_SAMPLER names; nil means the SDK's
	// default, parentbased_always_on.
	Sampler sdktrace.Sampler
}

// FromEnv reads the tracing configuration from the standard variables
// (lookup is os.LookupEnv or a test's map). Tracing is on when
// OTEL_TRACES_EXPORTER is "otlp", or when it is unset and an OTLP endpoint is
// set (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
// OTEL_SDK_DISABLED=true or OTEL_TRACES_EXPORTER=none turns it off. The
// exporter itself reads the rest of OTEL_EXPORTER_OTLP_* (endpoint, headers,
// certificates, timeout, compression), and the resource OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES. A value this cannot honour is an error naming the
// variable, rather than tracing silently not doing what was asked.
func FromEnv(lookup func(string) (string, bool)) (Config, error) {
	get := func(k string) string {
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	var cfg Config
	switch v := strings.ToLower(get("OTEL_SDK_DISABLED")); v {
	case "", "false":
	case "true":
		return cfg, nil
	default:
		return cfg, fmt.Errorf("invalid OTEL_SDK_DISABLED %q: want true or false", v)
	}

	switch v := strings.ToLower(get("OTEL_TRACES_EXPORTER")); v {
	case "":
		cfg.Enabled = get("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	case "otlp":
		cfg.Enabled = true
	case "none":
	default:
		return cfg, fmt.Errorf("invalid OTEL_TRACES_EXPORTER %q: the dispatcher exports traces with otlp (or none)", v)
	}

	cfg.Protocol = ProtocolHTTPProtobuf
	name, v := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if v == "" {
		name, v = "OTEL_EXPORTER_OTLP_PROTOCOL", get("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch v {
	case "":
	case ProtocolGRPC, ProtocolHTTPProtobuf:
		cfg.Protocol = v
	default:
		return cfg, fmt.Errorf("invalid %s %q: want %s or %s", name, v, ProtocolGRPC, ProtocolHTTPProtobuf)
	}

	sampler, err := samplerFromEnv(get("OTEL_TRACES_SAMPLER"), get("OTEL_TRACES_SAMPLER_ARG"))
	if err != nil {
		return cfg, err
	}
	cfg.Sampler = sampler
	return cfg, nil
}

// samplerFromEnv is the SDK's reading of OTEL_TRACES_SAMPLER, with errors
// where the SDK would log and fall back to sampling everything.
func samplerFromEnv(name, arg string) (sdktrace.Sampler, error) {
	ratio := func() (sdktrace.Sampler, error) {
		if arg == "" {
			return sdktrace.TraceIDRatioBased(1), nil
		}
		r, err := strconv.ParseFloat(arg, 64)
		if err != nil || r < 0 || r > 1 {
			return nil, fmt.Errorf("invalid OTEL_TRACES_SAMPLER_ARG %q: want a ratio from 0 to 1", arg)
		}
		return sdktrace.TraceIDRatioBased(r), nil
	}
	switch strings.ToLower(name) {
	case "":
		return nil, nil //nolint:nilnil // no sampler named: the SDK's default
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "traceidratio":
		return ratio()
	case "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "parentbased_traceidratio":
		s, err := ratio()
		if err != nil {
			return nil, err
		}
		return sdktrace.ParentBased(s), nil
	default:
		return nil, fmt.Errorf("invalid OTEL_TRACES_SAMPLER %q: want always_on, always_off, traceidratio, "+
			"parentbased_always_on, parentbased_always_off or parentbased_traceidratio", name)
	}
}

// Provider is the tracing of one process. The zero value (and Setup's result
// when tracing is off) records nothing.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// Setup installs cfg's tracing as OpenTelemetry's global tracer provider and
// propagator (W3C trace context only: baggage is not passed on) and returns
// it. With cfg.Enabled false it installs nothing.
func Setup(ctx context.Context, cfg Config, logger *slog.Logger) (*Provider, error) {
	if !cfg.Enabled {
		return &Provider{}, nil
	}
	var (
		exp sdktrace.SpanExporter
		err error
	)
	switch cfg.Protocol {
	case ProtocolGRPC:
		exp, err = otlptracegrpc.New(ctx)
	default:
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(attribute.String("service.name", ServiceName)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // last, so OTEL_SERVICE_NAME wins
	)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES): %w", err)
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithBatcher(exp), sdktrace.WithResource(res)}
	if cfg.Sampler != nil {
		opts = append(opts, sdktrace.WithSampler(cfg.Sampler))
	}
	return Use(sdktrace.NewTracerProvider(opts...), logger), nil
}

// Use makes tp the global tracer provider, W3C trace context the global
// propagator, and logs OpenTelemetry's own errors (an unreachable collector)
// as warnings, and returns tp as a Provider. Setup calls it; tests call it
// with an in-memory exporter.
func Use(tp *sdktrace.TracerProvider, logger *slog.Logger) *Provider {
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		logger.Warn("tracing", slog.Any("error", err))
	}))
	return &Provider{tp: tp}
}

// Enabled reports whether spans are recorded and exported.
func (p *Provider) Enabled() bool { return p != nil && p.tp != nil }

// Shutdown exports what is still buffered and stops the exporter.
func (p *Provider) Shutdown(ctx context.Context) error {
	if !p.Enabled() {
		return nil
	}
	if err := p.tp.Shutdown(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}
