package e2e

import (
	"bytes"
	"compress/gzip"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/standmeet/webhook-dispatcher/internal/dbtest"
	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// collector is an OTLP/HTTP trace receiver keeping every span it is sent,
// with its resource's service.name.
type collector struct {
	*httptest.Server

	mu       sync.Mutex
	spans    []*tracepb.Span
	services map[string]bool
}

func newCollector(t *testing.T) *collector {
	t.Helper()
	c := &collector{services: map[string]bool{}}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/traces" {
			http.NotFound(w, r)
			return
		}
		var body io.Reader = r.Body
		if r.Header.Get("Content-Encoding") == "gzip" {
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			body = zr
		}
		b, _ := io.ReadAll(body)
		req := &coltracepb.ExportTraceServiceRequest{}
		if err := proto.Unmarshal(b, req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		c.mu.Lock()
		for _, rs := range req.GetResourceSpans() {
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.GetKey() == "service.name" {
					c.services[kv.GetValue().GetStringValue()] = true
				}
			}
			for _, ss := range rs.GetScopeSpans() {
				c.spans = append(c.spans, ss.GetSpans()...)
			}
		}
		c.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(c.Close)
	return c
}

// named returns the spans received so far called name.
func (c *collector) named(name string) []*tracepb.Span {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*tracepb.Span
	for _, s := range c.spans {
		if s.GetName() == name {
			out = append(out, s)
		}
	}
	return out
}

func TestTracing(t *testing.T) {
	t.Parallel()

	t.Run("ExportsOneTraceFromPublishToTheAttempt", func(t *testing.T) {
		t.Parallel()
		col := newCollector(t)
		d := start(t, options{db: dbtest.NewEmpty(t), args: []string{"--migrate"}, env: []string{
			"OTEL_EXPORTER_OTLP_ENDPOINT=" + col.URL,
			"OTEL_SERVICE_NAME=dispatcher-e2e",
			"OTEL_BSP_SCHEDULE_DELAY=100",
		}})
		rc := newReceiver(t)
		createEndpoint(t, d, "owner-a", rc.URL+"/hooks?token=query-secret", "code.*")
		e := newEvent("owner-a", "code.issued", "code://c1", `{"code_id":"c1"}`)
		require.Equal(t, webhooksv1.PublishOutcome_PUBLISH_OUTCOME_STORED, publish(t, d, e).GetOutcome())

		waitFor(t, 30*time.Second, "the delivery", func() bool { return len(rc.requests()) == 1 })
		waitFor(t, 30*time.Second, "the attempt's spans", func() bool {
			return len(col.named("http.client")) == 1 && len(col.named("river.work/webhook.deliver")) == 1
		})
		publishSpans := col.named("webhooks.v1.EventService/Publish")
		require.Len(t, publishSpans, 1)
		traceID := publishSpans[0].GetTraceId()
		for _, name := range []string{"ingest", "ingest.commit", "river.work/webhook.deliver", "http.client"} {
			spans := col.named(name)
			require.Len(t, spans, 1, name)
			require.True(t, bytes.Equal(traceID, spans[0].GetTraceId()), "%s is in the Publish's trace", name)
		}
		attempt := col.named("http.client")[0]
		require.Equal(t, tracepb.Span_SPAN_KIND_CLIENT, attempt.GetKind())
		for _, kv := range attempt.GetAttributes() {
			require.NotContains(t, kv.GetValue().GetStringValue(), "query-secret", kv.GetKey())
		}
		col.mu.Lock()
		require.True(t, col.services["dispatcher-e2e"], "OTEL_SERVICE_NAME names the service: %v", col.services)
		col.mu.Unlock()

		got := rc.requests()[0]
		require.Empty(t, got.header.Get("Traceparent"), "receivers never get the trace")
		require.Empty(t, got.header.Get("Tracestate"))
	})

	t.Run("BadVariableStopsStartUp", func(t *testing.T) {
		t.Parallel()
		cmd := exec.Command(binary, "serve", "--grpc-addr", "127.0.0.1:0", "--ops-addr", "127.0.0.1:0")
		cmd.Env = append(cmd.Environ(), "DISPATCHER_MASTER_KEYS="+masterKey(t), "DISPATCHER_ADMIN_TOKENS="+adminToken,
			"OTEL_TRACES_EXPORTER=zipkin")
		out, err := cmd.CombinedOutput()
		require.Error(t, err)
		require.Contains(t, string(out), "OTEL_TRACES_EXPORTER")
	})
}
