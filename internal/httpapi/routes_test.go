package httpapi

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// TestEveryRPCHasARoute: an RPC added to webhooks.v1 without a rule in
// http.yaml would be missing from the HTTP/JSON API (and its OpenAPI
// document) without any other test noticing.
func TestEveryRPCHasARoute(t *testing.T) {
	t.Parallel()

	text, err := os.ReadFile(filepath.Join("..", "..", "proto", "webhooks", "v1", "http.yaml"))
	require.NoError(t, err)
	routed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*- selector: (\S+)$`).FindAllStringSubmatch(string(text), -1) {
		require.False(t, routed[m[1]], "%s has two rules", m[1])
		routed[m[1]] = true
	}
	var methods []string
	for _, sd := range []grpc.ServiceDesc{webhooksv1.EventService_ServiceDesc, webhooksv1.EndpointService_ServiceDesc} {
		for _, m := range sd.Methods {
			methods = append(methods, sd.ServiceName+"."+m.MethodName)
		}
		require.Empty(t, sd.Streams, "a streaming RPC needs thought before it gets an HTTP route")
	}
	for _, m := range methods {
		require.True(t, routed[m], "%s has no HTTP rule in proto/webhooks/v1/http.yaml", m)
	}
	require.Len(t, routed, len(methods), "a rule names an RPC that does not exist")
}
