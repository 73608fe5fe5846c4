package httpapi

import (
	"fmt"
	"regexp"
	"strings"

	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	// The descriptors of webhooks.v1, which the routes name.
	_ "github.com/standmeet/webhook-dispatcher/pkg/api/webhooks/v1"
)

// Rule is one HTTP rule of proto/webhooks/v1/http.yaml: the same table the
// transcoder was generated from (TestRoutesMatchHTTPRules keeps them equal),
// which this package needs to check a request before it is transcoded.
type Rule struct {
	Method  string // GET, POST, PATCH, DELETE
	Pattern string // "/v1/endpoints/{endpoint_id}:rotateSecret"
	RPC     string // "webhooks.v1.EndpointService.RotateSecret"
	Body    string // "*" or ""
}

// Rules are the HTTP rules, in http.yaml's order.
var Rules = []Rule{
	{"POST", "/v1/events:publish", "webhooks.v1.EventService.Publish", "*"},
	{"POST", "/v1/events:publishBatch", "webhooks.v1.EventService.PublishBatch", "*"},
	{"GET", "/v1/endpoints", "webhooks.v1.EndpointService.ListEndpoints", ""},
	{"POST", "/v1/endpoints", "webhooks.v1.EndpointService.CreateEndpoint", "*"},
	{"GET", "/v1/endpoints/{endpoint_id}", "webhooks.v1.EndpointService.GetEndpoint", ""},
	{"PATCH", "/v1/endpoints/{endpoint_id}", "webhooks.v1.EndpointService.UpdateEndpoint", "*"},
	{"DELETE", "/v1/endpoints/{endpoint_id}", "webhooks.v1.EndpointService.DeleteEndpoint", ""},
	{"POST", "/v1/endpoints/{endpoint_id}:rotateSecret", "webhooks.v1.EndpointService.RotateSecret", "*"},
	{"POST", "/v1/endpoints/{endpoint_id}:sendTest", "webhooks.v1.EndpointService.SendTest", "*"},
	{"GET", "/v1/endpoints/{endpoint_id}/deliveries", "webhooks.v1.EndpointService.ListDeliveries", ""},
	{"POST", "/v1/endpoints/{endpoint_id}:redeliver", "webhooks.v1.EndpointService.Redeliver", "*"},
	{"GET", "/v1/deliveries/{delivery_id}", "webhooks.v1.EndpointService.GetDelivery", ""},
	{"POST", "/v1/deliveries/{delivery_id}:retry", "webhooks.v1.EndpointService.RetryDelivery", "*"},
	{"GET", "/v1/deliveries/{delivery_id}/attempts", "webhooks.v1.EndpointService.ListAttempts", ""},
	{"GET", "/v1/events", "webhooks.v1.EndpointService.ListEvents", ""},
	{"GET", "/v1/events/{event_id}", "webhooks.v1.EndpointService.GetEvent", ""},
	{"GET", "/v1/event-types", "webhooks.v1.EndpointService.ListEventTypes", ""},
	{"GET", "/v1/endpoint-stats", "webhooks.v1.EndpointService.GetEndpointStats", ""},
	{"POST", "/v1/filters:test", "webhooks.v1.EndpointService.TestFilter", "*"},
	{"POST", "/v1/portal-sessions", "webhooks.v1.EndpointService.CreatePortalSession", "*"},
	{"GET", "/v1/owner-settings", "webhooks.v1.EndpointService.GetOwnerSettings", ""},
	{"PATCH", "/v1/owner-settings", "webhooks.v1.EndpointService.UpdateOwnerSettings", "*"},
}

// IdempotencyFields: the request field an Idempotency-Key header fills, per
// RPC that creates something. Elsewhere the header is refused.
var IdempotencyFields = map[string]string{
	// request_id: remembered per owner for 24 h (CreateEndpointRequest).
	"webhooks.v1.EndpointService.CreateEndpoint": "request_id",
	// The event id: publishing is idempotent by it.
	"webhooks.v1.EventService.Publish": "event.id",
}

// route is a Rule resolved: its request message and how to match a path.
type route struct {
	Rule
	method     protoreflect.MethodDescriptor
	input      protoreflect.MessageDescriptor
	pathRE     *regexp.Regexp
	pathParams []string // in pattern order
}

var varRE = regexp.MustCompile(`\{([a-z_]+)\}`)

func resolve(rules []Rule) ([]route, error) {
	out := make([]route, 0, len(rules))
	for _, r := range rules {
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(r.RPC))
		if err != nil {
			return nil, fmt.Errorf("http rule %s %s: %w", r.Method, r.Pattern, err)
		}
		md, ok := d.(protoreflect.MethodDescriptor)
		if !ok {
			return nil, fmt.Errorf("http rule %s %s: %s is not a method", r.Method, r.Pattern, r.RPC)
		}
		rt := route{Rule: r, method: md, input: md.Input()}
		var re strings.Builder
		re.WriteString("^")
		last := 0
		for _, m := range varRE.FindAllStringSubmatchIndex(r.Pattern, -1) {
			re.WriteString(regexp.QuoteMeta(r.Pattern[last:m[0]]))
			// A segment without '/' (and without ':', which starts a
			// custom verb such as :rotateSecret).
			re.WriteString(`([^/:]+)`)
			name := r.Pattern[m[2]:m[3]]
			if rt.input.Fields().ByName(protoreflect.Name(name)) == nil {
				return nil, fmt.Errorf("http rule %s %s: %s has no field %s", r.Method, r.Pattern, rt.input.FullName(), name)
			}
			rt.pathParams = append(rt.pathParams, name)
			last = m[1]
		}
		re.WriteString(regexp.QuoteMeta(r.Pattern[last:]))
		re.WriteString("$")
		rt.pathRE = regexp.MustCompile(re.String())
		out = append(out, rt)
	}
	return out, nil
}

// match finds the route of a request, nil when none matches (the
// transcoder then answers 404 or 405).
func match(routes []route, method, path string) (*route, map[string]string) {
	for i := range routes {
		rt := &routes[i]
		if rt.Method != method {
			continue
		}
		m := rt.pathRE.FindStringSubmatch(path)
		if m == nil {
			continue
		}
		params := make(map[string]string, len(rt.pathParams))
		for j, name := range rt.pathParams {
			params[name] = m[j+1]
		}
		return rt, params
	}
	return nil, nil
}
