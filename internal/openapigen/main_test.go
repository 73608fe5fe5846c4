package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/pluginpb"

	"github.com/standmeet/webhook-dispatcher/internal/openapidoc"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"

	_ "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

type testBundle struct {
	gen   *protogen.Plugin
	rules []byte
}

// setup builds the plugin's input from the compiled-in descriptors of
// webhooks.v1 (without comments: buf hands the plugin those) and the real
// HTTP rules.
func setup(t *testing.T) *testBundle {
	t.Helper()
	var files []*descriptorpb.FileDescriptorProto
	seen := map[string]bool{}
	var add func(fd protoreflect.FileDescriptor)
	add = func(fd protoreflect.FileDescriptor) {
		if seen[fd.Path()] {
			return
		}
		seen[fd.Path()] = true
		for i := range fd.Imports().Len() {
			add(fd.Imports().Get(i).FileDescriptor)
		}
		files = append(files, protodesc.ToFileDescriptorProto(fd))
	}
	var generate []string
	for _, path := range []string{"webhooks/v1/events.proto", "webhooks/v1/endpoints.proto"} {
		fd, err := protoregistry.GlobalFiles.FindFileByPath(path)
		require.NoError(t, err)
		add(fd)
		generate = append(generate, path)
	}
	gen, err := protogen.Options{}.New(&pluginpb.CodeGeneratorRequest{FileToGenerate: generate, ProtoFile: files})
	require.NoError(t, err)
	rules, err := os.ReadFile(filepath.Join("..", "..", "proto", "webhooks", "v1", "http.yaml"))
	require.NoError(t, err)
	return &testBundle{gen: gen, rules: rules}
}

// doc builds the document and reads it back as JSON.
func (b *testBundle) doc(t *testing.T) map[string]any {
	t.Helper()
	d, err := build(b.gen, b.rules, catalog.Default())
	require.NoError(t, err)
	raw, err := json.Marshal(d)
	require.NoError(t, err)
	var out map[string]any
	require.NoError(t, json.Unmarshal(raw, &out))
	return out
}

func dig(t *testing.T, v any, path ...string) any {
	t.Helper()
	for _, p := range path {
		m, ok := v.(map[string]any)
		require.True(t, ok, "%s: not an object", p)
		v, ok = m[p]
		require.True(t, ok, "no %s in %v", p, keys(m))
	}
	return v
}

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func TestBuild(t *testing.T) {
	t.Parallel()

	t.Run("EveryRuleAnOperationWithEveryError", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		doc := b.doc(t)
		require.Equal(t, "3.1.0", doc["openapi"])
		n := 0
		for path, item := range dig(t, doc, "paths").(map[string]any) {
			for method, op := range item.(map[string]any) {
				n++
				op := op.(map[string]any)
				require.NotEmpty(t, op["summary"], "%s %s", method, path)
				require.NotEmpty(t, op["operationId"])
				responses := op["responses"].(map[string]any)
				for _, code := range []string{"400", "401", "403", "429", "500", "503"} {
					require.Contains(t, responses, code, "%s %s", method, path)
				}
				if strings.Contains(path, "{") {
					require.Contains(t, responses, "404", "%s %s", method, path)
				}
			}
		}
		require.Equal(t, strings.Count(string(b.rules), "- selector:"), n)
		require.Contains(t, dig(t, doc, "paths", "/v1/endpoints", "post", "responses"), "201")
		require.Contains(t, dig(t, doc, "paths", "/v1/endpoints/{endpoint_id}", "delete", "responses"), "204")
		require.Equal(t, "bearer", dig(t, doc, "components", "securitySchemes", "bearer", "scheme"))
		require.NotEmpty(t, doc["servers"])
	})

	t.Run("RequiredFields", func(t *testing.T) {
		t.Parallel()
		doc := setup(t).doc(t)
		schemas := dig(t, doc, "components", "schemas")
		require.ElementsMatch(t, []any{"owner_id", "url", "event_types"}, dig(t, schemas, "CreateEndpointRequest", "required"))
		require.Equal(t, false, dig(t, schemas, "CreateEndpointRequest", "additionalProperties"))
		require.ElementsMatch(t, []any{"owner_id", "type", "subject"}, dig(t, schemas, "EventInput", "required"), "id and occurred_at are filled in")
		// An answer holds every field.
		endpoint := dig(t, schemas, "Endpoint").(map[string]any)
		require.Len(t, endpoint["required"], len(endpoint["properties"].(map[string]any)))
		require.Equal(t, []any{"string", "null"}, dig(t, endpoint, "properties", "failing_since", "type"), "unset is null")
		require.Equal(t, "string", dig(t, schemas, "Delivery", "properties", "id", "type"), "int64 as a string")
		// The path parameter is not in the body.
		require.NotContains(t, dig(t, schemas, "UpdateEndpointRequest", "properties"), "endpoint_id")
		params := dig(t, doc, "paths", "/v1/endpoints", "get", "parameters").([]any)
		require.Equal(t, true, params[0].(map[string]any)["required"], "owner_id")
	})

	t.Run("EventDataTypedPerType", func(t *testing.T) {
		t.Parallel()
		doc := setup(t).doc(t)
		schemas := dig(t, doc, "components", "schemas")
		var withSchema, publishable int
		for _, typ := range catalog.Default().Types() {
			if typ.Schema == nil {
				continue
			}
			withSchema++
			if typ.Exposure != catalog.ExposureOperational {
				publishable++
			}
		}
		require.Len(t, dig(t, schemas, "Event", "oneOf"), withSchema)
		require.Len(t, dig(t, schemas, "EventInput", "oneOf"), publishable, "operational types cannot be published")
		require.Equal(t, "#/components/schemas/BookingCreatedEvent", dig(t, schemas, "Event", "discriminator", "mapping", "booking.created"))
		require.Equal(t, "booking.created", dig(t, schemas, "BookingCreatedEvent", "properties", "type", "const"))
		require.Contains(t, dig(t, schemas, "BookingCreatedData", "properties"), "booking_id")
		require.NotContains(t, dig(t, schemas, "BookingCreatedData"), "$schema")
	})

	t.Run("RPCWithoutARuleRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rules := strings.Replace(string(b.rules), "    - selector: webhooks.v1.EndpointService.GetEndpointStats\n      get: /v1/endpoint-stats\n", "", 1)
		require.NotEqual(t, string(b.rules), rules)
		_, err := build(b.gen, []byte(rules), catalog.Default())
		require.ErrorContains(t, err, "no http rule for webhooks.v1.EndpointService.GetEndpointStats")
	})
}

func TestComment(t *testing.T) {
	t.Parallel()
	require.Equal(t, "One line and the next.\n\nA paragraph.\n\n    \"data\": {}", comment(" One line\n and the next.\n\n A paragraph.\n\n   \"data\": {}\n"))
	require.Equal(t, "Create endpoint", summary("CreateEndpoint"))
	require.Equal(t, "AccessRequestCreated", openapidoc.Pascal("access_request.created"))
}
