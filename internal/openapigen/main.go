// Command openapigen is a protoc plugin, run by `make generate` (buf
// generate), that writes docs/openapi/openapi.json: the OpenAPI 3.1
// description of the HTTP/JSON API (internal/httpapi), from the proto
// descriptors and their comments, the HTTP rules (proto/webhooks/v1/http.yaml,
// the parameter rules=) and the default event catalog (pkg/catalog), so an
// RPC, a field or an event type added there is in the document on the next
// `make generate`. The document describes the dialect internal/httpapi
// speaks: snake_case names, every field of an answer present (unset
// messages as null), int64 as strings, errors as RFC 9457 problems.
package main

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/compiler/protogen"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/pluginpb"

	"github.com/standmeet/webhook-dispatcher/internal/openapidoc"
	"github.com/standmeet/webhook-dispatcher/pkg/catalog"
)

func main() {
	var flags flag.FlagSet
	rules := flags.String("rules", "proto/webhooks/v1/http.yaml", "the HTTP rules (google.api.Service YAML)")
	out := flags.String("out", "openapi.json", "the file to write, relative to the plugin's out directory")
	protogen.Options{ParamFunc: flags.Set}.Run(func(gen *protogen.Plugin) error {
		gen.SupportedFeatures = uint64(pluginpb.CodeGeneratorResponse_FEATURE_PROTO3_OPTIONAL)
		text, err := os.ReadFile(*rules)
		if err != nil {
			return fmt.Errorf("openapigen: %w", err)
		}
		doc, err := build(gen, text, catalog.Default())
		if err != nil {
			return fmt.Errorf("openapigen: %w", err)
		}
		b, err := openapidoc.Marshal(doc)
		if err != nil {
			return fmt.Errorf("openapigen: %w", err)
		}
		f := gen.NewGeneratedFile(*out, "")
		_, err = f.Write(b)
		return err
	})
}

// rule is one HTTP rule of http.yaml.
type rule struct {
	Selector string `yaml:"selector"`
	Get      string `yaml:"get"`
	Post     string `yaml:"post"`
	Patch    string `yaml:"patch"`
	Put      string `yaml:"put"`
	Delete   string `yaml:"delete"`
	Body     string `yaml:"body"`
}

func (r rule) methodPath() (string, string) {
	switch {
	case r.Get != "":
		return "get", r.Get
	case r.Post != "":
		return "post", r.Post
	case r.Patch != "":
		return "patch", r.Patch
	case r.Put != "":
		return "put", r.Put
	default:
		return "delete", r.Delete
	}
}

// required lists the fields of request messages the server refuses to go
// without, besides owner_id (required wherever a request has it) and path
// parameters. Answers need no list: every field of an answer is present.
var required = map[protoreflect.FullName][]string{
	"webhooks.v1.CreateEndpointRequest":   {"url", "event_types"},
	"webhooks.v1.UpdateEndpointRequest":   {"update_mask"},
	"webhooks.v1.PublishRequest":          {"event"},
	"webhooks.v1.PublishBatchRequest":     {"events"},
	"webhooks.v1.Event":                   {"type", "subject"},
	"webhooks.v1.GetEndpointStatsRequest": {"endpoint_ids"},
}

// createdBy: the RPCs that create a resource, answered 201 with Location.
var createdBy = map[string]string{
	"webhooks.v1.EndpointService.CreateEndpoint": "/v1/endpoints/{id}?owner_id={owner_id}",
}

// deletedBy: the RPCs answered 204 without a body.
var deletedBy = map[string]bool{"webhooks.v1.EndpointService.DeleteEndpoint": true}

// idempotent: the RPCs that take an Idempotency-Key, and the field it fills.
var idempotent = map[string]string{
	"webhooks.v1.EndpointService.CreateEndpoint": "request_id",
	"webhooks.v1.EventService.Publish":           "event.id",
}

// conflicts: the RPCs that can answer 409 ALREADY_EXISTS.
var conflicts = map[string]bool{
	"webhooks.v1.EndpointService.CreateEndpoint": true,
	"webhooks.v1.EventService.Publish":           true,
	"webhooks.v1.EventService.PublishBatch":      true,
}

type builder struct {
	schemas  map[string]any
	messages map[protoreflect.FullName]*protogen.Message
	enums    map[protoreflect.FullName]*protogen.Enum
	catalog  *catalog.Catalog
}

func build(gen *protogen.Plugin, rulesYAML []byte, cat *catalog.Catalog) (*openapidoc.Document, error) {
	var cfg struct {
		HTTP struct {
			Rules []rule `yaml:"rules"`
		} `yaml:"http"`
	}
	if err := yaml.Unmarshal(rulesYAML, &cfg); err != nil {
		return nil, fmt.Errorf("http rules: %w", err)
	}
	b := &builder{
		schemas:  map[string]any{},
		messages: map[protoreflect.FullName]*protogen.Message{},
		enums:    map[protoreflect.FullName]*protogen.Enum{},
		catalog:  cat,
	}
	methods := map[string]*protogen.Method{}
	var services []*protogen.Service
	for _, f := range gen.Files {
		var walk func([]*protogen.Message)
		walk = func(ms []*protogen.Message) {
			for _, m := range ms {
				b.messages[m.Desc.FullName()] = m
				for _, e := range m.Enums {
					b.enums[e.Desc.FullName()] = e
				}
				walk(m.Messages)
			}
		}
		walk(f.Messages)
		for _, e := range f.Enums {
			b.enums[e.Desc.FullName()] = e
		}
		if !f.Generate {
			continue
		}
		for _, s := range f.Services {
			// Only the services the rules route (webhooks.v1; not the
			// access service the dispatcher calls), each wholly.
			if !slices.ContainsFunc(cfg.HTTP.Rules, func(r rule) bool {
				return strings.HasPrefix(r.Selector, string(s.Desc.FullName())+".")
			}) {
				continue
			}
			services = append(services, s)
			for _, m := range s.Methods {
				methods[string(m.Desc.FullName())] = m
			}
		}
	}

	paths := map[string]any{}
	for _, r := range cfg.HTTP.Rules {
		m, ok := methods[r.Selector]
		if !ok {
			return nil, fmt.Errorf("http rule for %s: no such method", r.Selector)
		}
		method, path := r.methodPath()
		op, err := b.operation(m, r, path)
		if err != nil {
			return nil, err
		}
		item, _ := paths[path].(map[string]any)
		if item == nil {
			item = map[string]any{}
			paths[path] = item
		}
		item[method] = op
		delete(methods, r.Selector)
	}
	if len(methods) > 0 {
		var names []string
		for n := range methods {
			names = append(names, n)
		}
		slices.Sort(names)
		return nil, fmt.Errorf("no http rule for %s", strings.Join(names, ", "))
	}

	var tags []any
	slices.SortFunc(services, func(a, c *protogen.Service) int { return strings.Compare(a.GoName, c.GoName) })
	for _, s := range services {
		tags = append(tags, map[string]any{"name": s.GoName, "description": comment(s.Comments.Leading)})
	}
	b.problemSchemas()
	return &openapidoc.Document{
		OpenAPI: "3.1.0",
		Info: map[string]any{
			"title":       "dispatcher HTTP/JSON API",
			"version":     "v1",
			"summary":     "Webhook endpoints, deliveries and publishing, over HTTP with JSON.",
			"description": infoDescription,
		},
		Servers: []any{map[string]any{
			"url":         "http://127.0.0.1:7070",
			"description": "A dispatcher on its default API address (DISPATCHER_GRPC_ADDR); the HTTP/JSON API shares the gRPC port, and answers HTTPS when the port has TLS.",
		}},
		Security: []any{map[string]any{"bearer": []any{}}},
		Tags:     tags,
		Paths:    paths,
		Components: map[string]any{
			"schemas":   b.schemas,
			"responses": problemResponses(),
			"securitySchemes": map[string]any{"bearer": map[string]any{
				"type": "http", "scheme": "bearer",
				"description": "The publisher token for EventService, the admin token for EndpointService (DISPATCHER_PUBLISHER_TOKENS, DISPATCHER_ADMIN_TOKENS).",
			}},
		},
	}, nil
}

const infoDescription = `The HTTP/JSON face of the dispatcher's gRPC API (webhooks.v1), served on the gRPC port: the same handlers, tokens, roles, validation, owner isolation and errors.

- **Names**: snake_case in and out (the proto field names); lowerCamelCase is accepted on input. ` + "`update_mask`" + ` takes snake_case paths ("event_types,max_in_flight").
- **Answers** hold every field: an unset message is null, an empty list []. 64-bit integers (delivery ids) are strings.
- **Durations** are strings: "1h", "90s", "1h30m" or "3600s".
- **owner_id** goes in the query of a GET or DELETE and in the body of a POST or PATCH, which also take it in the query (the two must agree); so does ` + "`update_mask`" + ` on PATCH.
- **Unknown** query parameters and JSON fields are refused with 400 naming them, never ignored.
- **Statuses**: creating an endpoint answers 201 with Location, deleting one 204.
- **Errors** are RFC 9457 problem details (application/problem+json): ` + "`code`" + ` is the gRPC status code's name, ` + "`detail`" + ` the message, ` + "`field_violations`" + ` every bad field.
- **Idempotency-Key** on POST /v1/endpoints is the request's request_id (a retry returns the first call's endpoint), on POST /v1/events:publish the event id (publishing is idempotent by it).
- **Event data** is typed per event type of the catalog the dispatcher runs (` + "`type`" + ` discriminates): a dispatcher serves this document at /openapi.json generated from its own catalog, and ` + "`dispatcher openapi --catalog DIR`" + ` prints it offline; GET /v1/event-types lists the types.`

// operation is the Operation Object of one RPC.
func (b *builder) operation(m *protogen.Method, r rule, path string) (map[string]any, error) {
	full := string(m.Desc.FullName())
	in := m.Input
	var pathParams []string
	for _, match := range regexp.MustCompile(`\{([a-z_]+)\}`).FindAllStringSubmatch(path, -1) {
		pathParams = append(pathParams, match[1])
	}
	op := map[string]any{
		"operationId": lowerFirst(m.GoName),
		"summary":     summary(m.GoName),
		"tags":        []any{m.Parent.GoName},
	}
	if d := comment(m.Comments.Leading); d != "" {
		op["description"] = d
	}
	var params []any
	for _, name := range pathParams {
		f := fieldNamed(in, name)
		if f == nil {
			return nil, fmt.Errorf("%s: path parameter %s is no field of %s", full, name, in.Desc.FullName())
		}
		params = append(params, map[string]any{
			"name": name, "in": "path", "required": true,
			"description": fieldDescription(f),
			"schema":      b.paramSchema(f),
		})
	}
	if r.Body == "" {
		for _, f := range in.Fields {
			name := string(f.Desc.Name())
			if slices.Contains(pathParams, name) {
				continue
			}
			p := map[string]any{"name": name, "in": "query", "schema": b.paramSchema(f)}
			if d := fieldDescription(f); d != "" {
				p["description"] = d
			}
			if name == "owner_id" || slices.Contains(required[in.Desc.FullName()], name) {
				p["required"] = true
			}
			switch {
			case f.Desc.IsMap():
				p["style"], p["explode"] = "deepObject", true
				p["description"] = strings.TrimSpace(fieldDescription(f) + " As " + name + "[key]=value.")
			case f.Desc.IsList():
				p["style"], p["explode"] = "form", true
			}
			params = append(params, p)
		}
	} else {
		op["requestBody"] = map[string]any{
			"required": true,
			"content": map[string]any{"application/json": map[string]any{
				"schema": b.bodySchema(in, pathParams),
			}},
		}
	}
	if field, ok := idempotent[full]; ok {
		params = append(params, map[string]any{
			"name": "Idempotency-Key", "in": "header",
			"description": "A UUID or 1 to 128 of [A-Za-z0-9_-]: stands for " + field + " (the two must agree when both are given).",
			"schema":      map[string]any{"type": "string", "pattern": "^[A-Za-z0-9_-]{1,128}$"},
		})
	}
	if len(params) > 0 {
		op["parameters"] = params
	}

	responses := map[string]any{}
	okSchema := func() map[string]any { return map[string]any{"$ref": b.ref(m.Output.Desc, false)} }
	switch {
	case deletedBy[full]:
		responses["204"] = map[string]any{"description": "Deleted."}
	case createdBy[full] != "":
		responses["201"] = map[string]any{
			"description": "Created (or, for a repeated Idempotency-Key, the one the first call created, with replayed set).",
			"headers": map[string]any{"Location": map[string]any{
				"description": "The new resource: " + createdBy[full] + ".",
				"schema":      map[string]any{"type": "string"},
			}},
			"content": map[string]any{"application/json": map[string]any{"schema": okSchema()}},
		}
	default:
		responses["200"] = map[string]any{
			"description": "OK.",
			"content":     map[string]any{"application/json": map[string]any{"schema": okSchema()}},
		}
	}
	errs := []string{"400", "401", "403", "429", "500", "503"}
	if len(pathParams) > 0 {
		errs = append(errs, "404")
	}
	if conflicts[full] {
		errs = append(errs, "409")
	}
	if r.Body != "" {
		errs = append(errs, "413", "415")
	}
	for _, code := range errs {
		name := problemResponseNames[code]
		if code == "413" && full == batchMethod {
			name = batchTooLarge // its own limit
		}
		responses[code] = map[string]any{"$ref": "#/components/responses/" + name}
	}
	op["responses"] = responses
	return op, nil
}

// fieldDescriptions describe the fields that recur in every request,
// where their comments do not.
var fieldDescriptions = map[string]string{
	"owner_id":    "The owner the call is scoped to: another owner's resources answer 404, like missing ones.",
	"endpoint_id": "An endpoint's id (Endpoint.id, a UUID).",
	"delivery_id": "A delivery's id (Delivery.id, as ListDeliveries returns it).",
	"event_id":    "An event's id (Event.id).",
	"page_size":   "0 means 50; at most 200.",
	"page_token":  "From a previous call's next_page_token, with the same filters.",
}

// fieldDescription is a field's comment, or the common description of a
// recurring field without one.
func fieldDescription(f *protogen.Field) string {
	if d := comment(f.Comments.Leading); d != "" {
		return d
	}
	if f.Parent != nil && strings.HasSuffix(string(f.Parent.Desc.Name()), "Request") {
		return fieldDescriptions[string(f.Desc.Name())]
	}
	return ""
}

func fieldNamed(m *protogen.Message, name string) *protogen.Field {
	for _, f := range m.Fields {
		if string(f.Desc.Name()) == name {
			return f
		}
	}
	return nil
}

// bodySchema is the request body of an RPC: its request message without
// the path parameters.
func (b *builder) bodySchema(in *protogen.Message, pathParams []string) map[string]any {
	if len(pathParams) == 0 {
		return map[string]any{"$ref": b.ref(in.Desc, true)}
	}
	name := componentName(in.Desc, true)
	if _, done := b.schemas[name]; !done {
		b.schemas[name] = nil // a placeholder against recursion
		b.schemas[name] = b.messageSchema(in, true, pathParams)
	}
	return map[string]any{"$ref": "#/components/schemas/" + name}
}

// componentName: a message's schema name; a message read in a request
// (other than a request message itself) has a stricter answer form and a
// looser input form, "<Name>Input".
func componentName(d protoreflect.MessageDescriptor, input bool) string {
	name := string(d.Name())
	if input && !strings.HasSuffix(name, "Request") {
		name += "Input"
	}
	return name
}

// ref returns the $ref of a message's schema, writing the schema first.
func (b *builder) ref(d protoreflect.MessageDescriptor, input bool) string {
	name := componentName(d, input)
	if _, done := b.schemas[name]; !done {
		b.schemas[name] = nil
		b.schemas[name] = b.messageSchema(b.messages[d.FullName()], input, nil)
	}
	return "#/components/schemas/" + name
}

func (b *builder) enumRef(d protoreflect.EnumDescriptor) string {
	name := string(d.Name())
	if _, done := b.schemas[name]; !done {
		e := b.enums[d.FullName()]
		var names []any
		var lines []string
		for _, v := range e.Values {
			names = append(names, string(v.Desc.Name()))
			if c := comment(v.Comments.Leading); c != "" {
				lines = append(lines, "- `"+string(v.Desc.Name())+"`: "+strings.ReplaceAll(c, "\n", " "))
			}
		}
		desc := comment(e.Comments.Leading)
		if len(lines) > 0 {
			desc = strings.TrimSpace(desc + "\n\n" + strings.Join(lines, "\n"))
		}
		s := map[string]any{"type": "string", "enum": names}
		if desc != "" {
			s["description"] = desc
		}
		b.schemas[name] = s
	}
	return "#/components/schemas/" + name
}

// messageSchema is the schema of a message in its input or its answer
// form, without the fields in skip.
func (b *builder) messageSchema(m *protogen.Message, input bool, skip []string) map[string]any {
	props := map[string]any{}
	var req []string
	for _, f := range m.Fields {
		name := string(f.Desc.Name())
		if slices.Contains(skip, name) {
			continue
		}
		s := b.fieldSchema(f, input)
		if d := fieldDescription(f); d != "" {
			s = withDescription(s, d)
		}
		props[name] = s
		switch {
		case !input:
			req = append(req, name) // an answer holds every field
		case name == "owner_id" || slices.Contains(required[m.Desc.FullName()], name):
			req = append(req, name)
		}
	}
	s := map[string]any{"type": "object", "properties": props}
	if input {
		// The server refuses any other field.
		s["additionalProperties"] = false
	}
	if len(req) > 0 {
		s["required"] = req
	}
	if d := comment(m.Comments.Leading); d != "" {
		s["description"] = d
	}
	if m.Desc.FullName() == "webhooks.v1.Event" {
		// The catalog checked its schemas: an error is a bug here.
		if err := openapidoc.TypeEvent(b.schemas, s, b.catalog, input); err != nil {
			panic(err)
		}
	}
	return s
}

// withDescription describes s; a $ref's siblings are allowed in 3.1.
func withDescription(s map[string]any, d string) map[string]any {
	out := map[string]any{"description": d}
	maps.Copy(out, s)
	return out
}

// fieldSchema is one field's schema (its element's, wrapped for lists and
// maps).
func (b *builder) fieldSchema(f *protogen.Field, input bool) map[string]any {
	switch {
	case f.Desc.IsMap():
		return map[string]any{"type": "object", "additionalProperties": b.singleSchema(f.Desc.MapValue(), input, false)}
	case f.Desc.IsList():
		return map[string]any{"type": "array", "items": b.singleSchema(f.Desc, input, false)}
	}
	return b.singleSchema(f.Desc, input, !input)
}

// singleSchema is the schema of one value of fd's kind. nullable: an
// answer's singular message field, written as null when unset.
func (b *builder) singleSchema(fd protoreflect.FieldDescriptor, input, nullable bool) map[string]any {
	switch fd.Kind() {
	case protoreflect.BoolKind:
		return map[string]any{"type": "boolean"}
	case protoreflect.StringKind:
		return map[string]any{"type": "string"}
	case protoreflect.BytesKind:
		return map[string]any{"type": "string", "contentEncoding": "base64"}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		return map[string]any{"type": "integer", "format": "int32"}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		return map[string]any{"type": "integer", "format": "int32", "minimum": 0}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind,
		protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if input {
			return map[string]any{"type": []any{"string", "integer"}, "format": "int64", "pattern": "^-?[0-9]+$"}
		}
		return map[string]any{"type": "string", "format": "int64", "pattern": "^-?[0-9]+$"}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		return map[string]any{"type": "number"}
	case protoreflect.EnumKind:
		return map[string]any{"$ref": b.enumRef(fd.Enum())}
	}
	md := fd.Message()
	var s map[string]any
	switch md.FullName() {
	case "google.protobuf.Timestamp":
		s = map[string]any{"type": "string", "format": "date-time"}
	case "google.protobuf.Duration":
		s = map[string]any{"type": "string", "pattern": `^-?([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`}
		if !input {
			s["pattern"] = `^-?[0-9]+(\.[0-9]+)?s$`
		}
	case "google.protobuf.FieldMask":
		return map[string]any{"type": "string", "description": "Comma-separated field names in snake_case, e.g. \"event_types,max_in_flight\"."}
	case "google.protobuf.Struct":
		s = map[string]any{"type": "object", "additionalProperties": true}
	case "google.protobuf.Value", "google.protobuf.ListValue":
		return map[string]any{}
	default:
		ref := map[string]any{"$ref": b.ref(md, input)}
		if nullable {
			return map[string]any{"anyOf": []any{ref, map[string]any{"type": "null"}}}
		}
		return ref
	}
	if nullable {
		s["type"] = []any{s["type"], "null"}
	}
	return s
}

// paramSchema is a path or query parameter's schema: its element's, as text.
func (b *builder) paramSchema(f *protogen.Field) map[string]any {
	switch {
	case f.Desc.IsMap():
		return map[string]any{"type": "object", "additionalProperties": b.singleSchema(f.Desc.MapValue(), true, false)}
	case f.Desc.IsList():
		return map[string]any{"type": "array", "items": b.singleSchema(f.Desc, true, false)}
	}
	s := b.singleSchema(f.Desc, true, false)
	if t, ok := s["type"].([]any); ok && len(t) > 0 {
		s["type"] = "string" // int64 in a path or query is text
	}
	return s
}

// summary: "CreateEndpoint" → "Create endpoint".
func summary(goName string) string {
	words := regexp.MustCompile(`[A-Z][a-z0-9]*`).FindAllString(goName, -1)
	for i := 1; i < len(words); i++ {
		words[i] = strings.ToLower(words[i])
	}
	return strings.Join(words, " ")
}

func lowerFirst(s string) string { return strings.ToLower(s[:1]) + s[1:] }

// comment turns a proto comment into a description: lines joined into
// paragraphs, indented blocks kept.
func comment(c protogen.Comments) string {
	lines := strings.Split(strings.TrimRight(string(c), "\n"), "\n")
	var paras []string
	var cur []string
	flush := func() {
		if len(cur) > 0 {
			paras = append(paras, strings.Join(cur, " "))
			cur = nil
		}
	}
	for _, l := range lines {
		l = strings.TrimPrefix(l, " ")
		switch {
		case strings.TrimSpace(l) == "":
			flush()
		case strings.HasPrefix(l, "  "):
			flush()
			paras = append(paras, "    "+strings.TrimSpace(l))
		default:
			cur = append(cur, strings.TrimSpace(l))
		}
	}
	flush()
	return strings.TrimSpace(strings.Join(paras, "\n\n"))
}

// The problem responses, by status.
var problemResponseNames = map[string]string{
	"400": "BadRequest", "401": "Unauthorized", "403": "Forbidden", "404": "NotFound",
	"409": "Conflict", "413": "ContentTooLarge", "415": "UnsupportedMediaType",
	"429": "TooManyRequests", "500": "InternalError", "503": "Unavailable",
}

// batchMethod takes a larger body than the other calls (-api-max-batch-bytes
// against -api-max-request-bytes): its 413 is batchTooLarge.
const (
	batchMethod   = "webhooks.v1.EventService.PublishBatch"
	batchTooLarge = "BatchContentTooLarge"
)

var problemResponseText = map[string]string{
	"400": "The request is invalid (INVALID_ARGUMENT, every bad field in field_violations), or the resource is not in a state that allows it (FAILED_PRECONDITION).",
	"401": "No valid bearer token (UNAUTHENTICATED); WWW-Authenticate says why.",
	"403": "The token's role may not make this call (PERMISSION_DENIED).",
	"404": "No such resource of this owner (NOT_FOUND): another owner's answers exactly like a missing one.",
	"409": "ALREADY_EXISTS: an id or request_id (Idempotency-Key) used before with other content.",
	"413": "The request body is larger than this call's limit, 64 KiB by default (-api-max-request-bytes): RESOURCE_EXHAUSTED, as over gRPC.",
	"415": "The request body is not application/json.",
	"429": "A limit was reached (RESOURCE_EXHAUSTED), e.g. the owner's maximum number of endpoints.",
	"500": "An internal error (INTERNAL); the server logged it.",
	"503": "The dispatcher cannot serve the call now (UNAVAILABLE), e.g. its database is away; retrying is safe.",
}

func problemResponses() map[string]any {
	out := map[string]any{}
	problem := func(text string) map[string]any {
		return map[string]any{
			"description": text,
			"content": map[string]any{"application/problem+json": map[string]any{
				"schema": map[string]any{"$ref": "#/components/schemas/Problem"},
			}},
		}
	}
	for code, name := range problemResponseNames {
		out[name] = problem(problemResponseText[code])
	}
	out[batchTooLarge] = problem("The request body is larger than PublishBatch's limit, 4 MiB by default (-api-max-batch-bytes): RESOURCE_EXHAUSTED, as over gRPC.")
	return out
}

func (b *builder) problemSchemas() {
	codes := []any{"CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND", "ALREADY_EXISTS",
		"PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE",
		"UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"}
	b.schemas["Problem"] = map[string]any{
		"type":        "object",
		"description": "An error, as RFC 9457 problem details (application/problem+json), with the gRPC status code's name and every bad field.",
		"required":    []any{"type", "title", "status", "detail", "code"},
		"properties": map[string]any{
			"type":   map[string]any{"type": "string", "description": `"about:blank": status and code say what happened.`},
			"title":  map[string]any{"type": "string", "description": "The HTTP status's reason phrase."},
			"status": map[string]any{"type": "integer", "description": "The HTTP status."},
			"detail": map[string]any{"type": "string", "description": "What went wrong, for people."},
			"code":   map[string]any{"type": "string", "enum": codes, "description": "The gRPC status code's name: what a gRPC caller of the same RPC gets."},
			"field_violations": map[string]any{
				"type":        "array",
				"items":       map[string]any{"$ref": "#/components/schemas/FieldViolation"},
				"description": "Every bad input: a JSON field path (\"event.data.op\", \"event_types[0]\"), a query parameter or a header.",
			},
		},
	}
	b.schemas["FieldViolation"] = map[string]any{
		"type":     "object",
		"required": []any{"field", "description"},
		"properties": map[string]any{
			"field":       map[string]any{"type": "string"},
			"description": map[string]any{"type": "string"},
		},
	}
}
