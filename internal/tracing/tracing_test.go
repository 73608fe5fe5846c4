package tracing_test

import (
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/standmeet/webhook-dispatcher/internal/tracing"
)

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func TestFromEnv(t *testing.T) {
	t.Parallel()

	t.Run("OffByDefault", func(t *testing.T) {
		t.Parallel()
		cfg, err := tracing.FromEnv(lookup(nil))
		require.NoError(t, err)
		require.False(t, cfg.Enabled)
	})

	t.Run("OnWithAnEndpoint", func(t *testing.T) {
		t.Parallel()
		for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
			cfg, err := tracing.FromEnv(lookup(map[string]string{k: "http://collector:4318"}))
			require.NoError(t, err)
			require.True(t, cfg.Enabled, k)
			require.Equal(t, tracing.ProtocolHTTPProtobuf, cfg.Protocol)
			require.Nil(t, cfg.Sampler)
		}
	})

	t.Run("OnWithOTLPExporter", func(t *testing.T) {
		t.Parallel()
		cfg, err := tracing.FromEnv(lookup(map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}))
		require.NoError(t, err)
		require.True(t, cfg.Enabled)
		require.Equal(t, tracing.ProtocolGRPC, cfg.Protocol)
	})

	t.Run("TracesProtocolWins", func(t *testing.T) {
		t.Parallel()
		cfg, err := tracing.FromEnv(lookup(map[string]string{"OTEL_TRACES_EXPORTER": "otlp",
			"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}))
		require.NoError(t, err)
		require.Equal(t, tracing.ProtocolHTTPProtobuf, cfg.Protocol)
	})

	t.Run("Disabled", func(t *testing.T) {
		t.Parallel()
		for _, env := range []map[string]string{
			{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
			{"OTEL_SDK_DISABLED": "TRUE", "OTEL_TRACES_EXPORTER": "otlp"},
			{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"},
		} {
			cfg, err := tracing.FromEnv(lookup(env))
			require.NoError(t, err)
			require.False(t, cfg.Enabled, "%v", env)
		}
	})

	t.Run("Sampler", func(t *testing.T) {
		t.Parallel()
		cfg, err := tracing.FromEnv(lookup(map[string]string{"OTEL_TRACES_EXPORTER": "otlp",
			"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.25"}))
		require.NoError(t, err)
		require.Contains(t, cfg.Sampler.Description(), "TraceIDRatioBased{0.25}")
	})

	t.Run("BadValuesNameTheVariable", func(t *testing.T) {
		t.Parallel()
		for want, env := range map[string]map[string]string{
			"OTEL_SDK_DISABLED":                  {"OTEL_SDK_DISABLED": "yes"},
			"OTEL_TRACES_EXPORTER":               {"OTEL_TRACES_EXPORTER": "zipkin"},
			"OTEL_EXPORTER_OTLP_PROTOCOL":        {"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"},
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": {"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "udp"},
			"OTEL_TRACES_SAMPLER":                {"OTEL_TRACES_SAMPLER": "jaeger_remote"},
			"OTEL_TRACES_SAMPLER_ARG":            {"OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1.5"},
		} {
			_, err := tracing.FromEnv(lookup(env))
			require.ErrorContains(t, err, want)
		}
	})
}

func TestSetup(t *testing.T) {
	t.Parallel()

	t.Run("OffInstallsNothing", func(t *testing.T) {
		t.Parallel()
		p, err := tracing.Setup(context.Background(), tracing.Config{}, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		require.False(t, p.Enabled())
		require.Nil(t, p.RiverMiddleware())
		require.NoError(t, p.Shutdown(context.Background()))
	})
}
