package event

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Markdown renders the default catalog, with each type's data schema and
// example, as the text of docs/events.md. `make generate` writes it; a test fails when
// the committed file differs, so the page cannot drift from the schemas.
func Markdown() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`# Event types

<!-- Generated from the default catalog, pkg/catalog/defaults and pkg/catalog/builtin, by ` + "`make generate`" + `; do not edit. -->

These are the types of the catalog the dispatcher uses when none is configured (` + "`-catalog`" + `, see
[operations](operations.md#adding-an-event-type)). Every type below may leave the instance (Exposure ` + "`Webhook`" + `). Each delivery is a thin event
(` + "`id`, `type`, `subject`, `occurred_at`, `data`" + `, see [spec.md](spec.md#wire-format)); this page says
what ` + "`data`" + ` holds for each type. The subject names the thing the event is about, so ` + "`data`" + `
carries only small facts about the change: ids, states, counts and times, never a document, a
message text, an email address or an IP address.

The rules are JSON Schemas (draft 2020-12), one per type in
` + "`pkg/catalog/defaults/<type>.json`" + ` (` + "`webhook.test`" + ` and the operational events are built in:
` + "`pkg/catalog/builtin`" + `), returned by ` + "`ListEventTypes`" + ` and printed by
` + "`dispatcher event-types --json`" + `. Publishing checks ` + "`data`" + ` against its type's schema, over gRPC
and from the outbox alike: a property not listed here, a value of the wrong type or a required
property missing is refused (` + "`InvalidArgument`" + ` naming the JSON path, such as
` + "`event.data.op: must be one of created, updated, published, unpublished, deleted`" + `; an outbox
row is set aside with the same reason). Properties are optional unless marked required.
Receivers should still ignore properties they do not know: new optional ones may be added.

`)
	types := WebhookTypes()
	for _, t := range types {
		fmt.Fprintf(&b, "- [`%s`](#%s)\n", t.Name, anchor(t.Name))
	}
	b.WriteString("\nAnd the dispatcher's own [operational events](#operational-events): ")
	for i, t := range OperationalTypes() {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "[`%s`](#%s)", t.Name, anchor(t.Name))
	}
	b.WriteString(".\n")
	for _, t := range types {
		if err := typeSection(&b, t); err != nil {
			return nil, err
		}
	}
	b.WriteString(`
## Operational events

The dispatcher emits these itself, one per transition of an endpoint's health, to the owner id
set by ` + "`-operational-events-owner`" + ` (see [operations](operations.md#operational-events)); they
are signed and delivered like any other event, to that owner's endpoints. Nobody can publish
them: ` + "`Publish`" + ` and the outbox refuse these types (` + "`InvalidArgument`" + ` naming ` + "`type`" + `). The
subject is ` + "`dispatcher://endpoints/<endpoint id>`" + `; the event id is derived from the endpoint, the
transition and ` + "`failing_since`" + `, so one transition is one event however often it is relayed.
`)
	for _, t := range OperationalTypes() {
		if err := typeSection(&b, t); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

// typeSection writes one type's heading, properties and example.
func typeSection(b *bytes.Buffer, t TypeInfo) error {
	props, required, err := schemaProperties(t.Schema)
	if err != nil {
		return fmt.Errorf("schema of %s: %w", t.Name, err)
	}
	fmt.Fprintf(b, "\n## `%s`\n\n%s\n\n", t.Name, t.Description)
	if len(props) == 0 {
		b.WriteString("`data` is an empty object.\n")
	} else {
		b.WriteString("| property | type | required | description |\n|---|---|---|---|\n")
		for _, p := range props {
			req := ""
			if required[p.name] {
				req = "yes"
			}
			fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", p.name, p.typeText(), req, escapeCell(p.Description))
		}
	}
	var example bytes.Buffer
	if err := json.Indent(&example, t.Example, "", "  "); err != nil {
		return fmt.Errorf("example of %s: %w", t.Name, err)
	}
	fmt.Fprintf(b, "\nExample `data`:\n\n```json\n%s\n```\n", example.String())
	return nil
}

// property is what the page shows of one schema property.
type property struct {
	name        string
	Type        string   `json:"type"`
	Format      string   `json:"format"`
	Enum        []string `json:"enum"`
	MaxLength   *int     `json:"maxLength"` //nolint:tagliatelle // a JSON Schema keyword
	Minimum     *int     `json:"minimum"`
	Description string   `json:"description"`
}

func (p property) typeText() string {
	var s string
	switch {
	case len(p.Enum) > 0:
		s = "one of " + "`" + strings.Join(p.Enum, "`, `") + "`"
	case p.Format == "date-time":
		s = "string (RFC 3339 date-time)"
	case p.Format == "uuid":
		s = "string (UUID)"
	case p.Type == "integer" && p.Minimum != nil && *p.Minimum == 0:
		s = "integer ≥ 0"
	case p.Type == "string" && p.MaxLength != nil:
		s = fmt.Sprintf("string (≤ %d chars)", *p.MaxLength)
	default:
		s = p.Type
	}
	return s
}

// schemaProperties reads a schema's properties in file order (the order a
// reader expects) and its required set.
func schemaProperties(schema json.RawMessage) ([]property, map[string]bool, error) {
	var top struct {
		Properties json.RawMessage `json:"properties"`
		Required   []string        `json:"required"`
	}
	if err := json.Unmarshal(schema, &top); err != nil {
		return nil, nil, err
	}
	required := make(map[string]bool, len(top.Required))
	for _, r := range top.Required {
		required[r] = true
	}
	if len(top.Properties) == 0 {
		return nil, required, nil
	}
	dec := json.NewDecoder(bytes.NewReader(top.Properties))
	if _, err := dec.Token(); err != nil { // {
		return nil, nil, err
	}
	var props []property
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, err
		}
		name, _ := tok.(string)
		var p property
		if err := dec.Decode(&p); err != nil {
			return nil, nil, fmt.Errorf("property %s: %w", name, err)
		}
		p.name = name
		props = append(props, p)
	}
	return props, required, nil
}

// anchor is the heading id GitHub gives "## `a.b_c`": lower case, dots and
// backticks dropped.
func anchor(name string) string {
	return strings.NewReplacer(".", "", "`", "").Replace(strings.ToLower(name))
}

func escapeCell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}
