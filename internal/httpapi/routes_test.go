package httpapi

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
	"go.yaml.in/yaml/v3"
	"google.golang.org/grpc"

	webhooksv1 "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// httpRules reads proto/webhooks/v1/http.yaml as Rules.
func httpRules(t *testing.T) []Rule {
	t.Helper()
	text, err := os.ReadFile(filepath.Join("..", "..", "proto", "webhooks", "v1", "http.yaml"))
	require.NoError(t, err)
	var doc struct {
		HTTP struct {
			Rules []map[string]string `yaml:"rules"`
		} `yaml:"http"`
	}
	require.NoError(t, yaml.Unmarshal(text, &doc))
	var out []Rule
	for _, r := range doc.HTTP.Rules {
		rule := Rule{RPC: r["selector"], Body: r["body"]}
		for _, m := range []string{"get", "post", "patch", "put", "delete"} {
			if p, ok := r[m]; ok {
				rule.Method, rule.Pattern = map[string]string{"get": "GET", "post": "POST", "patch": "PATCH", "put": "PUT", "delete": "DELETE"}[m], p
			}
		}
		out = append(out, rule)
	}
	return out
}

// TestEveryRPCHasARoute: an RPC added to webhooks.v1 without a rule in
// http.yaml would be missing from the HTTP/JSON API (and its OpenAPI
// document) without any other test noticing.
func TestEveryRPCHasARoute(t *testing.T) {
	t.Parallel()

	routed := map[string]bool{}
	for _, r := range httpRules(t) {
		require.False(t, routed[r.RPC], "%s has two rules", r.RPC)
		routed[r.RPC] = true
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

// TestRoutesMatchHTTPRules: the dialect checks requests against Rules, so
// Rules must be http.yaml's rules, the ones the transcoder was generated
// from; a rule added there must be added here too.
func TestRoutesMatchHTTPRules(t *testing.T) {
	t.Parallel()
	require.Equal(t, httpRules(t), Rules, "internal/httpapi.Rules must equal proto/webhooks/v1/http.yaml's rules")
	_, err := resolve(Rules)
	require.NoError(t, err)
}
